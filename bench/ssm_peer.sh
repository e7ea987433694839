#!/usr/bin/env bash
# State-space models against the peer (llama.cpp, built elsewhere: nothing of
# it is in this repository), on the same GGUF files. Two parts:
#
#   agree  tiny-mamba and mamba-130m-shaped (F32, `infer synth --type f32`): the logits of
#          every position of a fixed token list, ours (`infer run --tokens
#          --dump-logits`) against the peer's (PEER_DUMP, a program that
#          evaluates a token list and writes every position's logits row as
#          f32, the same layout). Prints the max abs difference; FAIL above
#          MAX_DIFF (default 1e-4).
#   speed  mamba-130m-shaped at F16 (`infer synth --type f16`):
#          decode (N_GEN tokens) and prefill (N_PROMPT tokens) at THREADS
#          threads, ours (`infer bench --json`) and the peer's (`llama-bench
#          -o json`) interleaved for ROUNDS rounds (ours first in odd rounds),
#          medians and their ratio; the 2-thread read-bandwidth probe of
#          infer_bench before each of our runs, and the bytes a decode step
#          reads (bench/gguf_decode_bytes.py) for the share of bandwidth.
#
#   [PEER_DIR=DIR] [PEER_DUMP=PROG] [ROUNDS=3] [THREADS=2] [N_PROMPT=512] [N_GEN=128] \
#     bench/ssm_peer.sh BUILD_DIR [agree|speed|all]
#
# PEER_DIR holds llama-bench (default /tmp/peer/build/bin). Models are
# synthesized into BUILD_DIR/models when missing. Exits 77 without the peer.
set -eu
BUILD=${1:?usage: $0 BUILD_DIR [agree|speed|all]}
WHAT=${2:-all}
PEER_DIR=${PEER_DIR:-/tmp/peer/build/bin}
PEER_DUMP=${PEER_DUMP:-/tmp/peer/tool/dump_logits}
ROUNDS=${ROUNDS:-3}
THREADS=${THREADS:-2}
N_PROMPT=${N_PROMPT:-512}
N_GEN=${N_GEN:-128}
MAX_DIFF=${MAX_DIFF:-1e-4}
HERE=$(cd "$(dirname "$0")" && pwd)
INFER=$BUILD/bin/infer
BENCH=$BUILD/bin/infer_bench
[ -x "$PEER_DIR/llama-bench" ] || { echo "SKIP: no peer at $PEER_DIR"; exit 77; }
mkdir -p "$BUILD/models"
model() {  # model PRESET TYPE -> path (written by `infer synth --type TYPE` when missing)
  local out="$BUILD/models/$1-$2.gguf"
  [ -f "$out" ] || "$INFER" synth --preset "$1" --type "$2" -o "$out" >/dev/null 2>&1
  echo "$out"
}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

if [ "$WHAT" = agree ] || [ "$WHAT" = all ]; then
  [ -x "$PEER_DUMP" ] || { echo "SKIP agree: no $PEER_DUMP"; }
  if [ -x "$PEER_DUMP" ]; then
    for P in tiny-mamba mamba-130m; do
      M=$(model "$P" f32)
      # 48 ids from a fixed generator (BOS, then ids 3..249: inside every preset's vocabulary).
      python3 -c 'import random; r=random.Random(7); print(" ".join(["1"]+[str(r.randrange(3, 250)) for _ in range(47)]))' > "$TMP/ids.txt"
      "$INFER" run -m "$M" --tokens "$TMP/ids.txt" -n 1 --temp 0 --quiet --dump-logits "$TMP/ours.f32" >/dev/null 2>&1
      "$PEER_DUMP" "$M" "$TMP/ids.txt" "$TMP/peer.f32" "$THREADS" 2>/dev/null
      python3 - "$TMP/ours.f32" "$TMP/peer.f32" "$P" "$MAX_DIFF" <<'PY'
import sys
import numpy as np
a = np.fromfile(sys.argv[1], dtype=np.float32)
b = np.fromfile(sys.argv[2], dtype=np.float32)
rows = 48
a = a[:b.size].reshape(rows, -1); b = b.reshape(rows, -1)
d = float(np.abs(a - b).max())
ok = d <= float(sys.argv[4])
print(f"{sys.argv[3]}: {rows} positions x {b.shape[1]} logits, max |ours - peer| = {d:.3g} (scale {float(np.abs(b).max()):.3g}) {'ok' if ok else 'FAIL'}")
sys.exit(0 if ok else 1)
PY
    done
  fi
fi

if [ "$WHAT" = speed ] || [ "$WHAT" = all ]; then
  M=$(model mamba-130m f16)
  echo "model: $M ($(stat -c %s "$M") bytes); $THREADS threads; prefill $N_PROMPT, decode $N_GEN tokens; $ROUNDS rounds"
  echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
  RAW="$TMP/raw"
  : > "$RAW"
  ours() {
    local bw j
    bw=$("$BENCH" --benchmark_filter='BM_ReadBandwidth/2/(0|8192)/' --benchmark_format=json 2>/dev/null |
         python3 -c 'import json,sys; print(max(b["bytes_per_second"] for b in json.load(sys.stdin)["benchmarks"]))')
    j=$("$INFER" bench -m "$M" -p "$N_PROMPT" -n "$N_GEN" -t "$THREADS" -r 2 --json | tail -1)
    echo "ours $bw $j" >> "$RAW"
  }
  peer() {
    local j
    j=$("$PEER_DIR/llama-bench" -m "$M" -p "$N_PROMPT" -n "$N_GEN" -t "$THREADS" -r 2 -o json 2>/dev/null | tr -d '\n')
    echo "peer 0 $j" >> "$RAW"
  }
  for R in $(seq "$ROUNDS"); do
    if [ $((R % 2)) -eq 1 ]; then ours; peer; else peer; ours; fi
  done
  B=$(python3 "$HERE/gguf_decode_bytes.py" "$M")
  python3 - "$RAW" "$B" <<'PY'
import json, statistics, sys
raw, bytes_tok = sys.argv[1], float(sys.argv[2])
ours_pp, ours_tg, peer_pp, peer_tg, bws = [], [], [], [], []
for line in open(raw):
    who, bw, js = line.split(" ", 2)
    j = json.loads(js)
    if who == "ours":
        bws.append(float(bw))
        ours_pp.append(j["prefill_tokens_per_s"]); ours_tg.append(j["decode_tokens_per_s"])
    else:
        for t in j:
            (peer_pp if t["n_prompt"] > 0 else peer_tg).append(t["avg_ts"])
med = statistics.median
op, ot, pp, pt, bw = med(ours_pp), med(ours_tg), med(peer_pp), med(peer_tg), med(bws)
print(f"| | ours | peer | ours / peer |")
print(f"|---|---:|---:|---:|")
print(f"| prefill tok/s | {op:.1f} | {pp:.1f} | {op/pp:.2f}x |")
print(f"| decode tok/s | {ot:.1f} | {pt:.1f} | {ot/pt:.2f}x |")
gbs = ot * bytes_tok / 1e9
print(f"decode reads {bytes_tok/1e6:.1f} MB/token: ours {gbs:.2f} GB/s = {100*gbs/(bw/1e9):.0f}% of the probed "
      f"{bw/1e9:.2f} GB/s (peer {pt*bytes_tok/1e9:.2f} GB/s)")
print("runs: ours prefill", [round(x, 1) for x in ours_pp], "decode", [round(x, 1) for x in ours_tg])
print("runs: peer prefill", [round(x, 1) for x in peer_pp], "decode", [round(x, 1) for x in peer_tg])
PY
  echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
fi
