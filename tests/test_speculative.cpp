// Speculative decoding's engine-independent parts: the n-gram drafter, the
// lossless acceptance rule (checked statistically: whatever is drafted, the
// emitted token is distributed as the target's), the draft length
// controller and the acceptance counters.
#include <catch2/catch.hpp>

#include <cmath>
#include <random>
#include <vector>

#include "core/error.h"
#include "engine/speculative.h"

using namespace infer;

TEST_CASE("ngram drafter: proposes what followed the latest earlier occurrence of the suffix", "[speculative]") {
  NgramDrafter d(3, 1);
  std::vector<int32_t> out;
  // ... 1 2 3 [4 5 6] ... 1 2 3 [7 8] ... 1 2 3 -> the latest: 7 8 9
  const std::vector<int32_t> toks = {1, 2, 3, 4, 5, 6, 0, 1, 2, 3, 7, 8, 9, 1, 2, 3};
  CHECK(d.propose(toks, 4, out) == 4);  // the continuation may run into the suffix itself
  CHECK(out == std::vector<int32_t>({7, 8, 9, 1}));
  out.clear();
  CHECK(d.propose(toks, 9, out) == 6);  // no further than the text goes
  CHECK(out == std::vector<int32_t>({7, 8, 9, 1, 2, 3}));
  out.clear();
  CHECK(d.propose(toks, 2, out) == 2);  // capped by max_k
  CHECK(out == std::vector<int32_t>({7, 8}));
  // The longest matching suffix wins over a later shorter match: "5 6" occurred
  // once (followed by 0); "6" alone occurred later (followed by 2).
  out.clear();
  const std::vector<int32_t> t2 = {4, 5, 6, 0, 9, 6, 2, 9, 5, 6};
  CHECK(d.propose(t2, 1, out) == 1);
  CHECK(out == std::vector<int32_t>({0}));
  // No earlier occurrence of the last token: nothing.
  out.clear();
  CHECK(d.propose({1, 2, 3, 4}, 4, out) == 0);
  CHECK(out.empty());
  CHECK(d.propose({7}, 4, out) == 0);
  CHECK(d.propose(toks, 0, out) == 0);
  // n_min 2: a single repeated token is not enough.
  NgramDrafter d2(3, 2);
  CHECK(d2.propose({5, 1, 7, 5}, 4, out) == 0);
  CHECK(d2.propose({5, 1, 7, 5, 1}, 4, out) == 3);
  CHECK(out == std::vector<int32_t>({7, 5, 1}));
  REQUIRE_THROWS_AS(NgramDrafter(0, 0), Error);
  REQUIRE_THROWS_AS(NgramDrafter(2, 3), Error);
  REQUIRE_THROWS_AS(NgramDrafter(65, 1), Error);
}

TEST_CASE("verify_draft: greedy accepts exactly the argmax and draws nothing on a mismatch", "[speculative]") {
  const std::vector<TokenCandidate> p = {{1.0f, 5}};
  std::mt19937_64 rng(1), copy(1);
  DraftVerdict v = verify_draft(p, 5, nullptr, rng);
  CHECK(v.accepted);
  CHECK(v.token == 5);
  v = verify_draft(p, 3, nullptr, rng);
  CHECK_FALSE(v.accepted);
  CHECK(v.token == 5);
  CHECK(rng() == copy());  // one-token targets decide without randomness
}

namespace {

const std::vector<TokenCandidate> kTarget = {{0.40f, 10}, {0.25f, 11}, {0.15f, 12}, {0.10f, 13}, {0.06f, 14}, {0.04f, 15}};

double freq_error(const std::vector<int>& counts, int n) {
  double worst = 0;
  for (const TokenCandidate& c : kTarget) worst = std::max(worst, std::fabs(counts[c.second - 10] / double(n) - c.first));
  return worst;
}

}  // namespace

TEST_CASE("verify_draft: point-mass drafts leave the target distribution unchanged", "[speculative]") {
  // Whatever token is drafted (likely, unlikely, or one the target excludes),
  // the emitted token follows the target. 5 sigma at n = 200000 is < 0.0056.
  const int n = 200000;
  for (int32_t d : {10, 12, 15, 99}) {
    CAPTURE(d);
    std::mt19937_64 rng(1234 + d);
    std::vector<int> counts(6, 0);
    int accepted = 0;
    for (int i = 0; i < n; ++i) {
      const DraftVerdict v = verify_draft(kTarget, d, nullptr, rng);
      REQUIRE(v.token >= 10);
      REQUIRE(v.token <= 15);
      ++counts[v.token - 10];
      accepted += v.accepted;
    }
    CHECK(freq_error(counts, n) < 0.006);
    double pd = 0;
    for (const TokenCandidate& c : kTarget)
      if (c.second == d) pd = c.first;
    CHECK(std::fabs(accepted / double(n) - pd) < 0.006);  // accepted with probability p(d)
  }
}

TEST_CASE("verify_draft: drafts drawn from a draft model's distribution leave the target unchanged", "[speculative]") {
  // q differs from p (and puts mass where p has little): d ~ q, then verify.
  const std::vector<TokenCandidate> q = {{0.10f, 10}, {0.10f, 11}, {0.30f, 12}, {0.05f, 13}, {0.35f, 14}, {0.10f, 15}};
  const int n = 200000;
  std::mt19937_64 rng(77), draw(78);
  std::discrete_distribution<int> qd({0.10, 0.10, 0.30, 0.05, 0.35, 0.10});
  std::vector<int> counts(6, 0);
  int accepted = 0;
  for (int i = 0; i < n; ++i) {
    const int32_t d = 10 + qd(draw);
    const DraftVerdict v = verify_draft(kTarget, d, &q, rng);
    ++counts[v.token - 10];
    accepted += v.accepted;
  }
  CHECK(freq_error(counts, n) < 0.006);
  // Expected acceptance: sum_t min(p(t), q(t)) = .10+.10+.15+.05+.06+.04 = 0.50.
  CHECK(std::fabs(accepted / double(n) - 0.50) < 0.006);
}

TEST_CASE("draft length adapts to acceptance and pauses when drafting does not pay", "[speculative]") {
  DraftLength k(5);
  CHECK(k.next() == 2);
  k.update(2, 2);
  CHECK(k.next() == 3);
  for (int i = 0; i < 5; ++i) k.update(k.next(), k.next());
  CHECK(k.next() == 5);  // capped at max_k
  k.update(5, 1);
  CHECK(k.next() == 4);
  k.update(4, 2);
  CHECK(k.next() == 4);  // half accepted: kept
  // Nothing accepted for a while: paused, then one token again.
  int steps = 0;
  while (k.next() > 0 && steps < 100) {
    k.update(k.next(), 0);
    ++steps;
  }
  CHECK(k.next() == 0);
  CHECK(steps < 20);
  for (int i = 0; i < 16; ++i) k.update(0, 0);
  CHECK(k.next() == 1);
  DraftLength off(0);
  CHECK(off.next() == 0);
}

TEST_CASE("draft length by measured step costs: the most tokens per millisecond", "[speculative]") {
  CHECK(expected_tokens(0.0, 4) == 1.0);
  CHECK(expected_tokens(1.0, 4) == 5.0);
  CHECK(expected_tokens(0.5, 1) == Approx(1.5));
  CHECK(expected_tokens(0.84, 4) == Approx((1 - std::pow(0.84, 5)) / 0.16));

  StepCosts c;
  CHECK(c.step_ms(1) < 0);
  CHECK(cost_aware_draft_length(0.84, 4, c) == 4);  // nothing measured: the adaptive rule's length
  // This machine's AVX2 shape (bench/RESULTS.md, session 8): 2 rows cost one,
  // 3-4 rows about 1.75, 5 rows 2.13.
  c.record_step(1, 10.0);
  c.record_step(2, 10.8);
  c.record_step(3, 17.0);
  c.record_step(4, 17.5);
  CHECK(cost_aware_draft_length(0.84, 4, c) == 4);  // the 5-row step not measured yet: explore it
  c.record_step(5, 21.3);
  // a = 0.84: k = 1 gives 1.84 / 10.8 = 0.170 tokens/ms, k = 3 3.14 / 17.5 = 0.179,
  // k = 4 3.64 / 21.3 = 0.171.
  CHECK(cost_aware_draft_length(0.84, 4, c) == 3);
  CHECK(cost_aware_draft_length(0.84, 2, c) == 1);  // capped: 1.84 / 10.8 > 2.44 / 17.0
  CHECK(cost_aware_draft_length(0.5, 4, c) == 1);   // low acceptance: short drafts
  CHECK(cost_aware_draft_length(0.97, 4, c) == 4);  // near-certain acceptance: the longest
  // A drafter that costs 2 ms a token pushes toward short drafts.
  c.record_draft(2.0);
  CHECK(c.draft_ms() == 2.0);
  CHECK(cost_aware_draft_length(0.84, 4, c) == 1);  // 1.84 / 12.8 = 0.144 > 3.14 / 23.5 = 0.134
  // Averages move toward new measurements (a machine that got faster at 5 rows).
  for (int i = 0; i < 30; ++i) c.record_step(5, 11.0);
  CHECK(c.step_ms(5) == Approx(11.0).epsilon(0.01));
  CHECK(cost_aware_draft_length(0.84, 4, c) == 4);
  c.record_step(0, 1.0);  // out of range: ignored
  c.record_step(StepCosts::kMaxRows + 1, 1.0);
  CHECK(c.step_ms(0) < 0);

  // The acceptance estimate: accepted / tried, where a step tries its
  // accepted drafts and the first rejected one.
  DraftLength k(4);
  CHECK(k.acceptance() == 0.5);
  for (int i = 0; i < 50; ++i) {
    k.update(4, 3);  // 3 accepted, the 4th tried and rejected
    k.update(4, 4);  // all 4 accepted
  }
  CHECK(k.acceptance() == Approx(7.0 / 8.0).epsilon(0.02));
}

TEST_CASE("acceptance counters: rate, mean accepted length and acceptance by position", "[speculative]") {
  SpecCounters c;
  c.add_step(4, 4);
  c.add_step(4, 1);
  c.add_step(0, 0);  // no draft: not a verification step
  c.add_step(2, 0);
  CHECK(c.steps == 3);
  CHECK(c.drafted == 10);
  CHECK(c.accepted == 5);
  CHECK(c.acceptance_rate() == Approx(0.5));
  CHECK(c.mean_accepted_length() == Approx((5.0 + 3.0) / 3.0));
  CHECK(c.drafted_at[0] == 3);
  CHECK(c.accepted_at[0] == 2);
  CHECK(c.drafted_at[3] == 2);
  CHECK(c.accepted_at[3] == 1);
  SpecCounters big;
  big.add_step(20, 20);
  CHECK(big.drafted_at[SpecCounters::kPositions - 1] == 5);  // positions 15..19 share the last slot
  c.merge(big);
  CHECK(c.drafted == 30);
  CHECK(c.steps == 4);
}

TEST_CASE("layer lists: ranges and single layers", "[speculative]") {
  CHECK(parse_layer_list("2", 5) == std::vector<uint8_t>({0, 0, 1, 0, 0}));
  CHECK(parse_layer_list("1-3", 5) == std::vector<uint8_t>({0, 1, 1, 1, 0}));
  CHECK(parse_layer_list("0,2-3,3", 5) == std::vector<uint8_t>({1, 0, 1, 1, 0}));
  for (const char* bad : {"", "a", "1-", "-1", "3-1", "5", "1,", "1;2", "0-4", "99999999999"}) {
    CAPTURE(bad);
    REQUIRE_THROWS_AS(parse_layer_list(bad, 5), Error);
  }
}
