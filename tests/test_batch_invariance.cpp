// Batch invariance: a row's result must not depend on how many other rows
// share the step. Speculative verification scores K+1 rows of a sequence in
// one forward where plain decoding scored one: greedy output is the same
// token for token only if every kernel gives a row the same bits at any m.
// For every weight format, every m in 1..64 is compared bitwise with m = 1
// (each row alone), on the ISA this machine runs and with it capped lower.
// F32 included: it runs through the same transposed panels as F16/BF16 at
// every m (oneDNN's sgemm, whose order differs, is not used for it).
#include <catch2/catch.hpp>

#include <cstring>
#include <random>
#include <vector>

#include "core/backend.h"
#include "cpu/cpu_backend.h"
#include "core/dtype.h"
#include "core/threadpool.h"
#include "cpu/isa.h"
#include "quant/formats.h"

using namespace infer;

namespace {

struct Weight {
  DType type;
  int64_t n_in, n_out;
  std::vector<uint8_t> bytes;
  std::vector<float> scale;
  WeightCache cache;
  WeightView view() {
    WeightView w;
    w.type = type;
    w.n_in = n_in;
    w.n_out = n_out;
    w.data = bytes.data();
    w.row_bytes = type == DType::W8A8 ? static_cast<size_t>(n_in) : dtype_row_bytes(type, n_in);
    w.scale = scale.empty() ? nullptr : scale.data();
    w.cache = &cache;
    return w;
  }
};

void make(Weight& w, DType t, int64_t n_in, int64_t n_out, uint32_t seed) {
  w.type = t;
  w.n_in = n_in;
  w.n_out = n_out;
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 0.05f);
  std::vector<float> src(static_cast<size_t>(n_in * n_out));
  for (auto& v : src) v = nd(rng);
  if (t == DType::W8A8) {
    w.bytes.resize(src.size());
    w.scale.resize(n_out);
    for (int64_t r = 0; r < n_out; ++r)
      quantize_row_w8a8(&src[r * n_in], reinterpret_cast<int8_t*>(w.bytes.data() + r * n_in), &w.scale[r], n_in);
    return;
  }
  const size_t rb = dtype_row_bytes(t, n_in);
  w.bytes.resize(rb * n_out);
  for (int64_t r = 0; r < n_out; ++r) quantize_row(t, &src[r * n_in], w.bytes.data() + r * rb, n_in);
}

// For each ISA level this machine runs and each type: every m in 2..64
// against each row computed alone.
void check_invariance(Backend& be, const std::vector<DType>& types, int64_t n_in, int64_t n_out) {
  const int64_t M = 64;
  std::mt19937 rng(11);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(M * n_in));
  for (auto& v : x) v = nd(rng);
  const cpu::Isa top = cpu::detected_isa();
  for (int cap = 0; cap <= static_cast<int>(top); ++cap) {
    const cpu::Isa prev = cpu::set_isa_cap(static_cast<cpu::Isa>(cap));
    for (DType t : types) {
      if (t != DType::W8A8 && !can_quantize(t)) continue;
      CAPTURE(cpu::isa_name(static_cast<cpu::Isa>(cap)), dtype_name(t), n_in, n_out);
      Weight w;
      make(w, t, n_in, n_out, 5 + static_cast<uint32_t>(t));
      const WeightView v = w.view();
      be.prepare_weight(v);
      // Each row alone.
      std::vector<float> alone(static_cast<size_t>(M * n_out));
      for (int64_t i = 0; i < M; ++i) be.matmul(v, x.data() + i * n_in, 1, alone.data() + i * n_out);
      int mismatched_m = 0;
      const int64_t top_m = M;
      for (int64_t m = 2; m <= top_m; ++m) {
        std::vector<float> y(static_cast<size_t>(m * n_out));
        be.matmul(v, x.data(), m, y.data());
        if (std::memcmp(y.data(), alone.data(), y.size() * sizeof(float)) != 0) {
          if (mismatched_m++ == 0) {
            int64_t i = 0;
            while (std::memcmp(&y[i], &alone[i], sizeof(float)) == 0) ++i;
            UNSCOPED_INFO("first difference at m = " << m << ", row " << i / n_out << ", column " << i % n_out
                                                      << ": " << y[i] << " batched vs " << alone[i] << " alone");
          }
        }
      }
      CHECK(mismatched_m == 0);
    }
    cpu::set_isa_cap(prev);
  }
}

}  // namespace

TEST_CASE("batch invariance: a matmul row's bits do not depend on the number of rows", "[batch_invariance]") {
  ThreadPool pool(2);
  std::unique_ptr<Backend> be = make_cpu_backend(pool);
  check_invariance(*be,
                   {DType::F32, DType::F16, DType::BF16, DType::Q8_0, DType::Q4_0, DType::Q4_1, DType::Q5_0,
                    DType::Q5_1, DType::Q4_K, DType::Q5_K, DType::Q6_K, DType::INT4_G32, DType::INT4_G128, DType::W8A8},
                   512, 80);
  // F32 at a shape that used to go to oneDNN's sgemm from m = 4 (both sides
  // >= 256), and at one ending in a partial panel and an odd n_in.
  check_invariance(*be, {DType::F32}, 512, 300);
  check_invariance(*be, {DType::F32, DType::F16}, 37, 45);
}

// The panels with high bits at shapes that end in a partial panel, with
// one-block and four-block groups (Q5_0, Q5_1) and several super-blocks.
TEST_CASE("batch invariance: Q5 and Q6_K panels at odd shapes", "[batch_invariance]") {
  ThreadPool pool(2);
  std::unique_ptr<Backend> be = make_cpu_backend(pool);
  check_invariance(*be, {DType::Q5_0, DType::Q5_1}, 320, 83);
  check_invariance(*be, {DType::Q5_0, DType::Q5_1, DType::Q5_K, DType::Q6_K}, 768, 83);
  check_invariance(*be, {DType::Q5_K, DType::Q6_K}, 256, 7);
}
