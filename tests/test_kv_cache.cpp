#include <map>
#include <random>

#include "core/error.h"
#include "kv/kv_cache.h"
#include "test_util.h"

using namespace infer;

namespace {
KvLayout small_layout(int n_blocks) {
  KvLayout l;
  l.n_layers = 2;
  l.n_kv_heads = 2;
  l.head_dim = 4;
  l.block_size = 4;
  l.n_blocks = n_blocks;
  return l;
}
}  // namespace

TEST_CASE("block pool allocates, reference-counts and frees in O(1)", "[kv]") {
  BlockPool pool(3);
  REQUIRE(pool.n_free() == 3);
  const int a = pool.allocate(), b = pool.allocate(), c = pool.allocate();
  REQUIRE((a >= 0 && b >= 0 && c >= 0));
  REQUIRE(pool.allocate() == -1);
  pool.retain(b);
  REQUIRE(pool.refcount(b) == 2);
  pool.release(b);
  REQUIRE(pool.n_free() == 0);
  pool.release(b);
  REQUIRE(pool.n_free() == 1);
  REQUIRE(pool.allocate() == b);
  REQUIRE_THROWS_AS(pool.release(99), Error);
  pool.release(a);
  REQUIRE_THROWS_AS(pool.release(a), Error);  // double free is caught
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
}

TEST_CASE("impossible KV layouts are rejected", "[kv]") {
  REQUIRE_THROWS_AS(KvCache(small_layout(0)), Error);
  KvLayout l = small_layout(4);
  l.head_dim = 0;
  REQUIRE_THROWS_AS(KvCache(l), Error);
}

TEST_CASE("randomized KV operations keep the pool consistent", "[kv]") {
  KvCache kv(small_layout(32));
  std::mt19937 rng(7);
  std::map<int, int> length;  // slot -> tokens reserved (model of the expected state)
  for (int step = 0; step < 5000; ++step) {
    const int op = rng() % 4;
    if (op == 0 && length.size() < 12) {
      length[kv.add_sequence()] = 0;
    } else if (!length.empty()) {
      auto it = length.begin();
      std::advance(it, rng() % length.size());
      if (op == 1) {
        const int want = it->second + 1 + static_cast<int>(rng() % 9);
        const int before = kv.n_blocks_free();
        const int need = kv.blocks_for(want) - kv.blocks_for(it->second);
        if (kv.reserve(it->first, want)) {
          it->second = want;
        } else {
          REQUIRE(need > before);
          REQUIRE(kv.n_blocks_free() == before);
        }
      } else if (op == 2) {
        const int keep = it->second ? static_cast<int>(rng() % it->second) : 0;
        kv.truncate(it->first, keep);
        it->second = keep;
      } else {
        kv.remove_sequence(it->first);
        length.erase(it);
      }
    }
    // Invariants: blocks in use = blocks held by tables; no block held twice.
    int held = 0;
    std::vector<int> owners(32, 0);
    for (auto& [slot, n] : length) {
      REQUIRE(static_cast<int>(kv.block_table(slot).size()) == kv.blocks_for(n));
      for (int b : kv.block_table(slot)) {
        ++owners[b];
        REQUIRE(kv.pool().refcount(b) == 1);
      }
      held += static_cast<int>(kv.block_table(slot).size());
    }
    for (int o : owners) REQUIRE(o <= 1);
    REQUIRE(kv.n_blocks_used() == held);
  }
  for (auto& [slot, n] : length) kv.remove_sequence(slot);
  REQUIRE(kv.n_blocks_used() == 0);
}
