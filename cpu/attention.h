// Writing K/V into the paged cache and attention over it, for every KV
// element type (f32, f16, int8 with per-(token, head) scales).
#pragma once

#include <cstdint>

#include "core/backend.h"

namespace infer {
class KvCache;
class ThreadPool;
}

namespace infer::cpu {

void kv_write(KvCache& kv, int layer, const float* k, const float* v, const AttnBatch& b);
void attention(ThreadPool& pool, const float* q, const KvCache& kv, int layer, const AttnBatch& b, int n_head,
               float scale, float* out);

}  // namespace infer::cpu
