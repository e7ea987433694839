// libFuzzer target for the Hugging Face directory readers (lib/hf): the
// safetensors header, config.json, tokenizer.json with tokenizer_config.json,
// and the JSON reader under them, and the GPTQ/AWQ repacking (hf_quant.h:
// shapes, group size and g_idx from the input). The first byte picks the
// reader (mod 8: 0-3 as before, 4 the repacking), the rest is its input; any
// input must either be accepted or fail with infer::Error. A repacked layer
// must dequantize, through its input permutation when it has one, to exactly
// s * (q - z) of each weight.
// An accepted safetensors header must describe ranges inside the input that
// do not overlap, whatever the header claims.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include <cmath>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "core/fp16.h"
#include "hf/hf.h"
#include "hf/hf_quant.h"
#include "core/json.h"
#include "quant/dequant.h"

namespace {

// Input: n_in/8 - 1, n_out/8 - 1, group selector, flags (awq, v1 zeros,
// allow_perm, g_idx), then qweight, qzeros, scales and g_idx bytes.
void repack(const uint8_t* p, size_t n) {
  if (n < 4) return;
  const int64_t in = 8 * (1 + p[0] % 64), out = 8 * (1 + p[1] % 4);
  static const int64_t kGroups[] = {32, 64, 128, 256, 16, 48, 96, -1};
  const int64_t G = kGroups[p[2] % 8] == -1 ? in : kGroups[p[2] % 8];
  if (in % G != 0) return;  // the loader refuses these shapes before repacking
  const int64_t groups = in / G;
  infer::hf::QuantLayer L;
  L.name = "fuzz";
  L.n_in = in;
  L.n_out = out;
  L.group = G;
  L.awq = p[3] & 1;
  L.zero_minus_one = !L.awq && (p[3] & 2);
  L.allow_perm = p[3] & 4;
  const bool has_gidx = !L.awq && (p[3] & 8);
  const size_t nq = static_cast<size_t>(in * out / 2), nz = static_cast<size_t>(groups * out / 2);
  const size_t ns = static_cast<size_t>(groups * out * 2), ng = has_gidx ? static_cast<size_t>(in * 4) : 0;
  if (n < 4 + nq + nz + ns + ng) return;
  std::vector<uint8_t> buf(p + 4, p + 4 + nq + nz + ns + ng);  // aligned copies
  L.qweight = buf.data();
  L.qzeros = buf.data() + nq;
  L.scales = buf.data() + nq + nz;
  L.g_idx = has_gidx ? buf.data() + nq + nz + ns : nullptr;
  const infer::hf::PackedInt4 r = infer::hf::repack_int4(L);
  auto rd32 = [](const uint8_t* b, int64_t k) { int32_t v; std::memcpy(&v, b + 4 * k, 4); return v; };
  std::vector<int64_t> col(static_cast<size_t>(in));  // input of each stored column
  for (int64_t j = 0; j < in; ++j) col[static_cast<size_t>(j)] = j;
  if (!r.perm.empty()) {
    if (r.perm.size() != static_cast<size_t>(in) || r.type == infer::DType::F32) std::abort();
    std::vector<uint8_t> seen(static_cast<size_t>(in), 0);
    for (int64_t j = 0; j < in; ++j) {
      const int32_t v = r.perm[static_cast<size_t>(j)];
      if (v < 0 || v >= in || seen[static_cast<size_t>(v)]++) std::abort();
      col[static_cast<size_t>(j)] = v;
    }
  }
  if (r.bytes.size() != infer::dtype_row_bytes(r.type, in) * static_cast<size_t>(out)) std::abort();
  static const int kAwqRev[8] = {0, 4, 1, 5, 2, 6, 3, 7};
  std::vector<float> row(static_cast<size_t>(in));
  for (int64_t o = 0; o < out; ++o) {
    infer::dequantize_row(r.type, r.bytes.data() + o * infer::dtype_row_bytes(r.type, in), row.data(), in);
    for (int64_t j = 0; j < in; ++j) {
      const int64_t i = col[static_cast<size_t>(j)];
      const int64_t g = L.g_idx ? rd32(L.g_idx, i) : i / G;
      const int q = L.awq ? (rd32(L.qweight, i * (out / 8) + o / 8) >> (4 * kAwqRev[o % 8])) & 15
                          : (rd32(L.qweight, (i / 8) * out + o) >> (4 * (i % 8))) & 15;
      int z = (rd32(L.qzeros, g * (out / 8) + o / 8) >> (4 * (L.awq ? kAwqRev[o % 8] : o % 8))) & 15;
      if (L.zero_minus_one) z = (z + 1) & 15;
      uint16_t h;
      std::memcpy(&h, L.scales + 2 * (g * out + o), 2);
      const float want = infer::fp16_to_f32(h) * static_cast<float>(q - z);
      const float got = row[static_cast<size_t>(j)];
      if (!(got == want || (std::isnan(got) && std::isnan(want)))) std::abort();
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const uint8_t sel = data[0] % 8;
  const uint8_t* p = data + 1;
  const size_t n = size - 1;
  const std::string_view text(reinterpret_cast<const char*>(p), n);
  try {
    switch (sel) {
      case 0: {
        auto ts = infer::hf::parse_safetensors(p, n, "fuzz.safetensors");
        std::sort(ts.begin(), ts.end(), [](const auto& a, const auto& b) { return a.begin < b.begin; });
        for (size_t k = 0; k < ts.size(); ++k) {
          if (ts[k].begin > ts[k].end || ts[k].end > n) std::abort();
          if (k > 0 && ts[k].begin < ts[k - 1].end) std::abort();
        }
        break;
      }
      case 1: infer::hf::config_metadata(text); break;
      case 2: {
        // tokenizer.json, then an optional tokenizer_config.json after a NUL byte.
        const size_t z = text.find('\0');
        const std::string_view tj = text.substr(0, z);
        const std::string_view tc = z == std::string_view::npos ? std::string_view() : text.substr(z + 1);
        infer::hf::tokenizer_metadata(tj, tc, "", 0);
        break;
      }
      case 4: repack(p, n); break;
      default: infer::Json::parse(text, "fuzz.json"); break;
    }
  } catch (const infer::Error&) {
  }
  return 0;
}
