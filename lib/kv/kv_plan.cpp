#include "kv/kv_plan.h"

#include <algorithm>

#include "core/error.h"

namespace infer {

uint64_t KvPlan::explicit_blocks(const KvSizing& s, uint64_t block_bytes) {
  if (s.kv_blocks > 0) return static_cast<uint64_t>(s.kv_blocks);
  if (s.kv_blocks < 0 || block_bytes == 0) return 0;
  return s.budget_bytes / block_bytes;
}

// kv_blocks, else the byte budget, else room for max_seqs full contexts
// within the default cap. (64-bit math: n_ctx may be as large as INT32_MAX.)
KvPlan KvPlan::make(const KvLayout& model_layout, const KvSizing& s, int32_t window) {
  KvPlan p;
  p.layout = block_layout(model_layout, s);
  p.window = window > 0 ? window : 0;
  const uint64_t per_block = p.layout.block_bytes();
  if (per_block == 0) raise(Status::InvalidArgument, "the model has an empty KV layout");
  uint64_t n_blocks = explicit_blocks(s, per_block);
  if (s.kv_blocks <= 0 && s.budget_bytes == 0) {
    const uint64_t tokens = static_cast<uint64_t>(s.n_ctx) + static_cast<uint64_t>(s.extra_tokens) + s.block_size;
    n_blocks = std::min<uint64_t>(static_cast<uint64_t>(s.max_seqs) * tokens / s.block_size,
                                  s.default_cap_bytes / per_block);
  }
  if (s.clamp) n_blocks = std::clamp<uint64_t>(n_blocks, 1, kMaxBlocks);
  if (n_blocks < 1)
    raise(Status::InvalidArgument, "the KV budget is smaller than one block (%llu bytes)",
          static_cast<unsigned long long>(per_block));
  if (n_blocks > kMaxBlocks) raise(Status::InvalidArgument, "the KV budget is too large");
  const uint64_t host_blocks = s.host_budget_bytes / per_block;
  if (host_blocks > kMaxBlocks) raise(Status::InvalidArgument, "the host KV budget is too large");
  p.layout.n_blocks = static_cast<int>(n_blocks);
  p.layout.n_host_blocks = static_cast<int>(host_blocks);
  return p;
}

int64_t KvPlan::blocks_held(int64_t n_tokens, int64_t step_rows) const {
  int64_t need = blocks_for(n_tokens);
  if (window > 0) need = std::min<int64_t>(need, blocks_for(window + step_rows) + 1);
  // The block of the last computed position and the one before it, then the
  // blocks the step's rows start (a block more when they begin mid-block is
  // already one of the two).
  if (state_only()) need = std::min<int64_t>(need, 2 + blocks_for(std::max<int64_t>(step_rows, 1)));
  return need;
}

int32_t KvPlan::concurrency(int64_t n_tokens, int32_t max_seqs) const {
  const int64_t need = std::max<int64_t>(blocks_held(n_tokens), 1);
  return static_cast<int32_t>(std::min<int64_t>(max_seqs, layout.n_blocks / need));
}

}  // namespace infer
