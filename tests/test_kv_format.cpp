// The KV element formats (kv/kv_format.h): the scalar reference
// implementation's properties, and the CPU backend's kv_write producing
// exactly the reference's bytes however the tokens are batched.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "core/backend.h"
#include "core/error.h"
#include "core/fp16.h"
#include "core/threadpool.h"
#include "cpu/attention.h"
#include "kv/kv_cache.h"
#include "kv/kv_format.h"
#include "kv_test_util.h"

using namespace infer;

namespace {

std::vector<float> gauss(size_t n, uint32_t seed, float mean = 0.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(mean, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = nd(rng);
  return v;
}

KvLayout layout_of(KvType type, int n_kv, int hd, int bs, int n_blocks) {
  return infer_test::kv_layout(type, 2, n_kv, hd, bs, n_blocks);
}

// Every byte a pool holds for positions [0, n) of a sequence: elements,
// scale slots and the K offsets of its blocks, all layers (rows never
// written hold whatever the allocator left there).
std::vector<uint8_t> bytes_of(const HostKvMemory& m, const std::vector<int32_t>& table, int n) {
  const KvLayout& L = m.layout();
  const size_t es = L.elem_bytes(), hd = L.head_dim, bs = L.block_size;
  std::vector<uint8_t> out;
  auto put = [&](const void* p, size_t n_bytes) {
    const auto* b = static_cast<const uint8_t*>(p);
    out.insert(out.end(), b, b + n_bytes);
  };
  for (int l = 0; l < L.n_layers; ++l)
    for (int p = 0; p < n; ++p) {
      const int32_t blk = table[p / bs];
      for (int h = 0; h < L.n_kv_heads; ++h) {
        const size_t row = h * bs + p % bs;
        put(static_cast<const uint8_t*>(m.k(l, blk)) + row * hd * es, hd * es);
        put(static_cast<const uint8_t*>(m.v(l, blk)) + row * hd * es, hd * es);
        if (L.type == KvType::I8) {
          put(m.k_scale(l, blk) + row, sizeof(float));
          put(m.v_scale(l, blk) + row, sizeof(float));
        }
      }
      if (L.type == KvType::I8 && p % bs == 0) {
        put(m.k_offset(l, blk), static_cast<size_t>(L.n_kv_heads) * hd);
        put(m.k_offset_scale(l, blk), L.n_kv_heads * sizeof(float));
      }
    }
  return out;
}

}  // namespace

TEST_CASE("kv format: the Walsh-Hadamard transform is orthonormal and its own inverse", "[kv_format]") {
  for (int n : {1, 2, 8, 64, 128, 1024}) {
    std::vector<float> x = gauss(n, 3 + n), y = gauss(n, 5 + n), hx = x, hy = y;
    kvfmt::hadamard(hx.data(), n);
    kvfmt::hadamard(hy.data(), n);
    double d0 = 0, d1 = 0;
    for (int i = 0; i < n; ++i) {
      d0 += double(x[i]) * y[i];
      d1 += double(hx[i]) * hy[i];
    }
    CHECK(std::fabs(d0 - d1) <= 1e-4 * n);  // dot products survive (q·k in the rotated space)
    kvfmt::hadamard(hx.data(), n);
    for (int i = 0; i < n; ++i) CHECK(std::fabs(hx[i] - x[i]) <= 1e-5f);
  }
  CHECK(kvfmt::rotates(KvType::I8, 64));
  CHECK_FALSE(kvfmt::rotates(KvType::I8, 48));  // not a power of two: stored unrotated
  CHECK_FALSE(kvfmt::rotates(KvType::F16, 64));
}

TEST_CASE("kv format: int8 rows decode within half a step of what was stored", "[kv_format]") {
  const int hd = 64;
  for (uint32_t seed = 1; seed <= 50; ++seed) {
    // Rows with a large common part (as keys have), and zero rows.
    std::vector<float> x = gauss(hd, seed, seed % 3 == 0 ? 4.0f : 0.0f);
    if (seed == 7) std::fill(x.begin(), x.end(), 0.0f);
    std::vector<float> c = gauss(hd, 100 + seed, seed % 3 == 0 ? 4.0f : 0.0f);
    int8_t q[hd];
    float s = -1;
    kvfmt::encode_v_i8(x.data(), hd, q, &s);
    float amax = 0;
    for (float v : x) amax = std::max(amax, std::fabs(v));
    CHECK(s == Approx(amax / 127.0f));
    for (int d = 0; d < hd; ++d) CHECK(std::fabs(s * q[d] - x[d]) <= 0.5f * s + 1e-6f);

    uint16_t sz[2];
    kvfmt::encode_k_i8(x.data(), c.data(), hd, q, sz);
    float out[hd];
    kvfmt::decode_k_i8(q, sz, c.data(), hd, out);
    const float step = fp16_to_f32(sz[0]);
    for (int d = 0; d < hd; ++d) CHECK(std::fabs(out[d] - x[d]) <= 0.5f * step + 1e-5f * (1 + std::fabs(x[d])));
  }
  // The scale rounds up: the extreme values never clip.
  CHECK(fp16_to_f32(kvfmt::fp16_up(0.1f)) >= 0.1f);
  CHECK(fp16_to_f32(kvfmt::fp16_up(1.0f)) == 1.0f);
}

TEST_CASE("kv format: a block's K offset is the mean of the previous block's stored keys", "[kv_format]") {
  const int hd = 32, bs = 8, n_kv = 2;
  HostKvMemory m(layout_of(KvType::I8, n_kv, hd, bs, 4), 4);
  const std::vector<int32_t> table = {2, 0, 3};
  const int n = 2 * bs + 1;
  const std::vector<float> k = gauss(static_cast<size_t>(n) * n_kv * hd, 9, 3.0f);
  const std::vector<float> v = gauss(static_cast<size_t>(n) * n_kv * hd, 10);
  for (int p = 0; p < n; ++p)
    kvfmt::write_token(m, 1, table.data(), p, k.data() + p * n_kv * hd, v.data() + p * n_kv * hd);
  for (int h = 0; h < n_kv; ++h) {
    std::vector<float> c(hd);
    kvfmt::k_offset(m, 1, table[0], h, c.data());
    for (float x : c) CHECK(x == 0.0f);  // a sequence's first block has none
    for (int b = 1; b < 3; ++b) {
      std::vector<double> mean(hd, 0.0);
      std::vector<float> row(hd);
      for (int r = 0; r < bs; ++r) {
        kvfmt::read_row(m, 1, table[b - 1], false, h, r, row.data());
        for (int d = 0; d < hd; ++d) mean[d] += row[d] / bs;
      }
      kvfmt::k_offset(m, 1, table[b], h, c.data());
      const float os = m.k_offset_scale(1, table[b])[h];
      CHECK(os > 0.0f);
      for (int d = 0; d < hd; ++d) CHECK(std::fabs(c[d] - mean[d]) <= 0.5f * os + 1e-5f);
    }
    // Stored keys decode close to the written ones (rotated space).
    for (int p = 0; p < n; ++p) {
      std::vector<float> want(k.begin() + (p * n_kv + h) * hd, k.begin() + (p * n_kv + h + 1) * hd), got(hd);
      kvfmt::hadamard(want.data(), hd);
      kvfmt::read_row(m, 1, table[p / bs], false, h, p % bs, got.data());
      for (int d = 0; d < hd; ++d) CHECK(got[d] == Approx(want[d]).margin(0.05));
    }
  }
}

TEST_CASE("kv format: the CPU backend writes the reference's bytes, however tokens are batched", "[kv_format]") {
  ThreadPool pool(2);
  struct Shape {
    KvType type;
    int n_kv, hd, bs;
  };
  for (const Shape& sh : {Shape{KvType::F32, 2, 64, 16}, Shape{KvType::F16, 2, 64, 16}, Shape{KvType::I8, 2, 64, 16},
                          Shape{KvType::I8, 3, 48, 8}, Shape{KvType::F16, 1, 48, 4}}) {
    CAPTURE(kv_type_name(sh.type), sh.n_kv, sh.hd, sh.bs);
    const int kv_dim = sh.n_kv * sh.hd;
    const std::vector<int> lens = {37, 5, 16};
    int n_blocks = 0;
    for (int n : lens) n_blocks += (n + sh.bs - 1) / sh.bs;
    const KvLayout L = layout_of(sh.type, sh.n_kv, sh.hd, sh.bs, n_blocks);
    // Same tables in both pools: blocks handed out in a scrambled order.
    std::vector<std::vector<int32_t>> tables(lens.size());
    std::vector<int32_t> ids(n_blocks);
    for (int i = 0; i < n_blocks; ++i) ids[i] = (i * 7 + 3) % n_blocks;
    std::vector<int32_t> sorted = ids;
    std::sort(sorted.begin(), sorted.end());
    for (int i = 0; i < n_blocks; ++i) REQUIRE(sorted[i] == i);  // a permutation of the pool
    size_t next = 0;
    for (size_t s = 0; s < lens.size(); ++s)
      for (int b = 0; b < (lens[s] + sh.bs - 1) / sh.bs; ++b) tables[s].push_back(ids[next++]);
    std::vector<std::vector<float>> K, V;
    for (size_t s = 0; s < lens.size(); ++s) {
      K.push_back(gauss(static_cast<size_t>(lens[s]) * kv_dim, 20 + s, 2.0f));
      V.push_back(gauss(static_cast<size_t>(lens[s]) * kv_dim, 40 + s));
    }
    HostKvMemory ref(L, n_blocks);
    for (int layer = 0; layer < 2; ++layer)
      for (size_t s = 0; s < lens.size(); ++s)
        for (int p = 0; p < lens[s]; ++p)
          kvfmt::write_token(ref, layer, tables[s].data(), p, K[s].data() + p * kv_dim, V[s].data() + p * kv_dim);

    // The CPU backend, in steps of `chunk` tokens per sequence, all sequences
    // in each step (chunk 1: decode-like; large: prefill).
    for (int chunk : {1, 3, 16, 64}) {
      CAPTURE(chunk);
      HostKvMemory mem(L, n_blocks);
      for (int layer = 0; layer < 2; ++layer)
        for (int p0 = 0; p0 < 64; p0 += chunk) {
          std::vector<int32_t> pos, slot;
          std::vector<const int32_t*> tab;
          std::vector<float> k, v;
          for (size_t s = 0; s < lens.size(); ++s)
            for (int p = p0; p < std::min(lens[s], p0 + chunk); ++p) {
              pos.push_back(p);
              slot.push_back(static_cast<int32_t>(s));
              tab.push_back(tables[s].data());
              k.insert(k.end(), K[s].begin() + p * kv_dim, K[s].begin() + (p + 1) * kv_dim);
              v.insert(v.end(), V[s].begin() + p * kv_dim, V[s].begin() + (p + 1) * kv_dim);
            }
          if (pos.empty()) continue;
          AttnBatch b{static_cast<int64_t>(pos.size()), pos.data(), slot.data(), 0, tab.data()};
          cpu::kv_write(pool, mem, layer, k.data(), v.data(), b);
        }
      for (size_t s = 0; s < lens.size(); ++s) CHECK(bytes_of(mem, tables[s], lens[s]) == bytes_of(ref, tables[s], lens[s]));
    }
  }
}

TEST_CASE("kv format: pools copy whole blocks and refuse foreign or mismatched ones", "[kv_format]") {
  const KvLayout L = layout_of(KvType::I8, 2, 32, 4, 3);
  HostKvMemory a(L, 3), b(L, 2);
  const std::vector<int32_t> table = {1};
  const std::vector<float> k = gauss(4 * 64, 1, 2.0f), v = gauss(4 * 64, 2);
  for (int l = 0; l < 2; ++l)
    for (int p = 0; p < 4; ++p) kvfmt::write_token(a, l, table.data(), p, k.data() + p * 64, v.data() + p * 64);
  b.copy_block(0, a, 1);
  CHECK(bytes_of(b, {0}, 4) == bytes_of(a, {1}, 4));
  REQUIRE_THROWS_AS(b.copy_block(2, a, 1), Error);  // out of range
  KvLayout other = L;
  other.head_dim = 16;
  HostKvMemory c(other, 3);
  REQUIRE_THROWS_AS(c.copy_block(0, a, 1), Error);

  struct Foreign final : KvMemory {
    explicit Foreign(const KvLayout& l) : KvMemory(l, 1) {}
    void copy_block(int, const KvMemory&, int) override {}
  } foreign(L);
  REQUIRE_THROWS_AS(a.copy_block(0, foreign, 0), Error);
  ThreadPool pool(1);
  std::vector<int32_t> pos = {0}, slot = {0};
  const int32_t* tab[] = {table.data()};
  AttnBatch batch{1, pos.data(), slot.data(), 0, tab};
  REQUIRE_THROWS_AS(cpu::kv_write(pool, foreign, 0, k.data(), v.data(), batch), Error);
}

TEST_CASE("kv cache: the book-keeper takes both tiers' pools from the backend's factory", "[kv_format][kv]") {
  KvLayout L = layout_of(KvType::F16, 1, 8, 4, 6);
  L.n_host_blocks = 3;
  std::vector<std::pair<int, KvTier>> made;
  KvCache kv(L, [&](const KvLayout& l, int n, KvTier tier) {
    made.emplace_back(n, tier);
    return make_host_kv_memory(l, n, tier);
  });
  REQUIRE(made.size() == 2);
  CHECK(made[0] == std::make_pair(6, KvTier::Primary));
  CHECK(made[1] == std::make_pair(3, KvTier::Host));
  CHECK(kv.memory().n_blocks() == 6);
  // A factory that returns the wrong pool is caught at once.
  REQUIRE_THROWS_AS(KvCache(L, [](const KvLayout& l, int n, KvTier t) { return make_host_kv_memory(l, n + 1, t); }),
                    Error);
}
