// The CPU backend's non-matmul ops: every ISA's kernels against the scalar
// reference, attention over the paged KV cache against a plain reference
// (one softmax over all positions), and the determinism the engine relies
// on: a token's attention is bitwise the same alone or batched, with any
// number of threads and however a long context is split.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "core/backend.h"
#include "cpu/cpu_backend.h"
#include "core/fp16.h"
#include "core/threadpool.h"
#include "cpu/attention.h"
#include "cpu/ops.h"
#include "kv/kv_cache.h"
#include "test_util.h"

using namespace infer;

namespace {

std::vector<float> randn(size_t n, uint32_t seed, float sd = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, sd);
  std::vector<float> v(n);
  for (auto& x : v) x = nd(rng);
  return v;
}

float max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  float m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::fabs(a[i] - b[i]));
  return m;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// Every kernel table this machine can run (scalar always).
std::vector<const cpu::OpKernels*> all_kernels() {
  std::vector<const cpu::OpKernels*> ks;
  for (int i = 0; i <= static_cast<int>(cpu::detected_isa()); ++i)
    ks.push_back(&cpu::kernels_for(static_cast<cpu::Isa>(i)));
  return ks;
}

// ---- reference attention: the straightforward algorithm ----

void hadamard_ref(float* x, int n) {
  for (int len = 1; len < n; len <<= 1)
    for (int i = 0; i < n; i += len << 1)
      for (int j = i; j < i + len; ++j) {
        const float a = x[j], b = x[j + len];
        x[j] = a + b;
        x[j + len] = a - b;
      }
  const float norm = 1.0f / std::sqrt(static_cast<float>(n));
  for (int i = 0; i < n; ++i) x[i] *= norm;
}

// Row p of KV head h of a sequence, decoded by the reference format
// implementation (int8: still rotated).
std::vector<float> cached_row(const KvCache& kv, int slot, int layer, bool is_v, int h, int p) {
  const KvLayout& L = kv.layout();
  const int bs = L.block_size;
  std::vector<float> r(L.head_dim);
  kvfmt::read_row(as_host_memory(kv.memory()), layer, kv.block_table(slot)[p / bs], is_v, h, p % bs, r.data());
  return r;
}

// Each token's block table, for an AttnBatch.
std::vector<const int32_t*> tables_of(const KvCache& kv, const std::vector<int32_t>& slots) {
  std::vector<const int32_t*> t;
  for (int32_t s : slots) t.push_back(kv.block_table(s).data());
  return t;
}

// One softmax over all visible positions, in double.
std::vector<float> reference_attention(const float* q, const KvCache& kv, int layer, const AttnBatch& b, int n_head,
                                       float scale) {
  const KvLayout& L = kv.layout();
  const int hd = L.head_dim, group = n_head / L.n_kv_heads;
  const bool rotated = L.type == KvType::I8 && (hd & (hd - 1)) == 0;
  std::vector<float> out(static_cast<size_t>(b.n_tokens) * n_head * hd);
  for (int64_t t = 0; t < b.n_tokens; ++t)
    for (int h = 0; h < n_head; ++h) {
      std::vector<float> qh(q + (t * n_head + h) * hd, q + (t * n_head + h + 1) * hd);
      if (rotated) hadamard_ref(qh.data(), hd);
      const int hi = b.pos[t] + 1, lo = b.window > 0 ? std::max(0, hi - b.window) : 0;
      std::vector<double> s(hi - lo);
      double mx = -INFINITY;
      for (int p = lo; p < hi; ++p) {
        const std::vector<float> k = cached_row(kv, b.slot[t], layer, false, h / group, p);
        double dot = 0;
        for (int d = 0; d < hd; ++d) dot += static_cast<double>(qh[d]) * k[d];
        s[p - lo] = dot * scale;
        mx = std::max(mx, s[p - lo]);
      }
      double sum = 0;
      for (auto& x : s) sum += (x = std::exp(x - mx));
      std::vector<double> o(hd, 0.0);
      for (int p = lo; p < hi; ++p) {
        const std::vector<float> v = cached_row(kv, b.slot[t], layer, true, h / group, p);
        for (int d = 0; d < hd; ++d) o[d] += s[p - lo] / sum * v[d];
      }
      float* oh = out.data() + (t * n_head + h) * hd;
      for (int d = 0; d < hd; ++d) oh[d] = static_cast<float>(o[d]);
      if (rotated) hadamard_ref(oh, hd);
    }
  return out;
}

// A cache with sequences of the given lengths filled with random K/V.
struct Cache {
  std::unique_ptr<KvCache> kv;
  std::vector<int> slots;
  int kv_dim;

  Cache(KvType type, int n_kv, int hd, int bs, const std::vector<int>& lens, uint32_t seed) : kv_dim(n_kv * hd) {
    KvLayout L;
    L.n_layers = 2;
    L.n_kv_heads = n_kv;
    L.head_dim = hd;
    L.block_size = bs;
    L.type = type;
    for (int n : lens) L.n_blocks += (n + bs - 1) / bs;
    kv = std::make_unique<KvCache>(L);
    for (size_t i = 0; i < lens.size(); ++i) {
      const int slot = kv->add_sequence();
      REQUIRE(kv->reserve(slot, lens[i]));
      slots.push_back(slot);
      for (int layer = 0; layer < 2; ++layer) {
        const std::vector<float> k = randn(static_cast<size_t>(lens[i]) * kv_dim, seed + 97 * i + layer);
        const std::vector<float> v = randn(static_cast<size_t>(lens[i]) * kv_dim, seed + 97 * i + layer + 50);
        std::vector<int32_t> pos(lens[i]), sl(lens[i], slot);
        for (int p = 0; p < lens[i]; ++p) pos[p] = p;
        const std::vector<const int32_t*> tables = tables_of(*kv, sl);
        AttnBatch wb{lens[i], pos.data(), sl.data(), 0, tables.data()};
        ThreadPool pool(2);
        cpu::kv_write(pool, kv->memory(), layer, k.data(), v.data(), wb);
      }
    }
  }
};

struct Queries {
  std::vector<int32_t> pos, slot;
  std::vector<float> q;
  mutable std::vector<const int32_t*> tables;
  void add(int32_t s, int32_t p, const float* qrow, int q_dim) {
    pos.push_back(p);
    slot.push_back(s);
    q.insert(q.end(), qrow, qrow + q_dim);
  }
  AttnBatch batch(const KvCache& kv, int window = 0) const {
    tables = tables_of(kv, slot);
    return AttnBatch{static_cast<int64_t>(pos.size()), pos.data(), slot.data(), window, tables.data()};
  }
};

std::vector<float> run_attention(ThreadPool& pool, const Queries& qs, const KvCache& kv, int layer, int n_head,
                                 int window = 0) {
  const AttnBatch b = qs.batch(kv, window);
  std::vector<float> out(qs.q.size(), NAN);
  cpu::attention(pool, qs.q.data(), kv.memory(), layer, b, n_head, 1.0f / std::sqrt(static_cast<float>(kv.layout().head_dim)),
                 out.data());
  return out;
}

}  // namespace

TEST_CASE("op kernels: every ISA agrees with the scalar reference", "[ops]") {
  const cpu::OpKernels& ref = cpu::kernels_for(cpu::Isa::Scalar);
  for (const cpu::OpKernels* k : all_kernels()) {
    INFO("isa " << k->isa);
    for (int n : {1, 7, 8, 9, 31, 64, 100, 2048}) {
      INFO("n " << n);
      const std::vector<float> x = randn(n, 1 + n), y = randn(n, 2 + n), w = randn(n, 3 + n);
      // rms_norm
      std::vector<float> a(n), b(n);
      ref.rms_norm(x.data(), w.data(), n, 1e-5f, a.data());
      k->rms_norm(x.data(), w.data(), n, 1e-5f, b.data());
      for (int i = 0; i < n; ++i) REQUIRE(std::fabs(a[i] - b[i]) <= 2e-6f * (1 + std::fabs(a[i])));
      // in place
      b = x;
      k->rms_norm(b.data(), w.data(), n, 1e-5f, b.data());
      for (int i = 0; i < n; ++i) REQUIRE(std::fabs(a[i] - b[i]) <= 2e-6f * (1 + std::fabs(a[i])));
      // swiglu, over a wide range of gates
      std::vector<float> g(n);
      for (int i = 0; i < n; ++i) g[i] = x[i] * 8.0f;
      ref.swiglu(g.data(), y.data(), a.data(), n);
      k->swiglu(g.data(), y.data(), b.data(), n);
      for (int i = 0; i < n; ++i) REQUIRE(std::fabs(a[i] - b[i]) <= 1e-6f * (1 + std::fabs(a[i])));
      // add is exact
      a = x;
      b = x;
      ref.add(a.data(), y.data(), n);
      k->add(b.data(), y.data(), n);
      REQUIRE(same_bits(a, b));
      // f32 -> f16 is exact (round to nearest even)
      std::vector<uint16_t> ha(n), hb(n);
      ref.f32_to_f16(x.data(), ha.data(), n);
      k->f32_to_f16(x.data(), hb.data(), n);
      REQUIRE(ha == hb);
      // exp_sum
      a = x;
      b = x;
      float ma = 0, mb = 0;
      const float sa = ref.exp_sum(a.data(), n, &ma), sb = k->exp_sum(b.data(), n, &mb);
      REQUIRE(ma == mb);
      REQUIRE(std::fabs(sa - sb) <= 1e-6f * sa);
      for (int i = 0; i < n; ++i) REQUIRE(std::fabs(a[i] - b[i]) <= 4e-7f);
    }
    // int8 rows -> f32 is exact
    for (int hd : {3, 8, 64, 72}) {
      std::vector<int8_t> src(4 * hd);
      for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<int8_t>(static_cast<int>(i * 37 % 255) - 127);
      const float scales[4] = {0.01f, 0.5f, 0.0f, 3.25f};
      std::vector<float> a(4 * hd), b(4 * hd);
      ref.i8_rows_to_f32(src.data(), scales, 4, hd, a.data());
      k->i8_rows_to_f32(src.data(), scales, 4, hd, b.data());
      REQUIRE(same_bits(a, b));
    }
    // rope, both pair layouts, pair counts with and without a vector tail
    for (int half : {1, 3, 4, 8, 13, 32, 64}) {
      for (bool neox : {false, true}) {
        std::vector<float> cs(2 * half);
        for (int i = 0; i < half; ++i) {
          cs[2 * i] = std::cos(0.3f * i + 0.1f);
          cs[2 * i + 1] = std::sin(0.3f * i + 0.1f);
        }
        std::vector<float> a = randn(2 * half + 3, half), b = a;
        ref.rope(a.data(), cs.data(), half, neox);
        k->rope(b.data(), cs.data(), half, neox);
        REQUIRE(max_abs_diff(a, b) <= 1e-6f);
        REQUIRE(a[2 * half] == b[2 * half]);  // past the rotated dims: untouched
      }
    }
    // attention scores and weighted sums
    for (int hd : {4, 8, 12, 16, 32, 64, 80, 128}) {
      INFO("hd " << hd);
      const int n = 21, nq = 3;
      const std::vector<float> q = randn(nq * hd, hd), kr = randn(n * hd, hd + 1), p = randn(nq * 32, hd + 2);
      std::vector<float> sa(nq * 32, 0.0f), sb(nq * 32, 0.0f);
      ref.attn_scores(q.data(), nq, hd, kr.data(), n, hd, 0.125f, sa.data(), 32);
      k->attn_scores(q.data(), nq, hd, kr.data(), n, hd, 0.125f, sb.data(), 32);
      REQUIRE(max_abs_diff(sa, sb) <= 1e-5f);
      for (int i = 0; i < nq; ++i) REQUIRE(sb[i * 32 + n] == 0.0f);  // nothing written past n
      std::vector<float> oa(nq * hd, 1.0f), ob(nq * hd, 1.0f);
      ref.attn_accum(p.data(), nq, 32, kr.data(), n, hd, oa.data(), hd);
      k->attn_accum(p.data(), nq, 32, kr.data(), n, hd, ob.data(), hd);
      REQUIRE(max_abs_diff(oa, ob) <= 1e-4f);
    }
  }
}

TEST_CASE("op kernels: a query's scores and sums do not depend on the other queries of a call", "[ops]") {
  // The engine batches queries of different requests into one call (GQA
  // groups, prefill tiles): each query's results must be bitwise those it
  // gets alone, at any position in the call and with any key count.
  for (const cpu::OpKernels* k : all_kernels()) {
    INFO("isa " << k->isa);
    for (int hd : {8, 16, 48, 64, 128}) {
      INFO("hd " << hd);
      for (int n : {1, 5, 8, 16, 21}) {
        INFO("n " << n);
        const int nq = 7;
        const std::vector<float> q = randn(nq * hd, hd + n), kr = randn(n * hd, hd + 2 * n), p = randn(nq * 32, n);
        std::vector<float> all(nq * 32, 0.0f), oall(nq * hd, 0.5f);
        k->attn_scores(q.data(), nq, hd, kr.data(), n, hd, 0.125f, all.data(), 32);
        k->attn_accum(p.data(), nq, 32, kr.data(), n, hd, oall.data(), hd);
        for (int i = 0; i < nq; ++i) {
          std::vector<float> one(32, 0.0f), o1(hd, 0.5f);
          k->attn_scores(q.data() + i * hd, 1, hd, kr.data(), n, hd, 0.125f, one.data(), 32);
          k->attn_accum(p.data() + i * 32, 1, 32, kr.data(), n, hd, o1.data(), hd);
          REQUIRE(std::memcmp(one.data(), all.data() + i * 32, sizeof(float) * n) == 0);
          REQUIRE(std::memcmp(o1.data(), oall.data() + i * hd, sizeof(float) * hd) == 0);
        }
      }
    }
  }
}

TEST_CASE("op kernels: GELU-tanh gating and soft-capping are accurate and batch invariant on every ISA", "[ops]") {
  // Values from 1e-30 to 1e4 in magnitude (both signs, zero), so both of the
  // vector tanh's branches (below and above |y| = 1/4), the saturation and
  // tanh(y) ~ y near 0 are all covered.
  std::vector<float> x = {0.0f, -0.0f, 1e-30f, -1e-30f, 1e-7f, 0.2499999f, 0.25f, 0.2500001f, -0.25f};
  for (float v = 1e-6f; v < 1e4f; v *= 1.0137f) {
    x.push_back(v);
    x.push_back(-v);
  }
  const int64_t n = static_cast<int64_t>(x.size());
  const std::vector<float> up = randn(x.size(), 11);
  for (const cpu::OpKernels* k : all_kernels()) {
    INFO("isa " << k->isa);
    // softcap with cap 1 is tanh: relative error against double.
    for (float cap : {1.0f, 30.0f}) {
      std::vector<float> t = x;
      k->softcap(t.data(), n, cap);
      double worst = 0;
      for (int64_t i = 0; i < n; ++i) {
        const double want = cap * std::tanh(static_cast<double>(x[i]) / cap);
        REQUIRE(std::fabs(t[i]) <= cap);
        REQUIRE(std::signbit(t[i]) == std::signbit(x[i]));
        if (want != 0) worst = std::max(worst, std::fabs(t[i] - want) / std::fabs(want));
        else REQUIRE(t[i] == 0.0f);
      }
      INFO("cap " << cap << ": worst relative error " << worst);
      REQUIRE(worst < 1e-6);
    }
    // geglu against its definition in double (gates up to |g| = 30: beyond,
    // g^3 overflows nothing in double but the float result is g * up or 0).
    std::vector<float> g;
    for (float v : x)
      if (std::fabs(v) <= 30.0f) g.push_back(v);
    std::vector<float> o(g.size());
    k->geglu(g.data(), up.data(), o.data(), static_cast<int64_t>(g.size()));
    for (size_t i = 0; i < g.size(); ++i) {
      const double d = g[i];
      // 0.5 (1 + tanh(y)) = 1 / (1 + exp(-2y)): the definition, without the
      // double's own cancellation near tanh = -1 (large negative gates).
      const double y = std::sqrt(2.0 / M_PI) * (d + 0.044715 * d * d * d);
      const double want = d / (1.0 + std::exp(-2.0 * y)) * up[i];
      INFO("g " << g[i]);
      // Relative: a few float roundings, plus those of the exponent 2y (its
      // float rounding moves exp by about |2y| ulps).
      REQUIRE(std::fabs(o[i] - want) <= (2e-6 + 3e-7 * std::fabs(2.0 * y)) * std::fabs(want) + 1e-35);
    }
    // Each value alone (the vector tail path) gives the bits it gets inside
    // the long call, for every offset.
    for (size_t i = 0; i < g.size(); i += 7) {
      float one = 0;
      k->geglu(&g[i], &up[i], &one, 1);
      REQUIRE(std::memcmp(&one, &o[i], sizeof one) == 0);
      float c = g[i], all = g[i];
      k->softcap(&c, 1, 30.0f);
      std::vector<float> t(g.begin() + static_cast<std::ptrdiff_t>(i), g.end());
      k->softcap(t.data(), static_cast<int64_t>(t.size()), 30.0f);
      all = t[0];
      REQUIRE(std::memcmp(&c, &all, sizeof c) == 0);
    }
  }
}

TEST_CASE("op kernels: vector exp and silu are accurate", "[ops]") {
  for (const cpu::OpKernels* k : all_kernels()) {
    INFO("isa " << k->isa);
    // exp(x - 0) over [-87, 0] (softmax numerators), relative error.
    std::vector<float> x;
    for (float v = -87.0f; v <= 0.0f; v += 0.00731f) x.push_back(v);
    x.push_back(0.0f);
    std::vector<float> e = x;
    float m = 0;
    k->exp_sum(e.data(), static_cast<int>(e.size()), &m);
    REQUIRE(m == 0.0f);
    double worst = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      const double ref = std::exp(static_cast<double>(x[i]));
      worst = std::max(worst, std::fabs(e[i] - ref) / ref);
    }
    INFO("worst relative exp error " << worst);
    REQUIRE(worst < 5e-7);
    // exp(-inf) is exactly 0
    float t[3] = {0.0f, -INFINITY, -1000.0f};
    k->exp_sum(t, 3, &m);
    REQUIRE(t[0] == 1.0f);
    REQUIRE(t[1] == 0.0f);
    REQUIRE(t[2] == 0.0f);
    // silu(g) * 1 against double, over [-100, 100]
    std::vector<float> g, one;
    for (float v = -100.0f; v <= 100.0f; v += 0.0137f) g.push_back(v);
    one.assign(g.size(), 1.0f);
    std::vector<float> o(g.size());
    k->swiglu(g.data(), one.data(), o.data(), static_cast<int64_t>(g.size()));
    for (size_t i = 0; i < g.size(); ++i) {
      const double ref = g[i] / (1.0 + std::exp(-static_cast<double>(g[i])));
      REQUIRE(std::fabs(o[i] - ref) <= 1e-6 * std::fabs(ref) + 1e-30);
    }
  }
}

TEST_CASE("attention matches one softmax over all positions, every KV type and shape", "[ops][attention]") {
  ThreadPool pool(3);
  struct Shape {
    int hd, n_head, n_kv, bs;
  };
  for (KvType type : {KvType::F32, KvType::F16, KvType::I8}) {
    for (const Shape& sh : {Shape{8, 8, 4, 16}, Shape{64, 8, 2, 16}, Shape{4, 2, 2, 5}, Shape{12, 6, 3, 7},
                            Shape{128, 4, 1, 16}, Shape{16, 4, 4, 3}}) {
      for (int window : {0, 37}) {
        INFO("type " << kv_type_name(type) << " hd " << sh.hd << " heads " << sh.n_head << "/" << sh.n_kv << " block "
                     << sh.bs << " window " << window);
        const std::vector<int> lens{1, 17, 130, 300};
        Cache c(type, sh.n_kv, sh.hd, sh.bs, lens, 11);
        const int q_dim = sh.n_head * sh.hd;
        // Decode rows (last position) and prefill rows (a run of positions).
        Queries qs;
        const std::vector<float> qv = randn(static_cast<size_t>(40) * q_dim, 5);
        int r = 0;
        for (size_t s = 0; s < lens.size(); ++s) qs.add(c.slots[s], lens[s] - 1, &qv[(r++) * q_dim], q_dim);
        for (int p = 280; p < 300; ++p) qs.add(c.slots[3], p, &qv[(r++) * q_dim], q_dim);
        const std::vector<float> out = run_attention(pool, qs, *c.kv, 1, sh.n_head, window);
        const std::vector<float> ref =
            reference_attention(qs.q.data(), *c.kv, 1, qs.batch(*c.kv, window), sh.n_head, 1.0f / std::sqrt(float(sh.hd)));
        REQUIRE(max_abs_diff(out, ref) < 2e-5f);
      }
    }
  }
}

TEST_CASE("attention of a token does not depend on the batch, the threads or the KV split", "[ops][attention]") {
  for (KvType type : {KvType::F32, KvType::F16, KvType::I8}) {
    INFO("type " << kv_type_name(type));
    const int hd = 64, n_head = 8, n_kv = 2, q_dim = n_head * hd;
    const std::vector<int> lens{900, 40, 300};
    Cache c(type, n_kv, hd, 16, lens, 3);
    const std::vector<float> qv = randn(static_cast<size_t>(64) * q_dim, 9);
    // Reference: each token alone, one thread.
    ThreadPool one(1);
    struct Row {
      int slot, pos;
      const float* q;
    };
    std::vector<Row> rows;
    int r = 0;
    for (int p : {899, 500, 127, 128, 0}) rows.push_back({c.slots[0], p, &qv[(r++) * q_dim]});
    for (int p = 30; p < 40; ++p) rows.push_back({c.slots[1], p, &qv[(r++) * q_dim]});
    rows.push_back({c.slots[2], 299, &qv[(r++) * q_dim]});
    std::vector<std::vector<float>> alone;
    for (const Row& row : rows) {
      Queries qs;
      qs.add(row.slot, row.pos, row.q, q_dim);
      alone.push_back(run_attention(one, qs, *c.kv, 0, n_head));
    }
    for (int threads : {1, 2, 3, 5}) {
      ThreadPool pool(threads);
      for (int split : {0, 2, 3, 7}) {
        INFO("threads " << threads << " split " << split);
        cpu::set_attention_split_for_testing(split);
        // All rows in one batch, and each row alone on this pool.
        Queries all;
        for (const Row& row : rows) all.add(row.slot, row.pos, row.q, q_dim);
        const std::vector<float> out = run_attention(pool, all, *c.kv, 0, n_head);
        for (size_t i = 0; i < rows.size(); ++i) {
          INFO("row " << i);
          const std::vector<float> got(out.begin() + i * q_dim, out.begin() + (i + 1) * q_dim);
          REQUIRE(same_bits(got, alone[i]));
          Queries qs;
          qs.add(rows[i].slot, rows[i].pos, rows[i].q, q_dim);
          REQUIRE(same_bits(run_attention(pool, qs, *c.kv, 0, n_head), alone[i]));
        }
      }
    }
    cpu::set_attention_split_for_testing(0);
  }
}

TEST_CASE("backend row ops: batched rows equal rows computed alone, any thread count", "[ops]") {
  const int n = 2048, m = 37, n_heads = 6, hd = 64;
  const std::vector<float> x = randn(static_cast<size_t>(m) * n, 1), w = randn(n, 2);
  const std::vector<float> g = randn(static_cast<size_t>(m) * 5000 + 3, 3, 4.0f), u = randn(g.size(), 4);
  std::vector<float> inv(hd / 2);
  for (int i = 0; i < hd / 2; ++i) inv[i] = 1.0f / std::pow(10000.0f, 2.0f * i / hd);
  std::vector<int32_t> pos(m);
  for (int i = 0; i < m; ++i) pos[i] = 3 * i + 1;
  const std::vector<float> xr = randn(static_cast<size_t>(m) * n_heads * hd, 5);

  ThreadPool p1(1);
  auto b1 = make_cpu_backend(p1);
  std::vector<float> norm1(x.size()), sw1(g.size()), rope1 = xr;
  for (int i = 0; i < m; ++i) b1->rms_norm(x.data() + i * n, w.data(), 1, n, 1e-5f, norm1.data() + i * n);
  // swiglu of one token's slice at a time (the tail of every slice differs).
  for (size_t b = 0; b < g.size(); b += 5000) {
    const size_t e = std::min(g.size(), b + 5000);
    b1->swiglu(g.data() + b, u.data() + b, sw1.data() + b, static_cast<int64_t>(e - b));
  }
  for (bool neox : {false, true}) {
    RopeParams rp{hd, neox, inv.data(), 1.0f};
    std::vector<float> r1 = xr;
    for (int i = 0; i < m; ++i) b1->rope(r1.data() + i * n_heads * hd, 1, n_heads, hd, &pos[i], rp);
    for (int threads : {1, 2, 3}) {
      ThreadPool pool(threads);
      auto be = make_cpu_backend(pool);
      std::vector<float> r = xr;
      be->rope(r.data(), m, n_heads, hd, pos.data(), rp);
      REQUIRE(same_bits(r, r1));
      // A second call with new positions (same count) must not reuse the table.
      std::vector<int32_t> pos2(pos);
      for (auto& p : pos2) p += 5;
      std::vector<float> ra = xr, rb = xr;
      be->rope(ra.data(), m, n_heads, hd, pos2.data(), rp);
      for (int i = 0; i < m; ++i) b1->rope(rb.data() + i * n_heads * hd, 1, n_heads, hd, &pos2[i], rp);
      REQUIRE(same_bits(ra, rb));
      // Nor with other frequencies (another model) or a position scale.
      std::vector<float> inv2(inv);
      for (auto& f : inv2) f *= 0.5f;
      RopeParams rp2{hd, neox, inv2.data(), 0.25f};
      ra = xr;
      rb = xr;
      be->rope(ra.data(), m, n_heads, hd, pos2.data(), rp2);
      for (int i = 0; i < m; ++i) b1->rope(rb.data() + i * n_heads * hd, 1, n_heads, hd, &pos2[i], rp2);
      REQUIRE(same_bits(ra, rb));
      REQUIRE(!same_bits(ra, r1));
    }
  }
  for (int threads : {1, 2, 3}) {
    INFO("threads " << threads);
    ThreadPool pool(threads);
    auto be = make_cpu_backend(pool);
    std::vector<float> norm(x.size()), sw(g.size());
    be->rms_norm(x.data(), w.data(), m, n, 1e-5f, norm.data());
    REQUIRE(same_bits(norm, norm1));
    be->swiglu(g.data(), u.data(), sw.data(), static_cast<int64_t>(g.size()));
    REQUIRE(same_bits(sw, sw1));
    std::vector<float> a = x;
    be->add(a.data(), norm.data(), static_cast<int64_t>(a.size()));
    for (size_t i = 0; i < a.size(); ++i) REQUIRE(a[i] == x[i] + norm[i]);
  }
}

TEST_CASE("thread pool: shares are claimed once each, by any thread", "[threadpool]") {
  for (int n : {2, 3, 8}) {
    ThreadPool pool(n);
    for (int job = 0; job < 500; ++job) {
      std::vector<std::atomic<int>> seen(n);
      pool.run([&](int tid, int nth) {
        if (tid >= 0 && tid < nth) seen[tid]++;
      });
      for (auto& s : seen) REQUIRE(s == 1);
    }
    // parallel_for: every index exactly once, for sizes around the chunking.
    for (int64_t len : {1, 2, 5, 63, 64, 65, 1000, 4097}) {
      for (int64_t grain : {1, 7, 64, 5000}) {
        std::vector<std::atomic<int>> hits(len);
        std::atomic<bool> small_chunk{false};  // no REQUIRE on pool threads
        pool.parallel_for(len, grain, [&](int64_t b, int64_t e) {
          if (!(b < e && e - b >= std::min(grain, len))) small_chunk = true;
          for (int64_t i = b; i < e; ++i) hits[i]++;
        });
        REQUIRE(!small_chunk);
        for (auto& h : hits) REQUIRE(h == 1);
      }
    }
  }
}

TEST_CASE("thread pool: a share that stalls does not stop the others", "[threadpool]") {
  // One share sleeps; the rest of the work (dynamic chunks) is done by the
  // other threads meanwhile, and run() returns once everything is done.
  ThreadPool pool(3);
  std::atomic<int> chunks{0};
  std::atomic<bool> slept{false};
  pool.parallel_for(64, 1, [&](int64_t, int64_t) {
    if (!slept.exchange(true)) std::this_thread::sleep_for(std::chrono::milliseconds(30));
    chunks++;
  });
  REQUIRE(chunks == 12);  // 4 chunks per thread
  // Many short jobs on more threads than cores finish promptly.
  ThreadPool big(8);
  const auto t0 = std::chrono::steady_clock::now();
  std::atomic<int64_t> sum{0};
  for (int job = 0; job < 2000; ++job) big.run([&](int tid, int) { sum += tid; });
  REQUIRE(sum == 2000 * 28);
  REQUIRE(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(20));
}
