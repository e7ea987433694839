// Helpers shared by the C API's translation units (c_api.cpp, c_api_chat.cpp,
// c_api_tools.cpp): error translation, versioned parameter structs and
// caller-buffer output. Internal: never installed.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <new>
#include <memory>
#include <string>
#include <vector>

#include "core/error.h"
#include "infer/infer.h"

namespace infer {
class Model;
struct EngineParams;
class EmbedJob;
struct EmbedInput;
struct EmbedOptions;
}

namespace infer::api {

// Records msg as this thread's last error (infer_last_error) and returns s.
// Allocates nothing (the message is truncated at 4 KiB).
infer_status fail(infer_status s, const char* msg) noexcept;
infer_status fail(infer_status s, const std::string& msg) noexcept;
// Forgets this thread's last error (at the start of every guarded call).
void clear_error() noexcept;
// The C++ model behind a handle (defined in c_api.cpp, which owns the struct).
const infer::Model& model_of(const infer_model* m);
// The engine parameters of a caller's struct (NULL: defaults), checked for
// struct_size by the caller (defined in c_api.cpp).
infer::EngineParams to_engine_params(const infer_engine_params* params);
// The model an engine runs (defined in c_api.cpp, which owns infer_engine).
const infer::Model& engine_model(const infer_engine* e);
// Queues an embedding job on the engine the way infer_submit queues a request
// (refused while infer_engine_stop drains; the background thread, if any, is
// woken). Throws infer::Error for bad inputs (nothing is queued then).
std::shared_ptr<infer::EmbedJob> submit_embed(infer_engine* e, std::vector<infer::EmbedInput> inputs,
                                              const infer::EmbedOptions& o);

// Runs fn, translating every exception into a status: no exception ever
// crosses the C boundary. The handlers allocate nothing (they run when memory
// is exhausted). Every extern "C" function that can throw (anything that
// allocates, locks or calls into the core) runs its body through this.
template <typename F>
infer_status guarded(F&& fn) noexcept {
  try {
    clear_error();
    return fn();
  } catch (const infer::Error& e) {
    return fail(static_cast<infer_status>(e.status()), e.what());
  } catch (const std::bad_alloc&) {
    return fail(INFER_ERR_OUT_OF_MEMORY, "out of memory");
  } catch (const std::exception& e) {
    char msg[512];
    std::snprintf(msg, sizeof msg, "internal error: %s", e.what());
    return fail(INFER_ERR_INTERNAL, msg);
  } catch (...) {
    return fail(INFER_ERR_INTERNAL, "internal error: unknown exception");
  }
}

// For functions that return a value, not a status: `fallback` when fn throws.
template <typename T, typename F>
T guarded_value(T fallback, F&& fn) noexcept {
  try {
    return fn();
  } catch (...) {
    return fallback;
  }
}

// The same for functions that return no status (frees, callbacks into
// void functions): an exception is swallowed, never propagated to C.
template <typename F>
void guarded_void(F&& fn) noexcept {
  try {
    fn();
  } catch (...) {
  }
}

// The integer a C caller stored in an enum-typed field or argument, read
// without loading it as the C++ enum type: a value outside the enumerators'
// range is undefined behavior to load as the enum (UBSan: -fsanitize=enum),
// and C callers may pass any int.
template <typename E>
int64_t enum_value(const E& e) {
  static_assert(sizeof(E) == sizeof(int32_t), "C enums are int-sized here");
  int32_t v;
  std::memcpy(&v, &e, sizeof v);
  return v;
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
