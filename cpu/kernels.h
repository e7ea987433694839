// CPU kernels with runtime ISA dispatch. Each ISA variant lives in its own
// translation unit compiled with that ISA's flags (cpu/avx2/...); the scalar
// versions are the portable fallback and the reference.
#pragma once

#include <cstdint>

namespace infer::cpu {

struct Kernels {
  const char* isa;
  // sum_i a[i] * b[i]
  float (*dot_f32)(const float* a, const float* b, int64_t n);
  // y[i] += s * x[i]
  void (*axpy_f32)(float s, const float* x, float* y, int64_t n);
  // IEEE half to f32
  void (*f16_to_f32)(const uint16_t* src, float* dst, int64_t n);
};

// The best kernels this CPU supports (decided once, from cpuid).
const Kernels& kernels();
const Kernels& scalar_kernels();
// nullptr when the binary or the CPU lacks AVX2+FMA+F16C.
const Kernels* avx2_kernels();

}  // namespace infer::cpu
