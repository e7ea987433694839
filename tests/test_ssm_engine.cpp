// State-space models in the engine: the recurrent state lives in the KV
// blocks (kv/kv_format.h), so every KV feature must carry it. Checked here:
// the pool arithmetic of state-only layouts (constant blocks per sequence),
// copy-on-write and swap carrying the state, and on the tiny synthetic
// mamba / mamba2 / jamba models: greedy text alone against a batch of 16
// under continuous batching with preemption (host tier on and off), chunked
// prefill, n-gram and draft-model speculation (rollback by recomputation from
// a block boundary), int8 KV on the hybrid, prefix-cache hits with the cold
// run's logits, forks, and memory per sequence independent of its length.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "engine/engine.h"
#include "kv/kv_cache.h"
#include "kv/kv_plan.h"
#include "model/model.h"
#include "tools/synth.h"
#include "test_util.h"

using namespace infer;

namespace {

// A layout of recurrent state only (a 2-layer Mamba-shaped model).
KvLayout state_layout(int n_attn_layers = 0) {
  KvLayout l;
  l.n_layers = n_attn_layers;
  if (n_attn_layers > 0) {
    l.n_kv_heads = 1;
    l.head_dim = 8;
  }
  l.n_ssm_layers = 2;
  l.ssm_conv_elems = 3 * 16;
  l.ssm_state_elems = 16 * 4;
  return l;
}

// The tiny synthetic model `preset` (F32 weights), written once per seed and
// loaded; nullptr (the test skips) when this build has no such preset.
std::unique_ptr<Model> synth(const std::string& preset, uint64_t seed = 1) {
  const SynthPreset* p = find_synth_preset(preset);
  if (!p) return nullptr;
  const std::string path = infer_test::temp_dir() + "/ssm-" + preset + "-" + std::to_string(seed) + ".gguf";
  SynthOptions o;
  o.type = DType::F32;
  o.seed = seed;
  o.n_threads = 2;
  write_synth_model(*p, path, o);
  return Model::load(path);
}

#define NEED_SYNTH(m, name)                                   \
  auto m = synth(name);                                       \
  if (!m) {                                                   \
    WARN("SKIPPED: no synth preset " << name << " yet");      \
    return;                                                   \
  }

std::vector<int32_t> random_prompt(const Model& m, int n, uint32_t seed) {
  std::mt19937 rng(seed);
  // Ordinary tokens (past the specials and bytes where the vocabulary has them).
  const int32_t lo = std::min<int32_t>(259, m.config().n_vocab / 2);
  std::uniform_int_distribution<int32_t> d(lo, m.config().n_vocab - 1);
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (auto& x : t) x = d(rng);
  return t;
}

// A prompt that repeats itself (prompt lookup finds drafts in it).
std::vector<int32_t> repetitive_prompt(const Model& m, int n, uint32_t seed) {
  const std::vector<int32_t> unit = random_prompt(m, 7, seed);
  std::vector<int32_t> t;
  while (static_cast<int>(t.size()) < n) t.push_back(unit[t.size() % unit.size()]);
  return t;
}

RequestParams greedy(const std::vector<int32_t>& prompt, int max_tokens) {
  RequestParams rp;
  rp.prompt = prompt;
  rp.max_tokens = max_tokens;
  rp.sampling.temperature = 0;
  rp.ignore_eos = true;
  return rp;
}

std::vector<int32_t> generated(const Request& r) { return {r.generated(), r.generated() + r.n_generated()}; }

EngineParams base_params() {
  EngineParams ep;
  ep.n_threads = 2;
  ep.n_ctx = 2048;
  ep.block_size = 16;
  return ep;
}

// Steps until idle, checking the KV books after every step.
void run_checked(Engine& e, int max_steps = 50000) {
  int steps = 0;
  while (e.step() > 0) {
    e.kv().check_invariants();
    REQUIRE(++steps < max_steps);
  }
  e.kv().check_invariants();
}

struct Outputs {
  std::vector<std::vector<int32_t>> text;
  EngineStats stats;
};

// Every prompt submitted at once to one engine, greedy, n tokens each.
Outputs run_all(const Model& m, const std::vector<std::vector<int32_t>>& prompts, int n, const EngineParams& ep) {
  Engine e(m, ep);
  std::vector<std::shared_ptr<Request>> rs;
  for (const auto& p : prompts) rs.push_back(e.submit(greedy(p, n)));
  run_checked(e);
  Outputs o;
  for (auto& r : rs) {
    INFO("finish message: " << r->error());
    REQUIRE(r->finish_reason() != FinishReason::Error);
    o.text.push_back(generated(*r));
  }
  o.stats = e.stats();
  CHECK(e.kv().n_blocks_used() == 0);
  if (const KvCache* d = e.draft_kv()) CHECK(d->n_blocks_used() == 0);
  return o;
}

// Each prompt alone in a roomy engine.
std::vector<std::vector<int32_t>> alone(const Model& m, const std::vector<std::vector<int32_t>>& prompts, int n) {
  std::vector<std::vector<int32_t>> out;
  for (const auto& p : prompts) out.push_back(run_all(m, {p}, n, base_params()).text[0]);
  return out;
}

std::vector<std::vector<int32_t>> mixed_prompts(const Model& m, int count) {
  std::vector<std::vector<int32_t>> ps;
  for (int i = 0; i < count; ++i)
    ps.push_back(i % 3 == 0 ? repetitive_prompt(m, 20 + 11 * i, 100 + i) : random_prompt(m, 5 + 9 * i, 200 + i));
  return ps;
}

const char* const kModels[] = {"tiny-mamba", "tiny-mamba2", "tiny-jamba"};

}  // namespace

// ---- pool arithmetic ----

TEST_CASE("ssm engine: a state-only layout makes a pool whose sequences hold a constant number of blocks",
          "[ssm_engine][kvplan]") {
  KvSizing z;
  z.block_size = 16;
  z.kv_blocks = 64;
  const KvPlan p = KvPlan::make(state_layout(), z, 0);
  CHECK(p.state_only());
  // Every block carries the state of each SSM layer (f32, conv then scan).
  CHECK(p.block_bytes() == 2 * (3 * 16 + 16 * 4) * sizeof(float));
  CHECK(p.layout.n_blocks == 64);
  // The block of the last computed position, the one before it, and the
  // blocks the step's rows start.
  CHECK(p.blocks_held(1) == 1);
  CHECK(p.blocks_held(16) == 1);
  CHECK(p.blocks_held(40) == 3);
  CHECK(p.blocks_held(1000) == p.blocks_held(40));
  CHECK(p.blocks_held(16000) == p.blocks_held(40));
  CHECK(p.blocks_held(16000, 512) == 2 + 512 / 16);
  CHECK(p.concurrency(1000, 100) == p.concurrency(16000, 100));
  CHECK(p.concurrency(16000, 100) == 64 / 3);

  // A hybrid (attention layers too) keeps every block.
  const KvPlan h = KvPlan::make(state_layout(2), z, 0);
  CHECK_FALSE(h.state_only());
  CHECK(h.block_bytes() > p.block_bytes());
  CHECK(h.blocks_held(1000) == 63);
  CHECK(h.concurrency(1000, 100) == 1);

  // Neither K/V nor state: refused.
  KvLayout empty = state_layout();
  empty.n_ssm_layers = 0;
  CHECK_THROWS_AS(KvPlan::make(empty, z, 0), Error);
}

TEST_CASE("ssm engine: copy-on-write and swapping carry the recurrent state", "[ssm_engine][kv]") {
  KvLayout l = state_layout();
  l.block_size = 4;
  l.n_blocks = 8;
  l.n_host_blocks = 8;
  KvCache kv(l);
  auto& mem = static_cast<HostKvMemory&>(kv.memory());
  const size_t floats = l.ssm_layer_floats();
  const int a = kv.add_sequence();
  REQUIRE(kv.reserve(a, 6));
  REQUIRE(kv.prepare_write(a, 0, 6));
  for (int layer = 0; layer < 2; ++layer)
    for (size_t i = 0; i < floats; ++i) mem.ssm_state(layer, kv.block_table(a)[1])[i] = 1000.0f * layer + i;
  // A fork shares the partial block; writing into it copies the state first.
  const int b = kv.fork(a);
  REQUIRE(kv.prepare_write(b, 6, 7));
  const int copied = kv.block_table(b)[1];
  CHECK(copied != kv.block_table(a)[1]);
  for (int layer = 0; layer < 2; ++layer)
    for (size_t i = 0; i < floats; ++i) REQUIRE(mem.ssm_state(layer, copied)[i] == 1000.0f * layer + i);
  // Swapped out (the freed device block scribbled over) and back in, the
  // state comes back.
  const int old = kv.block_table(a)[1];
  REQUIRE(kv.swap_out(a));
  for (int layer = 0; layer < 2; ++layer) std::fill_n(mem.ssm_state(layer, old), floats, -1.0f);
  REQUIRE(kv.swap_in(a));
  for (int layer = 0; layer < 2; ++layer)
    for (size_t i = 0; i < floats; ++i) REQUIRE(mem.ssm_state(layer, kv.block_table(a)[1])[i] == 1000.0f * layer + i);
  kv.check_invariants();
}

// ---- the engine on the tiny synthetic models ----

TEST_CASE("ssm engine: greedy text alone equals a batch of 16 with preemption, host tier on and off",
          "[ssm_engine]") {
  for (const char* name : kModels) {
    CAPTURE(name);
    NEED_SYNTH(m, name);
    const auto prompts = mixed_prompts(*m, 16);
    const int n = 24;
    const auto ref = alone(*m, prompts, n);
    for (bool host : {false, true}) {
      CAPTURE(host);
      EngineParams ep = base_params();
      ep.max_seqs = 16;
      ep.max_batch_tokens = 64;
      // Too few blocks for 16 sequences at once: preemption is certain.
      const bool state_only = m->config().attention_free();
      ep.kv_blocks = state_only ? 24 : 40;
      if (host) ep.host_kv_budget_bytes = KvPlan::make(m->kv_layout(), ep.kv_sizing(ep.n_ctx), 0).bytes(64);
      const Outputs o = run_all(*m, prompts, n, ep);
      CHECK(o.text == ref);
      CHECK(o.stats.n_preemptions > 0);
      if (host) CHECK(o.stats.kv.swaps_out > 0);
    }
    // Chunked prefill: a few rows a step.
    EngineParams chunked = base_params();
    chunked.max_batch_tokens = 7;
    CHECK(run_all(*m, prompts, n, chunked).text == ref);
  }
}

TEST_CASE("ssm engine: n-gram speculation gives the plain greedy text and rolls the state back",
          "[ssm_engine]") {
  for (const char* name : kModels) {
    CAPTURE(name);
    NEED_SYNTH(m, name);
    std::vector<std::vector<int32_t>> prompts;
    for (int i = 0; i < 4; ++i) prompts.push_back(repetitive_prompt(*m, 30 + 13 * i, 300 + i));
    const int n = 48;
    const auto ref = alone(*m, prompts, n);
    EngineParams ep = base_params();
    ep.spec = SpecMethod::Ngram;
    ep.spec_k = 5;
    ep.block_size = 4;  // many boundaries: rollbacks land on both sides of them
    const Outputs o = run_all(*m, prompts, n, ep);
    CHECK(o.text == ref);
    CHECK(o.stats.spec.drafted > 0);
    // Every rejection that did not end on a block boundary recomputes at
    // most block_size - 1 positions.
    const uint64_t rejected_steps = o.stats.spec.steps;
    CHECK(o.stats.n_spec_recomputed <= rejected_steps * 3);
    if (o.stats.spec.accepted < o.stats.spec.drafted) CHECK(o.stats.n_spec_recomputed > 0);
    // One sequence at a time too (the cost-aware draft length).
    ep.max_seqs = 1;
    CHECK(run_all(*m, prompts, n, ep).text == ref);
  }
}

TEST_CASE("ssm engine: draft-model speculation (itself, and another mamba) gives the plain greedy text",
          "[ssm_engine]") {
  for (const char* name : kModels) {
    CAPTURE(name);
    NEED_SYNTH(m, name);
    auto other = synth(name, 7);  // same shapes and vocabulary, other weights: drafts get rejected
    REQUIRE(other);
    std::vector<std::vector<int32_t>> prompts = {random_prompt(*m, 21, 1), repetitive_prompt(*m, 40, 2),
                                                 random_prompt(*m, 3, 3)};
    const int n = 32;
    const auto ref = alone(*m, prompts, n);
    for (const Model* draft : {m.get(), other.get()}) {
      EngineParams ep = base_params();
      ep.spec = SpecMethod::Draft;
      ep.draft_model = draft;
      ep.spec_k = 4;
      ep.block_size = 8;
      const Outputs o = run_all(*m, prompts, n, ep);
      CHECK(o.text == ref);
      CHECK(o.stats.spec.drafted > 0);
      if (draft == m.get()) {
        CHECK(o.stats.spec.accepted == o.stats.spec.drafted);  // greedy drafts of the target itself
        CHECK(o.stats.n_spec_recomputed == 0);
      } else if (o.stats.spec.accepted < o.stats.spec.drafted && m->config().recurrent()) {
        CHECK(o.stats.n_spec_recomputed + o.stats.n_draft_recomputed > 0);
      }
    }
    // An attention-free draft keeps a few blocks per sequence too.
    if (m->config().attention_free()) {
      EngineParams ep = base_params();
      ep.spec = SpecMethod::Draft;
      ep.draft_model = other.get();
      ep.prefix_caching = false;
      Engine e(*m, ep);
      auto r = e.submit(greedy(random_prompt(*m, 300, 8), 24));
      int most = 0;
      while (e.step() > 0)
        if (r->n_generated() > 0) most = std::max(most, e.draft_kv()->n_blocks_used());
      CHECK(most > 0);
      CHECK(most <= 4);
      CHECK(generated(*r) == alone(*m, {random_prompt(*m, 300, 8)}, 24)[0]);
    }
  }
}

TEST_CASE("ssm engine: int8 KV on the hybrid keeps greedy text identical alone and batched", "[ssm_engine]") {
  NEED_SYNTH(m, "tiny-jamba");
  const auto prompts = mixed_prompts(*m, 8);
  const int n = 16;
  EngineParams one = base_params();
  one.kv_type = KvType::I8;
  std::vector<std::vector<int32_t>> ref;
  for (const auto& p : prompts) ref.push_back(run_all(*m, {p}, n, one).text[0]);
  EngineParams batch = one;
  batch.kv_blocks = 30;
  batch.max_batch_tokens = 32;
  const Outputs o = run_all(*m, prompts, n, batch);
  CHECK(o.text == ref);
  CHECK(o.stats.n_preemptions > 0);
  // The state stays f32 and the K/V int8 do not change what attention sees
  // much: the first greedy tokens follow the F32 run's.
  const auto f32 = alone(*m, {prompts[1]}, 4);
  CHECK(ref[1][0] == f32[0][0]);
}

TEST_CASE("ssm engine: a shared 1k-token prefix is taken from the cache with the cold run's logits",
          "[ssm_engine]") {
  for (const char* name : kModels) {
    CAPTURE(name);
    NEED_SYNTH(m, name);
    const std::vector<int32_t> prefix = random_prompt(*m, 1000, 5);
    std::vector<int32_t> a = prefix, b = prefix;
    for (int32_t t : random_prompt(*m, 9, 6)) a.push_back(t);
    for (int32_t t : random_prompt(*m, 13, 7)) b.push_back(t);
    auto first_logits = [&](Engine& e, const std::vector<int32_t>& p, int n = 3) {
      RequestParams rp = greedy(p, n);
      rp.logits = kLogitsGenerated;
      auto r = e.submit(rp);
      run_checked(e);
      REQUIRE(r->finish_reason() != FinishReason::Error);
      return std::make_pair(generated(*r), r->logits());
    };
    EngineParams ep = base_params();
    Engine warm(*m, ep);
    first_logits(warm, a, 1);  // ends in the step of its last prompt chunk: its blocks are cached all the same
    const uint64_t hits_before = warm.stats().kv.prefix_hit_tokens;
    const auto hit = first_logits(warm, b);
    const uint64_t hit_tokens = warm.stats().kv.prefix_hit_tokens - hits_before;
    CHECK(hit_tokens == 1000 / 16 * 16);  // every full block of the shared prefix
    EngineParams off = ep;
    off.prefix_caching = false;
    Engine cold(*m, off);
    const auto miss = first_logits(cold, b);
    CHECK(cold.stats().kv.prefix_hit_tokens == 0);
    CHECK(hit.first == miss.first);
    REQUIRE(hit.second.size() == miss.second.size());
    double worst = 0;
    for (size_t i = 0; i < hit.second.size(); ++i)
      worst = std::max(worst, static_cast<double>(std::fabs(hit.second[i] - miss.second[i])));
    CHECK(worst < 1e-4);
  }
}

TEST_CASE("ssm engine: forks continue from the leader's state like separate runs", "[ssm_engine]") {
  for (const char* name : kModels) {
    CAPTURE(name);
    NEED_SYNTH(m, name);
    for (int len : {16, 21}) {  // the prompt ends on a block boundary, or inside a block
      CAPTURE(len);
      RequestParams rp = greedy(random_prompt(*m, len, 9), 12);
      rp.sampling.temperature = 0.9f;
      rp.sampling.seed = 11;
      std::vector<std::vector<int32_t>> separate;
      for (int i = 0; i < 4; ++i) {
        Engine e(*m, base_params());
        RequestParams q = rp;
        q.sampling.seed = rp.sampling.seed + i;
        auto r = e.submit(q);
        run_checked(e);
        separate.push_back(generated(*r));
      }
      Engine e(*m, base_params());
      auto rs = e.submit_n(rp, 4);
      run_checked(e);
      for (int i = 0; i < 4; ++i) CHECK(generated(*rs[i]) == separate[i]);
      CHECK((e.stats().kv.cow_copies > 0 || len % 16 == 0));
      CHECK(e.kv().n_blocks_used() == 0);
    }
  }
}

TEST_CASE("ssm engine: an attention-free sequence holds as many blocks after 1000 tokens as after 16",
          "[ssm_engine]") {
  for (const char* name : kModels) {
    CAPTURE(name);
    NEED_SYNTH(m, name);
    // The most blocks the sequence holds at the end of a decoding step.
    auto held_decoding = [&](int len) {
      EngineParams ep = base_params();
      ep.prefix_caching = false;
      Engine e(*m, ep);
      auto r = e.submit(greedy(random_prompt(*m, len, 4), 20));
      int most = 0;
      while (e.step() > 0)
        if (r->n_generated() > 0) most = std::max(most, e.kv().n_blocks_used());
      return most;
    };
    const int short_seq = held_decoding(16), long_seq = held_decoding(1000);
    CAPTURE(short_seq, long_seq);
    if (m->config().attention_free()) {
      CHECK(short_seq == long_seq);
      CHECK(long_seq <= 2);
    } else {
      CHECK(long_seq > short_seq);  // attention layers keep every block
    }
    // What deployments are sized by agrees.
    EngineParams ep = base_params();
    ep.kv_blocks = 60;
    ep.max_seqs = 64;
    Engine e(*m, ep);
    if (m->config().attention_free())
      CHECK(e.max_concurrency(100, 0) == e.max_concurrency(1000, 1000));
    else
      CHECK(e.max_concurrency(16, 0) > e.max_concurrency(1000, 0));
    // Bytes per block include the state.
    CHECK(e.kv_plan().block_bytes() >= e.kv().layout().state_bytes());
    CHECK(e.kv().layout().state_bytes() > 0);
  }
}

TEST_CASE("ssm engine: what cannot run a state-space model says so", "[ssm_engine]") {
  NEED_SYNTH(m, "tiny-mamba");
  EngineParams ep = base_params();
  ep.spec = SpecMethod::LayerSkip;
  ep.spec_skip_layers = "0";
  try {
    Engine e(*m, ep);
    FAIL("layer-skip speculation accepted a state-space model");
  } catch (const Error& err) {
    CHECK(err.status() == Status::Unsupported);
    CHECK(std::string(err.what()).find("state") != std::string::npos);
  }
  Engine e(*m, base_params());
  EmbedInput in;
  in.tokens = random_prompt(*m, 5, 1);
  std::vector<EmbedInput> inputs{in};
  CHECK_THROWS_AS(e.submit_embed(inputs, EmbedOptions{}), Error);
}
