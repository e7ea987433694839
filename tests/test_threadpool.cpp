#include <atomic>
#include <stdexcept>

#include "core/threadpool.h"
#include "test_util.h"

using infer::ThreadPool;

TEST_CASE("thread pool runs every thread once per job and covers ranges exactly", "[threadpool]") {
  for (int n : {1, 2, 3, 8}) {
    ThreadPool pool(n);
    REQUIRE(pool.size() == n);
    for (int job = 0; job < 200; ++job) {
      std::atomic<int> calls{0}, bad{0};
      pool.run([&](int tid, int nth) {
        // No Catch2 assertion on pool threads: it is not thread-safe (TSan).
        if (nth != n || tid < 0 || tid >= n) bad++;
        calls++;
      });
      REQUIRE(bad == 0);
      REQUIRE(calls == n);
    }
    std::vector<std::atomic<int>> hits(1000);
    pool.parallel_for(1000, 7, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) hits[i]++;
    });
    for (auto& h : hits) REQUIRE(h == 1);
    int small_calls = 0;
    pool.parallel_for(3, 100, [&](int64_t b, int64_t e) { small_calls += static_cast<int>(e - b); });
    REQUIRE(small_calls == 3);
  }
}

TEST_CASE("an exception in a pool job reaches the caller after all threads finish", "[threadpool]") {
  ThreadPool pool(4);
  REQUIRE_THROWS_AS(pool.run([](int tid, int) {
    if (tid == 2) throw std::runtime_error("boom");
  }),
                    std::runtime_error);
  std::atomic<int> calls{0};
  pool.run([&](int, int) { calls++; });  // still usable
  REQUIRE(calls == 4);
}
