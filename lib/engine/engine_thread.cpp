#include "engine/engine_thread.h"

#include <algorithm>

#include "core/log.h"

namespace infer {

namespace {
// While requests wait but no step can compute anything (a DYNAMIC batch
// waiting for its timeout), the thread sleeps instead of calling step() in a
// loop: at most this long at a time, so a cancelled waiting request still
// finishes promptly.
constexpr auto kMaxWaitStep = std::chrono::milliseconds(100);
}  // namespace

EngineThread::EngineThread(Engine& engine) : engine_(engine) { thread_ = std::thread([this] { loop(); }); }

EngineThread::~EngineThread() { stop(false); }

void EngineThread::notify() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++kicks_;
    idle_now_ = false;
  }
  wake_.notify_one();
}

// When to step again after a step that computed nothing while requests wait:
// at the DYNAMIC policy's admission deadline when one is pending, else (a
// request waiting for something no step of ours brings) backing off from
// 1 ms, doubling, to kMaxWaitStep.
EngineThread::Clock::time_point EngineThread::next_attempt(Clock::time_point now) {
  if (const auto deadline = engine_.admission_deadline()) {
    backoff_ = Clock::duration::zero();
    return std::min<Clock::time_point>(std::max(*deadline, now), now + kMaxWaitStep);
  }
  backoff_ = std::min<Clock::duration>(backoff_ == Clock::duration::zero() ? std::chrono::milliseconds(1) : 2 * backoff_,
                                       kMaxWaitStep);
  return now + backoff_;
}

void EngineThread::loop() {
  uint64_t seen = 0;
  bool sleep_until = false;  // the last step computed nothing: wait for `until` or a kick
  Clock::time_point until{};
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (sleep_until) {
        wake_.wait_until(lock, until, [&] { return stop_ || kicks_ != seen; });
      } else {
        wake_.wait(lock, [&] { return stop_ || kicks_ != seen || !idle_now_; });
      }
      seen = kicks_;
      if (stop_ && !drain_) break;
    }
    int active = 0;
    bool progress = true;
    try {
      const EngineStats before = engine_.stats();
      active = engine_.step();
      const EngineStats after = engine_.stats();
      progress = after.n_steps != before.n_steps || after.n_finished != before.n_finished ||
                 after.n_embed_passes != before.n_embed_passes;
    } catch (const std::exception& e) {
      // step() fails requests, not the engine; anything else is a bug worth a
      // log line. Work may remain: try again (after the idle back-off) rather
      // than go idle with requests unfinished.
      log(LogLevel::Error, "engine thread: %s", e.what());
      active = 1;
    } catch (...) {
      log(LogLevel::Error, "engine thread: unknown exception");
      active = 1;
    }
    // The stepping thread's own view, taken before the lock (step() is ours).
    const Clock::time_point retry = progress ? Clock::time_point{} : next_attempt(Clock::now());
    std::lock_guard<std::mutex> lock(mu_);
    // Draining: submissions are closed (the C API refuses them while
    // infer_engine_stop drains), so no request left means done even if a
    // late kick arrived.
    if (active == 0 && (kicks_ == seen || (stop_ && drain_))) {
      idle_now_ = true;
      idle_.notify_all();
      sleep_until = false;
      if (stop_) break;  // drained
      continue;
    }
    if (progress || kicks_ != seen || active == 0) {
      sleep_until = false;
      backoff_ = Clock::duration::zero();
    } else {
      sleep_until = true;
      until = retry;
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  idle_now_ = true;
  idle_.notify_all();
}

void EngineThread::stop(bool drain) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!thread_.joinable()) return;
    stop_ = true;
    drain_ = drain;
    ++kicks_;
  }
  wake_.notify_one();
  thread_.join();
  if (!drain) engine_.cancel_all();
}

void EngineThread::wait_idle() {
  std::unique_lock<std::mutex> lock(mu_);
  idle_.wait(lock, [&] { return idle_now_; });
}

}  // namespace infer
