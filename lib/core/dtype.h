// Element types of tensors as GGUF numbers them (ggml_type), plus the facts
// about each block format: how many values a block holds and how many bytes it
// takes. Row sizes are computed from these, never assumed.
#pragma once

#include <cstddef>
#include <cstdint>

namespace infer {

enum class DType : uint32_t {
  F32 = 0,
  F16 = 1,
  Q4_0 = 2,
  Q4_1 = 3,
  // 4 and 5 were Q4_2 / Q4_3, removed from the format.
  Q5_0 = 6,
  Q5_1 = 7,
  Q8_0 = 8,
  Q8_1 = 9,
  Q2_K = 10,
  Q3_K = 11,
  Q4_K = 12,
  Q5_K = 13,
  Q6_K = 14,
  Q8_K = 15,
  I8 = 24,
  I16 = 25,
  I32 = 26,
  I64 = 27,
  F64 = 28,
  BF16 = 30,

  // ---- libinfer's own weight formats (not part of ggml's numbering) --------------
  // Ids are far above ggml's range, so a GGUF reader that does not know them
  // stops with "unknown tensor type" instead of misreading the bytes. Files
  // that use them carry the metadata keys listed in lib/quant/formats.h
  // ("infer.quant.*").
  //
  // W8A8: per-output-channel symmetric int8 weights. The tensor holds the
  //   int8 values only (n_in bytes per row); the per-row f32 scales are the
  //   companion tensor "<name>.scale" (F32, n_out values): w = q * scale[row].
  //   Activations are quantized per token to int8 at run time.
  W8A8 = 1008,
  // INT4_G{32,64,128} (W4A16): group-wise asymmetric 4-bit weights. Block of
  //   G values: f16 d | u8 z (zero point, 0..15) | u8 0 | u8 qs[G/2], where
  //   byte j holds value j in its low nibble and value j + G/2 in its high
  //   nibble; w = (q - z) * d. 4 + G/2 bytes per block.
  INT4_G32 = 1032,
  INT4_G64 = 1064,
  INT4_G128 = 1128,
};

struct DTypeInfo {
  const char* name;   // "f32", "q4_0", ...
  uint32_t block;     // values per block (1 for plain types)
  uint32_t bytes;     // bytes per block
};

// Returns nullptr for a type number this library does not know.
const DTypeInfo* dtype_info(uint32_t type);
inline const DTypeInfo* dtype_info(DType t) { return dtype_info(static_cast<uint32_t>(t)); }
const char* dtype_name(DType t);

// Bytes taken by a row of n values; n must be a multiple of the block size
// (callers check with dtype_row_ok first).
inline size_t dtype_row_bytes(DType t, int64_t n) {
  const DTypeInfo* in = dtype_info(t);
  return static_cast<size_t>(n / in->block) * in->bytes;
}
inline bool dtype_row_ok(DType t, int64_t n) {
  const DTypeInfo* in = dtype_info(t);
  return in != nullptr && n >= 0 && n % in->block == 0;
}

// Whether dequantize_row (lib/quant/dequant.h) can turn this type into floats.
// False for W8A8, whose rows need their companion scales (cpu/matmul.h's
// weight_row_f32 handles it).
bool dtype_can_dequantize(DType t);

// libinfer's own formats (W8A8, INT4_G*): ids other GGUF readers do not know.
bool dtype_is_infer_own(DType t);

}  // namespace infer
