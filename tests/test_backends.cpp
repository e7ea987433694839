// The backend factory and load-time weight preparation.
#include "cpu/isa.h"
#include "engine/backends.h"
#include "engine/engine.h"
#include "tools/quantize.h"
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
