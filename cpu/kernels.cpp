#include "cpu/kernels.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

#include "core/fp16.h"

namespace infer::cpu {

namespace {

float dot_scalar(const float* a, const float* b, int64_t n) {
  // Four partial sums: the same association order on every run.
  float s0 = 0, s1 = 0, s2 = 0, s3 = 0;
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) {
    s0 += a[i] * b[i];
    s1 += a[i + 1] * b[i + 1];
    s2 += a[i + 2] * b[i + 2];
    s3 += a[i + 3] * b[i + 3];
  }
  for (; i < n; ++i) s0 += a[i] * b[i];
  return (s0 + s1) + (s2 + s3);
}

void axpy_scalar(float s, const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += s * x[i];
}

void f16_to_f32_scalar(const uint16_t* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = fp16_to_f32(src[i]);
}

}  // namespace

const Kernels& scalar_kernels() {
  static const Kernels k{"scalar", dot_scalar, axpy_scalar, f16_to_f32_scalar};
  return k;
}

extern const Kernels kAvx2Kernels;  // cpu/avx2/kernels_avx2.cpp

const Kernels* avx2_kernels() {
#if defined(__x86_64__) || defined(__i386__)
  // F16C is CPUID.1:ECX bit 29 (not every compiler knows it by name).
  static const bool ok = [] {
    unsigned a = 0, b = 0, c = 0, d = 0;
    const bool f16c = __get_cpuid(1, &a, &b, &c, &d) && (c & (1u << 29)) != 0;
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && f16c;
  }();
  return ok ? &kAvx2Kernels : nullptr;
#else
  return nullptr;
#endif
}

const Kernels& kernels() {
  static const Kernels* best = [] {
    if (const Kernels* k = avx2_kernels()) return k;
    return &scalar_kernels();
  }();
  return *best;
}

}  // namespace infer::cpu
