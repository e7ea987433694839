#include "core/threadpool.h"

#include <algorithm>
#include <chrono>
#include <system_error>

#include "core/error.h"
#include "core/fault.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define INFER_CPU_RELAX() _mm_pause()
#else
#define INFER_CPU_RELAX() ((void)0)
#endif

namespace infer {

namespace {

using Clock = std::chrono::steady_clock;
// Idle workers: pause-spin this long (jobs of one decode step follow each
// other within microseconds), then keep spinning but yield the core every
// few microseconds (on a busy machine another thread, maybe our caller,
// wants it), and after kYieldTime sleep.
constexpr auto kSpinTime = std::chrono::microseconds(20);
constexpr auto kYieldTime = std::chrono::microseconds(2000);
constexpr int kPausesPerYield = 32;
// The caller waiting for shares other threads are running: pause-spin this
// long, then yield (on an oversubscribed machine the thread it waits for may
// need this very core).
constexpr auto kCallerSpinTime = std::chrono::microseconds(50);

uint32_t generation_of(uint64_t claim) { return static_cast<uint32_t>(claim >> 32); }

}  // namespace

ThreadPool::ThreadPool(int n_threads) {
  if (n_threads > kMaxThreads)
    raise(Status::InvalidArgument, "n_threads %d is more than %d", n_threads, kMaxThreads);
  if (n_threads <= 0) n_threads = static_cast<int>(std::clamp<unsigned>(std::thread::hardware_concurrency(), 1u, kMaxThreads));
  n_threads_ = n_threads;
  try {
    threads_.reserve(n_threads - 1);
    for (int t = 1; t < n_threads; ++t) {
      fault::point("threadpool.thread");  // tests: a thread that cannot start
      threads_.emplace_back([this] { worker(); });
    }
  } catch (const std::system_error& e) {
    // The process's thread or memory limits (pids cgroup, RLIMIT_NPROC,
    // address space): stop the workers already started (they wait on our
    // condition variable; leaving them joinable would terminate the process),
    // then report it.
    const int started = static_cast<int>(threads_.size()) + 1;
    shutdown();
    raise(Status::OutOfMemory, "cannot start thread %d of %d (%s): lower n_threads", started + 1, n_threads,
          e.what());
  } catch (const std::bad_alloc&) {
    const int started = static_cast<int>(threads_.size()) + 1;
    shutdown();
    raise(Status::OutOfMemory, "cannot start thread %d of %d (out of memory): lower n_threads", started + 1,
          n_threads);
  } catch (...) {
    shutdown();
    throw;
  }
}

ThreadPool::~ThreadPool() { shutdown(); }

void ThreadPool::shutdown() noexcept {
  stop_.store(true);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    const uint32_t gen = generation_of(claim_.load()) + 1;
    claim_.store(static_cast<uint64_t>(gen) << 32);
  }
  wake_.notify_all();
  for (auto& th : threads_) th.join();
}

void ThreadPool::work_on(uint32_t gen) {
  const uint32_t n = static_cast<uint32_t>(n_threads_);
  for (;;) {
    uint64_t c = claim_.load(std::memory_order_acquire);
    for (;;) {
      if (generation_of(c) != gen || static_cast<uint32_t>(c) >= n) return;
      if (claim_.compare_exchange_weak(c, c + 1, std::memory_order_acq_rel, std::memory_order_acquire)) break;
    }
    // Share c is ours: the job cannot finish (nor job_ change) before we
    // count it done.
    try {
      (*job_)(static_cast<int>(static_cast<uint32_t>(c)), n_threads_);
    } catch (...) {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!error_) error_ = std::current_exception();
    }
    done_.fetch_add(1, std::memory_order_acq_rel);
  }
}

void ThreadPool::worker() {
  uint32_t seen = 0;  // the last generation this thread has looked at
  for (;;) {
    uint32_t gen = generation_of(claim_.load(std::memory_order_acquire));
    if (gen == seen) {
      // Spin, then yield, then sleep until a new job is announced.
      const auto t0 = Clock::now();
      bool yielding = false;
      for (int i = 1; gen == seen; ++i) {
        INFER_CPU_RELAX();
        gen = generation_of(claim_.load(std::memory_order_acquire));
        if (gen != seen || i % kPausesPerYield != 0) continue;
        if (yielding) std::this_thread::yield();
        const auto waited = Clock::now() - t0;
        if (waited > kYieldTime) break;
        yielding = waited > kSpinTime;
      }
      if (gen == seen) {
        // Announcing a sleeper before re-checking the generation (both
        // sequentially consistent) pairs with run(): it either sees this
        // sleeper and notifies under the mutex, or we see its generation.
        sleepers_.fetch_add(1);
        {
          std::unique_lock<std::mutex> lock(mutex_);
          wake_.wait(lock, [&] { return generation_of(claim_.load()) != seen; });
        }
        sleepers_.fetch_sub(1);
        gen = generation_of(claim_.load(std::memory_order_acquire));
      }
    }
    seen = gen;
    if (stop_.load()) return;
    work_on(gen);
  }
}

void ThreadPool::run(const std::function<void(int, int)>& fn) {
  if (n_threads_ == 1) {
    fn(0, 1);
    return;
  }
  job_ = &fn;
  done_.store(0, std::memory_order_relaxed);
  const uint32_t gen = generation_of(claim_.load(std::memory_order_relaxed)) + 1;
  // Share 0 is the caller's; workers claim from 1. Publishing the new
  // generation also publishes job_ and done_ (seq_cst store).
  claim_.store((static_cast<uint64_t>(gen) << 32) | 1u);
  if (sleepers_.load() > 0) {
    { std::lock_guard<std::mutex> lock(mutex_); }
    wake_.notify_all();
  }
  try {
    fn(0, n_threads_);
  } catch (...) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!error_) error_ = std::current_exception();
  }
  done_.fetch_add(1, std::memory_order_acq_rel);
  work_on(gen);  // then whatever shares no worker has taken yet
  // Wait for shares that other threads are still running.
  if (done_.load(std::memory_order_acquire) != n_threads_) {
    const auto t0 = Clock::now();
    bool yielding = false;
    for (int i = 1; done_.load(std::memory_order_acquire) != n_threads_; ++i) {
      if (yielding) {
        std::this_thread::yield();
      } else {
        INFER_CPU_RELAX();
        if ((i & 63) == 0) yielding = Clock::now() - t0 > kCallerSpinTime;
      }
    }
  }
  job_ = nullptr;
  std::exception_ptr error;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    std::swap(error, error_);
  }
  // Every share has finished before an exception leaves run().
  if (error) std::rethrow_exception(error);
}

void ThreadPool::parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  grain = std::max<int64_t>(1, grain);
  const int64_t max_chunks = n / grain;  // every chunk gets at least `grain` items
  if (n_threads_ == 1 || max_chunks <= 1) {
    fn(0, n);
    return;
  }
  // Up to four chunks per thread, handed out first come, first served.
  const int64_t n_chunks = std::min<int64_t>(max_chunks, 4 * static_cast<int64_t>(n_threads_));
  std::atomic<int64_t> next{0};
  run([&](int, int) {
    for (int64_t c; (c = next.fetch_add(1, std::memory_order_relaxed)) < n_chunks;) {
      const int64_t begin = n * c / n_chunks, end = n * (c + 1) / n_chunks;
      if (begin < end) fn(begin, end);
    }
  });
}

}  // namespace infer
