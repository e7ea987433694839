// Load-time repacking of quantized weights into the layouts the CUDA kernels
// read (cuda/layout.h), on the host: the backend uploads the result. Plain
// C++; the CPU tests check every repacked weight against lib/quant's
// dequantization (tests/test_cuda_layout.cpp).
#pragma once

#include <cstdint>
#include <vector>

#include "core/backend.h"
#include "cuda/layout.h"

namespace infer::cuda {

// 4-bit weights as mma A fragments (layout::W4Layout): INT4_G32/64/128 as
// they are (group = G, the block's zero point), Q4_0 as group 32 with zero 8.
struct W4Weights {
  layout::W4Layout L;
  std::vector<uint32_t> q;      // L.n_words()
  std::vector<uint16_t> scale;  // f16, [group][n_out_pad]
  std::vector<uint8_t> zero;    // [group][n_out_pad]
};
bool w4_repackable(DType t);
// Error(Unsupported) for another type or n_in not a multiple of 32.
W4Weights repack_w4(const WeightView& w);
// Weight (row n, input k) read back through the layout: (q - z) * d.
float w4_value(const W4Weights& w, int64_t n, int64_t k);

// Q8_0 with codes and scales apart: q [n_out][n_in] int8 (row-major, rows
// 16-byte aligned since n_in is a multiple of 32), d [n_out][n_in / 32] f16.
struct Q8Weights {
  int64_t n_out = 0, n_in = 0;
  std::vector<int8_t> q;
  std::vector<uint16_t> d;
};
Q8Weights repack_q8_0(const WeightView& w);
inline float q8_value(const Q8Weights& w, int64_t n, int64_t k);

}  // namespace infer::cuda

#include "core/fp16.h"

inline float infer::cuda::q8_value(const Q8Weights& w, int64_t n, int64_t k) {
  return fp16_to_f32(w.d[n * (w.n_in / 32) + k / 32]) * static_cast<float>(w.q[n * w.n_in + k]);
}
