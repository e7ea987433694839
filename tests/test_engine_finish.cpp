// The one finish path (lib/engine/finish.h): Finisher::ends_after decides
// whether a sequence ends after a token, Finisher::emit turns the token into
// output, and a request the owner cancelled takes no further token, in a
// plain step or in the middle of a speculative one.
#include <memory>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "engine/finish.h"
#include "model/model.h"
#include "test_models.h"

using namespace infer;

namespace {

std::shared_ptr<Sequence> sequence(const Model& m, RequestParams rp) {
  auto r = std::make_shared<Request>(1, std::move(rp));
  return std::make_shared<Sequence>(std::move(r), m.tokenizer(), m.config().n_vocab);
}

}  // namespace

TEST_CASE("finish: ends_after names every end of a sequence", "[engine][finish]") {
  NEED_MODEL(model);
  RequestParams rp;
  rp.prompt = {1, 2, 3};
  rp.max_tokens = 3;
  auto s = sequence(*model, rp);
  Finisher f(model->tokenizer(), model->config().n_vocab, /*n_ctx=*/8);
  const StopMatch none, found{true, 0, 0};
  CHECK(f.ends_after(*s, false, none) == FinishReason::None);
  CHECK(f.ends_after(*s, true, none) == FinishReason::Stop);    // EOS / EOT
  CHECK(f.ends_after(*s, false, found) == FinishReason::Stop);  // a stop string
  REQUIRE(f.emit(*s, 5));
  REQUIRE(f.emit(*s, 6));
  CHECK(f.ends_after(*s, false, none) == FinishReason::Length);  // max_tokens
  CHECK(!f.emit(*s, 7));
  CHECK(s->request().finish_reason() == FinishReason::Length);
  CHECK(s->request().n_generated() == 3);
  CHECK(f.n_emitted() == 3);

  rp.max_tokens = 100;
  auto t = sequence(*model, rp);
  for (int i = 0; i < 4; ++i) REQUIRE(f.emit(*t, 5));
  CHECK(f.ends_after(*t, false, none) == FinishReason::Length);  // the context (8 tokens)
  CHECK(!f.emit(*t, 5));
  CHECK(t->request().finish_reason() == FinishReason::Length);
  CHECK(t->n_tokens() == 8);
}

TEST_CASE("finish: the callback sees the released text, declining cancels, a cancelled sequence takes nothing",
          "[engine][finish]") {
  NEED_MODEL(model);
  const Tokenizer& tok = model->tokenizer();
  const std::vector<int32_t> lily = tok.encode(" Lily was happy", false);
  REQUIRE(lily.size() >= 2);
  RequestParams rp;
  rp.prompt = {1};
  rp.max_tokens = 100;
  rp.stop = {"happy"};
  std::string streamed;
  int calls = 0;
  rp.on_token = [&](int32_t, std::string_view text) {
    streamed += text;
    return ++calls < 100;
  };
  auto s = sequence(*model, rp);
  Finisher f(tok, model->config().n_vocab, 1000);
  bool going = true;
  for (int32_t t : lily) going = going && f.emit(*s, t);
  CHECK(!going);
  CHECK(s->request().finish_reason() == FinishReason::Stop);
  CHECK(s->request().text() == streamed);
  CHECK(streamed.find("happy") == std::string::npos);
  CHECK(streamed.find("Lily was") != std::string::npos);

  rp.stop.clear();
  rp.on_token = [](int32_t, std::string_view) { return false; };
  auto d = sequence(*model, rp);
  CHECK(!f.emit(*d, lily[0]));
  CHECK(d->request().finish_reason() == FinishReason::Cancelled);
  CHECK(d->request().n_generated() == 1);

  rp.on_token = nullptr;
  auto c = sequence(*model, rp);
  CHECK(f.may_take(*c));
  c->request().request_cancel();
  CHECK(!f.may_take(*c));
  CHECK(!c->request().finished());  // the scheduler retires it as cancelled
}

// The owner cancels from the callback at token k: no token follows, even
// when the step that produced token k had more accepted drafts to emit.
TEST_CASE("finish: no token after the owner's cancel, also inside a speculative step", "[engine][finish][spec_engine]") {
  NEED_MODEL(model);
  EngineParams ep;
  ep.n_threads = 1;
  ep.max_seqs = 1;
  ep.spec = SpecMethod::Ngram;
  ep.spec_k = 8;
  const std::vector<int32_t> prompt =
      model->tokenizer().encode("The cat sat on the mat. The cat sat on the mat. The cat sat on the mat. The cat", true);
  uint64_t accepted = 0;
  for (int k = 1; k <= 24; ++k) {
    CAPTURE(k);
    Engine engine(*model, ep);
    std::shared_ptr<Request> req;
    int seen = 0, after_cancel = 0;
    RequestParams rp;
    rp.prompt = prompt;
    rp.max_tokens = 40;
    rp.sampling.temperature = 0;
    rp.ignore_eos = true;
    rp.on_token = [&](int32_t, std::string_view) {
      if (req && req->cancel_requested()) ++after_cancel;
      if (++seen == k) req->request_cancel();
      return true;
    };
    req = engine.submit(rp);
    engine.run();
    CHECK(after_cancel == 0);
    CHECK(req->n_generated() == k);
    CHECK(req->finish_reason() == FinishReason::Cancelled);
    accepted += engine.stats().spec.accepted;
  }
  CHECK(accepted > 0);  // the text repeats: drafts were accepted, so the case was exercised
}
