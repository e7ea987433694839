// AMX tile matmul kernels: K4 (Q4_0, Q4_1, Q4_K, INT4), Q8_0 and W8A8 panels
// for m >= kAmxMinRows, with the same panels and bit-identical results as
// the AVX-512 kernels (cpu/avx512/). Compiled with the AVX-512 flags plus
// -mamx-tile -mamx-int8 when the compiler knows them (INFER_HAVE_AMX);
// otherwise this file has no kernel and the AMX table is AVX-512's. Used only
// when the CPU, the OS (XTILEDATA permission) and the ISA cap allow AMX
// (cpu/isa.cpp).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

#include <algorithm>
#include <cstdint>

#include "cpu/avx512/panel_common.h"
#include "cpu/gemm_driver.h"
#include "cpu/isa_kernels.h"

namespace infer::cpu {

#if defined(INFER_HAVE_AMX)
namespace {

// ---- AMX tiles: K4 (Q4_0, Q4_1, Q4_K, INT4), Q8_0 and W8A8 panels for m >= kAmxMinRows ----
//
// One 32-value block of up to 16 activation rows times one panel (16 weight
// rows) is one tile multiply: A = the rows' int8 activations of the block
// (mt rows of 32 bytes, read in place), B = the panel's block as 8 rows of
// 64 bytes, each holding 4 consecutive values of every weight row (the
// panel's own order: a Q8_0 or W8A8 block loads as it is; a K4 step's low
// and high nibbles are two such rows), C = mt x 16 int32 sums, exactly the
// integers the VNNI kernels compute. Block formats store C and scale it
// into f32 accumulators with the VNNI kernels' own operations, so results
// are bit-identical whichever kernel ran and however many rows were
// batched (see amx_panel for how the stages overlap). W8A8 (one scale per
// row) keeps its sums in the tiles to the end.
//
// Measured (BM_GemmL2, BM_Gemm; bench/RESULTS.md): per 16 x 32 block the
// tile path costs a fixed ~45 ns plus ~1 ns per row, against ~5 ns per row
// for VNNI: ahead from 16 rows on (1.2-1.4x at 16-64), behind below 8. The
// per-block C round trip through memory (store, reload, scale) is what
// keeps it far from the tile unit's peak: block-scaled formats cannot keep
// their sums in the tiles.

// The tile instructions, as inline assembly with the memory effects
// spelled out (the compilers' macros do not declare that a tile load reads
// memory, which would let a preceding store to its source move after it).
#define INFER_TILE_LOAD(t, base, stride) \
  __asm__ volatile("tileloadd (%0,%1,1), %%tmm" #t ::"r"(base), "r"(static_cast<long>(stride)) : "memory")
#define INFER_TILE_STORE(t, base, stride) \
  __asm__ volatile("tilestored %%tmm" #t ", (%0,%1,1)" ::"r"(base), "r"(static_cast<long>(stride)) : "memory")
#define INFER_TILE_ZERO(t) __asm__ volatile("tilezero %%tmm" #t ::)
// dst += src1 (signed bytes) . src2 (unsigned bytes: tdpbsud; signed: tdpbssd)
#define INFER_TILE_DPBSUD(dst, s1, s2) __asm__ volatile("tdpbsud %%tmm" #s2 ", %%tmm" #s1 ", %%tmm" #dst ::)
#define INFER_TILE_DPBSSD(dst, s1, s2) __asm__ volatile("tdpbssd %%tmm" #s2 ", %%tmm" #s1 ", %%tmm" #dst ::)

struct alignas(64) TileConfig {
  uint8_t palette = 1, start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

// tmm0-3: C (mt x 16 int32); tmm4, tmm5: A (mt x 32 int8); tmm6, tmm7: B (8 x 64 bytes).
void amx_configure(int mt) {
  TileConfig c;
  for (int t = 0; t < 4; ++t) {
    c.rows[t] = static_cast<uint8_t>(mt);
    c.colsb[t] = 64;
  }
  for (int t = 4; t < 6; ++t) {
    c.rows[t] = static_cast<uint8_t>(mt);
    c.colsb[t] = 32;
    c.rows[t + 2] = 8;
    c.colsb[t + 2] = 64;
  }
  __asm__ volatile("ldtilecfg %0" ::"m"(c));
}

void amx_release() { __asm__ volatile("tilerelease" ::); }

// The block-scaled formats as the AMX driver sees them, each call in block
// order: stage(blk, buf) returns block blk's B rows (K4: unpacked into buf;
// Q8_0: the panel's own bytes), prefetching the stream ahead; scale(blk)
// prepares the block's per-row map; apply() adds one block's integer sums.
//
// K4: Q4_0's nibbles become signed q - 8 on the way into the tile, so C is
// already Σ (q - 8) x and its scaling is one multiply-add (the VNNI kernel
// gets the same integer as Σ q x - 8 Σ x); the formats with a minimum keep
// unsigned nibbles and K4Scale::apply's two terms.
template <Panels::Scales S>
struct AmxK4 {
  static constexpr bool kSigned = S == Panels::Scales::Q4_0;
  int bpg;
  size_t nib, gbytes;
  int pf;
  const uint8_t* sg;  // stage cursor: group, block
  int sb = 0;
  const uint8_t* fg;  // scale cursor
  int fb = 0;
  K4Scale<S> sc;
  AmxK4(const Panels& P, const uint8_t* panel, int prefetch)
      : bpg(P.group / 32), pf(prefetch), sg(panel), fg(panel) {
    nib = static_cast<size_t>(bpg) * 256;
    gbytes = nib + k4_scale_bytes(S, bpg);
  }
  const uint8_t* stage(int64_t, uint8_t* buf) {
    const uint8_t* wq = sg + sb * 256;
    prefetch_span<2>(sb == 0 ? sg : wq, sb == bpg - 1 ? sg + gbytes : wq + 256, pf);
    const __m512i m4 = _mm512_set1_epi8(0x0F), k8 = _mm512_set1_epi8(8);
    for (int s = 0; s < 4; ++s) {
      const __m512i v = _mm512_loadu_si512(wq + 64 * s);
      __m512i lo = _mm512_and_si512(v, m4), hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
      if constexpr (kSigned) {
        lo = _mm512_sub_epi8(lo, k8);
        hi = _mm512_sub_epi8(hi, k8);
      }
      _mm512_store_si512(buf + 128 * s, lo);
      _mm512_store_si512(buf + 128 * s + 64, hi);
    }
    if (++sb == bpg) {
      sb = 0;
      sg += gbytes;
    }
    return buf;
  }
  void scale(int64_t) {
    if (fb == 0) sc.group(fg + nib);
    sc.block(fb);
    if (++fb == bpg) {
      fb = 0;
      fg += gbytes;
    }
  }
  __m512 apply(__m512 acc, __m512i s32, float d, float xs) const { return sc.apply(acc, s32, d, xs); }
};

struct AmxQ80 {
  static constexpr bool kSigned = true;
  static constexpr size_t kBlockBytes = 544;
  const uint8_t* panel;
  int pf;
  __m512 dv = _mm512_setzero_ps();
  AmxQ80(const Panels&, const uint8_t* p, int prefetch) : panel(p), pf(prefetch) {}
  const uint8_t* stage(int64_t blk, uint8_t*) const {
    const uint8_t* bd = panel + blk * kBlockBytes;
    prefetch_span<2>(bd, bd + kBlockBytes, pf);
    return bd;
  }
  void scale(int64_t blk) { dv = load_f16x16(panel + blk * kBlockBytes + 512); }
  // k8_panel's operations on the same integer (its Σ(q + 128)w - 128Σw).
  __m512 apply(__m512 acc, __m512i s32, float d, float) const {
    return _mm512_fmadd_ps(_mm512_cvtepi32_ps(s32), _mm512_mul_ps(dv, _mm512_set1_ps(d)), acc);
  }
};

// One block on tile set Q (0..3): C = tmm Q, A = tmm 4 + Q % 2, B = tmm 6 + Q % 2;
// amx_mul multiplies, amx_store writes C out.
template <int Q, bool SignedB>
inline void amx_mul(const int8_t* a, int64_t lda, const uint8_t* b) {
#define INFER_AMX_MUL(C, A, B)   \
  INFER_TILE_LOAD(A, a, lda);    \
  INFER_TILE_LOAD(B, b, 64);     \
  INFER_TILE_ZERO(C);            \
  if constexpr (SignedB) INFER_TILE_DPBSSD(C, A, B); else INFER_TILE_DPBSUD(C, A, B)
  if constexpr (Q == 0) { INFER_AMX_MUL(0, 4, 6); }
  else if constexpr (Q == 1) { INFER_AMX_MUL(1, 5, 7); }
  else if constexpr (Q == 2) { INFER_AMX_MUL(2, 4, 6); }
  else { INFER_AMX_MUL(3, 5, 7); }
#undef INFER_AMX_MUL
}
template <int Q>
inline void amx_store(int32_t* c) {
  if constexpr (Q == 0) { INFER_TILE_STORE(0, c, 64); }
  else if constexpr (Q == 1) { INFER_TILE_STORE(1, c, 64); }
  else if constexpr (Q == 2) { INFER_TILE_STORE(2, c, 64); }
  else { INFER_TILE_STORE(3, c, 64); }
}

// The blocks of a panel go by chunks of 4 (one per C tile) through four
// stages: B rows staged (K4: unpacked with vector stores), tile multiplies,
// C stored, C scaled into the accumulators. Ordered for what this CPU
// serializes (measured on a Sapphire/Emerald Rapids VM): a tile load waits
// for earlier stores to its source to reach the cache, and loads that come
// after a tile store wait for it, i.e. for its multiply to finish. So each
// iteration multiplies chunk j + 1, then scales chunk j (stored by the
// previous iteration, long done), and only then stores chunk j + 1: the
// vector units scale while the tile unit multiplies. Weights are prefetched
// into L2 only: L1 is left to the staged rows, C and the activations
// (stores that miss L1 made the tile stores several times slower).
constexpr int kAmxChunk = 4;

template <int MT, class F>
void amx_panel(const Panels& P, const uint8_t* panel, const QActs& qa, int64_t i0, int pf, float* out /*[MT][16]*/) {
  F f(P, panel, pf);
  const int64_t nb = P.n_pad / 32;
  const int64_t nch = (nb + kAmxChunk - 1) / kAmxChunk;
  const int8_t* a = qa.row(i0);
  const int64_t lda = qa.n_pad;
  alignas(64) uint8_t bbuf[3][kAmxChunk][512];
  alignas(64) int32_t cbuf[2][kAmxChunk][16 * 16];
  const uint8_t* bptr[3][kAmxChunk];
  auto count = [&](int64_t j) { return static_cast<int>(std::min<int64_t>(kAmxChunk, nb - j * kAmxChunk)); };
  auto stage = [&](int64_t j, int slot) {
    const int n = count(j);
    for (int q = 0; q < n; ++q) bptr[slot][q] = f.stage(j * kAmxChunk + q, bbuf[slot][q]);
  };
  auto mul = [&](int64_t j, int slot) {
    const int n = count(j);
    const int8_t* aj = a + 32 * kAmxChunk * j;
    amx_mul<0, F::kSigned>(aj, lda, bptr[slot][0]);
    if (n > 1) amx_mul<1, F::kSigned>(aj + 32, lda, bptr[slot][1]);
    if (n > 2) amx_mul<2, F::kSigned>(aj + 64, lda, bptr[slot][2]);
    if (n > 3) amx_mul<3, F::kSigned>(aj + 96, lda, bptr[slot][3]);
  };
  auto store = [&](int64_t j) {
    const int n = count(j);
    int32_t(*cb)[16 * 16] = cbuf[j & 1];
    amx_store<0>(cb[0]);
    if (n > 1) amx_store<1>(cb[1]);
    if (n > 2) amx_store<2>(cb[2]);
    if (n > 3) amx_store<3>(cb[3]);
  };
  __m512 acc[MT];
  for (int r = 0; r < MT; ++r) acc[r] = _mm512_setzero_ps();
  stage(0, 0);
  if (nch > 1) stage(1, 1);
  mul(0, 0);
  store(0);
  int slot1 = 1, slot2 = 2;  // stage slots of chunks j + 1 and j + 2
  for (int64_t j = 0; j < nch; ++j) {
    if (j + 2 < nch) stage(j + 2, slot2);
    if (j + 1 < nch) mul(j + 1, slot1);
    const int n = count(j);
    for (int q = 0; q < n; ++q) {
      const int64_t blk = j * kAmxChunk + q;
      f.scale(blk);
      const int32_t* c = cbuf[j & 1][q];
      const float* d = qa.d + i0 * qa.nb + blk;
      const float* xs = qa.xs + i0 * qa.nb + blk;
      for (int r = 0; r < MT; ++r)
        acc[r] = f.apply(acc[r], _mm512_load_si512(c + 16 * r), d[r * qa.nb], xs[r * qa.nb]);
    }
    if (j + 1 < nch) store(j + 1);
    const int s0 = 3 - slot1 - slot2;  // the slot chunk j used, free again
    slot1 = slot2;
    slot2 = s0;
  }
  for (int r = 0; r < MT; ++r) _mm512_storeu_ps(out + 16 * r, acc[r]);
}

// W8A8: per-row scales, so the sums stay in the tiles (two accumulators for
// alternate blocks) and are scaled once at the end, as k8_panel does.
template <int MT>
void amx_w8a8_panel(const Panels& P, const uint8_t* panel, const QActs& qa, int64_t i0, int pf, float* out) {
  const int64_t nb = P.n_pad / 32;
  const int8_t* a = qa.row(i0);
  const int64_t lda = qa.n_pad;
  const uint8_t* w = panel + 128;
  INFER_TILE_ZERO(0);
  INFER_TILE_ZERO(1);
  for (int64_t blk = 0; blk < nb; ++blk) {
    const uint8_t* bd = w + blk * 512;
    prefetch_span(bd, bd + 512, pf);
    if (blk & 1) {
      INFER_TILE_LOAD(5, a + 32 * blk, lda);
      INFER_TILE_LOAD(7, bd, 64);
      INFER_TILE_DPBSSD(1, 5, 7);
    } else {
      INFER_TILE_LOAD(4, a + 32 * blk, lda);
      INFER_TILE_LOAD(6, bd, 64);
      INFER_TILE_DPBSSD(0, 4, 6);
    }
  }
  alignas(64) int32_t c[2][16 * 16];
  INFER_TILE_STORE(0, c[0], 64);
  INFER_TILE_STORE(1, c[1], 64);
  const __m512 sv = _mm512_loadu_ps(panel);
  for (int r = 0; r < MT; ++r) {
    const __m512i s32 = _mm512_add_epi32(_mm512_load_si512(c[0] + 16 * r), _mm512_load_si512(c[1] + 16 * r));
    _mm512_storeu_ps(out + 16 * r,
                     _mm512_mul_ps(_mm512_cvtepi32_ps(s32), _mm512_mul_ps(sv, _mm512_set1_ps(qa.d[(i0 + r) * qa.nb]))));
  }
}

template <class F>
struct AmxBlocks {
  template <int MT>
  static void run(const Panels& P, const uint8_t* p, const QActs& q, int64_t i, int pf, float* o) {
    amx_panel<MT, F>(P, p, q, i, pf, o);
  }
};
struct AmxW8A8 {
  template <int MT>
  static void run(const Panels& P, const uint8_t* p, const QActs& q, int64_t i, int pf, float* o) {
    amx_w8a8_panel<MT>(P, p, q, i, pf, o);
  }
};

// Rows of x in tiles of 16 (the tiles configured once per tile height),
// each against the panels of [r0, r1); the first tile streams the panels in
// with prefetches, later ones find them in cache. A last tile of fewer than
// kAmxMinTail rows goes to the AVX-512 (VNNI) kernel instead (same results): a tile
// multiply costs about as much for 1 row as for 16, so a 16-sequence decode
// step that also carries a short prompt stays one tile.
constexpr int64_t kAmxMinTail = 8;

template <class K>
void amx_tiles(const MatmulArgs& a, int64_t r0, int64_t r1) {
  const Panels& P = *a.panels;
  const int64_t n_out = a.w->n_out;
  alignas(64) float out[16 * 16];
  int64_t i = 0;
  for (; i < a.m; i += 16) {
    const int mt = static_cast<int>(std::min<int64_t>(16, a.m - i));
    if (i > 0 && mt < kAmxMinTail) break;
    amx_configure(mt);
    const int pf = i == 0 ? prefetch_distance() : 0;
    for (int64_t p = r0 / kPanelRows; p * kPanelRows < r1; ++p) {
      const uint8_t* panel = P.panel(p);
      with_rows<16>(mt, [&](auto MT) { K::template run<decltype(MT)::value>(P, panel, *a.qa, i, pf, out); });
      const int64_t c0 = p * kPanelRows;
      store_rows16(out, mt, static_cast<int>(std::min<int64_t>(kPanelRows, r1 - c0)), a.y + i * n_out + c0, n_out);
    }
  }
  amx_release();
  if (i < a.m) {  // the last rows: the AVX-512 kernel of the format (same panels, same results)
    QActs qa;
    const MatmulArgs rest = rows_from(a, i, qa);
    avx512::format_kernel(a.w->type, rest.m).tile(rest, r0, r1);
  }
}

#undef INFER_TILE_LOAD
#undef INFER_TILE_STORE
#undef INFER_TILE_ZERO
#undef INFER_TILE_DPBSUD
#undef INFER_TILE_DPBSSD

}  // namespace
#endif  // INFER_HAVE_AMX

namespace amx {

FormatKernel format_kernel(DType t, int64_t m) {
  FormatKernel k;
#if defined(INFER_HAVE_AMX)
  using Sc = Panels::Scales;
  if (m < kAmxMinRows) return k;
  switch (t) {
    case DType::Q4_0: k.tile = amx_tiles<AmxBlocks<AmxK4<Sc::Q4_0>>>; k.act_sums = true; break;
    case DType::Q4_1: k.tile = amx_tiles<AmxBlocks<AmxK4<Sc::Q4_1>>>; break;
    case DType::Q4_K: k.tile = amx_tiles<AmxBlocks<AmxK4<Sc::Q4_K>>>; break;
    case DType::INT4_G32: case DType::INT4_G64: case DType::INT4_G128:
      k.tile = amx_tiles<AmxBlocks<AmxK4<Sc::Int4>>>; break;
    case DType::Q8_0: k.tile = amx_tiles<AmxBlocks<AmxQ80>>; k.act_u8 = true; break;  // u8: the VNNI tail
    case DType::W8A8: k.tile = amx_tiles<AmxW8A8>; k.act_block = -1; k.act_u8 = true; k.panels = true; return k;
    default: return k;
  }
  k.act_block = 32;
  k.panels = true;
#else
  (void)t;
  (void)m;
#endif
  return k;
}

}  // namespace amx

}  // namespace infer::cpu
