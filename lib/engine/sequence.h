// One sequence as the engine computes it: the request it serves, and three
// kinds of state, each with one writer:
//   scheduler state   (the Scheduler): computed count, KV slot, swap state,
//                     admission order, followers;
//   decoder state     (the engine's post-processing, engine/finish.h, and the
//                     Speculator's verification): which logits rows are
//                     stored, the sampler, the text decoder and the text held
//                     back;
//   speculation state (the Speculator, engine/speculation.h).
// Stepping thread only; the request's output is what other threads read.
#pragma once

#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "engine/request.h"
#include "engine/speculation.h"
#include "kv/kv_cache.h"
#include "sampling/sampler.h"
#include "tokenizer/tokenizer.h"

namespace infer {

class Sequence {
  std::shared_ptr<Request> request_;  // first: the members below are made from it

 public:
  Sequence(std::shared_ptr<Request> request, const Tokenizer& tok, int32_t n_vocab)
      : request_(std::move(request)),
        sampler(request_->params().sampling, n_vocab),
        // A prompt that is only BOS (or empty text) starts the text: its first
        // generated piece loses the SPM leading space like any decoded text.
        text(tok, /*at_text_start=*/true) {
    // The sampler reports each drawn token's log-probabilities (when asked
    // for) just before the engine accepts the token into this request.
    if (request_->params().sampling.logprobs >= 0)
      sampler.set_logprobs_sink([r = request_.get()](TokenLogprobs&& lp) { r->add_logprobs(std::move(lp)); });
    // The decoder sees the prompt so the generated text continues it exactly.
    for (int32_t t : request_->tokens()) text.push(t);
  }
  Sequence(const Sequence&) = delete;
  Sequence& operator=(const Sequence&) = delete;

  Request& request() { return *request_; }
  const Request& request() const { return *request_; }
  const std::shared_ptr<Request>& request_ptr() const { return request_; }
  uint64_t id() const { return request_->id(); }
  int32_t priority() const { return request_->params().priority; }

  const std::vector<int32_t>& tokens() const { return request_->tokens(); }
  int32_t n_tokens() const { return static_cast<int32_t>(request_->tokens().size()); }
  int32_t n_prompt() const { return request_->n_prompt(); }
  // Tokens whose K/V are not in the cache yet (1 while decoding, 1 + replay
  // after a recurrent model's rollback).
  int32_t pending() const { return n_tokens() - n_computed; }
  // Decoding: every token but the last known one is computed, or is being
  // recomputed after a rollback (drafts may follow it).
  bool decoding() const { return pending() == 1 + replay; }
  // Holds blocks in the device pool.
  bool on_device() const { return slot >= 0 && !swapped; }
  // Has ended (finished, or cancelled by its owner): the engine drops it.
  bool done() const { return request_->finished() || request_->cancel_requested(); }
  // Seeds this sequence plus its followers occupy once admitted.
  int32_t n_seqs() const { return 1 + static_cast<int32_t>(followers.size()); }

  // ---- scheduler state (the Scheduler's alone) ----
  int32_t n_computed = 0;  // leading tokens whose K/V are in the cache
  int32_t slot = -1;       // KV sequence slot (on the device, or swapped to the host)
  bool swapped = false;    // preempted to the host tier: slot kept, blocks on the host
  // A recurrent model whose drafts were rejected: how many positions before
  // the last known token are recomputed to rebuild the state from a block
  // boundary's snapshot (Scheduler::verified); they are fed with it.
  int32_t replay = 0;
  uint64_t admit_order = 0;                                           // latest admitted yields first
  uint64_t preempted_in_step = std::numeric_limits<uint64_t>::max();  // not re-admitted in that step
  // n > 1 samples of one prompt: the leader computes the prompt, then each
  // follower forks its KV (sharing every block) and samples on its own.
  std::vector<std::shared_ptr<Sequence>> followers;

  // ---- decoder state (post-processing's) ----
  int32_t next_logit_pos = 0;  // first position whose logits row is not stored yet
  Sampler sampler;
  std::vector<float> scratch;  // logits copy for the sampler
  StreamDecoder text;          // token bytes to whole UTF-8 characters
  std::string held;            // decoded but held back (a possible stop-string start)

  // ---- speculation state (the Speculator's) ----
  SpecState spec;
};

}  // namespace infer
