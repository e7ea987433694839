// infer synth --grow-from: a small model embedded in a larger shape computes
// the same logits (zero padding, head and rotary placement, Q and RMSNorm
// scaling), and the noise moves it away from the small model.
#include <catch2/catch.hpp>

#include <cmath>
#include <string>
#include <vector>

#include "core/error.h"
#include "engine/engine.h"
#include "test_models.h"
#include "tools/synth.h"

using namespace infer;

namespace {

// Every position's logits of `text` (prompt rows).
std::vector<float> prompt_logits(const Model& m, const std::string& text) {
  Engine e(m, EngineParams{});
  RequestParams rp;
  rp.prompt = m.tokenizer().encode(text, true);
  rp.max_tokens = 0;
  rp.logits = kLogitsPrompt;
  auto r = e.submit(rp);
  e.run();
  return r->logits();
}

}  // namespace

TEST_CASE("grow: the grown model computes the small model's logits, and noise moves them", "[synth][grow]") {
  const std::string small = infer_test::shared_file("models/stories260K.gguf");
  if (small.empty()) {
    WARN("SKIPPED: models/stories260K.gguf not found");
    return;
  }
  // dim 64 -> 256, 5 -> 7 layers, 8 heads of 8 -> 8 heads of 32 (rotary
  // pairs 4x apart), 4 KV heads (groups of 2), ffn 172 -> 512.
  const SynthPreset shape{"grow-test", "llama", 256, 7, 8, 4, 512, 512, 512, 10000.0f, 1e-5f};
  SynthOptions o;
  o.type = DType::F32;
  const std::string out = infer_test::temp_dir() + "/grown.gguf";
  const std::string text = "Once upon a time, there was a little girl named Lily. She liked to play";
  auto ref = Model::load(small);
  const std::vector<float> want = prompt_logits(*ref, text);
  write_grown_model(small, shape, 0.0f, out, o);
  {
    auto grown = Model::load(out);
    CHECK(grown->config().n_embd == 256);
    CHECK(grown->config().n_layer == 7);
    const std::vector<float> got = prompt_logits(*grown, text);
    REQUIRE(got.size() == want.size());
    double worst = 0;
    for (size_t i = 0; i < got.size(); ++i) worst = std::max(worst, std::fabs(double(got[i]) - want[i]));
    CHECK(worst < 2e-3);
    // The vocabulary is the small model's: it can be the grown model's draft.
    check_draft_vocab(grown->tokenizer(), ref->tokenizer());
  }
  write_grown_model(small, shape, 0.02f, out, o);
  {
    auto noisy = Model::load(out);
    const std::vector<float> got = prompt_logits(*noisy, text);
    double worst = 0;
    for (size_t i = 0; i < got.size(); ++i) worst = std::max(worst, std::fabs(double(got[i]) - want[i]));
    CHECK(worst > 0.05);
  }
  // Shapes that cannot hold the small model, and bad noise, are refused.
  SynthPreset narrow = shape;
  narrow.n_layer = 3;
  REQUIRE_THROWS_AS(write_grown_model(small, narrow, 0.0f, out, o), Error);
  narrow = shape;
  narrow.n_head_kv = 8;  // groups of 1 cannot hold groups of 2
  REQUIRE_THROWS_AS(write_grown_model(small, narrow, 0.0f, out, o), Error);
  REQUIRE_THROWS_AS(write_grown_model(small, shape, -1.0f, out, o), Error);
}
