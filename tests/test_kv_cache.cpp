#include <map>
#include <random>

#include "core/error.h"
#include "kv/kv_cache.h"
#include "test_util.h"

using namespace infer;

namespace {

KvLayout small_layout(int n_blocks, int n_host = 0, KvType type = KvType::F32) {
  KvLayout l;
  l.n_layers = 2;
  l.n_kv_heads = 2;
  l.head_dim = 4;
  l.block_size = 4;
  l.n_blocks = n_blocks;
  l.n_host_blocks = n_host;
  l.type = type;
  return l;
}

// Fills every position of a sequence's blocks with a value derived from
// (token at that position, position), so shared or copied blocks can be
// checked for the right content.
void write_seq(KvCache& kv, int slot, const std::vector<int32_t>& toks, int begin, int end) {
  const KvLayout& L = kv.layout();
  for (int p = begin; p < end; ++p) {
    const int b = kv.block_table(slot)[p / L.block_size];
    float* k = static_cast<float*>(as_host_memory(kv.memory()).k(0, b));
    k[(p % L.block_size) * L.head_dim] = static_cast<float>(toks[p] * 1000 + p);
  }
}

float read_seq(const KvCache& kv, int slot, int p) {
  const KvLayout& L = kv.layout();
  const int b = kv.block_table(slot)[p / L.block_size];
  return static_cast<const float*>(as_host_memory(kv.memory()).k(0, b))[(p % L.block_size) * L.head_dim];
}

}  // namespace

TEST_CASE("KV bytes per token follow the element type", "[kv]") {
  KvLayout l = small_layout(1);
  l.n_layers = 22;
  l.n_kv_heads = 4;
  l.head_dim = 64;  // TinyLlama's KV shape
  l.type = KvType::F32;
  const double f32 = l.bytes_per_token();
  l.type = KvType::F16;
  const double f16 = l.bytes_per_token();
  l.type = KvType::I8;
  const double i8 = l.bytes_per_token();
  REQUIRE(f32 == 22 * 2 * 256 * 4);
  REQUIRE(f16 == f32 / 2);
  // int8: half of f16 plus one 4-byte scale slot per (token, head) for K and
  // V, plus the K offset of each block (an int8 row and an f32 scale per head).
  REQUIRE(i8 == f16 / 2 + 22 * 2 * 4 * 4 + 22.0 * 4 * (64 + 4) / l.block_size);
  l.block_size = 16;  // the engine's default: the offset adds 1/16 of a K row
  REQUIRE(l.bytes_per_token() == f16 / 2 + 22 * 2 * 4 * 4 + 22.0 * 4 * (64 + 4) / 16);
}

TEST_CASE("sequences grow through block tables and give blocks back", "[kv]") {
  KvCache kv(small_layout(5));
  const int s0 = kv.add_sequence(), s1 = kv.add_sequence();
  REQUIRE(kv.reserve(s0, 9));  // 3 blocks
  REQUIRE(kv.block_table(s0).size() == 3);
  REQUIRE(kv.capacity(s0) == 12);
  REQUIRE_FALSE(kv.reserve(s1, 13));  // needs 4, only 2 free: nothing allocated
  REQUIRE(kv.block_table(s1).empty());
  REQUIRE(kv.reserve(s1, 8));
  REQUIRE(kv.n_blocks_free() == 0);
  kv.truncate(s0, 4);
  REQUIRE(kv.block_table(s0).size() == 1);
  REQUIRE(kv.n_blocks_free() == 2);
  kv.remove_sequence(s1);
  REQUIRE(kv.n_blocks_used() == 1);
  REQUIRE_THROWS_AS(kv.remove_sequence(s1), Error);
  const int s2 = kv.add_sequence();
  REQUIRE(s2 == s1);  // slots are reused
  kv.remove_sequence(s0);
  kv.remove_sequence(s2);
  REQUIRE(kv.n_blocks_used() == 0);
  REQUIRE(kv.bytes_used() == 0);
  kv.check_invariants();
}

TEST_CASE("impossible KV layouts are rejected", "[kv]") {
  REQUIRE_THROWS_AS(KvCache(small_layout(0)), Error);
  KvLayout l = small_layout(4);
  l.head_dim = 0;
  REQUIRE_THROWS_AS(KvCache(l), Error);
}

TEST_CASE("prefix cache: full blocks are shared, verified, and evicted LRU deepest first", "[kv][prefix]") {
  KvCache kv(small_layout(8));
  const std::vector<int32_t> a = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};  // 2 full blocks + 2
  const int s0 = kv.add_sequence();
  REQUIRE(kv.match_prefix(s0, a.data(), 10, 0) == 0);
  REQUIRE(kv.reserve(s0, 10));
  write_seq(kv, s0, a, 0, 10);
  kv.commit_blocks(s0, a.data(), 10, 0);
  REQUIRE(kv.stats().blocks_cached == 2);

  // Same prompt: both full blocks are hits and shared.
  const int s1 = kv.add_sequence();
  REQUIRE(kv.match_prefix(s1, a.data(), 10, 0) == 8);
  REQUIRE(kv.block_table(s1)[0] == kv.block_table(s0)[0]);
  REQUIRE(kv.refcount(kv.block_table(s0)[1]) == 2);
  REQUIRE(read_seq(kv, s1, 5) == read_seq(kv, s0, 5));
  // A prompt of exactly two blocks keeps its last token to compute: one block hit.
  const int s2 = kv.add_sequence();
  REQUIRE(kv.match_prefix(s2, a.data(), 8, 0) == 4);
  // Another salt (another tenant) shares nothing.
  const int s3 = kv.add_sequence();
  REQUIRE(kv.match_prefix(s3, a.data(), 10, 42) == 0);
  // A different second block: only the first is shared.
  std::vector<int32_t> b = a;
  b[6] = 99;
  const int s4 = kv.add_sequence();
  REQUIRE(kv.match_prefix(s4, b.data(), 10, 0) == 4);
  kv.check_invariants();
  for (int s : {s1, s2, s3, s4}) kv.remove_sequence(s);
  kv.remove_sequence(s0);
  kv.check_invariants();
  // Freed but still cached: all blocks allocatable, cached ones still hit.
  REQUIRE(kv.n_blocks_free() == 8);
  REQUIRE(kv.stats().blocks_cached == 2);
  const int s5 = kv.add_sequence();
  REQUIRE(kv.match_prefix(s5, a.data(), 10, 0) == 8);
  kv.remove_sequence(s5);
  // Allocating everything evicts: uncached blocks go first, then the deeper
  // cached block before the shallower one.
  const int s6 = kv.add_sequence();
  REQUIRE(kv.reserve(s6, 4 * 7));
  REQUIRE(kv.stats().blocks_cached == 1);
  const int s7 = kv.add_sequence();
  REQUIRE(kv.match_prefix(s7, a.data(), 10, 0) == 4);  // the shallow block survived
  kv.remove_sequence(s7);
  kv.remove_sequence(s6);
  kv.check_invariants();
}

TEST_CASE("forks share blocks and copy the partial block on write", "[kv][fork]") {
  KvCache kv(small_layout(8));
  const std::vector<int32_t> t = {1, 2, 3, 4, 5, 6};
  const int p = kv.add_sequence();
  REQUIRE(kv.reserve(p, 6));
  write_seq(kv, p, t, 0, 6);
  const int c = kv.fork(p);
  REQUIRE(kv.block_table(c) == kv.block_table(p));
  REQUIRE(kv.n_blocks_used() == 2);
  // The child writes position 6 (in the shared partial block): it gets a copy.
  REQUIRE(kv.reserve(c, 7));
  REQUIRE(kv.prepare_write(c, 6, 7));
  REQUIRE(kv.block_table(c)[0] == kv.block_table(p)[0]);
  REQUIRE(kv.block_table(c)[1] != kv.block_table(p)[1]);
  REQUIRE(read_seq(kv, c, 5) == read_seq(kv, p, 5));  // copied content
  std::vector<int32_t> tc = t;
  tc.push_back(77);
  write_seq(kv, c, tc, 6, 7);
  REQUIRE(kv.stats().cow_copies == 1);
  // The parent's block is its own again: no copy for its write.
  REQUIRE(kv.prepare_write(p, 6, 7));
  REQUIRE(kv.stats().cow_copies == 1);
  kv.check_invariants();
  kv.remove_sequence(p);
  kv.remove_sequence(c);
  REQUIRE(kv.n_blocks_used() == 0);
}

TEST_CASE("sliding window releases blocks wholly outside it", "[kv][window]") {
  KvCache kv(small_layout(8));
  const int s = kv.add_sequence();
  REQUIRE(kv.reserve(s, 16));
  kv.release_before(s, 9);  // positions 0..8 unneeded: blocks 0 and 1 go
  REQUIRE(kv.block_table(s)[0] == -1);
  REQUIRE(kv.block_table(s)[1] == -1);
  REQUIRE(kv.block_table(s)[2] >= 0);
  REQUIRE(kv.n_blocks_used() == 2);
  REQUIRE(kv.reserve(s, 20));
  REQUIRE(kv.n_blocks_used() == 3);
  kv.check_invariants();
  kv.remove_sequence(s);
  REQUIRE(kv.n_blocks_used() == 0);
}

TEST_CASE("host tier: swapped sequences and evicted prefix blocks come back intact", "[kv][offload]") {
  KvCache kv(small_layout(4, 4));
  const std::vector<int32_t> t = {1, 2, 3, 4, 5, 6, 7, 8, 9};
  const int s = kv.add_sequence();
  REQUIRE(kv.reserve(s, 9));
  write_seq(kv, s, t, 0, 9);
  const float before = read_seq(kv, s, 7);
  REQUIRE(kv.swap_out(s));
  REQUIRE(kv.swapped(s));
  REQUIRE(kv.n_blocks_used() == 0);
  REQUIRE(kv.stats().host_blocks_used == 3);
  // Another sequence scribbles over the freed blocks.
  const int o = kv.add_sequence();
  REQUIRE(kv.reserve(o, 16));
  write_seq(kv, o, std::vector<int32_t>(16, 5), 0, 16);
  REQUIRE_FALSE(kv.swap_in(s));  // no room yet: nothing changes
  kv.remove_sequence(o);
  REQUIRE(kv.swap_in(s));
  REQUIRE(read_seq(kv, s, 7) == before);
  kv.commit_blocks(s, t.data(), 9, 0);
  kv.remove_sequence(s);
  kv.check_invariants();
  // Fill the pool so both cached blocks are evicted: they spill to the host
  // and a later match brings them back.
  const int f = kv.add_sequence();
  REQUIRE(kv.reserve(f, 16));
  REQUIRE(kv.stats().blocks_cached == 0);
  REQUIRE(kv.stats().host_blocks_cached == 2);
  kv.remove_sequence(f);
  const int r = kv.add_sequence();
  REQUIRE(kv.match_prefix(r, t.data(), 9, 0) == 8);
  REQUIRE(kv.stats().host_hit_tokens == 8);
  REQUIRE(read_seq(kv, r, 7) == before);
  kv.remove_sequence(r);
  kv.check_invariants();
}

TEST_CASE("randomized KV operations keep every invariant", "[kv][random]") {
  for (int with_host : {0, 1}) {
    KvCache kv(small_layout(24, with_host ? 12 : 0));
    std::mt19937 rng(7 + with_host);
    struct S {
      std::vector<int32_t> toks;
      int reserved = 0;
    };
    std::map<int, S> seqs;
    auto random_tokens = [&](int n) {
      std::vector<int32_t> v(n);
      for (auto& x : v) x = static_cast<int32_t>(rng() % 3);  // few values: many shared prefixes
      return v;
    };
    for (int step = 0; step < 4000; ++step) {
      const int op = static_cast<int>(rng() % 8);
      if (op == 0 && seqs.size() < 10) {  // add, with a prefix lookup
        S s;
        s.toks = random_tokens(1 + static_cast<int>(rng() % 20));
        const int slot = kv.add_sequence();
        s.reserved = kv.match_prefix(slot, s.toks.data(), static_cast<int>(s.toks.size()), rng() % 2);
        REQUIRE(s.reserved < static_cast<int>(s.toks.size()));
        seqs[slot] = s;
      } else if (!seqs.empty()) {
        auto it = seqs.begin();
        std::advance(it, rng() % seqs.size());
        const int slot = it->first;
        S& s = it->second;
        if (kv.swapped(slot)) {
          if (op < 4 && kv.swap_in(slot)) continue;
          if (op >= 6) {
            kv.remove_sequence(slot);
            seqs.erase(it);
          }
          continue;
        }
        if (op == 1 || op == 2) {  // extend (reserve + copy-on-write), then commit
          const int want = std::min<int>(static_cast<int>(s.toks.size()), s.reserved + 1 + static_cast<int>(rng() % 6));
          if (kv.reserve(slot, want) && kv.prepare_write(slot, s.reserved, want)) s.reserved = want;
          kv.commit_blocks(slot, s.toks.data(), s.reserved, 0);
          if (s.reserved == static_cast<int>(s.toks.size())) {
            auto more = random_tokens(1 + static_cast<int>(rng() % 4));
            s.toks.insert(s.toks.end(), more.begin(), more.end());
          }
        } else if (op == 3 && seqs.size() < 10) {  // fork
          const int child = kv.fork(slot);
          seqs[child] = s;
        } else if (op == 4) {  // truncate (speculative rollback)
          const int keep = s.reserved ? static_cast<int>(rng() % s.reserved) : 0;
          kv.truncate(slot, keep);
          s.reserved = keep;
          s.toks.resize(std::max<size_t>(keep + 1, 1));
        } else if (op == 5) {  // preempt to the host tier
          kv.swap_out(slot);
        } else {  // finish / cancel
          kv.remove_sequence(slot);
          seqs.erase(it);
        }
      }
      kv.check_invariants();
    }
    for (auto& [slot, s] : seqs) kv.remove_sequence(slot);
    kv.check_invariants();
    REQUIRE(kv.n_blocks_used() == 0);
    REQUIRE(kv.stats().host_blocks_used == kv.stats().host_blocks_cached);
  }
}
