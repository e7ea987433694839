#include "kv/kv_cache.h"

#include "core/fault.h"

#define XXH_INLINE_ALL
#include <xxhash.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "core/error.h"

namespace infer {

// ---- cache ----

KvCache::KvCache(const KvLayout& layout, const KvMemoryFactory& make_memory) : layout_(layout) {
  // A state-space model without attention (model/mamba.h) has recurrent
  // state and no K/V: n_layers == 0.
  const bool attn_ok = layout.n_layers == 0 ? layout.state_bytes() > 0
                                            : layout.n_layers > 0 && layout.n_kv_heads > 0 && layout.head_dim > 0;
  if (!attn_ok || layout.n_ssm_layers < 0 || layout.ssm_conv_elems < 0 || layout.ssm_state_elems < 0 ||
      layout.block_size <= 0 || layout.n_blocks <= 0 || layout.n_host_blocks < 0)
    raise(Status::InvalidArgument, "impossible KV cache layout (%d layers, %d heads, dim %d, block %d, %d blocks)",
          layout.n_layers, layout.n_kv_heads, layout.head_dim, layout.block_size, layout.n_blocks);
  if (layout.type == KvType::I8 && layout.head_dim > 1024)
    raise(Status::InvalidArgument, "int8 KV supports head sizes up to 1024 (got %d)", layout.head_dim);
  const KvMemoryFactory& make = make_memory ? make_memory : KvMemoryFactory(make_host_kv_memory);
  dev_ = make(layout, layout.n_blocks, KvTier::Primary);
  if (!dev_ || dev_->n_blocks() != layout.n_blocks) raise(Status::Internal, "the backend made a KV pool of the wrong size");
  blocks_.resize(layout.n_blocks);
  block_tokens_.resize(static_cast<size_t>(layout.n_blocks) * layout.block_size);
  for (int b = layout.n_blocks - 1; b >= 0; --b) queue_push_front(b);  // low ids first
  if (layout.n_host_blocks > 0) {
    host_ = make(layout, layout.n_host_blocks, KvTier::Host);
    if (!host_ || host_->n_blocks() != layout.n_host_blocks)
      raise(Status::Internal, "the backend made a host KV pool of the wrong size");
    host_blocks_.resize(layout.n_host_blocks);
    host_tokens_.resize(static_cast<size_t>(layout.n_host_blocks) * layout.block_size);
    for (int b = layout.n_host_blocks - 1; b >= 0; --b) host_free_.push_back(b);
  }
}

KvCache::~KvCache() = default;

void KvCache::copy(KvTier dst_tier, int dst, KvTier src_tier, int src) {
  KvMemory& to = dst_tier == KvTier::Host ? *host_ : *dev_;
  const KvMemory& from = src_tier == KvTier::Host ? *host_ : *dev_;
  to.copy_block(dst, from, src);
  if (observer_) observer_(dst_tier, dst, src_tier, src);
}

void KvCache::mirror_table(int slot, const int32_t* blocks, int n) {
  if (slot < 0 || slot > (1 << 24) || n < 0) raise(Status::Internal, "mirror table: slot %d, %d blocks", slot, n);
  if (slot >= static_cast<int>(seqs_.size())) seqs_.resize(static_cast<size_t>(slot) + 1);
  for (int i = 0; i < n; ++i)
    if (blocks[i] < -1 || blocks[i] >= layout_.n_blocks)
      raise(Status::Internal, "mirror table: block %d of a %d-block pool", blocks[i], layout_.n_blocks);
  Seq& s = seqs_[static_cast<size_t>(slot)];
  s.live = true;
  s.blocks.assign(blocks, blocks + n);
}

void KvCache::mirror_copy(KvTier dst_tier, int dst, KvTier src_tier, int src) {
  const auto bad = [&](KvTier t, int b) {
    return t == KvTier::Host ? (!host_ || b < 0 || b >= layout_.n_host_blocks) : (b < 0 || b >= layout_.n_blocks);
  };
  if (bad(dst_tier, dst) || bad(src_tier, src))
    raise(Status::Internal, "mirror copy: block %d (tier %d) to %d (tier %d) is out of the pools", src,
          static_cast<int>(src_tier), dst, static_cast<int>(dst_tier));
  KvMemory& to = dst_tier == KvTier::Host ? *host_ : *dev_;
  const KvMemory& from = src_tier == KvTier::Host ? *host_ : *dev_;
  to.copy_block(dst, from, src);
}

// Links block b in at one end of the free queue: `outward` is the link that
// points past that end, `inward` the one that points into the queue.
void KvCache::queue_push(int b, bool front) {
  int32_t& end = front ? q_head_ : q_tail_;
  int32_t& other_end = front ? q_tail_ : q_head_;
  int32_t Block::*outward = front ? &Block::prev : &Block::next;
  int32_t Block::*inward = front ? &Block::next : &Block::prev;
  Block& k = blocks_[b];
  k.*outward = -1;
  k.*inward = end;
  if (end >= 0) blocks_[end].*outward = b; else other_end = b;
  end = b;
  k.queued = true;
  ++n_free_;
}

void KvCache::queue_remove(int b) {
  Block& k = blocks_[b];
  if (k.prev >= 0) blocks_[k.prev].next = k.next; else q_head_ = k.next;
  if (k.next >= 0) blocks_[k.next].prev = k.prev; else q_tail_ = k.prev;
  k.prev = k.next = -1;
  k.queued = false;
  --n_free_;
}

void KvCache::evict_hash(int b) {
  Block& k = blocks_[b];
  if (!k.hashed) return;
  auto it = cached_.find(k.hash.a);
  if (it != cached_.end() && it->second == b) cached_.erase(it);
  k.hashed = false;
}

// An evicted prefix block moves to the host tier (when there is one) so a
// later request with the same prefix copies it back instead of recomputing.
void KvCache::spill_to_host(int b) {
  if (!host_ || !blocks_[b].hashed) return;
  const Hash h = blocks_[b].hash;
  if (host_cached_.count(h.a)) return;
  const int hb = host_allocate();
  if (hb < 0) return;
  copy(KvTier::Host, hb, KvTier::Primary, b);
  std::memcpy(&host_tokens_[static_cast<size_t>(hb) * layout_.block_size],
              &block_tokens_[static_cast<size_t>(b) * layout_.block_size], sizeof(int32_t) * layout_.block_size);
  host_blocks_[hb].hashed = true;
  host_blocks_[hb].hash = h;
  host_blocks_[hb].lru = ++host_clock_;
  host_cached_[h.a] = hb;
}

int KvCache::allocate() {
  if (q_head_ < 0) return -1;
  const int b = q_head_;
  queue_remove(b);
  if (blocks_[b].hashed) {
    spill_to_host(b);
    evict_hash(b);
    ++counters_.evictions;
  }
  blocks_[b].refs = 1;
  return b;
}

void KvCache::release(int b) {
  if (b < 0 || b >= layout_.n_blocks || blocks_[b].refs <= 0)
    raise(Status::Internal, "release of block %d that is not in use", b);
  Block& k = blocks_[b];
  if (--k.refs > 0) return;
  // Cached blocks wait at the back (evicted last, least recently used
  // first); blocks holding nothing reusable go to the front.
  if (k.hashed) queue_push_back(b); else queue_push_front(b);
}

int KvCache::host_allocate() {
  if (!host_) return -1;
  if (host_free_.empty()) {
    // Evict the least recently stored prefix block; a swapped-out sequence's
    // blocks are never evicted.
    int victim = -1;
    for (int i = 0; i < static_cast<int>(host_blocks_.size()); ++i)
      if (host_blocks_[i].used && host_blocks_[i].hashed && (victim < 0 || host_blocks_[i].lru < host_blocks_[victim].lru))
        victim = i;
    if (victim < 0) return -1;
    host_release(victim);
  }
  const int hb = host_free_.back();
  host_free_.pop_back();
  host_blocks_[hb] = HostBlock{};
  host_blocks_[hb].used = true;
  return hb;
}

void KvCache::host_release(int hb) {
  HostBlock& h = host_blocks_[hb];
  if (!h.used) raise(Status::Internal, "release of host block %d that is not in use", hb);
  if (h.hashed) {
    auto it = host_cached_.find(h.hash.a);
    if (it != host_cached_.end() && it->second == hb) host_cached_.erase(it);
  }
  h = HostBlock{};
  host_free_.push_back(hb);
}

KvCache::Hash KvCache::block_hash(const Hash& parent, uint64_t salt, const int32_t* tokens) const {
  const size_t n = sizeof(int32_t) * layout_.block_size;
  Hash h;
  h.a = XXH3_64bits_withSeed(tokens, n, parent.a ^ (salt * 0x9E3779B97F4A7C15ull));
  h.b = XXH3_64bits_withSeed(tokens, n, (parent.b + 0x632BE59BD9B4E019ull) ^ XXH3_64bits(&salt, sizeof salt));
  return h;
}

bool KvCache::tokens_match(int block, const int32_t* tokens, bool host) const {
  const int32_t* stored = (host ? host_tokens_.data() : block_tokens_.data()) + static_cast<size_t>(block) * layout_.block_size;
  return std::memcmp(stored, tokens, sizeof(int32_t) * layout_.block_size) == 0;
}

int KvCache::add_sequence() {
  int slot;
  if (!free_slots_.empty()) {
    slot = free_slots_.back();
    free_slots_.pop_back();
  } else {
    fault::point("kv.add_sequence");
    // remove_sequence must never allocate: room for every slot's return.
    free_slots_.reserve(seqs_.size() + 1);
    slot = static_cast<int>(seqs_.size());
    seqs_.emplace_back();
  }
  seqs_[slot] = Seq{};
  seqs_[slot].live = true;
  return slot;
}

bool KvCache::has_sequence(int slot) const {
  return slot >= 0 && slot < static_cast<int>(seqs_.size()) && seqs_[slot].live;
}

void KvCache::remove_sequence(int slot) {
  if (!has_sequence(slot)) raise(Status::Internal, "remove of unknown KV sequence %d", slot);
  Seq& s = seqs_[slot];
  // Tail first: deeper blocks of a cached chain are evicted before shallower ones.
  for (auto it = s.blocks.rbegin(); it != s.blocks.rend(); ++it)
    if (*it >= 0) release(*it);
  for (int32_t hb : s.host_blocks)
    if (hb >= 0) host_release(hb);
  s = Seq{};
  free_slots_.push_back(slot);
}

int KvCache::fork(int slot) {
  if (!has_sequence(slot) || seqs_[slot].swapped) raise(Status::Internal, "fork of unknown or swapped sequence %d", slot);
  // Copies first: a failed allocation leaves everything as it was.
  fault::point("kv.fork");
  std::vector<int32_t> blocks = seqs_[slot].blocks;
  std::vector<Hash> hashes = seqs_[slot].hashes;
  const int child = add_sequence();
  Seq& c = seqs_[child];
  const Seq& p = seqs_[slot];
  c.blocks = std::move(blocks);
  c.n_committed = p.n_committed;
  c.hashes = std::move(hashes);
  for (int32_t b : c.blocks)
    if (b >= 0) ++blocks_[b].refs;
  return child;
}

int KvCache::blocks_needed(int slot, int n_tokens) const {
  return std::max(0, blocks_for(n_tokens) - static_cast<int>(seqs_[slot].blocks.size()));
}

bool KvCache::reserve(int slot, int n_tokens) {
  if (!has_sequence(slot) || seqs_[slot].swapped) raise(Status::Internal, "reserve on unknown or swapped sequence %d", slot);
  const int need = blocks_needed(slot, n_tokens);
  if (need > n_free_) return false;
  // Grow the table before taking blocks: an allocation failure (thrown
  // here) leaves the pool and the sequence as they were.
  fault::point("kv.reserve");
  seqs_[slot].blocks.reserve(seqs_[slot].blocks.size() + need);
  for (int i = 0; i < need; ++i) seqs_[slot].blocks.push_back(allocate());
  return true;
}

bool KvCache::prepare_write(int slot, int begin, int end) {
  if (!has_sequence(slot)) raise(Status::Internal, "prepare_write on unknown sequence %d", slot);
  Seq& s = seqs_[slot];
  const int bs = layout_.block_size;
  if (end <= begin) return true;
  if (end > capacity(slot)) raise(Status::Internal, "prepare_write beyond the reserved blocks");
  for (int i = begin / bs; i <= (end - 1) / bs; ++i) {
    const int b = s.blocks[i];
    if (b < 0) raise(Status::Internal, "write into a released block");
    if (i < s.n_committed) {  // its content is about to change: no longer a cached prefix
      s.n_committed = i;
      s.hashes.resize(i);
    }
    if (blocks_[b].refs > 1) {
      const int nb = allocate();
      if (nb < 0) return false;
      copy(KvTier::Primary, nb, KvTier::Primary, b);
      release(b);
      s.blocks[i] = nb;
      ++counters_.cow_copies;
    } else if (blocks_[b].hashed) {
      evict_hash(b);
    }
  }
  return true;
}

void KvCache::truncate(int slot, int n_tokens) {
  if (!has_sequence(slot)) raise(Status::Internal, "truncate on unknown KV sequence %d", slot);
  Seq& s = seqs_[slot];
  const size_t keep = static_cast<size_t>(blocks_for(std::max(0, n_tokens)));
  while (s.blocks.size() > keep) {
    if (s.blocks.back() >= 0) release(s.blocks.back());
    s.blocks.pop_back();
  }
  const int full = std::max(0, n_tokens) / layout_.block_size;
  if (s.n_committed > full) {
    s.n_committed = full;
    s.hashes.resize(full);
  }
}

void KvCache::release_before(int slot, int first_needed) {
  if (!has_sequence(slot)) raise(Status::Internal, "release_before on unknown KV sequence %d", slot);
  Seq& s = seqs_[slot];
  const int n = std::min<int>(first_needed / layout_.block_size, static_cast<int>(s.blocks.size()));
  for (int i = 0; i < n; ++i) {
    if (s.blocks[i] >= 0) {
      release(s.blocks[i]);
      s.blocks[i] = -1;
    }
  }
}

int KvCache::capacity(int slot) const {
  return has_sequence(slot) ? static_cast<int>(seqs_[slot].blocks.size()) * layout_.block_size : 0;
}

int KvCache::match_prefix(int slot, const int32_t* tokens, int n_tokens, uint64_t salt) {
  if (!has_sequence(slot) || !seqs_[slot].blocks.empty()) raise(Status::Internal, "match_prefix needs an empty sequence");
  Seq& s = seqs_[slot];
  const int bs = layout_.block_size;
  const int max_blocks = std::max(0, n_tokens - 1) / bs;  // keep at least one token to compute
  Hash parent;
  int hits = 0, host_hits = 0;
  for (int i = 0; i < max_blocks; ++i) {
    const int32_t* t = tokens + static_cast<size_t>(i) * bs;
    const Hash h = block_hash(parent, salt, t);
    int b = -1;
    auto it = cached_.find(h.a);
    if (it != cached_.end() && blocks_[it->second].hash == h && tokens_match(it->second, t, false)) {
      b = it->second;
      if (blocks_[b].refs == 0) queue_remove(b);
      ++blocks_[b].refs;
    } else if (host_) {
      auto hit = host_cached_.find(h.a);
      if (hit == host_cached_.end() || !(host_blocks_[hit->second].hash == h) || !tokens_match(hit->second, t, true))
        break;
      const int hb = hit->second;
      // Pin the host block (not an eviction candidate) while a device block
      // is allocated: that allocation may spill another block to the host.
      host_cached_.erase(hit);
      host_blocks_[hb].hashed = false;
      b = allocate();
      if (b < 0) {
        host_blocks_[hb].hashed = true;
        host_cached_[h.a] = hb;
        break;
      }
      copy(KvTier::Primary, b, KvTier::Host, hb);
      std::memcpy(&block_tokens_[static_cast<size_t>(b) * bs], t, sizeof(int32_t) * bs);
      blocks_[b].hashed = true;
      blocks_[b].hash = h;
      cached_[h.a] = b;
      host_release(hb);
      ++host_hits;
    } else {
      break;
    }
    s.blocks.push_back(b);
    s.hashes.push_back(h);
    parent = h;
    ++hits;
  }
  s.n_committed = hits;
  counters_.prefix_query_tokens += static_cast<uint64_t>(n_tokens);
  counters_.prefix_hit_tokens += static_cast<uint64_t>(hits) * bs;
  counters_.host_hit_tokens += static_cast<uint64_t>(host_hits) * bs;
  return hits * bs;
}

void KvCache::commit_blocks(int slot, const int32_t* tokens, int n_computed, uint64_t salt) {
  if (!has_sequence(slot)) raise(Status::Internal, "commit_blocks on unknown KV sequence %d", slot);
  Seq& s = seqs_[slot];
  const int bs = layout_.block_size;
  while ((s.n_committed + 1) * bs <= n_computed && s.n_committed < static_cast<int>(s.blocks.size())) {
    const int i = s.n_committed;
    const int b = s.blocks[i];
    if (b < 0) break;  // released by the sliding window: the chain stops here
    const int32_t* t = tokens + static_cast<size_t>(i) * bs;
    const Hash h = block_hash(i ? s.hashes[i - 1] : Hash{}, salt, t);
    if (!blocks_[b].hashed && !cached_.count(h.a)) {
      blocks_[b].hashed = true;
      blocks_[b].hash = h;
      std::memcpy(&block_tokens_[static_cast<size_t>(b) * bs], t, sizeof(int32_t) * bs);
      cached_[h.a] = b;
    }
    s.hashes.push_back(h);
    ++s.n_committed;
  }
}

bool KvCache::swap_out(int slot) {
  if (!has_sequence(slot) || seqs_[slot].swapped) raise(Status::Internal, "swap_out of unknown or swapped sequence %d", slot);
  if (!host_) return false;
  Seq& s = seqs_[slot];
  std::vector<int32_t> hbs(s.blocks.size(), -1);
  for (size_t i = 0; i < s.blocks.size(); ++i) {
    if (s.blocks[i] < 0) continue;
    const int hb = host_allocate();
    if (hb < 0) {
      for (int32_t x : hbs)
        if (x >= 0) host_release(x);
      return false;
    }
    copy(KvTier::Host, hb, KvTier::Primary, s.blocks[i]);
    hbs[i] = hb;
  }
  for (auto it = s.blocks.rbegin(); it != s.blocks.rend(); ++it)
    if (*it >= 0) release(*it);
  s.blocks.clear();
  s.host_blocks = std::move(hbs);
  s.swapped = true;
  s.n_committed = 0;  // the blocks come back under new ids, re-registered then
  s.hashes.clear();
  ++counters_.swaps_out;
  return true;
}

bool KvCache::swap_in(int slot) {
  if (!has_sequence(slot) || !seqs_[slot].swapped) raise(Status::Internal, "swap_in of a sequence that is not swapped");
  Seq& s = seqs_[slot];
  int need = 0;
  for (int32_t hb : s.host_blocks) need += hb >= 0;
  if (need > n_free_) return false;
  s.blocks.assign(s.host_blocks.size(), -1);
  for (size_t i = 0; i < s.host_blocks.size(); ++i) {
    if (s.host_blocks[i] < 0) continue;
    const int b = allocate();
    copy(KvTier::Primary, b, KvTier::Host, s.host_blocks[i]);
    host_release(s.host_blocks[i]);
    s.blocks[i] = b;
  }
  s.host_blocks.clear();
  s.swapped = false;
  ++counters_.swaps_in;
  return true;
}

KvStats KvCache::stats() const {
  KvStats st = counters_;
  st.blocks_total = layout_.n_blocks;
  st.blocks_free = n_free_;
  st.blocks_used = layout_.n_blocks - n_free_;
  st.blocks_cached = static_cast<int>(cached_.size());
  st.host_blocks_total = layout_.n_host_blocks;
  st.host_blocks_used = layout_.n_host_blocks - static_cast<int>(host_free_.size());
  st.host_blocks_cached = static_cast<int>(host_cached_.size());
  return st;
}

void KvCache::check_invariants() const {
  std::vector<int32_t> refs(layout_.n_blocks, 0);
  std::vector<int32_t> host_refs(layout_.n_host_blocks, 0);
  for (const Seq& s : seqs_) {
    if (!s.live) continue;
    if (s.swapped && !s.blocks.empty()) raise(Status::Internal, "a swapped sequence still holds blocks");
    for (int32_t b : s.blocks)
      if (b >= 0) ++refs[b];
    for (int32_t hb : s.host_blocks)
      if (hb >= 0) ++host_refs[hb];
    if (s.n_committed != static_cast<int>(s.hashes.size())) raise(Status::Internal, "committed count mismatch");
  }
  int queued = 0;
  for (int b = q_head_, prev = -1; b >= 0; prev = b, b = blocks_[b].next) {
    if (blocks_[b].prev != prev) raise(Status::Internal, "free queue link broken at %d", b);
    if (blocks_[b].refs != 0) raise(Status::Internal, "block %d is in use and on the free queue", b);
    if (++queued > layout_.n_blocks) raise(Status::Internal, "free queue has a cycle");
  }
  if (queued != n_free_) raise(Status::Internal, "free count %d but %d queued", n_free_, queued);
  for (int b = 0; b < layout_.n_blocks; ++b) {
    if (refs[b] != blocks_[b].refs)
      raise(Status::Internal, "block %d has refcount %d but %d holders", b, blocks_[b].refs, refs[b]);
    if ((blocks_[b].refs == 0) != blocks_[b].queued) raise(Status::Internal, "block %d queue state is wrong", b);
  }
  for (const auto& [h, b] : cached_)
    if (!blocks_[b].hashed || blocks_[b].hash.a != h) raise(Status::Internal, "cache map entry for block %d is stale", b);
  int host_used = 0;
  for (int hb = 0; hb < layout_.n_host_blocks; ++hb) {
    const HostBlock& h = host_blocks_[hb];
    host_used += h.used;
    if (host_refs[hb] > 1 || (host_refs[hb] == 1 && (!h.used || h.hashed)))
      raise(Status::Internal, "host block %d is held wrongly", hb);
    if (h.used && !h.hashed && host_refs[hb] == 0) raise(Status::Internal, "host block %d leaked", hb);
  }
  if (host_used != layout_.n_host_blocks - static_cast<int>(host_free_.size()))
    raise(Status::Internal, "host free list is inconsistent");
}

}  // namespace infer
