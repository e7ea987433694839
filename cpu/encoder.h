// The CPU side of the encoder operations (lib/core/backend.h: layer_norm,
// gelu, tanh, attention_dense): embedding models, no KV cache.
#pragma once

#include <cstdint>

#include "core/backend.h"

namespace infer {
class ThreadPool;
}

namespace infer::cpu {

void layer_norm(ThreadPool& pool, const float* x, const float* w, const float* b, int64_t m, int64_t n, float eps,
                float* y);
void gelu_erf(ThreadPool& pool, float* x, int64_t n);
void tanh_inplace(ThreadPool& pool, float* x, int64_t n);
void attention_dense(ThreadPool& pool, const float* q, const float* k, const float* v, const AttnBatch& b,
                     int n_head, int n_head_kv, int head_dim, float scale, bool causal, float* out);

}  // namespace infer::cpu
