// CPU matmul kernels against the scalar reference: dequantize every weight
// row (quant/dequant.h), then f32/f64 dot products. Every format, awkward
// shapes (K not a multiple of 256 where the format allows, odd N, N smaller
// than a panel and crossing panels, M = 1, 2, 3, 7, 16, 33, 128), on every
// ISA this machine has and with the ISA forced down to scalar.
//
// Tolerance: the integer kernels quantize activations per 32-value block
// (per row for W8A8) to int8, so each activation is off by at most half a
// step, amax_block / 254. The bound used is that error propagated exactly,
// Σ_k |w_k| * step_k / 2, plus f32 rounding (1e-5 of Σ|w x|) — i.e. the
// kernel must be as good as "dequantize, quantize x, multiply" can be.
// Float formats must match to f32 rounding.
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/backend.h"
#include "core/fp16.h"
#include "core/threadpool.h"
#include "cpu/isa.h"
#include "cpu/kernels.h"
#include "cpu/matmul.h"
#include "cpu/onednn_matmul.h"
#include "cpu/qmatmul.h"
#include "quant/dequant.h"
#include "quant/formats.h"
#include "test_util.h"

using namespace infer;

namespace {

struct TestWeight {
  DType type;
  int64_t n_in, n_out;
  std::vector<uint8_t> bytes;
  std::vector<float> scale;  // W8A8
  std::vector<float> deq;    // reference values [n_out][n_in]
  WeightCache cache;
  WeightView view(bool cached) {
    WeightView w;
    w.type = type;
    w.n_in = n_in;
    w.n_out = n_out;
    w.data = bytes.data();
    w.row_bytes = type == DType::W8A8 ? static_cast<size_t>(n_in) : dtype_row_bytes(type, n_in);
    w.scale = scale.empty() ? nullptr : scale.data();
    w.cache = cached ? &cache : nullptr;
    return w;
  }
};

// Random weights in format t, each row with its own magnitude (so per-row
// and per-block scales differ) and an occasional outlier.
void make_weight(TestWeight& tw, DType t, int64_t n_in, int64_t n_out, uint32_t seed) {
  tw.type = t;
  tw.n_in = n_in;
  tw.n_out = n_out;
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::uniform_real_distribution<float> ud(0.2f, 2.0f);
  std::vector<float> src(static_cast<size_t>(n_in * n_out));
  for (int64_t r = 0; r < n_out; ++r) {
    const float mag = ud(rng) * 0.05f;
    for (int64_t k = 0; k < n_in; ++k) {
      float v = nd(rng) * mag;
      if (rng() % 97 == 0) v *= 6.0f;
      if (rng() % 13 == 0) v = std::fabs(v);  // some skew so min/max formats differ from symmetric ones
      src[r * n_in + k] = v;
    }
  }
  tw.deq.assign(src.size(), 0.0f);
  if (t == DType::W8A8) {
    tw.bytes.resize(static_cast<size_t>(n_in * n_out));
    tw.scale.resize(static_cast<size_t>(n_out));
    for (int64_t r = 0; r < n_out; ++r) {
      int8_t* q = reinterpret_cast<int8_t*>(tw.bytes.data() + r * n_in);
      quantize_row_w8a8(&src[r * n_in], q, &tw.scale[r], n_in);
      for (int64_t k = 0; k < n_in; ++k) tw.deq[r * n_in + k] = static_cast<float>(q[k]) * tw.scale[r];
    }
    return;
  }
  const size_t rb = dtype_row_bytes(t, n_in);
  tw.bytes.resize(rb * n_out);
  for (int64_t r = 0; r < n_out; ++r) {
    if (can_quantize(t)) {
      quantize_row(t, &src[r * n_in], tw.bytes.data() + r * rb, n_in);
    } else {
      // Q2_K / Q3_K (no quantizer of ours): random bytes, sane f16 scales.
      std::uniform_int_distribution<int> bd(0, 255);
      uint8_t* b = tw.bytes.data() + r * rb;
      for (size_t i = 0; i < rb; ++i) b[i] = static_cast<uint8_t>(bd(rng));
      const int bs = static_cast<int>(dtype_info(t)->bytes);
      for (size_t off = 0; off < rb; off += bs) {
        const uint16_t h = f32_to_fp16(0.01f), hm = f32_to_fp16(0.004f);
        if (t == DType::Q2_K) {
          std::memcpy(b + off + 80, &h, 2);
          std::memcpy(b + off + 82, &hm, 2);
        } else {
          std::memcpy(b + off + 108, &hm, 2);
        }
      }
    }
    dequantize_row(t, tw.bytes.data() + r * rb, &tw.deq[r * n_in], n_in);
  }
}

std::vector<float> make_x(int64_t m, int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(m * n));
  for (auto& v : x) v = nd(rng);
  // A row of zeros and a row with one large outlier: both edge cases of the scales.
  if (m > 2) {
    std::fill(x.begin() + n, x.begin() + 2 * n, 0.0f);
    x[2 * n + n / 2] = 40.0f;
  }
  return x;
}

// Checks y against the reference with the tolerance described at the top.
void check_result(const TestWeight& tw, const std::vector<float>& x, int64_t m, const std::vector<float>& y,
                  bool int8_acts, const std::string& what) {
  const int64_t n = tw.n_in, n_out = tw.n_out;
  const bool per_row = tw.type == DType::W8A8;
  int64_t bad = 0;
  double worst = 0;
  for (int64_t i = 0; i < m; ++i) {
    const float* xi = &x[i * n];
    // Half a quantization step of each activation.
    std::vector<double> half_step(static_cast<size_t>(n), 0.0);
    if (int8_acts) {
      const int64_t blk = per_row ? n : 32;
      for (int64_t b0 = 0; b0 < n; b0 += blk) {
        double amax = 0;
        for (int64_t k = b0; k < std::min(n, b0 + blk); ++k) amax = std::max(amax, (double)std::fabs(xi[k]));
        for (int64_t k = b0; k < std::min(n, b0 + blk); ++k) half_step[k] = amax / 254.0 * 1.001;
      }
    }
    for (int64_t r = 0; r < n_out; ++r) {
      const float* wr = &tw.deq[r * n];
      double ref = 0, mag = 0, bound = 0;
      for (int64_t k = 0; k < n; ++k) {
        ref += static_cast<double>(wr[k]) * xi[k];
        mag += std::fabs(static_cast<double>(wr[k]) * xi[k]);
        bound += std::fabs(wr[k]) * half_step[k];
      }
      const double tol = bound + 2e-5 * mag + 1e-6;
      const double err = std::fabs(y[i * n_out + r] - ref);
      worst = std::max(worst, err / tol);
      if (!(err <= tol)) {
        if (bad++ < 5)
          UNSCOPED_INFO(what << ": y[" << i << "][" << r << "] = " << y[i * n_out + r] << ", reference " << ref
                             << ", tolerance " << tol);
      }
    }
  }
  INFO(what << ": worst error / tolerance = " << worst);
  CHECK(bad == 0);
}

std::vector<cpu::Isa> isas() {
  std::vector<cpu::Isa> v{cpu::Isa::Scalar};
  if (cpu::detected_isa() >= cpu::Isa::Avx2) v.push_back(cpu::Isa::Avx2);
  if (cpu::detected_isa() >= cpu::Isa::Avx512) v.push_back(cpu::Isa::Avx512);
  if (cpu::detected_isa() >= cpu::Isa::Amx) v.push_back(cpu::Isa::Amx);
  return v;
}

struct IsaGuard {
  cpu::Isa saved;
  explicit IsaGuard(cpu::Isa isa) : saved(cpu::set_isa_cap(isa)) {}
  ~IsaGuard() { cpu::set_isa_cap(saved); }
};

bool int8_activations(DType t, cpu::Isa isa) {
  return isa != cpu::Isa::Scalar && t != DType::F32 && t != DType::F16 && t != DType::BF16 && t != DType::Q2_K &&
         t != DType::Q3_K;
}

void run_case(DType t, int64_t n_in, int64_t n_out, const std::vector<int64_t>& ms, int threads) {
  TestWeight tw;
  make_weight(tw, t, n_in, n_out, static_cast<uint32_t>(n_in * 131 + n_out * 7 + static_cast<uint32_t>(t)));
  ThreadPool pool(threads);
  for (cpu::Isa isa : isas()) {
    IsaGuard guard(isa);
    for (int64_t m : ms) {
      const std::vector<float> x = make_x(m, n_in, static_cast<uint32_t>(m + n_in));
      for (bool cached : {true, false}) {
        std::vector<float> y(static_cast<size_t>(m * n_out), -1e30f);
        const WeightView w = tw.view(cached);
        cpu::matmul(pool, w, x.data(), m, y.data());
        // A second call reuses the cached panels.
        if (cached) cpu::matmul(pool, w, x.data(), m, y.data());
        const std::string what = std::string(dtype_name(t)) + " " + cpu::isa_name(isa) + " K=" +
                                 std::to_string(n_in) + " N=" + std::to_string(n_out) + " M=" + std::to_string(m) +
                                 (cached ? " cached" : "") + " threads=" + std::to_string(threads);
        check_result(tw, x, m, y, int8_activations(t, isa), what);
      }
    }
  }
}

const std::vector<int64_t> kAllM = {1, 2, 3, 7, 16, 33, 128};

}  // namespace

TEST_CASE("matmul: 32-value block formats on every ISA", "[matmul]") {
  for (DType t : {DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::Q8_0}) {
    run_case(t, 320, 37, kAllM, 2);        // K = 10 blocks (not a multiple of 256), N odd, across panels
    run_case(t, 96, 7, {1, 2, 7, 33}, 3);  // N smaller than a panel, 3 threads
    run_case(t, 2048, 64, {1, 5}, 2);
    run_case(t, 384, 37, kAllM, 2);  // K a multiple of 128: Q4_0 / Q4_1 panels group four blocks
  }
}

TEST_CASE("matmul: K formats on every ISA", "[matmul]") {
  for (DType t : {DType::Q4_K, DType::Q5_K, DType::Q6_K, DType::Q2_K, DType::Q3_K}) {
    run_case(t, 768, 19, kAllM, 2);
    run_case(t, 256, 33, {1, 3}, 3);
  }
}

// The panels with high bits (Q5_0, Q5_1: 32- and 128-value groups; Q5_K,
// Q6_K: 256) at every row count the drivers distinguish: decode's whole-panel
// kernel (m <= 2), the half-panel tiles of 4 rows and their remainders.
TEST_CASE("matmul: Q5_0, Q5_1, Q5_K and Q6_K panels at every m in 1..64", "[matmul]") {
  std::vector<int64_t> all_m;
  for (int64_t m = 1; m <= 64; ++m) all_m.push_back(m);
  for (DType t : {DType::Q5_0, DType::Q5_1}) {
    run_case(t, 320, 37, all_m, 2);  // 10 blocks: groups of one block; N odd, across panels
    run_case(t, 512, 21, all_m, 2);  // groups of four blocks
    run_case(t, 128, 5, {1, 2, 3, 9}, 3);
  }
  for (DType t : {DType::Q5_K, DType::Q6_K}) {
    run_case(t, 512, 37, all_m, 2);
    run_case(t, 256, 5, {1, 2, 3, 9}, 3);  // N smaller than a panel
  }
}

TEST_CASE("matmul: INT4 group formats on every ISA", "[matmul]") {
  for (DType t : {DType::INT4_G32, DType::INT4_G64, DType::INT4_G128}) {
    run_case(t, 384, 37, kAllM, 2);
    run_case(t, 128, 5, {1, 2, 3}, 3);
  }
}

TEST_CASE("matmul: W8A8 on every ISA", "[matmul]") {
  run_case(DType::W8A8, 200, 37, kAllM, 2);  // K not a multiple of 32
  run_case(DType::W8A8, 172, 9, {1, 7}, 3);
  run_case(DType::W8A8, 2048, 48, {1, 16}, 2);
}

TEST_CASE("matmul: float formats on every ISA", "[matmul]") {
  for (DType t : {DType::F32, DType::F16, DType::BF16}) {
    run_case(t, 172, 37, kAllM, 2);  // K = 172: not a multiple of 8 either
    run_case(t, 64, 5, {1, 3, 16, 33}, 3);
    run_case(t, 1000, 33, {1, 20}, 2);
  }
}

TEST_CASE("matmul: INFER_CPU_ISA caps and set_isa_cap restores", "[matmul]") {
  const cpu::Isa before = cpu::active_isa();
  {
    IsaGuard g(cpu::Isa::Scalar);
    CHECK(cpu::active_isa() == cpu::Isa::Scalar);
  }
  CHECK(cpu::active_isa() == before);
  CHECK(cpu::active_isa() <= cpu::detected_isa());
}

TEST_CASE("matmul: activation quantizers agree", "[matmul]") {
  if (cpu::detected_isa() < cpu::Isa::Avx2) return;
  const int64_t n = 200, n_pad = 224;
  std::vector<float> x = make_x(1, n, 9);
  for (int64_t block : {int64_t(32), n_pad}) {
    const int64_t nb = n_pad / block;
    std::vector<int8_t> q1(n_pad), q2(n_pad);
    std::vector<uint8_t> u1(n_pad), u2(n_pad);
    std::vector<float> d1(nb), d2(nb), s1(nb), s2(nb);
    const cpu::IsaKernels& scalar = cpu::kernels_for(cpu::Isa::Scalar);
    const cpu::IsaKernels& avx2 = cpu::kernels_for(cpu::Isa::Avx2);
    scalar.quantize_acts(x.data(), n, n_pad, block, q1.data(), u1.data(), d1.data(), s1.data());
    avx2.quantize_acts(x.data(), n, n_pad, block, q2.data(), u2.data(), d2.data(), s2.data());
    for (int64_t b = 0; b < nb; ++b) {
      CHECK(d1[b] == d2[b]);
      CHECK(s1[b] == Approx(s2[b]).margin(d1[b] * 2));
    }
    int64_t diff = 0;
    for (int64_t k = 0; k < n_pad; ++k) {
      CHECK(std::abs(q1[k] - q2[k]) <= 1);  // ties may round either way
      CHECK(static_cast<int>(u2[k]) == q2[k] + 128);
      diff += q1[k] != q2[k];
    }
    CHECK(diff <= 2);
    for (int64_t k = n; k < n_pad; ++k) CHECK(q2[k] == 0);
  }
}

TEST_CASE("matmul: oneDNN paths (W8A8 int8, f32) forced on and off", "[matmul]") {
  if (cpu::detected_isa() < cpu::Isa::Avx2) return;
  struct Policy {
    explicit Policy(int p) { cpu::set_onednn_policy(p); }
    ~Policy() { cpu::set_onednn_policy(-1); }
  };
  // Without VNNI the oneDNN path quantizes activations to 7 bits: twice the
  // step. Below AVX2 (INFER_CPU_ISA=scalar) oneDNN never runs, even forced:
  // the portable kernels do, with f32 activations.
  const bool vnni = cpu::onednn_int8_vnni();
  const bool simd = cpu::active_isa() >= cpu::Isa::Avx2;
  for (int policy : {1, 0}) {
    Policy guard(policy);
    for (DType t : {DType::W8A8, DType::F32}) {
      TestWeight tw;
      make_weight(tw, t, 300, 45, 77);
      ThreadPool pool(2);
      for (int64_t m : {1, 3, 40}) {
        const std::vector<float> x = make_x(m, 300, 5);
        std::vector<float> y(static_cast<size_t>(m * 45));
        cpu::matmul(pool, tw.view(true), x.data(), m, y.data());
        const std::string what = std::string(dtype_name(t)) + " onednn=" + std::to_string(policy) + " M=" +
                                 std::to_string(m);
        if (t == DType::W8A8 && policy == 1 && simd && !vnni) {
          // Compare against a run with a doubled step: quantize x to 7 bits ourselves.
          std::vector<float> x7 = x;
          for (int64_t i = 0; i < m; ++i) {
            float amax = 0;
            for (int64_t k = 0; k < 300; ++k) amax = std::max(amax, std::fabs(x[i * 300 + k]));
            for (int64_t k = 0; k < 300; ++k)
              x7[i * 300 + k] = amax > 0 ? std::nearbyint(x[i * 300 + k] * 63 / amax) * amax / 63 : 0;
          }
          check_result(tw, x7, m, y, false, what + " (u7)");
        } else {
          check_result(tw, x, m, y, t == DType::W8A8 && simd, what);
        }
      }
    }
  }
}

TEST_CASE("matmul: AMX tile kernels give the AVX-512 kernels' results bit for bit", "[matmul]") {
  if (cpu::detected_isa() < cpu::Isa::Amx) {
    WARN("skipped: no usable AMX-INT8 here (CPU, OS permission or build): " << cpu::isa_name(cpu::detected_isa()));
    return;
  }
  struct NoOnednn {  // W8A8 would go to oneDNN for larger m
    NoOnednn() { cpu::set_onednn_policy(0); }
    ~NoOnednn() { cpu::set_onednn_policy(-1); }
  } no_onednn;
  // Batch invariance: a request's logits must not depend on which kernel
  // its batch size picked, so AMX must reproduce the VNNI kernels exactly.
  struct Shape {
    int64_t n_in, n_out;
  };
  for (DType t : {DType::Q4_0, DType::Q4_1, DType::Q4_K, DType::INT4_G32, DType::INT4_G64, DType::INT4_G128,
                  DType::Q8_0, DType::W8A8}) {
    // K = 512: grouped Q4_0 / Q4_1 panels; K = 768: three Q4_K super-blocks;
    // K = 288: 9 blocks (Q4_0 / Q4_1 ungrouped, an odd count for the tile
    // pairs) where the format allows it. N crosses panels and ends inside one.
    for (Shape s : {Shape{512, 48}, Shape{768, 37}, Shape{288, 19}}) {
      if (!dtype_row_ok(t, s.n_in) || (t == DType::INT4_G64 && s.n_in % 64) || (t == DType::INT4_G128 && s.n_in % 128))
        continue;
      TestWeight tw;
      make_weight(tw, t, s.n_in, s.n_out, static_cast<uint32_t>(s.n_in + 3 * s.n_out));
      ThreadPool pool(2);
      // m = 17 and 20 end in a VNNI tail (1 and 4 rows), 31 and 40 in AMX tiles of 15 and 8.
      for (int64_t m : {int64_t(16), int64_t(17), int64_t(20), int64_t(31), int64_t(40)}) {
        const std::vector<float> x = make_x(m, s.n_in, static_cast<uint32_t>(m * 7 + 1));
        std::vector<float> y_vnni(static_cast<size_t>(m * s.n_out)), y_amx(y_vnni.size());
        {
          IsaGuard g(cpu::Isa::Avx512);
          cpu::matmul(pool, tw.view(true), x.data(), m, y_vnni.data());
        }
        {
          IsaGuard g(cpu::Isa::Amx);
          cpu::matmul(pool, tw.view(true), x.data(), m, y_amx.data());
        }
        INFO(dtype_name(t) << " K=" << s.n_in << " N=" << s.n_out << " M=" << m);
        CHECK(std::memcmp(y_vnni.data(), y_amx.data(), y_vnni.size() * sizeof(float)) == 0);
        // And the AMX kernel agrees with the scalar reference.
        check_result(tw, x, m, y_amx, true, std::string(dtype_name(t)) + " amx M=" + std::to_string(m));
      }
    }
  }
}
