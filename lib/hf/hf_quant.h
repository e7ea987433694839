// GPTQ / AWQ 4-bit layers repacked into INT4_G blocks (see hf_quant.cpp for
// the two packings).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace infer {
namespace hf {

struct QuantLayer {
  std::string name;             // for messages
  int64_t n_in = 0, n_out = 0;  // the dequantized matrix is [n_out][n_in]
  int64_t group = 128;
  bool awq = false;             // AWQ GEMM packing, else GPTQ
  bool zero_minus_one = true;   // GPTQ v1 checkpoints store zero - 1
  // Bytes of the checkpoint's tensors (sizes checked by the caller).
  const uint8_t* qweight = nullptr;
  const uint8_t* qzeros = nullptr;
  const uint8_t* scales = nullptr;  // f16
  const uint8_t* g_idx = nullptr;   // i32, may be null
};

struct PackedInt4 {
  DType type = DType::INT4_G128;  // or F32 when the groups cannot be blocks
  std::vector<uint8_t> bytes;     // [n_out] rows
};

// Error(Format) for inconsistent shapes or a g_idx naming no group.
PackedInt4 repack_int4(const QuantLayer& layer);

}  // namespace hf
}  // namespace infer
