// State-space operations on the CPU: the drivers (which block a sequence's
// state is read from and written to, work split over the thread pool) around
// the kernels of the ISA table (cpu/kernels.h: ssm_scan, ssm_conv_row,
// rms_norm, swiglu for the gate).
#include "cpu/ssm.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <functional>
#include <vector>

#include "core/error.h"
#include "core/threadpool.h"
#include "cpu/kernels.h"
#include "kv/kv_format.h"

namespace infer::cpu {

namespace {

constexpr int kMaxConv = 16;           // taps of the convolution, at most
constexpr int64_t kConvBlock = 256;    // channels of one convolution work item
constexpr int64_t kScanItem = 1024;    // values of state of one scan work item, about
constexpr int64_t kSsdChunk = 64;      // rows of one SSD chunk, at most

// Runs of at least this many rows (within one block) of a Mamba-2 layer
// take the SSD form (ssd_run); see set_ssd_min_rows.
// 0: the ISA table's own threshold.
std::atomic<int64_t> g_ssd_min_rows{0};

inline float softplus(float v) { return v > 20.0f ? v : std::log1p(std::exp(v)); }

// The SSD (state-space duality) form of the scan for a scalar decay per
// head: the same result as the recurrence of kern.ssm_scan, summed in
// another order. Per chunk of n <= kSsdChunk rows and head, with a_t = dt_t
// A the log decay of row t and s_t = a_0 + .. + a_t:
//   y_i = sum_{k<=i} (C_i.B_k) exp(s_i - s_k) dt_k x_k + exp(s_i) h C_i
//   h  <- exp(s_last) h + sum_k exp(s_last - s_k) dt_k x_k B_k^T
// Every exponent is a difference s_i - s_k with k <= i (or s_i itself):
// never positive, since A < 0 and dt >= 0. C_i.B_k is shared by the heads of
// the call (one group). y gets the sum without the D skip and the gate, as
// from kern.ssm_scan.
void ssd_run(const IsaKernels& kern, float* h, const SsmScanRun& r) {
  const int64_t P = r.head_dim, N = r.d_state;
  constexpr int64_t L = kSsdChunk;
  // The products go through kern.ssd_gemm (c += a b, row-major):
  //   CB [n][n]  = C (n x N) . B^T (N x n)          once per chunk
  //   y  [n][P]  = C (n x N) . h^T (N x P), rows scaled by exp(s_i),
  //   y         += W (n x n) . x (n x P)             W lower triangular
  //   h  [P][N]  = exp(s_last) h + X' (P x n) . B (n x N)
  std::vector<float> bt(static_cast<size_t>(N * L)), ht(static_cast<size_t>(N * P)), xs(static_cast<size_t>(P * L));
  float CB[L * L], W[L * L];
  float s[L], dts[L], e[L];
  for (int64_t t0 = 0; t0 < r.T; t0 += L) {
    const int64_t n = std::min(L, r.T - t0);
    const float* B0 = r.B + t0 * r.b_stride;
    const float* C0 = r.C + t0 * r.c_stride;
    for (int64_t k = 0; k < n; ++k)
      for (int64_t q = 0; q < N; ++q) bt[q * n + k] = B0[k * r.b_stride + q];
    std::fill(CB, CB + n * n, 0.0f);
    kern.ssd_gemm(n, n, N, C0, r.c_stride, bt.data(), n, CB, n);
    for (int64_t j = 0; j < r.n_head; ++j) {
      float* hj = h + j * P * N;
      const float bias = r.dt_bias ? r.dt_bias[j] : 0.0f;
      const float A = r.A[j];
      float acc = 0.0f;
      for (int64_t t = 0; t < n; ++t) {
        dts[t] = softplus(r.dt[(t0 + t) * r.dt_stride + j] + bias);
        acc += dts[t] * A;
        s[t] = acc;
      }
      const float* X0 = r.x + t0 * r.x_stride + j * P;
      float* Y0 = r.y + t0 * r.y_stride + j * P;
      // The state's contribution, then the chunk's own rows.
      for (int64_t p = 0; p < P; ++p)
        for (int64_t q = 0; q < N; ++q) ht[q * P + p] = hj[p * N + q];
      for (int64_t i = 0; i < n; ++i) std::fill(Y0 + i * r.y_stride, Y0 + i * r.y_stride + P, 0.0f);
      kern.ssd_gemm(n, P, N, C0, r.c_stride, ht.data(), P, Y0, r.y_stride);
      for (int64_t i = 0; i < n; ++i) {
        const float ei = std::exp(s[i]);
        float* y = Y0 + i * r.y_stride;
        for (int64_t p = 0; p < P; ++p) y[p] *= ei;
        for (int64_t k = 0; k <= i; ++k) W[i * n + k] = CB[i * n + k] * std::exp(s[i] - s[k]) * dts[k];
        for (int64_t k = i + 1; k < n; ++k) W[i * n + k] = 0.0f;
      }
      kern.ssd_gemm(n, P, n, W, n, X0, r.x_stride, Y0, r.y_stride);
      // The state at the chunk's end.
      const float last = s[n - 1];
      const float el = std::exp(last);
      for (int64_t k = 0; k < n; ++k) e[k] = std::exp(last - s[k]) * dts[k];
      for (int64_t p = 0; p < P; ++p)
        for (int64_t k = 0; k < n; ++k) xs[p * n + k] = e[k] * X0[k * r.x_stride + p];
      for (int64_t q = 0; q < P * N; ++q) hj[q] *= el;
      kern.ssd_gemm(P, N, n, xs.data(), n, B0, r.b_stride, hj, N);
    }
  }
}

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

int64_t set_ssd_min_rows(int64_t rows) { return g_ssd_min_rows.exchange(rows); }

// The convolution: work items are (sequence, block of up to kConvBlock
// channels). An item copies its channels' conv state into a local window
// first (the block it reads may be the block it writes), transposes its taps
// once, then runs its rows through the row kernel and writes the snapshots.
void ssm_conv(ThreadPool& pool, KvMemory& kvm, int ssm_layer, const SsmBatch& b, const float* x, int64_t x_stride,
              int64_t channels, int d_conv, const float* w, const float* bias, float* out) {
  HostKvMemory& kv = as_host_memory(kvm);
  const KvLayout& l = kv.layout();
  check_batch(kv, ssm_layer, b);
  if (d_conv < 1 || channels <= 0 || static_cast<int64_t>(d_conv - 1) * channels != l.ssm_conv_elems)
    raise(Status::Internal, "ssm_conv: %lld channels x %d taps do not fit the pool's conv state of %lld",
          static_cast<long long>(channels), d_conv, static_cast<long long>(l.ssm_conv_elems));
  if (d_conv > kMaxConv)
    raise(Status::Unsupported, "ssm_conv: a convolution of %d taps (at most %d)", d_conv, kMaxConv);
  const int k1 = d_conv - 1;
  const int bs = l.block_size;
  const int64_t n_cb = (channels + kConvBlock - 1) / kConvBlock;
  const IsaKernels& kern = kernels();
  // (std::cref: the pool's std::function holds a reference, no copy of the
  // captures on the heap.)
  const auto body = [&](int64_t i0, int64_t i1) {
    alignas(64) float win[kMaxConv * kConvBlock];  // the previous inputs, oldest first: [k1][nc]
    alignas(64) float wt[kMaxConv * kConvBlock];   // taps, [d_conv][nc]
    const float* rows[kMaxConv];
    int64_t wt_block = -1;
    for (int64_t item = i0; item < i1; ++item) {
      const int i = static_cast<int>(item / n_cb);
      const int64_t cb = item % n_cb;
      const int64_t c0 = cb * kConvBlock, nc = std::min(kConvBlock, channels - c0);
      if (cb != wt_block) {
        for (int k = 0; k < d_conv; ++k)
          for (int64_t c = 0; c < nc; ++c) wt[k * nc + c] = w[(c0 + c) * d_conv + k];
        wt_block = cb;
      }
      const int64_t p0 = b.pos0[i], n = b.n_rows[i], r0 = b.row0[i];
      if (p0 > 0) {
        const float* src = kv.ssm_state(ssm_layer, state_block(b, i, p0 - 1, bs));
        for (int k = 0; k < k1; ++k) std::memcpy(win + k * nc, src + k * channels + c0, sizeof(float) * nc);
      } else {
        std::fill(win, win + k1 * nc, 0.0f);
      }
      // Input k steps back from row t: the window for rows before the first.
      auto input = [&](int64_t t) -> const float* {
        return t >= 0 ? x + (r0 + t) * x_stride + c0 : win + (k1 + t) * nc;
      };
      for (int64_t t = 0; t < n; ++t) {
        for (int k = 0; k < d_conv; ++k) rows[k] = input(t - k1 + k);
        kern.ssm_conv_row(rows, wt, bias ? bias + c0 : nullptr, nc, d_conv, out + (r0 + t) * channels + c0);
        const int64_t p = p0 + t;
        if ((p + 1) % bs == 0 || t == n - 1) {
          float* dst = kv.ssm_state(ssm_layer, state_block(b, i, p, bs));
          for (int k = 0; k < k1; ++k) std::memcpy(dst + k * channels + c0, input(t - k1 + 1 + k), sizeof(float) * nc);
        }
      }
    }
  };
  pool.parallel_for(static_cast<int64_t>(b.n_seqs) * n_cb, 1, std::cref(body));
}

// The scan: work items are (sequence, block of heads of one group, chunk of
// rows within one block). An item runs its heads' state in place in the
// block its rows' snapshot belongs to: the state before its first row (or
// zeros) is copied into that block unless it is there already, updated
// there, then the D skip and the gate of its rows.
void ssm_scan(ThreadPool& pool, KvMemory& kvm, int ssm_layer, const SsmBatch& b, const SsmScanParams& p) {
  HostKvMemory& kv = as_host_memory(kvm);
  const KvLayout& l = kv.layout();
  check_batch(kv, ssm_layer, b);
  const int64_t H = p.n_head, P = p.head_dim, N = p.d_state, G = p.n_group;
  if (H <= 0 || P <= 0 || N <= 0 || G <= 0 || H % G != 0 || H * P * N != l.ssm_state_elems)
    raise(Status::Internal, "ssm_scan: %lld heads x %lld x %lld state in %lld groups do not fit the pool's %lld",
          static_cast<long long>(H), static_cast<long long>(P), static_cast<long long>(N),
          static_cast<long long>(G), static_cast<long long>(l.ssm_state_elems));
  const int bs = l.block_size;
  const int64_t conv = l.ssm_conv_elems;
  const int64_t hpg = H / G;
  // Heads per item: about kScanItem values of state (a Mamba-1 item of 64
  // channels of 16, a Mamba-2 item of one head of 64 x 128), within a group.
  const int64_t per = std::clamp<int64_t>(kScanItem / (P * N), 1, hpg);
  const int64_t items_per_group = (hpg + per - 1) / per;
  const int64_t n_hb = G * items_per_group;
  const int64_t HP = H * P;
  const IsaKernels& kern = kernels();
  const int64_t forced = g_ssd_min_rows.load();
  const int64_t ssd_min = p.a_per_state ? INT64_MAX : forced > 0 ? forced : std::max<int64_t>(1, kern.ssd_min_rows);
  // Rounds: round k runs every sequence's k-th chunk (its rows up to the
  // end of a block), all heads in parallel, so the threads walk the rows
  // together (a chunk's rows stay in cache) rather than one head block each
  // through all the rows.
  auto first_rows = [&](int i) { return std::min<int64_t>(b.n_rows[i], bs - b.pos0[i] % bs); };
  int64_t rounds = 0;
  for (int i = 0; i < b.n_seqs; ++i)
    rounds = std::max<int64_t>(rounds, 1 + (b.n_rows[i] - first_rows(i) + bs - 1) / bs);
  for (int64_t k = 0; k < rounds; ++k) {
    const auto body = [&](int64_t i0, int64_t i1) {
      for (int64_t item = i0; item < i1; ++item) {
        const int i = static_cast<int>(item / n_hb);
        const int64_t p0 = b.pos0[i], n = b.n_rows[i], r0 = b.row0[i];
        const int64_t t = k == 0 ? 0 : first_rows(i) + (k - 1) * bs;  // the chunk's first row
        if (t >= n) continue;
        const int64_t T = k == 0 ? first_rows(i) : std::min<int64_t>(bs, n - t);
        const int64_t pos = p0 + t;
        const int64_t g = (item % n_hb) / items_per_group;
        const int64_t j0 = g * hpg + ((item % n_hb) % items_per_group) * per;
        const int64_t nh = std::min(per, (g + 1) * hpg - j0);
        const size_t bytes = sizeof(float) * static_cast<size_t>(nh * P * N);
        const float* src =
            pos > 0 ? kv.ssm_state(ssm_layer, state_block(b, i, pos - 1, bs)) + conv + j0 * P * N : nullptr;
        float* dst = kv.ssm_state(ssm_layer, state_block(b, i, pos, bs)) + conv + j0 * P * N;
        if (dst != src) {
          if (src) std::memcpy(dst, src, bytes);
          else std::memset(dst, 0, bytes);
        }
        const int64_t r = r0 + t;
        SsmScanRun run;
        run.T = T;
        run.n_head = nh;
        run.head_dim = P;
        run.d_state = N;
        run.dt = p.dt + r * p.dt_stride + j0;
        run.dt_stride = p.dt_stride;
        run.dt_bias = p.dt_bias ? p.dt_bias + j0 : nullptr;
        run.a_per_state = p.a_per_state;
        run.A = p.A + (p.a_per_state ? j0 * N : j0);
        run.x = p.x + r * p.x_stride + j0 * P;
        run.x_stride = p.x_stride;
        run.B = p.B + r * p.b_stride + g * N;
        run.b_stride = p.b_stride;
        run.C = p.C + r * p.c_stride + g * N;
        run.c_stride = p.c_stride;
        run.y = p.y + r * HP + j0 * P;
        run.y_stride = HP;
        if (T >= ssd_min) ssd_run(kern, dst, run);
        else kern.ssm_scan(dst, run);
        // The D skip and the gate of the chunk's rows.
        for (int64_t u = r; u < r + T; ++u) {
          float* y = p.y + u * HP + j0 * P;
          if (p.D) {
            const float* xr = p.x + u * p.x_stride + j0 * P;
            for (int64_t j = 0; j < nh; ++j) {
              const float d = p.D[j0 + j];
              for (int64_t q = 0; q < P; ++q) y[j * P + q] += d * xr[j * P + q];
            }
          }
          if (p.z) kern.swiglu(p.z + u * p.z_stride + j0 * P, y, y, nh * P);
        }
      }
    };
    pool.parallel_for(static_cast<int64_t>(b.n_seqs) * n_hb, 1, std::cref(body));
  }
}

void rms_norm_groups(ThreadPool& pool, const float* x, int64_t x_stride, const float* weight, int64_t m,
                     int64_t n_group, int64_t gs, float eps, float* y) {
  pool.parallel_for(m * n_group, 64, [&](int64_t a, int64_t e) {
    const IsaKernels& kern = kernels();
    for (int64_t k = a; k < e; ++k) {
      const int64_t r = k / n_group, g = k % n_group;
      kern.rms_norm(x + r * x_stride + g * gs, weight + g * gs, gs, eps, y + r * n_group * gs + g * gs);
    }
  });
}

}  // namespace infer::cpu
