// The CUDA backend's entry points seen by the core (plain C++ declarations, no
// CUDA headers). Only the skeleton exists so far: device discovery and a
// checked round trip through device memory.
#pragma once

#include <string>

namespace infer::cuda {

// Number of visible CUDA devices; 0 when there is no driver or no GPU.
int device_count();
// Name of device i, or "" when it cannot be queried.
std::string device_name(int i);
// Copies n floats to the device, scales them there and copies them back.
// Returns false (and fills err) when any CUDA call fails.
bool scale_roundtrip(const float* in, float* out, int n, float scale, std::string* err);

}  // namespace infer::cuda
