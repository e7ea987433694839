#include "engine/backends.h"

namespace infer {

double prepare_model(Model& model, BackendKind requested, int n_threads) {
  const BackendKind kind = resolve_backend(requested);
  model.set_backend(kind);
  if (model.vocab_only()) return 0;
  const double s = prepare_weights(kind, n_threads, [&](const std::function<void(const WeightView&)>& fn) {
    model.for_each_weight(fn);
  });
  // What the backend now holds in its own layout need not stay in memory
  // twice: the file's pages go back (they are read again on demand) and a
  // tensor-parallel rank's copied input-column shares are freed.
  model.release_prepared([kind](const WeightView& w) { return backend_holds_copy(kind, w); });
  return s;
}

}  // namespace infer
