// The CPU backend's entry point. Only the backend factory (lib/backends/)
// and the tests and benchmarks that compare against the reference call it.
#pragma once

#include <memory>

#include "core/backend.h"

namespace infer {

class ThreadPool;

// The CPU backend, running its kernels on `pool` (cpu/cpu_backend.cpp).
std::unique_ptr<Backend> make_cpu_backend(ThreadPool& pool);

}  // namespace infer
