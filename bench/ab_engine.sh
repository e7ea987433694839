#!/usr/bin/env bash
# Interleaved A/B of two `infer` builds on the engine's hot paths (issue 28):
# single- and 16-sequence decode and prefill on TinyLlama-shaped Q4_0, speculative
# decoding with a draft model, and in-process continuous batching (bench-serve).
#
#   bench/ab_engine.sh OLD_INFER NEW_INFER [ROUNDS=4]
#
# Models (made once, see bench/RESULTS.md):
#   TL    infer synth --preset tinyllama-1.1b --type q4_0 -o /tmp/tl-q4_0.gguf
#   SPEC  stories260K grown to TinyLlama's shape, Q4_0 with Q8_0 head and embedding
#         (/tmp/grown-0-q8both.gguf), drafted by stories260K
# Each round runs OLD then NEW (odd rounds) or NEW then OLD (even rounds); every line
# printed is "label side value" so the figures can be grouped afterwards.
set -euo pipefail
old=$1 new=$2 rounds=${3:-4}
shared=${INFER_SHARED_DIR:-$(cd "$(dirname "$0")/../.." && pwd)/shared}
small=$shared/models/stories260K.gguf
tl=${TL:-/tmp/tl-q4_0.gguf}
spec=${SPEC:-/tmp/grown-0-q8both.gguf}
for f in "$small" "$tl" "$spec"; do [ -f "$f" ] || { echo "missing $f" >&2; exit 1; }; done
jget() { python3 -c "import json,sys; [print(json.loads(l)[sys.argv[1]]) for l in sys.stdin if l.strip()]" "$1"; }
one() {  # one SIDE BINARY
  local side=$1 bin=$2 out
  out=$("$bin" bench -m "$tl" -p 64 -n 32 -t 2 --batch 1,16 --json 2>/dev/null)
  echo "tl_prefill_b1 $side $(echo "$out" | sed -n 1p | jget prefill_tokens_per_s)"
  echo "tl_decode_b1 $side $(echo "$out" | sed -n 1p | jget decode_tokens_per_s)"
  echo "tl_decode_b16 $side $(echo "$out" | sed -n 2p | jget decode_tokens_per_s)"
  out=$("$bin" run -m "$spec" --draft "$small" -p "Once upon a time" -n 128 --temp 0 -t 2 --json 2>/dev/null)
  echo "spec_decode $side $(echo "$out" | jget decode_tokens_per_s)"
  out=$("$bin" bench-serve -m "$small" --requests 3000 --rate 0 --prompt-len 32 --output-len 64 \
        --max-seqs 8 --concurrency 8 -t 0 --json 2>/dev/null)
  echo "serve_continuous $side $(echo "$out" | jget generated_tokens_per_s)"
}
for ((r = 1; r <= rounds; r++)); do
  echo "# round $r  load $(cut -d' ' -f1 /proc/loadavg)"
  if ((r % 2)); then one old "$old"; one new "$new"; else one new "$new"; one old "$old"; fi
done
