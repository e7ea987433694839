// State-space operations on the CPU: the first, plain version (sequential
// scan per sequence, parallel over channels / heads).
#include "cpu/ssm.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "core/threadpool.h"
#include "kv/kv_format.h"

namespace infer::cpu {

namespace {

inline float softplus(float v) { return v > 20.0f ? v : std::log1p(std::exp(v)); }
inline float silu(float v) { return v / (1.0f + std::exp(-v)); }

// The block holding the state after position p of sequence i.
inline int state_block(const SsmBatch& b, int i, int64_t p, int bs) {
  const int32_t blk = b.table[i][p / bs];
  if (blk < 0) raise(Status::Internal, "ssm: the block of position %lld was released", static_cast<long long>(p));
  return blk;
}

void check_batch(const KvMemory& kv, int ssm_layer, const SsmBatch& b) {
  const KvLayout& l = kv.layout();
  if (ssm_layer < 0 || ssm_layer >= l.n_ssm_layers)
    raise(Status::Internal, "ssm layer %d of a pool with %d", ssm_layer, l.n_ssm_layers);
  for (int i = 0; i < b.n_seqs; ++i)
    if (b.n_rows[i] <= 0 || b.pos0[i] < 0) raise(Status::Internal, "ssm: sequence %d of the batch is empty", i);
}

}  // namespace

void ssm_conv(ThreadPool& pool, KvMemory& kvm, int ssm_layer, const SsmBatch& b, const float* x, int64_t x_stride,
              int64_t channels, int d_conv, const float* w, const float* bias, float* out) {
  HostKvMemory& kv = as_host_memory(kvm);
  const KvLayout& l = kv.layout();
  check_batch(kv, ssm_layer, b);
  const int k1 = d_conv - 1;
  if (d_conv < 1 || static_cast<int64_t>(k1) * channels != l.ssm_conv_elems)
    raise(Status::Internal, "ssm_conv: %lld channels x %d taps do not fit the pool's conv state of %lld",
          static_cast<long long>(channels), d_conv, static_cast<long long>(l.ssm_conv_elems));
  const int bs = l.block_size;
  pool.parallel_for(channels, 64, [&](int64_t c0, int64_t c1) {
    std::vector<float> win(static_cast<size_t>(d_conv));
    for (int i = 0; i < b.n_seqs; ++i) {
      const int64_t p0 = b.pos0[i], n = b.n_rows[i], r0 = b.row0[i];
      const float* src = p0 > 0 ? kv.ssm_state(ssm_layer, state_block(b, i, p0 - 1, bs)) : nullptr;
      for (int64_t c = c0; c < c1; ++c) {
        // win[0..k1) = the previous inputs, oldest first.
        for (int k = 0; k < k1; ++k) win[k] = src ? src[static_cast<size_t>(k) * channels + c] : 0.0f;
        for (int64_t t = 0; t < n; ++t) {
          const int64_t r = r0 + t;
          win[k1] = x[r * x_stride + c];
          float s = bias ? bias[c] : 0.0f;
          const float* wc = w + c * d_conv;
          for (int k = 0; k < d_conv; ++k) s += wc[k] * win[k];
          out[r * channels + c] = silu(s);
          for (int k = 0; k < k1; ++k) win[k] = win[k + 1];
          const int64_t p = p0 + t;
          if ((p + 1) % bs == 0 || t == n - 1) {
            float* dst = kv.ssm_state(ssm_layer, state_block(b, i, p, bs));
            for (int k = 0; k < k1; ++k) dst[static_cast<size_t>(k) * channels + c] = win[k];
          }
        }
      }
    }
  });
}

void ssm_scan(ThreadPool& pool, KvMemory& kvm, int ssm_layer, const SsmBatch& b, const SsmScanParams& p) {
  HostKvMemory& kv = as_host_memory(kvm);
  const KvLayout& l = kv.layout();
  check_batch(kv, ssm_layer, b);
  const int64_t H = p.n_head, P = p.head_dim, N = p.d_state, G = p.n_group;
  if (H <= 0 || P <= 0 || N <= 0 || G <= 0 || H % G != 0 || H * P * N != l.ssm_state_elems)
    raise(Status::Internal, "ssm_scan: %lld heads x %lld x %lld state do not fit the pool's %lld",
          static_cast<long long>(H), static_cast<long long>(P), static_cast<long long>(N),
          static_cast<long long>(l.ssm_state_elems));
  const int bs = l.block_size;
  const int64_t conv = l.ssm_conv_elems;
  const int64_t hpg = H / G;
  pool.parallel_for(H, 4, [&](int64_t h0, int64_t h1) {
    std::vector<float> st(static_cast<size_t>(P * N)), dA(static_cast<size_t>(N));
    for (int i = 0; i < b.n_seqs; ++i) {
      const int64_t p0 = b.pos0[i], n = b.n_rows[i], r0 = b.row0[i];
      const float* src = p0 > 0 ? kv.ssm_state(ssm_layer, state_block(b, i, p0 - 1, bs)) + conv : nullptr;
      for (int64_t h = h0; h < h1; ++h) {
        const int64_t g = h / hpg;
        if (src) std::memcpy(st.data(), src + h * P * N, sizeof(float) * P * N);
        else std::fill(st.begin(), st.end(), 0.0f);
        for (int64_t t = 0; t < n; ++t) {
          const int64_t r = r0 + t;
          const float dt = softplus(p.dt[r * p.dt_stride + h] + (p.dt_bias ? p.dt_bias[h] : 0.0f));
          for (int64_t s = 0; s < N; ++s) dA[s] = std::exp(dt * (p.a_per_state ? p.A[h * N + s] : p.A[h]));
          const float* Bv = p.B + r * p.b_stride + g * N;
          const float* Cv = p.C + r * p.c_stride + g * N;
          for (int64_t q = 0; q < P; ++q) {
            const float xv = p.x[r * p.x_stride + h * P + q];
            float* hs = st.data() + q * N;
            float y = 0.0f;
            for (int64_t s = 0; s < N; ++s) {
              hs[s] = hs[s] * dA[s] + dt * xv * Bv[s];
              y += hs[s] * Cv[s];
            }
            if (p.D) y += p.D[h] * xv;
            if (p.z) y *= silu(p.z[r * p.z_stride + h * P + q]);
            p.y[r * H * P + h * P + q] = y;
          }
          const int64_t pos = p0 + t;
          if ((pos + 1) % bs == 0 || t == n - 1) {
            float* dst = kv.ssm_state(ssm_layer, state_block(b, i, pos, bs)) + conv;
            std::memcpy(dst + h * P * N, st.data(), sizeof(float) * P * N);
          }
        }
      }
    }
  });
}

void rms_norm_groups(ThreadPool& pool, const float* x, int64_t x_stride, const float* weight, int64_t m,
                     int64_t n_group, int64_t gs, float eps, float* y) {
  pool.parallel_for(m * n_group, 64, [&](int64_t a, int64_t e) {
    for (int64_t k = a; k < e; ++k) {
      const int64_t r = k / n_group, g = k % n_group;
      const float* xr = x + r * x_stride + g * gs;
      float ss = 0.0f;
      for (int64_t i = 0; i < gs; ++i) ss += xr[i] * xr[i];
      const float inv = 1.0f / std::sqrt(ss / static_cast<float>(gs) + eps);
      float* yr = y + r * n_group * gs + g * gs;
      const float* wg = weight + g * gs;
      for (int64_t i = 0; i < gs; ++i) yr[i] = xr[i] * inv * wg[i];
    }
  });
}

}  // namespace infer::cpu
