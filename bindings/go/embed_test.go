package infer

import (
	"errors"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// synth writes a synth preset with $INFER_CLI (the test is skipped without it).
func synth(t *testing.T, preset string) string {
	cli := os.Getenv("INFER_CLI")
	if cli == "" {
		t.Skip("INFER_CLI not set (the synth presets are written with infer synth)")
	}
	p := filepath.Join(t.TempDir(), preset+".gguf")
	if out, err := exec.Command(cli, "synth", "--preset", preset, "--type", "f32", "-o", p).CombinedOutput(); err != nil {
		t.Fatalf("infer synth %s: %v\n%s", preset, err, out)
	}
	return p
}

func TestEmbedTinyBert(t *testing.T) {
	m, err := Load(synth(t, "tiny-bert"))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	v, err := m.Embed([]string{"hello world", "the quick brown fox"})
	if err != nil {
		t.Fatal(err)
	}
	if len(v) != 2 || len(v[0]) != 64 {
		t.Fatalf("shape %d x %d", len(v), len(v[0]))
	}
	for _, r := range v {
		var s float64
		for _, x := range r {
			s += float64(x) * float64(x)
		}
		if math.Abs(math.Sqrt(s)-1) > 1e-4 {
			t.Fatalf("norm %g", math.Sqrt(s))
		}
	}
	alone, err := m.Embed([]string{"hello world"})
	if err != nil {
		t.Fatal(err)
	}
	for i := range alone[0] {
		if math.Abs(float64(alone[0][i]-v[0][i])) > 1e-5 {
			t.Fatalf("value %d: %g alone, %g batched", i, alone[0][i], v[0][i])
		}
	}
	o := DefaultEmbedOptions()
	o.Dimensions = 16
	if r, err := m.EmbedWith([]string{"hello"}, o); err != nil || len(r[0]) != 16 {
		t.Fatal(r, err)
	}
	for _, bad := range [][]string{{}, {""}} {
		if _, err := m.Embed(bad); !errors.Is(err, ErrInvalidArgument) {
			t.Fatalf("%q: %v", bad, err)
		}
	}
	if _, err := m.Rerank("q", []string{"d"}); !errors.Is(err, ErrInvalidArgument) { // no head
		t.Fatal(err)
	}
}

func TestRerankTinyBert(t *testing.T) {
	m, err := Load(synth(t, "tiny-bert-rerank"))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	docs := []string{"the fox", "a dog", "hello"}
	s, err := m.Rerank("quick fox", docs)
	if err != nil || len(s) != 3 {
		t.Fatal(s, err)
	}
	one, err := m.Rerank("quick fox", docs[1:2])
	if err != nil || math.Abs(float64(one[0]-s[1])) > 1e-5 {
		t.Fatal(one, s, err)
	}
}
