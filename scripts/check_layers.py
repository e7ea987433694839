#!/usr/bin/env python3
"""Fails when a folder of lib/, cpu/ or cuda/ includes a folder it may not use.

The allowed dependencies are the table of docs/ARCHITECTURE.md: every
`#include "folder/..."` in a source or header must name the folder itself or
one of its allowed dependencies. The graph below is acyclic (checked here
too), so an include cycle between two folders always fails the build.

An include that names a project folder another way (`#include <kv/...>`, or a
relative `#include "../engine/..."`) is refused too, so the check cannot be
walked around.

usage: check_layers.py SOURCE_DIR [STAMP_FILE]
       check_layers.py --self-test     (CTest: the rules on small made-up trees)
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
    "hf": {"core", "gguf", "quant", "tokenizer"},
    "kv": {"core"},
    "sampling": {"core"},
    # Collective communication (MPI, NCCL, in-process): what tensor parallelism runs on.
    "dist": {"core"},
    "model": {"core", "gguf", "quant", "tokenizer", "kv", "hf", "dist"},
    "cpu": {"core", "kv", "quant"},
    "cuda": {"core", "kv", "quant"},
    # The backends layer: the factory, the one folder that names cpu/ and cuda/.
    "backends": {"core", "kv", "quant", "cpu", "cuda"},
    "engine": {"core", "gguf", "kv", "model", "sampling", "tokenizer", "quant", "backends", "dist"},
    "tools": {"core", "gguf", "kv", "model", "sampling", "tokenizer", "quant", "engine", "hf", "backends", "dist"},
    "api": {"core", "gguf", "kv", "model", "sampling", "tokenizer", "quant", "engine", "tools", "hf", "backends", "dist"},
}
# Where each folder lives in the tree.
ROOTS = {name: os.path.join("lib", name) for name in ALLOWED}
ROOTS["cpu"] = "cpu"
ROOTS["cuda"] = "cuda"
# Who may include a backend's own headers: only lib/backends/ (the factory),
# whose allowed edges above say so; no other folder has cpu/ or cuda/ in its set.

INCLUDE = re.compile(r'^\s*#\s*include\s+"([a-z0-9_]+)/', re.M)
# Other spellings of a project include: <folder/...> or a relative "../...".
EVASIVE = re.compile(r'^\s*#\s*include\s+(?:<([a-z0-9_]+)/|"(\.\./)[^"]*")', re.M)


def check_acyclic(allowed):
    state = {}

    def visit(n, path):
        if state.get(n) == 1:
            raise SystemExit("check_layers: the allowed graph has a cycle: " + " -> ".join(path + [n]))
        if state.get(n) == 2:
            return
        state[n] = 1
        for d in allowed[n]:
            visit(d, path + [n])
        state[n] = 2

    for n in allowed:
        visit(n, [])


def check(src):
    """The forbidden include edges under src, as 'file:line: message' strings."""
    check_acyclic(ALLOWED)
    errors = []
    for folder, rel in ROOTS.items():
        top = os.path.join(src, rel)
        if not os.path.isdir(top):
            continue
        for dirpath, _, files in os.walk(top):
            for f in sorted(files):
                if not f.endswith((".h", ".hpp", ".c", ".cc", ".cpp", ".cu", ".cuh")):
                    continue
                path = os.path.join(dirpath, f)
                with open(path, encoding="utf-8", errors="replace") as fh:
                    text = fh.read()
                where = lambda m: f"{os.path.relpath(path, src)}:{text.count(chr(10), 0, m.start()) + 1}"
                for m in INCLUDE.finditer(text):
                    dep = m.group(1)
                    if dep == folder or dep == "infer" or dep not in ALLOWED:
                        continue
                    if dep in ALLOWED[folder]:
                        continue
                    errors.append(f"{where(m)}: {folder}/ may not include {dep}/ "
                                  f"(allowed: {', '.join(sorted(ALLOWED[folder])) or 'nothing'})")
                for m in EVASIVE.finditer(text):
                    if m.group(1) and m.group(1) not in ALLOWED and m.group(1) != "infer":
                        continue  # a system header such as <sys/stat.h>
                    errors.append(f"{where(m)}: include project headers as \"folder/file.h\" "
                                  f"(no <...>, no ../) so that the layering can check them")
    return errors


def self_test():
    """The rules on made-up trees: each case must give exactly the errors expected."""
    import tempfile

    def tree(files):
        d = tempfile.mkdtemp(prefix="check_layers_")
        for rel, text in files.items():
            os.makedirs(os.path.dirname(os.path.join(d, rel)), exist_ok=True)
            with open(os.path.join(d, rel), "w") as fh:
                fh.write(text)
        return d

    ok_tree = {
        "lib/core/error.h": "#include <vector>\n#include <sys/stat.h>\n",
        "lib/gguf/gguf.h": '#include "core/error.h"\n',
        "lib/kv/kv.h": '#include "core/error.h"\n#include "kv/other.h"\n',
        "lib/model/model.h": '#include "gguf/gguf.h"\n#include "kv/kv.h"\n',
        "lib/engine/engine.h": '#include "model/model.h"\n#include "infer/infer.h"\n',
        "lib/engine/engine.cpp": '#include "backends/backends.h"\n',
        "lib/backends/backends.cpp": '#include "cpu/cpu.h"\n#include "cuda/cuda.h"\n#include "kv/kv.h"\n',
        "lib/tools/synth.cpp": '#include "engine/engine.h"\n#include "gguf/gguf.h"\n',
        "lib/api/c_api.cpp": '#include "tools/synth.h"\n#include "engine/engine.h"\n',
        "cpu/cpu.h": '#include "kv/kv.h"\n#include "quant/formats.h"\n',
    }
    cases = [  # (name, files added to ok_tree, substrings of the expected errors)
        ("allowed edges only", {}, []),
        ("cycle kv -> engine", {"lib/kv/bad.h": '#include "engine/engine.h"\n'}, ["kv/ may not include engine/"]),
        ("cycle gguf -> model", {"lib/gguf/bad.cpp": '#include "model/model.h"\n'}, ["gguf/ may not include model/"]),
        ("tokenizer -> model", {"lib/tokenizer/vocab.cpp": '#include "model/model.h"\n'},
         ["tokenizer/ may not include model/"]),
        ("runtime -> tools", {"lib/engine/bad.cpp": '#include "tools/synth.h"\n'}, ["engine/ may not include tools/"]),
        ("backend outside the factory", {"lib/engine/engine.cpp": '#include "cpu/cpu.h"\n'},
         ["engine/ may not include cpu/"]),
        ("backend -> model", {"cpu/bad.cpp": '#include "model/model.h"\n'}, ["cpu/ may not include model/"]),
        ("engine -> cuda, even in the old factory file", {"lib/engine/backends.cpp": '#include "cuda/cuda.h"\n'},
         ["engine/ may not include cuda/"]),
        ("model -> backends", {"lib/model/bad.cpp": '#include "backends/backends.h"\n'},
         ["model/ may not include backends/"]),
        ("cpu -> backends", {"cpu/bad.h": '#include "backends/backends.h"\n'}, ["cpu/ may not include backends/"]),
        ("backends -> model", {"lib/backends/bad.cpp": '#include "model/model.h"\n'},
         ["backends/ may not include model/"]),
        ("angle brackets", {"lib/kv/sneaky.h": "#include <engine/engine.h>\n"}, ["no <...>, no ../"]),
        ("relative path", {"lib/kv/sneaky.cpp": '#include "../engine/engine.h"\n'}, ["no <...>, no ../"]),
    ]
    failures = 0
    for name, extra, want in cases:
        files = dict(ok_tree)
        files.update(extra)
        got = check(tree(files))
        good = len(got) == len(want) and all(any(w in g for g in got) for w in want)
        print(f"  {'ok  ' if good else 'FAIL'} {name}" + ("" if good else f": got {got}"))
        failures += not good
    cyclic = {k: set(v) for k, v in ALLOWED.items()}
    cyclic["core"] = {"engine"}
    try:
        check_acyclic(cyclic)
        print("  FAIL an allowed graph with a cycle is refused")
        failures += 1
    except SystemExit as e:
        print("  ok   an allowed graph with a cycle is refused: " + str(e).split(": ", 1)[1])
    print(f"check_layers self-test: {len(cases) + 1 - failures}/{len(cases) + 1} as expected")
    return 1 if failures else 0


def main():
    if len(sys.argv) == 2 and sys.argv[1] == "--self-test":
        return self_test()
    if len(sys.argv) < 2:
        print(__doc__.strip().splitlines()[-2], file=sys.stderr)
        return 2
    errors = check(sys.argv[1])
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
