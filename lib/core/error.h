// Status codes and the exception type used inside the core.
//
// Internal code throws infer::Error{status, message}; the C API layer (lib/api)
// catches everything and turns it into an infer_status plus a thread-local
// message. Nothing in the library aborts or prints.
#pragma once

#include <stdexcept>
#include <string>

namespace infer {

// Values mirror infer_status in include/infer/infer.h (checked by a static_assert there).
enum class Status : int {
  Ok = 0,
  Io = 1,
  Format = 2,
  Unsupported = 3,
  OutOfMemory = 4,
  InvalidArgument = 5,
  Cancelled = 6,
  Backend = 7,
  Internal = 8,
  BufferTooSmall = 9,
  NotFound = 10,
  Busy = 11,
};

class Error : public std::runtime_error {
 public:
  Error(Status status, const std::string& message)
      : std::runtime_error(message), status_(status) {}
  Status status() const { return status_; }

 private:
  Status status_;
};

// printf-style formatting into a std::string.
std::string strformat(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

// Throws Error(status, formatted message).
[[noreturn]] void raise(Status status, const char* fmt, ...) __attribute__((format(printf, 2, 3)));

}  // namespace infer
