// A model prepared for the backend its engines will run on. The factory
// itself, the one place that names the backends, is lib/backends/.
#pragma once

#include "backends/backends.h"
#include "model/model.h"

namespace infer {

// Resolves `requested`, records it in the model and prepares every weight for
// that backend now, on n_threads threads (0: all cores). Returns the seconds
// the preparation took.
double prepare_model(Model& model, BackendKind requested, int n_threads);

}  // namespace infer
