package infer

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"
	"time"
)

// Values that do not fit the C type they are passed as are refused with an
// error naming the parameter, never wrapped (issue 27, point 4).

func TestConversionsRefuseWhatDoesNotFit(t *testing.T) {
	for _, v := range []int{math.MaxInt32 + 1, math.MinInt32 - 1, 1 << 40, -(1 << 40), math.MaxInt64, math.MinInt64} {
		if _, err := cInt32("op", "X", v); err == nil || !errors.Is(err, ErrInvalidArgument) ||
			!strings.Contains(err.Error(), "X = ") {
			t.Errorf("cInt32(%d): %v", v, err)
		}
	}
	for _, v := range []int{math.MaxInt32, math.MinInt32, 0, -1} {
		if got, err := cInt32("op", "X", v); err != nil || int(got) != v {
			t.Errorf("cInt32(%d) = %d, %v", v, got, err)
		}
	}
	// A wait longer than int32 milliseconds is no limit, never a wrapped one.
	for _, d := range []time.Duration{math.MaxInt64, time.Duration(math.MaxInt32) * time.Millisecond,
		time.Duration(1<<32) * time.Millisecond, -time.Second} {
		if got := timeoutMs(d); got != -1 {
			t.Errorf("timeoutMs(%v) = %d, want -1 (no limit)", d, got)
		}
	}
	if got := timeoutMs(1500 * time.Millisecond); got != 1500 {
		t.Errorf("timeoutMs(1.5s) = %d", got)
	}
	if _, err := cString("op", "S", "a\x00b"); err == nil || !strings.Contains(err.Error(), "S contains a NUL") {
		t.Errorf("cString with a NUL: %v", err)
	}
}

func wantArgError(t *testing.T, what string, err error, name string) {
	t.Helper()
	if err == nil {
		t.Errorf("%s: accepted", what)
		return
	}
	if !errors.Is(err, ErrInvalidArgument) || !strings.Contains(err.Error(), name) {
		t.Errorf("%s: %v (want INVALID_ARGUMENT naming %s)", what, err, name)
	}
}

func TestOutOfRangeArgumentsRefused(t *testing.T) {
	if _, err := Load("x\x00.gguf"); err == nil || !strings.Contains(err.Error(), "path") {
		t.Errorf("path with a NUL: %v", err)
	}
	m, e := load(t)
	for _, c := range []struct {
		name string
		p    GenerateParams
	}{
		{"MaxTokens", GenerateParams{MaxTokens: 1 << 40}},
		{"MaxTokens", GenerateParams{MaxTokens: math.MinInt32 - 1}},
		{"TopK", GenerateParams{MaxTokens: 4, TopK: 1 << 32}},
		{"Priority", GenerateParams{MaxTokens: 4, Priority: 1 << 33}},
		{"Stop[1]", GenerateParams{MaxTokens: 4, Stop: []string{"ok", "\x00"}}},
	} {
		r, err := e.Submit(prompt, c.p)
		if r != nil {
			r.Close()
		}
		wantArgError(t, "Submit "+c.name, err, c.name)
		r, err = e.SubmitTokens([]int32{1, 2}, c.p)
		if r != nil {
			r.Close()
		}
		wantArgError(t, "SubmitTokens "+c.name, err, c.name)
		if c.name != "Priority" && !strings.HasPrefix(c.name, "Stop") {
			_, err = m.Generate(prompt, c.p)
			wantArgError(t, "Model.Generate "+c.name, err, c.name)
		}
	}
	_, err := m.Generate("a\x00b", greedy(4))
	wantArgError(t, "Model.Generate prompt", err, "prompt")
	for _, c := range []struct {
		name string
		p    EngineParams
	}{
		{"NThreads", EngineParams{NThreads: 1 << 32}},
		{"KVBlocks", EngineParams{KVBlocks: 1<<32 + 64}},
		{"MaxSeqs", EngineParams{MaxSeqs: 1<<32 + 4}},
		{"MaxBatchTokens", EngineParams{MaxBatchTokens: -(1 << 40)}},
		{"NCtx", EngineParams{NCtx: 1<<32 + 256}},
	} {
		e2, err := NewEngine(m, &c.p)
		if e2 != nil {
			e2.Close()
		}
		wantArgError(t, "NewEngine "+c.name, err, c.name)
	}
	_, err = m.Meta("general.\x00architecture")
	wantArgError(t, "Meta", err, "key")
	_, err = m.ApplyChatTemplate([]ChatMessage{{"user", "hi"}, {"assis\x00tant", "x"}}, "chatml", true)
	wantArgError(t, "ApplyChatTemplate", err, "messages[1].Role")
	// A prompt's NUL bytes are text (its length is passed): accepted.
	if _, err := e.Generate(context.Background(), "a\x00b", greedy(2)); err != nil {
		t.Errorf("prompt with a NUL byte: %v", err)
	}
	// Still usable.
	if s, err := e.Generate(context.Background(), prompt, greedy(4)); err != nil || s == "" {
		t.Errorf("after the refusals: %q, %v", s, err)
	}
}

// Closing the engine under a live stream ends it with ErrCancelled, never
// silently; the request stays readable, and the model is freed only once the
// request is closed too.
func TestEngineClosedUnderStream(t *testing.T) {
	m, err := Load(modelPath(t))
	if err != nil {
		t.Fatal(err)
	}
	e, err := NewEngine(m, &EngineParams{NThreads: 1})
	if err != nil {
		t.Fatal(err)
	}
	r, err := e.Submit(prompt, GenerateParams{MaxTokens: 2000, IgnoreEOS: true})
	if err != nil {
		t.Fatal(err)
	}
	if !r.Next(context.Background()) {
		t.Fatalf("no first piece: %v", r.Err())
	}
	m.Close() // deferred: the engine and the request use it
	e.Close()
	for r.Next(context.Background()) {
	}
	if !errors.Is(r.Err(), ErrCancelled) || !strings.Contains(r.Err().Error(), "engine was closed") {
		t.Errorf("stream after Engine.Close ended with %v, want ErrCancelled", r.Err())
	}
	st, err := r.Stats()
	if err != nil || st.FinishReason != FinishCancelled {
		t.Errorf("stats after close: %+v, %v", st, err)
	}
	if _, err := r.Text(); err != nil {
		t.Errorf("text after close: %v", err)
	}
	if m.ptr == nil {
		t.Errorf("model freed while a request still referred to it")
	}
	r.Close()
	if m.ptr != nil {
		t.Errorf("model not freed once its last request was closed")
	}

	// The channel form ends with a Chunk carrying the error.
	m2, e2 := load(t)
	_ = m2
	r2, err := e2.Submit(prompt, GenerateParams{MaxTokens: 2000, IgnoreEOS: true})
	if err != nil {
		t.Fatal(err)
	}
	defer r2.Close()
	ch := r2.Stream(context.Background())
	<-ch
	e2.Close()
	var last Chunk
	for c := range ch {
		last = c
	}
	if !errors.Is(last.Err, ErrCancelled) {
		t.Errorf("Stream after Engine.Close ended with %+v, want ErrCancelled", last)
	}

	// The caller's own Cancel is not an error.
	_, e3 := load(t)
	r3, err := e3.Submit(prompt, GenerateParams{MaxTokens: 2000, IgnoreEOS: true})
	if err != nil {
		t.Fatal(err)
	}
	defer r3.Close()
	r3.Next(context.Background())
	r3.Cancel()
	for r3.Next(context.Background()) {
	}
	if r3.Err() != nil {
		t.Errorf("own Cancel ended with %v", r3.Err())
	}
}
