// The engine driven by its background thread, with submissions and
// cancellations from many host threads at once.
#include <atomic>
#include <random>
#include <thread>

#include "engine/engine.h"
#include "engine/engine_thread.h"
#include "infer/infer.h"
#include "model/model.h"
#include "test_models.h"

using namespace infer;

TEST_CASE("stress: 1000 requests from 4 threads, a third cancelled, each finishes once", "[engine][thread][stress]") {
  auto model = infer_test::stories260k();
  if (!model) {
    WARN("SKIPPED: models/stories260K.gguf not found");
    return;
  }
  EngineParams ep;
  ep.max_seqs = 16;
  ep.kv_blocks = 40;  // tight: forces preemption under load
  ep.block_size = 8;
  ep.max_batch_tokens = 64;
  Engine engine(*model, ep);
  EngineThread thread(engine);

  struct Tracked {
    std::shared_ptr<Request> req;
    bool cancelled = false;
    int32_t max_tokens = 0;
    std::atomic<int> callbacks{0};
  };
  const int kThreads = 4, kPerThread = 250;
  std::vector<std::unique_ptr<Tracked>> all(kThreads * kPerThread);
  for (auto& t : all) t = std::make_unique<Tracked>();
  std::vector<std::thread> submitters;
  for (int th = 0; th < kThreads; ++th) {
    submitters.emplace_back([&, th] {
      std::mt19937 rng(1000 + th);
      for (int i = 0; i < kPerThread; ++i) {
        Tracked& t = *all[th * kPerThread + i];
        RequestParams rp;
        rp.prompt.push_back(1);
        const int n = 1 + static_cast<int>(rng() % 24);
        for (int k = 0; k < n; ++k) rp.prompt.push_back(3 + static_cast<int32_t>(rng() % 500));
        rp.max_tokens = t.max_tokens = 1 + static_cast<int32_t>(rng() % 30);
        rp.sampling.temperature = (rng() % 2) ? 0.0f : 0.8f;
        rp.sampling.seed = rng();
        rp.priority = static_cast<int32_t>(rng() % 3);
        Tracked* tp = &t;
        rp.on_token = [tp](int32_t, std::string_view) {
          tp->callbacks++;
          return true;
        };
        t.req = engine.submit(std::move(rp));
        thread.notify();
        if (rng() % 3 == 0) {
          t.cancelled = true;
          if (rng() % 2) std::this_thread::sleep_for(std::chrono::microseconds(rng() % 3000));
          t.req->request_cancel();
        }
      }
    });
  }
  for (auto& s : submitters) s.join();
  thread.wait_idle();

  int cancelled = 0, stopped = 0, length = 0;
  for (auto& tp : all) {
    Tracked& t = *tp;
    std::lock_guard<std::mutex> lock(t.req->mutex());
    REQUIRE(t.req->finished());
    const FinishReason f = t.req->finish_reason();
    REQUIRE(f != FinishReason::Error);
    if (f == FinishReason::Cancelled) {
      REQUIRE(t.cancelled);
      ++cancelled;
    } else {
      REQUIRE((f == FinishReason::Stop || f == FinishReason::Length));
      f == FinishReason::Stop ? ++stopped : ++length;
    }
    if (f == FinishReason::Length) REQUIRE(t.req->n_generated() == t.max_tokens);
    REQUIRE(t.req->n_generated() <= t.max_tokens);
    // Every generated token was reported exactly once.
    REQUIRE(t.callbacks == t.req->n_generated());
  }
  INFO("cancelled " << cancelled << ", stop " << stopped << ", length " << length);
  REQUIRE(cancelled > 0);
  REQUIRE(length > 0);
  const EngineStats st = engine.stats();
  REQUIRE(st.n_finished == all.size());
  REQUIRE(st.n_running == 0);
  REQUIRE(st.kv.blocks_used == 0);

  // Still usable: a greedy request gives the reference continuation.
  RequestParams rp;
  rp.prompt = model->tokenizer().encode("Once upon a time", true);
  rp.max_tokens = 12;
  rp.sampling.temperature = 0;
  auto r = engine.submit(rp);
  thread.notify();
  thread.wait_idle();
  Engine fresh(*model, EngineParams{});
  auto expect = fresh.submit(rp);
  fresh.run();
  REQUIRE(r->text() == expect->text());
  REQUIRE(r->text().rfind(", there was a little girl named Lily.", 0) == 0);
}

TEST_CASE("C API: background thread, submit from threads, poll with timeouts", "[engine][thread][c_api]") {
  const std::string path = infer_test::shared_file("models/stories260K.gguf");
  if (path.empty()) {
    WARN("SKIPPED: models/stories260K.gguf not found");
    return;
  }
  infer_model* model = nullptr;
  REQUIRE(infer_model_load(path.c_str(), nullptr, &model) == INFER_OK);
  infer_engine* engine = nullptr;
  REQUIRE(infer_engine_create(model, nullptr, &engine) == INFER_OK);
  REQUIRE(infer_engine_start(engine) == INFER_OK);
  REQUIRE(infer_engine_start(engine) == INFER_OK);  // idempotent
  REQUIRE(infer_engine_step(engine, nullptr) == INFER_ERR_BUSY);

  infer_sampling_params sp;
  infer_sampling_params_init(&sp);
  sp.temperature = 0;
  std::vector<std::thread> threads;
  std::vector<std::string> texts(6);
  // Catch2 assertions are not thread-safe (TSan): the threads record what
  // went wrong and the test thread checks it.
  std::vector<std::string> errors(6);
  for (int i = 0; i < 6; ++i) {
    threads.emplace_back([&, i] {
      infer_request_params rp;
      infer_request_params_init(&rp);
      rp.prompt = "Once upon a time";
      rp.max_tokens = 20;
      rp.sampling = &sp;
      infer_request* req = nullptr;
      if (infer_submit(engine, &rp, &req) != INFER_OK) {
        errors[i] = std::string("submit: ") + infer_last_error();
        return;
      }
      char buf[8];  // small on purpose: text arrives in pieces
      int32_t finished = 0;
      while (!finished) {
        size_t n = 0;
        if (infer_request_next_text(req, 1000, buf, sizeof buf, &n, &finished) != INFER_OK) {
          errors[i] = std::string("next_text: ") + infer_last_error();
          break;
        }
        texts[i].append(buf, n);
      }
      int32_t toks[64];
      size_t nt = 0;
      if (infer_request_next_tokens(req, 0, toks, 64, &nt, &finished) != INFER_OK || nt != 20 || finished != 1)
        errors[i] += " next_tokens: " + std::to_string(nt) + " tokens, finished " + std::to_string(finished);
      infer_request_free(req);
    });
  }
  for (auto& t : threads) t.join();
  for (auto& e : errors) CHECK(e == "");
  for (auto& t : texts) REQUIRE(t == texts[0]);
  REQUIRE(texts[0].rfind(", there was a little girl named Lily.", 0) == 0);

  // A long request cancelled by stopping the engine without draining.
  infer_request_params rp;
  infer_request_params_init(&rp);
  rp.prompt = "Once upon a time";
  rp.max_tokens = 100000;
  rp.ignore_eos = 1;
  infer_request* req = nullptr;
  REQUIRE(infer_submit(engine, &rp, &req) == INFER_OK);
  int32_t toks[4];
  size_t nt = 0;
  int32_t finished = 0;
  REQUIRE(infer_request_next_tokens(req, 5000, toks, 4, &nt, &finished) == INFER_OK);
  REQUIRE(infer_engine_stop(engine, 0) == INFER_OK);
  infer_request_stats st;
  infer_request_stats_init(&st);
  REQUIRE(infer_request_get_stats(req, &st) == INFER_OK);
  REQUIRE(st.finish_reason == INFER_FINISH_CANCELLED);
  infer_request_free(req);
  // Stopped: the caller drives it again.
  REQUIRE(infer_engine_run(engine) == INFER_OK);
  int32_t maxc = 0;
  REQUIRE(infer_engine_max_concurrency(engine, 100, 100, &maxc) == INFER_OK);
  REQUIRE(maxc == 16);
  infer_engine_free(engine);
  infer_model_free(model);
}

namespace {
// Slows each token down so that a request lasts long enough to be waited on.
int32_t slow_token(infer_request*, int32_t, const char*, size_t, void* user_data) {
  static_cast<std::atomic<int>*>(user_data)->fetch_add(1);
  std::this_thread::sleep_for(std::chrono::milliseconds(2));
  return 0;  // go on
}
}  // namespace

TEST_CASE("C API: infer_request_wait waits for the end, times out, and leaves the read positions alone",
          "[engine][thread][capi]") {
  const std::string path = infer_test::shared_file("models/stories260K.gguf");
  if (path.empty()) {
    WARN("SKIPPED: models/stories260K.gguf not found");
    return;
  }
  infer_model* model = nullptr;
  REQUIRE(infer_model_load(path.c_str(), nullptr, &model) == INFER_OK);
  infer_engine* engine = nullptr;
  REQUIRE(infer_engine_create(model, nullptr, &engine) == INFER_OK);
  REQUIRE(infer_engine_start(engine) == INFER_OK);

  int32_t fin = 7;
  REQUIRE(infer_request_wait(nullptr, 0, &fin) == INFER_ERR_INVALID_ARGUMENT);
  REQUIRE(fin == 0);

  std::atomic<int> seen{0};
  infer_request_params rp;
  infer_request_params_init(&rp);
  rp.prompt = "Once upon a time";
  rp.max_tokens = 40;  // about 80 ms at 2 ms a token
  rp.ignore_eos = 1;
  rp.on_token = slow_token;
  rp.user_data = &seen;
  infer_request* req = nullptr;
  REQUIRE(infer_submit(engine, &rp, &req) == INFER_OK);
  REQUIRE(infer_request_wait(req, 0, nullptr) == INFER_ERR_INVALID_ARGUMENT);

  // A short wait ends unfinished (generation takes at least 80 ms).
  const auto t0 = std::chrono::steady_clock::now();
  REQUIRE(infer_request_wait(req, 10, &fin) == INFER_OK);
  const double waited_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  CHECK(fin == 0);
  CHECK(waited_ms >= 9.0);  // it did wait (not woken by the tokens made meanwhile)
  CHECK(seen.load() < 40);

  // Without a limit it returns once, at the end, with every token made.
  REQUIRE(infer_request_wait(req, -1, &fin) == INFER_OK);
  CHECK(fin == 1);
  CHECK(seen.load() == 40);
  infer_request_stats st;
  infer_request_stats_init(&st);
  REQUIRE(infer_request_get_stats(req, &st) == INFER_OK);
  CHECK(st.finish_reason == INFER_FINISH_LENGTH);
  // The readers' positions did not move: every token and all the text remain.
  int32_t toks[64];
  size_t nt = 0;
  int32_t tfin = 0;
  REQUIRE(infer_request_next_tokens(req, 0, toks, 64, &nt, &tfin) == INFER_OK);
  CHECK(nt == 40);
  CHECK(tfin == 1);
  char buf[1024];
  size_t nb = 0;
  REQUIRE(infer_request_next_text(req, 0, buf, sizeof buf, &nb, &tfin) == INFER_OK);
  CHECK(nb > 0);
  CHECK(tfin == 1);
  // Finished: returns at once, again.
  REQUIRE(infer_request_wait(req, -1, &fin) == INFER_OK);
  CHECK(fin == 1);
  infer_request_free(req);

  // A reader waiting for tokens is still woken by each one while another
  // thread waits for the end of the same request.
  rp.max_tokens = 30;
  seen = 0;
  REQUIRE(infer_submit(engine, &rp, &req) == INFER_OK);
  std::atomic<int32_t> end_fin{0};
  std::thread ender([&] {
    int32_t f = 0;
    infer_request_wait(req, -1, &f);
    end_fin = f;
  });
  int reads = 0;
  for (int32_t f = 0; !f;) {
    size_t n = 0;
    REQUIRE(infer_request_next_tokens(req, 1000, toks, 64, &n, &f) == INFER_OK);
    reads += n > 0;
  }
  ender.join();
  CHECK(end_fin.load() == 1);
  CHECK(reads > 5);  // tokens arrived as they were made, not all at the end
  infer_request_free(req);

  infer_engine_free(engine);
  infer_model_free(model);
}
