#include "engine/request.h"

#include <algorithm>
#include <cmath>

namespace infer {

Request::Request(uint64_t id, RequestParams params) : id_(id), params_(std::move(params)) {
  tokens_ = params_.prompt;
  n_prompt_ = static_cast<int32_t>(tokens_.size());
  times_.submit = Clock::now();
}

void Request::finish(FinishReason reason, Status status, std::string message) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (finish_ != FinishReason::None) return;
    finish_ = reason;
    status_ = status;
    error_ = std::move(message);
    times_.finish = Clock::now();
    notify_at_ = SIZE_MAX;
  }
  cv_.notify_all();
}

void Request::wait_count(std::unique_lock<std::mutex>& lock, size_t count, int32_t timeout_ms) const {
  const auto deadline = Clock::now() + std::chrono::milliseconds(std::max(timeout_ms, 0));
  while (finish_ == FinishReason::None && static_cast<size_t>(n_generated()) < count && timeout_ms != 0) {
    // Register (again: a notify resets it, and another waiter may have
    // needed fewer tokens), then sleep.
    notify_at_ = std::min(notify_at_, count);
    if (timeout_ms < 0) {
      cv_.wait(lock);
    } else if (cv_.wait_until(lock, deadline) == std::cv_status::timeout) {
      break;
    }
  }
}

void Request::wait_for(size_t seen, int32_t timeout_ms) const {
  std::unique_lock<std::mutex> lock(mu_);
  wait_count(lock, seen + 1, timeout_ms);
}

bool Request::wait_finished(int32_t timeout_ms) const {
  std::unique_lock<std::mutex> lock(mu_);
  wait_count(lock, SIZE_MAX, timeout_ms);
  return finish_ != FinishReason::None;
}

void Request::add_logprobs(TokenLogprobs&& lp) {
  std::lock_guard<std::mutex> lock(mu_);
  logprobs_.push_back(std::move(lp));
}

void Request::add_logits_row(const float* row, int32_t n_vocab) {
  std::lock_guard<std::mutex> lock(mu_);
  const size_t off = logits_.size();
  logits_.insert(logits_.end(), row, row + n_vocab);
  if (params_.logits & kLogitsLogprobs) {
    float* d = logits_.data() + off;
    const float mx = *std::max_element(d, d + n_vocab);
    double sum = 0;
    for (int32_t j = 0; j < n_vocab; ++j) sum += std::exp(static_cast<double>(d[j] - mx));
    const float lse = mx + static_cast<float>(std::log(sum));
    for (int32_t j = 0; j < n_vocab; ++j) d[j] -= lse;
  }
  ++n_logit_rows_;
}

void Request::copy_prompt_outputs(const Request& leader) {
  std::lock_guard<std::mutex> lock(mu_);
  logits_ = leader.logits_;
  n_logit_rows_ = leader.n_logit_rows_;
  n_cached_ = leader.n_cached_;
  times_.scheduled = true;
  times_.first_scheduled = leader.times_.first_scheduled;
}

void Request::mark_scheduled(int32_t n_cached) {
  std::lock_guard<std::mutex> lock(mu_);
  if (times_.scheduled) return;
  times_.scheduled = true;
  times_.first_scheduled = Clock::now();
  n_cached_ = n_cached;
}

void Request::append(int32_t token, const std::string& released) {
  std::unique_lock<std::mutex> lock(mu_);
  const auto now = Clock::now();
  if (n_generated() == 0) times_.first_token = now;
  times_.last_token = now;
  tokens_.push_back(token);
  text_ += released;
  // Wake the readers only when one waits for this many tokens.
  const bool wake = static_cast<size_t>(n_generated()) >= notify_at_;
  if (wake) notify_at_ = SIZE_MAX;
  lock.unlock();
  if (wake) cv_.notify_all();
}

}  // namespace infer
