// int8 KV against f32 KV on the reference prompts of ../shared/reference:
// the greedy continuation must not change for at least 64 tokens. (The
// per-prompt error numbers of bench/RESULTS.md: `infer_kv_quality probe`,
// bench/kv_quality.cpp.)
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>

#include "engine/engine.h"
#include "model/model.h"
#include "test_models.h"

using namespace infer;

namespace {

struct RefPrompt {
  const char* name;  // ../shared/reference/<name>.tokens
  bool xs;           // stories-xs (else stories260K)
  const char* text;  // the prompt, "" for BOS only
};

const RefPrompt kRefs[] = {
    {"stories260K-bos", false, ""},
    {"stories260K-once", false, "Once upon a time"},
    {"stories260K-tom", false, "Tom and his dog"},
    {"stories-xs-bos", true, ""},
};

std::vector<int32_t> read_tokens(const std::string& path) {
  std::ifstream f(path);
  std::vector<int32_t> t;
  for (int32_t x; f >> x;) t.push_back(x);
  return t;
}

std::vector<int32_t> prompt_of(const Model& m, const RefPrompt& r) {
  return *r.text ? m.tokenizer().encode(r.text, true) : std::vector<int32_t>{1};
}

std::vector<int32_t> greedy_tokens(const Model& m, const std::vector<int32_t>& prompt, KvType t, int n) {
  std::vector<int32_t> out = infer_test::greedy_tokens(m, prompt, t, n);
  REQUIRE(static_cast<int>(out.size()) == n);
  return out;
}

int first_difference(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
  int k = 0;
  while (k < static_cast<int>(std::min(a.size(), b.size())) && a[k] == b[k]) ++k;
  return k;
}

std::unique_ptr<Model> load(bool xs) { return xs ? infer_test::stories_xs() : infer_test::stories260k(); }

}  // namespace

TEST_CASE("int8 KV keeps the greedy continuation of every reference prompt for 64 tokens", "[kv][kvtype][engine]") {
  REQUIRE_SHARED(ref_dir, "reference/stories260K-bos.tokens");
  std::unique_ptr<Model> models[2];
  for (const RefPrompt& r : kRefs) {
    auto& m = models[r.xs];
    if (!m) m = load(r.xs);
    if (!m) {
      WARN("SKIPPED: the model of " << r.name << " not found");
      continue;
    }
    const std::vector<int32_t> prompt = prompt_of(*m, r);
    const std::vector<int32_t> f32 = greedy_tokens(*m, prompt, KvType::F32, 64);
    const std::vector<int32_t> i8 = greedy_tokens(*m, prompt, KvType::I8, 64);
    INFO(r.name);
    // f32 KV reproduces the reference implementation's continuation.
    const std::string ref = infer_test::shared_file(std::string("reference/") + r.name + ".tokens");
    if (!ref.empty()) {
      const std::vector<int32_t> want = read_tokens(ref);
      REQUIRE(want.size() >= prompt.size() + 64);
      REQUIRE(std::equal(prompt.begin(), prompt.end(), want.begin()));
      REQUIRE(std::equal(f32.begin(), f32.end(), want.begin() + prompt.size()));
    }
    REQUIRE(first_difference(f32, i8) == 64);
  }
}

// int8 keys depend on the previous block's stored keys: prefix sharing,
// batching, threads, preemption and recomputation must still give the same
// tokens as one request alone. (Not prompts cut into small chunks: the
// model's K rows themselves then differ in the last bits, f32 KV included,
// and int8 rounding may turn that into a different token.)
TEST_CASE("int8 KV outputs do not depend on batching, prefix sharing, threads or preemption", "[kv][kvtype][engine]") {
  NEED_MODEL(model);
  const char* system =
      "Once upon a time, there was a little girl named Lily. She loved to play outside in the park. "
      "One day, she saw a big, red ball. She wanted to play with it, but it was too high. ";
  const char* endings[] = {"Tom said", "The dog ran", "Lily was happy", "Mom came"};
  auto run = [&](EngineParams ep, bool sequential) {
    ep.kv_type = KvType::I8;
    Engine engine(*model, ep);
    std::vector<std::shared_ptr<Request>> rs;
    for (const char* e : endings) {
      RequestParams rp;
      rp.prompt = model->tokenizer().encode(std::string(system) + e, true);
      rp.max_tokens = 40;
      rp.sampling.temperature = 0;
      rp.ignore_eos = true;
      rs.push_back(engine.submit(rp));
      if (sequential) engine.run();
    }
    engine.run();
    std::vector<std::vector<int32_t>> out;
    for (auto& r : rs) out.emplace_back(r->generated(), r->generated() + r->n_generated());
    engine.kv().check_invariants();
    return out;
  };
  for (int bs : {16, 5}) {
    INFO("block size " << bs);
    EngineParams alone;
    alone.block_size = bs;
    alone.prefix_caching = false;
    alone.n_threads = 1;
    const auto expect = run(alone, true);
    EngineParams p = alone;
    p.n_threads = 0;
    REQUIRE(run(p, false) == expect);          // batched, all threads
    p.prefix_caching = true;
    REQUIRE(run(p, true) == expect);           // prompt blocks shared
    REQUIRE(run(p, false) == expect);
    EngineParams small = alone;                // preemption: swap and recompute
    small.n_threads = 0;
    small.kv_blocks = 160 / bs + 4;
    KvLayout l = model->kv_layout();
    l.block_size = bs;
    l.type = KvType::I8;
    small.host_kv_budget_bytes = 64 * l.block_bytes();
    REQUIRE(run(small, false) == expect);
    small.host_kv_budget_bytes = 0;
    REQUIRE(run(small, false) == expect);
  }
}
