#include "cuda/repack.h"

#include <cstring>

#include "core/error.h"

namespace infer::cuda {

namespace {

// Group size and where a block's fields are, for the 4-bit formats.
struct W4Format {
  int group;        // values per block
  int qs_offset;    // bytes before the codes
  bool has_zero;    // INT4: u8 zero point after d; Q4_0: zero 8
};

bool w4_format(DType t, W4Format* f) {
  switch (t) {
    case DType::Q4_0: *f = {32, 2, false}; return true;
    case DType::INT4_G32: *f = {32, 4, true}; return true;
    case DType::INT4_G64: *f = {64, 4, true}; return true;
    case DType::INT4_G128: *f = {128, 4, true}; return true;
    default: return false;
  }
}

uint16_t load_u16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}

}  // namespace

bool w4_repackable(DType t) {
  W4Format f;
  return w4_format(t, &f);
}

W4Weights repack_w4(const WeightView& w) {
  W4Format f{};
  if (!w4_format(w.type, &f)) raise(Status::Unsupported, "CUDA W4A16: cannot repack %s weights", dtype_name(w.type));
  if (w.n_in % 32 != 0 || w.n_in % f.group != 0)
    raise(Status::Unsupported, "CUDA W4A16: rows of %lld inputs are not a multiple of 32", static_cast<long long>(w.n_in));
  W4Weights out;
  out.L.n_out = w.n_out;
  out.L.n_in = w.n_in;
  out.L.group = f.group;
  const layout::W4Layout& L = out.L;
  out.q.assign(static_cast<size_t>(L.n_words()), 0u);
  out.scale.assign(static_cast<size_t>(L.n_groups() * L.n_out_pad()), 0);
  out.zero.assign(out.scale.size(), 0);
  const int block_bytes = f.qs_offset + f.group / 2;
  const int half = f.group / 2;
  for (int64_t n = 0; n < w.n_out; ++n) {
    const uint8_t* row = w.row(n);
    for (int64_t g = 0; g < L.n_groups(); ++g) {
      const uint8_t* b = row + g * block_bytes;
      const int64_t gi = layout::w4_group_index(L, n, g * f.group);
      out.scale[gi] = load_u16(b);
      out.zero[gi] = f.has_zero ? b[2] : 8;
      // Byte j of the block holds value j (low nibble) and j + G/2 (high).
      for (int j = 0; j < f.group; ++j) {
        const int code = j < half ? (b[f.qs_offset + j] & 15) : (b[f.qs_offset + j - half] >> 4);
        const int64_t k = g * f.group + j;
        int lane = 0, r = 0, h = 0;
        layout::mma_a_slot(static_cast<int>(n & 15), static_cast<int>(k & 15), &lane, &r, &h);
        out.q[layout::w4_word(L, n >> 4, k >> 4, lane)] |= static_cast<uint32_t>(code) << layout::w4_shift(r, h);
      }
    }
  }
  return out;
}

float w4_value(const W4Weights& w, int64_t n, int64_t k) {
  const int64_t gi = layout::w4_group_index(w.L, n, k);
  return static_cast<float>(layout::w4_code(w.q.data(), w.L, n, k) - static_cast<int>(w.zero[gi])) *
         fp16_to_f32(w.scale[gi]);
}

Q8Weights repack_q8_0(const WeightView& w) {
  if (w.type != DType::Q8_0) raise(Status::Unsupported, "CUDA Q8_0: cannot repack %s weights", dtype_name(w.type));
  if (w.n_in % 32 != 0) raise(Status::InvalidArgument, "CUDA Q8_0: rows of %lld inputs", static_cast<long long>(w.n_in));
  Q8Weights out;
  out.n_out = w.n_out;
  out.n_in = w.n_in;
  const int64_t nb = w.n_in / 32;
  out.q.resize(static_cast<size_t>(w.n_out * w.n_in));
  out.d.resize(static_cast<size_t>(w.n_out * nb));
  for (int64_t n = 0; n < w.n_out; ++n) {
    const uint8_t* row = w.row(n);
    for (int64_t b = 0; b < nb; ++b) {  // block: f16 d | int8 qs[32]
      out.d[n * nb + b] = load_u16(row + b * 34);
      std::memcpy(&out.q[n * w.n_in + b * 32], row + b * 34 + 2, 32);
    }
  }
  return out;
}

}  // namespace infer::cuda
