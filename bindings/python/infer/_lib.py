"""ctypes declarations mirroring include/infer/infer.h (libinfer 1.x), and the
search for libinfer.so.1: $INFER_LIBRARY, else the copy bundled in this package
(pip install builds it), else an install prefix, a checkout's build*/ or the
system's path.

The structs here must match the C layout exactly; tests/test_layout.py
compares every one with the C compiler's sizeof/offsetof.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import os
import sys
from ctypes import (POINTER, Structure, c_char_p, c_double, c_float, c_int32, c_size_t,
                    c_uint32, c_uint64, c_int64, c_void_p)
from pathlib import Path
from typing import List, Optional

ABI_MAJOR = 1  # the SONAME major this binding was written for (libinfer.so.1)
MIN_VERSION = 10000  # infer_version_number() of the oldest library with these structs (1.0.0)

c_int32_p = POINTER(c_int32)
c_enum = c_int32  # infer.h pins every enum to 32 bits


class ModelParams(Structure):
    _fields_ = [("struct_size", c_uint32), ("backend", c_enum), ("use_mmap", c_int32),
                ("vocab_only", c_int32),
                ("tensor_parallel", c_int32), ("mpi_comm", c_void_p)]  # 1.6


class ModelInfoC(Structure):
    _fields_ = [("struct_size", c_uint32), ("architecture", c_char_p), ("name", c_char_p),
                ("tokenizer", c_char_p), ("n_vocab", c_int32), ("n_ctx_train", c_int32),
                ("n_embd", c_int32), ("n_layer", c_int32), ("n_head", c_int32),
                ("n_head_kv", c_int32), ("n_ff", c_int32), ("n_rot", c_int32),
                ("rope_freq_base", c_float), ("rms_norm_eps", c_float), ("n_params", c_uint64),
                ("n_bytes", c_uint64), ("n_tensors", c_int32), ("bos_token", c_int32),
                ("eos_token", c_int32), ("vocab_only", c_int32)]


class TensorInfoC(Structure):
    _fields_ = [("struct_size", c_uint32), ("name", c_char_p), ("type", c_char_p),
                ("n_dims", c_int32), ("dims", c_int64 * 4), ("n_bytes", c_uint64)]


class EngineParams(Structure):
    _fields_ = [("struct_size", c_uint32), ("n_threads", c_int32), ("kv_budget_bytes", c_uint64),
                ("kv_blocks", c_int32), ("kv_block_size", c_int32), ("kv_type", c_enum),
                ("max_seqs", c_int32), ("max_batch_tokens", c_int32), ("n_ctx", c_int32),
                ("prefix_caching", c_int32), ("host_kv_budget_bytes", c_uint64),
                ("policy", c_enum), ("batch_timeout_ms", c_double),
                ("step_row_multiple", c_int32),
                ("spec", c_enum), ("spec_k", c_int32), ("spec_ngram_max", c_int32),  # 1.1
                ("spec_ngram_min", c_int32), ("spec_max_batch", c_int32), ("spec_skip_layers", c_char_p),
                ("draft_model", c_void_p),
                ("tensor_parallel", c_int32), ("tp_timeout_ms", c_int32)]  # 1.6


class SamplingParams(Structure):
    _fields_ = [("struct_size", c_uint32), ("temperature", c_float), ("top_k", c_int32),
                ("top_p", c_float), ("min_p", c_float), ("repeat_penalty", c_float),
                ("frequency_penalty", c_float), ("presence_penalty", c_float),
                ("penalty_last_n", c_int32), ("seed", c_uint64),
                ("logit_bias_tokens", POINTER(c_int32)), ("logit_bias_values", POINTER(c_float)),
                ("n_logit_bias", c_size_t)]


TOKEN_FN = ctypes.CFUNCTYPE(c_int32, c_void_p, c_int32, c_char_p, c_size_t, c_void_p)


class RequestParams(Structure):
    _fields_ = [("struct_size", c_uint32), ("prompt", c_char_p), ("prompt_len", c_size_t),
                ("prompt_tokens", POINTER(c_int32)), ("n_prompt_tokens", c_size_t),
                ("add_bos", c_int32), ("parse_special", c_int32), ("max_tokens", c_int32),
                ("sampling", POINTER(SamplingParams)), ("stop", POINTER(c_char_p)),
                ("n_stop", c_size_t), ("ignore_eos", c_int32),
                ("on_token", c_void_p),  # never set from Python: no callbacks on the engine thread
                ("user_data", c_void_p), ("logits", c_uint32), ("no_prefix_cache", c_int32),
                ("cache_salt", c_uint64), ("priority", c_int32),
                ("logprobs", c_int32), ("grammar", c_char_p), ("json_schema", c_char_p),  # 1.1
                ("spec_max_draft", c_int32)]


class RequestStatsC(Structure):
    _fields_ = [("struct_size", c_uint32), ("finish_reason", c_enum), ("status", c_enum),
                ("n_prompt_tokens", c_int32), ("n_cached_tokens", c_int32),
                ("n_generated_tokens", c_int32), ("queue_ms", c_double), ("ttft_ms", c_double),
                ("tpot_ms", c_double), ("total_ms", c_double),
                ("prefill_tokens_per_s", c_double), ("decode_tokens_per_s", c_double),
                ("n_preemptions", c_int32),
                ("draft_tokens", c_uint64), ("accepted_tokens", c_uint64),  # 1.1
                ("acceptance_rate", c_double), ("mean_accepted_length", c_double),
                ("draft_tokens_at", c_uint64 * 16), ("accepted_tokens_at", c_uint64 * 16)]


class EngineStatsC(Structure):
    _fields_ = [("struct_size", c_uint32), ("n_running", c_int32), ("n_waiting", c_int32),
                ("kv_blocks_total", c_int32), ("kv_blocks_used", c_int32),
                ("kv_block_size", c_int32), ("kv_bytes_total", c_uint64),
                ("kv_bytes_used", c_uint64), ("n_steps", c_uint64),
                ("n_prompt_tokens", c_uint64), ("n_generated_tokens", c_uint64),
                ("kv_blocks_free", c_int32), ("kv_blocks_cached", c_int32),
                ("host_kv_blocks_total", c_int32), ("host_kv_blocks_used", c_int32),
                ("prefix_query_tokens", c_uint64), ("prefix_hit_tokens", c_uint64),
                ("n_preemptions", c_uint64), ("kv_evictions", c_uint64), ("kv_type", c_enum),
                ("n_finished", c_uint64), ("uptime_s", c_double),
                ("generated_tokens_per_s", c_double),
                ("draft_tokens", c_uint64), ("accepted_tokens", c_uint64),  # 1.1
                ("acceptance_rate", c_double), ("mean_accepted_length", c_double),
                ("draft_tokens_at", c_uint64 * 16), ("accepted_tokens_at", c_uint64 * 16),
                ("tp_comm_calls", c_uint64), ("tp_comm_bytes", c_uint64),  # 1.6
                ("tp_comm_seconds", c_double)]


class ChatMessageC(Structure):
    _fields_ = [("role", c_char_p), ("content", c_char_p)]


class EmbedParams(Structure):  # since 1.5
    _fields_ = [("struct_size", c_uint32), ("pooling", c_enum), ("normalize", c_int32),
                ("dimensions", c_int32), ("truncate", c_int32), ("n_threads", c_int32)]


# struct name in infer.h -> mirror, for the layout test
MIRRORS = {
    "infer_model_params": ModelParams,
    "infer_model_info": ModelInfoC,
    "infer_tensor_info": TensorInfoC,
    "infer_engine_params": EngineParams,
    "infer_sampling_params": SamplingParams,
    "infer_request_params": RequestParams,
    "infer_request_stats": RequestStatsC,
    "infer_engine_stats": EngineStatsC,
    "infer_chat_message": ChatMessageC,
    "infer_embed_params": EmbedParams,
}

_S = c_int32  # infer_status
_H = c_void_p  # opaque handles

# name: (restype, argtypes)
_PROTOTYPES = {
    "infer_version": (c_char_p, []),
    "infer_version_number": (c_uint32, []),
    "infer_status_string": (c_char_p, [c_enum]),
    "infer_last_error": (c_char_p, []),
    "infer_free": (None, [c_void_p]),
    "infer_model_params_init": (None, [POINTER(ModelParams)]),
    "infer_model_load": (_S, [c_char_p, POINTER(ModelParams), POINTER(_H)]),
    "infer_model_free": (None, [_H]),
    "infer_model_info_init": (None, [POINTER(ModelInfoC)]),
    "infer_model_get_info": (_S, [_H, POINTER(ModelInfoC)]),
    "infer_model_meta": (_S, [_H, c_char_p, c_char_p, c_size_t, POINTER(c_size_t)]),
    "infer_model_tensor_count": (c_int32, [_H]),
    "infer_model_tensor": (_S, [_H, c_int32, POINTER(TensorInfoC)]),
    "infer_tokenize": (_S, [_H, c_char_p, c_size_t, c_int32, c_int32, POINTER(c_int32), c_size_t,
                            POINTER(c_size_t)]),
    "infer_detokenize": (_S, [_H, POINTER(c_int32), c_size_t, c_int32, c_char_p, c_size_t,
                              POINTER(c_size_t)]),
    "infer_token_piece": (_S, [_H, c_int32, c_char_p, c_size_t, POINTER(c_size_t)]),
    "infer_token_is_eog": (c_int32, [_H, c_int32]),
    "infer_engine_params_init": (None, [POINTER(EngineParams)]),
    "infer_engine_create": (_S, [_H, POINTER(EngineParams), POINTER(_H)]),
    "infer_engine_free": (None, [_H]),
    "infer_sampling_params_init": (None, [POINTER(SamplingParams)]),
    "infer_request_params_init": (None, [POINTER(RequestParams)]),
    "infer_submit": (_S, [_H, POINTER(RequestParams), POINTER(_H)]),
    "infer_submit_n": (_S, [_H, POINTER(RequestParams), c_int32, POINTER(_H)]),
    "infer_engine_step": (_S, [_H, POINTER(c_int32)]),
    "infer_engine_run": (_S, [_H]),
    "infer_request_cancel": (_S, [_H]),
    "infer_request_free": (None, [_H]),
    "infer_request_stats_init": (None, [POINTER(RequestStatsC)]),
    "infer_request_get_stats": (_S, [_H, POINTER(RequestStatsC)]),
    "infer_request_text": (_S, [_H, c_char_p, c_size_t, POINTER(c_size_t)]),
    "infer_request_error": (c_char_p, [_H]),
    "infer_engine_stats_init": (None, [POINTER(EngineStatsC)]),
    "infer_engine_get_stats": (_S, [_H, POINTER(EngineStatsC)]),
    "infer_engine_start": (_S, [_H]),
    "infer_engine_stop": (_S, [_H, c_int32]),
    "infer_engine_wait_idle": (_S, [_H]),
    "infer_request_next_tokens": (_S, [_H, c_int32, POINTER(c_int32), c_size_t, POINTER(c_size_t),
                                       POINTER(c_int32)]),
    "infer_request_next_text": (_S, [_H, c_int32, c_char_p, c_size_t, POINTER(c_size_t),
                                     POINTER(c_int32)]),
    "infer_request_wait": (_S, [_H, c_int32, POINTER(c_int32)]),
    "infer_generate": (_S, [_H, c_char_p, POINTER(SamplingParams), c_int32, POINTER(c_void_p)]),
    "infer_chat_template_count": (c_int32, []),
    "infer_chat_template_name": (c_char_p, [c_int32]),
    "infer_chat_template_detect": (_S, [_H, c_char_p, c_size_t, POINTER(c_size_t)]),
    "infer_chat_apply_template": (_S, [_H, c_char_p, POINTER(ChatMessageC), c_size_t, c_int32,
                                       c_char_p, c_size_t, POINTER(c_size_t)]),
    "infer_chat_template_stop": (c_char_p, [c_char_p, c_int32]),
    "infer_chat_apply_template_json": (_S, [_H, c_char_p, c_char_p, c_char_p, c_size_t, POINTER(c_size_t)]),
}

# Since 1.5 (embeddings): declared when the library has them, so an older 1.x
# library still loads (Model.embed / rerank then say the library is too old).
_OPTIONAL_PROTOTYPES = {
    "infer_embed_params_init": (None, [POINTER(EmbedParams)]),
    "infer_embed": (_S, [_H, POINTER(c_char_p), POINTER(c_size_t), c_int32, POINTER(EmbedParams),
                         POINTER(_H)]),
    "infer_rerank": (_S, [_H, c_char_p, POINTER(c_char_p), c_int32, POINTER(EmbedParams),
                          POINTER(_H)]),
    "infer_embeddings_dim": (c_int32, [_H]),
    "infer_embeddings_rows": (c_int64, [_H]),
    "infer_embeddings_copy": (_S, [_H, POINTER(c_float), c_size_t, POINTER(c_size_t)]),
    "infer_embeddings_free": (None, [_H]),
    # Since 1.6 (tensor parallelism)
    "infer_model_tp_rank": (c_int32, [_H]),
    "infer_model_tp_size": (c_int32, [_H]),
    "infer_engine_follow": (_S, [_H, POINTER(EngineParams)]),
}


def _candidates() -> List[str]:
    """Where libinfer.so is looked for, in order."""
    out: List[str] = []
    env = os.environ.get("INFER_LIBRARY")
    if env:
        out.append(env)
        return out  # an explicit choice is never second-guessed
    here = Path(__file__).resolve().parent
    # The copy bundled by pip install (bindings/python/build_libinfer.py).
    bundled = here / "libinfer.so.1"
    if bundled.exists():
        out.append(str(bundled))
    # An install prefix: PREFIX/lib/pythonX/site-packages/infer -> PREFIX/lib
    for parent in list(here.parents)[:5]:
        for libdir in ("lib", "lib64", "lib/x86_64-linux-gnu"):
            p = parent / libdir / "libinfer.so.1"
            if p.exists():
                out.append(str(p))
    prefix = Path(sys.prefix)
    for libdir in ("lib", "lib64"):
        p = prefix / libdir / "libinfer.so.1"
        if p.exists():
            out.append(str(p))
    # The source checkout's build trees (bindings/python/infer -> repo root).
    repo = here.parents[2]
    for build in sorted(repo.glob("build*")):
        p = build / "libinfer.so.1"
        if p.exists():
            out.append(str(p))
    # The system's search path (ldconfig, LD_LIBRARY_PATH).
    out.append("libinfer.so.1")
    found = ctypes.util.find_library("infer")
    if found:
        out.append(found)
    return out


class LibraryNotFound(OSError):
    pass


def load_library() -> ctypes.CDLL:
    errors = []
    for cand in _candidates():
        try:
            lib = ctypes.CDLL(cand)
        except OSError as e:
            errors.append(f"{cand}: {e}")
            continue
        _declare(lib)
        version = lib.infer_version_number()
        if version // 10000 != ABI_MAJOR or version < MIN_VERSION:
            raise LibraryNotFound(
                f"{cand} is libinfer {lib.infer_version().decode()}, this binding needs "
                f"{ABI_MAJOR}.x >= {MIN_VERSION // 10000}.{MIN_VERSION // 100 % 100}.{MIN_VERSION % 100}")
        lib._infer_path = cand  # type: ignore[attr-defined]
        return lib
    raise LibraryNotFound("libinfer.so not found; set INFER_LIBRARY to its path. Tried:\n  " +
                          "\n  ".join(errors))


def _declare(lib: ctypes.CDLL) -> None:
    for name, (res, args) in _PROTOTYPES.items():
        fn = getattr(lib, name)
        fn.restype = res
        fn.argtypes = args
    for name, (res, args) in _OPTIONAL_PROTOTYPES.items():
        fn = getattr(lib, name, None)
        if fn is not None:
            fn.restype = res
            fn.argtypes = args


_lib: Optional[ctypes.CDLL] = None


def lib() -> ctypes.CDLL:
    global _lib
    if _lib is None:
        _lib = load_library()
    return _lib
