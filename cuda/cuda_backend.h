// The CUDA backend's entry points seen by the core (plain C++ declarations, no
// CUDA headers): device discovery for the backend factory, and a checked
// round trip through device memory.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "core/backend.h"

namespace infer::cuda {

// Whether this machine can run the CUDA backend, asked once per call (cheap
// after the first: the runtime caches the driver). `reason` is empty when it
// can; otherwise it says why in words meant for a log line or an error
// message: no driver, no device, or no device new enough for the kernels this
// library was compiled for (compute capability 8.0 and newer).
enum class DeviceState { Usable, NoDriver, NoDevice, TooOld, Error };
struct DeviceProbe {
  DeviceState state = DeviceState::Error;
  int n_devices = 0;      // devices visible to the runtime
  int device = -1;        // the first usable one
  std::string name;       // its name
  std::string reason;     // "" when usable
};
DeviceProbe probe_devices();

// Makes device i the calling thread's current device (Error(Backend)).
void use_device(int i);
// The CUDA backend (cuda/backend.cpp) on the probe's device. Only the
// backend factory (lib/backends/) calls it.
std::unique_ptr<Backend> make_cuda_backend();

// Number of visible CUDA devices; 0 when there is no driver or no GPU.
int device_count();
// Name of device i, or "" when it cannot be queried.
std::string device_name(int i);
// Copies n floats to the device, scales them there and copies them back.
// Returns false (and fills err) when any CUDA call fails.
bool scale_roundtrip(const float* in, float* out, int n, float scale, std::string* err);

// Device memory owned by one object (the backend's weights, the GPU tests'
// buffers). Error(OutOfMemory) naming the bytes when it cannot be had,
// Error(Backend) when a copy fails.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t bytes);
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& o) noexcept : p_(o.p_), n_(o.n_) { o.p_ = nullptr, o.n_ = 0; }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  void* get() const { return p_; }
  template <typename T>
  T* as() const { return static_cast<T*>(p_); }
  size_t size() const { return n_; }
  // Copies bytes (at most size()) from / to host memory, waiting for them.
  void upload(const void* src, size_t bytes);
  void download(void* dst, size_t bytes) const;

 private:
  void* p_ = nullptr;
  size_t n_ = 0;
};
// A buffer holding a copy of n host values.
template <typename T>
DeviceBuffer to_device(const T* src, size_t n) {
  DeviceBuffer b(n * sizeof(T));
  b.upload(src, n * sizeof(T));
  return b;
}
// Waits for the device; Error(Backend) with the error a kernel left.
void device_synchronize();
// Copies between host and device memory or within the device, waiting for
// them; Error(Backend) when a copy fails.
void copy_to_device(void* dst, const void* src, size_t bytes);
void copy_to_host(void* dst, const void* src, size_t bytes);
void copy_on_device(void* dst, const void* src, size_t bytes);
void zero_device(void* dst, size_t bytes);

// Elapsed device time between start() and stop_ms() on a stream (CUDA
// events): what the kernels in between took, without host overheads.
class DeviceTimer {
 public:
  DeviceTimer();
  ~DeviceTimer();
  DeviceTimer(const DeviceTimer&) = delete;
  DeviceTimer& operator=(const DeviceTimer&) = delete;
  void start(void* stream = nullptr);
  // Waits for the stop event; milliseconds since start().
  float stop_ms(void* stream = nullptr);

 private:
  void* begin_ = nullptr;
  void* end_ = nullptr;
};

}  // namespace infer::cuda
