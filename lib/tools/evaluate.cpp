#include "tools/evaluate.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <memory>
#include <random>

#include "core/log.h"
#include "engine/engine.h"

namespace infer {

namespace {

// Log-probabilities of every prompt row of each window (row i predicts token i + 1).
std::vector<std::vector<float>> window_logprobs(Engine& engine, const std::vector<std::vector<int32_t>>& windows) {
  std::vector<std::shared_ptr<Request>> reqs;
  for (const auto& win : windows) {
    RequestParams rp;
    rp.prompt = win;
    rp.max_tokens = 0;
    rp.logits = kLogitsPrompt | kLogitsLogprobs;
    reqs.push_back(engine.submit(std::move(rp)));
  }
  engine.run();
  std::vector<std::vector<float>> out;
  for (const auto& r : reqs) {
    if (r->finish_reason() == FinishReason::Error) raise(r->status(), "%s", r->error().c_str());
    out.push_back(r->logits());
  }
  return out;
}

}  // namespace

PerplexityResult perplexity(const Model& model, const std::string& text, int32_t n_ctx, int32_t n_threads,
                            const Model* base) {
  const Tokenizer& tok = model.tokenizer();
  if (n_ctx < 0) raise(Status::InvalidArgument, "n_ctx %d is negative", n_ctx);
  if (n_ctx == 0) n_ctx = std::min(512, model.config().n_ctx_train > 0 ? model.config().n_ctx_train : 512);
  if (n_ctx < 2) raise(Status::InvalidArgument, "n_ctx must be at least 2 to score anything");
  const int32_t bos = tok.vocab().bos;
  if (bos < 0) raise(Status::Unsupported, "the vocabulary has no BOS token to start windows with");
  const int32_t n_vocab = model.config().n_vocab;
  if (base && base->config().n_vocab != n_vocab)
    raise(Status::InvalidArgument, "the base model's vocabulary (%d tokens) differs from the model's (%d)",
          base->config().n_vocab, n_vocab);
  const std::vector<int32_t> ids = tok.encode(text, /*add_bos=*/false);
  if (ids.empty()) raise(Status::InvalidArgument, "the text has no tokens");

  EngineParams ep;
  ep.n_threads = n_threads;
  ep.n_ctx = n_ctx;
  ep.max_seqs = 4;
  Engine engine(model, ep);
  std::unique_ptr<Engine> base_engine;
  if (base) base_engine = std::make_unique<Engine>(*base, ep);

  std::vector<std::vector<int32_t>> windows;
  const size_t window = static_cast<size_t>(n_ctx - 1);
  for (size_t start = 0; start < ids.size(); start += window) {
    std::vector<int32_t> w{bos};
    w.insert(w.end(), ids.begin() + start, ids.begin() + std::min(ids.size(), start + window));
    windows.push_back(std::move(w));
  }
  PerplexityResult res;
  double nll = 0, base_nll = 0, kl = 0;
  int64_t agree = 0;
  // Four windows at a time run concurrently in each engine.
  for (size_t g = 0; g < windows.size(); g += 4) {
    const std::vector<std::vector<int32_t>> group(windows.begin() + g, windows.begin() + std::min(windows.size(), g + 4));
    const auto lp = window_logprobs(engine, group);
    std::vector<std::vector<float>> blp;
    if (base_engine) blp = window_logprobs(*base_engine, group);
    for (size_t w = 0; w < group.size(); ++w) {
      const auto& prompt = group[w];
      for (size_t i = 0; i + 1 < prompt.size(); ++i) {
        const float* a = lp[w].data() + i * n_vocab;
        nll -= a[prompt[i + 1]];
        if (!base_engine) continue;
        const float* b = blp[w].data() + i * n_vocab;
        base_nll -= b[prompt[i + 1]];
        double d = 0;
        for (int32_t j = 0; j < n_vocab; ++j) d += std::exp(static_cast<double>(b[j])) * (b[j] - a[j]);
        kl += std::max(0.0, d);
        agree += (std::max_element(a, a + n_vocab) - a) == (std::max_element(b, b + n_vocab) - b);
      }
      res.n_tokens += static_cast<int64_t>(prompt.size()) - 1;
      ++res.n_chunks;
    }
    // Progress, one debug message a group (the CLI shows it on a terminal).
    log(LogLevel::Debug, "perplexity: %d/%zu windows, perplexity so far %.4f", res.n_chunks, windows.size(),
        std::exp(nll / static_cast<double>(res.n_tokens)));
  }
  res.nll = nll / static_cast<double>(res.n_tokens);
  res.perplexity = std::exp(res.nll);
  if (base_engine) {
    res.kl_divergence = kl / static_cast<double>(res.n_tokens);
    res.top1_agreement = static_cast<double>(agree) / static_cast<double>(res.n_tokens);
    res.base_perplexity = std::exp(base_nll / static_cast<double>(res.n_tokens));
  }
  return res;
}

BenchResult bench(const Model& model, int32_t n_prompt, int32_t n_gen, int32_t batch, int32_t repetitions,
                  EngineParams ep) {
  if (n_prompt < 1 || n_gen < 0 || repetitions < 1 || batch < 1 || batch > 4096)
    raise(Status::InvalidArgument, "bench needs n_prompt >= 1, n_gen >= 0, 1 <= batch <= 4096 and repetitions >= 1");
  // 64-bit: n_prompt and n_gen may be anything up to INT32_MAX.
  const int64_t seq_tokens = static_cast<int64_t>(n_prompt) + n_gen;
  if (seq_tokens + 1 > INT32_MAX)
    raise(Status::InvalidArgument, "bench: n_prompt + n_gen (%lld) is more than a context can hold",
          static_cast<long long>(seq_tokens));
  ep.max_seqs = std::max(ep.max_seqs, batch);
  ep.n_ctx = std::max<int32_t>(ep.n_ctx, static_cast<int32_t>(seq_tokens + 1));
  ep.max_batch_tokens = std::max(ep.max_batch_tokens,
                                 static_cast<int32_t>(std::min<int64_t>(static_cast<int64_t>(n_prompt) * batch, 4096)));
  ep.prefix_caching = false;  // every repetition must compute its prompts
  if (model.tp() && !model.tp()->leader()) {
    // The same engine parameters as rank 0's (they are compared at start).
    follow_engine(model, ep);
    BenchResult none;
    none.n_prompt = n_prompt;
    none.n_gen = n_gen;
    none.n_threads = ep.n_threads;
    none.batch = batch;
    return none;
  }
  Engine engine(model, ep);
  // A sequence that cannot fit the KV pool would only fail after its prompt
  // (n_prompt tokens per sequence) was built: check first.
  const KvLayout& kl = engine.kv().layout();
  const int64_t kv_tokens = static_cast<int64_t>(kl.n_blocks) * kl.block_size;
  if (seq_tokens > kv_tokens)
    raise(Status::InvalidArgument, "bench: n_prompt + n_gen = %lld tokens do not fit the KV cache (%lld tokens)",
          static_cast<long long>(seq_tokens), static_cast<long long>(kv_tokens));
  const int32_t n_vocab = model.config().n_vocab;
  std::mt19937 rng(1234);
  BenchResult best;
  best.n_prompt = n_prompt;
  best.n_gen = n_gen;
  best.n_threads = ep.n_threads;
  best.batch = batch;
  best.prefill_ms = best.decode_ms = INFINITY;
  for (int rep = 0; rep < repetitions; ++rep) {
    std::vector<std::shared_ptr<Request>> rs;
    for (int b = 0; b < batch; ++b) {
      RequestParams rp;
      for (int i = 0; i < n_prompt; ++i) rp.prompt.push_back(static_cast<int32_t>(rng() % n_vocab));
      rp.max_tokens = std::max(1, n_gen);  // the first token marks the end of prefill
      rp.ignore_eos = true;
      rp.sampling.temperature = 0;
      rs.push_back(engine.submit(std::move(rp)));
    }
    const EngineStats s0 = engine.stats();
    const auto start = Clock::now();
    // Prefill: until every sequence has its first token (the engine's
    // figures are split there), then the decode steps.
    auto prefilled = [&] {
      for (auto& r : rs)
        if (!r->finished() && r->n_generated() < 1) return false;
      return true;
    };
    while (!prefilled() && engine.step() > 0) {
    }
    const EngineStats s1 = engine.stats();
    engine.run();
    const EngineStats s2 = engine.stats();
    Clock::time_point first_all = start, last_all = start;
    for (auto& r : rs) {
      if (r->finish_reason() == FinishReason::Error) raise(r->status(), "%s", r->error().c_str());
      first_all = std::max(first_all, r->times().first_token);
      last_all = std::max(last_all, r->times().last_token);
    }
    const double pf = std::chrono::duration<double, std::milli>(first_all - start).count();
    const double dc = std::chrono::duration<double, std::milli>(last_all - first_all).count();
    if (pf < best.prefill_ms) {
      best.prefill_ms = pf;
      best.prefill_comm_ms = (s1.tp_comm_seconds - s0.tp_comm_seconds) * 1000.0;
    }
    if (n_gen > 1 && dc < best.decode_ms) {
      best.decode_ms = dc;
      best.decode_steps = static_cast<int64_t>(s2.n_steps - s1.n_steps);
      best.decode_comm_ms = (s2.tp_comm_seconds - s1.tp_comm_seconds) * 1000.0;
      best.decode_comm_bytes = s2.tp_comm_bytes - s1.tp_comm_bytes;
    }
  }
  best.prefill_tokens_per_s = static_cast<double>(batch) * n_prompt / (best.prefill_ms / 1000.0);
  if (n_gen > 1) {
    best.decode_tokens_per_s = static_cast<double>(batch) * (n_gen - 1) / (best.decode_ms / 1000.0);
  } else {
    best.decode_ms = 0;
  }
  return best;
}

}  // namespace infer
