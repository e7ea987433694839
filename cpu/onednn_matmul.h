// oneDNN paths of the CPU matmul (oneDNN 2.6, OpenMP runtime):
//  - W8A8: u8 activations (per-token int8 + 128, zero point 128) x s8
//    weights -> s32 through oneDNN's int8 matmul, scaled by us per token and
//    per output channel. On CPUs without VNNI oneDNN's int8 kernels multiply
//    with vpmaddubsw, whose 16-bit pair sums saturate for u8 x s8; there the
//    activations are quantized to 7 bits (u7: [-63, 63] + 64) instead.
//  - F32 weights: sgemm.
// The weights are reordered once, in column blocks, into oneDNN's preferred
// layout and kept in the weight's WeightCache. Calls run single-threaded
// oneDNN matmuls on the pool's threads, one column block at a time (oneDNN's
// own OpenMP threads are never started: no oversubscription).
#pragma once

#include <cstdint>

#include "core/backend.h"

namespace infer {
class ThreadPool;
}

namespace infer::cpu {

// y[m][n_out] = x[m][n_in] · Wᵀ for W8A8 or F32 weights. False when oneDNN
// cannot run it (the caller then uses its own kernels).
bool onednn_matmul(ThreadPool& pool, const WeightView& w, const float* x, int64_t m, float* y);

// Whether the oneDNN path should be used for this shape (decided by
// measurement, bench/RESULTS.md); INFER_ONEDNN=0 / 1 forces it off / on.
// Never below Isa::Avx2 (INFER_CPU_ISA=scalar: no SIMD code at all), and
// oneDNN's AMX kernels only when the cap allows AMX.
bool onednn_preferred(DType t, int64_t m, int64_t n_in, int64_t n_out);
// Reorders w for oneDNN into w.cache now (the first onednn_matmul would).
void onednn_prepare(const WeightView& w);
// Whether oneDNN's int8 matmul uses VNNI: the CPU has it and INFER_CPU_ISA
// does not cap oneDNN below it. Without, the activations are 7-bit (u7).
bool onednn_int8_vnni();
// -1: by shape (the default, or INFER_ONEDNN from the environment); 0: never; 1: always.
void set_onednn_policy(int policy);

}  // namespace infer::cpu
