#include <cmath>
#include <cstdio>
#include <mutex>
#include <random>
#include <vector>

#include "core/log.h"
#include "engine/engine.h"
#include "model/model.h"
#include "tools/evaluate.h"
#include "test_models.h"

using namespace infer;

namespace {



RequestParams text_request(const Model& m, const std::string& text, int max_tokens, float temp = 0) {
  RequestParams rp;
  rp.prompt = m.tokenizer().encode(text, true);
  rp.max_tokens = max_tokens;
  rp.sampling.temperature = temp;
  return rp;
}

}  // namespace

TEST_CASE("bad requests are refused at submit and the engine stays usable", "[engine]") {
  NEED_MODEL(model);
  EngineParams ep;
  ep.n_ctx = 64;
  ep.kv_blocks = 3;
  ep.block_size = 16;
  Engine engine(*model, ep);
  RequestParams bad;
  bad.prompt = {1, 99999};
  REQUIRE_THROWS_MATCHES(engine.submit(bad), Error, Catch::Predicate<Error>([](const Error& e) {
                           return e.status() == Status::InvalidArgument;
                         }));
  bad.prompt = {1, -1};
  REQUIRE_THROWS_AS(engine.submit(bad), Error);
  bad.prompt.clear();
  REQUIRE_THROWS_AS(engine.submit(bad), Error);
  bad.prompt.assign(65, 5);  // longer than n_ctx
  REQUIRE_THROWS_AS(engine.submit(bad), Error);
  bad.prompt.assign(60, 5);  // fits n_ctx but needs 4 blocks of 3
  REQUIRE_THROWS_MATCHES(engine.submit(bad), Error, Catch::Predicate<Error>([](const Error& e) {
                           return e.status() == Status::OutOfMemory;
                         }));
  bad = text_request(*model, "Hi", 4);
  bad.max_tokens = -1;
  REQUIRE_THROWS_AS(engine.submit(bad), Error);
  bad.max_tokens = 4;
  bad.sampling.top_p = -1;
  REQUIRE_THROWS_AS(engine.submit(bad), Error);

  auto ok = engine.submit(text_request(*model, "Once upon a time", 8));
  engine.run();
  REQUIRE(ok->finish_reason() == FinishReason::Length);
  REQUIRE(ok->n_generated() == 8);
  REQUIRE(engine.kv().n_blocks_used() == 0);
}

TEST_CASE("continuous batching sizes prompt chunks to end steps on a row tile", "[engine]") {
  CHECK(aligned_prompt_tokens(0, 8, 16) == 8);      // nothing decoding: the whole prompt
  CHECK(aligned_prompt_tokens(15, 8, 16) == 1);     // 15 decoding: one row fills the tile
  CHECK(aligned_prompt_tokens(14, 8, 16) == 2);
  CHECK(aligned_prompt_tokens(15, 497, 16) == 497); // long prompts still go in big chunks
  CHECK(aligned_prompt_tokens(15, 40, 16) == 33);   // 48 rows: three full tiles
  CHECK(aligned_prompt_tokens(3, 8, 16) == 8);      // fits in the open tile
  CHECK(aligned_prompt_tokens(16, 8, 16) == 8);     // on a boundary: a new tile, never a wait
  CHECK(aligned_prompt_tokens(16, 20, 16) == 16);
  CHECK(aligned_prompt_tokens(5, 0, 16) == 0);
  CHECK(aligned_prompt_tokens(7, 30, 1) == 30);     // off
  NEED_MODEL(model);
  EngineParams ep;
  ep.step_row_multiple = -1;
  REQUIRE_THROWS_AS(Engine(*model, ep), Error);
  ep.step_row_multiple = 4097;
  REQUIRE_THROWS_AS(Engine(*model, ep), Error);
  ep.step_row_multiple = 0;  // the backend's row tile
  Engine e(*model, ep);
}

TEST_CASE("continuous batching: with prompts waiting, a step never ends inside a second row tile", "[engine]") {
  // Short prompts, outputs of mixed length: sequences finish a few at a time
  // and their slots are refilled while the others decode. Every step after
  // the first (which has nothing decoding yet) has at most 16 rows or a
  // multiple of 16: the prompt chunks go to the free rows of the open tile
  // or fill whole new ones.
  NEED_MODEL(model);
  EngineParams ep;
  ep.max_seqs = 16;
  ep.n_threads = 1;
  Engine engine(*model, ep);
  std::mt19937 rng(5);
  for (int i = 0; i < 96; ++i) {
    RequestParams rp;
    rp.prompt.push_back(1);
    const int len = 3 + static_cast<int>(rng() % 9);
    for (int k = 1; k < len; ++k) rp.prompt.push_back(static_cast<int32_t>(3 + rng() % 500));
    rp.max_tokens = 2 + static_cast<int>(rng() % 40);
    rp.ignore_eos = true;
    rp.sampling.temperature = 0;
    engine.submit(rp);
  }
  struct Steps {
    std::mutex mu;
    std::vector<int> rows;
  } steps;
  set_log_callback(
      [](LogLevel, const char* msg, void* user) {
        int n = 0, rows = 0;
        if (std::sscanf(msg, "engine step %d: %d rows", &n, &rows) != 2) return;
        auto* s = static_cast<Steps*>(user);
        std::lock_guard<std::mutex> lock(s->mu);
        s->rows.push_back(rows);
      },
      &steps, LogLevel::Debug);
  engine.run();
  set_log_callback(nullptr, nullptr, LogLevel::Error);
  REQUIRE(steps.rows.size() > 50);
  int over_16 = 0;
  for (size_t i = 1; i < steps.rows.size(); ++i) {
    INFO("step " << i << ": " << steps.rows[i] << " rows");
    CHECK((steps.rows[i] <= 16 || steps.rows[i] % 16 == 0));
    over_16 += steps.rows[i] > 16;
  }
  CHECK(over_16 > 0);  // prompts did fill whole second tiles
  REQUIRE(engine.kv().n_blocks_used() == 0);
}

TEST_CASE("impossible engine parameters are refused", "[engine]") {
  NEED_MODEL(model);
  EngineParams ep;
  ep.block_size = 0;
  REQUIRE_THROWS_AS(Engine(*model, ep), Error);
  ep = EngineParams{};
  ep.max_seqs = 0;
  REQUIRE_THROWS_AS(Engine(*model, ep), Error);
  ep = EngineParams{};
  ep.kv_budget_bytes = 10;  // less than one block
  REQUIRE_THROWS_AS(Engine(*model, ep), Error);
}

TEST_CASE("cancellation before and during generation", "[engine]") {
  NEED_MODEL(model);
  Engine engine(*model, EngineParams{});
  auto before = engine.submit(text_request(*model, "Once upon a time", 50));
  before->request_cancel();
  int seen = 0;
  RequestParams rp = text_request(*model, "Tom and his dog", 50);
  rp.on_token = [&](int32_t, std::string_view) { return ++seen < 5; };
  auto during = engine.submit(rp);
  auto other = engine.submit(text_request(*model, "Once upon a time", 20));
  engine.run();
  REQUIRE(before->finish_reason() == FinishReason::Cancelled);
  REQUIRE(before->n_generated() == 0);
  REQUIRE(during->finish_reason() == FinishReason::Cancelled);
  REQUIRE(during->n_generated() == 5);
  REQUIRE(other->finish_reason() == FinishReason::Length);
  REQUIRE(engine.kv().n_blocks_used() == 0);
}

TEST_CASE("stop strings cut the text and streaming text equals the final text", "[engine]") {
  NEED_MODEL(model);
  Engine engine(*model, EngineParams{});
  // Greedy continuation of "Once upon a time" is ", there was a little girl named Lily. ..."
  std::string streamed;
  RequestParams rp = text_request(*model, "Once upon a time", 60);
  rp.stop = {"Lily"};
  rp.on_token = [&](int32_t, std::string_view t) {
    streamed += t;
    return true;
  };
  auto r = engine.submit(rp);
  RequestParams plain = text_request(*model, "Once upon a time", 60);
  std::string plain_streamed;
  plain.on_token = [&](int32_t, std::string_view t) {
    plain_streamed += t;
    return true;
  };
  auto p = engine.submit(plain);
  engine.run();
  REQUIRE(r->finish_reason() == FinishReason::Stop);
  REQUIRE(r->text() == ", there was a little girl named ");
  REQUIRE(streamed == r->text());
  REQUIRE(plain_streamed == p->text());
  REQUIRE(p->text().rfind(", there was a little girl named Lily.", 0) == 0);
}

TEST_CASE("max_tokens 0 scores the prompt only", "[engine]") {
  NEED_MODEL(model);
  Engine engine(*model, EngineParams{});
  RequestParams rp = text_request(*model, "Once upon a time", 0);
  rp.logits = kLogitsPrompt | kLogitsLogprobs;
  auto r = engine.submit(rp);
  engine.run();
  REQUIRE(r->finish_reason() == FinishReason::Length);
  REQUIRE(r->n_generated() == 0);
  REQUIRE(r->n_logit_rows() == 5);
  for (int row = 0; row < 5; ++row) {
    double sum = 0;
    for (int j = 0; j < 512; ++j) sum += std::exp(static_cast<double>(r->logits()[row * 512 + j]));
    REQUIRE(sum == Approx(1.0).epsilon(1e-4));
  }
}

TEST_CASE("sampling with a seed is reproducible, alone or batched", "[engine]") {
  NEED_MODEL(model);
  auto sample = [&](uint64_t seed, int copies) {
    Engine engine(*model, EngineParams{});
    std::vector<std::shared_ptr<Request>> rs;
    for (int i = 0; i < copies; ++i) {
      RequestParams rp = text_request(*model, "Once upon a time", 40, 0.9f);
      rp.sampling.seed = seed;
      rs.push_back(engine.submit(rp));
    }
    engine.run();
    for (auto& r : rs) REQUIRE(r->text() == rs[0]->text());
    return rs[0]->text();
  };
  const std::string a = sample(42, 1), b = sample(42, 3), c = sample(43, 1);
  REQUIRE(a == b);
  REQUIRE(a != c);
}

TEST_CASE("generation stops at the context length", "[engine]") {
  NEED_MODEL(model);
  EngineParams ep;
  ep.n_ctx = 20;
  Engine engine(*model, ep);
  RequestParams rp = text_request(*model, "Once upon a time", 100);
  rp.ignore_eos = true;
  auto r = engine.submit(rp);
  engine.run();
  REQUIRE(r->finish_reason() == FinishReason::Length);
  REQUIRE(r->n_prompt() + r->n_generated() <= 20);
  REQUIRE(r->n_generated() >= 14);
}

TEST_CASE("engine stats count steps and tokens", "[engine]") {
  NEED_MODEL(model);
  Engine engine(*model, EngineParams{});
  auto a = engine.submit(text_request(*model, "Once upon a time", 10));
  auto b = engine.submit(text_request(*model, "Tom", 10));
  REQUIRE(engine.stats().n_waiting == 2);
  engine.run();
  const EngineStats s = engine.stats();
  REQUIRE(s.n_running == 0);
  REQUIRE(s.n_waiting == 0);
  REQUIRE(s.n_prompt_tokens == static_cast<uint64_t>(a->n_prompt() + b->n_prompt()));
  REQUIRE(s.n_generated_tokens == 20);
  REQUIRE(s.n_steps == 10);  // both prompts in step 1, then decode steps together
}

TEST_CASE("perplexity and bench tools", "[engine][tools]") {
  NEED_MODEL(model);
  const std::string eval = infer_test::shared_file("text/stories-eval.txt");
  if (!eval.empty()) {
    PerplexityResult r = perplexity(*model, infer_test::read_text(eval), 128, 2);
    REQUIRE(std::isfinite(r.perplexity));
    REQUIRE(r.perplexity > 1.0);
    REQUIRE(r.perplexity < 100.0);  // a trained model on in-domain text
    REQUIRE(r.n_tokens > 100);
  }
  REQUIRE_THROWS_AS(perplexity(*model, "", 128, 1), Error);
  REQUIRE_THROWS_AS(perplexity(*model, "text", 1, 1), Error);
  EngineParams ep;
  ep.n_threads = 1;
  BenchResult b = bench(*model, 16, 8, /*batch=*/1, /*repetitions=*/1, ep);
  REQUIRE(b.prefill_tokens_per_s > 0);
  REQUIRE(b.decode_tokens_per_s > 0);
}
