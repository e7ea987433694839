// Kernel benchmarks: memory read bandwidth (the decode limit), GEMV per
// weight format over a working set far larger than the caches (so it runs at
// DRAM speed, as decode does), and GEMM (prefill-sized m) per format.
//
//   BM_ReadBandwidth/T      bytes/s of T threads summing a 1 GiB buffer
//   BM_Gemv/FMT/T           decode-like: y = x·Wᵀ (m = 1) through enough
//                           2048 x 5632 matrices to fill ~768 MiB of weights;
//                           bytes_per_second counts weight bytes as stored
//   BM_Gemm/FMT/M/T         one 5632 x 2048 matrix, m rows: GFLOP/s
//   BM_PeakFma, BM_PeakInt8 the f32 FMA and int8 compute peaks GEMM is compared with
//   BM_PeakAmxInt8/K/T      AMX tile multiplies (tdpbssd, 16 x 16 x K), K = 64 (full
//                           tiles) or 32 (one 32-value block, as the block-format kernels)
//
// The ISA is the best the CPU has; INFER_CPU_ISA=avx2 (or scalar) caps it.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdlib>
#include <immintrin.h>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <vector>

#include "core/backend.h"
#include "core/fp16.h"
#include "core/threadpool.h"
#include "cpu/isa.h"
#include "cpu/kernels.h"
#include "cpu/matmul.h"
#include "cpu/onednn_matmul.h"
#include "quant/formats.h"

using namespace infer;

namespace {

// Reads a buffer far larger than the caches with every thread of the pool:
// bytes/s of this loop is the read bandwidth decode is bounded by. Range 1 is
// the software-prefetch distance in bytes (0: none): one core alone cannot
// keep enough line fills in flight, so the best of these is the machine's
// read bandwidth (the GEMV kernels prefetch the same way).
#if defined(__x86_64__)
__attribute__((target("avx2"))) int64_t sum_bytes(const uint8_t* p, size_t n, int pf) {
  __m256i a = _mm256_setzero_si256(), b = a, c = a, d = a;
  for (size_t i = 0; i + 128 <= n; i += 128) {
    if (pf) _mm_prefetch(reinterpret_cast<const char*>(p + i) + pf, _MM_HINT_T0);
    a = _mm256_add_epi64(a, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i)));
    b = _mm256_add_epi64(b, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i + 32)));
    c = _mm256_add_epi64(c, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i + 64)));
    d = _mm256_add_epi64(d, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i + 96)));
  }
  a = _mm256_add_epi64(_mm256_add_epi64(a, b), _mm256_add_epi64(c, d));
  return _mm256_extract_epi64(a, 0) + _mm256_extract_epi64(a, 2);
}
#else
int64_t sum_bytes(const uint8_t* p, size_t n, int) {
  int64_t s = 0;
  for (size_t i = 0; i < n; i += 8) s += p[i];
  return s;
}
#endif

void BM_ReadBandwidth(benchmark::State& state) {
  const int threads = static_cast<int>(state.range(0));
  const int pf = static_cast<int>(state.range(1));
  const size_t n = size_t(1024) << 20;  // 1 GiB
  std::unique_ptr<uint8_t, void (*)(void*)> buf(static_cast<uint8_t*>(std::aligned_alloc(64, n)), std::free);
  std::memset(buf.get(), 1, n);
  ThreadPool pool(threads);
  for (auto _ : state) {
    std::vector<int64_t> part(threads);
    pool.run([&](int tid, int nth) {
      const size_t b = n / 64 * tid / nth * 64, e = n / 64 * (tid + 1) / nth * 64;
      part[tid] = sum_bytes(buf.get() + b, e - b, pf);
    });
    benchmark::DoNotOptimize(part.data());
  }
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(n));
}
BENCHMARK(BM_ReadBandwidth)->ArgsProduct({{1, 2}, {0, 1024, 4096, 8192, 16384}})->Unit(benchmark::kMillisecond)->UseRealTime();

// The compute peak the GEMM figures are compared with: per thread, a loop of
// 12 independent accumulator chains (enough to cover the instructions'
// latency on two ports), counting 2 operations per multiply-add.
//   BM_PeakFma/ISA/T    f32 FMA: ISA 0 = AVX2 (8 lanes), 1 = AVX-512 (16 lanes)
//   BM_PeakInt8/ISA/T   int8 multiply-adds: 0 = AVX2 vpmaddubsw + vpmaddwd +
//                       vpaddd (the no-VNNI path), 1 = AVX-512-VNNI vpdpbusd
#if defined(__x86_64__)
__attribute__((target("avx2,fma"))) float fma_loop_avx2(int64_t iters) {
  __m256 a[12];
  const __m256 m = _mm256_set1_ps(0.999f), c = _mm256_set1_ps(0.001f);
  for (int j = 0; j < 12; ++j) a[j] = _mm256_set1_ps(static_cast<float>(j));
  for (int64_t i = 0; i < iters; ++i)
    for (int j = 0; j < 12; ++j) a[j] = _mm256_fmadd_ps(a[j], m, c);
  for (int j = 1; j < 12; ++j) a[0] = _mm256_add_ps(a[0], a[j]);
  return _mm256_cvtss_f32(a[0]);
}
__attribute__((target("avx512f"))) float fma_loop_avx512(int64_t iters) {
  __m512 a[12];
  const __m512 m = _mm512_set1_ps(0.999f), c = _mm512_set1_ps(0.001f);
  for (int j = 0; j < 12; ++j) a[j] = _mm512_set1_ps(static_cast<float>(j));
  for (int64_t i = 0; i < iters; ++i)
    for (int j = 0; j < 12; ++j) a[j] = _mm512_fmadd_ps(a[j], m, c);
  for (int j = 1; j < 12; ++j) a[0] = _mm512_add_ps(a[0], a[j]);
  return _mm512_reduce_add_ps(a[0]);
}
__attribute__((target("avx2"))) int32_t int8_loop_avx2(int64_t iters) {
  __m256i a[12];
  const __m256i u = _mm256_set1_epi8(3), s8 = _mm256_set1_epi8(-2), ones = _mm256_set1_epi16(1);
  for (int j = 0; j < 12; ++j) a[j] = _mm256_set1_epi32(j);
  for (int64_t i = 0; i < iters; ++i)
    for (int j = 0; j < 12; ++j) a[j] = _mm256_add_epi32(a[j], _mm256_madd_epi16(_mm256_maddubs_epi16(u, s8), ones));
  for (int j = 1; j < 12; ++j) a[0] = _mm256_add_epi32(a[0], a[j]);
  return _mm256_extract_epi32(a[0], 0);
}
__attribute__((target("avx512f,avx512bw,avx512vnni"))) int32_t int8_loop_vnni(int64_t iters) {
  __m512i a[12];
  const __m512i u = _mm512_set1_epi8(3), s8 = _mm512_set1_epi8(-2);
  for (int j = 0; j < 12; ++j) a[j] = _mm512_set1_epi32(j);
  for (int64_t i = 0; i < iters; ++i)
    for (int j = 0; j < 12; ++j) a[j] = _mm512_dpbusd_epi32(a[j], u, s8);
  for (int j = 1; j < 12; ++j) a[0] = _mm512_add_epi32(a[0], a[j]);
  return _mm512_reduce_add_epi32(a[0]);
}

void peak_body(benchmark::State& state, double ops_per_iter, const std::function<double(int64_t)>& loop) {
  const int threads = static_cast<int>(state.range(1));
  const int64_t iters = 1 << 22;
  ThreadPool pool(threads);
  std::vector<double> sink(threads);
  for (auto _ : state) {
    pool.run([&](int tid, int) { sink[tid] = loop(iters); });
    benchmark::DoNotOptimize(sink.data());
  }
  state.counters["GOP/s"] = benchmark::Counter(ops_per_iter * iters * threads * state.iterations(),
                                               benchmark::Counter::kIsRate, benchmark::Counter::kIs1000);
}

void BM_PeakFma(benchmark::State& state) {
  const bool z = state.range(0) == 1;
  if (z && cpu::detected_isa() < cpu::Isa::Avx512) return state.SkipWithError("no AVX-512");
  // 12 FMAs of 8 or 16 lanes, 2 flops each.
  peak_body(state, 12.0 * (z ? 16 : 8) * 2, [z](int64_t n) { return z ? fma_loop_avx512(n) : fma_loop_avx2(n); });
}
BENCHMARK(BM_PeakFma)->ArgsProduct({{0, 1}, {1, 2}})->UseRealTime();

void BM_PeakInt8(benchmark::State& state) {
  const bool z = state.range(0) == 1;
  if (z && cpu::detected_isa() < cpu::Isa::Avx512) return state.SkipWithError("no AVX-512-VNNI");
  // 12 instructions of 32 (AVX2) or 64 (VNNI) u8 x s8 multiply-adds, 2 ops each.
  peak_body(state, 12.0 * (z ? 64 : 32) * 2, [z](int64_t n) { return double(z ? int8_loop_vnni(n) : int8_loop_avx2(n)); });
}
BENCHMARK(BM_PeakInt8)->ArgsProduct({{0, 1}, {1, 2}})->UseRealTime();

// 4 independent 16 x 16 int32 accumulators, A and B tiles of K bytes per row.
int32_t amx_loop(int64_t iters, int k) {
  struct alignas(64) {
    uint8_t palette = 1, start_row = 0, reserved[14] = {};
    uint16_t colsb[16] = {};
    uint8_t rows[16] = {};
  } cfg;
  for (int t = 0; t < 4; ++t) {
    cfg.rows[t] = 16;
    cfg.colsb[t] = 64;
  }
  cfg.rows[4] = 16;
  cfg.colsb[4] = static_cast<uint16_t>(k);
  cfg.rows[6] = static_cast<uint8_t>(k / 4);
  cfg.colsb[6] = 64;
  alignas(64) int8_t a[16 * 64], b[16 * 64];
  alignas(64) int32_t c[16 * 16];
  std::memset(a, 1, sizeof a);
  std::memset(b, 2, sizeof b);
  __asm__ volatile("ldtilecfg %0" ::"m"(cfg));
  __asm__ volatile("tileloadd (%0,%1,1), %%tmm4" ::"r"(a), "r"(64L) : "memory");
  __asm__ volatile("tileloadd (%0,%1,1), %%tmm6" ::"r"(b), "r"(64L) : "memory");
  __asm__ volatile("tilezero %%tmm0\n\ttilezero %%tmm1\n\ttilezero %%tmm2\n\ttilezero %%tmm3" ::);
  for (int64_t i = 0; i < iters; ++i)
    __asm__ volatile(
        "tdpbssd %%tmm6, %%tmm4, %%tmm0\n\ttdpbssd %%tmm6, %%tmm4, %%tmm1\n\t"
        "tdpbssd %%tmm6, %%tmm4, %%tmm2\n\ttdpbssd %%tmm6, %%tmm4, %%tmm3" ::);
  __asm__ volatile("tilestored %%tmm0, (%0,%1,1)" ::"r"(c), "r"(64L) : "memory");
  __asm__ volatile("tilerelease" ::);
  return c[0];
}

void BM_PeakAmxInt8(benchmark::State& state) {
  if (cpu::detected_isa() < cpu::Isa::Amx) return state.SkipWithError("no usable AMX-INT8");
  const int k = static_cast<int>(state.range(0));
  // 4 tile multiplies of 16 x 16 x K multiply-adds, 2 ops each.
  peak_body(state, 4.0 * 16 * 16 * k * 2 / 16, [k](int64_t n) { return double(amx_loop(n / 16, k)); });  // n / 16 loop trips
}
BENCHMARK(BM_PeakAmxInt8)->ArgsProduct({{64, 32}, {1, 2}})->UseRealTime();
#endif

void BM_DotF32(benchmark::State& state) {
  const int64_t n = state.range(0);
  std::vector<float> a(n, 0.5f), b(n, 0.25f);
  const cpu::IsaKernels& k = cpu::kernels();
  for (auto _ : state) benchmark::DoNotOptimize(k.dot_f32(a.data(), b.data(), n));
  state.SetItemsProcessed(int64_t(state.iterations()) * n);
}
BENCHMARK(BM_DotF32)->Arg(2048)->Arg(5632);

// One quantized matrix with its own cache (repacked panels live there).
struct Matrix {
  DType type;
  int64_t n_in, n_out;
  std::vector<uint8_t> bytes;
  std::vector<float> scale;
  std::unique_ptr<WeightCache> cache = std::make_unique<WeightCache>();
  WeightView view() const {
    WeightView w;
    w.type = type;
    w.n_in = n_in;
    w.n_out = n_out;
    w.data = bytes.data();
    w.row_bytes = type == DType::W8A8 ? size_t(n_in) : dtype_row_bytes(type, n_in);
    w.scale = scale.empty() ? nullptr : scale.data();
    w.cache = cache.get();
    return w;
  }
};

Matrix make_matrix(DType t, int64_t n_in, int64_t n_out) {
  Matrix m{t, n_in, n_out};
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.0f, 0.02f);
  std::vector<float> row(static_cast<size_t>(n_in));
  const size_t rb = t == DType::W8A8 ? size_t(n_in) : dtype_row_bytes(t, n_in);
  m.bytes.resize(rb * n_out);
  if (t == DType::W8A8) m.scale.resize(static_cast<size_t>(n_out));
  // Quantize a few distinct rows and repeat them (quantizing 10^8 values would dominate the run).
  const int64_t distinct = std::min<int64_t>(n_out, 64);
  for (int64_t r = 0; r < n_out; ++r) {
    if (r < distinct) {
      for (auto& v : row) v = nd(rng);
      if (t == DType::W8A8)
        quantize_row_w8a8(row.data(), reinterpret_cast<int8_t*>(m.bytes.data() + r * rb), &m.scale[r], n_in);
      else
        quantize_row(t, row.data(), m.bytes.data() + r * rb, n_in);
    } else {
      std::memcpy(m.bytes.data() + r * rb, m.bytes.data() + (r % distinct) * rb, rb);
      if (t == DType::W8A8) m.scale[r] = m.scale[r % distinct];
    }
  }
  return m;
}

// Copies of one 2048 x 5632 matrix (each with its own cache) filling ~768
// MiB, far beyond the caches; *bytes: one copy's weight bytes.
std::vector<Matrix> weights_768mib(DType t, size_t* bytes) {
  const int64_t n_in = 2048, n_out = 5632;
  const size_t one = (t == DType::W8A8 ? size_t(n_in) : dtype_row_bytes(t, n_in)) * n_out;
  const size_t target = size_t(768) << 20;
  std::vector<Matrix> mats;
  mats.push_back(make_matrix(t, n_in, n_out));
  while (mats.size() * one < target) {
    Matrix c{t, n_in, n_out, mats[0].bytes, mats[0].scale};
    mats.push_back(std::move(c));
  }
  *bytes = one;
  return mats;
}

// Decode-like GEMV over ~768 MiB of weights.
void BM_Gemv(benchmark::State& state, DType t) {
  const int threads = static_cast<int>(state.range(0));
  const int64_t n_in = 2048, n_out = 5632;
  size_t one = 0;
  std::vector<Matrix> mats = weights_768mib(t, &one);
  ThreadPool pool(threads);
  std::vector<float> x(n_in, 0.01f), y(n_out);
  for (auto& m : mats) cpu::matmul(pool, m.view(), x.data(), 1, y.data());  // repack outside the timing
  for (auto _ : state) {
    for (auto& m : mats) cpu::matmul(pool, m.view(), x.data(), 1, y.data());
    benchmark::DoNotOptimize(y.data());
  }
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(one * mats.size()));
}

// A verify-like step: m rows (1 .. 8, a decode step or a speculative verify
// of m - 1 drafted tokens) through ~768 MiB of weights, 2 threads: what m
// rows cost against one when the weights come from memory.
void BM_GemvRows(benchmark::State& state, DType t) {
  const int64_t m = state.range(0);
  const int64_t n_in = 2048, n_out = 5632;
  size_t one = 0;
  std::vector<Matrix> mats = weights_768mib(t, &one);
  ThreadPool pool(2);
  std::mt19937 rng(5);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(m * n_in)), y(static_cast<size_t>(m * n_out));
  for (auto& v : x) v = nd(rng);
  for (auto& mt : mats) cpu::matmul(pool, mt.view(), x.data(), m, y.data());  // repack outside the timing
  for (auto _ : state) {
    for (auto& mt : mats) cpu::matmul(pool, mt.view(), x.data(), m, y.data());
    benchmark::DoNotOptimize(y.data());
  }
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(one * mats.size()));
}
BENCHMARK_CAPTURE(BM_GemvRows, q4_0, DType::Q4_0)->DenseRange(1, 8)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_GemvRows, q8_0, DType::Q8_0)->DenseRange(1, 8)->Unit(benchmark::kMillisecond)->UseRealTime();

void gemm_body(benchmark::State& state, DType t, int64_t m, int threads) {
  const int64_t n_in = 2048, n_out = 5632;
  Matrix mat = make_matrix(t, n_in, n_out);
  ThreadPool pool(threads);
  std::mt19937 rng(3);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(m * n_in)), y(static_cast<size_t>(m * n_out));
  for (auto& v : x) v = nd(rng);
  cpu::matmul(pool, mat.view(), x.data(), m, y.data());
  for (auto _ : state) {
    cpu::matmul(pool, mat.view(), x.data(), m, y.data());
    benchmark::DoNotOptimize(y.data());
  }
  state.counters["GFLOP/s"] = benchmark::Counter(2.0 * m * n_in * n_out * state.iterations(),
                                                 benchmark::Counter::kIsRate, benchmark::Counter::kIs1000);
}

void BM_Gemm(benchmark::State& state, DType t) { gemm_body(state, t, state.range(0), static_cast<int>(state.range(1))); }

// The kernels' compute cost without memory: a 256 x 2048 Q4_0 matrix (288
// KiB, resident in L2) on one thread, per m. Time per 16 x 32 weight block
// of the m rows: what a batched decode step pays per block on top of
// reading the weights.
void BM_GemmL2(benchmark::State& state) {
  const int64_t m = state.range(0), n_in = 2048, n_out = 256;
  Matrix mat = make_matrix(DType::Q4_0, n_in, n_out);
  ThreadPool pool(1);
  std::vector<float> x(static_cast<size_t>(m * n_in), 0.5f), y(static_cast<size_t>(m * n_out));
  for (int64_t i = 0; i < m * n_in; ++i) x[static_cast<size_t>(i)] = static_cast<float>((i * 37) % 101) / 50.0f - 1.0f;
  cpu::matmul(pool, mat.view(), x.data(), m, y.data());
  for (auto _ : state) {
    cpu::matmul(pool, mat.view(), x.data(), m, y.data());
    benchmark::DoNotOptimize(y.data());
  }
  state.counters["ns_per_block"] = benchmark::Counter(static_cast<double>(state.iterations()) * (n_out / 16) * (n_in / 32),
                                                      benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}
BENCHMARK(BM_GemmL2)->Arg(1)->Arg(2)->Arg(4)->Arg(8)->Arg(16)->Arg(32)->Arg(64)->UseRealTime();

// Small matrices (N x N, m rows) on 1 and 2 threads: where splitting a
// matmul between threads stops paying for its synchronization. Small models
// (stories260K: 64 x 64, 172 x 64, 512 x 64) issue dozens of these a step.
void BM_MatmulSmall(benchmark::State& state) {
  const DType t = state.range(0) == 0 ? DType::F32 : DType::Q4_0;
  const int64_t n = state.range(1), m = state.range(2);
  Matrix mat = make_matrix(t, n, n);
  ThreadPool pool(static_cast<int>(state.range(3)));
  std::vector<float> x(static_cast<size_t>(m * n)), y(static_cast<size_t>(m * n));
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>((i * 37) % 101) / 50.0f - 1.0f;
  cpu::matmul(pool, mat.view(), x.data(), m, y.data());
  for (auto _ : state) {
    cpu::matmul(pool, mat.view(), x.data(), m, y.data());
    benchmark::DoNotOptimize(y.data());
  }
  state.counters["MMAC"] = static_cast<double>(m * n * n) / 1e6;
}
BENCHMARK(BM_MatmulSmall)
    ->ArgNames({"q4", "n", "m", "t"})
    ->ArgsProduct({{0, 1}, {64, 128, 256, 512, 1024}, {1, 8}, {1, 2}})
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();

// Our int8 / f32 kernels against oneDNN's, per m (policy 0: ours, 1: oneDNN):
// where the by-shape choice in cpu/onednn_matmul.cpp comes from.
void BM_GemmPolicy(benchmark::State& state, DType t) {
  cpu::set_onednn_policy(static_cast<int>(state.range(1)));
  gemm_body(state, t, state.range(0), static_cast<int>(state.range(2)));
  cpu::set_onednn_policy(-1);
}
BENCHMARK_CAPTURE(BM_GemmPolicy, w8a8, DType::W8A8)
    ->ArgsProduct({{1, 4, 16, 64, 256}, {0, 1}, {2}})->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_GemmPolicy, f32, DType::F32)
    ->ArgsProduct({{1, 4, 16, 64, 256}, {0, 1}, {2}})->Unit(benchmark::kMillisecond)->UseRealTime();

#define FORMAT_BENCH(name, type)                                                                      \
  BENCHMARK_CAPTURE(BM_Gemv, name, type)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime(); \
  BENCHMARK_CAPTURE(BM_Gemm, name, type)->Args({64, 1})->Args({64, 2})->Args({16, 2})->Args({8, 2})->Args({4, 2})->Args({2, 2})->Args({1, 2})->Unit(benchmark::kMillisecond)->UseRealTime();

FORMAT_BENCH(f32, DType::F32)
FORMAT_BENCH(f16, DType::F16)
FORMAT_BENCH(bf16, DType::BF16)
FORMAT_BENCH(q8_0, DType::Q8_0)
FORMAT_BENCH(q4_0, DType::Q4_0)
FORMAT_BENCH(q4_1, DType::Q4_1)
FORMAT_BENCH(q5_0, DType::Q5_0)
FORMAT_BENCH(q5_1, DType::Q5_1)
FORMAT_BENCH(q4_k, DType::Q4_K)
FORMAT_BENCH(q5_k, DType::Q5_K)
FORMAT_BENCH(q6_k, DType::Q6_K)
FORMAT_BENCH(w8a8, DType::W8A8)
FORMAT_BENCH(int4_g128, DType::INT4_G128)
FORMAT_BENCH(int4_g32, DType::INT4_G32)

}  // namespace
