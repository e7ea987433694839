// The KV manager seen through the engine: prefix caching, forks, the host
// tier and KV element types must not change what a request generates (greedy
// outputs identical), only what it costs.
#include <algorithm>
#include <cmath>

#include "engine/engine.h"
#include "model/model.h"
#include "tools/evaluate.h"
#include "tools/llama2c.h"
#include "test_models.h"

using namespace infer;

namespace {



RequestParams greedy(const Model& m, const std::string& text, int n) {
  RequestParams rp;
  rp.prompt = m.tokenizer().encode(text, true);
  rp.max_tokens = n;
  rp.sampling.temperature = 0;
  rp.ignore_eos = true;
  return rp;
}

// A long shared prefix (a "system prompt") followed by different questions.
const char* kSystem =
    "Once upon a time, there was a little girl named Lily. She loved to play outside in the park. "
    "One day, she saw a big, red ball. She wanted to play with it, but it was too high. ";
const char* kEndings[] = {"Tom said", "The dog ran", "Lily was happy", "Mom came"};

std::vector<std::string> run_all(const Model& m, EngineParams ep, bool sequential, EngineStats* stats = nullptr,
                                 std::vector<int32_t>* cached = nullptr) {
  Engine engine(m, ep);
  std::vector<std::shared_ptr<Request>> rs;
  for (const char* e : kEndings) {
    rs.push_back(engine.submit(greedy(m, std::string(kSystem) + e, 40)));
    if (sequential) engine.run();
  }
  engine.run();
  std::vector<std::string> out;
  for (auto& r : rs) {
    REQUIRE(r->finish_reason() == FinishReason::Length);
    out.push_back(r->text());
    if (cached) cached->push_back(r->n_cached());
  }
  if (stats) *stats = engine.stats();
  engine.kv().check_invariants();
  REQUIRE(engine.kv().n_blocks_used() == 0);
  return out;
}

}  // namespace

TEST_CASE("prefix caching: same outputs, prompt blocks reused", "[kv][prefix][engine]") {
  NEED_MODEL(model);
  EngineParams off;
  off.prefix_caching = false;
  const std::vector<std::string> expect = run_all(*model, off, true);
  EngineParams on;
  EngineStats st;
  std::vector<int32_t> cached;
  REQUIRE(run_all(*model, on, true, &st, &cached) == expect);
  // The first request computes everything; later ones find the shared prefix.
  REQUIRE(cached[0] == 0);
  for (size_t i = 1; i < cached.size(); ++i) REQUIRE(cached[i] >= 32);
  REQUIRE(st.kv.prefix_hit_tokens > 0);
  // Submitted together they still give the same outputs.
  REQUIRE(run_all(*model, on, false) == expect);
  // Tiny block size and a small pool: eviction churns and results hold.
  on.block_size = 4;
  on.kv_blocks = 48;
  REQUIRE(run_all(*model, on, true) == expect);
}

TEST_CASE("prefix caching respects salts and per-request opt-out", "[kv][prefix][engine]") {
  NEED_MODEL(model);
  Engine engine(*model, EngineParams{});
  auto first = engine.submit(greedy(*model, std::string(kSystem) + "Tom", 4));
  engine.run();
  RequestParams salted = greedy(*model, std::string(kSystem) + "Tom", 4);
  salted.cache_salt = 7;
  RequestParams opted_out = greedy(*model, std::string(kSystem) + "Tom", 4);
  opted_out.prefix_cache = false;
  auto a = engine.submit(salted);
  engine.run();
  auto b = engine.submit(opted_out);
  engine.run();
  auto c = engine.submit(greedy(*model, std::string(kSystem) + "Tom", 4));
  engine.run();
  REQUIRE(a->n_cached() == 0);
  REQUIRE(b->n_cached() == 0);
  REQUIRE(c->n_cached() > 0);
  REQUIRE(a->text() == first->text());
  REQUIRE(b->text() == first->text());
  REQUIRE(c->text() == first->text());
}

TEST_CASE("forked samples share the prompt and equal independent requests", "[kv][fork][engine]") {
  NEED_MODEL(model);
  RequestParams rp = greedy(*model, "Once upon a time there was a dog", 30);
  rp.sampling.temperature = 0.9f;
  rp.sampling.seed = 100;
  Engine engine(*model, EngineParams{});
  auto family = engine.submit_n(rp, 4);
  engine.run();
  REQUIRE(engine.kv().stats().cow_copies > 0);  // the partial prompt block was shared
  // Each fork equals a standalone request with the same seed.
  for (int i = 0; i < 4; ++i) {
    EngineParams ep;
    ep.prefix_caching = false;
    Engine alone(*model, ep);
    RequestParams q = rp;
    q.sampling.seed = 100 + i;
    auto r = alone.submit(q);
    alone.run();
    INFO("sample " << i);
    REQUIRE(family[i]->finish_reason() == FinishReason::Length);
    REQUIRE(family[i]->text() == r->text());
  }
  REQUIRE(family[0]->text() != family[1]->text());
  REQUIRE_THROWS_AS(engine.submit_n(rp, 0), Error);
  REQUIRE_THROWS_AS(engine.submit_n(rp, 1000), Error);
}

TEST_CASE("preemption through the host tier resumes exactly", "[kv][offload][engine]") {
  NEED_MODEL(model);
  EngineParams big;
  big.prefix_caching = false;
  const std::vector<std::string> expect = run_all(*model, big, false);
  // A pool that holds about one sequence at a time, plus a host tier.
  EngineParams small;
  small.prefix_caching = false;
  small.block_size = 16;
  small.kv_blocks = 10;
  KvLayout l = model->kv_layout();
  l.block_size = 16;
  small.host_kv_budget_bytes = 64 * l.block_bytes();
  EngineStats st;
  REQUIRE(run_all(*model, small, false, &st) == expect);
  REQUIRE(st.n_preemptions > 0);
  REQUIRE(st.kv.swaps_out > 0);
  REQUIRE(st.kv.swaps_in > 0);
  // Without the host tier the same pressure recomputes, with the same result.
  small.host_kv_budget_bytes = 0;
  REQUIRE(run_all(*model, small, false, &st) == expect);
  REQUIRE(st.n_preemptions > 0);
  REQUIRE(st.kv.swaps_out == 0);
}

// Greedy length (in generated tokens) over which a KV type agrees with f32.
int agreeing_tokens(const Model& m, const std::vector<int32_t>& prompt, KvType t, int n) {
  const std::vector<int32_t> a = infer_test::greedy_tokens(m, prompt, KvType::F32, n);
  const std::vector<int32_t> b = infer_test::greedy_tokens(m, prompt, t, n);
  int k = 0;
  while (k < n && k < static_cast<int>(std::min(a.size(), b.size())) && a[k] == b[k]) ++k;
  return k;
}

TEST_CASE("f16 and int8 KV keep greedy continuations", "[kv][kvtype][engine]") {
  NEED_MODEL(model);
  const std::vector<int32_t> bos = {1}, once = model->tokenizer().encode("Once upon a time", true),
                             tom = model->tokenizer().encode("Tom and his dog", true);
  for (const auto* p : {&bos, &once, &tom}) REQUIRE(agreeing_tokens(*model, *p, KvType::F16, 100) == 100);
  // "Tom and his dog" reaches a near-tie at its 29th token (the f32 logits of
  // the top two differ by 0.048): symmetric per-token int8 keys flipped it;
  // keys coded against a per-block offset keep it (see test_kv_int8.cpp).
  for (const auto* p : {&bos, &once, &tom}) REQUIRE(agreeing_tokens(*model, *p, KvType::I8, 64) == 64);
}

TEST_CASE("sliding window: full attention inside the window, bounded blocks", "[kv][window][engine]") {
  REQUIRE_SHARED(src, "models/stories260K.gguf");
  auto in = GgufFile::open(src);
  GgufWriter w;
  for (const auto& [k, v] : in->metadata()) w.set(k, v);
  w.set("llama.attention.sliding_window", GgufValue::make_u32(32));
  for (const auto& t : in->tensors()) w.add_tensor(t.name, t.dims, t.type, in->tensor_data(t), t.nbytes);
  const std::string path = infer_test::temp_dir() + "/swa.gguf";
  w.write(path);
  auto swa = Model::load(path);
  auto full = Model::load(src);
  REQUIRE(swa->config().sliding_window == 32);
  auto logits = [](const Model& m, int n, int* max_blocks) {
    EngineParams ep;
    ep.block_size = 4;
    Engine engine(m, ep);
    RequestParams rp;
    rp.prompt = {1};
    rp.max_tokens = n;
    rp.sampling.temperature = 0;
    rp.ignore_eos = true;
    rp.logits = kLogitsGenerated;
    auto r = engine.submit(rp);
    *max_blocks = 0;
    while (engine.step() > 0) *max_blocks = std::max(*max_blocks, engine.kv().n_blocks_used());
    return r->logits();
  };
  int blocks_swa = 0, blocks_full = 0;
  const std::vector<float> a = logits(*swa, 100, &blocks_swa), b = logits(*full, 100, &blocks_full);
  // Rows for positions < 32 see the same keys in both models.
  for (size_t i = 0; i < 32 * 512; ++i) REQUIRE(a[i] == b[i]);
  float later = 0;
  for (size_t i = 40 * 512; i < a.size(); ++i) later = std::max(later, std::fabs(a[i] - b[i]));
  REQUIRE(later > 1e-3f);
  REQUIRE(blocks_swa <= 32 / 4 + 2);
  REQUIRE(blocks_full >= 100 / 4);
}
