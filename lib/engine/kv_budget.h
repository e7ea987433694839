// Whether an engine's KV cache fits the memory this process can still commit.
// The pool's pages are committed lazily, as the engine writes them: a pool the
// process cannot hold would be created fine and the process OOM-killed at some
// later step, so it is refused while a status can still say why.
#pragma once

#include <cstdint>
#include <memory>

#include "kv/kv_cache.h"
#include "kv/kv_plan.h"

namespace infer {

class Backend;
class Engine;
class Model;
struct EngineParams;

// A KV cache of `plan`'s layout: the books in the cache, the bytes in the
// backend's memory (Backend::make_kv_memory, both tiers).
std::unique_ptr<KvCache> make_kv_cache(const KvPlan& plan, Backend& backend);

// Before the engine is created: a pool sized explicitly (kv_blocks,
// kv_budget_bytes, host_kv_budget_bytes) that needs more than `available`
// bytes is Error(OutOfMemory), without trying to allocate it (a terabyte
// request is not something to hand malloc). Sizes the engine rejects anyway
// (a block size out of range, more than 2^30 blocks) are left to its own
// message; the default pool is checked after creation (check_kv_pool).
void check_kv_request(const Model& model, const EngineParams& params, uint64_t available);

// After creation: the pool the engine holds (both tiers) needs at most
// `available` bytes, else Error(OutOfMemory).
void check_kv_pool(const Engine& engine, uint64_t available);

}  // namespace infer
