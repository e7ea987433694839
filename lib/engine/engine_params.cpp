// EngineParams: the checks of an engine's settings and the KV sizing they ask for.
#include "core/error.h"
#include "engine/engine.h"

namespace infer {

void EngineParams::validate() const {
  if (n_threads < 0 || n_threads > 1024) raise(Status::InvalidArgument, "n_threads %d is out of range", n_threads);
  if (block_size < 1 || block_size > 1024)
    raise(Status::InvalidArgument, "kv_block_size %d is out of range [1, 1024]", block_size);
  if (kv_blocks < 0) raise(Status::InvalidArgument, "kv_blocks %d is negative", kv_blocks);
  if (kv_type != KvType::F32 && kv_type != KvType::F16 && kv_type != KvType::I8)
    raise(Status::InvalidArgument, "unknown KV element type %d", static_cast<int>(kv_type));
  if (max_seqs < 1 || max_seqs > 65536) raise(Status::InvalidArgument, "max_seqs %d is out of range", max_seqs);
  if (max_batch_tokens < 1 || max_batch_tokens > (1 << 20))
    raise(Status::InvalidArgument, "max_batch_tokens %d is out of range", max_batch_tokens);
  if (n_ctx < 0) raise(Status::InvalidArgument, "n_ctx %d is negative", n_ctx);
  if (policy != SchedPolicy::Continuous && policy != SchedPolicy::Static && policy != SchedPolicy::Dynamic)
    raise(Status::InvalidArgument, "unknown scheduling policy %d", static_cast<int>(policy));
  if (!(batch_timeout_ms >= 0) || batch_timeout_ms > 3.6e6)
    raise(Status::InvalidArgument, "batch_timeout_ms must be in [0, 3600000]");
  if (step_row_multiple < 0 || step_row_multiple > 4096)
    raise(Status::InvalidArgument, "step_row_multiple %d is out of range [0, 4096]", step_row_multiple);
  if (spec != SpecMethod::None && spec != SpecMethod::Ngram && spec != SpecMethod::LayerSkip &&
      spec != SpecMethod::Draft)
    raise(Status::InvalidArgument, "unknown speculative method %d", static_cast<int>(spec));
  if (spec_k < 1 || spec_k > 32) raise(Status::InvalidArgument, "spec_k %d is out of range [1, 32]", spec_k);
  if (spec_ngram_min < 1 || spec_ngram_max < spec_ngram_min || spec_ngram_max > 64)
    raise(Status::InvalidArgument, "n-gram lengths must satisfy 1 <= min (%d) <= max (%d) <= 64", spec_ngram_min,
          spec_ngram_max);
  if (spec_max_batch < 0) raise(Status::InvalidArgument, "spec_max_batch %d is negative", spec_max_batch);
}

KvSizing EngineParams::kv_sizing(int32_t n_ctx) const {
  KvSizing z;
  z.block_size = block_size;
  z.type = kv_type;
  z.kv_blocks = kv_blocks;
  z.budget_bytes = kv_budget_bytes;
  z.host_budget_bytes = host_kv_budget_bytes;
  z.max_seqs = max_seqs;
  z.n_ctx = n_ctx;
  return z;
}

}  // namespace infer
