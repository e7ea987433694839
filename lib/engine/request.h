// One generation request: its parameters and its output, a passive sink the
// stepping thread appends to (append) and ends (finish, the first call wins),
// and other threads read and wait on. Whether a request ends, and why, is
// decided elsewhere (engine/finish.h); where its sequence is in the engine
// (waiting, running, preempted) is the scheduler's (engine/sequence.h).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.h"
#include "engine/speculative.h"
#include "sampling/sampler.h"
#include "tokenizer/tokenizer.h"

namespace infer {

enum class FinishReason : int { None = 0, Stop = 1, Length = 2, Cancelled = 3, Error = 4 };

// Which logit rows a request keeps (same bits as INFER_LOGITS_*).
enum LogitsFlags : uint32_t { kLogitsPrompt = 1, kLogitsGenerated = 2, kLogitsLogprobs = 4 };

// Called for each generated token with the text it releases (complete UTF-8,
// stop-string candidates held back). Return false to cancel the request.
using TokenCallback = std::function<bool(int32_t token, std::string_view text)>;

struct RequestParams {
  std::vector<int32_t> prompt;  // token ids, BOS included when wanted
  SamplingParams sampling;
  int32_t max_tokens = 256;
  std::vector<std::string> stop;
  bool ignore_eos = false;
  uint32_t logits = 0;  // LogitsFlags
  TokenCallback on_token;
  int32_t priority = 0;      // higher runs first; FCFS among equals
  bool prefix_cache = true;  // look up / share this request's prompt blocks
  uint64_t cache_salt = 0;   // requests share cached blocks only with equal salts
  int32_t spec_max_draft = -1;  // speculative decoding: -1 the engine's draft length, 0 off, > 0 at most this many
};

using Clock = std::chrono::steady_clock;

struct RequestTimes {
  Clock::time_point submit, first_scheduled, first_token, last_token, finish;
  bool scheduled = false;
};

// One request's parameters and output: the generated tokens and text, the
// logits rows it asked for, its timings and how it finished. The engine's
// stepping thread is the only writer (through the "engine side" members
// below); any thread may read under mutex(). The state of the sequence that
// computes it (KV slot, computed count, sampler, text decoder) is not here:
// it is the engine's own (engine/sequence.h).
class Request {
 public:
  Request(uint64_t id, RequestParams params);

  uint64_t id() const { return id_; }
  const RequestParams& params() const { return params_; }

  // ---- read side (any thread, under mutex() while the engine may run) ----
  FinishReason finish_reason() const { return finish_; }
  bool finished() const { return finish_ != FinishReason::None; }
  Status status() const { return status_; }
  const std::string& error() const { return error_; }
  int32_t n_prompt() const { return n_prompt_; }
  int32_t n_generated() const { return static_cast<int32_t>(tokens_.size()) - n_prompt_; }
  const int32_t* generated() const { return tokens_.data() + n_prompt_; }
  const std::string& text() const { return text_; }
  const std::vector<float>& logits() const { return logits_; }
  int64_t n_logit_rows() const { return n_logit_rows_; }
  const RequestTimes& times() const { return times_; }
  int32_t n_cached() const { return n_cached_; }
  int32_t n_preemptions() const { return n_preemptions_; }
  // Speculative decoding's counters for this request (under mutex()).
  const SpecCounters& spec() const { return spec_; }
  // Per generated token, when params().sampling.logprobs >= 0.
  const std::vector<TokenLogprobs>& logprobs() const { return logprobs_; }
  void request_cancel() { cancel_.store(true, std::memory_order_relaxed); }
  bool cancel_requested() const { return cancel_.load(std::memory_order_relaxed); }
  std::mutex& mutex() const { return mu_; }
  // Waits until more than `seen` tokens were generated or the request
  // finished, at most timeout_ms (< 0: no limit). Takes the lock itself.
  void wait_for(size_t seen, int32_t timeout_ms) const;
  // Waits until the request finished, at most timeout_ms (< 0: no limit);
  // not woken by each token. Returns finished().
  bool wait_finished(int32_t timeout_ms) const;

  // ---- engine side (the stepping thread only) ----
  // Prompt and generated tokens (the engine reads them without the lock: it
  // is the only writer).
  const std::vector<int32_t>& tokens() const { return tokens_; }
  // Appends a generated token and the text it releases; wakes the readers
  // that wait for this many tokens.
  void append(int32_t token, const std::string& released);
  // Ends the request (the first call wins) and wakes its readers.
  void finish(FinishReason reason, Status status = Status::Ok, std::string message = {});
  // Stores the log-probabilities of the token about to be accepted.
  void add_logprobs(TokenLogprobs&& lp);
  // Stores one logits row (as log-probabilities when asked for).
  void add_logits_row(const float* row, int32_t n_vocab);
  // A follower of an n > 1 family starts from its leader's prompt rows.
  void copy_prompt_outputs(const Request& leader);
  void mark_scheduled(int32_t n_cached);
  void note_preemption() {
    std::lock_guard<std::mutex> lock(mu_);
    ++n_preemptions_;
  }
  void note_spec_step(int32_t drafted, int32_t accepted) {
    std::lock_guard<std::mutex> lock(mu_);
    spec_.add_step(drafted, accepted);
  }

 private:
  // Waits (lock held) until n_generated() >= count or finished().
  void wait_count(std::unique_lock<std::mutex>& lock, size_t count, int32_t timeout_ms) const;

  uint64_t id_;
  RequestParams params_;

  std::vector<int32_t> tokens_;  // prompt, then generated tokens
  int32_t n_prompt_ = 0;
  std::string text_;             // released text
  std::vector<float> logits_;
  int64_t n_logit_rows_ = 0;
  std::vector<TokenLogprobs> logprobs_;
  int32_t n_cached_ = 0;         // prompt tokens found in the prefix cache (first admission)
  int32_t n_preemptions_ = 0;
  SpecCounters spec_;

  FinishReason finish_ = FinishReason::None;
  Status status_ = Status::Ok;
  std::string error_;
  std::atomic<bool> cancel_{false};
  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  // The fewest generated tokens a waiter on cv_ needs (under mu_): a token
  // notifies only when it reaches this, so a reader that waits for the end
  // (or a streaming reader that is not waiting) costs the engine no wake-up
  // per token. Reset to "none" by the notify; waiters register again.
  mutable size_t notify_at_ = SIZE_MAX;
  RequestTimes times_;
};

}  // namespace infer
