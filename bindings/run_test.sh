#!/usr/bin/env bash
# Runs one language binding's tests and example against a build tree (CTest
# calls it; see bindings/CMakeLists.txt):
#   bindings/run_test.sh python|rust|go LIB_DIR WORK_DIR [LAYOUT_EXE] [INFER_CLI]
# Exit 77 (skipped) when the language's toolchain is missing, or when
# ../shared (INFER_SHARED_DIR) is absent: then only the tests that need no
# model ran, and they passed.
set -euo pipefail
lang=$1
libdir=$(cd "$2" && pwd)
work=$3
export INFER_LAYOUT=${4:-}
export INFER_CLI=${5:-}
src=$(cd "$(dirname "$0")/.." && pwd)
export INFER_SHARED_DIR=${INFER_SHARED_DIR:-$src/../shared}
mkdir -p "$work"
model="$INFER_SHARED_DIR/models/stories260K.gguf"
have_model=1
[ -e "$model" ] || { have_model=0; echo "note: $model is absent: the tests that need it are skipped"; }
skip() { echo "SKIP: $*"; exit 77; }
# A sanitizer-instrumented library cannot be loaded by python3 or Go/Rust test
# programs built without the sanitizer (CMake leaves these tests out of
# INFER_SANITIZE builds; this catches other sanitizer setups).
if ldd "$libdir/libinfer.so.1" 2>/dev/null | grep -Eq 'lib(a|t|ub|hwa|m)san'; then
  skip "libinfer.so is sanitizer-instrumented"
fi
finish() {
  if [ $have_model = 0 ]; then
    skip "the $lang tests that need ../shared did not run"
  fi
  echo "$lang bindings: all tests passed"
}

case $lang in
python)
  py=$(command -v python3 || true)
  [ -n "$py" ] || skip "python3 not found"
  # Debian's python3-pytest lives with /usr/bin/python3; prefer it.
  for cand in /usr/bin/python3 "$py"; do
    if [ -x "$cand" ] && "$cand" -c "import pytest" 2>/dev/null; then py=$cand; break; fi
  done
  "$py" -c "import pytest" 2>/dev/null || skip "pytest not found (Debian: python3-pytest)"
  export INFER_LIBRARY="$libdir/libinfer.so.1"
  cd "$src/bindings/python"
  "$py" -m pytest -q -p no:cacheprovider --basetemp="$work/pytest" tests
  if [ $have_model = 1 ]; then
    "$py" examples/stream_story.py "$model" > "$work/python_example.txt"
    grep -q "Once upon a time" "$work/python_example.txt"
  fi
  ;;
rust)
  . "$src/bindings/find_cargo.sh"
  export CARGO_TARGET_DIR="$work/target" CARGO_HOME="$work/cargo-home" INFER_LIB_DIR="$libdir"
  cd "$src/bindings/rust"
  "$cargo" test --offline --locked
  if [ $have_model = 1 ]; then
    "$cargo" run --offline --locked -q --example stream_story -- "$model" > "$work/rust_example.txt"
    grep -q "Once upon a time" "$work/rust_example.txt"
  fi
  ;;
go)
  gobin=$(command -v go || true)
  [ -n "$gobin" ] || { [ -x /usr/lib/go/bin/go ] && gobin=/usr/lib/go/bin/go; } || true
  [ -n "$gobin" ] || skip "go not found (Debian: golang-go)"
  # Go's build cache does not notice a change to a header outside the package
  # (include/infer/infer.h): one cache per version of the header.
  hdr=$(sha256sum "$src/include/infer/infer.h" | cut -c1-16)
  export GOCACHE="$work/gocache-$hdr" GOPATH="$work/gopath" GOFLAGS="" GOPROXY=off GO111MODULE=on CGO_ENABLED=1
  export CGO_LDFLAGS="-L$libdir -Wl,-rpath,$libdir"
  cd "$src/bindings/go"
  "$gobin" vet ./...
  "$gobin" test -count=1 ./...
  if [ $have_model = 1 ]; then
    "$gobin" run ./examples/stream_story "$model" > "$work/go_example.txt"
    grep -q "Once upon a time" "$work/go_example.txt"
  fi
  ;;
*)
  echo "unknown language $lang" >&2
  exit 2
  ;;
esac
finish
