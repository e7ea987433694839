#include "engine/kv_budget.h"

#include "core/backend.h"
#include "core/error.h"
#include "engine/engine.h"
#include "kv/kv_plan.h"
#include "model/model.h"

namespace infer {

std::unique_ptr<KvCache> make_kv_cache(const KvPlan& plan, Backend& backend) {
  Backend* be = &backend;
  return std::make_unique<KvCache>(plan.layout, [be](const KvLayout& l, int n, KvTier tier) {
    return be->make_kv_memory(l, n, tier);
  });
}

void check_kv_request(const Model& model, const EngineParams& ep, uint64_t available) {
  if (ep.block_size < 1 || ep.block_size > 1024 || model.vocab_only()) return;
  const KvSizing z = ep.kv_sizing(0);
  const uint64_t per_block = KvPlan::block_layout(model.kv_layout(), z).block_bytes();
  if (!per_block) return;
  // 0 blocks for the default pool: then this is a lower bound (the host tier).
  const uint64_t n_blocks = KvPlan::explicit_blocks(z, per_block);
  const uint64_t n_host = z.host_budget_bytes / per_block;
  if (n_blocks <= KvPlan::kMaxBlocks && n_host <= KvPlan::kMaxBlocks && per_block * (n_blocks + n_host) > available)
    raise(Status::OutOfMemory,
          "the KV cache would need %llu bytes but this process can commit only %llu more (MemAvailable and memory "
          "cgroup limit): lower kv_budget_bytes, kv_blocks or host_kv_budget_bytes",
          static_cast<unsigned long long>(per_block * (n_blocks + n_host)),
          static_cast<unsigned long long>(available));
}

void check_kv_pool(const Engine& engine, uint64_t available) {
  const uint64_t kv_bytes = engine.kv_plan().pool_bytes();
  if (kv_bytes > available)
    raise(Status::OutOfMemory,
          "the KV cache needs %llu bytes but this process can commit only %llu more (MemAvailable and memory cgroup "
          "limit): lower kv_budget_bytes, kv_blocks, host_kv_budget_bytes, max_seqs or n_ctx",
          static_cast<unsigned long long>(kv_bytes), static_cast<unsigned long long>(available));
}

}  // namespace infer
