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
// Our block of B inputs of one output row holds f16 d, u8 z and the codes,
// w = (q - z) * d: the same numbers when each block lies in one group and
// holds consecutive columns of the rows we write.
//  - Group sizes: B is the largest of 128, 64, 32 that divides the
//    checkpoint's group size G (G = -1, per channel, is G = n_in); a group
//    of G = k * B inputs becomes k blocks with the group's scale and zero
//    each (exact). No such B (e.g. G = 16 or 48): expanded to F32.
//  - Act-order (GPTQ desc_act): g_idx assigns groups to inputs out of input
//    order. When every group has exactly G members, the rows are written with
//    their input columns permuted, perm = the inputs stably sorted by group
//    (column j holds input perm[j], so group g is columns g*G .. g*G+G-1),
//    and perm goes with the matrix: the model multiplies x[perm] by it
//    (model/transformer.cpp), which is the same sum in another order. Codes,
//    zeros and scales are carried over unchanged. A g_idx whose groups do not
//    all have G members, or a matrix the model cannot permute the input of
//    (QuantLayer::allow_perm), is expanded to F32 instead.
// F32 expansion is exact too (codes, zeros and f16 scales give each weight
// exactly); the reason is in PackedInt4::note and the log.
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
  std::vector<int64_t> gi(static_cast<size_t>(in));
  bool in_order = true;
  for (int64_t i = 0; i < in; ++i) {
    gi[static_cast<size_t>(i)] = group_of(i);
    if (gi[static_cast<size_t>(i)] != i / G) in_order = false;
  }
  PackedInt4 r;
  const int64_t B = G % 128 == 0 ? 128 : G % 64 == 0 ? 64 : G % 32 == 0 ? 32 : 0;
  if (B == 0) {
    r.note = strformat("group size %lld is not a multiple of 32, 64 or 128", (long long)G);
  } else if (!in_order) {
    std::vector<int64_t> members(static_cast<size_t>(groups), 0);
    for (int64_t g : gi) ++members[static_cast<size_t>(g)];
    for (int64_t g = 0; g < groups && r.note.empty(); ++g)
      if (members[static_cast<size_t>(g)] != G)
        r.note = strformat("act-order g_idx gives group %lld %lld inputs, not %lld", (long long)g,
                           (long long)members[static_cast<size_t>(g)], (long long)G);
    if (r.note.empty() && !L.allow_perm)
      r.note = "act-order g_idx on a matrix whose input cannot be permuted (embedding or MoE router)";
    if (r.note.empty()) {  // stable counting sort of the inputs by group
      r.perm.resize(static_cast<size_t>(in));
      std::vector<int64_t> next(static_cast<size_t>(groups));
      for (int64_t g = 0; g < groups; ++g) next[static_cast<size_t>(g)] = g * G;
      for (int64_t i = 0; i < in; ++i) r.perm[static_cast<size_t>(next[static_cast<size_t>(gi[static_cast<size_t>(i)])]++)] = static_cast<int32_t>(i);
    }
  }
  if (!r.note.empty()) {
    log(LogLevel::Info, "%s: %s: expanded to f32 (exact)", nm, r.note.c_str());
    r.type = DType::F32;
    r.bytes.resize(static_cast<size_t>(in * out) * 4);
    float* w = reinterpret_cast<float*>(r.bytes.data());
    for (int64_t i = 0; i < in; ++i) {
      const int64_t g = gi[static_cast<size_t>(i)];
      for (int64_t o = 0; o < out; ++o)
        w[o * in + i] = fp16_to_f32(scale(g, o)) * static_cast<float>(code(i, o) - zero(g, o));
    }
    return r;
  }
  if (!r.perm.empty())
    log(LogLevel::Debug, "%s: act-order g_idx: input columns permuted into INT4_G%lld blocks", nm, (long long)B);
  r.type = B == 32 ? DType::INT4_G32 : B == 64 ? DType::INT4_G64 : DType::INT4_G128;
  const int64_t blocks = in / B;
  const size_t bb = static_cast<size_t>(4 + B / 2);
  auto src = [&](int64_t j) -> int64_t { return r.perm.empty() ? j : r.perm[static_cast<size_t>(j)]; };
  r.bytes.assign(static_cast<size_t>(out * blocks) * bb, 0);
  for (int64_t o = 0; o < out; ++o)
    for (int64_t k = 0; k < blocks; ++k) {
      uint8_t* b = &r.bytes[static_cast<size_t>(o * blocks + k) * bb];
      const int64_t c0 = k * B, g = c0 / G;  // columns c0 .. c0+B-1, all of group g
      const uint16_t d = scale(g, o);
      std::memcpy(b, &d, 2);
      b[2] = static_cast<uint8_t>(zero(g, o));
      b[3] = 0;
      for (int64_t j = 0; j < B / 2; ++j)
        b[4 + j] = static_cast<uint8_t>(code(src(c0 + j), o) | (code(src(c0 + j + B / 2), o) << 4));
    }
  return r;
}

}  // namespace hf
}  // namespace infer
