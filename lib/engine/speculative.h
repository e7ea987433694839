// Speculative decoding's parts that do not depend on the engine: drafters
// (which propose the next tokens of a sequence cheaply), the lossless
// acceptance rule the target model's scores decide drafts with, the
// per-sequence draft length controller, and the acceptance counters.
//
// One verification step of a sequence: the drafter proposes d_1..d_K after
// the sequence's tokens; the target scores the last known token and the K
// drafts in one forward (K+1 rows); row i gives the target distribution p_i
// of the token after d_1..d_i (with every sampler setting applied, the
// history including the drafts before it). Drafts are decided in order:
// d_{i+1} is accepted with probability min(1, p_i(d)/q_i(d)) (q_i: the
// drafter's distribution; a point mass for drafters that propose without
// one, so the probability is p_i(d)); the first rejected draft is replaced
// by a token drawn from normalize(max(0, p_i - q_i)) and the step ends; when
// all K are accepted, row K gives one more token, drawn from p_K as plain
// decoding would. Each emitted token is distributed exactly as the target
// would have sampled it (the speculative sampling theorem); greedy decoding
// (p a point mass at the argmax) accepts exactly the drafts equal to the
// argmax and replaces the first other one by the argmax, so greedy output is
// the plain greedy output token for token when the target's rows do not
// depend on how many rows share the forward (tests/test_batch_invariance).
#pragma once

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "sampling/sampler.h"

namespace infer {

class Tokenizer;

// Which drafter an engine speculates with.
//  Ngram:     prompt lookup (NgramDrafter), no model;
//  LayerSkip: the target itself with some layers left out (self-speculative:
//             no extra weights; the skipped layers' residual passes through);
//  Draft:     a separate, smaller model with the same vocabulary and its own
//             paged KV cache that follows each sequence.
enum class SpecMethod : int { None = 0, Ngram = 1, LayerSkip = 2, Draft = 3 };

// Parses a list of layers and ranges ("4-17", "3,5,9-11") into one flag per
// layer. Error(InvalidArgument) naming the problem for bad syntax, layers
// outside [0, n_layer), or a list that skips every layer.
std::vector<uint8_t> parse_layer_list(const std::string& spec, int32_t n_layer);

// A draft model must share the target's vocabulary: same size, same special
// ids (BOS, EOS, EOT, UNK, PAD) and the same text for every token.
// Error(InvalidArgument) naming the first difference otherwise.
void check_draft_vocab(const Tokenizer& target, const Tokenizer& draft);

// Prompt lookup: finds the latest earlier occurrence of the sequence's last
// n tokens (n from n_max down to n_min) in its prompt and generated text,
// and proposes the tokens that followed it. No model, no distribution (point
// masses). Strong where outputs copy their input (summaries, code edits,
// extraction) and on repetitive text. (The engine's batch-shaped drafters
// are in engine/speculation.*; this is the n-gram one's rule.)
class NgramDrafter {
 public:
  // Error(InvalidArgument) unless 1 <= n_min <= n_max <= 64.
  NgramDrafter(int32_t n_max = 3, int32_t n_min = 1);
  // Appends up to max_k proposed tokens to follow `tokens` (prompt and
  // generated) to `out`; returns how many. 0: nothing worth proposing.
  int32_t propose(const std::vector<int32_t>& tokens, int32_t max_k, std::vector<int32_t>& out);

 private:
  int32_t n_max_, n_min_;
};

// The decision on one draft token.
struct DraftVerdict {
  bool accepted = false;
  int32_t token = -1;  // the draft when accepted, else the replacement drawn from the residual
};

// Decides draft d against the target distribution p (candidates with
// probabilities summing to 1, as Sampler::distribution gives them). q is the
// drafter's distribution over the same vocabulary (nullptr: a point mass at
// d). Draws use rng (one uniform for the decision, one for a replacement).
DraftVerdict verify_draft(const std::vector<TokenCandidate>& p, int32_t d, const std::vector<TokenCandidate>* q,
                          std::mt19937_64& rng);

// How many tokens a sequence drafts next: grows by one after a step whose
// drafts were all accepted, shrinks after a step that accepted less than
// half of them, within [1, max_k]; a sequence whose recent acceptance is
// very low (below 1 token in 8 over the last window) pauses drafting for a
// while and then tries again with one token, so text that does not repeat
// costs almost nothing.
class DraftLength {
 public:
  explicit DraftLength(int32_t max_k = 4) : max_k_(max_k), k_(max_k > 0 ? std::min(max_k, 2) : 0) {}
  // Tokens to draft this step (0: none).
  int32_t next() const { return paused_ > 0 ? 0 : k_; }
  // After a step that drafted `drafted` tokens and accepted `accepted` (a
  // step that drafted nothing counts down a pause).
  void update(int32_t drafted, int32_t accepted);
  int32_t max_k() const { return max_k_; }
  // The probability that a drafted token is accepted given that the ones
  // before it were, estimated from recent steps as accepted / tried (a
  // step tries its accepted drafts plus the first rejected one): the
  // maximum-likelihood estimate if acceptances are independent.
  double acceptance() const { return tried_ > 0 ? accepted_ / tried_ : 0.5; }

 private:
  int32_t max_k_;
  int32_t k_;
  int32_t paused_ = 0;
  double recent_rate_ = 0.5;  // exponential average of accepted / drafted
  double accepted_ = 0, tried_ = 0;  // exponentially decayed counts (acceptance())
};

// What a forward step costs by its number of rows, as measured on this
// machine (exponential averages of the engine's own steps), and what one
// drafted token costs the drafter. The verify step of K drafts has K + 1
// rows; where the weights come from memory a step of 2 rows costs about one
// row's, and from 3 rows on the kernels become compute bound on AVX2 (int8
// products with no VNNI: a 4-row step costs ~1.4 one-row steps on a Zen 3),
// so that cost is far from linear in K and differs from machine to machine.
class StepCosts {
 public:
  static constexpr int32_t kMaxRows = 64;
  void record_step(int32_t rows, double ms);
  void record_draft(double ms_per_token);
  // Milliseconds of a step of `rows` rows; < 0 when none was measured.
  double step_ms(int32_t rows) const {
    return rows >= 1 && rows <= kMaxRows && seen_[rows] ? ms_[rows] : -1.0;
  }
  double draft_ms() const { return draft_seen_ ? draft_ms_ : 0.0; }

 private:
  double ms_[kMaxRows + 1] = {};
  bool seen_[kMaxRows + 1] = {};
  double draft_ms_ = 0;
  bool draft_seen_ = false;
};

// Expected tokens a verification step of k drafts emits when each draft is
// accepted with probability a after its predecessors: (1 - a^(k+1)) / (1 - a).
double expected_tokens(double a, int32_t k);

// The draft length in [1, cap] that makes the most tokens per millisecond,
// expected_tokens(a, k) / (step_ms(k + 1) + k * draft_ms), among the lengths
// whose (k + 1)-row step was measured; a length not measured yet is chosen
// only if it is `cap` itself (so the adaptive rule still explores upward).
// Returns cap when step_ms(cap + 1) is unknown or nothing else is known.
int32_t cost_aware_draft_length(double a, int32_t cap, const StepCosts& costs);

// Acceptance counters, per request and per engine.
struct SpecCounters {
  static constexpr int kPositions = 16;
  uint64_t steps = 0;     // verification steps that drafted something
  uint64_t drafted = 0;   // draft tokens scored
  uint64_t accepted = 0;  // of which accepted
  // drafted_at[i] / accepted_at[i]: drafts at position i (0-based) of a step
  // (the last slot counts positions >= kPositions - 1).
  uint64_t drafted_at[kPositions] = {};
  uint64_t accepted_at[kPositions] = {};
  void add_step(int32_t drafted, int32_t accepted);
  void merge(const SpecCounters& o);
  double acceptance_rate() const { return drafted ? static_cast<double>(accepted) / drafted : 0.0; }
  // Tokens emitted per verification step: accepted drafts plus the target's own.
  double mean_accepted_length() const { return steps ? static_cast<double>(accepted + steps) / steps : 0.0; }
};

}  // namespace infer
