// AVX2 + FMA + F16C versions of the op kernels (cpu/kernels.h). This file is
// compiled with -mavx2 -mfma -mf16c; nothing here runs unless cpuid says the
// CPU has all three and the ISA cap allows AVX2 (cpu/kernels.cpp).
//
// Every output is computed by the same instruction sequence wherever it sits
// in a call: tails are padded to a full vector and go through the vector
// code, and each attention score is reduced with one fixed tree. So results
// never depend on how rows are batched or split between threads.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "core/fp16.h"
#include "cpu/isa_kernels.h"

namespace infer::cpu {

namespace {

// Horizontal sum, ((x0+x1)+(x2+x3)) + ((x4+x5)+(x6+x7)) in effect.
inline float hsum(__m256 v) {
  __m128 lo = _mm256_castps256_ps128(v);
  const __m128 hi = _mm256_extractf128_ps(v, 1);
  lo = _mm_add_ps(lo, hi);
  __m128 sh = _mm_movehdup_ps(lo);
  lo = _mm_add_ps(lo, sh);
  sh = _mm_movehl_ps(sh, lo);
  lo = _mm_add_ss(lo, sh);
  return _mm_cvtss_f32(lo);
}

// Lane i of the result is the horizontal sum of a_i, with the same tree for
// every lane: ((x0+x1)+(x2+x3)) + ((x4+x5)+(x6+x7)).
inline __m256 hsum8(__m256 a0, __m256 a1, __m256 a2, __m256 a3, __m256 a4, __m256 a5, __m256 a6, __m256 a7) {
  // hadd(a, b) = [a0+a1, a2+a3, b0+b1, b2+b3 | a4+a5, a6+a7, b4+b5, b6+b7]
  const __m256 t0 = _mm256_hadd_ps(a0, a1), t1 = _mm256_hadd_ps(a2, a3);
  const __m256 t2 = _mm256_hadd_ps(a4, a5), t3 = _mm256_hadd_ps(a6, a7);
  const __m256 u0 = _mm256_hadd_ps(t0, t1);  // [a0..a3: x0123 | a0..a3: x4567]
  const __m256 u1 = _mm256_hadd_ps(t2, t3);  // [a4..a7: x0123 | a4..a7: x4567]
  const __m256 lo = _mm256_permute2f128_ps(u0, u1, 0x20);
  const __m256 hi = _mm256_permute2f128_ps(u0, u1, 0x31);
  return _mm256_add_ps(lo, hi);
}

// exp(x) for every lane: x = n ln2 + r with |r| <= ln2/2, exp(r) by its
// Taylor series to degree 7 (truncation below 1e-8 relative), times 2^n.
// Results below exp(-87) (near the smallest normal float) are 0, and
// exp(-inf) is 0; inputs above 88 give exp(88).
inline __m256 exp256(__m256 x) {
  const __m256 lo = _mm256_set1_ps(-87.0f), hi = _mm256_set1_ps(88.0f);
  const __m256 underflow = _mm256_cmp_ps(x, lo, _CMP_LT_OQ);
  x = _mm256_min_ps(_mm256_max_ps(x, lo), hi);
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  // Cody-Waite: ln2 = 0.693359375 (exact in 9 bits) - 2.12194440e-4.
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440054690583e-4f), r);
  __m256 p = _mm256_set1_ps(1.0f / 5040.0f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 720.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  const __m256 res = _mm256_mul_ps(p, _mm256_castsi256_ps(e));
  return _mm256_andnot_ps(underflow, res);
}

// ---- attention ----

// Scores for one tile of 8 keys (rows r[0..7]) and nq queries.
template <int HD>
inline void scores_tile(const float* q, int nq, int64_t qs, const float* const* r, int hd, __m256 vscale, float* s,
                        int64_t ss, int m) {
  for (int i = 0; i < nq; ++i) {
    const float* qi = q + i * qs;
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0;
    for (int d = 0; d < (HD ? HD : hd); d += 8) {
      const __m256 qv = _mm256_loadu_ps(qi + d);
      a0 = _mm256_fmadd_ps(qv, _mm256_loadu_ps(r[0] + d), a0);
      a1 = _mm256_fmadd_ps(qv, _mm256_loadu_ps(r[1] + d), a1);
      a2 = _mm256_fmadd_ps(qv, _mm256_loadu_ps(r[2] + d), a2);
      a3 = _mm256_fmadd_ps(qv, _mm256_loadu_ps(r[3] + d), a3);
      a4 = _mm256_fmadd_ps(qv, _mm256_loadu_ps(r[4] + d), a4);
      a5 = _mm256_fmadd_ps(qv, _mm256_loadu_ps(r[5] + d), a5);
      a6 = _mm256_fmadd_ps(qv, _mm256_loadu_ps(r[6] + d), a6);
      a7 = _mm256_fmadd_ps(qv, _mm256_loadu_ps(r[7] + d), a7);
    }
    const __m256 sc = _mm256_mul_ps(hsum8(a0, a1, a2, a3, a4, a5, a6, a7), vscale);
    float* out = s + i * ss;
    if (m == 8) {
      _mm256_storeu_ps(out, sc);
    } else {
      alignas(32) float tmp[8];
      _mm256_store_ps(tmp, sc);
      std::memcpy(out, tmp, sizeof(float) * m);
    }
  }
}

// head_dim 8: a key is one vector; the 8 keys of a tile stay in registers
// for all queries.
inline void scores_tile8(const float* q, int nq, int64_t qs, const float* const* r, __m256 vscale, float* s, int64_t ss,
                         int m) {
  const __m256 k0 = _mm256_loadu_ps(r[0]), k1 = _mm256_loadu_ps(r[1]), k2 = _mm256_loadu_ps(r[2]);
  const __m256 k3 = _mm256_loadu_ps(r[3]), k4 = _mm256_loadu_ps(r[4]), k5 = _mm256_loadu_ps(r[5]);
  const __m256 k6 = _mm256_loadu_ps(r[6]), k7 = _mm256_loadu_ps(r[7]);
  const __m256 z = _mm256_setzero_ps();
  for (int i = 0; i < nq; ++i) {
    const __m256 qv = _mm256_loadu_ps(q + i * qs);
    // fma(q, k, 0): the same rounding as the general loop's first step.
    const __m256 sc = _mm256_mul_ps(
        hsum8(_mm256_fmadd_ps(qv, k0, z), _mm256_fmadd_ps(qv, k1, z), _mm256_fmadd_ps(qv, k2, z),
              _mm256_fmadd_ps(qv, k3, z), _mm256_fmadd_ps(qv, k4, z), _mm256_fmadd_ps(qv, k5, z),
              _mm256_fmadd_ps(qv, k6, z), _mm256_fmadd_ps(qv, k7, z)),
        vscale);
    float* out = s + i * ss;
    if (m == 8) {
      _mm256_storeu_ps(out, sc);
    } else {
      alignas(32) float tmp[8];
      _mm256_store_ps(tmp, sc);
      std::memcpy(out, tmp, sizeof(float) * m);
    }
  }
}

template <int HD>
void scores_hd(const float* q, int nq, int64_t qs, const float* k, int n, int hd, float scale, float* s, int64_t ss) {
  const __m256 vscale = _mm256_set1_ps(scale);
  for (int j = 0; j < n; j += 8) {
    const int m = std::min(8, n - j);
    // A short tile repeats its last key; the extra scores are not stored.
    const float* r[8];
    for (int i = 0; i < 8; ++i) r[i] = k + static_cast<int64_t>(j + std::min(i, m - 1)) * hd;
    if constexpr (HD == 8) {
      scores_tile8(q, nq, qs, r, vscale, s + j, ss, m);
    } else {
      scores_tile<HD>(q, nq, qs, r, hd, vscale, s + j, ss, m);
    }
  }
}

void attn_scores_avx2(const float* q, int nq, int64_t qs, const float* k, int n, int hd, float scale, float* s,
                      int64_t ss) {
  if (n <= 0 || nq <= 0) return;
  switch (hd) {
    case 8: return scores_hd<8>(q, nq, qs, k, n, hd, scale, s, ss);
    case 16: return scores_hd<16>(q, nq, qs, k, n, hd, scale, s, ss);
    case 32: return scores_hd<32>(q, nq, qs, k, n, hd, scale, s, ss);
    case 64: return scores_hd<64>(q, nq, qs, k, n, hd, scale, s, ss);
    case 128: return scores_hd<128>(q, nq, qs, k, n, hd, scale, s, ss);
    default:
      break;
  }
  if (hd % 8 == 0) return scores_hd<0>(q, nq, qs, k, n, hd, scale, s, ss);
  // Odd head sizes: plain dot products, four partial sums.
  for (int i = 0; i < nq; ++i)
    for (int j = 0; j < n; ++j) {
      const float* a = q + i * qs;
      const float* b = k + static_cast<int64_t>(j) * hd;
      float s0 = 0, s1 = 0, s2 = 0, s3 = 0;
      int d = 0;
      for (; d + 4 <= hd; d += 4) {
        s0 += a[d] * b[d];
        s1 += a[d + 1] * b[d + 1];
        s2 += a[d + 2] * b[d + 2];
        s3 += a[d + 3] * b[d + 3];
      }
      for (; d < hd; ++d) s0 += a[d] * b[d];
      s[i * ss + j] = ((s0 + s1) + (s2 + s3)) * scale;
    }
}

// o[0 .. 8*NV) += sum_j p[j] * v[j*hd + (0 .. 8*NV)]. U interleaved sets of
// NV accumulators (key j goes to set j % U) keep U*NV multiply-adds in
// flight, enough to hide their latency for small head sizes; the sets are
// added in a fixed tree at the end.
template <int NV, int U>
inline void accum_block(const float* p, const float* v, int n, int64_t hd, float* o) {
  __m256 acc[U][NV];
  for (int r = 0; r < U; ++r)
    for (int u = 0; u < NV; ++u) acc[r][u] = _mm256_setzero_ps();
  int j = 0;
  for (; j + U <= n; j += U)
    for (int r = 0; r < U; ++r) {
      const __m256 w = _mm256_set1_ps(p[j + r]);
      const float* vj = v + (j + r) * hd;
      for (int u = 0; u < NV; ++u) acc[r][u] = _mm256_fmadd_ps(w, _mm256_loadu_ps(vj + 8 * u), acc[r][u]);
    }
  for (int r = 0; j < n; ++j, ++r) {
    const __m256 w = _mm256_set1_ps(p[j]);
    const float* vj = v + j * hd;
    for (int u = 0; u < NV; ++u) acc[r][u] = _mm256_fmadd_ps(w, _mm256_loadu_ps(vj + 8 * u), acc[r][u]);
  }
  for (int u = 0; u < NV; ++u) {
    __m256 sum = acc[0][u];
    if constexpr (U == 2) sum = _mm256_add_ps(acc[0][u], acc[1][u]);
    if constexpr (U == 4)
      sum = _mm256_add_ps(_mm256_add_ps(acc[0][u], acc[1][u]), _mm256_add_ps(acc[2][u], acc[3][u]));
    if constexpr (U == 8)
      sum = _mm256_add_ps(
          _mm256_add_ps(_mm256_add_ps(acc[0][u], acc[1][u]), _mm256_add_ps(acc[2][u], acc[3][u])),
          _mm256_add_ps(_mm256_add_ps(acc[4][u], acc[5][u]), _mm256_add_ps(acc[6][u], acc[7][u])));
    _mm256_storeu_ps(o + 8 * u, _mm256_add_ps(_mm256_loadu_ps(o + 8 * u), sum));
  }
}

template <int NV, int U>
void accum_nv(const float* p, int nq, int64_t ps, const float* v, int n, int hd, float* o, int64_t os) {
  for (int i = 0; i < nq; ++i)
    for (int d = 0; d < hd; d += 8 * NV) accum_block<NV, U>(p + i * ps, v + d, n, hd, o + i * os + d);
}

void attn_accum_avx2(const float* p, int nq, int64_t ps, const float* v, int n, int hd, float* o, int64_t os) {
  if (n <= 0 || nq <= 0) return;
  if (hd % 64 == 0) return accum_nv<8, 1>(p, nq, ps, v, n, hd, o, os);
  if (hd % 32 == 0) return accum_nv<4, 2>(p, nq, ps, v, n, hd, o, os);
  if (hd % 16 == 0) return accum_nv<2, 4>(p, nq, ps, v, n, hd, o, os);
  if (hd % 8 == 0) return accum_nv<1, 8>(p, nq, ps, v, n, hd, o, os);
  for (int i = 0; i < nq; ++i) {
    float* oi = o + i * os;
    for (int j = 0; j < n; ++j) {
      const float w = p[i * ps + j];
      const float* vj = v + static_cast<int64_t>(j) * hd;
      for (int d = 0; d < hd; ++d) oi[d] += w * vj[d];
    }
  }
}

float exp_sum_avx2(float* x, int n, float* max) {
  // The maximum (exact in any order), then the numerators.
  __m256 mx = _mm256_set1_ps(x[0]);
  int i = 0;
  for (; i + 8 <= n; i += 8) mx = _mm256_max_ps(mx, _mm256_loadu_ps(x + i));
  __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(mx), _mm256_extractf128_ps(mx, 1));
  m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
  m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
  float m = _mm_cvtss_f32(m4);
  for (; i < n; ++i) m = std::max(m, x[i]);
  *max = m;
  const __m256 vm = _mm256_set1_ps(m);
  __m256 acc = _mm256_setzero_ps();
  i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 e = exp256(_mm256_sub_ps(_mm256_loadu_ps(x + i), vm));
    _mm256_storeu_ps(x + i, e);
    acc = _mm256_add_ps(acc, e);
  }
  if (i < n) {
    alignas(32) float tmp[8];
    for (int j = 0; j < 8; ++j) tmp[j] = i + j < n ? x[i + j] : -INFINITY;  // exp(-inf) adds 0
    const __m256 e = exp256(_mm256_sub_ps(_mm256_load_ps(tmp), vm));
    _mm256_store_ps(tmp, e);
    acc = _mm256_add_ps(acc, e);
    std::memcpy(x + i, tmp, sizeof(float) * (n - i));
  }
  return hsum(acc);
}

void i8_rows_to_f32_avx2(const int8_t* src, const float* scales, int rows, int hd, float* dst) {
  for (int r = 0; r < rows; ++r) {
    const int8_t* s = src + static_cast<int64_t>(r) * hd;
    float* o = dst + static_cast<int64_t>(r) * hd;
    const float sc = scales[r];
    const __m256 vs = _mm256_set1_ps(sc);
    int d = 0;
    for (; d + 8 <= hd; d += 8) {
      const __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(s + d));
      _mm256_storeu_ps(o + d, _mm256_mul_ps(vs, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(b))));
    }
    for (; d < hd; ++d) o[d] = sc * static_cast<float>(s[d]);  // the same single rounding
  }
}

void f32_to_f16_avx2(const float* src, uint16_t* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i),
                     _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  for (; i < n; ++i) dst[i] = f32_to_fp16(src[i]);  // exact rounding both ways
}

// ---- rows and elementwise ----

void rms_norm_avx2(const float* x, const float* w, int64_t n, float eps, float* y) {
  __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m256 x0 = _mm256_loadu_ps(x + i), x1 = _mm256_loadu_ps(x + i + 8);
    const __m256 x2 = _mm256_loadu_ps(x + i + 16), x3 = _mm256_loadu_ps(x + i + 24);
    a0 = _mm256_fmadd_ps(x0, x0, a0);
    a1 = _mm256_fmadd_ps(x1, x1, a1);
    a2 = _mm256_fmadd_ps(x2, x2, a2);
    a3 = _mm256_fmadd_ps(x3, x3, a3);
  }
  for (; i + 8 <= n; i += 8) {
    const __m256 x0 = _mm256_loadu_ps(x + i);
    a0 = _mm256_fmadd_ps(x0, x0, a0);
  }
  float ss = hsum(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
  for (; i < n; ++i) ss += x[i] * x[i];
  const float scale = 1.0f / std::sqrt(ss / static_cast<float>(n) + eps);
  const __m256 vs = _mm256_set1_ps(scale);
  i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(y + i, _mm256_mul_ps(_mm256_loadu_ps(w + i), _mm256_mul_ps(vs, _mm256_loadu_ps(x + i))));
  for (; i < n; ++i) y[i] = w[i] * (scale * x[i]);
}

inline __m256 silu_mul(__m256 g, __m256 u) {
  const __m256 e = exp256(_mm256_sub_ps(_mm256_setzero_ps(), g));
  return _mm256_mul_ps(_mm256_div_ps(g, _mm256_add_ps(_mm256_set1_ps(1.0f), e)), u);
}

// out = f(gate, up) 8 lanes at a time; the tail through the same vector code
// (zero padded), so a value's result does not depend on where it sits in the
// call (batch invariance).
// F: a lambda (one instantiation each, inlined), not a function pointer.
template <class F>
void gated_avx2(const float* gate, const float* up, float* out, int64_t n, F f) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(out + i, f(_mm256_loadu_ps(gate + i), _mm256_loadu_ps(up + i)));
  if (i < n) {
    alignas(32) float g[8] = {}, u[8] = {};
    std::memcpy(g, gate + i, sizeof(float) * (n - i));
    std::memcpy(u, up + i, sizeof(float) * (n - i));
    _mm256_store_ps(g, f(_mm256_load_ps(g), _mm256_load_ps(u)));
    std::memcpy(out + i, g, sizeof(float) * (n - i));
  }
}

void swiglu_avx2(const float* gate, const float* up, float* out, int64_t n) {
  gated_avx2(gate, up, out, n, [](__m256 g, __m256 u) { return silu_mul(g, u); });
}

// GELU-tanh gating as g * sigmoid(2 sqrt(2/pi) (g + 0.044715 g^3)) * up (see
// IsaKernels::geglu).
inline __m256 gelu_mul(__m256 g, __m256 u) {
  const __m256 g3 = _mm256_mul_ps(_mm256_mul_ps(g, g), g);
  const __m256 z = _mm256_mul_ps(_mm256_set1_ps(-2.0f * 0.7978845608028654f),
                                 _mm256_fmadd_ps(_mm256_set1_ps(0.044715f), g3, g));
  return _mm256_mul_ps(_mm256_div_ps(g, _mm256_add_ps(_mm256_set1_ps(1.0f), exp256(z))), u);
}

// tanh for every lane: below |y| = 1/4 its odd Taylor series to y^11 (the
// next term is under 2e-9 relative there); above, 1 - 2 / (exp(2|y|) + 1),
// whose cancellation costs at most a few float ulps of tanh(1/4) and less
// further out; the sign restored last. exp256 saturates, so large |y| give 1.
inline __m256 tanh256(__m256 y) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  const __m256 a = _mm256_andnot_ps(sign, y);
  const __m256 a2 = _mm256_mul_ps(a, a);
  __m256 p = _mm256_set1_ps(-1382.0f / 155925.0f);
  p = _mm256_fmadd_ps(p, a2, _mm256_set1_ps(62.0f / 2835.0f));
  p = _mm256_fmadd_ps(p, a2, _mm256_set1_ps(-17.0f / 315.0f));
  p = _mm256_fmadd_ps(p, a2, _mm256_set1_ps(2.0f / 15.0f));
  p = _mm256_fmadd_ps(p, a2, _mm256_set1_ps(-1.0f / 3.0f));
  const __m256 small = _mm256_fmadd_ps(_mm256_mul_ps(p, a2), a, a);
  const __m256 e = exp256(_mm256_add_ps(a, a));
  const __m256 big = _mm256_sub_ps(_mm256_set1_ps(1.0f), _mm256_div_ps(_mm256_set1_ps(2.0f), _mm256_add_ps(e, _mm256_set1_ps(1.0f))));
  const __m256 t = _mm256_blendv_ps(big, small, _mm256_cmp_ps(a, _mm256_set1_ps(0.25f), _CMP_LT_OQ));
  return _mm256_or_ps(t, _mm256_and_ps(y, sign));
}

void geglu_avx2(const float* gate, const float* up, float* out, int64_t n) {
  gated_avx2(gate, up, out, n, [](__m256 g, __m256 u) { return gelu_mul(g, u); });
}

void softcap_avx2(float* x, int64_t n, float cap) {
  const __m256 vc = _mm256_set1_ps(cap), vi = _mm256_set1_ps(1.0f / cap);
  // In place; the second operand is unused.
  gated_avx2(x, x, x, n, [&](__m256 v, __m256) { return _mm256_mul_ps(vc, tanh256(_mm256_mul_ps(v, vi))); });
}

// erf for every lane by Abramowitz and Stegun 7.1.26 (|error| <= 1.5e-7):
// erf|x| = 1 - t (a1 + t (a2 + ... a5)) exp(-x^2), t = 1 / (1 + p|x|), the
// sign restored last.
inline __m256 erf256(__m256 x) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  const __m256 a = _mm256_andnot_ps(sign, x);
  const __m256 t = _mm256_div_ps(_mm256_set1_ps(1.0f), _mm256_fmadd_ps(_mm256_set1_ps(0.3275911f), a, _mm256_set1_ps(1.0f)));
  __m256 p = _mm256_set1_ps(1.061405429f);
  p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(-1.453152027f));
  p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(1.421413741f));
  p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(-0.284496736f));
  p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(0.254829592f));
  p = _mm256_mul_ps(p, t);
  const __m256 e = exp256(_mm256_sub_ps(_mm256_setzero_ps(), _mm256_mul_ps(a, a)));
  const __m256 r = _mm256_fnmadd_ps(p, e, _mm256_set1_ps(1.0f));
  return _mm256_or_ps(r, _mm256_and_ps(x, sign));
}

void gelu_erf_avx2(float* x, int64_t n) {
  gated_avx2(x, x, x, n, [](__m256 v, __m256) {
    const __m256 h = _mm256_mul_ps(_mm256_set1_ps(0.5f), v);
    return _mm256_fmadd_ps(h, erf256(_mm256_mul_ps(v, _mm256_set1_ps(0.70710678118654752f))), h);
  });
}

void tanh_avx2(float* x, int64_t n) {
  gated_avx2(x, x, x, n, [](__m256 v, __m256) { return tanh256(v); });
}

void layer_norm_avx2(const float* x, const float* w, const float* b, int64_t n, float eps, float* y) {
  __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    a0 = _mm256_add_ps(a0, _mm256_loadu_ps(x + i));
    a1 = _mm256_add_ps(a1, _mm256_loadu_ps(x + i + 8));
  }
  for (; i + 8 <= n; i += 8) a0 = _mm256_add_ps(a0, _mm256_loadu_ps(x + i));
  float sum = hsum(_mm256_add_ps(a0, a1));
  for (; i < n; ++i) sum += x[i];
  const float mean = sum / static_cast<float>(n);
  const __m256 vm = _mm256_set1_ps(mean);
  a0 = _mm256_setzero_ps();
  a1 = _mm256_setzero_ps();
  for (i = 0; i + 16 <= n; i += 16) {
    const __m256 d0 = _mm256_sub_ps(_mm256_loadu_ps(x + i), vm), d1 = _mm256_sub_ps(_mm256_loadu_ps(x + i + 8), vm);
    a0 = _mm256_fmadd_ps(d0, d0, a0);
    a1 = _mm256_fmadd_ps(d1, d1, a1);
  }
  for (; i + 8 <= n; i += 8) {
    const __m256 d0 = _mm256_sub_ps(_mm256_loadu_ps(x + i), vm);
    a0 = _mm256_fmadd_ps(d0, d0, a0);
  }
  float var = hsum(_mm256_add_ps(a0, a1));
  for (; i < n; ++i) var += (x[i] - mean) * (x[i] - mean);
  const float inv = 1.0f / std::sqrt(var / static_cast<float>(n) + eps);
  const __m256 vi = _mm256_set1_ps(inv);
  for (i = 0; i + 8 <= n; i += 8) {
    __m256 t = _mm256_mul_ps(_mm256_mul_ps(_mm256_sub_ps(_mm256_loadu_ps(x + i), vm), vi), _mm256_loadu_ps(w + i));
    if (b) t = _mm256_add_ps(t, _mm256_loadu_ps(b + i));
    _mm256_storeu_ps(y + i, t);
  }
  for (; i < n; ++i) {
    const float t = (x[i] - mean) * inv * w[i];
    y[i] = b ? t + b[i] : t;
  }
}

void add_avx2(float* x, const float* y, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(x + i, _mm256_add_ps(_mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
  for (; i < n; ++i) x[i] += y[i];
}

void rope_avx2(float* v, const float* cs, int half, bool neox) {
  int i = 0;
  if (!neox) {
    // Four pairs per vector: v = [a0 b0 a1 b1 ..], cs = [c0 s0 c1 s1 ..].
    const __m256 sign = _mm256_setr_ps(-0.0f, 0.0f, -0.0f, 0.0f, -0.0f, 0.0f, -0.0f, 0.0f);
    for (; i + 4 <= half; i += 4) {
      const __m256 x = _mm256_loadu_ps(v + 2 * i), t = _mm256_loadu_ps(cs + 2 * i);
      const __m256 c = _mm256_moveldup_ps(t);                      // c c
      const __m256 s = _mm256_xor_ps(_mm256_movehdup_ps(t), sign);  // -s s
      const __m256 sw = _mm256_permute_ps(x, 0xB1);                // b a
      // (a c - b s, b c + a s)
      _mm256_storeu_ps(v + 2 * i, _mm256_add_ps(_mm256_mul_ps(x, c), _mm256_mul_ps(sw, s)));
    }
  } else {
    for (; i + 8 <= half; i += 8) {
      const __m256 t0 = _mm256_loadu_ps(cs + 2 * i), t1 = _mm256_loadu_ps(cs + 2 * i + 8);
      // De-interleave [c s] pairs: shuffle within lanes, then fix the lane order.
      const __m256 c = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(t0, t1, 0x88)), 0xD8));
      const __m256 s = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(t0, t1, 0xDD)), 0xD8));
      const __m256 a = _mm256_loadu_ps(v + i), b = _mm256_loadu_ps(v + half + i);
      _mm256_storeu_ps(v + i, _mm256_sub_ps(_mm256_mul_ps(a, c), _mm256_mul_ps(b, s)));
      _mm256_storeu_ps(v + half + i, _mm256_add_ps(_mm256_mul_ps(a, s), _mm256_mul_ps(b, c)));
    }
  }
  for (; i < half; ++i) {
    const int ia = neox ? i : 2 * i;
    const int ib = neox ? i + half : 2 * i + 1;
    const float a = v[ia], b = v[ib], c = cs[2 * i], s = cs[2 * i + 1];
    v[ia] = a * c - b * s;
    v[ib] = a * s + b * c;
  }
}

// ---- state-space layers ----

// Lanes [0, n) of 8 set (n <= 8 counts; more sets all), for maskload / maskstore.
inline __m256i lane_mask(int64_t n) {
  const int k = static_cast<int>(std::min<int64_t>(n, 8));
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(k), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

inline float softplus1(float v) { return v > 20.0f ? v : std::log1p(std::exp(v)); }

// The scan (cpu/kernels.h): each row of state 8 values at a time (the tail
// masked, so every row goes through the same instructions), dt and the
// scalar decay computed ahead for up to 64 tokens of a head.
void ssm_scan_avx2(float* h, const SsmScanRun& r) {
  constexpr int64_t kChunk = 64;
  const int64_t P = r.head_dim, N = r.d_state;
  float dts[kChunk], decay[kChunk];
  for (int64_t j = 0; j < r.n_head; ++j) {
    float* hj = h + j * P * N;
    const float bias = r.dt_bias ? r.dt_bias[j] : 0.0f;
    const float* A = r.A + j * N;
    for (int64_t t0 = 0; t0 < r.T; t0 += kChunk) {
      const int64_t tn = std::min(kChunk, r.T - t0);
      for (int64_t t = 0; t < tn; ++t) {
        dts[t] = softplus1(r.dt[(t0 + t) * r.dt_stride + j] + bias);
        if (!r.a_per_state) decay[t] = std::exp(dts[t] * r.A[j]);
      }
      for (int64_t p = 0; p < P; ++p) {
        float* hp = hj + p * N;
        for (int64_t t = 0; t < tn; ++t) {
          const int64_t tt = t0 + t;
          const __m256 dt = _mm256_set1_ps(dts[t]);
          const __m256 dtx = _mm256_set1_ps(dts[t] * r.x[tt * r.x_stride + j * P + p]);
          const float* B = r.B + tt * r.b_stride;
          const float* C = r.C + tt * r.c_stride;
          __m256 acc = _mm256_setzero_ps();
          const __m256 scalar_decay = _mm256_set1_ps(r.a_per_state ? 0.0f : decay[t]);
          for (int64_t s = 0; s < N; s += 8) {
            __m256 hv, bv, cv, dA;
            const bool full = s + 8 <= N;
            const __m256i m = lane_mask(N - s);
            if (full) {
              hv = _mm256_loadu_ps(hp + s);
              bv = _mm256_loadu_ps(B + s);
              cv = _mm256_loadu_ps(C + s);
              dA = r.a_per_state ? exp256(_mm256_mul_ps(dt, _mm256_loadu_ps(A + s))) : scalar_decay;
            } else {
              hv = _mm256_maskload_ps(hp + s, m);
              bv = _mm256_maskload_ps(B + s, m);
              cv = _mm256_maskload_ps(C + s, m);
              dA = r.a_per_state ? exp256(_mm256_mul_ps(dt, _mm256_maskload_ps(A + s, m))) : scalar_decay;
            }
            hv = _mm256_fmadd_ps(hv, dA, _mm256_mul_ps(dtx, bv));
            acc = _mm256_fmadd_ps(hv, cv, acc);
            if (full) _mm256_storeu_ps(hp + s, hv);
            else _mm256_maskstore_ps(hp + s, m, hv);
          }
          r.y[tt * r.y_stride + j * P + p] = hsum(acc);
        }
      }
    }
  }
}

// The SSD product (cpu/kernels.h): tiles of R rows x 16 columns held in
// registers over the whole K, a row of b loaded once per tile and k; the
// columns past the last 16 one at a time.
template <int R>
void ssd_tile(int64_t j, int64_t K, const float* a, int64_t lda, const float* b, int64_t ldb, float* c, int64_t ldc) {
  __m256 acc[R][2];
  for (int r = 0; r < R; ++r) {
    acc[r][0] = _mm256_loadu_ps(c + r * ldc + j);
    acc[r][1] = _mm256_loadu_ps(c + r * ldc + j + 8);
  }
  for (int64_t k = 0; k < K; ++k) {
    const __m256 b0 = _mm256_loadu_ps(b + k * ldb + j), b1 = _mm256_loadu_ps(b + k * ldb + j + 8);
    for (int r = 0; r < R; ++r) {
      const __m256 av = _mm256_broadcast_ss(a + r * lda + k);
      acc[r][0] = _mm256_fmadd_ps(av, b0, acc[r][0]);
      acc[r][1] = _mm256_fmadd_ps(av, b1, acc[r][1]);
    }
  }
  for (int r = 0; r < R; ++r) {
    _mm256_storeu_ps(c + r * ldc + j, acc[r][0]);
    _mm256_storeu_ps(c + r * ldc + j + 8, acc[r][1]);
  }
}

void ssd_gemm_avx2(int64_t M, int64_t N, int64_t K, const float* a, int64_t lda, const float* b, int64_t ldb,
                   float* c, int64_t ldc) {
  const int64_t N16 = N / 16 * 16;
  for (int64_t i = 0; i < M; i += 4) {
    const int64_t R = std::min<int64_t>(4, M - i);
    const float* ai = a + i * lda;
    float* ci = c + i * ldc;
    for (int64_t j = 0; j < N16; j += 16) {
      switch (R) {
        case 4: ssd_tile<4>(j, K, ai, lda, b, ldb, ci, ldc); break;
        case 3: ssd_tile<3>(j, K, ai, lda, b, ldb, ci, ldc); break;
        case 2: ssd_tile<2>(j, K, ai, lda, b, ldb, ci, ldc); break;
        default: ssd_tile<1>(j, K, ai, lda, b, ldb, ci, ldc); break;
      }
    }
    for (int64_t r = 0; r < R; ++r)
      for (int64_t j = N16; j < N; ++j) {
        float s = ci[r * ldc + j];
        for (int64_t k = 0; k < K; ++k) s += ai[r * lda + k] * b[k * ldb + j];
        ci[r * ldc + j] = s;
      }
  }
}

// One convolution row (cpu/kernels.h), 8 channels at a time, the tail masked.
void ssm_conv_row_avx2(const float* const* in, const float* wt, const float* bias, int64_t n, int d_conv,
                       float* out) {
  for (int64_t c = 0; c < n; c += 8) {
    const __m256i m = lane_mask(n - c);
    __m256 s = bias ? _mm256_maskload_ps(bias + c, m) : _mm256_setzero_ps();
    for (int k = 0; k < d_conv; ++k)
      s = _mm256_fmadd_ps(_mm256_maskload_ps(wt + k * n + c, m), _mm256_maskload_ps(in[k] + c, m), s);
    const __m256 e = exp256(_mm256_sub_ps(_mm256_setzero_ps(), s));
    _mm256_maskstore_ps(out + c, m, _mm256_div_ps(s, _mm256_add_ps(_mm256_set1_ps(1.0f), e)));
  }
}

}  // namespace

// The entry points of cpu/isa_kernels.h.
namespace avx2 {

void attn_scores(const float* q, int nq, int64_t qs, const float* k, int n, int hd, float scale, float* s,
                 int64_t ss) {
  attn_scores_avx2(q, nq, qs, k, n, hd, scale, s, ss);
}
void attn_accum(const float* p, int nq, int64_t ps, const float* v, int n, int hd, float* o, int64_t os) {
  attn_accum_avx2(p, nq, ps, v, n, hd, o, os);
}
float exp_sum(float* x, int n, float* m) { return exp_sum_avx2(x, n, m); }
void i8_rows_to_f32(const int8_t* src, const float* scales, int rows, int hd, float* dst) {
  i8_rows_to_f32_avx2(src, scales, rows, hd, dst);
}
void f32_to_f16(const float* src, uint16_t* dst, int64_t n) { f32_to_f16_avx2(src, dst, n); }
void rms_norm(const float* x, const float* w, int64_t n, float eps, float* y) { rms_norm_avx2(x, w, n, eps, y); }
void swiglu(const float* gate, const float* up, float* out, int64_t n) { swiglu_avx2(gate, up, out, n); }
void add(float* x, const float* y, int64_t n) { add_avx2(x, y, n); }
void rope(float* v, const float* cs, int half, bool neox) { rope_avx2(v, cs, half, neox); }
void geglu(const float* gate, const float* up, float* out, int64_t n) { geglu_avx2(gate, up, out, n); }
void softcap(float* x, int64_t n, float cap) { softcap_avx2(x, n, cap); }
void gelu_erf(float* x, int64_t n) { gelu_erf_avx2(x, n); }
void tanh_f32(float* x, int64_t n) { tanh_avx2(x, n); }
void ssm_scan(float* h, const SsmScanRun& r) { ssm_scan_avx2(h, r); }
void ssd_gemm(int64_t M, int64_t N, int64_t K, const float* a, int64_t lda, const float* b, int64_t ldb, float* c,
              int64_t ldc) {
  ssd_gemm_avx2(M, N, K, a, lda, b, ldb, c, ldc);
}
void ssm_conv_row(const float* const* in, const float* wt, const float* bias, int64_t n, int d_conv, float* out) {
  ssm_conv_row_avx2(in, wt, bias, n, d_conv, out);
}
void layer_norm(const float* x, const float* w, const float* b, int64_t n, float eps, float* y) {
  layer_norm_avx2(x, w, b, n, eps, y);
}

}  // namespace avx2

}  // namespace infer::cpu
