"""The value types the binding returns: model and tensor information, request
and engine statistics (frozen dataclasses filled from the C structs)."""
from __future__ import annotations

import ctypes
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any, Tuple

if TYPE_CHECKING:  # the enums live in the package
    from . import FinishReason, KVType, Status



# ---- stats as dataclasses ----------------------------------------------------------------

def _from_struct(cls: Any, s: ctypes.Structure) -> Any:
    kw = {}
    for f in fields(cls):
        v = getattr(s, f.name)
        if isinstance(v, bytes):
            v = v.decode("utf-8", "replace")
        elif v is None and f.type in ("str", str):
            v = ""
        kw[f.name] = v
    return cls(**kw)


@dataclass(frozen=True)
class ModelInfo:
    architecture: str
    name: str
    tokenizer: str
    n_vocab: int
    n_ctx_train: int
    n_embd: int
    n_layer: int
    n_head: int
    n_head_kv: int
    n_ff: int
    n_rot: int
    rope_freq_base: float
    rms_norm_eps: float
    n_params: int
    n_bytes: int
    n_tensors: int
    bos_token: int
    eos_token: int
    vocab_only: int


@dataclass(frozen=True)
class TensorInfo:
    name: str
    type: str
    shape: Tuple[int, ...]
    n_bytes: int


@dataclass(frozen=True)
class RequestStats:
    finish_reason: FinishReason
    status: Status
    n_prompt_tokens: int
    n_cached_tokens: int
    n_generated_tokens: int
    queue_ms: float
    ttft_ms: float
    tpot_ms: float
    total_ms: float
    prefill_tokens_per_s: float
    decode_tokens_per_s: float
    n_preemptions: int


@dataclass(frozen=True)
class EngineStats:
    n_running: int
    n_waiting: int
    kv_blocks_total: int
    kv_blocks_used: int
    kv_block_size: int
    kv_bytes_total: int
    kv_bytes_used: int
    n_steps: int
    n_prompt_tokens: int
    n_generated_tokens: int
    kv_blocks_free: int
    kv_blocks_cached: int
    host_kv_blocks_total: int
    host_kv_blocks_used: int
    prefix_query_tokens: int
    prefix_hit_tokens: int
    n_preemptions: int
    kv_evictions: int
    kv_type: KVType
    n_finished: int
    uptime_s: float
    generated_tokens_per_s: float
    # since 1.6: this rank's tensor-parallel collectives (0 for a whole model)
    tp_comm_calls: int = 0
    tp_comm_bytes: int = 0
    tp_comm_seconds: float = 0.0
