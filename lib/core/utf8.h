// The library's one UTF-8 encoder and one UTF-8 decoder, shared by every
// layer that reads or writes text as code points (the JSON reader, the
// tokenizers, the chat template interpreter).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace infer {

// Appends the UTF-8 encoding of code point cp (<= 0x10FFFF) to out.
inline void utf8_append(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

enum class Utf8Status {
  Valid,      // a complete, well-formed code point
  Invalid,    // a byte sequence that can never become a code point
  Truncated,  // a well-formed prefix of a code point cut off by the end of input
};

struct Utf8Decoded {
  uint32_t cp;  // the code point; U+FFFD unless Valid
  size_t len;   // bytes consumed, at least 1 (see utf8_decode)
  Utf8Status status;
};

// Decodes the code point at s[pos] (pos < s.size()). Well-formed means
// RFC 3629: no overlong forms, no surrogates, nothing above U+10FFFF.
// Invalid-byte policy: an ill-formed or truncated sequence decodes as U+FFFD
// with `len` the length of its longest well-formed prefix (at least 1),
// Unicode's "maximal subpart", so a caller that replaces each such `len`
// bytes with one U+FFFD follows the Unicode recommendation. Callers that want
// one U+FFFD per invalid byte instead use utf8_decode_lossy.
inline Utf8Decoded utf8_decode(std::string_view s, size_t pos) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data()) + pos;
  const size_t avail = s.size() - pos;
  const uint32_t c = p[0];
  if (c < 0x80) return {c, 1, Utf8Status::Valid};
  // The allowed range of the second byte narrows for E0, ED, F0 and F4.
  size_t need;
  uint32_t cp;
  unsigned lo = 0x80, hi = 0xBF;
  if (c >= 0xC2 && c <= 0xDF) {
    need = 2;
    cp = c & 0x1F;
  } else if (c >= 0xE0 && c <= 0xEF) {
    need = 3;
    cp = c & 0x0F;
    if (c == 0xE0) lo = 0xA0;
    if (c == 0xED) hi = 0x9F;
  } else if (c >= 0xF0 && c <= 0xF4) {
    need = 4;
    cp = c & 0x07;
    if (c == 0xF0) lo = 0x90;
    if (c == 0xF4) hi = 0x8F;
  } else {
    return {0xFFFD, 1, Utf8Status::Invalid};
  }
  for (size_t i = 1; i < need; ++i) {
    if (i >= avail) return {0xFFFD, i, Utf8Status::Truncated};
    const unsigned b = p[i];
    if (b < (i == 1 ? lo : 0x80u) || b > (i == 1 ? hi : 0xBFu)) return {0xFFFD, i, Utf8Status::Invalid};
    cp = (cp << 6) | (b & 0x3F);
  }
  return {cp, need, Utf8Status::Valid};
}

// utf8_decode with the policy "one U+FFFD per invalid byte": a byte that does
// not start a well-formed code point decodes as U+FFFD of length 1 (the
// template interpreter's and the chat layer's view of text: every invalid
// byte is one character, kept as it is in the output).
inline uint32_t utf8_decode_lossy(std::string_view s, size_t pos, size_t* len) {
  const Utf8Decoded d = utf8_decode(s, pos);
  *len = d.status == Utf8Status::Valid ? d.len : 1;
  return d.cp;
}

}  // namespace infer
