"""`pip install .` at the repository root: the Python package libinfer-py
(import name `infer`), built by the same code as bindings/python/setup.py
(bindings/python/build_libinfer.py: CMake builds libinfer.so.1, the package
bundles it).

    pip install --no-build-isolation .   # offline, Debian's setuptools
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "bindings", "python"))
from build_libinfer import setup_kwargs  # noqa: E402
from setuptools import setup  # noqa: E402

setup(**setup_kwargs("bindings/python"))
