// Reference dequantization of every GGUF block format to f32, bit-exact with
// the format's definition (the scalar "truth" the fast kernels are tested
// against).
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/dtype.h"

namespace infer {

// Converts n values of type t starting at src into dst. n must be a multiple
// of the type's block size (Error(InvalidArgument) otherwise); Error(Unsupported)
// for a type that cannot be dequantized.
void dequantize_row(DType t, const void* src, float* dst, int64_t n);

}  // namespace infer
