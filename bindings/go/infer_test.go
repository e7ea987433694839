package infer

import (
	"bytes"
	"context"
	"errors"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"
)

const prompt = "Once upon a time"

func repo() string {
	wd, _ := os.Getwd()
	return filepath.Join(wd, "..", "..")
}

func modelPath(t *testing.T) string {
	shared := os.Getenv("INFER_SHARED_DIR")
	if shared == "" {
		shared = filepath.Join(repo(), "..", "shared")
	}
	p := filepath.Join(shared, "models", "stories260K.gguf")
	if _, err := os.Stat(p); err != nil {
		t.Skipf("%s is absent (set INFER_SHARED_DIR)", p)
	}
	return p
}

func load(t *testing.T) (*Model, *Engine) {
	m, err := Load(modelPath(t))
	if err != nil {
		t.Fatal(err)
	}
	e, err := NewEngine(m, &EngineParams{NThreads: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close(); m.Close() })
	return m, e
}

func greedy(n int) GenerateParams { return GenerateParams{MaxTokens: n, Greedy: true} }

// The C compiler's layout, from bindings/layout/infer_layout.c.
func cCompilerLayout(t *testing.T) map[string]uintptr {
	exe := os.Getenv("INFER_LAYOUT")
	if exe == "" {
		exe = filepath.Join(t.TempDir(), "infer_layout")
		out, err := exec.Command("cc", "-std=c99", "-I", filepath.Join(repo(), "include"),
			filepath.Join(repo(), "bindings", "layout", "infer_layout.c"), "-o", exe).CombinedOutput()
		if err != nil {
			t.Fatalf("cc: %v\n%s", err, out)
		}
	}
	out, err := exec.Command(exe).Output()
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]uintptr{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		i := strings.LastIndexByte(line, ' ')
		v, _ := strconv.Atoi(line[i+1:])
		m[line[:i]] = uintptr(v)
	}
	return m
}

func TestVersionAndLayouts(t *testing.T) {
	if err := CheckVersion(); err != nil {
		t.Fatal(err)
	}
	c := cCompilerLayout(t)
	if LinkedVersionNumber() != int(c["version_number"]) || VersionNumber != int(c["version_number"]) {
		t.Fatalf("version %d/%d, header %d", LinkedVersionNumber(), VersionNumber, c["version_number"])
	}
	g := cLayouts()
	if len(g) != len(c) {
		t.Errorf("cgo sees %d layout entries, the C compiler %d", len(g), len(c))
	}
	for k, v := range c {
		if gv, ok := g[k]; !ok || gv != v {
			t.Errorf("%s: C %d, Go %d (present %v)", k, v, gv, ok)
		}
		if strings.HasSuffix(k, " enum") && v != 4 {
			t.Errorf("%s is %d bytes", k, v)
		}
	}
}

func TestLoadInfoTokens(t *testing.T) {
	m, _ := load(t)
	info, err := m.Info()
	if err != nil || info.Architecture != "llama" || info.NVocab != 512 {
		t.Fatalf("%+v %v", info, err)
	}
	if v, err := m.Meta("general.architecture"); err != nil || v != "llama" {
		t.Fatal(v, err)
	}
	if _, err := m.Meta("no.such.key"); !errors.Is(err, ErrNotFound) {
		t.Fatal(err)
	}
	toks, err := m.Tokenize("Hello world", BOSDefault, false)
	if err != nil || int(toks[0]) != info.BOSToken {
		t.Fatal(toks, err)
	}
	if s, _ := m.Detokenize(toks); s != "Hello world" {
		t.Fatal(s)
	}
	p, err := m.ApplyChatTemplate([]ChatMessage{{"user", "Hi"}}, "chatml", true)
	if err != nil || !strings.HasSuffix(p, "<|im_start|>assistant\n") {
		t.Fatal(p, err)
	}
	if _, err := m.ApplyChatTemplate([]ChatMessage{{"user", "Hi"}}, "nope", true); !errors.Is(err, ErrUnsupported) {
		t.Fatal(err)
	}
}

func TestGreedyEqualsCAPI(t *testing.T) {
	m, e := load(t)
	ctx := context.Background()
	for _, p := range []string{prompt, "The little dog", ""} {
		want, err := m.Generate(p, greedy(48)) // infer_generate
		if err != nil || want == "" {
			t.Fatal(want, err)
		}
		got, err := e.Generate(ctx, p, greedy(48))
		if err != nil || got != want {
			t.Fatalf("%q: engine %q, infer_generate %q (%v)", p, got, want, err)
		}
		r, _ := e.Submit(p, greedy(48))
		var sb strings.Builder
		for c := range r.Stream(ctx) {
			if c.Err != nil {
				t.Fatal(c.Err)
			}
			sb.WriteString(c.Text)
		}
		r.Close()
		if sb.String() != want {
			t.Fatalf("streamed %q", sb.String())
		}
	}
	if cli := os.Getenv("INFER_CLI"); cli != "" {
		out, err := exec.Command(cli, "run", "-m", modelPath(t), "-p", prompt, "-n", "32", "--temp", "0").Output()
		if err != nil {
			t.Fatal(err)
		}
		want, _ := m.Generate(prompt, greedy(32))
		if got := strings.TrimRight(strings.TrimPrefix(string(out), prompt), "\n"); got != want {
			t.Fatalf("CLI %q, binding %q", got, want)
		}
	}
}

func TestStreamingNeverSplitsUTF8(t *testing.T) {
	m, e := load(t)
	allowed := []int32{3 + 0xE2, 3 + 0x82, 3 + 0xAC} // the bytes of "€"
	if b, _ := m.TokenPiece(allowed[0]); !bytes.Equal(b, []byte{0xE2}) {
		t.Fatal(b)
	}
	bias := map[int32]float32{}
	for i := int32(0); i < 512; i++ {
		bias[i] = float32(math.Inf(-1))
	}
	for _, a := range allowed {
		bias[a] = 0
	}
	for seed := uint64(0); seed < 8; seed++ {
		r, err := e.Submit(prompt, GenerateParams{MaxTokens: 60, Temperature: 1, TopK: -1, TopP: 1, MinP: -1,
			Seed: seed, IgnoreEOS: true, LogitBias: bias})
		if err != nil {
			t.Fatal(err)
		}
		var all strings.Builder
		for r.Next(context.Background()) {
			if !utf8.ValidString(r.Piece()) {
				t.Fatalf("piece %q is not valid UTF-8", r.Piece())
			}
			all.WriteString(r.Piece())
		}
		if r.Err() != nil {
			t.Fatal(r.Err())
		}
		if text, _ := r.Text(); text != all.String() {
			t.Fatalf("pieces %q, text %q", all.String(), text)
		}
		if st, _ := r.Stats(); st.NGeneratedTokens != 60 {
			t.Fatal(st)
		}
		r.Close()
	}
}

func TestManyPromptsAtOnce(t *testing.T) {
	m, e := load(t)
	var prompts []string
	for _, w := range []string{"a cat", "a dog", "a bird", "Tim", "Sue", "the sea", "a cake", "a frog"} {
		prompts = append(prompts, prompt+" "+w)
	}
	texts, err := e.GenerateBatch(context.Background(), prompts, greedy(24))
	if err != nil {
		t.Fatal(err)
	}
	for i, p := range prompts {
		if want, _ := m.Generate(p, greedy(24)); texts[i] != want {
			t.Fatalf("%q: batch %q, alone %q", p, texts[i], want)
		}
	}
	want, _ := m.Generate(prompt, greedy(24))
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if got, err := e.Generate(context.Background(), prompt, greedy(24)); err != nil || got != want {
				t.Errorf("goroutine: %q %v", got, err)
			}
		}()
	}
	wg.Wait()
}

func TestContextCancellation(t *testing.T) {
	_, e := load(t)
	long := GenerateParams{MaxTokens: 1500, IgnoreEOS: true}
	// A context cancelled from another goroutine after the first piece.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r, err := e.Submit(prompt, long)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for c := range r.Stream(ctx) {
		if c.Err != nil {
			if !errors.Is(c.Err, context.Canceled) {
				t.Fatal(c.Err)
			}
			continue
		}
		if n == 0 {
			go cancel()
		}
		n++
	}
	e.WaitIdle()
	st, _ := r.Stats()
	if st.FinishReason != FinishCancelled || st.NGeneratedTokens >= 1500 {
		t.Fatalf("%+v", st)
	}
	r.Close()
	// A deadline.
	ctx2, cancel2 := context.WithTimeout(context.Background(), 5*time.Millisecond)
	defer cancel2()
	if _, err := e.Generate(ctx2, prompt, long); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatal(err)
	}
	// Request.Cancel from another goroutine.
	r2, _ := e.Submit(prompt, long)
	go func() { time.Sleep(5 * time.Millisecond); r2.Cancel() }()
	if _, err := r2.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	if st, _ := r2.Stats(); st.FinishReason != FinishCancelled {
		t.Fatalf("%+v", st)
	}
	r2.Close()
}

func TestNativeErrors(t *testing.T) {
	if _, err := Load("/nonexistent/model.gguf"); !errors.Is(err, ErrIO) {
		t.Fatal(err)
	} else if err.(*Error).Message == "" {
		t.Fatal("no message")
	}
	bad := filepath.Join(t.TempDir(), "bad.gguf")
	os.WriteFile(bad, append([]byte("GGUF\x03\x00\x00\x00"), bytes.Repeat([]byte{0xff}, 200)...), 0o644)
	if _, err := Load(bad); !errors.Is(err, ErrFormat) {
		t.Fatal(err)
	}
	m, e := load(t)
	data, _ := os.ReadFile(modelPath(t))
	trunc := filepath.Join(t.TempDir(), "trunc.gguf")
	os.WriteFile(trunc, data[:5000], 0o644)
	if _, err := Load(trunc); err == nil {
		t.Fatal("truncated model loaded")
	}
	ctx := context.Background()
	if _, err := e.Generate(ctx, prompt, GenerateParams{MaxTokens: -1}); !errors.Is(err, ErrInvalidArgument) {
		t.Fatal(err)
	}
	if _, err := e.Generate(ctx, prompt, GenerateParams{TopP: 7}); !errors.Is(err, ErrInvalidArgument) {
		t.Fatal(err)
	}
	if _, err := e.SubmitTokens([]int32{100000}, greedy(4)); !errors.Is(err, ErrInvalidArgument) {
		t.Fatal(err)
	}
	if s, err := e.Generate(ctx, prompt, greedy(4)); err != nil || s == "" {
		t.Fatal("engine unusable after errors", err)
	}
	// closed handles
	m2, _ := Load(modelPath(t))
	m2.Close()
	if _, err := m2.Info(); err != ErrClosed {
		t.Fatal(err)
	}
	if _, err := NewEngine(m2, nil); err != ErrClosed {
		t.Fatal(err)
	}
	_ = m
}

func rssKB() int {
	b, _ := os.ReadFile("/proc/self/statm")
	f := strings.Fields(string(b))
	n, _ := strconv.Atoi(f[1])
	return n * os.Getpagesize() / 1024
}

func TestNoLeakAcross1000Cycles(t *testing.T) {
	path := modelPath(t)
	cycle := func() {
		m, err := Load(path)
		if err != nil {
			t.Fatal(err)
		}
		e, err := NewEngine(m, &EngineParams{NThreads: 1, KVBlocks: 64, MaxSeqs: 2})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := e.Generate(context.Background(), prompt, greedy(2)); err != nil {
			t.Fatal(err)
		}
		e.Close()
		m.Close()
		Load("/nonexistent.gguf")
	}
	for i := 0; i < 100; i++ {
		cycle()
	}
	runtime.GC()
	before := rssKB()
	for i := 0; i < 1000; i++ {
		cycle()
	}
	runtime.GC()
	if grown := rssKB() - before; grown > 4096 {
		t.Fatalf("RSS grew by %d KiB over 1000 cycles", grown)
	}
}

func TestFinalizersFreeForgottenHandles(t *testing.T) {
	path := modelPath(t)
	for i := 0; i < 50; i++ {
		m, _ := Load(path)
		e, _ := NewEngine(m, &EngineParams{NThreads: 1, KVBlocks: 64})
		e.Submit(prompt, greedy(2)) // never closed
	}
	runtime.GC()
	runtime.GC()
	time.Sleep(50 * time.Millisecond)
	runtime.GC()
}

func TestCloseWhileOtherGoroutinesUseHandles(t *testing.T) {
	m, err := Load(modelPath(t))
	if err != nil {
		t.Fatal(err)
	}
	e, _ := NewEngine(m, &EngineParams{NThreads: 1})
	r, _ := e.Submit(prompt, GenerateParams{MaxTokens: 1500, IgnoreEOS: true})
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for i := 0; i < 4; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				for _, err := range []error{
					func() error { _, err := r.Stats(); return err }(),
					func() error { r.Cancel(); return nil }(),
					func() error { _, err := m.Tokenize("hello", BOSDefault, false); return err }(),
					func() error { _, err := e.Stats(); return err }(),
				} {
					if err != nil && err != ErrClosed {
						t.Error(err)
						return
					}
				}
			}
		}()
	}
	time.Sleep(20 * time.Millisecond)
	r.Close()
	e.Close()
	m.Close()
	close(stop)
	wg.Wait()
	if _, err := r.Text(); err != ErrClosed {
		t.Fatal(err)
	}
}

func TestTensorParallelAccessorsOnAWholeModel(t *testing.T) {
	m, e := load(t)
	if r, err := m.TPRank(); err != nil || r != 0 {
		t.Fatal(r, err)
	}
	if n, err := m.TPSize(); err != nil || n != 1 {
		t.Fatal(n, err)
	}
	// A whole model has no rank 0 engine to follow.
	if err := m.Follow(nil); !errors.Is(err, ErrInvalidArgument) {
		t.Fatal(err)
	}
	// tensor_parallel must be 0 or the model's group size.
	if _, err := NewEngine(m, &EngineParams{TensorParallel: 2}); !errors.Is(err, ErrInvalidArgument) {
		t.Fatal(err)
	}
	if _, err := e.Generate(context.Background(), prompt, greedy(4)); err != nil {
		t.Fatal(err)
	}
	st, err := e.Stats()
	if err != nil || st.TPCommCalls != 0 || st.TPCommBytes != 0 || st.TPCommSeconds != 0 {
		t.Fatalf("%+v %v", st, err)
	}
	one, err := LoadWith(modelPath(t), &ModelOptions{TensorParallel: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer one.Close()
	if n, _ := one.TPSize(); n != 1 {
		t.Fatal(n)
	}
}
