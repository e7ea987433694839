#!/usr/bin/env bash
# cmake --install into a scratch prefix, then out-of-tree consumers built and
# run against it, as a user of the installed package would:
#   - a C program and a C++ program through find_package(infer): infer::infer
#     (run from their build tree, and installed with the documented RPATH
#     setting, without LD_LIBRARY_PATH) and infer::infer_static (C-only and
#     C++ projects);
#   - find_package(infer) for the shared library with oneDNN, PCRE2, utf8proc
#     and the CUDA toolkit made unfindable: still works, and COMPONENTS static
#     then fails with a message;
#   - the same two programs through pkg-config: shared (infer.pc, with
#     -Wl,-rpath from the documented libdir variable) and static (infer-static.pc,
#     with and without --static, linking libinfer.a with cc from C: checked
#     with ldd and readelf -d not to need libinfer.so).
# The programs generate a few greedy tokens when ../shared's model exists
# (INFER_SHARED_DIR), and all print the same text (checked).
#   tests/install_test.sh BUILD_DIR WORK_DIR
set -euo pipefail
build=$1
work=$2
src=$(cd "$(dirname "$0")/.." && pwd)
rm -rf "$work"
mkdir -p "$work/consumer"
prefix="$work/prefix"
cmake --install "$build" --prefix "$prefix" >/dev/null
shared=${INFER_SHARED_DIR:-$src/../shared}
model="$shared/models/stories260K.gguf"
[ -e "$model" ] || model=""
c=$work/consumer
unset LD_LIBRARY_PATH
# The consumers use the generator of the build under test (a fresh machine
# may have ninja and no make).
gen=$(sed -n 's/^CMAKE_GENERATOR:INTERNAL=//p' "$build/CMakeCache.txt" 2>/dev/null || true)
if [ -n "$gen" ]; then
  export CMAKE_GENERATOR="$gen"
elif command -v ninja >/dev/null; then
  export CMAKE_GENERATOR=Ninja
fi

cat > "$c/main.c" <<'C'
#include <infer/infer.h>
#include <stdio.h>
int main(int argc, char **argv) {
  if (infer_version_number() != INFER_VERSION_NUMBER) return 1;
  printf("libinfer %s\n", infer_version());
  if (argc < 2) return 0;
  infer_model *model;
  if (infer_model_load(argv[1], NULL, &model) != INFER_OK) {
    fprintf(stderr, "%s\n", infer_last_error());
    return 1;
  }
  infer_sampling_params sp;
  infer_sampling_params_init(&sp);
  sp.temperature = 0;
  char *text;
  if (infer_generate(model, "Once upon a time", &sp, 16, &text) != INFER_OK) return 1;
  printf("%s\n", text);
  infer_free(text);
  infer_model_free(model);
  return 0;
}
C
cat > "$c/main.cpp" <<'CPP'
#include <infer/infer.h>
#include <cstdio>
#include <memory>
#include <string>
struct ModelFree { void operator()(infer_model *m) const { infer_model_free(m); } };
int main(int argc, char **argv) {
  if (infer_version_number() != INFER_VERSION_NUMBER) return 1;
  std::printf("libinfer %s\n", std::string(infer_version()).c_str());
  if (argc < 2) return 0;
  infer_model *raw = nullptr;
  if (infer_model_load(argv[1], nullptr, &raw) != INFER_OK) return 1;
  std::unique_ptr<infer_model, ModelFree> model(raw);
  infer_sampling_params sp;
  infer_sampling_params_init(&sp);
  sp.temperature = 0;
  char *text = nullptr;
  if (infer_generate(model.get(), "Once upon a time", &sp, 16, &text) != INFER_OK) return 1;
  std::printf("%s\n", std::string(text).c_str());
  infer_free(text);
  return 0;
}
CPP

expected=""
run() { # NAME EXE: runs, checks the output is the same for every consumer
  local out
  out=$("$2" $model)
  if [ -z "$expected" ]; then
    expected=$out
  elif [ "$out" != "$expected" ]; then
    printf 'install test: %s printed\n%s\ninstead of\n%s\n' "$1" "$out" "$expected" >&2
    exit 1
  fi
  echo "  ok  $1"
}
not_linked_to_shared() { # EXE
  if ldd "$1" | grep -q "libinfer\.so"; then
    echo "install test: $1 uses libinfer.so, not libinfer.a" >&2
    exit 1
  fi
}

echo "find_package(infer), shared:"
mkdir -p "$c/cmake_shared"
cat > "$c/cmake_shared/CMakeLists.txt" <<CM
cmake_minimum_required(VERSION 3.20)
project(consumer C CXX)
# The documented way to make installed programs find a non-system libinfer:
set(CMAKE_INSTALL_RPATH_USE_LINK_PATH ON)
find_package(infer 1.0 REQUIRED)
add_executable(consumer_c $c/main.c)
target_link_libraries(consumer_c PRIVATE infer::infer)
add_executable(consumer_cxx $c/main.cpp)
target_link_libraries(consumer_cxx PRIVATE infer::infer)
# ... or, equivalently, per target:
set_target_properties(consumer_cxx PROPERTIES INSTALL_RPATH "\${infer_LIBRARY_DIR}")
if(NOT infer_INSTALL_RPATH_HINT STREQUAL infer_LIBRARY_DIR)
  message(FATAL_ERROR "infer_INSTALL_RPATH_HINT should name the scratch prefix")
endif()
install(TARGETS consumer_c consumer_cxx)
CM
cmake -S "$c/cmake_shared" -B "$c/cmake_shared/build" -DCMAKE_PREFIX_PATH="$prefix" \
  -DCMAKE_INSTALL_PREFIX="$c/installed" >/dev/null
cmake --build "$c/cmake_shared/build" >/dev/null
cmake --install "$c/cmake_shared/build" >/dev/null
run "C, build tree" "$c/cmake_shared/build/consumer_c"
run "C++, build tree" "$c/cmake_shared/build/consumer_cxx"
run "C, installed (CMAKE_INSTALL_RPATH_USE_LINK_PATH)" "$c/installed/bin/consumer_c"
run "C++, installed (INSTALL_RPATH infer_LIBRARY_DIR)" "$c/installed/bin/consumer_cxx"

echo "find_package(infer), static (infer::infer_static):"
mkdir -p "$c/cmake_static_c" "$c/cmake_static_cxx"
cat > "$c/cmake_static_c/CMakeLists.txt" <<CM
cmake_minimum_required(VERSION 3.20)
project(consumer_static C)
find_package(infer REQUIRED COMPONENTS static)
add_executable(consumer_c_static $c/main.c)
target_link_libraries(consumer_c_static PRIVATE infer::infer_static)
CM
cat > "$c/cmake_static_cxx/CMakeLists.txt" <<CM
cmake_minimum_required(VERSION 3.20)
project(consumer_static_cxx CXX)
find_package(infer REQUIRED COMPONENTS static)
add_executable(consumer_cxx_static $c/main.cpp)
target_link_libraries(consumer_cxx_static PRIVATE infer::infer_static)
CM
for d in cmake_static_c cmake_static_cxx; do
  cmake -S "$c/$d" -B "$c/$d/build" -DCMAKE_PREFIX_PATH="$prefix" >/dev/null
  cmake --build "$c/$d/build" >/dev/null
done
not_linked_to_shared "$c/cmake_static_c/build/consumer_c_static"
not_linked_to_shared "$c/cmake_static_cxx/build/consumer_cxx_static"
run "C-only project, libinfer.a" "$c/cmake_static_c/build/consumer_c_static"
run "C++ project, libinfer.a" "$c/cmake_static_cxx/build/consumer_cxx_static"

echo "find_package(infer) without the static library's dependencies:"
nodeps="--no-warn-unused-cli -DCMAKE_DISABLE_FIND_PACKAGE_OneDNN=ON -DCMAKE_DISABLE_FIND_PACKAGE_PkgConfig=ON -DCMAKE_DISABLE_FIND_PACKAGE_CUDAToolkit=ON"
mkdir -p "$c/cmake_nodeps"
cat > "$c/cmake_nodeps/CMakeLists.txt" <<CM
cmake_minimum_required(VERSION 3.20)
project(consumer_nodeps C)
find_package(infer REQUIRED)
if(TARGET infer::infer_static OR infer_static_FOUND)
  message(FATAL_ERROR "infer::infer_static defined without its dependencies")
endif()
add_executable(consumer_nodeps $c/main.c)
target_link_libraries(consumer_nodeps PRIVATE infer::infer)
CM
cmake -S "$c/cmake_nodeps" -B "$c/cmake_nodeps/build" -DCMAKE_PREFIX_PATH="$prefix" $nodeps >/dev/null
cmake --build "$c/cmake_nodeps/build" >/dev/null
run "shared, no dependency found" "$c/cmake_nodeps/build/consumer_nodeps"
sed -i 's/find_package(infer REQUIRED)/find_package(infer REQUIRED COMPONENTS static)/' "$c/cmake_nodeps/CMakeLists.txt"
if cmake -S "$c/cmake_nodeps" -B "$c/cmake_nodeps/build2" -DCMAKE_PREFIX_PATH="$prefix" $nodeps \
     > "$c/cmake_nodeps/static.log" 2>&1; then
  echo "install test: COMPONENTS static was found without its dependencies" >&2
  exit 1
fi
grep -q "infer::infer_static needs the development files" "$c/cmake_nodeps/static.log"
echo "  ok  COMPONENTS static fails: $(grep -o 'infer::infer_static needs the development files.*' "$c/cmake_nodeps/static.log" | head -1) ..."

echo "pkg-config:"
pcdir=$(ls -d "$prefix"/lib*/pkgconfig | head -1)
export PKG_CONFIG_PATH="$pcdir"
libdir=$(pkg-config --variable=libdir infer)
cc -o "$c/pc_c" "$c/main.c" $(pkg-config --cflags --libs infer) -Wl,-rpath,"$libdir"
c++ -o "$c/pc_cxx" "$c/main.cpp" $(pkg-config --cflags --libs infer) -Wl,-rpath,"$libdir"
run "C, pkg-config, -Wl,-rpath,\$(pkg-config --variable=libdir infer)" "$c/pc_c"
run "C++, pkg-config" "$c/pc_cxx"
# libinfer.a through the infer-static package (its Libs name the archive by
# its path: -linfer would find libinfer.so, installed beside it), as given,
# with and without --static, from a C program linked by cc, so the C++
# runtime and the other dependencies must come from the .pc file.
for mode in "" --static; do
  static_flags=$(pkg-config $mode --cflags --libs infer-static)
  case " $static_flags " in *" -lstdc++ "*) ;; *) echo "install test: pkg-config $mode --libs infer-static lacks -lstdc++" >&2; exit 1 ;; esac
  case " $static_flags " in *" -linfer "*) echo "install test: pkg-config $mode --libs infer-static says -linfer (libinfer.so)" >&2; exit 1 ;; esac
  cc -o "$c/pc_c_static" "$c/main.c" $static_flags
  c++ -o "$c/pc_cxx_static" "$c/main.cpp" $static_flags
  for exe in "$c/pc_c_static" "$c/pc_cxx_static"; do
    not_linked_to_shared "$exe"
    if readelf -d "$exe" | grep -q "NEEDED.*libinfer"; then
      echo "install test: $exe needs libinfer.so (readelf -d)" >&2
      exit 1
    fi
  done
  run "C, pkg-config ${mode:+$mode }--libs infer-static, libinfer.a" "$c/pc_c_static"
  run "C++, pkg-config ${mode:+$mode }--libs infer-static, libinfer.a" "$c/pc_cxx_static"
done

# The installed CLI from / (no ../shared there): it finds the installed
# default model, or, without one, says to give -m.
echo "installed infer, run from /:"
if [ -n "$model" ]; then
  test -e "$prefix/share/infer/models/stories260K.gguf"
  out=$(cd / && env -u INFER_SHARED_DIR "$prefix/bin/infer" run -p "Once upon a time" -n 8 --temp 0 -t 1 2>&1)
  echo "$out" | grep -q "Once upon a time" || { echo "install test: the installed infer did not run its default model: $out" >&2; exit 1; }
  echo "  ok  infer run with the installed default model"
fi
rc=0
out=$(cd / && INFER_SHARED_DIR=/nonexistent "$prefix/bin/infer" run -p x -n 1 2>&1) || rc=$?
if [ "$rc" != 2 ] || ! echo "$out" | grep -q -- "-m MODEL"; then
  echo "install test: a missing default model should be a usage error naming -m (exit $rc): $out" >&2
  exit 1
fi
echo "  ok  no default model: $(echo "$out" | head -1)"

test -e "$libdir/libinfer.a"
test -e "$libdir/libinfer.so.1"
test -e "$prefix/include/infer/infer.h"
printf 'every consumer printed:\n%s\n' "$expected"
[ -n "$model" ] || echo "note: $shared/models/stories260K.gguf is absent: the consumers only printed the version"
echo "install test passed"
