// The backend factory: the one place that names the backends. A model is
// prepared for its backend when it is loaded (weights repacked into the
// layouts the backend's kernels want, so no request pays for it later), and
// every engine on that model creates the same kind of backend.
#pragma once

#include <memory>

#include "core/backend.h"
#include "core/threadpool.h"
#include "model/model.h"

namespace infer {

// AUTO: the CPU, saying why in one Info log line ("no CUDA device: using the
// CPU backend (reason)"; with a usable GPU, that the CUDA backend is not yet
// validated on one: issue #16).
// CUDA: the CUDA backend when a usable device is there; Error(Backend) when
// the machine has no usable driver or device, Error(Unsupported) when this
// build has no CUDA backend; the message names the reason.
BackendKind resolve_backend(BackendKind requested);

// A backend of `kind` (resolved) running on `pool`.
std::unique_ptr<Backend> make_backend(BackendKind kind, ThreadPool& pool);

// Resolves `requested`, records it in the model and prepares every weight for
// that backend now, on n_threads threads (0: all cores). Returns the seconds
// the preparation took.
double prepare_model(Model& model, BackendKind requested, int n_threads);

}  // namespace infer
