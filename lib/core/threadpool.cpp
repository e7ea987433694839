#include "core/threadpool.h"

#include <algorithm>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define INFER_CPU_RELAX() _mm_pause()
#else
#define INFER_CPU_RELAX() ((void)0)
#endif

namespace infer {

namespace {
constexpr int kSpinIterations = 1 << 12;  // pauses (then yields) before sleeping / yielding
}

ThreadPool::ThreadPool(int n_threads) {
  if (n_threads <= 0) n_threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  n_threads_ = n_threads;
  threads_.reserve(n_threads - 1);
  for (int t = 1; t < n_threads; ++t) threads_.emplace_back([this, t] { worker(t); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_.store(true);
    generation_.fetch_add(1);
  }
  wake_.notify_all();
  for (auto& th : threads_) th.join();
}

void ThreadPool::worker(int tid) {
  uint64_t seen = 0;
  for (;;) {
    // Wait for a new generation: spin first, then sleep.
    uint64_t gen = generation_.load(std::memory_order_acquire);
    for (int i = 0; gen == seen && i < kSpinIterations; ++i) {
      if (i < kSpinIterations / 4) {
        INFER_CPU_RELAX();
      } else {
        std::this_thread::yield();
      }
      gen = generation_.load(std::memory_order_acquire);
    }
    if (gen == seen) {
      std::unique_lock<std::mutex> lock(mutex_);
      sleepers_.fetch_add(1);
      wake_.wait(lock, [&] { return generation_.load(std::memory_order_acquire) != seen; });
      sleepers_.fetch_sub(1);
      gen = generation_.load(std::memory_order_acquire);
    }
    seen = gen;
    if (stop_.load()) return;
    try {
      (*job_)(tid, n_threads_);
    } catch (...) {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!error_) error_ = std::current_exception();
    }
    pending_.fetch_sub(1, std::memory_order_acq_rel);
  }
}

void ThreadPool::run(const std::function<void(int, int)>& fn) {
  if (n_threads_ == 1) {
    fn(0, 1);
    return;
  }
  job_ = &fn;
  pending_.store(n_threads_ - 1, std::memory_order_release);
  {
    // The lock orders the generation bump with sleepers' predicate checks.
    std::lock_guard<std::mutex> lock(mutex_);
    generation_.fetch_add(1, std::memory_order_acq_rel);
  }
  if (sleepers_.load() > 0) wake_.notify_all();
  std::exception_ptr caller_error;
  try {
    fn(0, n_threads_);
  } catch (...) {
    caller_error = std::current_exception();
  }
  // Spin briefly, then yield: on an oversubscribed machine a worker may be
  // waiting for this very core.
  for (int i = 0; pending_.load(std::memory_order_acquire) != 0; ++i) {
    if (i < kSpinIterations) {
      INFER_CPU_RELAX();
    } else {
      std::this_thread::yield();
    }
  }
  job_ = nullptr;
  std::exception_ptr worker_error;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    std::swap(worker_error, error_);
  }
  // Every thread has finished before an exception leaves run().
  if (caller_error) std::rethrow_exception(caller_error);
  if (worker_error) std::rethrow_exception(worker_error);
}

void ThreadPool::parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  grain = std::max<int64_t>(1, grain);
  const int64_t max_chunks = (n + grain - 1) / grain;
  const int nth = static_cast<int>(std::min<int64_t>(n_threads_, max_chunks));
  if (nth <= 1) {
    fn(0, n);
    return;
  }
  run([&](int tid, int) {
    if (tid >= nth) return;
    const int64_t begin = n * tid / nth;
    const int64_t end = n * (tid + 1) / nth;
    if (begin < end) fn(begin, end);
  });
}

}  // namespace infer
