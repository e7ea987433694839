// The KV sizing arithmetic, in one place: how many blocks a pool gets from
// the engine's settings, what a block costs in bytes, and how many blocks a
// sequence holds at once (a sliding window bounds them). Used by the engine
// (its pool, the draft model's pool, what a prompt needs, max_concurrency),
// by engine/kv_budget (whether a pool fits the memory left) and by the C
// API's statistics. A value: computing one allocates nothing.
#pragma once

#include <cstdint>

#include "kv/kv_format.h"

namespace infer {

// What a pool is sized from.
struct KvSizing {
  int32_t block_size = 16;
  KvType type = KvType::F32;
  int32_t kv_blocks = 0;             // > 0: exactly this many device blocks
  uint64_t budget_bytes = 0;         // else this many bytes (> 0)
  uint64_t host_budget_bytes = 0;    // the host tier (0: none)
  // Neither given: room for max_seqs sequences of n_ctx + extra_tokens
  // tokens, at most default_cap_bytes.
  int32_t max_seqs = 16;
  int64_t n_ctx = 0;
  int32_t extra_tokens = 0;
  uint64_t default_cap_bytes = uint64_t{1} << 30;
  // A pool that must exist (the draft model's): the count is clamped to
  // [1, KvPlan::kMaxBlocks] instead of refused.
  bool clamp = false;
};

struct KvPlan {
  static constexpr uint64_t kMaxBlocks = uint64_t{1} << 30;

  KvLayout layout;   // n_blocks and n_host_blocks filled in
  int32_t window = 0;  // sliding attention window in tokens (0: none)

  // Error(InvalidArgument) for an empty layout (neither K/V nor state), a budget below one block or
  // more than kMaxBlocks blocks in either tier.
  static KvPlan make(const KvLayout& model_layout, const KvSizing& sizing, int32_t window);
  // The blocks `sizing` asks for (0 for a default pool: it depends on
  // nothing but the model), the host blocks and the bytes per block, without
  // any check: what a memory check needs before the engine exists.
  static uint64_t explicit_blocks(const KvSizing& sizing, uint64_t block_bytes);
  // The model's layout with the sizing's block size and element type.
  static KvLayout block_layout(const KvLayout& model_layout, const KvSizing& sizing) {
    KvLayout l = model_layout;
    l.block_size = sizing.block_size;
    l.type = sizing.type;
    return l;
  }

  uint64_t block_bytes() const { return layout.block_bytes(); }
  uint64_t bytes(int64_t n_blocks) const { return block_bytes() * static_cast<uint64_t>(n_blocks); }
  // Both tiers.
  uint64_t pool_bytes() const {
    return bytes(static_cast<int64_t>(layout.n_blocks) + layout.n_host_blocks);
  }
  // Blocks n_tokens tokens fill.
  int64_t blocks_for(int64_t n_tokens) const { return (n_tokens + layout.block_size - 1) / layout.block_size; }
  // A layout of recurrent state alone (an attention-free state-space model):
  // a sequence reads nothing but the state in the block of its last computed
  // position (and, after a rejected draft, the boundary snapshot in the block
  // before it), so it keeps only those two blocks (Scheduler::commit_blocks).
  bool state_only() const { return layout.n_layers == 0 && layout.state_bytes() > 0; }
  // Blocks a sequence of n_tokens holds at once when a step feeds it at most
  // step_rows rows (at least 1): a window keeps only the blocks it can still
  // attend to; a state-only layout keeps two blocks behind the rows it
  // writes, whatever the length.
  int64_t blocks_held(int64_t n_tokens, int64_t step_rows = 0) const;
  // Sequences of n_tokens tokens the device pool holds at once without
  // prefix sharing, at most max_seqs.
  int32_t concurrency(int64_t n_tokens, int32_t max_seqs) const;
};

}  // namespace infer
