#!/bin/sh
# State-space models in the engine, on a synthetic mamba-130m (d_model 768,
# 24 layers): TTFT of a request sharing a 1k-token prefix with an earlier
# one, prefix caching on and off; the memory one sequence holds at 1k and
# 16k tokens of context; n-gram speculation against plain decode and the
# positions the rollback recomputes. Numbers for bench/RESULTS.md.
# usage: bench/ssm_prefix.sh [BUILD_DIR] [TYPE]   (defaults: build, f32)
set -eu
BUILD=${1:-build}
TYPE=${2:-f32}
THREADS=${THREADS:-2}
MODEL=${MODEL:-/tmp/ssm-bench-mamba-130m-$TYPE.gguf}
nice ninja -C "$BUILD" infer_ssm_prefix >/dev/null
if [ ! -f "$MODEL" ]; then
  "$BUILD/bin/infer_ssm_prefix" "$MODEL" synth mamba-130m "$TYPE"
fi
echo "model $MODEL, $THREADS threads, $(nproc) cores"
"$BUILD/bin/infer_ssm_prefix" "$MODEL" ttft "$THREADS" 1000 ${REPEATS:-3}
"$BUILD/bin/infer_ssm_prefix" "$MODEL" memory "$THREADS" 1000 16000
"$BUILD/bin/infer_ssm_prefix" "$MODEL" spec "$THREADS" ${SPEC_TOKENS:-128}
