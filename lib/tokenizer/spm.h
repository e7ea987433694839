// SentencePiece-style BPE tokenizer (tokenizer.ggml.model = "llama") and the
// small UTF-8 helpers the tokenizers share. Internal to lib/tokenizer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "tokenizer/tokenizer.h"

namespace infer {

std::unique_ptr<Tokenizer> make_spm_tokenizer(Vocab vocab);

// ---- UTF-8 ------------------------------------------------------------------

enum class Utf8Status {
  Valid,      // a complete, well-formed code point
  Invalid,    // a byte sequence that can never become a code point
  Truncated,  // a well-formed prefix of a code point cut off by the end of input
};

// Classifies the bytes at s[pos..]. Well-formed means RFC 3629: no overlong
// forms, no surrogates, nothing above U+10FFFF. `len` receives the length of
// the code point (Valid) or of the longest well-formed prefix (Invalid and
// Truncated, at least 1): Unicode's "maximal subpart", which is what one U+FFFD
// replaces. pos must be < s.size().
Utf8Status utf8_next(std::string_view s, size_t pos, size_t* len);

// U+FFFD REPLACEMENT CHARACTER in UTF-8.
inline constexpr std::string_view kUtf8Replacement = "\xEF\xBF\xBD";

}  // namespace infer
