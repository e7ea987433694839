// AVX-512 (F/BW/VL/DQ) + VNNI matmul kernels. Compiled with those flags;
// only called when cpuid says the CPU has them (cpu/isa.cpp). Formats not
// handled here fall back to the AVX2 kernels.
//
//  - Panels (cpu/qmatmul.h): all 16 rows of a panel in one register, 4
//    values each per dword lane; vpdpbusd multiplies them with a broadcast
//    dword of activations and accumulates in int32. K4 (Q4_0, INT4):
//    unsigned nibbles x signed int8 activations. K8 (Q8_0, W8A8): signed
//    weights need unsigned activations, so they use q + 128 and subtract
//    128 * Σw (per block from an extra vpdpbusd shared by all activation
//    rows; for W8A8 from the row sums stored in the panel).
//  - Float formats: dot products for small m; for larger m, 32-row panels
//    converted to f32 and transposed feed a 6 x 32 FMA micro-kernel.
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

#include "core/fp16.h"
#include "cpu/qmatmul.h"


namespace infer::cpu {

namespace {

inline __m512i bcast32(const void* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm512_set1_epi32(v);
}

inline __m512 load_f16x16(const uint8_t* p) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}

// ---- K4 panels: Q4_0 and INT4 -----------------------------------------------------------

template <int NX, Panels::Scales S>
void k4_panel(const Panels& P, const uint8_t* panel, const QActs& qa, int64_t i0, float* out /*[NX][16]*/) {
  using Sc = Panels::Scales;
  const int G = P.group;
  const int bpg = G / 32;
  const size_t nib = static_cast<size_t>(bpg) * 256, group_bytes = nib + k4_scale_bytes(S, bpg);
  const int64_t n_groups = P.n_pad / G;
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  const int kPrefetchBytes = prefetch_distance();
  __m512 acc[NX];
  for (int r = 0; r < NX; ++r) acc[r] = _mm512_setzero_ps();
  for (int64_t g = 0; g < n_groups; ++g) {
    const uint8_t* gd = panel + g * group_bytes;
    const uint8_t* sd = gd + nib;
    __m512 dv = _mm512_setzero_ps(), mv = _mm512_setzero_ps();  // per row: w = dv * q + mv
    __m512 dsup = _mm512_setzero_ps(), msup = _mm512_setzero_ps();
    if constexpr (S == Sc::Int4) {
      dv = load_f16x16(sd);
      const __m512 zf = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(sd + 32))));
      mv = _mm512_mul_ps(zf, _mm512_sub_ps(_mm512_setzero_ps(), dv));
    } else if constexpr (S == Sc::Q4_K) {
      dsup = load_f16x16(sd + 256);
      msup = _mm512_sub_ps(_mm512_setzero_ps(), load_f16x16(sd + 288));
    }
    for (int b = 0; b < bpg; ++b) {
      if constexpr (S == Sc::Q4_0) {  // per block: a = d, b = -8d
        dv = load_f16x16(sd + 32 * b);
        mv = _mm512_mul_ps(_mm512_set1_ps(-8.0f), dv);
      } else if constexpr (S == Sc::Q4_1) {  // a = d, b = m
        dv = load_f16x16(sd + 64 * b);
        mv = load_f16x16(sd + 64 * b + 32);
      } else if constexpr (S == Sc::Q4_K) {  // a = d * sc, b = -dmin * mn of this block
        const __m128i sc = _mm_loadu_si128(reinterpret_cast<const __m128i*>(sd + 16 * b));
        const __m128i mn = _mm_loadu_si128(reinterpret_cast<const __m128i*>(sd + 128 + 16 * b));
        dv = _mm512_mul_ps(dsup, _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(sc)));
        mv = _mm512_mul_ps(msup, _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(mn)));
      }
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
        acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s32[r]), _mm512_mul_ps(dv, _mm512_set1_ps(qa.d[ai])), acc[r]);
        acc[r] = _mm512_fmadd_ps(mv, _mm512_set1_ps(qa.xs[ai]), acc[r]);
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

template <int NX> struct Q40 { static void run(const Panels& P, const uint8_t* p, const QActs& q, int64_t i, float* o) { k4_panel<NX, Panels::Scales::Q4_0>(P, p, q, i, o); } };
template <int NX> struct Q41 { static void run(const Panels& P, const uint8_t* p, const QActs& q, int64_t i, float* o) { k4_panel<NX, Panels::Scales::Q4_1>(P, p, q, i, o); } };
template <int NX> struct Q4K { static void run(const Panels& P, const uint8_t* p, const QActs& q, int64_t i, float* o) { k4_panel<NX, Panels::Scales::Q4_K>(P, p, q, i, o); } };
template <int NX> struct I4 { static void run(const Panels& P, const uint8_t* p, const QActs& q, int64_t i, float* o) { k4_panel<NX, Panels::Scales::Int4>(P, p, q, i, o); } };
template <int NX> struct Q80 { static void run(const Panels& P, const uint8_t* p, const QActs& q, int64_t i, float* o) { k8_panel<NX, false>(P, p, q, i, o); } };
template <int NX> struct W8 { static void run(const Panels& P, const uint8_t* p, const QActs& q, int64_t i, float* o) { k8_panel<NX, true>(P, p, q, i, o); } };

// Panels of rows [r0, r1) against the rows of x in tiles of up to 8.
template <template <int> class K>
void panel_tiles(const MatmulArgs& a, int64_t r0, int64_t r1) {
  const Panels& P = *a.panels;
  const int64_t n_out = a.w->n_out;
  alignas(64) float out[8 * 16];
  for (int64_t p = r0 / kPanelRows; p * kPanelRows < r1; ++p) {
    const uint8_t* panel = P.panel(p);
    const int64_t c0 = p * kPanelRows;
    const int nc = static_cast<int>(std::min<int64_t>(kPanelRows, r1 - c0));
    for (int64_t i = 0; i < a.m; i += 8) {
      const int nx = static_cast<int>(std::min<int64_t>(8, a.m - i));
      switch (nx) {
        case 8: K<8>::run(P, panel, *a.qa, i, out); break;
        case 7: K<7>::run(P, panel, *a.qa, i, out); break;
        case 6: K<6>::run(P, panel, *a.qa, i, out); break;
        case 5: K<5>::run(P, panel, *a.qa, i, out); break;
        case 4: K<4>::run(P, panel, *a.qa, i, out); break;
        case 3: K<3>::run(P, panel, *a.qa, i, out); break;
        case 2: K<2>::run(P, panel, *a.qa, i, out); break;
        default: K<1>::run(P, panel, *a.qa, i, out); break;
      }
      for (int r = 0; r < nx; ++r) std::memcpy(a.y + (i + r) * n_out + c0, out + 16 * r, sizeof(float) * nc);
    }
  }
}

// ---- float formats -----------------------------------------------------------------------

struct LoadF32 {
  static constexpr int kBytes = 4;
  static __m512 load16(const uint8_t* row, int64_t k) { return _mm512_loadu_ps(reinterpret_cast<const float*>(row) + k); }
  static __m512 load16_mask(const uint8_t* row, int64_t k, __mmask16 m) {
    return _mm512_maskz_loadu_ps(m, reinterpret_cast<const float*>(row) + k);
  }
};

template <class L, int NX>
void float_rows_dot(const uint8_t* wr, const float* x, int64_t n, int64_t ldx, float* y, int64_t ldy) {
  __m512 acc[NX][2];
  for (int r = 0; r < NX; ++r) acc[r][0] = acc[r][1] = _mm512_setzero_ps();
  const int pf = NX == 1 ? prefetch_distance() : 0;
  int64_t k = 0;
  for (; k + 32 <= n; k += 32) {
    if (pf) _mm_prefetch(reinterpret_cast<const char*>(wr) + k * L::kBytes + pf, _MM_HINT_T0);
    const __m512 w0 = L::load16(wr, k), w1 = L::load16(wr, k + 16);
    for (int r = 0; r < NX; ++r) {
      acc[r][0] = _mm512_fmadd_ps(w0, _mm512_loadu_ps(x + r * ldx + k), acc[r][0]);
      acc[r][1] = _mm512_fmadd_ps(w1, _mm512_loadu_ps(x + r * ldx + k + 16), acc[r][1]);
    }
  }
  for (; k < n; k += 16) {
    const __mmask16 m = n - k >= 16 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << (n - k)) - 1);
    const __m512 w0 = L::load16_mask(wr, k, m);
    for (int r = 0; r < NX; ++r)
      acc[r][0] = _mm512_fmadd_ps(w0, _mm512_maskz_loadu_ps(m, x + r * ldx + k), acc[r][0]);
  }
  for (int r = 0; r < NX; ++r) y[r * ldy] = _mm512_reduce_add_ps(_mm512_add_ps(acc[r][0], acc[r][1]));
}

template <class L>
void tile_float_dot(const MatmulArgs& a, int64_t r0, int64_t r1) {
  const WeightView& w = *a.w;
  for (int64_t r = r0; r < r1; ++r) {
    for (int64_t i = 0; i < a.m; i += 4) {
      const float* x = a.x + i * w.n_in;
      float* y = a.y + i * w.n_out + r;
      switch (std::min<int64_t>(4, a.m - i)) {
        case 4: float_rows_dot<L, 4>(w.row(r), x, w.n_in, w.n_in, y, w.n_out); break;
        case 3: float_rows_dot<L, 3>(w.row(r), x, w.n_in, w.n_in, y, w.n_out); break;
        case 2: float_rows_dot<L, 2>(w.row(r), x, w.n_in, w.n_in, y, w.n_out); break;
        default: float_rows_dot<L, 1>(w.row(r), x, w.n_in, w.n_in, y, w.n_out); break;
      }
    }
  }
}

// 16 x 16 transpose of floats in r[0..15].
inline void transpose16(__m512 r[16]) {
  __m512 t[16];
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
  }
  for (int i = 0; i < 16; i += 4) {
    r[i] = _mm512_shuffle_ps(t[i], t[i + 2], 0x44);
    r[i + 1] = _mm512_shuffle_ps(t[i], t[i + 2], 0xEE);
    r[i + 2] = _mm512_shuffle_ps(t[i + 1], t[i + 3], 0x44);
    r[i + 3] = _mm512_shuffle_ps(t[i + 1], t[i + 3], 0xEE);
  }
  // Now r[4q + j] holds, in each 128-bit lane L, elements (4q..4q+3, col 4L + j')
  // of rows; combine 128-bit lanes across groups of 4.
  for (int i = 0; i < 4; ++i) {
    t[i] = _mm512_shuffle_f32x4(r[i], r[4 + i], 0x88);
    t[4 + i] = _mm512_shuffle_f32x4(r[i], r[4 + i], 0xDD);
    t[8 + i] = _mm512_shuffle_f32x4(r[8 + i], r[12 + i], 0x88);
    t[12 + i] = _mm512_shuffle_f32x4(r[8 + i], r[12 + i], 0xDD);
  }
  for (int i = 0; i < 4; ++i) {
    r[i] = _mm512_shuffle_f32x4(t[i], t[8 + i], 0x88);
    r[8 + i] = _mm512_shuffle_f32x4(t[i], t[8 + i], 0xDD);
    r[4 + i] = _mm512_shuffle_f32x4(t[4 + i], t[12 + i], 0x88);
    r[12 + i] = _mm512_shuffle_f32x4(t[4 + i], t[12 + i], 0xDD);
  }
}

constexpr int kFloatPanel = 32;  // weight rows per converted panel

// Rows [c0, c0 + 32) of w (zero past n_out) as f32, transposed: dst[k * 32 + j].
template <class L>
void convert_panel(const WeightView& w, int64_t c0, float* dst) {
  const int64_t n = w.n_in;
  const int valid = static_cast<int>(std::min<int64_t>(kFloatPanel, w.n_out - c0));
  for (int64_t k = 0; k < n; k += 16) {
    const __mmask16 m = n - k >= 16 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << (n - k)) - 1);
    const int kn = static_cast<int>(std::min<int64_t>(16, n - k));
    for (int h = 0; h < kFloatPanel / 16; ++h) {
      __m512 r[16];
      for (int j = 0; j < 16; ++j) {
        const int row = 16 * h + j;
        r[j] = row < valid ? L::load16_mask(w.row(c0 + row), k, m) : _mm512_setzero_ps();
      }
      transpose16(r);
      for (int j = 0; j < kn; ++j) _mm512_store_ps(dst + (k + j) * kFloatPanel + 16 * h, r[j]);
    }
  }
}

template <int NX>
void float_panel_kernel(const float* panel, int64_t n, const float* x, int64_t ldx, float* out /*[NX][32]*/) {
  __m512 acc[NX][2];
  for (int r = 0; r < NX; ++r) acc[r][0] = acc[r][1] = _mm512_setzero_ps();
  for (int64_t k = 0; k < n; ++k) {
    const __m512 b0 = _mm512_load_ps(panel + kFloatPanel * k), b1 = _mm512_load_ps(panel + kFloatPanel * k + 16);
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

template <class L>
void tile_float_gemm(const MatmulArgs& a, int64_t r0, int64_t r1) {
  const WeightView& w = *a.w;
  const int64_t n = w.n_in;
  struct Buf {
    float* p = nullptr;
    size_t n = 0;
    ~Buf() { std::free(p); }
  };
  thread_local Buf buf;
  const size_t need = static_cast<size_t>((n + 15) / 16 * 16) * kFloatPanel;
  if (buf.n < need) {
    std::free(buf.p);
    buf.p = static_cast<float*>(std::aligned_alloc(64, (need * 4 + 63) / 64 * 64));
    buf.n = buf.p ? need : 0;
    if (!buf.p) throw std::bad_alloc();
  }
  alignas(64) float out[6 * kFloatPanel];
  for (int64_t c0 = r0; c0 < r1; c0 += kFloatPanel) {
    convert_panel<L>(w, c0, buf.p);
    const int nc = static_cast<int>(std::min<int64_t>(kFloatPanel, r1 - c0));
    for (int64_t i = 0; i < a.m; i += 6) {
      const int nx = static_cast<int>(std::min<int64_t>(6, a.m - i));
      const float* x = a.x + i * n;
      switch (nx) {
        case 6: float_panel_kernel<6>(buf.p, n, x, n, out); break;
        case 5: float_panel_kernel<5>(buf.p, n, x, n, out); break;
        case 4: float_panel_kernel<4>(buf.p, n, x, n, out); break;
        case 3: float_panel_kernel<3>(buf.p, n, x, n, out); break;
        case 2: float_panel_kernel<2>(buf.p, n, x, n, out); break;
        default: float_panel_kernel<1>(buf.p, n, x, n, out); break;
      }
      for (int r = 0; r < nx; ++r) std::memcpy(a.y + (i + r) * w.n_out + c0, out + kFloatPanel * r, sizeof(float) * nc);
    }
  }
}

constexpr int64_t kFloatGemmMinRows = 16;

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

template <class L>
void fp_tiles(const uint8_t* panel, int64_t K, const float* x, int64_t m, int64_t ldx, float* y, int64_t ldy, int nc,
              int pf) {
  alignas(64) float out[6 * kFpPanelRows];
  for (int64_t i = 0; i < m; i += 6) {
    const int nx = static_cast<int>(std::min<int64_t>(6, m - i));
    const float* xi = x + i * ldx;
    switch (nx) {
      case 6: fp_kernel<6, L>(panel, K, xi, ldx, out, pf); break;
      case 5: fp_kernel<5, L>(panel, K, xi, ldx, out, pf); break;
      case 4: fp_kernel<4, L>(panel, K, xi, ldx, out, pf); break;
      case 3: fp_kernel<3, L>(panel, K, xi, ldx, out, pf); break;
      case 2: fp_kernel<2, L>(panel, K, xi, ldx, out, pf); break;
      default: fp_kernel<1, L>(panel, K, xi, ldx, out, pf); break;
    }
    for (int r = 0; r < nx; ++r) std::memcpy(y + (i + r) * ldy, out + kFpPanelRows * r, sizeof(float) * nc);
  }
}

// m below which the panel is read in its own type by every tile of x; at and
// above, it is first converted to f32 once (then each tile only loads).
constexpr int64_t kFpConvertMinRows = 12;

template <class L>
void tile_fp(const MatmulArgs& a, int64_t r0, int64_t r1) {
  const Panels& P = *a.panels;
  const int64_t K = P.n_in, n_out = a.w->n_out;
  const bool convert = a.m >= kFpConvertMinRows;
  const int pf = a.m <= 2 ? prefetch_distance() : 0;
  struct Buf {
    float* p = nullptr;
    size_t n = 0;
    ~Buf() { std::free(p); }
  };
  thread_local Buf buf;
  if (convert) {
    const size_t need = static_cast<size_t>(K) * kFpPanelRows;
    if (buf.n < need) {
      std::free(buf.p);
      buf.p = static_cast<float*>(std::aligned_alloc(64, (need * 4 + 63) / 64 * 64));
      buf.n = buf.p ? need : 0;
      if (!buf.p) throw std::bad_alloc();
    }
  }
  for (int64_t p = r0 / kFpPanelRows; p * kFpPanelRows < r1; ++p) {
    const int64_t c0 = p * kFpPanelRows;
    const int nc = static_cast<int>(std::min<int64_t>(kFpPanelRows, r1 - c0));
    const uint8_t* panel = P.panel(p);
    if (convert) {
      for (int64_t e = 0; e < K * kFpPanelRows; e += 16) _mm512_store_ps(buf.p + e, L::load16(panel + e * L::kBytes));
      fp_tiles<PanelF32>(reinterpret_cast<const uint8_t*>(buf.p), K, a.x, a.m, K, a.y + c0, n_out, nc, 0);
    } else {
      fp_tiles<L>(panel, K, a.x, a.m, K, a.y + c0, n_out, nc, pf);
    }
  }
}


}  // namespace

FormatKernel avx512_format_kernel(DType t, int64_t m) {
  FormatKernel k;
  switch (t) {
    case DType::Q4_0: k.tile = panel_tiles<Q40>; k.act_block = 32; k.panels = true; break;
    case DType::Q4_1: k.tile = panel_tiles<Q41>; k.act_block = 32; k.panels = true; break;
    case DType::Q4_K: k.tile = panel_tiles<Q4K>; k.act_block = 32; k.panels = true; break;
    case DType::INT4_G32: case DType::INT4_G64: case DType::INT4_G128:
      k.tile = panel_tiles<I4>; k.act_block = 32; k.panels = true; break;
    case DType::Q8_0: k.tile = panel_tiles<Q80>; k.act_block = 32; k.act_u8 = true; k.panels = true; break;
    case DType::W8A8: k.tile = panel_tiles<W8>; k.act_block = -1; k.act_u8 = true; k.panels = true; break;
    case DType::F32: k.tile = m >= kFloatGemmMinRows ? tile_float_gemm<LoadF32> : tile_float_dot<LoadF32>; break;
    case DType::F16: k.tile = tile_fp<PanelF16>; k.panels = true; k.panel_rows = kFpPanelRows; break;
    case DType::BF16: k.tile = tile_fp<PanelBF16>; k.panels = true; k.panel_rows = kFpPanelRows; break;
    default: break;
  }
  return k;
}

}  // namespace infer::cpu
