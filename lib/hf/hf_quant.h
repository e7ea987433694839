// GPTQ / AWQ 4-bit layers repacked into INT4_G blocks (see hf_quant.cpp for
// the two packings, act-order and group sizes other than 32/64/128).
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
  // Whether the model can apply an input permutation to this matrix (false
  // for matrices the model does not multiply through Transformer::weight:
  // the embedding, the MoE router): act-order layers are expanded to F32.
  bool allow_perm = true;
};

struct PackedInt4 {
  DType type = DType::INT4_G128;  // or F32 when the groups cannot be blocks
  std::vector<uint8_t> bytes;     // [n_out] rows
  // Act-order: empty when the rows hold the inputs in order; else n_in
  // values, column j of the rows being input perm[j] (the model multiplies
  // x[perm]; stored as the companion tensor "<name>.perm", I32).
  std::vector<int32_t> perm;
  std::string note;               // why the layer was expanded to F32 ("" when it was not)
};

// Error(Format) for inconsistent shapes or a g_idx naming no group.
PackedInt4 repack_int4(const QuantLayer& layer);

}  // namespace hf
}  // namespace infer
