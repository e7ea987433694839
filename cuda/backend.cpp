// The CUDA backend: a first, plainly correct version (issue #16), not yet run
// on a GPU. What it is and is not:
//  - Weights live on the device, prepared at load (prepare_weight): Q4_0 and
//    INT4 in the W4A16 mma layout, Q8_0 as codes + scales, every other
//    format (F32, F16, BF16, the other GGUF blocks, W8A8) converted to F16
//    for cuBLAS. A weight that does not fit fails with OUT_OF_MEMORY.
//  - The KV pool (f16 or f32; int8 is refused) lives on the device in
//    HostKvMemory's layout; no host tier yet (refused with UNSUPPORTED).
//  - Activations live on the device (core/backend.h's memory contract): the
//    workspace (make_workspace) is device buffers, every op reads and writes
//    device pointers, and nothing is copied between ops. Host copies happen
//    at the edges only: the embedding rows of the batch's tokens in
//    (get_rows, dequantized on the host from the file's rows), positions and
//    block tables in once per pass (upload_batch; the tables on the first
//    kv_write of the pass), small index lists (gather / scatter rows), and
//    the logits or router logits out (BackendWorkspace::download).
//  - Model vectors (norm weights, biases, rope frequencies, act-order
//    permutations) are copied to the device once, on first use, and kept
//    (ModelVectors); each use checks the host bytes are still the same.
//  - Not yet: CUDA graphs, streams (everything runs on the default stream;
//    copies are synchronous).
// The backend factory (lib/backends/) uses it only when
// INFER_BACKEND_CUDA is asked for: AUTO stays on the CPU until the GPU tests
// have been seen passing.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <unordered_map>
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

// The activations of a forward pass, in device memory. Results the host
// reads come back through download() (a synchronous copy, so it also waits
// for the kernels that wrote them).
class DeviceWorkspace final : public BackendWorkspace {
 public:
  void* buffer(int slot, size_t bytes) override {
    if (slot < 0 || slot > kMaxSlots) raise(Status::Internal, "CUDA workspace slot %d out of range", slot);
    if (bufs_.size() <= static_cast<size_t>(slot)) bufs_.resize(static_cast<size_t>(slot) + 1);
    DeviceBuffer& b = bufs_[static_cast<size_t>(slot)];
    if (b.size() < bytes) b = DeviceBuffer(std::max<size_t>(bytes, 256));
    return b.get();
  }
  void* output(int slot, void* host, size_t bytes) override { return buffer(slot, bytes); }
  void download(void* host, const void* result, size_t bytes) override {
    if (bytes) copy_to_host(host, result, bytes);
  }

 private:
  static constexpr int kMaxSlots = 64;
  std::vector<DeviceBuffer> bufs_;
};

// Device copies of the model's host vectors (norm weights, biases, rope
// frequencies, permutations), made on first use and kept: model memory lives
// as long as the model. Keyed by address; the host bytes are kept beside
// them and compared on each use, so a vector freed and another allocated at
// the same address (tests) is copied again rather than read stale.
class ModelVectors {
 public:
  template <typename T>
  const T* get(const T* host, int64_t n) {
    const size_t bytes = static_cast<size_t>(n) * sizeof(T);
    Entry& e = map_[host];
    if (e.host.size() != bytes || std::memcmp(e.host.data(), host, bytes) != 0) {
      e.host.assign(reinterpret_cast<const char*>(host), reinterpret_cast<const char*>(host) + bytes);
      e.dev = DeviceBuffer(std::max<size_t>(bytes, 4));
      if (bytes) copy_to_device(e.dev.get(), host, bytes);
    }
    return e.dev.as<T>();
  }

 private:
  struct Entry {
    std::vector<char> host;
    DeviceBuffer dev;
  };
  std::unordered_map<const void*, Entry> map_;
};

class CudaBackend final : public Backend {
 public:
  const char* name() const override { return "cuda"; }

  void prepare_weight(const WeightView& w) override { weight(w); }
  int32_t preferred_row_multiple() const override { return 8; }  // the W4A16 / Q8_0 kernels' rows a launch

  std::unique_ptr<BackendWorkspace> make_workspace() override { return std::make_unique<DeviceWorkspace>(); }

  // The pass's positions go to the device now; its block tables on the
  // first kv_write or attention (they need the pool's block size).
  void upload_batch(const AttnBatch& b) override {
    batch_pos_ = b.pos;
    batch_table_ = b.table;
    batch_n_ = b.n_tokens;
    int32_t* d = pos_.get<int32_t>(std::max<int64_t>(1, b.n_tokens));
    if (b.n_tokens > 0) copy_to_device(d, b.pos, sizeof(int32_t) * b.n_tokens);
    tables_block_size_ = 0;  // stale
  }

  // x, y: device memory.
  void matmul(const WeightView& w, const float* x, int64_t m, float* y) override {
    std::shared_ptr<DeviceWeight> tmp;
    const DeviceWeight& d = weight(w, &tmp);
    switch (d.kind) {
      case DeviceWeight::W4:
        for (int64_t r0 = 0; r0 < m; r0 += 8)
          launch_w4a16_gemm(d.a.as<uint32_t>(), d.b.as<uint16_t>(), d.c.as<uint8_t>(), d.L, x + r0 * d.n_in,
                            static_cast<int>(std::min<int64_t>(8, m - r0)), y + r0 * d.n_out, nullptr);
        break;
      case DeviceWeight::Q8:
        for (int64_t r0 = 0; r0 < m; r0 += 8)
          launch_q8_0_matvec(d.a.as<int8_t>(), d.b.as<uint16_t>(), d.n_out, d.n_in, x + r0 * d.n_in,
                             static_cast<int>(std::min<int64_t>(8, m - r0)), y + r0 * d.n_out, nullptr);
        break;
      case DeviceWeight::F16: {
        uint16_t* dx16 = x16_.get<uint16_t>(m * d.n_in);
        launch_f32_to_f16(x, dx16, m * d.n_in, nullptr);
        blas().gemm_f16(d.a.as<uint16_t>(), d.n_out, d.n_in, dx16, m, y, nullptr);
        break;
      }
    }
  }

  // The edge in: the tokens' rows, dequantized on the host from the weight
  // as the file stores it, copied to `out` (device) in one copy.
  void get_rows(const WeightView& w, const int32_t* ids, int64_t m, float* out) override {
    rows_host_.resize(static_cast<size_t>(m * w.n_in));
    for (int64_t i = 0; i < m; ++i) {
      float* o = rows_host_.data() + i * w.n_in;
      if (w.type == DType::W8A8) {
        const auto* q = reinterpret_cast<const int8_t*>(w.row(ids[i]));
        for (int64_t k = 0; k < w.n_in; ++k) o[k] = static_cast<float>(q[k]) * w.scale[ids[i]];
      } else {
        dequantize_row(w.type, w.row(ids[i]), o, w.n_in);
      }
    }
    if (m > 0) copy_to_device(out, rows_host_.data(), sizeof(float) * rows_host_.size());
  }

  void rms_norm(const float* x, const float* weight, int64_t m, int64_t n, float eps, float* y) override {
    launch_rms_norm(x, vectors_.get(weight, n), m, n, eps, y, nullptr);
  }

  void rope(float* x, int64_t m, int n_heads, int head_dim, const int32_t* pos, const RopeParams& p) override {
    launch_rope(x, m, n_heads, head_dim, device_pos(pos, m), p.n_rot, p.neox, vectors_.get(p.inv_freq, p.n_rot / 2),
                p.pos_scale, p.mscale, nullptr);
  }

  void swiglu(const float* gate, const float* up, float* out, int64_t n) override {
    launch_swiglu(gate, up, out, n, nullptr);
  }
  void add(float* x, const float* y, int64_t n) override { launch_add(x, y, n, nullptr); }
  void geglu(const float* gate, const float* up, float* out, int64_t n) override {
    launch_geglu(gate, up, out, n, nullptr);
  }
  void add_bias(float* x, const float* bias, int64_t m, int64_t n) override {
    launch_add_bias(x, vectors_.get(bias, n), m, n, nullptr);
  }
  void scale(float* x, int64_t n, float s) override { launch_scale(x, n, s, nullptr); }
  void softcap(float* x, int64_t n, float cap) override { launch_softcap(x, n, cap, nullptr); }

  void permute_cols(const float* x, int64_t m, int64_t n, const int32_t* perm, float* out) override {
    launch_permute_cols(x, m, n, vectors_.get(perm, n), out, nullptr);
  }
  void gather_rows(const float* x, const int32_t* rows, int64_t n_rows, int64_t n, float* out) override {
    if (n_rows <= 0) return;
    int32_t* d = ints_.get<int32_t>(n_rows);
    copy_to_device(d, rows, sizeof(int32_t) * n_rows);
    launch_gather_rows(x, d, n_rows, n, out, nullptr);
  }
  void scatter_add_rows(float* acc, const int32_t* rows, const float* w, const float* y, int64_t n_rows,
                        int64_t n) override {
    if (n_rows <= 0) return;
    int32_t* dr = ints_.get<int32_t>(n_rows);
    float* dw = aux_.get<float>(n_rows);
    copy_to_device(dr, rows, sizeof(int32_t) * n_rows);
    copy_to_device(dw, w, sizeof(float) * n_rows);
    launch_scatter_add_rows(acc, dr, dw, y, n_rows, n, nullptr);
  }
  void copy(float* dst, const float* src, int64_t n) override {
    if (dst != src && n > 0) copy_on_device(dst, src, sizeof(float) * n);
  }
  void zero(float* x, int64_t n) override {
    if (n > 0) zero_device(x, sizeof(float) * n);
  }

  std::unique_ptr<KvMemory> make_kv_memory(const KvLayout& layout, int n_blocks, KvTier tier) override {
    if (tier != KvTier::Primary)
      raise(Status::Unsupported, "the CUDA backend has no host KV tier yet (issue #16): set the host tier to 0 blocks");
    if (layout.type == KvType::I8)
      raise(Status::Unsupported, "the CUDA backend keeps f16 or f32 KV (int8 KV: issue #16)");
    return std::make_unique<DeviceKvMemory>(layout, n_blocks);
  }

  // k, v: device memory.
  void kv_write(KvMemory& kv, int layer, const float* k, const float* v, const AttnBatch& b) override {
    const DeviceKvMemory& mem = device_kv(kv);
    int stride = 0;
    const int32_t* dtab = device_tables(b, mem.layout().block_size, &stride);
    launch_kv_write(mem.data(), mem.f32(), mem.addr(), layer, k, v, static_cast<int>(b.n_tokens),
                    device_pos(b.pos, b.n_tokens), dtab, stride, nullptr);
  }

  // q, out: device memory.
  void attention(const float* q, const KvMemory& kv, int layer, const AttnBatch& b, int n_head, float scale,
                 float* out) override {
    const DeviceKvMemory& mem = device_kv(kv);
    int stride = 0;
    const int32_t* dtab = device_tables(b, mem.layout().block_size, &stride);
    PagedAttention a;
    a.q = q;
    a.pool = mem.data();
    a.f32 = mem.f32();
    a.addr = mem.addr();
    a.layer = layer;
    a.n_tokens = static_cast<int>(b.n_tokens);
    a.n_head = n_head;
    a.pos = device_pos(b.pos, b.n_tokens);
    a.tables = dtab;
    a.table_stride = stride;
    a.window = b.window;
    a.scale = scale;
    a.softcap = b.softcap;
    a.n_splits = paged_attention_splits(max_pos_, mem.layout().block_size);
    a.work = work_.get<float>(paged_attention_work_floats(a.n_tokens, n_head, mem.layout().head_dim, a.n_splits));
    a.out = out;
    launch_paged_attention(a, nullptr);
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
  bool same_batch(const int32_t* pos, int64_t n) const { return pos == batch_pos_ && n == batch_n_; }
  // The device copy of the positions `pos` (host): the pass's, uploaded by
  // upload_batch, or (an op called outside a pass) copied now.
  const int32_t* device_pos(const int32_t* pos, int64_t n) {
    if (same_batch(pos, n)) return pos_.get<int32_t>(std::max<int64_t>(1, n));
    batch_pos_ = nullptr;  // pos_ is overwritten: no longer the pass's
    int32_t* d = pos_.get<int32_t>(std::max<int64_t>(1, n));
    if (n > 0) copy_to_device(d, pos, sizeof(int32_t) * n);
    return d;
  }
  // The batch's block tables as rows of one device array: row t holds the
  // blocks of token t's positions [0, pos[t]] (stride: the longest). Copied
  // once per pass (every layer's kv_write and attention reuse it).
  const int32_t* device_tables(const AttnBatch& b, int block_size, int* stride) {
    const bool fresh = same_batch(b.pos, b.n_tokens) && b.table == batch_table_ && tables_block_size_ == block_size;
    if (!fresh) {
      int s = 1, mx = 0;
      for (int64_t t = 0; t < b.n_tokens; ++t) {
        s = std::max(s, b.pos[t] / block_size + 1);
        mx = std::max(mx, b.pos[t]);
      }
      tables_.assign(static_cast<size_t>(b.n_tokens) * s, -1);
      for (int64_t t = 0; t < b.n_tokens; ++t)
        std::copy(b.table[t], b.table[t] + b.pos[t] / block_size + 1, tables_.begin() + t * s);
      int32_t* d = tab_.get<int32_t>(std::max<size_t>(1, tables_.size()));
      if (!tables_.empty()) copy_to_device(d, tables_.data(), sizeof(int32_t) * tables_.size());
      tables_stride_ = s;
      max_pos_ = mx;
      // Reused by the rest of the pass only when it is the pass's batch.
      tables_block_size_ = same_batch(b.pos, b.n_tokens) && b.table == batch_table_ ? block_size : 0;
    }
    *stride = tables_stride_;
    return tab_.get<int32_t>(std::max<size_t>(1, tables_.size()));
  }
  Cublas& blas() {
    if (!blas_) blas_ = std::make_unique<Cublas>();
    return *blas_;
  }

  Scratch x16_, aux_, ints_, pos_, tab_, work_;
  ModelVectors vectors_;
  std::vector<float> rows_host_;
  std::vector<int32_t> tables_;
  // The pass's batch (upload_batch): host arrays, and what was copied of them.
  const int32_t* batch_pos_ = nullptr;
  const int32_t* const* batch_table_ = nullptr;
  int64_t batch_n_ = -1;
  int tables_block_size_ = 0, tables_stride_ = 1, max_pos_ = 0;
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
