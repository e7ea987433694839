// Scalar op kernels: the portable fallback and the reference the AVX2
// versions are tested against. Dispatch between them.
#include "cpu/ops.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/fp16.h"
#include "cpu/isa.h"
#include "cpu/kernels.h"

namespace infer::cpu {

namespace {

// Four partial sums, like dot_f32 (cpu/kernels.cpp).
float dot4(const float* a, const float* b, int n) {
  float s0 = 0, s1 = 0, s2 = 0, s3 = 0;
  int i = 0;
  for (; i + 4 <= n; i += 4) {
    s0 += a[i] * b[i];
    s1 += a[i + 1] * b[i + 1];
    s2 += a[i + 2] * b[i + 2];
    s3 += a[i + 3] * b[i + 3];
  }
  for (; i < n; ++i) s0 += a[i] * b[i];
  return (s0 + s1) + (s2 + s3);
}

void attn_scores_scalar(const float* q, int nq, int64_t q_stride, const float* k, int n, int hd, float scale, float* s,
                        int64_t s_stride) {
  for (int i = 0; i < nq; ++i)
    for (int j = 0; j < n; ++j) s[i * s_stride + j] = dot4(q + i * q_stride, k + static_cast<int64_t>(j) * hd, hd) * scale;
}

void attn_accum_scalar(const float* p, int nq, int64_t p_stride, const float* v, int n, int hd, float* o,
                       int64_t o_stride) {
  for (int i = 0; i < nq; ++i) {
    float* oi = o + i * o_stride;
    for (int j = 0; j < n; ++j) {
      const float w = p[i * p_stride + j];
      const float* vj = v + static_cast<int64_t>(j) * hd;
      for (int d = 0; d < hd; ++d) oi[d] += w * vj[d];
    }
  }
}

float exp_sum_scalar(float* x, int n, float* max) {
  float m = x[0];
  for (int i = 1; i < n; ++i) m = std::max(m, x[i]);
  *max = m;
  float s = 0;
  for (int i = 0; i < n; ++i) {
    x[i] = std::exp(x[i] - m);
    s += x[i];
  }
  return s;
}

void i8_rows_to_f32_scalar(const int8_t* src, const float* scales, int rows, int hd, float* dst) {
  for (int r = 0; r < rows; ++r)
    for (int d = 0; d < hd; ++d) dst[r * hd + d] = scales[r] * static_cast<float>(src[r * hd + d]);
}

void f32_to_f16_scalar(const float* src, uint16_t* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = f32_to_fp16(src[i]);
}

void rms_norm_scalar(const float* x, const float* w, int64_t n, float eps, float* y) {
  const float ss = scalar_kernels().dot_f32(x, x, n);
  const float scale = 1.0f / std::sqrt(ss / static_cast<float>(n) + eps);
  for (int64_t j = 0; j < n; ++j) y[j] = w[j] * (scale * x[j]);
}

void swiglu_scalar(const float* gate, const float* up, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float g = gate[i];
    out[i] = g / (1.0f + std::exp(-g)) * up[i];
  }
}

void add_scalar(float* x, const float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] += y[i];
}

void rope_scalar(float* v, const float* cs, int half, bool neox) {
  for (int i = 0; i < half; ++i) {
    const int ia = neox ? i : 2 * i;
    const int ib = neox ? i + half : 2 * i + 1;
    const float a = v[ia], b = v[ib], c = cs[2 * i], s = cs[2 * i + 1];
    v[ia] = a * c - b * s;
    v[ib] = a * s + b * c;
  }
}

}  // namespace

const OpKernels& scalar_op_kernels() {
  static const OpKernels k{"scalar",       attn_scores_scalar, attn_accum_scalar, exp_sum_scalar,
                           i8_rows_to_f32_scalar, f32_to_f16_scalar,  rms_norm_scalar,   swiglu_scalar,
                           add_scalar,     rope_scalar};
  return k;
}

extern const OpKernels kAvx2OpKernels;  // cpu/avx2/ops_avx2.cpp

const OpKernels* avx2_op_kernels() {
#if defined(__x86_64__) || defined(__i386__)
  // The same cpuid check as the matmul kernels (cpu/kernels.cpp).
  return avx2_kernels() ? &kAvx2OpKernels : nullptr;
#else
  return nullptr;
#endif
}

const OpKernels& avx512_op_table();  // cpu/avx512/ops_avx512.cpp

const OpKernels* avx512_op_kernels() {
#if defined(__x86_64__) || defined(__i386__)
  return avx2_op_kernels() && active_isa() >= Isa::Avx512 ? &avx512_op_table() : nullptr;
#else
  return nullptr;
#endif
}

const OpKernels& op_kernels() {
  static const OpKernels* best = [] {
    if (const OpKernels* k = avx512_op_kernels()) return k;
    if (const OpKernels* k = avx2_op_kernels()) return k;
    return &scalar_op_kernels();
  }();
  return *best;
}

}  // namespace infer::cpu
