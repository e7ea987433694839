"""Python bindings for libinfer (pure ctypes; no compiler needed).

    import infer
    with infer.Model("stories260K.gguf") as model:
        print(model.generate("Once upon a time", max_tokens=64, temperature=0))
        for piece in model.stream("Once upon a time"):
            print(piece, end="", flush=True)

The shared library is found through $INFER_LIBRARY, the install prefix, the
source checkout's build*/ folders, or the system's library path.

Threading: a Model may be used from many threads. An Engine runs its own
background thread (infer_engine_start); submit, stream and cancel from any
thread. No Python code ever runs on the engine thread: streaming polls
infer_request_next_text with a timeout (the GIL is released while waiting).
"""
from __future__ import annotations

import ctypes
import enum
import json
import os
import threading
import time
import weakref
from ctypes import byref, c_char_p, c_int32, c_size_t, c_void_p, POINTER
from typing import (Any, Dict, Iterable, Iterator, List, Mapping, Optional, Sequence, Tuple,
                    Union)

from . import _convert as _cv
from . import _lib as _c
from ._lib import LibraryNotFound, lib as _get_lib

__all__ = [
    "Model", "Engine", "Request", "InferError", "Status", "FinishReason", "KVType", "Policy",
    "Backend", "Pooling", "ModelInfo", "TensorInfo", "RequestStats", "EngineStats", "ChatMessage",
    "LibraryNotFound", "version", "version_number", "chat_templates", "library_path",
]
__version__ = "1.0.0"

PathLike = Union[str, "os.PathLike[str]"]
ChatMessage = Mapping[str, str]  # {"role": "user", "content": "..."}


class Status(enum.IntEnum):
    OK = 0
    ERR_IO = 1
    ERR_FORMAT = 2
    ERR_UNSUPPORTED = 3
    ERR_OUT_OF_MEMORY = 4
    ERR_INVALID_ARGUMENT = 5
    ERR_CANCELLED = 6
    ERR_BACKEND = 7
    ERR_INTERNAL = 8
    ERR_BUFFER_TOO_SMALL = 9
    ERR_NOT_FOUND = 10
    ERR_BUSY = 11


class FinishReason(enum.IntEnum):
    NONE = 0
    STOP = 1
    LENGTH = 2
    CANCELLED = 3
    ERROR = 4


class KVType(enum.IntEnum):
    F32 = 0
    F16 = 1
    INT8 = 2


class Policy(enum.IntEnum):
    CONTINUOUS = 0
    STATIC = 1
    DYNAMIC = 2


class Pooling(enum.IntEnum):
    """infer_pooling: how token vectors become one embedding (Model.embed)."""
    DEFAULT = -1
    NONE = 0
    MEAN = 1
    CLS = 2
    LAST = 3
    RANK = 4


class Backend(enum.IntEnum):
    AUTO = 0
    CPU = 1
    CUDA = 2


def _status(value: int) -> Union[Status, int]:
    try:
        return Status(value)
    except ValueError:
        return value


class InferError(Exception):
    """A libinfer call failed: .status (Status) and .message (infer_last_error)."""

    def __init__(self, status: int, message: str, function: str = "") -> None:
        self.status = _status(status)
        self.message = message
        self.function = function
        name = self.status.name if isinstance(self.status, Status) else str(status)
        super().__init__(f"{function + ': ' if function else ''}{name}: {message}")


# Subclasses that also derive from the matching builtin, so `except ValueError`,
# `except OSError` and `except MemoryError` work as Python users expect.
class InferIOError(InferError, OSError):
    def __init__(self, status: int, message: str, function: str = "") -> None:
        InferError.__init__(self, status, message, function)


class InferFormatError(InferError, ValueError):
    pass


class InferInvalidArgument(InferError, ValueError):
    pass


class InferOutOfMemory(InferError, MemoryError):
    pass


class InferCancelled(InferError):
    pass


class InferNotFound(InferError, KeyError):
    def __str__(self) -> str:  # KeyError would quote the message
        return Exception.__str__(self)


class InferUnsupported(InferError, NotImplementedError):
    pass


_ERRORS = {
    Status.ERR_IO: InferIOError,
    Status.ERR_FORMAT: InferFormatError,
    Status.ERR_INVALID_ARGUMENT: InferInvalidArgument,
    Status.ERR_OUT_OF_MEMORY: InferOutOfMemory,
    Status.ERR_CANCELLED: InferCancelled,
    Status.ERR_NOT_FOUND: InferNotFound,
    Status.ERR_UNSUPPORTED: InferUnsupported,
}
__all__ += [c.__name__ for c in set(_ERRORS.values())]


def _raise(status: int, function: str = "") -> None:
    msg = _get_lib().infer_last_error().decode("utf-8", "replace")
    raise _ERRORS.get(status, InferError)(status, msg, function)  # type: ignore[arg-type]


def _check(status: int, function: str = "") -> None:
    if status != 0:
        _raise(status, function)


def version() -> str:
    """Version of the loaded libinfer, "MAJOR.MINOR.PATCH"."""
    return _get_lib().infer_version().decode()


def version_number() -> int:
    return int(_get_lib().infer_version_number())


def library_path() -> str:
    """Path of the libinfer shared library in use."""
    return _get_lib()._infer_path  # type: ignore[attr-defined]


def chat_templates() -> List[str]:
    """Names of the built-in chat templates."""
    L = _get_lib()
    return [L.infer_chat_template_name(i).decode() for i in range(L.infer_chat_template_count())]


def _to_bytes(text: Union[str, bytes]) -> bytes:
    return text if isinstance(text, bytes) else text.encode("utf-8")


def _text_bytes(text: Union[str, bytes], name: str) -> bytes:
    """Text passed with its length (NUL bytes allowed): str as UTF-8, bytes as is."""
    if isinstance(text, (bytes, bytearray)):
        return bytes(text)
    if not isinstance(text, str):
        raise TypeError(f"{name} must be str, bytes or a list of token ids, not {type(text).__name__}")
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError as e:
        raise InferInvalidArgument(Status.ERR_INVALID_ARGUMENT,
                                   f"{name} is not valid UTF-8 text ({e.reason} at {e.start})") from None


def _sized_string(call: Any, function: str, initial: int = 256) -> bytes:
    """Runs call(buf, size, needed_ptr) with the grow-and-retry convention."""
    size = initial
    while True:
        buf = ctypes.create_string_buffer(size)
        needed = c_size_t(0)
        st = call(buf, size, byref(needed))
        if st == Status.ERR_BUFFER_TOO_SMALL and needed.value > size:
            size = needed.value
            continue
        _check(st, function)
        return buf.value


class _Guard:
    """A native handle shared by threads: calls hold it in use; retire()
    stops new calls, waits for the ones in flight and returns the handle to
    free (infer.h: a handle must not be freed while another thread uses it)."""

    def __init__(self, handle: Optional[int], what: str) -> None:
        self.handle = handle
        self.what = what
        self._cv = threading.Condition()
        self._busy = 0

    def call(self, lib: Any, name: str, *args: Any) -> Any:
        with self._cv:
            h = self.handle
            if h is None:
                raise InferInvalidArgument(Status.ERR_INVALID_ARGUMENT, f"the {self.what} is closed")
            self._busy += 1
        try:
            return getattr(lib, name)(h, *args)
        finally:
            with self._cv:
                self._busy -= 1
                if self._busy == 0:
                    self._cv.notify_all()

    def retire(self) -> Optional[int]:
        with self._cv:
            h, self.handle = self.handle, None
            while self._busy:
                self._cv.wait()
        return h


from ._types import (EngineStats, ModelInfo, RequestStats, TensorInfo,  # noqa: E402
                     _from_struct)


# ---- model -----------------------------------------------------------------------------------

class Model:
    """A loaded GGUF model (immutable; safe to use from many threads).

    generate/stream/chat use an engine the model creates on first use
    (engine_params= on the constructor configures it); create Engine objects
    for more control. close() (or `with`) frees the model once every engine
    built on it is closed.
    """

    def __init__(self, path: PathLike, *, backend: Backend = Backend.AUTO, use_mmap: bool = True,
                 vocab_only: bool = False, engine_params: Optional[Dict[str, Any]] = None,
                 tensor_parallel: int = 0) -> None:
        """tensor_parallel N > 1 (libinfer >= 1.6): this process is one of the
        N ranks of an MPI job (mpirun -np N python ...) and loads 1/N of the
        weights; rank 0 creates engines, ranks 1..N-1 call follow(). The
        host's own MPI communicator is not offered here (MPI_COMM_WORLD)."""
        L = _get_lib()
        self._lib = L
        self._raw: Optional[int] = None  # freed once closed and no engine uses it
        self._g = _Guard(None, "model")  # direct calls
        self._users = 0
        self._closing = False
        self._lock = threading.Lock()
        self._engine: Optional[Engine] = None
        self._engine_lock = threading.Lock()
        self._engine_params = dict(engine_params or {})
        p = _c.ModelParams()
        L.infer_model_params_init(byref(p))
        _cv.set_field(p, "backend", backend)
        p.use_mmap = 1 if use_mmap else 0
        p.vocab_only = 1 if vocab_only else 0
        if tensor_parallel:
            if version_number() < 10600:
                raise InferUnsupported(Status.ERR_UNSUPPORTED,
                                       f"libinfer {version()} has no tensor parallelism (1.6 or later needed)")
            _cv.set_field(p, "tensor_parallel", tensor_parallel)
        h = c_void_p()
        _check(L.infer_model_load(_cv.to_cstr(os.fsencode(os.fspath(path)), "path"), byref(p),
                                  byref(h)), "infer_model_load")
        self._raw = h.value
        self._g = _Guard(h.value, "model")
        self.path = os.fspath(path)

    def _c(self, name: str, *args: Any) -> Any:
        return self._g.call(self._lib, name, *args)

    # lifecycle
    def __enter__(self) -> "Model":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        """Frees the model (deferred until every Engine built on it is closed)."""
        with self._engine_lock:
            if self._engine is not None:
                self._engine.close()
                self._engine = None
        self._g.retire()  # no direct call any more; waits for those in flight
        with self._lock:
            self._closing = True
            self._free_if_unused()

    def _free_if_unused(self) -> None:
        if self._closing and self._users == 0 and self._raw is not None:
            self._lib.infer_model_free(self._raw)
            self._raw = None

    def _hold(self) -> None:
        """One more user of a model an open engine already uses (a request:
        its handle refers to the model's vocabulary until it is freed)."""
        with self._lock:
            assert self._raw is not None and self._users > 0
            self._users += 1

    def _acquire(self) -> int:
        with self._lock:
            if self._raw is None or self._closing:
                raise InferInvalidArgument(Status.ERR_INVALID_ARGUMENT, "the model is closed")
            self._users += 1
            return self._raw

    def _release(self) -> None:
        with self._lock:
            self._users -= 1
            self._free_if_unused()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass

    @property
    def handle(self) -> int:
        """The raw infer_model pointer (for the C API through ctypes)."""
        h = self._g.handle
        if h is None:
            raise InferInvalidArgument(Status.ERR_INVALID_ARGUMENT, "the model is closed")
        return h

    @property
    def closed(self) -> bool:
        return self._raw is None

    # information
    @property
    def info(self) -> ModelInfo:
        s = _c.ModelInfoC()
        self._lib.infer_model_info_init(byref(s))
        _check(self._c("infer_model_get_info", byref(s)), "infer_model_get_info")
        return _from_struct(ModelInfo, s)

    @property
    def n_vocab(self) -> int:
        return self.info.n_vocab

    # tensor parallelism (libinfer >= 1.6; an older library's models are whole)
    @property
    def tp_rank(self) -> int:
        """This process's rank in the model's tensor-parallel group (0 for a whole model)."""
        if not hasattr(self._lib, "infer_model_tp_rank"):
            return 0
        return int(self._c("infer_model_tp_rank"))

    @property
    def tp_size(self) -> int:
        """The model's tensor-parallel group size (1 for a whole model)."""
        if not hasattr(self._lib, "infer_model_tp_size"):
            return 1
        return int(self._c("infer_model_tp_size"))

    def follow(self, **params: Any) -> None:
        """On ranks 1..N-1 of a tensor-parallel model: runs rank 0's engine
        passes on this rank's weights until rank 0 closes its engine (blocks).
        params: the same engine parameters as rank 0's Engine (checked).
        InferInvalidArgument on rank 0 or for a whole model."""
        if not hasattr(self._lib, "infer_engine_follow"):
            raise InferUnsupported(Status.ERR_UNSUPPORTED,
                                   f"libinfer {version()} has no tensor parallelism (1.6 or later needed)")
        bad = set(params) - _ENGINE_KEYS
        if bad:
            raise TypeError(f"unknown engine parameter(s): {', '.join(sorted(bad))}")
        p = _c.EngineParams()
        self._lib.infer_engine_params_init(byref(p))
        for k, v in params.items():
            _cv.set_field(p, k, v)
        _check(self._c("infer_engine_follow", byref(p)), "infer_engine_follow")

    def meta(self, key: str) -> Optional[str]:
        """A metadata value as text, or None when the key is absent."""
        k = _cv.to_cstr(key, "key")
        try:
            raw = _sized_string(lambda b, n, nd: self._c("infer_model_meta", k, b, n, nd), "infer_model_meta")
        except InferNotFound:
            return None
        return raw.decode("utf-8", "replace")

    def tensors(self) -> List[TensorInfo]:
        out = []
        for i in range(self._c("infer_model_tensor_count")):
            s = _c.TensorInfoC()
            s.struct_size = ctypes.sizeof(s)
            _check(self._c("infer_model_tensor", i, byref(s)), "infer_model_tensor")
            out.append(TensorInfo(s.name.decode(), s.type.decode(),
                                  tuple(s.dims[: s.n_dims]), s.n_bytes))
        return out

    # tokens
    def tokenize(self, text: Union[str, bytes], add_bos: Optional[bool] = None,
                 special: bool = False) -> List[int]:
        """Token ids of text. add_bos None: as the vocabulary says."""
        data = _text_bytes(text, "text")
        bos = -1 if add_bos is None else int(bool(add_bos))
        cap = len(data) + 8
        while True:
            arr = (c_int32 * cap)()
            n = c_size_t(0)
            st = self._c("infer_tokenize", data, len(data), bos, int(special), arr,
                                          cap, byref(n))
            if st == Status.ERR_BUFFER_TOO_SMALL and n.value > cap:
                cap = n.value
                continue
            _check(st, "infer_tokenize")
            return list(arr[: n.value])

    def detokenize(self, tokens: Sequence[int], render_special: bool = False) -> str:
        arr = _cv.array(c_int32, tokens, "tokens")
        raw = _sized_string(lambda b, n, nd: self._c("infer_detokenize", arr, len(tokens), int(render_special), b, n, nd), "infer_detokenize",
            initial=max(64, 8 * len(tokens)))
        return raw.decode("utf-8", "replace")

    def token_piece(self, token: int) -> bytes:
        token = _cv.to_int(c_int32, token, "token")
        buf = ctypes.create_string_buffer(256)
        n = c_size_t(0)
        st = self._c("infer_token_piece", token, buf, 256, byref(n))
        if st == Status.ERR_BUFFER_TOO_SMALL:
            buf = ctypes.create_string_buffer(n.value)
            st = self._c("infer_token_piece", token, buf, n.value, byref(n))
        _check(st, "infer_token_piece")
        return buf.raw[: n.value]

    def token_is_eog(self, token: int) -> bool:
        return bool(self._c("infer_token_is_eog", _cv.to_int(c_int32, token, "token")))

    # chat
    def chat_template(self) -> Optional[str]:
        """The built-in template the model's chat template matches, "jinja" when
        it matches none but libinfer's Jinja interpreter renders it (None: the
        model has no template)."""
        try:
            return _sized_string(lambda b, n, nd: self._c("infer_chat_template_detect", b, n, nd), "infer_chat_template_detect").decode()
        except InferNotFound:
            return None

    def apply_chat_template(self, messages: Iterable[ChatMessage], template: Optional[str] = None,
                            add_generation_prompt: bool = True) -> str:
        msgs = list(messages)
        keep = [(_cv.to_cstr(m["role"], f"messages[{i}].role"),
                 _cv.to_cstr(m["content"], f"messages[{i}].content")) for i, m in enumerate(msgs)]
        arr = (_c.ChatMessageC * max(1, len(keep)))()
        for i, (r, c) in enumerate(keep):
            arr[i].role = r
            arr[i].content = c
        name = _cv.to_cstr(template, "template")
        raw = _sized_string(lambda b, n, nd: self._c("infer_chat_apply_template", name, arr, len(keep), int(add_generation_prompt), b, n, nd),
            "infer_chat_apply_template", initial=1024)
        return raw.decode("utf-8")

    def apply_chat_template_json(self, context: Dict[str, Any], template: Optional[str] = None) -> str:
        """Renders a conversation given as Hugging Face's apply_chat_template
        variables (messages with tool calls, tools, enable_thinking, ...)."""
        name = _cv.to_cstr(template, "template")
        ctx = _cv.to_cstr(json.dumps(context, ensure_ascii=False), "context")
        raw = _sized_string(lambda b, n, nd: self._c("infer_chat_apply_template_json", name, ctx, b, n, nd),
            "infer_chat_apply_template_json", initial=1024)
        return raw.decode("utf-8")

    def chat(self, messages: Iterable[ChatMessage], template: Optional[str] = None,
             stream: bool = False, **kw: Any) -> Union[str, Iterator[str]]:
        """Renders the conversation with the chat template and generates the
        assistant's reply (stopping at the template's end-of-turn texts)."""
        prompt = self.apply_chat_template(messages, template, True)
        name = template or self.chat_template() or ""
        stops = list(kw.pop("stop", None) or [])
        i = 0
        while name:
            s = self._lib.infer_chat_template_stop(_cv.to_cstr(name, "template"), i)
            if not s:
                break
            stops.append(s.decode())
            i += 1
        kw.setdefault("add_bos", False)
        kw.setdefault("parse_special", True)
        if stream:
            return self.stream(prompt, stop=stops, **kw)
        return self.generate(prompt, stop=stops, **kw)

    # generation (through the model's own engine)
    @property
    def engine(self) -> "Engine":
        """The engine generate/stream/chat use (created on first use)."""
        with self._engine_lock:
            if self._engine is None:
                self._engine = Engine(self, **self._engine_params)
            return self._engine

    def generate(self, prompt: Union[str, Sequence[int]], max_tokens: int = 64,
                 temperature: float = 0.8, **kw: Any) -> str:
        """The text generated after prompt (the prompt is not included).
        Keywords: top_k, top_p, min_p, repeat_penalty, frequency_penalty,
        presence_penalty, penalty_last_n, seed, stop, add_bos, parse_special,
        ignore_eos, priority, timeout (seconds)."""
        return self.engine.generate(prompt, max_tokens=max_tokens, temperature=temperature, **kw)

    def stream(self, prompt: Union[str, Sequence[int]], max_tokens: int = 64,
               temperature: float = 0.8, **kw: Any) -> Iterator[str]:
        """Yields the generated text in pieces (never a split UTF-8 sequence).
        Closing the generator early cancels the request."""
        return self.engine.stream(prompt, max_tokens=max_tokens, temperature=temperature, **kw)

    def generate_batch(self, prompts: Sequence[Union[str, Sequence[int]]], max_tokens: int = 64,
                       temperature: float = 0.8, **kw: Any) -> List[str]:
        """Generates for many prompts at once (batched by the engine)."""
        return self.engine.generate_batch(prompts, max_tokens=max_tokens, temperature=temperature,
                                          **kw)

    # embeddings and reranking (libinfer >= 1.5)
    def _embed_params(self, pooling: Union[None, str, int], normalize: bool, dimensions: int,
                      truncate: bool) -> Any:
        L = self._lib
        if not hasattr(L, "infer_embed_params_init"):
            raise InferUnsupported(Status.ERR_UNSUPPORTED,
                                   f"libinfer {version()} has no embeddings (1.5 or later needed)")
        p = _c.EmbedParams()
        L.infer_embed_params_init(byref(p))
        if pooling is None:
            p.pooling = Pooling.DEFAULT
        elif isinstance(pooling, str):
            try:
                p.pooling = Pooling[pooling.upper()]
            except KeyError:
                raise InferInvalidArgument(Status.ERR_INVALID_ARGUMENT,
                                           f"unknown pooling {pooling!r} (none, mean, cls, last, rank)") from None
        else:
            p.pooling = _cv.to_c(c_int32, pooling, "pooling")
        p.normalize = 2 if normalize else 0
        p.dimensions = _cv.to_c(c_int32, dimensions, "dimensions")
        p.truncate = int(bool(truncate))
        return p

    def _embeddings_out(self, h: c_void_p) -> Any:
        """The rows of an infer_embeddings handle (then freed): a float32 numpy
        array rows x dim, or a list of lists of floats without numpy."""
        L = self._lib
        try:
            rows = int(L.infer_embeddings_rows(h))
            dim = int(L.infer_embeddings_dim(h))
            n = rows * dim
            try:
                import numpy as np
            except ImportError:
                np = None
            if np is not None:
                out = np.empty((rows, dim), dtype=np.float32)
                if n:
                    _check(L.infer_embeddings_copy(h, out.ctypes.data_as(POINTER(ctypes.c_float)), n, None),
                           "infer_embeddings_copy")
                return out
            buf = (ctypes.c_float * max(n, 1))()
            if n:
                _check(L.infer_embeddings_copy(h, buf, n, None), "infer_embeddings_copy")
            return [list(buf[r * dim:(r + 1) * dim]) for r in range(rows)]
        finally:
            L.infer_embeddings_free(h)

    def embed(self, texts: Union[str, bytes, Sequence[Union[str, bytes]]],
              pooling: Union[None, str, int] = None, normalize: bool = True, dimensions: int = 0,
              truncate: bool = False) -> Any:
        """Embeddings of texts (a list; a single str is one text): a numpy
        float32 array of rows x dim (one row per text; with pooling "none",
        one per token of every text, in order), or a list of lists of floats
        when numpy is not installed. pooling None: the model's own (its GGUF
        pooling_type, else mean for encoders and last for decoders); or
        "none" / "mean" / "cls" / "last" / "rank" / a Pooling. normalize: L2.
        dimensions > 0 keeps the first values (Matryoshka) before normalizing.
        truncate: cut a text longer than the model's context instead of
        raising InferInvalidArgument."""
        if isinstance(texts, (str, bytes, bytearray)):
            texts = [texts]
        data = [_text_bytes(t, f"texts[{i}]") for i, t in enumerate(texts)]
        p = self._embed_params(pooling, normalize, dimensions, truncate)
        ptrs = (c_char_p * max(len(data), 1))(*data)
        lens = (c_size_t * max(len(data), 1))(*[len(d) for d in data])
        h = c_void_p()
        _check(self._c("infer_embed", ptrs, lens, len(data), byref(p), byref(h)), "infer_embed")
        return self._embeddings_out(h)

    def rerank(self, query: Union[str, bytes], documents: Sequence[Union[str, bytes]],
               truncate: bool = False) -> List[float]:
        """Relevance scores of documents to query (a reranker's raw scores,
        higher is more relevant), one per document in order. A model without a
        classifier head raises InferInvalidArgument."""
        if isinstance(documents, (str, bytes, bytearray)):
            documents = [documents]
        q = _cv.to_cstr(query, "query")
        docs = [_cv.to_cstr(d, f"documents[{i}]") for i, d in enumerate(documents)]
        p = self._embed_params(None, True, 0, truncate)
        ptrs = (c_char_p * max(len(docs), 1))(*docs)
        h = c_void_p()
        _check(self._c("infer_rerank", q, ptrs, len(docs), byref(p), byref(h)), "infer_rerank")
        rows = self._embeddings_out(h)
        return [float(r[0]) for r in rows]

    def __repr__(self) -> str:
        return f"<infer.Model {self.path!r}{' closed' if self.closed else ''}>"


# ---- engine and requests ------------------------------------------------------------------

_SAMPLING_KEYS = {"temperature", "top_k", "top_p", "min_p", "repeat_penalty", "frequency_penalty",
                  "presence_penalty", "penalty_last_n", "seed"}
_ENGINE_KEYS = {f[0] for f in _c.EngineParams._fields_} - {"struct_size"}


class Engine:
    """KV cache + scheduler on a background thread; submit from any thread.

    Keywords are infer_engine_params fields: n_threads, kv_budget_bytes,
    kv_blocks, kv_block_size, kv_type, max_seqs, max_batch_tokens, n_ctx,
    prefix_caching, host_kv_budget_bytes, policy, batch_timeout_ms,
    step_row_multiple.
    """

    def __init__(self, model: Model, **params: Any) -> None:
        self._g = _Guard(None, "engine")
        self._model = model
        self._lib = model._lib
        bad = set(params) - _ENGINE_KEYS
        if bad:
            raise TypeError(f"unknown engine parameter(s): {', '.join(sorted(bad))}")
        p = _c.EngineParams()
        self._lib.infer_engine_params_init(byref(p))
        for k, v in params.items():
            _cv.set_field(p, k, v)
        mh = model._acquire()
        h = c_void_p()
        try:
            _check(self._lib.infer_engine_create(mh, byref(p), byref(h)), "infer_engine_create")
        except BaseException:
            model._release()
            raise
        st = self._lib.infer_engine_start(h.value)
        if st != 0:
            try:
                _raise(st, "infer_engine_start")
            finally:
                self._lib.infer_engine_free(h.value)
                model._release()
        self._g = _Guard(h.value, "engine")
        self._requests: "weakref.WeakSet[Request]" = weakref.WeakSet()
        self._requests_lock = threading.Lock()

    def _c(self, name: str, *args: Any) -> Any:
        return self._g.call(self._lib, name, *args)

    def __enter__(self) -> "Engine":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        """Stops the thread (cancelling what runs) and frees the engine.
        Request objects stay usable (they report what they had)."""
        h = self._g.retire()  # waits for calls in flight on other threads
        if h is not None:
            with self._requests_lock:
                live = list(self._requests)
            for r in live:  # their streams end with InferCancelled, not silently
                r._engine_closed = True
            self._lib.infer_engine_free(h)
            self._model._release()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass

    @property
    def handle(self) -> int:
        """The raw infer_engine pointer."""
        h = self._g.handle
        if h is None:
            raise InferInvalidArgument(Status.ERR_INVALID_ARGUMENT, "the engine is closed")
        return h

    @property
    def model(self) -> Model:
        return self._model

    @property
    def stats(self) -> EngineStats:
        s = _c.EngineStatsC()
        self._lib.infer_engine_stats_init(byref(s))
        _check(self._c("infer_engine_get_stats", byref(s)), "infer_engine_get_stats")
        st = _from_struct(EngineStats, s)
        return st.__class__(**{**st.__dict__, "kv_type": KVType(st.kv_type)})

    def wait_idle(self) -> None:
        _check(self._c("infer_engine_wait_idle"), "infer_engine_wait_idle")

    def _params(self, prompt: Union[str, bytes, Sequence[int]], max_tokens: int,
                kw: Dict[str, Any]) -> Tuple[_c.RequestParams, List[Any]]:
        keep: List[Any] = []
        sp = _c.SamplingParams()
        self._lib.infer_sampling_params_init(byref(sp))
        rp = _c.RequestParams()
        self._lib.infer_request_params_init(byref(rp))
        for k in list(kw):
            if k in _SAMPLING_KEYS:
                _cv.set_field(sp, k, kw.pop(k))
        bias = kw.pop("logit_bias", None)
        if bias:
            if not isinstance(bias, Mapping):
                raise TypeError(f"logit_bias must be a mapping token -> bias, not {type(bias).__name__}")
            items = list(bias.items())
            toks = (c_int32 * len(items))(
                *[_cv.to_int(c_int32, t, "logit_bias key") for t, _ in items])
            vals = (ctypes.c_float * len(items))(
                *[_cv.to_float(ctypes.c_float, v, f"logit_bias[{t!r}]") for t, v in items])
            keep += [toks, vals]
            sp.logit_bias_tokens = toks
            sp.logit_bias_values = vals
            sp.n_logit_bias = len(items)
        keep.append(sp)
        rp.sampling = ctypes.pointer(sp)
        if isinstance(prompt, (str, bytes)):
            data = _text_bytes(prompt, "prompt")
            keep.append(data)
            rp.prompt = data  # may hold NUL bytes: prompt_len says where it ends
            rp.prompt_len = len(data)
        else:
            toks = _cv.array(c_int32, prompt, "prompt")
            keep.append(toks)
            rp.prompt_tokens = toks
            rp.n_prompt_tokens = len(toks)
        _cv.set_field(rp, "max_tokens", max_tokens)
        stop = kw.pop("stop", None)
        if stop:
            if isinstance(stop, (str, bytes)):
                stop = [stop]
            stop = list(stop)
            arr = (c_char_p * len(stop))(*[_cv.to_cstr(s, f"stop[{i}]") for i, s in enumerate(stop)])
            keep.append(arr)
            rp.stop = arr
            rp.n_stop = len(stop)
        add_bos = kw.pop("add_bos", None)
        rp.add_bos = -1 if add_bos is None else int(bool(add_bos))
        for k in ("parse_special", "ignore_eos", "no_prefix_cache", "cache_salt", "priority"):
            if k in kw:
                _cv.set_field(rp, k, kw.pop(k))
        if kw:
            raise TypeError(f"unknown generation parameter(s): {', '.join(sorted(kw))}")
        return rp, keep

    def submit(self, prompt: Union[str, bytes, Sequence[int]], max_tokens: int = 64,
               **kw: Any) -> "Request":
        """Queues a request (text or token ids) and returns its handle at once."""
        rp, keep = self._params(prompt, max_tokens, dict(kw))
        h = c_void_p()
        _check(self._c("infer_submit", byref(rp), byref(h)), "infer_submit")
        return Request(self, h.value, keep)

    def submit_n(self, prompt: Union[str, bytes, Sequence[int]], n: int, max_tokens: int = 64,
                 **kw: Any) -> List["Request"]:
        """n samples of one prompt sharing its KV blocks (sample i uses seed + i)."""
        n = _cv.to_int(c_int32, n, "n")
        rp, keep = self._params(prompt, max_tokens, dict(kw))
        hs = (c_void_p * max(n, 1))()
        _check(self._c("infer_submit_n", byref(rp), n, hs), "infer_submit_n")
        return [Request(self, hs[i], keep) for i in range(n)]

    def generate(self, prompt: Union[str, bytes, Sequence[int]], max_tokens: int = 64,
                 temperature: float = 0.8, timeout: Optional[float] = None, **kw: Any) -> str:
        with self.submit(prompt, max_tokens, temperature=temperature, **kw) as req:
            return req.result(timeout)

    def stream(self, prompt: Union[str, bytes, Sequence[int]], max_tokens: int = 64,
               temperature: float = 0.8, timeout: Optional[float] = None,
               **kw: Any) -> Iterator[str]:
        req = self.submit(prompt, max_tokens, temperature=temperature, **kw)
        return req._stream_and_close(timeout)

    def generate_batch(self, prompts: Sequence[Union[str, bytes, Sequence[int]]],
                       max_tokens: int = 64, temperature: float = 0.8,
                       timeout: Optional[float] = None, **kw: Any) -> List[str]:
        reqs: List[Request] = []
        try:
            for p in prompts:
                reqs.append(self.submit(p, max_tokens, temperature=temperature, **dict(kw)))
            return [r.result(timeout) for r in reqs]
        finally:
            for r in reqs:
                r.close()


class Request:
    """One generation. Iterate it (or call stream()) for text pieces as they are
    produced; result() waits for the whole text. close() frees the handle
    (cancelling an unfinished request); `with` does it too."""

    _POLL_MS = 100  # stream() wakes this often, so Ctrl-C and timeouts work

    def __init__(self, engine: Engine, handle: int, keep: List[Any]) -> None:
        self._engine = engine
        self._lib = engine._lib
        self._model: Optional[Model] = engine._model
        self._model._hold()  # the handle refers to the model until it is freed
        self._g = _Guard(handle, "request")
        self._keep = keep
        self._cancel_asked = False  # cancel() or a timeout of this binding
        self._engine_closed = False  # set by Engine.close() while this request lived
        with engine._requests_lock:
            engine._requests.add(self)
        self._read_lock = threading.Lock()  # next_text's buffer
        self._buf = ctypes.create_string_buffer(4096)
        self._streamed: List[str] = []

    def __enter__(self) -> "Request":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        h = self._g.retire()  # waits for calls in flight (cancel, stats, ...) on other threads
        if h is not None:
            self._cancel_asked = True
            self._lib.infer_request_free(h)
            model, self._model = self._model, None
            if model is not None:
                model._release()  # the model is freed once closed and unused

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass

    @property
    def handle(self) -> int:
        """The raw infer_request pointer."""
        h = self._g.handle
        if h is None:
            raise InferInvalidArgument(Status.ERR_INVALID_ARGUMENT, "the request is closed")
        return h

    def _c(self, name: str, *args: Any) -> Any:
        return self._g.call(self._lib, name, *args)

    def cancel(self) -> None:
        """Asks the request to stop (safe from any thread; a no-op once closed)."""
        self._cancel_asked = True
        try:
            st = self._c("infer_request_cancel")
        except InferInvalidArgument:
            return  # closed: freeing cancelled it
        _check(st, "infer_request_cancel")

    @property
    def stats(self) -> RequestStats:
        s = _c.RequestStatsC()
        self._lib.infer_request_stats_init(byref(s))
        _check(self._c("infer_request_get_stats", byref(s)), "infer_request_get_stats")
        st = _from_struct(RequestStats, s)
        return RequestStats(**{**st.__dict__, "finish_reason": FinishReason(st.finish_reason),
                               "status": _status(st.status)})

    @property
    def finish_reason(self) -> FinishReason:
        return self.stats.finish_reason

    @property
    def text(self) -> str:
        """The text generated so far."""
        raw = _sized_string(lambda b, n, nd: self._c("infer_request_text", b, n, nd),
                            "infer_request_text", initial=1024)
        return raw.decode("utf-8", "replace")

    def next_text(self, timeout: Optional[float] = None) -> Tuple[str, bool]:
        """Waits up to timeout seconds (None: no limit) for new text.
        Returns (text, finished); text is "" on a timeout."""
        ms = _cv.timeout_ms(timeout)
        n = c_size_t(0)
        fin = c_int32(0)
        with self._read_lock:
            _check(self._c("infer_request_next_text", ms, self._buf, len(self._buf), byref(n),
                           byref(fin)), "infer_request_next_text")
            return self._buf.raw[: n.value].decode("utf-8"), bool(fin.value)

    def next_tokens(self, timeout: Optional[float] = None, capacity: int = 256
                    ) -> Tuple[List[int], bool]:
        ms = _cv.timeout_ms(timeout)
        capacity = _cv.to_int(c_size_t, capacity, "capacity")
        if capacity < 1:
            raise InferInvalidArgument(Status.ERR_INVALID_ARGUMENT, f"capacity = {capacity} must be at least 1")
        arr = (c_int32 * capacity)()
        n = c_size_t(0)
        fin = c_int32(0)
        _check(self._c("infer_request_next_tokens", ms, arr, capacity, byref(n), byref(fin)),
               "infer_request_next_tokens")
        return list(arr[: n.value]), bool(fin.value)

    def stream(self, timeout: Optional[float] = None) -> Iterator[str]:
        """Yields text pieces until the request finishes. timeout: seconds for
        the whole request (TimeoutError and cancellation when exceeded).
        Raises InferError when the request finished with an error."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            wait = self._POLL_MS / 1000
            if deadline is not None:
                left = deadline - time.monotonic()
                if left <= 0:
                    self.cancel()
                    raise TimeoutError(f"request not finished after {timeout} s")
                wait = min(wait, left)
            piece, finished = self.next_text(wait)
            if piece:
                yield piece
            if finished:
                break
        self._raise_if_failed()

    __iter__ = stream

    def _stream_and_close(self, timeout: Optional[float]) -> Iterator[str]:
        try:
            yield from self.stream(timeout)
        finally:
            self.close()  # an early exit (break, GeneratorExit) cancels the request

    def _raise_if_failed(self) -> None:
        st = self.stats
        if st.finish_reason == FinishReason.ERROR:
            msg = (self._c("infer_request_error") or b"").decode("utf-8", "replace")
            raise _ERRORS.get(st.status, InferError)(int(st.status), msg, "request")
        if st.finish_reason == FinishReason.CANCELLED and not self._cancel_asked:
            # Not this handle's cancel(): the engine (or the model that made
            # it) was closed, or stopped, under the request.
            why = ("its engine was closed (Engine.close, or Model.close for the model's own engine)"
                   if self._engine_closed else "its engine was stopped")
            raise InferCancelled(Status.ERR_CANCELLED,
                                 f"the request was cancelled before it finished: {why}; "
                                 f"{st.n_generated_tokens} tokens were generated", "request")

    def wait(self, timeout: Optional[float] = None) -> bool:
        """Waits until the request finished; False on a timeout. Reads nothing:
        next_tokens / next_text / stream still return every token and all the text."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            wait = self._POLL_MS / 1000
            if deadline is not None:
                wait = min(wait, max(0.0, deadline - time.monotonic()))
            fin = c_int32(0)
            _check(self._c("infer_request_wait", int(wait * 1000), byref(fin)), "infer_request_wait")
            if fin.value:
                return True
            if deadline is not None and time.monotonic() >= deadline:
                return False

    def result(self, timeout: Optional[float] = None) -> str:
        """The whole generated text (raises InferError if the request failed,
        TimeoutError, after cancelling it, if timeout seconds pass)."""
        if not self.wait(timeout):
            self.cancel()
            raise TimeoutError(f"request not finished after {timeout} s")
        self._raise_if_failed()
        return self.text
