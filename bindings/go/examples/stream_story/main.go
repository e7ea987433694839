// Streams a story from stories260K.gguf and prints TTFT and tokens/s.
//
//	go run ./examples/stream_story [MODEL.gguf] [PROMPT]
package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"libinfer/infer"
)

func main() {
	shared := os.Getenv("INFER_SHARED_DIR")
	if shared == "" {
		wd, _ := os.Getwd()
		shared = filepath.Join(wd, "..", "..", "..", "shared") // run from bindings/go
	}
	path := filepath.Join(shared, "models", "stories260K.gguf")
	prompt := "Once upon a time"
	if len(os.Args) > 1 {
		path = os.Args[1]
	}
	if len(os.Args) > 2 {
		prompt = os.Args[2]
	}
	model, err := infer.Load(path)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	defer model.Close()
	engine, err := infer.NewEngine(model, nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	defer engine.Close()
	req, err := engine.Submit(prompt, infer.GenerateParams{MaxTokens: 256, Temperature: 0.8, Seed: 42})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	defer req.Close()
	fmt.Print(prompt)
	for chunk := range req.Stream(context.Background()) {
		if chunk.Err != nil {
			fmt.Fprintln(os.Stderr, chunk.Err)
			os.Exit(1)
		}
		fmt.Print(chunk.Text)
	}
	fmt.Println()
	st, _ := req.Stats()
	fmt.Fprintf(os.Stderr, "TTFT %.2f ms, %d tokens, %.1f tokens/s (decode)\n", st.TTFTMs, st.NGeneratedTokens,
		st.DecodeTokensPerS)
}
