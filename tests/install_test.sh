#!/usr/bin/env bash
# Installs the build into a scratch prefix, then builds two consumers against
# it: one with find_package(infer) (infer::infer), one with pkg-config.
set -euo pipefail
build=$1
work=$2
rm -rf "$work"
mkdir -p "$work/consumer"
cmake --install "$build" --prefix "$work/prefix" >/dev/null
prefix="$work/prefix"
cat > "$work/consumer/main.c" <<'C'
#include <infer/infer.h>
#include <stdio.h>
int main(void) {
  if (infer_version_number() != INFER_VERSION_NUMBER) return 1;
  printf("libinfer %s\n", infer_version());
  return 0;
}
C
cat > "$work/consumer/CMakeLists.txt" <<'CM'
cmake_minimum_required(VERSION 3.20)
project(consumer C)
find_package(infer REQUIRED)
add_executable(consumer main.c)
target_link_libraries(consumer PRIVATE infer::infer)
CM
cmake -S "$work/consumer" -B "$work/consumer/build" -DCMAKE_PREFIX_PATH="$prefix" >/dev/null
cmake --build "$work/consumer/build" >/dev/null
LD_LIBRARY_PATH="$prefix/lib" "$work/consumer/build/consumer"
libdir=$(ls -d "$prefix"/lib*/pkgconfig | head -1)
flags=$(PKG_CONFIG_PATH="$libdir" pkg-config --cflags --libs infer)
cc -o "$work/consumer/pc" "$work/consumer/main.c" $flags
LD_LIBRARY_PATH="$(dirname "$libdir")" "$work/consumer/pc"
test -e "$(dirname "$libdir")/libinfer.a"
test -e "$prefix/include/infer/infer.h"
echo "install test passed"
