#!/usr/bin/env bash
# Uses a binding the way an outside project does (CTest's consumer_* tests,
# and scripts/consumer-check.sh on an installed libinfer):
#
#   bindings/consumer_test.sh python WORK_DIR [PYTHON_BUILD_DIR]
#       a new venv (--system-site-packages), then the offline pip install of
#       ./bindings/python, and of the repository root into a second venv
#       (pip install --no-build-isolation --no-index PATH): each builds
#       libinfer with CMake and bundles it; a script outside the checkout then
#       imports infer with nothing set, checks that the bundled library is the
#       one loaded, and generates text. PYTHON_BUILD_DIR is the CMake folder
#       (INFER_PYTHON_BUILD_DIR; empty: the package's default, build-python/).
#   bindings/consumer_test.sh go WORK_DIR [LIB_DIR|pkg-config]
#       an outside module (module example.com/consumer) that requires
#       libinfer/infer v0.0.0 with a replace directive to bindings/go, built
#       with cgo and run. LIB_DIR: CGO_LDFLAGS="-L LIB_DIR -Wl,-rpath,LIB_DIR";
#       pkg-config: the flags from `pkg-config infer`; none: nothing set (libinfer
#       installed where the compiler and the loader look, e.g. /usr/local).
#   bindings/consumer_test.sh rust WORK_DIR [PREFIX|BUILD_DIR]
#       the Rust example (bindings/rust, cargo --offline) built with
#       INFER_LIB_DIR unset, so that infer-sys asks pkg-config; PREFIX: an
#       installed libinfer whose PREFIX/lib*/pkgconfig becomes PKG_CONFIG_PATH
#       (none: pkg-config's own search path); BUILD_DIR: that build, cmake
#       --install'ed into WORK_DIR/prefix first. Checks that the link folder came
#       from pkg-config and that the example runs.
#
# Exit 77 (skipped) when the toolchain is missing, or when the shared model
# ($INFER_SHARED_DIR, default ../shared) is absent (then what needs no model
# ran and passed).
set -euo pipefail
trap 'echo "FAIL: $0 line $LINENO: exit $?" >&2' ERR
lang=${1:?usage: $0 python|go|rust WORK_DIR [ARG]}
work=${2:?usage: $0 python|go|rust WORK_DIR [ARG]}
arg=${3:-}
src=$(cd "$(dirname "$0")/.." && pwd)
shared=${INFER_SHARED_DIR:-$src/../shared}
model="$shared/models/stories260K.gguf"
have_model=1
[ -e "$model" ] || { have_model=0; echo "note: $model is absent: no text is generated"; }
skip() { echo "SKIP: $*"; exit 77; }
fail() { echo "FAIL: $*" >&2; exit 1; }
rm -rf "$work"
mkdir -p "$work"
work=$(cd "$work" && pwd)
unset INFER_LIBRARY INFER_LIB_DIR LD_LIBRARY_PATH
finish() {
  [ $have_model = 1 ] || skip "the $lang consumer generated no text ($model is absent)"
  echo "$lang consumer: passed"
}

case $lang in
python)
  # Debian's python3 (/usr/bin) first: python3-venv, -setuptools and -wheel go with it.
  py=""
  for cand in /usr/bin/python3 "$(command -v python3 || true)"; do
    if [ -n "$cand" ] && [ -x "$cand" ] &&
       "$cand" -c "import ensurepip, venv, setuptools, wheel" 2>/dev/null; then py=$cand; break; fi
  done
  [ -n "$py" ] || skip "no python3 with venv, ensurepip, setuptools and wheel (Debian: python3-venv python3-setuptools python3-wheel)"
  command -v cmake >/dev/null || skip "cmake not found"
  if [ -n "$arg" ]; then export INFER_PYTHON_BUILD_DIR=$arg; fi
  cat > "$work/use_infer.py" <<'PY'
import os
import sys

import infer

model = sys.argv[1] if len(sys.argv) > 1 else ""
pkg = os.path.dirname(os.path.abspath(infer.__file__))
bundled = os.path.join(pkg, "libinfer.so.1")
if not pkg.startswith(os.path.realpath(sys.prefix) + os.sep) and not pkg.startswith(sys.prefix + os.sep):
    sys.exit(f"infer was imported from {pkg}, not from the venv {sys.prefix}")
if not os.path.isfile(bundled) or os.path.islink(bundled):
    sys.exit(f"{bundled} is missing or a symlink")
if os.path.realpath(infer.library_path()) != os.path.realpath(bundled):
    sys.exit(f"loaded {infer.library_path()}, not the bundled {bundled}")
print(f"libinfer {infer.version()} from {infer.library_path()}")
if model:
    with infer.Model(model) as m:
        text = m.generate("Once upon a time", max_tokens=32, temperature=0)
    if not text.strip():
        sys.exit("no text generated")
    print("Once upon a time" + text)
PY
  n=0
  for what in "$src/bindings/python" "$src"; do
    n=$((n + 1))
    venv="$work/venv$n"
    "$py" -m venv --system-site-packages "$venv"
    echo "== pip install --no-build-isolation --no-index $what (venv $venv)"
    t0=$(date +%s)
    if ! "$venv/bin/pip" install --no-build-isolation --no-index --no-cache-dir \
         --disable-pip-version-check -q "$what" > "$work/pip$n.log" 2>&1; then
      tail -n 60 "$work/pip$n.log" >&2
      fail "pip install $what"
    fi
    echo "   installed in $(( $(date +%s) - t0 )) s"
    "$venv/bin/pip" show libinfer-py | sed -n 's/^\(Name\|Version\|Location\): /   \1: /p'
    m=""
    [ $have_model = 1 ] && m=$model
    (cd "$work" && env -u PYTHONPATH "$venv/bin/python" use_infer.py $m) | tee "$work/python$n.txt"
    if [ $have_model = 1 ]; then grep -q "Once upon a time" "$work/python$n.txt" || fail "no story"; fi
    # INFER_LIBRARY still wins over the bundled copy.
    if (cd "$work" && INFER_LIBRARY=/nonexistent/libinfer.so.1 "$venv/bin/python" -c \
          'import infer; infer.version()') > "$work/override$n.txt" 2>&1; then
      fail "INFER_LIBRARY=/nonexistent was not used"
    fi
    grep -q "/nonexistent/libinfer.so.1" "$work/override$n.txt" || fail "INFER_LIBRARY's error does not name it"
  done
  ;;
go)
  gobin=$(command -v go || true)
  [ -n "$gobin" ] || { [ -x /usr/lib/go/bin/go ] && gobin=/usr/lib/go/bin/go; } || true
  [ -n "$gobin" ] || skip "go not found (Debian: golang-go)"
  mod="$work/consumer"
  mkdir -p "$mod"
  # What a user's go.mod says (README.md, "What each binding needs").
  cat > "$mod/go.mod" <<EOF
module example.com/consumer

go 1.19

require libinfer/infer v0.0.0

replace libinfer/infer => $src/bindings/go
EOF
  # The program is the binding's own example, built from the outside module.
  cp "$src/bindings/go/examples/stream_story/main.go" "$mod/main.go"
  export GOCACHE="$work/gocache" GOPATH="$work/gopath" GOFLAGS="" GOPROXY=off GO111MODULE=on CGO_ENABLED=1
  unset CGO_LDFLAGS CGO_CFLAGS
  case "$arg" in
    "") echo "cgo flags: none (libinfer where the compiler and the loader look)" ;;
    pkg-config)
      command -v pkg-config >/dev/null || skip "pkg-config not found"
      CGO_CFLAGS=$(pkg-config --cflags infer)
      CGO_LDFLAGS="$(pkg-config --libs infer) -Wl,-rpath,$(pkg-config --variable=libdir infer)"
      export CGO_CFLAGS CGO_LDFLAGS
      echo "cgo flags from pkg-config: CGO_CFLAGS=$CGO_CFLAGS CGO_LDFLAGS=$CGO_LDFLAGS" ;;
    *)
      libdir=$(cd "$arg" && pwd)
      export CGO_LDFLAGS="-L$libdir -Wl,-rpath,$libdir"
      echo "cgo flags: CGO_LDFLAGS=$CGO_LDFLAGS" ;;
  esac
  (cd "$mod" && "$gobin" build -o "$work/consumer-bin" .)
  [ $have_model = 1 ] || skip "built; not run: no shared model"
  (cd / && "$work/consumer-bin" "$model") | tee "$work/go.txt"
  grep -q "^Once upon a time." "$work/go.txt" || fail "no story"
  ;;
rust)
  . "$src/bindings/find_cargo.sh"
  command -v pkg-config >/dev/null || skip "pkg-config not found"
  if [ -e "$arg/CMakeCache.txt" ]; then  # a build tree: install it into a scratch prefix
    cmake --install "$arg" --prefix "$work/prefix" > "$work/install.log"
    arg=$work/prefix
  fi
  if [ -n "$arg" ]; then
    pcdir=$(ls -d "$arg"/lib*/pkgconfig "$arg"/lib/*/pkgconfig 2>/dev/null | head -1 || true)
    [ -n "$pcdir" ] && [ -e "$pcdir/infer.pc" ] || fail "no infer.pc under $arg"
    export PKG_CONFIG_PATH=$pcdir
  fi
  libdir=$(pkg-config --variable=libdir infer) || fail "pkg-config does not find infer (PKG_CONFIG_PATH=${PKG_CONFIG_PATH:-})"
  echo "pkg-config: infer $(pkg-config --modversion infer), libdir $libdir"
  export CARGO_TARGET_DIR="$work/target" CARGO_HOME="$work/cargo-home"
  cd "$src/bindings/rust"
  "$cargo" build -vv --offline --locked --example stream_story > "$work/cargo.log" 2>&1 ||
    { tail -n 60 "$work/cargo.log" >&2; fail "cargo build"; }
  # infer-sys's build script said where it links from: pkg-config's libdir.
  real_libdir=$(readlink -f "$libdir")
  linked=""
  while read -r d; do
    echo "infer-sys: link search $d"
    [ "$(readlink -f "$d")" = "$real_libdir" ] && linked=1
  done < <(sed -n 's/^\[infer-sys [^]]*\] cargo:rustc-link-search=native=//p' "$work/cargo.log")
  [ -n "$linked" ] || fail "infer-sys did not link from pkg-config's libdir $libdir"
  exe="$work/target/debug/examples/stream_story"
  ldd "$exe" | grep "libinfer" || true
  loaded=$(ldd "$exe" | sed -n 's/^[[:space:]]*libinfer\.so\.1 => \([^ ]*\) .*/\1/p')
  [ -n "$loaded" ] && [ "$(readlink -f "$loaded")" = "$(readlink -f "$real_libdir/libinfer.so.1")" ] ||
    fail "the example loads '$loaded', not $libdir/libinfer.so.1"
  if [ $have_model = 1 ]; then
    (cd / && "$exe" "$model") > "$work/rust.txt"
    head -c 300 "$work/rust.txt"; echo
    grep -q "Once upon a time" "$work/rust.txt" || fail "no story"
  fi
  ;;
*)
  echo "unknown language $lang" >&2
  exit 2
  ;;
esac
finish
