#include "kv/kv_cache.h"

#include <cstdlib>
#include <cstring>

#include "core/error.h"

namespace infer {

BlockPool::BlockPool(int n_blocks) : refs_(static_cast<size_t>(n_blocks), 0) {
  free_.reserve(n_blocks);
  // Hand out low ids first (pop from the back).
  for (int b = n_blocks - 1; b >= 0; --b) free_.push_back(b);
}

int BlockPool::allocate() {
  if (free_.empty()) return -1;
  const int b = free_.back();
  free_.pop_back();
  refs_[b] = 1;
  return b;
}

void BlockPool::retain(int block) {
  if (block < 0 || block >= n_total() || refs_[block] <= 0)
    raise(Status::Internal, "retain of block %d that is not in use", block);
  ++refs_[block];
}

void BlockPool::release(int block) {
  if (block < 0 || block >= n_total() || refs_[block] <= 0)
    raise(Status::Internal, "release of block %d that is not in use", block);
  if (--refs_[block] == 0) free_.push_back(block);
}

static float* alloc_floats(size_t n) {
  void* p = nullptr;
  if (n == 0) n = 1;
  if (posix_memalign(&p, 64, n * sizeof(float)) != 0) return nullptr;
  return static_cast<float*>(p);
}

KvCache::KvCache(const KvLayout& layout) : layout_(layout), pool_(layout.n_blocks > 0 ? layout.n_blocks : 0) {
  if (layout.n_layers <= 0 || layout.n_kv_heads <= 0 || layout.head_dim <= 0 || layout.block_size <= 0 ||
      layout.n_blocks <= 0)
    raise(Status::InvalidArgument, "impossible KV cache layout (%d layers, %d heads, dim %d, block %d, %d blocks)",
          layout.n_layers, layout.n_kv_heads, layout.head_dim, layout.block_size, layout.n_blocks);
  const size_t n = static_cast<size_t>(layout.n_layers) * layout.n_blocks * layout.block_elems();
  k_ = alloc_floats(n);
  v_ = alloc_floats(n);
  if (!k_ || !v_) {
    std::free(k_);
    std::free(v_);
    raise(Status::OutOfMemory, "cannot allocate %zu bytes for the KV cache", 2 * n * sizeof(float));
  }
  // Pages are committed lazily as blocks are first written; attention only
  // reads positions that were written.
}

KvCache::~KvCache() {
  std::free(k_);
  std::free(v_);
}

int KvCache::add_sequence() {
  int slot;
  if (!free_slots_.empty()) {
    slot = free_slots_.back();
    free_slots_.pop_back();
  } else {
    slot = static_cast<int>(tables_.size());
    tables_.emplace_back();
    live_.push_back(0);
  }
  tables_[slot].clear();
  live_[slot] = 1;
  return slot;
}

bool KvCache::has_sequence(int slot) const {
  return slot >= 0 && slot < static_cast<int>(tables_.size()) && live_[slot];
}

void KvCache::remove_sequence(int slot) {
  if (!has_sequence(slot)) raise(Status::Internal, "remove of unknown KV sequence %d", slot);
  for (int32_t b : tables_[slot]) pool_.release(b);
  tables_[slot].clear();
  live_[slot] = 0;
  free_slots_.push_back(slot);
}

bool KvCache::reserve(int slot, int n_tokens) {
  if (!has_sequence(slot)) raise(Status::Internal, "reserve on unknown KV sequence %d", slot);
  auto& table = tables_[slot];
  const int need = blocks_for(n_tokens) - static_cast<int>(table.size());
  if (need <= 0) return true;
  if (need > pool_.n_free()) return false;
  for (int i = 0; i < need; ++i) table.push_back(pool_.allocate());
  return true;
}

void KvCache::truncate(int slot, int n_tokens) {
  if (!has_sequence(slot)) raise(Status::Internal, "truncate on unknown KV sequence %d", slot);
  auto& table = tables_[slot];
  const size_t keep = static_cast<size_t>(blocks_for(n_tokens < 0 ? 0 : n_tokens));
  while (table.size() > keep) {
    pool_.release(table.back());
    table.pop_back();
  }
}

int KvCache::capacity(int slot) const {
  return has_sequence(slot) ? static_cast<int>(tables_[slot].size()) * layout_.block_size : 0;
}

}  // namespace infer
