// One sequence as the engine computes it: the request it serves, how many of
// its tokens have K/V in the cache, its KV slot and swap state, its sampler,
// and (for n > 1 samples of one prompt) the followers that fork from it.
// Stepping thread only; the request's output is what other threads read.
#pragma once

#include <cstdint>
#include <limits>
#include <memory>
#include <vector>

#include "engine/request.h"
#include "engine/speculative.h"
#include "kv/kv_cache.h"
#include "sampling/sampler.h"

namespace infer {

class Sequence {
  std::shared_ptr<Request> request_;  // first: the members below are made from it

 public:
  Sequence(std::shared_ptr<Request> request, int32_t n_vocab)
      : request_(std::move(request)), sampler(request_->params().sampling, n_vocab) {
    // The sampler reports each drawn token's log-probabilities (when asked
    // for) just before the engine accepts the token into this request.
    if (request_->params().sampling.logprobs >= 0)
      sampler.set_logprobs_sink([r = request_.get()](TokenLogprobs&& lp) { r->add_logprobs(std::move(lp)); });
  }

  Request& request() { return *request_; }
  const Request& request() const { return *request_; }
  const std::shared_ptr<Request>& request_ptr() const { return request_; }
  uint64_t id() const { return request_->id(); }
  int32_t priority() const { return request_->params().priority; }

  const std::vector<int32_t>& tokens() const { return request_->tokens(); }
  int32_t n_tokens() const { return static_cast<int32_t>(request_->tokens().size()); }
  int32_t n_prompt() const { return request_->n_prompt(); }
  // Tokens whose K/V are not in the cache yet (1 while decoding).
  int32_t pending() const { return n_tokens() - n_computed; }
  // Holds blocks in the device pool.
  bool on_device() const { return slot >= 0 && !swapped; }
  // Has ended (finished, or cancelled by its owner): the engine drops it.
  bool done() const { return request_->finished() || request_->cancel_requested(); }
  // Seeds this sequence plus its followers occupy once admitted.
  int32_t n_seqs() const { return 1 + static_cast<int32_t>(followers.size()); }

  // ---- scheduling state (the scheduler's) ----
  int32_t n_computed = 0;  // leading tokens whose K/V are in the cache
  int32_t slot = -1;       // KV sequence slot (on the device, or swapped to the host)
  bool swapped = false;    // preempted to the host tier: slot kept, blocks on the host
  uint64_t admit_order = 0;                                           // latest admitted yields first
  uint64_t preempted_in_step = std::numeric_limits<uint64_t>::max();  // not re-admitted in that step

  // ---- output state (the engine's post-processing) ----
  int32_t next_logit_pos = 0;  // first position whose logits row is not stored yet
  Sampler sampler;
  std::vector<float> scratch;  // logits copy for the sampler

  // ---- speculative decoding (the engine's) ----
  bool speculates = false;     // the engine drafts for this sequence
  std::vector<int32_t> draft;  // tokens proposed for this step, after tokens()
  DraftLength draft_len{0};
  std::mt19937_64 spec_rng;    // acceptance draws (seeded from the request's seed)
  // Draft model: this sequence's slot in the draft model's KV cache and how
  // many of its tokens have draft K/V there. Released with the sequence.
  KvCache* draft_kv = nullptr;
  int32_t draft_slot = -1;
  int32_t draft_computed = 0;
  void release_draft_slot() {
    if (draft_kv && draft_slot >= 0) {
      try {
        draft_kv->remove_sequence(draft_slot);
      } catch (...) {
      }
    }
    draft_slot = -1;
    draft_computed = 0;
  }
  ~Sequence() { release_draft_slot(); }
  Sequence(const Sequence&) = delete;
  Sequence& operator=(const Sequence&) = delete;

  // n > 1 samples of one prompt: the leader computes the prompt, then each
  // follower forks its KV (sharing every block) and samples on its own.
  std::vector<std::shared_ptr<Sequence>> followers;
};

}  // namespace infer
