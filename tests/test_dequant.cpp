// Reference dequantization: every block format is checked against blocks
// built by an independent packer (the inverse of the layout, written from the
// format description) with known quant values and scales. Scales are powers
// of two, so every expected value is exact and compared with ==.
#include <cmath>
#include <cstring>
#include <functional>
#include <vector>

#include "core/error.h"
#include "core/fp16.h"
#include "quant/dequant.h"
#include "test_util.h"

using namespace infer;

namespace {

// Deterministic pseudo-random integers in [lo, hi].
struct Rng {
  uint32_t s;
  int next(int lo, int hi) {
    s = s * 1664525u + 1013904223u;
    return lo + static_cast<int>((s >> 8) % static_cast<uint32_t>(hi - lo + 1));
  }
};

void put_f16(uint8_t* p, float v) {
  const uint16_t h = f32_to_fp16(v);
  REQUIRE(fp16_to_f32(h) == v);  // test scales must be exact in f16
  std::memcpy(p, &h, 2);
}

const float kScales[] = {1.0f, 0.5f, 0.25f, 2.0f, 0.125f};

struct Built {
  std::vector<uint8_t> bytes;
  std::vector<float> expected;
};

// Packs `blocks` blocks with random quants; `fill(block_ptr, expected_ptr, rng, d, dmin)`
// writes one block and its expected values.
using Filler = std::function<void(uint8_t*, float*, Rng&, float, float)>;

Built build(DType t, int blocks, const Filler& fill) {
  const DTypeInfo* in = dtype_info(t);
  Built b;
  b.bytes.assign(static_cast<size_t>(blocks) * in->bytes, 0);
  b.expected.assign(static_cast<size_t>(blocks) * in->block, 0.0f);
  Rng rng{12345u + static_cast<uint32_t>(t)};
  for (int k = 0; k < blocks; ++k) {
    fill(b.bytes.data() + k * in->bytes, b.expected.data() + k * in->block, rng,
         kScales[k % 5], kScales[(k + 2) % 5]);
  }
  return b;
}

void check(DType t, const Built& b) {
  std::vector<float> y(b.expected.size(), -12345.0f);
  dequantize_row(t, b.bytes.data(), y.data(), static_cast<int64_t>(y.size()));
  for (size_t i = 0; i < y.size(); ++i) {
    INFO(dtype_name(t) << " value " << i);
    REQUIRE(y[i] == b.expected[i]);
  }
}

std::vector<float> dequant(DType t, const std::vector<uint8_t>& bytes) {
  const DTypeInfo* in = dtype_info(t);
  std::vector<float> y(bytes.size() / in->bytes * in->block);
  dequantize_row(t, bytes.data(), y.data(), static_cast<int64_t>(y.size()));
  return y;
}

// ---- independent packers (value index -> bit position), one per layout ----

// 4-bit values of a 32-value block: value i is nibble i/16 of byte i%16.
void pack_nibbles32(uint8_t* qs, const int* q) {
  for (int i = 0; i < 32; ++i) qs[i % 16] |= static_cast<uint8_t>((q[i] & 15) << (4 * (i / 16)));
}

// The 12-byte 6-bit (scale, min) table of Q4_K / Q5_K for 8 sub-blocks.
void pack_k4_scales(uint8_t* s, const int* sc, const int* mn) {
  for (int j = 0; j < 8; ++j) {
    if (j < 4) {
      s[j] |= static_cast<uint8_t>(sc[j] & 63);
      s[j + 4] |= static_cast<uint8_t>(mn[j] & 63);
    } else {
      s[j + 4] = static_cast<uint8_t>((sc[j] & 15) | ((mn[j] & 15) << 4));
      s[j - 4] |= static_cast<uint8_t>((sc[j] >> 4) << 6);
      s[j] |= static_cast<uint8_t>((mn[j] >> 4) << 6);
    }
  }
}

// Position of value i (0..255) in the 2-bit planes of Q2_K / Q3_K: byte
// 32*(i/128) + i%32, bit pair (i%128)/32.
int k2_byte(int i) { return 32 * (i / 128) + i % 32; }
int k2_shift(int i) { return 2 * ((i % 128) / 32); }

}  // namespace

TEST_CASE("dequant: f32, f16, bf16", "[dequant]") {
  const float f[4] = {1.5f, -0.0f, 3.0e-5f, -65504.0f};
  std::vector<uint8_t> bytes(sizeof f);
  std::memcpy(bytes.data(), f, sizeof f);
  const auto y32 = dequant(DType::F32, bytes);
  for (int i = 0; i < 4; ++i) CHECK(std::memcmp(&y32[i], &f[i], 4) == 0);

  const uint16_t h[4] = {0x3c00, 0xc000, 0x0001, 0x7bff};  // 1, -2, 2^-24, 65504
  std::vector<uint8_t> hb(8);
  std::memcpy(hb.data(), h, 8);
  const auto y16 = dequant(DType::F16, hb);
  CHECK(y16 == std::vector<float>{1.0f, -2.0f, std::ldexp(1.0f, -24), 65504.0f});

  const uint16_t b[3] = {0x3f80, 0xc040, 0x4049};  // 1, -3, 3.140625
  std::vector<uint8_t> bb(6);
  std::memcpy(bb.data(), b, 6);
  CHECK(dequant(DType::BF16, bb) == std::vector<float>{1.0f, -3.0f, 3.140625f});
}

TEST_CASE("dequant: q4_0 / q4_1 hand-made block", "[dequant]") {
  // d = 1: byte 0 = 0x9F -> value 0 is 15-8 = 7, value 16 is 9-8 = 1; other bytes 0x08 -> 0 / -8.
  std::vector<uint8_t> b(18, 0x08);
  put_f16(b.data(), 1.0f);
  b[2] = 0x9F;
  const auto y = dequant(DType::Q4_0, b);
  CHECK(y[0] == 7.0f);
  CHECK(y[16] == 1.0f);
  CHECK(y[1] == 0.0f);
  CHECK(y[17] == -8.0f);

  // Q4_1: d = 0.5, m = -1: x = q/2 - 1.
  std::vector<uint8_t> b1(20, 0x00);
  put_f16(b1.data(), 0.5f);
  put_f16(b1.data() + 2, -1.0f);
  b1[4 + 3] = 0xA4;  // value 3 = 4 -> 1.0, value 19 = 10 -> 4.0
  const auto y1 = dequant(DType::Q4_1, b1);
  CHECK(y1[3] == 1.0f);
  CHECK(y1[19] == 4.0f);
  CHECK(y1[0] == -1.0f);
}

TEST_CASE("dequant: q4_0, q4_1, q5_0, q5_1, q8_0", "[dequant]") {
  check(DType::Q4_0, build(DType::Q4_0, 5, [](uint8_t* b, float* y, Rng& r, float d, float) {
          put_f16(b, d);
          int q[32];
          for (int i = 0; i < 32; ++i) q[i] = r.next(0, 15);
          pack_nibbles32(b + 2, q);
          for (int i = 0; i < 32; ++i) y[i] = static_cast<float>(q[i] - 8) * d;
        }));
  check(DType::Q4_1, build(DType::Q4_1, 5, [](uint8_t* b, float* y, Rng& r, float d, float m) {
          put_f16(b, d);
          put_f16(b + 2, -m);
          int q[32];
          for (int i = 0; i < 32; ++i) q[i] = r.next(0, 15);
          pack_nibbles32(b + 4, q);
          for (int i = 0; i < 32; ++i) y[i] = static_cast<float>(q[i]) * d - m;
        }));
  check(DType::Q5_0, build(DType::Q5_0, 5, [](uint8_t* b, float* y, Rng& r, float d, float) {
          put_f16(b, d);
          int q[32];
          uint32_t qh = 0;
          for (int i = 0; i < 32; ++i) {
            q[i] = r.next(0, 31);
            qh |= static_cast<uint32_t>(q[i] >> 4) << i;  // 5th bit of value i = bit i
          }
          std::memcpy(b + 2, &qh, 4);
          pack_nibbles32(b + 6, q);
          for (int i = 0; i < 32; ++i) y[i] = static_cast<float>(q[i] - 16) * d;
        }));
  check(DType::Q5_1, build(DType::Q5_1, 5, [](uint8_t* b, float* y, Rng& r, float d, float m) {
          put_f16(b, d);
          put_f16(b + 2, m);
          int q[32];
          uint32_t qh = 0;
          for (int i = 0; i < 32; ++i) {
            q[i] = r.next(0, 31);
            qh |= static_cast<uint32_t>(q[i] >> 4) << i;
          }
          std::memcpy(b + 4, &qh, 4);
          pack_nibbles32(b + 8, q);
          for (int i = 0; i < 32; ++i) y[i] = static_cast<float>(q[i]) * d + m;
        }));
  check(DType::Q8_0, build(DType::Q8_0, 5, [](uint8_t* b, float* y, Rng& r, float d, float) {
          put_f16(b, d);
          for (int i = 0; i < 32; ++i) {
            const int q = r.next(-128, 127);
            b[2 + i] = static_cast<uint8_t>(static_cast<int8_t>(q));
            y[i] = static_cast<float>(q) * d;
          }
        }));
}

TEST_CASE("dequant: q5_0 high bits come from qh", "[dequant]") {
  // d = 1, all nibbles 0, qh = bit 0 and bit 31: value 0 = 16-16 = 0, value 31 = 0,
  // every other value = -16.
  std::vector<uint8_t> b(22, 0);
  put_f16(b.data(), 1.0f);
  const uint32_t qh = 0x80000001u;
  std::memcpy(b.data() + 2, &qh, 4);
  const auto y = dequant(DType::Q5_0, b);
  CHECK(y[0] == 0.0f);
  CHECK(y[31] == 0.0f);
  CHECK(y[1] == -16.0f);
  CHECK(y[16] == -16.0f);
}

TEST_CASE("dequant: q2_k", "[dequant]") {
  check(DType::Q2_K, build(DType::Q2_K, 3, [](uint8_t* b, float* y, Rng& r, float d, float dmin) {
          put_f16(b + 80, d);
          put_f16(b + 82, dmin);
          int sc[16], mn[16];
          for (int s = 0; s < 16; ++s) {
            sc[s] = r.next(0, 15);
            mn[s] = r.next(0, 15);
            b[s] = static_cast<uint8_t>(sc[s] | (mn[s] << 4));
          }
          for (int i = 0; i < 256; ++i) {
            const int q = r.next(0, 3);
            b[16 + k2_byte(i)] |= static_cast<uint8_t>(q << k2_shift(i));
            y[i] = d * static_cast<float>(sc[i / 16]) * static_cast<float>(q) -
                   dmin * static_cast<float>(mn[i / 16]);
          }
        }));
  // Hand-made: d = 1, dmin = 1, scale byte 0 = 0x12 (scale 2, min 1), qs[0] = 0b11100100:
  // values 0, 32, 64, 96 are q = 0, 1, 2, 3 (scales of sub-blocks 0, 2, 4, 6).
  std::vector<uint8_t> b(84, 0);
  b[0] = 0x12;
  b[2] = 0x12;
  b[4] = 0x12;
  b[6] = 0x12;
  b[16] = 0xE4;
  put_f16(b.data() + 80, 1.0f);
  put_f16(b.data() + 82, 1.0f);
  const auto y = dequant(DType::Q2_K, b);
  CHECK(y[0] == -1.0f);   // 2*0 - 1
  CHECK(y[32] == 1.0f);   // 2*1 - 1
  CHECK(y[64] == 3.0f);   // 2*2 - 1
  CHECK(y[96] == 5.0f);   // 2*3 - 1
  CHECK(y[128] == 0.0f);  // scale byte 8 is 0
}

TEST_CASE("dequant: q3_k", "[dequant]") {
  check(DType::Q3_K, build(DType::Q3_K, 3, [](uint8_t* b, float* y, Rng& r, float d, float) {
          uint8_t* hmask = b;
          uint8_t* qs = b + 32;
          uint8_t* scales = b + 96;
          put_f16(b + 108, d);
          int sc[16];
          for (int s = 0; s < 16; ++s) {
            sc[s] = r.next(-32, 31);
            const int u = sc[s] + 32;  // stored biased, 6 bits
            scales[s % 8] |= static_cast<uint8_t>((u & 15) << (s < 8 ? 0 : 4));
            scales[8 + s % 4] |= static_cast<uint8_t>((u >> 4) << (2 * (s / 4)));
          }
          for (int i = 0; i < 256; ++i) {
            const int v = r.next(-4, 3);
            const int u = v + 4;  // 3 bits: low 2 in qs, high one in hmask
            qs[k2_byte(i)] |= static_cast<uint8_t>((u & 3) << k2_shift(i));
            const int bit = 4 * (i / 128) + (i % 128) / 32;
            hmask[i % 32] |= static_cast<uint8_t>((u >> 2) << bit);
            y[i] = d * static_cast<float>(sc[i / 16]) * static_cast<float>(v);
          }
        }));
  // Hand-made: all scale bits 0 -> scale -32; hmask 0 -> every value has 4 subtracted.
  std::vector<uint8_t> b(110, 0);
  put_f16(b.data() + 108, 0.5f);
  b[32] = 0x03;  // value 0: low bits 3 -> 3 - 4 = -1
  b[0] = 0x01;   // value 0's hmask bit set -> no subtraction: 3
  b[33] = 0x02;  // value 1: 2 - 4 = -2
  const auto y = dequant(DType::Q3_K, b);
  CHECK(y[0] == 0.5f * -32.0f * 3.0f);
  CHECK(y[1] == 0.5f * -32.0f * -2.0f);
  CHECK(y[2] == 0.5f * -32.0f * -4.0f);
}

TEST_CASE("dequant: q4_k and q5_k", "[dequant]") {
  for (const DType t : {DType::Q4_K, DType::Q5_K}) {
    const bool five = t == DType::Q5_K;
    check(t, build(t, 3, [five](uint8_t* b, float* y, Rng& r, float d, float dmin) {
            put_f16(b, d);
            put_f16(b + 2, dmin);
            int sc[8], mn[8];
            for (int j = 0; j < 8; ++j) {
              sc[j] = r.next(0, 63);
              mn[j] = r.next(0, 63);
            }
            pack_k4_scales(b + 4, sc, mn);
            uint8_t* qh = b + 16;
            uint8_t* qs = five ? b + 48 : b + 16;
            for (int i = 0; i < 256; ++i) {
              const int q = r.next(0, five ? 31 : 15);
              const int chunk = i / 64, within = i % 64;
              qs[32 * chunk + within % 32] |= static_cast<uint8_t>((q & 15) << (4 * (within / 32)));
              if (five) qh[i % 32] |= static_cast<uint8_t>((q >> 4) << (i / 32));
              y[i] = d * static_cast<float>(sc[i / 32]) * static_cast<float>(q) -
                     dmin * static_cast<float>(mn[i / 32]);
            }
          }));
  }
  // Hand-made Q4_K: sub-block 5 gets scale 0x2A (42) and min 0x13 (19):
  // low nibbles in byte 9 (0x3A), high bits in the top of bytes 1 (scale) and 5 (min).
  std::vector<uint8_t> b(144, 0);
  put_f16(b.data(), 1.0f);
  put_f16(b.data() + 2, 1.0f);
  b[4 + 9] = 0x3A;           // scale low 0xA, min low 0x3
  b[4 + 1] = 0x80;           // scale high bits 0b10 -> 0x20
  b[4 + 5] = 0x40;           // min high bits 0b01 -> 0x10
  b[16 + 64 + 0] = 0x70;     // value 160 (chunk 2, high nibble, l = 0) = 7
  const auto y = dequant(DType::Q4_K, b);
  CHECK(y[160] == 42.0f * 7.0f - 19.0f);
  CHECK(y[161] == -19.0f);
  CHECK(y[128] == 0.0f);     // sub-block 4: scale and min 0
}

TEST_CASE("dequant: q6_k", "[dequant]") {
  check(DType::Q6_K, build(DType::Q6_K, 3, [](uint8_t* b, float* y, Rng& r, float d, float) {
          uint8_t* ql = b;
          uint8_t* qh = b + 128;
          put_f16(b + 208, d);
          int sc[16];
          for (int s = 0; s < 16; ++s) {
            sc[s] = r.next(-128, 127);
            b[192 + s] = static_cast<uint8_t>(static_cast<int8_t>(sc[s]));
          }
          for (int i = 0; i < 256; ++i) {
            const int v = r.next(-32, 31);
            const int u = v + 32;  // 6 bits: 4 in ql, 2 in qh
            const int half = i / 128, group = (i % 128) / 32, l = i % 32;
            const int lbyte = 64 * half + l + (group % 2) * 32;
            ql[lbyte] |= static_cast<uint8_t>((u & 15) << (4 * (group / 2)));
            qh[32 * half + l] |= static_cast<uint8_t>((u >> 4) << (2 * group));
            y[i] = d * static_cast<float>(sc[i / 16]) * static_cast<float>(v);
          }
        }));
  // Hand-made: d = 1, scale 0 = 3, ql[0] = 0x0F, qh[0] = 0x01 -> value 0 = (15 | 16) - 32 = -1.
  std::vector<uint8_t> b(210, 0);
  put_f16(b.data() + 208, 1.0f);
  b[192] = 3;
  b[0] = 0x0F;
  b[128] = 0x01;
  const auto y = dequant(DType::Q6_K, b);
  CHECK(y[0] == -3.0f);
  CHECK(y[1] == 3.0f * -32.0f);
  CHECK(y[16] == 0.0f);  // scale 1 is 0
}

TEST_CASE("dequant: bad lengths and types are errors", "[dequant]") {
  std::vector<uint8_t> buf(1024, 0);
  std::vector<float> out(512);
  auto status_of = [&](DType t, int64_t n) {
    try {
      dequantize_row(t, buf.data(), out.data(), n);
    } catch (const Error& e) {
      return e.status();
    }
    return Status::Ok;
  };
  CHECK(status_of(DType::Q4_0, 31) == Status::InvalidArgument);
  CHECK(status_of(DType::Q4_0, 33) == Status::InvalidArgument);
  CHECK(status_of(DType::Q4_K, 128) == Status::InvalidArgument);
  CHECK(status_of(DType::Q6_K, 255) == Status::InvalidArgument);
  CHECK(status_of(DType::F16, -1) == Status::InvalidArgument);
  CHECK(status_of(DType::Q8_0, 0) == Status::Ok);
  CHECK(status_of(DType::Q8_0, 64) == Status::Ok);
  CHECK(status_of(DType::F32, 7) == Status::Ok);
  CHECK(status_of(DType::Q8_K, 256) == Status::Unsupported);
  CHECK(status_of(DType::Q8_1, 32) == Status::Unsupported);
  CHECK(status_of(DType::I32, 4) == Status::Unsupported);
  CHECK(status_of(static_cast<DType>(1000), 4) == Status::Unsupported);
}

TEST_CASE("dequant: every dequantizable type is handled", "[dequant]") {
  // Keeps dtype_can_dequantize and dequantize_row in agreement.
  std::vector<uint8_t> buf(4096, 0);
  std::vector<float> out(256);
  for (uint32_t n = 0; n < 64; ++n) {
    const DType t = static_cast<DType>(n);
    const DTypeInfo* in = dtype_info(n);
    if (!in || !dtype_can_dequantize(t)) continue;
    INFO(in->name);
    CHECK_NOTHROW(dequantize_row(t, buf.data(), out.data(), 256));
  }
}
