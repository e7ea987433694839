// Kernel benchmarks: memory read bandwidth (the decode limit), the f32 dot
// product, and matmul per weight format at decode (m = 1) and prefill
// (m = 64) shapes of a TinyLlama-sized layer.
#include <benchmark/benchmark.h>

#include <cstring>
#include <random>
#include <vector>

#include "core/backend.h"
#include "core/fp16.h"
#include "core/threadpool.h"
#include "cpu/kernels.h"

using namespace infer;

namespace {

// Sums a buffer far larger than the caches with every thread of the pool:
// bytes/s of this loop is the read bandwidth decode is bounded by.
void BM_ReadBandwidth(benchmark::State& state) {
  const int threads = static_cast<int>(state.range(0));
  const size_t n = size_t(256) << 20 >> 2;  // 256 MiB of floats
  std::vector<float> buf(n, 1.0f);
  ThreadPool pool(threads);
  const cpu::Kernels& k = cpu::kernels();
  std::vector<float> ones(4096, 1.0f);
  for (auto _ : state) {
    std::vector<float> part(threads);
    pool.run([&](int tid, int nth) {
      const size_t b = n * tid / nth, e = n * (tid + 1) / nth;
      float s = 0;
      for (size_t i = b; i < e; i += 4096) s += k.dot_f32(buf.data() + i, ones.data(), std::min<size_t>(4096, e - i));
      part[tid] = s;
    });
    benchmark::DoNotOptimize(part.data());
  }
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(n * sizeof(float)));
}
BENCHMARK(BM_ReadBandwidth)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_DotF32(benchmark::State& state) {
  const int64_t n = state.range(0);
  std::vector<float> a(n, 0.5f), b(n, 0.25f);
  const cpu::Kernels& k = cpu::kernels();
  for (auto _ : state) benchmark::DoNotOptimize(k.dot_f32(a.data(), b.data(), n));
  state.SetItemsProcessed(int64_t(state.iterations()) * n);
}
BENCHMARK(BM_DotF32)->Arg(2048)->Arg(5632);

// y[m][n_out] = x[m][n_in] · Wᵀ for a 2048 x 2048 weight.
void BM_Matmul(benchmark::State& state, DType type) {
  const int64_t m = state.range(0), threads = state.range(1);
  const int64_t n_in = 2048, n_out = 2048;
  const size_t row_bytes = type == DType::F32 ? n_in * 4 : n_in * 2;
  std::vector<uint8_t> w(row_bytes * n_out);
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> u(-0.05f, 0.05f);
  for (int64_t i = 0; i < n_in * n_out; ++i) {
    const float v = u(rng);
    if (type == DType::F32)
      std::memcpy(&w[i * 4], &v, 4);
    else {
      const uint16_t h = f32_to_fp16(v);
      std::memcpy(&w[i * 2], &h, 2);
    }
  }
  std::vector<float> x(m * n_in, 0.01f), y(m * n_out);
  ThreadPool pool(static_cast<int>(threads));
  auto be = make_cpu_backend(pool);
  WeightView wv{type, n_in, n_out, w.data(), row_bytes};
  for (auto _ : state) {
    be->matmul(wv, x.data(), m, y.data());
    benchmark::DoNotOptimize(y.data());
  }
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(w.size()));
  state.counters["GFLOP/s"] = benchmark::Counter(2.0 * m * n_in * n_out * state.iterations(), benchmark::Counter::kIsRate,
                                                 benchmark::Counter::kIs1000);
}
BENCHMARK_CAPTURE(BM_Matmul, f32, DType::F32)->Args({1, 1})->Args({1, 2})->Args({64, 2})->UseRealTime();
BENCHMARK_CAPTURE(BM_Matmul, f16, DType::F16)->Args({1, 1})->Args({1, 2})->Args({64, 2})->UseRealTime();

}  // namespace
