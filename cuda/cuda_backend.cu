#include "cuda_backend.h"

#include <cuda_runtime.h>

#include "core/error.h"

namespace infer::cuda {

int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky error
    return 0;
  }
  return n;
}

DeviceProbe probe_devices() {
  DeviceProbe p;
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    cudaGetLastError();
    switch (e) {
      case cudaErrorInsufficientDriver:
        p.state = DeviceState::NoDriver;
        p.reason = "no usable NVIDIA driver (libcuda.so.1 missing or older than CUDA 13 needs)";
        break;
      case cudaErrorNoDevice:
        p.state = DeviceState::NoDevice;
        p.reason = "the NVIDIA driver sees no CUDA device (check CUDA_VISIBLE_DEVICES)";
        break;
      default:
        p.state = DeviceState::Error;
        p.reason = std::string("the CUDA runtime cannot start: ") + cudaGetErrorString(e);
        break;
    }
    return p;
  }
  p.n_devices = n;
  if (n == 0) {
    p.state = DeviceState::NoDevice;
    p.reason = "no CUDA device visible";
    return p;
  }
  std::string seen;
  for (int i = 0; i < n; ++i) {
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, i) != cudaSuccess) {
      cudaGetLastError();
      continue;
    }
    if (prop.major >= 8) {
      p.state = DeviceState::Usable;
      p.device = i;
      p.name = prop.name;
      return p;
    }
    seen += (seen.empty() ? "" : ", ") + std::string(prop.name) + " (sm_" + std::to_string(prop.major) +
            std::to_string(prop.minor) + ")";
  }
  p.state = DeviceState::TooOld;
  p.reason = "no CUDA device of compute capability 8.0 or newer (found " + seen + ")";
  return p;
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

DeviceBuffer::DeviceBuffer(size_t bytes) : n_(bytes) {
  if (bytes == 0) return;
  const cudaError_t e = cudaMalloc(&p_, bytes);
  if (e != cudaSuccess) {
    cudaGetLastError();
    p_ = nullptr;
    n_ = 0;
    raise(e == cudaErrorMemoryAllocation ? Status::OutOfMemory : Status::Backend, "CUDA: cannot allocate %zu bytes: %s",
          bytes, cudaGetErrorString(e));
  }
}

DeviceBuffer::~DeviceBuffer() {
  if (p_) cudaFree(p_);
}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
  if (this != &o) {
    if (p_) cudaFree(p_);
    p_ = o.p_;
    n_ = o.n_;
    o.p_ = nullptr;
    o.n_ = 0;
  }
  return *this;
}

void DeviceBuffer::upload(const void* src, size_t bytes) {
  if (bytes > n_) raise(Status::Internal, "CUDA upload of %zu bytes into %zu", bytes, n_);
  const cudaError_t e = cudaMemcpy(p_, src, bytes, cudaMemcpyHostToDevice);
  if (e != cudaSuccess) raise(Status::Backend, "CUDA upload: %s", cudaGetErrorString(e));
}

void DeviceBuffer::download(void* dst, size_t bytes) const {
  if (bytes > n_) raise(Status::Internal, "CUDA download of %zu bytes from %zu", bytes, n_);
  const cudaError_t e = cudaMemcpy(dst, p_, bytes, cudaMemcpyDeviceToHost);
  if (e != cudaSuccess) raise(Status::Backend, "CUDA download: %s", cudaGetErrorString(e));
}

namespace {
void copy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind, const char* what) {
  if (bytes == 0) return;
  const cudaError_t e = cudaMemcpy(dst, src, bytes, kind);
  if (e != cudaSuccess) raise(Status::Backend, "CUDA %s of %zu bytes: %s", what, bytes, cudaGetErrorString(e));
}
}  // namespace

void copy_to_device(void* dst, const void* src, size_t bytes) { copy(dst, src, bytes, cudaMemcpyHostToDevice, "upload"); }
void copy_to_host(void* dst, const void* src, size_t bytes) { copy(dst, src, bytes, cudaMemcpyDeviceToHost, "download"); }
void copy_on_device(void* dst, const void* src, size_t bytes) { copy(dst, src, bytes, cudaMemcpyDeviceToDevice, "copy"); }

void zero_device(void* dst, size_t bytes) {
  if (bytes == 0) return;
  const cudaError_t e = cudaMemset(dst, 0, bytes);
  if (e != cudaSuccess) raise(Status::Backend, "CUDA memset: %s", cudaGetErrorString(e));
}

void use_device(int i) {
  const cudaError_t e = cudaSetDevice(i);
  if (e != cudaSuccess) raise(Status::Backend, "CUDA: cannot use device %d: %s", i, cudaGetErrorString(e));
}

void device_synchronize() {
  const cudaError_t e = cudaDeviceSynchronize();
  if (e != cudaSuccess) raise(Status::Backend, "CUDA: %s", cudaGetErrorString(e));
}

DeviceTimer::DeviceTimer() {
  cudaEvent_t a = nullptr, b = nullptr;
  if (cudaEventCreate(&a) != cudaSuccess || cudaEventCreate(&b) != cudaSuccess) {
    const cudaError_t e = cudaGetLastError();
    if (a) cudaEventDestroy(a);
    raise(Status::Backend, "CUDA events: %s", cudaGetErrorString(e));
  }
  begin_ = a;
  end_ = b;
}

DeviceTimer::~DeviceTimer() {
  cudaEventDestroy(static_cast<cudaEvent_t>(begin_));
  cudaEventDestroy(static_cast<cudaEvent_t>(end_));
}

void DeviceTimer::start(void* stream) { cudaEventRecord(static_cast<cudaEvent_t>(begin_), static_cast<cudaStream_t>(stream)); }

float DeviceTimer::stop_ms(void* stream) {
  cudaEventRecord(static_cast<cudaEvent_t>(end_), static_cast<cudaStream_t>(stream));
  cudaError_t e = cudaEventSynchronize(static_cast<cudaEvent_t>(end_));
  float ms = 0.0f;
  if (e == cudaSuccess) e = cudaEventElapsedTime(&ms, static_cast<cudaEvent_t>(begin_), static_cast<cudaEvent_t>(end_));
  if (e != cudaSuccess) raise(Status::Backend, "CUDA timing: %s", cudaGetErrorString(e));
  return ms;
}

}  // namespace infer::cuda
