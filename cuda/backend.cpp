// The CUDA backend: a first, plainly correct version (issue #16), not yet run
// on a GPU. What it is and is not:
//  - Weights live on the device, prepared at load (prepare_weight): Q4_0 and
//    INT4 in the W4A16 mma layout, Q8_0 as codes + scales, every other
//    format (F32, F16, BF16, the other GGUF blocks, W8A8) converted to F16
//    for cuBLAS. A weight that does not fit fails with OUT_OF_MEMORY.
//  - The KV pool (f16 or f32; int8 is refused) lives on the device in
//    HostKvMemory's layout; no host tier yet (refused with UNSUPPORTED).
//  - Activations stay host f32 (core/backend.h's contract): every op copies
//    its inputs to the device and its result back. That costs far more than
//    the kernels; a device-resident activation path and CUDA graphs are the
//    next steps. geglu, add_bias, scale and softcap run on the host.
// The backend factory (engine/backends.cpp) uses it only when
// INFER_BACKEND_CUDA is asked for: AUTO stays on the CPU until the GPU tests
// have been seen passing.
#include <algorithm>
#include <cmath>
#include <memory>
#include <vector>

#include "core/error.h"
#include "core/fp16.h"
#include "cuda/cublas_loader.h"
#include "cuda/cuda_backend.h"
#include "cuda/kernels.h"
#include "cuda/repack.h"
#include "kv/kv_format.h"
#include "quant/dequant.h"

namespace infer::cuda {

namespace {

// The device copy of one weight in the layout its kernel reads.
struct DeviceWeight {
  enum Kind { W4, Q8, F16 } kind = F16;
  int64_t n_out = 0, n_in = 0;
  layout::W4Layout L;
  DeviceBuffer a, b, c;  // W4: codes, scales, zeros; Q8: codes, scales; F16: the matrix
};

std::shared_ptr<DeviceWeight> upload_weight(const WeightView& w) {
  auto d = std::make_shared<DeviceWeight>();
  d->n_out = w.n_out;
  d->n_in = w.n_in;
  if (w4_repackable(w.type) && w.n_in % 32 == 0) {
    const W4Weights r = repack_w4(w);
    d->kind = DeviceWeight::W4;
    d->L = r.L;
    d->a = to_device(r.q.data(), r.q.size());
    d->b = to_device(r.scale.data(), r.scale.size());
    d->c = to_device(r.zero.data(), r.zero.size());
    return d;
  }
  if (w.type == DType::Q8_0) {
    const Q8Weights r = repack_q8_0(w);
    d->kind = DeviceWeight::Q8;
    d->a = to_device(r.q.data(), r.q.size());
    d->b = to_device(r.d.data(), r.d.size());
    return d;
  }
  if (w.type != DType::W8A8 && !dtype_can_dequantize(w.type))
    raise(Status::Unsupported, "CUDA backend: weights of type %s", dtype_name(w.type));
  // Anything else as F16 rows for cuBLAS.
  d->kind = DeviceWeight::F16;
  d->a = DeviceBuffer(static_cast<size_t>(w.n_out * w.n_in) * 2);
  std::vector<float> row(w.n_in);
  std::vector<uint16_t> half(w.n_in);
  for (int64_t r = 0; r < w.n_out; ++r) {
    if (w.type == DType::W8A8) {
      const auto* q = reinterpret_cast<const int8_t*>(w.row(r));
      for (int64_t k = 0; k < w.n_in; ++k) row[k] = static_cast<float>(q[k]) * w.scale[r];
    } else {
      dequantize_row(w.type, w.row(r), row.data(), w.n_in);
    }
    for (int64_t k = 0; k < w.n_in; ++k) half[k] = f32_to_fp16(row[k]);
    copy_to_device(d->a.as<uint16_t>() + r * w.n_in, half.data(), half.size() * 2);
  }
  return d;
}

const char kWeightTag = 0;  // key of this backend's copies in WeightCache

// A KV pool in device memory, in HostKvMemory's layout (f16 or f32 elements).
class DeviceKvMemory final : public KvMemory {
 public:
  DeviceKvMemory(const KvLayout& L, int n_blocks)
      : KvMemory(L, n_blocks),
        addr_{n_blocks, L.n_kv_heads, L.head_dim, L.block_size},
        buf_(static_cast<size_t>(layout::kv_elem(addr_, L.n_layers, 0, 0, 0, 0, 0)) * L.elem_bytes()) {
    zero_device(buf_.get(), buf_.size());
  }
  void copy_block(int dst_block, const KvMemory& src, int src_block) override {
    const auto* s = dynamic_cast<const DeviceKvMemory*>(&src);
    if (!s || s->layout().kv_dim() != layout_.kv_dim() || s->layout().type != layout_.type ||
        s->layout().block_size != layout_.block_size || s->layout().n_layers != layout_.n_layers)
      raise(Status::Internal, "CUDA KV: copy_block from another kind of pool");
    const size_t es = layout_.elem_bytes();
    // K and V of a (layer, block) are adjacent: one copy per layer.
    const size_t bytes = 2 * static_cast<size_t>(addr_.block_elems()) * es;
    for (int l = 0; l < layout_.n_layers; ++l)
      copy_on_device(static_cast<char*>(buf_.get()) + layout::kv_elem(addr_, l, dst_block, 0, 0, 0, 0) * es,
                     static_cast<const char*>(s->buf_.get()) + layout::kv_elem(s->addr_, l, src_block, 0, 0, 0, 0) * es,
                     bytes);
  }
  const layout::KvAddr& addr() const { return addr_; }
  void* data() const { return buf_.get(); }
  bool f32() const { return layout_.type == KvType::F32; }

 private:
  layout::KvAddr addr_;
  DeviceBuffer buf_;
};

// A device buffer that grows to the largest size asked for (per-op staging).
struct Scratch {
  DeviceBuffer buf;
  template <typename T>
  T* get(size_t n) {
    if (buf.size() < n * sizeof(T)) buf = DeviceBuffer(n * sizeof(T));
    return buf.as<T>();
  }
};

class CudaBackend final : public Backend {
 public:
  const char* name() const override { return "cuda"; }

  void prepare_weight(const WeightView& w) override { weight(w); }
  int32_t preferred_row_multiple() const override { return 8; }  // the W4A16 / Q8_0 kernels' rows a launch

  void matmul(const WeightView& w, const float* x, int64_t m, float* y) override {
    std::shared_ptr<DeviceWeight> tmp;
    const DeviceWeight& d = weight(w, &tmp);
    float* dx = x_.get<float>(m * d.n_in);
    float* dy = y_.get<float>(m * d.n_out);
    copy_to_device(dx, x, sizeof(float) * m * d.n_in);
    switch (d.kind) {
      case DeviceWeight::W4:
        for (int64_t r0 = 0; r0 < m; r0 += 8)
          launch_w4a16_gemm(d.a.as<uint32_t>(), d.b.as<uint16_t>(), d.c.as<uint8_t>(), d.L, dx + r0 * d.n_in,
                            static_cast<int>(std::min<int64_t>(8, m - r0)), dy + r0 * d.n_out, nullptr);
        break;
      case DeviceWeight::Q8:
        for (int64_t r0 = 0; r0 < m; r0 += 8)
          launch_q8_0_matvec(d.a.as<int8_t>(), d.b.as<uint16_t>(), d.n_out, d.n_in, dx + r0 * d.n_in,
                             static_cast<int>(std::min<int64_t>(8, m - r0)), dy + r0 * d.n_out, nullptr);
        break;
      case DeviceWeight::F16: {
        uint16_t* dx16 = x16_.get<uint16_t>(m * d.n_in);
        launch_f32_to_f16(dx, dx16, m * d.n_in, nullptr);
        blas().gemm_f16(d.a.as<uint16_t>(), d.n_out, d.n_in, dx16, m, dy, nullptr);
        break;
      }
    }
    copy_to_host(y, dy, sizeof(float) * m * d.n_out);
  }

  // Embedding rows straight from the weight as the file stores it (host).
  void get_rows(const WeightView& w, const int32_t* ids, int64_t m, float* out) override {
    for (int64_t i = 0; i < m; ++i) {
      float* o = out + i * w.n_in;
      if (w.type == DType::W8A8) {
        const auto* q = reinterpret_cast<const int8_t*>(w.row(ids[i]));
        for (int64_t k = 0; k < w.n_in; ++k) o[k] = static_cast<float>(q[k]) * w.scale[ids[i]];
      } else {
        dequantize_row(w.type, w.row(ids[i]), o, w.n_in);
      }
    }
  }

  void rms_norm(const float* x, const float* weight, int64_t m, int64_t n, float eps, float* y) override {
    float* dx = x_.get<float>(m * n);
    float* dw = aux_.get<float>(n);
    float* dy = y_.get<float>(m * n);
    copy_to_device(dx, x, sizeof(float) * m * n);
    copy_to_device(dw, weight, sizeof(float) * n);
    launch_rms_norm(dx, dw, m, n, eps, dy, nullptr);
    copy_to_host(y, dy, sizeof(float) * m * n);
  }

  void rope(float* x, int64_t m, int n_heads, int head_dim, const int32_t* pos, const RopeParams& p) override {
    const int64_t n = m * n_heads * head_dim;
    float* dx = x_.get<float>(n);
    int32_t* dpos = ints_.get<int32_t>(m);
    float* dfreq = aux_.get<float>(p.n_rot / 2);
    copy_to_device(dx, x, sizeof(float) * n);
    copy_to_device(dpos, pos, sizeof(int32_t) * m);
    copy_to_device(dfreq, p.inv_freq, sizeof(float) * (p.n_rot / 2));
    launch_rope(dx, m, n_heads, head_dim, dpos, p.n_rot, p.neox, dfreq, p.pos_scale, p.mscale, nullptr);
    copy_to_host(x, dx, sizeof(float) * n);
  }

  void swiglu(const float* gate, const float* up, float* out, int64_t n) override {
    float* dg = x_.get<float>(n);
    float* du = aux_.get<float>(n);
    float* dy = y_.get<float>(n);
    copy_to_device(dg, gate, sizeof(float) * n);
    copy_to_device(du, up, sizeof(float) * n);
    launch_swiglu(dg, du, dy, n, nullptr);
    copy_to_host(out, dy, sizeof(float) * n);
  }

  void add(float* x, const float* y, int64_t n) override {
    float* dx = x_.get<float>(n);
    float* dy = y_.get<float>(n);
    copy_to_device(dx, x, sizeof(float) * n);
    copy_to_device(dy, y, sizeof(float) * n);
    launch_add(dx, dy, n, nullptr);
    copy_to_host(x, dx, sizeof(float) * n);
  }

  // On the host in this version (the CPU reference's scalar formulas).
  void geglu(const float* gate, const float* up, float* out, int64_t n) override {
    constexpr float kC2 = 2.0f * 0.7978845608028654f;  // 2 sqrt(2 / pi)
    for (int64_t i = 0; i < n; ++i) {
      const float g = gate[i];
      out[i] = g / (1.0f + std::exp(-kC2 * (g + 0.044715f * g * g * g))) * up[i];
    }
  }
  void add_bias(float* x, const float* bias, int64_t m, int64_t n) override {
    for (int64_t r = 0; r < m; ++r)
      for (int64_t i = 0; i < n; ++i) x[r * n + i] += bias[i];
  }
  void scale(float* x, int64_t n, float s) override {
    for (int64_t i = 0; i < n; ++i) x[i] *= s;
  }
  void softcap(float* x, int64_t n, float cap) override {
    const float inv = 1.0f / cap;
    for (int64_t i = 0; i < n; ++i) x[i] = cap * std::tanh(x[i] * inv);
  }

  std::unique_ptr<KvMemory> make_kv_memory(const KvLayout& layout, int n_blocks, KvTier tier) override {
    if (tier != KvTier::Primary)
      raise(Status::Unsupported, "the CUDA backend has no host KV tier yet (issue #16): set the host tier to 0 blocks");
    if (layout.type == KvType::I8)
      raise(Status::Unsupported, "the CUDA backend keeps f16 or f32 KV (int8 KV: issue #16)");
    return std::make_unique<DeviceKvMemory>(layout, n_blocks);
  }

  void kv_write(KvMemory& kv, int layer, const float* k, const float* v, const AttnBatch& b) override {
    const DeviceKvMemory& mem = device_kv(kv);
    const int64_t n = b.n_tokens, kv_dim = mem.layout().kv_dim();
    int stride = 0;
    const int32_t* dtab = upload_tables(b, mem.layout().block_size, &stride);
    float* dk = x_.get<float>(n * kv_dim);
    float* dv = y_.get<float>(n * kv_dim);
    copy_to_device(dk, k, sizeof(float) * n * kv_dim);
    copy_to_device(dv, v, sizeof(float) * n * kv_dim);
    int32_t* dpos = ints_.get<int32_t>(n);
    copy_to_device(dpos, b.pos, sizeof(int32_t) * n);
    launch_kv_write(mem.data(), mem.f32(), mem.addr(), layer, dk, dv, static_cast<int>(n), dpos, dtab, stride, nullptr);
    device_synchronize();
  }

  void attention(const float* q, const KvMemory& kv, int layer, const AttnBatch& b, int n_head, float scale,
                 float* out) override {
    const DeviceKvMemory& mem = device_kv(kv);
    const int64_t n = b.n_tokens, q_dim = static_cast<int64_t>(n_head) * mem.layout().head_dim;
    int stride = 0;
    const int32_t* dtab = upload_tables(b, mem.layout().block_size, &stride);
    int max_pos = 0;
    for (int64_t t = 0; t < n; ++t) max_pos = std::max(max_pos, b.pos[t]);
    float* dq = x_.get<float>(n * q_dim);
    copy_to_device(dq, q, sizeof(float) * n * q_dim);
    PagedAttention a;
    a.q = dq;
    a.pool = mem.data();
    a.f32 = mem.f32();
    a.addr = mem.addr();
    a.layer = layer;
    a.n_tokens = static_cast<int>(n);
    a.n_head = n_head;
    int32_t* dpos = ints_.get<int32_t>(n);
    copy_to_device(dpos, b.pos, sizeof(int32_t) * n);
    a.pos = dpos;
    a.tables = dtab;
    a.table_stride = stride;
    a.window = b.window;
    a.scale = scale;
    a.softcap = b.softcap;
    a.n_splits = paged_attention_splits(max_pos, mem.layout().block_size);
    a.work = aux_.get<float>(paged_attention_work_floats(a.n_tokens, n_head, mem.layout().head_dim, a.n_splits));
    a.out = y_.get<float>(n * q_dim);
    launch_paged_attention(a, nullptr);
    copy_to_host(out, a.out, sizeof(float) * n * q_dim);
  }

 private:
  // The weight's device copy: from the model's cache (made now if new), or
  // made for this call only when the weight has no cache (*tmp holds it).
  const DeviceWeight& weight(const WeightView& w, std::shared_ptr<DeviceWeight>* tmp = nullptr) {
    if (w.cache) return *w.cache->get<DeviceWeight>(&kWeightTag, [&] { return upload_weight(w); });
    std::shared_ptr<DeviceWeight> d = upload_weight(w);
    if (tmp) *tmp = d;
    return *d;
  }
  static const DeviceKvMemory& device_kv(const KvMemory& kv) {
    const auto* m = dynamic_cast<const DeviceKvMemory*>(&kv);
    if (!m) raise(Status::Internal, "the CUDA backend was handed another backend's KV memory");
    return *m;
  }
  // The batch's block tables as rows of one device array: row t holds the
  // blocks of token t's positions [0, pos[t]] (stride: the longest).
  const int32_t* upload_tables(const AttnBatch& b, int block_size, int* stride) {
    int s = 1;
    for (int64_t t = 0; t < b.n_tokens; ++t) s = std::max(s, b.pos[t] / block_size + 1);
    tables_.assign(static_cast<size_t>(b.n_tokens) * s, -1);
    for (int64_t t = 0; t < b.n_tokens; ++t)
      std::copy(b.table[t], b.table[t] + b.pos[t] / block_size + 1, tables_.begin() + t * s);
    int32_t* d = tab_.get<int32_t>(tables_.size());
    copy_to_device(d, tables_.data(), sizeof(int32_t) * tables_.size());
    *stride = s;
    return d;
  }
  Cublas& blas() {
    if (!blas_) blas_ = std::make_unique<Cublas>();
    return *blas_;
  }

  Scratch x_, y_, x16_, aux_, ints_, tab_;
  std::vector<int32_t> tables_;
  std::unique_ptr<Cublas> blas_;
};

}  // namespace

std::unique_ptr<Backend> make_cuda_backend() {
  const DeviceProbe p = probe_devices();
  if (p.state != DeviceState::Usable) raise(Status::Backend, "INFER_BACKEND_CUDA: %s", p.reason.c_str());
  use_device(p.device);
  return std::make_unique<CudaBackend>();
}

}  // namespace infer::cuda
