#include "engine/kv_budget.h"

#include "core/error.h"
#include "engine/engine.h"
#include "model/model.h"

namespace infer {

void check_kv_request(const Model& model, const EngineParams& ep, uint64_t available) {
  if (ep.block_size < 1 || ep.block_size > 1024 || model.vocab_only()) return;
  KvLayout l = model.kv_layout();
  l.block_size = ep.block_size;
  l.type = ep.kv_type;
  const uint64_t per_block = l.block_bytes();
  if (!per_block) return;
  // n_blocks is 0 for the default pool: then this is a lower bound (the host tier).
  const uint64_t n_blocks = ep.kv_blocks > 0 ? static_cast<uint64_t>(ep.kv_blocks)
                            : ep.kv_blocks < 0 ? 0
                                               : ep.kv_budget_bytes / per_block;
  const uint64_t n_host = ep.host_kv_budget_bytes / per_block;
  const uint64_t limit = uint64_t{1} << 30;
  if (n_blocks <= limit && n_host <= limit && per_block * (n_blocks + n_host) > available)
    raise(Status::OutOfMemory,
          "the KV cache would need %llu bytes but this process can commit only %llu more (MemAvailable and memory "
          "cgroup limit): lower kv_budget_bytes, kv_blocks or host_kv_budget_bytes",
          static_cast<unsigned long long>(per_block * (n_blocks + n_host)),
          static_cast<unsigned long long>(available));
}

void check_kv_pool(const Engine& engine, uint64_t available) {
  const KvLayout& kl = engine.kv().layout();
  const uint64_t kv_bytes = static_cast<uint64_t>(kl.block_bytes()) *
                            (static_cast<uint64_t>(kl.n_blocks) + static_cast<uint64_t>(kl.n_host_blocks));
  if (kv_bytes > available)
    raise(Status::OutOfMemory,
          "the KV cache needs %llu bytes but this process can commit only %llu more (MemAvailable and memory cgroup "
          "limit): lower kv_budget_bytes, kv_blocks, host_kv_budget_bytes, max_seqs or n_ctx",
          static_cast<unsigned long long>(kv_bytes), static_cast<unsigned long long>(available));
}

}  // namespace infer
