// State-space architectures: `mamba` (Mamba-1), `mamba2` (Mamba-2) and the
// `jamba` hybrid, as GGUF files write them.
//
// Every layer is pre-norm and residual: x += mixer(rmsnorm(x) * attn_norm).
//
// Mamba-1 mixer (d_inner channels, each with d_state of state):
//   [x | z]  = ssm_in · h                      (2 d_inner)
//   x        = silu(causal_conv1d(x) + bias)   (d_conv taps per channel, depthwise)
//   [r|B|C]  = ssm_x · x                       (dt_rank | d_state | d_state)
//   dt       = ssm_dt · r  (+ ssm_dt.bias inside the scan, then softplus)
//   y        = scan(x, dt, A, B, C) + D x, times silu(z)
//   out      = ssm_out · y
// Jamba's Mamba layers RMS-normalize r, B and C (ssm_dt_norm, ssm_b_norm,
// ssm_c_norm) before use.
//
// Mamba-2 mixer (n_head heads of head_dim = d_inner / n_head, scalar A per
// head, n_group groups of B and C):
//   [z | xBC | dt] = ssm_in · h                (d_inner | d_inner + 2 n_group d_state | n_head)
//   xBC            = silu(causal_conv1d(xBC) + bias), split [x | B | C]
//   y              = (scan(x, dt, A, B, C) + D x) * silu(z)
//   y              = grouped RMSNorm(y) * ssm_norm (n_group groups of d_inner / n_group)
//   out            = ssm_out · y
//
// Jamba: layer l is a Mamba-1 layer when <arch>.attention.head_count_kv[l]
// is 0, else attention without position encoding (scale 1/sqrt(head_dim));
// every layer then has x += ffn(rmsnorm(x) * ffn_norm), a SwiGLU FFN or, when
// blk.N.ffn_gate_inp.weight is present, a mixture of experts routed by the
// softmax over all experts, top k, weights not renormalized.
//
// The recurrent state (the last d_conv - 1 conv inputs and the scan state)
// lives in the KV blocks (kv/kv_format.h); the backend's ssm_conv and
// ssm_scan read and write it as the batch's SsmBatch says.
#pragma once

#include <memory>

#include "model/model.h"

namespace infer {

// Workspace slots the state-space layers use: [kSlotSsm, kSlotSsm + kSsmSlots).
constexpr int kSsmSlots = 8;

// mamba, mamba2 and jamba files. Error(Format) naming the key or tensor for
// inconsistent shapes; Error(Unsupported) for a tensor-parallel load.
std::unique_ptr<Model> create_mamba_model(std::unique_ptr<GgufFile> gguf, std::unique_ptr<Tokenizer> tok,
                                          std::shared_ptr<TpGroup> tp = nullptr);

}  // namespace infer
