#!/usr/bin/env bash
# Mixture-of-experts decode speed (issue 14): the synthetic mixtral-mini
# (Mixtral's proportions: 8 experts of ffn 3584, top-2, dim 1024, 8 layers)
# against mixtral-mini-dense (the same shape with one dense FFN of 8 x 3584:
# the same number of parameters, all of them read per token), in Q4_0 and
# Q8_0, 2 threads. Decode is expressed as a fraction of the machine's read
# bandwidth counting only the bytes a token reads (bench/gguf_decode_bytes.py:
# the routed k of E experts, attention, router, output head, one embedding
# row), probed right before each run. ROUNDS=N (default 3) interleaved rounds,
# medians shown. Synthesizes the models into BUILD_DIR/models when missing.
#
#   bench/moe_speed.sh BUILD_DIR [ISA]     ISA: amx (best the CPU has, default) | avx512 | avx2 | scalar
set -eu
BUILD=${1:?usage: $0 BUILD_DIR [ISA]}
export INFER_CPU_ISA=${2:-amx}
ROUNDS=${ROUNDS:-3}
FORMATS=${FORMATS:-q4_0 q8_0}
PRESETS=${PRESETS:-mixtral-mini mixtral-mini-dense}
if [ "$INFER_CPU_ISA" = avx2 ]; then export ONEDNN_MAX_CPU_ISA=AVX2; fi
INFER=$BUILD/bin/infer
HERE=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$BUILD/models"
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
RAW=$(mktemp)
trap 'rm -f "$RAW"' EXIT
for P in $PRESETS; do
  for T in $FORMATS; do
    M=$BUILD/models/$P-$T.gguf
    [ -f "$M" ] || "$INFER" synth --preset $P --type $T -o "$M" --quiet -t 2 2>/dev/null
  done
done
for R in $(seq "$ROUNDS"); do
  for P in $PRESETS; do
    for T in $FORMATS; do
      M=$BUILD/models/$P-$T.gguf
      BW=$("$BUILD/bin/infer_bench" --benchmark_filter='BM_ReadBandwidth/2/(0|8192)/' --benchmark_format=json 2>/dev/null |
           python3 -c 'import json,sys; print(max(b["bytes_per_second"] for b in json.load(sys.stdin)["benchmarks"]))')
      J=$("$INFER" bench -m "$M" -p 64 -n 32 -t 2 -r 3 --json)
      B=$(python3 "$HERE/gguf_decode_bytes.py" "$M")
      S=$(stat -c %s "$M")
      echo "$P-$T $BW $B $S $J" >> "$RAW"
    done
  done
done
echo "ISA: $INFER_CPU_ISA; median of $ROUNDS rounds; bandwidth probed before each run"
echo
echo "| model | file MB | prefill tok/s (64) | decode tok/s | MB read/token | decode GB/s | read bandwidth GB/s | % of bandwidth |"
echo "|---|---|---|---|---|---|---|---|"
python3 - "$RAW" <<'PY'
import json, statistics, sys
rows, order = {}, []
for line in open(sys.argv[1]):
    name, bw, b, size, j = line.split(" ", 4)
    r = json.loads(j)
    if name not in rows: order.append(name)
    rows.setdefault(name, []).append((r["prefill_tokens_per_s"], r["decode_tokens_per_s"], int(b), float(bw), int(size)))
for name in order:
    v = rows[name]
    pre = statistics.median(x[0] for x in v)
    dec = statistics.median(x[1] for x in v)
    b, size = v[0][2], v[0][4]
    bw = statistics.median(x[3] for x in v)
    frac = statistics.median(x[1] * x[2] / x[3] for x in v)
    print("| %s | %.0f | %.1f | %.1f | %.0f | %.1f | %.1f | %.0f%% |" % (name, size / 1e6, pre, dec, b / 1e6, dec * b / 1e9, bw / 1e9, 100 * frac))
PY
