// The CPU side of the state-space operations (lib/core/backend.h: ssm_conv,
// ssm_scan, rms_norm_groups): Mamba-1 and Mamba-2 layers whose recurrent
// state lives in the KV pool's blocks (kv/kv_format.h).
#pragma once

#include <cstdint>
#include <limits>

#include "core/backend.h"

namespace infer {
class ThreadPool;
class KvMemory;
}  // namespace infer

namespace infer::cpu {

void ssm_conv(ThreadPool& pool, KvMemory& kv, int ssm_layer, const SsmBatch& b, const float* x, int64_t x_stride,
              int64_t channels, int d_conv, const float* w, const float* bias, float* out);
void ssm_scan(ThreadPool& pool, KvMemory& kv, int ssm_layer, const SsmBatch& b, const SsmScanParams& p);

// The scan of a Mamba-2 layer (scalar A per head) takes the chunked SSD form
// (state-space duality: small matrix products per chunk, cpu/ssm.cpp) for a
// sequence's run of at least this many rows within one block, the
// recurrence otherwise. The SSD form sums in another order: its results
// agree with the recurrence's to rounding, not bitwise. Process-wide; sets
// the threshold (INT64_MAX: never) and returns the previous one (tests and
// benchmarks).
//
// Off by default (never), as measured: on the 2-core AVX-512 machine of
// issue #32, BM_SsmPrefill at the mamba2-130m shape (24 heads of 64,
// d_state 128, 1 group, 512 rows, blocks of 16) takes 12.4 ms (1 thread)
// and 6.9 ms (2 threads) with the recurrence, 24.2 and 13.0 ms with SSD;
// with blocks of 64 or 256 (SSD chunks of 64 rows) 11.4 / 7.3 ms against
// 22.3 / 12.1 ms. SSD does about the recurrence's multiply-adds (2 L N P per
// chunk and head) plus the intra-chunk L^2 P / 2, built here from
// dot_f32/axpy_f32 calls that load and store more than the recurrence's
// fused pass; it can only win with register-blocked GEMM micro-kernels.
constexpr int64_t kSsdDefaultMinRows = INT64_MAX;
int64_t set_ssd_min_rows(int64_t rows);
void rms_norm_groups(ThreadPool& pool, const float* x, int64_t x_stride, const float* weight, int64_t m,
                     int64_t n_group, int64_t gs, float eps, float* y);

}  // namespace infer::cpu
