// Golden tests: the reference outputs in ../shared/reference are reproduced
// exactly (tokens) and to 1e-4 (logits), one sequence at a time and with all
// references decoded together in one engine, with chunked prefill and with
// preemption forced by a tiny KV budget. Batching must not change results.
#include <cmath>
#include <cstring>
#include <memory>

#include "engine/engine.h"
#include "model/model.h"
#include "tools/llama2c.h"
#include "test_models.h"

using namespace infer;

namespace {

struct Reference {
  std::string name;
  std::vector<int32_t> tokens;  // input token at each position
  std::vector<float> logits;    // n_positions x 512
  int32_t n_prompt;             // tokens given as the prompt
};

bool load_reference(const std::string& name, int32_t n_prompt, Reference& out) {
  const std::string tok = infer_test::shared_file("reference/" + name + ".tokens");
  const std::string lg = infer_test::shared_file("reference/" + name + ".logits.f32");
  if (tok.empty() || lg.empty()) return false;
  out.name = name;
  out.n_prompt = n_prompt;
  std::istringstream in(infer_test::read_text(tok));
  int32_t t;
  while (in >> t) out.tokens.push_back(t);
  const std::vector<uint8_t> bytes = infer_test::read_file(lg);
  out.logits.resize(bytes.size() / sizeof(float));
  std::memcpy(out.logits.data(), bytes.data(), out.logits.size() * sizeof(float));
  return true;
}

RequestParams greedy_request(const Reference& ref) {
  RequestParams rp;
  rp.prompt.assign(ref.tokens.begin(), ref.tokens.begin() + ref.n_prompt);
  // Rows for every position: the prompt's, then one per generated token fed back.
  rp.max_tokens = static_cast<int32_t>(ref.tokens.size()) - ref.n_prompt + 1;
  rp.sampling.temperature = 0;
  rp.ignore_eos = true;
  rp.logits = kLogitsPrompt | kLogitsGenerated;
  return rp;
}

void check_against(const Reference& ref, const Request& r, int32_t n_vocab) {
  INFO("reference " << ref.name);
  REQUIRE(r.finish_reason() == FinishReason::Length);
  const size_t n = ref.tokens.size();
  // Generated tokens are the reference's inputs after the prompt.
  REQUIRE(r.n_generated() == static_cast<int32_t>(n) - ref.n_prompt + 1);
  for (size_t i = ref.n_prompt; i < n; ++i) {
    INFO("position " << i);
    REQUIRE(r.generated()[i - ref.n_prompt] == ref.tokens[i]);
  }
  REQUIRE(r.n_logit_rows() == static_cast<int64_t>(n));
  REQUIRE(r.logits().size() == ref.logits.size());
  float max_diff = 0;
  for (size_t i = 0; i < ref.logits.size(); ++i) max_diff = std::max(max_diff, std::fabs(r.logits()[i] - ref.logits[i]));
  INFO("max |logit - reference| = " << max_diff);
  REQUIRE(max_diff < 1e-4f);
  (void)n_vocab;
}

}  // namespace

TEST_CASE("stories260K references, one sequence at a time", "[reference]") {
  auto model = infer_test::stories260k();
  if (!model) {
    WARN("SKIPPED: models/stories260K.gguf not found");
    return;
  }
  for (auto [name, n_prompt] : {std::pair<const char*, int>{"stories260K-bos", 1}, {"stories260K-once", 5},
                                {"stories260K-tom", 5}}) {
    Reference ref;
    REQUIRE(load_reference(name, n_prompt, ref));
    for (int threads : {1, 2}) {
      EngineParams ep;
      ep.n_threads = threads;
      ep.max_seqs = 1;
      Engine engine(*model, ep);
      auto r = engine.submit(greedy_request(ref));
      engine.run();
      check_against(ref, *r, 512);
    }
  }
}

TEST_CASE("stories-xs converted from llama2.c reproduces its reference", "[reference][llama2c]") {
  auto model = infer_test::stories_xs();
  if (!model) {
    WARN("SKIPPED: models/stories-xs.bin or tok512.bin not found");
    return;
  }
  Reference ref;
  REQUIRE(load_reference("stories-xs-bos", 1, ref));
  Engine engine(*model, EngineParams{});
  auto r = engine.submit(greedy_request(ref));
  engine.run();
  check_against(ref, *r, 512);
}

TEST_CASE("all references decoded concurrently give the same results", "[reference][batching]") {
  auto model = infer_test::stories260k();
  auto xs = infer_test::stories_xs();
  if (!model || !xs) {
    WARN("SKIPPED: shared models not found");
    return;
  }
  std::vector<Reference> refs(3);
  REQUIRE(load_reference("stories260K-bos", 1, refs[0]));
  REQUIRE(load_reference("stories260K-once", 5, refs[1]));
  REQUIRE(load_reference("stories260K-tom", 5, refs[2]));
  Reference xs_ref;
  REQUIRE(load_reference("stories-xs-bos", 1, xs_ref));

  struct Config {
    const char* what;
    int32_t max_batch_tokens;
    int32_t kv_blocks;  // 0: default budget
    int32_t row_multiple;
  };
  // Plain batching; chunked prefill (prompts split over steps); prompt chunks
  // cut to end steps on a row multiple (prompts trickle in beside decoding
  // sequences); and a KV pool too small for all sequences at once, which
  // forces preemption.
  for (const Config& cfg : {Config{"batched", 512, 0, 1}, Config{"chunked prefill", 3, 0, 1},
                            Config{"row-aligned prompt chunks", 512, 0, 4}, Config{"preemption", 64, 24, 16}}) {
    INFO(cfg.what);
    EngineParams ep;
    ep.max_batch_tokens = cfg.max_batch_tokens;
    ep.kv_blocks = cfg.kv_blocks;
    ep.step_row_multiple = cfg.row_multiple;
    ep.block_size = 16;
    Engine engine(*model, ep);
    Engine engine_xs(*xs, ep);
    std::vector<std::shared_ptr<Request>> rs, rs_xs;
    // Each reference twice, interleaved, so sequences share every step. With
    // row-aligned chunks the second copies arrive while the first decode, so
    // their prompts go in a few rows per step.
    const bool late = cfg.row_multiple > 1 && cfg.row_multiple < 16;
    for (int copy = 0; copy < 2; ++copy) {
      if (copy == 1 && late)
        for (int i = 0; i < 3; ++i) {
          engine.step();
          engine_xs.step();
        }
      for (const auto& ref : refs) rs.push_back(engine.submit(greedy_request(ref)));
      rs_xs.push_back(engine_xs.submit(greedy_request(xs_ref)));
    }
    // Both engines step in lockstep: the four references are in flight together.
    int left;
    do {
      left = engine.step();
      left += engine_xs.step();
    } while (left > 0);
    for (size_t i = 0; i < rs.size(); ++i) check_against(refs[i % 3], *rs[i], 512);
    for (auto& r : rs_xs) check_against(xs_ref, *r, 512);
    REQUIRE(engine.kv().n_blocks_used() == 0);
  }
}

TEST_CASE("llama-2-tiny-random (F16 tensors, 32000 tokens) loads and generates", "[reference][f16]") {
  REQUIRE_SHARED(path, "models/llama-2-tiny-random.gguf");
  auto model = Model::load(path);
  REQUIRE(model->config().n_vocab == 32000);
  EngineParams ep;
  ep.max_seqs = 2;
  Engine engine(*model, ep);
  RequestParams rp;
  rp.prompt = model->tokenizer().encode("Hello world", true);
  rp.max_tokens = 16;
  rp.ignore_eos = true;
  rp.logits = kLogitsGenerated;
  auto r = engine.submit(rp);
  engine.run();
  REQUIRE(r->finish_reason() == FinishReason::Length);
  REQUIRE(r->n_generated() == 16);
  for (float v : r->logits()) REQUIRE(std::isfinite(v));
}
