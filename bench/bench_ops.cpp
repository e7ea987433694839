// Benchmarks of the CPU backend's non-matmul ops and of the thread pool:
//
//   BM_PoolRun / BM_PoolParallelFor   cost of an empty job (decode issues
//                                     hundreds per token)
//   BM_AttnDecode                     one query per sequence over a context
//                                     of ctx positions, through the paged KV
//                                     cache in each element type
//   BM_AttnPrefill                    the last n_q positions of one sequence
//   BM_RmsNorm / BM_Rope / BM_Swiglu / BM_Add
//   BM_SsmDecode / BM_SsmPrefill     the state-space layers' conv + scan
//
// Attention shapes: stories260K (head_dim 8, 8 heads over 4 KV heads) and
// TinyLlama (head_dim 64, 32 heads over 4 KV heads).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "core/backend.h"
#include "cpu/cpu_backend.h"
#include "core/threadpool.h"
#include "cpu/attention.h"
#include "cpu/ssm.h"
#include "kv/kv_cache.h"
#include "kv/kv_format.h"

using namespace infer;

namespace {

void BM_PoolRun(benchmark::State& state) {
  ThreadPool pool(static_cast<int>(state.range(0)));
  for (auto _ : state) pool.run([](int, int) {});
}
BENCHMARK(BM_PoolRun)->Arg(1)->Arg(2)->UseRealTime();

void BM_PoolParallelFor(benchmark::State& state) {
  ThreadPool pool(static_cast<int>(state.range(0)));
  std::vector<float> x(4096);
  for (auto _ : state)
    pool.parallel_for(4096, 256, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) x[i] += 1.0f;
    });
  benchmark::DoNotOptimize(x.data());
}
BENCHMARK(BM_PoolParallelFor)->Arg(1)->Arg(2)->UseRealTime();

// Jobs of about 2 microseconds per share (a small decode op), with
// range(1) threads of our own busy-looping meanwhile: 0 is an idle machine,
// 1 on two cores is the oversubscribed case where a worker is often not
// scheduled in time (shares are then run by whoever is).
void BM_PoolRunLoaded(benchmark::State& state) {
  ThreadPool pool(static_cast<int>(state.range(0)));
  std::atomic<bool> stop{false};
  std::vector<std::thread> hogs;
  for (int i = 0; i < state.range(1); ++i)
    hogs.emplace_back([&] {
      volatile uint64_t x = 0;
      while (!stop.load(std::memory_order_relaxed)) x = x + 1;
    });
  std::vector<float> buf(2 * 2048, 1.0f);
  for (auto _ : state) {
    pool.run([&](int tid, int nth) {
      // The same total work (4096 values, 8 passes) whatever the thread count.
      const size_t b = buf.size() * tid / nth, e = buf.size() * (tid + 1) / nth;
      for (int pass = 0; pass < 8; ++pass)
        for (size_t i = b; i < e; ++i) buf[i] = buf[i] * 0.999f + 0.001f;
    });
  }
  stop = true;
  for (auto& h : hogs) h.join();
  benchmark::DoNotOptimize(buf.data());
}
BENCHMARK(BM_PoolRunLoaded)->ArgNames({"t", "hogs"})->Args({1, 0})->Args({2, 0})->Args({1, 1})->Args({2, 1})->UseRealTime();

// A KV cache holding n_seqs sequences of ctx positions of random K/V, and
// the queries of the last n_q positions of each.
struct AttnSetup {
  std::unique_ptr<ThreadPool> pool;
  std::unique_ptr<Backend> be;
  std::unique_ptr<KvCache> kv;
  std::vector<int32_t> pos, slot;
  std::vector<const int32_t*> tables;
  std::vector<float> q, out;
  AttnBatch batch;
  int n_head = 0;
  float scale = 0;
  int64_t scores = 0;  // (query, position) pairs per call, all heads

  AttnSetup(KvType type, int hd, int n_head_, int n_kv, int ctx, int n_seqs, int n_q, int threads) : n_head(n_head_) {
    pool = std::make_unique<ThreadPool>(threads);
    be = make_cpu_backend(*pool);
    KvLayout L;
    L.n_layers = 1;
    L.n_kv_heads = n_kv;
    L.head_dim = hd;
    L.block_size = 16;
    L.n_blocks = n_seqs * ((ctx + 15) / 16) + 1;
    L.type = type;
    Backend* bp = be.get();
    kv = std::make_unique<KvCache>(L, [bp](const KvLayout& l, int n, KvTier t) { return bp->make_kv_memory(l, n, t); });
    std::mt19937 rng(7);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    const int kv_dim = n_kv * hd;
    std::vector<float> k(static_cast<size_t>(ctx) * kv_dim), v(k.size());
    std::vector<int32_t> wpos(ctx), wslot(ctx);
    for (int s = 0; s < n_seqs; ++s) {
      const int sl = kv->add_sequence();
      kv->reserve(sl, ctx);
      for (auto& x : k) x = nd(rng);
      for (auto& x : v) x = nd(rng);
      for (int p = 0; p < ctx; ++p) {
        wpos[p] = p;
        wslot[p] = sl;
      }
      const std::vector<const int32_t*> wt(ctx, kv->block_table(sl).data());
      AttnBatch wb{ctx, wpos.data(), wslot.data(), 0, wt.data()};
      be->kv_write(kv->memory(), 0, k.data(), v.data(), wb);
      for (int i = 0; i < n_q; ++i) {
        pos.push_back(ctx - n_q + i);
        slot.push_back(sl);
        scores += static_cast<int64_t>(ctx - n_q + i + 1) * n_head;
      }
    }
    q.resize(pos.size() * n_head * hd);
    for (auto& x : q) x = nd(rng);
    out.resize(q.size());
    for (int32_t s : slot) tables.push_back(kv->block_table(s).data());
    batch = AttnBatch{static_cast<int64_t>(pos.size()), pos.data(), slot.data(), 0, tables.data()};
    scale = 1.0f / std::sqrt(static_cast<float>(hd));
  }
  void run() { be->attention(q.data(), kv->memory(), 0, batch, n_head, scale, out.data()); }
};

// Args: kv type, head_dim, n_head, n_kv_heads, ctx, n_seqs, threads.
void BM_AttnDecode(benchmark::State& state) {
  AttnSetup s(static_cast<KvType>(state.range(0)), static_cast<int>(state.range(1)), static_cast<int>(state.range(2)),
              static_cast<int>(state.range(3)), static_cast<int>(state.range(4)), static_cast<int>(state.range(5)), 1,
              static_cast<int>(state.range(6)));
  for (auto _ : state) {
    s.run();
    benchmark::DoNotOptimize(s.out.data());
  }
  state.counters["scores/s"] = benchmark::Counter(static_cast<double>(s.scores) * state.iterations(),
                                                  benchmark::Counter::kIsRate);
}

void DecodeArgs(benchmark::internal::Benchmark* b) {
  b->ArgNames({"type", "hd", "heads", "kv", "ctx", "seqs", "t"});
  for (int type : {0, 1, 2}) {
    for (int threads : {1, 2}) {
      // stories260K-like
      for (int ctx : {16, 256, 512}) b->Args({type, 8, 8, 4, ctx, 1, threads});
      b->Args({type, 8, 8, 4, 256, 16, threads});
      // TinyLlama-like
      for (int ctx : {16, 256, 4096}) b->Args({type, 64, 32, 4, ctx, 1, threads});
      b->Args({type, 64, 32, 4, 256, 16, threads});
      // Multi-query (one KV head): long contexts need the KV split.
      b->Args({type, 128, 8, 1, 4096, 1, threads});
    }
  }
}
BENCHMARK(BM_AttnDecode)->Apply(DecodeArgs)->UseRealTime()->Unit(benchmark::kMicrosecond);

// Args: kv type, head_dim, n_head, n_kv_heads, ctx, n_q, threads.
void BM_AttnPrefill(benchmark::State& state) {
  AttnSetup s(static_cast<KvType>(state.range(0)), static_cast<int>(state.range(1)), static_cast<int>(state.range(2)),
              static_cast<int>(state.range(3)), static_cast<int>(state.range(4)), 1, static_cast<int>(state.range(5)),
              static_cast<int>(state.range(6)));
  for (auto _ : state) {
    s.run();
    benchmark::DoNotOptimize(s.out.data());
  }
  state.counters["scores/s"] = benchmark::Counter(static_cast<double>(s.scores) * state.iterations(),
                                                  benchmark::Counter::kIsRate);
}
BENCHMARK(BM_AttnPrefill)
    ->ArgNames({"type", "hd", "heads", "kv", "ctx", "nq", "t"})
    ->Args({0, 8, 8, 4, 384, 384, 1})
    ->Args({0, 8, 8, 4, 384, 384, 2})
    ->Args({0, 64, 32, 4, 512, 512, 1})
    ->Args({0, 64, 32, 4, 512, 512, 2})
    ->Args({1, 64, 32, 4, 512, 512, 2})
    ->Args({2, 64, 32, 4, 512, 512, 2})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

// Row and elementwise ops at decode (m = 1) and prefill (m = 64) sizes of a
// TinyLlama layer (n_embd 2048, n_ff 5632, 32 heads of 64).
struct OpsSetup {
  std::unique_ptr<ThreadPool> pool;
  std::unique_ptr<Backend> be;
  explicit OpsSetup(int threads) : pool(std::make_unique<ThreadPool>(threads)), be(make_cpu_backend(*pool)) {}
};

void BM_RmsNorm(benchmark::State& state) {
  const int64_t m = state.range(0), n = 2048;
  OpsSetup s(static_cast<int>(state.range(1)));
  std::vector<float> x(m * n, 0.5f), w(n, 1.0f), y(m * n);
  for (auto _ : state) {
    s.be->rms_norm(x.data(), w.data(), m, n, 1e-5f, y.data());
    benchmark::DoNotOptimize(y.data());
  }
  state.SetItemsProcessed(state.iterations() * m * n);
}
BENCHMARK(BM_RmsNorm)->Args({1, 1})->Args({64, 1})->Args({64, 2})->UseRealTime();

void BM_Rope(benchmark::State& state) {
  const int64_t m = state.range(0);
  OpsSetup s(static_cast<int>(state.range(1)));
  const int n_heads = 32, hd = 64;
  std::vector<float> x(m * n_heads * hd, 0.5f), inv(hd / 2);
  for (int i = 0; i < hd / 2; ++i) inv[i] = 1.0f / std::pow(10000.0f, 2.0f * i / hd);
  std::vector<int32_t> pos(m);
  for (int64_t i = 0; i < m; ++i) pos[i] = static_cast<int32_t>(100 + i);
  RopeParams rp{hd, false, inv.data(), 1.0f};
  for (auto _ : state) {
    s.be->rope(x.data(), m, n_heads, hd, pos.data(), rp);
    benchmark::DoNotOptimize(x.data());
  }
  state.SetItemsProcessed(state.iterations() * m * n_heads * hd);
}
BENCHMARK(BM_Rope)->Args({1, 1})->Args({64, 1})->Args({64, 2})->UseRealTime();

void BM_Swiglu(benchmark::State& state) {
  const int64_t n = state.range(0) * 5632;
  OpsSetup s(static_cast<int>(state.range(1)));
  std::vector<float> g(n), u(n, 0.5f), o(n);
  for (int64_t i = 0; i < n; ++i) g[i] = static_cast<float>(i % 200) * 0.05f - 5.0f;
  for (auto _ : state) {
    s.be->swiglu(g.data(), u.data(), o.data(), n);
    benchmark::DoNotOptimize(o.data());
  }
  state.SetItemsProcessed(state.iterations() * n);
}
BENCHMARK(BM_Swiglu)->Args({1, 1})->Args({64, 1})->Args({64, 2})->UseRealTime();

void BM_Add(benchmark::State& state) {
  const int64_t n = state.range(0) * 2048;
  OpsSetup s(static_cast<int>(state.range(1)));
  std::vector<float> x(n, 0.0f), y(n, 1e-3f);
  for (auto _ : state) {
    s.be->add(x.data(), y.data(), n);
    benchmark::DoNotOptimize(x.data());
  }
  state.SetItemsProcessed(state.iterations() * n);
}
BENCHMARK(BM_Add)->Args({1, 1})->Args({64, 1})->Args({64, 2})->UseRealTime();

// ---- state-space layers (cpu/ssm.cpp) ----
//
//   BM_SsmDecode    conv + scan of one row for each of `seqs` sequences
//   BM_SsmPrefill   conv + scan of 512 rows of one sequence from position 0
//
// at the mamba-130m shape (shape 0: d_inner 1536, d_state 16, A per state)
// and the mamba2-130m shape (shape 1: 24 heads of 64, d_state 128, 1 group,
// conv over x, B and C), blocks of 16 positions; impl 0 is the first plain
// version (the lead's, kept here as the baseline: sequential per sequence,
// scalar), impl 1 the backend's with the recurrence forced, impl 2 the
// backend's with the SSD form of Mamba-2 scans forced on (runs of >= 2 rows;
// shape 1 only, shape 0 has A per state), impl 3 the backend's as it
// chooses (the ISA's threshold, cpu/ssm.h). INFER_CPU_ISA=avx2 measures the
// AVX2 kernels on an AVX-512 machine. BM_SsmPrefillBlock: shape 1, impl 1/2,
// blocks of 16, 64 or 256 positions (the SSD chunk is the run within a
// block, at most 64 rows). ns_per_tok: nanoseconds per row per layer.
namespace plain {

inline float softplus(float v) { return v > 20.0f ? v : std::log1p(std::exp(v)); }
inline float silu(float v) { return v / (1.0f + std::exp(-v)); }

void ssm_conv(ThreadPool& pool, HostKvMemory& kv, int layer, const SsmBatch& b, const float* x, int64_t x_stride,
              int64_t channels, int d_conv, const float* w, const float* bias, float* out) {
  const int k1 = d_conv - 1, bs = kv.layout().block_size;
  pool.parallel_for(channels, 64, [&](int64_t c0, int64_t c1) {
    std::vector<float> win(static_cast<size_t>(d_conv));
    for (int i = 0; i < b.n_seqs; ++i) {
      const int64_t p0 = b.pos0[i], n = b.n_rows[i], r0 = b.row0[i];
      const float* src = p0 > 0 ? kv.ssm_state(layer, b.table[i][(p0 - 1) / bs]) : nullptr;
      for (int64_t c = c0; c < c1; ++c) {
        for (int k = 0; k < k1; ++k) win[k] = src ? src[static_cast<size_t>(k) * channels + c] : 0.0f;
        for (int64_t t = 0; t < n; ++t) {
          const int64_t r = r0 + t;
          win[k1] = x[r * x_stride + c];
          float s = bias ? bias[c] : 0.0f;
          for (int k = 0; k < d_conv; ++k) s += w[c * d_conv + k] * win[k];
          out[r * channels + c] = silu(s);
          for (int k = 0; k < k1; ++k) win[k] = win[k + 1];
          const int64_t p = p0 + t;
          if ((p + 1) % bs == 0 || t == n - 1) {
            float* dst = kv.ssm_state(layer, b.table[i][p / bs]);
            for (int k = 0; k < k1; ++k) dst[static_cast<size_t>(k) * channels + c] = win[k];
          }
        }
      }
    }
  });
}

void ssm_scan(ThreadPool& pool, HostKvMemory& kv, int layer, const SsmBatch& b, const SsmScanParams& p) {
  const int64_t H = p.n_head, P = p.head_dim, N = p.d_state, G = p.n_group;
  const int bs = kv.layout().block_size;
  const int64_t conv = kv.layout().ssm_conv_elems, hpg = H / G;
  pool.parallel_for(H, 4, [&](int64_t h0, int64_t h1) {
    std::vector<float> st(static_cast<size_t>(P * N)), dA(static_cast<size_t>(N));
    for (int i = 0; i < b.n_seqs; ++i) {
      const int64_t p0 = b.pos0[i], n = b.n_rows[i], r0 = b.row0[i];
      const float* src = p0 > 0 ? kv.ssm_state(layer, b.table[i][(p0 - 1) / bs]) + conv : nullptr;
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
            float* dst = kv.ssm_state(layer, b.table[i][pos / bs]) + conv;
            std::memcpy(dst + h * P * N, st.data(), sizeof(float) * P * N);
          }
        }
      }
    }
  });
}

}  // namespace plain

struct SsmBench {
  int64_t channels, H, P, N;
  bool a_per_state;
  int d_conv = 4, bs;
  std::unique_ptr<ThreadPool> pool;
  std::unique_ptr<Backend> be;
  std::unique_ptr<HostKvMemory> kv;
  std::vector<float> in, w, bias, A, D, dt_bias, conv_out, y;
  std::vector<std::vector<int32_t>> tables;
  std::vector<const int32_t*> tptr;
  std::vector<int32_t> row0, n_rows, pos0;
  int64_t width, m;
  SsmBatch b;
  SsmScanParams p;

  SsmBench(int shape, int n_seqs, int rows, int pos, int threads, int block_size = 16) : bs(block_size) {
    if (shape == 0) channels = 1536, H = 1536, P = 1, N = 16, a_per_state = true;
    else channels = 1536 + 2 * 128, H = 24, P = 64, N = 128, a_per_state = false;
    pool = std::make_unique<ThreadPool>(threads);
    be = make_cpu_backend(*pool);
    const int blocks_per_seq = (pos + rows + bs - 1) / bs;
    KvLayout l;
    l.block_size = bs;
    l.n_blocks = n_seqs * blocks_per_seq;
    l.n_ssm_layers = 1;
    l.ssm_conv_elems = (d_conv - 1) * channels;
    l.ssm_state_elems = H * P * N;
    kv = std::make_unique<HostKvMemory>(l, l.n_blocks);
    kv->touch(l.n_blocks);
    std::mt19937 rng(1);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    // A row: [conv input | x | z | B | C | dt]; Mamba-2's x, B, C would come
    // from the conv output, random inputs here do as well.
    width = channels + 2 * H * P + 2 * N + H;
    m = static_cast<int64_t>(n_seqs) * rows;
    in.resize(static_cast<size_t>(m * width));
    for (float& v : in) v = u(rng);
    w.resize(static_cast<size_t>(channels * d_conv));
    for (float& v : w) v = 0.5f * u(rng);
    bias.assign(static_cast<size_t>(channels), 0.1f);
    A.resize(static_cast<size_t>(a_per_state ? H * N : H));
    for (float& v : A) v = -std::exp(u(rng));
    D.assign(static_cast<size_t>(H), 1.0f);
    dt_bias.assign(static_cast<size_t>(H), -1.0f);
    conv_out.resize(static_cast<size_t>(m * channels));
    y.resize(static_cast<size_t>(m * H * P));
    for (int i = 0; i < n_seqs; ++i) {
      tables.emplace_back();
      for (int k = 0; k < blocks_per_seq; ++k) tables.back().push_back(i * blocks_per_seq + k);
      row0.push_back(i * rows);
      n_rows.push_back(rows);
      pos0.push_back(pos);
    }
    for (auto& t : tables) tptr.push_back(t.data());
    b = SsmBatch{n_seqs, row0.data(), n_rows.data(), pos0.data(), tptr.data()};
    const int64_t xo = channels, zo = xo + H * P, bo = zo + H * P, co = bo + N, dto = co + N;
    p.n_head = H;
    p.head_dim = P;
    p.d_state = N;
    p.n_group = 1;
    p.x = in.data() + xo;
    p.z = in.data() + zo;
    p.B = in.data() + bo;
    p.C = in.data() + co;
    p.dt = in.data() + dto;
    p.x_stride = p.z_stride = p.b_stride = p.c_stride = p.dt_stride = width;
    p.y = y.data();
    p.dt_bias = dt_bias.data();
    p.A = A.data();
    p.a_per_state = a_per_state;
    p.D = D.data();
  }
  void run(bool fast) {
    if (fast) {
      be->ssm_conv(*kv, 0, b, in.data(), width, channels, d_conv, w.data(), bias.data(), conv_out.data());
      be->ssm_scan(*kv, 0, b, p);
    } else {
      plain::ssm_conv(*pool, *kv, 0, b, in.data(), width, channels, d_conv, w.data(), bias.data(), conv_out.data());
      plain::ssm_scan(*pool, *kv, 0, b, p);
    }
    benchmark::DoNotOptimize(y.data());
  }
};

// Args: shape, sequences, threads, impl.
void BM_SsmDecode(benchmark::State& state) {
  const int n_seqs = static_cast<int>(state.range(1));
  SsmBench s(static_cast<int>(state.range(0)), n_seqs, 1, 100, static_cast<int>(state.range(2)));
  for (auto _ : state) s.run(state.range(3) != 0);
  state.counters["ns_per_tok"] = benchmark::Counter(static_cast<double>(state.iterations()) * n_seqs * 1e-9,
                                                    benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}
BENCHMARK(BM_SsmDecode)
    ->ArgNames({"shape", "seqs", "t", "impl"})
    ->ArgsProduct({{0, 1}, {1, 16}, {1, 2}, {0, 1}})
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);

// Args: shape, threads, impl.
void BM_SsmPrefill(benchmark::State& state) {
  const int rows = 512;
  SsmBench s(static_cast<int>(state.range(0)), 1, rows, 0, static_cast<int>(state.range(1)));
  const int64_t saved = cpu::set_ssd_min_rows(state.range(2) == 2 ? 2 : state.range(2) == 3 ? 0 : INT64_MAX);
  for (auto _ : state) s.run(state.range(2) != 0);
  cpu::set_ssd_min_rows(saved);
  state.counters["ns_per_tok"] = benchmark::Counter(static_cast<double>(state.iterations()) * rows * 1e-9,
                                                    benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}
BENCHMARK(BM_SsmPrefill)
    ->ArgNames({"shape", "t", "impl"})
    ->ArgsProduct({{0, 1}, {1, 2}, {0, 1}})
    ->Args({1, 1, 2})
    ->Args({1, 2, 2})
    ->Args({1, 1, 3})
    ->Args({1, 2, 3})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

// Args: block size, threads, impl (1 recurrence, 2 SSD); shape 1, 512 rows.
void BM_SsmPrefillBlock(benchmark::State& state) {
  const int rows = 512;
  SsmBench s(1, 1, rows, 0, static_cast<int>(state.range(1)), static_cast<int>(state.range(0)));
  const int64_t saved = cpu::set_ssd_min_rows(state.range(2) == 2 ? 2 : INT64_MAX);
  for (auto _ : state) s.run(true);
  cpu::set_ssd_min_rows(saved);
  state.counters["ns_per_tok"] = benchmark::Counter(static_cast<double>(state.iterations()) * rows * 1e-9,
                                                    benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}
BENCHMARK(BM_SsmPrefillBlock)
    ->ArgNames({"bs", "t", "impl"})
    ->ArgsProduct({{16, 64, 256}, {1, 2}, {1, 2}})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

}  // namespace
