// The CPU backend: the reference implementation of every op in
// lib/core/backend.h, multithreaded over the engine's pool.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/backend.h"
#include "core/error.h"
#include "core/threadpool.h"
#include "cpu/attention.h"
#include "cpu/kernels.h"
#include "cpu/matmul.h"
#include "kv/kv_cache.h"

namespace infer {

namespace {

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(ThreadPool& pool) : pool_(pool), k_(cpu::kernels()) {}

  const char* name() const override { return "cpu"; }

  // Quantized and float weights: cpu/matmul.cpp.
  void matmul(const WeightView& w, const float* x, int64_t m, float* y) override {
    cpu::matmul(pool_, w, x, m, y);
  }

  void get_rows(const WeightView& w, const int32_t* ids, int64_t m, float* out) override {
    for (int64_t i = 0; i < m; ++i) {
      float* dst = out + i * w.n_in;
      const float* src = cpu::weight_row_f32(w, ids[i], dst);
      if (src != dst) std::memcpy(dst, src, sizeof(float) * w.n_in);
    }
  }

  void rms_norm(const float* x, const float* weight, int64_t m, int64_t n, float eps, float* y) override {
    for (int64_t i = 0; i < m; ++i) {
      const float* xi = x + i * n;
      float* yi = y + i * n;
      float ss = k_.dot_f32(xi, xi, n);
      const float scale = 1.0f / std::sqrt(ss / static_cast<float>(n) + eps);
      for (int64_t j = 0; j < n; ++j) yi[j] = weight[j] * (scale * xi[j]);
    }
  }

  void rope(float* x, int64_t m, int n_heads, int head_dim, const int32_t* pos, const RopeParams& p) override {
    const int half = p.n_rot / 2;
    std::vector<float> cs(static_cast<size_t>(2 * half));
    for (int64_t t = 0; t < m; ++t) {
      const float fpos = static_cast<float>(pos[t]) * p.pos_scale;
      for (int i = 0; i < half; ++i) {
        const float theta = fpos * p.inv_freq[i];
        cs[2 * i] = std::cos(theta);
        cs[2 * i + 1] = std::sin(theta);
      }
      for (int h = 0; h < n_heads; ++h) {
        float* v = x + (t * n_heads + h) * static_cast<int64_t>(head_dim);
        for (int i = 0; i < half; ++i) {
          // Pair (a, b) rotates by theta: (a cos - b sin, a sin + b cos).
          const int ia = p.neox ? i : 2 * i;
          const int ib = p.neox ? i + half : 2 * i + 1;
          const float a = v[ia], b = v[ib], c = cs[2 * i], s = cs[2 * i + 1];
          v[ia] = a * c - b * s;
          v[ib] = a * s + b * c;
        }
      }
    }
  }

  void swiglu(const float* gate, const float* up, float* out, int64_t n) override {
    for (int64_t i = 0; i < n; ++i) {
      const float g = gate[i];
      out[i] = g / (1.0f + std::exp(-g)) * up[i];  // silu(g) * up
    }
  }

  void add(float* x, const float* y, int64_t n) override {
    for (int64_t i = 0; i < n; ++i) x[i] += y[i];
  }

  void kv_write(KvCache& kv, int layer, const float* k, const float* v, const AttnBatch& b) override {
    cpu::kv_write(kv, layer, k, v, b);
  }

  void attention(const float* q, const KvCache& kv, int layer, const AttnBatch& b, int n_head, float scale,
                 float* out) override {
    cpu::attention(pool_, q, kv, layer, b, n_head, scale, out);
  }

 private:
  ThreadPool& pool_;
  const cpu::Kernels& k_;
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend(ThreadPool& pool) { return std::make_unique<CpuBackend>(pool); }

}  // namespace infer
