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

}  // namespace

// The entry points of cpu/isa_kernels.h.
namespace avx512 {

void attn_scores(const float* q, int nq, int64_t qs, const float* k, int n, int hd, float scale, float* s,
                 int64_t ss) {
  attn_scores_avx512(q, nq, qs, k, n, hd, scale, s, ss);
}
void attn_accum(const float* p, int nq, int64_t ps, const float* v, int n, int hd, float* o, int64_t os) {
  attn_accum_avx512(p, nq, ps, v, n, hd, o, os);
}

}  // namespace avx512

}  // namespace infer::cpu
