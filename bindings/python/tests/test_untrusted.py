"""Issue 27, point 4: values that do not fit their C type are refused by name,
and closing a model or an engine under a live stream ends it with an error."""
import ctypes

import pytest

import infer
from infer import _convert as cv

PROMPT = "Once upon a time"
I32_MAX = 2**31 - 1


# ---- the conversions themselves (no library needed) ----------------------------------------

@pytest.mark.parametrize("ctype,bad", [
    (ctypes.c_int32, 2**31), (ctypes.c_int32, -2**31 - 1), (ctypes.c_int32, 2**40),
    (ctypes.c_uint32, -1), (ctypes.c_uint32, 2**32), (ctypes.c_uint64, -1),
    (ctypes.c_uint64, 2**64), (ctypes.c_size_t, -1), (ctypes.c_int64, 2**63)])
def test_integers_that_do_not_fit_are_refused(ctype, bad):
    with pytest.raises(infer.InferInvalidArgument, match=r"^.*param = "):
        cv.to_int(ctype, bad, "param")
    s = (ctype * 1)()
    s[0] = bad  # what ctypes alone does: wraps silently
    assert s[0] != bad


def test_integer_bounds_and_kinds():
    assert cv.to_int(ctypes.c_int32, I32_MAX, "x") == I32_MAX
    assert cv.to_int(ctypes.c_int32, -2**31, "x") == -2**31
    assert cv.to_int(ctypes.c_uint64, 2**64 - 1, "x") == 2**64 - 1
    assert cv.to_int(ctypes.c_int32, True, "x") == 1
    with pytest.raises(TypeError, match="x must be an integer"):
        cv.to_int(ctypes.c_int32, 5.5, "x")
    with pytest.raises(TypeError, match="x must be an integer"):
        cv.to_int(ctypes.c_int32, "5", "x")


def test_floats_strings_and_timeouts():
    with pytest.raises(infer.InferInvalidArgument, match="t = "):
        cv.to_float(ctypes.c_float, 1e39, "t")
    with pytest.raises(infer.InferInvalidArgument, match="t = "):
        cv.to_float(ctypes.c_float, 10**400, "t")
    assert cv.to_float(ctypes.c_float, float("-inf"), "t") == float("-inf")  # bans a token
    assert cv.to_float(ctypes.c_double, 1e300, "t") == 1e300
    with pytest.raises(infer.InferInvalidArgument, match="s contains a NUL byte at offset 1"):
        cv.to_cstr("a\0b", "s")
    with pytest.raises(infer.InferInvalidArgument, match="s is not valid UTF-8"):
        cv.to_cstr("\ud800", "s")
    assert cv.timeout_ms(None) == -1
    assert cv.timeout_ms(1e12) == -1  # longer than int32 ms: no limit, not a wrapped one
    assert cv.timeout_ms(2**31 / 1000) == -1
    assert cv.timeout_ms(1.5) == 1500
    assert cv.timeout_ms(-3) == 0
    with pytest.raises(infer.InferInvalidArgument):
        cv.timeout_ms(float("nan"))


# ---- every kind of argument, through the API ----------------------------------------------

BAD_KWARGS = [
    ("max_tokens", dict(max_tokens=2**40)),
    ("max_tokens", dict(max_tokens=2**32 + 8)),
    ("max_tokens", dict(max_tokens=-2**31 - 1)),
    ("top_k", dict(top_k=2**31)),
    ("penalty_last_n", dict(penalty_last_n=2**32 + 64)),
    ("seed", dict(seed=-1)),
    ("seed", dict(seed=2**64)),
    ("temperature", dict(temperature=1e39)),
    ("top_p", dict(top_p=-1e300)),
    ("priority", dict(priority=2**31)),
    ("cache_salt", dict(cache_salt=-5)),
    ("ignore_eos", dict(ignore_eos=2**32)),
    ("logit_bias key", dict(logit_bias={2**40: 1.0})),
    ("logit_bias key", dict(logit_bias={5: 0.0, 2**31: -1.0})),
    ("logit_bias key", dict(logit_bias={-2**31 - 1: 1.0})),
    ("logit_bias[5]", dict(logit_bias={5: 1e300})),
    ("stop[1]", dict(stop=["ok", "a\0b"])),
    ("stop[0]", dict(stop="\0")),
    ("prompt[1]", dict(prompt=[1, 2**31])),
    ("prompt[0]", dict(prompt=[-2**31 - 1])),
    ("prompt", dict(prompt="\ud800")),
]


@pytest.mark.parametrize("name,kw", BAD_KWARGS, ids=[f"{n}-{i}" for i, (n, _) in enumerate(BAD_KWARGS)])
def test_generation_arguments_that_do_not_fit_are_refused(model, name, kw):
    kw = dict(kw)
    prompt = kw.pop("prompt", PROMPT)
    e = model.engine
    with pytest.raises(infer.InferInvalidArgument) as ex:
        e.submit(prompt, **kw).close()
    assert name in str(ex.value)
    with pytest.raises(infer.InferInvalidArgument):
        e.submit_n(prompt, 2, **kw)
    assert model.generate(PROMPT, max_tokens=2, temperature=0)  # still usable


def test_token_and_size_arguments_that_do_not_fit_are_refused(model):
    e = model.engine
    for call, name in [(lambda: model.detokenize([5, 2**31]), "tokens[1]"),
                       (lambda: model.detokenize([-2**40]), "tokens[0]"),
                       (lambda: model.token_piece(2**31), "token"),
                       (lambda: model.token_is_eog(2**40), "token"),
                       (lambda: e.submit_n(PROMPT, 2**40), "n = 1099511627776"),
                       (lambda: model.meta("general.\0name"), "key"),
                       (lambda: model.apply_chat_template([{"role": "user", "content": "a\0"}], "chatml"),
                        "messages[0].content"),
                       (lambda: model.apply_chat_template([{"role": "u", "content": "a"}], "chat\0ml"),
                        "template")]:
        with pytest.raises(infer.InferInvalidArgument) as ex:
            call()
        assert name in str(ex.value)
    with e.submit(PROMPT, max_tokens=2, temperature=0) as r:
        with pytest.raises(infer.InferInvalidArgument, match="capacity"):
            r.next_tokens(1, capacity=-1)
        assert r.result(1e12)  # a timeout beyond int32 ms waits, it does not wrap
        assert r.next_text(1e12)[1]
    with pytest.raises(infer.InferInvalidArgument, match="path"):
        infer.Model("/tmp/x\0.gguf")


@pytest.mark.parametrize("name,kw", [
    ("max_seqs", dict(max_seqs=2**40)), ("n_threads", dict(n_threads=2**32 + 1)),
    ("kv_budget_bytes", dict(kv_budget_bytes=-1)), ("kv_blocks", dict(kv_blocks=-2**33)),
    ("kv_type", dict(kv_type=2**32)), ("n_ctx", dict(n_ctx=2**31)),
    ("batch_timeout_ms", dict(batch_timeout_ms="soon"))])
def test_engine_parameters_that_do_not_fit_are_refused(model, name, kw):
    with pytest.raises((infer.InferInvalidArgument, TypeError)) as ex:
        infer.Engine(model, **kw).close()
    assert name in str(ex.value)


# ---- closing under a live stream ------------------------------------------------------------

def test_model_close_under_a_live_stream_raises(model_path):
    m = infer.Model(model_path, engine_params={"n_threads": 1})
    g = m.stream(PROMPT, max_tokens=2000, ignore_eos=True)
    assert next(g)
    m.close()  # closes the model's own engine: the request is cancelled
    with pytest.raises(infer.InferCancelled, match="engine was closed"):
        for _ in g:
            pass
    assert m.closed  # freed once the generator closed its request


def test_engine_close_under_a_live_stream_raises(model_path):
    m = infer.Model(model_path)
    e = infer.Engine(m, n_threads=1)
    r = e.submit(PROMPT, max_tokens=2000, ignore_eos=True)
    it = r.stream(timeout=60)
    assert next(it)
    m.close()  # deferred: the engine (and the request) use it
    e.close()
    with pytest.raises(infer.InferCancelled, match="engine was closed"):
        for _ in it:
            pass
    with pytest.raises(infer.InferCancelled):
        r.result(10)
    assert r.stats.finish_reason == infer.FinishReason.CANCELLED
    assert r.text  # what it had stays readable
    assert not m.closed  # the request still refers to the model
    r.close()
    assert m.closed


def test_own_cancel_is_not_an_error(model):
    r = model.engine.submit(PROMPT, max_tokens=2000, ignore_eos=True)
    it = r.stream(timeout=60)
    next(it)
    r.cancel()
    for _ in it:
        pass
    assert r.finish_reason == infer.FinishReason.CANCELLED
    r.close()
