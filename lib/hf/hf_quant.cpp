// GPTQ and AWQ checkpoints onto libinfer's INT4_G{32,64,128} blocks, without
// re-quantizing: every 4-bit code, zero point and f16 scale is carried over.
//
//  GPTQ (AutoGPTQ / GPTQModel "gptq" checkpoint format, 4 bits):
//    qweight i32 [in/8][out]   input i at nibble i%8 of row i/8 (bits 4*(i%8))
//    qzeros  i32 [groups][out/8]  output o at nibble o%8; the stored zero is
//                              the zero point minus one, modulo 16
//                              (checkpoint_format "gptq_v2" stores it as is)
//    scales  f16 [groups][out]
//    g_idx   i32 [in]          group of each input channel
//    w[o][i] = scales[g][o] * (q[i][o] - zero[g][o]),  g = g_idx[i]
//  AWQ (AutoAWQ "gemm" version):
//    qweight i32 [in][out/8]   output 8c + j at nibble AWQ_REV[j], where the
//    qzeros  i32 [groups][out/8]  packing order is 0 2 4 6 1 3 5 7 (so
//                              AWQ_REV = 0 4 1 5 2 6 3 7); zeros stored as is
//    scales  f16 [groups][out]
//    w[o][i] = scales[i/G][o] * (q[i][o] - zero[i/G][o])
// Our block of G inputs of one output row holds f16 d, u8 z and the codes,
// w = (q - z) * d: the same numbers when each group is G consecutive inputs.
// GPTQ act-order (desc_act) assigns groups to inputs out of order; a g_idx
// that is not i / G cannot be held in consecutive blocks without permuting
// the layer's input at run time, which the model code does not do, so such
// a layer is expanded to F32 instead, exactly (codes, zeros and f16 scales
// give each weight exactly; a log line says so).
#include "hf/hf_quant.h"

#include <cstring>

#include "core/error.h"
#include "core/fp16.h"
#include "core/log.h"

namespace infer {
namespace hf {

namespace {

constexpr int kAwqRev[8] = {0, 4, 1, 5, 2, 6, 3, 7};

int32_t rd32(const uint8_t* p, size_t k) {
  int32_t v;
  std::memcpy(&v, p + 4 * k, 4);
  return v;
}
uint16_t rd16(const uint8_t* p, size_t k) {
  uint16_t v;
  std::memcpy(&v, p + 2 * k, 2);
  return v;
}

}  // namespace

PackedInt4 repack_int4(const QuantLayer& L) {
  const int64_t in = L.n_in, out = L.n_out, G = L.group;
  const char* nm = L.name.c_str();
  if (in <= 0 || out <= 0 || in % 8 != 0 || out % 8 != 0)
    raise(Status::Format, "%s: %lld x %lld is not a 4-bit packed shape", nm, (long long)out, (long long)in);
  if (G <= 0 || in % G != 0) raise(Status::Format, "%s: group size %lld does not divide %lld inputs", nm, (long long)G, (long long)in);
  const int64_t groups = in / G;
  auto code = [&](int64_t i, int64_t o) -> int {
    if (L.awq) return (rd32(L.qweight, static_cast<size_t>(i * (out / 8) + o / 8)) >> (4 * kAwqRev[o % 8])) & 15;
    return (rd32(L.qweight, static_cast<size_t>((i / 8) * out + o)) >> (4 * (i % 8))) & 15;
  };
  auto zero = [&](int64_t g, int64_t o) -> int {
    const int32_t w = rd32(L.qzeros, static_cast<size_t>(g * (out / 8) + o / 8));
    const int z = (w >> (4 * (L.awq ? kAwqRev[o % 8] : o % 8))) & 15;
    return L.zero_minus_one ? (z + 1) & 15 : z;
  };
  auto scale = [&](int64_t g, int64_t o) { return rd16(L.scales, static_cast<size_t>(g * out + o)); };
  auto group_of = [&](int64_t i) -> int64_t {
    if (!L.g_idx) return i / G;
    const int32_t g = rd32(L.g_idx, static_cast<size_t>(i));
    if (g < 0 || g >= groups) raise(Status::Format, "%s: g_idx[%lld] = %d is not a group (0..%lld)", nm, (long long)i, g, (long long)groups - 1);
    return g;
  };
  bool in_order = true;
  for (int64_t i = 0; i < in; ++i)
    if (group_of(i) != i / G) in_order = false;
  PackedInt4 r;
  const bool fits = in_order && (G == 32 || G == 64 || G == 128);
  if (!fits) {
    log(LogLevel::Info, "%s: %s: expanded to f32 (exact)", nm,
        in_order ? "group size is not 32, 64 or 128" : "act-order g_idx (groups out of input order)");
    r.type = DType::F32;
    r.bytes.resize(static_cast<size_t>(in * out) * 4);
    float* w = reinterpret_cast<float*>(r.bytes.data());
    for (int64_t i = 0; i < in; ++i) {
      const int64_t g = group_of(i);
      for (int64_t o = 0; o < out; ++o)
        w[o * in + i] = fp16_to_f32(scale(g, o)) * static_cast<float>(code(i, o) - zero(g, o));
    }
    return r;
  }
  r.type = G == 32 ? DType::INT4_G32 : G == 64 ? DType::INT4_G64 : DType::INT4_G128;
  const size_t bb = static_cast<size_t>(4 + G / 2);
  r.bytes.assign(static_cast<size_t>(out * groups) * bb, 0);
  for (int64_t o = 0; o < out; ++o)
    for (int64_t g = 0; g < groups; ++g) {
      uint8_t* b = &r.bytes[static_cast<size_t>(o * groups + g) * bb];
      const uint16_t d = scale(g, o);
      std::memcpy(b, &d, 2);
      b[2] = static_cast<uint8_t>(zero(g, o));
      b[3] = 0;
      for (int64_t j = 0; j < G / 2; ++j)
        b[4 + j] = static_cast<uint8_t>(code(g * G + j, o) | (code(g * G + j + G / 2, o) << 4));
    }
  return r;
}

}  // namespace hf
}  // namespace infer
