// AVX-512 versions of the attention kernels of cpu/kernels.h (the other op
// kernels stay the AVX2 ones: they are a few percent of a step). Compiled
// with the AVX-512 flags of cpu/avx512/; used only when the CPU runs AVX-512
// and the ISA cap allows it (cpu/kernels.cpp).
//
// Attention over a long context is paid per token whatever the batch, so it
// is the part of a batched decode step that does not shrink with batching.
// With grouped-query attention the query heads of a group share every key
// and value row: these kernels load a key row once for two queries and a
// value row once for four, and use 16-wide vectors.
//
// Determinism (cpu/kernels.h): a score is the sum of its hd / 16 partial
// vectors reduced by one fixed tree, the same for every lane of the
// reduction; a query paired with another or alone (an odd last query is
// paired with itself) goes through the same instructions. A weighted sum
// accumulates its keys in order from zero, one chain per query and 16
// values, then is added to o; nothing depends on the other queries of the
// call.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "cpu/isa_kernels.h"

// GCC 12 warns inside its own headers that the shuffle intrinsics' unused
// pass-through operand is uninitialized (a false positive).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace infer::cpu {

namespace {

// Lane i of the result (i < 16) is the sum of the 16 lanes of v[i], by the
// tree (((l + l^8) + (l^4 ...)) ...): halves, then quarters, then pairs.
inline __m512 reduce16(const __m512* v) {
  __m512 a[8], b[4], c[2];
  // Level 1: source 2k and 2k+1 -> [s2k lanes 0-7 + 8-15 | s2k+1 lanes 0-7 + 8-15].
  for (int k = 0; k < 8; ++k) {
    const __m512 lo = _mm512_shuffle_f32x4(v[2 * k], v[2 * k + 1], 0x44);  // s0.L0 s0.L1 s1.L0 s1.L1
    const __m512 hi = _mm512_shuffle_f32x4(v[2 * k], v[2 * k + 1], 0xEE);  // s0.L2 s0.L3 s1.L2 s1.L3
    a[k] = _mm512_add_ps(lo, hi);
  }
  // Level 2: 128-bit lane j of a[k] holds half of one source: lanes
  // (s2k: 0, 1), (s2k+1: 2, 3). Pair a[2m], a[2m+1] -> one source per lane.
  for (int m = 0; m < 4; ++m) {
    const __m512 lo = _mm512_shuffle_f32x4(a[2 * m], a[2 * m + 1], 0x88);  // a.L0 a.L2 b.L0 b.L2
    const __m512 hi = _mm512_shuffle_f32x4(a[2 * m], a[2 * m + 1], 0xDD);  // a.L1 a.L3 b.L1 b.L3
    b[m] = _mm512_add_ps(lo, hi);
  }
  // b[m]'s 128-bit lanes: sources 4m, 4m+1, 4m+2, 4m+3 with 4 partials each.
  // Level 3 and 4 within 128-bit lanes, like a 4 x 4 transpose-add.
  for (int m = 0; m < 2; ++m) {
    const __m512 x = b[2 * m], y = b[2 * m + 1];
    // [x0 y0 x1 y1] + [x2 y2 x3 y3] per lane
    c[m] = _mm512_add_ps(_mm512_unpacklo_ps(x, y), _mm512_unpackhi_ps(x, y));
  }
  // c[m] per 128-bit lane j: [xj(0+2), yj(0+2), xj(1+3), yj(1+3)] with x = source 8m + j, y = source 8m + 4 + j.
  const __m512 lo = _mm512_unpacklo_ps(c[0], c[1]);  // [x0+2 (c0), x0+2 (c1), y0+2 (c0), y0+2 (c1)]
  const __m512 hi = _mm512_unpackhi_ps(c[0], c[1]);  // [x1+3 (c0), x1+3 (c1), y1+3 (c0), y1+3 (c1)]
  const __m512 s = _mm512_add_ps(lo, hi);
  // s, 128-bit lane j: [src j, src 8 + j, src 4 + j, src 12 + j]. Put source i in lane i.
  const __m512i idx = _mm512_setr_epi32(0, 4, 8, 12, 2, 6, 10, 14, 1, 5, 9, 13, 3, 7, 11, 15);
  return _mm512_permutexvar_ps(idx, s);
}

// Scores of queries qa and qb (qb may be qa) against 8 keys r[0..7]:
// lanes 0-7 for qa, 8-15 for qb.
inline __m512 scores_pair(const float* qa, const float* qb, const float* const* r, int hd) {
  __m512 acc[16];
  for (int j = 0; j < 8; ++j) {
    const __m512 k = _mm512_loadu_ps(r[j]);
    acc[j] = _mm512_mul_ps(_mm512_loadu_ps(qa), k);
    acc[8 + j] = _mm512_mul_ps(_mm512_loadu_ps(qb), k);
  }
  for (int d = 16; d < hd; d += 16) {
    const __m512 xa = _mm512_loadu_ps(qa + d), xb = _mm512_loadu_ps(qb + d);
    for (int j = 0; j < 8; ++j) {
      const __m512 k = _mm512_loadu_ps(r[j] + d);
      acc[j] = _mm512_fmadd_ps(xa, k, acc[j]);
      acc[8 + j] = _mm512_fmadd_ps(xb, k, acc[8 + j]);
    }
  }
  return reduce16(acc);
}

void attn_scores_avx512(const float* q, int nq, int64_t qs, const float* k, int n, int hd, float scale, float* s,
                        int64_t ss) {
  if (n <= 0 || nq <= 0) return;
  if (hd % 16) return avx2::attn_scores(q, nq, qs, k, n, hd, scale, s, ss);
  const __m512 vscale = _mm512_set1_ps(scale);
  for (int j = 0; j < n; j += 8) {
    const int m = std::min(8, n - j);
    // A short tile repeats its last key; the extra scores are not stored.
    const float* r[8];
    for (int i = 0; i < 8; ++i) r[i] = k + static_cast<int64_t>(j + std::min(i, m - 1)) * hd;
    const __mmask16 keep = static_cast<__mmask16>((1u << m) - 1);
    for (int i = 0; i < nq; i += 2) {
      const float* qa = q + i * qs;
      const float* qb = i + 1 < nq ? qa + qs : qa;
      const __m512 sc = _mm512_mul_ps(scores_pair(qa, qb, r, hd), vscale);
      _mm512_mask_storeu_ps(s + i * ss + j, keep, sc);
      if (i + 1 < nq)
        _mm512_mask_storeu_ps(s + (i + 1) * ss + j, keep, _mm512_shuffle_f32x4(sc, sc, 0xEE));
    }
  }
}

// o[i] += sum_j p[i][j] v[j] for up to 4 queries and 64 values (NV vectors
// of 16) starting at v: each query's chain starts at zero and takes the keys
// in order.
template <int NQ, int NV>
inline void accum_tile(const float* p, int64_t ps, const float* v, int n, int64_t hd, float* o, int64_t os) {
  __m512 acc[NQ][NV];
  for (int i = 0; i < NQ; ++i)
    for (int u = 0; u < NV; ++u) acc[i][u] = _mm512_setzero_ps();
  for (int j = 0; j < n; ++j) {
    const float* vj = v + j * hd;
    __m512 x[NV];
    for (int u = 0; u < NV; ++u) x[u] = _mm512_loadu_ps(vj + 16 * u);
    for (int i = 0; i < NQ; ++i) {
      const __m512 w = _mm512_set1_ps(p[i * ps + j]);
      for (int u = 0; u < NV; ++u) acc[i][u] = _mm512_fmadd_ps(w, x[u], acc[i][u]);
    }
  }
  for (int i = 0; i < NQ; ++i)
    for (int u = 0; u < NV; ++u) {
      float* oi = o + i * os + 16 * u;
      _mm512_storeu_ps(oi, _mm512_add_ps(_mm512_loadu_ps(oi), acc[i][u]));
    }
}

template <int NV>
void accum_queries(const float* p, int nq, int64_t ps, const float* v, int n, int hd, float* o, int64_t os, int d) {
  int i = 0;
  for (; i + 4 <= nq; i += 4) accum_tile<4, NV>(p + i * ps, ps, v + d, n, hd, o + i * os + d, os);
  for (; i < nq; ++i) accum_tile<1, NV>(p + i * ps, ps, v + d, n, hd, o + i * os + d, os);
}

void attn_accum_avx512(const float* p, int nq, int64_t ps, const float* v, int n, int hd, float* o, int64_t os) {
  if (n <= 0 || nq <= 0) return;
  if (hd % 16) return avx2::attn_accum(p, nq, ps, v, n, hd, o, os);
  int d = 0;
  for (; d + 64 <= hd; d += 64) accum_queries<4>(p, nq, ps, v, n, hd, o, os, d);
  if (hd - d == 48) accum_queries<3>(p, nq, ps, v, n, hd, o, os, d);
  if (hd - d == 32) accum_queries<2>(p, nq, ps, v, n, hd, o, os, d);
  if (hd - d == 16) accum_queries<1>(p, nq, ps, v, n, hd, o, os, d);
}

// ---- state-space layers ----

// exp(x) for every lane, as AVX2's exp256 (cpu/avx2/ops_avx2.cpp) computes
// it: x = n ln2 + r, exp(r) by its Taylor series to degree 7, times 2^n;
// below -87 gives 0, above 88 gives exp(88).
inline __m512 exp512(__m512 x) {
  const __m512 lo = _mm512_set1_ps(-87.0f), hi = _mm512_set1_ps(88.0f);
  const __mmask16 underflow = _mm512_cmp_ps_mask(x, lo, _CMP_LT_OQ);
  x = _mm512_min_ps(_mm512_max_ps(x, lo), hi);
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440054690583e-4f), r);
  __m512 p = _mm512_set1_ps(1.0f / 5040.0f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 720.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  const __m512i e = _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23);
  return _mm512_maskz_mul_ps(static_cast<__mmask16>(~underflow), p, _mm512_castsi512_ps(e));
}

// softplus(v) = v above 20, else max(v, 0) + log1p(exp(-|v|)), with
// log1p(u) = 2 atanh(u / (2 + u)) by its series (u <= 1: w <= 1/3, the
// terms to w^15, the rest under 2e-9 relative).
inline __m512 softplus512(__m512 v) {
  const __m512 a = _mm512_abs_ps(v);
  const __m512 u = exp512(_mm512_sub_ps(_mm512_setzero_ps(), a));
  const __m512 w = _mm512_div_ps(u, _mm512_add_ps(_mm512_set1_ps(2.0f), u));
  const __m512 w2 = _mm512_mul_ps(w, w);
  __m512 p = _mm512_set1_ps(1.0f / 15.0f);
  p = _mm512_fmadd_ps(p, w2, _mm512_set1_ps(1.0f / 13.0f));
  p = _mm512_fmadd_ps(p, w2, _mm512_set1_ps(1.0f / 11.0f));
  p = _mm512_fmadd_ps(p, w2, _mm512_set1_ps(1.0f / 9.0f));
  p = _mm512_fmadd_ps(p, w2, _mm512_set1_ps(1.0f / 7.0f));
  p = _mm512_fmadd_ps(p, w2, _mm512_set1_ps(1.0f / 5.0f));
  p = _mm512_fmadd_ps(p, w2, _mm512_set1_ps(1.0f / 3.0f));
  p = _mm512_fmadd_ps(p, w2, _mm512_set1_ps(1.0f));
  const __m512 res = _mm512_fmadd_ps(_mm512_add_ps(w, w), p, _mm512_max_ps(v, _mm512_setzero_ps()));
  return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(v, _mm512_set1_ps(20.0f), _CMP_GT_OQ), res, v);
}

inline float softplus1(float v) { return v > 20.0f ? v : std::log1p(std::exp(v)); }

// Mamba-1's shape (head_dim 1, A per state, d_state 16): 16 channels at a
// time, each channel's state one register kept across the tokens, dt of
// the 16 by one vector softplus, the 16 outputs of a token by one reduction
// tree (reduce16). A block of fewer than 16 channels runs the same code with
// the missing channels zero.
void scan_m1_d16(float* h, const SsmScanRun& r) {
  for (int64_t j = 0; j < r.n_head; j += 16) {
    const int nc = static_cast<int>(std::min<int64_t>(16, r.n_head - j));
    const __mmask16 m = static_cast<__mmask16>((1u << nc) - 1u);
    __m512 hv[16];
    for (int c = 0; c < 16; ++c) hv[c] = c < nc ? _mm512_loadu_ps(h + (j + c) * 16) : _mm512_setzero_ps();
    const __m512 bias = r.dt_bias ? _mm512_maskz_loadu_ps(m, r.dt_bias + j) : _mm512_setzero_ps();
    for (int64_t t = 0; t < r.T; ++t) {
      const __m512 dt = softplus512(_mm512_add_ps(_mm512_maskz_loadu_ps(m, r.dt + t * r.dt_stride + j), bias));
      const __m512 dtx = _mm512_mul_ps(dt, _mm512_maskz_loadu_ps(m, r.x + t * r.x_stride + j));
      alignas(64) float dts[16], dtxs[16];
      _mm512_store_ps(dts, dt);
      _mm512_store_ps(dtxs, dtx);
      const __m512 bv = _mm512_loadu_ps(r.B + t * r.b_stride);
      const __m512 cv = _mm512_loadu_ps(r.C + t * r.c_stride);
      __m512 prod[16];
      for (int c = 0; c < 16; ++c) {
        const __m512 a = c < nc ? _mm512_loadu_ps(r.A + (j + c) * 16) : _mm512_setzero_ps();
        const __m512 dA = exp512(_mm512_mul_ps(_mm512_set1_ps(dts[c]), a));
        hv[c] = _mm512_fmadd_ps(hv[c], dA, _mm512_mul_ps(_mm512_set1_ps(dtxs[c]), bv));
        prod[c] = _mm512_mul_ps(hv[c], cv);
      }
      _mm512_mask_storeu_ps(r.y + t * r.y_stride + j, m, reduce16(prod));
    }
    for (int c = 0; c < nc; ++c) _mm512_storeu_ps(h + (j + c) * 16, hv[c]);
  }
}

// A scalar decay per head and d_state = 16 NV (Mamba-2): a row's state in
// NV registers kept across the tokens of the call.
template <int NV>
void scan_scalar_a(float* h, const SsmScanRun& r, const float* dts, const float* decay, int64_t j, int64_t t0,
                   int64_t tn) {
  const int64_t P = r.head_dim, N = 16 * NV;
  for (int64_t p = 0; p < P; ++p) {
    float* hp = h + (j * P + p) * N;
    __m512 hv[NV];
    for (int v = 0; v < NV; ++v) hv[v] = _mm512_loadu_ps(hp + 16 * v);
    for (int64_t t = 0; t < tn; ++t) {
      const int64_t tt = t0 + t;
      const __m512 dA = _mm512_set1_ps(decay[t]);
      const __m512 dtx = _mm512_set1_ps(dts[t] * r.x[tt * r.x_stride + j * P + p]);
      const float* B = r.B + tt * r.b_stride;
      const float* C = r.C + tt * r.c_stride;
      __m512 acc = _mm512_setzero_ps();
      for (int v = 0; v < NV; ++v) {
        hv[v] = _mm512_fmadd_ps(hv[v], dA, _mm512_mul_ps(dtx, _mm512_loadu_ps(B + 16 * v)));
        acc = _mm512_fmadd_ps(hv[v], _mm512_loadu_ps(C + 16 * v), acc);
      }
      r.y[tt * r.y_stride + j * P + p] = _mm512_reduce_add_ps(acc);
    }
    for (int v = 0; v < NV; ++v) _mm512_storeu_ps(hp + 16 * v, hv[v]);
  }
}

// Any other shape: each row 16 values at a time, the tail masked, the state
// in memory.
void scan_rows(float* h, const SsmScanRun& r, const float* dts, const float* decay, int64_t j, int64_t t0,
               int64_t tn) {
  const int64_t P = r.head_dim, N = r.d_state;
  const float* A = r.A + j * N;
  for (int64_t p = 0; p < P; ++p) {
    float* hp = h + (j * P + p) * N;
    for (int64_t t = 0; t < tn; ++t) {
      const int64_t tt = t0 + t;
      const __m512 dt = _mm512_set1_ps(dts[t]);
      const __m512 dtx = _mm512_set1_ps(dts[t] * r.x[tt * r.x_stride + j * P + p]);
      const __m512 scalar_decay = _mm512_set1_ps(r.a_per_state ? 0.0f : decay[t]);
      const float* B = r.B + tt * r.b_stride;
      const float* C = r.C + tt * r.c_stride;
      __m512 acc = _mm512_setzero_ps();
      for (int64_t s = 0; s < N; s += 16) {
        const __mmask16 m =
            N - s >= 16 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << (N - s)) - 1u);
        __m512 hv = _mm512_maskz_loadu_ps(m, hp + s);
        const __m512 dA =
            r.a_per_state ? exp512(_mm512_mul_ps(dt, _mm512_maskz_loadu_ps(m, A + s))) : scalar_decay;
        hv = _mm512_fmadd_ps(hv, dA, _mm512_mul_ps(dtx, _mm512_maskz_loadu_ps(m, B + s)));
        acc = _mm512_fmadd_ps(hv, _mm512_maskz_loadu_ps(m, C + s), acc);
        _mm512_mask_storeu_ps(hp + s, m, hv);
      }
      r.y[tt * r.y_stride + j * P + p] = _mm512_reduce_add_ps(acc);
    }
  }
}

void ssm_scan_avx512(float* h, const SsmScanRun& r) {
  if (r.a_per_state && r.head_dim == 1 && r.d_state == 16) {
    scan_m1_d16(h, r);
    return;
  }
  constexpr int64_t kChunk = 64;
  alignas(64) float dts[kChunk], decay[kChunk];
  const int64_t N = r.d_state;
  for (int64_t j = 0; j < r.n_head; ++j) {
    const float bias = r.dt_bias ? r.dt_bias[j] : 0.0f;
    for (int64_t t0 = 0; t0 < r.T; t0 += kChunk) {
      const int64_t tn = std::min(kChunk, r.T - t0);
      for (int64_t t = 0; t < tn; ++t) {
        dts[t] = softplus1(r.dt[(t0 + t) * r.dt_stride + j] + bias);
        if (!r.a_per_state) decay[t] = std::exp(dts[t] * r.A[j]);
      }
      if (r.a_per_state) scan_rows(h, r, dts, decay, j, t0, tn);
      else if (N == 128) scan_scalar_a<8>(h, r, dts, decay, j, t0, tn);
      else if (N == 64) scan_scalar_a<4>(h, r, dts, decay, j, t0, tn);
      else if (N == 32) scan_scalar_a<2>(h, r, dts, decay, j, t0, tn);
      else if (N == 16) scan_scalar_a<1>(h, r, dts, decay, j, t0, tn);
      else scan_rows(h, r, dts, decay, j, t0, tn);
    }
  }
}

}  // namespace

// The entry points of cpu/isa_kernels.h.
namespace avx512 {

void ssm_scan(float* h, const SsmScanRun& r) { ssm_scan_avx512(h, r); }

void attn_scores(const float* q, int nq, int64_t qs, const float* k, int n, int hd, float scale, float* s,
                 int64_t ss) {
  attn_scores_avx512(q, nq, qs, k, n, hd, scale, s, ss);
}
void attn_accum(const float* p, int nq, int64_t ps, const float* v, int n, int hd, float* o, int64_t os) {
  attn_accum_avx512(p, nq, ps, v, n, hd, o, os);
}

}  // namespace avx512

}  // namespace infer::cpu
