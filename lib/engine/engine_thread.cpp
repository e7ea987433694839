#include "engine/engine_thread.h"

#include "core/log.h"

namespace infer {

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

void EngineThread::loop() {
  uint64_t seen = 0;
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      wake_.wait(lock, [&] { return stop_ || kicks_ != seen || !idle_now_; });
      seen = kicks_;
      if (stop_ && !drain_) break;
    }
    int active = 0;
    try {
      active = engine_.step();
    } catch (const std::exception& e) {
      // step() fails requests, not the engine; anything else is a bug worth a log line.
      log(LogLevel::Error, "engine thread: %s", e.what());
    }
    std::lock_guard<std::mutex> lock(mu_);
    if (active == 0 && kicks_ == seen) {
      idle_now_ = true;
      idle_.notify_all();
      if (stop_) break;  // drained
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
