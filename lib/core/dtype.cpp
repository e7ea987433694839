#include "core/dtype.h"

namespace infer {

// Block layouts (bytes per block) follow the GGUF / ggml definitions:
// Q4_0: f16 d + 16 bytes of nibbles = 18 for 32 values, and so on.
const DTypeInfo* dtype_info(uint32_t type) {
  static const DTypeInfo kF32{"f32", 1, 4}, kF16{"f16", 1, 2}, kQ4_0{"q4_0", 32, 18},
      kQ4_1{"q4_1", 32, 20}, kQ5_0{"q5_0", 32, 22}, kQ5_1{"q5_1", 32, 24},
      kQ8_0{"q8_0", 32, 34}, kQ8_1{"q8_1", 32, 36}, kQ2_K{"q2_k", 256, 84},
      kQ3_K{"q3_k", 256, 110}, kQ4_K{"q4_k", 256, 144}, kQ5_K{"q5_k", 256, 176},
      kQ6_K{"q6_k", 256, 210}, kQ8_K{"q8_k", 256, 292}, kI8{"i8", 1, 1}, kI16{"i16", 1, 2},
      kI32{"i32", 1, 4}, kI64{"i64", 1, 8}, kF64{"f64", 1, 8}, kBF16{"bf16", 1, 2},
      kW8A8{"w8a8", 1, 1}, kInt4G32{"int4_g32", 32, 20}, kInt4G64{"int4_g64", 64, 36},
      kInt4G128{"int4_g128", 128, 68};
  switch (static_cast<DType>(type)) {
    case DType::F32: return &kF32;
    case DType::F16: return &kF16;
    case DType::Q4_0: return &kQ4_0;
    case DType::Q4_1: return &kQ4_1;
    case DType::Q5_0: return &kQ5_0;
    case DType::Q5_1: return &kQ5_1;
    case DType::Q8_0: return &kQ8_0;
    case DType::Q8_1: return &kQ8_1;
    case DType::Q2_K: return &kQ2_K;
    case DType::Q3_K: return &kQ3_K;
    case DType::Q4_K: return &kQ4_K;
    case DType::Q5_K: return &kQ5_K;
    case DType::Q6_K: return &kQ6_K;
    case DType::Q8_K: return &kQ8_K;
    case DType::I8: return &kI8;
    case DType::I16: return &kI16;
    case DType::I32: return &kI32;
    case DType::I64: return &kI64;
    case DType::F64: return &kF64;
    case DType::BF16: return &kBF16;
    case DType::W8A8: return &kW8A8;
    case DType::INT4_G32: return &kInt4G32;
    case DType::INT4_G64: return &kInt4G64;
    case DType::INT4_G128: return &kInt4G128;
  }
  return nullptr;
}

const char* dtype_name(DType t) {
  const DTypeInfo* in = dtype_info(t);
  return in ? in->name : "unknown";
}

bool dtype_can_dequantize(DType t) {
  switch (t) {
    case DType::F32: case DType::F16: case DType::BF16: case DType::Q4_0: case DType::Q4_1:
    case DType::Q5_0: case DType::Q5_1: case DType::Q8_0: case DType::Q2_K: case DType::Q3_K:
    case DType::Q4_K: case DType::Q5_K: case DType::Q6_K:
    case DType::INT4_G32: case DType::INT4_G64: case DType::INT4_G128:
      return true;
    default:
      return false;
  }
}

bool dtype_is_infer_own(DType t) {
  return t == DType::W8A8 || t == DType::INT4_G32 || t == DType::INT4_G64 || t == DType::INT4_G128;
}

}  // namespace infer
