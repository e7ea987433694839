#include "cpu/matmul.h"

#include <algorithm>
#include <vector>

#include "core/threadpool.h"
#include "cpu/kernels.h"
#include "quant/dequant.h"

namespace infer::cpu {

const float* weight_row_f32(const WeightView& w, int64_t r, float* buf) {
  const uint8_t* src = w.row(r);
  switch (w.type) {
    case DType::F32:
      return reinterpret_cast<const float*>(src);
    case DType::F16:
      kernels().f16_to_f32(reinterpret_cast<const uint16_t*>(src), buf, w.n_in);
      return buf;
    default:
      dequantize_row(w.type, src, buf, w.n_in);
      return buf;
  }
}

// Generic path for every format: each thread converts its weight rows to f32
// one at a time (into a row-sized buffer) and takes the dot product with all
// m activation rows. Formats with dedicated kernels come in their own files.
void matmul(ThreadPool& pool, const WeightView& w, const float* x, int64_t m, float* y) {
  const int64_t n_in = w.n_in, n_out = w.n_out;
  const Kernels& k = kernels();
  const int64_t grain = std::max<int64_t>(1, 16384 / std::max<int64_t>(1, n_in * m));
  pool.run([&](int tid, int nth) {
    const int64_t chunks = (n_out + grain - 1) / grain;
    const int64_t c0 = chunks * tid / nth, c1 = chunks * (tid + 1) / nth;
    if (c0 >= c1) return;
    thread_local std::vector<float> buf;
    if (static_cast<int64_t>(buf.size()) < n_in) buf.resize(static_cast<size_t>(n_in));
    for (int64_t r = c0 * grain; r < std::min(n_out, c1 * grain); ++r) {
      const float* wr = weight_row_f32(w, r, buf.data());
      for (int64_t i = 0; i < m; ++i) y[i * n_out + r] = k.dot_f32(x + i * n_in, wr, n_in);
    }
  });
}

}  // namespace infer::cpu
