#!/usr/bin/env bash
# scripts/run.sh's choice of model, without building anything: the script is
# copied into a scratch tree whose scripts/deps.sh, `cmake` (first on PATH)
# and build/bin/infer are stubs; the stub infer prints the arguments it got.
#   tests/run_sh_test.sh WORK_DIR
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
work=${1:?usage: run_sh_test.sh WORK_DIR}
rm -rf "$work"
mkdir -p "$work/tree/scripts" "$work/tree/build/bin" "$work/stubs"
cp "$src/scripts/run.sh" "$work/tree/scripts/run.sh"
printf '#!/bin/sh\nexit 0\n' > "$work/tree/scripts/deps.sh"
printf '#!/bin/sh\nexit 0\n' > "$work/stubs/cmake"
printf '#!/bin/sh\nprintf "%%s\\n" "$@"\n' > "$work/tree/build/bin/infer"
chmod +x "$work/tree/scripts/deps.sh" "$work/stubs/cmake" "$work/tree/build/bin/infer"
export PATH="$work/stubs:$PATH"
tree=$(cd "$work/tree" && pwd)
fail=0
expect() { # NAME EXPECTED_MODEL ARGS_PRINTED
  local got
  got=$(printf '%s\n' "$3" | sed -n '/^-m$/{n;p;q}')
  if [ "$got" = "$2" ]; then echo "ok   - $1"; else echo "FAIL - $1: -m '$got', expected '$2'"; fail=1; fi
}

out=$(env -u INFER_SHARED_DIR "$tree/scripts/run.sh" -n 4)
expect "no INFER_SHARED_DIR: ../shared beside the checkout" "$tree/../shared/models/stories260K.gguf" "$out"
out=$(INFER_SHARED_DIR=/data/infer-shared "$tree/scripts/run.sh" -n 4)
expect "INFER_SHARED_DIR set: its models/stories260K.gguf" "/data/infer-shared/models/stories260K.gguf" "$out"
out=$(INFER_SHARED_DIR= "$tree/scripts/run.sh" -n 4)
expect "INFER_SHARED_DIR empty: as if unset" "$tree/../shared/models/stories260K.gguf" "$out"
out=$(INFER_SHARED_DIR=/data/infer-shared "$tree/scripts/run.sh" /m/other.gguf -n 4)
expect "a model given wins over INFER_SHARED_DIR" "/m/other.gguf" "$out"
case "$out" in *"-n"*"4"*) echo "ok   - the other flags are passed on" ;; *) echo "FAIL - flags not passed on: $out"; fail=1 ;; esac
exit $fail
