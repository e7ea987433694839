#include "model/weight_check.h"

#include <algorithm>
#include <cstring>

#include "core/dtype.h"
#include "core/error.h"
#include "gguf/gguf.h"

namespace infer {

namespace {

// Index of the first value whose exponent bits (`exp_mask` of the `Word` at
// every `stride` bytes from `offset`) are all set: inf or NaN; or -1.
// Branch-free inner loops over fixed-size chunks so the compiler vectorizes
// them. f32: Word uint32_t, mask 0x7f800000; 16-bit floats: mask 0x7c00
// (f16) or 0x7f80 (bf16) (whole tensors: stride 2, offset 0).
template <typename Word>
int64_t first_bad(const uint8_t* p, int64_t n, size_t stride, size_t offset, Word exp_mask) {
  constexpr int64_t kChunk = 1024;
  for (int64_t i0 = 0; i0 < n; i0 += kChunk) {
    const int64_t m = std::min(kChunk, n - i0);
    uint32_t any = 0;
    for (int64_t i = 0; i < m; ++i) {
      Word u;
      std::memcpy(&u, p + (i0 + i) * stride + offset, sizeof(Word));
      any |= static_cast<uint32_t>((u & exp_mask) == exp_mask);
    }
    if (any)
      for (int64_t i = 0; i < m; ++i) {
        Word u;
        std::memcpy(&u, p + (i0 + i) * stride + offset, sizeof(Word));
        if ((u & exp_mask) == exp_mask) return i0 + i;
      }
  }
  return -1;
}

int64_t first_bad_f32(const uint8_t* p, int64_t n) { return first_bad<uint32_t>(p, n, 4, 0, 0x7f800000u); }

int64_t first_bad_16(const uint8_t* p, int64_t n, size_t stride, size_t offset, uint16_t exp_mask) {
  return first_bad<uint16_t>(p, n, stride, offset, exp_mask);
}

struct ScaleField {
  size_t offset;
  bool f32;  // else f16
};

// Where the float fields of each block format sit (ggml's block layouts;
// INT4_G*: lib/core/dtype.h). Up to two per block; {0, false} pairs past
// `n` are unused.
struct BlockScales {
  uint32_t block_bytes;
  int n;
  ScaleField f[2];
};

bool block_scales(DType t, BlockScales& out) {
  switch (t) {
    case DType::Q4_0: out = {18, 1, {{0, false}, {}}}; break;
    case DType::Q4_1: out = {20, 2, {{0, false}, {2, false}}}; break;
    case DType::Q5_0: out = {22, 1, {{0, false}, {}}}; break;
    case DType::Q5_1: out = {24, 2, {{0, false}, {2, false}}}; break;
    case DType::Q8_0: out = {34, 1, {{0, false}, {}}}; break;
    case DType::Q8_1: out = {36, 2, {{0, false}, {2, false}}}; break;
    case DType::Q2_K: out = {84, 2, {{80, false}, {82, false}}}; break;
    case DType::Q3_K: out = {110, 1, {{108, false}, {}}}; break;
    case DType::Q4_K: out = {144, 2, {{0, false}, {2, false}}}; break;
    case DType::Q5_K: out = {176, 2, {{0, false}, {2, false}}}; break;
    case DType::Q6_K: out = {210, 1, {{208, false}, {}}}; break;
    case DType::Q8_K: out = {292, 1, {{0, true}, {}}}; break;
    case DType::INT4_G32:
    case DType::INT4_G64:
    case DType::INT4_G128: {
      const DTypeInfo* info = dtype_info(t);
      out = {info ? info->bytes : 0, 1, {{0, false}, {}}};
      break;
    }
    default: return false;
  }
  const DTypeInfo* info = dtype_info(t);
  return info && info->bytes == out.block_bytes;  // a layout we do not know exactly: not checked
}

}  // namespace

void check_finite_weights(const GgufFile& gguf) {
  for (const GgufTensorInfo& t : gguf.tensors()) {
    const uint8_t* p = gguf.tensor_data(t);
    if (!p || t.nbytes == 0) continue;
    int64_t bad = -1;
    const char* what = "value";
    switch (t.type) {
      case DType::F32: bad = first_bad_f32(p, static_cast<int64_t>(t.nbytes / 4)); break;
      case DType::F16: bad = first_bad_16(p, static_cast<int64_t>(t.nbytes / 2), 2, 0, 0x7c00); break;
      case DType::BF16: bad = first_bad_16(p, static_cast<int64_t>(t.nbytes / 2), 2, 0, 0x7f80); break;
      default: {
        BlockScales bs;
        if (!block_scales(t.type, bs)) break;
        const int64_t n_blocks = static_cast<int64_t>(t.nbytes / bs.block_bytes);
        what = "block scale";
        for (int k = 0; k < bs.n && bad < 0; ++k) {
          if (bs.f[k].f32) {
            for (int64_t b = 0; b < n_blocks && bad < 0; ++b)
              if (first_bad_f32(p + b * bs.block_bytes + bs.f[k].offset, 1) == 0) bad = b;
          } else {
            bad = first_bad_16(p, n_blocks, bs.block_bytes, bs.f[k].offset, 0x7c00);
          }
        }
        break;
      }
    }
    if (bad >= 0)
      raise(Status::Format, "tensor '%s' (%s) has a NaN or Inf %s at index %lld", t.name.c_str(),
            dtype_name(t.type), what, static_cast<long long>(bad));
  }
}

}  // namespace infer
