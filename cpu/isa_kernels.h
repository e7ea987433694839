// The entry points each ISA folder exports, for the tables of cpu/kernels.cpp
// (contracts: the fields of IsaKernels, cpu/kernels.h). Internal to cpu/.
//
// cpu/scalar/ has every kernel; an ISA above it defines only what it does
// better and takes the rest from the ISA below (AVX-512: attention and the
// matmul panels; AMX: the tile matmuls).
#pragma once

#include <cstdint>

#include "core/dtype.h"
#include "cpu/kernels.h"
#include "cpu/qmatmul.h"

namespace infer::cpu {

#define INFER_CPU_VECTOR_KERNELS                                                                            \
  float dot_f32(const float* a, const float* b, int64_t n);                                                 \
  void axpy_f32(float s, const float* x, float* y, int64_t n);                                              \
  void f16_to_f32(const uint16_t* src, float* dst, int64_t n);                                              \
  void f32_to_f16(const float* src, uint16_t* dst, int64_t n);                                              \
  float exp_sum(float* x, int n, float* m);                                                                 \
  void i8_rows_to_f32(const int8_t* src, const float* scales, int rows, int hd, float* dst);                \
  void rms_norm(const float* x, const float* w, int64_t n, float eps, float* y);                            \
  void swiglu(const float* gate, const float* up, float* out, int64_t n);                                   \
  void add(float* x, const float* y, int64_t n);                                                            \
  void rope(float* v, const float* cs, int half, bool neox);                                                \
  void geglu(const float* gate, const float* up, float* out, int64_t n);                                    \
  void softcap(float* x, int64_t n, float cap);                                                             \
  void gelu_erf(float* x, int64_t n);                                                                       \
  void tanh_f32(float* x, int64_t n);                                                                       \
  void layer_norm(const float* x, const float* w, const float* b, int64_t n, float eps, float* y);          \
  void quantize_acts(const float* x, int64_t n, int64_t n_pad, int64_t block, int8_t* q, uint8_t* u, float* d, \
                     float* xs);

#define INFER_CPU_SSM_KERNELS                                                                               \
  void ssm_scan(float* h, const SsmScanRun& r);                                                             \
  void ssm_conv_row(const float* const* in, const float* wt, const float* bias, int64_t n, int d_conv, float* out); \
  void ssd_gemm(int64_t M, int64_t N, int64_t K, const float* a, int64_t lda, const float* b, int64_t ldb,   \
                float* c, int64_t ldc);

#define INFER_CPU_ATTENTION_KERNELS                                                                             \
  void attn_scores(const float* q, int nq, int64_t q_stride, const float* k, int n, int hd, float scale, float* s, \
                   int64_t s_stride);                                                                           \
  void attn_accum(const float* p, int nq, int64_t p_stride, const float* v, int n, int hd, float* o,            \
                  int64_t o_stride);

namespace scalar {  // cpu/scalar/kernels_scalar.cpp
INFER_CPU_VECTOR_KERNELS
INFER_CPU_ATTENTION_KERNELS
INFER_CPU_SSM_KERNELS
FormatKernel format_kernel(DType t, int64_t m);
}  // namespace scalar

namespace avx2 {  // cpu/avx2/: AVX2 + FMA + F16C
INFER_CPU_VECTOR_KERNELS
INFER_CPU_ATTENTION_KERNELS
INFER_CPU_SSM_KERNELS
FormatKernel format_kernel(DType t, int64_t m);
}  // namespace avx2

namespace avx512 {  // cpu/avx512/: AVX-512 F/BW/VL/DQ + VNNI
INFER_CPU_ATTENTION_KERNELS
void ssm_scan(float* h, const SsmScanRun& r);  // cpu/avx512/ssm_avx512.cpp
FormatKernel format_kernel(DType t, int64_t m);
}  // namespace avx512

namespace amx {  // cpu/amx/: AMX-TILE + AMX-INT8 (empty when the compiler has no AMX)
FormatKernel format_kernel(DType t, int64_t m);
}  // namespace amx

#undef INFER_CPU_VECTOR_KERNELS
#undef INFER_CPU_ATTENTION_KERNELS
#undef INFER_CPU_SSM_KERNELS

}  // namespace infer::cpu
