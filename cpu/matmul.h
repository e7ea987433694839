// Matrix multiplication against weights in their file format: y = x · Wᵀ.
// Micro-kernels per ISA (cpu/scalar/, cpu/avx2/, cpu/avx512/, cpu/amx/),
// chosen at run time from the active ISA's table (cpu/kernels.h); the
// internals are in cpu/qmatmul.h.
#pragma once

#include <cstdint>

#include "core/backend.h"

namespace infer {
class ThreadPool;
}

namespace infer::cpu {

// y[m][w.n_out] = x[m][w.n_in] · Wᵀ, split over the pool's threads by
// output columns. Every weight row is read once per call whatever m is.
// Quantized formats use int8 activations quantized per 32-value block (per
// row for W8A8) and integer dot products; some formats are repacked into
// interleaved panels on first use and kept in w.cache (made per call when
// w.cache is null).
void matmul(ThreadPool& pool, const WeightView& w, const float* x, int64_t m, float* y);
// Builds every repacked copy of w that matmul would build on first use, for
// any row count, into w.cache (a no-op without a cache).
void prepare_weight(ThreadPool& pool, const WeightView& w);
// Whether every row count multiplies w from the repacked copy prepare_weight
// made (w's own bytes are never read again by matmul).
bool holds_full_copy(const WeightView& w);

// Which kernels matmul runs now for weights of type t and shape n_out x n_in
// against m rows of x: the name of the ISA whose micro-kernel it is
// ("scalar", "avx2", "avx512", "amx"), or "onednn". For tests and tools.
const char* matmul_kernel_isa(DType t, int64_t m, int64_t n_in, int64_t n_out);

// Row r of w as f32: a pointer into the weights for f32, otherwise the row
// converted into buf (n_in floats).
const float* weight_row_f32(const WeightView& w, int64_t r, float* buf);

}  // namespace infer::cpu
