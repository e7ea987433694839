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
#include "core/tls.h"
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

// The per-row affine map of each 32-value block of a K4 panel group
// (w = dv * q + mv): group() at the start of a group (sd: its scales),
// then block(b) for each of its blocks.
template <Panels::Scales S>
struct K4Scale {
  using Sc = Panels::Scales;
  __m512 dv = _mm512_setzero_ps(), mv = _mm512_setzero_ps();
  __m512 dsup = _mm512_setzero_ps(), msup = _mm512_setzero_ps();
  const uint8_t* sd = nullptr;
  void group(const uint8_t* scales) {
    sd = scales;
    if constexpr (S == Sc::Int4) {
      dv = load_f16x16(sd);
      const __m512 zf = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(sd + 32))));
      mv = _mm512_mul_ps(zf, _mm512_sub_ps(_mm512_setzero_ps(), dv));
    } else if constexpr (S == Sc::Q4_K) {
      dsup = load_f16x16(sd + 256);
      msup = _mm512_sub_ps(_mm512_setzero_ps(), load_f16x16(sd + 288));
    }
  }
  void block(int b) {
    if constexpr (S == Sc::Q4_0) {  // per block: a = d (b = -8d is in the integer sum, see apply)
      dv = load_f16x16(sd + 32 * b);
    } else if constexpr (S == Sc::Q4_1) {  // a = d, b = m
      dv = load_f16x16(sd + 64 * b);
      mv = load_f16x16(sd + 64 * b + 32);
    } else if constexpr (S == Sc::Q4_K) {  // a = d * sc, b = -dmin * mn of this block
      const __m128i sc = _mm_loadu_si128(reinterpret_cast<const __m128i*>(sd + 16 * b));
      const __m128i mn = _mm_loadu_si128(reinterpret_cast<const __m128i*>(sd + 128 + 16 * b));
      dv = _mm512_mul_ps(dsup, _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(sc)));
      mv = _mm512_mul_ps(msup, _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(mn)));
    }
  }
  // acc += one activation block's integer sum scaled into floats: s32 is
  // Σ q x, except for Q4_0, where it is Σ (q - 8) x and the offset needs no
  // second term. The same operations in every kernel (VNNI and AMX), so
  // results do not depend on which one ran or on how many rows were batched.
  __m512 apply(__m512 acc, __m512i s32, float d, float xs) const {
    acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s32), _mm512_mul_ps(dv, _mm512_set1_ps(d)), acc);
    if constexpr (S == Sc::Q4_0) return acc;
    return _mm512_fmadd_ps(mv, _mm512_set1_ps(xs), acc);
  }
};

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

template <int NX> struct Q40 { static void run(const Panels& P, const uint8_t* p, const QActs& q, int64_t i, float* o) { k4_panel<NX, Panels::Scales::Q4_0>(P, p, q, i, o); } };
template <int NX> struct Q41 { static void run(const Panels& P, const uint8_t* p, const QActs& q, int64_t i, float* o) { k4_panel<NX, Panels::Scales::Q4_1>(P, p, q, i, o); } };
template <int NX> struct Q4K { static void run(const Panels& P, const uint8_t* p, const QActs& q, int64_t i, float* o) { k4_panel<NX, Panels::Scales::Q4_K>(P, p, q, i, o); } };
template <int NX> struct I4 { static void run(const Panels& P, const uint8_t* p, const QActs& q, int64_t i, float* o) { k4_panel<NX, Panels::Scales::Int4>(P, p, q, i, o); } };
template <int NX> struct Q80 { static void run(const Panels& P, const uint8_t* p, const QActs& q, int64_t i, float* o) { k8_panel<NX, false>(P, p, q, i, o); } };
template <int NX> struct W8 { static void run(const Panels& P, const uint8_t* p, const QActs& q, int64_t i, float* o) { k8_panel<NX, true>(P, p, q, i, o); } };

// y[r][0..nc) = out[r][0..nc) for r < n (out: 16 floats per row), with
// masked stores (a memcpy of 64 bytes per row became `rep movsq`, whose
// start-up cost showed in profiles of the batched kernels).
inline void store_rows(const float* out, int n, int nc, float* y, int64_t ldy) {
  const __mmask16 k = static_cast<__mmask16>((1u << nc) - 1);
  for (int r = 0; r < n; ++r) _mm512_mask_storeu_ps(y + r * ldy, k, _mm512_loadu_ps(out + 16 * r));
}

// Panels of rows [r0, r1) against rows [i0, m) of x in tiles of up to 8.
template <template <int> class K>
void panel_rows(const MatmulArgs& a, int64_t r0, int64_t r1, int64_t i0) {
  const Panels& P = *a.panels;
  const int64_t n_out = a.w->n_out;
  alignas(64) float out[8 * 16];
  for (int64_t p = r0 / kPanelRows; p * kPanelRows < r1; ++p) {
    const uint8_t* panel = P.panel(p);
    const int64_t c0 = p * kPanelRows;
    const int nc = static_cast<int>(std::min<int64_t>(kPanelRows, r1 - c0));
    for (int64_t i = i0; i < a.m; i += 8) {
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
      store_rows(out, nx, nc, a.y + i * n_out + c0, n_out);
    }
  }
}

template <template <int> class K>
void panel_tiles(const MatmulArgs& a, int64_t r0, int64_t r1) {
  panel_rows<K>(a, r0, r1, 0);
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
  static thread_local Buf* buf_slot = nullptr;
  Buf& buf = tls_object(buf_slot);
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
  static thread_local Buf* buf_slot = nullptr;
  Buf& buf = tls_object(buf_slot);
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


#if defined(INFER_HAVE_AMX)
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

template <int MT> struct AmxRunQ40 { static void run(const Panels& P, const uint8_t* p, const QActs& q, int64_t i, int pf, float* o) { amx_panel<MT, AmxK4<Panels::Scales::Q4_0>>(P, p, q, i, pf, o); } };
template <int MT> struct AmxRunQ41 { static void run(const Panels& P, const uint8_t* p, const QActs& q, int64_t i, int pf, float* o) { amx_panel<MT, AmxK4<Panels::Scales::Q4_1>>(P, p, q, i, pf, o); } };
template <int MT> struct AmxRunQ4K { static void run(const Panels& P, const uint8_t* p, const QActs& q, int64_t i, int pf, float* o) { amx_panel<MT, AmxK4<Panels::Scales::Q4_K>>(P, p, q, i, pf, o); } };
template <int MT> struct AmxRunI4 { static void run(const Panels& P, const uint8_t* p, const QActs& q, int64_t i, int pf, float* o) { amx_panel<MT, AmxK4<Panels::Scales::Int4>>(P, p, q, i, pf, o); } };
template <int MT> struct AmxRunQ80 { static void run(const Panels& P, const uint8_t* p, const QActs& q, int64_t i, int pf, float* o) { amx_panel<MT, AmxQ80>(P, p, q, i, pf, o); } };
template <int MT> struct AmxRunW8 { static void run(const Panels& P, const uint8_t* p, const QActs& q, int64_t i, int pf, float* o) { amx_w8a8_panel<MT>(P, p, q, i, pf, o); } };

// Rows of x in tiles of 16 (the tiles configured once per tile height),
// each against the panels of [r0, r1); the first tile streams the panels in
// with prefetches, later ones find them in cache. A last tile of fewer than
// kAmxMinTail rows goes to the VNNI kernel V instead (same results): a tile
// multiply costs about as much for 1 row as for 16, so a 16-sequence decode
// step that also carries a short prompt stays one tile.
constexpr int64_t kAmxMinTail = 8;

template <template <int> class K, template <int> class V>
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
      switch (mt) {
        case 16: K<16>::run(P, panel, *a.qa, i, pf, out); break;
        case 15: K<15>::run(P, panel, *a.qa, i, pf, out); break;
        case 14: K<14>::run(P, panel, *a.qa, i, pf, out); break;
        case 13: K<13>::run(P, panel, *a.qa, i, pf, out); break;
        case 12: K<12>::run(P, panel, *a.qa, i, pf, out); break;
        case 11: K<11>::run(P, panel, *a.qa, i, pf, out); break;
        case 10: K<10>::run(P, panel, *a.qa, i, pf, out); break;
        case 9: K<9>::run(P, panel, *a.qa, i, pf, out); break;
        case 8: K<8>::run(P, panel, *a.qa, i, pf, out); break;
        case 7: K<7>::run(P, panel, *a.qa, i, pf, out); break;
        case 6: K<6>::run(P, panel, *a.qa, i, pf, out); break;
        case 5: K<5>::run(P, panel, *a.qa, i, pf, out); break;
        case 4: K<4>::run(P, panel, *a.qa, i, pf, out); break;
        case 3: K<3>::run(P, panel, *a.qa, i, pf, out); break;
        case 2: K<2>::run(P, panel, *a.qa, i, pf, out); break;
        default: K<1>::run(P, panel, *a.qa, i, pf, out); break;
      }
      const int64_t c0 = p * kPanelRows;
      store_rows(out, mt, static_cast<int>(std::min<int64_t>(kPanelRows, r1 - c0)), a.y + i * n_out + c0, n_out);
    }
  }
  amx_release();
  if (i < a.m) panel_rows<V>(a, r0, r1, i);
}

#undef INFER_TILE_LOAD
#undef INFER_TILE_STORE
#undef INFER_TILE_ZERO
#undef INFER_TILE_DPBSUD
#undef INFER_TILE_DPBSSD
#endif  // INFER_HAVE_AMX

}  // namespace

FormatKernel avx512_format_kernel(DType t, int64_t m) {
  FormatKernel k;
  switch (t) {
    case DType::Q4_0: k.tile = panel_tiles<Q40>; k.act_block = 32; k.act_sums = true; k.panels = true; break;
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

FormatKernel amx_format_kernel(DType t, int64_t m) {
  FormatKernel k;
#if defined(INFER_HAVE_AMX)
  if (m < kAmxMinRows) return k;
  switch (t) {
    case DType::Q4_0: k.tile = amx_tiles<AmxRunQ40, Q40>; k.act_sums = true; break;
    case DType::Q4_1: k.tile = amx_tiles<AmxRunQ41, Q41>; break;
    case DType::Q4_K: k.tile = amx_tiles<AmxRunQ4K, Q4K>; break;
    case DType::INT4_G32: case DType::INT4_G64: case DType::INT4_G128: k.tile = amx_tiles<AmxRunI4, I4>; break;
    case DType::Q8_0: k.tile = amx_tiles<AmxRunQ80, Q80>; k.act_u8 = true; break;  // u8: the VNNI tail
    case DType::W8A8: k.tile = amx_tiles<AmxRunW8, W8>; k.act_block = -1; k.act_u8 = true; k.panels = true; return k;
    default: return k;
  }
  k.act_block = 32;
  k.panels = true;
#endif
  return k;
}

}  // namespace infer::cpu
