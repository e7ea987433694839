#!/usr/bin/env bash
# End-to-end speed of the synthetic TinyLlama-1.1B in every benchmarked
# format at 2 threads (prefill of a 64-token prompt, decode), with decode
# expressed as a fraction of the machine's read bandwidth (tokens/s x weight
# bytes per token / bandwidth). The bandwidth is probed right before each
# format's run: on a shared (virtual) machine it drifts by 20% and more
# within minutes, so a ratio to a probe taken much earlier is not meaningful.
# With ROUNDS=N (default 3) every format is run N times, interleaved, and the
# table shows the median of each column. Synthesizes the models into
# BUILD_DIR/models when missing.
#
#   bench/quant_speed.sh BUILD_DIR [ISA]     ISA: amx (best the CPU has, default) | avx512 | avx2 | scalar
set -eu
BUILD=${1:?usage: $0 BUILD_DIR [ISA]}
export INFER_CPU_ISA=${2:-amx}
ROUNDS=${ROUNDS:-3}
FORMATS=${FORMATS:-f16 q8_0 q4_0 q4_k w8a8 int4}
# Emulating an AVX2-only CPU: keep oneDNN off AVX-512 / AMX as well.
if [ "$INFER_CPU_ISA" = avx2 ]; then export ONEDNN_MAX_CPU_ISA=AVX2; fi
INFER=$BUILD/bin/infer
HERE=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$BUILD/models"
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
RAW=$(mktemp)
trap 'rm -f "$RAW"' EXIT
for T in $FORMATS; do
  M=$BUILD/models/tinyllama-$T.gguf
  [ -f "$M" ] || "$INFER" synth --preset tinyllama-1.1b --type $T -o "$M" --quiet -t 2 2>/dev/null
done
for R in $(seq "$ROUNDS"); do
  for T in $FORMATS; do
    M=$BUILD/models/tinyllama-$T.gguf
    # The best of the probe's prefetch variants that matter (the kernels prefetch 8 KiB ahead).
    BW=$("$BUILD/bin/infer_bench" --benchmark_filter='BM_ReadBandwidth/2/(0|8192)/' --benchmark_format=json 2>/dev/null |
         python3 -c 'import json,sys; print(max(b["bytes_per_second"] for b in json.load(sys.stdin)["benchmarks"]))')
    J=$("$INFER" bench -m "$M" -p 64 -n 32 -t 2 -r 3 --json)
    B=$(python3 "$HERE/gguf_decode_bytes.py" "$M")
    echo "$T $BW $B $J" >> "$RAW"
  done
done
echo "ISA: $INFER_CPU_ISA; median of $ROUNDS rounds; bandwidth probed before each run"
echo
echo "| format | prefill tok/s (64) | decode tok/s | weight MB/token | decode GB/s | read bandwidth GB/s | % of bandwidth |"
echo "|---|---|---|---|---|---|---|"
python3 - "$RAW" "$FORMATS" <<'PY'
import json, statistics, sys
rows = {}
for line in open(sys.argv[1]):
    t, bw, b, j = line.split(" ", 3)
    r = json.loads(j)
    rows.setdefault(t, []).append((r["prefill_tokens_per_s"], r["decode_tokens_per_s"], int(b), float(bw)))
for t in sys.argv[2].split():
    v = rows[t]
    pre = statistics.median(x[0] for x in v)
    dec = statistics.median(x[1] for x in v)
    b = v[0][2]
    bw = statistics.median(x[3] for x in v)
    frac = statistics.median(x[1] * x[2] / x[3] for x in v)
    print("| %s | %.1f | %.1f | %.0f | %.1f | %.1f | %.0f%% |" % (t, pre, dec, b / 1e6, dec * b / 1e9, bw / 1e9, 100 * frac))
PY
echo
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
