// What the AVX-512 (cpu/avx512/) and AMX (cpu/amx/) panel kernels share: the
// per-row scale map of a K4 block and the masked row store. Both kernels must
// scale their integer sums with the very same operations, so that results do
// not depend on which one ran (batch invariance). Included only by files
// compiled with the AVX-512 flags; an anonymous namespace, like
// cpu/gemm_driver.h, keeps each file's copy its own.
#pragma once

#include <immintrin.h>

#include <cstdint>

#include "cpu/qmatmul.h"

namespace infer::cpu {
namespace {

inline __m512 load_f16x16(const uint8_t* p) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}

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

// y[r][0..nc) = out[r][0..nc) for r < n (out: 16 floats per row), with
// masked stores (a memcpy of 64 bytes per row became `rep movsq`, whose
// start-up cost showed in profiles of the batched kernels).
inline void store_rows16(const float* out, int n, int nc, float* y, int64_t ldy) {
  const __mmask16 k = static_cast<__mmask16>((1u << nc) - 1);
  for (int r = 0; r < n; ++r) _mm512_mask_storeu_ps(y + r * ldy, k, _mm512_loadu_ps(out + 16 * r));
}

}  // namespace
}  // namespace infer::cpu
