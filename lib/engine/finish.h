// The decoder side of a step: how a chosen token becomes a request's output
// (text released whole UTF-8 characters at a time, stop-string candidates
// held back, the token callback) and the one decision whether a sequence
// ends after a token (ends_after). Requests are passive sinks (append,
// finish); the sequence's decoder state (sampler, text decoder, held text)
// is written here and by the Speculator's verification only.
#pragma once

#include <cstdint>

#include "engine/sequence.h"
#include "sampling/sampler.h"
#include "tokenizer/tokenizer.h"

namespace infer {

class Finisher {
 public:
  Finisher(const Tokenizer& tok, int32_t n_vocab, int32_t n_ctx) : tok_(tok), n_vocab_(n_vocab), n_ctx_(n_ctx) {}

  // Before a token is chosen for s: false when s takes no more tokens (it
  // ended, its owner cancelled it, or it reached max_tokens: finished then
  // with Length).
  bool may_take(Sequence& s) const;
  // Draws s's next token from a logits row (its sampler) and emits it;
  // nothing when may_take says s takes no more tokens.
  void sample(Sequence& s, const float* logits);
  // Appends token t to s's request, releases its text and calls the token
  // callback; finishes the request when ends_after says so or the callback
  // declines. False when the request has ended.
  bool emit(Sequence& s, int32_t t);
  // Tokens emitted so far, all sequences.
  uint64_t n_emitted() const { return n_emitted_; }

  // Why s ends once token t is appended (None: it goes on). eog: t ends
  // generation (EOS, EOT; a grammar admits those only once it is complete,
  // which is how a grammar ends a sequence); stop: the stop-string match of
  // the text held back with t's. The other ends: max_tokens, the context.
  // (The owner's cancel is may_take's; the callback's answer is emit's.)
  FinishReason ends_after(const Sequence& s, bool eog, const StopMatch& stop) const;

 private:
  const Tokenizer& tok_;
  int32_t n_vocab_;
  int32_t n_ctx_;
  uint64_t n_emitted_ = 0;
};

}  // namespace infer
