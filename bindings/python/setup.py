"""Builds the distribution libinfer-py (import name `infer`): CMake builds
libinfer.so.1 from this checkout and the package bundles it (build_libinfer.py).

    pip install --no-build-isolation ./bindings/python   # offline, Debian's setuptools
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from build_libinfer import setup_kwargs  # noqa: E402
from setuptools import setup  # noqa: E402

setup(**setup_kwargs("."))
