#include "engine/backends.h"

namespace infer {

double prepare_model(Model& model, BackendKind requested, int n_threads) {
  const BackendKind kind = resolve_backend(requested);
  model.set_backend(kind);
  if (model.vocab_only()) return 0;
  return prepare_weights(kind, n_threads, [&](const std::function<void(const WeightView&)>& fn) {
    model.for_each_weight(fn);
  });
}

}  // namespace infer
