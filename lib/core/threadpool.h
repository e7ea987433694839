// A small fork-join thread pool: the calling thread plus n-1 workers run one
// function together, each call on its own share of the work, and run()
// returns when all shares are done.
//
// Shares are claimed, not assigned: share i of a job is run by whichever
// thread takes it first, the caller included. On an oversubscribed machine a
// worker that is not scheduled in time simply finds its share already taken,
// so the caller never waits for a thread that has not started (decode issues
// hundreds of short jobs per token; waiting a scheduler time slice for each
// of them made two threads many times slower than one). parallel_for goes
// further and hands out small chunks dynamically.
//
// Idle workers wait in three stages: spin briefly (decode's jobs follow each
// other within microseconds), then yield the core for a while, then sleep
// on a condition variable, so an idle pool costs no CPU.
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
  static constexpr int kMaxThreads = 1024;
  // n_threads <= 0: one per hardware thread. Throws
  // Error(InvalidArgument) above kMaxThreads, and Error(OutOfMemory) when the
  // process cannot start that many threads (nothing is left running).
  explicit ThreadPool(int n_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return n_threads_; }

  // Calls fn(share, n_threads) once for every share in [0, n_threads).
  // Share 0 runs on the calling thread; each other share on whichever thread
  // claims it first (normally worker `share`, the caller when that worker is
  // late). Two shares may run one after the other on the same thread, so fn
  // must not wait for another share (no barriers inside fn). Not reentrant: fn must not call
  // run() on the same pool. An exception thrown by any share is rethrown
  // here after every share has finished.
  void run(const std::function<void(int tid, int nth)>& fn);

  // Splits [0, n) into chunks of at least `grain` items (several per thread,
  // so a slow or descheduled thread's work is picked up by the others) and
  // calls fn(begin, end) once for each chunk, on any thread, in any order.
  void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);

 private:
  void worker();
  // Stops and joins the workers started so far.
  void shutdown() noexcept;
  // Claims and runs shares of job `gen` until none is left.
  void work_on(uint32_t gen);

  int n_threads_;
  std::vector<std::thread> threads_;
  const std::function<void(int, int)>* job_ = nullptr;
  // (generation << 32) | next unclaimed share. Claims compare the
  // generation, so a late worker can never take a share of a newer job it
  // has not seen announced.
  alignas(64) std::atomic<uint64_t> claim_{0};
  alignas(64) std::atomic<int> done_{0};  // shares finished in the current job
  alignas(64) std::atomic<int> sleepers_{0};
  std::atomic<bool> stop_{false};
  std::mutex mutex_;
  std::condition_variable wake_;
  std::exception_ptr error_;  // first exception thrown by a share (guarded by mutex_)
};

}  // namespace infer
