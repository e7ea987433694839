// GPU kernel benchmarks of the CUDA backend (issue #16), run by
// bench/gpu-check.sh on a machine with an NVIDIA GPU:
//   - read bandwidth (a read-only kernel over 2 GiB): the roofline the
//     decode-side kernels are measured against;
//   - matmuls over the weights of Llama-3-8B-shaped layers (q, k, v, o, gate,
//     up, down), rotated over enough layers that nothing stays in L2: F16
//     (cuBLAS), INT4 g128 and Q4_0 (our W4A16 kernel, M <= 8 a launch; M > 8
//     runs in launches of 8 rows: there is no large-M kernel yet), Q8_0; time
//     per layer, weight bytes read / time and the fraction of the probe, and
//     the 4-bit speed-up over F16;
//   - paged flash-decoding attention (32 query / 8 KV heads of 128, f16 KV)
//     at batch 1, 8, 32 and contexts of 512 and 4096.
// Weights are random bytes of the right layouts (timing does not depend on
// the values; correctness is tests/test_cuda.cpp's). Times are CUDA-event
// times of back-to-back launches, the median of 5 runs.
//
//   infer_cuda_bench [--quick]
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "cuda/cublas_loader.h"
#include "cuda/cuda_backend.h"
#include "cuda/kernels.h"
#include "cuda/layout.h"

using namespace infer;
namespace lay = infer::cuda::layout;

namespace {

struct Shape {
  const char* name;
  int64_t n_out, n_in;
};
// One Llama-3-8B decoder layer's matrices.
const Shape kLayer[] = {{"q", 4096, 4096},     {"k", 1024, 4096},     {"v", 1024, 4096},    {"o", 4096, 4096},
                        {"gate", 14336, 4096}, {"up", 14336, 4096}, {"down", 4096, 14336}};

std::vector<uint8_t> random_bytes(size_t n, uint32_t seed) {
  std::vector<uint8_t> v(n);
  std::mt19937 rng(seed);
  for (size_t i = 0; i + 4 <= n; i += 4) {
    const uint32_t r = rng();
    std::memcpy(&v[i], &r, 4);
  }
  return v;
}
// n f16 values of small magnitude (|x| < 2^-3), random signs.
std::vector<uint16_t> random_f16(size_t n, uint32_t seed) {
  std::vector<uint16_t> v(n);
  std::mt19937 rng(seed);
  for (auto& x : v) x = static_cast<uint16_t>((rng() & 0x8000u) | (0x2000u + (rng() & 0x0fffu)));
  return v;
}

template <typename F>
float median_ms(int runs, F&& body) {
  cuda::DeviceTimer timer;
  body();  // warm-up
  std::vector<float> t;
  for (int r = 0; r < runs; ++r) {
    timer.start();
    body();
    t.push_back(timer.stop_ms());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

// The weights of one matrix in every benchmarked format, on the device.
struct Matrix {
  Shape s;
  cuda::DeviceBuffer f16;
  lay::W4Layout L;
  cuda::DeviceBuffer w4_q, w4_scale, w4_zero;  // group 128
  cuda::DeviceBuffer w4g32_scale, w4g32_zero;  // Q4_0: group 32, zero 8 (same codes)
  cuda::DeviceBuffer q8, q8_d;
};

}  // namespace

int main(int argc, char** argv) {
  const bool quick = argc > 1 && std::string(argv[1]) == "--quick";
  try {
    const cuda::DeviceProbe p = cuda::probe_devices();
    if (p.state != cuda::DeviceState::Usable) {
      std::fprintf(stderr, "infer_cuda_bench: %s\n", p.reason.c_str());
      return 2;
    }
    std::printf("device: %s\n", p.name.c_str());

    // ---- read bandwidth ----
    const int64_t probe_bytes = int64_t{2} << 30;
    cuda::DeviceBuffer big(static_cast<size_t>(probe_bytes)), sink(4096 * sizeof(float));
    const float probe_ms =
        median_ms(5, [&] { cuda::launch_read_probe(big.get(), probe_bytes / 16, sink.as<float>(), nullptr); });
    const double bw = static_cast<double>(probe_bytes) / (probe_ms * 1e-3) / 1e9;
    std::printf("read bandwidth: %.0f GB/s (2 GiB read in %.3f ms)\n", bw, probe_ms);
    big = cuda::DeviceBuffer();

    // ---- matmuls ----
    const int n_layers = quick ? 2 : 4;  // > 100 MB of INT4 a layer: past the L2
    std::vector<Matrix> ms;
    uint32_t seed = 1;
    for (int l = 0; l < n_layers; ++l)
      for (const Shape& s : kLayer) {
        Matrix m;
        m.s = s;
        const size_t n = static_cast<size_t>(s.n_out * s.n_in);
        const std::vector<uint16_t> f16 = random_f16(n, seed++);
        m.f16 = cuda::to_device(f16.data(), n);
        m.L.n_out = s.n_out;
        m.L.n_in = s.n_in;
        m.L.group = 128;
        const std::vector<uint8_t> q = random_bytes(static_cast<size_t>(m.L.n_words()) * 4, seed++);
        m.w4_q = cuda::to_device(q.data(), q.size());
        const std::vector<uint16_t> sc = random_f16(static_cast<size_t>(m.L.n_groups() * m.L.n_out_pad()), seed++);
        const std::vector<uint8_t> z(sc.size(), 8);
        m.w4_scale = cuda::to_device(sc.data(), sc.size());
        m.w4_zero = cuda::to_device(z.data(), z.size());
        lay::W4Layout L32 = m.L;
        L32.group = 32;
        const std::vector<uint16_t> sc32 = random_f16(static_cast<size_t>(L32.n_groups() * L32.n_out_pad()), seed++);
        const std::vector<uint8_t> z32(sc32.size(), 8);
        m.w4g32_scale = cuda::to_device(sc32.data(), sc32.size());
        m.w4g32_zero = cuda::to_device(z32.data(), z32.size());
        const std::vector<uint8_t> q8 = random_bytes(n, seed++);
        m.q8 = cuda::to_device(q8.data(), n);
        const std::vector<uint16_t> d8 = random_f16(n / 32, seed++);
        m.q8_d = cuda::to_device(d8.data(), d8.size());
        ms.push_back(std::move(m));
      }
    double layer_params = 0;
    for (const Shape& s : kLayer) layer_params += static_cast<double>(s.n_out) * s.n_in;
    const int64_t max_in = 14336, max_out = 14336, max_m = 64;
    std::vector<float> xh(max_m * max_in, 0.01f);
    cuda::DeviceBuffer x = cuda::to_device(xh.data(), xh.size()), x16(max_m * max_in * 2),
                       y(max_m * max_out * sizeof(float));
    cuda::launch_f32_to_f16(x.as<float>(), x16.as<uint16_t>(), max_m * max_in, nullptr);
    cuda::Cublas blas;

    // Bytes a layer's weights take in each format (codes + scales).
    const double bytes_f16 = layer_params * 2, bytes_int4 = layer_params * (0.5 + 3.0 / 128),
                 bytes_q4_0 = layer_params * (0.5 + 3.0 / 32), bytes_q8 = layer_params * (1.0 + 2.0 / 32);
    std::printf("\nmatmuls over %d Llama-3-8B layers (%.0f M weights each); per layer: time, weight GB/s, of read bw\n",
                n_layers, layer_params / 1e6);
    std::printf("%4s | %22s | %22s | %22s | %22s | int4/f16 speed-up\n", "M", "f16 (cuBLAS)", "int4 g128 (W4A16)",
                "q4_0 (W4A16)", "q8_0");
    const std::vector<int> rows = quick ? std::vector<int>{1, 8} : std::vector<int>{1, 2, 4, 8, 16, 32, 64};
    for (int m : rows) {
      auto per_layer = [&](auto&& one) {
        return median_ms(5, [&] {
                 for (const Matrix& w : ms) one(w);
               }) /
               n_layers;
      };
      const float t_f16 = per_layer([&](const Matrix& w) {
        blas.gemm_f16(w.f16.as<uint16_t>(), w.s.n_out, w.s.n_in, x16.as<uint16_t>(), m, y.as<float>(), nullptr);
      });
      auto w4 = [&](const Matrix& w, bool q4_0) {
        lay::W4Layout L = w.L;
        if (q4_0) L.group = 32;
        for (int r0 = 0; r0 < m; r0 += 8)
          cuda::launch_w4a16_gemm(w.w4_q.as<uint32_t>(), (q4_0 ? w.w4g32_scale : w.w4_scale).as<uint16_t>(),
                                  (q4_0 ? w.w4g32_zero : w.w4_zero).as<uint8_t>(), L, x.as<float>() + r0 * w.s.n_in,
                                  std::min(8, m - r0), y.as<float>() + r0 * w.s.n_out, nullptr);
      };
      const float t_int4 = per_layer([&](const Matrix& w) { w4(w, false); });
      const float t_q4 = per_layer([&](const Matrix& w) { w4(w, true); });
      const float t_q8 = per_layer([&](const Matrix& w) {
        for (int r0 = 0; r0 < m; r0 += 8)
          cuda::launch_q8_0_matvec(w.q8.as<int8_t>(), w.q8_d.as<uint16_t>(), w.s.n_out, w.s.n_in,
                                   x.as<float>() + r0 * w.s.n_in, std::min(8, m - r0), y.as<float>() + r0 * w.s.n_out,
                                   nullptr);
      });
      auto cell = [&](float ms_, double bytes) {
        static char buf[4][64];
        static int k = 0;
        char* b = buf[k++ % 4];
        const double gbs = bytes / (ms_ * 1e-3) / 1e9;
        std::snprintf(b, 64, "%7.3f ms %5.0f GB/s %3.0f%%", ms_, gbs, 100.0 * gbs / bw);
        return b;
      };
      std::printf("%4d | %22s | %22s | %22s | %22s | %.2fx\n", m, cell(t_f16, bytes_f16), cell(t_int4, bytes_int4),
                  cell(t_q4, bytes_q4_0), cell(t_q8, bytes_q8), t_f16 / t_int4);
    }
    ms.clear();

    // ---- attention ----
    std::printf("\npaged flash-decoding attention, 32/8 heads of 128, f16 KV, block 16: per call, KV GB/s, of read bw\n");
    const int n_head = 32, n_kv = 8, hd = 128, bs = 16;
    for (int ctx : {512, 4096})
      for (int batch : {1, 8, 32}) {
        const int nb = (ctx + bs - 1) / bs;
        lay::KvAddr a{nb * batch, n_kv, hd, bs};
        const int64_t pool_elems = lay::kv_elem(a, 1, 0, 0, 0, 0, 0);
        const std::vector<uint16_t> kv = random_f16(static_cast<size_t>(pool_elems), 99);
        cuda::DeviceBuffer pool = cuda::to_device(kv.data(), kv.size());
        std::vector<int32_t> tables(static_cast<size_t>(batch) * nb), pos(batch, ctx - 1);
        for (size_t i = 0; i < tables.size(); ++i) tables[i] = static_cast<int32_t>(i);
        const std::vector<float> q(static_cast<size_t>(batch) * n_head * hd, 0.01f);
        cuda::DeviceBuffer dq = cuda::to_device(q.data(), q.size()), dpos = cuda::to_device(pos.data(), pos.size()),
                           dtab = cuda::to_device(tables.data(), tables.size()),
                           out(q.size() * sizeof(float));
        cuda::PagedAttention pa;
        pa.q = dq.as<float>();
        pa.pool = pool.as<uint16_t>();
        pa.addr = a;
        pa.n_tokens = batch;
        pa.n_head = n_head;
        pa.pos = dpos.as<int32_t>();
        pa.tables = dtab.as<int32_t>();
        pa.table_stride = nb;
        pa.scale = 0.088f;
        pa.n_splits = cuda::paged_attention_splits(ctx - 1, bs);
        cuda::DeviceBuffer work(cuda::paged_attention_work_floats(batch, n_head, hd, pa.n_splits) * sizeof(float));
        pa.work = work.as<float>();
        pa.out = out.as<float>();
        const float t = median_ms(5, [&] { cuda::launch_paged_attention(pa, nullptr); });
        const double bytes = 2.0 * batch * ctx * n_kv * hd * 2;
        const double gbs = bytes / (t * 1e-3) / 1e9;
        std::printf("ctx %5d batch %2d splits %2d: %8.3f ms %6.0f GB/s %3.0f%%\n", ctx, batch, pa.n_splits, t, gbs,
                    100.0 * gbs / bw);
      }
    cuda::device_synchronize();
  } catch (const Error& e) {
    std::fprintf(stderr, "infer_cuda_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
