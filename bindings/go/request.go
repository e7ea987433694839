package infer

/*
#include <infer/infer.h>
#include <stdlib.h>
*/
import "C"

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"
)

// ---- requests ----------------------------------------------------------------

const bufSize = 4096

// pollInterval is how often a waiting call looks at its context.
const pollInterval = 50 * time.Millisecond

// FinishReason is infer_finish_reason.
type FinishReason int

const (
	FinishNone      FinishReason = C.INFER_FINISH_NONE
	FinishStop      FinishReason = C.INFER_FINISH_STOP
	FinishLength    FinishReason = C.INFER_FINISH_LENGTH
	FinishCancelled FinishReason = C.INFER_FINISH_CANCELLED
	FinishError     FinishReason = C.INFER_FINISH_ERROR
)

// RequestStats is infer_request_stats.
type RequestStats struct {
	FinishReason                                   FinishReason
	Status                                         Status
	NPromptTokens, NCachedTokens, NGeneratedTokens int
	QueueMs, TTFTMs, TPOTMs, TotalMs               float64
	PrefillTokensPerS, DecodeTokensPerS            float64
	NPreemptions                                   int
}

// Request is one generation. Close it when done (it cancels an unfinished one).
type Request struct {
	mu     sync.RWMutex
	ptr    *C.infer_request
	params *cParams
	buf    *C.char // next_text's buffer; used by one reader at a time
	readMu sync.Mutex
	model  *Model
	// cancelled: Cancel (or a done ctx) was called on this handle, so a
	// CANCELLED finish is the caller's own and not an engine closed under it.
	cancelled atomic.Bool
	piece     string
	err       error
	done      bool
}

// Close frees the request (cancelling it if unfinished).
func (r *Request) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ptr != nil {
		C.infer_request_free(r.ptr)
		r.ptr = nil
		r.params.free()
		C.free(unsafe.Pointer(r.buf))
		r.model.release()
		runtime.SetFinalizer(r, nil)
	}
	return nil
}

// Cancel asks the request to stop; safe from any goroutine.
func (r *Request) Cancel() {
	r.cancelled.Store(true)
	r.mu.RLock()
	defer r.mu.RUnlock()
	if r.ptr != nil {
		C.infer_request_cancel(r.ptr)
	}
}

// Stats reads the request's statistics.
func (r *Request) Stats() (RequestStats, error) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if r.ptr == nil {
		return RequestStats{}, ErrClosed
	}
	var s C.infer_request_stats
	C.infer_request_stats_init(&s)
	if err := call("infer_request_get_stats", func() C.infer_status { return C.infer_request_get_stats(r.ptr, &s) }); err != nil {
		return RequestStats{}, err
	}
	return RequestStats{FinishReason(s.finish_reason), Status(s.status), int(s.n_prompt_tokens),
		int(s.n_cached_tokens), int(s.n_generated_tokens), float64(s.queue_ms), float64(s.ttft_ms),
		float64(s.tpot_ms), float64(s.total_ms), float64(s.prefill_tokens_per_s), float64(s.decode_tokens_per_s),
		int(s.n_preemptions)}, nil
}

// Text is the text generated so far.
func (r *Request) Text() (string, error) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if r.ptr == nil {
		return "", ErrClosed
	}
	return sizedString("infer_request_text", func(b *C.char, n C.size_t, nd *C.size_t) C.infer_status {
		return C.infer_request_text(r.ptr, b, n, nd)
	})
}

// NextText waits up to timeout (< 0: no limit) for new text: (text, finished).
// The text never ends inside a UTF-8 sequence; "" on a timeout.
func (r *Request) NextText(timeout time.Duration) (string, bool, error) {
	r.readMu.Lock()
	defer r.readMu.Unlock()
	r.mu.RLock()
	defer r.mu.RUnlock()
	if r.ptr == nil {
		return "", true, ErrClosed
	}
	ms := timeoutMs(timeout)
	var n C.size_t
	var fin C.int32_t
	if err := call("infer_request_next_text", func() C.infer_status {
		return C.infer_request_next_text(r.ptr, ms, r.buf, bufSize, &n, &fin)
	}); err != nil {
		return "", true, err
	}
	return C.GoStringN(r.buf, C.int(n)), fin != 0, nil
}

// failure is the request's error when it finished with INFER_FINISH_ERROR.
func (r *Request) failure() error {
	st, err := r.Stats()
	if err != nil {
		return err
	}
	if st.FinishReason == FinishError {
		r.mu.RLock()
		msg := C.GoString(C.infer_request_error(r.ptr))
		r.mu.RUnlock()
		return &Error{Op: "request", Status: st.Status, Message: msg}
	}
	if st.FinishReason == FinishCancelled && !r.cancelled.Load() {
		// Not this handle's Cancel: the engine was closed (or stopped) under it.
		return &Error{Op: "request", Status: StatusCancelled, Message: fmt.Sprintf(
			"the request was cancelled before it finished: its engine was closed or stopped; "+
				"%d tokens were generated", st.NGeneratedTokens)}
	}
	return nil
}

// Next waits for the next text piece, like bufio.Scanner: it returns false
// at the end (then Err says why, nil for a normal finish). A done ctx
// cancels the request and Err returns ctx.Err().
func (r *Request) Next(ctx context.Context) bool {
	for !r.done {
		if ctx.Err() != nil {
			r.Cancel()
			r.err, r.done = ctx.Err(), true
			return false
		}
		piece, finished, err := r.NextText(pollInterval)
		if err != nil {
			r.err, r.done = err, true
			return false
		}
		if finished {
			r.done = true
			r.err = r.failure()
		}
		if piece != "" {
			r.piece = piece
			return true
		}
	}
	return false
}

// Piece is the text Next found.
func (r *Request) Piece() string { return r.piece }

// Err is why Next returned false (nil: the request finished normally).
func (r *Request) Err() error { return r.err }

// Chunk is one item of Stream: a text piece, or the error that ended it.
type Chunk struct {
	Text string
	Err  error
}

// Stream delivers the text pieces on a channel that is closed at the end; a
// final Chunk with Err set reports a failure or ctx.Err(). A done ctx cancels
// the request. Drain the channel (or cancel ctx) before Close.
func (r *Request) Stream(ctx context.Context) <-chan Chunk {
	ch := make(chan Chunk, 16)
	go func() {
		defer close(ch)
		for r.Next(ctx) {
			select {
			case ch <- Chunk{Text: r.Piece()}:
			case <-ctx.Done():
				r.Cancel()
			}
		}
		if r.Err() != nil {
			ch <- Chunk{Err: r.Err()}
		}
	}()
	return ch
}

// Wait returns the whole text once the request finished (ctx cancels it).
func (r *Request) Wait(ctx context.Context) (string, error) {
	for r.Next(ctx) {
	}
	if r.Err() != nil {
		return "", r.Err()
	}
	return r.Text()
}
