// The sampler chain (lib/sampling): each step on its own, then the chain.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "sampling/sampler.h"

using infer::Sampler;
using infer::SamplingParams;
using infer::Status;
using infer::TokenCandidate;
namespace smp = infer::sampling;

namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Parameters with every filter off: plain softmax sampling at temperature t.
SamplingParams plain(float t, uint64_t seed = 1) {
  SamplingParams p;
  p.temperature = t;
  p.top_k = 0;
  p.top_p = 1.0f;
  p.min_p = 0.0f;
  p.seed = seed;
  return p;
}

std::vector<float> random_logits(int n, uint32_t seed, float scale = 3.0f) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = d(g);
  return v;
}

std::vector<double> softmax_ref(const std::vector<float>& l, double t) {
  double m = *std::max_element(l.begin(), l.end());
  std::vector<double> p(l.size());
  double s = 0;
  for (size_t i = 0; i < l.size(); ++i) s += p[i] = std::exp((l[i] - m) / t);
  for (auto& x : p) x /= s;
  return p;
}

// Logits whose softmax at T = 1 is exactly proportional to `probs`.
std::vector<float> logits_from_probs(const std::vector<double>& probs) {
  std::vector<float> l;
  for (double p : probs) l.push_back(p > 0 ? static_cast<float>(std::log(p)) : kNegInf);
  return l;
}

// Runs f, expecting infer::Error; returns its status and message.
template <class F>
std::pair<Status, std::string> error_of(F&& f) {
  try {
    f();
  } catch (const infer::Error& e) {
    return {e.status(), e.what()};
  }
  return {Status::Ok, ""};
}

std::vector<int32_t> ids_of(const std::vector<TokenCandidate>& c) {
  std::vector<int32_t> ids;
  for (const auto& x : c) ids.push_back(x.second);
  std::sort(ids.begin(), ids.end());
  return ids;
}

}  // namespace

TEST_CASE("greedy picks the argmax, lowest id on ties", "[sampling]") {
  SamplingParams p = plain(0.0f);
  Sampler s(p, 6);
  std::vector<float> l = {0.5f, 3.0f, -1.0f, 3.0f, 2.9f, 3.0f};
  CHECK(s.sample(l, {}) == 1);

  std::vector<float> l2 = {kNegInf, -5.0f, -5.0f, kNegInf, -7.0f, -6.0f};
  CHECK(s.sample(l2, {}) == 1);
  CHECK(smp::argmax_token({2.0f, 2.0f}) == 0);
  CHECK(smp::argmax_token({std::nanf(""), 1.0f, 0.0f}) == 1);

  // Negative temperature is greedy too, and greedy ignores the filters.
  SamplingParams q = plain(-1.0f);
  q.top_k = 3;
  q.top_p = 0.1f;
  Sampler s2(q, 6);
  std::vector<float> l3 = {0.5f, 3.0f, -1.0f, 3.0f, 2.9f, 3.0f};
  CHECK(s2.sample(l3, {}) == 1);
}

TEST_CASE("top-k = 1 equals greedy at any temperature", "[sampling]") {
  for (float t : {0.05f, 0.7f, 1.0f, 5.0f, 1000.0f}) {
    for (uint32_t trial = 0; trial < 20; ++trial) {
      SamplingParams p = plain(t, trial);
      p.top_k = 1;
      Sampler s(p, 300);
      auto l = random_logits(300, trial * 7 + 1);
      if (trial % 5 == 0) l[17] = l[200] = *std::max_element(l.begin(), l.end()) + 1.0f;  // a tie
      auto copy = l;
      CHECK(s.sample(l, {}) == smp::argmax_token(copy));
    }
  }
}

TEST_CASE("sampled frequencies follow softmax(logits / T)", "[sampling]") {
  const std::vector<float> logits = {1.0f, 0.2f, -0.5f, 2.0f, 0.0f, -3.0f};
  for (float t : {0.5f, 1.0f, 2.0f}) {
    SamplingParams p = plain(t, 12345);
    Sampler s(p, 6);
    const auto ref = softmax_ref(logits, t);

    // The distribution itself is exactly the tempered softmax.
    auto l = logits;
    const auto& dist = s.distribution(l, {});
    double total = 0;
    for (const auto& c : dist) {
      CHECK(c.first == Approx(ref[static_cast<size_t>(c.second)]).margin(1e-6));
      total += c.first;
    }
    CHECK(total == Approx(1.0).margin(1e-6));

    // And draws follow it: 20000 draws, each frequency within 0.015
    // (more than 5 standard deviations of a binomial at p = 0.5).
    const int n = 20000;
    std::vector<int> count(6, 0);
    for (int i = 0; i < n; ++i) {
      auto row = logits;
      ++count[static_cast<size_t>(s.sample(row, {}))];
    }
    for (size_t i = 0; i < 6; ++i) CHECK(static_cast<double>(count[i]) / n == Approx(ref[i]).margin(0.015));
  }
}

TEST_CASE("a tiny temperature neither overflows nor picks a worse token", "[sampling]") {
  for (float t : {1e-30f, 1e-40f /* subnormal */}) {
    SamplingParams p = plain(t);
    Sampler s(p, 4);
    for (int i = 0; i < 50; ++i) {
      std::vector<float> l = {80.0f, 81.0f, 79.0f, -80.0f};
      CHECK(s.sample(l, {}) == 1);
    }
    std::vector<float> l = {80.0f, 81.0f, 79.0f, -80.0f};
    const auto& d = s.distribution(l, {});
    REQUIRE(d.size() == 1);
    CHECK(d[0].first == 1.0f);
  }
}

TEST_CASE("top-k keeps the k best, sorted", "[sampling]") {
  std::vector<TokenCandidate> c;
  smp::make_candidates({0.1f, 5.0f, 3.0f, kNegInf, 5.0f, -2.0f, 4.0f}, c);
  CHECK(c.size() == 6);  // the banned token is no candidate
  smp::top_k_filter(c, 3);
  REQUIRE(c.size() == 3);
  CHECK(c[0].second == 1);  // ties: lower id first
  CHECK(c[1].second == 4);
  CHECK(c[2].second == 6);

  smp::make_candidates({0.1f, 5.0f, 3.0f}, c);
  smp::top_k_filter(c, 0);
  CHECK(c.size() == 3);
  smp::top_k_filter(c, 10);
  CHECK(c.size() == 3);
}

TEST_CASE("top-p keeps the minimal set reaching p", "[sampling]") {
  // ids shuffled against probabilities on purpose.
  const std::vector<double> probs = {0.1, 0.5, 0.05, 0.2, 0.15};
  auto run = [&](float top_p) {
    SamplingParams p = plain(1.0f);
    p.top_p = top_p;
    Sampler s(p, 5);
    auto l = logits_from_probs(probs);
    return ids_of(s.distribution(l, {}));
  };
  CHECK(run(0.45f) == std::vector<int32_t>{1});
  CHECK(run(0.6f) == std::vector<int32_t>{1, 3});
  CHECK(run(0.75f) == std::vector<int32_t>{1, 3, 4});
  CHECK(run(0.9f) == std::vector<int32_t>{0, 1, 3, 4});
  CHECK(run(0.99f) == std::vector<int32_t>{0, 1, 2, 3, 4});
  CHECK(run(1.0f) == std::vector<int32_t>{0, 1, 2, 3, 4});

  // A large vocabulary (sorted in growing chunks) against a brute-force
  // reference on the same probabilities.
  for (float top_p : {0.1f, 0.5f, 0.9f, 0.999f}) {
    auto logits = random_logits(5000, 99, 1.0f);
    std::vector<TokenCandidate> c;
    smp::make_candidates(logits, c);
    smp::softmax_filter(c, 1.0f);
    auto ref = c;
    std::sort(ref.begin(), ref.end(), [](auto& a, auto& b) { return a.first > b.first; });
    double cum = 0;
    size_t keep = ref.size();
    for (size_t i = 0; i < ref.size(); ++i) {
      cum += ref[i].first;
      if (cum >= top_p) {
        keep = i + 1;
        break;
      }
    }
    ref.resize(keep);
    smp::top_p_filter(c, top_p);
    CHECK(c.size() == keep);
    CHECK(ids_of(c) == ids_of(ref));
  }
}

TEST_CASE("min-p drops tokens below min_p times the best probability", "[sampling]") {
  const std::vector<double> probs = {0.1, 0.5, 0.05, 0.2, 0.15};
  auto run = [&](float min_p) {
    SamplingParams p = plain(1.0f);
    p.min_p = min_p;
    Sampler s(p, 5);
    auto l = logits_from_probs(probs);
    return ids_of(s.distribution(l, {}));
  };
  CHECK(run(0.0f) == std::vector<int32_t>{0, 1, 2, 3, 4});
  CHECK(run(0.25f) == std::vector<int32_t>{1, 3, 4});     // threshold 0.125
  CHECK(run(0.35f) == std::vector<int32_t>{1, 3});        // threshold 0.175
  CHECK(run(0.15f) == std::vector<int32_t>{0, 1, 3, 4});  // threshold 0.075
  CHECK(run(1.0f) == std::vector<int32_t>{1});

  // The survivors are renormalised.
  SamplingParams p = plain(1.0f);
  p.min_p = 0.25f;
  Sampler s(p, 5);
  auto l = logits_from_probs(probs);
  const auto& d = s.distribution(l, {});
  for (const auto& c : d) CHECK(c.first == Approx(probs[static_cast<size_t>(c.second)] / 0.85).margin(1e-6));
}

TEST_CASE("penalties change the right logits by the right amounts", "[sampling]") {
  const std::vector<float> base = {2.0f, -2.0f, 1.0f, 0.5f, 0.0f, 3.0f};
  // Token 0 three times, 1 once, 3 twice; 2, 4 and 5 never (within the window).
  const std::vector<int32_t> history = {5, 0, 3, 1, 0, 3, 0};

  SECTION("repetition penalty divides positive and multiplies negative logits") {
    SamplingParams p = plain(1.0f);
    p.repeat_penalty = 2.0f;
    p.penalty_last_n = -1;
    auto l = base;
    smp::apply_penalties(l, history, p);
    CHECK(l == std::vector<float>{1.0f, -4.0f, 1.0f, 0.25f, 0.0f, 1.5f});
  }
  SECTION("frequency penalty subtracts count * f, presence subtracts p once") {
    SamplingParams p = plain(1.0f);
    p.frequency_penalty = 0.5f;
    p.presence_penalty = 0.25f;
    p.penalty_last_n = -1;
    auto l = base;
    smp::apply_penalties(l, history, p);
    CHECK(l[0] == Approx(2.0f - 1.5f - 0.25f));
    CHECK(l[1] == Approx(-2.0f - 0.5f - 0.25f));
    CHECK(l[2] == 1.0f);
    CHECK(l[3] == Approx(0.5f - 1.0f - 0.25f));
    CHECK(l[4] == 0.0f);
    CHECK(l[5] == Approx(3.0f - 0.5f - 0.25f));
  }
  SECTION("all three together: repetition first, then subtraction") {
    SamplingParams p = plain(1.0f);
    p.repeat_penalty = 2.0f;
    p.frequency_penalty = 0.5f;
    p.presence_penalty = 0.25f;
    p.penalty_last_n = -1;
    auto l = base;
    smp::apply_penalties(l, history, p);
    CHECK(l[0] == Approx(1.0f - 1.5f - 0.25f));
    CHECK(l[1] == Approx(-4.0f - 0.5f - 0.25f));
  }
  SECTION("only the last penalty_last_n tokens count") {
    SamplingParams p = plain(1.0f);
    p.frequency_penalty = 1.0f;
    p.penalty_last_n = 3;  // {0, 3, 0}
    auto l = base;
    smp::apply_penalties(l, history, p);
    CHECK(l == std::vector<float>{0.0f, -2.0f, 1.0f, -0.5f, 0.0f, 3.0f});

    p.penalty_last_n = 0;  // off
    l = base;
    smp::apply_penalties(l, history, p);
    CHECK(l == base);

    p.penalty_last_n = 1000;  // longer than the history: all of it
    l = base;
    smp::apply_penalties(l, history, p);
    CHECK(l == std::vector<float>{-1.0f, -3.0f, 1.0f, -1.5f, 0.0f, 2.0f});
  }
  SECTION("neutral values change nothing; out-of-range history ids are ignored") {
    SamplingParams p = plain(1.0f);
    p.penalty_last_n = -1;
    auto l = base;
    smp::apply_penalties(l, history, p);
    CHECK(l == base);
    p.presence_penalty = 1.0f;
    std::vector<int32_t> scratch;
    smp::apply_penalties(l, {-4, 77, 2}, p, &scratch);
    CHECK(l == std::vector<float>{2.0f, -2.0f, 0.0f, 0.5f, 0.0f, 3.0f});
  }
  SECTION("the sampler applies them: a penalised favourite loses under greedy") {
    SamplingParams p = plain(0.0f);
    p.presence_penalty = 2.0f;
    Sampler s(p, 6);
    auto l = base;
    CHECK(s.sample(l, {}) == 5);
    l = base;
    CHECK(s.sample(l, {5}) == 0);  // 3 - 2 = 1 < 2
  }
}

TEST_CASE("logit bias shifts logits and -inf bans tokens", "[sampling]") {
  std::vector<float> l = {1.0f, 2.0f, 3.0f};
  smp::apply_logit_bias(l, {{0, 5.0f}, {2, kNegInf}});
  CHECK(l[0] == 6.0f);
  CHECK(l[1] == 2.0f);
  CHECK(l[2] == kNegInf);

  SamplingParams g = plain(0.0f);
  g.logit_bias = {{2, kNegInf}};
  Sampler greedy(g, 3);
  std::vector<float> row = {1.0f, 2.0f, 3.0f};
  CHECK(greedy.sample(row, {}) == 1);

  g.logit_bias = {{0, 10.0f}};
  Sampler greedy2(g, 3);
  row = {1.0f, 2.0f, 3.0f};
  CHECK(greedy2.sample(row, {}) == 0);

  // A banned token is never drawn, even the most likely one at high temperature.
  SamplingParams p = plain(3.0f, 7);
  p.logit_bias = {{2, kNegInf}, {4, kNegInf}};
  Sampler s(p, 5);
  for (int i = 0; i < 2000; ++i) {
    std::vector<float> r = {0.0f, 0.1f, 5.0f, -0.2f, 1.0f};
    const int32_t t = s.sample(r, {});
    CHECK(t != 2);
    CHECK(t != 4);
  }

  // Everything banned is an error, not a crash or a random token: refused
  // when the sampler is made (validate(), issue #27), before any draw.
  for (float t : {0.0f, 1.0f}) {
    SamplingParams all = plain(t);
    all.logit_bias = {{0, kNegInf}, {1, kNegInf}, {2, kNegInf}};
    std::vector<float> r = {1.0f, 2.0f, 3.0f};
    auto [st, msg] = error_of([&] {
      Sampler sa(all, 3);
      sa.sample(r, {});
    });
    CHECK(st == Status::InvalidArgument);
    CHECK_THAT(msg, Catch::Contains("logit_bias bans every token"));
  }
}

TEST_CASE("same seed gives the same sequence, different seeds differ", "[sampling]") {
  auto run = [](uint64_t seed) {
    SamplingParams p;  // the defaults: top-k 40, top-p 0.95, min-p 0.05, T 0.8
    p.seed = seed;
    p.temperature = 1.5f;
    p.min_p = 0.0f;
    p.repeat_penalty = 1.1f;
    Sampler s(p, 1000);
    std::vector<int32_t> hist;
    for (int i = 0; i < 200; ++i) {
      auto l = random_logits(1000, static_cast<uint32_t>(i), 1.0f);
      hist.push_back(s.sample(l, hist));
    }
    return hist;
  };
  const auto a = run(42);
  CHECK(a == run(42));
  CHECK(a != run(43));
  CHECK(run(0) == run(0));
  CHECK(run(0) != a);
}

TEST_CASE("validate rejects impossible values and names the field", "[sampling]") {
  const float nan = std::nanf("");
  const float inf = std::numeric_limits<float>::infinity();
  auto expect_bad = [](const SamplingParams& p, const char* field, int32_t n_vocab = 10) {
    auto [st, msg] = error_of([&] { p.validate(n_vocab); });
    CHECK(st == Status::InvalidArgument);
    CHECK_THAT(msg, Catch::Contains(field));
    // The constructor validates too.
    auto [st2, msg2] = error_of([&] { Sampler s(p, n_vocab); });
    CHECK(st2 == Status::InvalidArgument);
  };
  SamplingParams ok;
  CHECK_NOTHROW(ok.validate(10));
  {
    SamplingParams p;
    p.temperature = -2.0f;  // greedy, valid
    p.top_k = -5;
    p.top_p = 1.0f;
    p.min_p = 1.0f;
    p.penalty_last_n = -1;
    p.frequency_penalty = -1.0f;  // negative penalties encourage repetition: allowed
    p.logit_bias = {{0, kNegInf}, {9, -3.0f}};
    CHECK_NOTHROW(p.validate(10));
  }

  SamplingParams p;
  p.temperature = nan;
  expect_bad(p, "temperature");
  p.temperature = inf;
  expect_bad(p, "temperature");

  for (float v : {0.0f, -0.5f, 1.5f, nan}) {
    p = SamplingParams();
    p.top_p = v;
    expect_bad(p, "top_p");
  }
  for (float v : {-0.1f, 1.01f, nan}) {
    p = SamplingParams();
    p.min_p = v;
    expect_bad(p, "min_p");
  }
  for (float v : {0.0f, -1.0f, nan, inf}) {
    p = SamplingParams();
    p.repeat_penalty = v;
    expect_bad(p, "repeat_penalty");
  }
  p = SamplingParams();
  p.penalty_last_n = -2;
  expect_bad(p, "penalty_last_n");
  p = SamplingParams();
  p.frequency_penalty = nan;
  expect_bad(p, "frequency_penalty");
  p = SamplingParams();
  p.presence_penalty = nan;
  expect_bad(p, "presence_penalty");

  for (int32_t id : {-1, 10, 1 << 30}) {
    p = SamplingParams();
    p.logit_bias = {{id, 1.0f}};
    expect_bad(p, "logit_bias");
  }
  p = SamplingParams();
  p.logit_bias = {{3, nan}};
  expect_bad(p, "logit_bias");
  p.logit_bias = {{3, inf}};
  expect_bad(p, "logit_bias");

  p = SamplingParams();
  expect_bad(p, "n_vocab", 0);

  // A row of the wrong length is refused.
  Sampler s(SamplingParams(), 10);
  std::vector<float> short_row(9, 0.0f);
  CHECK(error_of([&] { s.sample(short_row, {}); }).first == Status::InvalidArgument);
}

TEST_CASE("find_stop: earliest match and held-back prefixes", "[sampling]") {
  using infer::find_stop;
  SECTION("no stops, empty stops") {
    auto m = find_stop("hello world", {});
    CHECK_FALSE(m.found);
    CHECK(m.hold_back == 0);
    m = find_stop("hello", {"", ""});
    CHECK_FALSE(m.found);
    CHECK(m.hold_back == 0);
    m = find_stop("", {"abc"});
    CHECK_FALSE(m.found);
    CHECK(m.hold_back == 0);
  }
  SECTION("the earliest match across stop strings wins") {
    auto m = find_stop("one two three two one", {"three", "two"});
    REQUIRE(m.found);
    CHECK(m.pos == 4);
    CHECK(m.hold_back == 0);
    m = find_stop("abcdef", {"def", "bcd", "cde"});
    REQUIRE(m.found);
    CHECK(m.pos == 1);
    m = find_stop("Lily", {"Lily"});
    REQUIRE(m.found);
    CHECK(m.pos == 0);
  }
  SECTION("overlapping prefixes") {
    // "aab" only appears after a false start "aa" + "a".
    auto m = find_stop("xaaab", {"aab"});
    REQUIRE(m.found);
    CHECK(m.pos == 2);
    // Not yet matched: "aa" could still become "aab".
    m = find_stop("xaaa", {"aab"});
    CHECK_FALSE(m.found);
    CHECK(m.hold_back == 2);
    // The longest suffix that is a proper prefix of any stop string.
    m = find_stop("the end of the ", {"the story", "e s", "xyz"});
    CHECK_FALSE(m.found);
    CHECK(m.hold_back == 4);  // "the " (and the shorter "e ")
  }
  SECTION("hold-back never covers a whole stop string or unrelated text") {
    auto m = find_stop("Once upon a ti", {"time", "Tom"});
    CHECK_FALSE(m.found);
    CHECK(m.hold_back == 2);  // "ti"
    m = find_stop("Once upon a T", {"time", "Tom"});
    CHECK(m.hold_back == 1);
    m = find_stop("Once upon a", {"time", "Tom"});
    CHECK(m.hold_back == 0);
    m = find_stop("ab", {"abc", "b"});
    REQUIRE(m.found);  // "b" matched at 1
    CHECK(m.pos == 1);
    CHECK(m.hold_back == 0);
  }
  SECTION("multibyte UTF-8") {
    const std::string text = "caf\xC3\xA9 na\xC3\xAFve \xE2\x9C\x93 done";  // café naïve ✓ done
    auto m = find_stop(text, {"\xE2\x9C\x93"});
    REQUIRE(m.found);
    CHECK(m.pos == 13);
    CHECK(text.substr(0, m.pos) == "caf\xC3\xA9 na\xC3\xAFve ");
    // A partial character at the end is held back byte-exactly.
    m = find_stop("caf\xC3", {"\xC3\xA9!"});
    CHECK_FALSE(m.found);
    CHECK(m.hold_back == 1);
    m = find_stop("x \xE2\x9C", {"\xE2\x9C\x93"});
    CHECK(m.hold_back == 2);
    // Sharing a lead byte is not a match.
    m = find_stop("na\xC3\xAF", {"\xC3\xA9"});
    CHECK_FALSE(m.found);
    CHECK(m.hold_back == 0);
  }
}

TEST_CASE("validate refuses a logit_bias that leaves no token possible", "[sampling]") {
  auto err = [](std::vector<std::pair<int32_t, float>> bias, int32_t n_vocab) {
    SamplingParams p = plain(1.0f);
    p.logit_bias = std::move(bias);
    return error_of([&] { p.validate(n_vocab); });
  };
  // Every token at -inf, or at a bias so negative it is a ban in effect, or
  // the entries of one id adding up to -inf.
  auto [st, msg] = err({{0, kNegInf}, {1, kNegInf}, {2, kNegInf}}, 3);
  CHECK(st == Status::InvalidArgument);
  CHECK_THAT(msg, Catch::Contains("logit_bias bans every token"));
  CHECK(err({{0, kNegInf}, {1, -3e38f}, {2, kNegInf}}, 3).first == Status::InvalidArgument);
  CHECK(err({{0, kNegInf}, {1, -3e38f}, {1, -3e38f}, {2, kNegInf}}, 3).first == Status::InvalidArgument);
  // Entries adding up to +inf make the softmax undefined.
  CHECK_THAT(err({{1, 3e38f}, {1, 3e38f}}, 3).second, Catch::Contains("+inf"));
  // One token left, or a finite shift of all of them: fine.
  CHECK(err({{0, kNegInf}, {2, kNegInf}}, 3).first == Status::Ok);
  CHECK(err({{0, kNegInf}, {1, kNegInf}, {2, -100.0f}}, 3).first == Status::Ok);
  CHECK(err({{0, kNegInf}, {1, -3e38f}, {1, 3e38f}, {2, kNegInf}}, 3).first == Status::Ok);
}
