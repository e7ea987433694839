// The CPU backend: the reference implementation of every op in
// lib/core/backend.h, multithreaded over the engine's pool.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "cpu/cpu_backend.h"
#include "core/error.h"
#include "core/threadpool.h"
#include "cpu/attention.h"
#include "cpu/encoder.h"
#include "cpu/kernels.h"
#include "cpu/matmul.h"
#include "cpu/ops.h"
#include "cpu/ssm.h"
#include "kv/kv_format.h"

namespace infer {

namespace {

// Activations in host memory: every buffer is a host vector, and the edges
// are pointer hand-offs (output() is the caller's host buffer itself, so
// download() copies nothing).
class HostWorkspace final : public BackendWorkspace {
 public:
  void* buffer(int slot, size_t bytes) override {
    if (slot < 0 || slot > kMaxSlots) raise(Status::Internal, "workspace slot %d out of range", slot);
    if (bufs_.size() <= static_cast<size_t>(slot)) bufs_.resize(static_cast<size_t>(slot) + 1);
    std::vector<float>& b = bufs_[static_cast<size_t>(slot)];
    const size_t n = (bytes + sizeof(float) - 1) / sizeof(float);
    if (b.size() < n) b.resize(n);
    return b.data();
  }
  void* output(int, void* host, size_t) override { return host; }
  void download(void* host, const void* result, size_t bytes) override {
    if (host != result && bytes) std::memcpy(host, result, bytes);
  }

 private:
  static constexpr int kMaxSlots = 64;
  std::vector<std::vector<float>> bufs_;
};

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(ThreadPool& pool) : pool_(pool), ok_(cpu::op_kernels()) {}

  const char* name() const override { return "cpu"; }

  std::unique_ptr<BackendWorkspace> make_workspace() override { return std::make_unique<HostWorkspace>(); }

  // Quantized and float weights: cpu/matmul.cpp.
  void matmul(const WeightView& w, const float* x, int64_t m, float* y) override {
    cpu::matmul(pool_, w, x, m, y);
  }

  void get_rows(const WeightView& w, const int32_t* ids, int64_t m, float* out) override {
    pool_.parallel_for(m, std::max<int64_t>(1, kRowsGrain / std::max<int64_t>(1, w.n_in)), [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) {
        float* dst = out + i * w.n_in;
        const float* src = cpu::weight_row_f32(w, ids[i], dst);
        if (src != dst) std::memcpy(dst, src, sizeof(float) * w.n_in);
      }
    });
  }

  void rms_norm(const float* x, const float* weight, int64_t m, int64_t n, float eps, float* y) override {
    pool_.parallel_for(m, std::max<int64_t>(1, kRowsGrain / std::max<int64_t>(1, n)), [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) ok_.rms_norm(x + i * n, weight, n, eps, y + i * n);
    });
  }

  void rope(float* x, int64_t m, int n_heads, int head_dim, const int32_t* pos, const RopeParams& p) override {
    const int half = p.n_rot / 2;
    const float* cs = rope_table(m, pos, p);
    const int64_t per_token = static_cast<int64_t>(n_heads) * half;
    pool_.parallel_for(m, std::max<int64_t>(1, kRowsGrain / std::max<int64_t>(1, per_token)), [&](int64_t b, int64_t e) {
      for (int64_t t = b; t < e; ++t)
        for (int h = 0; h < n_heads; ++h)
          ok_.rope(x + (t * n_heads + h) * static_cast<int64_t>(head_dim), cs + t * 2 * half, half, p.neox);
    });
  }

  void swiglu(const float* gate, const float* up, float* out, int64_t n) override {
    pool_.parallel_for(n, kElemGrain, [&](int64_t b, int64_t e) { ok_.swiglu(gate + b, up + b, out + b, e - b); });
  }

  void add(float* x, const float* y, int64_t n) override {
    pool_.parallel_for(n, 4 * kElemGrain, [&](int64_t b, int64_t e) { ok_.add(x + b, y + b, e - b); });
  }

  // The ops of a few architectures only (Gemma, Qwen2, Phi-3): each output
  // from its own inputs alone (batch invariant; the vector kernels run their
  // tails through the same vector code).
  void geglu(const float* gate, const float* up, float* out, int64_t n) override {
    pool_.parallel_for(n, kElemGrain, [&](int64_t b, int64_t e) { ok_.geglu(gate + b, up + b, out + b, e - b); });
  }

  void add_bias(float* x, const float* bias, int64_t m, int64_t n) override {
    pool_.parallel_for(m, std::max<int64_t>(1, kRowsGrain / std::max<int64_t>(1, n)), [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r) ok_.add(x + r * n, bias, n);
    });
  }

  void scale(float* x, int64_t n, float s) override {
    pool_.parallel_for(n, 4 * kElemGrain, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) x[i] *= s;
    });
  }

  void softcap(float* x, int64_t n, float cap) override {
    pool_.parallel_for(n, kElemGrain, [&](int64_t b, int64_t e) { ok_.softcap(x + b, e - b, cap); });
  }

  // Row moves of the model's gathers and scatters: exact, so the split over
  // threads does not change a bit.
  void permute_cols(const float* x, int64_t m, int64_t n, const int32_t* perm, float* out) override {
    pool_.parallel_for(m, std::max<int64_t>(1, kRowsGrain / std::max<int64_t>(1, n)), [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r) {
        const float* xr = x + r * n;
        float* y = out + r * n;
        for (int64_t j = 0; j < n; ++j) y[j] = xr[perm[j]];
      }
    });
  }

  void gather_rows(const float* x, const int32_t* rows, int64_t n_rows, int64_t n, float* out) override {
    for (int64_t j = 0; j < n_rows; ++j) std::memcpy(out + j * n, x + static_cast<int64_t>(rows[j]) * n, sizeof(float) * n);
  }

  // On the calling thread, j in order: a row's sum does not depend on the
  // rest of the batch (Mixtral's batch invariance, tests/test_moe.cpp).
  void scatter_add_rows(float* acc, const int32_t* rows, const float* w, const float* y, int64_t n_rows,
                        int64_t n) override {
    for (int64_t j = 0; j < n_rows; ++j) {
      float* o = acc + static_cast<int64_t>(rows[j]) * n;
      const float* yj = y + j * n;
      const float wj = w[j];
      for (int64_t c = 0; c < n; ++c) o[c] += wj * yj[c];
    }
  }

  void copy(float* dst, const float* src, int64_t n) override {
    if (dst != src && n > 0) std::memcpy(dst, src, sizeof(float) * static_cast<size_t>(n));
  }
  void zero(float* x, int64_t n) override {
    if (n > 0) std::memset(x, 0, sizeof(float) * static_cast<size_t>(n));
  }

  // KV blocks live in host memory, in the reference layout (kv/kv_format.h).
  // The first blocks of the primary pool are committed now: the first
  // request would otherwise pay their page faults (costly on a VM).
  std::unique_ptr<KvMemory> make_kv_memory(const KvLayout& layout, int n_blocks, KvTier tier) override {
    std::unique_ptr<KvMemory> m = make_host_kv_memory(layout, n_blocks, tier);
    if (tier == KvTier::Primary) as_host_memory(*m).touch(kPrefaultBlocks);
    return m;
  }
  static constexpr int kPrefaultBlocks = 16;

  void kv_write(KvMemory& kv, int layer, const float* k, const float* v, const AttnBatch& b) override {
    cpu::kv_write(pool_, kv, layer, k, v, b);
  }

  void attention(const float* q, const KvMemory& kv, int layer, const AttnBatch& b, int n_head, float scale,
                 float* out) override {
    cpu::attention(pool_, q, kv, layer, b, n_head, scale, out);
  }

  // Encoders and embedding models: cpu/encoder.cpp.
  void layer_norm(const float* x, const float* w, const float* b, int64_t m, int64_t n, float eps, float* y) override {
    cpu::layer_norm(pool_, x, w, b, m, n, eps, y);
  }
  void gelu(float* x, int64_t n) override { cpu::gelu_erf(pool_, x, n); }
  void tanh(float* x, int64_t n) override { cpu::tanh_inplace(pool_, x, n); }
  void attention_dense(const float* q, const float* k, const float* v, const AttnBatch& b, int n_head, int n_head_kv,
                       int head_dim, float scale, bool causal, float* out) override {
    cpu::attention_dense(pool_, q, k, v, b, n_head, n_head_kv, head_dim, scale, causal, out);
  }

  // State-space layers: cpu/ssm.cpp.
  void ssm_conv(KvMemory& kv, int ssm_layer, const SsmBatch& b, const float* x, int64_t x_stride, int64_t channels,
                int d_conv, const float* w, const float* bias, float* out) override {
    cpu::ssm_conv(pool_, kv, ssm_layer, b, x, x_stride, channels, d_conv, w, bias, out);
  }
  void ssm_scan(KvMemory& kv, int ssm_layer, const SsmBatch& b, const SsmScanParams& p) override {
    cpu::ssm_scan(pool_, kv, ssm_layer, b, p);
  }
  void rms_norm_groups(const float* x, int64_t x_stride, const float* weight, int64_t m, int64_t n_group, int64_t gs,
                       float eps, float* y) override {
    cpu::rms_norm_groups(pool_, x, x_stride, weight, m, n_group, gs, eps, y);
  }

  void prepare_weight(const WeightView& w) override { cpu::prepare_weight(pool_, w); }

  // The int8 tile kernels take 16 rows per AMX tile and 8 per VNNI tile;
  // 16 is a multiple of both (and what bench/RESULTS.md measured).
  int32_t preferred_row_multiple() const override { return 16; }

 private:
  // Work below these sizes runs on the calling thread: a pool job costs a
  // microsecond or two. Elementwise kernels take about a nanosecond per
  // 8 values, so chunks of kElemGrain values take several microseconds.
  static constexpr int64_t kRowsGrain = 16384;  // values per chunk of row ops
  static constexpr int64_t kElemGrain = 16384;  // values per chunk of swiglu (add: 4x)

  // cos and sin of every (token, pair) angle, [m][half][2]. A forward pass
  // rotates Q and K of every layer at the same positions: the table is
  // computed once and reused while positions and frequencies are unchanged.
  // theta = (pos * pos_scale) * inv_freq[i] in float, as the references do.
  const float* rope_table(int64_t m, const int32_t* pos, const RopeParams& p) {
    const int half = p.n_rot / 2;
    const bool same = rope_m_ == m && rope_half_ == half && rope_pos_scale_ == p.pos_scale && rope_mscale_ == p.mscale &&
                      std::equal(pos, pos + m, rope_pos_.begin()) &&
                      std::equal(p.inv_freq, p.inv_freq + half, rope_freq_.begin());
    if (same) return rope_cs_.data();
    rope_m_ = m;
    rope_half_ = half;
    rope_pos_scale_ = p.pos_scale;
    rope_mscale_ = p.mscale;
    rope_pos_.assign(pos, pos + m);
    rope_freq_.assign(p.inv_freq, p.inv_freq + half);
    rope_cs_.resize(static_cast<size_t>(m) * 2 * half);
    for (int64_t t = 0; t < m; ++t) {
      const float fpos = static_cast<float>(pos[t]) * p.pos_scale;
      float* cs = rope_cs_.data() + t * 2 * half;
      for (int i = 0; i < half; ++i) {
        const float theta = fpos * p.inv_freq[i];
        cs[2 * i] = std::cos(theta);
        cs[2 * i + 1] = std::sin(theta);
        if (p.mscale != 1.0f) {
          cs[2 * i] *= p.mscale;
          cs[2 * i + 1] *= p.mscale;
        }
      }
    }
    return rope_cs_.data();
  }

  ThreadPool& pool_;
  const cpu::OpKernels& ok_;
  int64_t rope_m_ = -1;
  int rope_half_ = -1;
  float rope_pos_scale_ = 0.0f, rope_mscale_ = 0.0f;
  std::vector<int32_t> rope_pos_;
  std::vector<float> rope_freq_, rope_cs_;
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend(ThreadPool& pool) { return std::make_unique<CpuBackend>(pool); }

}  // namespace infer
