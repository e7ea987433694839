// UTF-8 and Unicode helpers shared by the tokenizers (internal to
// lib/tokenizer): strict UTF-8 classification, the GPT-2 byte-level alphabet
// and Unicode normalization (NFC / NFKC through utf8proc).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "core/utf8.h"

namespace infer {

// ---- UTF-8 ------------------------------------------------------------------

// Utf8Status and the decoder itself: core/utf8.h.

// Classifies the bytes at s[pos..] (utf8_decode's status). `len` receives the
// length of the code point (Valid) or of the longest well-formed prefix
// (Invalid and Truncated, at least 1): Unicode's "maximal subpart", which is
// what one U+FFFD replaces. pos must be < s.size().
inline Utf8Status utf8_next(std::string_view s, size_t pos, size_t* len) {
  const Utf8Decoded d = utf8_decode(s, pos);
  *len = d.len;
  return d.status;
}

// Whether all of s is well-formed UTF-8.
bool utf8_valid(std::string_view s);

// Length of the code point that starts with lead byte c in well-formed text
// (1 for bytes that cannot start one).
inline size_t utf8_len_from_lead(unsigned char c) {
  if (c < 0xC0) return 1;
  if (c < 0xE0) return 2;
  if (c < 0xF0) return 3;
  return 4;
}

// utf8_append(out, cp): core/utf8.h.

// U+FFFD REPLACEMENT CHARACTER in UTF-8.
inline constexpr std::string_view kUtf8Replacement = "\xEF\xBF\xBD";

// ---- GPT-2 byte-level alphabet ----------------------------------------------
//
// Byte-level BPE vocabularies spell every byte as a printable code point:
// bytes 0x21-0x7E, 0xA1-0xAC and 0xAE-0xFF stand for themselves (as code
// points), the other 68 bytes take U+0100, U+0101, ... in byte order (so ' '
// is U+0120 "Ġ" and '\n' is U+010A "Ċ"). Token texts are written in this
// alphabet; decoding maps it back to bytes.

// The UTF-8 text of byte b's code point (1 or 2 bytes).
std::string_view byte_to_unicode(uint8_t b);
// Appends the byte-level spelling of every byte of `bytes`.
void bytes_to_unicode(std::string_view bytes, std::string& out);
// Maps byte-level text back to bytes, appending to out. A code point outside
// the alphabet (e.g. raw text in an added token) is copied as its UTF-8, and
// invalid UTF-8 bytes are copied unchanged.
void unicode_to_bytes(std::string_view text, std::string& out);

// ---- normalization -----------------------------------------------------------

enum class Normalization { None, NFC, NFKC };

// Returns s in the given normalization form. Well-formed runs are normalized;
// bytes that are not well-formed UTF-8 are kept where they are, unchanged.
// ASCII-only text is returned as is without calling into utf8proc.
std::string normalize(std::string_view s, Normalization form);

}  // namespace infer
