#!/usr/bin/env bash
# Installs what is missing, builds, and generates text with the infer CLI.
#   scripts/run.sh [MODEL.gguf] [more `infer run` flags...]
# Without MODEL.gguf: $INFER_SHARED_DIR/models/stories260K.gguf (default folder ../shared).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/deps.sh"
cmake -S "$root" -B "$root/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DINFER_TESTS=OFF -DINFER_BENCH=OFF >/dev/null
cmake --build "$root/build" --target infer_cli
# The first argument is the model unless it is a flag (scripts/run.sh -n 32 works too).
# The default: stories260K in $INFER_SHARED_DIR (as the tests), else ../shared.
model=${INFER_SHARED_DIR:-$root/../shared}/models/stories260K.gguf
if [ $# -gt 0 ] && [ "${1#-}" = "$1" ]; then
  model=$1
  shift
fi
prompt_given=0
for a in "$@"; do case "$a" in -p|--prompt|-f|--file|--tokens) prompt_given=1 ;; esac; done
if [ $prompt_given = 1 ]; then
  exec "$root/build/bin/infer" run -m "$model" "$@"
else
  exec "$root/build/bin/infer" run -m "$model" -p "Once upon a time" -n 256 "$@"
fi
