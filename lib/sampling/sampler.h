// Turning a row of logits into the next token.
//
// The chain, applied in this order (each step is skipped when at its neutral
// value): logit bias -> repetition / frequency / presence penalties over the
// last `penalty_last_n` tokens -> (greedy if temperature <= 0) -> top-k ->
// softmax with temperature -> top-p -> min-p -> draw with the seeded RNG.
// Same seed and same logits give the same token sequence.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

namespace infer {

class Grammar;
class GrammarMatcher;

// A grammar bound to a vocabulary: what constrained sampling needs to test
// a token (the bytes it stands for) and to know which tokens end the text.
struct TokenGrammar {
  std::shared_ptr<const Grammar> grammar;
  std::vector<std::string> pieces;  // per token id; empty: never allowed (control tokens)
  std::vector<uint8_t> is_eog;      // per token id: ends generation (allowed when the grammar is complete)
};

// A generated token's log-probability under the model (log-softmax of the
// raw logits, before bias, penalties, temperature or constraints) and the
// most likely alternatives, best first.
struct TokenLogprob {
  int32_t token = -1;
  float logprob = 0;
};
struct TokenLogprobs {
  TokenLogprob chosen;
  std::vector<TokenLogprob> top;
};

struct SamplingParams {
  float temperature = 0.8f;     // <= 0: greedy (argmax, lowest id on ties)
  int32_t top_k = 40;           // <= 0: off
  float top_p = 0.95f;          // in (0, 1]; 1: off
  float min_p = 0.05f;          // in [0, 1]; 0: off
  float repeat_penalty = 1.0f;  // 1: off. logit>0 -> logit/p, else logit*p
  float frequency_penalty = 0.0f;  // subtract count * f
  float presence_penalty = 0.0f;   // subtract p if count > 0
  int32_t penalty_last_n = 64;     // window for penalties; 0 off, -1 all
  uint64_t seed = 0;
  std::vector<std::pair<int32_t, float>> logit_bias;  // added to logits; -inf bans
  // < 0: off; k in [0, 100]: report each drawn token's log-probability and
  // its k most likely alternatives (Sampler::set_logprobs_sink).
  int32_t logprobs = -1;
  // Constrained sampling: only tokens that keep the text a prefix of a
  // sentence of the grammar are drawn; end-of-generation tokens only once it
  // is complete. Each Sampler keeps its own match state.
  std::shared_ptr<const TokenGrammar> grammar;

  // Error(InvalidArgument) naming the field for impossible values: NaN or
  // infinite temperature / penalties, top_p outside (0, 1], min_p outside
  // [0, 1], repeat_penalty <= 0, penalty_last_n < -1, bias ids outside
  // [0, n_vocab), NaN or +inf biases (-inf is allowed: it bans the token).
  void validate(int32_t n_vocab) const;
};

// A candidate token: (logit or probability, token id).
using TokenCandidate = std::pair<float, int32_t>;

class Sampler {
 public:
  // Validates params (Error(InvalidArgument) on impossible values or n_vocab <= 0).
  Sampler(SamplingParams params, int32_t n_vocab);
  // history: the tokens seen so far (prompt + generated) for the penalties.
  // logits is a scratch copy the sampler may modify; it must hold exactly
  // n_vocab values. Error(InvalidArgument) when every token is banned.
  int32_t sample(std::vector<float>& logits, const std::vector<int32_t>& history);

  // The distribution sample() draws from, without drawing (and without
  // touching the RNG): the surviving tokens with their probabilities, which
  // sum to 1. Greedy gives one token with probability 1. For tests and for
  // speculative verification, which needs the target distribution. The
  // reference is valid until the next call on this sampler.
  const std::vector<TokenCandidate>& distribution(std::vector<float>& logits,
                                                  const std::vector<int32_t>& history);
  // What sample() does after its draw, for a token chosen elsewhere from
  // distribution() (speculative verification): the grammar advances past it
  // and its log-probabilities go to the sink, computed from raw_logits (the
  // logits as they came, before the chain; may be null when
  // params.logprobs < 0).
  void accept(int32_t token, const float* raw_logits);

  const SamplingParams& params() const { return params_; }
  int32_t n_vocab() const { return n_vocab_; }

  // Where each drawn token's log-probabilities go (params.logprobs >= 0),
  // called by sample() before it returns.
  void set_logprobs_sink(std::function<void(TokenLogprobs&&)> sink) { logprobs_sink_ = std::move(sink); }

  ~Sampler();
  Sampler(Sampler&&) noexcept;
  Sampler& operator=(Sampler&&) noexcept;

 private:
  void apply_grammar(std::vector<float>& logits) const;
  // After a token is chosen: the grammar moves past it, its log-probabilities
  // (from raw_) go to the sink.
  void after_draw(int32_t t);
  SamplingParams params_;
  std::unique_ptr<GrammarMatcher> matcher_;
  std::function<void(TokenLogprobs&&)> logprobs_sink_;
  std::vector<float> raw_;  // scratch: the logits before the chain, for log-probabilities
  int32_t n_vocab_;
  std::mt19937_64 rng_;
  std::vector<std::pair<float, int32_t>> cand_;  // scratch
  std::vector<int32_t> window_;                  // scratch for penalty counting
};

// The chain's steps, exposed so each can be tested on its own. sample() is
// exactly: apply_logit_bias, apply_penalties, then argmax_token (greedy) or
// make_candidates, top_k_filter, softmax_filter, top_p_filter, min_p_filter
// and a draw.
namespace sampling {

// logits[id] += bias for every (id, bias); ids must be in range (validate()).
void apply_logit_bias(std::vector<float>& logits,
                      const std::vector<std::pair<int32_t, float>>& bias);

// Counts each token's occurrences c in the last p.penalty_last_n tokens of
// history (all when -1, none when 0) and, for every token with c > 0:
//   logit = logit > 0 ? logit / repeat_penalty : logit * repeat_penalty;
//   logit -= c * frequency_penalty + presence_penalty;
// History ids outside [0, logits.size()) are ignored. `scratch` is reused
// between calls to avoid allocating (may be null).
void apply_penalties(std::vector<float>& logits, const std::vector<int32_t>& history,
                     const SamplingParams& p, std::vector<int32_t>* scratch = nullptr);

// Index of the largest logit, lowest id on ties; NaN and -inf never win.
// Error(InvalidArgument) when no token is selectable (all banned).
int32_t argmax_token(const std::vector<float>& logits);

// (logit, id) for every selectable token (not -inf, not NaN), in id order.
// Error(InvalidArgument) when there is none.
void make_candidates(const std::vector<float>& logits, std::vector<TokenCandidate>& cand);

// Keeps the k best candidates (k <= 0 or >= size: all), sorted by
// descending value, ties by ascending id.
void top_k_filter(std::vector<TokenCandidate>& cand, int32_t k);

// Replaces logits by softmax(logit / temperature) (temperature > 0).
void softmax_filter(std::vector<TokenCandidate>& cand, float temperature);

// On probabilities: keeps the smallest set of most probable candidates whose
// total probability reaches top_p (>= 1: no-op). Expected O(n); the order of
// the survivors is unspecified (but deterministic).
void top_p_filter(std::vector<TokenCandidate>& cand, float top_p);

// On probabilities: drops candidates below min_p * (largest probability)
// (min_p <= 0: no-op). Keeps the order.
void min_p_filter(std::vector<TokenCandidate>& cand, float min_p);

}  // namespace sampling

// The log-probabilities of `token` and of the k most likely tokens (best
// first, ties by id) under log-softmax(logits).
TokenLogprobs logprobs_of(const std::vector<float>& logits, int32_t token, int32_t k);

// Stop strings: finds the earliest match of any stop string in generated text.
// Also reports how many trailing bytes could still be the start of a stop
// string, so a streaming caller holds them back until they are decided.
// Empty stop strings are ignored. A streaming caller need not rescan all the
// text: a new match must start inside the held-back bytes or the new text, so
// passing (held-back bytes + new text) finds it. With valid UTF-8 text and
// stop strings, `pos` always falls on a character boundary.
struct StopMatch {
  bool found = false;
  size_t pos = 0;        // where the match starts (text is cut there)
  size_t hold_back = 0;  // trailing bytes that may begin a stop string
};
StopMatch find_stop(const std::string& text, const std::vector<std::string>& stops);

}  // namespace infer
