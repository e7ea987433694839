// Benchmarks of the CPU backend's non-matmul ops and of the thread pool:
//
//   BM_PoolRun / BM_PoolParallelFor   cost of an empty job (decode issues
//                                     hundreds per token)
//   BM_AttnDecode                     one query per sequence over a context
//                                     of ctx positions, through the paged KV
//                                     cache in each element type
//   BM_AttnPrefill                    the last n_q positions of one sequence
//   BM_RmsNorm / BM_Rope / BM_Swiglu / BM_Add
//
// Attention shapes: stories260K (head_dim 8, 8 heads over 4 KV heads) and
// TinyLlama (head_dim 64, 32 heads over 4 KV heads).
#include <benchmark/benchmark.h>

#include <atomic>
#include <cmath>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "core/backend.h"
#include "cpu/cpu_backend.h"
#include "core/threadpool.h"
#include "cpu/attention.h"
#include "kv/kv_cache.h"

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

}  // namespace
