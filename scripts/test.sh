#!/usr/bin/env bash
# Installs what is missing, builds and tests.
#
#   ./scripts/test.sh         the release build and the whole CTest suite
#                             (about 15 minutes on 2 cores): what a contributor
#                             runs before a commit.
#   ./scripts/test.sh --all   the same, then the suite again under
#                             AddressSanitizer + UndefinedBehaviorSanitizer,
#                             short libFuzzer runs of every parser and of C API
#                             call sequences, and the threaded and server tests
#                             under ThreadSanitizer, and last the fresh-root
#                             consumer checks (scripts/consumer-check.sh: the
#                             installed library, pip install, Go, Rust, the
#                             installed CLI): what .ci/run runs, on a fresh
#                             Debian 12 root (scripts/fresh-check.sh test).
#
# The end prints each stage's wall time.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
jobs=$(nproc)
all=0
case "${1:-}" in
  --all) all=1 ;;
  "") ;;
  *) echo "usage: $0 [--all]" >&2; exit 2 ;;
esac
"$root/scripts/deps.sh" --test

stage_t0=$(date +%s)
stage_name=""
stage_log=""
stage() {  # stage NAME: closes the running stage (printing its time), opens NAME
  local now
  now=$(date +%s)
  if [ -n "$stage_name" ]; then
    stage_log+="$(printf '%6d s  %s' $((now - stage_t0)) "$stage_name")"$'\n'
  fi
  stage_name=$1
  stage_t0=$now
  [ -n "$1" ] && echo "== $1"
  return 0
}
finish() {
  stage ""
  echo "== stage times"
  printf '%s' "$stage_log"
}

stage "configure with CMake's default generator (the plain cmake -S . -B build)"
rm -rf "$root/build-plain"
cmake -S "$root" -B "$root/build-plain" >/dev/null
rm -rf "$root/build-plain"

stage "release build and tests"
cmake -S "$root" -B "$root/build" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$root/build" -j "$jobs"
# -LE slow: consumer_python_pip (pip builds libinfer once more) is left to
# scripts/consumer-check.sh, the last stage of --all; run it alone with
# ctest --test-dir build -L slow.
ctest --test-dir "$root/build" --output-on-failure -j "$jobs" -LE slow
if [ "$all" = 0 ]; then
  finish
  echo "release tests passed (./scripts/test.sh --all adds the sanitizers, fuzzers and TSan)"
  exit 0
fi

stage "ASan+UBSan build and tests"
# The sanitizer builds (ASan+UBSan here, TSan below) are configured without MPI
# (-DINFER_MPI=OFF): Open MPI's own libraries are not instrumented and report
# leaks and races of their own (hwloc, PMIx, the shared-memory transport's
# lock-free queues); the MPI code and its tests run in the release build.
cmake -S "$root" -B "$root/build-asan" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DINFER_SANITIZE=ON \
  -DINFER_CUDA=OFF -DINFER_MPI=OFF -DINFER_BENCH=OFF >/dev/null
cmake --build "$root/build-asan" -j "$jobs"
ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  ctest --test-dir "$root/build-asan" --output-on-failure -j "$jobs" -LE slow

stage "fuzzing the GGUF parser (${INFER_FUZZ_SECONDS:-60} s)"
CC=clang CXX=clang++ cmake -S "$root" -B "$root/build-fuzz" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DINFER_FUZZ=ON -DINFER_TESTS=OFF -DINFER_EXAMPLES=OFF -DINFER_BENCH=OFF -DINFER_CUDA=OFF -DINFER_MPI=OFF >/dev/null
cmake --build "$root/build-fuzz" -j "$jobs" --target fuzz_gguf
mkdir -p "$root/build-fuzz/corpus"
"$root/build-fuzz/tests/fuzz/fuzz_gguf" -max_total_time="${INFER_FUZZ_SECONDS:-60}" -max_len=8192 -rss_limit_mb=2048 \
  "$root/build-fuzz/corpus" "$root/tests/fuzz/corpus"

stage "fuzzing sequences of C API calls (${INFER_FUZZ_SECONDS:-60} s)"
cmake --build "$root/build-fuzz" -j "$jobs" --target fuzz_capi
mkdir -p "$root/build-fuzz/corpus-capi"
# allocator_may_return_null: an absurd KV size must come back as OUT_OF_MEMORY, as without ASan.
ASAN_OPTIONS=allocator_may_return_null=1 "$root/build-fuzz/tests/fuzz/fuzz_capi" \
  -max_total_time="${INFER_FUZZ_SECONDS:-60}" -max_len=1024 -rss_limit_mb=4096 -timeout=60 \
  -artifact_prefix="$root/build-fuzz/" "$root/build-fuzz/corpus-capi"

stage "fuzzing the chat-template interpreter (Jinja subset)"
cmake --build "$root/build-fuzz" -j "$jobs" --target fuzz_jinja
mkdir -p "$root/build-fuzz/corpus-jinja"
"$root/build-fuzz/tests/fuzz/fuzz_jinja" -max_total_time="$(( ${INFER_FUZZ_SECONDS:-60} / 2 ))" -max_len=8192 \
  -rss_limit_mb=2048 -timeout=30 -artifact_prefix="$root/build-fuzz/" "$root/build-fuzz/corpus-jinja" \
  "$root/tests/fuzz/corpus-jinja"

stage "fuzzing grammars (GBNF, JSON schema) and infer serve's request parser"
cmake --build "$root/build-fuzz" -j "$jobs" --target fuzz_grammar
half=$(( ${INFER_FUZZ_SECONDS:-60} / 2 ))
mkdir -p "$root/build-fuzz/corpus-grammar" "$root/build-fuzz/corpus-serve"
"$root/build-fuzz/tests/fuzz/fuzz_grammar" -max_total_time="$half" -max_len=4096 -rss_limit_mb=2048 -timeout=30 \
  -artifact_prefix="$root/build-fuzz/" "$root/build-fuzz/corpus-grammar" "$root/tests/fuzz/corpus-grammar"
if cmake --build "$root/build-fuzz" -j "$jobs" --target fuzz_serve_request 2>/dev/null; then
  "$root/build-fuzz/tests/fuzz/fuzz_serve_request" -max_total_time="$half" -max_len=4096 -rss_limit_mb=2048 -timeout=30 \
    -artifact_prefix="$root/build-fuzz/" "$root/build-fuzz/corpus-serve" "$root/tests/fuzz/corpus-serve"
fi

stage "fuzzing the Hugging Face readers (safetensors headers, config.json, tokenizer.json)"
cmake --build "$root/build-fuzz" -j "$jobs" --target fuzz_hf
mkdir -p "$root/build-fuzz/corpus-hf"
"$root/build-fuzz/tests/fuzz/fuzz_hf" -max_total_time="$half" -max_len=8192 -rss_limit_mb=2048 -timeout=30 \
  -artifact_prefix="$root/build-fuzz/" "$root/build-fuzz/corpus-hf" "$root/tests/fuzz/corpus-hf"

stage "ThreadSanitizer build, the threaded tests and infer serve's tests"
# One TSan build for both: the library once, the test binary and the CLI (infer
# serve: its I/O thread, workers and the engine thread) from it.
cmake -S "$root" -B "$root/build-tsan" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DINFER_TSAN=ON \
  -DINFER_CUDA=OFF -DINFER_MPI=OFF -DINFER_BENCH=OFF -DINFER_EXAMPLES=ON -DINFER_BINDINGS=OFF >/dev/null
cmake --build "$root/build-tsan" -j "$jobs" --target infer_tests infer_cli
TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1" ctest --test-dir "$root/build-tsan" --output-on-failure \
  -j "$jobs" -R "thread|^serve_tests$|^serve_hostile_tests$"

stage "fresh-root consumer checks"
# The release build installed, then used as a new user would: pip install into
# a new venv, an outside Go module, the Rust example through pkg-config, the
# installed CLI from /. In the fresh root (.ci/run, scripts/fresh-check.sh) it
# installs into /usr/local with nothing set; elsewhere into a prefix under
# build/, so that a developer's /usr/local is left alone.
if [ "${INFER_FRESH_ROOT:-0}" = 1 ]; then
  "$root/scripts/consumer-check.sh" --build-dir "$root/build"
else
  "$root/scripts/consumer-check.sh" --build-dir "$root/build" --prefix "$root/build/consumer-check-prefix"
fi
finish
echo "all test stages passed"
