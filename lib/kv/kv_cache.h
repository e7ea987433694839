// The paged KV cache (first version).
//
// K and V of every layer live in a pool of fixed-size blocks (block_size
// tokens each). A sequence owns a block table: logical position p of the
// sequence is token slot p % block_size of block table[p / block_size].
// Attention reads K/V through the table, so sequences grow without copies and
// a freed block is reused by any sequence.
//
// Inside a block the layout is [kv_head][token][head_dim], so one head's keys
// of a block are contiguous for the attention kernel.
//
// Blocks carry reference counts so that later work (prefix caching, forks)
// can share them; this version gives each block a single owner.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "core/dtype.h"

namespace infer {

struct KvLayout {
  int n_layers = 0;
  int n_kv_heads = 0;
  int head_dim = 0;
  int block_size = 16;
  int n_blocks = 0;
  int kv_dim() const { return n_kv_heads * head_dim; }
  // Floats of K (or V) for one layer in one block.
  size_t block_elems() const { return static_cast<size_t>(block_size) * kv_dim(); }
  // Bytes of K and V, all layers, one block (f32 storage).
  size_t block_bytes() const { return 2 * block_elems() * n_layers * sizeof(float); }
};

// Fixed pool of block ids with O(1) allocate / release and reference counts.
class BlockPool {
 public:
  explicit BlockPool(int n_blocks);
  int allocate();  // -1 when no block is free
  void retain(int block);
  void release(int block);  // back on the free list when the count reaches 0
  int n_free() const { return static_cast<int>(free_.size()); }
  int n_total() const { return static_cast<int>(refs_.size()); }
  int refcount(int block) const { return refs_[block]; }

 private:
  std::vector<int32_t> free_;  // stack of free ids
  std::vector<int32_t> refs_;
};

class KvCache {
 public:
  // Error(OutOfMemory) when the storage cannot be allocated,
  // Error(InvalidArgument) for an impossible layout.
  explicit KvCache(const KvLayout& layout);
  ~KvCache();
  KvCache(const KvCache&) = delete;
  KvCache& operator=(const KvCache&) = delete;

  const KvLayout& layout() const { return layout_; }

  // A new, empty sequence; returns its slot id (reused after removal).
  int add_sequence();
  // Releases every block of the sequence and frees its slot.
  void remove_sequence(int slot);
  // Ensures the sequence can hold n_tokens positions. Returns false, changing
  // nothing, when the pool has too few free blocks.
  bool reserve(int slot, int n_tokens);
  // Drops positions >= n_tokens, releasing blocks no longer needed.
  void truncate(int slot, int n_tokens);
  int capacity(int slot) const;  // positions the sequence's blocks can hold
  bool has_sequence(int slot) const;
  const std::vector<int32_t>& block_table(int slot) const { return tables_[slot]; }
  // Blocks needed for n tokens.
  int blocks_for(int n_tokens) const { return (n_tokens + layout_.block_size - 1) / layout_.block_size; }

  // Base of block `block` of layer `layer`: [kv_head][token][head_dim] floats.
  float* k_block(int layer, int block) { return k_ + offset(layer, block); }
  float* v_block(int layer, int block) { return v_ + offset(layer, block); }
  const float* k_block(int layer, int block) const { return k_ + offset(layer, block); }
  const float* v_block(int layer, int block) const { return v_ + offset(layer, block); }

  int n_blocks_total() const { return pool_.n_total(); }
  int n_blocks_used() const { return pool_.n_total() - pool_.n_free(); }
  int n_blocks_free() const { return pool_.n_free(); }
  size_t bytes_total() const { return layout_.block_bytes() * layout_.n_blocks; }
  size_t bytes_used() const { return layout_.block_bytes() * n_blocks_used(); }
  const BlockPool& pool() const { return pool_; }

 private:
  size_t offset(int layer, int block) const {
    return (static_cast<size_t>(layer) * layout_.n_blocks + block) * layout_.block_elems();
  }
  KvLayout layout_;
  BlockPool pool_;
  float* k_ = nullptr;
  float* v_ = nullptr;
  std::vector<std::vector<int32_t>> tables_;
  std::vector<uint8_t> live_;
  std::vector<int> free_slots_;
};

}  // namespace infer
