package infer

/*
#include <infer/infer.h>
#include <stdlib.h>
*/
import "C"

import (
	"runtime"
	"unsafe"
)

// Pooling says how token vectors become one embedding (infer_pooling).
type Pooling int32

const (
	PoolingDefault Pooling = -1 // the model's own (its GGUF pooling_type; else mean for encoders, last for decoders)
	PoolingNone    Pooling = 0  // one vector per token
	PoolingMean    Pooling = 1
	PoolingCLS     Pooling = 2
	PoolingLast    Pooling = 3
	PoolingRank    Pooling = 4 // rerankers: the classifier head's score
)

// EmbedOptions are infer_embed_params. The zero value is NOT the default:
// use DefaultEmbedOptions.
type EmbedOptions struct {
	Pooling    Pooling
	Normalize  bool  // L2-normalize each vector
	Dimensions int32 // keep the first N values (Matryoshka); 0: all
	Truncate   bool  // cut inputs longer than the context instead of failing
	NThreads   int32 // 0: all cores
}

// DefaultEmbedOptions: the model's pooling, L2-normalized, all dimensions.
func DefaultEmbedOptions() EmbedOptions {
	return EmbedOptions{Pooling: PoolingDefault, Normalize: true}
}

func (o EmbedOptions) c() C.infer_embed_params {
	var p C.infer_embed_params
	C.infer_embed_params_init(&p)
	p.pooling = C.infer_pooling(o.Pooling)
	p.normalize = 0
	if o.Normalize {
		p.normalize = 2
	}
	p.dimensions = C.int32_t(o.Dimensions)
	p.truncate = 0
	if o.Truncate {
		p.truncate = 1
	}
	p.n_threads = C.int32_t(o.NThreads)
	return p
}

// cStrings copies strings into C memory (one block of pointers, one of
// lengths); free releases them.
func cStrings(s []string) (**C.char, *C.size_t, func()) {
	n := len(s)
	if n == 0 {
		n = 1
	}
	ptrs := (*[1 << 28]*C.char)(C.malloc(C.size_t(n) * C.size_t(unsafe.Sizeof((*C.char)(nil)))))[:n:n]
	lens := (*[1 << 28]C.size_t)(C.malloc(C.size_t(n) * C.size_t(unsafe.Sizeof(C.size_t(0)))))[:n:n]
	for i, t := range s {
		ptrs[i] = C.CString(t)
		lens[i] = C.size_t(len(t))
	}
	return &ptrs[0], &lens[0], func() {
		for i := range s {
			C.free(unsafe.Pointer(ptrs[i]))
		}
		C.free(unsafe.Pointer(&ptrs[0]))
		C.free(unsafe.Pointer(&lens[0]))
	}
}

// rows reads and frees a finished infer_embeddings handle.
func rows(op string, h *C.infer_embeddings) ([][]float32, error) {
	defer C.infer_embeddings_free(h)
	n := int(C.infer_embeddings_rows(h))
	dim := int(C.infer_embeddings_dim(h))
	flat := make([]float32, n*dim)
	var p *C.float
	if len(flat) > 0 {
		p = (*C.float)(unsafe.Pointer(&flat[0]))
	}
	if err := call(op, func() C.infer_status { return C.infer_embeddings_copy(h, p, C.size_t(len(flat)), nil) }); err != nil {
		return nil, err
	}
	out := make([][]float32, n)
	for i := range out {
		out[i] = flat[i*dim : (i+1)*dim : (i+1)*dim]
	}
	return out, nil
}

// Embed returns one L2-normalized vector per text, with the model's pooling
// (infer_embed).
func (m *Model) Embed(texts []string) ([][]float32, error) {
	return m.EmbedWith(texts, DefaultEmbedOptions())
}

// EmbedWith is Embed with options. With PoolingNone, one row per token of
// every text, in order.
func (m *Model) EmbedWith(texts []string, o EmbedOptions) ([][]float32, error) {
	h, done, err := m.use()
	if err != nil {
		return nil, err
	}
	defer done()
	defer runtime.KeepAlive(m)
	ptrs, lens, free := cStrings(texts)
	defer free()
	p := o.c()
	var out *C.infer_embeddings
	if err := call("infer_embed", func() C.infer_status {
		return C.infer_embed(h, ptrs, lens, C.int32_t(len(texts)), &p, &out)
	}); err != nil {
		return nil, err
	}
	return rows("infer_embeddings_copy", out)
}

// Rerank returns the relevance score of each document to query (a
// reranker's raw score, higher is more relevant), in order (infer_rerank).
// A model without a classifier head: StatusInvalidArgument.
func (m *Model) Rerank(query string, documents []string) ([]float32, error) {
	h, done, err := m.use()
	if err != nil {
		return nil, err
	}
	defer done()
	defer runtime.KeepAlive(m)
	ptrs, _, free := cStrings(documents)
	defer free()
	q := C.CString(query)
	defer C.free(unsafe.Pointer(q))
	p := DefaultEmbedOptions().c()
	var out *C.infer_embeddings
	if err := call("infer_rerank", func() C.infer_status {
		return C.infer_rerank(h, q, ptrs, C.int32_t(len(documents)), &p, &out)
	}); err != nil {
		return nil, err
	}
	r, err := rows("infer_embeddings_copy", out)
	if err != nil {
		return nil, err
	}
	s := make([]float32, len(r))
	for i, row := range r {
		if len(row) > 0 {
			s[i] = row[0]
		}
	}
	return s, nil
}
