// Speculative decoding inside the engine (n-gram drafts): greedy output is
// the plain greedy output token for token, alone and with several sequences
// speculating in the same step, under preemption and with a tiny KV pool;
// limits, stop strings and cancellation hold; the KV books stay consistent.
#include <catch2/catch.hpp>

#include <cmath>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "engine/engine.h"
#include "test_models.h"

using namespace infer;

namespace {

struct Run {
  std::vector<std::vector<int32_t>> out;
  SpecCounters spec;
  std::vector<FinishReason> reasons;
};

// Greedy (or sampled) continuations of each prompt, all submitted at once.
Run generate(const Model& m, const std::vector<std::string>& prompts, int n, EngineParams ep, float temp = 0,
             const std::vector<std::string>& stops = {}) {
  Engine engine(m, ep);
  std::vector<std::shared_ptr<Request>> rs;
  for (size_t i = 0; i < prompts.size(); ++i) {
    RequestParams rp;
    rp.prompt = m.tokenizer().encode(prompts[i], true);
    rp.max_tokens = n;
    rp.sampling.temperature = temp;
    rp.sampling.seed = 42 + i;
    rp.ignore_eos = true;
    rp.stop = stops;
    rs.push_back(engine.submit(rp));
  }
  engine.run();
  Run r;
  for (auto& q : rs) {
    r.out.emplace_back(q->generated(), q->generated() + q->n_generated());
    r.reasons.push_back(q->finish_reason());
  }
  r.spec = engine.stats().spec;
  engine.kv().check_invariants();
  CHECK(engine.kv().n_blocks_used() == 0);
  return r;
}

const std::vector<std::string> kPrompts = {
    "Once upon a time, there was a little girl named Lily. Lily liked to play. Once upon a time",
    "The cat sat on the mat. The cat sat on the mat. The cat",
    "Tom had a big red ball.",
    "One day, a bird",
};

}  // namespace

TEST_CASE("speculative engine: greedy n-gram speculation gives the plain greedy tokens", "[spec_engine]") {
  NEED_MODEL(model);
  EngineParams plain;
  plain.max_seqs = 1;  // one sequence per step in both runs: m = 1 versus K + 1 rows
  EngineParams spec = plain;
  spec.spec = SpecMethod::Ngram;
  for (int k : {1, 3, 8}) {
    CAPTURE(k);
    spec.spec_k = k;
    const Run a = generate(*model, kPrompts, 80, plain);
    const Run b = generate(*model, kPrompts, 80, spec);
    CHECK(a.spec.drafted == 0);
    CHECK(b.out == a.out);
    CHECK(b.spec.drafted > 0);
    CHECK(b.spec.accepted > 0);  // stories repeat themselves: prompt lookup finds some
    CHECK(b.spec.accepted <= b.spec.drafted);
    for (size_t i = 0; i < a.out.size(); ++i) CHECK(b.out[i].size() == 80);
  }
}

TEST_CASE("speculative engine: many sequences speculate in the same step", "[spec_engine]") {
  NEED_MODEL(model);
  EngineParams plain;
  EngineParams spec;
  spec.spec = SpecMethod::Ngram;
  spec.spec_k = 4;
  spec.spec_max_batch = 0;  // draft whatever the batch size
  const Run a = generate(*model, kPrompts, 64, plain);
  const Run b = generate(*model, kPrompts, 64, spec);
  CHECK(b.out == a.out);
  CHECK(b.spec.drafted > 0);
  // Above spec_max_batch sequences decoding, nothing is drafted.
  spec.spec_max_batch = 2;
  const Run c = generate(*model, kPrompts, 16, spec);
  CHECK(c.spec.drafted < b.spec.drafted);
}

TEST_CASE("speculative engine: a small KV pool, preemption and sampling", "[spec_engine]") {
  NEED_MODEL(model);
  EngineParams plain;
  plain.block_size = 4;
  plain.kv_blocks = 40;  // four sequences of ~100 tokens cannot all fit: preemption
  EngineParams spec = plain;
  spec.spec = SpecMethod::Ngram;
  spec.spec_max_batch = 0;
  const Run a = generate(*model, kPrompts, 64, plain);
  const Run b = generate(*model, kPrompts, 64, spec);
  CHECK(b.out == a.out);
  // Sampling: every request still ends with its token count, reproducibly.
  const Run s1 = generate(*model, kPrompts, 40, spec, 0.8f);
  const Run s2 = generate(*model, kPrompts, 40, spec, 0.8f);
  CHECK(s1.out == s2.out);
  for (const auto& o : s1.out) CHECK(o.size() == 40);
  CHECK(s1.spec.drafted > 0);
}

TEST_CASE("speculative engine: max_tokens, stop strings and the context end are exact", "[spec_engine]") {
  NEED_MODEL(model);
  EngineParams plain;
  EngineParams spec;
  spec.spec = SpecMethod::Ngram;
  spec.spec_k = 8;
  for (int n : {1, 2, 7}) {
    CAPTURE(n);
    const Run a = generate(*model, kPrompts, n, plain);
    const Run b = generate(*model, kPrompts, n, spec);
    CHECK(b.out == a.out);
    for (const auto& o : b.out) CHECK(o.size() == static_cast<size_t>(n));
  }
  const Run a = generate(*model, kPrompts, 64, plain, 0, {"mat", "Lily"});
  const Run b = generate(*model, kPrompts, 64, spec, 0, {"mat", "Lily"});
  CHECK(b.out == a.out);
  CHECK(b.reasons == a.reasons);
  // A context that ends mid-draft.
  plain.n_ctx = 60;
  spec.n_ctx = 60;
  const Run c = generate(*model, kPrompts, 200, plain);
  const Run d = generate(*model, kPrompts, 200, spec);
  CHECK(d.out == c.out);
  CHECK(d.reasons == c.reasons);
}

TEST_CASE("speculative engine: bad speculation parameters are refused", "[spec_engine]") {
  NEED_MODEL(model);
  EngineParams ep;
  ep.spec = SpecMethod::Ngram;
  ep.spec_k = 0;
  REQUIRE_THROWS_AS(Engine(*model, ep), Error);
  ep.spec_k = 33;
  REQUIRE_THROWS_AS(Engine(*model, ep), Error);
  ep.spec_k = 4;
  ep.spec_ngram_min = 3;
  ep.spec_ngram_max = 2;
  REQUIRE_THROWS_AS(Engine(*model, ep), Error);
  ep.spec_ngram_min = 1;
  ep.spec = static_cast<SpecMethod>(7);
  REQUIRE_THROWS_AS(Engine(*model, ep), Error);
}

TEST_CASE("speculative engine: layer-skip drafts give the plain greedy tokens", "[spec_engine]") {
  NEED_MODEL(model);
  const int n_layer = model->config().n_layer;
  REQUIRE(n_layer >= 3);
  EngineParams plain;
  plain.block_size = 4;
  EngineParams spec = plain;
  spec.spec = SpecMethod::LayerSkip;
  spec.spec_max_batch = 0;
  const Run a = generate(*model, kPrompts, 48, plain);
  for (const std::string& skip : {std::to_string(n_layer - 1), std::string("1-2"), std::string("0,") +
                                                                                    std::to_string(n_layer - 1)}) {
    CAPTURE(skip);
    spec.spec_skip_layers = skip;
    const Run b = generate(*model, kPrompts, 48, spec);
    CHECK(b.out == a.out);
    CHECK(b.spec.drafted > 0);
    if (skip == std::to_string(n_layer - 1)) CHECK(b.spec.accepted > 0);  // one layer less agrees often
  }
  // A small pool: drafts stop where blocks run out, preemption still exact.
  plain.kv_blocks = 40;
  spec.kv_blocks = 40;
  spec.spec_skip_layers = std::to_string(n_layer - 1);
  CHECK(generate(*model, kPrompts, 64, spec).out == generate(*model, kPrompts, 64, plain).out);
  // int8 KV: the draft's writes at block starts are redone by verification.
  plain.kv_type = spec.kv_type = KvType::I8;
  plain.kv_blocks = spec.kv_blocks = 0;
  CHECK(generate(*model, kPrompts, 48, spec).out == generate(*model, kPrompts, 48, plain).out);
  // Bad layer lists are refused when the engine is made.
  for (const char* bad : {"", "x", "1-", "3-1", "0-99", "1,,2"}) {
    CAPTURE(bad);
    spec.spec_skip_layers = bad;
    REQUIRE_THROWS_AS(Engine(*model, spec), Error);
  }
  spec.spec_skip_layers = "0-" + std::to_string(n_layer - 1);  // every layer
  REQUIRE_THROWS_AS(Engine(*model, spec), Error);
}

namespace {

// Two-sample chi-square over the tokens seen at one position: bins with at
// least 10 expected counts in both samples, the rest pooled into one bin.
// Returns the statistic and its degrees of freedom.
std::pair<double, int> chi_square(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
  std::map<int32_t, std::pair<double, double>> bins;
  for (int32_t t : a) bins[t].first += 1;
  for (int32_t t : b) bins[t].second += 1;
  const double na = static_cast<double>(a.size()), nb = static_cast<double>(b.size());
  std::vector<std::pair<double, double>> cells;
  std::pair<double, double> other{0, 0};
  for (const auto& kv : bins) {
    const double tot = kv.second.first + kv.second.second;
    if (tot * std::min(na, nb) / (na + nb) >= 10) cells.push_back(kv.second);
    else {
      other.first += kv.second.first;
      other.second += kv.second.second;
    }
  }
  if (other.first + other.second > 0) cells.push_back(other);
  double chi = 0;
  for (const auto& c : cells) {
    const double tot = c.first + c.second;
    const double ea = tot * na / (na + nb), eb = tot * nb / (na + nb);
    chi += (c.first - ea) * (c.first - ea) / ea + (c.second - eb) * (c.second - eb) / eb;
  }
  return {chi, static_cast<int>(cells.size()) - 1};
}

// The chi-square value exceeded with probability 0.001 (Wilson-Hilferty).
double chi_square_critical_001(int df) {
  const double z = 3.0902, k = df;
  const double t = 1 - 2 / (9 * k) + z * std::sqrt(2 / (9 * k));
  return k * t * t * t;
}

}  // namespace

TEST_CASE("speculative engine: sampled tokens keep the model's distribution", "[spec_engine]") {
  // Temperature 1, no truncation: the first six generated tokens of 1500
  // sampled continuations with n-gram speculation against 1500 without, per
  // position. The prompt repeats itself and holds many common tokens, so
  // drafts are proposed (and often rejected) at the first decode positions. Significance 0.001 per
  // position; the seeds are fixed, so the outcome is deterministic. An
  // always-accepting verifier fails it (checked by hand: chi-square in the
  // hundreds or more at the first position with drafts).
  NEED_MODEL(model);
  const int n = 1500;
  auto sample = [&](bool spec) {
    EngineParams ep;
    ep.max_seqs = 32;
    if (spec) {
      ep.spec = SpecMethod::Ngram;
      ep.spec_max_batch = 0;
      ep.spec_k = 3;
    }
    Engine engine(*model, ep);
    std::vector<std::shared_ptr<Request>> rs;
    for (int i = 0; i < n; ++i) {
      RequestParams rp;
      rp.prompt = model->tokenizer().encode(
          "Once upon a time, there was a little girl named Lily. She liked to play with her ball in the park. "
          "One day, she saw a big dog. The dog was happy and they played. Lily saw a big",
          true);
      rp.max_tokens = 6;
      rp.ignore_eos = true;
      rp.sampling.temperature = 1.0f;
      rp.sampling.top_k = 0;
      rp.sampling.top_p = 1.0f;
      rp.sampling.min_p = 0.0f;
      rp.sampling.seed = (spec ? 1000000 : 0) + static_cast<uint64_t>(i);
      rs.push_back(engine.submit(rp));
    }
    engine.run();
    std::vector<std::vector<int32_t>> at(6);
    for (auto& r : rs) {
      REQUIRE(r->n_generated() == 6);
      for (int p = 0; p < 6; ++p) at[p].push_back(r->generated()[p]);
    }
    if (spec) {
      const SpecCounters c = engine.stats().spec;
      CHECK(c.drafted > static_cast<uint64_t>(n));
      CHECK(c.accepted > static_cast<uint64_t>(n) / 4);
      CHECK(c.accepted < c.drafted);
    }
    return at;
  };
  const auto plain = sample(false), spec = sample(true);
  for (int p = 0; p < 6; ++p) {
    const auto [chi, df] = chi_square(plain[p], spec[p]);
    CAPTURE(p, chi, df);
    REQUIRE(df >= 1);
    CHECK(chi < chi_square_critical_001(df));
  }
}

TEST_CASE("speculative engine: a draft model gives the plain greedy tokens", "[spec_engine]") {
  NEED_MODEL(model);
  auto draft = infer_test::stories260k();  // the same model: every draft is accepted
  auto other = infer_test::stories_xs();   // a different model, same vocabulary? (checked below)
  EngineParams plain;
  plain.block_size = 4;
  EngineParams spec = plain;
  spec.spec = SpecMethod::Draft;
  spec.draft_model = draft.get();
  spec.spec_max_batch = 0;
  const Run a = generate(*model, kPrompts, 48, plain);
  const Run b = generate(*model, kPrompts, 48, spec);
  CHECK(b.out == a.out);
  CHECK(b.spec.drafted > 0);
  CHECK(b.spec.accepted == b.spec.drafted);  // the target as its own draft agrees everywhere
  spec.spec_k = 7;
  spec.kv_blocks = plain.kv_blocks = 40;  // preemption: the draft cache follows
  CHECK(generate(*model, kPrompts, 64, spec).out == generate(*model, kPrompts, 64, plain).out);
  spec.kv_blocks = plain.kv_blocks = 0;
  // A different model as the draft: fewer accepted, same output.
  if (other && other->tokenizer().n_vocab() == model->tokenizer().n_vocab()) {
    bool same_vocab = true;
    try {
      check_draft_vocab(model->tokenizer(), other->tokenizer());
    } catch (const Error&) {
      same_vocab = false;
    }
    if (same_vocab) {
      spec.draft_model = other.get();
      const Run c = generate(*model, kPrompts, 48, spec);
      CHECK(c.out == a.out);
      CHECK(c.spec.accepted < c.spec.drafted);
    }
  }
  // Sampling with a draft model: reproducible, right lengths.
  spec.draft_model = draft.get();
  const Run s1 = generate(*model, kPrompts, 30, spec, 0.8f), s2 = generate(*model, kPrompts, 30, spec, 0.8f);
  CHECK(s1.out == s2.out);
  for (const auto& o : s1.out) CHECK(o.size() == 30);
  // No draft model, or one with another vocabulary: refused, naming the difference.
  spec.draft_model = nullptr;
  REQUIRE_THROWS_AS(Engine(*model, spec), Error);
  auto tiny = infer::Model::load(infer_test::shared_file("models/llama-2-tiny-random.gguf"));
  spec.draft_model = tiny.get();
  REQUIRE_THROWS_WITH(Engine(*model, spec), Catch::Contains("vocabulary has 32000 tokens"));
}

TEST_CASE("speculative engine: the draft model's cache has its own prefix cache", "[spec_engine]") {
  NEED_MODEL(model);
  auto draft = infer_test::stories_xs();
  if (!draft) draft = infer_test::stories260k();
  EngineParams spec;
  spec.block_size = 4;
  spec.spec = SpecMethod::Draft;
  spec.draft_model = draft.get();
  spec.spec_max_batch = 0;
  const std::string prompt = kPrompts[0] + " " + kPrompts[1];
  // One engine, the same prompt three times in turn, then twice at once
  // (n = 2 style: both look up the cache the first ones filled).
  Engine engine(*model, spec);
  auto one = [&](int salt_seed) {
    RequestParams rp;
    rp.prompt = model->tokenizer().encode(prompt, true);
    rp.max_tokens = 24;
    rp.ignore_eos = true;
    rp.sampling.temperature = 0;
    rp.sampling.seed = static_cast<uint64_t>(salt_seed);
    return engine.submit(rp);
  };
  std::vector<std::vector<int32_t>> outs;
  for (int i = 0; i < 3; ++i) {
    auto r = one(i);
    engine.run();
    outs.emplace_back(r->generated(), r->generated() + r->n_generated());
  }
  const KvStats st = engine.draft_kv()->stats();
  const int n_prompt = static_cast<int>(model->tokenizer().encode(prompt, true).size());
  // The second and third lookups find every full block of the prompt
  // (match_prefix leaves the last token to compute).
  CHECK(st.prefix_hit_tokens >= static_cast<uint64_t>(2 * ((n_prompt - 1) / 4 * 4)));
  CHECK(engine.stats().spec.drafted > 0);
  engine.draft_kv()->check_invariants();
  // The same tokens as plain greedy decoding, every time.
  EngineParams plain;
  plain.block_size = 4;
  const Run p = generate(*model, {prompt}, 24, plain);
  for (const auto& o : outs) CHECK(o == p.out[0]);
  // Prefix caching off for the engine: the draft cache finds nothing either.
  spec.prefix_caching = false;
  Engine off(*model, spec);
  for (int i = 0; i < 2; ++i) {
    RequestParams rp;
    rp.prompt = model->tokenizer().encode(prompt, true);
    rp.max_tokens = 8;
    rp.sampling.temperature = 0;
    off.submit(rp);
    off.run();
  }
  CHECK(off.draft_kv()->stats().prefix_hit_tokens == 0);
}
