// Writing K/V into the paged cache and attention over it, for every KV
// element type (f32, f16, int8 with per-(token, head) scales).
#pragma once

#include <cstdint>

#include "core/backend.h"

namespace infer {
class KvMemory;
class ThreadPool;
}

namespace infer::cpu {

// Stores the K and V rows of a batch ([n_tokens][kv_dim]) in the pool's
// element format (kv/kv_format.h; bit-identical to kvfmt::write_token), at
// the blocks of the batch's tables. kv must be a HostKvMemory.
void kv_write(ThreadPool& pool, KvMemory& kv, int layer, const float* k, const float* v, const AttnBatch& b);
// Causal attention of every token of the batch over its sequence's cached
// positions (see attention.cpp for the algorithm). Results per (token, head)
// do not depend on the rest of the batch nor on the number of threads.
void attention(ThreadPool& pool, const float* q, const KvMemory& kv, int layer, const AttnBatch& b, int n_head,
               float scale, float* out);

// Tests: split every single-token item into this many pieces of chunks (0:
// decide by the work, the default), to check split and whole items agree.
void set_attention_split_for_testing(int pieces);

}  // namespace infer::cpu
