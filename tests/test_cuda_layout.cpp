// The CUDA kernels' index math (cuda/layout.h) and load-time repacking
// (cuda/repack.h), checked on the CPU: these run in every build, GPU or not.
// - the mma fragment maps against the PTX ISA's tables, and their inverse;
// - every repacked 4-bit / Q8_0 weight, read back by the kernel's own path
//   (word, shift, f16 magic), equals lib/quant's dequantization exactly;
// - the paged-KV address functions against HostKvMemory's own pointers and
//   the reference's write_token / read_row;
// - flash-decoding's split/merge against a one-pass softmax, with masked
//   scores and empty splits, and the split plan's coverage;
// - the attention kernels' algorithm, run on the host through those
//   functions, against the CPU backend's attention over the same f16 pool.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <set>
#include <vector>

#include "core/backend.h"
#include "cpu/cpu_backend.h"
#include "core/dtype.h"
#include "core/fp16.h"
#include "core/threadpool.h"
#include "cuda/layout.h"
#include "cuda/repack.h"
#include "kv_test_util.h"
#include "kv/kv_format.h"
#include "quant/dequant.h"
#include "quant/formats.h"

using namespace infer;
namespace lay = infer::cuda::layout;

namespace {

std::vector<float> gauss(size_t n, uint32_t seed) { return infer_test::cuda_gauss(n, seed); }

// A quantized matrix: its bytes, its view and its dequantized values.
struct QMatrix {
  std::vector<uint8_t> bytes;
  std::vector<float> deq;  // [n_out][n_in]
  WeightView w;
};

QMatrix make_matrix(DType t, int64_t n_out, int64_t n_in, uint32_t seed) {
  QMatrix m;
  const std::vector<float> x = gauss(static_cast<size_t>(n_out * n_in), seed);
  const size_t rb = dtype_row_bytes(t, n_in);
  m.bytes.resize(rb * n_out);
  m.deq.resize(x.size());
  for (int64_t r = 0; r < n_out; ++r) {
    quantize_row(t, x.data() + r * n_in, m.bytes.data() + r * rb, n_in);
    dequantize_row(t, m.bytes.data() + r * rb, m.deq.data() + r * n_in, n_in);
  }
  m.w.type = t;
  m.w.n_in = n_in;
  m.w.n_out = n_out;
  m.w.data = m.bytes.data();
  m.w.row_bytes = rb;
  return m;
}

}  // namespace

TEST_CASE("cuda layout: the mma.m16n8k16 fragment maps are the PTX ISA's", "[cuda_layout]") {
  // The PTX ISA numbers a thread's halves a0..a7 (A), b0..b3 (B), c0..c3 (C)
  // and gives row/col per index i; register r, half h is i = 2 r + h.
  std::set<std::pair<int, int>> a_cells, b_cells, c_cells;
  for (int lane = 0; lane < 32; ++lane) {
    const int g = lane / 4, t = lane % 4;
    for (int i = 0; i < 8; ++i) {
      const int r = i / 2, h = i % 2;
      const int row = (i == 2 || i == 3 || i == 6 || i == 7) ? g + 8 : g;
      const int col = t * 2 + (i & 1) + (i >= 4 ? 8 : 0);
      REQUIRE(lay::mma_a_row(lane, r) == row);
      REQUIRE(lay::mma_a_col(lane, r, h) == col);
      int l2 = -1, r2 = -1, h2 = -1;
      lay::mma_a_slot(row, col, &l2, &r2, &h2);
      REQUIRE(l2 == lane);
      REQUIRE(r2 == r);
      REQUIRE(h2 == h);
      a_cells.insert({row, col});
    }
    for (int i = 0; i < 4; ++i) {
      const int r = i / 2, h = i % 2;
      REQUIRE(lay::mma_b_row(lane, r, h) == t * 2 + (i & 1) + (i >= 2 ? 8 : 0));
      REQUIRE(lay::mma_b_col(lane) == g);
      b_cells.insert({lay::mma_b_row(lane, r, h), lay::mma_b_col(lane)});
      REQUIRE(lay::mma_c_row(lane, i) == (i < 2 ? g : g + 8));
      REQUIRE(lay::mma_c_col(lane, i) == t * 2 + (i & 1));
      c_cells.insert({lay::mma_c_row(lane, i), lay::mma_c_col(lane, i)});
    }
  }
  // Each map covers its tile once: 16x16, 16x8, 16x8.
  CHECK(a_cells.size() == 256);
  CHECK(b_cells.size() == 128);
  CHECK(c_cells.size() == 128);
}

TEST_CASE("cuda layout: 4-bit weights repacked as mma fragments dequantize exactly", "[cuda_layout]") {
  const DType types[] = {DType::Q4_0, DType::INT4_G32, DType::INT4_G64, DType::INT4_G128};
  const int64_t outs[] = {1, 16, 17, 40};
  uint32_t seed = 1;
  for (DType t : types) {
    const int64_t group = t == DType::INT4_G64 ? 64 : t == DType::INT4_G128 ? 128 : 32;
    for (int64_t n_out : outs) {
      for (int64_t n_in : {group, 2 * group, 3 * group}) {
        INFO(dtype_name(t) << " " << n_out << " x " << n_in);
        const QMatrix m = make_matrix(t, n_out, n_in, seed++);
        REQUIRE(cuda::w4_repackable(t));
        const cuda::W4Weights r = cuda::repack_w4(m.w);
        const lay::W4Layout& L = r.L;
        REQUIRE(L.group == group);
        REQUIRE(r.q.size() == static_cast<size_t>(L.n_words()));
        // By index (the host's view).
        for (int64_t n = 0; n < n_out; ++n)
          for (int64_t k = 0; k < n_in; ++k) REQUIRE(cuda::w4_value(r, n, k) == m.deq[n * n_in + k]);
        // By the kernel's path: each lane's word of each tile, register r's
        // pair bits, the f16 magic 0x6400 | q = 1024 + q, then (q - z) * d at
        // the fragment's row and column. Padding rows must read as zero.
        for (int64_t nt = 0; nt < L.n_tiles(); ++nt)
          for (int64_t kt = 0; kt < L.k_tiles(); ++kt)
            for (int lane = 0; lane < 32; ++lane) {
              const uint32_t word = r.q[lay::w4_word(L, nt, kt, lane)];
              for (int reg = 0; reg < 4; ++reg) {
                const uint32_t bits = lay::w4_pair_bits(word, reg) | 0x64006400u;
                for (int h = 0; h < 2; ++h) {
                  const float magic = fp16_to_f32(static_cast<uint16_t>(h ? bits >> 16 : bits & 0xffffu));
                  const int code = static_cast<int>(magic) - 1024;
                  REQUIRE(code >= 0);
                  REQUIRE(code < 16);
                  REQUIRE(magic == 1024.0f + static_cast<float>(code));
                  const int64_t n = nt * 16 + lay::mma_a_row(lane, reg);
                  const int64_t k = kt * 16 + lay::mma_a_col(lane, reg, h);
                  const int64_t gi = lay::w4_group_index(L, n, k);
                  const float v = static_cast<float>(code - r.zero[gi]) * fp16_to_f32(r.scale[gi]);
                  if (n < n_out)
                    REQUIRE(v == m.deq[n * n_in + k]);
                  else
                    REQUIRE(v == 0.0f);
                }
              }
            }
      }
    }
  }
  // Formats the layout does not take, and rows it cannot tile.
  CHECK(!cuda::w4_repackable(DType::Q8_0));
  QMatrix q8 = make_matrix(DType::Q8_0, 2, 64, 99);
  CHECK_THROWS(cuda::repack_w4(q8.w));
}

TEST_CASE("cuda layout: Q8_0 repacked into codes and scales dequantizes exactly", "[cuda_layout]") {
  for (int64_t n_out : {1, 7, 33})
    for (int64_t n_in : {32, 96, 256}) {
      const QMatrix m = make_matrix(DType::Q8_0, n_out, n_in, static_cast<uint32_t>(n_out * 1000 + n_in));
      const cuda::Q8Weights r = cuda::repack_q8_0(m.w);
      for (int64_t n = 0; n < n_out; ++n)
        for (int64_t k = 0; k < n_in; ++k) REQUIRE(cuda::q8_value(r, n, k) == m.deq[n * n_in + k]);
    }
}

TEST_CASE("cuda layout: paged-KV addresses are HostKvMemory's", "[cuda_layout]") {
  for (KvType type : {KvType::F32, KvType::F16, KvType::I8}) {
    const KvLayout L = infer_test::kv_layout(type, 3, 2, 8, 4, 5);
    HostKvMemory mem(L, L.n_blocks);
    const lay::KvAddr a = infer_test::kv_addr(L);
    const auto* base = static_cast<const uint8_t*>(mem.k(0, 0));
    const size_t es = L.elem_bytes();
    for (int l = 0; l < L.n_layers; ++l)
      for (int b = 0; b < L.n_blocks; ++b) {
        // A block's K and V start where HostKvMemory says; its rows are
        // [head][token][dim] inside.
        REQUIRE(static_cast<const uint8_t*>(mem.k(l, b)) - base == lay::kv_elem(a, l, b, 0, 0, 0, 0) * static_cast<int64_t>(es));
        REQUIRE(static_cast<const uint8_t*>(mem.v(l, b)) - base == lay::kv_elem(a, l, b, 1, 0, 0, 0) * static_cast<int64_t>(es));
        REQUIRE(lay::kv_elem(a, l, b, 0, 1, 2, 3) - lay::kv_elem(a, l, b, 0, 0, 0, 0) == (1 * 4 + 2) * 8 + 3);
        if (type == KvType::I8) {
          REQUIRE(mem.k_scale(l, b) - mem.k_scale(0, 0) == lay::kv_scale(a, l, b, 0, 0, 0));
          REQUIRE(mem.v_scale(l, b) - mem.k_scale(0, 0) == lay::kv_scale(a, l, b, 1, 0, 0));
          REQUIRE(lay::kv_scale(a, l, b, 1, 1, 3) - lay::kv_scale(a, l, b, 1, 0, 0) == 1 * 4 + 3);
          REQUIRE(mem.k_offset(l, b) - mem.k_offset(0, 0) == lay::kv_offset_row(a, l, b, 0) * L.head_dim);
          REQUIRE(mem.k_offset_scale(l, b) - mem.k_offset_scale(0, 0) == lay::kv_offset_row(a, l, b, 0));
        }
      }
  }
  // f16 tokens written by the reference through a scattered block table read
  // back through kv_block / kv_row / kv_elem from the pool's base.
  const KvLayout L = infer_test::kv_layout(KvType::F16, 2, 3, 16, 4, 6);
  HostKvMemory mem(L, L.n_blocks);
  const lay::KvAddr a = infer_test::kv_addr(L);
  const std::vector<int32_t> table = {4, 1, 5, 0};
  const int n_pos = 14;
  const std::vector<float> k = gauss(static_cast<size_t>(n_pos) * L.kv_dim(), 5), v = gauss(k.size(), 6);
  for (int l = 0; l < L.n_layers; ++l)
    for (int p = 0; p < n_pos; ++p)
      kvfmt::write_token(mem, l, table.data(), p, k.data() + p * L.kv_dim(), v.data() + p * L.kv_dim());
  const auto* pool = static_cast<const uint16_t*>(mem.k(0, 0));
  std::vector<float> row(L.head_dim);
  for (int l = 0; l < L.n_layers; ++l)
    for (int p = 0; p < n_pos; ++p)
      for (int h = 0; h < L.n_kv_heads; ++h)
        for (int is_v = 0; is_v < 2; ++is_v) {
          const int blk = lay::kv_block(table.data(), p, L.block_size), off = lay::kv_row(p, L.block_size);
          REQUIRE(blk == table[p / L.block_size]);
          kvfmt::read_row(mem, l, blk, is_v != 0, h, off, row.data());
          for (int d = 0; d < L.head_dim; ++d) {
            const float got = fp16_to_f32(pool[lay::kv_elem(a, l, blk, is_v, h, off, d)]);
            REQUIRE(got == row[d]);
            REQUIRE(got == fp16_to_f32(f32_to_fp16((is_v ? v : k)[p * L.kv_dim() + h * L.head_dim + d])));
          }
        }
}

namespace {

// One-pass softmax-weighted sum of n rows of dim values (double precision).
std::vector<double> one_pass(const std::vector<float>& s, const std::vector<float>& v, int dim) {
  double m = -INFINITY;
  for (float x : s) m = std::max(m, static_cast<double>(x));
  std::vector<double> o(dim, 0.0);
  if (m == -INFINITY) return o;
  double l = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    const double e = std::exp(static_cast<double>(s[i]) - m);
    l += e;
    for (int d = 0; d < dim; ++d) o[d] += e * v[i * dim + d];
  }
  for (auto& x : o) x /= l;
  return o;
}

// What a flash-decoding kernel does: a partial per split (softmax_push over
// its scores), then the partials merged in order (softmax_merge).
std::vector<float> by_splits(const std::vector<float>& s, const std::vector<float>& v, int dim,
                             const std::vector<int>& cuts) {
  float M = -INFINITY, L = 0;
  std::vector<float> O(dim, 0.0f);
  for (size_t c = 0; c + 1 < cuts.size(); ++c) {
    float m = -INFINITY, l = 0;
    std::vector<float> o(dim, 0.0f);
    for (int i = cuts[c]; i < cuts[c + 1]; ++i) {
      const lay::Rescale r = lay::softmax_push(&m, &l, s[i]);
      for (int d = 0; d < dim; ++d) o[d] = r.a * o[d] + r.b * v[i * dim + d];
    }
    const lay::Rescale r = lay::softmax_merge(&M, &L, m, l);
    for (int d = 0; d < dim; ++d) O[d] = r.a * O[d] + r.b * o[d];
  }
  for (int d = 0; d < dim; ++d) O[d] = lay::softmax_out(O[d], L);
  return O;
}

}  // namespace

TEST_CASE("cuda layout: merged split-softmax partials equal a one-pass softmax", "[cuda_layout]") {
  std::mt19937 rng(7);
  const int dim = 8;
  for (int trial = 0; trial < 300; ++trial) {
    const int n = 1 + static_cast<int>(rng() % 200);
    std::vector<float> s = gauss(n, 100 + trial), v = gauss(static_cast<size_t>(n) * dim, 1000 + trial);
    const float spread = trial % 3 == 0 ? 30.0f : 3.0f;  // large score gaps too
    for (auto& x : s) x *= spread;
    // Masked positions: a few, a run (a whole split of them), or all.
    const int mask_kind = trial % 5;
    for (int i = 0; i < n; ++i) {
      if (mask_kind == 1 && rng() % 4 == 0) s[i] = -INFINITY;
      if (mask_kind == 2 && i < n / 2) s[i] = -INFINITY;
      if (mask_kind == 3) s[i] = -INFINITY;
    }
    // Cut points, with empty splits (repeated cuts) at the ends and inside.
    std::vector<int> cuts = {0, 0};
    const int n_cuts = static_cast<int>(rng() % 6);
    std::vector<int> inner;
    for (int c = 0; c < n_cuts; ++c) inner.push_back(static_cast<int>(rng() % (n + 1)));
    std::sort(inner.begin(), inner.end());
    for (int c : inner) cuts.push_back(c);
    if (!inner.empty()) cuts.push_back(inner.back());
    cuts.push_back(n);
    cuts.push_back(n);
    INFO("trial " << trial << " n " << n << " mask " << mask_kind);
    const std::vector<double> want = one_pass(s, v, dim);
    const std::vector<float> got = by_splits(s, v, dim, cuts);
    for (int d = 0; d < dim; ++d) {
      REQUIRE(std::isfinite(got[d]));
      REQUIRE(std::fabs(got[d] - want[d]) <= 1e-6 * (1.0 + std::fabs(want[d])));
    }
  }
}

TEST_CASE("cuda layout: a token's positions split into whole KV blocks, each once", "[cuda_layout]") {
  for (int bs : {1, 4, 16})
    for (int lo : {0, 3, 17, 40})
      for (int hi : {lo - 1, lo, lo + 5, lo + 63, lo + 1000})
        for (int max_splits : {1, 3, 8, 64})
          for (int min_blocks : {1, 2, 8}) {
            INFO("bs " << bs << " [" << lo << ", " << hi << "] max " << max_splits << " min " << min_blocks);
            const int n = lay::split_count(lo, hi, bs, max_splits, min_blocks);
            REQUIRE(n >= 1);
            REQUIRE(n <= max_splits);
            int next = lo;
            for (int s = 0; s < n; ++s) {
              int f = 0, e = 0;
              lay::split_range(lo, hi, bs, n, s, &f, &e);
              if (f > e) continue;  // empty (only after the last position)
              REQUIRE(f == next);
              REQUIRE(e <= hi);
              // Whole blocks: a split starts at lo or a block start, ends at hi or a block end.
              REQUIRE((f == lo || f % bs == 0));
              REQUIRE((e == hi || (e + 1) % bs == 0));
              next = e + 1;
            }
            REQUIRE(next == std::max(lo, hi + 1));
          }
}

namespace {

// What paged_attention_split_kernel and paged_attention_merge_kernel
// compute, step for step on the host: per (token, query head, split) a
// partial over the split's positions read through the block table and
// layout::kv_elem from the pool's f16 elements, then the partials merged.
void attention_by_splits(const HostKvMemory& mem, const lay::KvAddr& a, int layer, const std::vector<float>& q,
                         const std::vector<int32_t>& pos, const std::vector<std::vector<int32_t>>& tables, int n_head,
                         int window, float scale, float softcap, int n_splits, std::vector<float>& out) {
  const auto* pool = static_cast<const uint16_t*>(mem.k(0, 0));
  const int hd = a.head_dim, bs = a.block_size, group = n_head / a.n_kv_heads;
  for (size_t t = 0; t < pos.size(); ++t) {
    const int hi = pos[t], lo = window > 0 ? std::max(0, hi - window + 1) : 0;
    for (int h = 0; h < n_head; ++h) {
      const int kvh = h / group;
      const float* qh = q.data() + (t * n_head + h) * hd;
      float M = -INFINITY, L = 0;
      std::vector<float> O(hd, 0.0f);
      for (int s = 0; s < n_splits; ++s) {
        int first = 0, last = -1;
        lay::split_range(lo, hi, bs, n_splits, s, &first, &last);
        float m = -INFINITY, l = 0;
        std::vector<float> o(hd, 0.0f);
        for (int p = first; p <= last; ++p) {
          const int blk = lay::kv_block(tables[t].data(), p, bs), row = lay::kv_row(p, bs);
          if (blk < 0) continue;
          float dot = 0;
          for (int d = 0; d < hd; ++d) dot += qh[d] * fp16_to_f32(pool[lay::kv_elem(a, layer, blk, 0, kvh, row, d)]);
          float sc = dot * scale;
          if (softcap > 0) sc = softcap * std::tanh(sc / softcap);
          const lay::Rescale r = lay::softmax_push(&m, &l, sc);
          for (int d = 0; d < hd; ++d)
            o[d] = r.a * o[d] + r.b * fp16_to_f32(pool[lay::kv_elem(a, layer, blk, 1, kvh, row, d)]);
        }
        const lay::Rescale r = lay::softmax_merge(&M, &L, m, l);
        for (int d = 0; d < hd; ++d) O[d] = r.a * O[d] + r.b * o[d];
      }
      for (int d = 0; d < hd; ++d) out[(t * n_head + h) * hd + d] = lay::softmax_out(O[d], L);
    }
  }
}

}  // namespace

TEST_CASE("cuda layout: attention by splits through the block tables equals the CPU backend", "[cuda_layout]") {
  ThreadPool pool(1);
  std::unique_ptr<Backend> cpu = make_cpu_backend(pool);
  const infer_test::AttnCase cases[] = {
      {4, 4, 16, 16, 0, 0.0f}, {8, 2, 32, 4, 0, 0.0f}, {6, 3, 24, 8, 21, 0.0f}, {4, 1, 16, 16, 0, 5.0f}};
  for (const infer_test::AttnCase& c : cases) {
    INFO("heads " << c.n_head << "/" << c.n_kv << " hd " << c.hd << " bs " << c.bs << " window " << c.window);
    const infer_test::AttnFixture f(*cpu, c, {1, c.bs, c.bs + 3, 300}, 120);
    std::vector<float> got(f.q.size());
    for (int n_splits : {1, 2, 5, lay::split_count(0, 299, c.bs, 32, 4), 64}) {
      INFO("splits " << n_splits);
      attention_by_splits(as_host_memory(*f.mem), infer_test::kv_addr(f.L), f.layer, f.q, f.pos, f.tables, c.n_head,
                          c.window, f.scale, c.softcap, n_splits, got);
      for (size_t i = 0; i < got.size(); ++i) {
        INFO("i " << i);
        REQUIRE(std::fabs(got[i] - f.want[i]) <= 2e-5f + 1e-4f * std::fabs(f.want[i]));
      }
    }
  }
}
