#include "engine/backends.h"

#include <chrono>

#include "core/error.h"
#include "core/log.h"

namespace infer {

const char* backend_kind_name(BackendKind k) {
  switch (k) {
    case BackendKind::Auto: return "auto";
    case BackendKind::Cpu: return "cpu";
    case BackendKind::Cuda: return "cuda";
  }
  return "unknown";
}

BackendKind resolve_backend(BackendKind requested) {
  switch (requested) {
    case BackendKind::Auto:
    case BackendKind::Cpu:
      return BackendKind::Cpu;
    case BackendKind::Cuda:
      raise(Status::Unsupported, "the CUDA backend cannot run models yet in this version (use the CPU backend)");
  }
  raise(Status::InvalidArgument, "unknown backend %d", static_cast<int>(requested));
}

std::unique_ptr<Backend> make_backend(BackendKind kind, ThreadPool& pool) {
  switch (resolve_backend(kind)) {
    case BackendKind::Cpu:
      return make_cpu_backend(pool);
    default:
      break;
  }
  raise(Status::Internal, "no backend for kind %d", static_cast<int>(kind));
}

double prepare_model(Model& model, BackendKind requested, int n_threads) {
  const BackendKind kind = resolve_backend(requested);
  model.set_backend(kind);
  if (model.vocab_only()) return 0;
  const auto t0 = std::chrono::steady_clock::now();
  ThreadPool pool(n_threads);
  std::unique_ptr<Backend> backend = make_backend(kind, pool);
  int n = 0;
  model.for_each_weight([&](const WeightView& w) {
    backend->prepare_weight(w);
    ++n;
  });
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  log(LogLevel::Info, "model: %d weights prepared for the %s backend in %.3f s", n, backend->name(), s);
  return s;
}

}  // namespace infer
