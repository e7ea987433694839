// Engine-level benchmarks on the real stories260K model (skipped when
// ../shared is absent): time to first token cold, warm (a long prompt that
// shares all but its last 16 tokens with an earlier one: the prefix cache
// serves the rest), and with prefix caching off (the cache's own overhead on
// a cold request = cold - off). Also the KV bytes per token of each element
// type for stories260K's and TinyLlama's shapes.
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <random>
#include <sys/stat.h>

#include "engine/engine.h"
#include "model/model.h"

using namespace infer;

namespace {

const Model* stories() {
  static std::unique_ptr<Model> m = [] {
    const char* env = std::getenv("INFER_SHARED_DIR");
    const std::string path = std::string(env && *env ? env : INFER_BENCH_SHARED_DEFAULT) + "/models/stories260K.gguf";
    struct stat st{};
    return ::stat(path.c_str(), &st) == 0 ? Model::load(path) : nullptr;
  }();
  return m.get();
}

enum Mode { kCold = 0, kWarm = 1, kCacheOff = 2 };

// TTFT of a prompt of state.range(0) tokens.
void BM_TTFT(benchmark::State& state, Mode mode) {
  const Model* m = stories();
  if (!m) {
    state.SkipWithError("stories260K.gguf not found (set INFER_SHARED_DIR)");
    return;
  }
  const int n = static_cast<int>(state.range(0));
  EngineParams ep;
  ep.n_threads = 2;
  ep.max_seqs = 1;
  ep.n_ctx = 2048;
  ep.max_batch_tokens = 2048;
  ep.prefix_caching = mode != kCacheOff;
  Engine engine(*m, ep);
  std::mt19937 rng(42);
  std::vector<int32_t> prefix = {1};
  for (int i = 1; i < n - 16; ++i) prefix.push_back(3 + static_cast<int32_t>(rng() % 500));
  auto make = [&](bool shared) {
    RequestParams rp;
    if (shared) {
      rp.prompt = prefix;
    } else {
      rp.prompt = {1};
      for (int i = 1; i < n - 16; ++i) rp.prompt.push_back(3 + static_cast<int32_t>(rng() % 500));
    }
    for (int i = 0; i < 16; ++i) rp.prompt.push_back(3 + static_cast<int32_t>(rng() % 500));
    rp.max_tokens = 1;
    rp.sampling.temperature = 0;
    return rp;
  };
  if (mode == kWarm) {  // an earlier request with the same prefix
    engine.submit(make(true));
    engine.run();
  }
  for (auto _ : state) {
    auto r = engine.submit(make(mode == kWarm));
    engine.run();
    const auto& t = r->times();
    state.SetIterationTime(std::chrono::duration<double>(t.first_token - t.submit).count());
    state.counters["cached_tokens"] = r->n_cached();
  }
}
BENCHMARK_CAPTURE(BM_TTFT, cold, kCold)->Arg(256)->Arg(1024)->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_TTFT, warm, kWarm)->Arg(1024)->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_TTFT, cache_off, kCacheOff)->Arg(256)->Arg(1024)->UseManualTime()->Unit(benchmark::kMillisecond);

void BM_KvBytesPerToken(benchmark::State& state) {
  for (auto _ : state) benchmark::DoNotOptimize(state.iterations());
  for (KvType t : {KvType::F32, KvType::F16, KvType::I8}) {
    KvLayout tiny;  // TinyLlama-1.1B: 22 layers, 4 KV heads of 64
    tiny.n_layers = 22;
    tiny.n_kv_heads = 4;
    tiny.head_dim = 64;
    tiny.type = t;
    KvLayout s260k;  // stories260K: 5 layers, 4 KV heads of 8
    s260k.n_layers = 5;
    s260k.n_kv_heads = 4;
    s260k.head_dim = 8;
    s260k.type = t;
    state.counters[std::string("tinyllama_") + kv_type_name(t)] = tiny.bytes_per_token();
    state.counters[std::string("stories260K_") + kv_type_name(t)] = s260k.bytes_per_token();
  }
}
BENCHMARK(BM_KvBytesPerToken)->Iterations(1);

}  // namespace
