// Reference dequantization of the GGUF block formats.
//
// Each block type is read byte by byte from its on-disk layout (no struct
// casts, so misaligned input is fine). The arithmetic follows the format's
// definition term by term, in the same order, so results are bit-exact with
// the definition: e.g. Q4_K computes (d * scale) * q - (dmin * min) in f32.
//
// Notation: a block covers 32 values (simple formats) or a 256-value
// super-block (K formats); d / dmin are f16 scales; "qs" are packed low bits,
// "qh" / "hmask" packed high bits.
#include "quant/dequant.h"

#include <cstring>

#include "core/error.h"
#include "core/fp16.h"
#include "quant/formats.h"

namespace infer {

namespace {

float f16_at(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return fp16_to_f32(h);
}

// ---- 32-value formats ----------------------------------------------------------------

// Q4_0 (18 bytes): f16 d | u8 qs[16]. Byte j holds value j in its low nibble
// and value j+16 in its high nibble; x = (q - 8) * d.
void block_q4_0(const uint8_t* b, float* y) {
  const float d = f16_at(b);
  const uint8_t* qs = b + 2;
  for (int j = 0; j < 16; ++j) {
    y[j] = static_cast<float>((qs[j] & 0x0F) - 8) * d;
    y[j + 16] = static_cast<float>((qs[j] >> 4) - 8) * d;
  }
}

// Q4_1 (20 bytes): f16 d | f16 m | u8 qs[16]; same nibble order; x = q * d + m.
void block_q4_1(const uint8_t* b, float* y) {
  const float d = f16_at(b);
  const float m = f16_at(b + 2);
  const uint8_t* qs = b + 4;
  for (int j = 0; j < 16; ++j) {
    y[j] = static_cast<float>(qs[j] & 0x0F) * d + m;
    y[j + 16] = static_cast<float>(qs[j] >> 4) * d + m;
  }
}

// A little-endian u32 (Q5_0/Q5_1 qh).
uint32_t u32_at(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

// Q5_0/Q5_1: the 5-bit level of value j (0..31): its nibble and bit j of qh.
int q5_level(int nibble, uint32_t qh, int j) { return nibble | static_cast<int>(((qh >> j) & 1u) << 4); }

// Q5_0 (22 bytes): f16 d | u32 qh (little-endian) | u8 qs[16]. Value j's 5th
// bit is bit j of qh (j = 0..31), its low 4 bits the nibbles as in Q4_0;
// x = (q - 16) * d.
void block_q5_0(const uint8_t* b, float* y) {
  const float d = f16_at(b);
  const uint32_t qh = u32_at(b + 2);
  const uint8_t* qs = b + 6;
  for (int j = 0; j < 16; ++j) {
    const int lo = q5_level(qs[j] & 0x0F, qh, j);
    const int hi = q5_level(qs[j] >> 4, qh, j + 16);
    y[j] = static_cast<float>(lo - 16) * d;
    y[j + 16] = static_cast<float>(hi - 16) * d;
  }
}

// Q5_1 (24 bytes): f16 d | f16 m | u32 qh | u8 qs[16]; x = q * d + m.
void block_q5_1(const uint8_t* b, float* y) {
  const float d = f16_at(b);
  const float m = f16_at(b + 2);
  const uint32_t qh = u32_at(b + 4);
  const uint8_t* qs = b + 8;
  for (int j = 0; j < 16; ++j) {
    const int lo = q5_level(qs[j] & 0x0F, qh, j);
    const int hi = q5_level(qs[j] >> 4, qh, j + 16);
    y[j] = static_cast<float>(lo) * d + m;
    y[j + 16] = static_cast<float>(hi) * d + m;
  }
}

// Q8_0 (34 bytes): f16 d | i8 qs[32]; x = q * d.
void block_q8_0(const uint8_t* b, float* y) {
  const float d = f16_at(b);
  const int8_t* qs = reinterpret_cast<const int8_t*>(b + 2);
  for (int j = 0; j < 32; ++j) y[j] = static_cast<float>(qs[j]) * d;
}

// ---- 256-value K formats -------------------------------------------------------------

// Q2_K (84 bytes): u8 scales[16] | u8 qs[64] | f16 d | f16 dmin.
// 16 sub-blocks of 16 values; scales[i] = 4-bit scale (low) | 4-bit min (high).
// 2-bit quants: each 128-value half uses 32 bytes of qs; value 32*s + l of the
// half (s = 0..3, l = 0..31) is bits 2s..2s+1 of byte l. Sub-block i of the
// half covers 16 consecutive values. x = (d * sc) * q - (dmin * m).
void block_q2_k(const uint8_t* b, float* y) {
  const uint8_t* scales = b;
  const uint8_t* qs = b + 16;
  const float d = f16_at(b + 80);
  const float dmin = f16_at(b + 82);
  int is = 0;
  for (int half = 0; half < 2; ++half) {
    const uint8_t* q = qs + 32 * half;
    for (int shift = 0; shift < 8; shift += 2) {
      for (int part = 0; part < 2; ++part) {  // two sub-blocks of 16 values
        const uint8_t sc = scales[is++];
        const float dl = d * static_cast<float>(sc & 0x0F);
        const float ml = dmin * static_cast<float>(sc >> 4);
        for (int l = 0; l < 16; ++l) {
          *y++ = dl * static_cast<float>((q[16 * part + l] >> shift) & 3) - ml;
        }
      }
    }
  }
}

// Q3_K (110 bytes): u8 hmask[32] | u8 qs[64] | u8 scales[12] | f16 d.
// 16 signed 6-bit scales for sub-blocks of 16: scale i has its low 4 bits in
// scales[i % 8] (low nibble for i < 8, high nibble for i >= 8) and its high 2
// bits at bit 2*(i/4) of scales[8 + i%4]; the stored value is biased by 32.
// Quants: 2 low bits as in Q2_K, plus a third bit: value 32*s + l of half h is
// bit (4h + s) of hmask[l]; a CLEAR bit means subtract 4. x = (d * (sc - 32)) * q.
void block_q3_k(const uint8_t* b, float* y) {
  const uint8_t* hmask = b;
  const uint8_t* qs = b + 32;
  const uint8_t* sc = b + 96;
  const float d = f16_at(b + 108);
  int scale[16];
  for (int i = 0; i < 16; ++i) {
    const int low = i < 8 ? (sc[i] & 0x0F) : (sc[i - 8] >> 4);
    const int high = (sc[8 + i % 4] >> (2 * (i / 4))) & 3;
    scale[i] = (low | (high << 4)) - 32;
  }
  int is = 0;
  uint8_t m = 1;  // the hmask bit for the current 32-value group
  for (int half = 0; half < 2; ++half) {
    const uint8_t* q = qs + 32 * half;
    for (int shift = 0; shift < 8; shift += 2) {
      for (int part = 0; part < 2; ++part) {
        const float dl = d * static_cast<float>(scale[is++]);
        for (int l = 16 * part; l < 16 * part + 16; ++l) {
          const int v = ((q[l] >> shift) & 3) - ((hmask[l] & m) ? 0 : 4);
          *y++ = dl * static_cast<float>(v);
        }
      }
      m = static_cast<uint8_t>(m << 1);
    }
  }
}

// The 8 (scale, min) pairs of Q4_K / Q5_K, 6 bits each, packed in 12 bytes:
// for j < 4: scale = q[j] & 63, min = q[j+4] & 63; for j >= 4 the low 4 bits
// come from the nibbles of q[j+4] (scale low, min high) and the high 2 bits
// from the top bits of q[j-4] (scale) and q[j] (min).
void scale_min_k4(int j, const uint8_t* q, int* scale, int* min) {
  if (j < 4) {
    *scale = q[j] & 63;
    *min = q[j + 4] & 63;
  } else {
    *scale = (q[j + 4] & 0x0F) | ((q[j - 4] >> 6) << 4);
    *min = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

// Sub-blocks 2 * chunk and 2 * chunk + 1 of a Q4_K/Q5_K block: their
// scales d * sc and mins dmin * m.
void chunk_scales_k4(int chunk, const uint8_t* scales, float d, float dmin, float* d1, float* m1, float* d2,
                     float* m2) {
  int sc, mn;
  scale_min_k4(2 * chunk, scales, &sc, &mn);
  *d1 = d * static_cast<float>(sc);
  *m1 = dmin * static_cast<float>(mn);
  scale_min_k4(2 * chunk + 1, scales, &sc, &mn);
  *d2 = d * static_cast<float>(sc);
  *m2 = dmin * static_cast<float>(mn);
}

// Q4_K (144 bytes): f16 d | f16 dmin | u8 scales[12] | u8 qs[128].
// 8 sub-blocks of 32; each 64-value chunk uses 32 bytes of qs: low nibbles for
// its first 32 values, high nibbles for the next 32. x = (d * sc) * q - (dmin * m).
void block_q4_k(const uint8_t* b, float* y) {
  const float d = f16_at(b);
  const float dmin = f16_at(b + 2);
  const uint8_t* scales = b + 4;
  const uint8_t* q = b + 16;
  for (int chunk = 0; chunk < 4; ++chunk, q += 32) {
    float d1, m1, d2, m2;
    chunk_scales_k4(chunk, scales, d, dmin, &d1, &m1, &d2, &m2);
    for (int l = 0; l < 32; ++l) *y++ = d1 * static_cast<float>(q[l] & 0x0F) - m1;
    for (int l = 0; l < 32; ++l) *y++ = d2 * static_cast<float>(q[l] >> 4) - m2;
  }
}

// Q5_K (176 bytes): f16 d | f16 dmin | u8 scales[12] | u8 qh[32] | u8 qs[128].
// As Q4_K plus a 5th bit: sub-block i (32 values) takes bit i of qh[l].
void block_q5_k(const uint8_t* b, float* y) {
  const float d = f16_at(b);
  const float dmin = f16_at(b + 2);
  const uint8_t* scales = b + 4;
  const uint8_t* qh = b + 16;
  const uint8_t* q = b + 48;
  for (int chunk = 0; chunk < 4; ++chunk, q += 32) {
    float d1, m1, d2, m2;
    chunk_scales_k4(chunk, scales, d, dmin, &d1, &m1, &d2, &m2);
    const int bit1 = 2 * chunk, bit2 = 2 * chunk + 1;
    for (int l = 0; l < 32; ++l) {
      *y++ = d1 * static_cast<float>((q[l] & 0x0F) + (((qh[l] >> bit1) & 1) << 4)) - m1;
    }
    for (int l = 0; l < 32; ++l) {
      *y++ = d2 * static_cast<float>((q[l] >> 4) + (((qh[l] >> bit2) & 1) << 4)) - m2;
    }
  }
}

// Q6_K (210 bytes): u8 ql[128] | u8 qh[64] | i8 scales[16] | f16 d.
// Per 128-value half (64 bytes of ql, 32 of qh, 8 scales): for l = 0..31,
//   value l      = low nibble of ql[l]    | bits 0-1 of qh[l] << 4
//   value l + 32 = low nibble of ql[l+32] | bits 2-3 of qh[l] << 4
//   value l + 64 = high nibble of ql[l]   | bits 4-5 of qh[l] << 4
//   value l + 96 = high nibble of ql[l+32]| bits 6-7 of qh[l] << 4
// each biased by 32; sub-blocks of 16 share a scale. x = (d * sc) * (q - 32).
void block_q6_k(const uint8_t* b, float* y) {
  const uint8_t* ql = b;
  const uint8_t* qh = b + 128;
  const int8_t* sc = reinterpret_cast<const int8_t*>(b + 192);
  const float d = f16_at(b + 208);
  for (int half = 0; half < 2; ++half, y += 128, ql += 64, qh += 32, sc += 8) {
    for (int l = 0; l < 32; ++l) {
      const int is = l / 16;
      const int q1 = ((ql[l] & 0x0F) | (((qh[l] >> 0) & 3) << 4)) - 32;
      const int q2 = ((ql[l + 32] & 0x0F) | (((qh[l] >> 2) & 3) << 4)) - 32;
      const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
      const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
      y[l] = d * static_cast<float>(sc[is]) * static_cast<float>(q1);
      y[l + 32] = d * static_cast<float>(sc[is + 2]) * static_cast<float>(q2);
      y[l + 64] = d * static_cast<float>(sc[is + 4]) * static_cast<float>(q3);
      y[l + 96] = d * static_cast<float>(sc[is + 6]) * static_cast<float>(q4);
    }
  }
}

using BlockFn = void (*)(const uint8_t*, float*);

BlockFn block_fn(DType t) {
  switch (t) {
    case DType::Q4_0: return block_q4_0;
    case DType::Q4_1: return block_q4_1;
    case DType::Q5_0: return block_q5_0;
    case DType::Q5_1: return block_q5_1;
    case DType::Q8_0: return block_q8_0;
    case DType::Q2_K: return block_q2_k;
    case DType::Q3_K: return block_q3_k;
    case DType::Q4_K: return block_q4_k;
    case DType::Q5_K: return block_q5_k;
    case DType::Q6_K: return block_q6_k;
    default: return infer_own_dequant_block(t);  // libinfer's INT4_G* (quant/formats.cpp)
  }
}

}  // namespace

void dequantize_row(DType t, const void* src, float* dst, int64_t n) {
  const DTypeInfo* info = dtype_info(t);
  if (!info || !dtype_can_dequantize(t)) {
    raise(Status::Unsupported, "cannot dequantize tensor type %s (%u)", dtype_name(t),
          static_cast<unsigned>(t));
  }
  if (n < 0 || n % info->block != 0) {
    raise(Status::InvalidArgument, "dequantize %s: %lld values is not a multiple of the block size %u",
          info->name, static_cast<long long>(n), info->block);
  }
  const uint8_t* s = static_cast<const uint8_t*>(src);
  switch (t) {
    case DType::F32:
      if (n > 0) std::memcpy(dst, s, static_cast<size_t>(n) * 4);
      return;
    case DType::F16:
      for (int64_t k = 0; k < n; ++k) dst[k] = f16_at(s + 2 * k);
      return;
    case DType::BF16:
      for (int64_t k = 0; k < n; ++k) {
        uint16_t h;
        std::memcpy(&h, s + 2 * k, 2);
        dst[k] = bf16_to_f32(h);
      }
      return;
    default: {
      const BlockFn fn = block_fn(t);
      const int64_t blocks = n / info->block;
      for (int64_t k = 0; k < blocks; ++k) fn(s + k * info->bytes, dst + k * info->block);
    }
  }
}

}  // namespace infer
