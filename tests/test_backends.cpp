// The backend factory, load-time weight preparation and the memory contract.
#include <sys/mman.h>

#include <algorithm>
#include <cstring>
#include <stdexcept>

#include "cpu/cpu_backend.h"
#include "cpu/isa.h"
#include "engine/backends.h"
#include "engine/engine.h"
#include "model/transformer.h"
#include "tools/quantize.h"
#include "tools/synth.h"
#include "test_models.h"

using namespace infer;

// (tests/test_cuda.cpp checks when CUDA is refused, with which status and reason.)
TEST_CASE("backend factory: AUTO and CPU resolve to the CPU, CUDA resolves or is refused with a reason", "[backend]") {
  CHECK(resolve_backend(BackendKind::Auto) == BackendKind::Cpu);
  CHECK(resolve_backend(BackendKind::Cpu) == BackendKind::Cpu);
  try {
    const BackendKind k = resolve_backend(BackendKind::Cuda);
    CHECK(k == BackendKind::Cuda);  // a usable GPU
  } catch (const Error& e) {
    CHECK((e.status() == Status::Unsupported || e.status() == Status::Backend));
    CHECK(std::string(e.what()).find("CUDA") != std::string::npos);
  }
  REQUIRE_THROWS_AS(resolve_backend(static_cast<BackendKind>(7)), Error);
  ThreadPool pool(1);
  CHECK(std::string(make_backend(BackendKind::Auto, pool)->name()) == "cpu");
  CHECK(make_backend(BackendKind::Cpu, pool)->preferred_row_multiple() >= 1);
}

namespace {
// Repacked copies held by all the model's weights.
size_t prepared_copies(const Model& m) {
  size_t n = 0;
  m.for_each_weight([&](const WeightView& w) { n += w.cache ? w.cache->size() : 0; });
  return n;
}
}  // namespace

TEST_CASE("weights are prepared at load, not by the first request", "[backend]") {
  REQUIRE_SHARED(src, "models/stories260K.gguf");
  // Q4_0: the CPU kernels repack its rows into interleaved panels.
  const std::string path = infer_test::temp_dir() + "/prepare-q4_0.gguf";
  QuantizeOptions o;
  o.type = DType::Q4_0;
  o.n_threads = 1;
  quantize_model(src, path, o);
  // Every request shape (decode, a short and a long prompt) at once.
  auto run_requests = [](const Model& m) {
    EngineParams ep;
    ep.n_threads = 1;
    Engine e(m, ep);
    for (int n : {1, 5, 40, 200}) {
      RequestParams rp;
      rp.prompt.assign(n, 5);
      rp.max_tokens = 3;
      e.submit(rp);
    }
    e.run();
  };
  // Unprepared, the copies are made by the first requests...
  std::unique_ptr<Model> lazy = Model::load(path);
  REQUIRE(prepared_copies(*lazy) == 0);  // Model::load alone prepares nothing
  run_requests(*lazy);
  const size_t made_by_requests = prepared_copies(*lazy);
  if (cpu::active_isa() >= cpu::Isa::Avx2) CHECK(made_by_requests > 0);  // SIMD kernels repack Q4_0
  // ...prepared, they all exist after loading, and requests add none.
  std::unique_ptr<Model> model = Model::load(path);
  prepare_model(*model, BackendKind::Auto, 1);
  CHECK(model->backend() == BackendKind::Cpu);
  const size_t after_load = prepared_copies(*model);
  CHECK(after_load >= made_by_requests);
  run_requests(*model);
  CHECK(prepared_copies(*model) == after_load);
}

// ---- the memory contract (core/backend.h) ------------------------------------------------
//
// A backend whose memory the host cannot read: it runs the CPU backend's ops,
// but the activation pointers it hands out (workspace buffers, output()) are
// addresses in an inaccessible (PROT_NONE) reservation, translated to the
// real buffers only inside its ops. Model code that touched an activation on
// the host would fault; an op handed a host pointer where backend memory is
// due fails the test. A forward pass through it must give the CPU backend's
// logits bit for bit.
namespace {

class FencedWorkspace final : public BackendWorkspace {
 public:
  struct Region {
    char* fake = nullptr;
    size_t bytes = 0;
    std::vector<float> real;
  };
  ~FencedWorkspace() override {
    for (Region& r : regions_)
      if (r.fake) munmap(r.fake, r.bytes);
  }
  void* buffer(int slot, size_t bytes) override {
    if (regions_.size() <= static_cast<size_t>(slot)) regions_.resize(static_cast<size_t>(slot) + 1);
    Region& r = regions_[static_cast<size_t>(slot)];
    if (r.bytes < bytes) {
      if (r.fake) munmap(r.fake, r.bytes);
      r.bytes = (bytes + 4095) / 4096 * 4096;
      void* p = mmap(nullptr, r.bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
      if (p == MAP_FAILED) throw std::runtime_error("mmap");
      r.fake = static_cast<char*>(p);
      r.real.assign(r.bytes / sizeof(float), 0.0f);
    }
    return r.fake;
  }
  void* output(int slot, void* host, size_t bytes) override { return buffer(slot, bytes); }
  void download(void* host, const void* result, size_t bytes) override {
    ++downloads;
    const float* src = real(result, bytes);
    if (!src) FAIL("download() of memory that is not this workspace's");
    std::memcpy(host, src, bytes);
  }
  // The real address of [p, p + bytes), which must lie in one buffer.
  float* real(const void* p, size_t bytes) {
    const char* c = static_cast<const char*>(p);
    for (Region& r : regions_)
      if (r.fake && c >= r.fake && c + bytes <= r.fake + r.bytes)
        return reinterpret_cast<float*>(reinterpret_cast<char*>(r.real.data()) + (c - r.fake));
    ++stray;
    return nullptr;
  }
  int stray = 0;      // activation arguments that were not backend memory
  int downloads = 0;  // edge copies out

 private:
  std::vector<Region> regions_;
};

class FencedBackend final : public Backend {
 public:
  explicit FencedBackend(ThreadPool& pool) : cpu_(make_cpu_backend(pool)) {}
  const char* name() const override { return "fenced"; }
  std::unique_ptr<BackendWorkspace> make_workspace() override {
    auto w = std::make_unique<FencedWorkspace>();
    ws_ = w.get();
    return w;
  }
  void matmul(const WeightView& w, const float* x, int64_t m, float* y) override {
    cpu_->matmul(w, r(x, m * w.n_in), m, r(y, m * w.n_out));
  }
  void get_rows(const WeightView& w, const int32_t* ids, int64_t m, float* out) override {
    cpu_->get_rows(w, ids, m, r(out, m * w.n_in));
  }
  void rms_norm(const float* x, const float* weight, int64_t m, int64_t n, float eps, float* y) override {
    cpu_->rms_norm(r(x, m * n), weight, m, n, eps, r(y, m * n));
  }
  void rope(float* x, int64_t m, int n_heads, int head_dim, const int32_t* pos, const RopeParams& p) override {
    cpu_->rope(r(x, m * n_heads * head_dim), m, n_heads, head_dim, pos, p);
  }
  void swiglu(const float* g, const float* u, float* out, int64_t n) override {
    cpu_->swiglu(r(g, n), r(u, n), r(out, n), n);
  }
  void add(float* x, const float* y, int64_t n) override { cpu_->add(r(x, n), r(y, n), n); }
  void geglu(const float* g, const float* u, float* out, int64_t n) override {
    cpu_->geglu(r(g, n), r(u, n), r(out, n), n);
  }
  void add_bias(float* x, const float* bias, int64_t m, int64_t n) override { cpu_->add_bias(r(x, m * n), bias, m, n); }
  void scale(float* x, int64_t n, float s) override { cpu_->scale(r(x, n), n, s); }
  void softcap(float* x, int64_t n, float cap) override { cpu_->softcap(r(x, n), n, cap); }
  void permute_cols(const float* x, int64_t m, int64_t n, const int32_t* perm, float* out) override {
    cpu_->permute_cols(r(x, m * n), m, n, perm, r(out, m * n));
  }
  void gather_rows(const float* x, const int32_t* rows, int64_t n_rows, int64_t n, float* out) override {
    int32_t mx = 0;
    for (int64_t j = 0; j < n_rows; ++j) mx = std::max(mx, rows[j]);  // host metadata: readable
    cpu_->gather_rows(r(x, (mx + 1) * n), rows, n_rows, n, r(out, n_rows * n));
  }
  void scatter_add_rows(float* acc, const int32_t* rows, const float* w, const float* y, int64_t n_rows,
                        int64_t n) override {
    int32_t mx = 0;
    for (int64_t j = 0; j < n_rows; ++j) mx = std::max(mx, rows[j]);
    cpu_->scatter_add_rows(r(acc, (mx + 1) * n), rows, w, r(y, n_rows * n), n_rows, n);
  }
  void copy(float* dst, const float* src, int64_t n) override { cpu_->copy(r(dst, n), r(src, n), n); }
  void zero(float* x, int64_t n) override { cpu_->zero(r(x, n), n); }
  std::unique_ptr<KvMemory> make_kv_memory(const KvLayout& l, int n_blocks, KvTier tier) override {
    return cpu_->make_kv_memory(l, n_blocks, tier);
  }
  void kv_write(KvMemory& kv, int layer, const float* k, const float* v, const AttnBatch& b) override {
    const int64_t n = b.n_tokens * kv.layout().kv_dim();
    cpu_->kv_write(kv, layer, r(k, n), r(v, n), b);
  }
  void attention(const float* q, const KvMemory& kv, int layer, const AttnBatch& b, int n_head, float scale,
                 float* out) override {
    const int64_t n = b.n_tokens * n_head * kv.layout().head_dim;
    cpu_->attention(r(q, n), kv, layer, b, n_head, scale, r(out, n));
  }
  FencedWorkspace* ws_ = nullptr;

 private:
  template <typename T>
  T* r(T* p, int64_t n) {
    REQUIRE(ws_);
    float* q = ws_->real(p, static_cast<size_t>(n) * sizeof(float));
    if (!q) FAIL("an op was handed host memory (or a range past its buffer) where backend memory is due");
    return const_cast<T*>(q);
  }
  std::unique_ptr<Backend> cpu_;
};

// Logits of one batch (two sequences: a prompt of 6 tokens and one of 3,
// every row's logits) through backend `be`.
std::vector<float> batch_logits(const Model& m, Backend& be, Workspace& ws) {
  KvLayout l = m.kv_layout();
  l.block_size = 4;
  l.n_blocks = 16;
  KvCache kv(l, [&](const KvLayout& L, int n, KvTier t) { return be.make_kv_memory(L, n, t); });
  Batch b;
  const int s0 = kv.add_sequence(), s1 = kv.add_sequence();
  REQUIRE(kv.reserve(s0, 6));
  REQUIRE(kv.reserve(s1, 3));
  for (int i = 0; i < 6; ++i) b.add(1 + (i * 7) % 50, i, s0, true);
  for (int i = 0; i < 3; ++i) b.add(2 + (i * 5) % 50, i, s1, i != 1);
  std::vector<float> logits(b.logit_rows.size() * static_cast<size_t>(m.config().n_vocab));
  m.forward(b, kv, be, ws, logits.data());
  return logits;
}

}  // namespace

TEST_CASE("backend contract: model code never touches activations on the host", "[backend][contract]") {
  const std::string dir = infer_test::temp_dir();
  ThreadPool pool(1);
  // Each architecture's particulars: biases (qwen2), q/k norms (qwen3), fused
  // tensors (phi3), embedding scale and GELU (gemma), soft-caps and post
  // norms (gemma2), Mixtral's experts (routing on the host).
  for (const char* preset : {"qwen2.5-0.5b", "qwen3-0.6b", "phi3-mini", "gemma-2b", "gemma2-2b", "mixtral-mini"}) {
    INFO(preset);
    SynthPreset p = *find_synth_preset(preset);
    p.n_embd = 64, p.n_layer = 2, p.n_head = 4, p.n_head_kv = 2, p.n_ff = 96, p.n_vocab = 300, p.n_ctx = 64;
    p.head_dim = 0;
    if (p.n_expert) p.n_expert = 4, p.n_expert_used = 2;
    p.random_norms = true;
    const std::string path = dir + "/contract-" + preset + ".gguf";
    SynthOptions o;
    o.type = DType::F32;
    o.n_threads = 1;
    write_synth_model(p, path, o);
    std::unique_ptr<Model> m = Model::load(path);
    std::unique_ptr<Backend> cpu = make_cpu_backend(pool);
    Workspace ws_cpu;
    const std::vector<float> want = batch_logits(*m, *cpu, ws_cpu);
    // The CPU's edges are hand-offs: the logits are written where the host reads them.
    float host[4];
    CHECK(ws_cpu.on(*cpu).output(kSlotLogits, host, sizeof host) == host);

    FencedBackend fenced(pool);
    Workspace ws;
    const std::vector<float> got = batch_logits(*m, fenced, ws);
    REQUIRE(fenced.ws_);
    CHECK(fenced.ws_->stray == 0);
    CHECK(fenced.ws_->downloads == (p.n_expert ? 1 + p.n_layer : 1));  // logits (+ each layer's router logits)
    REQUIRE(got.size() == want.size());
    CHECK(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)) == 0);
  }
}
