"""Model.embed and Model.rerank on the tiny-bert synth presets (written with
$INFER_CLI synth; skipped when it is not set)."""
import math
import os
import subprocess

import pytest

import infer


def _synth(tmp_path_factory, preset):
    cli = os.environ.get("INFER_CLI")
    if not cli:
        pytest.skip("INFER_CLI not set (the synth presets are written with infer synth)")
    path = tmp_path_factory.mktemp("embed") / f"{preset}.gguf"
    subprocess.run([cli, "synth", "--preset", preset, "--type", "f32", "-o", str(path)], check=True,
                   capture_output=True)
    return path


@pytest.fixture(scope="module")
def bert(tmp_path_factory):
    m = infer.Model(_synth(tmp_path_factory, "tiny-bert"))
    yield m
    m.close()


@pytest.fixture(scope="module")
def reranker(tmp_path_factory):
    m = infer.Model(_synth(tmp_path_factory, "tiny-bert-rerank"))
    yield m
    m.close()


def _rows(x):
    return [list(map(float, r)) for r in x]


def test_embed_shape_and_norm(bert):
    out = bert.embed(["hello world", "the quick brown fox"])
    rows = _rows(out)
    assert len(rows) == 2 and all(len(r) == 64 for r in rows)
    for r in rows:
        assert abs(math.sqrt(sum(v * v for v in r)) - 1.0) < 1e-4
    try:
        import numpy as np
    except ImportError:
        assert isinstance(out, list)
    else:
        assert isinstance(out, np.ndarray) and out.dtype == np.float32 and out.shape == (2, 64)
    # a text embeds the same alone or in a batch, and a single str is one text
    assert _rows(bert.embed("hello world"))[0] == pytest.approx(rows[0], abs=1e-5)


def test_embed_options(bert):
    assert len(_rows(bert.embed(["hello"], dimensions=16))[0]) == 16
    raw = _rows(bert.embed(["hello"], normalize=False))[0]
    assert abs(math.sqrt(sum(v * v for v in raw)) - 1.0) > 1e-3
    per_token = _rows(bert.embed(["hello world"], pooling="none"))
    assert len(per_token) >= 4  # [CLS] hello world [SEP]
    assert len(_rows(bert.embed(["hello"], pooling=infer.Pooling.CLS))) == 1
    long_text = "hello world " * 400
    with pytest.raises(infer.InferError) as e:
        bert.embed([long_text])
    assert e.value.status == infer.Status.ERR_INVALID_ARGUMENT
    assert len(_rows(bert.embed([long_text], truncate=True))) == 1


def test_embed_refusals(bert):
    for bad in ([], [""]):
        with pytest.raises(ValueError):
            bert.embed(bad)
    with pytest.raises(ValueError):
        bert.embed(["x"], pooling="maximum")
    with pytest.raises(ValueError):
        bert.embed(["x"], dimensions=65)
    with pytest.raises(ValueError):  # no classifier head
        bert.rerank("q", ["d"])


def test_rerank(reranker):
    docs = ["the fox", "a dog", "hello"]
    s = reranker.rerank("quick fox", docs)
    assert len(s) == 3 and all(isinstance(v, float) for v in s)
    assert reranker.rerank("quick fox", docs[1:2])[0] == pytest.approx(s[1], abs=1e-5)
