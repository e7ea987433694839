#!/usr/bin/env bash
# Old against new build, interleaved, on the synthetic TinyLlama-1.1B in the
# 5- and 6-bit formats and the K-quant mixes (bench/gguf_mix.py): prefill of
# a 64-token prompt and decode at 2 threads, decode also as a fraction of the
# read bandwidth probed right before each run (as bench/quant_speed.sh).
# Every round runs each format with OLD then NEW; the table shows medians.
#
#   bench/kquant_ab.sh OLD_DIR NEW_BUILD_DIR
#
# OLD_DIR holds bin/infer and the libinfer.so it was built with (a copy of
# an earlier build: LD_LIBRARY_PATH points it there); the models are read
# from NEW_BUILD_DIR/models/tinyllama-FORMAT.gguf (FORMATS, ROUNDS: env).
set -eu
OLD=${1:?usage: $0 OLD_DIR NEW_BUILD_DIR}
NEW=${2:?usage: $0 OLD_DIR NEW_BUILD_DIR}
ROUNDS=${ROUNDS:-3}
REPS=${REPS:-1}
FORMATS=${FORMATS:-q5_0 q5_1 q5_k q6_k q4_k_m q5_k_m q4_k}
HERE=$(cd "$(dirname "$0")" && pwd)
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
RAW=$(mktemp)
trap 'rm -f "$RAW"' EXIT
probe() {
  "$NEW/bin/infer_bench" --benchmark_filter='BM_ReadBandwidth/2/(0|8192)/' --benchmark_format=json 2>/dev/null |
    python3 -c 'import json,sys; print(max(b["bytes_per_second"] for b in json.load(sys.stdin)["benchmarks"]))'
}
for R in $(seq "$ROUNDS"); do
  for T in $FORMATS; do
    M=$NEW/models/tinyllama-$T.gguf
    B=$(python3 "$HERE/gguf_decode_bytes.py" "$M")
    BW=$(probe)
    J=$(LD_LIBRARY_PATH=$OLD "$OLD/bin/infer" bench -m "$M" -p 64 -n 32 -t 2 -r "$REPS" --json)
    echo "old $T $BW $B $J" >> "$RAW"
    BW=$(probe)
    J=$("$NEW/bin/infer" bench -m "$M" -p 64 -n 32 -t 2 -r "$REPS" --json)
    echo "new $T $BW $B $J" >> "$RAW"
  done
done
echo "median of $ROUNDS rounds (old, new interleaved); bandwidth probed before each run"
echo
echo "| model | weight MB/token | prefill tok/s old | new | decode tok/s old | new | new/old | read bandwidth GB/s | % of bandwidth old | new |"
echo "|---|---|---|---|---|---|---|---|---|---|"
python3 - "$RAW" "$FORMATS" <<'PY'
import json, statistics, sys
rows = {}
for line in open(sys.argv[1]):
    which, t, bw, b, j = line.split(" ", 4)
    r = json.loads(j)
    rows.setdefault((which, t), []).append((r["prefill_tokens_per_s"], r["decode_tokens_per_s"], int(b), float(bw)))
med = statistics.median
for t in sys.argv[2].split():
    o, n = rows[("old", t)], rows[("new", t)]
    b = o[0][2]
    po, pn = med(x[0] for x in o), med(x[0] for x in n)
    do, dn = med(x[1] for x in o), med(x[1] for x in n)
    bw = med([x[3] for x in o] + [x[3] for x in n])
    fo = med(x[1] * x[2] / x[3] for x in o)
    fn = med(x[1] * x[2] / x[3] for x in n)
    print("| %s | %.0f | %.1f | %.1f | %.2f | %.2f | %.2fx | %.1f | %.0f%% | %.0f%% |" %
          (t, b / 1e6, po, pn, do, dn, dn / do, bw / 1e9, 100 * fo, 100 * fn))
PY
echo
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
