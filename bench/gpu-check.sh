#!/usr/bin/env bash
# The CUDA backend's checks on a machine with an NVIDIA GPU (issue #16), in one
# run of under 8 minutes: the CUDA tests (every kernel against the CPU backend,
# which must run there, not skip), the GPU benchmarks (bin/infer_cuda_bench),
# and a summary. Logs go to WORK/ (below) and are copied into $OUT/gpu-check/
# when $OUT is set (at most 9 files). With two GPUs or more it also runs the
# NCCL communicator's check (tests/mpi/nccl_check.cpp) under mpirun -np 2. Exits non-zero, saying why, when no GPU
# is visible, the build fails, a test fails or a GPU test skipped.
#
# Two ways to get the binaries onto the GPU machine:
#  - prebuilt (for a bare GPU machine without oneDNN, PCRE2, Catch2 ...): on
#    the development machine, with the CUDA toolkit but no GPU,
#        bench/gpu-check.sh pack [BUILD_DIR]       (default BUILD_DIR: build-cuda)
#    builds infer_tests, infer_cuda_bench and libinfer.so there (for the
#    build's CUDA archs, which must include sm_90 for an H100/H200) and writes
#    .gpu-pack/gpu-pack.tar.xz (about 14 MB: the binaries, the shared
#    libraries they need beyond glibc and libstdc++, and ../shared's
#    stories260K.gguf for the end-to-end test). Carry .gpu-pack to the
#    GPU machine and run `bench/gpu-check.sh` in the source tree there: it
#    finds the pack (or GPU_CHECK_PACK=path) and runs it.
#  - from source (a GPU machine with the build dependencies): without a pack,
#        bench/gpu-check.sh [BUILD_DIR]            (default: build-gpu)
#    configures (CUDA_ARCH, default native) and builds there, then runs.
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)

if [ "${1:-}" = pack ]; then
  BUILD=${2:-$ROOT/build-cuda}
  PACK=$ROOT/.gpu-pack
  [ -f "$BUILD/CMakeCache.txt" ] || { echo "pack: $BUILD is not a configured build"; exit 1; }
  grep -q 'infer_cuda_bench' "$BUILD/build.ninja" 2>/dev/null || { echo "pack: $BUILD was configured without CUDA (or without Ninja)"; exit 1; }
  archs=$(grep -o -- '--generate-code=arch=compute_[0-9a-z]*' "$BUILD/build.ninja" | sed 's/.*compute_//' | sort -u | tr '\n' ' ')
  echo "pack: CUDA archs of $BUILD: $archs"
  case " $archs" in *" 90"*) ;; *) echo "pack: warning: no sm_90 in the archs (H100/H200 need 90a)";; esac
  nice -n 19 cmake --build "$BUILD" --target infer infer_tests infer_cuda_bench -- -j2 || { echo "pack: build failed"; exit 1; }
  stage=$(mktemp -d)
  mkdir -p "$stage/gpu-pack/bin" "$stage/gpu-pack/lib"
  cp "$BUILD/tests/infer_tests" "$BUILD/bin/infer_cuda_bench" "$stage/gpu-pack/bin/"
  # The 2-GPU NCCL check (built when the build has MPI and NCCL).
  if cmake --build "$BUILD" --target infer_nccl_check -- -j2 >/dev/null 2>&1; then
    cp "$BUILD/tests/mpi/infer_nccl_check" "$stage/gpu-pack/bin/"
  else
    echo "pack: warning: no infer_nccl_check (a build without MPI or NCCL): the 2-GPU step will fail"
  fi
  cp -L "$BUILD/libinfer.so" "$stage/gpu-pack/lib/libinfer.so.1"
  # The shared libraries the binaries need, but not the C/C++ runtimes (the
  # GPU machine's own, newer ones serve).
  for b in "$BUILD/tests/infer_tests" "$BUILD/bin/infer_cuda_bench" "$stage/gpu-pack/bin/infer_nccl_check"; do
    [ -f "$b" ] && ldd "$b"; done |
    awk '$3 ~ /^\// {print $3}' | sort -u |
    grep -Ev '/(libc|libm|libpthread|libdl|librt|ld-linux[^/]*|libstdc\+\+|libgcc_s)\.so' |
    while read -r l; do cp -L "$l" "$stage/gpu-pack/lib/"; done
  # The model the end-to-end GPU test compares on (../shared does not travel).
  SHARED=${INFER_SHARED_DIR:-$ROOT/../shared}
  if [ -f "$SHARED/models/stories260K.gguf" ]; then
    mkdir -p "$stage/gpu-pack/shared/models" && cp "$SHARED/models/stories260K.gguf" "$stage/gpu-pack/shared/models/"
  else
    echo "pack: warning: $SHARED/models/stories260K.gguf not found: the end-to-end GPU test will skip (and fail the check)"
  fi
  { echo "commit $(git -C "$ROOT" rev-parse HEAD)$(git -C "$ROOT" diff --quiet HEAD -- cuda lib tests bench || echo ' (plus uncommitted changes)')";
    echo "archs $archs"; echo "built $(date -u +%FT%TZ) on $(uname -n)"; } > "$stage/gpu-pack/MANIFEST"
  mkdir -p "$PACK"
  tar -C "$stage" -cJf "$PACK/gpu-pack.tar.xz" gpu-pack
  rm -rf "$stage"
  ls -la "$PACK/gpu-pack.tar.xz"
  echo "pack: carry .gpu-pack (it is in .gitignore) and run bench/gpu-check.sh on the GPU machine"
  exit 0
fi

PACKFILE=${GPU_CHECK_PACK:-$ROOT/.gpu-pack/gpu-pack.tar.xz}
BUILD=${1:-$ROOT/build-gpu}
WORK=$BUILD/gpu-check
[ -f "$PACKFILE" ] && WORK=${TMPDIR:-/tmp}/infer-gpu-check
ARCH=${CUDA_ARCH:-native}
JOBS=${JOBS:-$(nproc)}
mkdir -p "$WORK"
SUMMARY=$WORK/summary.txt
: > "$SUMMARY"
STATUS=0
say() { echo "$*" | tee -a "$SUMMARY"; }
finish() {
  say "result: $([ "$STATUS" = 0 ] && echo PASS || echo FAIL)"
  if [ -n "${OUT:-}" ]; then
    mkdir -p "$OUT/gpu-check"
    for f in summary.txt nvidia-smi.txt configure.log build.log tests.log gpu-tests.log bench.log nccl.log; do
      [ -f "$WORK/$f" ] && cp "$WORK/$f" "$OUT/gpu-check/"
    done
  fi
  exit "$STATUS"
}
fail() { say "FAIL: $*"; STATUS=1; finish; }

say "gpu-check $(date -u +%FT%TZ), source $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo '?')"
# 1. A GPU must be visible: without one this script proves nothing.
command -v nvidia-smi > /dev/null || fail "no nvidia-smi: no NVIDIA driver on this machine"
nvidia-smi > "$WORK/nvidia-smi.txt" 2>&1 || fail "nvidia-smi failed (see nvidia-smi.txt)"
GPUS=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true)
[ "$GPUS" -ge 1 ] || fail "nvidia-smi lists no GPU"
say "gpu: $(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | head -1) (x$GPUS)"

# 2. The binaries: unpacked, or configured and built here.
if [ -f "$PACKFILE" ]; then
  rm -rf "$WORK/gpu-pack"
  tar -C "$WORK" -xJf "$PACKFILE" || fail "cannot unpack $PACKFILE"
  PK=$WORK/gpu-pack
  say "prebuilt: $(tr '\n' ' ' < "$PK/MANIFEST")"
  export LD_LIBRARY_PATH=$PK/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  [ -d "$PK/shared" ] && export INFER_SHARED_DIR=$PK/shared
  TESTS=$PK/bin/infer_tests
  BENCH=$PK/bin/infer_cuda_bench
  NCCL_CHECK=$PK/bin/infer_nccl_check
  LIB=$PK/lib/libinfer.so.1
else
  NVCC=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
  [ -x "$NVCC" ] || fail "no nvcc (set NVCC or install the CUDA toolkit)"
  missing=""
  for m in libpcre2-8 libutf8proc; do pkg-config --exists "$m" 2> /dev/null || missing="$missing $m"; done
  [ -f /usr/include/oneapi/dnnl/dnnl.hpp ] || [ -f /usr/include/dnnl.hpp ] || missing="$missing oneDNN"
  [ -f /usr/include/catch2/catch.hpp ] || missing="$missing catch2"
  [ -z "$missing" ] || fail "missing build dependencies:$missing. Make a pack on the development machine (bench/gpu-check.sh pack) and carry .gpu-pack"
  say "nvcc: $("$NVCC" --version | tail -1), archs $ARCH, $JOBS jobs"
  T0=$(date +%s)
  timeout 120 cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DINFER_CUDA=ON \
    -DCMAKE_CUDA_COMPILER="$NVCC" -DCMAKE_CUDA_ARCHITECTURES="$ARCH" -DINFER_BINDINGS=OFF \
    > "$WORK/configure.log" 2>&1 || fail "configure failed (configure.log)"
  timeout 300 cmake --build "$BUILD" --target infer infer_tests infer_cuda_bench -- -j "$JOBS" \
    > "$WORK/build.log" 2>&1 || fail "build failed (build.log)"
  timeout 120 cmake --build "$BUILD" --target infer_nccl_check -- -j "$JOBS" >> "$WORK/build.log" 2>&1 || true
  say "build: $(( $(date +%s) - T0 )) s"
  TESTS=$BUILD/tests/infer_tests
  BENCH=$BUILD/bin/infer_cuda_bench
  LIB=$BUILD/libinfer.so
  NCCL_CHECK=$BUILD/tests/mpi/infer_nccl_check
fi
export INFER_TEST_TMP=$WORK/tmp
mkdir -p "$INFER_TEST_TMP"

# 3. Tests: the load-time dependencies, the CPU-side layout and factory tests,
# then the GPU tests, which must run here, not skip.
sh "$ROOT/tests/cuda_needed_test.sh" "$LIB" > "$WORK/tests.log" 2>&1 || { say "FAIL: libinfer needs CUDA libraries at load time (tests.log)"; STATUS=1; }
timeout 120 "$TESTS" "[cuda_layout],[cuda]~[gpu]" >> "$WORK/tests.log" 2>&1 || { say "FAIL: layout/factory tests (tests.log)"; STATUS=1; }
say "layout and factory tests: $(grep -E '^(All tests passed|test cases:)' "$WORK/tests.log" | tail -1)"
timeout 240 "$TESTS" "[gpu]" --durations yes > "$WORK/gpu-tests.log" 2>&1
GT=$?
if grep -q "SKIPPED:" "$WORK/gpu-tests.log"; then
  say "FAIL: GPU tests skipped on a GPU machine: $(grep -m1 -o 'SKIPPED:.*' "$WORK/gpu-tests.log")"
  STATUS=1
fi
[ "$GT" = 0 ] || { say "FAIL: GPU tests failed, exit $GT (gpu-tests.log)"; STATUS=1; }
say "gpu tests: $(grep -E '^(All tests passed|test cases:)' "$WORK/gpu-tests.log" | tail -1)"
grep -E ' s: CUDA GPU' "$WORK/gpu-tests.log" | sed 's/^/  /' | tee -a "$SUMMARY" > /dev/null

# 4. Benchmarks (kernel level; end-to-end decode/prefill figures wait for a
# CUDA Backend that keeps activations on the device).
if timeout 200 "$BENCH" > "$WORK/bench.log" 2>&1; then
  say "benchmarks (bin/infer_cuda_bench):"
  sed 's/^/  /' "$WORK/bench.log" | tee -a "$SUMMARY" > /dev/null
else
  say "FAIL: infer_cuda_bench failed (bench.log): $(tail -1 "$WORK/bench.log")"
  STATUS=1
fi
# 5. The NCCL communicator across two GPUs (tensor parallelism, issue #31): one
# rank per GPU under mpirun, all-reduce/all-gather/broadcast checked on device
# buffers and a 16 MB all-reduce timed.
if [ "$GPUS" -lt 2 ]; then
  say "nccl (2 GPUs): skipped: one GPU"
elif ! command -v mpirun > /dev/null; then
  say "FAIL: nccl (2 GPUs): no mpirun on this machine (Debian: openmpi-bin)"; STATUS=1
elif [ ! -x "$NCCL_CHECK" ]; then
  say "FAIL: nccl (2 GPUs): no infer_nccl_check (a build without MPI or NCCL)"; STATUS=1
else
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  if timeout 120 mpirun -np 2 -x LD_LIBRARY_PATH "$NCCL_CHECK" > "$WORK/nccl.log" 2>&1 &&
     grep -q "nccl_check: PASS" "$WORK/nccl.log"; then
    say "nccl (2 GPUs): $(grep -m1 'all-reduce' "$WORK/nccl.log" | sed 's/^nccl_check: //')"
  else
    say "FAIL: nccl (2 GPUs) (nccl.log): $(grep -m1 -E 'FAIL|SKIPPED|rror' "$WORK/nccl.log")"; STATUS=1
  fi
fi

say "not measured: end-to-end decode / prefill tokens/s (the CUDA backend copies activations per op), a peer engine"
finish
