// Matrix multiplication against weights in their file format: y = x · Wᵀ.
#pragma once

#include <cstdint>

#include "core/backend.h"

namespace infer {
class ThreadPool;
}

namespace infer::cpu {

// y[m][w.n_out] = x[m][w.n_in] · Wᵀ, split over the pool's threads by
// output rows. Every weight row is read once per call whatever m is.
void matmul(ThreadPool& pool, const WeightView& w, const float* x, int64_t m, float* y);

// Row r of w as f32: a pointer into the weights for f32, otherwise the row
// converted into buf (n_in floats).
const float* weight_row_f32(const WeightView& w, int64_t r, float* buf);

}  // namespace infer::cpu
