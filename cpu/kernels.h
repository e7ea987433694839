// The CPU backend's kernels, one table per instruction set (cpu/isa.h).
//
// Every kernel the backend runs is reached through an IsaKernels table: the
// vector primitives, the op kernels (attention, norms, rope, activations),
// the activation quantizer and the matmul micro-kernel lookup. kernels()
// returns the table of the active ISA, looked up on every call, so
// INFER_CPU_ISA and set_isa_cap() hold for every kernel, everywhere.
//
// Each ISA's kernels live in its own folder and translation unit, compiled
// with that ISA's flags (cpu/scalar/, cpu/avx2/, cpu/avx512/, cpu/amx/; their
// entry points are declared in cpu/isa_kernels.h); the tables are assembled
// in cpu/kernels.cpp, compiled for the baseline ISA, from function addresses
// only (constant-initialized: nothing of an ISA runs before the cpuid check).
// A table an ISA leaves partly empty is filled from the ISA below it (AVX-512
// keeps AVX2's norms, rope and activations; AMX has only matmul kernels); the
// scalar kernels are the portable fallback and the reference every other is
// tested against.
//
// Determinism: every op kernel computes each output with a fixed sequence of
// operations that depends only on that output's own inputs (never on how
// many rows or keys share a call, nor where in a call they sit), so a
// sequence gives bitwise the same results alone or batched.
#pragma once

#include <cstdint>

#include "core/dtype.h"
#include "cpu/isa.h"

namespace infer::cpu {

struct FormatKernel;  // cpu/qmatmul.h

// One call of the selective-scan kernel (cpu/ssm.cpp; the formulas of
// SsmScanParams, core/backend.h): T tokens of n_head heads that share one
// group of B and C. Every pointer is already offset to the call's first head
// and first token: head j, row p of token t reads dt[t*dt_stride + j],
// x[t*x_stride + j*head_dim + p], B[t*b_stride + s], C[t*c_stride + s],
// A[j*d_state + s] (a_per_state) or A[j], dt_bias[j] (nullable), and writes
// y[t*y_stride + j*head_dim + p] = sum_s h*C (without the D skip and the
// gate, which cpu/ssm.cpp applies).
struct SsmScanRun {
  int64_t T = 0, n_head = 0, head_dim = 1, d_state = 0;
  const float* dt = nullptr;  int64_t dt_stride = 0;
  const float* dt_bias = nullptr;
  const float* A = nullptr;   bool a_per_state = true;
  const float* x = nullptr;   int64_t x_stride = 0;
  const float* B = nullptr;   int64_t b_stride = 0;
  const float* C = nullptr;   int64_t c_stride = 0;
  float* y = nullptr;         int64_t y_stride = 0;
};

struct IsaKernels {
  const char* isa;  // its name (isa_name())

  // ---- vector primitives ----
  // sum_i a[i] * b[i]
  float (*dot_f32)(const float* a, const float* b, int64_t n);
  // y[i] += s * x[i]
  void (*axpy_f32)(float s, const float* x, float* y, int64_t n);
  // IEEE half to f32
  void (*f16_to_f32)(const uint16_t* src, float* dst, int64_t n);
  // f32 to IEEE half, round to nearest even.
  void (*f32_to_f16)(const float* src, uint16_t* dst, int64_t n);

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
  // GELU (tanh approximation) gating, Gemma's FFN: out = gelu(gate) * up with
  // gelu(g) = g / 2 (1 + tanh(sqrt(2/pi) (g + 0.044715 g^3))), computed as
  // g / (1 + exp(-2 sqrt(2/pi) (g + 0.044715 g^3))), the same function
  // without tanh's cancellation near -1 (out may alias gate or up).
  void (*geglu)(const float* gate, const float* up, float* out, int64_t n);
  // Soft-capping (Gemma 2's attention scores and logits): x = cap tanh(x / cap).
  void (*softcap)(float* x, int64_t n, float cap);
  // Encoders (cpu/encoder.cpp). GELU, erf form: x = x/2 (1 + erf(x / sqrt 2)),
  // within 1e-6 of it (erf to 1.5e-7).
  void (*gelu_erf)(float* x, int64_t n);
  // x = tanh(x).
  void (*tanh_f32)(float* x, int64_t n);
  // LayerNorm of one row of n values: y = (x - mean) / sqrt(var + eps) * w
  // + b (b may be nullptr; y may be x), the variance about the mean (two
  // passes), so rows with a large mean keep it.
  void (*layer_norm)(const float* x, const float* w, const float* b, int64_t n, float eps, float* y);

  // ---- state-space layers (cpu/ssm.cpp) ----
  // The recurrence of SsmScanRun over its T tokens, the state h
  // ([n_head][head_dim][d_state], contiguous) updated in place. Each head's
  // and row's results go through the same operations whatever T, n_head and
  // the head's place in the call (one run == chunks == token by token,
  // bitwise).
  void (*ssm_scan)(float* h, const SsmScanRun& r);
  // One output row of the causal depthwise convolution over n channels:
  // out[c] = silu(bias[c] + sum_{k < d_conv} wt[k*n + c] * in[k][c]) (bias
  // nullable; in[k] the input k - d_conv + 1 steps back, wt the taps
  // transposed, [d_conv][n]).
  void (*ssm_conv_row)(const float* const* in, const float* wt, const float* bias, int64_t n, int d_conv,
                       float* out);
  // A small matrix product of the SSD form of the scan (cpu/ssm.cpp):
  // c[i*ldc + j] += sum_{k < K} a[i*lda + k] * b[k*ldb + j] for i < M, j < N.
  void (*ssd_gemm)(int64_t M, int64_t N, int64_t K, const float* a, int64_t lda, const float* b, int64_t ldb,
                   float* c, int64_t ldc);
  // Runs of at least this many rows (within one block) of a Mamba-2 scan
  // take the SSD form built on ssd_gemm rather than ssm_scan (INT64_MAX:
  // never), as measured with BM_SsmPrefill / BM_SsmPrefillBlock (cpu/ssm.h).
  int64_t ssd_min_rows;

  // ---- matmul (cpu/matmul.cpp; internals in cpu/qmatmul.h) ----
  // Quantizes one row of n floats into int8 blocks of `block` values (n_pad
  // values written, the tail zero): per block d = max|x| / 127, q = round(x
  // / d), xs = d * Σq; u[k] = q[k] + 128 unless u is nullptr.
  void (*quantize_acts)(const float* x, int64_t n, int64_t n_pad, int64_t block, int8_t* q, uint8_t* u, float* d,
                        float* xs);
  // This ISA's own micro-kernel for weights of type t and m activation rows
  // (tile == nullptr: none; matmul then asks `fallback`). The scalar table
  // has one for every type.
  FormatKernel (*format_kernel)(DType t, int64_t m);
  // The table of the ISA below this one (nullptr for scalar).
  const IsaKernels* fallback;
};

// The table of the active ISA (active_isa(): cpuid, capped by INFER_CPU_ISA
// and set_isa_cap()).
const IsaKernels& kernels();
// The table of `isa`, capped at what this CPU and build run (detected_isa()):
// for tests and benchmarks that compare ISAs.
const IsaKernels& kernels_for(Isa isa);

}  // namespace infer::cpu
