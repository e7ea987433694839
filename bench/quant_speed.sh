#!/usr/bin/env bash
# End-to-end speed of the synthetic TinyLlama-1.1B in every benchmarked
# format at 2 threads (prefill of a 64-token prompt, decode), with decode
# expressed as a fraction of the measured read bandwidth
# (tokens/s x weight bytes per token / bandwidth). Synthesizes the models
# into BUILD_DIR/models when missing.
#
#   bench/quant_speed.sh BUILD_DIR [ISA]     ISA: avx512 (best, default) | avx2 | scalar
set -eu
BUILD=${1:?usage: $0 BUILD_DIR [ISA]}
export INFER_CPU_ISA=${2:-avx512}
# Emulating an AVX2-only CPU: keep oneDNN off AVX-512 / AMX as well.
if [ "$INFER_CPU_ISA" = avx2 ]; then export ONEDNN_MAX_CPU_ISA=AVX2; fi
INFER=$BUILD/bin/infer
HERE=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$BUILD/models"
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
# The best of the probe's variants (with and without software prefetch).
BW=$("$BUILD/bin/infer_bench" --benchmark_filter='BM_ReadBandwidth/2/' --benchmark_format=json 2>/dev/null |
     python3 -c 'import json,sys; print(max(b["bytes_per_second"] for b in json.load(sys.stdin)["benchmarks"]))')
printf 'read bandwidth (2 threads): %.1f GB/s\n\n' "$(python3 -c "print($BW/1e9)")"
echo "| format | ISA | prefill tok/s (64) | decode tok/s | weight MB/token | decode GB/s | % of bandwidth |"
echo "|---|---|---|---|---|---|---|"
for T in f16 q8_0 q4_0 q4_k w8a8 int4; do
  M=$BUILD/models/tinyllama-$T.gguf
  [ -f "$M" ] || "$INFER" synth --preset tinyllama-1.1b --type $T -o "$M" --quiet -t 2 2>/dev/null
  J=$("$INFER" bench -m "$M" -p 64 -n 32 -t 2 -r 3 --json)
  B=$(python3 "$HERE/gguf_decode_bytes.py" "$M")
  python3 -c '
import json, sys
r = json.loads(sys.argv[1]); b = int(sys.argv[2]); bw = float(sys.argv[3])
gbs = r["decode_tokens_per_s"] * b / 1e9
print("| %s | %s | %.1f | %.1f | %.0f | %.1f | %.0f%% |" % (sys.argv[4], sys.argv[5], r["prefill_tokens_per_s"],
      r["decode_tokens_per_s"], b / 1e6, gbs, 100 * gbs * 1e9 / bw))' "$J" "$B" "$BW" "$T" "$INFER_CPU_ISA"
done
echo
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
