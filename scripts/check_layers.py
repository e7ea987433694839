#!/usr/bin/env python3
"""Fails when a folder of lib/, cpu/ or cuda/ includes a folder it may not use.

The allowed dependencies are the table of docs/ARCHITECTURE.md: every
`#include "folder/..."` in a source or header must name the folder itself or
one of its allowed dependencies. The graph below is acyclic (checked here
too), so an include cycle between two folders always fails the build.

usage: check_layers.py SOURCE_DIR [STAMP_FILE]
"""
import os
import re
import sys

# folder -> folders it may include (besides itself and the public header).
ALLOWED = {
    "core": set(),
    "gguf": {"core"},
    "quant": {"core", "gguf"},
    "tokenizer": {"core", "gguf"},
    "kv": {"core"},
    "sampling": {"core"},
    "model": {"core", "gguf", "quant", "tokenizer", "kv"},
    "cpu": {"core", "kv", "quant"},
    "cuda": {"core", "kv", "quant"},
    "engine": {"core", "gguf", "kv", "model", "sampling", "tokenizer", "quant"},
    "tools": {"core", "gguf", "kv", "model", "sampling", "tokenizer", "quant", "engine"},
    "api": {"core", "gguf", "kv", "model", "sampling", "tokenizer", "quant", "engine", "tools"},
}
# Where each folder lives in the tree.
ROOTS = {name: os.path.join("lib", name) for name in ALLOWED}
ROOTS["cpu"] = "cpu"
ROOTS["cuda"] = "cuda"
# Who may include a backend's own headers: only the backend factory.
BACKEND_USERS = {("engine", "cpu"), ("engine", "cuda")}
BACKEND_FILES = {"engine": {"backends.cpp"}}

INCLUDE = re.compile(r'^\s*#\s*include\s+"([a-z0-9_]+)/', re.M)


def check_acyclic():
    state = {}

    def visit(n, path):
        if state.get(n) == 1:
            raise SystemExit("check_layers: the allowed graph has a cycle: " + " -> ".join(path + [n]))
        if state.get(n) == 2:
            return
        state[n] = 1
        for d in ALLOWED[n]:
            visit(d, path + [n])
        state[n] = 2

    for n in ALLOWED:
        visit(n, [])


def main():
    src = sys.argv[1]
    check_acyclic()
    errors = []
    for folder, rel in ROOTS.items():
        top = os.path.join(src, rel)
        if not os.path.isdir(top):
            continue
        for dirpath, _, files in os.walk(top):
            for f in files:
                if not f.endswith((".h", ".hpp", ".c", ".cc", ".cpp", ".cu", ".cuh")):
                    continue
                path = os.path.join(dirpath, f)
                with open(path, encoding="utf-8", errors="replace") as fh:
                    text = fh.read()
                for m in INCLUDE.finditer(text):
                    dep = m.group(1)
                    if dep == folder or dep == "infer" or dep not in ALLOWED:
                        continue
                    if dep in ALLOWED[folder]:
                        continue
                    if (folder, dep) in BACKEND_USERS and f in BACKEND_FILES.get(folder, set()):
                        continue
                    line = text.count("\n", 0, m.start()) + 1
                    errors.append(f"{os.path.relpath(path, src)}:{line}: {folder}/ may not include {dep}/ "
                                  f"(allowed: {', '.join(sorted(ALLOWED[folder])) or 'nothing'})")
    if errors:
        print("check_layers: include edges the layering forbids (docs/ARCHITECTURE.md):", file=sys.stderr)
        for e in errors:
            print("  " + e, file=sys.stderr)
        return 1
    if len(sys.argv) > 2:
        with open(sys.argv[2], "w") as fh:
            fh.write("ok\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
