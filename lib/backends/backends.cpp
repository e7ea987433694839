#include "backends/backends.h"

#include <chrono>
#include <string>

#include "core/error.h"
#include "core/log.h"
#include "cpu/cpu_backend.h"
#include "cpu/matmul.h"
#ifdef INFER_HAVE_CUDA
#include "cuda/cuda_backend.h"
#endif

namespace infer {

// Whether the CUDA backend can run here: "" when it can, else why not.
// *status is the status INFER_BACKEND_CUDA fails with: UNSUPPORTED when this
// build has no CUDA backend, BACKEND when the machine cannot run it (no
// driver, no device, too old a device). *device names a usable device.
static std::string cuda_unavailable(Status* status, std::string* device) {
#ifdef INFER_HAVE_CUDA
  const cuda::DeviceProbe p = cuda::probe_devices();
  if (p.state != cuda::DeviceState::Usable) {
    *status = Status::Backend;
    return p.reason;
  }
  *device = p.name;
  return std::string();
#else
  *status = Status::Unsupported;
  return "this libinfer was built without the CUDA backend";
#endif
}

BackendKind resolve_backend(BackendKind requested) {
  switch (requested) {
    case BackendKind::Cpu:
      return BackendKind::Cpu;
    case BackendKind::Auto: {
      Status st = Status::Ok;
      std::string device;
      const std::string why = cuda_unavailable(&st, &device);
      if (why.empty())
        // The CUDA backend has not yet been run on a GPU (issue #16): AUTO
        // keeps to the CPU until its GPU tests have been seen passing.
        log(LogLevel::Info, "CUDA device %s found, but the CUDA backend is not yet validated on a GPU: using the CPU "
                            "backend (INFER_BACKEND_CUDA selects it)", device.c_str());
      else
        log(LogLevel::Info, "no CUDA device: using the CPU backend (%s)", why.c_str());
      return BackendKind::Cpu;
    }
    case BackendKind::Cuda: {
      Status st = Status::Ok;
      std::string device;
      const std::string why = cuda_unavailable(&st, &device);
      if (why.empty()) return BackendKind::Cuda;
      raise(st, "INFER_BACKEND_CUDA: %s", why.c_str());
    }
  }
  raise(Status::InvalidArgument, "unknown backend %d", static_cast<int>(requested));
}

std::unique_ptr<Backend> make_backend(BackendKind kind, ThreadPool& pool) {
  switch (resolve_backend(kind)) {
    case BackendKind::Cpu:
      return make_cpu_backend(pool);
#ifdef INFER_HAVE_CUDA
    case BackendKind::Cuda:
      return cuda::make_cuda_backend();
#endif
    default:
      break;
  }
  raise(Status::Internal, "no backend for kind %d", static_cast<int>(kind));
}

double prepare_weights(BackendKind kind, int n_threads, const WeightVisitor& for_each_weight) {
  const auto t0 = std::chrono::steady_clock::now();
  ThreadPool pool(n_threads);
  std::unique_ptr<Backend> backend = make_backend(kind, pool);
  int n = 0;
  for_each_weight([&](const WeightView& w) {
    backend->prepare_weight(w);
    ++n;
  });
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  log(LogLevel::Info, "model: %d weights prepared for the %s backend in %.3f s", n, backend->name(), s);
  return s;
}

bool backend_holds_copy(BackendKind kind, const WeightView& w) {
  return kind == BackendKind::Cpu && cpu::holds_full_copy(w);
}

}  // namespace infer
