#include "engine/speculative.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "tokenizer/tokenizer.h"

namespace infer {

std::vector<uint8_t> parse_layer_list(const std::string& spec, int32_t n_layer) {
  if (n_layer <= 0) raise(Status::InvalidArgument, "layer list: the model has no layers");
  std::vector<uint8_t> skip(static_cast<size_t>(n_layer), 0);
  auto number = [&](size_t& i) -> int64_t {
    if (i >= spec.size() || spec[i] < '0' || spec[i] > '9')
      raise(Status::InvalidArgument, "layer list \"%s\": expected a layer number at offset %zu", spec.c_str(), i);
    int64_t v = 0;
    while (i < spec.size() && spec[i] >= '0' && spec[i] <= '9') {
      v = v * 10 + (spec[i++] - '0');
      if (v > 1000000) raise(Status::InvalidArgument, "layer list \"%s\": number too large", spec.c_str());
    }
    return v;
  };
  size_t i = 0;
  for (;;) {
    const int64_t a = number(i);
    int64_t b = a;
    if (i < spec.size() && spec[i] == '-') {
      ++i;
      b = number(i);
    }
    if (b < a) raise(Status::InvalidArgument, "layer list \"%s\": range %lld-%lld runs backwards", spec.c_str(),
                     static_cast<long long>(a), static_cast<long long>(b));
    if (b >= n_layer)
      raise(Status::InvalidArgument, "layer list \"%s\": layer %lld is out of range (the model has layers 0-%d)",
            spec.c_str(), static_cast<long long>(b), n_layer - 1);
    for (int64_t l = a; l <= b; ++l) skip[static_cast<size_t>(l)] = 1;
    if (i == spec.size()) break;
    if (spec[i] != ',') raise(Status::InvalidArgument, "layer list \"%s\": unexpected '%c'", spec.c_str(), spec[i]);
    ++i;
  }
  if (std::all_of(skip.begin(), skip.end(), [](uint8_t f) { return f != 0; }))
    raise(Status::InvalidArgument, "layer list \"%s\" skips every layer", spec.c_str());
  return skip;
}

void check_draft_vocab(const Tokenizer& target, const Tokenizer& draft) {
  const Vocab& a = target.vocab();
  const Vocab& b = draft.vocab();
  if (a.size() != b.size())
    raise(Status::InvalidArgument, "the draft model's vocabulary has %d tokens, the model's %d", b.size(), a.size());
  const struct {
    const char* name;
    int32_t x, y;
  } ids[] = {{"BOS", a.bos, b.bos}, {"EOS", a.eos, b.eos}, {"EOT", a.eot, b.eot}, {"UNK", a.unk, b.unk},
             {"PAD", a.pad, b.pad}};
  for (const auto& s : ids)
    if (s.x != s.y)
      raise(Status::InvalidArgument, "the draft model's %s token is %d, the model's %d", s.name, s.y, s.x);
  for (int32_t i = 0; i < a.size(); ++i)
    if (a.tokens[static_cast<size_t>(i)] != b.tokens[static_cast<size_t>(i)])
      raise(Status::InvalidArgument, "the draft model's token %d is \"%s\", the model's \"%s\"", i,
            b.tokens[static_cast<size_t>(i)].c_str(), a.tokens[static_cast<size_t>(i)].c_str());
}

NgramDrafter::NgramDrafter(int32_t n_max, int32_t n_min) : n_max_(n_max), n_min_(n_min) {
  if (n_min < 1 || n_max < n_min || n_max > 64)
    raise(Status::InvalidArgument, "n-gram drafter: need 1 <= n_min <= n_max <= 64 (got n_min %d, n_max %d)", n_min,
          n_max);
}

int32_t NgramDrafter::propose(const std::vector<int32_t>& tokens, int32_t max_k, std::vector<int32_t>& out) {
  const int64_t len = static_cast<int64_t>(tokens.size());
  if (max_k <= 0 || len < 2) return 0;
  for (int32_t n = std::min<int64_t>(n_max_, len - 1); n >= n_min_; --n) {
    const int32_t* suffix = tokens.data() + len - n;
    // Latest start j < len - n whose n tokens equal the suffix and that is
    // followed by at least one token.
    for (int64_t j = len - n - 1; j >= 0; --j) {
      if (tokens[j] != suffix[0] || !std::equal(suffix, suffix + n, tokens.data() + j)) continue;
      const int64_t from = j + n;
      const int64_t take = std::min<int64_t>(max_k, len - from);
      out.insert(out.end(), tokens.begin() + from, tokens.begin() + from + take);
      return static_cast<int32_t>(take);
    }
  }
  return 0;
}

namespace {

double uniform(std::mt19937_64& rng) {
  // 53 random bits in [0, 1).
  return static_cast<double>(rng() >> 11) * (1.0 / 9007199254740992.0);
}

float prob_of(const std::vector<TokenCandidate>& dist, int32_t t) {
  for (const TokenCandidate& c : dist)
    if (c.second == t) return c.first;
  return 0.0f;
}

}  // namespace

DraftVerdict verify_draft(const std::vector<TokenCandidate>& p, int32_t d, const std::vector<TokenCandidate>* q,
                          std::mt19937_64& rng) {
  if (p.empty()) raise(Status::InvalidArgument, "speculative verification: an empty target distribution");
  const double pd = prob_of(p, d);
  const double qd = q ? prob_of(*q, d) : 1.0;
  // Accept with probability min(1, p(d) / q(d)). A draft the drafter gave
  // no mass to (qd == 0) cannot have been drawn from q: judge it as a point
  // mass. A draft the target excludes (pd == 0) is always rejected, with no
  // draw, so greedy verification consumes no randomness on a mismatch.
  if (pd > 0.0) {
    const double ratio = qd > 0.0 ? pd / qd : pd;
    if (ratio >= 1.0 || uniform(rng) < ratio) return {true, d};
  }
  // The residual max(0, p - q), normalized; q a point mass at d when absent.
  std::vector<double> w(p.size());
  double total = 0.0;
  for (size_t i = 0; i < p.size(); ++i) {
    const int32_t t = p[i].second;
    const double qt = q ? prob_of(*q, t) : (t == d ? 1.0 : 0.0);
    w[i] = std::max(0.0, static_cast<double>(p[i].first) - (qd > 0.0 ? qt : (t == d ? 1.0 : 0.0)));
    total += w[i];
  }
  if (total <= 0.0) {
    // p <= q everywhere yet d was rejected: only possible through rounding.
    // Fall back to p without d (or p itself when d is all it has).
    for (size_t i = 0; i < p.size(); ++i) {
      w[i] = p[i].second == d && p.size() > 1 ? 0.0 : p[i].first;
      total += w[i];
    }
  }
  int n_positive = 0;
  size_t only = 0;
  for (size_t i = 0; i < p.size(); ++i)
    if (w[i] > 0.0) {
      ++n_positive;
      only = i;
    }
  if (n_positive == 1) return {false, p[only].second};  // nothing to draw (greedy)
  double u = uniform(rng) * total;
  for (size_t i = 0; i < p.size(); ++i) {
    if (w[i] <= 0.0) continue;
    if (u < w[i]) return {false, p[i].second};
    u -= w[i];
  }
  for (size_t i = p.size(); i-- > 0;)  // rounding left u past the end: the last token with weight
    if (w[i] > 0.0) return {false, p[i].second};
  return {false, p.front().second};
}

void DraftLength::update(int32_t drafted, int32_t accepted) {
  if (max_k_ <= 0) return;
  if (drafted <= 0) {
    if (paused_ > 0 && --paused_ == 0) k_ = 1;
    return;
  }
  recent_rate_ = 0.8 * recent_rate_ + 0.2 * (static_cast<double>(accepted) / drafted);
  accepted_ = 0.9 * accepted_ + accepted;
  tried_ = 0.9 * tried_ + accepted + (accepted < drafted ? 1 : 0);
  if (accepted == drafted) {
    k_ = std::min(max_k_, k_ + 1);
  } else if (2 * accepted < drafted) {
    k_ = std::max(1, k_ - 1);
  }
  if (recent_rate_ < 0.125) {
    paused_ = 16;  // steps without drafting before trying again
    recent_rate_ = 0.25;
  }
}

void StepCosts::record_step(int32_t rows, double ms) {
  if (rows < 1 || rows > kMaxRows || !(ms >= 0)) return;
  ms_[rows] = seen_[rows] ? 0.8 * ms_[rows] + 0.2 * ms : ms;
  seen_[rows] = true;
}

void StepCosts::record_draft(double ms_per_token) {
  if (!(ms_per_token >= 0)) return;
  draft_ms_ = draft_seen_ ? 0.8 * draft_ms_ + 0.2 * ms_per_token : ms_per_token;
  draft_seen_ = true;
}

double expected_tokens(double a, int32_t k) {
  if (k <= 0) return 1.0;
  if (a >= 1.0) return k + 1.0;
  if (a <= 0.0) return 1.0;
  return (1.0 - std::pow(a, k + 1)) / (1.0 - a);
}

int32_t cost_aware_draft_length(double a, int32_t cap, const StepCosts& costs) {
  if (cap <= 1 || costs.step_ms(cap + 1) < 0) return cap;
  int32_t best = cap;
  double best_rate = -1;
  for (int32_t k = 1; k <= cap; ++k) {
    const double step = costs.step_ms(k + 1);
    if (step < 0) continue;
    const double rate = expected_tokens(a, k) / (step + k * costs.draft_ms());
    if (rate > best_rate) {
      best_rate = rate;
      best = k;
    }
  }
  return best;
}

void SpecCounters::add_step(int32_t n_drafted, int32_t n_accepted) {
  if (n_drafted <= 0) return;
  ++steps;
  drafted += static_cast<uint64_t>(n_drafted);
  accepted += static_cast<uint64_t>(n_accepted);
  for (int32_t i = 0; i < n_drafted; ++i) {
    const int slot = std::min(i, kPositions - 1);
    ++drafted_at[slot];
    if (i < n_accepted) ++accepted_at[slot];
  }
}

void SpecCounters::merge(const SpecCounters& o) {
  steps += o.steps;
  drafted += o.drafted;
  accepted += o.accepted;
  for (int i = 0; i < kPositions; ++i) {
    drafted_at[i] += o.drafted_at[i];
    accepted_at[i] += o.accepted_at[i];
  }
}

}  // namespace infer
