// The mixture-of-experts feed-forward block of Mixtral-style models.
//
// In GGUF such a model is a `llama` model with `llama.expert_count` (E) and
// `llama.expert_used_count` (k); each layer's dense FFN is replaced by
//   blk.N.ffn_gate_inp.weight   dims [n_embd, E]          the router
//   blk.N.ffn_gate_exps.weight  dims [n_embd, n_ff, E]    expert e's gate: rows [e*n_ff, (e+1)*n_ff)
//   blk.N.ffn_up_exps.weight    dims [n_embd, n_ff, E]
//   blk.N.ffn_down_exps.weight  dims [n_ff, n_embd, E]
// (dims[0] is the row length), so each expert's matrix is a contiguous 2-D
// slice of the 3-D tensor that the backend sees as an ordinary weight.
//
// For each token h (the FFN-normed residual row):
//   p = softmax(router · h) over all E experts
//   S = the k experts of largest p (ties: the lower index)
//   out = Σ_{e in S} (p_e / Σ_{j in S} p_j) · down_e(silu(gate_e · h) * (up_e · h))
//
// The experts' matmuls are batched: the rows routed to expert e are gathered
// into one block, run through its three matrices in one matmul each, and
// added back to their tokens weighted. Decode (one token) reads the router
// and k experts' slices, not the E - k others.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/backend.h"

namespace infer {

class GgufFile;

struct MoeFfn {
  int32_t n_expert = 0;  // E (0: the layer has no experts)
  int32_t n_used = 0;    // k
  int64_t n_embd = 0, n_ff = 0;
  // The k selected weights divided by their sum (Mixtral); false: the
  // softmax probabilities over all E as they are (Jamba).
  bool renormalize = true;
  WeightView router;                       // n_in n_embd, n_out E
  std::vector<WeightView> gate, up, down;  // E slices each
  bool empty() const { return n_expert == 0; }
  // The router and every expert slice, as load-time weight preparation must see them.
  void for_each_weight(const std::function<void(const WeightView&)>& fn) const;
};

// Binds layer `prefix` ("blk.N.")'s router and expert tensors. Error(Format)
// names the tensor whose shape or size is wrong; Error(Unsupported) a type
// this build cannot compute with. new_cache gives each bound weight (every
// expert slice too) a WeightCache owned by the model.
MoeFfn bind_moe_ffn(const GgufFile& gguf, const std::string& prefix, int64_t n_embd, int64_t n_ff, int32_t n_expert,
                    int32_t n_used, const std::function<WeightCache*()>& new_cache);

// Checks the expert counts a file declares (Error(Format) when k is not in
// [1, E] or E is absurd).
void check_moe_counts(int64_t n_expert, int64_t n_used);

// Routing of m tokens from their router logits ([m][E]): sel[t*k + i] is the
// i-th selected expert of token t (by decreasing probability, ties to the
// lower index), weight[t*k + i] its renormalized weight (the k sum to 1),
// or with renormalize false its softmax probability over all E.
void moe_route(const float* logits, int64_t m, int n_expert, int k, int32_t* sel, float* weight,
               bool renormalize = true);

// The host side of the block: routing is discrete and data-dependent, so it
// runs on the host, from the router logits downloaded at this edge (on the
// CPU a pointer hand-off: the router matmul writes `logits` itself).
struct MoeHostScratch {
  std::vector<float> logits, wts, row_w;  // [m][E], [m][k], [m]
  std::vector<int32_t> sel, rows;         // [m][k], [m]
};

// Workspace slots the block uses: [slot0, slot0 + kMoeSlots).
constexpr int kMoeSlots = 6;

// out[m][n_embd] = the block's output for the rows h[m][n_embd] (out may
// be h; both backend memory, from ws). The experts' rows are gathered and
// summed back by backend ops; only the router logits come to the host.
void moe_ffn_forward(const MoeFfn& f, Backend& be, BackendWorkspace& ws, int slot0, const float* h, int64_t m,
                     float* out, MoeHostScratch& host);
// Grows ws's slots and host for batches of up to m rows.
void moe_reserve(const MoeFfn& f, BackendWorkspace& ws, int slot0, int64_t m, MoeHostScratch& host);

}  // namespace infer
