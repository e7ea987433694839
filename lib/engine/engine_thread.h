// A background thread that drives an Engine: it steps while there is work
// and sleeps when there is none, so hosts (and FFI languages) can submit from
// any thread and consume results by callback or by polling.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "engine/engine.h"

namespace infer {

class EngineThread {
 public:
  explicit EngineThread(Engine& engine);
  // Stops (cancelling what is still in flight) and joins.
  ~EngineThread();
  EngineThread(const EngineThread&) = delete;
  EngineThread& operator=(const EngineThread&) = delete;

  // Wakes the thread after a submission.
  void notify();
  // drain: wait until every request has finished, then stop. Otherwise
  // cancel everything in flight (each finishes as cancelled) and stop.
  void stop(bool drain);
  // Blocks until no request is left (or the thread stopped).
  void wait_idle();

 private:
  using Clock = std::chrono::steady_clock;
  void loop();
  Clock::time_point next_attempt(Clock::time_point now);  // stepping thread only

  Engine& engine_;
  std::mutex mu_;
  std::condition_variable wake_, idle_;
  bool stop_ = false, drain_ = false, idle_now_ = true;
  uint64_t kicks_ = 0;
  Clock::duration backoff_ = Clock::duration::zero();  // stepping thread only
  std::thread thread_;
};

}  // namespace infer
