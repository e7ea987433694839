import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
sys.path.insert(0, str(HERE.parent))  # the package from the source tree


def shared_dir() -> Path:
    return Path(os.environ.get("INFER_SHARED_DIR", REPO.parent / "shared"))


@pytest.fixture(scope="session")
def model_path() -> Path:
    p = shared_dir() / "models" / "stories260K.gguf"
    if not p.exists():
        pytest.skip(f"{p} is absent (set INFER_SHARED_DIR)")
    return p


@pytest.fixture(scope="session")
def model(model_path):
    import infer
    m = infer.Model(model_path, engine_params={"n_threads": 2})
    yield m
    m.close()


@pytest.fixture(scope="session")
def layout(tmp_path_factory):
    """The C compiler's layout of the mirrored structs (bindings/layout/infer_layout.c)."""
    exe = os.environ.get("INFER_LAYOUT")
    if not exe:
        exe = str(tmp_path_factory.mktemp("layout") / "infer_layout")
        subprocess.run(["cc", "-std=c99", "-I", str(REPO / "include"),
                        str(REPO / "bindings/layout/infer_layout.c"), "-o", exe], check=True)
    out = subprocess.run([exe], check=True, capture_output=True, text=True).stdout
    table = {}
    for line in out.splitlines():
        parts = line.split()
        table[" ".join(parts[:-1])] = int(parts[-1])
    return table
