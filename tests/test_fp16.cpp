// fp16 / bf16 conversions: exhaustive round trips and round-to-nearest-even.
#include <cmath>
#include <cstring>
#include <limits>

#include "core/fp16.h"
#include "test_util.h"

using namespace infer;

namespace {

uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
float float_of(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

bool half_is_nan(uint16_t h) { return (h & 0x7c00u) == 0x7c00u && (h & 0x3ffu) != 0; }

// The value of a half computed from its definition, independently of fp16.h:
// (-1)^s * 2^(e-15) * (1 + m/1024) for normals, 2^-14 * m/1024 for subnormals.
double half_value(uint16_t h) {
  const int s = h >> 15, e = (h >> 10) & 0x1f, m = h & 0x3ff;
  const double mag = e == 0 ? std::ldexp(m, -24) : std::ldexp(1024 + m, e - 25);
  return s ? -mag : mag;
}

}  // namespace

TEST_CASE("fp16: every half converts to its exact value and back", "[fp16]") {
  for (uint32_t h = 0; h < 65536; ++h) {
    const uint16_t x = static_cast<uint16_t>(h);
    const float f = fp16_to_f32(x);
    const int e = (x >> 10) & 0x1f;
    if (e == 31) {
      if (half_is_nan(x)) {
        REQUIRE(std::isnan(f));
        // NaN payloads are not preserved, but NaN-ness and the sign are.
        const uint16_t back = f32_to_fp16(f);
        REQUIRE(half_is_nan(back));
        REQUIRE((back & 0x8000u) == (x & 0x8000u));
      } else {
        REQUIRE(std::isinf(f));
        REQUIRE(std::signbit(f) == ((x & 0x8000u) != 0));
        REQUIRE(f32_to_fp16(f) == x);
      }
      continue;
    }
    REQUIRE(static_cast<double>(f) == half_value(x));
    REQUIRE(std::signbit(f) == ((x & 0x8000u) != 0));  // -0.0 stays -0.0
    REQUIRE(f32_to_fp16(f) == x);
  }
}

TEST_CASE("fp16: ties round to even at every pair of neighbours", "[fp16]") {
  // For each pair of adjacent finite halves (and the last finite one next to
  // infinity), the midpoint is exactly representable in f32: it must round to
  // the neighbour with the even mantissa, and anything just off it to the
  // nearer neighbour.
  for (uint16_t lo = 0; lo < 0x7c00; ++lo) {
    const uint16_t hi = static_cast<uint16_t>(lo + 1);
    const double hi_value = hi == 0x7c00 ? 65536.0 : half_value(hi);  // "next" after 65504
    const float mid = static_cast<float>((half_value(lo) + hi_value) / 2);
    REQUIRE(static_cast<double>(mid) == (half_value(lo) + hi_value) / 2);
    const uint16_t even = (lo & 1) ? hi : lo;
    for (uint16_t sign : {uint16_t(0), uint16_t(0x8000)}) {
      const float sm = sign ? -mid : mid;
      INFO("lo=" << lo << " sign=" << sign);
      REQUIRE(f32_to_fp16(sm) == (even | sign));
      REQUIRE(f32_to_fp16(std::nextafter(sm, 0.0f)) == (lo | sign));
      REQUIRE(f32_to_fp16(std::nextafter(sm, sign ? -INFINITY : INFINITY)) == (hi | sign));
    }
  }
}

TEST_CASE("fp16: special values, subnormals and overflow", "[fp16]") {
  CHECK(f32_to_fp16(0.0f) == 0x0000);
  CHECK(f32_to_fp16(-0.0f) == 0x8000);
  CHECK(f32_to_fp16(1.0f) == 0x3c00);
  CHECK(f32_to_fp16(-2.0f) == 0xc000);
  CHECK(f32_to_fp16(65504.0f) == 0x7bff);                      // largest finite
  CHECK(f32_to_fp16(65519.996f) == 0x7bff);                    // below the midpoint to "65536"
  CHECK(f32_to_fp16(65520.0f) == 0x7c00);                      // midpoint: rounds to inf (even)
  CHECK(f32_to_fp16(1e10f) == 0x7c00);
  CHECK(f32_to_fp16(-1e10f) == 0xfc00);
  CHECK(f32_to_fp16(std::numeric_limits<float>::max()) == 0x7c00);
  CHECK(f32_to_fp16(INFINITY) == 0x7c00);
  CHECK(f32_to_fp16(-INFINITY) == 0xfc00);
  CHECK(half_is_nan(f32_to_fp16(std::numeric_limits<float>::quiet_NaN())));
  CHECK(half_is_nan(f32_to_fp16(float_of(0x7f800001u))));      // signalling NaN stays NaN
  CHECK(half_is_nan(f32_to_fp16(float_of(0xffc00000u))));
  CHECK((f32_to_fp16(float_of(0xffc00000u)) & 0x8000u) != 0);

  CHECK(f32_to_fp16(std::ldexp(1.0f, -14)) == 0x0400);         // smallest normal
  CHECK(f32_to_fp16(std::ldexp(1.0f, -24)) == 0x0001);         // smallest subnormal
  CHECK(f32_to_fp16(std::ldexp(1.0f, -25)) == 0x0000);         // half of it: tie to even 0
  CHECK(f32_to_fp16(std::nextafter(std::ldexp(1.0f, -25), 1.0f)) == 0x0001);
  CHECK(f32_to_fp16(std::ldexp(3.0f, -25)) == 0x0002);         // 1.5 units: tie to even 2
  CHECK(f32_to_fp16(std::ldexp(1.0f, -30)) == 0x0000);
  CHECK(f32_to_fp16(-std::ldexp(1.0f, -30)) == 0x8000);
  CHECK(f32_to_fp16(std::numeric_limits<float>::denorm_min()) == 0x0000);
  CHECK(f32_to_fp16(std::ldexp(1.0f, -14) - std::ldexp(1.0f, -25)) == 0x0400);  // rounds up into normals
  CHECK(fp16_to_f32(0x0001) == std::ldexp(1.0f, -24));
  CHECK(fp16_to_f32(0x03ff) == std::ldexp(1023.0f, -24));

  CHECK(f32_to_fp16(1.0f + std::ldexp(1.0f, -11)) == 0x3c00);  // tie: down to even
  CHECK(f32_to_fp16(1.0f + std::ldexp(3.0f, -11)) == 0x3c02);  // tie: up to even
  CHECK(f32_to_fp16(2047.5f) == 0x6800);                       // 2047.5 -> 2048 (tie to even)
}

TEST_CASE("bf16: every bf16 converts exactly and back, ties to even", "[fp16]") {
  for (uint32_t b = 0; b < 65536; ++b) {
    const uint16_t x = static_cast<uint16_t>(b);
    const float f = bf16_to_f32(x);
    REQUIRE(bits_of(f) == b << 16);
    const uint16_t back = f32_to_bf16(f);
    if (std::isnan(f)) {
      // Quiet NaNs survive; signalling ones come back quiet, still NaN, same sign.
      REQUIRE(std::isnan(bf16_to_f32(back)));
      REQUIRE((back & 0x8000u) == (x & 0x8000u));
      if (x & 0x40u) REQUIRE(back == x);
    } else {
      REQUIRE(back == x);
    }
  }
  // Midpoints between neighbours (all finite pairs and the max-finite/inf pair).
  for (uint32_t lo = 0; lo < 0x7f80; ++lo) {
    const uint32_t hi = lo + 1;
    const uint32_t mid_bits = (lo << 16) | 0x8000u;  // exactly halfway
    const uint16_t even = static_cast<uint16_t>((lo & 1) ? hi : lo);
    INFO("lo=" << lo);
    REQUIRE(f32_to_bf16(float_of(mid_bits)) == even);
    REQUIRE(f32_to_bf16(float_of(mid_bits - 1)) == lo);
    REQUIRE(f32_to_bf16(float_of(mid_bits + 1)) == hi);
    REQUIRE(f32_to_bf16(float_of(mid_bits | 0x80000000u)) == (even | 0x8000u));
  }
  CHECK(f32_to_bf16(INFINITY) == 0x7f80);
  CHECK(f32_to_bf16(-INFINITY) == 0xff80);
  CHECK(f32_to_bf16(std::numeric_limits<float>::max()) == 0x7f80);  // rounds up to inf
  CHECK(f32_to_bf16(float_of(0x7f800001u)) == 0x7fc0);              // signalling NaN -> quiet
  CHECK(f32_to_bf16(std::numeric_limits<float>::denorm_min()) == 0x0000);
  CHECK(f32_to_bf16(1.0f) == 0x3f80);
}
