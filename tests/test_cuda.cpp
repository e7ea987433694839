// The CUDA backend (cuda/): what a machine without a GPU checks for real
// (the backend factory's fallback and refusal, through C++ and the C API;
// the cuBLAS loader) and, on a GPU, every kernel against the CPU backend.
// GPU tests say "SKIPPED:" (CTest reports them skipped) when no usable
// device is visible; bench/gpu-check.sh runs them on a GPU machine.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <vector>

#include "core/backend.h"
#include "cpu/cpu_backend.h"
#include "core/error.h"
#include "core/fp16.h"
#include "core/log.h"
#include "core/threadpool.h"
#include "engine/backends.h"
#include "infer/infer.h"
#include "kv/kv_format.h"
#include "quant/dequant.h"
#include "quant/formats.h"
#include "test_models.h"
#include "test_util.h"

#ifdef INFER_HAVE_CUDA
#include "cuda/cublas_loader.h"
#include "cuda/cuda_backend.h"
#include "cuda/kernels.h"
#include "cuda/repack.h"
#include "kv_test_util.h"
#endif

using namespace infer;

namespace {

std::mutex g_log_mu;
std::vector<std::string> g_log;
void capture(LogLevel, const char* msg, void*) {
  std::lock_guard<std::mutex> lock(g_log_mu);
  g_log.push_back(msg);
}
void capture_c(infer_log_level, const char* msg, void*) { capture(LogLevel::Info, msg, nullptr); }
int count_fallback_lines() {
  std::lock_guard<std::mutex> lock(g_log_mu);
  return static_cast<int>(std::count_if(g_log.begin(), g_log.end(), [](const std::string& s) {
    return s.rfind("no CUDA device: using the CPU backend (", 0) == 0;
  }));
}

// Why this machine cannot run CUDA ("" when it can).
std::string cuda_reason() {
#ifdef INFER_HAVE_CUDA
  return cuda::probe_devices().reason;
#else
  return "this libinfer was built without the CUDA backend";
#endif
}

}  // namespace

TEST_CASE("CUDA factory: AUTO falls back to the CPU with one log line, CUDA names the reason", "[cuda]") {
  const std::string why = cuda_reason();
  INFO("probe: " << (why.empty() ? "usable" : why));
  g_log.clear();
  set_log_callback(capture, nullptr, LogLevel::Debug);
  // AUTO stays on the CPU: without a usable GPU, and (until the CUDA backend
  // has been validated on one, issue #16) with one.
  CHECK(resolve_backend(BackendKind::Auto) == BackendKind::Cpu);
  set_log_callback(nullptr, nullptr, LogLevel::Error);
  REQUIRE(g_log.size() == 1);
  if (why.empty()) {
    CHECK(g_log[0].rfind("CUDA device ", 0) == 0);
  } else {
    CHECK(count_fallback_lines() == 1);
    CHECK(g_log[0].find(why) != std::string::npos);
  }
  // CUDA: the backend when a device is usable; else the status says whose
  // fault it is (the build's: UNSUPPORTED; the machine's: BACKEND), the
  // message why.
  if (why.empty()) {
    CHECK(resolve_backend(BackendKind::Cuda) == BackendKind::Cuda);
  } else {
#ifdef INFER_HAVE_CUDA
    const Status want = Status::Backend;
#else
    const Status want = Status::Unsupported;
#endif
    REQUIRE_THROWS_MATCHES(resolve_backend(BackendKind::Cuda), Error, Catch::Predicate<Error>([&](const Error& e) {
                             INFO(e.what());
                             return e.status() == want && std::string(e.what()).find("INFER_BACKEND_CUDA: ") == 0 &&
                                    std::string(e.what()).find(why) != std::string::npos;
                           }));
  }
  // CPU asked for: no probing, no line.
  g_log.clear();
  set_log_callback(capture, nullptr, LogLevel::Debug);
  CHECK(resolve_backend(BackendKind::Cpu) == BackendKind::Cpu);
  set_log_callback(nullptr, nullptr, LogLevel::Error);
  CHECK(g_log.empty());
#ifdef INFER_HAVE_CUDA
  // This build machine has no driver: the reason names it. (On a GPU
  // machine the other branch runs.)
  const cuda::DeviceProbe p = cuda::probe_devices();
  if (p.state == cuda::DeviceState::NoDriver) CHECK(why.find("driver") != std::string::npos);
  if (p.state == cuda::DeviceState::Usable) CHECK(!p.name.empty());
#endif
}

TEST_CASE("CUDA factory through the C API: AUTO loads on the CPU, CUDA fails with status and reason", "[cuda]") {
  const std::string path = infer_test::temp_dir() + "/cuda_factory_tiny.gguf";
  infer_synth_params sp;
  infer_synth_params_init(&sp);
  sp.preset = "tiny";
  sp.type = "f32";
  REQUIRE(infer_synth(path.c_str(), &sp, nullptr) == INFER_OK);
  const std::string why = cuda_reason();

  g_log.clear();
  infer_set_log_callback(capture_c, nullptr, INFER_LOG_DEBUG);
  infer_model_params mp;
  infer_model_params_init(&mp);
  mp.backend = INFER_BACKEND_AUTO;
  infer_model* m = nullptr;
  REQUIRE(infer_model_load(path.c_str(), &mp, &m) == INFER_OK);
  infer_set_log_callback(nullptr, nullptr, INFER_LOG_ERROR);
  {
    std::lock_guard<std::mutex> lock(g_log_mu);
    const auto n = std::count_if(g_log.begin(), g_log.end(), [](const std::string& s) {
      return s.rfind("no CUDA device: using the CPU backend (", 0) == 0 || s.rfind("CUDA device ", 0) == 0;
    });
    CHECK(n == 1);  // one line per load, not one per step
  }
  infer_model_free(m);

  mp.backend = INFER_BACKEND_CUDA;
  m = nullptr;
  const infer_status st = infer_model_load(path.c_str(), &mp, &m);
  const std::string msg = infer_last_error();
  INFO(msg);
  if (why.empty()) {  // a usable GPU: the weights go to the device
    CHECK(st == INFER_OK);
    infer_model_free(m);
    return;
  }
  CHECK(m == nullptr);
#ifdef INFER_HAVE_CUDA
  CHECK(st == INFER_ERR_BACKEND);
#else
  CHECK(st == INFER_ERR_UNSUPPORTED);
#endif
  CHECK(msg.find("INFER_BACKEND_CUDA") != std::string::npos);
  CHECK(msg.find(why) != std::string::npos);
}

#ifdef INFER_HAVE_CUDA

TEST_CASE("CUDA: cuBLAS is loaded at run time, and its absence is an error, not a crash", "[cuda]") {
  cuda::CublasApi api;
  std::string err;
  CHECK(!cuda::load_cublas("libinfer-no-such-cublas.so.13", cuda::kCublasLtName, &api, &err));
  CHECK(err.find("libinfer-no-such-cublas.so.13") != std::string::npos);
  CHECK(api.blas == nullptr);
  err.clear();
  CHECK(!cuda::load_cublas(cuda::kCublasName, "libinfer-no-such-cublasLt.so.13", &api, &err));
  CHECK(err.find("libinfer-no-such-cublasLt.so.13") != std::string::npos);
  CHECK(api.blas == nullptr);
  // A library that is not cuBLAS: found, but without its symbols.
  err.clear();
  CHECK(!cuda::load_cublas("libc.so.6", "libc.so.6", &api, &err));
  CHECK(err.find("cublasCreate_v2") != std::string::npos);
  // The real ones, when this machine has them (the toolkit does): every
  // entry point resolves and the version is the one compiled against.
  err.clear();
  if (!cuda::load_cublas(cuda::kCublasName, cuda::kCublasLtName, &api, &err)) {
    WARN("SKIPPED: cuBLAS not installed here: " << err);
    return;
  }
  CHECK(api.gemm_ex != nullptr);
  CHECK(api.lt_matmul != nullptr);
  CHECK(cuda::cublas_version(api) / 10000 == 13);
  cuda::unload_cublas(&api);
  CHECK(api.blas == nullptr);
}

TEST_CASE("CUDA: devices are counted and a missing one is reported", "[cuda]") {
  const int n = cuda::device_count();
  REQUIRE(n >= 0);
  CHECK(cuda::device_name(n).empty());  // past the last device
  CHECK(cuda::device_name(-1).empty());
  for (int i = 0; i < n; ++i) CHECK(!cuda::device_name(i).empty());
  const cuda::DeviceProbe p = cuda::probe_devices();
  CHECK(p.n_devices == n);
  CHECK((p.state == cuda::DeviceState::Usable) == p.reason.empty());
  if (n == 0) {
    // Without a device every CUDA call fails: the round trip says so, and
    // device memory is refused with an error, not a crash.
    std::vector<float> in(16, 1.0f), out(16, 0.0f);
    std::string err;
    CHECK(!cuda::scale_roundtrip(in.data(), out.data(), 16, 2.0f, &err));
    CHECK(!err.empty());
    CHECK_THROWS_AS(cuda::DeviceBuffer(1024), Error);
  }
}

// ---- on a GPU: every kernel against the CPU backend ----------------------------------------

#define REQUIRE_GPU()                                                        \
  do {                                                                       \
    const cuda::DeviceProbe probe_ = cuda::probe_devices();                  \
    if (probe_.state != cuda::DeviceState::Usable) {                         \
      WARN("SKIPPED: no usable CUDA device (" << probe_.reason << ")");     \
      return;                                                                \
    }                                                                        \
  } while (0)

namespace {

std::vector<float> gauss(size_t n, uint32_t seed) { return infer_test::cuda_gauss(n, seed); }

template <typename T>
std::vector<T> from_device(const cuda::DeviceBuffer& b, size_t n) {
  std::vector<T> v(n);
  b.download(v.data(), n * sizeof(T));
  return v;
}

// |a - b| <= atol + rtol |b| everywhere.
void require_close(const std::vector<float>& got, const std::vector<float>& want, float atol, float rtol) {
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    INFO("i " << i << " got " << got[i] << " want " << want[i]);
    REQUIRE(std::fabs(got[i] - want[i]) <= atol + rtol * std::fabs(want[i]));
  }
}

}  // namespace

TEST_CASE("CUDA GPU: device round trip", "[cuda][gpu]") {
  REQUIRE_GPU();
  std::vector<float> in(1000), out(1000);
  for (int i = 0; i < 1000; ++i) in[i] = static_cast<float>(i) - 300.25f;
  std::string err;
  REQUIRE(cuda::scale_roundtrip(in.data(), out.data(), 1000, 0.5f, &err));
  for (int i = 0; i < 1000; ++i) REQUIRE(out[i] == in[i] * 0.5f);
}

TEST_CASE("CUDA GPU: RMSNorm, RoPE, SwiGLU, add and argmax equal the CPU backend", "[cuda][gpu]") {
  REQUIRE_GPU();
  ThreadPool pool(1);
  std::unique_ptr<Backend> cpu = make_cpu_backend(pool);
  for (int64_t n : {1, 7, 64, 4097}) {
    for (int64_t m : {1, 3}) {
      INFO("m " << m << " n " << n);
      const std::vector<float> x = gauss(m * n, 1), w = gauss(n, 2), y = gauss(m * n, 3);
      std::vector<float> want(m * n);
      cpu->rms_norm(x.data(), w.data(), m, n, 1e-5f, want.data());
      auto dx = cuda::to_device(x.data(), x.size()), dw = cuda::to_device(w.data(), w.size()),
           dy = cuda::to_device(y.data(), y.size());
      cuda::DeviceBuffer dout(m * n * sizeof(float));
      cuda::launch_rms_norm(dx.as<float>(), dw.as<float>(), m, n, 1e-5f, dout.as<float>(), nullptr);
      cuda::device_synchronize();
      require_close(from_device<float>(dout, m * n), want, 1e-5f, 1e-5f);

      cpu->swiglu(x.data(), y.data(), want.data(), m * n);
      cuda::launch_swiglu(dx.as<float>(), dy.as<float>(), dout.as<float>(), m * n, nullptr);
      cuda::device_synchronize();
      require_close(from_device<float>(dout, m * n), want, 1e-6f, 1e-5f);

      want = x;
      cpu->add(want.data(), y.data(), m * n);
      cuda::launch_add(dx.as<float>(), dy.as<float>(), m * n, nullptr);
      cuda::device_synchronize();
      REQUIRE(from_device<float>(dx, m * n) == want);  // exact

      std::vector<float> logits = gauss(m * n, 4);
      if (n > 5) logits[n - 1] = logits[2] = 100.0f;  // a tie: the first wins
      auto dl = cuda::to_device(logits.data(), logits.size());
      cuda::DeviceBuffer dam(m * sizeof(int32_t));
      cuda::launch_argmax(dl.as<float>(), m, n, dam.as<int32_t>(), nullptr);
      cuda::device_synchronize();
      const std::vector<int32_t> am = from_device<int32_t>(dam, m);
      for (int64_t r = 0; r < m; ++r)
        CHECK(am[r] == std::max_element(logits.begin() + r * n, logits.begin() + (r + 1) * n) - (logits.begin() + r * n));
    }
  }
  // RoPE: both pair layouts, partial rotation, scaled positions.
  for (bool neox : {false, true})
    for (int n_rot : {64, 32}) {
      const int m = 5, n_heads = 3, hd = 64;
      std::vector<float> freq(n_rot / 2);
      for (int i = 0; i < n_rot / 2; ++i) freq[i] = std::pow(10000.0f, -2.0f * i / n_rot);
      const std::vector<int32_t> pos = {0, 1, 17, 400, 4095};
      RopeParams rp;
      rp.n_rot = n_rot;
      rp.neox = neox;
      rp.inv_freq = freq.data();
      rp.pos_scale = 0.5f;
      rp.mscale = 1.1f;
      std::vector<float> x = gauss(m * n_heads * hd, 5);
      auto dx = cuda::to_device(x.data(), x.size());
      auto dpos = cuda::to_device(pos.data(), pos.size());
      auto dfreq = cuda::to_device(freq.data(), freq.size());
      cpu->rope(x.data(), m, n_heads, hd, pos.data(), rp);
      cuda::launch_rope(dx.as<float>(), m, n_heads, hd, dpos.as<int32_t>(), n_rot, neox, dfreq.as<float>(), 0.5f, 1.1f,
                        nullptr);
      cuda::device_synchronize();
      INFO("neox " << neox << " n_rot " << n_rot);
      require_close(from_device<float>(dx, x.size()), x, 1e-4f, 1e-4f);
    }
}

namespace {

// y = x · Wᵀ in double from the weights as the GPU sees them (wd: the
// dequantized rows; `w16`: each weight rounded to f16, as the W4A16 kernel's
// (q - z) * d is; `x16`: the activations rounded to f16), and sum |x w| per
// output, the scale of its rounding error.
void exact_matmul(const std::vector<float>& wd, int64_t n_out, int64_t n_in, const std::vector<float>& x, int64_t m,
                  bool w16, bool x16, std::vector<double>& ref, std::vector<double>& mag) {
  auto r16 = [](float v) { return fp16_to_f32(f32_to_fp16(v)); };
  ref.assign(m * n_out, 0.0);
  mag.assign(m * n_out, 0.0);
  for (int64_t t = 0; t < m; ++t)
    for (int64_t n = 0; n < n_out; ++n) {
      double s = 0, a = 0;
      for (int64_t k = 0; k < n_in; ++k) {
        const double wv = w16 ? r16(wd[n * n_in + k]) : wd[n * n_in + k];
        const double xv = x16 ? r16(x[t * n_in + k]) : x[t * n_in + k];
        s += wv * xv;
        a += std::fabs(wv * xv);
      }
      ref[t * n_out + n] = s;
      mag[t * n_out + n] = a;
    }
}

// A GPU matmul: within f32 accumulation error of the exact result of its own
// inputs, and within 2% (relative L2) of the CPU backend, whose quantized
// kernels round the activations to int8 blocks.
void check_matmul(const std::vector<float>& got, const std::vector<float>& cpu, const std::vector<double>& ref,
                  const std::vector<double>& mag) {
  double d2 = 0, c2 = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    INFO("i " << i << " got " << got[i] << " exact " << ref[i] << " cpu " << cpu[i]);
    REQUIRE(std::fabs(got[i] - ref[i]) <= 2e-4 * mag[i] + 1e-6);
    d2 += (got[i] - cpu[i]) * static_cast<double>(got[i] - cpu[i]);
    c2 += cpu[i] * static_cast<double>(cpu[i]);
  }
  CHECK(std::sqrt(d2) <= 0.02 * std::sqrt(c2) + 1e-6);
}

}  // namespace

// The backend itself (core/backend.h's memory contract): activations in its
// workspace on the device, the ops on device pointers, host index lists and
// model vectors as host memory, results back through download().
TEST_CASE("CUDA GPU: the backend's ops on its device workspace equal the CPU backend", "[cuda][gpu]") {
  REQUIRE_GPU();
  ThreadPool pool(1);
  std::unique_ptr<Backend> cpu = make_cpu_backend(pool);
  std::unique_ptr<Backend> gpu = make_backend(BackendKind::Cuda, pool);
  std::unique_ptr<BackendWorkspace> ws = gpu->make_workspace();
  const int64_t m = 5, n = 96;
  const std::vector<float> x = gauss(m * n, 11), y = gauss(m * n, 12), bias = gauss(n, 13);
  auto up = [&](int slot, const std::vector<float>& v) {
    float* d = ws->get<float>(slot, static_cast<int64_t>(v.size()));
    cuda::copy_to_device(d, v.data(), v.size() * sizeof(float));
    return d;
  };
  auto down = [&](const float* d, size_t count) {
    std::vector<float> h(count);
    ws->download(h.data(), d, count * sizeof(float));
    return h;
  };
  // The edge out: output() is device memory, download() brings it back.
  std::vector<float> host(4);
  CHECK(ws->output(9, host.data(), host.size() * sizeof(float)) != host.data());

  std::vector<float> want(m * n);
  float* dx = up(0, x);
  float* dy = up(1, y);
  float* dout = ws->get<float>(2, m * n);
  cpu->geglu(x.data(), y.data(), want.data(), m * n);
  gpu->geglu(dx, dy, dout, m * n);
  require_close(down(dout, m * n), want, 1e-6f, 1e-5f);

  want = x;
  cpu->add_bias(want.data(), bias.data(), m, n);
  gpu->add_bias(dx, bias.data(), m, n);
  REQUIRE(down(dx, m * n) == want);  // exact
  cpu->scale(want.data(), m * n, 0.25f);
  gpu->scale(dx, m * n, 0.25f);
  REQUIRE(down(dx, m * n) == want);
  cpu->softcap(want.data(), m * n, 1.5f);
  gpu->softcap(dx, m * n, 1.5f);
  require_close(down(dx, m * n), want, 1e-6f, 1e-5f);

  std::vector<int32_t> perm(n);
  for (int64_t j = 0; j < n; ++j) perm[j] = static_cast<int32_t>((j * 37) % n);  // 37 is prime to 96
  dx = up(0, x);
  cpu->permute_cols(x.data(), m, n, perm.data(), want.data());
  gpu->permute_cols(dx, m, n, perm.data(), dout);
  REQUIRE(down(dout, m * n) == want);

  const std::vector<int32_t> rows = {4, 0, 2};
  const std::vector<float> rw = {0.5f, 0.25f, 0.125f};
  std::vector<float> g(rows.size() * n);
  cpu->gather_rows(x.data(), rows.data(), 3, n, g.data());
  gpu->gather_rows(dx, rows.data(), 3, n, dout);
  REQUIRE(down(dout, 3 * n) == g);

  std::vector<float> acc(m * n, 0.0f);
  float* dacc = ws->get<float>(3, m * n);
  gpu->zero(dacc, m * n);
  cpu->scatter_add_rows(acc.data(), rows.data(), rw.data(), y.data(), 3, n);
  gpu->scatter_add_rows(dacc, rows.data(), rw.data(), dy, 3, n);
  REQUIRE(down(dacc, m * n) == acc);  // no fused multiply-add: the CPU's bits
  gpu->copy(dout, dacc, m * n);
  REQUIRE(down(dout, m * n) == acc);
}

TEST_CASE("CUDA GPU: W4A16 and Q8_0 matmuls equal the CPU backend at M = 1..8", "[cuda][gpu]") {
  REQUIRE_GPU();
  ThreadPool pool(1);
  std::unique_ptr<Backend> cpu = make_cpu_backend(pool);
  const DType types[] = {DType::Q4_0, DType::INT4_G32, DType::INT4_G64, DType::INT4_G128, DType::Q8_0};
  for (DType t : types)
    for (int64_t n_out : {1, 17, 100, 4096})
      for (int64_t n_in : {128, 384, 4096}) {
        const std::vector<float> wf = gauss(n_out * n_in, 11);
        const size_t rb = dtype_row_bytes(t, n_in);
        std::vector<uint8_t> wq(rb * n_out);
        std::vector<float> wd(n_out * n_in);
        for (int64_t r = 0; r < n_out; ++r) {
          quantize_row(t, wf.data() + r * n_in, wq.data() + r * rb, n_in);
          dequantize_row(t, wq.data() + r * rb, wd.data() + r * n_in, n_in);
        }
        WeightView w;
        w.type = t;
        w.n_in = n_in;
        w.n_out = n_out;
        w.data = wq.data();
        w.row_bytes = rb;
        const bool q8 = t == DType::Q8_0;
        cuda::W4Weights r4;
        cuda::Q8Weights r8;
        cuda::DeviceBuffer dq, ds, dz;
        if (q8) {
          r8 = cuda::repack_q8_0(w);
          dq = cuda::to_device(r8.q.data(), r8.q.size());
          ds = cuda::to_device(r8.d.data(), r8.d.size());
        } else {
          r4 = cuda::repack_w4(w);
          dq = cuda::to_device(r4.q.data(), r4.q.size());
          ds = cuda::to_device(r4.scale.data(), r4.scale.size());
          dz = cuda::to_device(r4.zero.data(), r4.zero.size());
        }
        for (int m : {1, 2, 5, 8}) {
          INFO(dtype_name(t) << " " << n_out << " x " << n_in << " m " << m);
          const std::vector<float> x = gauss(m * n_in, 12 + m);
          std::vector<float> want(m * n_out);
          cpu->matmul(w, x.data(), m, want.data());
          auto dx = cuda::to_device(x.data(), x.size());
          cuda::DeviceBuffer dy(m * n_out * sizeof(float));
          if (q8)
            cuda::launch_q8_0_matvec(dq.as<int8_t>(), ds.as<uint16_t>(), n_out, n_in, dx.as<float>(), m,
                                     dy.as<float>(), nullptr);
          else
            cuda::launch_w4a16_gemm(dq.as<uint32_t>(), ds.as<uint16_t>(), dz.as<uint8_t>(), r4.L, dx.as<float>(), m,
                                    dy.as<float>(), nullptr);
          cuda::device_synchronize();
          std::vector<double> ref, mag;
          // W4A16: f16 weights and activations; Q8_0: f32 activations.
          exact_matmul(wd, n_out, n_in, x, m, !q8, !q8, ref, mag);
          check_matmul(from_device<float>(dy, want.size()), want, ref, mag);
        }
      }
}

TEST_CASE("CUDA GPU: cuBLAS F16 GEMM (loaded at run time) equals the CPU backend", "[cuda][gpu]") {
  REQUIRE_GPU();
  ThreadPool pool(1);
  std::unique_ptr<Backend> cpu = make_cpu_backend(pool);
  cuda::Cublas blas;
  for (int64_t n_out : {1, 17, 1000})
    for (int64_t n_in : {64, 4096}) {
      const std::vector<float> wf = gauss(n_out * n_in, 51);
      std::vector<uint16_t> w16(wf.size());
      quantize_row(DType::F16, wf.data(), w16.data(), static_cast<int64_t>(wf.size()));
      std::vector<float> wd(wf.size());
      for (size_t i = 0; i < wd.size(); ++i) wd[i] = fp16_to_f32(w16[i]);
      WeightView w;
      w.type = DType::F16;
      w.n_in = n_in;
      w.n_out = n_out;
      w.data = reinterpret_cast<const uint8_t*>(w16.data());
      w.row_bytes = static_cast<size_t>(n_in) * 2;
      auto dw = cuda::to_device(w16.data(), w16.size());
      for (int64_t m : {1, 3, 8, 33}) {
        INFO(n_out << " x " << n_in << " m " << m);
        const std::vector<float> x = gauss(m * n_in, 52 + m);
        std::vector<float> want(m * n_out);
        cpu->matmul(w, x.data(), m, want.data());
        auto dx = cuda::to_device(x.data(), x.size());
        cuda::DeviceBuffer dx16(x.size() * 2), dy(want.size() * sizeof(float));
        cuda::launch_f32_to_f16(dx.as<float>(), dx16.as<uint16_t>(), m * n_in, nullptr);
        blas.gemm_f16(dw.as<uint16_t>(), n_out, n_in, dx16.as<uint16_t>(), m, dy.as<float>(), nullptr);
        cuda::device_synchronize();
        std::vector<double> ref, mag;
        exact_matmul(wd, n_out, n_in, x, m, false, true, ref, mag);
        check_matmul(from_device<float>(dy, want.size()), want, ref, mag);
      }
    }
}

TEST_CASE("CUDA GPU: paged flash-decoding attention over f16 KV equals the CPU backend", "[cuda][gpu]") {
  REQUIRE_GPU();
  ThreadPool pool(1);
  std::unique_ptr<Backend> cpu = make_cpu_backend(pool);
  const infer_test::AttnCase cases[] = {{8, 8, 64, 16, 0, 0.0f}, {32, 8, 128, 16, 0, 0.0f}, {4, 1, 256, 8, 0, 0.0f},
                                        {6, 2, 96, 16, 37, 0.0f}, {8, 4, 64, 4, 0, 50.0f}};
  for (const infer_test::AttnCase& c : cases) {
    INFO("heads " << c.n_head << "/" << c.n_kv << " hd " << c.hd << " bs " << c.bs << " window " << c.window);
    // Sequences of awkward lengths over scattered blocks; each one's last token attends.
    const infer_test::AttnFixture f(*cpu, c, {1, c.bs + 3, 700}, 160);
    const int n_tok = static_cast<int>(f.pos.size());
    size_t max_blocks = 0;
    for (const auto& t : f.tables) max_blocks = std::max(max_blocks, t.size());
    std::vector<int32_t> flat(n_tok * max_blocks, -1);
    for (int t = 0; t < n_tok; ++t) std::copy(f.tables[t].begin(), f.tables[t].end(), flat.begin() + t * max_blocks);
    auto dpool = cuda::to_device(f.pool(), f.pool_elems());
    auto dq = cuda::to_device(f.q.data(), f.q.size()), dpos = cuda::to_device(f.pos.data(), f.pos.size()),
         dtab = cuda::to_device(flat.data(), flat.size());
    for (int n_splits : {1, 3, cuda::paged_attention_splits(699, c.bs)}) {
      INFO("splits " << n_splits);
      cuda::DeviceBuffer work(cuda::paged_attention_work_floats(n_tok, c.n_head, c.hd, n_splits) * sizeof(float));
      cuda::DeviceBuffer dout(f.q.size() * sizeof(float));
      cuda::PagedAttention a;
      a.q = dq.as<float>();
      a.pool = dpool.as<uint16_t>();
      a.addr = infer_test::kv_addr(f.L);
      a.layer = f.layer;
      a.n_tokens = n_tok;
      a.n_head = c.n_head;
      a.pos = dpos.as<int32_t>();
      a.tables = dtab.as<int32_t>();
      a.table_stride = static_cast<int>(max_blocks);
      a.window = c.window;
      a.scale = f.scale;
      a.softcap = c.softcap;
      a.n_splits = n_splits;
      a.work = work.as<float>();
      a.out = dout.as<float>();
      cuda::launch_paged_attention(a, nullptr);
      cuda::device_synchronize();
      require_close(from_device<float>(dout, f.q.size()), f.want, 2e-5f, 1e-4f);
    }
  }
}

TEST_CASE("CUDA GPU: KV rows written into the paged f16 pool are the CPU backend's bytes", "[cuda][gpu]") {
  REQUIRE_GPU();
  ThreadPool pool(1);
  std::unique_ptr<Backend> cpu = make_cpu_backend(pool);
  const infer_test::AttnCase c{8, 2, 96, 16, 0, 0.0f};
  const infer_test::AttnFixture f(*cpu, c, {1, 17, 300}, 40);
  const cuda::layout::KvAddr a = infer_test::kv_addr(f.L);
  const std::vector<uint16_t> zeros(f.pool_elems(), 0);
  auto dpool = cuda::to_device(zeros.data(), zeros.size());
  for (size_t s = 0; s < f.tables.size(); ++s) {
    const int n = static_cast<int>(f.k[s].size() / (c.n_kv * c.hd));
    std::vector<int32_t> pos(n), flat;
    for (int p = 0; p < n; ++p) {
      pos[p] = p;
      flat.insert(flat.end(), f.tables[s].begin(), f.tables[s].end());
    }
    auto dk = cuda::to_device(f.k[s].data(), f.k[s].size()), dv = cuda::to_device(f.v[s].data(), f.v[s].size()),
         dpos = cuda::to_device(pos.data(), pos.size()), dtab = cuda::to_device(flat.data(), flat.size());
    for (int l = 0; l < f.L.n_layers; ++l)
      cuda::launch_kv_write(dpool.get(), false, a, l, dk.as<float>(), dv.as<float>(), n, dpos.as<int32_t>(),
                                dtab.as<int32_t>(), static_cast<int>(f.tables[s].size()), nullptr);
  }
  cuda::device_synchronize();
  const std::vector<uint16_t> got = from_device<uint16_t>(dpool, f.pool_elems());
  const uint16_t* want = f.pool();
  for (size_t s = 0; s < f.tables.size(); ++s) {
    const int n = static_cast<int>(f.k[s].size() / (c.n_kv * c.hd));
    for (int l = 0; l < f.L.n_layers; ++l)
      for (int p = 0; p < n; ++p)
        for (int is_v = 0; is_v < 2; ++is_v)
          for (int h = 0; h < c.n_kv; ++h)
            for (int d = 0; d < c.hd; ++d) {
              const int64_t i = cuda::layout::kv_elem(a, l, f.tables[s][p / c.bs], is_v, h, p % c.bs, d);
              INFO("seq " << s << " layer " << l << " pos " << p << " v " << is_v << " head " << h << " dim " << d);
              REQUIRE(got[i] == want[i]);
            }
  }
}

TEST_CASE("CUDA GPU: the CUDA backend's greedy tokens equal the CPU backend's (stories260K)", "[cuda][gpu]") {
  REQUIRE_GPU();
  NEED_MODEL(on_cpu);
  auto on_gpu = infer_test::stories260k();
  prepare_model(*on_cpu, BackendKind::Cpu, 1);
  prepare_model(*on_gpu, BackendKind::Cuda, 1);
  REQUIRE(on_gpu->backend() == BackendKind::Cuda);
  const std::vector<int32_t> prompt = {1, 403, 407, 261, 378};
  for (KvType t : {KvType::F32, KvType::F16}) {
    INFO("kv " << kv_type_name(t));
    const std::vector<int32_t> want = infer_test::greedy_tokens(*on_cpu, prompt, t, 16);
    const std::vector<int32_t> got = infer_test::greedy_tokens(*on_gpu, prompt, t, 16);
    REQUIRE(want.size() == 16);
    CHECK(got == want);
  }
}

#else
TEST_CASE("CUDA: kernels and loader", "[cuda]") { WARN("SKIPPED: built without the CUDA backend"); }
#endif
