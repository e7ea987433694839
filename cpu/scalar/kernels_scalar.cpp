// The portable kernels: every entry of an IsaKernels table in plain C++, the
// fallback where no SIMD ISA runs (INFER_CPU_ISA=scalar, or a CPU without
// AVX2) and the reference the SIMD kernels are tested against.
#include <algorithm>
#include <cmath>
#include <vector>

#include "core/fp16.h"
#include "core/tls.h"
#include "cpu/isa_kernels.h"
#include "cpu/matmul.h"

namespace infer::cpu::scalar {

namespace {

// Dot products accumulated in double: a product of two floats is exact in
// double, so the result is the exact dot product rounded once to float, but
// for the double additions (relative error below n * 2^-53). The scalar
// kernels are the reference the SIMD ones are tested against, and the
// fallback that must reproduce the golden references of tests/ as well as
// they do: an f32 accumulation (its error grows with n * 2^-24) drifted just
// past their 1e-4 on logits (stories-xs). Four partial sums in a fixed order:
// deterministic, and not bound by one chain of add latencies.
float dot4(const float* a, const float* b, int64_t n) {
  double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) {
    s0 += static_cast<double>(a[i]) * b[i];
    s1 += static_cast<double>(a[i + 1]) * b[i + 1];
    s2 += static_cast<double>(a[i + 2]) * b[i + 2];
    s3 += static_cast<double>(a[i + 3]) * b[i + 3];
  }
  for (; i < n; ++i) s0 += static_cast<double>(a[i]) * b[i];
  return static_cast<float>((s0 + s1) + (s2 + s3));
}

// The portable matmul: each weight row converted to f32 once, then dotted
// with every row of x.
void tile_scalar(const MatmulArgs& a, int64_t r0, int64_t r1) {
  const WeightView& w = *a.w;
  static thread_local std::vector<float>* buf_slot = nullptr;
  std::vector<float>& buf = tls_object(buf_slot);
  if (static_cast<int64_t>(buf.size()) < w.n_in) buf.resize(static_cast<size_t>(w.n_in));
  for (int64_t r = r0; r < r1; ++r) {
    const float* wr = weight_row_f32(w, r, buf.data());
    for (int64_t i = 0; i < a.m; ++i) a.y[i * w.n_out + r] = dot_f32(a.x + i * w.n_in, wr, w.n_in);
  }
}

}  // namespace

// ---- vector primitives -------------------------------------------------------------------

float dot_f32(const float* a, const float* b, int64_t n) { return dot4(a, b, n); }

void axpy_f32(float s, const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += s * x[i];
}

void f16_to_f32(const uint16_t* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = fp16_to_f32(src[i]);
}

void f32_to_f16(const float* src, uint16_t* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = f32_to_fp16(src[i]);
}

// ---- attention ---------------------------------------------------------------------------

void attn_scores(const float* q, int nq, int64_t q_stride, const float* k, int n, int hd, float scale, float* s,
                 int64_t s_stride) {
  for (int i = 0; i < nq; ++i)
    for (int j = 0; j < n; ++j)
      s[i * s_stride + j] = dot4(q + i * q_stride, k + static_cast<int64_t>(j) * hd, hd) * scale;
}

void attn_accum(const float* p, int nq, int64_t p_stride, const float* v, int n, int hd, float* o, int64_t o_stride) {
  for (int i = 0; i < nq; ++i) {
    float* oi = o + i * o_stride;
    for (int j = 0; j < n; ++j) {
      const float w = p[i * p_stride + j];
      const float* vj = v + static_cast<int64_t>(j) * hd;
      for (int d = 0; d < hd; ++d) oi[d] += w * vj[d];
    }
  }
}

float exp_sum(float* x, int n, float* max) {
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

void i8_rows_to_f32(const int8_t* src, const float* scales, int rows, int hd, float* dst) {
  for (int r = 0; r < rows; ++r)
    for (int d = 0; d < hd; ++d) dst[r * hd + d] = scales[r] * static_cast<float>(src[r * hd + d]);
}

// ---- rows and elementwise ----------------------------------------------------------------

void rms_norm(const float* x, const float* w, int64_t n, float eps, float* y) {
  const float ss = dot4(x, x, n);
  const float scale = 1.0f / std::sqrt(ss / static_cast<float>(n) + eps);
  for (int64_t j = 0; j < n; ++j) y[j] = w[j] * (scale * x[j]);
}

void swiglu(const float* gate, const float* up, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float g = gate[i];
    out[i] = g / (1.0f + std::exp(-g)) * up[i];
  }
}

void add(float* x, const float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] += y[i];
}

void geglu(const float* gate, const float* up, float* out, int64_t n) {
  constexpr float kC2 = 2.0f * 0.7978845608028654f;  // 2 sqrt(2 / pi)
  for (int64_t i = 0; i < n; ++i) {
    const float g = gate[i];
    out[i] = g / (1.0f + std::exp(-kC2 * (g + 0.044715f * g * g * g))) * up[i];
  }
}

void gelu_erf(float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] = 0.5f * x[i] * (1.0f + std::erf(x[i] * 0.70710678118654752f));
}

void tanh_f32(float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] = std::tanh(x[i]);
}

void layer_norm(const float* x, const float* w, const float* b, int64_t n, float eps, float* y) {
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += x[i];
  const double mean = sum / static_cast<double>(n);
  double var = 0;
  for (int64_t i = 0; i < n; ++i) var += (x[i] - mean) * (x[i] - mean);
  const float inv = static_cast<float>(1.0 / std::sqrt(var / static_cast<double>(n) + eps));
  const float fm = static_cast<float>(mean);
  for (int64_t i = 0; i < n; ++i) {
    const float t = (x[i] - fm) * inv * w[i];
    y[i] = b ? t + b[i] : t;
  }
}

void softcap(float* x, int64_t n, float cap) {
  const float inv = 1.0f / cap;
  for (int64_t i = 0; i < n; ++i) x[i] = cap * std::tanh(x[i] * inv);
}

void rope(float* v, const float* cs, int half, bool neox) {
  for (int i = 0; i < half; ++i) {
    const int ia = neox ? i : 2 * i;
    const int ib = neox ? i + half : 2 * i + 1;
    const float a = v[ia], b = v[ib], c = cs[2 * i], s = cs[2 * i + 1];
    v[ia] = a * c - b * s;
    v[ib] = a * s + b * c;
  }
}

// ---- matmul ------------------------------------------------------------------------------

// The reference activation quantizer: per block, d = max|x| / 127 and
// q = round(x / d) (the SIMD versions compute the same values).
void quantize_acts(const float* x, int64_t n, int64_t n_pad, int64_t block, int8_t* q, uint8_t* u, float* d,
                   float* xs) {
  for (int64_t b0 = 0, bi = 0; b0 < n_pad; b0 += block, ++bi) {
    float amax = 0;
    for (int64_t k = b0; k < std::min(n, b0 + block); ++k) amax = std::max(amax, std::fabs(x[k]));
    const float id = amax > 0 ? 127.0f / amax : 0.0f;
    int32_t sum = 0;
    for (int64_t k = b0; k < b0 + block; ++k) {
      const int v = k < n ? static_cast<int>(std::nearbyint(x[k] * id)) : 0;
      q[k] = static_cast<int8_t>(v);
      if (u) u[k] = static_cast<uint8_t>(v + 128);
      sum += v;
    }
    d[bi] = amax / 127.0f;
    xs[bi] = d[bi] * static_cast<float>(sum);
  }
}

// Every format: rows dequantized to f32 (f32 activations).
FormatKernel format_kernel(DType, int64_t) {
  FormatKernel k;
  k.tile = tile_scalar;
  return k;
}

}  // namespace infer::cpu::scalar
