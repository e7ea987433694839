"""setuptools glue shared by bindings/python/setup.py and the repository root's
setup.py: both build the distribution `libinfer-py` (import name `infer`).

Building the package runs CMake on the repository (Release, only the shared
library target `infer`, no tests, examples, benchmarks or bindings tests) and
copies libinfer.so.1 (the real file, not a symlink) into the package, next to
infer/_lib.py, which loads it first unless INFER_LIBRARY is set.

Environment (all optional):
  INFER_SOURCE_DIR              the libinfer checkout (default: found from this file)
  INFER_PYTHON_BUILD_DIR        the CMake build folder (default: SOURCE/build-python)
  INFER_CMAKE_ARGS              extra arguments for the CMake configure step
                                (split like a shell would, e.g. "-DINFER_CUDA=OFF")
  CMAKE_BUILD_PARALLEL_LEVEL    parallel compile jobs (default: the number of CPUs)
  CMAKE_GENERATOR               CMake's own; default Ninja when `ninja` is found
This module is not installed: it only runs at build time.
"""
from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

from setuptools import Distribution
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent  # bindings/python
DIST_NAME = "libinfer-py"
LIB_NAME = "libinfer.so.1"


def source_dir() -> Path:
    """The libinfer checkout: INFER_SOURCE_DIR, else two levels above this file."""
    env = os.environ.get("INFER_SOURCE_DIR")
    cand = Path(env).resolve() if env else HERE.parents[1]
    if not (cand / "CMakeLists.txt").is_file() or not (cand / "include" / "infer" / "infer.h").is_file():
        raise SystemExit(
            f"{DIST_NAME}: the libinfer sources (CMakeLists.txt, include/infer/infer.h) are not at {cand}; "
            "build from a checkout (pip install ./bindings/python or pip install . at its root) "
            "or set INFER_SOURCE_DIR to one")
    return cand


def version() -> str:
    """MAJOR.MINOR.PATCH from infer.h's INFER_VERSION_* macros."""
    header = (source_dir() / "include" / "infer" / "infer.h").read_text(encoding="utf-8")
    parts = []
    for name in ("MAJOR", "MINOR", "PATCH"):
        m = re.search(rf"^#define INFER_VERSION_{name} (\d+)\s*$", header, re.M)
        if not m:
            raise SystemExit(f"{DIST_NAME}: INFER_VERSION_{name} not found in infer.h")
        parts.append(m.group(1))
    return ".".join(parts)


def _run(cmd, **kw) -> None:
    print("+ " + " ".join(shlex.quote(str(c)) for c in cmd), flush=True)
    subprocess.check_call([str(c) for c in cmd], **kw)


def build_library() -> Path:
    """Configures (once) and builds the shared library; returns libinfer.so.1's real file."""
    cmake = shutil.which("cmake")
    if not cmake:
        raise SystemExit(f"{DIST_NAME}: cmake not found; it builds libinfer (Debian: scripts/deps.sh "
                         "installs it with the compilers and libraries libinfer needs)")
    src = source_dir()
    build = Path(os.environ.get("INFER_PYTHON_BUILD_DIR") or src / "build-python").resolve()
    build.mkdir(parents=True, exist_ok=True)
    configure = [cmake, "-S", src, "-B", build, "-DCMAKE_BUILD_TYPE=Release",
                 "-DINFER_TESTS=OFF", "-DINFER_EXAMPLES=OFF", "-DINFER_BENCH=OFF",
                 "-DINFER_BINDINGS=OFF", "-DINFER_FUZZ=OFF", "-DINFER_SANITIZE=OFF", "-DINFER_TSAN=OFF"]
    # The generator is fixed by the first configure of a folder: only choose it then.
    if not (build / "CMakeCache.txt").exists() and not os.environ.get("CMAKE_GENERATOR") \
            and shutil.which("ninja"):
        configure += ["-G", "Ninja"]
    configure += shlex.split(os.environ.get("INFER_CMAKE_ARGS", ""))
    _run(configure)
    jobs = os.environ.get("CMAKE_BUILD_PARALLEL_LEVEL") or str(os.cpu_count() or 1)
    _run([cmake, "--build", build, "--target", "infer", "--parallel", jobs])
    lib = build / LIB_NAME
    if not lib.exists():
        raise SystemExit(f"{DIST_NAME}: the build made no {lib}")
    return lib.resolve()  # libinfer.so.1 -> libinfer.so.1.4.0: the real file


class BuildPyWithLibrary(build_py):
    """build_py, then libinfer built by CMake and copied into the package."""

    def run(self) -> None:
        super().run()
        if self.dry_run:
            return
        lib = build_library()
        dest = Path(self.build_lib) / "infer" / LIB_NAME
        dest.parent.mkdir(parents=True, exist_ok=True)
        if dest.is_symlink() or dest.exists():
            dest.unlink()
        shutil.copyfile(lib, dest)  # the bytes, never a link
        os.chmod(dest, 0o755)
        print(f"{DIST_NAME}: bundled {lib} as {dest}", flush=True)


class BinaryDistribution(Distribution):
    """The wheel holds a compiled library: platform-specific, installed to platlib."""

    def has_ext_modules(self) -> bool:
        return True


def setup_kwargs(package_dir: str) -> dict:
    """setup() arguments; package_dir is the folder that holds infer/, relative to
    the setup.py that calls this (its working directory when pip builds)."""
    readme = (HERE / "README.md").read_text(encoding="utf-8")
    build_base = str(Path(os.environ.get("INFER_PYTHON_BUILD_DIR") or source_dir() / "build-python")
                     / "setuptools")
    return dict(
        name=DIST_NAME,
        version=version(),
        description="Python bindings (ctypes) for libinfer, an embeddable LLM inference library, "
                    "with the library built in",
        long_description=readme,
        long_description_content_type="text/markdown",
        python_requires=">=3.8",
        license="See LICENSE in the libinfer repository",
        classifiers=["Programming Language :: Python :: 3", "Operating System :: POSIX :: Linux"],
        packages=["infer"],
        package_dir={"infer": f"{package_dir}/infer" if package_dir != "." else "infer"},
        package_data={"infer": ["py.typed"]},
        zip_safe=False,
        distclass=BinaryDistribution,
        cmdclass={"build_py": BuildPyWithLibrary},
        # setuptools' own build folder (build/ by default is the CMake build at the root).
        options={"build": {"build_base": build_base}},
    )


if __name__ == "__main__":
    print(version() if sys.argv[1:] == ["--version"] else build_library())
