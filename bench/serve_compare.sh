#!/usr/bin/env bash
# Continuous versus static (and dynamic) batching on the synthetic
# TinyLlama-1.1B at Q4_0, 2 threads, the same sequence cap and the same
# workload for every policy: requests arrive all at once (a saturated server,
# so throughput is the engine's, not the arrival rate's) and outputs are
# lognormal(median 16, sigma 1.5), a long tail of output lengths (most
# requests are short, a few are hundreds of tokens). Two prompt mixes:
# PROMPT=lognormal:8:0.5 (decode-heavy, the default) and
# PROMPT=lognormal:32:0.8 (prompt tokens about equal to generated ones).
# POLICIES picks the policies (default: continuous static dynamic).
# Synthesizes the model into BUILD_DIR/models when missing.
#
# ROUNDS=N (N > 1) repeats continuous and static N times in alternating
# order (C S, S C, C S, ...: what drifts in the machine's speed over a round
# weighs on both), prints each run and each round's ratio, then the median
# ratio. Every run's per-step log (bench-serve --step-log) goes to
# LOGS (default BUILD_DIR/serve_logs), and each row shows the median forward
# time of its 1-row and 16-row steps: the machine's speed during that run.
#
#   [PROMPT=DIST] [POLICIES=...] [ROUNDS=N] bench/serve_compare.sh BUILD_DIR [REQUESTS] [MAX_SEQS]
set -eu
BUILD=${1:?usage: $0 BUILD_DIR [REQUESTS] [MAX_SEQS]}
N=${2:-96}
SEQS=${3:-16}
ROUNDS=${ROUNDS:-1}
LOGS=${LOGS:-$BUILD/serve_logs}
INFER=$BUILD/bin/infer
M=$BUILD/models/tinyllama-q4_0.gguf
mkdir -p "$BUILD/models" "$LOGS"
[ -f "$M" ] || "$INFER" synth --preset tinyllama-1.1b --type q4_0 -o "$M" --quiet -t 2 2>/dev/null
PROMPT=${PROMPT:-lognormal:8:0.5}
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "prompt lengths $PROMPT, output lengths lognormal:16:1.5, $N requests at once, --max-seqs $SEQS"
echo
echo "| run | policy | generated tok/s | requests/s | TTFT p50 / p90 / p99 (ms) | TPOT p50 / p99 (ms) | duration (s) | 1-row / 16-row step (ms) |"
echo "|---|---|---|---|---|---|---|---|"

RESULTS=$(mktemp)
trap 'rm -f "$RESULTS"' EXIT
run() {  # run INDEX POLICY
  local log="$LOGS/$2-$N-$1.log" J
  J=$("$INFER" bench-serve -m "$M" --requests "$N" --rate 0 --policy "$2" --prompt-len "$PROMPT" \
      --output-len lognormal:16:1.5 --max-seqs "$SEQS" --seed 1 -t 2 --json --step-log "$log")
  python3 - "$J" "$log" "$1" >>"$RESULTS" <<'EOF'
import json, re, statistics, sys
r = json.loads(sys.argv[1])
ms = {1: [], 16: []}
for line in open(sys.argv[2]):
    m = re.match(r"engine step \d+: (\d+) rows, (\d+) sequences, \d+ attended positions, forward ([\d.]+) ms", line)
    if m and int(m.group(1)) in ms:
        ms[int(m.group(1))].append(float(m.group(3)))
med = lambda v: "%.0f" % statistics.median(v) if v else "-"
print(json.dumps({"run": int(sys.argv[3]), "policy": r["policy"], "tok_s": r["generated_tokens_per_s"],
                  "row": "| %s | %s | %.1f | %.2f | %.0f / %.0f / %.0f | %.1f / %.1f | %.1f | %s / %s |" % (
                      sys.argv[3], r["policy"], r["generated_tokens_per_s"], r["requests_per_s"], r["ttft_ms_p50"],
                      r["ttft_ms_p90"], r["ttft_ms_p99"], r["tpot_ms_p50"], r["tpot_ms_p99"], r["duration_s"],
                      med(ms[1]), med(ms[16]))}))
EOF
  tail -n 1 "$RESULTS" | python3 -c 'import json, sys; print(json.loads(sys.stdin.read())["row"])'
}

if [ "$ROUNDS" -le 1 ]; then
  i=0
  for P in ${POLICIES:-continuous static dynamic}; do
    i=$((i + 1))
    run $i "$P"
  done
else
  i=0
  for r in $(seq "$ROUNDS"); do
    if [ $((r % 2)) -eq 1 ]; then ORDER="continuous static"; else ORDER="static continuous"; fi
    for P in $ORDER; do
      i=$((i + 1))
      run $i "$P"
    done
  done
  python3 - "$RESULTS" <<'EOF'
import json, statistics, sys
runs = [json.loads(l) for l in open(sys.argv[1])]
ratios = []
for k in range(0, len(runs) - 1, 2):
    a, b = runs[k], runs[k + 1]
    c = a if a["policy"] == "continuous" else b
    s = b if c is a else a
    ratios.append(c["tok_s"] / s["tok_s"])
cont = [r["tok_s"] for r in runs if r["policy"] == "continuous"]
stat = [r["tok_s"] for r in runs if r["policy"] == "static"]
print()
print("continuous / static, per round: " + ", ".join("%.2fx" % x for x in ratios))
print("median of the rounds: %.2fx; median continuous %.1f tok/s / median static %.1f tok/s = %.2fx" % (
    statistics.median(ratios), statistics.median(cont), statistics.median(stat),
    statistics.median(cont) / statistics.median(stat)))
EOF
fi
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
