#include "core/fault.h"

#include <cstring>
#include <mutex>
#include <new>
#include <string>

namespace infer::fault {

namespace detail {
std::atomic<bool> g_armed{false};
}

namespace {
std::mutex g_mu;
std::string g_site;
int64_t g_nth = 0, g_count = 0, g_hits = 0, g_failures = 0;
}  // namespace

void detail::hit(const char* site) {
  bool fail = false;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    if (!g_armed.load(std::memory_order_relaxed)) return;
    if (g_site != "*" && g_site != site) return;
    ++g_hits;
    if (g_hits >= g_nth && g_hits < g_nth + g_count) {
      ++g_failures;
      fail = true;
    }
  }
  if (fail) throw std::bad_alloc();
}

void arm(const char* site, int64_t nth, int64_t count) {
  std::lock_guard<std::mutex> lock(g_mu);
  g_site = site ? site : "*";
  g_nth = nth;
  g_count = count;
  g_hits = 0;
  g_failures = 0;
  detail::g_armed.store(true, std::memory_order_relaxed);
}

void disarm() {
  std::lock_guard<std::mutex> lock(g_mu);
  detail::g_armed.store(false, std::memory_order_relaxed);
}

int64_t hits() {
  std::lock_guard<std::mutex> lock(g_mu);
  return g_hits;
}

int64_t failures() {
  std::lock_guard<std::mutex> lock(g_mu);
  return g_failures;
}

}  // namespace infer::fault
