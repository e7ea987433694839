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
// sequence's run of at least IsaKernels::ssd_min_rows rows within one block,
// the recurrence otherwise. The SSD form sums in another order: its results
// agree with the recurrence's to rounding, not bitwise. set_ssd_min_rows
// overrides the ISA's threshold process-wide (rows > 0; INT64_MAX: never;
// 0: the ISA's own again) and returns the previous override (tests and
// benchmarks).
//
// The ISA thresholds, as measured (BM_SsmPrefill, mamba2-130m shape: 24
// heads of 64, d_state 128, 1 group, 512 rows, blocks of 16, 1 thread,
// medians of 3, on the 2-core AVX-512 machine of issue #32 while other
// builds ran, load 3-5): with AVX-512 the recurrence (a row of h in
// registers) takes 8.4-12 ms, SSD 16-18 ms: never. With AVX2
// (INFER_CPU_ISA=avx2) the recurrence takes 16.6-19.6 ms, SSD 14.6-18.1 ms,
// ahead in 7 of 8 paired runs by 0-15% (blocks of 64: 19.0 against 16.6),
// but it is off there too: a prefill's output would then depend on how the
// scheduler cut it into chunks (see below), and the engine promises the same
// greedy text alone and batched. Scalar: never (the reference). SSD's
// multiply-adds are the recurrence's 2 L N P per chunk and head plus
// L^2 P / 2 and L^2 N / 2 (C B^T, once per chunk for the call's heads).
// With SSD on, a block's results depend on whether its rows came in one run
// (rounding only): outputs are not bitwise independent of how prefill was
// chunked.
int64_t set_ssd_min_rows(int64_t rows);
void rms_norm_groups(ThreadPool& pool, const float* x, int64_t x_stride, const float* weight, int64_t m,
                     int64_t n_group, int64_t gs, float eps, float* y);

}  // namespace infer::cpu
