// Per-thread scratch objects that never abort the process.
//
// A `thread_local` object with a destructor makes the C++ runtime register
// that destructor the first time a thread touches it, and the registration
// allocates: when it fails, the runtime calls std::terminate ("failed to
// register TLS destructor"), killing the host. Kernels therefore keep a
// trivially destructible thread_local pointer and get their object through
// tls_object(), which creates it on first use and registers its deletion at
// thread exit through a pthread key, throwing std::bad_alloc (which the C API
// reports as OUT_OF_MEMORY) when either step cannot allocate.
//
//   static thread_local std::vector<float>* buf_slot = nullptr;
//   std::vector<float>& buf = tls_object(buf_slot);
#pragma once

#include <memory>

namespace infer {

namespace detail {
// Runs fn(obj) when the calling thread exits. Throws std::bad_alloc.
void tls_at_exit(void (*fn)(void*), void* obj);
}  // namespace detail

template <typename T, typename Make>
T& tls_object(T*& slot, Make&& make) {
  if (slot) return *slot;
  std::unique_ptr<T> p(make());
  detail::tls_at_exit([](void* o) { delete static_cast<T*>(o); }, p.get());
  slot = p.release();
  return *slot;
}

template <typename T>
T& tls_object(T*& slot) {
  return tls_object(slot, [] { return new T(); });
}

}  // namespace infer
