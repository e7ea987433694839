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
void Backend::ssm_conv(KvMemory&, int, const SsmBatch&, const float*, int64_t, int64_t, int, const float*,
                       const float*, float*) {
  raise(Status::Unsupported, "the %s backend does not run state-space (Mamba) models: ssm_conv", name());
}
void Backend::ssm_scan(KvMemory&, int, const SsmBatch&, const SsmScanParams&) {
  raise(Status::Unsupported, "the %s backend does not run state-space (Mamba) models: ssm_scan", name());
}
void Backend::rms_norm_groups(const float*, int64_t, const float*, int64_t, int64_t, int64_t, float, float*) {
  raise(Status::Unsupported, "the %s backend does not run state-space (Mamba) models: rms_norm_groups", name());
}

}  // namespace infer
