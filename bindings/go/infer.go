// Package infer is the Go binding of libinfer (cgo over include/infer/infer.h).
//
//	model, err := infer.Load("stories260K.gguf")
//	defer model.Close()
//	engine, err := infer.NewEngine(model, nil)
//	defer engine.Close()
//	req, err := engine.Submit("Once upon a time", infer.GenerateParams{MaxTokens: 64})
//	defer req.Close()
//	for piece := range req.Stream(ctx) { fmt.Print(piece.Text) }
//
// Linking: set CGO_LDFLAGS="-L$DIR -Wl,-rpath,$DIR" where $DIR holds
// libinfer.so (a build tree or PREFIX/lib; for an installed libinfer,
// CGO_LDFLAGS="$(pkg-config --libs infer) -Wl,-rpath,$(pkg-config --variable=libdir infer)"),
// or install libinfer where the linker and the loader look (/usr/local: nothing
// to set); the header comes from the source tree's include/.
//
// From another module: require libinfer/infer v0.0.0 and add
// replace libinfer/infer => /path/to/libinfer/bindings/go to its go.mod.
//
// Thread safety follows infer.h. A Model may be used from many goroutines.
// An Engine runs libinfer's background thread, so Submit, Cancel, Stats and
// reading requests work from any goroutine. No Go code runs on the engine's
// thread: streaming polls infer_request_next_text with a timeout, and a
// cancelled context.Context calls infer_request_cancel. Close frees handles;
// finalizers free what was forgotten (do not rely on them).
package infer

/*
#cgo CFLAGS: -I${SRCDIR}/../../include
#cgo LDFLAGS: -linfer
#include <infer/infer.h>
#include <stdlib.h>
*/
import "C"

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"unsafe"
)

// VersionNumber is the infer.h version these bindings were written for.
const VersionNumber = int(C.INFER_VERSION_NUMBER)

// Status is an infer_status code.
type Status int

const (
	StatusOK              Status = C.INFER_OK
	StatusIO              Status = C.INFER_ERR_IO
	StatusFormat          Status = C.INFER_ERR_FORMAT
	StatusUnsupported     Status = C.INFER_ERR_UNSUPPORTED
	StatusOutOfMemory     Status = C.INFER_ERR_OUT_OF_MEMORY
	StatusInvalidArgument Status = C.INFER_ERR_INVALID_ARGUMENT
	StatusCancelled       Status = C.INFER_ERR_CANCELLED
	StatusBackend         Status = C.INFER_ERR_BACKEND
	StatusInternal        Status = C.INFER_ERR_INTERNAL
	StatusBufferTooSmall  Status = C.INFER_ERR_BUFFER_TOO_SMALL
	StatusNotFound        Status = C.INFER_ERR_NOT_FOUND
	StatusBusy            Status = C.INFER_ERR_BUSY
)

func (s Status) String() string {
	return C.GoString(C.infer_status_string(C.infer_status(s)))
}

// Error is a failed libinfer call: its status and infer_last_error().
type Error struct {
	Op      string // the C function
	Status  Status
	Message string
}

func (e *Error) Error() string {
	return fmt.Sprintf("%s: %s: %s", e.Op, e.Status, e.Message)
}

// Is makes errors.Is(err, infer.ErrIO) (etc.) match by status.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Op == "" && t.Message == "" && t.Status == e.Status
}

// Sentinels for errors.Is.
var (
	ErrIO              = &Error{Status: StatusIO}
	ErrFormat          = &Error{Status: StatusFormat}
	ErrUnsupported     = &Error{Status: StatusUnsupported}
	ErrOutOfMemory     = &Error{Status: StatusOutOfMemory}
	ErrInvalidArgument = &Error{Status: StatusInvalidArgument}
	ErrCancelled       = &Error{Status: StatusCancelled}
	ErrNotFound        = &Error{Status: StatusNotFound}
	ErrBusy            = &Error{Status: StatusBusy}
	// ErrClosed is returned for calls on a closed handle.
	ErrClosed = errors.New("infer: handle is closed")
)

// check must run on the goroutine's locked OS thread (infer_last_error is
// per thread): callers use call() which locks.
func check(op string, st C.infer_status) error {
	if st == C.INFER_OK {
		return nil
	}
	return &Error{Op: op, Status: Status(st), Message: C.GoString(C.infer_last_error())}
}

// call runs f on a locked OS thread so infer_last_error() belongs to it.
func call(op string, f func() C.infer_status) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	return check(op, f())
}

// Version is infer_version() of the linked library.
func Version() string { return C.GoString(C.infer_version()) }

// LinkedVersionNumber is infer_version_number() of the linked library.
func LinkedVersionNumber() int { return int(C.infer_version_number()) }

// CheckVersion fails when the linked library has another major version or is
// older than these bindings. Load calls it.
func CheckVersion() error {
	v := LinkedVersionNumber()
	if v/10000 != VersionNumber/10000 || v < VersionNumber {
		return &Error{Op: "infer_version_number", Status: StatusUnsupported,
			Message: fmt.Sprintf("libinfer %s is linked; these bindings need %d.x >= %d", Version(),
				VersionNumber/10000, VersionNumber)}
	}
	return nil
}

// ChatTemplates lists the built-in chat templates.
func ChatTemplates() []string {
	n := int(C.infer_chat_template_count())
	out := make([]string, n)
	for i := range out {
		out[i] = C.GoString(C.infer_chat_template_name(C.int32_t(i)))
	}
	return out
}

// sizedString runs the grow-and-retry convention of string outputs.
func sizedString(op string, f func(buf *C.char, size C.size_t, needed *C.size_t) C.infer_status) (string, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	size := C.size_t(256)
	for {
		buf := (*C.char)(C.malloc(size))
		var needed C.size_t
		st := f(buf, size, &needed)
		if st == C.INFER_ERR_BUFFER_TOO_SMALL && needed > size {
			C.free(unsafe.Pointer(buf))
			size = needed
			continue
		}
		if err := check(op, st); err != nil {
			C.free(unsafe.Pointer(buf))
			return "", err
		}
		s := C.GoString(buf)
		C.free(unsafe.Pointer(buf))
		return s, nil
	}
}

// ---- models ------------------------------------------------------------------

// Model is a loaded GGUF model, safe for concurrent use.
type Model struct {
	mu      sync.RWMutex // write: Close and engine counts; read: a call in flight
	ptr     *C.infer_model
	engines int
	closing bool
}

// ModelOptions configures Load (nil: defaults).
type ModelOptions struct {
	NoMmap    bool
	VocabOnly bool
	// TensorParallel N > 1 (libinfer 1.6): this process is one of the N ranks
	// of an MPI job (mpirun -np N) and loads 1/N of the weights; rank 0 makes
	// engines, ranks 1..N-1 call Follow. (The host's own MPI communicator,
	// infer_model_params.mpi_comm, is not offered here.)
	TensorParallel int
}

// Load loads a GGUF model.
func Load(path string) (*Model, error) { return LoadWith(path, nil) }

// LoadWith loads a GGUF model with options.
func LoadWith(path string, opts *ModelOptions) (*Model, error) {
	if err := CheckVersion(); err != nil {
		return nil, err
	}
	var p C.infer_model_params
	C.infer_model_params_init(&p)
	if opts != nil {
		if opts.NoMmap {
			p.use_mmap = 0
		}
		if opts.VocabOnly {
			p.vocab_only = 1
		}
		if opts.TensorParallel != 0 {
			v, err := cInt32("infer_model_load", "TensorParallel", opts.TensorParallel)
			if err != nil {
				return nil, err
			}
			p.tensor_parallel = v
		}
	}
	cpath, err := cString("infer_model_load", "path", path)
	if err != nil {
		return nil, err
	}
	defer C.free(unsafe.Pointer(cpath))
	var out *C.infer_model
	if err := call("infer_model_load", func() C.infer_status { return C.infer_model_load(cpath, &p, &out) }); err != nil {
		return nil, err
	}
	m := &Model{ptr: out}
	runtime.SetFinalizer(m, func(m *Model) { m.Close() })
	return m, nil
}

// Close frees the model once every Engine built on it, and every Request
// made by those engines, is closed (a request refers to the model's
// vocabulary until it is freed).
func (m *Model) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.closing = true
	m.freeIfUnused()
	return nil
}

func (m *Model) freeIfUnused() {
	if m.closing && m.engines == 0 && m.ptr != nil {
		C.infer_model_free(m.ptr)
		m.ptr = nil
		runtime.SetFinalizer(m, nil)
	}
}

func (m *Model) acquire() (*C.infer_model, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.ptr == nil || m.closing {
		return nil, ErrClosed
	}
	m.engines++
	return m.ptr, nil
}

// hold counts one more user of a model that an open engine already uses
// (a request), whether or not Close was called since.
func (m *Model) hold() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.engines++
}

func (m *Model) release() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.engines--
	m.freeIfUnused()
}

// use returns the handle read-locked (Close waits for the call to end);
// the caller runs done() afterwards.
func (m *Model) use() (*C.infer_model, func(), error) {
	m.mu.RLock()
	if m.ptr == nil || m.closing {
		m.mu.RUnlock()
		return nil, nil, ErrClosed
	}
	return m.ptr, m.mu.RUnlock, nil
}

// ModelInfo is infer_model_info.
type ModelInfo struct {
	Architecture, Name, Tokenizer                    string
	NVocab, NCtxTrain, NEmbd, NLayer, NHead, NHeadKV int
	NParams, NBytes                                  uint64
	NTensors, BOSToken, EOSToken                     int
}

// Info describes the model.
func (m *Model) Info() (ModelInfo, error) {
	h, done, err := m.use()
	if err != nil {
		return ModelInfo{}, err
	}
	defer done()
	var i C.infer_model_info
	C.infer_model_info_init(&i)
	if err := call("infer_model_get_info", func() C.infer_status { return C.infer_model_get_info(h, &i) }); err != nil {
		return ModelInfo{}, err
	}
	runtime.KeepAlive(m)
	return ModelInfo{C.GoString(i.architecture), C.GoString(i.name), C.GoString(i.tokenizer),
		int(i.n_vocab), int(i.n_ctx_train), int(i.n_embd), int(i.n_layer), int(i.n_head), int(i.n_head_kv),
		uint64(i.n_params), uint64(i.n_bytes), int(i.n_tensors), int(i.bos_token), int(i.eos_token)}, nil
}

// Meta returns a metadata value as text; errors.Is(err, ErrNotFound) when absent.
func (m *Model) Meta(key string) (string, error) {
	h, done, err := m.use()
	if err != nil {
		return "", err
	}
	defer done()
	ck, err := cString("infer_model_meta", "key", key)
	if err != nil {
		return "", err
	}
	defer C.free(unsafe.Pointer(ck))
	defer runtime.KeepAlive(m)
	return sizedString("infer_model_meta", func(b *C.char, n C.size_t, nd *C.size_t) C.infer_status {
		return C.infer_model_meta(h, ck, b, n, nd)
	})
}

// BOS says whether the BOS token is added to a text prompt.
type BOS int

const (
	BOSDefault BOS = iota // as the vocabulary says
	BOSNo
	BOSYes
)

func (b BOS) c() C.int32_t {
	switch b {
	case BOSNo:
		return 0
	case BOSYes:
		return 1
	}
	return -1
}

// Tokenize returns the token ids of text.
func (m *Model) Tokenize(text string, bos BOS, special bool) ([]int32, error) {
	h, done, err := m.use()
	if err != nil {
		return nil, err
	}
	defer done()
	defer runtime.KeepAlive(m)
	ct := C.CString(text)
	defer C.free(unsafe.Pointer(ct))
	capacity := len(text) + 8
	for {
		buf := (*C.int32_t)(C.malloc(C.size_t(capacity * 4)))
		var n C.size_t
		sp := C.int32_t(0)
		if special {
			sp = 1
		}
		runtime.LockOSThread()
		st := C.infer_tokenize(h, ct, C.size_t(len(text)), bos.c(), sp, buf, C.size_t(capacity), &n)
		if st == C.INFER_ERR_BUFFER_TOO_SMALL && int(n) > capacity {
			runtime.UnlockOSThread()
			C.free(unsafe.Pointer(buf))
			capacity = int(n)
			continue
		}
		err := check("infer_tokenize", st)
		runtime.UnlockOSThread()
		if err != nil {
			C.free(unsafe.Pointer(buf))
			return nil, err
		}
		out := make([]int32, int(n))
		copy(out, unsafe.Slice((*int32)(unsafe.Pointer(buf)), int(n)))
		C.free(unsafe.Pointer(buf))
		return out, nil
	}
}

// Detokenize returns the text of token ids.
func (m *Model) Detokenize(tokens []int32) (string, error) {
	h, done, err := m.use()
	if err != nil {
		return "", err
	}
	defer done()
	defer runtime.KeepAlive(m)
	ct := (*C.int32_t)(C.malloc(C.size_t(4 * (len(tokens) + 1))))
	defer C.free(unsafe.Pointer(ct))
	copy(unsafe.Slice((*int32)(unsafe.Pointer(ct)), len(tokens)), tokens)
	return sizedString("infer_detokenize", func(b *C.char, n C.size_t, nd *C.size_t) C.infer_status {
		return C.infer_detokenize(h, ct, C.size_t(len(tokens)), 0, b, n, nd)
	})
}

// TokenPiece returns the bytes one token stands for.
func (m *Model) TokenPiece(token int32) ([]byte, error) {
	h, done, err := m.use()
	if err != nil {
		return nil, err
	}
	defer done()
	defer runtime.KeepAlive(m)
	buf := (*C.char)(C.malloc(256))
	defer C.free(unsafe.Pointer(buf))
	var n C.size_t
	if err := call("infer_token_piece", func() C.infer_status { return C.infer_token_piece(h, C.int32_t(token), buf, 256, &n) }); err != nil {
		return nil, err
	}
	return C.GoBytes(unsafe.Pointer(buf), C.int(n)), nil
}

// ChatMessage is one turn of a conversation.
type ChatMessage struct{ Role, Content string }

// ApplyChatTemplate renders messages with a built-in template ("" = the model's own).
func (m *Model) ApplyChatTemplate(messages []ChatMessage, template string, addGenerationPrompt bool) (string, error) {
	h, done, err := m.use()
	if err != nil {
		return "", err
	}
	defer done()
	defer runtime.KeepAlive(m)
	n := len(messages)
	arr := (*C.infer_chat_message)(C.malloc(C.size_t(n+1) * C.size_t(unsafe.Sizeof(C.infer_chat_message{}))))
	defer C.free(unsafe.Pointer(arr))
	msgs := unsafe.Slice(arr, n+1)
	const op = "infer_chat_apply_template"
	for i, msg := range messages {
		role, err := cString(op, fmt.Sprintf("messages[%d].Role", i), msg.Role)
		if err != nil {
			return "", err
		}
		defer C.free(unsafe.Pointer(role))
		content, err := cString(op, fmt.Sprintf("messages[%d].Content", i), msg.Content)
		if err != nil {
			return "", err
		}
		defer C.free(unsafe.Pointer(content))
		msgs[i].role, msgs[i].content = role, content
	}
	var ct *C.char
	if template != "" {
		if ct, err = cString(op, "template", template); err != nil {
			return "", err
		}
		defer C.free(unsafe.Pointer(ct))
	}
	agp := C.int32_t(0)
	if addGenerationPrompt {
		agp = 1
	}
	return sizedString("infer_chat_apply_template", func(b *C.char, sz C.size_t, nd *C.size_t) C.infer_status {
		return C.infer_chat_apply_template(h, ct, arr, C.size_t(n), agp, b, sz, nd)
	})
}

// Generate is infer_generate: a one-call generation with a private engine
// (MaxTokens and the sampling fields of p are used). Not cancellable; use
// Engine.Generate for a context.
func (m *Model) Generate(prompt string, p GenerateParams) (string, error) {
	h, done, err := m.use()
	if err != nil {
		return "", err
	}
	defer done()
	defer runtime.KeepAlive(m)
	const op = "infer_generate"
	sp, err := p.sampling(op)
	if err != nil {
		return "", err
	}
	maxTokens, err := cInt32(op, "MaxTokens", p.maxTokens())
	if err != nil {
		return "", err
	}
	cp, err := cString(op, "prompt", prompt)
	if err != nil {
		return "", err
	}
	defer C.free(unsafe.Pointer(cp))
	var out *C.char
	if err := call(op, func() C.infer_status {
		return C.infer_generate(h, cp, &sp, maxTokens, &out)
	}); err != nil {
		return "", err
	}
	s := C.GoString(out)
	C.infer_free(unsafe.Pointer(out))
	return s, nil
}

// ---- engines -----------------------------------------------------------------

// EngineParams configures NewEngine; zero fields keep the library's defaults.
type EngineParams struct {
	NThreads       int
	KVBlocks       int
	KVBudgetBytes  uint64
	MaxSeqs        int
	MaxBatchTokens int
	NCtx           int
	NoPrefixCache  bool
	// TensorParallel (1.6): 0 (the model's group) or the model's TensorParallel.
	TensorParallel int
	// TPTimeoutMs (1.6): a tensor-parallel collective waiting longer fails (0: 60000).
	TPTimeoutMs int
}

// Engine is a KV cache and scheduler stepped by libinfer's background thread.
type Engine struct {
	mu    sync.RWMutex
	ptr   *C.infer_engine
	model *Model
}

// engineParams converts p (nil: defaults) for the C call op.
func engineParams(op string, p *EngineParams) (C.infer_engine_params, error) {
	var ep C.infer_engine_params
	C.infer_engine_params_init(&ep)
	if p != nil {
		for _, f := range []struct {
			name string
			v    int
			dst  *C.int32_t
		}{{"NThreads", p.NThreads, &ep.n_threads}, {"KVBlocks", p.KVBlocks, &ep.kv_blocks},
			{"MaxSeqs", p.MaxSeqs, &ep.max_seqs}, {"MaxBatchTokens", p.MaxBatchTokens, &ep.max_batch_tokens},
			{"NCtx", p.NCtx, &ep.n_ctx}, {"TensorParallel", p.TensorParallel, &ep.tensor_parallel},
			{"TPTimeoutMs", p.TPTimeoutMs, &ep.tp_timeout_ms}} {
			if f.v == 0 {
				continue
			}
			v, err := cInt32(op, f.name, f.v)
			if err != nil {
				return ep, err
			}
			*f.dst = v
		}
		if p.KVBudgetBytes != 0 {
			ep.kv_budget_bytes = C.uint64_t(p.KVBudgetBytes)
		}
		if p.NoPrefixCache {
			ep.prefix_caching = 0
		}
	}
	return ep, nil
}

// TPRank is this process's rank in the model's tensor-parallel group (0 for a
// whole model).
func (m *Model) TPRank() (int, error) {
	mh, err := m.acquire()
	if err != nil {
		return 0, err
	}
	defer m.release()
	return int(C.infer_model_tp_rank(mh)), nil
}

// TPSize is the model's tensor-parallel group size (1 for a whole model).
func (m *Model) TPSize() (int, error) {
	mh, err := m.acquire()
	if err != nil {
		return 0, err
	}
	defer m.release()
	return int(C.infer_model_tp_size(mh)), nil
}

// Follow runs, on ranks 1..N-1 of a tensor-parallel model, rank 0's engine
// passes on this rank's weights until rank 0 closes its engine (it blocks).
// p must be rank 0's engine parameters. An error on rank 0 or for a whole
// model.
func (m *Model) Follow(p *EngineParams) error {
	ep, err := engineParams("infer_engine_follow", p)
	if err != nil {
		return err
	}
	mh, err := m.acquire()
	if err != nil {
		return err
	}
	defer m.release()
	return call("infer_engine_follow", func() C.infer_status { return C.infer_engine_follow(mh, &ep) })
}

// NewEngine creates an engine on m and starts its thread (p may be nil).
func NewEngine(m *Model, p *EngineParams) (*Engine, error) {
	ep, err := engineParams("infer_engine_create", p)
	if err != nil {
		return nil, err
	}
	mh, err := m.acquire()
	if err != nil {
		return nil, err
	}
	var out *C.infer_engine
	if err := call("infer_engine_create", func() C.infer_status { return C.infer_engine_create(mh, &ep, &out) }); err != nil {
		m.release()
		return nil, err
	}
	if err := call("infer_engine_start", func() C.infer_status { return C.infer_engine_start(out) }); err != nil {
		C.infer_engine_free(out)
		m.release()
		return nil, err
	}
	e := &Engine{ptr: out, model: m}
	runtime.SetFinalizer(e, func(e *Engine) { e.Close() })
	return e, nil
}

// Close stops the thread (cancelling what runs) and frees the engine.
// Requests stay readable until closed.
func (e *Engine) Close() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.ptr != nil {
		C.infer_engine_free(e.ptr)
		e.ptr = nil
		e.model.release()
		runtime.SetFinalizer(e, nil)
	}
	return nil
}

// GenerateParams are the sampling and request options. Zero values keep the
// defaults: MaxTokens 64 (a negative value is passed on, and refused), the
// library's sampling defaults. Greedy asks for temperature 0, TopK < 0 and
// MinP < 0 turn those filters off.
type GenerateParams struct {
	MaxTokens     int
	Greedy        bool // temperature 0
	Temperature   float32
	TopK          int
	TopP          float32
	MinP          float32
	RepeatPenalty float32
	Seed          uint64
	Stop          []string
	IgnoreEOS     bool
	AddBOS        BOS
	ParseSpecial  bool
	Priority      int
	// LogitBias maps token ids to what is added to their logits
	// (math.Inf(-1) bans a token).
	LogitBias map[int32]float32
}

func (p GenerateParams) maxTokens() int {
	if p.MaxTokens == 0 {
		return 64
	}
	return p.MaxTokens
}

func (p GenerateParams) sampling(op string) (C.infer_sampling_params, error) {
	var sp C.infer_sampling_params
	C.infer_sampling_params_init(&sp)
	if p.Temperature != 0 {
		sp.temperature = C.float(p.Temperature)
	}
	if p.Greedy {
		sp.temperature = 0
	}
	if p.TopK != 0 {
		v, err := cInt32(op, "TopK", p.TopK)
		if err != nil {
			return sp, err
		}
		sp.top_k = v
	}
	if p.TopP != 0 {
		sp.top_p = C.float(p.TopP)
	}
	if p.MinP < 0 {
		sp.min_p = 0 // off
	} else if p.MinP != 0 {
		sp.min_p = C.float(p.MinP)
	}
	if p.RepeatPenalty != 0 {
		sp.repeat_penalty = C.float(p.RepeatPenalty)
	}
	sp.seed = C.uint64_t(p.Seed)
	return sp, nil
}

// cParams is everything a request's parameters point to, in C memory.
type cParams struct {
	rp     *C.infer_request_params
	allocs []unsafe.Pointer
}

func (c *cParams) alloc(n int) unsafe.Pointer {
	p := C.calloc(1, C.size_t(n))
	c.allocs = append(c.allocs, p)
	return p
}

func (c *cParams) free() {
	for _, p := range c.allocs {
		C.free(p)
	}
	c.allocs = nil
}

func newCParams(prompt string, tokens []int32, p GenerateParams) (*cParams, error) {
	const op = "infer_submit"
	sampling, err := p.sampling(op)
	if err != nil {
		return nil, err
	}
	maxTokens, err := cInt32(op, "MaxTokens", p.maxTokens())
	if err != nil {
		return nil, err
	}
	priority, err := cInt32(op, "Priority", p.Priority)
	if err != nil {
		return nil, err
	}
	for i, s := range p.Stop {
		if j := strings.IndexByte(s, 0); j >= 0 {
			return nil, argError(op, "Stop[%d] contains a NUL byte at offset %d (a C string would end there)", i, j)
		}
	}
	c := &cParams{}
	c.rp = (*C.infer_request_params)(c.alloc(int(unsafe.Sizeof(C.infer_request_params{}))))
	C.infer_request_params_init(c.rp)
	sp := (*C.infer_sampling_params)(c.alloc(int(unsafe.Sizeof(C.infer_sampling_params{}))))
	*sp = sampling
	if len(p.LogitBias) > 0 {
		n := len(p.LogitBias)
		toks := unsafe.Slice((*C.int32_t)(c.alloc(4*n)), n)
		vals := unsafe.Slice((*C.float)(c.alloc(4*n)), n)
		i := 0
		for t, v := range p.LogitBias {
			toks[i], vals[i] = C.int32_t(t), C.float(v)
			i++
		}
		sp.logit_bias_tokens = &toks[0]
		sp.logit_bias_values = &vals[0]
		sp.n_logit_bias = C.size_t(n)
	}
	c.rp.sampling = sp
	if tokens != nil {
		ts := unsafe.Slice((*C.int32_t)(c.alloc(4*len(tokens)+4)), len(tokens))
		for i, t := range tokens {
			ts[i] = C.int32_t(t)
		}
		if len(tokens) > 0 {
			c.rp.prompt_tokens = &ts[0]
		}
		c.rp.n_prompt_tokens = C.size_t(len(tokens))
	} else {
		c.rp.prompt = cBytes(c.alloc, prompt) // NUL bytes allowed: prompt_len says where it ends
		c.rp.prompt_len = C.size_t(len(prompt))
	}
	c.rp.max_tokens = maxTokens
	if len(p.Stop) > 0 {
		arr := unsafe.Slice((**C.char)(c.alloc(int(unsafe.Sizeof((*C.char)(nil)))*len(p.Stop))), len(p.Stop))
		for i, s := range p.Stop {
			arr[i] = cBytes(c.alloc, s) // checked above: no NUL byte
		}
		c.rp.stop = &arr[0]
		c.rp.n_stop = C.size_t(len(p.Stop))
	}
	if p.IgnoreEOS {
		c.rp.ignore_eos = 1
	}
	c.rp.add_bos = p.AddBOS.c()
	if p.ParseSpecial {
		c.rp.parse_special = 1
	}
	c.rp.priority = priority
	return c, nil
}

// Submit queues a request and returns at once.
func (e *Engine) Submit(prompt string, p GenerateParams) (*Request, error) {
	c, err := newCParams(prompt, nil, p)
	if err != nil {
		return nil, err
	}
	return e.submit(c)
}

// SubmitTokens queues a request whose prompt is token ids.
func (e *Engine) SubmitTokens(tokens []int32, p GenerateParams) (*Request, error) {
	if tokens == nil {
		tokens = []int32{}
	}
	c, err := newCParams("", tokens, p)
	if err != nil {
		return nil, err
	}
	return e.submit(c)
}

func (e *Engine) submit(c *cParams) (*Request, error) {
	e.mu.RLock()
	defer e.mu.RUnlock()
	if e.ptr == nil {
		c.free()
		return nil, ErrClosed
	}
	var out *C.infer_request
	if err := call("infer_submit", func() C.infer_status { return C.infer_submit(e.ptr, c.rp, &out) }); err != nil {
		c.free()
		return nil, err
	}
	e.model.hold() // released by r.Close: the request refers to the model
	r := &Request{ptr: out, params: c, model: e.model}
	r.buf = (*C.char)(C.malloc(C.size_t(bufSize)))
	runtime.SetFinalizer(r, func(r *Request) { r.Close() })
	return r, nil
}

// Generate returns the text generated after prompt; a cancelled ctx cancels it.
func (e *Engine) Generate(ctx context.Context, prompt string, p GenerateParams) (string, error) {
	r, err := e.Submit(prompt, p)
	if err != nil {
		return "", err
	}
	defer r.Close()
	return r.Wait(ctx)
}

// GenerateBatch generates for many prompts at once (batched by the engine).
func (e *Engine) GenerateBatch(ctx context.Context, prompts []string, p GenerateParams) ([]string, error) {
	reqs := make([]*Request, 0, len(prompts))
	defer func() {
		for _, r := range reqs {
			r.Close()
		}
	}()
	for _, pr := range prompts {
		r, err := e.Submit(pr, p)
		if err != nil {
			return nil, err
		}
		reqs = append(reqs, r)
	}
	out := make([]string, len(reqs))
	for i, r := range reqs {
		s, err := r.Wait(ctx)
		if err != nil {
			return nil, err
		}
		out[i] = s
	}
	return out, nil
}

// WaitIdle blocks until the engine has no request left.
func (e *Engine) WaitIdle() error {
	e.mu.RLock()
	defer e.mu.RUnlock()
	if e.ptr == nil {
		return ErrClosed
	}
	return call("infer_engine_wait_idle", func() C.infer_status { return C.infer_engine_wait_idle(e.ptr) })
}

// EngineStats are the main infer_engine_stats counters.
type EngineStats struct {
	NRunning, NWaiting, KVBlocksTotal, KVBlocksUsed    int
	NSteps, NPromptTokens, NGeneratedTokens, NFinished uint64
	UptimeS, GeneratedTokensPerS                       float64
	// Since 1.6: this rank's tensor-parallel collectives (0 for a whole model).
	TPCommCalls, TPCommBytes uint64
	TPCommSeconds            float64
}

// Stats reads the engine's counters.
func (e *Engine) Stats() (EngineStats, error) {
	e.mu.RLock()
	defer e.mu.RUnlock()
	if e.ptr == nil {
		return EngineStats{}, ErrClosed
	}
	var s C.infer_engine_stats
	C.infer_engine_stats_init(&s)
	if err := call("infer_engine_get_stats", func() C.infer_status { return C.infer_engine_get_stats(e.ptr, &s) }); err != nil {
		return EngineStats{}, err
	}
	return EngineStats{int(s.n_running), int(s.n_waiting), int(s.kv_blocks_total), int(s.kv_blocks_used),
		uint64(s.n_steps), uint64(s.n_prompt_tokens), uint64(s.n_generated_tokens), uint64(s.n_finished),
		float64(s.uptime_s), float64(s.generated_tokens_per_s),
		uint64(s.tp_comm_calls), uint64(s.tp_comm_bytes), float64(s.tp_comm_seconds)}, nil
}
