import ctypes
import os
import threading
import time

import pytest

import infer
from infer import _lib as c

PROMPT = "Once upon a time"


# ---- the library, its version and the mirrored layouts ------------------------------------

def test_version_checked_at_load(layout):
    assert infer.version_number() == layout["version_number"]
    assert infer.version() == "{}.{}.{}".format(layout["version_number"] // 10000,
                                                layout["version_number"] // 100 % 100,
                                                layout["version_number"] % 100)


def test_wrong_major_refused(monkeypatch):
    monkeypatch.setattr(c, "ABI_MAJOR", 99)
    with pytest.raises(infer.LibraryNotFound, match="this binding needs"):
        c.load_library()


def test_struct_layouts_match_c(layout):
    for cname, mirror in c.MIRRORS.items():
        assert ctypes.sizeof(mirror) == layout[f"{cname} sizeof"], cname
        c_fields = sorted(k.split(".", 1)[1] for k in layout if k.startswith(cname + "."))
        py_fields = sorted(f[0] for f in mirror._fields_)
        assert c_fields == py_fields, cname
        for name in py_fields:
            assert getattr(mirror, name).offset == layout[f"{cname}.{name}"], f"{cname}.{name}"
    for key, size in layout.items():
        if key.endswith(" enum"):
            assert size == 4, key


# ---- models ------------------------------------------------------------------------------

def test_load_and_info(model):
    info = model.info
    assert info.architecture == "llama"
    assert info.n_vocab == 512
    assert model.meta("general.architecture") == "llama"
    assert model.meta("no.such.key") is None
    assert len(model.tensors()) == info.n_tensors


def test_tokenize_roundtrip(model):
    toks = model.tokenize("Hello world, a story.")
    assert toks[0] == model.info.bos_token
    assert model.detokenize(toks) == "Hello world, a story."
    assert model.tokenize("Hello", add_bos=False)[0] != model.info.bos_token
    assert b"".join(model.token_piece(t) for t in toks[1:]).strip() == b"Hello world, a story."


def test_context_manager_frees(model_path):
    with infer.Model(model_path) as m:
        with infer.Engine(m, n_threads=1) as e:
            assert e.generate(PROMPT, max_tokens=4, temperature=0)
        assert e._g.handle is None
        assert not m.closed
    assert m.closed
    with pytest.raises(infer.InferError):
        m.info


def test_model_close_waits_for_engines(model_path):
    m = infer.Model(model_path)
    e = infer.Engine(m, n_threads=1)
    m.close()  # deferred: the engine still uses it
    assert e.generate(PROMPT, max_tokens=4, temperature=0)
    e.close()
    assert m.closed


# ---- generation ------------------------------------------------------------------------

def c_generate(model, prompt, max_tokens):
    """infer_generate through the same library: the C API's greedy text."""
    L = c.lib()
    sp = c.SamplingParams()
    L.infer_sampling_params_init(ctypes.byref(sp))
    sp.temperature = 0
    out = ctypes.c_void_p()
    assert L.infer_generate(model.handle, prompt.encode(), ctypes.byref(sp), max_tokens,
                            ctypes.byref(out)) == 0
    text = ctypes.string_at(out.value).decode()
    L.infer_free(out)
    return text


@pytest.mark.parametrize("prompt", [PROMPT, "The little dog", ""])
def test_greedy_equals_c_api(model, prompt):
    expected = c_generate(model, prompt, 48)
    assert expected
    assert model.generate(prompt, max_tokens=48, temperature=0) == expected
    assert "".join(model.stream(prompt, max_tokens=48, temperature=0)) == expected


def test_greedy_equals_cli(model, model_path):
    cli = os.environ.get("INFER_CLI")
    if not cli:
        pytest.skip("INFER_CLI not set")
    import subprocess
    out = subprocess.run([cli, "run", "-m", str(model_path), "-p", PROMPT, "-n", "32", "--temp",
                          "0"], check=True, capture_output=True, text=True).stdout
    assert out.startswith(PROMPT)
    assert out[len(PROMPT):].rstrip("\n") == model.generate(PROMPT, max_tokens=32, temperature=0)


def test_generate_excludes_prompt_and_seeds(model):
    a = model.generate(PROMPT, max_tokens=32, temperature=0.9, seed=7)
    b = model.generate(PROMPT, max_tokens=32, temperature=0.9, seed=7)
    assert a == b
    assert not a.startswith(PROMPT)


def test_stream_pieces_never_split_utf8(model):
    # Only the three byte tokens of "€" (E2 82 AC) may be drawn: most sequences
    # are invalid or incomplete UTF-8, and next_text must never release half
    # a character. Each piece is decoded strictly by the binding.
    byte_ids = [3 + 0xE2, 3 + 0x82, 3 + 0xAC]
    assert [model.token_piece(t) for t in byte_ids] == [b"\xe2", b"\x82", b"\xac"]
    bias = {t: 0.0 for t in range(model.n_vocab)}
    for t in range(model.n_vocab):
        bias[t] = float("-inf")
    for t in byte_ids:
        bias[t] = 0.0
    for seed in range(8):
        with model.engine.submit(PROMPT, max_tokens=60, temperature=1.0, top_k=0, top_p=1.0,
                                 min_p=0.0, seed=seed, logit_bias=bias, ignore_eos=True) as req:
            pieces = list(req.stream(timeout=60))
            assert "".join(pieces) == req.text
            assert req.stats.n_generated_tokens == 60
    # and ordinary text arrives in several pieces
    with model.engine.submit(PROMPT, max_tokens=200, temperature=0, ignore_eos=True) as req:
        pieces = []
        while True:
            piece, done = req.next_text(timeout=1.0)
            if piece:
                pieces.append(piece)
            if done:
                break
        assert "".join(pieces) == req.text


def test_stream_timeout_cancels(model):
    req = model.engine.submit(PROMPT, max_tokens=2000, temperature=0, ignore_eos=True)
    with pytest.raises(TimeoutError):
        for _ in req.stream(timeout=0.001):
            time.sleep(0.01)
    req.wait(10)
    assert req.finish_reason in (infer.FinishReason.CANCELLED, infer.FinishReason.LENGTH)
    req.close()


def test_wait_reads_nothing(model):
    # wait() only waits: the tokens and the text are still there to read.
    req = model.engine.submit(PROMPT, max_tokens=24, temperature=0, ignore_eos=True)
    assert req.wait(10)
    tokens, finished = req.next_tokens(0, capacity=64)
    assert len(tokens) == 24 and finished
    assert "".join(req.stream(timeout=10)) == req.text
    assert req.wait(0)  # finished: at once
    req.close()


def test_many_prompts_at_once(model):
    prompts = [f"{PROMPT} {w}" for w in ("a cat", "a dog", "a bird", "a king", "Tim", "Sue",
                                         "the sun", "a tree", "a boat", "the sea", "a cake",
                                         "a frog")]
    batch = model.generate_batch(prompts, max_tokens=24, temperature=0)
    assert len(batch) == len(prompts)
    for p, text in zip(prompts, batch):
        assert text == c_generate(model, p, 24)
    samples = model.engine.submit_n(PROMPT, 4, max_tokens=16, temperature=1.0, seed=3)
    texts = [r.result(30) for r in samples]
    assert len(texts) == 4
    for r in samples:
        r.close()


def test_threads_share_a_model(model):
    expected = c_generate(model, PROMPT, 24)
    results = []

    def work():
        results.append(model.generate(PROMPT, max_tokens=24, temperature=0))

    ts = [threading.Thread(target=work) for _ in range(6)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert results == [expected] * 6


def test_cancel_from_another_thread(model):
    req = model.engine.submit(PROMPT, max_tokens=1500, temperature=0.8, ignore_eos=True)
    first = threading.Event()

    def canceller():
        first.wait(10)
        req.cancel()

    t = threading.Thread(target=canceller)
    t.start()
    n = 0
    for piece in req.stream(timeout=60):
        n += 1
        first.set()
    t.join()
    st = req.stats
    assert st.finish_reason == infer.FinishReason.CANCELLED
    assert st.n_generated_tokens < 1500
    req.close()


def test_closing_a_stream_early_cancels(model):
    gen = model.stream(PROMPT, max_tokens=1500, ignore_eos=True)
    next(gen)
    t0 = time.monotonic()
    gen.close()  # frees (and so cancels) the request
    model.engine.wait_idle()
    assert model.engine.stats.n_running == 0
    assert time.monotonic() - t0 < 5


def test_stats_dataclasses(model):
    with model.engine.submit(PROMPT, max_tokens=8, temperature=0, ignore_eos=True) as req:
        req.result(30)
        st = req.stats
    assert isinstance(st, infer.RequestStats)
    assert st.finish_reason == infer.FinishReason.LENGTH
    assert st.status == infer.Status.OK
    assert st.n_generated_tokens == 8 and st.ttft_ms > 0
    es = model.engine.stats
    assert isinstance(es, infer.EngineStats) and es.n_finished >= 1


def test_chat(model):
    assert "chatml" in infer.chat_templates()
    msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
    prompt = model.apply_chat_template(msgs, template="chatml")
    assert prompt.endswith("<|im_start|>assistant\n")
    assert model.chat_template() is None  # stories260K has none
    reply = model.chat(msgs, template="chatml", max_tokens=16, temperature=0)
    assert isinstance(reply, str)
    with pytest.raises(infer.InferUnsupported):
        model.apply_chat_template(msgs, template="no-such-template")
    with pytest.raises(infer.InferInvalidArgument):
        model.apply_chat_template([{"role": "robot", "content": "x"}], template="chatml")
    # A Jinja template with tools, rendered by libinfer's interpreter.
    tmpl = ("{% for t in tools %}[{{ t.name }}]{% endfor %}{% for m in messages %}<{{ m.role }}>"
            "{{ m.content | trim }}{% if m.tool_calls %}{{ m.tool_calls | tojson }}{% endif %}{% endfor %}")
    ctx = {"messages": [{"role": "user", "content": " é "},
                        {"role": "assistant", "content": "", "tool_calls": [{"name": "f", "arguments": {"x": 1}}]}],
           "tools": [{"name": "f"}]}
    assert model.apply_chat_template_json(ctx, template=tmpl) == \
        '[f]<user>é<assistant>[{"name": "f", "arguments": {"x": 1}}]'
    with pytest.raises(infer.InferInvalidArgument):
        model.apply_chat_template_json({"messages": 3}, template="chatml")


# ---- errors --------------------------------------------------------------------------------

def test_missing_file():
    with pytest.raises(infer.InferIOError) as e:
        infer.Model("/nonexistent/model.gguf")
    assert e.value.status == infer.Status.ERR_IO
    assert isinstance(e.value, OSError)
    assert e.value.message


def test_corrupt_file(tmp_path, model_path):
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGUF\x03\x00\x00\x00" + b"\xff" * 200)  # absurd counts
    with pytest.raises(infer.InferError) as e:
        infer.Model(bad)
    assert e.value.status == infer.Status.ERR_FORMAT
    assert isinstance(e.value, ValueError)
    trunc = tmp_path / "trunc.gguf"
    trunc.write_bytes(model_path.read_bytes()[:5000])
    with pytest.raises(infer.InferError) as e:
        infer.Model(trunc)
    assert e.value.message


def test_bad_params(model):
    with pytest.raises(infer.InferInvalidArgument) as e:
        model.generate(PROMPT, max_tokens=-1)
    assert e.value.status == infer.Status.ERR_INVALID_ARGUMENT
    with pytest.raises(ValueError):
        model.generate(PROMPT, top_p=7.0)
    with pytest.raises(ValueError):
        model.generate([100000])  # token id out of range
    with pytest.raises(TypeError):
        model.generate(PROMPT, no_such_option=1)
    with pytest.raises(TypeError):
        infer.Engine(model, no_such_option=1)
    with pytest.raises(infer.InferError):
        infer.Engine(model, kv_block_size=-5)
    assert model.generate(PROMPT, max_tokens=4, temperature=0)  # still usable


# ---- leaks -----------------------------------------------------------------------------------

def _rss_kb():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") // 1024


def test_no_leak_across_1000_cycles(model_path):
    def cycle(i):
        with infer.Model(model_path) as m:
            with infer.Engine(m, n_threads=1, kv_blocks=64, max_seqs=2) as e:
                with e.submit(PROMPT, max_tokens=2, temperature=0) as r:
                    r.result(10)
        try:
            infer.Model("/nonexistent.gguf")
        except infer.InferIOError:
            pass

    for i in range(100):
        cycle(i)
    before = _rss_kb()
    for i in range(1000):
        cycle(i)
    grown = _rss_kb() - before
    assert grown < 4096, f"RSS grew by {grown} KiB over 1000 cycles"


def test_close_while_other_threads_use_the_handles(model_path):
    # close() waits for calls in flight on other threads (infer.h: a handle
    # must not be freed while another thread uses it), later calls raise.
    m = infer.Model(model_path)
    e = infer.Engine(m, n_threads=1)
    req = e.submit(PROMPT, max_tokens=1500, ignore_eos=True)
    errors = []
    stop = threading.Event()

    def poke():
        while not stop.is_set():
            try:
                req.stats
                req.cancel()
                m.tokenize("hello")
                e.stats
            except infer.InferInvalidArgument:
                pass  # closed
            except Exception as ex:  # pragma: no cover
                errors.append(ex)
                return

    ts = [threading.Thread(target=poke) for _ in range(4)]
    for t in ts:
        t.start()
    time.sleep(0.05)
    req.close()
    e.close()
    m.close()
    stop.set()
    for t in ts:
        t.join()
    assert not errors
    assert m.closed
    with pytest.raises(infer.InferInvalidArgument):
        req.text


def test_tensor_parallel_accessors_on_a_whole_model(model, model_path):
    assert model.tp_rank == 0 and model.tp_size == 1
    with pytest.raises(infer.InferInvalidArgument, match="whole"):
        model.follow()  # a whole model has no rank 0 engine to follow
    with pytest.raises(infer.InferInvalidArgument, match="tensor_parallel"):
        infer.Engine(model, tensor_parallel=2)
    with infer.Engine(model, n_threads=2, tensor_parallel=1, tp_timeout_ms=5000) as e:
        with e.submit(PROMPT, max_tokens=4, temperature=0, ignore_eos=True) as req:
            req.result(30)
        st = e.stats
    assert (st.tp_comm_calls, st.tp_comm_bytes, st.tp_comm_seconds) == (0, 0, 0.0)
    with infer.Model(model_path, tensor_parallel=1) as one:
        assert one.tp_size == 1
