// The CUDA backend (cuda/): what a machine without a GPU checks for real
// (the backend factory's fallback and refusal, through C++ and the C API;
// the cuBLAS loader) and, on a GPU, a round trip through device memory.
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
#include "core/error.h"
#include "core/log.h"
#include "core/threadpool.h"
#include "engine/backends.h"
#include "infer/infer.h"
#include "test_util.h"

#ifdef INFER_HAVE_CUDA
#include "cuda/cublas_loader.h"
#include "cuda/cuda_backend.h"
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
  // Without a CudaBackend (issue #16) a usable device also falls back.
  CHECK(resolve_backend(BackendKind::Auto) == BackendKind::Cpu);
  set_log_callback(nullptr, nullptr, LogLevel::Error);
  CHECK(count_fallback_lines() == 1);
  REQUIRE(g_log.size() == 1);
  if (!why.empty()) CHECK(g_log[0].find(why) != std::string::npos);
  // CUDA: the status says whose fault it is, the message why.
  Status want = Status::Unsupported;
#ifdef INFER_HAVE_CUDA
  if (cuda::probe_devices().state != cuda::DeviceState::Usable) want = Status::Backend;
#endif
  REQUIRE_THROWS_MATCHES(resolve_backend(BackendKind::Cuda), Error, Catch::Predicate<Error>([&](const Error& e) {
                           INFO(e.what());
                           return e.status() == want && std::string(e.what()).find("INFER_BACKEND_CUDA: ") == 0 &&
                                  (why.empty() || std::string(e.what()).find(why) != std::string::npos);
                         }));
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
  CHECK(count_fallback_lines() == 1);  // one line per load, not one per step
  infer_model_free(m);

  mp.backend = INFER_BACKEND_CUDA;
  m = nullptr;
  const infer_status st = infer_model_load(path.c_str(), &mp, &m);
  CHECK(m == nullptr);
  const std::string msg = infer_last_error();
  INFO(msg);
#ifdef INFER_HAVE_CUDA
  const bool usable = cuda::probe_devices().state == cuda::DeviceState::Usable;
  CHECK(st == (usable ? INFER_ERR_UNSUPPORTED : INFER_ERR_BACKEND));
#else
  CHECK(st == INFER_ERR_UNSUPPORTED);
#endif
  CHECK(msg.find("INFER_BACKEND_CUDA") != std::string::npos);
  if (!why.empty()) CHECK(msg.find(why) != std::string::npos);
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

TEST_CASE("CUDA GPU: device round trip", "[cuda][gpu]") {
  REQUIRE_GPU();
  std::vector<float> in(1000), out(1000);
  for (int i = 0; i < 1000; ++i) in[i] = static_cast<float>(i) - 300.25f;
  std::string err;
  REQUIRE(cuda::scale_roundtrip(in.data(), out.data(), 1000, 0.5f, &err));
  for (int i = 0; i < 1000; ++i) REQUIRE(out[i] == in[i] * 0.5f);
}

#else
TEST_CASE("CUDA: kernels and loader", "[cuda]") { WARN("SKIPPED: built without the CUDA backend"); }
#endif
