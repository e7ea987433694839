// A small fork-join thread pool: the calling thread plus n-1 workers run one
// function together, each on its own share of the work, and the call returns
// when all are done. Workers spin briefly between jobs (decode issues many
// short jobs per token) and then sleep, so an idle pool costs no CPU.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace infer {

class ThreadPool {
 public:
  // n_threads <= 0: one per hardware thread.
  explicit ThreadPool(int n_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return n_threads_; }

  // Calls fn(tid, n_threads) once on every thread (tid 0 is the caller).
  // Not reentrant: fn must not call run() on the same pool. An exception
  // thrown by fn on any thread is rethrown here after all threads finish.
  void run(const std::function<void(int tid, int nth)>& fn);

  // Splits [0, n) into contiguous chunks of at least `grain` items, one
  // chunk per thread, and calls fn(begin, end) for each non-empty chunk.
  void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);

 private:
  void worker(int tid);

  int n_threads_;
  std::vector<std::thread> threads_;
  const std::function<void(int, int)>* job_ = nullptr;
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> pending_{0};
  std::atomic<bool> stop_{false};
  std::mutex mutex_;
  std::condition_variable wake_;
  std::atomic<int> sleepers_{0};
  std::exception_ptr error_;  // first exception thrown by a worker
};

}  // namespace infer
