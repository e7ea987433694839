// The Jinja-subset interpreter: values, JSON, lexer, parser, renderer.
// See jinja.h for the subset and the semantics it follows.
#include "tokenizer/jinja.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>
#include <limits>

#include "core/error.h"
#include "core/json.h"
#include "core/utf8.h"

namespace infer::jinja {

namespace {

[[noreturn]] void fail(ErrorKind kind, int line, const std::string& msg) { throw TemplateError(kind, line, msg); }

// ---- UTF-8 and Python's notion of whitespace ---------------------------------------------

// Decodes the code point at s[pos]; invalid bytes decode as themselves
// (0xFFFD stand-in, length 1).
uint32_t decode(std::string_view s, size_t pos, size_t* len) {
  const unsigned char c = static_cast<unsigned char>(s[pos]);
  if (c < 0x80) {
    *len = 1;
    return c;
  }
  size_t n = c >= 0xF0 && c < 0xF5 ? 4 : c >= 0xE0 ? 3 : c >= 0xC2 && c < 0xE0 ? 2 : 0;
  if (n == 0 || pos + n > s.size()) {
    *len = 1;
    return 0xFFFD;
  }
  uint32_t cp = c & (n == 2 ? 0x1F : n == 3 ? 0x0F : 0x07);
  for (size_t i = 1; i < n; ++i) {
    const unsigned char d = static_cast<unsigned char>(s[pos + i]);
    if ((d & 0xC0) != 0x80) {
      *len = 1;
      return 0xFFFD;
    }
    cp = (cp << 6) | (d & 0x3F);
  }
  *len = n;
  return cp;
}

// Python's str.isspace().
bool py_space(uint32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x20) || cp == 0x85 || cp == 0xA0 ||
         cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F ||
         cp == 0x205F || cp == 0x3000;
}

// Byte offsets of each code point start, plus the end.
std::vector<size_t> cp_offsets(std::string_view s) {
  std::vector<size_t> off;
  off.reserve(s.size() + 1);
  for (size_t i = 0; i < s.size();) {
    off.push_back(i);
    size_t len;
    decode(s, i, &len);
    i += len;
  }
  off.push_back(s.size());
  return off;
}

size_t cp_count(std::string_view s) {
  size_t n = 0;
  for (size_t i = 0; i < s.size(); ++n) {
    size_t len;
    decode(s, i, &len);
    i += len;
  }
  return n;
}

// Strips code points in `chars` (nullptr: whitespace) from the left and/or right.
std::string py_strip(std::string_view s, bool left, bool right, const std::string* chars) {
  std::vector<uint32_t> set;
  if (chars)
    for (size_t i = 0; i < chars->size();) {
      size_t len;
      set.push_back(decode(*chars, i, &len));
      i += len;
    }
  auto strip_cp = [&](uint32_t cp) {
    return chars ? std::find(set.begin(), set.end(), cp) != set.end() : py_space(cp);
  };
  const std::vector<size_t> off = cp_offsets(s);
  size_t b = 0, e = off.size() - 1;  // code point indices
  if (left)
    while (b < e) {
      size_t len;
      if (!strip_cp(decode(s, off[b], &len))) break;
      ++b;
    }
  if (right)
    while (e > b) {
      size_t len;
      if (!strip_cp(decode(s, off[e - 1], &len))) break;
      --e;
    }
  return std::string(s.substr(off[b], off[e] - off[b]));
}

std::string ascii_upper(std::string s) {
  for (char& c : s)
    if (c >= 'a' && c <= 'z') c = static_cast<char>(c - 32);
  return s;
}
std::string ascii_lower(std::string s) {
  for (char& c : s)
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c + 32);
  return s;
}

// ---- numbers as Python prints them -------------------------------------------------------

std::string py_float(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  if (d == 0) return std::signbit(d) ? "-0.0" : "0.0";
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof buf, d, std::chars_format::scientific);
  std::string sci(buf, r.ptr);  // [-]d[.ddd]e[+-]XX, shortest round trip
  const bool neg = sci[0] == '-';
  if (neg) sci.erase(0, 1);
  const size_t epos = sci.find('e');
  std::string digits = sci.substr(0, epos);
  const int exp = std::atoi(sci.c_str() + epos + 1);
  digits.erase(std::remove(digits.begin(), digits.end(), '.'), digits.end());
  std::string out;
  if (exp < -4 || exp >= 16) {
    out = digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    char e[16];
    std::snprintf(e, sizeof e, "e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
    out += e;
  } else if (exp < 0) {
    out = "0." + std::string(static_cast<size_t>(-exp - 1), '0') + digits;
  } else {
    const size_t ip = static_cast<size_t>(exp) + 1;
    if (digits.size() <= ip) {
      out = digits + std::string(ip - digits.size(), '0') + ".0";
    } else {
      out = digits.substr(0, ip) + "." + digits.substr(ip);
    }
  }
  return neg ? "-" + out : out;
}

// ---- bounded walks over values and linear substring search ------------------------------

// The deepest value graph a walk (printing, tojson, comparison) follows.
constexpr size_t kMaxValueDepth = 128;
// What one element of a list (or one dict entry) costs the working-memory budget:
// the Value itself plus the bookkeeping beside it.
constexpr uint64_t kValueBytes = sizeof(Value) + 16;
// Bytes scanned (compared, searched, copied) per step charged to the step budget.
constexpr uint64_t kScanBytesPerStep = 64;

// The render's budgets, as seen by code outside the renderer.
struct Meter {
  virtual ~Meter() = default;
  virtual void steps(uint64_t n) = 0;
};

// Guards one recursive walk over a value graph: values that contain
// themselves (a namespace stored in itself, directly or through lists and
// dicts) and graphs deeper than kMaxValueDepth are refused with a Limit
// error, never followed until the stack overflows; with a meter, every
// container visited and every byte compared costs steps.
class Walk {
 public:
  Walk(const char* what, int line, Meter* meter) : what_(what), line_(line), meter_(meter) {}
  void enter(const void* container) {
    if (meter_) meter_->steps(1);
    if (std::find(path_.begin(), path_.end(), container) != path_.end())
      fail(ErrorKind::Limit, line_, strformat("%s: a value contains itself (a namespace, list or dict stored inside itself)", what_));
    if (path_.size() >= kMaxValueDepth)
      fail(ErrorKind::Limit, line_, strformat("%s: values nest deeper than %zu levels", what_, kMaxValueDepth));
    path_.push_back(container);
  }
  void leave() { path_.pop_back(); }
  void scan(size_t bytes) {
    if (meter_) meter_->steps(bytes / kScanBytesPerStep);
  }
  int line() const { return line_; }
  const char* what() const { return what_; }

 private:
  const char* what_;
  int line_;
  Meter* meter_;
  std::vector<const void*> path_;
};

// Substring search in linear time (Knuth-Morris-Pratt for needles longer than
// a few bytes; the plain search is linear enough for those), so that `in`,
// find, count, replace and split over megabytes cannot run for minutes.
class Finder {
 public:
  explicit Finder(std::string_view needle) : n_(needle) {
    if (n_.size() <= kShort) return;
    fail_.assign(n_.size(), 0);
    for (uint32_t i = 1, k = 0; i < n_.size(); ++i) {
      while (k > 0 && n_[i] != n_[k]) k = fail_[k - 1];
      if (n_[i] == n_[k]) ++k;
      fail_[i] = k;
    }
  }
  // The first position >= from where the needle starts, or npos.
  size_t find(std::string_view hay, size_t from) const {
    if (from > hay.size()) return std::string_view::npos;
    if (n_.size() <= kShort) return hay.find(n_, from);
    for (size_t i = from, k = 0; i < hay.size(); ++i) {  // k < needle size
      while (k > 0 && hay[i] != n_[k]) k = fail_[k - 1];
      if (hay[i] == n_[k] && ++k == n_.size()) return i + 1 - n_.size();
    }
    return std::string_view::npos;
  }

 private:
  static constexpr size_t kShort = 8;
  std::string_view n_;
  std::vector<uint32_t> fail_;  // needles are at most the output budget (16 MiB)
};

// ---- JSON --------------------------------------------------------------------------------

void json_string(std::string& out, std::string_view s) {
  out += '"';
  for (char ch : s) {
    const unsigned char c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += ch;
        }
    }
  }
  out += '"';
}

void json_dump(std::string& out, const Value& v, int indent, int level, size_t limit, Walk& w) {
  if (out.size() > limit)
    fail(ErrorKind::Limit, w.line(), strformat("tojson output exceeds the output budget (%zu bytes)", limit));
  auto newline = [&](int lvl) {
    out += '\n';
    out.append(static_cast<size_t>(indent) * static_cast<size_t>(lvl), ' ');
  };
  switch (v.kind()) {
    case Value::Kind::None: out += "null"; return;
    case Value::Kind::Bool: out += v.as_bool() ? "true" : "false"; return;
    case Value::Kind::Int: out += std::to_string(v.as_int()); return;
    case Value::Kind::Float: {
      const double d = v.as_float();
      out += std::isnan(d) ? "NaN" : std::isinf(d) ? (d > 0 ? "Infinity" : "-Infinity") : py_float(d);
      return;
    }
    case Value::Kind::String: json_string(out, v.str()); return;
    case Value::Kind::Array: {
      const Array& a = v.arr();
      if (a.empty()) {
        out += "[]";
        return;
      }
      w.enter(&a);
      out += '[';
      for (size_t i = 0; i < a.size(); ++i) {
        if (i) out += indent >= 0 ? "," : ", ";
        if (indent >= 0) newline(level + 1);
        json_dump(out, a[i], indent, level + 1, limit, w);
      }
      if (indent >= 0) newline(level);
      out += ']';
      w.leave();
      return;
    }
    case Value::Kind::Object: {
      const auto& items = v.obj().items;
      if (items.empty()) {
        out += "{}";
        return;
      }
      w.enter(&v.obj());
      out += '{';
      for (size_t i = 0; i < items.size(); ++i) {
        if (i) out += indent >= 0 ? "," : ", ";
        if (indent >= 0) newline(level + 1);
        json_string(out, items[i].first);
        out += ": ";
        json_dump(out, items[i].second, indent, level + 1, limit, w);
      }
      if (indent >= 0) newline(level);
      out += '}';
      w.leave();
      return;
    }
    case Value::Kind::Undefined: fail(ErrorKind::Runtime, w.line(), "tojson: an undefined value is not JSON serializable");
    case Value::Kind::Callable: fail(ErrorKind::Runtime, w.line(), "tojson: a function is not JSON serializable");
  }
}

// A parsed JSON value (core/json.h) as a template value: objects keep their
// keys' order (a repeated key: the last value), integers stay integers.
Value from_json_value(const Json& j) {
  switch (j.kind()) {
    case Json::Kind::Null: return Value::none();
    case Json::Kind::Bool: return Value(j.as_bool());
    case Json::Kind::Number: return j.is_int() ? Value(j.as_int()) : Value(j.as_double());
    case Json::Kind::String: return Value(j.as_string());
    case Json::Kind::Array: {
      Value v = Value::array();
      for (const Json& item : j.items()) v.push(from_json_value(item));
      return v;
    }
    case Json::Kind::Object: {
      Value v = Value::object();
      for (const auto& [key, item] : j.members()) v.set(key, from_json_value(item));
      return v;
    }
  }
  return Value::none();
}

}  // namespace

// ---- Value --------------------------------------------------------------------------------

Value::Value(std::string s) : kind_(Kind::String), s_(std::make_shared<const std::string>(std::move(s))) {}

Value Value::none() {
  Value v;
  v.kind_ = Kind::None;
  return v;
}

Value Value::array(Array items) {
  Value v;
  v.kind_ = Kind::Array;
  v.a_ = std::make_shared<Array>(std::move(items));
  return v;
}

Value Value::tuple(Array items) {
  Value v = array(std::move(items));
  v.tuple_ = true;
  return v;
}

Value Value::object() {
  Value v;
  v.kind_ = Kind::Object;
  v.o_ = std::make_shared<Object>();
  return v;
}

Value Value::callable(std::shared_ptr<Callable> fn) {
  Value v;
  v.kind_ = Kind::Callable;
  v.c_ = std::move(fn);
  return v;
}

Value Value::from_json(std::string_view json) {
  return from_json_value(Json::parse(json, "JSON text", Status::InvalidArgument));
}

void Value::set(const std::string& key, Value v) {
  if (kind_ == Kind::Object) o_->set(key, std::move(v));
}

void Value::push(Value v) {
  if (kind_ == Kind::Array) a_->push_back(std::move(v));
}

const Value* Value::find(std::string_view key) const { return kind_ == Kind::Object ? o_->find(key) : nullptr; }

std::string Value::to_json(int indent) const {
  std::string out;
  Walk w("to_json", 0, nullptr);
  json_dump(out, *this, indent, 0, std::numeric_limits<size_t>::max(), w);
  return out;
}

Value* Object::find(std::string_view key) {
  for (auto& kv : items)
    if (kv.first == key) return &kv.second;
  return nullptr;
}

void Object::set(const std::string& key, Value v) {
  if (Value* old = find(key)) {
    *old = std::move(v);
  } else {
    items.emplace_back(key, std::move(v));
  }
}

TemplateError::TemplateError(ErrorKind kind, int line, const std::string& message)
    : Error(kind == ErrorKind::Syntax || kind == ErrorKind::Unsupported ? Status::Unsupported
                                                                        : Status::InvalidArgument,
            kind == ErrorKind::Raised ? message
            : line > 0                ? strformat("chat template line %d: %s", line, message.c_str())
                                      : "chat template: " + message),
      kind_(kind),
      line_(line) {}

// ---- lexer --------------------------------------------------------------------------------

namespace {

enum class Tok { Text, VarBegin, VarEnd, BlockBegin, BlockEnd, Name, String, Int, Float, Op, End };

struct Token {
  Tok t;
  std::string s;  // text, name, string value, operator
  int64_t i = 0;
  double f = 0;
  int line = 1;
};

bool is_name_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool is_name_char(char c) { return is_name_start(c) || (c >= '0' && c <= '9'); }

// Python's str.rstrip() of a UTF-8 string.
std::string py_rstrip(std::string_view s) { return py_strip(s, false, true, nullptr); }

// Skips Python whitespace from pos; returns the new position.
size_t skip_py_space(std::string_view s, size_t pos) {
  while (pos < s.size()) {
    size_t len;
    if (!py_space(decode(s, pos, &len))) break;
    pos += len;
  }
  return pos;
}

int count_lines(std::string_view s) { return static_cast<int>(std::count(s.begin(), s.end(), '\n')); }

// A string literal's escapes, as Python's unicode-escape codec reads them.
std::string unescape(std::string_view body, int line) {
  std::string out;
  for (size_t i = 0; i < body.size(); ++i) {
    const char c = body[i];
    if (c != '\\' || i + 1 >= body.size()) {
      out += c;
      continue;
    }
    const char e = body[++i];
    switch (e) {
      case '\n': break;
      case '\\': out += '\\'; break;
      case '\'': out += '\''; break;
      case '"': out += '"'; break;
      case 'a': out += '\a'; break;
      case 'b': out += '\b'; break;
      case 'f': out += '\f'; break;
      case 'n': out += '\n'; break;
      case 'r': out += '\r'; break;
      case 't': out += '\t'; break;
      case 'v': out += '\v'; break;
      case 'x':
      case 'u':
      case 'U': {
        const size_t n = e == 'x' ? 2 : e == 'u' ? 4 : 8;
        if (i + n >= body.size()) fail(ErrorKind::Syntax, line, "truncated \\" + std::string(1, e) + " escape in a string");
        uint32_t cp = 0;
        for (size_t k = 1; k <= n; ++k) {
          const char h = body[i + k];
          cp <<= 4;
          if (h >= '0' && h <= '9') cp |= static_cast<uint32_t>(h - '0');
          else if (h >= 'a' && h <= 'f') cp |= static_cast<uint32_t>(h - 'a' + 10);
          else if (h >= 'A' && h <= 'F') cp |= static_cast<uint32_t>(h - 'A' + 10);
          else fail(ErrorKind::Syntax, line, "bad \\" + std::string(1, e) + " escape in a string");
        }
        if (cp > 0x10FFFF) fail(ErrorKind::Syntax, line, "escape beyond U+10FFFF in a string");
        i += n;
        utf8_append(out, cp);
        break;
      }
      default:
        if (e >= '0' && e <= '7') {
          uint32_t cp = static_cast<uint32_t>(e - '0');
          for (int k = 0; k < 2 && i + 1 < body.size() && body[i + 1] >= '0' && body[i + 1] <= '7'; ++k)
            cp = cp * 8 + static_cast<uint32_t>(body[++i] - '0');
          utf8_append(out, cp);
        } else if (e == 'N') {
          fail(ErrorKind::Unsupported, line, "\\N{...} escapes in strings are not supported");
        } else {
          out += '\\';
          out += e;
        }
    }
  }
  return out;
}

// Splits the source into text and tag tokens, applying jinja2's whitespace
// rules with trim_blocks and lstrip_blocks (see jinja.h).
std::vector<Token> lex(std::string_view src_in) {
  // Line breaks become \n; one trailing newline goes (keep_trailing_newline=False).
  std::string src;
  src.reserve(src_in.size());
  for (size_t i = 0; i < src_in.size(); ++i) {
    if (src_in[i] == '\r') {
      src += '\n';
      if (i + 1 < src_in.size() && src_in[i + 1] == '\n') ++i;
    } else {
      src += src_in[i];
    }
  }
  if (!src.empty() && src.back() == '\n') src.pop_back();

  std::vector<Token> toks;
  size_t pos = 0;
  int line = 1;
  bool line_starting = true;
  bool strip_next = false;  // the previous tag ended with -%} / -}} / -#}
  while (pos <= src.size()) {
    size_t start = std::string::npos;
    for (size_t k = src.find('{', pos); k != std::string::npos && k + 1 < src.size(); k = src.find('{', k + 1))
      if (src[k + 1] == '{' || src[k + 1] == '%' || src[k + 1] == '#') {
        start = k;
        break;
      }
    std::string text = src.substr(pos, start == std::string::npos ? std::string::npos : start - pos);
    if (strip_next) {
      text = text.substr(skip_py_space(text, 0));
      strip_next = false;
    }
    if (start == std::string::npos) {
      if (!text.empty()) toks.push_back({Tok::Text, text, 0, 0, line});
      break;
    }
    const char kind = src[start + 1];
    const char sign = start + 2 < src.size() ? src[start + 2] : '\0';
    const int text_line = line;
    line += count_lines(src.substr(pos, start - pos));
    if (sign == '-') {
      text = py_rstrip(text);
    } else if (sign != '+' && kind != '{') {
      const size_t l_pos = text.rfind('\n') == std::string::npos ? 0 : text.rfind('\n') + 1;
      if ((l_pos > 0 || line_starting) && l_pos < text.size() && skip_py_space(text, l_pos) == text.size())
        text.resize(l_pos);
    }
    if (!text.empty()) toks.push_back({Tok::Text, text, 0, 0, text_line});
    size_t p = start + 2 + (sign == '-' || sign == '+' ? 1 : 0);

    if (kind == '#') {
      size_t end = src.find("#}", p);
      if (end == std::string::npos) fail(ErrorKind::Syntax, line, "unclosed comment");
      const bool strip = end > p && src[end - 1] == '-';
      line += count_lines(src.substr(start, end + 2 - start));
      size_t after = end + 2;
      if (strip) {
        strip_next = true;
      } else if (after < src.size() && src[after] == '\n') {
        ++after;  // trim_blocks
        ++line;
      }
      line_starting = after > 0 && src[after - 1] == '\n';
      pos = after;
      continue;
    }

    const bool is_block = kind == '%';
    toks.push_back({is_block ? Tok::BlockBegin : Tok::VarBegin, "", 0, 0, line});
    int depth = 0;  // open brackets: an end marker inside them does not end the tag
    while (true) {
      while (p < src.size() && (src[p] == ' ' || src[p] == '\t' || src[p] == '\n')) {
        if (src[p] == '\n') ++line;
        ++p;
      }
      if (p >= src.size()) fail(ErrorKind::Syntax, line, is_block ? "unclosed {% tag" : "unclosed {{ tag");
      const char c = src[p];
      const char close = is_block ? '%' : '}';
      if (depth == 0) {
        size_t q = p;
        const bool minus = src[q] == '-';
        if (minus) ++q;
        if (q + 1 < src.size() && src[q] == close && src[q + 1] == '}') {
          size_t after = q + 2;
          if (minus) {
            strip_next = true;
          } else if (is_block && after < src.size() && src[after] == '\n') {
            ++after;  // trim_blocks
            ++line;
          }
          toks.push_back({is_block ? Tok::BlockEnd : Tok::VarEnd, "", 0, 0, line});
          line_starting = src[after - 1] == '\n';
          pos = after;
          break;
        }
      }
      if (is_name_start(c)) {
        size_t q = p;
        while (q < src.size() && is_name_char(src[q])) ++q;
        toks.push_back({Tok::Name, src.substr(p, q - p), 0, 0, line});
        p = q;
      } else if (c >= '0' && c <= '9') {
        size_t q = p;
        while (q < src.size() && ((src[q] >= '0' && src[q] <= '9') || src[q] == '_')) ++q;
        bool is_float = false;
        if (q + 1 < src.size() && src[q] == '.' && src[q + 1] >= '0' && src[q + 1] <= '9') {
          is_float = true;
          ++q;
          while (q < src.size() && ((src[q] >= '0' && src[q] <= '9') || src[q] == '_')) ++q;
        }
        if (q < src.size() && (src[q] == 'e' || src[q] == 'E')) {
          size_t r = q + 1;
          if (r < src.size() && (src[r] == '+' || src[r] == '-')) ++r;
          if (r < src.size() && src[r] >= '0' && src[r] <= '9') {
            is_float = true;
            q = r;
            while (q < src.size() && src[q] >= '0' && src[q] <= '9') ++q;
          }
        }
        std::string num = src.substr(p, q - p);
        num.erase(std::remove(num.begin(), num.end(), '_'), num.end());
        Token t{is_float ? Tok::Float : Tok::Int, num, 0, 0, line};
        if (is_float) {
          t.f = std::strtod(num.c_str(), nullptr);
        } else {
          auto r = std::from_chars(num.data(), num.data() + num.size(), t.i);
          if (r.ec != std::errc()) fail(ErrorKind::Unsupported, line, "integer literal " + num + " is beyond 64 bits");
        }
        toks.push_back(t);
        p = q;
      } else if (c == '\'' || c == '"') {
        size_t q = p + 1;
        while (q < src.size() && src[q] != c) q += src[q] == '\\' ? 2 : 1;
        if (q >= src.size()) fail(ErrorKind::Syntax, line, "unterminated string literal");
        const std::string_view body = std::string_view(src).substr(p + 1, q - p - 1);
        toks.push_back({Tok::String, unescape(body, line), 0, 0, line});
        line += count_lines(body);
        p = q + 1;
      } else {
        static const char* const kOps[] = {"//", "**", "==", "!=", "<=", ">=", "+", "-", "*", "/", "%", "~", "<",
                                           ">",  "=",  "(",  ")",  "[",  "]",  "{", "}", ",", ".", ":", "|"};
        const char* op = nullptr;
        for (const char* o : kOps)
          if (src.compare(p, std::strlen(o), o) == 0) {
            op = o;
            break;
          }
        if (!op) fail(ErrorKind::Syntax, line, strformat("unexpected character '%c'", c));
        if (*op == '(' || *op == '[' || *op == '{') ++depth;
        if ((*op == ')' || *op == ']' || *op == '}') && depth > 0) --depth;
        toks.push_back({Tok::Op, op, 0, 0, line});
        p += std::strlen(op);
      }
    }
  }
  toks.push_back({Tok::End, "", 0, 0, line});
  return toks;
}

}  // namespace

// ---- syntax tree --------------------------------------------------------------------------

enum class NT {
  // statements
  Body, Text, Output, If, For, Set, SetAttr, SetBlock, Macro, CallBlock, Break, Continue,
  // expressions
  Literal, Name, Attr, Item, Slice, Call, Filter, Test, Neg, Pos, Not, Binary, And, Or, Compare, Cond, List, Dict
};

struct Node {
  NT t;
  int line = 0;
  int depth = 1;
  bool flag = false;                         // Test: negated; If: has else; For: has filter; Slice parts
  std::string name;                          // names, operators, text
  Value value;                               // Literal
  std::vector<std::unique_ptr<Node>> kids;   // children (nullptr where optional and absent)
  std::vector<std::string> names;            // For targets, Macro params, keyword names, Compare ops
  std::vector<std::unique_ptr<Node>> kwargs; // keyword argument values / Macro defaults
};

namespace {

using NodeP = std::unique_ptr<Node>;

// What the subset implements, checked when the template is parsed so that
// an unsupported filter, test or method is reported before rendering (and
// wherever in the template it is).
const char* const kFilters[] = {"safe",  "trim",   "length", "count",  "tojson",     "upper",      "lower",
                                "capitalize", "title", "string", "default", "d",     "first",      "last",
                                "join",  "list",   "items",  "reverse", "abs",       "int",        "float",
                                "replace", "map",  "select", "reject", "selectattr", "rejectattr", "indent"};
const char* const kTests[] = {"defined", "undefined", "none",   "string", "number",  "integer",     "float",
                              "boolean", "true",      "false",  "mapping", "iterable", "sequence",   "callable",
                              "lower",   "upper",     "odd",    "even",   "divisibleby", "equalto", "eq",
                              "==",      "sameas",    "ne",     "!=",     "lt",       "<",           "le",
                              "<=",      "gt",        ">",      "ge",     ">=",       "greaterthan", "lessthan",
                              "in"};
const char* const kMethods[] = {"strip", "lstrip", "rstrip", "split", "startswith", "endswith", "upper", "lower",
                                "title", "capitalize", "replace", "join", "find", "count", "items", "keys",
                                "values", "get", "cycle"};

template <size_t N>
bool known(const char* const (&list)[N], const std::string& name) {
  for (const char* k : list)
    if (name == k) return true;
  return false;
}

class Parser {
 public:
  Parser(std::vector<Token> toks, const Limits& lim) : toks_(std::move(toks)), lim_(lim) {}

  NodeP parse_template() {
    NodeP body = parse_body({});
    if (cur().t != Tok::End) fail(ErrorKind::Syntax, cur().line, "unexpected '" + tag_name() + "' tag");
    return body;
  }

 private:
  std::vector<Token> toks_;
  const Limits& lim_;
  size_t p_ = 0;
  int depth_ = 0;     // recursion depth of the parser
  size_t nodes_ = 0;  // nodes made

  struct Guard {
    Parser& p;
    explicit Guard(Parser& parser) : p(parser) {
      if (++p.depth_ > p.lim_.max_nesting)
        fail(ErrorKind::Limit, p.cur().line, "the template nests deeper than the limit");
    }
    ~Guard() { --p.depth_; }
  };

  const Token& cur() const { return toks_[p_]; }
  const Token& peek(size_t k = 1) const { return toks_[std::min(p_ + k, toks_.size() - 1)]; }
  bool is_op(const char* op) const { return cur().t == Tok::Op && cur().s == op; }
  bool is_name(const char* n) const { return cur().t == Tok::Name && cur().s == n; }
  std::string tag_name() const {
    return cur().t == Tok::BlockBegin && peek().t == Tok::Name ? peek().s : describe(cur());
  }
  static std::string describe(const Token& t) {
    switch (t.t) {
      case Tok::End: return "end of template";
      case Tok::VarEnd: return "}}";
      case Tok::BlockEnd: return "%}";
      case Tok::VarBegin: return "{{";
      case Tok::BlockBegin: return "{%";
      case Tok::Text: return "text";
      case Tok::String: return "string";
      default: return t.s;
    }
  }
  [[noreturn]] void unexpected(const char* wanted) {
    fail(ErrorKind::Syntax, cur().line, strformat("expected %s, found '%s'", wanted, describe(cur()).c_str()));
  }
  void expect_op(const char* op) {
    if (!is_op(op)) unexpected(strformat("'%s'", op).c_str());
    ++p_;
  }
  void expect_block_end() {
    if (cur().t != Tok::BlockEnd) unexpected("'%}'");
    ++p_;
  }
  std::string expect_name() {
    if (cur().t != Tok::Name) unexpected("a name");
    return toks_[p_++].s;
  }

  NodeP make(NT t, int line) {
    if (++nodes_ > lim_.max_nodes)
      fail(ErrorKind::Limit, line, strformat("the template has more than %zu syntax nodes (the parse budget)", lim_.max_nodes));
    auto n = std::make_unique<Node>();
    n->t = t;
    n->line = line;
    return n;
  }
  // Sets depth from the children and checks the bound.
  NodeP done(NodeP n) {
    int d = 0;
    for (const auto& k : n->kids)
      if (k) d = std::max(d, k->depth);
    for (const auto& k : n->kwargs)
      if (k) d = std::max(d, k->depth);
    n->depth = d + 1;
    if (n->depth > lim_.max_nesting) fail(ErrorKind::Limit, n->line, "the template nests deeper than the limit");
    return n;
  }

  // ---- statements ----

  // Parses until a {% NAME %} with NAME in `stops` (not consumed) or the end.
  NodeP parse_body(const std::vector<const char*>& stops) {
    Guard g(*this);
    NodeP body = make(NT::Body, cur().line);
    while (cur().t != Tok::End) {
      const Token& t = cur();
      if (t.t == Tok::Text) {
        NodeP n = make(NT::Text, t.line);
        n->name = t.s;
        body->kids.push_back(std::move(n));
        ++p_;
      } else if (t.t == Tok::VarBegin) {
        ++p_;
        NodeP n = make(NT::Output, t.line);
        n->kids.push_back(parse_expression());
        if (cur().t != Tok::VarEnd) unexpected("'}}'");
        ++p_;
        body->kids.push_back(done(std::move(n)));
      } else if (t.t == Tok::BlockBegin) {
        if (peek().t == Tok::Name)
          for (const char* s : stops)
            if (peek().s == s) return done(std::move(body));
        ++p_;
        body->kids.push_back(parse_statement());
      } else {
        unexpected("text or a tag");
      }
    }
    return done(std::move(body));
  }

  NodeP parse_statement() {
    const int line = cur().line;
    if (cur().t != Tok::Name) unexpected("a tag name");
    const std::string kw = toks_[p_++].s;
    if (kw == "if") return parse_if(line);
    if (kw == "for") return parse_for(line);
    if (kw == "set") return parse_set(line);
    if (kw == "macro") return parse_macro(line);
    if (kw == "break" || kw == "continue") {
      expect_block_end();
      return make(kw == "break" ? NT::Break : NT::Continue, line);
    }
    if (kw == "generation") {
      expect_block_end();
      NodeP body = parse_body({"endgeneration"});
      end_tag("endgeneration");
      return body;
    }
    if (kw == "call") return parse_call_block(line);
    static const char* const kKnown[] = {"filter", "raw", "include", "import", "from", "extends",
                                         "block", "with", "autoescape", "do", "trans", "print"};
    for (const char* k : kKnown)
      if (kw == k) fail(ErrorKind::Unsupported, line, "the {% " + kw + " %} tag is not supported");
    if (kw.rfind("end", 0) == 0 || kw == "else" || kw == "elif")
      fail(ErrorKind::Syntax, line, "unexpected {% " + kw + " %}");
    fail(ErrorKind::Syntax, line, "unknown tag {% " + kw + " %}");
  }

  void end_tag(const char* name) {
    if (cur().t != Tok::BlockBegin || peek().t != Tok::Name || peek().s != name)
      fail(ErrorKind::Syntax, cur().line, strformat("missing {%% %s %%}", name));
    p_ += 2;
    expect_block_end();
  }

  NodeP parse_if(int line) {
    NodeP n = make(NT::If, line);
    n->kids.push_back(parse_expression());
    expect_block_end();
    n->kids.push_back(parse_body({"elif", "else", "endif"}));
    while (true) {
      if (cur().t != Tok::BlockBegin) fail(ErrorKind::Syntax, cur().line, "missing {% endif %}");
      const std::string kw = peek().s;
      p_ += 2;
      if (kw == "elif") {
        n->kids.push_back(parse_expression());
        expect_block_end();
        n->kids.push_back(parse_body({"elif", "else", "endif"}));
      } else if (kw == "else") {
        expect_block_end();
        n->kids.push_back(parse_body({"endif"}));
        n->flag = true;
        end_tag("endif");
        break;
      } else {
        expect_block_end();
        break;
      }
    }
    return done(std::move(n));
  }

  NodeP parse_for(int line) {
    NodeP n = make(NT::For, line);
    n->names.push_back(expect_name());
    while (is_op(",")) {
      ++p_;
      n->names.push_back(expect_name());
    }
    if (!is_name("in")) unexpected("'in'");
    ++p_;
    n->kids.push_back(parse_or());  // the iterable (a trailing `if` filters)
    NodeP filter;
    if (is_name("if")) {
      ++p_;
      filter = parse_expression();
    }
    if (is_name("recursive")) fail(ErrorKind::Unsupported, cur().line, "recursive loops are not supported");
    expect_block_end();
    n->kids.push_back(parse_body({"else", "endfor"}));
    NodeP else_body;
    if (cur().t == Tok::BlockBegin && peek().s == "else") {
      p_ += 2;
      expect_block_end();
      else_body = parse_body({"endfor"});
    }
    end_tag("endfor");
    n->kids.push_back(std::move(else_body));
    n->kids.push_back(std::move(filter));
    return done(std::move(n));
  }

  NodeP parse_set(int line) {
    const std::string target = expect_name();
    if (is_op(".")) {
      ++p_;
      NodeP n = make(NT::SetAttr, line);
      n->name = target;
      n->names.push_back(expect_name());
      expect_op("=");
      n->kids.push_back(parse_expression());
      expect_block_end();
      return done(std::move(n));
    }
    if (is_op(",")) fail(ErrorKind::Unsupported, line, "{% set a, b = ... %} (tuple assignment) is not supported");
    if (cur().t == Tok::BlockEnd) {
      ++p_;
      NodeP n = make(NT::SetBlock, line);
      n->name = target;
      n->kids.push_back(parse_body({"endset"}));
      end_tag("endset");
      return done(std::move(n));
    }
    expect_op("=");
    NodeP n = make(NT::Set, line);
    n->name = target;
    n->kids.push_back(parse_expression());
    expect_block_end();
    return done(std::move(n));
  }

  // {% call m(args) %}body{% endcall %}: m runs with caller() rendering body.
  NodeP parse_call_block(int line) {
    if (is_op("(")) fail(ErrorKind::Unsupported, line, "{% call(...) %} with caller arguments is not supported");
    NodeP n = make(NT::CallBlock, line);
    NodeP call = parse_expression();
    if (call->t != NT::Call) fail(ErrorKind::Syntax, line, "{% call %} needs a macro call");
    n->kids.push_back(std::move(call));
    expect_block_end();
    n->kids.push_back(parse_body({"endcall"}));
    end_tag("endcall");
    return done(std::move(n));
  }

  NodeP parse_macro(int line) {
    NodeP n = make(NT::Macro, line);
    n->name = expect_name();
    expect_op("(");
    while (!is_op(")")) {
      n->names.push_back(expect_name());
      if (is_op("=")) {
        ++p_;
        n->kwargs.push_back(parse_expression());
      } else {
        n->kwargs.push_back(nullptr);
      }
      if (!is_op(",")) break;
      ++p_;
    }
    expect_op(")");
    expect_block_end();
    n->kids.push_back(parse_body({"endmacro"}));
    end_tag("endmacro");
    return done(std::move(n));
  }

  // ---- expressions ----

  NodeP parse_expression() {
    Guard g(*this);
    NodeP e = parse_or();
    while (is_name("if")) {
      const int line = cur().line;
      ++p_;
      NodeP n = make(NT::Cond, line);
      n->kids.push_back(std::move(e));
      n->kids.push_back(parse_or());
      if (is_name("else")) {
        ++p_;
        n->kids.push_back(parse_expression());
      } else {
        n->kids.push_back(nullptr);
      }
      e = done(std::move(n));
    }
    return e;
  }

  NodeP binary(NT t, const std::string& op, NodeP l, NodeP r, int line) {
    NodeP n = make(t, line);
    n->name = op;
    n->kids.push_back(std::move(l));
    n->kids.push_back(std::move(r));
    return done(std::move(n));
  }

  NodeP parse_or() {
    NodeP l = parse_and();
    while (is_name("or")) {
      const int line = cur().line;
      ++p_;
      l = binary(NT::Or, "or", std::move(l), parse_and(), line);
    }
    return l;
  }

  NodeP parse_and() {
    NodeP l = parse_not();
    while (is_name("and")) {
      const int line = cur().line;
      ++p_;
      l = binary(NT::And, "and", std::move(l), parse_not(), line);
    }
    return l;
  }

  NodeP parse_not() {
    if (is_name("not")) {
      Guard g(*this);
      const int line = cur().line;
      ++p_;
      NodeP n = make(NT::Not, line);
      n->kids.push_back(parse_not());
      return done(std::move(n));
    }
    return parse_compare();
  }

  NodeP parse_compare() {
    NodeP first = parse_math1();
    NodeP n;
    while (true) {
      std::string op;
      if (cur().t == Tok::Op && (cur().s == "==" || cur().s == "!=" || cur().s == "<" || cur().s == "<=" ||
                                 cur().s == ">" || cur().s == ">=")) {
        op = cur().s;
        ++p_;
      } else if (is_name("in")) {
        op = "in";
        ++p_;
      } else if (is_name("not") && peek().t == Tok::Name && peek().s == "in") {
        op = "not in";
        p_ += 2;
      } else {
        break;
      }
      if (!n) {
        n = make(NT::Compare, first->line);
        n->kids.push_back(std::move(first));
      }
      n->names.push_back(op);
      n->kids.push_back(parse_math1());
    }
    return n ? done(std::move(n)) : std::move(first);
  }

  NodeP parse_math1() {
    NodeP l = parse_concat();
    while (is_op("+") || is_op("-")) {
      const std::string op = cur().s;
      const int line = cur().line;
      ++p_;
      l = binary(NT::Binary, op, std::move(l), parse_concat(), line);
    }
    return l;
  }

  NodeP parse_concat() {
    NodeP l = parse_math2();
    while (is_op("~")) {
      const int line = cur().line;
      ++p_;
      l = binary(NT::Binary, "~", std::move(l), parse_math2(), line);
    }
    return l;
  }

  NodeP parse_math2() {
    NodeP l = parse_pow();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      const std::string op = cur().s;
      const int line = cur().line;
      ++p_;
      l = binary(NT::Binary, op, std::move(l), parse_pow(), line);
    }
    return l;
  }

  NodeP parse_pow() {
    NodeP l = parse_unary(true);
    while (is_op("**")) {
      const int line = cur().line;
      ++p_;
      l = binary(NT::Binary, "**", std::move(l), parse_unary(true), line);
    }
    return l;
  }

  NodeP parse_unary(bool with_filter) {
    Guard g(*this);
    NodeP n;
    if (is_op("-") || is_op("+")) {
      const int line = cur().line;
      const bool neg = cur().s == "-";
      ++p_;
      n = make(neg ? NT::Neg : NT::Pos, line);
      n->kids.push_back(parse_unary(false));
      n = done(std::move(n));
    } else {
      n = parse_primary();
    }
    n = parse_postfix(std::move(n));
    if (with_filter) n = parse_filter_expr(std::move(n));
    return n;
  }

  NodeP parse_primary() {
    Guard g(*this);
    const Token& t = cur();
    const int line = t.line;
    if (t.t == Tok::Name) {
      ++p_;
      NodeP n = make(NT::Literal, line);
      if (t.s == "true" || t.s == "True") n->value = Value(true);
      else if (t.s == "false" || t.s == "False") n->value = Value(false);
      else if (t.s == "none" || t.s == "None") n->value = Value::none();
      else {
        n->t = NT::Name;
        n->name = t.s;
      }
      return n;
    }
    if (t.t == Tok::String) {
      std::string s = t.s;
      ++p_;
      while (cur().t == Tok::String) s += toks_[p_++].s;  // adjacent literals concatenate
      NodeP n = make(NT::Literal, line);
      n->value = Value(std::move(s));
      return n;
    }
    if (t.t == Tok::Int || t.t == Tok::Float) {
      NodeP n = make(NT::Literal, line);
      n->value = t.t == Tok::Int ? Value(t.i) : Value(t.f);
      ++p_;
      return n;
    }
    if (is_op("(")) {
      ++p_;
      if (is_op(")")) {
        ++p_;
        NodeP n = make(NT::List, line);
        n->flag = true;
        return done(std::move(n));
      }
      NodeP e = parse_expression();
      if (is_op(",")) {  // a tuple: a list that prints as a tuple
        NodeP n = make(NT::List, line);
        n->flag = true;
        n->kids.push_back(std::move(e));
        while (is_op(",")) {
          ++p_;
          if (is_op(")")) break;
          n->kids.push_back(parse_expression());
        }
        e = done(std::move(n));
      }
      expect_op(")");
      return e;
    }
    if (is_op("[")) {
      ++p_;
      NodeP n = make(NT::List, line);
      while (!is_op("]")) {
        n->kids.push_back(parse_expression());
        if (!is_op(",")) break;
        ++p_;
      }
      expect_op("]");
      return done(std::move(n));
    }
    if (is_op("{")) {
      ++p_;
      NodeP n = make(NT::Dict, line);
      while (!is_op("}")) {
        n->kids.push_back(parse_expression());
        expect_op(":");
        n->kids.push_back(parse_expression());
        if (!is_op(",")) break;
        ++p_;
      }
      expect_op("}");
      return done(std::move(n));
    }
    unexpected("an expression");
  }

  void parse_call_args(Node& n) {
    expect_op("(");
    while (!is_op(")")) {
      if (is_op("*") || is_op("**")) fail(ErrorKind::Unsupported, cur().line, "*args and **kwargs in calls are not supported");
      if (cur().t == Tok::Name && peek().t == Tok::Op && peek().s == "=") {
        n.names.push_back(cur().s);
        p_ += 2;
        n.kwargs.push_back(parse_expression());
      } else {
        if (!n.names.empty()) fail(ErrorKind::Syntax, cur().line, "a positional argument follows a keyword argument");
        n.kids.push_back(parse_expression());
      }
      if (!is_op(",")) break;
      ++p_;
    }
    expect_op(")");
  }

  NodeP parse_postfix(NodeP n) {
    while (true) {
      const int line = cur().line;
      if (is_op(".")) {
        ++p_;
        if (cur().t == Tok::Int) {
          NodeP k = make(NT::Literal, line);
          k->value = Value(cur().i);
          ++p_;
          NodeP item = make(NT::Item, line);
          item->kids.push_back(std::move(n));
          item->kids.push_back(std::move(k));
          n = done(std::move(item));
          continue;
        }
        NodeP a = make(NT::Attr, line);
        a->name = expect_name();
        a->kids.push_back(std::move(n));
        n = done(std::move(a));
      } else if (is_op("[")) {
        ++p_;
        NodeP start, stop, step;
        bool slice = false;
        if (!is_op(":")) start = parse_expression();
        if (is_op(":")) {
          slice = true;
          ++p_;
          if (!is_op("]") && !is_op(":")) stop = parse_expression();
          if (is_op(":")) {
            ++p_;
            if (!is_op("]")) step = parse_expression();
          }
        }
        expect_op("]");
        NodeP s = make(slice ? NT::Slice : NT::Item, line);
        s->kids.push_back(std::move(n));
        s->kids.push_back(std::move(start));
        if (slice) {
          s->kids.push_back(std::move(stop));
          s->kids.push_back(std::move(step));
        }
        n = done(std::move(s));
      } else if (is_op("(")) {
        check_method(*n, line);
        NodeP c = make(NT::Call, line);
        c->kids.push_back(std::move(n));
        parse_call_args(*c);
        n = done(std::move(c));
      } else {
        return n;
      }
    }
  }

  // x.name(...): a method of the subset.
  static void check_method(const Node& callee, int line) {
    if (callee.t != NT::Attr || known(kMethods, callee.name)) return;
    fail(ErrorKind::Unsupported, line, "the method '" + callee.name + "()' is not supported");
  }

  NodeP parse_filter_expr(NodeP n) {
    while (true) {
      const int line = cur().line;
      if (is_op("|")) {
        ++p_;
        NodeP f = make(NT::Filter, line);
        f->name = expect_name();
        if (!known(kFilters, f->name))
          fail(ErrorKind::Unsupported, line, "the filter '" + f->name + "' is not supported");
        f->kids.push_back(std::move(n));
        if (is_op("(")) parse_call_args(*f);
        n = done(std::move(f));
      } else if (is_name("is")) {
        ++p_;
        NodeP t = make(NT::Test, line);
        if (is_name("not")) {
          t->flag = true;
          ++p_;
        }
        t->name = expect_name();
        if (!known(kTests, t->name)) fail(ErrorKind::Unsupported, line, "the test '" + t->name + "' is not supported");
        t->kids.push_back(std::move(n));
        if (is_op("(")) {
          parse_call_args(*t);
        } else if ((cur().t == Tok::Name && cur().s != "else" && cur().s != "or" && cur().s != "and" &&
                    cur().s != "if") ||
                   cur().t == Tok::String || cur().t == Tok::Int || cur().t == Tok::Float || is_op("[") ||
                   is_op("{")) {
          t->kids.push_back(parse_postfix(parse_primary()));
        }
        n = done(std::move(t));
      } else if (is_op("(")) {
        check_method(*n, line);
        NodeP c = make(NT::Call, line);
        c->kids.push_back(std::move(n));
        parse_call_args(*c);
        n = done(std::move(c));
      } else {
        return n;
      }
    }
  }
};

}  // namespace

// ---- rendering ----------------------------------------------------------------------------

namespace {

const char* type_name(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::Undefined: return "undefined";
    case Value::Kind::None: return "NoneType";
    case Value::Kind::Bool: return "bool";
    case Value::Kind::Int: return "int";
    case Value::Kind::Float: return "float";
    case Value::Kind::String: return "str";
    case Value::Kind::Array: return "list";
    case Value::Kind::Object:
      return v.obj().is_namespace ? "Namespace" : v.obj().is_loop ? "LoopContext" : "dict";
    case Value::Kind::Callable: return "function";
  }
  return "?";
}

bool is_number(const Value& v) {
  return v.kind() == Value::Kind::Int || v.kind() == Value::Kind::Float || v.kind() == Value::Kind::Bool;
}
bool is_intlike(const Value& v) { return v.kind() == Value::Kind::Int || v.kind() == Value::Kind::Bool; }
double num(const Value& v) { return v.kind() == Value::Kind::Float ? v.as_float() : static_cast<double>(v.as_int()); }

bool truthy(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::Undefined:
    case Value::Kind::None: return false;
    case Value::Kind::Bool:
    case Value::Kind::Int: return v.as_int() != 0;
    case Value::Kind::Float: return v.as_float() != 0;
    case Value::Kind::String: return !v.str().empty();
    case Value::Kind::Array: return !v.arr().empty();
    case Value::Kind::Object: return v.obj().is_namespace || v.obj().is_loop || !v.obj().items.empty();
    case Value::Kind::Callable: return true;
  }
  return false;
}

void repr_into(std::string& out, const Value& v, size_t limit, Walk& w);

// The default bound of text made outside a render's budgets (error messages, to_json).
constexpr size_t kDefaultTextLimit = size_t{16} << 20;

// Python's str(); lists, dicts and namespaces through repr_into (bounded:
// `limit` bytes, cycles and depth refused).
std::string to_str(const Value& v, size_t limit = kDefaultTextLimit, Meter* meter = nullptr, int line = 0) {
  switch (v.kind()) {
    case Value::Kind::Undefined: return std::string();
    case Value::Kind::None: return "None";
    case Value::Kind::Bool: return v.as_bool() ? "True" : "False";
    case Value::Kind::Int: return std::to_string(v.as_int());
    case Value::Kind::Float: return py_float(v.as_float());
    case Value::Kind::String: return v.str();
    case Value::Kind::Callable: return "<function " + v.fn().name + ">";
    default: {
      std::string out;
      Walk w("printing a value", line, meter);
      repr_into(out, v, limit, w);
      return out;
    }
  }
}

std::string repr_string(const std::string& s) {
  const bool dq = s.find('\'') != std::string::npos && s.find('"') == std::string::npos;
  const char q = dq ? '"' : '\'';
  std::string out(1, q);
  for (size_t i = 0; i < s.size();) {
    size_t len;
    const uint32_t cp = decode(s, i, &len);
    char buf[16];
    if (cp == '\\') out += "\\\\";
    else if (cp == static_cast<uint32_t>(q)) (out += '\\') += q;
    else if (cp == '\n') out += "\\n";
    else if (cp == '\r') out += "\\r";
    else if (cp == '\t') out += "\\t";
    else if (cp < 0x20 || (cp >= 0x7F && cp <= 0xA0) || cp == 0xAD) {
      std::snprintf(buf, sizeof buf, "\\x%02x", cp);
      out += buf;
    } else if (cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200F) || (cp >= 0x2028 && cp <= 0x202F) ||
               (cp >= 0x205F && cp <= 0x2064) || cp == 0x3000 || cp == 0xFEFF) {
      std::snprintf(buf, sizeof buf, "\\u%04x", cp);
      out += buf;
    } else {
      out.append(s, i, len);
    }
    i += len;
  }
  out += q;
  return out;
}

// Appends Python's repr() of v to out; Limit error once out passes `limit`.
void repr_into(std::string& out, const Value& v, size_t limit, Walk& w) {
  if (out.size() > limit)
    fail(ErrorKind::Limit, w.line(), strformat("%s: the text exceeds the output budget (%zu bytes)", w.what(), limit));
  switch (v.kind()) {
    case Value::Kind::Undefined: out += "Undefined"; return;
    case Value::Kind::String: out += repr_string(v.str()); return;
    case Value::Kind::Array: {
      const Array& a = v.arr();
      w.enter(&a);
      out += v.is_tuple() ? "(" : "[";
      for (size_t i = 0; i < a.size(); ++i) {
        if (i) out += ", ";
        repr_into(out, a[i], limit, w);
      }
      out += v.is_tuple() ? (a.size() == 1 ? ",)" : ")") : "]";
      w.leave();
      return;
    }
    case Value::Kind::Object: {
      w.enter(&v.obj());
      out += v.obj().is_namespace ? "<Namespace {" : "{";
      const auto& items = v.obj().items;
      for (size_t i = 0; i < items.size(); ++i) {
        if (i) out += ", ";
        out += repr_string(items[i].first);
        out += ": ";
        repr_into(out, items[i].second, limit, w);
      }
      out += v.obj().is_namespace ? "}>" : "}";
      w.leave();
      return;
    }
    default: out += to_str(v); return;
  }
}

// Python's repr(), bounded as to_str is.
std::string py_repr(const Value& v, size_t limit = kDefaultTextLimit, Meter* meter = nullptr, int line = 0) {
  std::string out;
  Walk w("printing a value", line, meter);
  repr_into(out, v, limit, w);
  return out;
}

// Python's ==; the walk bounds the depth, refuses cycles and charges the work.
bool py_eq(const Value& a, const Value& b, Walk& w) {
  if (is_number(a) && is_number(b)) {
    if (is_intlike(a) && is_intlike(b)) return a.as_int() == b.as_int();
    return num(a) == num(b);
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Value::Kind::Undefined:
    case Value::Kind::None: return true;
    case Value::Kind::String:
      if (a.str().size() != b.str().size()) return false;
      w.scan(a.str().size());
      return a.str() == b.str();
    case Value::Kind::Array: {
      if (a.arr().size() != b.arr().size()) return false;
      w.enter(&a.arr());
      for (size_t i = 0; i < a.arr().size(); ++i)
        if (!py_eq(a.arr()[i], b.arr()[i], w)) return false;
      w.leave();
      return true;
    }
    case Value::Kind::Object: {
      if (a.obj().is_namespace || a.obj().is_loop || b.obj().is_namespace || b.obj().is_loop)
        return &a.obj() == &b.obj();
      if (a.obj().items.size() != b.obj().items.size()) return false;
      w.enter(&a.obj());
      for (const auto& kv : a.obj().items) {
        w.scan(b.obj().items.size() * 16);  // the key lookup
        const Value* o = b.find(kv.first);
        if (!o || !py_eq(kv.second, *o, w)) return false;
      }
      w.leave();
      return true;
    }
    case Value::Kind::Callable: return &a.fn() == &b.fn();
    default: return false;
  }
}

// a < b, Python's rules; Runtime error for types that do not order.
bool py_lt(const Value& a, const Value& b, Walk& w) {
  const int line = w.line();
  if (is_number(a) && is_number(b)) {
    if (is_intlike(a) && is_intlike(b)) return a.as_int() < b.as_int();
    return num(a) < num(b);
  }
  if (a.is_string() && b.is_string()) {
    w.scan(std::min(a.str().size(), b.str().size()));
    return a.str() < b.str();
  }
  if (a.is_array() && b.is_array()) {
    const Array &x = a.arr(), &y = b.arr();
    w.enter(&x);
    for (size_t i = 0; i < x.size() && i < y.size(); ++i)
      if (!py_eq(x[i], y[i], w)) {
        const bool r = py_lt(x[i], y[i], w);
        w.leave();
        return r;
      }
    w.leave();
    return x.size() < y.size();
  }
  fail(ErrorKind::Runtime, line,
       strformat("'<' is not supported between %s and %s", type_name(a), type_name(b)));
}

// Python's index normalisation for a[i] (nullopt-like -1 when out of range).
int64_t norm_index(int64_t i, size_t n) {
  if (i < 0) i += static_cast<int64_t>(n);
  return i < 0 || i >= static_cast<int64_t>(n) ? -1 : i;
}

// The indices a[start:stop:step] selects (Python's slice.indices).
std::vector<size_t> slice_indices(size_t n, const Value& start, const Value& stop, const Value& step, int line) {
  auto as_i = [&](const Value& v, const char* what) -> int64_t {
    if (!is_intlike(v)) fail(ErrorKind::Runtime, line, strformat("slice %s must be an integer", what));
    return v.as_int();
  };
  const int64_t len = static_cast<int64_t>(n);
  const int64_t st = step.is_none() || step.is_undefined() ? 1 : as_i(step, "step");
  if (st == 0) fail(ErrorKind::Runtime, line, "slice step cannot be zero");
  int64_t b, e;
  auto clamp = [&](const Value& v, bool is_start) -> int64_t {
    if (v.is_none() || v.is_undefined()) return st > 0 ? (is_start ? 0 : len) : (is_start ? len - 1 : -1);
    int64_t x = as_i(v, is_start ? "start" : "stop");
    if (x < 0) {
      x += len;
      if (x < 0) x = st > 0 ? 0 : -1;
    } else if (x >= len) {
      x = st > 0 ? len : len - 1;
    }
    return x;
  };
  b = clamp(start, true);
  e = clamp(stop, false);
  std::vector<size_t> out;
  for (int64_t i = b; st > 0 ? i < e : i > e; i += st) out.push_back(static_cast<size_t>(i));
  return out;
}

const Value* arg_of(const CallArgs& a, size_t pos, const char* kw) {
  if (pos < a.positional.size()) return &a.positional[pos];
  if (kw)
    for (const auto& kv : a.keyword)
      if (kv.first == kw) return &kv.second;
  return nullptr;
}

Value arg_or(const CallArgs& a, size_t pos, const char* kw, Value def) {
  const Value* v = arg_of(a, pos, kw);
  return v ? *v : def;
}

class Renderer final : public Meter {
 public:
  Renderer(const Limits& lim, const RenderOptions& opt) : lim_(lim), opt_(opt) {}
  // Namespaces are the one value that can be made to contain itself: the
  // render's own are emptied when it ends, so that no cycle of shared
  // pointers outlives it.
  ~Renderer() override {
    for (Value& ns : namespaces_) ns.obj().items.clear();
  }

  void steps(uint64_t n) override {
    steps_ += n;
    if (steps_ > lim_.max_steps) step_budget_overrun(line_);
  }

  std::string run(const Node& root, const Value& globals) {
    auto builtins = std::make_shared<Frame>();
    auto fn = [&](const char* name, std::function<Value(CallArgs&)> f) {
      auto c = std::make_shared<Callable>();
      c->name = name;
      c->call = std::move(f);
      builtins->emplace_back(name, Value::callable(std::move(c)));
    };
    fn("raise_exception", [this](CallArgs& a) -> Value {
      const Value* m = arg_of(a, 0, "message");
      fail(ErrorKind::Raised, line_, m ? str(*m) : std::string("raise_exception() called"));
    });
    fn("strftime_now", [this](CallArgs& a) -> Value {
      const Value* f = arg_of(a, 0, "format");
      if (!f || !f->is_string()) fail(ErrorKind::Runtime, line_, "strftime_now() takes a format string");
      if (f->str().size() > 256) fail(ErrorKind::Limit, line_, "strftime_now() format too long");
      const std::time_t t = opt_.now ? opt_.now : std::time(nullptr);
      std::tm tm{};
      localtime_r(&t, &tm);
      char buf[1024];
      const size_t n = std::strftime(buf, sizeof buf, f->str().c_str(), &tm);
      return Value(std::string(buf, n));
    });
    fn("namespace", [this](CallArgs& a) -> Value {
      Value ns = Value::object();
      ns.obj().is_namespace = true;
      charge(kValueBytes * (1 + a.keyword.size()));
      namespaces_.push_back(ns);
      for (const Value& p : a.positional)
        if (p.is_object())
          for (const auto& kv : p.obj().items) ns.set(kv.first, kv.second);
      for (auto& kv : a.keyword) ns.set(kv.first, kv.second);
      return ns;
    });
    fn("dict", [](CallArgs& a) -> Value {
      Value d = Value::object();
      for (const Value& p : a.positional)
        if (p.is_object())
          for (const auto& kv : p.obj().items) d.set(kv.first, kv.second);
      for (auto& kv : a.keyword) d.set(kv.first, kv.second);
      return d;
    });
    fn("range", [this](CallArgs& a) -> Value {
      int64_t v[3] = {0, 0, 1};
      const size_t n = a.positional.size();
      if (n < 1 || n > 3) fail(ErrorKind::Runtime, line_, "range() takes 1 to 3 arguments");
      for (size_t i = 0; i < n; ++i) {
        if (!is_intlike(a.positional[i])) fail(ErrorKind::Runtime, line_, "range() takes integers");
        v[n == 1 ? 1 : i] = a.positional[i].as_int();
      }
      if (v[2] == 0) fail(ErrorKind::Runtime, line_, "range() step must not be zero");
      // The length first (in 128 bits: no overflow), charged before anything is allocated.
      const __int128 span = v[2] > 0 ? static_cast<__int128>(v[1]) - v[0] : static_cast<__int128>(v[0]) - v[1];
      const __int128 step = v[2] > 0 ? static_cast<__int128>(v[2]) : -static_cast<__int128>(v[2]);
      const __int128 len = span <= 0 ? 0 : (span + step - 1) / step;
      if (len > static_cast<__int128>(lim_.max_work_bytes / kValueBytes)) work_budget_overrun("range()");
      const size_t n_items = static_cast<size_t>(len);
      charge(n_items * kValueBytes);
      Array out;
      out.reserve(n_items);
      for (size_t k = 0; k < n_items; ++k) out.emplace_back(static_cast<int64_t>(v[0] + static_cast<__int128>(k) * v[2]));
      return Value::array(std::move(out));
    });
    frames_.push_back(builtins);
    auto user = std::make_shared<Frame>();
    if (globals.is_object())
      for (const auto& kv : globals.obj().items) user->push_back(kv);
    frames_.push_back(user);
    frames_.push_back(std::make_shared<Frame>());  // the template's own top-level variables
    std::string out;
    out_ = &out;
    exec(root);
    return out;
  }

 private:
  using Frame = std::vector<std::pair<std::string, Value>>;
  enum class Flow { Normal, Break, Continue };

  const Limits& lim_;
  const RenderOptions& opt_;
  std::vector<std::shared_ptr<Frame>> frames_;
  std::string* out_ = nullptr;
  uint64_t steps_ = 0;
  uint64_t work_ = 0;
  std::vector<Value> namespaces_;  // every namespace() made by this render
  int call_depth_ = 0;
  int line_ = 0;          // the line being evaluated, for errors raised by builtins
  Value pending_caller_;  // caller() for the macro a {% call %} block is about to run

  [[noreturn]] void step_budget_overrun(int line) {
    fail(ErrorKind::Limit, line,
         strformat("the step budget is spent: rendering took more than %llu steps (loops, calls, comparisons and "
                   "text searched)",
                   static_cast<unsigned long long>(lim_.max_steps)));
  }
  [[noreturn]] void work_budget_overrun(const char* what) {
    fail(ErrorKind::Limit, line_,
         strformat("the working-memory budget is spent: %s would take the values made by this render past %llu bytes",
                   what, static_cast<unsigned long long>(lim_.max_work_bytes)));
  }
  void tick(int line) {
    line_ = line;
    if (++steps_ > lim_.max_steps) step_budget_overrun(line);
  }
  // Charges `bytes` of values about to be made to the working-memory budget
  // (every string, list and dict a render makes is charged when made).
  void charge(uint64_t bytes, const char* what = "a value") {
    if (bytes > lim_.max_work_bytes || work_ + bytes > lim_.max_work_bytes) work_budget_overrun(what);
    work_ += bytes;
  }
  // Charges n elements of a list about to be made.
  void charge_items(uint64_t n, const char* what = "a list") {
    if (n > lim_.max_work_bytes / kValueBytes) work_budget_overrun(what);
    charge(n * kValueBytes, what);
  }
  // The work of scanning or copying `bytes` bytes, to the step budget.
  void scan(uint64_t bytes) { steps(bytes / kScanBytesPerStep); }
  void check_size(uint64_t bytes, const char* what) {
    if (bytes > lim_.max_output)
      fail(ErrorKind::Limit, line_,
           strformat("the output budget is spent: %s would make a string longer than %zu bytes", what, lim_.max_output));
  }
  Value make_string(std::string s) {
    check_size(s.size(), "an operation");
    charge(s.size() + kValueBytes, "a string");
    scan(s.size());
    return Value(std::move(s));
  }
  void emit(const std::string& s) {
    if (out_->size() + s.size() > lim_.max_output)
      fail(ErrorKind::Limit, line_, strformat("the output budget is spent: the output exceeds %zu bytes", lim_.max_output));
    scan(s.size());
    *out_ += s;
  }
  std::string str(const Value& v) { return to_str(v, lim_.max_output, this, line_); }
  bool eq(const Value& a, const Value& b) {
    Walk w("comparing values", line_, this);
    return py_eq(a, b, w);
  }
  bool lt(const Value& a, const Value& b, int line) {
    Walk w("comparing values", line, this);
    return py_lt(a, b, w);
  }

  Value lookup(const std::string& name) const {
    for (auto f = frames_.rbegin(); f != frames_.rend(); ++f)
      for (auto kv = (*f)->rbegin(); kv != (*f)->rend(); ++kv)
        if (kv->first == name) return kv->second;
    return Value();
  }
  void assign(const std::string& name, Value v) {
    Frame& f = *frames_.back();
    for (auto& kv : f)
      if (kv.first == name) {
        kv.second = std::move(v);
        return;
      }
    f.emplace_back(name, std::move(v));
  }

  // ---- statements ----

  Flow exec(const Node& n) {
    tick(n.line);
    switch (n.t) {
      case NT::Body:
        for (const auto& k : n.kids) {
          const Flow f = exec(*k);
          if (f != Flow::Normal) return f;
        }
        return Flow::Normal;
      case NT::Text: emit(n.name); return Flow::Normal;
      case NT::Output: {
        const Value v = eval(*n.kids[0]);
        line_ = n.line;
        emit(str(v));
        return Flow::Normal;
      }
      case NT::If: {
        const size_t pairs = (n.kids.size() - (n.flag ? 1 : 0)) / 2;
        for (size_t i = 0; i < pairs; ++i)
          if (truthy(eval(*n.kids[2 * i]))) return exec(*n.kids[2 * i + 1]);
        if (n.flag) return exec(*n.kids.back());
        return Flow::Normal;
      }
      case NT::For: return exec_for(n);
      case NT::Set: assign(n.name, eval(*n.kids[0])); return Flow::Normal;
      case NT::SetAttr: {
        Value target = lookup(n.name);
        if (!target.is_object() || !target.obj().is_namespace)
          fail(ErrorKind::Runtime, n.line, "cannot set attribute '" + n.names[0] + "' of " + type_name(target) +
                                               " '" + n.name + "' (only namespace() objects take attributes)");
        target.obj().set(n.names[0], eval(*n.kids[0]));
        return Flow::Normal;
      }
      case NT::SetBlock: {
        std::string buf;
        std::string* saved = out_;
        out_ = &buf;
        try {
          exec(*n.kids[0]);
        } catch (...) {
          out_ = saved;
          throw;
        }
        out_ = saved;
        assign(n.name, make_string(std::move(buf)));
        return Flow::Normal;
      }
      case NT::Macro: define_macro(n); return Flow::Normal;
      case NT::CallBlock: {
        // caller() renders the body where the call block stands.
        auto c = std::make_shared<Callable>();
        c->name = "caller";
        const Node* body = n.kids[1].get();
        std::vector<std::shared_ptr<Frame>> scope = frames_;
        c->call = [this, body, scope](CallArgs&) {
          std::vector<std::shared_ptr<Frame>> saved = frames_;
          frames_ = scope;
          frames_.push_back(std::make_shared<Frame>());
          std::string buf;
          std::string* saved_out = out_;
          out_ = &buf;
          try {
            exec(*body);
          } catch (...) {
            out_ = saved_out;
            frames_ = saved;
            throw;
          }
          out_ = saved_out;
          frames_ = saved;
          return make_string(std::move(buf));
        };
        const Value v = eval_call(*n.kids[0], Value::callable(std::move(c)));
        line_ = n.line;
        emit(str(v));
        return Flow::Normal;
      }
      case NT::Break: return Flow::Break;
      case NT::Continue: return Flow::Continue;
      default: fail(ErrorKind::Runtime, n.line, "internal: expression where a statement was expected");
    }
  }

  // Byte offsets of a string's code points, charged (8 bytes a byte, and the scan).
  std::vector<size_t> offsets(const std::string& s) {
    charge(uint64_t{sizeof(size_t)} * (s.size() + 1), "indexing a string");
    scan(s.size());
    return cp_offsets(s);
  }

  // The items a for loop or a filter walks over (a copy: charged as a new list).
  std::vector<Value> iterate(const Value& v, int line) {
    switch (v.kind()) {
      case Value::Kind::Undefined: return {};
      case Value::Kind::Array: charge_items(v.arr().size(), "iterating over a list"); return v.arr();
      case Value::Kind::Object: {
        if (v.obj().is_namespace || v.obj().is_loop)
          fail(ErrorKind::Runtime, line, std::string("'") + type_name(v) + "' object is not iterable");
        charge_items(v.obj().items.size(), "iterating over a dict");
        std::vector<Value> keys;
        for (const auto& kv : v.obj().items) keys.emplace_back(kv.first);
        return keys;
      }
      case Value::Kind::String: {
        std::vector<Value> chars;
        const std::string& s = v.str();
        scan(s.size());
        charge_items(cp_count(s) * 2, "iterating over a string");
        for (size_t i = 0; i < s.size();) {
          size_t len;
          decode(s, i, &len);
          chars.emplace_back(s.substr(i, len));
          i += len;
        }
        return chars;
      }
      default: fail(ErrorKind::Runtime, line, std::string("'") + type_name(v) + "' object is not iterable");
    }
  }

  void bind_targets(const Node& n, const Value& item) {
    if (n.names.size() == 1) {
      assign(n.names[0], item);
      return;
    }
    if (!item.is_array() || item.arr().size() != n.names.size())
      fail(ErrorKind::Runtime, n.line,
           strformat("cannot unpack %s into %zu loop variables", type_name(item), n.names.size()));
    for (size_t i = 0; i < n.names.size(); ++i) assign(n.names[i], item.arr()[i]);
  }

  Flow exec_for(const Node& n) {
    std::vector<Value> items = iterate(eval(*n.kids[0]), n.line);
    if (n.kids[3]) {  // {% for x in xs if cond %}
      std::vector<Value> kept;
      for (const Value& item : items) {
        frames_.push_back(std::make_shared<Frame>());
        bind_targets(n, item);
        const bool keep = truthy(eval(*n.kids[3]));
        frames_.pop_back();
        if (keep) kept.push_back(item);
      }
      items.swap(kept);
    }
    const size_t len = items.size();
    for (size_t i = 0; i < len; ++i) {
      frames_.push_back(std::make_shared<Frame>());
      Value loop = Value::object();
      Object& o = loop.obj();
      o.is_loop = true;
      const int64_t idx = static_cast<int64_t>(i), L = static_cast<int64_t>(len);
      o.items = {{"index0", Value(idx)},
                 {"index", Value(idx + 1)},
                 {"revindex0", Value(L - idx - 1)},
                 {"revindex", Value(L - idx)},
                 {"first", Value(i == 0)},
                 {"last", Value(i + 1 == len)},
                 {"length", Value(L)},
                 {"depth", Value(1)},
                 {"depth0", Value(0)},
                 {"previtem", i > 0 ? items[i - 1] : Value()},
                 {"nextitem", i + 1 < len ? items[i + 1] : Value()}};
      assign("loop", loop);
      bind_targets(n, items[i]);
      Flow f;
      try {
        f = exec(*n.kids[1]);
      } catch (...) {
        frames_.pop_back();
        throw;
      }
      frames_.pop_back();
      if (f == Flow::Break) break;
    }
    if (len == 0 && n.kids[2]) return exec(*n.kids[2]);
    return Flow::Normal;
  }

  void define_macro(const Node& n) {
    auto c = std::make_shared<Callable>();
    c->name = n.name;
    const Node* node = &n;
    c->call = [this, node](CallArgs& a) { return call_macro(*node, a); };
    assign(n.name, Value::callable(std::move(c)));
  }

  Value call_macro(const Node& n, CallArgs& a) {
    const int line = line_;
    if (call_depth_ >= lim_.max_call_depth)
      fail(ErrorKind::Limit, line, strformat("macro calls nest deeper than %d", lim_.max_call_depth));
    if (a.positional.size() > n.names.size())
      fail(ErrorKind::Runtime, line, strformat("macro '%s' takes %zu arguments, %zu given", n.name.c_str(),
                                               n.names.size(), a.positional.size()));
    for (const auto& kv : a.keyword)
      if (std::find(n.names.begin(), n.names.end(), kv.first) == n.names.end())
        fail(ErrorKind::Runtime, line, "macro '" + n.name + "' has no argument '" + kv.first + "'");
    // The macro sees the globals and the template's top-level variables.
    std::vector<std::shared_ptr<Frame>> saved;
    saved.swap(frames_);
    frames_ = {saved[0], saved[1], saved[2], std::make_shared<Frame>()};
    if (!pending_caller_.is_undefined()) {
      assign("caller", pending_caller_);
      pending_caller_ = Value();
    }
    std::string buf;
    std::string* saved_out = out_;
    out_ = &buf;
    ++call_depth_;
    try {
      for (size_t i = 0; i < n.names.size(); ++i) {
        const Value* v = arg_of(a, i, n.names[i].c_str());
        if (v) assign(n.names[i], *v);
        else if (n.kwargs[i]) assign(n.names[i], eval(*n.kwargs[i]));
        else assign(n.names[i], Value());
      }
      exec(*n.kids[0]);
    } catch (...) {
      --call_depth_;
      out_ = saved_out;
      frames_.swap(saved);
      throw;
    }
    --call_depth_;
    out_ = saved_out;
    frames_.swap(saved);
    return make_string(std::move(buf));
  }

  // ---- expressions ----

  Value eval(const Node& n) {
    tick(n.line);
    switch (n.t) {
      case NT::Literal: return n.value;
      case NT::Name: {
        Value v = lookup(n.name);
        return v;
      }
      case NT::Attr: return get_attr(eval(*n.kids[0]), n.name, n.kids[0].get(), n.line);
      case NT::Item: return get_item(eval(*n.kids[0]), eval(*n.kids[1]), n.kids[0].get(), n.line);
      case NT::Slice: {
        const Value obj = eval(*n.kids[0]);
        const Value a = n.kids[1] ? eval(*n.kids[1]) : Value::none();
        const Value b = n.kids[2] ? eval(*n.kids[2]) : Value::none();
        const Value c = n.kids[3] ? eval(*n.kids[3]) : Value::none();
        line_ = n.line;
        if (obj.is_array()) {
          const auto idx = slice_indices(obj.arr().size(), a, b, c, n.line);
          charge_items(idx.size(), "a slice");
          Array out;
          out.reserve(idx.size());
          for (size_t i : idx) out.push_back(obj.arr()[i]);
          return Value::array(std::move(out));
        }
        if (obj.is_string()) {
          const auto off = offsets(obj.str());
          const auto idx = slice_indices(off.size() - 1, a, b, c, n.line);
          std::string out;
          for (size_t i : idx) out.append(obj.str(), off[i], off[i + 1] - off[i]);
          return make_string(std::move(out));
        }
        if (obj.is_undefined()) fail(ErrorKind::Runtime, n.line, undefined_msg(*n.kids[0]));
        fail(ErrorKind::Runtime, n.line, std::string("'") + type_name(obj) + "' object cannot be sliced");
      }
      case NT::Call: return eval_call(n);
      case NT::Filter: {
        Value in = eval(*n.kids[0]);
        CallArgs a = eval_args(n);
        line_ = n.line;
        return apply_filter(n.name, in, a, n.line);
      }
      case NT::Test: {
        Value in = eval(*n.kids[0]);
        CallArgs a = eval_args(n);
        line_ = n.line;
        const bool r = apply_test(n.name, in, a, n.line);
        return Value(n.flag ? !r : r);
      }
      case NT::Neg:
      case NT::Pos: {
        const Value v = eval(*n.kids[0]);
        if (!is_number(v))
          fail(ErrorKind::Runtime, n.line, std::string("bad operand type for unary ") + (n.t == NT::Neg ? "-" : "+") +
                                               ": '" + type_name(v) + "'");
        if (n.t == NT::Pos) return v.kind() == Value::Kind::Bool ? Value(v.as_int()) : v;
        if (v.kind() == Value::Kind::Float) return Value(-v.as_float());
        if (v.as_int() == std::numeric_limits<int64_t>::min()) fail(ErrorKind::Runtime, n.line, "integer overflow");
        return Value(-v.as_int());
      }
      case NT::Not: return Value(!truthy(eval(*n.kids[0])));
      case NT::And: {
        Value l = eval(*n.kids[0]);
        return truthy(l) ? eval(*n.kids[1]) : l;
      }
      case NT::Or: {
        Value l = eval(*n.kids[0]);
        return truthy(l) ? l : eval(*n.kids[1]);
      }
      case NT::Binary: {
        Value l = eval(*n.kids[0]);
        Value r = eval(*n.kids[1]);
        line_ = n.line;
        return binary(n.name, l, r, n);
      }
      case NT::Compare: {
        Value l = eval(*n.kids[0]);
        for (size_t i = 0; i < n.names.size(); ++i) {
          Value r = eval(*n.kids[i + 1]);
          line_ = n.line;
          if (!compare(n.names[i], l, r, n.line)) return Value(false);
          l = std::move(r);
        }
        return Value(true);
      }
      case NT::Cond: {
        if (truthy(eval(*n.kids[1]))) return eval(*n.kids[0]);
        return n.kids[2] ? eval(*n.kids[2]) : Value();
      }
      case NT::List: {
        Array a;
        for (const auto& k : n.kids) a.push_back(eval(*k));
        charge_items(a.size(), "a list literal");
        return n.flag ? Value::tuple(std::move(a)) : Value::array(std::move(a));
      }
      case NT::Dict: {
        Value d = Value::object();
        for (size_t i = 0; i + 1 < n.kids.size(); i += 2) {
          Value k = eval(*n.kids[i]);
          if (!k.is_string()) fail(ErrorKind::Unsupported, n.line, "dict keys other than strings are not supported");
          d.set(k.str(), eval(*n.kids[i + 1]));
        }
        charge_items(d.obj().items.size(), "a dict literal");
        return d;
      }
      default: fail(ErrorKind::Runtime, n.line, "internal: statement where an expression was expected");
    }
  }

  static std::string describe(const Node& n) {
    if (n.t == NT::Name) return n.name;
    if (n.t == NT::Attr) return describe(*n.kids[0]) + "." + n.name;
    if (n.t == NT::Item && n.kids[1] && n.kids[1]->t == NT::Literal)
      return describe(*n.kids[0]) + "[" + py_repr(n.kids[1]->value) + "]";
    return "value";
  }
  static std::string undefined_msg(const Node& n) { return "'" + describe(n) + "' is undefined"; }

  Value get_attr(const Value& obj, const std::string& name, const Node* src, int line) {
    if (obj.is_undefined()) fail(ErrorKind::Runtime, line, undefined_msg(*src) + " (reading ." + name + ")");
    if (obj.is_object()) {
      if (const Value* v = obj.find(name)) return *v;
    }
    return Value();
  }

  Value get_item(const Value& obj, const Value& key, const Node* src, int line) {
    if (obj.is_undefined())
      fail(ErrorKind::Runtime, line, undefined_msg(*src) + " (reading [" + py_repr(key) + "])");
    if (obj.is_object()) {
      if (key.is_string())
        if (const Value* v = obj.find(key.str())) return *v;
      return Value();
    }
    if (obj.is_array() && is_intlike(key)) {
      const int64_t i = norm_index(key.as_int(), obj.arr().size());
      return i < 0 ? Value() : obj.arr()[static_cast<size_t>(i)];
    }
    if (obj.is_string() && is_intlike(key)) {
      const auto off = offsets(obj.str());
      const int64_t i = norm_index(key.as_int(), off.size() - 1);
      if (i < 0) return Value();
      const size_t k = static_cast<size_t>(i);
      return Value(obj.str().substr(off[k], off[k + 1] - off[k]));
    }
    return Value();
  }

  CallArgs eval_args(const Node& n) {
    CallArgs a;
    const size_t first = n.t == NT::Test || n.t == NT::Filter || n.t == NT::Call ? 1 : 0;
    for (size_t i = first; i < n.kids.size(); ++i) a.positional.push_back(eval(*n.kids[i]));
    for (size_t i = 0; i < n.kwargs.size(); ++i) a.keyword.emplace_back(n.names[i], eval(*n.kwargs[i]));
    return a;
  }

  // A call; `caller`: what caller() is in the macro it runs ({% call %}).
  Value eval_call(const Node& n, Value caller = Value()) {
    tick(n.line);
    const Node& callee = *n.kids[0];
    if (callee.t == NT::Attr) {
      Value obj = eval(*callee.kids[0]);
      CallArgs a = eval_args(n);
      line_ = n.line;
      if (obj.is_object()) {
        if (const Value* f = obj.find(callee.name))
          if (f->kind() == Value::Kind::Callable) {
            pending_caller_ = std::move(caller);
            return f->fn().call(a);
          }
      }
      if (obj.is_undefined()) fail(ErrorKind::Runtime, n.line, undefined_msg(*callee.kids[0]) + " (calling ." + callee.name + "())");
      return call_method(obj, callee.name, a, n.line);
    }
    Value f = eval(callee);
    CallArgs a = eval_args(n);
    line_ = n.line;
    if (f.kind() == Value::Kind::Callable) {
      pending_caller_ = std::move(caller);
      Value r = f.fn().call(a);
      pending_caller_ = Value();
      return r;
    }
    if (f.is_undefined() && callee.t == NT::Name)
      fail(ErrorKind::Unsupported, n.line, "the function '" + callee.name + "' is not supported");
    fail(ErrorKind::Runtime, n.line, std::string("'") + type_name(f) + "' object is not callable");
  }

  // ---- operators ----

  Value binary(const std::string& op, const Value& l, const Value& r, const Node& n) {
    const int line = n.line;
    if (op == "~") return make_string(str(l) + str(r));
    auto undefined_operand = [&]() {
      const Node& which = l.is_undefined() ? *n.kids[0] : *n.kids[1];
      fail(ErrorKind::Runtime, line, undefined_msg(which) + " (operand of '" + op + "')");
    };
    if (l.is_undefined() || r.is_undefined()) undefined_operand();
    auto type_error = [&]() {
      fail(ErrorKind::Runtime, line,
           strformat("unsupported operand types for %s: '%s' and '%s'", op.c_str(), type_name(l), type_name(r)));
    };
    if (op == "+") {
      if (l.is_string() && r.is_string()) return make_string(l.str() + r.str());
      if (l.is_array() && r.is_array()) {
        charge_items(static_cast<uint64_t>(l.arr().size()) + r.arr().size(), "'+' of lists");
        Array a = l.arr();
        a.insert(a.end(), r.arr().begin(), r.arr().end());
        return Value::array(std::move(a));
      }
    }
    if (op == "*") {
      const Value* seq = l.is_string() || l.is_array() ? &l : r.is_string() || r.is_array() ? &r : nullptr;
      const Value* cnt = seq == &l ? &r : &l;
      if (seq && is_intlike(*cnt)) {
        const uint64_t k = static_cast<uint64_t>(std::max<int64_t>(0, cnt->as_int()));
        // The size is checked (and charged) before anything is made; an empty
        // operand makes an empty result however large the count.
        if (seq->is_string()) {
          const uint64_t unit = seq->str().size();
          if (unit == 0 || k == 0) return Value(std::string());
          if (k > lim_.max_output / unit) check_size(lim_.max_output + uint64_t{1}, "'*' of a string");
          std::string s;
          s.reserve(static_cast<size_t>(unit * k));
          for (uint64_t i = 0; i < k; ++i) s += seq->str();
          return make_string(std::move(s));
        }
        const uint64_t unit = seq->arr().size();
        if (unit == 0 || k == 0) return Value::array();
        if (k > lim_.max_work_bytes / kValueBytes / unit) work_budget_overrun("'*' of a list");
        charge_items(unit * k, "'*' of a list");
        Array a;
        a.reserve(static_cast<size_t>(unit * k));
        for (uint64_t i = 0; i < k; ++i) a.insert(a.end(), seq->arr().begin(), seq->arr().end());
        return Value::array(std::move(a));
      }
    }
    if (op == "%" && l.is_string())
      fail(ErrorKind::Unsupported, line, "string formatting with % is not supported");
    if (!is_number(l) || !is_number(r)) type_error();
    const bool ints = is_intlike(l) && is_intlike(r);
    if (ints) {
      const int64_t a = l.as_int(), b = r.as_int();
      int64_t out;
      if (op == "+") {
        if (__builtin_add_overflow(a, b, &out)) fail(ErrorKind::Runtime, line, "integer overflow");
        return Value(out);
      }
      if (op == "-") {
        if (__builtin_sub_overflow(a, b, &out)) fail(ErrorKind::Runtime, line, "integer overflow");
        return Value(out);
      }
      if (op == "*") {
        if (__builtin_mul_overflow(a, b, &out)) fail(ErrorKind::Runtime, line, "integer overflow");
        return Value(out);
      }
      if (op == "//" || op == "%") {
        if (b == 0) fail(ErrorKind::Runtime, line, "integer division or modulo by zero");
        if (a == std::numeric_limits<int64_t>::min() && b == -1) fail(ErrorKind::Runtime, line, "integer overflow");
        int64_t q = a / b, m = a % b;
        if (m != 0 && ((m < 0) != (b < 0))) {
          --q;
          m += b;
        }
        return Value(op == "//" ? q : m);
      }
      if (op == "**" && b >= 0) {
        int64_t acc = 1;
        for (int64_t i = 0; i < b; ++i) {
          if (__builtin_mul_overflow(acc, a, &acc)) fail(ErrorKind::Runtime, line, "integer overflow");
          if (acc == 0 || acc == 1) break;
        }
        if (acc == 1 && a == -1 && (b % 2)) acc = -1;
        return Value(acc);
      }
    }
    const double a = num(l), b = num(r);
    if (op == "+") return Value(a + b);
    if (op == "-") return Value(a - b);
    if (op == "*") return Value(a * b);
    if (op == "/") {
      if (b == 0) fail(ErrorKind::Runtime, line, "division by zero");
      return Value(a / b);
    }
    if (op == "//" || op == "%") {
      if (b == 0) fail(ErrorKind::Runtime, line, "float division or modulo by zero");
      double m = std::fmod(a, b);
      if (m != 0 && ((m < 0) != (b < 0))) m += b;
      if (op == "%") return Value(m);
      return Value(std::floor(a / b));
    }
    if (op == "**") return Value(std::pow(a, b));
    type_error();
    return Value();
  }

  bool contains(const Value& hay, const Value& needle, int line) {
    if (hay.is_string()) {
      if (!needle.is_string())
        fail(ErrorKind::Runtime, line, std::string("'in <string>' requires a string, not ") + type_name(needle));
      return search(hay.str(), needle.str(), 0) != std::string::npos;
    }
    if (hay.is_array()) {
      for (const Value& v : hay.arr()) {
        tick(line);
        if (eq(v, needle)) return true;
      }
      return false;
    }
    if (hay.is_object() && !hay.obj().is_namespace && !hay.obj().is_loop) {
      steps(hay.obj().items.size() / 16);
      return needle.is_string() && hay.find(needle.str()) != nullptr;
    }
    if (hay.is_undefined()) return false;
    fail(ErrorKind::Runtime, line, std::string("argument of type '") + type_name(hay) + "' is not iterable");
  }

  bool compare(const std::string& op, const Value& l, const Value& r, int line) {
    if (op == "==") return eq(l, r);
    if (op == "!=") return !eq(l, r);
    if (op == "in") return contains(r, l, line);
    if (op == "not in") return !contains(r, l, line);
    if (op == "<") return lt(l, r, line);
    if (op == ">") return lt(r, l, line);
    if (op == "<=") return !lt(r, l, line);
    return !lt(l, r, line);  // >=
  }

  // ---- methods, filters, tests ----

  // The first occurrence of needle in hay at or after from (linear time; the
  // bytes scanned are charged to the step budget).
  Finder finder(const std::string& needle) {
    scan(needle.size());  // the table: transient, its making charged as steps
    return Finder(needle);
  }
  size_t search(const std::string& hay, const std::string& needle, size_t from) {
    const Finder f = finder(needle);
    return search(f, hay, needle.size(), from);
  }
  size_t search(const Finder& f, const std::string& hay, size_t needle_size, size_t from) {
    const size_t at = f.find(hay, from);
    const size_t end = at == std::string::npos ? hay.size() : at + needle_size;
    scan(end > from ? end - from : 0);
    return at;
  }

  [[noreturn]] void unsupported(const char* what, const std::string& name, int line) {
    fail(ErrorKind::Unsupported, line, strformat("the %s '%s' is not supported", what, name.c_str()));
  }

  std::string str_arg(const CallArgs& a, size_t pos, const char* kw, const char* fn, int line) {
    const Value* v = arg_of(a, pos, kw);
    if (!v || !v->is_string()) fail(ErrorKind::Runtime, line, strformat("%s() takes a string argument", fn));
    return v->str();
  }

  Value split(const std::string& s, const Value* sep, int64_t maxsplit, int line) {
    Array out;
    if (!sep || sep->is_none()) {
      size_t i = skip_py_space(s, 0);
      while (i < s.size()) {
        charge_items(2, "split()");
        size_t j = i;
        if (maxsplit >= 0 && static_cast<int64_t>(out.size()) >= maxsplit) {
          out.emplace_back(s.substr(i));  // the rest, trailing whitespace kept (Python's rule)
          break;
        }
        while (j < s.size()) {
          size_t len;
          if (py_space(decode(s, j, &len))) break;
          j += len;
        }
        out.emplace_back(s.substr(i, j - i));
        i = skip_py_space(s, j);
      }
    } else {
      if (!sep->is_string()) fail(ErrorKind::Runtime, line, "split() separator must be a string");
      const std::string& d = sep->str();
      if (d.empty()) fail(ErrorKind::Runtime, line, "split(): empty separator");
      size_t i = 0;
      const Finder f = finder(d);
      while (true) {
        charge_items(2, "split()");
        const size_t j = maxsplit >= 0 && static_cast<int64_t>(out.size()) >= maxsplit ? std::string::npos
                                                                                       : search(f, s, d.size(), i);
        if (j == std::string::npos) {
          out.emplace_back(s.substr(i));
          break;
        }
        out.emplace_back(s.substr(i, j - i));
        i = j + d.size();
      }
    }
    charge(s.size(), "split()");
    scan(s.size());
    return Value::array(std::move(out));
  }

  static bool affix(const std::string& s, const Value& what, bool prefix) {
    auto one = [&](const std::string& a) {
      return a.size() <= s.size() && (prefix ? s.compare(0, a.size(), a) == 0 : s.compare(s.size() - a.size(), a.size(), a) == 0);
    };
    if (what.is_string()) return one(what.str());
    if (what.is_array())
      for (const Value& v : what.arr())
        if (v.is_string() && one(v.str())) return true;
    return false;
  }

  std::string replace(const std::string& s, const std::string& from, const std::string& to, int64_t count) {
    std::string out;
    if (from.empty()) {  // Python inserts `to` around every code point
      int64_t done = 0;
      const auto off = offsets(s);
      for (size_t k = 0; k + 1 < off.size(); ++k) {
        if (count < 0 || done < count) {
          out += to;
          ++done;
        }
        out.append(s, off[k], off[k + 1] - off[k]);
        check_size(out.size(), "replace()");
      }
      if (count < 0 || done < count) out += to;
      return out;
    }
    size_t i = 0;
    int64_t done = 0;
    const Finder f = finder(from);
    while (count < 0 || done < count) {
      const size_t j = search(f, s, from.size(), i);
      if (j == std::string::npos) break;
      out.append(s, i, j - i);
      out += to;
      check_size(out.size(), "replace()");
      i = j + from.size();
      ++done;
    }
    out.append(s, i, std::string::npos);
    return out;
  }

  static std::string py_title(const std::string& s, bool jinja_filter) {
    std::string out = s;
    bool start = true;
    for (char& c : out) {
      const bool letter = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
      const bool sep = jinja_filter ? (c == '-' || c == '(' || c == '{' || c == '[' || c == '<' || c == ' ' ||
                                       (c >= '\t' && c <= '\r'))
                                    : !letter;
      if (sep) {
        start = true;
        continue;
      }
      if (start) {
        if (c >= 'a' && c <= 'z') c = static_cast<char>(c - 32);
      } else if (c >= 'A' && c <= 'Z') {
        c = static_cast<char>(c + 32);
      }
      start = false;
    }
    return out;
  }

  static std::string capitalize(const std::string& s) {
    std::string out = ascii_lower(s);
    if (!out.empty() && out[0] >= 'a' && out[0] <= 'z') out[0] = static_cast<char>(out[0] - 32);
    return out;
  }

  Value call_method(const Value& obj, const std::string& name, CallArgs& a, int line) {
    if (obj.is_string()) {
      const std::string& s = obj.str();
      if (name == "strip" || name == "lstrip" || name == "rstrip") {
        const Value* chars = arg_of(a, 0, "chars");
        std::string cs;
        if (chars && !chars->is_none()) {
          if (!chars->is_string()) fail(ErrorKind::Runtime, line, name + "() takes a string");
          cs = chars->str();
        }
        const bool has = chars && !chars->is_none();
        scan(uint64_t{s.size()} * (has ? cs.size() + 1 : 1));
        return make_string(py_strip(s, name != "rstrip", name != "lstrip", has ? &cs : nullptr));
      }
      if (name == "split") {
        const Value* ms = arg_of(a, 1, "maxsplit");
        if (ms && !is_intlike(*ms)) fail(ErrorKind::Runtime, line, "split() maxsplit must be an integer");
        return split(s, arg_of(a, 0, "sep"), ms ? ms->as_int() : -1, line);
      }
      if (name == "startswith" || name == "endswith") {
        const Value* w = arg_of(a, 0, nullptr);
        if (!w || !(w->is_string() || w->is_array())) fail(ErrorKind::Runtime, line, name + "() takes a string or a tuple");
        return Value(affix(s, *w, name == "startswith"));
      }
      if (name == "upper") return make_string(ascii_upper(s));
      if (name == "lower") return make_string(ascii_lower(s));
      if (name == "title") return make_string(py_title(s, false));
      if (name == "capitalize") return make_string(capitalize(s));
      if (name == "replace") {
        const Value* c = arg_of(a, 2, "count");
        return make_string(replace(s, str_arg(a, 0, "old", "replace", line), str_arg(a, 1, "new", "replace", line),
                                   c && is_intlike(*c) ? c->as_int() : -1));
      }
      if (name == "join") {
        const Value* it = arg_of(a, 0, nullptr);
        if (!it) fail(ErrorKind::Runtime, line, "join() takes an iterable");
        std::string out;
        bool first = true;
        for (const Value& v : iterate(*it, line)) {
          if (!v.is_string()) fail(ErrorKind::Runtime, line, std::string("join(): expected str, found ") + type_name(v));
          if (!first) out += s;
          out += v.str();
          first = false;
          check_size(out.size(), "join()");
        }
        return make_string(std::move(out));
      }
      if (name == "find" || name == "count") {
        const std::string sub = str_arg(a, 0, nullptr, name.c_str(), line);
        if (name == "find") {
          const size_t k = search(s, sub, 0);
          return Value(k == std::string::npos ? int64_t{-1} : static_cast<int64_t>(cp_count(std::string_view(s).substr(0, k))));
        }
        scan(s.size());
        if (sub.empty()) return Value(static_cast<int64_t>(cp_count(s) + 1));
        int64_t n = 0;
        const Finder f = finder(sub);
        for (size_t k = search(f, s, sub.size(), 0); k != std::string::npos; k = search(f, s, sub.size(), k + sub.size())) ++n;
        return Value(n);
      }
      unsupported("string method", name + "()", line);
    }
    if (obj.is_object() && !obj.obj().is_namespace) {
      if (obj.obj().is_loop && name == "cycle") {
        if (a.positional.empty()) fail(ErrorKind::Runtime, line, "loop.cycle() takes at least one argument");
        const Value* i0 = obj.find("index0");
        return a.positional[static_cast<size_t>(i0->as_int()) % a.positional.size()];
      }
      if (name == "items") return items_of(obj, line);
      if (name == "keys" || name == "values") {
        Array out;
        charge_items(obj.obj().items.size(), "keys() / values()");
        for (const auto& kv : obj.obj().items) out.push_back(name == "keys" ? Value(kv.first) : kv.second);
        return Value::array(std::move(out));
      }
      if (name == "get") {
        const Value* k = arg_of(a, 0, nullptr);
        if (!k) fail(ErrorKind::Runtime, line, "get() takes a key");
        if (k->is_string())
          if (const Value* v = obj.find(k->str())) return *v;
        return arg_or(a, 1, nullptr, Value::none());
      }
      unsupported("dict method", name + "()", line);
    }
    if (obj.is_array()) unsupported("list method", name + "()", line);
    fail(ErrorKind::Runtime, line, std::string("'") + type_name(obj) + "' object has no method '" + name + "'");
  }

  // jinja2's indent filter (width as a count or a string; first; blank),
  // lines split as Python's str.splitlines() splits them.
  Value indent(std::string s, const CallArgs& a, int line) {
    const Value w = arg_or(a, 0, "width", Value(4));
    std::string ind;
    if (w.is_string()) ind = w.str();
    else if (is_intlike(w) && w.as_int() >= 0 && w.as_int() <= 1024) ind.assign(static_cast<size_t>(w.as_int()), ' ');
    else fail(ErrorKind::Runtime, line, "indent width must be a count from 0 to 1024 or a string");
    const bool first = truthy(arg_or(a, 1, "first", Value(false)));
    const bool blank = truthy(arg_or(a, 2, "blank", Value(false)));
    s += '\n';
    std::vector<std::string> lines;
    size_t start = 0;
    for (size_t i = 0; i < s.size();) {
      size_t len = 1, brk = 0;
      const unsigned char c = static_cast<unsigned char>(s[i]);
      if (c == '\r' && i + 1 < s.size() && s[i + 1] == '\n') brk = 2;
      else if (c == '\n' || c == '\r' || c == '\v' || c == '\f' || (c >= 0x1C && c <= 0x1E)) brk = 1;
      else if (c == 0xC2 && i + 1 < s.size() && static_cast<unsigned char>(s[i + 1]) == 0x85) brk = 2;
      else if (c == 0xE2 && i + 2 < s.size() && static_cast<unsigned char>(s[i + 1]) == 0x80 &&
               (static_cast<unsigned char>(s[i + 2]) == 0xA8 || static_cast<unsigned char>(s[i + 2]) == 0xA9)) brk = 3;
      if (brk) {
        lines.push_back(s.substr(start, i - start));
        i += brk;
        start = i;
      } else {
        i += len;
      }
    }
    if (start < s.size()) lines.push_back(s.substr(start));
    charge(s.size() + lines.size() * kValueBytes, "indent()");
    std::string out;
    for (size_t i = 0; i < lines.size(); ++i) {
      if (i) out += '\n';
      if (i > 0 && (blank || !lines[i].empty())) out += ind;
      out += lines[i];
      check_size(out.size(), "indent()");
    }
    if (first) out = ind + out;
    return make_string(std::move(out));
  }

  Value items_of(const Value& v, int line) {
    if (v.is_undefined()) return Value::array();
    if (!v.is_object() || v.obj().is_namespace || v.obj().is_loop)
      fail(ErrorKind::Runtime, line, std::string("items: expected a dict, found ") + type_name(v));
    charge_items(uint64_t{4} * v.obj().items.size(), "items()");
    Array out;
    for (const auto& kv : v.obj().items) out.push_back(Value::tuple({Value(kv.first), kv.second}));
    return Value::array(std::move(out));
  }

  // jinja2's attribute getter for filters: dotted names, each part an item
  // lookup (integers index lists).
  Value attr_path(const Value& item, const std::string& path) {
    Value cur = item;
    size_t i = 0;
    while (true) {
      const size_t dot = path.find('.', i);
      const std::string part = path.substr(i, dot == std::string::npos ? std::string::npos : dot - i);
      if (cur.is_object()) {
        const Value* v = cur.find(part);
        cur = v ? *v : Value();
      } else if (cur.is_array() && !part.empty() && std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; })) {
        const int64_t k = norm_index(std::strtoll(part.c_str(), nullptr, 10), cur.arr().size());
        cur = k < 0 ? Value() : cur.arr()[static_cast<size_t>(k)];
      } else {
        return Value();
      }
      if (dot == std::string::npos) return cur;
      i = dot + 1;
    }
  }

  CallArgs tail_args(const CallArgs& a, size_t from) {
    CallArgs t;
    for (size_t i = from; i < a.positional.size(); ++i) t.positional.push_back(a.positional[i]);
    return t;
  }

  Value apply_filter(const std::string& name, const Value& in, CallArgs& a, int line) {
    if (name == "safe") return in;
    if (name == "trim") {
      const Value* chars = arg_of(a, 0, "chars");
      std::string cs = chars && chars->is_string() ? chars->str() : std::string();
      const std::string text = str(in);
      scan(uint64_t{text.size()} * (cs.size() + 1));
      return make_string(py_strip(text, true, true, chars && chars->is_string() ? &cs : nullptr));
    }
    if (name == "length" || name == "count") {
      switch (in.kind()) {
        case Value::Kind::Undefined: return Value(0);
        case Value::Kind::String: return Value(static_cast<int64_t>(cp_count(in.str())));
        case Value::Kind::Array: return Value(static_cast<int64_t>(in.arr().size()));
        case Value::Kind::Object:
          if (!in.obj().is_namespace && !in.obj().is_loop) return Value(static_cast<int64_t>(in.obj().items.size()));
          [[fallthrough]];
        default: fail(ErrorKind::Runtime, line, std::string("object of type '") + type_name(in) + "' has no len()");
      }
    }
    if (name == "tojson") {
      if (!a.positional.empty()) fail(ErrorKind::Unsupported, line, "tojson with positional arguments is not supported");
      int indent = -1;
      for (const auto& kv : a.keyword) {
        if (kv.first == "indent") {
          if (kv.second.is_none()) continue;
          if (!is_intlike(kv.second) || kv.second.as_int() < 0 || kv.second.as_int() > 64)
            fail(ErrorKind::Unsupported, line, "tojson indent must be an integer from 0 to 64");
          indent = static_cast<int>(kv.second.as_int());
        } else if (kv.first == "ensure_ascii" && !truthy(kv.second)) {
          continue;
        } else {
          fail(ErrorKind::Unsupported, line, "the tojson argument '" + kv.first + "' is not supported");
        }
      }
      std::string out;
      Walk w("tojson", line, this);
      json_dump(out, in, indent, 0, lim_.max_output, w);
      return make_string(std::move(out));
    }
    if (name == "upper") return make_string(ascii_upper(str(in)));
    if (name == "lower") return make_string(ascii_lower(str(in)));
    if (name == "capitalize") return make_string(capitalize(str(in)));
    if (name == "title") return make_string(py_title(str(in), true));
    if (name == "string") return in.is_string() ? in : make_string(str(in));
    if (name == "default" || name == "d") {
      const Value def = arg_or(a, 0, "default_value", Value(""));
      const bool boolean = truthy(arg_or(a, 1, "boolean", Value(false)));
      return in.is_undefined() || (boolean && !truthy(in)) ? def : in;
    }
    if (name == "first" || name == "last") {
      if (in.is_string() || in.is_array() || in.is_object()) {
        std::vector<Value> items = iterate(in, line);
        if (items.empty()) return Value();
        return name == "first" ? items.front() : items.back();
      }
      if (in.is_undefined()) return Value();
      fail(ErrorKind::Runtime, line, std::string("'") + type_name(in) + "' object is not iterable");
    }
    if (name == "join") {
      const std::string sep = str(arg_or(a, 0, "d", Value("")));
      const Value attr = arg_or(a, 1, "attribute", Value::none());
      std::string out;
      bool first = true;
      for (const Value& v : iterate(in, line)) {
        if (!first) out += sep;
        out += str(attr.is_none() ? v : attr_path(v, str(attr)));
        first = false;
        check_size(out.size(), "join()");
      }
      return make_string(std::move(out));
    }
    if (name == "list") {
      Array out = iterate(in, line);
      return Value::array(std::move(out));
    }
    if (name == "items") return items_of(in, line);
    if (name == "indent") return indent(str(in), a, line);
    if (name == "reverse") {
      if (in.is_string()) {
        const auto off = offsets(in.str());
        std::string out;
        for (size_t k = off.size() - 1; k > 0; --k) out.append(in.str(), off[k - 1], off[k] - off[k - 1]);
        return make_string(std::move(out));
      }
      Array out = iterate(in, line);
      std::reverse(out.begin(), out.end());
      return Value::array(std::move(out));
    }
    if (name == "abs") {
      if (in.kind() == Value::Kind::Float) return Value(std::fabs(in.as_float()));
      if (is_intlike(in)) {
        if (in.as_int() == std::numeric_limits<int64_t>::min()) fail(ErrorKind::Runtime, line, "integer overflow");
        return Value(in.as_int() < 0 ? -in.as_int() : in.as_int());
      }
      fail(ErrorKind::Runtime, line, std::string("bad operand type for abs(): '") + type_name(in) + "'");
    }
    if (name == "int" || name == "float") {
      const bool want_int = name == "int";
      const Value def = arg_or(a, 0, "default", want_int ? Value(0) : Value(0.0));
      if (is_intlike(in)) return want_int ? Value(in.as_int()) : Value(static_cast<double>(in.as_int()));
      if (in.kind() == Value::Kind::Float) {
        const double d = in.as_float();
        if (!want_int) return in;
        if (!std::isfinite(d) || std::fabs(d) >= 9.2e18) return def;
        return Value(static_cast<int64_t>(d));
      }
      if (in.is_string()) {
        const std::string s = py_strip(in.str(), true, true, nullptr);
        if (want_int) {
          std::string t = s;
          t.erase(std::remove(t.begin(), t.end(), '_'), t.end());
          int64_t i = 0;
          const char* b = t.data() + (!t.empty() && t[0] == '+' ? 1 : 0);
          auto r = std::from_chars(b, t.data() + t.size(), i);
          if (!t.empty() && r.ec == std::errc() && r.ptr == t.data() + t.size()) return Value(i);
        }
        char* end = nullptr;
        const double d = std::strtod(s.c_str(), &end);
        if (!s.empty() && end == s.c_str() + s.size() && s.find_first_of("xXpP") == std::string::npos) {
          if (!want_int) return Value(d);
          if (std::isfinite(d) && std::fabs(d) < 9.2e18) return Value(static_cast<int64_t>(d));
        }
      }
      return def;
    }
    if (name == "replace") {
      const Value* c = arg_of(a, 2, "count");
      return make_string(replace(str(in), str(arg_or(a, 0, "old", Value(""))),
                                 str(arg_or(a, 1, "new", Value(""))), c && is_intlike(*c) ? c->as_int() : -1));
    }
    if (name == "map") {
      Array out;
      const Value* attr = arg_of(a, std::numeric_limits<size_t>::max(), "attribute");
      if (attr) {
        const Value* def = arg_of(a, std::numeric_limits<size_t>::max(), "default");
        for (const Value& v : iterate(in, line)) {
          Value x = attr_path(v, str(*attr));
          out.push_back(x.is_undefined() && def ? *def : x);
        }
      } else {
        if (a.positional.empty() || !a.positional[0].is_string())
          fail(ErrorKind::Runtime, line, "map() takes a filter name or attribute=");
        const std::string f = a.positional[0].str();
        for (const Value& v : iterate(in, line)) {
          CallArgs t = tail_args(a, 1);
          out.push_back(apply_filter(f, v, t, line));
        }
      }
      charge(out.size() * 16);
      return Value::array(std::move(out));
    }
    if (name == "select" || name == "reject" || name == "selectattr" || name == "rejectattr") {
      const bool by_attr = name == "selectattr" || name == "rejectattr";
      const bool keep_if = name == "select" || name == "selectattr";
      size_t k = 0;
      std::string attr;
      if (by_attr) {
        if (a.positional.empty() || !a.positional[0].is_string())
          fail(ErrorKind::Runtime, line, name + "() takes an attribute name");
        attr = a.positional[k++].str();
      }
      std::string test;
      if (k < a.positional.size()) {
        if (!a.positional[k].is_string()) fail(ErrorKind::Runtime, line, name + "() takes a test name");
        test = a.positional[k++].str();
      }
      CallArgs targs = tail_args(a, k);
      Array out;
      for (const Value& v : iterate(in, line)) {
        const Value x = by_attr ? attr_path(v, attr) : v;
        const bool r = test.empty() ? truthy(x) : apply_test(test, x, targs, line);
        if (r == keep_if) out.push_back(v);
      }
      charge(out.size() * 16);
      return Value::array(std::move(out));
    }
    unsupported("filter", name, line);
  }

  bool apply_test(const std::string& name, const Value& v, CallArgs& a, int line) {
    using K = Value::Kind;
    const K k = v.kind();
    if (name == "defined") return k != K::Undefined;
    if (name == "undefined") return k == K::Undefined;
    if (name == "none") return k == K::None;
    if (name == "string") return k == K::String;
    if (name == "number") return k == K::Int || k == K::Float || k == K::Bool;
    if (name == "integer") return k == K::Int;
    if (name == "float") return k == K::Float;
    if (name == "boolean") return k == K::Bool;
    if (name == "true") return k == K::Bool && v.as_bool();
    if (name == "false") return k == K::Bool && !v.as_bool();
    if (name == "mapping") return k == K::Object && !v.obj().is_namespace && !v.obj().is_loop;
    if (name == "iterable" || name == "sequence")
      return k == K::String || k == K::Array || k == K::Undefined || (k == K::Object && !v.obj().is_namespace && !v.obj().is_loop);
    if (name == "callable") return k == K::Callable;
    if (name == "lower" || name == "upper") {
      if (k != K::String) return false;
      const std::string s = str(v);
      return name == "lower" ? ascii_lower(s) == s : ascii_upper(s) == s;
    }
    if (name == "odd" || name == "even" || name == "divisibleby") {
      if (!is_intlike(v)) fail(ErrorKind::Runtime, line, "the " + name + " test needs an integer");
      if (name == "divisibleby") {
        const Value* d = arg_of(a, 0, "num");
        if (!d || !is_intlike(*d) || d->as_int() == 0) fail(ErrorKind::Runtime, line, "divisibleby needs a non-zero integer");
        return v.as_int() % d->as_int() == 0;
      }
      const bool odd = (v.as_int() % 2) != 0;
      return name == "odd" ? odd : !odd;
    }
    static const char* const kCmp[][2] = {{"equalto", "=="}, {"eq", "=="}, {"==", "=="}, {"sameas", "=="},
                                          {"ne", "!="},      {"!=", "!="}, {"lt", "<"},   {"<", "<"},
                                          {"le", "<="},      {"<=", "<="}, {"gt", ">"},   {">", ">"},
                                          {"ge", ">="},      {">=", ">="}, {"greaterthan", ">"}, {"lessthan", "<"},
                                          {"in", "in"}};
    for (const auto& c : kCmp)
      if (name == c[0]) {
        const Value* other = arg_of(a, 0, nullptr);
        if (!other) fail(ErrorKind::Runtime, line, "the " + name + " test needs an argument");
        if (name == "sameas") return eq(v, *other) && v.kind() == other->kind() &&
                                     (k == K::None || k == K::Bool || k == K::Undefined);
        return compare(c[1], v, *other, line);
      }
    unsupported("test", name, line);
  }
};

}  // namespace

Template::Template(std::string_view source, const Limits& limits) : limits_(limits) {
  if (source.size() > limits_.max_source)
    fail(ErrorKind::Limit, 0, strformat("the template is %zu bytes, more than the %zu the interpreter reads", source.size(),
                                        limits_.max_source));
  Parser p(lex(source), limits_);
  root_ = p.parse_template();
}

Template::~Template() = default;

std::string Template::render(const Value& globals, const RenderOptions& options) const {
  Renderer r(limits_, options);
  return r.run(*root_, globals);
}
}  // namespace infer::jinja
