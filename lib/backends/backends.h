// The backends layer: the one place that names the backends (cpu/, cuda/)
// and chooses among them. lib/engine asks it for a backend of a kind; the
// backends' own headers are included here and nowhere else above them.
// The interface every backend implements, and the memory contract between a
// model and its backend, are in core/backend.h.
#pragma once

#include <functional>
#include <memory>

#include "core/backend.h"
#include "core/threadpool.h"

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

// Every weight `for_each_weight` visits, prepared now for a backend of
// `kind` (resolved) on n_threads threads (0: all cores), so that no request
// pays for it later. Returns the seconds it took.
using WeightVisitor = std::function<void(const std::function<void(const WeightView&)>&)>;
double prepare_weights(BackendKind kind, int n_threads, const WeightVisitor& for_each_weight);
// Whether a backend of `kind` computes with its own prepared copy of w
// alone, so that w's bytes may leave memory (Model::release_prepared).
bool backend_holds_copy(BackendKind kind, const WeightView& w);

}  // namespace infer
