// libFuzzer target for the Hugging Face directory readers (lib/hf): the
// safetensors header, config.json, tokenizer.json with tokenizer_config.json,
// and the JSON reader under them. The first byte picks the reader, the rest
// is its input; any input must either be accepted or fail with infer::Error.
// An accepted safetensors header must describe ranges inside the input that
// do not overlap, whatever the header claims.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "core/error.h"
#include "hf/hf.h"
#include "core/json.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const uint8_t sel = data[0] % 4;
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
      default: infer::Json::parse(text, "fuzz.json"); break;
    }
  } catch (const infer::Error&) {
  }
  return 0;
}
