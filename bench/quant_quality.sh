#!/usr/bin/env bash
# Quality of every quantization type and method on the two TinyStories models:
# perplexity on ../shared/text/stories-eval.txt, KL divergence from the F32
# model and top-1 agreement. GPTQ/AWQ calibrate on stories-calib.txt only.
#
#   bench/quant_quality.sh BUILD_DIR [OUT_DIR]     (prints a markdown table)
set -eu
BUILD=${1:?usage: $0 BUILD_DIR [OUT_DIR]}
OUT=${2:-$BUILD/quality}
SHARED=${INFER_SHARED_DIR:-$(cd "$(dirname "$0")/../.." && pwd)/shared}
INFER=$BUILD/bin/infer
EVAL=$SHARED/text/stories-eval.txt
CALIB=$SHARED/text/stories-calib.txt
mkdir -p "$OUT"
cp "$SHARED/models/stories260K.gguf" "$OUT/stories260K.gguf"
"$INFER" convert llama2c "$SHARED/models/stories-xs.bin" "$SHARED/models/tok512.bin" -o "$OUT/stories-xs.gguf" 2>/dev/null

row() {  # model label file
  local json
  json=$("$INFER" perplexity -m "$3" -f "$EVAL" --base "$OUT/$1.gguf" --json -t 2)
  python3 -c 'import json,sys; r=json.loads(sys.argv[1]); print("| %s | %s | %.4f | %.5f | %.2f%% |" % (sys.argv[2], sys.argv[3], r["perplexity"], r["kl_divergence"], 100*r["top1_agreement"]))' "$json" "$1" "$2"
}

echo "| model | type / method | perplexity | KL from F32 (nats) | top-1 agreement |"
echo "|---|---|---|---|---|"
for M in stories260K stories-xs; do
  row $M "f32 (base)" "$OUT/$M.gguf"
  for T in f16 bf16 q8_0 w8a8 q6_k q5_k q5_1 q5_0 q4_k q4_1 q4_0; do
    "$INFER" quantize "$OUT/$M.gguf" "$OUT/$M-$T.gguf" $T --quiet 2>/dev/null
    row $M "$T rtn" "$OUT/$M-$T.gguf"
  done
  for G in 32 64; do
    for METHOD in rtn gptq awq; do
      "$INFER" quantize "$OUT/$M.gguf" "$OUT/$M-int4-g$G-$METHOD.gguf" int4 --group $G --method $METHOD --calib "$CALIB" --quiet 2>/dev/null
      row $M "int4 g$G $METHOD" "$OUT/$M-int4-g$G-$METHOD.gguf"
    done
  done
  for T in q4_0 q4_1 q5_0; do
    for METHOD in gptq awq; do
      "$INFER" quantize "$OUT/$M.gguf" "$OUT/$M-$T-$METHOD.gguf" $T --method $METHOD --calib "$CALIB" --quiet 2>/dev/null
      row $M "$T $METHOD" "$OUT/$M-$T-$METHOD.gguf"
    done
  done
done
