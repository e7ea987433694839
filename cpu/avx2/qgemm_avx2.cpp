// AVX2 + FMA + F16C matmul micro-kernels for every weight format. Compiled
// with -mavx2 -mfma -mf16c; only called when cpuid says the CPU has them and
// the ISA cap allows AVX2 (cpu/kernels.cpp). The loops around them are the
// ISA-neutral drivers of cpu/gemm_driver.h.
//
// Three families:
//  - Panels (Q4_0, Q4_1, Q4_K, INT4_G*, Q8_0, W8A8; cpu/qmatmul.h): 8 weight
//    rows sit in the 8 dword lanes of a register, 4 consecutive values of
//    each, so one broadcast dword of int8 activations multiplies all 8 rows
//    at once (maddubs), and the per-block scale of the 8 rows is one vector.
//  - Panels with high bits (Q5_0, Q5_1, Q5_K, Q6_K): the K4 nibbles plus a
//    plane of 5th (6th) bits OR-ed in before the same maddubs products.
//  - Float formats (F32, F16, BF16): 32-row panels transposed at load
//    ([k][32], the file's element type); every m accumulates each output over
//    k in order (the whole panel for m <= 2, halves of 16 against up to 6
//    rows of x otherwise), so rows are batch invariant.
#include <immintrin.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <new>
#include <type_traits>
#include <utility>
#include <vector>

#include "core/fp16.h"
#include "core/tls.h"
#include "cpu/gemm_driver.h"
#include "cpu/isa_kernels.h"

namespace infer::cpu {

namespace {

inline float hsum(__m256 v) {
  __m128 lo = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  lo = _mm_add_ps(lo, _mm_movehl_ps(lo, lo));
  lo = _mm_add_ss(lo, _mm_movehdup_ps(lo));
  return _mm_cvtss_f32(lo);
}

inline int hsum_i32(__m256i v) {
  __m128i lo = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  lo = _mm_add_epi32(lo, _mm_shuffle_epi32(lo, 0x4e));
  lo = _mm_add_epi32(lo, _mm_shuffle_epi32(lo, 0xb1));
  return _mm_cvtsi128_si32(lo);
}

inline float f16(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return _cvtsh_ss(h);
}

inline __m256i bcast32(const void* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm256_set1_epi32(v);
}

// (A function, not a global: a global's initializer could run AVX2 code at start-up.)
inline __m256i ones16() { return _mm256_set1_epi16(1); }

// ---- activations: int8 per block -------------------------------------------------------

// Quantizes 32 floats with the multiplier id; returns the 32 int8 values and adds Σq to *sum.
inline __m256i quant32(const float* x, __m256 id, __m256i* sum) {
  const __m256i a = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x), id));
  const __m256i b = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + 8), id));
  const __m256i c = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + 16), id));
  const __m256i d = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + 24), id));
  *sum = _mm256_add_epi32(*sum, _mm256_add_epi32(_mm256_add_epi32(a, b), _mm256_add_epi32(c, d)));
  const __m256i ab = _mm256_packs_epi32(a, b), cd = _mm256_packs_epi32(c, d);
  const __m256i q = _mm256_packs_epi16(ab, cd);
  return _mm256_permutevar8x32_epi32(q, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}


void quantize_acts_avx2(const float* x, int64_t n, int64_t n_pad, int64_t block, int8_t* q, uint8_t* u, float* d,
                        float* xs) {
  // A type of this file's own: tls_object's instantiation for it is compiled
  // with this file's ISA flags and must not be shared with generic code.
  struct Padded {
    std::vector<float> v;
  };
  static thread_local Padded* padded_slot = nullptr;
  std::vector<float>& padded = tls_object(padded_slot).v;
  if (n != n_pad) {  // a row whose length is not a multiple of 32: work on a zero-padded copy
    padded.assign(static_cast<size_t>(n_pad), 0.0f);
    std::memcpy(padded.data(), x, sizeof(float) * n);
    x = padded.data();
  }
  const __m256 sign = _mm256_set1_ps(-0.0f);
  for (int64_t b0 = 0, bi = 0; b0 < n_pad; b0 += block, ++bi) {
    __m256 mx = _mm256_setzero_ps();
    for (int64_t k = b0; k < b0 + block; k += 8) mx = _mm256_max_ps(mx, _mm256_andnot_ps(sign, _mm256_loadu_ps(x + k)));
    __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(mx), _mm256_extractf128_ps(mx, 1));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
    const float amax = _mm_cvtss_f32(m4);
    const float scale = amax / 127.0f;
    const __m256 id = _mm256_set1_ps(amax > 0 ? 127.0f / amax : 0.0f);
    __m256i sum = _mm256_setzero_si256();
    for (int64_t k = b0; k < b0 + block; k += 32) {
      const __m256i v = quant32(x + k, id, &sum);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + k), v);
      if (u) _mm256_storeu_si256(reinterpret_cast<__m256i*>(u + k), _mm256_xor_si256(v, _mm256_set1_epi8(-128)));
    }
    d[bi] = scale;
    xs[bi] = scale * static_cast<float>(hsum_i32(sum));
  }
}


// ---- panels: Q4_0 and INT4 (K4) --------------------------------------------------------

// 8 f16 (8 u8) scales of a panel's scale area as floats.
inline __m256 f16x8(const uint8_t* p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }
inline __m256 u8x8(const uint8_t* p) {
  int64_t v;
  std::memcpy(&v, p, 8);
  return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_cvtsi64_si128(v)));
}

// A K4 panel's groups: bpg blocks of 256 nibble bytes, then the group's scales.
struct K4Groups {
  int bpg;
  size_t nib, group_bytes;
  int64_t n_groups;
  K4Groups(const Panels& P, Panels::Scales S)
      : bpg(P.group / 32),
        nib(static_cast<size_t>(bpg) * 256),
        group_bytes(nib + k4_scale_bytes(S, bpg)),
        n_groups(P.n_pad / P.group) {}
};

// A whole K4 panel (all 16 rows, both 32-byte halves of each 64-byte step in
// one loop) against NX <= 2 activation rows: decode's case. Each i16 lane of
// s16 sums at most 8 products of 15 * 127 twice: no saturation.
template <int NX, Panels::Scales S>
__attribute__((always_inline)) inline void k4_full(const Panels& P, const uint8_t* panel, const QActs& qa, int64_t i0, float* out /*[NX][16]*/) {
  using Sc = Panels::Scales;
  const K4Groups k(P, S);
  const int bpg = k.bpg;
  const size_t nib = k.nib, group_bytes = k.group_bytes;
  const int64_t n_groups = k.n_groups;
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  const int pf = prefetch_distance();
  __m256 acc[NX][2];
  for (int r = 0; r < NX; ++r) acc[r][0] = acc[r][1] = _mm256_setzero_ps();
  for (int64_t g = 0; g < n_groups; ++g) {
    const uint8_t* gd = panel + g * group_bytes;
    const uint8_t* sd = gd + nib;
    __m256 dv[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()}, mv[2] = {dv[0], dv[0]};
    __m256 dsup[2] = {dv[0], dv[0]}, msup[2] = {dv[0], dv[0]};
    for (int h = 0; h < 2; ++h) {
      if constexpr (S == Sc::Int4) {
        dv[h] = f16x8(sd + 16 * h);
        mv[h] = _mm256_mul_ps(u8x8(sd + 32 + 8 * h), _mm256_sub_ps(_mm256_setzero_ps(), dv[h]));
      } else if constexpr (S == Sc::Q4_K) {
        dsup[h] = f16x8(sd + 256 + 16 * h);
        msup[h] = _mm256_sub_ps(_mm256_setzero_ps(), f16x8(sd + 288 + 16 * h));
      }
    }
    for (int b = 0; b < bpg; ++b) {
      for (int h = 0; h < 2; ++h) {
        if constexpr (S == Sc::Q4_0) {
          dv[h] = f16x8(sd + 32 * b + 16 * h);
          mv[h] = _mm256_mul_ps(_mm256_set1_ps(-8.0f), dv[h]);
        } else if constexpr (S == Sc::Q4_1) {
          dv[h] = f16x8(sd + 64 * b + 16 * h);
          mv[h] = f16x8(sd + 64 * b + 32 + 16 * h);
        } else if constexpr (S == Sc::Q4_K) {
          dv[h] = _mm256_mul_ps(dsup[h], u8x8(sd + 16 * b + 8 * h));
          mv[h] = _mm256_mul_ps(msup[h], u8x8(sd + 128 + 16 * b + 8 * h));
        }
      }
      const int64_t blk = g * bpg + b;
      const uint8_t* wq = gd + b * 256;
      prefetch_span(b == 0 ? gd : wq, b == bpg - 1 ? gd + group_bytes : wq + 256, pf);
      __m256i s16[NX][2];
      for (int r = 0; r < NX; ++r) s16[r][0] = s16[r][1] = _mm256_setzero_si256();
      for (int s = 0; s < 4; ++s) {
        const __m256i v0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wq + 64 * s));
        const __m256i v1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wq + 64 * s + 32));
        const __m256i lo0 = _mm256_and_si256(v0, m4), hi0 = _mm256_and_si256(_mm256_srli_epi16(v0, 4), m4);
        const __m256i lo1 = _mm256_and_si256(v1, m4), hi1 = _mm256_and_si256(_mm256_srli_epi16(v1, 4), m4);
        for (int r = 0; r < NX; ++r) {
          const int8_t* xq = qa.row(i0 + r) + blk * 32 + 8 * s;
          const __m256i xa = bcast32(xq), xb = bcast32(xq + 4);
          s16[r][0] = _mm256_add_epi16(s16[r][0], _mm256_add_epi16(_mm256_maddubs_epi16(lo0, xa), _mm256_maddubs_epi16(hi0, xb)));
          s16[r][1] = _mm256_add_epi16(s16[r][1], _mm256_add_epi16(_mm256_maddubs_epi16(lo1, xa), _mm256_maddubs_epi16(hi1, xb)));
        }
      }
      for (int r = 0; r < NX; ++r) {
        const int64_t ai = (i0 + r) * qa.nb + blk;
        const __m256 xd = _mm256_set1_ps(qa.d[ai]), xs = _mm256_set1_ps(qa.xs[ai]);
        for (int h = 0; h < 2; ++h) {
          const __m256 f = _mm256_cvtepi32_ps(_mm256_madd_epi16(s16[r][h], ones16()));
          acc[r][h] = _mm256_fmadd_ps(f, _mm256_mul_ps(dv[h], xd), acc[r][h]);
          acc[r][h] = _mm256_fmadd_ps(mv[h], xs, acc[r][h]);
        }
      }
    }
  }
  for (int r = 0; r < NX; ++r) {
    _mm256_storeu_ps(out + 16 * r, acc[r][0]);
    _mm256_storeu_ps(out + 16 * r + 8, acc[r][1]);
  }
}

// A whole K4 panel against NX = 3 or 4 activation rows (a speculative
// verify step, a small batch, a tile of a prefill): one pass, like k4_full,
// so each broadcast of x serves both 8-row halves and memory streams without
// a second pass over the panel. The 16 registers hold the 8 int16 sums and
// the step's 4 weight vectors; the float sums live in `out` (updated once per
// block), and the scales are read after the block's products. Per row, the
// same operations in the same order as k4_full (int16 sums are exact; the
// float updates per block are identical): a row's result does not depend on
// the kernel (tests/test_batch_invariance.cpp). Against the
// earlier two half passes of up to 4 rows each (each broadcast serving 8
// weight rows, and memory idle through the second pass) this made a 3-row
// step 1.3x and a 4-row step 1.2-1.5x faster on a Zen 3 (AVX2) VM.
template <int NX, Panels::Scales S>
void k4_quad(const Panels& P, const uint8_t* panel, const QActs& qa, int64_t i0, float* out /*[NX][16]*/) {
  using Sc = Panels::Scales;
  const K4Groups k(P, S);
  const int pf = prefetch_distance();
  for (int i = 0; i < NX * 16; ++i) out[i] = 0.0f;
  const int8_t* xr[NX];
  for (int r = 0; r < NX; ++r) xr[r] = qa.row(i0 + r);
  for (int64_t g = 0; g < k.n_groups; ++g) {
    const uint8_t* gd = panel + g * k.group_bytes;
    const uint8_t* sd = gd + k.nib;
    for (int b = 0; b < k.bpg; ++b) {
      const int64_t blk = g * k.bpg + b;
      const uint8_t* wq = gd + b * 256;
      prefetch_span(b == 0 ? gd : wq, b == k.bpg - 1 ? gd + k.group_bytes : wq + 256, pf);
      __m256i s16[NX][2];
      for (int r = 0; r < NX; ++r) s16[r][0] = s16[r][1] = _mm256_setzero_si256();
      for (int s = 0; s < 4; ++s) {
        const __m256i m4 = _mm256_set1_epi8(0x0F);
        const __m256i v0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wq + 64 * s));
        const __m256i v1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wq + 64 * s + 32));
        const __m256i lo0 = _mm256_and_si256(v0, m4), hi0 = _mm256_and_si256(_mm256_srli_epi16(v0, 4), m4);
        const __m256i lo1 = _mm256_and_si256(v1, m4), hi1 = _mm256_and_si256(_mm256_srli_epi16(v1, 4), m4);
        for (int r = 0; r < NX; ++r) {
          const int8_t* xq = xr[r] + blk * 32 + 8 * s;
          const __m256i xa = bcast32(xq);
          s16[r][0] = _mm256_add_epi16(s16[r][0], _mm256_maddubs_epi16(lo0, xa));
          s16[r][1] = _mm256_add_epi16(s16[r][1], _mm256_maddubs_epi16(lo1, xa));
          const __m256i xb = bcast32(xq + 4);
          s16[r][0] = _mm256_add_epi16(s16[r][0], _mm256_maddubs_epi16(hi0, xb));
          s16[r][1] = _mm256_add_epi16(s16[r][1], _mm256_maddubs_epi16(hi1, xb));
          // One sum at a time: left free, GCC reassociates the adds into all
          // products first, which spills them to the stack.
          asm("" : "+x"(s16[r][0]), "+x"(s16[r][1]));
        }
      }
      for (int h = 0; h < 2; ++h) {
        __m256 dv, mv;  // per row: w = dv * q + mv
        if constexpr (S == Sc::Q4_0) {
          dv = f16x8(sd + 32 * b + 16 * h);
          mv = _mm256_mul_ps(_mm256_set1_ps(-8.0f), dv);
        } else if constexpr (S == Sc::Q4_1) {
          dv = f16x8(sd + 64 * b + 16 * h);
          mv = f16x8(sd + 64 * b + 32 + 16 * h);
        } else if constexpr (S == Sc::Int4) {
          dv = f16x8(sd + 16 * h);
          mv = _mm256_mul_ps(u8x8(sd + 32 + 8 * h), _mm256_sub_ps(_mm256_setzero_ps(), dv));
        } else {  // Q4_K
          dv = _mm256_mul_ps(f16x8(sd + 256 + 16 * h), u8x8(sd + 16 * b + 8 * h));
          mv = _mm256_mul_ps(_mm256_sub_ps(_mm256_setzero_ps(), f16x8(sd + 288 + 16 * h)), u8x8(sd + 128 + 16 * b + 8 * h));
        }
        for (int r = 0; r < NX; ++r) {
          const int64_t ai = (i0 + r) * qa.nb + blk;
          const __m256 f = _mm256_cvtepi32_ps(_mm256_madd_epi16(s16[r][h], ones16()));
          __m256 acc = _mm256_loadu_ps(out + 16 * r + 8 * h);
          acc = _mm256_fmadd_ps(f, _mm256_mul_ps(dv, _mm256_set1_ps(qa.d[ai])), acc);
          acc = _mm256_fmadd_ps(mv, _mm256_set1_ps(qa.xs[ai]), acc);
          _mm256_storeu_ps(out + 16 * r + 8 * h, acc);
        }
      }
    }
  }
}

// ---- panels: Q8_0 and W8A8 (K8) --------------------------------------------------------

// One 32-value block of a K8 panel (both halves, 8 steps of 64 bytes) into
// the int32 sums of NX rows of x. OneAtATime: an asm barrier per row keeps
// GCC from reassociating the adds into all products first (spilled; NX > 2).
template <int NX, bool OneAtATime>
__attribute__((always_inline)) inline void k8_block(const uint8_t* bd, const int8_t* const* xr, int64_t b,
                                                     __m256i (*s32)[2]) {
  for (int s = 0; s < 8; ++s) {
    const __m256i v0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(bd + 64 * s));
    const __m256i v1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(bd + 64 * s + 32));
    const __m256i a0 = _mm256_sign_epi8(v0, v0), a1 = _mm256_sign_epi8(v1, v1);  // |w|
    for (int r = 0; r < NX; ++r) {
      const __m256i x = bcast32(xr[r] + 32 * b + 4 * s);
      s32[r][0] = _mm256_add_epi32(s32[r][0], _mm256_madd_epi16(_mm256_maddubs_epi16(a0, _mm256_sign_epi8(x, v0)), ones16()));
      s32[r][1] = _mm256_add_epi32(s32[r][1], _mm256_madd_epi16(_mm256_maddubs_epi16(a1, _mm256_sign_epi8(x, v1)), ones16()));
      if constexpr (OneAtATime) asm("" : "+x"(s32[r][0]), "+x"(s32[r][1]));
    }
  }
}

// A whole K8 panel (both halves of every step in one loop) against NX <= 2
// rows of x: decode's case (see k4_full).
template <int NX, bool PerRow>
__attribute__((always_inline)) inline void k8_full(const Panels& P, const uint8_t* panel, const QActs& qa, int64_t i0, float* out /*[NX][16]*/) {
  const int64_t nb = P.n_pad / 32;
  const size_t head = PerRow ? 128 : 0;
  const size_t block_bytes = PerRow ? 512 : 544;
  const int pf = prefetch_distance();
  __m256 acc[NX][2];
  __m256i s32[NX][2];
  for (int r = 0; r < NX; ++r)
    for (int h = 0; h < 2; ++h) {
      acc[r][h] = _mm256_setzero_ps();
      s32[r][h] = _mm256_setzero_si256();
    }
  const int8_t* xr[NX];
  for (int r = 0; r < NX; ++r) xr[r] = qa.row(i0 + r);
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* bd = panel + head + b * block_bytes;
    prefetch_span(b == 0 ? panel : bd, bd + block_bytes, pf);
    k8_block<NX, false>(bd, xr, b, s32);
    if constexpr (!PerRow) {
      for (int h = 0; h < 2; ++h) {
        const __m256 dv = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(bd + 512 + 16 * h)));
        for (int r = 0; r < NX; ++r) {
          const __m256 sc = _mm256_mul_ps(dv, _mm256_set1_ps(qa.d[(i0 + r) * qa.nb + b]));
          acc[r][h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s32[r][h]), sc, acc[r][h]);
          s32[r][h] = _mm256_setzero_si256();
        }
      }
    }
  }
  if constexpr (PerRow) {
    for (int h = 0; h < 2; ++h) {
      const __m256 sv = _mm256_loadu_ps(reinterpret_cast<const float*>(panel) + 8 * h);
      for (int r = 0; r < NX; ++r)
        acc[r][h] = _mm256_mul_ps(_mm256_cvtepi32_ps(s32[r][h]), _mm256_mul_ps(sv, _mm256_set1_ps(qa.d[(i0 + r) * qa.nb])));
    }
  }
  for (int r = 0; r < NX; ++r) {
    _mm256_storeu_ps(out + 16 * r, acc[r][0]);
    _mm256_storeu_ps(out + 16 * r + 8, acc[r][1]);
  }
}

// A whole K8 panel against NX = 3 or 4 rows of x in one pass (see k4_quad):
// the 8 int32 sums stay in registers, the float sums (Q8_0: one update per
// block) live in `out`. Per row, k8_full's operations in k8_full's order.
template <int NX, bool PerRow>
void k8_quad(const Panels& P, const uint8_t* panel, const QActs& qa, int64_t i0, float* out /*[NX][16]*/) {
  const int64_t nb = P.n_pad / 32;
  const size_t head = PerRow ? 128 : 0;
  const size_t block_bytes = PerRow ? 512 : 544;
  const int pf = prefetch_distance();
  for (int i = 0; i < NX * 16; ++i) out[i] = 0.0f;
  const int8_t* xr[NX];
  for (int r = 0; r < NX; ++r) xr[r] = qa.row(i0 + r);
  __m256i s32[NX][2];
  for (int r = 0; r < NX; ++r) s32[r][0] = s32[r][1] = _mm256_setzero_si256();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* bd = panel + head + b * block_bytes;
    prefetch_span(b == 0 ? panel : bd, bd + block_bytes, pf);
    k8_block<NX, true>(bd, xr, b, s32);
    if constexpr (!PerRow) {
      for (int h = 0; h < 2; ++h) {
        const __m256 dv = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(bd + 512 + 16 * h)));
        for (int r = 0; r < NX; ++r) {
          const __m256 sc = _mm256_mul_ps(dv, _mm256_set1_ps(qa.d[(i0 + r) * qa.nb + b]));
          const __m256 acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s32[r][h]), sc, _mm256_loadu_ps(out + 16 * r + 8 * h));
          _mm256_storeu_ps(out + 16 * r + 8 * h, acc);
          s32[r][h] = _mm256_setzero_si256();
        }
      }
    }
  }
  if constexpr (PerRow) {
    for (int h = 0; h < 2; ++h) {
      const __m256 sv = _mm256_loadu_ps(reinterpret_cast<const float*>(panel) + 8 * h);
      for (int r = 0; r < NX; ++r)
        _mm256_storeu_ps(out + 16 * r + 8 * h,
                         _mm256_mul_ps(_mm256_cvtepi32_ps(s32[r][h]), _mm256_mul_ps(sv, _mm256_set1_ps(qa.d[(i0 + r) * qa.nb]))));
    }
  }
}

// The panel micro-kernels as cpu/gemm_driver.h's drivers take them: a whole
// panel against up to 2 rows of x (decode) or up to 4 (verify steps, batches,
// prefill tiles).
// Whole-panel kernels of a family: F::full<NX> for 1-2 rows, F::quad<NX> for 3-4.
template <Panels::Scales S>
struct K4Fns {
  template <int NX>
  static void full(const Panels& P, const uint8_t* p, const QActs& q, int64_t i, float* o) { k4_full<NX, S>(P, p, q, i, o); }
  template <int NX>
  static void quad(const Panels& P, const uint8_t* p, const QActs& q, int64_t i, float* o) { k4_quad<NX, S>(P, p, q, i, o); }
};
template <bool PerRow>
struct K8Fns {
  template <int NX>
  static void full(const Panels& P, const uint8_t* p, const QActs& q, int64_t i, float* o) { k8_full<NX, PerRow>(P, p, q, i, o); }
  template <int NX>
  static void quad(const Panels& P, const uint8_t* p, const QActs& q, int64_t i, float* o) { k8_quad<NX, PerRow>(P, p, q, i, o); }
};
template <class F, int Rows>
struct WholePanel {
  static constexpr int kCols = 16, kRows = Rows;
  template <int NX>
  static void run(const Panels& P, const uint8_t* p, int, const QActs& q, int64_t i, float* o) {
    if constexpr (NX <= 2)
      F::template full<NX>(P, p, q, i, o);
    else
      F::template quad<NX>(P, p, q, i, o);
  }
  static void store(const float* o, int nx, int nc, float* y, int64_t ldy) { copy_rows(o, kCols, nx, nc, y, ldy); }
};

// The panel kernel of a format for m rows of x.
template <class Half, class Full>
TileFn panels_for(int64_t m) {
  static_assert(Full::kRows == 2);
  return m <= 2 ? panel_one_tile<Full> : panel_tiles<Half>;
}

// The K4 and K8 formats: whole panels in one pass against up to 4 rows of x
// (m <= 2 as decode's k4_full / k8_full; 3-4 rows, and tiles of 4 beyond, as
// k4_quad / k8_quad).
template <class F>
TileFn whole_panels_for(int64_t m) {
  if (m <= 2) return panel_one_tile<WholePanel<F, 2>>;
  return m <= 4 ? panel_one_tile<WholePanel<F, 4>> : panel_tiles<WholePanel<F, 4>>;
}

// ---- panels: K4 with high bits (Q5_0, Q5_1, Q5_K, Q6_K) ---------------------------------

// Bits [Bit, Bit + W) of every byte of h moved to bits [4, 4 + W), the rest
// cleared. 16-bit shifts: for these counts (Bit <= 7 for W = 1, Bit <= 6 for
// W = 2) no bit of the other byte lands in the kept bits.
template <int Bit, int W>
inline __m256i high_at4(__m256i h) {
  const __m256i keep = _mm256_set1_epi8(W == 1 ? 0x10 : 0x30);
  if constexpr (Bit < 4) {
    return _mm256_and_si256(_mm256_slli_epi16(h, 4 - Bit), keep);
  } else if constexpr (Bit > 4) {
    return _mm256_and_si256(_mm256_srli_epi16(h, Bit - 4), keep);
  } else {
    return _mm256_and_si256(h, keep);
  }
}

// f(std::integral_constant<int, i>{}) for i = 0 .. N-1 (loop indices that are shift counts).
template <class F, int... I>
inline void unroll_seq(F&& f, std::integer_sequence<int, I...>) {
  (f(std::integral_constant<int, I>{}), ...);
}
template <int N, class F>
inline void unroll(F&& f) {
  unroll_seq(f, std::make_integer_sequence<int, N>{});
}

// NH halves (8 rows of W each) of a K4 panel with high bits against NX rows
// of x starting at i0: NH = 2, the whole panel in one pass (decode, m <= 2;
// see k4_full), or NH = 1, half `half0` (larger m, more rows of x per pass).
// Both compute each output with the very same operations, so a row's result
// does not depend on m (batch invariance).
//  - Q5_0, Q5_1, Q5_K: unsigned 5-bit q times int8 x (maddubs); i16 lanes
//    hold at most 8 products of 31 * 127 (two steps) before madd widens
//    them; then w = a q + b per block as K4 (b * Σx from QActs::xs).
//  - Q6_K: unsigned 6-bit q; a step's i16 lanes (4 products of 63 * 127)
//    are widened by madd with the row's 16-value scale sc, and the -32
//    offset is the integer 32 (sc_a S_a + sc_b S_b) of the block's two
//    16-value activation sums (QActs::hsum): Σ sc (q - 32) x exactly in
//    int32, times d and the activation scale.
template <int NX, Panels::Scales S, int NH>
void kq_panel(const Panels& P, const uint8_t* panel, int half0, const QActs& qa, int64_t i0, float* out /*[NX][8*NH]*/) {
  using Sc = Panels::Scales;
  constexpr bool kQ6 = S == Sc::Q6_K;
  constexpr size_t kBlock = k4_block_bytes(S);
  const int G = P.group;
  const int bpg = G / 32;
  const size_t nib = static_cast<size_t>(bpg) * kBlock, group_bytes = nib + k4_scale_bytes(S, bpg);
  const int64_t n_groups = P.n_pad / G;
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  const int pf = (NH == 2 || half0 == 0) ? prefetch_distance() : 0;
  int hh[NH];  // the halves this call computes
  for (int h = 0; h < NH; ++h) hh[h] = NH == 2 ? h : half0;
  __m256 acc[NX][NH];
  for (int r = 0; r < NX; ++r)
    for (int h = 0; h < NH; ++h) acc[r][h] = _mm256_setzero_ps();
  for (int64_t g = 0; g < n_groups; ++g) {
    const uint8_t* gd = panel + g * group_bytes;
    const uint8_t* sd = gd + nib;
    __m256 dsup[NH], msup[NH];
    for (int h = 0; h < NH; ++h) {
      dsup[h] = msup[h] = _mm256_setzero_ps();
      if constexpr (S == Sc::Q5_K) {
        dsup[h] = f16x8(sd + 256 + 16 * hh[h]);
        msup[h] = _mm256_sub_ps(_mm256_setzero_ps(), f16x8(sd + 288 + 16 * hh[h]));
      } else if constexpr (kQ6) {
        dsup[h] = f16x8(sd + 256 + 16 * hh[h]);
      }
    }
    for (int b = 0; b < bpg; ++b) {
      const uint8_t* bd = gd + b * kBlock;
      prefetch_span(b == 0 ? gd : bd, b == bpg - 1 ? gd + group_bytes : bd + kBlock, pf);
      const int64_t blk = g * bpg + b;
      // Per row of W: w = dv q + mv (Q5); the scale pairs (Q6).
      __m256 dv[NH], mv[NH];
      __m256i scp[NH], sca[NH], scb[NH];
      for (int h = 0; h < NH; ++h) {
        dv[h] = mv[h] = _mm256_setzero_ps();
        scp[h] = sca[h] = scb[h] = _mm256_setzero_si256();
        if constexpr (S == Sc::Q5_0) {
          dv[h] = f16x8(sd + 32 * b + 16 * hh[h]);
          mv[h] = _mm256_mul_ps(_mm256_set1_ps(-16.0f), dv[h]);
        } else if constexpr (S == Sc::Q5_1) {
          dv[h] = f16x8(sd + 64 * b + 16 * hh[h]);
          mv[h] = f16x8(sd + 64 * b + 32 + 16 * hh[h]);
        } else if constexpr (S == Sc::Q5_K) {
          dv[h] = _mm256_mul_ps(dsup[h], u8x8(sd + 16 * b + 8 * hh[h]));
          mv[h] = _mm256_mul_ps(msup[h], u8x8(sd + 128 + 16 * b + 8 * hh[h]));
        } else {
          scp[h] = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(sd + 32 * b + 16 * hh[h])));
          sca[h] = _mm256_shuffle_epi8(scp[h], _mm256_setr_epi8(0, 1, 0, 1, 4, 5, 4, 5, 8, 9, 8, 9, 12, 13, 12, 13, 0, 1, 0,
                                                                1, 4, 5, 4, 5, 8, 9, 8, 9, 12, 13, 12, 13));
          scb[h] = _mm256_shuffle_epi8(scp[h], _mm256_setr_epi8(2, 3, 2, 3, 6, 7, 6, 7, 10, 11, 10, 11, 14, 15, 14, 15, 2,
                                                                3, 2, 3, 6, 7, 6, 7, 10, 11, 10, 11, 14, 15, 14, 15));
        }
      }
      __m256i s32[NX][NH], s16[NX][NH];
      for (int r = 0; r < NX; ++r)
        for (int h = 0; h < NH; ++h) s32[r][h] = s16[r][h] = _mm256_setzero_si256();
      unroll<4>([&](auto step) {
        constexpr int s = decltype(step)::value;
        for (int h = 0; h < NH; ++h) {
          const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(bd + 64 * s + 32 * hh[h]));
          __m256i lo = _mm256_and_si256(v, m4), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
          if constexpr (kQ6) {
            const __m256i H = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(bd + 256 + 64 * (s / 2) + 32 * hh[h]));
            lo = _mm256_or_si256(lo, high_at4<4 * (s % 2), 2>(H));
            hi = _mm256_or_si256(hi, high_at4<4 * (s % 2) + 2, 2>(H));
          } else {
            const __m256i H = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(bd + 256 + 32 * hh[h]));
            lo = _mm256_or_si256(lo, high_at4<2 * s, 1>(H));
            hi = _mm256_or_si256(hi, high_at4<2 * s + 1, 1>(H));
          }
          for (int r = 0; r < NX; ++r) {
            const int8_t* xq = qa.row(i0 + r) + blk * 32 + 8 * s;
            const __m256i t = _mm256_add_epi16(_mm256_maddubs_epi16(lo, bcast32(xq)), _mm256_maddubs_epi16(hi, bcast32(xq + 4)));
            if constexpr (kQ6) {
              s32[r][h] = _mm256_add_epi32(s32[r][h], _mm256_madd_epi16(t, s < 2 ? sca[h] : scb[h]));
            } else if constexpr (s % 2 == 0) {
              s16[r][h] = t;
            } else {
              s32[r][h] = _mm256_add_epi32(s32[r][h], _mm256_madd_epi16(_mm256_add_epi16(s16[r][h], t), ones16()));
            }
          }
        }
      });
      for (int r = 0; r < NX; ++r) {
        const int64_t ai = (i0 + r) * qa.nb + blk;
        const __m256 xd = _mm256_set1_ps(qa.d[ai]);
        if constexpr (kQ6) {
          const __m256i hs = _mm256_set1_epi32(qa.hsum[ai]);  // (S_a, S_b) in every dword
          for (int h = 0; h < NH; ++h) {
            const __m256i off = _mm256_slli_epi32(_mm256_madd_epi16(scp[h], hs), 5);
            acc[r][h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(s32[r][h], off)), _mm256_mul_ps(dsup[h], xd), acc[r][h]);
          }
        } else {
          const __m256 xs = _mm256_set1_ps(qa.xs[ai]);
          for (int h = 0; h < NH; ++h) {
            acc[r][h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s32[r][h]), _mm256_mul_ps(dv[h], xd), acc[r][h]);
            acc[r][h] = _mm256_fmadd_ps(mv[h], xs, acc[r][h]);
          }
        }
      }
    }
  }
  for (int r = 0; r < NX; ++r)
    for (int h = 0; h < NH; ++h) _mm256_storeu_ps(out + 8 * NH * r + 8 * h, acc[r][h]);
}

// kq_panel as cpu/gemm_driver.h's panel drivers take it: half a panel (8 rows of W)
// against up to 4 rows of x, or the whole panel against up to 2.
template <Panels::Scales S>
struct KqHalf {
  static constexpr int kCols = 8, kRows = 4;
  template <int NX>
  static void run(const Panels& P, const uint8_t* p, int part, const QActs& q, int64_t i, float* o) {
    kq_panel<NX, S, 1>(P, p, part, q, i, o);
  }
  static void store(const float* o, int nx, int nc, float* y, int64_t ldy) { copy_rows(o, kCols, nx, nc, y, ldy); }
};
template <Panels::Scales S>
struct KqFull {
  static constexpr int kCols = 16, kRows = 2;
  template <int NX>
  static void run(const Panels& P, const uint8_t* p, int, const QActs& q, int64_t i, float* o) {
    kq_panel<NX, S, 2>(P, p, 0, q, i, o);
  }
  static void store(const float* o, int nx, int nc, float* y, int64_t ldy) { copy_rows(o, kCols, nx, nc, y, ldy); }
};

// ---- FP panels (F16, BF16): 32 rows of W transposed; AVX2 works on halves of 16 ----------

struct PanelF16 {
  static constexpr int kBytes = 2;
  static __m256 load8(const uint8_t* p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }
};
struct PanelBF16 {
  static constexpr int kBytes = 2;
  static __m256 load8(const uint8_t* p) {
    const __m256i v = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
  }
};
struct PanelF32 {
  static constexpr int kBytes = 4;
  static __m256 load8(const uint8_t* p) { return _mm256_loadu_ps(reinterpret_cast<const float*>(p)); }
};

// out[r][0..16) = x[r] · (rows 16h .. 16h+16 of the panel), r < NX.
template <int NX, class L>
void fp_kernel(const uint8_t* panel, int half, int64_t K, const float* x, int64_t ldx, float* out, int pf) {
  __m256 acc[NX][2];
  for (int r = 0; r < NX; ++r) acc[r][0] = acc[r][1] = _mm256_setzero_ps();
  constexpr int kRow = kFpPanelRows * L::kBytes;
  const uint8_t* base = panel + 16 * half * L::kBytes;
  for (int64_t k = 0; k < K; ++k) {
    const uint8_t* pk = base + k * kRow;
    if (pf) _mm_prefetch(reinterpret_cast<const char*>(pk) + pf, _MM_HINT_T0);
    const __m256 b0 = L::load8(pk), b1 = L::load8(pk + 8 * L::kBytes);
    for (int r = 0; r < NX; ++r) {
      const __m256 xv = _mm256_broadcast_ss(x + r * ldx + k);
      acc[r][0] = _mm256_fmadd_ps(xv, b0, acc[r][0]);
      acc[r][1] = _mm256_fmadd_ps(xv, b1, acc[r][1]);
    }
  }
  for (int r = 0; r < NX; ++r) {
    _mm256_storeu_ps(out + 16 * r, acc[r][0]);
    _mm256_storeu_ps(out + 16 * r + 8, acc[r][1]);
  }
}

// out[r][0..32) = x[r] · (all 32 rows of the panel), r < NX <= 2: decode's
// case, one pass over the panel (see k4_full).
template <int NX, class L>
void fp_full(const uint8_t* panel, int64_t K, const float* x, int64_t ldx, float* out, int pf) {
  __m256 acc[NX][4];
  for (int r = 0; r < NX; ++r)
    for (int j = 0; j < 4; ++j) acc[r][j] = _mm256_setzero_ps();
  constexpr int kRow = kFpPanelRows * L::kBytes;
  for (int64_t k = 0; k < K; ++k) {
    const uint8_t* pk = panel + k * kRow;
    if (pf) prefetch_span(pk, pk + kRow, pf);
    __m256 w[4];
    for (int j = 0; j < 4; ++j) w[j] = L::load8(pk + 8 * j * L::kBytes);
    for (int r = 0; r < NX; ++r) {
      const __m256 xv = _mm256_broadcast_ss(x + r * ldx + k);
      for (int j = 0; j < 4; ++j) acc[r][j] = _mm256_fmadd_ps(xv, w[j], acc[r][j]);
    }
  }
  for (int r = 0; r < NX; ++r)
    for (int j = 0; j < 4; ++j) _mm256_storeu_ps(out + 32 * r + 8 * j, acc[r][j]);
}

// The FP micro-kernels for cpu/gemm_driver.h's tile_fp: halves of 16
// columns against up to 6 rows of x, or the whole panel in one pass for
// m <= 2 (see k4_full).
struct Fp {
  using F32 = PanelF32;
  static constexpr bool kDecode = true;
  template <class L>
  static void widen(const uint8_t* panel, int64_t count, float* dst) {
    for (int64_t e = 0; e < count; e += 8) _mm256_store_ps(dst + e, L::load8(panel + e * L::kBytes));
  }
  template <class L>
  struct Tiles {
    static constexpr int kCols = 16, kRows = 6;
    template <int NX>
    static void run(const uint8_t* panel, int part, int64_t K, const float* x, int64_t ldx, float* out, int pf) {
      fp_kernel<NX, L>(panel, part, K, x, ldx, out, pf);
    }
  };
  template <class L>
  struct Decode {
    static constexpr int kCols = 32, kRows = 2;
    template <int NX>
    static void run(const uint8_t* panel, int, int64_t K, const float* x, int64_t ldx, float* out, int pf) {
      fp_full<NX, L>(panel, K, x, ldx, out, pf);
    }
  };
};

}  // namespace

// ---- the entry points of cpu/isa_kernels.h -----------------------------------------------

namespace avx2 {

void quantize_acts(const float* x, int64_t n, int64_t n_pad, int64_t block, int8_t* q, uint8_t* u, float* d,
                   float* xs) {
  quantize_acts_avx2(x, n, n_pad, block, q, u, d, xs);
}

FormatKernel format_kernel(DType t, int64_t m) {
  using Sc = Panels::Scales;
  FormatKernel k;
  switch (t) {
    // m <= 2 (decode): whole panels in one pass; larger m: half panels, more rows of x per pass.
    case DType::Q4_0: k.tile = whole_panels_for<K4Fns<Sc::Q4_0>>(m); k.act_block = 32; k.panels = true; break;
    case DType::INT4_G32: case DType::INT4_G64: case DType::INT4_G128:
      k.tile = whole_panels_for<K4Fns<Sc::Int4>>(m); k.act_block = 32; k.panels = true; break;
    case DType::Q8_0: k.tile = whole_panels_for<K8Fns<false>>(m); k.act_block = 32; k.panels = true; break;
    case DType::W8A8: k.tile = whole_panels_for<K8Fns<true>>(m); k.act_block = -1; k.panels = true; break;
    case DType::Q4_1: k.tile = whole_panels_for<K4Fns<Sc::Q4_1>>(m); k.act_block = 32; k.panels = true; break;
    case DType::Q5_0: k.tile = panels_for<KqHalf<Sc::Q5_0>, KqFull<Sc::Q5_0>>(m); k.act_block = 32; k.panels = true; break;
    case DType::Q5_1: k.tile = panels_for<KqHalf<Sc::Q5_1>, KqFull<Sc::Q5_1>>(m); k.act_block = 32; k.panels = true; break;
    case DType::Q4_K: k.tile = whole_panels_for<K4Fns<Sc::Q4_K>>(m); k.act_block = 32; k.panels = true; break;
    case DType::Q5_K: k.tile = panels_for<KqHalf<Sc::Q5_K>, KqFull<Sc::Q5_K>>(m); k.act_block = 32; k.panels = true; break;
    case DType::Q6_K:
      k.tile = panels_for<KqHalf<Sc::Q6_K>, KqFull<Sc::Q6_K>>(m); k.act_block = 32; k.act_hsums = true; k.panels = true; break;
    // F32 as F16/BF16: every m through the same panels, so each output sums
    // over k in one order whatever the batch (bitwise batch invariance).
    case DType::F32: k.tile = tile_fp<Fp, PanelF32>; k.panels = true; k.panel_rows = kFpPanelRows; break;
    case DType::F16: k.tile = tile_fp<Fp, PanelF16>; k.panels = true; k.panel_rows = kFpPanelRows; break;
    case DType::BF16: k.tile = tile_fp<Fp, PanelBF16>; k.panels = true; k.panel_rows = kFpPanelRows; break;
    default: break;
  }
  return k;
}

}  // namespace avx2

}  // namespace infer::cpu
