// The paged KV cache manager.
//
// K and V of every layer live in a pool of fixed-size blocks (block_size
// tokens each). A sequence owns a block table: logical position p of the
// sequence is token slot p % block_size of block table[p / block_size].
// Attention reads K/V through the table, so sequences grow without copies and
// a freed block is reused by any sequence.
//
// The cache keeps the books only: which blocks each sequence owns, reference
// counts, the prefix hashes, the eviction order and the host tier's
// accounting. The bytes live in pools a backend allocates and owns
// (KvMemory, see kv_format.h for what a block holds); the cache asks them to
// copy whole blocks and attention reaches them through the block tables the
// batch carries.
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
#include <functional>
#include <memory>
#include <unordered_map>
#include <vector>

#include "kv/kv_format.h"

namespace infer {

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
  // Pools come from make_memory (a backend's; host memory when empty).
  // Error(OutOfMemory) when storage cannot be allocated,
  // Error(InvalidArgument) for an impossible layout.
  explicit KvCache(const KvLayout& layout, const KvMemoryFactory& make_memory = {});
  ~KvCache();
  KvCache(const KvCache&) = delete;
  KvCache& operator=(const KvCache&) = delete;

  const KvLayout& layout() const { return layout_; }
  KvType type() const { return layout_.type; }
  // The primary pool, which attention reads and writes.
  KvMemory& memory() { return *dev_; }
  const KvMemory& memory() const { return *dev_; }

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

  // ---- tensor parallelism (dist/tp.h) ----
  // Rank 0: called after every block copy the cache makes (copy-on-write,
  // swap out and in, a spill to or a hit from the host tier), in order, so
  // the other ranks can make the same copies in their shards of the pools.
  using CopyObserver = std::function<void(KvTier dst_tier, int dst, KvTier src_tier, int src)>;
  void set_copy_observer(CopyObserver fn) { observer_ = std::move(fn); }
  // Ranks 1..N-1: a mirror that keeps no books of its own. Its pools take
  // rank 0's copies (mirror_copy) and its sequences rank 0's block tables
  // (mirror_table), so a pass reads the same blocks on every rank. The
  // book-keeping methods above are not for a mirror.
  void mirror_table(int slot, const int32_t* blocks, int n);
  void mirror_copy(KvTier dst_tier, int dst, KvTier src_tier, int src);

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
  void queue_push(int b, bool front);
  void queue_push_front(int b) { queue_push(b, true); }
  void queue_push_back(int b) { queue_push(b, false); }
  void queue_remove(int b);
  void evict_hash(int b);
  void spill_to_host(int b);
  Hash block_hash(const Hash& parent, uint64_t salt, const int32_t* tokens) const;
  bool tokens_match(int block, const int32_t* tokens, bool host) const;
  int host_allocate();
  void host_release(int hb);

  // Copies block src of tier src_tier into block dst of dst_tier and tells the observer.
  void copy(KvTier dst_tier, int dst, KvTier src_tier, int src);

  KvLayout layout_;
  CopyObserver observer_;
  std::unique_ptr<KvMemory> dev_;
  std::vector<Block> blocks_;
  std::vector<int32_t> block_tokens_;  // block_size ids per block, for hit verification
  int32_t q_head_ = -1, q_tail_ = -1;  // free queue (front = next to allocate)
  int n_free_ = 0;
  std::unordered_map<uint64_t, int32_t> cached_;  // hash -> block

  std::unique_ptr<KvMemory> host_;
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
