// Reliability of the background engine (infer_engine_start) against hosts
// that free, stop and submit from many threads at once. Written from the
// reproducers of ../shared/repro; run under ASan and TSan (scripts/test.sh,
// the "thread" tests).
#include <sys/resource.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "infer/infer.h"
#include "test_util.h"

namespace {

infer_model* load_stories(const std::string& path) {
  infer_model* m = nullptr;
  REQUIRE(infer_model_load(path.c_str(), nullptr, &m) == INFER_OK);
  return m;
}

double cpu_seconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) * 1e-6;
}

// Per-request callback state: `freed` is set by the host thread right after
// infer_request_free returned; a callback that sees it was called too late.
struct Tag {
  std::atomic<bool> freed{false};
};
std::atomic<long> g_calls{0}, g_after_free{0};

int32_t late_callback(infer_request* r, int32_t, const char*, size_t, void* user) {
  Tag* tag = static_cast<Tag*>(user);
  g_calls++;
  if (tag->freed.load()) g_after_free++;
  // Uses the handle, as hosts do: a freed handle is a use-after-free (ASan).
  char buf[8];
  size_t need = 0;
  infer_request_text(r, buf, sizeof buf, &need);
  // Stay a while: widens the window in which a free on another thread
  // would race with this call.
  for (volatile int i = 0; i < 5000; i = i + 1) {
  }
  if (tag->freed.load()) g_after_free++;
  return 0;
}

}  // namespace

// #2: the engine thread called a request's token callback with a handle that
// infer_request_free had already freed on another thread.
TEST_CASE("thread reliability: no token callback after infer_request_free returns", "[reliability][thread]") {
  REQUIRE_SHARED(path, "models/stories260K.gguf");
  infer_model* m = load_stories(path);
  infer_engine_params ep;
  infer_engine_params_init(&ep);
  ep.n_threads = 1;
  ep.max_seqs = 8;
  infer_engine* e = nullptr;
  REQUIRE(infer_engine_create(m, &ep, &e) == INFER_OK);
  REQUIRE(infer_engine_start(e) == INFER_OK);
  g_calls = 0;
  g_after_free = 0;
  constexpr int kThreads = 8, kPerThread = 40;
  std::vector<std::unique_ptr<Tag>> tags(kThreads * kPerThread);  // outlive every callback
  for (auto& t : tags) t = std::make_unique<Tag>();
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int th = 0; th < kThreads; ++th) {
    threads.emplace_back([&, th] {
      for (int i = 0; i < kPerThread; ++i) {
        Tag* tag = tags[th * kPerThread + i].get();
        infer_request_params rp;
        infer_request_params_init(&rp);
        rp.prompt = "Once upon a time";
        rp.max_tokens = 200;
        rp.ignore_eos = 1;
        rp.on_token = late_callback;
        rp.user_data = tag;
        infer_request* r = nullptr;
        if (infer_submit(e, &rp, &r) != INFER_OK) {
          failures++;
          continue;
        }
        int32_t tk[4];
        size_t n = 0;
        int32_t fin = 0;
        infer_request_next_tokens(r, 2000, tk, 1 + i % 4, &n, &fin);  // generation under way
        infer_request_free(r);
        tag->freed = true;
      }
    });
  }
  for (auto& t : threads) t.join();
  REQUIRE(infer_engine_stop(e, 0) == INFER_OK);
  CHECK(failures == 0);
  CHECK(g_calls > 0);
  CHECK(g_after_free == 0);
  infer_engine_free(e);
  infer_model_free(m);
}

// A callback that frees its own request must not deadlock on itself.
namespace {
int32_t self_freeing_callback(infer_request* r, int32_t, const char*, size_t, void* user) {
  auto* count = static_cast<std::atomic<int>*>(user);
  if ((*count)++ == 2) infer_request_free(r);
  return 0;
}
}  // namespace

TEST_CASE("thread reliability: a callback may free its own request", "[reliability][thread]") {
  REQUIRE_SHARED(path, "models/stories260K.gguf");
  infer_model* m = load_stories(path);
  infer_engine_params ep;
  infer_engine_params_init(&ep);
  ep.n_threads = 1;
  infer_engine* e = nullptr;
  REQUIRE(infer_engine_create(m, &ep, &e) == INFER_OK);
  std::atomic<int> count{0};
  infer_request_params rp;
  infer_request_params_init(&rp);
  rp.prompt = "Once";
  rp.max_tokens = 20;
  rp.ignore_eos = 1;
  rp.on_token = self_freeing_callback;
  rp.user_data = &count;
  infer_request* r = nullptr;
  REQUIRE(infer_submit(e, &rp, &r) == INFER_OK);
  REQUIRE(infer_engine_start(e) == INFER_OK);
  REQUIRE(infer_engine_wait_idle(e) == INFER_OK);
  CHECK(count == 3);  // freed (so cancelled, disarmed) at the third token
  REQUIRE(infer_engine_stop(e, 1) == INFER_OK);
  infer_engine_free(e);
  infer_model_free(m);
}

// #10: infer_engine_stop(drain = 1) never returned while other threads kept
// submitting.
TEST_CASE("thread reliability: stop with drain returns while other threads keep submitting",
          "[reliability][thread]") {
  REQUIRE_SHARED(path, "models/stories260K.gguf");
  infer_model* m = load_stories(path);
  infer_engine_params ep;
  infer_engine_params_init(&ep);
  ep.n_threads = 1;
  ep.max_seqs = 4;
  infer_engine* e = nullptr;
  REQUIRE(infer_engine_create(m, &ep, &e) == INFER_OK);
  REQUIRE(infer_engine_start(e) == INFER_OK);
  std::atomic<bool> stop_begun{false}, stop_done{false}, quit{false};
  std::atomic<long> before{0}, before_unfinished{0}, before_cancelled{0}, busy{0};
  std::vector<std::thread> threads;
  for (int th = 0; th < 6; ++th) {
    threads.emplace_back([&, th] {
      unsigned seed = 1234u + th;
      while (!quit) {
        infer_request_params rp;
        infer_request_params_init(&rp);
        rp.prompt = "Once upon a time";
        seed = seed * 1103515245u + 12345u;
        rp.max_tokens = 1 + static_cast<int32_t>((seed >> 8) % 30);
        infer_request* r = nullptr;
        const infer_status st = infer_submit(e, &rp, &r);
        if (st != INFER_OK) {
          if (st == INFER_ERR_BUSY) busy++;
          std::this_thread::yield();
          continue;
        }
        const bool submitted_before = !stop_begun;
        if (submitted_before) before++;
        int32_t fin = 0;
        char buf[32];
        size_t n = 0;
        int waited_ms = 0;
        while (!fin) {
          if (infer_request_next_text(r, 20, buf, sizeof buf, &n, &fin) != INFER_OK) break;
          if (stop_done && !fin && (waited_ms += 20) > 3000) break;
        }
        infer_request_stats s;
        infer_request_stats_init(&s);
        infer_request_get_stats(r, &s);
        if (submitted_before && !fin) before_unfinished++;
        if (submitted_before && s.finish_reason == INFER_FINISH_CANCELLED) before_cancelled++;
        infer_request_free(r);
        if (stop_done) break;
      }
    });
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  stop_begun = true;
  const auto t0 = std::chrono::steady_clock::now();
  REQUIRE(infer_engine_stop(e, 1) == INFER_OK);
  const double stop_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  stop_done = true;
  quit = true;
  for (auto& t : threads) t.join();
  CHECK(stop_s < 30);
  CHECK(before > 0);
  CHECK(before_unfinished == 0);
  CHECK(before_cancelled == 0);
  // After the stop the engine takes submissions again, for the caller to step.
  infer_request_params rp;
  infer_request_params_init(&rp);
  rp.prompt = "Once";
  rp.max_tokens = 2;
  infer_request* r = nullptr;
  REQUIRE(infer_submit(e, &rp, &r) == INFER_OK);
  REQUIRE(infer_engine_run(e) == INFER_OK);
  infer_request_stats s;
  infer_request_stats_init(&s);
  REQUIRE(infer_request_get_stats(r, &s) == INFER_OK);
  CHECK(s.n_generated_tokens == 2);
  infer_request_free(r);
  infer_engine_free(e);
  infer_model_free(m);
}

// #19: while a DYNAMIC batch waited for its timeout, the engine thread called
// step() in a loop: a whole core for the whole timeout.
TEST_CASE("thread reliability: a DYNAMIC batch waits without spinning, and starts at its timeout",
          "[reliability][thread]") {
  REQUIRE_SHARED(path, "models/stories260K.gguf");
  infer_model* m = load_stories(path);
  infer_engine_params ep;
  infer_engine_params_init(&ep);
  ep.n_threads = 1;
  ep.policy = INFER_POLICY_DYNAMIC;
  ep.batch_timeout_ms = 600000;
  ep.max_seqs = 8;
  infer_engine* e = nullptr;
  REQUIRE(infer_engine_create(m, &ep, &e) == INFER_OK);
  REQUIRE(infer_engine_start(e) == INFER_OK);
  infer_request_params rp;
  infer_request_params_init(&rp);
  rp.prompt = "Once";
  rp.max_tokens = 4;
  infer_request* r = nullptr;
  REQUIRE(infer_submit(e, &rp, &r) == INFER_OK);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  const double c0 = cpu_seconds();
  const auto w0 = std::chrono::steady_clock::now();
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  const double used = cpu_seconds() - c0;
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - w0).count();
  CHECK(used < 0.25 * wall);  // spinning costs ~1 CPU-second per second
  // Cancelling the waiting request finishes it promptly.
  REQUIRE(infer_request_cancel(r) == INFER_OK);
  int32_t tk[8];
  size_t n = 0;
  int32_t fin = 0;
  const auto t0 = std::chrono::steady_clock::now();
  while (!fin && std::chrono::steady_clock::now() - t0 < std::chrono::seconds(5))
    REQUIRE(infer_request_next_tokens(r, 100, tk, 8, &n, &fin) == INFER_OK);
  CHECK(fin == 1);
  infer_request_free(r);
  REQUIRE(infer_engine_stop(e, 0) == INFER_OK);
  infer_engine_free(e);

  // A short timeout: the lone request starts when it expires, not later.
  ep.batch_timeout_ms = 200;
  REQUIRE(infer_engine_create(m, &ep, &e) == INFER_OK);
  REQUIRE(infer_engine_start(e) == INFER_OK);
  const auto s0 = std::chrono::steady_clock::now();
  REQUIRE(infer_submit(e, &rp, &r) == INFER_OK);
  fin = 0;
  while (!fin && std::chrono::steady_clock::now() - s0 < std::chrono::seconds(10))
    REQUIRE(infer_request_next_tokens(r, 100, tk, 8, &n, &fin) == INFER_OK);
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - s0).count();
  CHECK(fin == 1);
  CHECK(took >= 0.15);
  CHECK(took < 3.0);
  infer_request_free(r);
  REQUIRE(infer_engine_stop(e, 1) == INFER_OK);
  infer_engine_free(e);
  infer_model_free(m);
}
