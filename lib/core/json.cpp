#include "core/json.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "core/error.h"
#include "core/utf8.h"

namespace infer {

namespace {

// JSON's two-character escapes: the character and the letter after '\\'.
constexpr char kEscapes[][2] = {{'"', '"'}, {'\\', '\\'}, {'\b', 'b'}, {'\f', 'f'},
                                {'\n', 'n'}, {'\r', 'r'}, {'\t', 't'}};

// The character that escape letter e stands for ('/' included), 0 if none.
char unescape_letter(char e) {
  if (e == '/') return '/';
  for (const auto& [c, letter] : kEscapes)
    if (letter == e) return c;
  return 0;
}

}  // namespace

const char* json_kind_name(Json::Kind k) {
  switch (k) {
    case Json::Kind::Null: return "null";
    case Json::Kind::Bool: return "a boolean";
    case Json::Kind::Number: return "a number";
    case Json::Kind::String: return "a string";
    case Json::Kind::Array: return "an array";
    case Json::Kind::Object: return "an object";
  }
  return "?";
}

const Json* Json::find(std::string_view key) const {
  if (kind_ != Kind::Object) return nullptr;
  for (size_t k = obj_.size(); k-- > 0;)
    if (obj_[k].first == key) return &obj_[k].second;
  return nullptr;
}

class JsonParser {
 public:
  JsonParser(std::string_view t, const char* what, Status status) : t_(t), what_(what), status_(status) {}

  Json document() {
    Json v = value(0);
    skip_ws();
    if (p_ != t_.size()) fail("unexpected text after the JSON value");
    return v;
  }

 private:
  [[noreturn]] void fail(const char* msg) const {
    raise(status_, "%s: invalid JSON at byte %zu: %s", what_, p_, msg);
  }
  void skip_ws() {
    while (p_ < t_.size() && (t_[p_] == ' ' || t_[p_] == '\t' || t_[p_] == '\n' || t_[p_] == '\r')) ++p_;
  }
  // Skips whitespace, then consumes c if it is next.
  bool eat(char c) {
    skip_ws();
    if (p_ >= t_.size() || t_[p_] != c) return false;
    ++p_;
    return true;
  }
  // After an item of a list closed by `close`: true after a ',', false after
  // the closing bracket, an error (msg) otherwise.
  bool more(char close, const char* msg) {
    if (eat(',')) return true;
    if (eat(close)) return false;
    fail(msg);
  }
  bool literal(const char* w) {
    const size_t n = std::strlen(w);
    if (t_.compare(p_, n, w) != 0) return false;
    p_ += n;
    return true;
  }

  // Recursion is bounded: one frame per level, at most kMaxDepth levels.
  // `depth`: the arrays and objects around this value.
  Json value(int depth) {
    skip_ws();
    if (p_ >= t_.size()) fail("unexpected end of text");
    Json v;
    const char c = t_[p_];
    if ((c == '{' || c == '[') && depth >= Json::kMaxDepth)
      raise(status_, "%s: invalid JSON at byte %zu: nested too deeply (more than %d levels)", what_, p_, Json::kMaxDepth);
    if (c == '{') {
      v.kind_ = Json::Kind::Object;
      ++p_;
      if (eat('}')) return v;
      do {
        skip_ws();
        if (p_ >= t_.size() || t_[p_] != '"') fail("expected a string key");
        std::string key = string();
        if (!eat(':')) fail("expected ':'");
        v.obj_.emplace_back(std::move(key), value(depth + 1));
      } while (more('}', "expected ',' or '}'"));
      return v;
    }
    if (c == '[') {
      v.kind_ = Json::Kind::Array;
      ++p_;
      if (eat(']')) return v;
      do v.arr_.push_back(value(depth + 1));
      while (more(']', "expected ',' or ']'"));
      return v;
    }
    if (c == '"') {
      v.kind_ = Json::Kind::String;
      v.s_ = string();
      return v;
    }
    if (literal("true")) { v.kind_ = Json::Kind::Bool; v.b_ = true; return v; }
    if (literal("false")) { v.kind_ = Json::Kind::Bool; v.b_ = false; return v; }
    if (literal("null")) return v;
    if (c == '-' || (c >= '0' && c <= '9')) return number();
    fail("unexpected character");
  }

  Json number() {
    const size_t start = p_;
    bool integral = true;
    if (t_[p_] == '-') ++p_;
    auto digits = [&]() {
      const size_t s = p_;
      while (p_ < t_.size() && t_[p_] >= '0' && t_[p_] <= '9') ++p_;
      if (p_ == s) fail("malformed number");
    };
    if (p_ < t_.size() && t_[p_] == '0') {
      ++p_;
    } else {
      digits();
    }
    if (p_ < t_.size() && t_[p_] == '.') { ++p_; digits(); integral = false; }
    if (p_ < t_.size() && (t_[p_] == 'e' || t_[p_] == 'E')) {
      ++p_;
      if (p_ < t_.size() && (t_[p_] == '+' || t_[p_] == '-')) ++p_;
      digits();
      integral = false;
    }
    const std::string text(t_.substr(start, p_ - start));
    Json v;
    v.kind_ = Json::Kind::Number;
    v.s_ = text;
    v.d_ = std::strtod(text.c_str(), nullptr);  // may be +-inf for huge values: checked by users
    if (integral) {
      errno = 0;
      const long long x = std::strtoll(text.c_str(), nullptr, 10);
      if (errno == 0) { v.is_int_ = true; v.i_ = x; }
    }
    return v;
  }

  uint32_t hex4() {
    if (t_.size() - p_ < 4) fail("truncated \\u escape");
    uint32_t v = 0;
    for (int k = 0; k < 4; ++k) {
      const char c = t_[p_++];
      v <<= 4;
      if (c >= '0' && c <= '9') v |= static_cast<uint32_t>(c - '0');
      else if (c >= 'a' && c <= 'f') v |= static_cast<uint32_t>(c - 'a' + 10);
      else if (c >= 'A' && c <= 'F') v |= static_cast<uint32_t>(c - 'A' + 10);
      else fail("bad \\u escape");
    }
    return v;
  }

  // Length of the well-formed UTF-8 sequence at p_, 0 when ill-formed.
  size_t utf8_len() const {
    const Utf8Decoded d = utf8_decode(t_, p_);
    return d.status == Utf8Status::Valid ? d.len : 0;
  }

  std::string string() {
    ++p_;  // opening quote
    std::string out;
    for (;;) {
      if (p_ >= t_.size()) fail("unterminated string");
      const unsigned char c = static_cast<unsigned char>(t_[p_]);
      if (c == '"') { ++p_; return out; }
      if (c < 0x20) fail("control character in a string");
      if (c == '\\') {
        ++p_;
        if (p_ >= t_.size()) fail("unterminated string");
        const char e = t_[p_++];
        if (e == 'u') {
          uint32_t cp = hex4();
          if (cp >= 0xD800 && cp <= 0xDBFF) {
            if (t_.size() - p_ < 6 || t_[p_] != '\\' || t_[p_ + 1] != 'u') fail("unpaired surrogate");
            p_ += 2;
            const uint32_t lo = hex4();
            if (lo < 0xDC00 || lo > 0xDFFF) fail("unpaired surrogate");
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
          } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
            fail("unpaired surrogate");
          }
          utf8_append(out, cp);
          continue;
        }
        const char unescaped = unescape_letter(e);
        if (unescaped == 0) fail("bad escape");
        out += unescaped;
        continue;
      }
      const size_t n = utf8_len();
      if (n == 0) fail("invalid UTF-8 in a string");
      out.append(t_.data() + p_, n);
      p_ += n;
    }
  }

  std::string_view t_;
  const char* what_;
  Status status_;
  size_t p_ = 0;
};

Json Json::parse(std::string_view text, const char* what, Status status) {
  if (text.size() > kMaxBytes)
    raise(status, "%s: the JSON text is too large (%zu bytes; at most %zu)", what, text.size(), kMaxBytes);
  JsonParser p(text, what, status);
  return p.document();
}

// ---- writing -----------------------------------------------------------------

void json_append_string(std::string& out, std::string_view s) {
  out += '"';
  for (const char ch : s) {
    const unsigned char c = static_cast<unsigned char>(ch);
    if (c >= 0x20 && ch != '"' && ch != '\\') {
      out += ch;
      continue;
    }
    char letter = 0;
    for (const auto& [e, l] : kEscapes)
      if (e == ch) letter = l;
    if (letter != 0) {
      (out += '\\') += letter;
    } else {
      static constexpr char kHex[] = "0123456789abcdef";
      out += "\\u00";
      (out += kHex[c >> 4]) += kHex[c & 0xF];
    }
  }
  out += '"';
}

void JsonWriter::newline(size_t level) {
  out_ += '\n';
  out_.append(static_cast<size_t>(indent_) * level, ' ');
}

void JsonWriter::separate() {
  if (after_key_) {  // a member's value follows its key on the same line
    after_key_ = false;
    return;
  }
  if (counts_.empty()) return;
  if (counts_.back()++ > 0) out_ += indent_ >= 0 ? "," : ", ";
  if (indent_ >= 0) newline(counts_.size());
}

void JsonWriter::scalar(std::string_view text) {
  separate();
  out_ += text;
}

void JsonWriter::string(std::string_view s) {
  separate();
  json_append_string(out_, s);
}

void JsonWriter::key(std::string_view k) {
  separate();
  json_append_string(out_, k);
  out_ += ": ";
  after_key_ = true;
}

void JsonWriter::open(char bracket) {
  separate();
  out_ += bracket;
  counts_.push_back(0);
}

void JsonWriter::close(char bracket) {
  const bool empty = counts_.back() == 0;
  counts_.pop_back();
  if (!empty && indent_ >= 0) newline(counts_.size());
  out_ += bracket;
}

}  // namespace infer
