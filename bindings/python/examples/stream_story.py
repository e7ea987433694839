#!/usr/bin/env python3
"""Streams a story from stories260K.gguf and prints TTFT and tokens/s.

    python3 bindings/python/examples/stream_story.py [MODEL.gguf] [PROMPT]
(INFER_LIBRARY=path/to/libinfer.so.1 if the library is not found by itself)
"""
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import infer  # noqa: E402

repo = Path(__file__).resolve().parents[3]
shared = Path(os.environ.get("INFER_SHARED_DIR", repo.parent / "shared"))
path = sys.argv[1] if len(sys.argv) > 1 else shared / "models" / "stories260K.gguf"
prompt = sys.argv[2] if len(sys.argv) > 2 else "Once upon a time"

with infer.Model(path) as model, infer.Engine(model) as engine:
    print(prompt, end="", flush=True)
    with engine.submit(prompt, max_tokens=256, temperature=0.8, seed=42) as request:
        for piece in request.stream():
            print(piece, end="", flush=True)
        st = request.stats
    print()
    print(f"TTFT {st.ttft_ms:.2f} ms, {st.n_generated_tokens} tokens, "
          f"{st.decode_tokens_per_s:.1f} tokens/s (decode), finish: {st.finish_reason.name}",
          file=sys.stderr)
