// Helpers shared by the C API's translation units (c_api.cpp, c_api_chat.cpp,
// c_api_quant.cpp): error translation, versioned parameter structs and
// caller-buffer output. Internal: never installed.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <new>
#include <string>

#include "core/error.h"
#include "infer/infer.h"

namespace infer {
class Model;
}

namespace infer::api {

// Records msg as this thread's last error (infer_last_error) and returns s.
infer_status fail(infer_status s, const std::string& msg);
// Forgets this thread's last error (at the start of every guarded call).
void clear_error();
// The C++ model behind a handle (defined in c_api.cpp, which owns the struct).
const infer::Model& model_of(const infer_model* m);

// Runs fn, translating every exception into a status: no exception ever
// crosses the C boundary.
template <typename F>
infer_status guarded(F&& fn) {
  try {
    clear_error();
    return fn();
  } catch (const infer::Error& e) {
    return fail(static_cast<infer_status>(e.status()), e.what());
  } catch (const std::bad_alloc&) {
    return fail(INFER_ERR_OUT_OF_MEMORY, "out of memory");
  } catch (const std::exception& e) {
    return fail(INFER_ERR_INTERNAL, std::string("internal error: ") + e.what());
  } catch (...) {
    return fail(INFER_ERR_INTERNAL, "internal error: unknown exception");
  }
}

// Copies a string into a caller buffer (NUL-terminated), reporting the size
// needed; BUFFER_TOO_SMALL (and an empty string, when there is room for one)
// when it does not fit.
inline infer_status copy_out(const std::string& s, char* buf, size_t buf_size, size_t* needed) {
  if (needed) *needed = s.size() + 1;
  if (!buf || buf_size < s.size() + 1) {
    if (buf && buf_size > 0) buf[0] = '\0';
    return fail(INFER_ERR_BUFFER_TOO_SMALL,
                infer::strformat("buffer of %zu bytes is too small: %zu needed", buf_size, s.size() + 1));
  }
  std::memcpy(buf, s.data(), s.size());
  buf[s.size()] = '\0';
  return INFER_OK;
}

// struct_size must cover at least the first field after it (the oldest
// layout) and at most twice what this library knows.
template <typename T>
bool size_ok(const T* p) {
  return p && p->struct_size >= sizeof(uint32_t) + 4 && p->struct_size <= sizeof(T) * 2;
}

// Reads a parameter struct written by a caller built against an older or
// newer header: known fields present in the caller's struct are used, the
// rest keep their defaults.
template <typename T>
T read_params(const T* p, void (*init)(T*)) {
  T out;
  init(&out);
  if (p) std::memcpy(&out, p, std::min<size_t>(p->struct_size, sizeof(T)));
  out.struct_size = sizeof(T);
  return out;
}

// Copies a result struct into the caller's, which may be an older (shorter)
// layout: only the fields the caller knows are written.
template <typename T>
infer_status write_out(T* dst, const T& src) {
  const uint32_t n = std::min<uint32_t>(dst->struct_size, sizeof(T));
  std::memcpy(dst, &src, n);
  dst->struct_size = n;
  return INFER_OK;
}

}  // namespace infer::api

#define INFER_CHECK_ARG(cond, msg)                                         \
  do {                                                                     \
    if (!(cond)) return ::infer::api::fail(INFER_ERR_INVALID_ARGUMENT, msg); \
  } while (0)
