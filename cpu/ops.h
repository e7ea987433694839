// Kernels of the CPU backend's non-matmul ops (attention, norms, rope,
// activations), with runtime ISA dispatch like cpu/kernels.h. The scalar
// versions (cpu/ops.cpp) are the portable fallback and the reference; the
// AVX2 versions live in cpu/avx2/ops_avx2.cpp and are only handed out after
// the cpuid check of cpu/kernels.cpp.
//
// Determinism: every kernel computes each output with a fixed sequence of
// operations that depends only on that output's own inputs (never on how
// many rows or keys share a call, nor where in a call they sit), so a
// sequence gives bitwise the same results alone or batched.
#pragma once

#include <cstdint>

namespace infer::cpu {

struct OpKernels {
  const char* isa;

  // ---- attention ----
  // Scores of nq queries against n keys of hd values (key j at k + j*hd):
  // s[i*s_stride + j] = scale * (q[i*q_stride ..] · key j).
  void (*attn_scores)(const float* q, int nq, int64_t q_stride, const float* k, int n, int hd, float scale,
                      float* s, int64_t s_stride);
  // Weighted sums of n value rows for nq queries, accumulated in key order:
  // o[i*o_stride + d] += sum_j p[i*p_stride + j] * v[j*hd + d].
  void (*attn_accum)(const float* p, int nq, int64_t p_stride, const float* v, int n, int hd, float* o,
                     int64_t o_stride);
  // Softmax numerators of n > 0 scores: *m = max x[i], x[i] = exp(x[i] - *m)
  // (exp(-inf) = 0); returns the sum of the new x.
  float (*exp_sum)(float* x, int n, float* m);
  // int8 rows with one scale per row to f32: dst[r*hd + d] = scales[r] * src[r*hd + d].
  void (*i8_rows_to_f32)(const int8_t* src, const float* scales, int rows, int hd, float* dst);
  // f32 to IEEE half, round to nearest even.
  void (*f32_to_f16)(const float* src, uint16_t* dst, int64_t n);

  // ---- elementwise and row ops ----
  // y = x / sqrt(mean(x²) + eps) * w, one row of n values (y may be x).
  void (*rms_norm)(const float* x, const float* w, int64_t n, float eps, float* y);
  // out = silu(gate) * up = gate / (1 + exp(-gate)) * up (out may alias gate or up).
  void (*swiglu)(const float* gate, const float* up, float* out, int64_t n);
  // x += y
  void (*add)(float* x, const float* y, int64_t n);
  // Rotary embedding of one head: pair i is (2i, 2i+1), or (i, i+half) when
  // neox, rotated by the angle whose cosine and sine are cs[2i], cs[2i+1]:
  // (a, b) -> (a cos - b sin, a sin + b cos).
  void (*rope)(float* v, const float* cs, int half, bool neox);
};

// The best op kernels this CPU supports (decided once).
const OpKernels& op_kernels();
const OpKernels& scalar_op_kernels();
// nullptr when the binary or the CPU lacks AVX2+FMA+F16C.
const OpKernels* avx2_op_kernels();
// nullptr unless the binary has the AVX-512 kernels and the active ISA
// (cpu/isa.h, INFER_CPU_ISA) is AVX-512 or better. Attention only; the
// other ops are the AVX2 ones.
const OpKernels* avx512_op_kernels();

}  // namespace infer::cpu
