// The CPU side of the state-space operations (lib/core/backend.h: ssm_conv,
// ssm_scan, rms_norm_groups): Mamba-1 and Mamba-2 layers whose recurrent
// state lives in the KV pool's blocks (kv/kv_format.h).
#pragma once

#include <cstdint>

#include "core/backend.h"

namespace infer {
class ThreadPool;
class KvMemory;
}  // namespace infer

namespace infer::cpu {

void ssm_conv(ThreadPool& pool, KvMemory& kv, int ssm_layer, const SsmBatch& b, const float* x, int64_t x_stride,
              int64_t channels, int d_conv, const float* w, const float* bias, float* out);
void ssm_scan(ThreadPool& pool, KvMemory& kv, int ssm_layer, const SsmBatch& b, const SsmScanParams& p);
void rms_norm_groups(ThreadPool& pool, const float* x, int64_t x_stride, const float* weight, int64_t m,
                     int64_t n_group, int64_t gs, float eps, float* y);

}  // namespace infer::cpu
