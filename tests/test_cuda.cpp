// The CUDA backend skeleton: compiled whenever nvcc is present; these tests
// skip (with a message) when the build has no CUDA or no GPU is visible.
#include "test_util.h"

#ifdef INFER_HAVE_CUDA
#include "cuda/cuda_backend.h"

TEST_CASE("CUDA device round trip", "[cuda]") {
  if (infer::cuda::device_count() == 0) {
    WARN("SKIPPED: no CUDA device visible");
    return;
  }
  INFO("device 0: " << infer::cuda::device_name(0));
  std::vector<float> in(1000), out(1000);
  for (int i = 0; i < 1000; ++i) in[i] = static_cast<float>(i);
  std::string err;
  REQUIRE(infer::cuda::scale_roundtrip(in.data(), out.data(), 1000, 0.5f, &err));
  for (int i = 0; i < 1000; ++i) REQUIRE(out[i] == in[i] * 0.5f);
}
#else
TEST_CASE("CUDA device round trip", "[cuda]") { WARN("SKIPPED: built without the CUDA backend"); }
#endif
