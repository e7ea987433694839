// The CUDA backend skeleton (cuda/cuda_backend.h): device discovery and a
// checked round trip through device memory. Built only with the CUDA backend
// (INFER_HAVE_CUDA); without a visible GPU the round trip is skipped
// ("SKIPPED:", reported by CTest as skipped) and what can be checked without
// one is: a machine with no driver or no device is reported, not crashed on.
#include "test_util.h"

#ifdef INFER_HAVE_CUDA
#include <string>
#include <vector>

#include "cuda/cuda_backend.h"

TEST_CASE("CUDA: devices are counted and a missing one is reported", "[cuda]") {
  const int n = infer::cuda::device_count();
  REQUIRE(n >= 0);
  CHECK(infer::cuda::device_name(n).empty());  // past the last device
  CHECK(infer::cuda::device_name(-1).empty());
  for (int i = 0; i < n; ++i) CHECK(!infer::cuda::device_name(i).empty());
  if (n == 0) {
    // Without a device every CUDA call fails: the round trip says so.
    std::vector<float> in(16, 1.0f), out(16, 0.0f);
    std::string err;
    CHECK(!infer::cuda::scale_roundtrip(in.data(), out.data(), 16, 2.0f, &err));
    CHECK(!err.empty());
  }
}

TEST_CASE("CUDA: device round trip", "[cuda]") {
  if (infer::cuda::device_count() == 0) {
    WARN("SKIPPED: no CUDA device visible");
    return;
  }
  INFO("device 0: " << infer::cuda::device_name(0));
  std::vector<float> in(1000), out(1000);
  for (int i = 0; i < 1000; ++i) in[i] = static_cast<float>(i) - 300.25f;
  std::string err;
  REQUIRE(infer::cuda::scale_roundtrip(in.data(), out.data(), 1000, 0.5f, &err));
  for (int i = 0; i < 1000; ++i) REQUIRE(out[i] == in[i] * 0.5f);
  CHECK(err.empty());
}
#else
TEST_CASE("CUDA: device round trip", "[cuda]") { WARN("SKIPPED: built without the CUDA backend"); }
#endif
