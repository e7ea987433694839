#include "cuda_backend.h"

#include <cuda_runtime.h>

namespace infer::cuda {

int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky error
    return 0;
  }
  return n;
}

std::string device_name(int i) {
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, i) != cudaSuccess) return std::string();
  return prop.name;
}

__global__ void scale_kernel(float* x, int n, float s) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] *= s;
}

bool scale_roundtrip(const float* in, float* out, int n, float scale, std::string* err) {
  float* d = nullptr;
  auto check = [&](cudaError_t e) {
    if (e == cudaSuccess) return true;
    if (err) *err = cudaGetErrorString(e);
    return false;
  };
  if (!check(cudaMalloc(&d, sizeof(float) * n))) return false;
  bool ok = check(cudaMemcpy(d, in, sizeof(float) * n, cudaMemcpyHostToDevice));
  if (ok) {
    scale_kernel<<<(n + 255) / 256, 256>>>(d, n, scale);
    ok = check(cudaGetLastError()) && check(cudaMemcpy(out, d, sizeof(float) * n, cudaMemcpyDeviceToHost));
  }
  cudaFree(d);
  return ok;
}

}  // namespace infer::cuda
