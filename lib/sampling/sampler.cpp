// The sampler chain and stop strings. See sampler.h for the order of the steps.
#include "sampling/sampler.h"
#include "sampling/grammar.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/error.h"

namespace infer {

namespace {
// A bias at or below this bans its token in effect: any logit plus it is
// -inf or so far below every other that it can never be drawn.
constexpr float kBanBias = 1e30f;
}  // namespace

// ---- parameters ----------------------------------------------------------------------

void SamplingParams::validate(int32_t n_vocab) const {
  if (n_vocab <= 0) raise(Status::InvalidArgument, "sampling: n_vocab must be positive (got %d)", n_vocab);
  // temperature <= 0 means greedy; only NaN and infinities are impossible.
  if (!std::isfinite(temperature))
    raise(Status::InvalidArgument, "sampling: temperature must be a finite number (got %g)",
          static_cast<double>(temperature));
  if (!(top_p > 0.0f && top_p <= 1.0f))
    raise(Status::InvalidArgument, "sampling: top_p must be in (0, 1] (got %g)", static_cast<double>(top_p));
  if (!(min_p >= 0.0f && min_p <= 1.0f))
    raise(Status::InvalidArgument, "sampling: min_p must be in [0, 1] (got %g)", static_cast<double>(min_p));
  if (!(repeat_penalty > 0.0f) || !std::isfinite(repeat_penalty))
    raise(Status::InvalidArgument, "sampling: repeat_penalty must be a finite number > 0 (got %g)",
          static_cast<double>(repeat_penalty));
  if (!std::isfinite(frequency_penalty))
    raise(Status::InvalidArgument, "sampling: frequency_penalty must be a finite number (got %g)",
          static_cast<double>(frequency_penalty));
  if (!std::isfinite(presence_penalty))
    raise(Status::InvalidArgument, "sampling: presence_penalty must be a finite number (got %g)",
          static_cast<double>(presence_penalty));
  if (penalty_last_n < -1)
    raise(Status::InvalidArgument, "sampling: penalty_last_n must be >= -1 (got %d)", penalty_last_n);
  if (logprobs > 100) raise(Status::InvalidArgument, "sampling: logprobs must be at most 100 (got %d)", logprobs);
  for (const auto& [id, bias] : logit_bias) {
    if (id < 0 || id >= n_vocab)
      raise(Status::InvalidArgument, "sampling: logit_bias token id %d is outside [0, %d)", id, n_vocab);
    // -inf bans a token; +inf would make the softmax undefined (inf - inf).
    if (std::isnan(bias) || bias == std::numeric_limits<float>::infinity())
      raise(Status::InvalidArgument, "sampling: logit_bias value for token %d must be a number or -inf (got %g)",
            id, static_cast<double>(bias));
  }
  // A bias that leaves no token possible is the caller's mistake, refused
  // here at submit rather than found at the first draw. Entries for one id
  // add up (as apply_logit_bias adds them); a total of -inf, or one so
  // negative that any logit plus it overflows to -inf, bans the token; a
  // total of +inf would make the softmax undefined.
  if (!logit_bias.empty() && logit_bias.size() >= static_cast<size_t>(n_vocab)) {
    std::vector<float> total(static_cast<size_t>(n_vocab), 0.0f);
    for (const auto& [id, bias] : logit_bias) total[static_cast<size_t>(id)] += bias;
    bool any = false;
    for (int32_t id = 0; id < n_vocab; ++id) {
      const float t = total[static_cast<size_t>(id)];
      if (t == std::numeric_limits<float>::infinity())
        raise(Status::InvalidArgument, "sampling: logit_bias entries for token %d add up to +inf", id);
      if (!(t <= -kBanBias)) any = true;
    }
    if (!any)
      raise(Status::InvalidArgument,
            "sampling: logit_bias bans every token of the vocabulary (%d tokens); at least one must stay possible",
            n_vocab);
  } else {
    // Fewer entries than tokens: some token is untouched; only sums can overflow.
    std::vector<std::pair<int32_t, float>> sorted(logit_bias);
    std::sort(sorted.begin(), sorted.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    for (size_t i = 0; i < sorted.size();) {
      float t = 0.0f;
      const int32_t id = sorted[i].first;
      for (; i < sorted.size() && sorted[i].first == id; ++i) t += sorted[i].second;
      if (t == std::numeric_limits<float>::infinity())
        raise(Status::InvalidArgument, "sampling: logit_bias entries for token %d add up to +inf", id);
    }
  }
}

// ---- the steps -------------------------------------------------------------------------

namespace sampling {

namespace {

// Best first: larger value, then lower id. A strict weak order as long as no
// value is NaN (make_candidates drops NaN).
inline bool better(const TokenCandidate& a, const TokenCandidate& b) {
  return a.first > b.first || (a.first == b.first && a.second < b.second);
}

inline bool selectable(float x) {
  return !std::isnan(x) && x != -std::numeric_limits<float>::infinity();
}

[[noreturn]] void raise_nothing_selectable(const std::vector<float>& logits) {
  for (float x : logits)
    if (std::isnan(x)) raise(Status::Internal, "sampling: the logits contain NaN and no usable value");
  raise(Status::InvalidArgument, "every token is banned by logit_bias");
}

}  // namespace

void apply_logit_bias(std::vector<float>& logits,
                      const std::vector<std::pair<int32_t, float>>& bias) {
  const auto n = static_cast<int64_t>(logits.size());
  for (const auto& [id, b] : bias)
    if (id >= 0 && id < n) logits[static_cast<size_t>(id)] += b;  // -inf + finite = -inf: a ban
}

void apply_penalties(std::vector<float>& logits, const std::vector<int32_t>& history,
                     const SamplingParams& p, std::vector<int32_t>* scratch) {
  const bool off = p.repeat_penalty == 1.0f && p.frequency_penalty == 0.0f && p.presence_penalty == 0.0f;
  if (off || p.penalty_last_n == 0 || history.empty()) return;

  size_t window = history.size();
  if (p.penalty_last_n > 0) window = std::min(window, static_cast<size_t>(p.penalty_last_n));

  // Count occurrences by sorting a copy of the window: O(w log w) per step,
  // independent of the vocabulary size.
  std::vector<int32_t> local;
  std::vector<int32_t>& w = scratch ? *scratch : local;
  w.assign(history.end() - static_cast<std::ptrdiff_t>(window), history.end());
  std::sort(w.begin(), w.end());

  const auto n_vocab = static_cast<int64_t>(logits.size());
  for (size_t i = 0; i < w.size();) {
    size_t j = i + 1;
    while (j < w.size() && w[j] == w[i]) ++j;
    const int32_t id = w[i];
    const auto count = static_cast<float>(j - i);
    i = j;
    if (id < 0 || id >= n_vocab) continue;
    float& l = logits[static_cast<size_t>(id)];
    // Dividing a positive logit and multiplying a negative one both make the
    // token less likely when repeat_penalty > 1.
    if (p.repeat_penalty != 1.0f) l = l > 0.0f ? l / p.repeat_penalty : l * p.repeat_penalty;
    l -= count * p.frequency_penalty + p.presence_penalty;
  }
}

int32_t argmax_token(const std::vector<float>& logits) {
  int32_t best = -1;
  float best_v = 0.0f;
  for (size_t i = 0; i < logits.size(); ++i) {
    const float v = logits[i];
    if (!selectable(v)) continue;
    if (best < 0 || v > best_v) {  // strict: the lowest id wins ties
      best = static_cast<int32_t>(i);
      best_v = v;
    }
  }
  if (best < 0) raise_nothing_selectable(logits);
  return best;
}

void make_candidates(const std::vector<float>& logits, std::vector<TokenCandidate>& cand) {
  cand.resize(logits.size());
  size_t n = 0;
  for (size_t i = 0; i < logits.size(); ++i) {
    cand[n] = TokenCandidate(logits[i], static_cast<int32_t>(i));
    n += selectable(logits[i]) ? 1 : 0;  // branch-free: most tokens are kept
  }
  cand.resize(n);
  if (cand.empty()) raise_nothing_selectable(logits);
}

void top_k_filter(std::vector<TokenCandidate>& cand, int32_t k) {
  if (k <= 0 || static_cast<size_t>(k) >= cand.size()) return;
  // O(n log k): only the k best are ordered.
  std::partial_sort(cand.begin(), cand.begin() + k, cand.end(), better);
  cand.resize(static_cast<size_t>(k));
}

void softmax_filter(std::vector<TokenCandidate>& cand, float temperature) {
  if (cand.empty()) return;
  float max_l = cand[0].first;
  for (const auto& c : cand) max_l = std::max(max_l, c.first);
  // p_i = exp((l_i - max) / T) / sum_j exp((l_j - max) / T). Subtracting the
  // max before dividing keeps a tiny T from overflowing: the best token gets
  // exp(0) = 1 and the others underflow towards 0.
  // (Dividing, not multiplying by 1/T: 1/T overflows for a subnormal T.)
  double sum = 0.0;
  for (auto& c : cand) {
    c.first = std::exp((c.first - max_l) / temperature);
    sum += c.first;
  }
  const double inv_sum = 1.0 / sum;  // sum >= 1: the max contributes exp(0)
  for (auto& c : cand) c.first = static_cast<float>(c.first * inv_sum);
  // Tokens whose probability underflowed to 0 can never be drawn.
  cand.erase(std::remove_if(cand.begin(), cand.end(), [](const TokenCandidate& c) { return c.first <= 0.0f; }),
             cand.end());
}

void top_p_filter(std::vector<TokenCandidate>& cand, float top_p) {
  if (top_p >= 1.0f || cand.empty()) return;
  // The minimal set is the shortest best-first prefix whose mass reaches
  // top_p. Find its end K like quickselect, without sorting everything:
  // [0, lo) is kept (mass `cum`), K lies in (lo, hi], and the mass of
  // [0, hi) reaches top_p (or hi == n). Partition [lo, hi) around a pivot;
  // if the better part completes the mass, K is inside it, else keep it all
  // and continue in the rest. Expected O(n) however flat the distribution.
  const auto at = [&cand](size_t i) { return cand.begin() + static_cast<std::ptrdiff_t>(i); };
  size_t lo = 0, hi = cand.size();
  double cum = 0.0;
  while (hi - lo > 32) {
    // Median of three distinct candidates (`better` is a strict total order
    // here): the pivot's part is non-empty and so is the rest, so both
    // branches shrink the range.
    TokenCandidate a = cand[lo], b = cand[lo + (hi - lo) / 2], c = cand[hi - 1];
    if (better(b, a)) std::swap(a, b);
    if (better(c, b)) std::swap(b, c);
    if (better(b, a)) std::swap(a, b);
    const TokenCandidate pivot = b;
    const auto mid = std::partition(at(lo), at(hi), [&pivot](const TokenCandidate& x) { return !better(pivot, x); });
    const auto m = static_cast<size_t>(mid - cand.begin());
    double mass = 0.0;
    for (size_t i = lo; i < m; ++i) mass += cand[i].first;
    if (cum + mass >= top_p) {
      hi = m;
    } else {
      cum += mass;
      lo = m;
    }
  }
  std::sort(at(lo), at(hi), better);
  for (size_t i = lo; i < hi; ++i) {
    cum += cand[i].first;
    if (cum >= top_p) {
      cand.resize(i + 1);
      return;
    }
  }
  cand.resize(hi);  // rounding kept the total just below top_p: keep [0, hi)
}

void min_p_filter(std::vector<TokenCandidate>& cand, float min_p) {
  if (min_p <= 0.0f || cand.empty()) return;
  float p_max = 0.0f;
  for (const auto& c : cand) p_max = std::max(p_max, c.first);
  const float threshold = min_p * p_max;
  cand.erase(std::remove_if(cand.begin(), cand.end(),
                            [threshold](const TokenCandidate& c) { return c.first < threshold; }),
             cand.end());
}

}  // namespace sampling

// ---- the sampler -----------------------------------------------------------------------

Sampler::Sampler(SamplingParams params, int32_t n_vocab)
    : params_(std::move(params)), n_vocab_(n_vocab), rng_(params_.seed) {
  params_.validate(n_vocab_);
  if (params_.grammar) {
    if (!params_.grammar->grammar || params_.grammar->pieces.size() != static_cast<size_t>(n_vocab_) ||
        params_.grammar->is_eog.size() != static_cast<size_t>(n_vocab_))
      raise(Status::InvalidArgument, "sampling: the grammar is bound to a vocabulary of another size");
    matcher_ = std::make_unique<GrammarMatcher>(params_.grammar->grammar);
  }
}

Sampler::~Sampler() = default;
Sampler::Sampler(Sampler&&) noexcept = default;
Sampler& Sampler::operator=(Sampler&&) noexcept = default;

// Bans every token that cannot continue the text under the grammar.
void Sampler::apply_grammar(std::vector<float>& logits) const {
  const TokenGrammar& tg = *params_.grammar;
  const bool can_end = matcher_->can_end();
  const bool must_end = matcher_->must_end();
  bool any = false;
  for (int32_t i = 0; i < n_vocab_; ++i) {
    float& l = logits[static_cast<size_t>(i)];
    if (!(l > -INFINITY)) continue;
    bool ok;
    if (tg.is_eog[static_cast<size_t>(i)]) ok = can_end;
    else if (must_end || tg.pieces[static_cast<size_t>(i)].empty()) ok = false;
    else ok = matcher_->accepts(tg.pieces[static_cast<size_t>(i)]);
    if (ok) any = true;
    else l = -INFINITY;
  }
  if (!any) raise(Status::InvalidArgument, "sampling: no token can continue the text under the grammar");
}

const std::vector<TokenCandidate>& Sampler::distribution(std::vector<float>& logits,
                                                         const std::vector<int32_t>& history) {
  if (logits.size() != static_cast<size_t>(n_vocab_))
    raise(Status::InvalidArgument, "sampling: got %zu logits, expected n_vocab = %d", logits.size(), n_vocab_);

  sampling::apply_logit_bias(logits, params_.logit_bias);
  sampling::apply_penalties(logits, history, params_, &window_);
  if (matcher_) apply_grammar(logits);

  if (params_.temperature <= 0.0f) {
    cand_.assign(1, TokenCandidate(1.0f, sampling::argmax_token(logits)));
    return cand_;
  }
  sampling::make_candidates(logits, cand_);
  sampling::top_k_filter(cand_, params_.top_k);
  sampling::softmax_filter(cand_, params_.temperature);
  // min-p and top-p each keep a best-first prefix of the candidates, judged
  // on the same (not yet renormalised) probabilities, so the survivors are
  // the shorter prefix whichever runs first. min-p is O(n) and usually
  // leaves few tokens, which makes top-p's sorting cheap.
  sampling::min_p_filter(cand_, params_.min_p);
  sampling::top_p_filter(cand_, params_.top_p);

  double sum = 0.0;
  for (const auto& c : cand_) sum += c.first;
  const double inv = 1.0 / sum;
  for (auto& c : cand_) c.first = static_cast<float>(c.first * inv);
  return cand_;
}

int32_t Sampler::sample(std::vector<float>& logits, const std::vector<int32_t>& history) {
  if (params_.logprobs >= 0 && logits.size() == static_cast<size_t>(n_vocab_)) raw_.assign(logits.begin(), logits.end());
  const auto& cand = distribution(logits, history);
  int32_t t;
  if (cand.size() == 1) {
    t = cand[0].second;  // greedy, or one survivor: no draw
  } else {
    // u uniform in [0, 1) from the top 53 bits: mt19937_64 is fully specified by
    // the standard, so the same seed gives the same tokens on every platform
    // (std::uniform_real_distribution is implementation-defined).
    const double u = static_cast<double>(rng_() >> 11) * 0x1.0p-53;
    double total = 0.0;
    for (const auto& c : cand) total += c.first;
    const double target = u * total;
    double cum = 0.0;
    t = cand.back().second;  // rounding: u * total landed on the very end
    for (const auto& c : cand) {
      cum += c.first;
      if (target < cum) {
        t = c.second;
        break;
      }
    }
  }
  after_draw(t);
  return t;
}

void Sampler::after_draw(int32_t t) {
  if (matcher_ && !params_.grammar->is_eog[static_cast<size_t>(t)])
    matcher_->advance(params_.grammar->pieces[static_cast<size_t>(t)]);
  if (params_.logprobs >= 0 && logprobs_sink_) logprobs_sink_(logprobs_of(raw_, t, params_.logprobs));
}

void Sampler::accept(int32_t t, const float* raw_logits) {
  if (t < 0 || t >= n_vocab_) raise(Status::InvalidArgument, "sampling: token %d outside the vocabulary", t);
  if (params_.logprobs >= 0) {
    if (!raw_logits) raise(Status::InvalidArgument, "sampling: accept() needs the raw logits for log-probabilities");
    raw_.assign(raw_logits, raw_logits + n_vocab_);
  }
  after_draw(t);
}

TokenLogprobs logprobs_of(const std::vector<float>& logits, int32_t token, int32_t k) {
  TokenLogprobs out;
  float mx = -INFINITY;
  for (float l : logits)
    if (l > mx) mx = l;
  double sum = 0.0;
  for (float l : logits)
    if (l > -INFINITY) sum += std::exp(static_cast<double>(l - mx));
  const float lse = mx + static_cast<float>(std::log(sum));
  auto lp = [&](int32_t i) {
    const float l = logits[static_cast<size_t>(i)];
    return l > -INFINITY ? l - lse : -INFINITY;
  };
  out.chosen = {token, lp(token)};
  const size_t n = std::min(static_cast<size_t>(std::max(k, 0)), logits.size());
  if (n > 0) {
    std::vector<int32_t> ids(logits.size());
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>(i);
    std::partial_sort(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(n), ids.end(), [&](int32_t a, int32_t b) {
      const float la = logits[static_cast<size_t>(a)], lb = logits[static_cast<size_t>(b)];
      return la > lb || (la == lb && a < b);
    });
    for (size_t i = 0; i < n; ++i) out.top.push_back({ids[i], lp(ids[i])});
  }
  return out;
}

// ---- stop strings ----------------------------------------------------------------------

StopMatch find_stop(const std::string& text, const std::vector<std::string>& stops) {
  StopMatch m;
  for (const auto& s : stops) {
    if (s.empty()) continue;
    const size_t pos = text.find(s);
    if (pos != std::string::npos && (!m.found || pos < m.pos)) {
      m.found = true;
      m.pos = pos;
    }
  }
  if (m.found) return m;  // the text is cut at pos: nothing left to hold back

  // The longest suffix of text that is a proper prefix of some stop string.
  for (const auto& s : stops) {
    if (s.size() < 2) continue;
    for (size_t len = std::min(s.size() - 1, text.size()); len > m.hold_back; --len) {
      if (text.compare(text.size() - len, len, s, 0, len) == 0) {
        m.hold_back = len;
        break;
      }
    }
  }
  return m;
}

}  // namespace infer
