// A measuring tool for state-space models in the engine (bench/ssm_prefix.sh
// runs it on a synthetic mamba-130m):
//   ttft    time to first token of a request that shares a P-token prefix
//           with an earlier one (16 tokens of its own after it), prefix
//           caching on against off; the median of R fresh engines each;
//   memory  the KV blocks (K/V and recurrent state) one sequence holds while
//           it decodes after a prompt of N tokens, in blocks and bytes;
//   spec    decode tokens per second of a repetitive prompt, plain against
//           n-gram speculation, and the positions recomputed per verify step
//           (the rollback's cost).
// usage: infer_ssm_prefix MODEL ttft THREADS PREFIX REPEATS
//        infer_ssm_prefix MODEL memory THREADS N [N...]
//        infer_ssm_prefix MODEL spec THREADS TOKENS
//        infer_ssm_prefix MODEL synth PRESET f32|f16   (writes the synthetic model first)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "model/model.h"
#include "tools/synth.h"

using namespace infer;

namespace {

std::vector<int32_t> random_tokens(int n, int32_t n_vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  const int32_t lo = std::min<int32_t>(259, n_vocab / 2);
  std::vector<int32_t> t;
  for (int i = 0; i < n; ++i) t.push_back(lo + static_cast<int32_t>(rng() % static_cast<uint32_t>(n_vocab - lo)));
  return t;
}

RequestParams greedy(std::vector<int32_t> prompt, int n) {
  RequestParams rp;
  rp.prompt = std::move(prompt);
  rp.max_tokens = n;
  rp.sampling.temperature = 0;
  rp.ignore_eos = true;
  return rp;
}

double ms_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

EngineParams params(int threads, int n_ctx) {
  EngineParams ep;
  ep.n_threads = threads;
  ep.n_ctx = n_ctx;
  ep.max_seqs = 1;
  ep.max_batch_tokens = 512;
  return ep;
}

void ttft(const Model& m, int threads, int prefix_len, int repeats) {
  const int32_t nv = m.config().n_vocab;
  for (bool caching : {true, false}) {
    std::vector<double> t;
    uint64_t hit = 0;
    for (int r = 0; r < repeats; ++r) {
      EngineParams ep = params(threads, prefix_len + 64);
      ep.prefix_caching = caching;
      Engine e(m, ep);
      const std::vector<int32_t> prefix = random_tokens(prefix_len, nv, 1 + r);
      std::vector<int32_t> a = prefix, b = prefix;
      for (int32_t x : random_tokens(16, nv, 100 + r)) a.push_back(x);
      for (int32_t x : random_tokens(16, nv, 200 + r)) b.push_back(x);
      e.submit(greedy(a, 1));
      e.run();
      const uint64_t before = e.stats().kv.prefix_hit_tokens;
      auto req = e.submit(greedy(b, 1));
      e.run();
      hit = e.stats().kv.prefix_hit_tokens - before;
      t.push_back(ms_between(req->times().submit, req->times().first_token));
    }
    std::sort(t.begin(), t.end());
    std::printf("ttft prefix=%d caching=%s: median %.1f ms (min %.1f, max %.1f; %d runs), prefix hit %llu tokens\n",
                prefix_len, caching ? "on " : "off", t[t.size() / 2], t.front(), t.back(), repeats,
                static_cast<unsigned long long>(hit));
  }
}

void memory(const Model& m, int threads, const std::vector<int>& lens) {
  for (int n : lens) {
    EngineParams ep = params(threads, n + 64);
    ep.prefix_caching = false;  // cached blocks would stay (as free ones) and blur nothing, but keep it plain
    Engine e(m, ep);
    auto r = e.submit(greedy(random_tokens(n, m.config().n_vocab, 7), 8));
    int most = 0;
    const auto t0 = Clock::now();
    while (e.step() > 0)
      if (r->n_generated() > 0) most = std::max(most, e.kv().n_blocks_used());
    const double s = ms_between(t0, Clock::now()) / 1000;
    const uint64_t per_block = e.kv_plan().block_bytes();
    std::printf(
        "memory context=%d: %d blocks held while decoding = %llu bytes (%.2f MiB; block %llu bytes, of which state %llu); "
        "the plan's blocks_held(%d) = %lld; run %.1f s\n",
        n, most, static_cast<unsigned long long>(most * per_block), most * per_block / 1048576.0,
        static_cast<unsigned long long>(per_block), static_cast<unsigned long long>(e.kv().layout().state_bytes()), n,
        static_cast<long long>(e.kv_plan().blocks_held(n)), s);
  }
}

void spec(const Model& m, int threads, int n) {
  std::vector<int32_t> unit = random_tokens(9, m.config().n_vocab, 3), prompt;
  while (prompt.size() < 200) prompt.push_back(unit[prompt.size() % unit.size()]);
  for (SpecMethod method : {SpecMethod::None, SpecMethod::Ngram}) {
    EngineParams ep = params(threads, 1024);
    ep.spec = method;
    Engine e(m, ep);
    auto r = e.submit(greedy(prompt, n));
    e.run();
    const double ms = ms_between(r->times().first_token, r->times().last_token);
    const EngineStats st = e.stats();
    std::printf(
        "spec=%s: %d tokens, decode %.1f tok/s, drafted %llu accepted %llu in %llu verify steps, recomputed %llu "
        "positions (%.2f per verify step)\n",
        method == SpecMethod::None ? "none " : "ngram", r->n_generated(), (r->n_generated() - 1) / (ms / 1000),
        static_cast<unsigned long long>(st.spec.drafted), static_cast<unsigned long long>(st.spec.accepted),
        static_cast<unsigned long long>(st.spec.steps), static_cast<unsigned long long>(st.n_spec_recomputed),
        st.spec.steps ? static_cast<double>(st.n_spec_recomputed) / st.spec.steps : 0.0);
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: %s MODEL ttft|memory|spec THREADS ARGS...\n", argv[0]);
    return 2;
  }
  try {
    const std::string what = argv[2];
    if (what == "synth" && argc >= 5) {
      const SynthPreset* p = find_synth_preset(argv[3]);
      if (!p) throw std::runtime_error(std::string("no synth preset ") + argv[3]);
      SynthOptions o;
      o.type = std::string(argv[4]) == "f16" ? DType::F16 : DType::F32;
      write_synth_model(*p, argv[1], o);
      return 0;
    }
    auto m = Model::load(argv[1]);
    const int threads = std::atoi(argv[3]);
    if (what == "ttft" && argc >= 6) {
      ttft(*m, threads, std::atoi(argv[4]), std::atoi(argv[5]));
    } else if (what == "memory" && argc >= 5) {
      std::vector<int> lens;
      for (int i = 4; i < argc; ++i) lens.push_back(std::atoi(argv[i]));
      memory(*m, threads, lens);
    } else if (what == "spec" && argc >= 5) {
      spec(*m, threads, std::atoi(argv[4]));
    } else {
      std::fprintf(stderr, "bad arguments\n");
      return 2;
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
