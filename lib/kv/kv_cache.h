// The paged KV cache manager.
//
// K and V of every layer live in a pool of fixed-size blocks (block_size
// tokens each). A sequence owns a block table: logical position p of the
// sequence is token slot p % block_size of block table[p / block_size].
// Attention reads K/V through the table, so sequences grow without copies and
// a freed block is reused by any sequence.
//
// Inside a block the layout is [kv_head][token][head_dim] elements, so one
// head's keys of a block are contiguous for the attention kernel. Elements
// are f32, f16, or int8. int8 rows are stored after a Walsh-Hadamard rotation
// of each head (cpu/attention.cpp), with one 4-byte scale slot per
// (token, head):
//  - V: symmetric, an f32 scale: v ≈ q * scale, scale = max|v| / 127.
//  - K: asymmetric against a per-block offset: k ≈ c + z + q * s, with s and
//    z two f16 in the scale slot (k_scale_zero) and c a per-(block, head)
//    offset vector (one int8 row and an f32 scale, k_offset). c is the mean
//    of the previous block's stored keys of the sequence (0 in a sequence's
//    first block): keys share a large common part (the slow RoPE pairs) that
//    a per-token scale would otherwise spend its 8 bits on; the offset keeps
//    only each token's deviation from its neighbourhood (a per-channel zero
//    point per block, as KIVI's per-channel key quantization, predicted from
//    the previous block so tokens are still written one at a time).
//
// Prefix caching (the vLLM V1 design): a full block is identified by a
// chained hash h_i = H(h_{i-1}, salt, tokens of block i). Blocks are
// reference-counted and shared by every sequence whose prompt starts with the
// same tokens; the stored token ids are compared on every hit, so a hash
// collision never shares wrong data. A block whose count drops to zero stays
// in the cache, on a free queue ordered for eviction: blocks without a hash
// first, then cached ones least-recently-used first, the deeper blocks of a
// chain before the shallower ones (a finished sequence frees its blocks
// tail-first). Allocation takes the front of the queue, evicting its hash.
//
// Forks share every block of the parent; a shared block is copied before it
// is written (copy-on-write). Sliding-window models release blocks that lie
// wholly outside the window. A host tier keeps swapped-out sequences and
// evicted prefix blocks in a second pool so they can come back without
// recomputation.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <unordered_map>
#include <vector>

namespace infer {

enum class KvType : int { F32 = 0, F16 = 1, I8 = 2 };
const char* kv_type_name(KvType t);

struct KvLayout {
  int n_layers = 0;
  int n_kv_heads = 0;
  int head_dim = 0;
  int block_size = 16;
  int n_blocks = 0;        // device (primary) blocks
  int n_host_blocks = 0;   // second tier; 0 disables it
  KvType type = KvType::F32;

  int kv_dim() const { return n_kv_heads * head_dim; }
  size_t elem_bytes() const { return type == KvType::F32 ? 4 : type == KvType::F16 ? 2 : 1; }
  // Elements of K (or V) for one layer in one block.
  size_t block_elems() const { return static_cast<size_t>(block_size) * kv_dim(); }
  // Scales of K (or V) for one layer in one block (int8 only).
  size_t block_scales() const { return type == KvType::I8 ? static_cast<size_t>(block_size) * n_kv_heads : 0; }
  // Bytes of the K offset of one layer in one block (int8 only): an int8 row
  // and an f32 scale per KV head.
  size_t block_offset_bytes() const {
    return type == KvType::I8 ? static_cast<size_t>(n_kv_heads) * (head_dim + sizeof(float)) : 0;
  }
  // Bytes of K and V, all layers, scales and offsets included, for one block.
  size_t block_bytes() const {
    return static_cast<size_t>(n_layers) *
           (2 * (block_elems() * elem_bytes() + block_scales() * sizeof(float)) + block_offset_bytes());
  }
  // Bytes of K and V per token, all layers.
  double bytes_per_token() const { return static_cast<double>(block_bytes()) / block_size; }
};

// Raw storage of a pool of blocks for every layer.
class KvStorage {
 public:
  KvStorage(const KvLayout& layout, int n_blocks);
  ~KvStorage();
  KvStorage(const KvStorage&) = delete;
  KvStorage& operator=(const KvStorage&) = delete;

  void* k(int layer, int block) { return base_ + offset(layer, block, 0); }
  void* v(int layer, int block) { return base_ + offset(layer, block, 1); }
  const void* k(int layer, int block) const { return base_ + offset(layer, block, 0); }
  const void* v(int layer, int block) const { return base_ + offset(layer, block, 1); }
  // int8 scales, [kv_head][token] per block.
  float* k_scale(int layer, int block) { return scales_ + soffset(layer, block, 0); }
  float* v_scale(int layer, int block) { return scales_ + soffset(layer, block, 1); }
  const float* k_scale(int layer, int block) const { return scales_ + soffset(layer, block, 0); }
  const float* v_scale(int layer, int block) const { return scales_ + soffset(layer, block, 1); }
  // int8 K: the scale slots hold (s, z) as two f16, [kv_head][token][2].
  uint16_t* k_scale_zero(int layer, int block) { return reinterpret_cast<uint16_t*>(k_scale(layer, block)); }
  const uint16_t* k_scale_zero(int layer, int block) const {
    return reinterpret_cast<const uint16_t*>(k_scale(layer, block));
  }
  // int8 K offset of a block: [kv_head][head_dim] int8 and [kv_head] f32 scales.
  int8_t* k_offset(int layer, int block) { return offsets_ + ooffset(layer, block) * layout_.head_dim; }
  const int8_t* k_offset(int layer, int block) const { return offsets_ + ooffset(layer, block) * layout_.head_dim; }
  float* k_offset_scale(int layer, int block) { return offset_scales_ + ooffset(layer, block); }
  const float* k_offset_scale(int layer, int block) const { return offset_scales_ + ooffset(layer, block); }
  // Copies one block (all layers, K and V, scales) from src[src_block].
  void copy_block(int dst_block, const KvStorage& src, int src_block);

 private:
  size_t offset(int layer, int block, int kv) const {
    return ((static_cast<size_t>(layer) * n_blocks_ + block) * 2 + kv) * block_bytes_;
  }
  size_t soffset(int layer, int block, int kv) const {
    return ((static_cast<size_t>(layer) * n_blocks_ + block) * 2 + kv) * layout_.block_scales();
  }
  size_t ooffset(int layer, int block) const {
    return (static_cast<size_t>(layer) * n_blocks_ + block) * layout_.n_kv_heads;
  }
  KvLayout layout_;
  int n_blocks_;
  size_t block_bytes_;  // one layer, K or V, elements only
  uint8_t* base_ = nullptr;
  float* scales_ = nullptr;
  int8_t* offsets_ = nullptr;
  float* offset_scales_ = nullptr;
};

struct KvStats {
  int blocks_total = 0, blocks_used = 0, blocks_free = 0, blocks_cached = 0;
  int host_blocks_total = 0, host_blocks_used = 0, host_blocks_cached = 0;
  uint64_t prefix_query_tokens = 0;  // prompt tokens looked up in the prefix cache
  uint64_t prefix_hit_tokens = 0;    // of which were found
  uint64_t host_hit_tokens = 0;      // of the hits, served from the host tier
  uint64_t evictions = 0, swaps_out = 0, swaps_in = 0, cow_copies = 0;
};

class KvCache {
 public:
  // Error(OutOfMemory) when storage cannot be allocated,
  // Error(InvalidArgument) for an impossible layout.
  explicit KvCache(const KvLayout& layout);
  ~KvCache();
  KvCache(const KvCache&) = delete;
  KvCache& operator=(const KvCache&) = delete;

  const KvLayout& layout() const { return layout_; }
  KvType type() const { return layout_.type; }
  KvStorage& storage() { return *dev_; }
  const KvStorage& storage() const { return *dev_; }

  // ---- sequences ----
  int add_sequence();                  // a new, empty sequence's slot
  void remove_sequence(int slot);      // releases its blocks (tail first)
  bool has_sequence(int slot) const;
  // A new sequence sharing every block of `slot` (n_tokens positions).
  int fork(int slot);
  // Ensures room for n_tokens positions. False, changing nothing, when the
  // pool (after evicting unused cached blocks) has too few blocks.
  bool reserve(int slot, int n_tokens);
  // Makes positions [begin, end) writable: shared blocks in the range are
  // copied first (copy-on-write). False when no block is left for a copy.
  bool prepare_write(int slot, int begin, int end);
  // Drops positions >= n_tokens.
  void truncate(int slot, int n_tokens);
  // Sliding window: releases blocks whose positions are all < first_needed.
  void release_before(int slot, int first_needed);
  int capacity(int slot) const;  // positions the table covers
  // Block ids; -1 marks a block released by the sliding window.
  const std::vector<int32_t>& block_table(int slot) const { return seqs_[slot].blocks; }
  int blocks_for(int n_tokens) const { return (n_tokens + layout_.block_size - 1) / layout_.block_size; }
  // Blocks reserve(slot, n) would need to take from the pool.
  int blocks_needed(int slot, int n_tokens) const;

  // ---- prefix cache ----
  // For a new, empty sequence: attaches the longest run of cached full blocks
  // that begins `tokens` (verified token by token) and returns how many
  // positions they cover, always leaving at least one token to compute.
  int match_prefix(int slot, const int32_t* tokens, int n_tokens, uint64_t salt);
  // Registers the sequence's full blocks below n_computed (whose K/V are
  // final) in the prefix cache.
  void commit_blocks(int slot, const int32_t* tokens, int n_computed, uint64_t salt);

  // ---- host tier ----
  bool host_enabled() const { return host_ != nullptr; }
  // Moves every block of the sequence to the host pool and frees them here.
  // False (nothing changed) when the host pool has no room.
  bool swap_out(int slot);
  // Brings a swapped-out sequence back. False when the pool is short.
  bool swap_in(int slot);
  bool swapped(int slot) const { return seqs_[slot].swapped; }

  // ---- accounting ----
  KvStats stats() const;
  int n_blocks_total() const { return layout_.n_blocks; }
  int n_blocks_free() const { return n_free_; }   // allocatable (free + evictable cached)
  int n_blocks_used() const { return layout_.n_blocks - n_free_; }
  size_t bytes_total() const { return layout_.block_bytes() * layout_.n_blocks; }
  size_t bytes_used() const { return layout_.block_bytes() * n_blocks_used(); }
  int refcount(int block) const { return blocks_[block].refs; }
  bool block_cached(int block) const { return blocks_[block].hashed; }

  // Checks every internal invariant (tests): refcounts equal the number of
  // table entries, the free queue holds exactly the unreferenced blocks, the
  // hash map points at hashed blocks. Error(Internal) on a violation.
  void check_invariants() const;

 private:
  // A block's identity in the prefix cache: two independent 64-bit chained
  // hashes of the whole prefix (the map is keyed by the first, the second is
  // compared on a hit) plus the block's own token ids, compared too.
  struct Hash {
    uint64_t a = 0, b = 0;
    bool operator==(const Hash& o) const { return a == o.a && b == o.b; }
  };
  struct Block {
    int32_t refs = 0;
    bool hashed = false;
    Hash hash;
    int32_t prev = -1, next = -1;  // free queue links (when refs == 0)
    bool queued = false;
  };
  struct Seq {
    std::vector<int32_t> blocks;
    int n_committed = 0;          // leading blocks whose chained hash is known
    std::vector<Hash> hashes;     // chained hash of each committed block
    bool live = false;
    bool swapped = false;
    std::vector<int32_t> host_blocks;
  };
  struct HostBlock {
    bool used = false;
    bool hashed = false;          // an evicted prefix block (else: a swapped sequence's)
    Hash hash;
    uint64_t lru = 0;
  };

  int allocate();                 // -1 when nothing can be allocated
  void release(int block);
  void queue_push_front(int b);
  void queue_push_back(int b);
  void queue_remove(int b);
  void evict_hash(int b);
  void spill_to_host(int b);
  Hash block_hash(const Hash& parent, uint64_t salt, const int32_t* tokens) const;
  bool tokens_match(int block, const int32_t* tokens, bool host) const;
  int host_allocate();
  void host_release(int hb);

  KvLayout layout_;
  std::unique_ptr<KvStorage> dev_;
  std::vector<Block> blocks_;
  std::vector<int32_t> block_tokens_;  // block_size ids per block, for hit verification
  int32_t q_head_ = -1, q_tail_ = -1;  // free queue (front = next to allocate)
  int n_free_ = 0;
  std::unordered_map<uint64_t, int32_t> cached_;  // hash -> block

  std::unique_ptr<KvStorage> host_;
  std::vector<HostBlock> host_blocks_;
  std::vector<int32_t> host_tokens_;
  std::vector<int32_t> host_free_;
  std::unordered_map<uint64_t, int32_t> host_cached_;
  uint64_t host_clock_ = 0;

  std::vector<Seq> seqs_;
  std::vector<int> free_slots_;
  KvStats counters_;
};

}  // namespace infer
