#!/usr/bin/env bash
# What a new user of the installed libinfer and of its bindings does, checked
# end to end. Meant for a fresh Debian 12 root, run as root with no environment
# variable set (the last stage of ./scripts/test.sh --all, which .ci/run runs
# through scripts/fresh-check.sh):
#
#   scripts/consumer-check.sh [--prefix DIR] [--build-dir DIR]
#
#   1. installs what is missing (scripts/deps.sh --test: compilers, libraries,
#      python3-venv/-pip/-setuptools/-wheel, golang-go, cargo, pkg-config);
#   2. builds the release build (--build-dir, default build/: Release, Ninja;
#      only the installed targets when it is not built yet) and cmake --install's
#      it into --prefix (default /usr/local, then ldconfig);
#   3. python:  pip install --no-build-isolation --no-index of ./bindings/python
#               and of the repository root into new venvs (each builds libinfer
#               with CMake and bundles it), then text generated with nothing set;
#      go:      an outside module with `require libinfer/infer v0.0.0` and a
#               replace directive, built and run (cgo flags: none for
#               /usr/local, else from pkg-config);
#      rust:    the Rust example built with INFER_LIB_DIR unset: infer-sys finds
#               the installed library with pkg-config (PKG_CONFIG_PATH for a
#               prefix pkg-config does not search), then run;
#      cli:     the installed `infer`, run from / with -m on the shared model,
#               and without -m: it runs the installed default model or fails
#               with a message naming -m.
# Prints PASS/FAIL (SKIP when the shared model is absent) per check and exits
# nonzero when any failed. The shared model: $INFER_SHARED_DIR, default ../shared.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
prefix=/usr/local
build=$root/build
while [ $# -gt 0 ]; do
  case $1 in
    --prefix) prefix=${2:?--prefix DIR}; shift 2 ;;
    --prefix=*) prefix=${1#--prefix=}; shift ;;
    --build-dir) build=${2:?--build-dir DIR}; shift 2 ;;
    --build-dir=*) build=${1#--build-dir=}; shift ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "usage: $0 [--prefix DIR] [--build-dir DIR]" >&2; exit 2 ;;
  esac
done
mkdir -p "$prefix"
prefix=$(cd "$prefix" && pwd)
shared=${INFER_SHARED_DIR:-$root/../shared}
model="$shared/models/stories260K.gguf"
have_model=1
[ -e "$model" ] || { have_model=0; echo "note: $model is absent: the checks that need it are skipped"; }
work=$(mktemp -d "${TMPDIR:-/tmp}/infer-consumer-check.XXXXXX")
t_start=$(date +%s)

echo "== consumer-check: dependencies"
"$root/scripts/deps.sh" --test

echo "== consumer-check: release build ($build) and cmake --install to $prefix"
t0=$(date +%s)
if [ ! -e "$build/CMakeCache.txt" ]; then
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
fi
cmake --build "$build" -j "$(nproc)" --target infer infer_static infer_cli
cmake --install "$build" --prefix "$prefix" > "$work/install.log"
if [ "$prefix" = /usr/local ] && [ "$(id -u)" = 0 ]; then ldconfig; fi
echo "   built and installed in $(( $(date +%s) - t0 )) s"

declare -a results=()
failed=0
check() {  # check NAME COMMAND...: runs it, logs to $work/NAME.log, prints PASS/FAIL/SKIP
  local name=$1 rc=0 t0
  shift
  t0=$(date +%s)
  echo "== consumer-check: $name"
  "$@" > "$work/$name.log" 2>&1 || rc=$?
  local took=$(( $(date +%s) - t0 ))
  if [ $rc = 0 ]; then
    results+=("PASS  $name (${took} s)")
  elif [ $rc = 77 ] && [ $have_model = 0 ]; then
    results+=("SKIP  $name (no shared model)")
  else
    failed=1
    results+=("FAIL  $name (exit $rc, log $work/$name.log)")
    tail -n 40 "$work/$name.log" | sed 's/^/   | /'
  fi
  echo "   ${results[-1]}"
}

# None of the user's variables reach a check: it gets what a new shell has.
clean_env=(env -u INFER_LIBRARY -u INFER_LIB_DIR -u LD_LIBRARY_PATH -u PKG_CONFIG_PATH -u CGO_LDFLAGS
           -u CGO_CFLAGS -u INFER_PYTHON_BUILD_DIR -u INFER_CMAKE_ARGS -u PYTHONPATH)

check python "${clean_env[@]}" INFER_SHARED_DIR="$shared" "$root/bindings/consumer_test.sh" python "$work/python"

if [ "$prefix" = /usr/local ]; then
  check go "${clean_env[@]}" INFER_SHARED_DIR="$shared" "$root/bindings/consumer_test.sh" go "$work/go"
  check rust "${clean_env[@]}" INFER_SHARED_DIR="$shared" "$root/bindings/consumer_test.sh" rust "$work/rust"
else
  pcdir=$(ls -d "$prefix"/lib*/pkgconfig "$prefix"/lib/*/pkgconfig 2>/dev/null | head -1 || true)
  check go "${clean_env[@]}" INFER_SHARED_DIR="$shared" PKG_CONFIG_PATH="$pcdir" \
    "$root/bindings/consumer_test.sh" go "$work/go" pkg-config
  check rust "${clean_env[@]}" INFER_SHARED_DIR="$shared" "$root/bindings/consumer_test.sh" rust "$work/rust" "$prefix"
fi

cli_with_model() {
  [ $have_model = 1 ] || return 77
  local out
  out=$(cd / && "${clean_env[@]}" -u INFER_SHARED_DIR "$prefix/bin/infer" run -m "$model" \
          -p "Once upon a time" -n 16 --temp 0 -t 1 2>&1)
  echo "$out"
  echo "$out" | grep -q "Once upon a time"
}
cli_default() {
  local out rc=0
  out=$(cd / && "${clean_env[@]}" -u INFER_SHARED_DIR "$prefix/bin/infer" run \
          -p "Once upon a time" -n 16 --temp 0 -t 1 2>&1) || rc=$?
  echo "$out"
  if [ $rc = 0 ]; then
    echo "$out" | grep -q "Once upon a time" || { echo "exit 0 without the story"; return 1; }
    echo "outcome: ran the installed default model"
  else
    echo "$out" | grep -q -- "-m" || { echo "exit $rc without naming -m"; return 1; }
    echo "outcome: exit $rc, the message names -m"
  fi
}
check cli_from_root_with_model cli_with_model
check cli_from_root_default_model cli_default

echo "== consumer-check results ($(( $(date +%s) - t_start )) s; logs in $work)"
printf '%s\n' "${results[@]}"
if [ $failed = 0 ]; then
  echo "consumer-check: all checks passed"
else
  echo "consumer-check: FAILED"
  exit 1
fi
