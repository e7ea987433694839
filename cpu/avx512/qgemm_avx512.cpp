// AVX-512 (F/BW/VL/DQ) + VNNI matmul micro-kernels. Compiled with those
// flags; only called when cpuid says the CPU has them and the ISA cap allows
// AVX-512 (cpu/kernels.cpp). Formats not handled here fall back to the AVX2
// kernels; the loops around them are the drivers of cpu/gemm_driver.h.
//
//  - Panels (cpu/qmatmul.h): all 16 rows of a panel in one register, 4
//    values each per dword lane; vpdpbusd multiplies them with a broadcast
//    dword of activations and accumulates in int32. K4 (Q4_0, INT4):
//    unsigned nibbles x signed int8 activations. K8 (Q8_0, W8A8): signed
//    weights need unsigned activations, so they use q + 128 and subtract
//    128 * Σw (per block from an extra vpdpbusd shared by all activation
//    rows; for W8A8 from the row sums stored in the panel).
//    Q5_0, Q5_1, Q5_K, Q6_K: K4 panels with a plane of high bits OR-ed into
//    the nibbles before the same vpdpbusd.
//  - Float formats (F32, F16, BF16): 32-row panels transposed at load,
//    each output accumulated over k in order at every m (batch invariant).
// GCC 12 warns about its own intrinsic headers (_mm512_undefined_* inside
// cvtph / reduce helpers): a known false positive.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <new>
#include <type_traits>

#include "core/fp16.h"
#include "cpu/avx512/panel_common.h"
#include "cpu/gemm_driver.h"
#include "cpu/isa_kernels.h"

namespace infer::cpu {

namespace {

inline __m512i bcast32(const void* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm512_set1_epi32(v);
}

// ---- K4 panels: Q4_0 and INT4 -----------------------------------------------------------

template <int NX, Panels::Scales S>
void k4_panel(const Panels& P, const uint8_t* panel, const QActs& qa, int64_t i0, float* out /*[NX][16]*/) {
  const int G = P.group;
  const int bpg = G / 32;
  const size_t nib = static_cast<size_t>(bpg) * 256, group_bytes = nib + k4_scale_bytes(S, bpg);
  const int64_t n_groups = P.n_pad / G;
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  const int kPrefetchBytes = prefetch_distance();
  __m512 acc[NX];
  for (int r = 0; r < NX; ++r) acc[r] = _mm512_setzero_ps();
  K4Scale<S> sc;
  for (int64_t g = 0; g < n_groups; ++g) {
    const uint8_t* gd = panel + g * group_bytes;
    sc.group(gd + nib);
    for (int b = 0; b < bpg; ++b) {
      sc.block(b);
      const int64_t blk = g * bpg + b;
      const uint8_t* wq = gd + b * 256;
      prefetch_span(b == 0 ? gd : wq, b == bpg - 1 ? gd + group_bytes : wq + 256, kPrefetchBytes);
      __m512i s32[NX];
      for (int r = 0; r < NX; ++r) s32[r] = _mm512_setzero_si512();
      for (int s = 0; s < 4; ++s) {
        const __m512i v = _mm512_loadu_si512(wq + 64 * s);
        const __m512i lo = _mm512_and_si512(v, m4);
        const __m512i hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
        for (int r = 0; r < NX; ++r) {
          const int8_t* xq = qa.row(i0 + r) + blk * 32 + 8 * s;
          s32[r] = _mm512_dpbusd_epi32(s32[r], lo, bcast32(xq));
          s32[r] = _mm512_dpbusd_epi32(s32[r], hi, bcast32(xq + 4));
        }
      }
      for (int r = 0; r < NX; ++r) {
        const int64_t ai = (i0 + r) * qa.nb + blk;
        if constexpr (S == Panels::Scales::Q4_0) s32[r] = _mm512_sub_epi32(s32[r], _mm512_set1_epi32(8 * qa.sum[ai]));
        acc[r] = sc.apply(acc[r], s32[r], qa.d[ai], qa.xs[ai]);
      }
    }
  }
  for (int r = 0; r < NX; ++r) _mm512_storeu_ps(out + 16 * r, acc[r]);
}

// ---- K8 panels: Q8_0 and W8A8 -----------------------------------------------------------

template <int NX, bool PerRow>
void k8_panel(const Panels& P, const uint8_t* panel, const QActs& qa, int64_t i0, float* out) {
  const int64_t nb = P.n_pad / 32;
  const size_t head = PerRow ? 128 : 0;
  const size_t block_bytes = PerRow ? 512 : 544;
  const __m512i k128 = _mm512_set1_epi8(static_cast<char>(0x80));
  const int kPrefetchBytes = prefetch_distance();
  __m512 acc[NX];
  __m512i s32[NX];
  for (int r = 0; r < NX; ++r) {
    acc[r] = _mm512_setzero_ps();
    s32[r] = _mm512_setzero_si512();
  }
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* bd = panel + head + b * block_bytes;
    __m512i corr = _mm512_setzero_si512();
    prefetch_span(b == 0 ? panel : bd, bd + block_bytes, kPrefetchBytes);
    for (int s = 0; s < 8; ++s) {
      const __m512i v = _mm512_loadu_si512(bd + 64 * s);
      if constexpr (!PerRow) corr = _mm512_dpbusd_epi32(corr, k128, v);
      for (int r = 0; r < NX; ++r) s32[r] = _mm512_dpbusd_epi32(s32[r], bcast32(qa.urow(i0 + r) + 32 * b + 4 * s), v);
    }
    if constexpr (!PerRow) {
      const __m512 dv = load_f16x16(bd + 512);
      for (int r = 0; r < NX; ++r) {
        const __m512 sc = _mm512_mul_ps(dv, _mm512_set1_ps(qa.d[(i0 + r) * qa.nb + b]));
        acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(s32[r], corr)), sc, acc[r]);
        s32[r] = _mm512_setzero_si512();
      }
    }
  }
  if constexpr (PerRow) {
    const __m512 sv = _mm512_loadu_ps(panel);
    const __m512i corr = _mm512_slli_epi32(_mm512_loadu_si512(panel + 64), 7);  // 128 * Σw
    for (int r = 0; r < NX; ++r)
      acc[r] = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(s32[r], corr)),
                             _mm512_mul_ps(sv, _mm512_set1_ps(qa.d[(i0 + r) * qa.nb])));
  }
  for (int r = 0; r < NX; ++r) _mm512_storeu_ps(out + 16 * r, acc[r]);
}

// ---- K4 panels with high bits: Q5_0, Q5_1, Q5_K, Q6_K ----------------------------------

// Bits [Bit, Bit + W) of every byte of h moved to bits [4, 4 + W), the rest
// cleared (as the AVX2 kernels: no bit of the other byte of a 16-bit lane
// reaches the kept bits for these counts).
template <int Bit, int W>
inline __m512i high_at4(__m512i h) {
  const __m512i keep = _mm512_set1_epi8(W == 1 ? 0x10 : 0x30);
  if constexpr (Bit < 4) {
    return _mm512_and_si512(_mm512_slli_epi16(h, 4 - Bit), keep);
  } else if constexpr (Bit > 4) {
    return _mm512_and_si512(_mm512_srli_epi16(h, Bit - 4), keep);
  } else {
    return _mm512_and_si512(h, keep);
  }
}

// All 16 rows of a K4 panel with high bits against NX rows of x: vpdpbusd
// of the unsigned 5- or 6-bit values with int8 activations, in int32.
// Q5_*: w = a q + b per block (b * Σx from QActs::xs). Q6_K: per 16-value
// sub-block, sc (Σ q x - 32 Σ x) in int32, times d and the activation scale.
template <int NX, Panels::Scales S>
void kq_panel(const Panels& P, const uint8_t* panel, const QActs& qa, int64_t i0, float* out /*[NX][16]*/) {
  using Sc = Panels::Scales;
  constexpr bool kQ6 = S == Sc::Q6_K;
  constexpr size_t kBlock = k4_block_bytes(S);
  const int G = P.group;
  const int bpg = G / 32;
  const size_t nib = static_cast<size_t>(bpg) * kBlock, group_bytes = nib + k4_scale_bytes(S, bpg);
  const int64_t n_groups = P.n_pad / G;
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  const int kPrefetchBytes = prefetch_distance();
  auto u8x16 = [](const uint8_t* p) {
    return _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
  };
  __m512 acc[NX];
  for (int r = 0; r < NX; ++r) acc[r] = _mm512_setzero_ps();
  for (int64_t g = 0; g < n_groups; ++g) {
    const uint8_t* gd = panel + g * group_bytes;
    const uint8_t* sd = gd + nib;
    __m512 dsup = _mm512_setzero_ps(), msup = _mm512_setzero_ps();
    if constexpr (S == Sc::Q5_K) {
      dsup = load_f16x16(sd + 256);
      msup = _mm512_sub_ps(_mm512_setzero_ps(), load_f16x16(sd + 288));
    } else if constexpr (kQ6) {
      dsup = load_f16x16(sd + 256);
    }
    for (int b = 0; b < bpg; ++b) {
      const uint8_t* bd = gd + b * kBlock;
      prefetch_span(b == 0 ? gd : bd, b == bpg - 1 ? gd + group_bytes : bd + kBlock, kPrefetchBytes);
      const int64_t blk = g * bpg + b;
      __m512 dv = _mm512_setzero_ps(), mv = _mm512_setzero_ps();
      __m512i sca = _mm512_setzero_si512(), scb = _mm512_setzero_si512();
      if constexpr (S == Sc::Q5_0) {
        dv = load_f16x16(sd + 32 * b);
        mv = _mm512_mul_ps(_mm512_set1_ps(-16.0f), dv);
      } else if constexpr (S == Sc::Q5_1) {
        dv = load_f16x16(sd + 64 * b);
        mv = load_f16x16(sd + 64 * b + 32);
      } else if constexpr (S == Sc::Q5_K) {
        dv = _mm512_mul_ps(dsup, u8x16(sd + 16 * b));
        mv = _mm512_mul_ps(msup, u8x16(sd + 128 + 16 * b));
      } else {
        // dword r: (sc_a, sc_b) of row r as i16, split into two i32 vectors.
        const __m512i scp = _mm512_cvtepi8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(sd + 32 * b)));
        sca = _mm512_srai_epi32(_mm512_slli_epi32(scp, 16), 16);
        scb = _mm512_srai_epi32(scp, 16);
      }
      __m512i s32[NX], s32b[NX];
      for (int r = 0; r < NX; ++r) s32[r] = s32b[r] = _mm512_setzero_si512();
      auto step = [&](auto sc) {
        constexpr int s = decltype(sc)::value;
        const __m512i v = _mm512_loadu_si512(bd + 64 * s);
        __m512i lo = _mm512_and_si512(v, m4), hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
        if constexpr (kQ6) {
          const __m512i H = _mm512_loadu_si512(bd + 256 + 64 * (s / 2));
          lo = _mm512_or_si512(lo, high_at4<4 * (s % 2), 2>(H));
          hi = _mm512_or_si512(hi, high_at4<4 * (s % 2) + 2, 2>(H));
        } else {
          const __m512i H = _mm512_loadu_si512(bd + 256);
          lo = _mm512_or_si512(lo, high_at4<2 * s, 1>(H));
          hi = _mm512_or_si512(hi, high_at4<2 * s + 1, 1>(H));
        }
        for (int r = 0; r < NX; ++r) {
          const int8_t* xq = qa.row(i0 + r) + blk * 32 + 8 * s;
          __m512i& t = kQ6 && s >= 2 ? s32b[r] : s32[r];
          t = _mm512_dpbusd_epi32(t, lo, bcast32(xq));
          t = _mm512_dpbusd_epi32(t, hi, bcast32(xq + 4));
        }
      };
      step(std::integral_constant<int, 0>{});
      step(std::integral_constant<int, 1>{});
      step(std::integral_constant<int, 2>{});
      step(std::integral_constant<int, 3>{});
      for (int r = 0; r < NX; ++r) {
        const int64_t ai = (i0 + r) * qa.nb + blk;
        const __m512 xd = _mm512_set1_ps(qa.d[ai]);
        if constexpr (kQ6) {
          const int32_t hs = qa.hsum[ai];  // the block's two 16-value sums, as i16 halves
          const int32_t sa = static_cast<int16_t>(hs & 0xFFFF), sb = static_cast<int16_t>(static_cast<uint32_t>(hs) >> 16);
          const __m512i ta = _mm512_sub_epi32(s32[r], _mm512_set1_epi32(32 * sa));
          const __m512i tb = _mm512_sub_epi32(s32b[r], _mm512_set1_epi32(32 * sb));
          const __m512i t = _mm512_add_epi32(_mm512_mullo_epi32(ta, sca), _mm512_mullo_epi32(tb, scb));
          acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(t), _mm512_mul_ps(dsup, xd), acc[r]);
        } else {
          acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s32[r]), _mm512_mul_ps(dv, xd), acc[r]);
          acc[r] = _mm512_fmadd_ps(mv, _mm512_set1_ps(qa.xs[ai]), acc[r]);
        }
      }
    }
  }
  for (int r = 0; r < NX; ++r) _mm512_storeu_ps(out + 16 * r, acc[r]);
}

// The panel micro-kernels as cpu/gemm_driver.h's panel_tiles takes them: a
// whole panel (16 rows of W) against up to 8 rows of x.
struct Store16 {
  static constexpr int kCols = 16, kRows = 8;
  static void store(const float* out, int nx, int nc, float* y, int64_t ldy) { store_rows16(out, nx, nc, y, ldy); }
};
template <Panels::Scales S>
struct K4 : Store16 {
  template <int NX>
  static void run(const Panels& P, const uint8_t* p, int, const QActs& q, int64_t i, float* o) {
    k4_panel<NX, S>(P, p, q, i, o);
  }
};
template <Panels::Scales S>
struct Kq : Store16 {
  template <int NX>
  static void run(const Panels& P, const uint8_t* p, int, const QActs& q, int64_t i, float* o) {
    kq_panel<NX, S>(P, p, q, i, o);
  }
};
template <bool PerRow>
struct K8 : Store16 {
  template <int NX>
  static void run(const Panels& P, const uint8_t* p, int, const QActs& q, int64_t i, float* o) {
    k8_panel<NX, PerRow>(P, p, q, i, o);
  }
};


// ---- FP panels (F16, BF16): 32 rows of W transposed -------------------------------------

struct PanelF16 {
  static constexpr int kBytes = 2;
  static __m512 load16(const uint8_t* p) { return load_f16x16(p); }
};
struct PanelBF16 {
  static constexpr int kBytes = 2;
  static __m512 load16(const uint8_t* p) {
    const __m512i v = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    return _mm512_castsi512_ps(_mm512_slli_epi32(v, 16));
  }
};
struct PanelF32 {
  static constexpr int kBytes = 4;
  static __m512 load16(const uint8_t* p) { return _mm512_loadu_ps(reinterpret_cast<const float*>(p)); }
};

// out[r][0..32) = x[r] · (the panel's 32 rows), r < NX: per value k, one
// broadcast activation times 32 weights.
template <int NX, class L>
void fp_kernel(const uint8_t* panel, int64_t K, const float* x, int64_t ldx, float* out, int pf) {
  __m512 acc[NX][2];
  for (int r = 0; r < NX; ++r) acc[r][0] = acc[r][1] = _mm512_setzero_ps();
  constexpr int kRow = kFpPanelRows * L::kBytes;
  for (int64_t k = 0; k < K; ++k) {
    const uint8_t* pk = panel + k * kRow;
    if (pf) _mm_prefetch(reinterpret_cast<const char*>(pk) + pf, _MM_HINT_T0);
    const __m512 b0 = L::load16(pk), b1 = L::load16(pk + 16 * L::kBytes);
    for (int r = 0; r < NX; ++r) {
      const __m512 xv = _mm512_set1_ps(x[r * ldx + k]);
      acc[r][0] = _mm512_fmadd_ps(xv, b0, acc[r][0]);
      acc[r][1] = _mm512_fmadd_ps(xv, b1, acc[r][1]);
    }
  }
  for (int r = 0; r < NX; ++r) {
    _mm512_storeu_ps(out + 32 * r, acc[r][0]);
    _mm512_storeu_ps(out + 32 * r + 16, acc[r][1]);
  }
}

// The FP micro-kernel for cpu/gemm_driver.h's tile_fp: the whole panel (32
// columns) against up to 6 rows of x.
struct Fp {
  using F32 = PanelF32;
  static constexpr bool kDecode = false;
  template <class L>
  static void widen(const uint8_t* panel, int64_t count, float* dst) {
    for (int64_t e = 0; e < count; e += 16) _mm512_store_ps(dst + e, L::load16(panel + e * L::kBytes));
  }
  template <class L>
  struct Tiles {
    static constexpr int kCols = kFpPanelRows, kRows = 6;
    template <int NX>
    static void run(const uint8_t* panel, int, int64_t K, const float* x, int64_t ldx, float* out, int pf) {
      fp_kernel<NX, L>(panel, K, x, ldx, out, pf);
    }
  };
};

}  // namespace

// ---- the entry point of cpu/isa_kernels.h ------------------------------------------------

namespace avx512 {

FormatKernel format_kernel(DType t, int64_t m) {
  using Sc = Panels::Scales;
  FormatKernel k;
  switch (t) {
    case DType::Q4_0: k.tile = panel_tiles<K4<Sc::Q4_0>>; k.act_block = 32; k.act_sums = true; k.panels = true; break;
    case DType::Q4_1: k.tile = panel_tiles<K4<Sc::Q4_1>>; k.act_block = 32; k.panels = true; break;
    case DType::Q4_K: k.tile = panel_tiles<K4<Sc::Q4_K>>; k.act_block = 32; k.panels = true; break;
    case DType::INT4_G32: case DType::INT4_G64: case DType::INT4_G128:
      k.tile = panel_tiles<K4<Sc::Int4>>; k.act_block = 32; k.panels = true; break;
    case DType::Q5_0: k.tile = panel_tiles<Kq<Sc::Q5_0>>; k.act_block = 32; k.panels = true; break;
    case DType::Q5_1: k.tile = panel_tiles<Kq<Sc::Q5_1>>; k.act_block = 32; k.panels = true; break;
    case DType::Q5_K: k.tile = panel_tiles<Kq<Sc::Q5_K>>; k.act_block = 32; k.panels = true; break;
    case DType::Q6_K: k.tile = panel_tiles<Kq<Sc::Q6_K>>; k.act_block = 32; k.act_hsums = true; k.panels = true; break;
    case DType::Q8_0: k.tile = panel_tiles<K8<false>>; k.act_block = 32; k.act_u8 = true; k.panels = true; break;
    case DType::W8A8: k.tile = panel_tiles<K8<true>>; k.act_block = -1; k.act_u8 = true; k.panels = true; break;
    // F32 as F16/BF16: every m through the same panels, so each output sums
    // over k in one order whatever the batch (bitwise batch invariance).
    case DType::F32: k.tile = tile_fp<Fp, PanelF32>; k.panels = true; k.panel_rows = kFpPanelRows; break;
    case DType::F16: k.tile = tile_fp<Fp, PanelF16>; k.panels = true; k.panel_rows = kFpPanelRows; break;
    case DType::BF16: k.tile = tile_fp<Fp, PanelBF16>; k.panels = true; k.panel_rows = kFpPanelRows; break;
    default: break;
  }
  return k;
}

}  // namespace avx512

}  // namespace infer::cpu
