#include "core/log.h"

#include <atomic>
#include <cstdarg>
#include <cstdio>
#include <mutex>
#include <string>

namespace infer {

namespace {
std::mutex g_mutex;
LogFn g_fn = nullptr;
void* g_user = nullptr;
std::atomic<int> g_min_level{100};  // nothing passes until a callback is set
}  // namespace

void set_log_callback(LogFn fn, void* user_data, LogLevel min_level) {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_fn = fn;
  g_user = user_data;
  g_min_level.store(fn ? static_cast<int>(min_level) : 100);
}

bool log_enabled(LogLevel level) { return static_cast<int>(level) >= g_min_level.load(std::memory_order_relaxed); }

void log(LogLevel level, const char* fmt, ...) {
  if (!log_enabled(level)) return;
  char buf[1024];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  // The callback runs without the lock: it may call back into the library
  // (which may log, or set another callback) without deadlocking. A callback
  // replaced concurrently may still receive this one message.
  LogFn fn;
  void* user;
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    fn = g_fn;
    user = g_user;
  }
  if (fn) fn(level, buf, user);
}

}  // namespace infer
