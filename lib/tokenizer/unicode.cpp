// UTF-8 classification, the GPT-2 byte-level alphabet and normalization.
#include "tokenizer/unicode.h"

#include <utf8proc.h>

#include <array>
#include <cstdlib>
#include <memory>

#include "core/error.h"

namespace infer {

// ---- UTF-8 ------------------------------------------------------------------

bool utf8_valid(std::string_view s) {
  for (size_t pos = 0; pos < s.size();) {
    if (static_cast<unsigned char>(s[pos]) < 0x80) {
      ++pos;
      continue;
    }
    size_t len = 0;
    if (utf8_next(s, pos, &len) != Utf8Status::Valid) return false;
    pos += len;
  }
  return true;
}

// ---- GPT-2 byte-level alphabet ----------------------------------------------

namespace {

// Byte -> code point, and the UTF-8 of each, built once.
struct ByteAlphabet {
  std::array<uint32_t, 256> cp{};
  std::array<char, 256 * 2> utf8{};  // 1 or 2 bytes per entry
  std::array<uint8_t, 256> len{};
  // Code point (< 0x144) -> byte + 1 (0: not in the alphabet).
  std::array<uint16_t, 0x144> back{};

  ByteAlphabet() {
    uint32_t next = 256;
    for (uint32_t b = 0; b < 256; ++b) {
      const bool self = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
      cp[b] = self ? b : next++;
      std::string s;
      utf8_append(s, cp[b]);
      len[b] = static_cast<uint8_t>(s.size());
      for (size_t i = 0; i < s.size(); ++i) utf8[b * 2 + i] = s[i];
      back[cp[b]] = static_cast<uint16_t>(b + 1);
    }
  }
};

const ByteAlphabet& alphabet() {
  static const ByteAlphabet a;
  return a;
}

}  // namespace

std::string_view byte_to_unicode(uint8_t b) {
  const ByteAlphabet& a = alphabet();
  return std::string_view(&a.utf8[b * 2], a.len[b]);
}

void bytes_to_unicode(std::string_view bytes, std::string& out) {
  const ByteAlphabet& a = alphabet();
  out.reserve(out.size() + bytes.size() * 2);
  for (unsigned char b : bytes) out.append(&a.utf8[b * 2], a.len[b]);
}

void unicode_to_bytes(std::string_view text, std::string& out) {
  const ByteAlphabet& a = alphabet();
  out.reserve(out.size() + text.size());
  for (size_t pos = 0; pos < text.size();) {
    const unsigned char c = static_cast<unsigned char>(text[pos]);
    size_t len = 1;
    if (c < 0x80) {
      if (a.back[c]) {
        out += static_cast<char>(a.back[c] - 1);
      } else {
        out += static_cast<char>(c);  // ' ', control bytes: not in the alphabet
      }
      ++pos;
      continue;
    }
    if (utf8_next(text, pos, &len) != Utf8Status::Valid) {
      out.append(text.data() + pos, len);
      pos += len;
      continue;
    }
    if (len == 2) {
      const uint32_t cp = ((c & 0x1Fu) << 6) | (static_cast<unsigned char>(text[pos + 1]) & 0x3Fu);
      if (cp < a.back.size() && a.back[cp]) {
        out += static_cast<char>(a.back[cp] - 1);
        pos += 2;
        continue;
      }
    }
    out.append(text.data() + pos, len);
    pos += len;
  }
}

// ---- normalization -----------------------------------------------------------

namespace {

// Whether a well-formed run can change under the form: NFC leaves text with
// no code point at or above U+0300 (the first combining mark) alone, and
// ASCII is invariant under both forms.
bool may_change(std::string_view run, Normalization form) {
  for (size_t i = 0; i < run.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(run[i]);
    if (c < 0x80) continue;
    if (form == Normalization::NFKC) return true;
    if (c >= 0xCC) return true;  // lead bytes of U+0300 and above
  }
  return false;
}

void normalize_run(std::string_view run, Normalization form, std::string& out) {
  if (!may_change(run, form)) {
    out.append(run);
    return;
  }
  int options = UTF8PROC_STABLE | UTF8PROC_COMPOSE;
  if (form == Normalization::NFKC) options |= UTF8PROC_COMPAT;
  utf8proc_uint8_t* dst = nullptr;
  const utf8proc_ssize_t n =
      utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(run.data()),
                   static_cast<utf8proc_ssize_t>(run.size()), &dst, static_cast<utf8proc_option_t>(options));
  std::unique_ptr<utf8proc_uint8_t, void (*)(void*)> owner(dst, std::free);
  if (n < 0) {
    if (n == UTF8PROC_ERROR_NOMEM) throw std::bad_alloc();
    raise(Status::Internal, "Unicode normalization failed: %s", utf8proc_errmsg(n));
  }
  out.append(reinterpret_cast<const char*>(dst), static_cast<size_t>(n));
}

// Normalizes well-formed text piecewise: ASCII is invariant, and no ASCII
// character composes with what precedes it (none is the second of a
// composition pair), so the text can be cut before any ASCII character that
// is followed by another one (or ends the text). Only the regions around
// non-ASCII characters, each with the ASCII character before it (which may
// compose with a following mark), go through utf8proc.
void normalize_valid(std::string_view s, Normalization form, std::string& out) {
  const size_t n = s.size();
  auto ascii = [&](size_t i) { return static_cast<unsigned char>(s[i]) < 0x80; };
  size_t i = 0;
  while (i < n) {
    size_t j = i;
    while (j < n && ascii(j)) ++j;
    if (j == n) {
      out.append(s.substr(i));
      return;
    }
    const size_t start = j > i ? j - 1 : j;
    out.append(s.substr(i, start - i));
    size_t k = j;
    while (k < n && !(ascii(k) && (k + 1 == n || ascii(k + 1)))) ++k;
    normalize_run(s.substr(start, k - start), form, out);
    i = k;
  }
}

}  // namespace

std::string normalize(std::string_view s, Normalization form) {
  if (form == Normalization::None) return std::string(s);
  std::string out;
  out.reserve(s.size() + s.size() / 8);
  size_t run = 0;  // start of the current well-formed run
  for (size_t pos = 0; pos < s.size();) {
    if (static_cast<unsigned char>(s[pos]) < 0x80) {
      ++pos;
      continue;
    }
    size_t len = 0;
    if (utf8_next(s, pos, &len) == Utf8Status::Valid) {
      pos += len;
      continue;
    }
    normalize_valid(s.substr(run, pos - run), form, out);
    out.append(s.data() + pos, len);  // ill-formed bytes stay as they are
    pos += len;
    run = pos;
  }
  normalize_valid(s.substr(run), form, out);
  return out;
}

}  // namespace infer
