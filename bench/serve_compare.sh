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
#   [PROMPT=DIST] [POLICIES=...] bench/serve_compare.sh BUILD_DIR [REQUESTS] [MAX_SEQS]
set -eu
BUILD=${1:?usage: $0 BUILD_DIR [REQUESTS] [MAX_SEQS]}
N=${2:-96}
SEQS=${3:-16}
INFER=$BUILD/bin/infer
M=$BUILD/models/tinyllama-q4_0.gguf
mkdir -p "$BUILD/models"
[ -f "$M" ] || "$INFER" synth --preset tinyllama-1.1b --type q4_0 -o "$M" --quiet -t 2 2>/dev/null
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "| policy | generated tok/s | requests/s | TTFT p50 / p90 / p99 (ms) | TPOT p50 / p99 (ms) | duration (s) |"
echo "|---|---|---|---|---|---|"
PROMPT=${PROMPT:-lognormal:8:0.5}
echo "prompt lengths $PROMPT, output lengths lognormal:16:1.5, $N requests at once, --max-seqs $SEQS"
echo
for P in ${POLICIES:-continuous static dynamic}; do
  J=$("$INFER" bench-serve -m "$M" --requests "$N" --rate 0 --policy $P --prompt-len "$PROMPT" \
      --output-len lognormal:16:1.5 --max-seqs "$SEQS" --seed 1 -t 2 --json)
  python3 -c '
import json, sys
r = json.loads(sys.argv[1])
print("| %s | %.1f | %.2f | %.0f / %.0f / %.0f | %.1f / %.1f | %.1f |" % (r["policy"], r["generated_tokens_per_s"],
      r["requests_per_s"], r["ttft_ms_p50"], r["ttft_ms_p90"], r["ttft_ms_p99"], r["tpot_ms_p50"], r["tpot_ms_p99"],
      r["duration_s"]))' "$J"
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
