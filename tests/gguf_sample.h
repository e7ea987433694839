// The sample GGUF files the GGUF tests and the fuzz seed corpus program
// (tests/fuzz/gguf_corpus.cpp) build from code.
#pragma once

#include <cstdint>
#include <limits>
#include <vector>

#include "gguf/gguf.h"

namespace infer_test {

using infer::DType;
using infer::GgufType;
using infer::GgufValue;
using infer::GgufWriter;

inline GgufValue scalar_u(GgufType t, uint64_t v) {
  GgufValue x;
  x.type = t;
  x.u = v;
  return x;
}
inline GgufValue scalar_i(GgufType t, int64_t v) {
  GgufValue x;
  x.type = t;
  x.i = v;
  return x;
}
inline GgufValue scalar_f(GgufType t, double v) {
  GgufValue x;
  x.type = t;
  x.f = v;
  return x;
}

inline std::vector<uint8_t> pattern_bytes(size_t n, uint8_t seed) {
  std::vector<uint8_t> b(n);
  for (size_t i = 0; i < n; ++i) b[i] = static_cast<uint8_t>(seed + i * 7);
  return b;
}

// A small file using every value type, nested arrays and four tensors. The
// last tensor is 128 bytes, so the file ends exactly where its data ends.
inline GgufWriter sample_writer(uint32_t version = 3) {
  GgufWriter w(version);
  w.set("general.architecture", GgufValue::make_string("llama"));
  w.set("test.u8", scalar_u(GgufType::U8, 200));
  w.set("test.i8", scalar_i(GgufType::I8, -100));
  w.set("test.u16", scalar_u(GgufType::U16, 60000));
  w.set("test.i16", scalar_i(GgufType::I16, -30000));
  w.set("test.u32", GgufValue::make_u32(4000000000u));
  w.set("test.i32", GgufValue::make_i32(-2000000000));
  w.set("test.u64", GgufValue::make_u64((1ull << 63) + 5));
  w.set("test.i64", scalar_i(GgufType::I64, -(1ll << 62)));
  w.set("test.f32", GgufValue::make_f32(1.5f));
  w.set("test.f64", scalar_f(GgufType::F64, -2.25e300));
  w.set("test.bool", GgufValue::make_bool(true));
  w.set("test.string", GgufValue::make_string("h\xC3\xA9llo \xE2\x96\x81 world"));
  w.set("test.empty_string", GgufValue::make_string(""));
  w.set("test.strings", GgufValue::make_string_array({"a", "", "ccc"}));
  w.set("test.floats", GgufValue::make_f32_array({1.0f, -0.0f, std::numeric_limits<float>::quiet_NaN()}));
  w.set("test.ints", GgufValue::make_i32_array({-1, 0, 2147483647}));
  w.set("test.nested", GgufValue::make_array(GgufType::Array,
      {GgufValue::make_array(GgufType::U16, {scalar_u(GgufType::U16, 1), scalar_u(GgufType::U16, 2)}),
       GgufValue::make_array(GgufType::U16, {scalar_u(GgufType::U16, 3)}),
       GgufValue::make_array(GgufType::U16, {})}));
  w.set("test.nested_strings", GgufValue::make_array(GgufType::Array,
      {GgufValue::make_string_array({"x", "yy"}), GgufValue::make_string_array({})}));
  w.set("test.empty_array", GgufValue::make_array(GgufType::U32, {}));
  const auto q4 = pattern_bytes(2 * 2 * 18, 1);
  const auto f16 = pattern_bytes(15 * 2, 2);
  const auto q6k = pattern_bytes(210, 3);
  const auto f32 = pattern_bytes(32 * 4, 4);
  w.add_tensor("tensor.q4", {64, 2}, DType::Q4_0, q4.data(), q4.size());
  w.add_tensor("tensor.f16", {3, 5}, DType::F16, f16.data(), f16.size());
  w.add_tensor("tensor.q6k", {256}, DType::Q6_K, q6k.data(), q6k.size());
  w.add_tensor("tensor.f32", {8, 2, 1, 2}, DType::F32, f32.data(), f32.size());
  return w;
}

}  // namespace infer_test
