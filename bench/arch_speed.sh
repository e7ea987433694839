#!/usr/bin/env bash
# Decode speed of GGUF models as a fraction of the machine's read bandwidth
# (issue 14: each architecture at a real shape), and the A/B of two builds.
# For every round and every (binary, model): the 2-thread read-bandwidth
# probe of infer_bench, then `infer bench -p 64 -n 32 -t 2 -r 3`; the bytes
# one decode step reads come from bench/gguf_decode_bytes.py (every weight
# but the embedding, one embedding row; tied embeddings: the embedding is the
# output head). Rounds interleave binaries and models, medians are shown.
#
#   bench/arch_speed.sh INFER INFER_BENCH MODEL.gguf...
#   OLD=OLD_INFER bench/arch_speed.sh ...   also runs OLD_INFER, interleaved (A/B)
#   ROUNDS=N (default 3)
set -eu
INFER=${1:?usage: $0 INFER INFER_BENCH MODEL.gguf...}
BENCH=${2:?usage: $0 INFER INFER_BENCH MODEL.gguf...}
shift 2
ROUNDS=${ROUNDS:-3}
HERE=$(cd "$(dirname "$0")" && pwd)
BINS="new=$INFER"
[ -n "${OLD:-}" ] && BINS="old=$OLD $BINS"
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
RAW=$(mktemp)
trap 'rm -f "$RAW"' EXIT
for R in $(seq "$ROUNDS"); do
  for M in "$@"; do
    for NB in $BINS; do
      N=${NB%%=*} X=${NB#*=}
      BW=$("$BENCH" --benchmark_filter='BM_ReadBandwidth/2/(0|8192)/' --benchmark_format=json 2>/dev/null |
           python3 -c 'import json,sys; print(max(b["bytes_per_second"] for b in json.load(sys.stdin)["benchmarks"]))')
      J=$("$X" bench -m "$M" -p 64 -n 32 -t 2 -r 3 --json)
      B=$(python3 "$HERE/gguf_decode_bytes.py" "$M")
      echo "$(basename "$M" .gguf)/$N $BW $B $(stat -c %s "$M") $J" >> "$RAW"
    done
  done
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg); median of $ROUNDS rounds; bandwidth probed before each run"
echo
echo "| model / build | file MB | prefill tok/s (64) | decode tok/s | MB read/token | decode GB/s | read bandwidth GB/s | % of bandwidth |"
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
