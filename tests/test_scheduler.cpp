// The scheduler and the request lifecycle under pressure: preemption,
// re-admission, forks, cancellation, pools too small for some requests, and
// allocation failures injected anywhere in a step. Every request must finish
// with its correct greedy output or a documented reason, the KV books must
// balance after every step, and the engine must stay usable.
#include <algorithm>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "core/fault.h"
#include "engine/engine.h"
#include "model/model.h"
#include "test_models.h"

using namespace infer;

namespace {

RequestParams greedy(const std::vector<int32_t>& prompt, int max_tokens, int priority = 0) {
  RequestParams rp;
  rp.prompt = prompt;
  rp.max_tokens = max_tokens;
  rp.sampling.temperature = 0;
  rp.ignore_eos = true;
  rp.priority = priority;
  return rp;
}

std::vector<int32_t> generated(const Request& r) { return {r.generated(), r.generated() + r.n_generated()}; }

// Greedy references: the first n tokens after each prompt, computed alone in
// a roomy engine (greedy: the first k of n are the k-token answer).
class References {
 public:
  References(const Model& m, int n) : m_(m), n_(n) {}
  std::vector<int32_t> get(const std::vector<int32_t>& prompt, int k) {
    auto it = cache_.find(prompt);
    if (it == cache_.end()) it = cache_.emplace(prompt, infer_test::greedy_tokens(m_, prompt, KvType::F32, n_)).first;
    REQUIRE(k <= n_);
    return std::vector<int32_t>(it->second.begin(), it->second.begin() + k);
  }

 private:
  const Model& m_;
  int n_;
  std::map<std::vector<int32_t>, std::vector<int32_t>> cache_;
};

// Steps until idle, checking the KV books after every step; fails the test
// instead of hanging when the engine does not converge.
void run_checked(Engine& e, int max_steps = 20000) {
  int steps = 0;
  while (e.step() > 0) {
    e.kv().check_invariants();
    REQUIRE(++steps < max_steps);
  }
  e.kv().check_invariants();
}

bool is_prefix(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
  return a.size() <= b.size() && std::equal(a.begin(), a.end(), b.begin());
}

}  // namespace

TEST_CASE("a leader freed before its prompt is computed: its followers run on their own", "[engine][sched]") {
  NEED_MODEL(model);
  const auto prompt = model->tokenizer().encode(
      "Once upon a time there was a little girl named Lily who loved to play outside in the park", true);
  References ref(*model, 8);
  EngineParams ep;
  ep.n_threads = 1;
  ep.max_batch_tokens = 4;  // the prompt takes several steps
  Engine e(*model, ep);
  std::vector<std::shared_ptr<Request>> family = e.submit_n(greedy(prompt, 8), 3);
  REQUIRE(e.step() > 0);
  family[0]->request_cancel();  // what infer_request_free does...
  std::weak_ptr<Request> leader = family[0];
  family[0].reset();  // ...and the host's reference is gone
  run_checked(e);
  CHECK(leader.expired());  // nothing kept it alive
  for (int i = 1; i < 3; ++i) {
    REQUIRE(family[i]->finish_reason() == FinishReason::Length);
    CHECK(generated(*family[i]) == ref.get(prompt, 8));
  }
  REQUIRE(e.kv().n_blocks_used() == 0);
}

TEST_CASE("priority preemption with re-admission in the same step fails nothing", "[engine][sched]") {
  NEED_MODEL(model);
  References ref(*model, 14);
  const std::vector<int32_t> bos = {model->tokenizer().vocab().bos >= 0 ? model->tokenizer().vocab().bos : 1};
  for (int delay = 0; delay <= 12; ++delay) {
    CAPTURE(delay);
    EngineParams ep;
    ep.n_threads = 1;
    ep.kv_blocks = 4;
    ep.block_size = 4;
    ep.max_seqs = 2;
    ep.max_batch_tokens = 4;
    ep.step_row_multiple = 1;
    ep.prefix_caching = false;
    Engine e(*model, ep);
    auto a = e.submit(greedy(bos, 14, 0));
    for (int i = 0; i < delay; ++i) e.step();
    auto b = e.submit(greedy(bos, 14, 1));
    run_checked(e);
    REQUIRE(a->finish_reason() == FinishReason::Length);
    REQUIRE(b->finish_reason() == FinishReason::Length);
    CHECK(generated(*a) == ref.get(bos, 14));
    CHECK(generated(*b) == ref.get(bos, 14));
    CHECK(b->n_preemptions() == 0);  // the higher priority never gives way
    REQUIRE(e.kv().n_blocks_used() == 0);
  }
}

TEST_CASE("a pool smaller than some requests: those fail with OUT_OF_MEMORY, the rest complete", "[engine][sched]") {
  NEED_MODEL(model);
  References ref(*model, 64);
  const char* texts[] = {"Once upon a time", "The little dog", "Lily and Tom went to the park. They saw a big tree."};
  for (int64_t host_blocks : {0, 8}) {
    CAPTURE(host_blocks);
    EngineParams ep;
    ep.n_threads = 1;
    ep.kv_blocks = 16;
    ep.block_size = 4;  // 64 positions in all
    ep.max_seqs = 6;
    ep.max_batch_tokens = 64;
    ep.prefix_caching = false;
    KvLayout l = model->kv_layout();
    l.block_size = 4;
    ep.host_kv_budget_bytes = host_blocks * l.block_bytes();
    Engine e(*model, ep);
    std::vector<std::shared_ptr<Request>> rs;
    for (int i = 0; i < 12; ++i)
      rs.push_back(e.submit(greedy(model->tokenizer().encode(texts[i % 3], true), 20 + (i * 7) % 44)));
    run_checked(e);
    int failed = 0;
    for (auto& r : rs) {
      const int feeds = r->n_prompt() + r->params().max_tokens - 1;  // the last token is never fed
      const std::vector<int32_t> want = ref.get(r->params().prompt, r->params().max_tokens);
      if (feeds > 64) {
        ++failed;
        REQUIRE(r->finish_reason() == FinishReason::Error);
        CHECK(r->status() == Status::OutOfMemory);
        CHECK(is_prefix(generated(*r), want));
      } else {
        REQUIRE(r->finish_reason() == FinishReason::Length);
        CHECK(generated(*r) == want);
      }
    }
    CHECK(failed > 0);  // the workload does contain requests that cannot fit
    REQUIRE(e.kv().n_blocks_used() == 0);
  }
}

TEST_CASE("destroying an engine finishes every request it holds as cancelled", "[engine][sched]") {
  NEED_MODEL(model);
  const auto prompt = model->tokenizer().encode("Once upon a time", true);
  std::vector<std::shared_ptr<Request>> rs;
  {
    EngineParams ep;
    ep.n_threads = 1;
    ep.max_seqs = 2;
    Engine e(*model, ep);
    for (int i = 0; i < 3; ++i) rs.push_back(e.submit(greedy(prompt, 50)));
    auto family = e.submit_n(greedy(prompt, 50), 2);
    rs.insert(rs.end(), family.begin(), family.end());
    e.step();
    e.step();
    rs.push_back(e.submit(greedy(prompt, 50)));  // still in the inbox
  }
  for (auto& r : rs) {
    CHECK(r->finish_reason() == FinishReason::Cancelled);
    r->wait_for(1000, -1);  // returns at once: finished
  }
}

TEST_CASE("max_concurrency does not overflow on huge lengths", "[engine][sched]") {
  NEED_MODEL(model);
  EngineParams ep;
  ep.n_threads = 1;
  Engine e(*model, ep);
  CHECK(e.max_concurrency(INT32_MAX, INT32_MAX) == 0);
  CHECK(e.max_concurrency(1, 0) == ep.max_seqs);
  CHECK_THROWS_AS(e.max_concurrency(0, 0), Error);
}

TEST_CASE("an n_ctx of INT32_MAX sizes the default pool without overflow", "[engine][sched]") {
  NEED_MODEL(model);
  EngineParams ep;
  ep.n_threads = 1;
  ep.n_ctx = INT32_MAX;
  ep.max_seqs = 65536;
  Engine e(*model, ep);  // capped at 1 GiB of KV
  CHECK(e.kv().bytes_total() <= (1ull << 30));
  auto r = e.submit(greedy({1}, 4));
  e.run();
  CHECK(r->finish_reason() == FinishReason::Length);
}

// The stress test: random priorities, lengths, arrival steps, cancellations
// and forks on pools so small that preemption, swapping and re-admission
// happen all the time.
TEST_CASE("scheduler stress: every request ends with its greedy output or a documented reason", "[engine][sched][stress]") {
  NEED_MODEL(model);
  const char* texts[] = {"Once upon a time", "The little dog ran to the park and", "Lily was happy",
                         "Once upon a time there was a big red ball", "Tom and Sue"};
  std::vector<std::vector<int32_t>> prompts;
  for (const char* t : texts) prompts.push_back(model->tokenizer().encode(t, true));
  References ref(*model, 40);
  uint64_t total_preemptions = 0, total_swaps = 0, total_cancelled = 0, total_oom = 0;
  for (uint32_t seed = 1; seed <= 160; ++seed) {
    CAPTURE(seed);
    std::mt19937 rng(seed);
    auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
    EngineParams ep;
    ep.n_threads = 1;
    ep.block_size = pick(0, 1) ? 4 : 8;
    ep.kv_blocks = pick(4, 14);
    ep.max_seqs = pick(2, 6);
    ep.max_batch_tokens = pick(3, 48);
    ep.step_row_multiple = pick(0, 1) ? 1 : 16;
    ep.prefix_caching = pick(0, 1) == 1;
    ep.policy = seed % 6 == 0 ? SchedPolicy::Static : SchedPolicy::Continuous;
    KvLayout l = model->kv_layout();
    l.block_size = ep.block_size;
    ep.host_kv_budget_bytes = pick(0, 1) ? pick(1, 12) * l.block_bytes() : 0;
    Engine e(*model, ep);
    const int pool_tokens = ep.kv_blocks * ep.block_size;

    struct Sub {
      std::shared_ptr<Request> r;
      int cancel_at;  // step at which the test cancels it (-1: never)
    };
    std::vector<Sub> subs;
    const int n_requests = pick(6, 14);
    int submitted = 0, step = 0;
    while (submitted < n_requests || e.step() > 0) {
      // Arrivals: a few per step, at random.
      while (submitted < n_requests && pick(0, 2) == 0) {
        const auto& prompt = prompts[pick(0, static_cast<int>(prompts.size()) - 1)];
        if (static_cast<int>(prompt.size()) + 1 > pool_tokens) {
          ++submitted;
          continue;
        }
        RequestParams rp = greedy(prompt, pick(1, 40), pick(0, 2));
        const int cancel_at = pick(0, 4) == 0 ? step + pick(0, 30) : -1;
        if (pick(0, 4) == 0) {
          for (auto& r : e.submit_n(rp, std::min(ep.max_seqs, pick(2, 3)))) subs.push_back({r, cancel_at});
        } else {
          subs.push_back({e.submit(rp), cancel_at});
        }
        ++submitted;
      }
      for (auto& s : subs)
        if (s.cancel_at == step) s.r->request_cancel();
      e.step();
      e.kv().check_invariants();
      REQUIRE(++step < 20000);
    }
    for (auto& s : subs) {
      const Request& r = *s.r;
      const std::vector<int32_t> want = ref.get(r.params().prompt, r.params().max_tokens);
      const std::vector<int32_t> got = generated(r);
      const int feeds = r.n_prompt() + r.params().max_tokens - 1;
      CAPTURE(r.id(), r.n_prompt(), r.params().max_tokens, feeds, pool_tokens);
      REQUIRE(r.finished());
      if (r.finish_reason() == FinishReason::Length) {
        CHECK(got == want);
      } else if (r.finish_reason() == FinishReason::Cancelled) {
        CHECK(s.cancel_at >= 0);
        CHECK(is_prefix(got, want));
        ++total_cancelled;
      } else {
        REQUIRE(r.finish_reason() == FinishReason::Error);
        CHECK(r.status() == Status::OutOfMemory);
        CHECK(feeds > pool_tokens);  // only requests that can never fit fail
        CHECK(is_prefix(got, want));
        ++total_oom;
      }
    }
    REQUIRE(e.kv().n_blocks_used() == 0);
    total_preemptions += e.stats().n_preemptions;
    total_swaps += e.stats().kv.swaps_out;
  }
  // The workload must really exercise what it claims to.
  CHECK(total_preemptions > 50);
  CHECK(total_swaps > 5);
  CHECK(total_cancelled > 0);
  CHECK(total_oom > 0);
}

// Allocation failures injected at each site of a step, at each hit in turn:
// the failed requests end with OUT_OF_MEMORY, the others are unharmed, the
// books balance, and the engine serves the next request correctly.
TEST_CASE("fault injection: allocation failures fail only their requests", "[engine][sched][fault]") {
  NEED_MODEL(model);
  const auto p1 = model->tokenizer().encode("Once upon a time", true);
  const auto p2 = model->tokenizer().encode("The little dog ran to the park and", true);
  References ref(*model, 24);
  struct Disarm {
    ~Disarm() { fault::disarm(); }
  } disarm_at_exit;
  for (const char* site : {"kv.reserve", "kv.add_sequence", "kv.fork", "engine.forward", "sched.plan"}) {
    int64_t injected = 0;
    for (int nth = 1; nth <= 12; ++nth) {
      CAPTURE(site, nth);
      EngineParams ep;
      ep.n_threads = 1;
      ep.block_size = 4;
      ep.kv_blocks = 24;
      ep.max_seqs = 4;
      ep.max_batch_tokens = 8;
      KvLayout l = model->kv_layout();
      l.block_size = 4;
      ep.host_kv_budget_bytes = 8 * l.block_bytes();
      Engine e(*model, ep);
      std::vector<std::shared_ptr<Request>> rs;
      rs.push_back(e.submit(greedy(p1, 24)));
      rs.push_back(e.submit(greedy(p2, 16, 1)));
      for (auto& r : e.submit_n(greedy(p1, 12), 2)) rs.push_back(r);
      rs.push_back(e.submit(greedy(p2, 20)));
      fault::arm(site, nth);
      run_checked(e);
      const int64_t failures = fault::failures();
      fault::disarm();
      injected += failures;
      int errors = 0;
      for (auto& r : rs) {
        REQUIRE(r->finished());
        const std::vector<int32_t> want = ref.get(r->params().prompt, r->params().max_tokens);
        if (r->finish_reason() == FinishReason::Error) {
          ++errors;
          CHECK(r->status() == Status::OutOfMemory);
          CHECK(is_prefix(generated(*r), want));
        } else {
          REQUIRE(r->finish_reason() == FinishReason::Length);
          CHECK(generated(*r) == want);
        }
      }
      CHECK(errors <= failures * static_cast<int>(rs.size()));  // no failure without an injected one
      if (failures == 0) CHECK(errors == 0);
      REQUIRE(e.kv().n_blocks_used() == 0);
      // Still usable.
      auto after = e.submit(greedy(p2, 10));
      run_checked(e);
      REQUIRE(after->finish_reason() == FinishReason::Length);
      CHECK(generated(*after) == ref.get(p2, 10));
    }
    CAPTURE(site);
    CHECK(injected > 0);  // the site is really on the path
  }
}

TEST_CASE("fault injection: planning that keeps failing ends the requests instead of hanging", "[engine][sched][fault]") {
  NEED_MODEL(model);
  const auto p = model->tokenizer().encode("Once upon a time", true);
  struct Disarm {
    ~Disarm() { fault::disarm(); }
  } disarm_at_exit;
  EngineParams ep;
  ep.n_threads = 1;
  Engine e(*model, ep);
  auto a = e.submit(greedy(p, 8));
  auto b = e.submit(greedy(p, 8, 1));
  fault::arm("sched.plan", 1, 1000000);
  run_checked(e, 100);
  fault::disarm();
  for (auto& r : {a, b}) {
    REQUIRE(r->finish_reason() == FinishReason::Error);
    CHECK(r->status() == Status::OutOfMemory);
  }
  REQUIRE(e.kv().n_blocks_used() == 0);
  auto c = e.submit(greedy(p, 8));
  run_checked(e);
  CHECK(c->finish_reason() == FinishReason::Length);
}
