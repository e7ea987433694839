#!/usr/bin/env bash
# Installs the Debian packages libinfer needs, only those that are missing.
set -euo pipefail
pkgs=(cmake make g++ ninja-build pkg-config libdnnl-dev libeigen3-dev catch2 libbenchmark-dev
      libsentencepiece-dev libxxhash-dev libpcre2-dev libutf8proc-dev python3
      libcpp-httplib-dev nlohmann-json3-dev)
# Open MPI: the MPI communicator (tensor parallelism, `mpirun -np N infer ... --tp N`) and the
# tests that run under mpirun; in both modes, so that --tp works after ./scripts/run.sh.
pkgs+=(openmpi-bin libopenmpi-dev)
if [ "${1:-}" = "--test" ]; then
  # The architecture references (numpy) and the chat-template check (jinja2)
  # are Python scripts run by CTest.
  # The fuzz targets are built with clang's libFuzzer; the Python, Rust and Go
  # bindings are tested with pytest, cargo (Rust 1.63) and go (1.19); the ABI
  # is compared with libabigail's abidiff.
  pkgs+=(clang libclang-rt-14-dev python3-pytest python3-numpy python3-jinja2 cargo golang-go abigail-tools)
  # The Python package is installed offline into fresh venvs (pip install
  # --no-build-isolation: the consumer_python_pip test, scripts/consumer-check.sh).
  pkgs+=(python3-venv python3-pip python3-setuptools python3-wheel)
  # infer serve is checked with the npm `openai` client library, installed by
  # the test itself with Debian's npm (a node that brings its own npm is kept).
  command -v npm >/dev/null 2>&1 || pkgs+=(nodejs npm)
fi
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
