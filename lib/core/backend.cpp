#include "core/backend.h"

#include "core/error.h"

namespace infer {

// The encoder operations are optional: a backend that lacks them refuses
// encoder models clearly instead of computing something else.
void Backend::layer_norm(const float*, const float*, const float*, int64_t, int64_t, float, float*) {
  raise(Status::Unsupported, "the %s backend does not run encoder (embedding) models: layer_norm", name());
}
void Backend::gelu(float*, int64_t) {
  raise(Status::Unsupported, "the %s backend does not run encoder (embedding) models: gelu", name());
}
void Backend::tanh(float*, int64_t) {
  raise(Status::Unsupported, "the %s backend does not run encoder (embedding) models: tanh", name());
}
void Backend::attention_dense(const float*, const float*, const float*, const AttnBatch&, int, int, int, float, bool,
                              float*) {
  raise(Status::Unsupported, "the %s backend does not run embedding models: attention without a KV cache", name());
}

}  // namespace infer
