// Portable versions of the state-space kernels (cpu/kernels.h): the
// reference the vector versions are tested against.
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "cpu/isa_kernels.h"

namespace infer::cpu::scalar {

namespace {

inline float softplus(float v) { return v > 20.0f ? v : std::log1p(std::exp(v)); }

constexpr int64_t kChunk = 64;  // tokens whose dt (and scalar decay) are computed ahead

}  // namespace

void ssm_scan(float* h, const SsmScanRun& r) {
  const int64_t P = r.head_dim, N = r.d_state;
  float dts[kChunk], decay[kChunk];
  for (int64_t j = 0; j < r.n_head; ++j) {
    float* hj = h + j * P * N;
    const float bias = r.dt_bias ? r.dt_bias[j] : 0.0f;
    for (int64_t t0 = 0; t0 < r.T; t0 += kChunk) {
      const int64_t tn = std::min(kChunk, r.T - t0);
      for (int64_t t = 0; t < tn; ++t) {
        dts[t] = softplus(r.dt[(t0 + t) * r.dt_stride + j] + bias);
        if (!r.a_per_state) decay[t] = std::exp(dts[t] * r.A[j]);
      }
      for (int64_t p = 0; p < P; ++p) {
        float* hp = hj + p * N;
        for (int64_t t = 0; t < tn; ++t) {
          const int64_t tt = t0 + t;
          const float dt = dts[t];
          const float dtx = dt * r.x[tt * r.x_stride + j * P + p];
          const float* B = r.B + tt * r.b_stride;
          const float* C = r.C + tt * r.c_stride;
          float acc = 0.0f;
          if (r.a_per_state) {
            const float* A = r.A + j * N;
            for (int64_t s = 0; s < N; ++s) {
              hp[s] = hp[s] * std::exp(dt * A[s]) + dtx * B[s];
              acc += hp[s] * C[s];
            }
          } else {
            const float dA = decay[t];
            for (int64_t s = 0; s < N; ++s) {
              hp[s] = hp[s] * dA + dtx * B[s];
              acc += hp[s] * C[s];
            }
          }
          r.y[tt * r.y_stride + j * P + p] = acc;
        }
      }
    }
  }
}

void ssm_conv_row(const float* const* in, const float* wt, const float* bias, int64_t n, int d_conv, float* out) {
  for (int64_t c = 0; c < n; ++c) {
    float s = bias ? bias[c] : 0.0f;
    for (int k = 0; k < d_conv; ++k) s += wt[k * n + c] * in[k][c];
    out[c] = s / (1.0f + std::exp(-s));
  }
}

void ssd_gemm(int64_t M, int64_t N, int64_t K, const float* a, int64_t lda, const float* b, int64_t ldb, float* c,
              int64_t ldc) {
  for (int64_t i = 0; i < M; ++i)
    for (int64_t k = 0; k < K; ++k) {
      const float v = a[i * lda + k];
      for (int64_t j = 0; j < N; ++j) c[i * ldc + j] += v * b[k * ldb + j];
    }
}

}  // namespace infer::cpu::scalar
