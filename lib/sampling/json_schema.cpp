// JSON schema -> GBNF (see grammar.h). The schema text is read by
// core/json.h into a JVal tree, then one grammar rule per schema node.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <map>
#include <optional>
#include <set>

#include "core/error.h"
#include "core/json.h"
#include "sampling/grammar.h"

namespace infer {
namespace {

struct JVal {
  enum Type { Null, Bool, Num, Str, Arr, Obj } type = Null;
  bool b = false;
  double num = 0;
  std::string str;    // Str; Num: the number's own text
  std::vector<JVal> arr;
  std::vector<std::string> keys;  // Obj: keys and values in document order
  std::vector<JVal> vals;

  const JVal* get(const std::string& k) const {
    if (type != Obj) return nullptr;
    for (size_t i = 0; i < keys.size(); ++i)
      if (keys[i] == k) return &vals[i];
    return nullptr;
  }
};

// The schema text (read by core/json.h) as a JVal.
JVal to_jval(const Json& j) {
  JVal v;
  switch (j.kind()) {
    case Json::Kind::Null: break;
    case Json::Kind::Bool:
      v.type = JVal::Bool;
      v.b = j.as_bool();
      break;
    case Json::Kind::Number:
      if (!std::isfinite(j.as_double()))
        raise(Status::InvalidArgument, "json schema: the number %s is out of range", j.number_text().c_str());
      v.type = JVal::Num;
      v.num = j.as_double();
      v.str = j.number_text();
      break;
    case Json::Kind::String:
      v.type = JVal::Str;
      v.str = j.as_string();
      break;
    case Json::Kind::Array:
      v.type = JVal::Arr;
      for (const Json& item : j.items()) v.arr.push_back(to_jval(item));
      break;
    case Json::Kind::Object:
      v.type = JVal::Obj;
      for (const auto& [key, item] : j.members()) {
        v.keys.push_back(key);
        v.vals.push_back(to_jval(item));
      }
      break;
  }
  return v;
}

// The JSON text of a value, compact (for const / enum literals).
std::string to_json(const JVal& v) {
  switch (v.type) {
    case JVal::Null: return "null";
    case JVal::Bool: return v.b ? "true" : "false";
    case JVal::Num: return v.str;
    case JVal::Str: {
      std::string o = "\"";
      for (unsigned char c : v.str) {
        if (c == '"') o += "\\\"";
        else if (c == '\\') o += "\\\\";
        else if (c == '\n') o += "\\n";
        else if (c == '\t') o += "\\t";
        else if (c == '\r') o += "\\r";
        else if (c < 0x20) {
          char b[8];
          std::snprintf(b, sizeof b, "\\u%04x", c);
          o += b;
        } else {
          o += static_cast<char>(c);
        }
      }
      return o + "\"";
    }
    case JVal::Arr: {
      std::string o = "[";
      for (size_t i = 0; i < v.arr.size(); ++i) o += (i ? "," : "") + to_json(v.arr[i]);
      return o + "]";
    }
    case JVal::Obj: {
      std::string o = "{";
      for (size_t i = 0; i < v.keys.size(); ++i) {
        JVal k;
        k.type = JVal::Str;
        k.str = v.keys[i];
        o += (i ? "," : "") + to_json(k) + ":" + to_json(v.vals[i]);
      }
      return o + "}";
    }
  }
  return "null";
}

// Bytes as a GBNF string literal.
std::string gbnf_literal(const std::string& s) {
  std::string o = "\"";
  for (unsigned char c : s) {
    if (c == '"') o += "\\\"";
    else if (c == '\\') o += "\\\\";
    else if (c < 0x20 || c == 0x7f) {
      char b[8];
      std::snprintf(b, sizeof b, "\\x%02x", c);
      o += b;
    } else {
      o += static_cast<char>(c);
    }
  }
  return o + "\"";
}

// The shared rules every JSON grammar uses. Whitespace between two tokens
// is at most one space or tab, or one newline and an indent of at most 16
// spaces (2-space pretty printing 8 levels deep): compact and pretty JSON
// both match, and a model steered by the grammar cannot spend its tokens on
// runs of blank lines or spaces (every value ends in one `ws`, and every
// place that takes whitespace takes exactly one `ws`).
const char* kJsonBase =
    "value ::= object | array | string | number | boolean | null\n"
    "object ::= \"{\" ws ( string \":\" ws value ( \",\" ws string \":\" ws value )* )? \"}\" ws\n"
    "array ::= \"[\" ws ( value ( \",\" ws value )* )? \"]\" ws\n"
    "char ::= [^\"\\\\\\x7F\\x00-\\x1F] | \"\\\\\" ( [\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4} )\n"
    "string ::= \"\\\"\" char* \"\\\"\" ws\n"
    "integer ::= \"-\"? ( [0-9] | [1-9] [0-9]{1,15} ) ws\n"
    "number ::= \"-\"? ( [0-9] | [1-9] [0-9]{1,15} ) ( \".\" [0-9]{1,16} )? ( [eE] [-+]? [0-9]{1,3} )? ws\n"
    "boolean ::= ( \"true\" | \"false\" ) ws\n"
    "null ::= \"null\" ws\n"
    "ws ::= ( [ \\t] | \"\\n\" \" \"{0,16} )?\n";

// A JSON schema `pattern` (an ECMA-262 regular expression, the subset that
// can be written as a context-free grammar: literals, escapes \d \w \s \D \W
// \S and \t \n \r \xHH \uHHHH, classes [...] and [^...], '.', groups (...)
// and (?:...), alternation, the quantifiers * + ? {n} {n,} {n,m} (a lazy '?'
// after them changes nothing here), '^' first and '$' last) as the GBNF of the
// *JSON-encoded* characters between the string's quotes. A pattern matches
// anywhere in the string, so one without '^' (or '$') may be preceded (or
// followed) by any characters. Characters that JSON must escape are written
// escaped; negated classes and '.' never produce '"', '\' or control
// characters (a subset of what they match, so the output still validates).
// Lookarounds, backreferences and anchors elsewhere are errors.
class RegexToGbnf {
 public:
  explicit RegexToGbnf(std::string_view re) : re_(re) {}

  std::string run() {
    bool head = false, tail = false;
    if (!re_.empty() && re_[0] == '^') {
      head = true;
      p_ = 1;
    }
    std::string body = alternation(0);
    if (p_ < re_.size() && re_[p_] == '$') {
      tail = true;
      ++p_;
    }
    if (p_ != re_.size()) fail(re_[p_] == ')' ? "unbalanced ')'" : "'^' or '$' in the middle of the pattern");
    std::string out;
    if (!head) out += "char* ";
    out += "( " + body + " )";
    if (!tail) out += " char*";
    return out;
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    raise(Status::InvalidArgument, "json schema: pattern '%.*s': %s (at offset %zu)", static_cast<int>(std::min<size_t>(re_.size(), 200)),
          re_.data(), what.c_str(), p_);
  }
  bool more() const { return p_ < re_.size(); }
  char peek() const { return re_[p_]; }

  std::string alternation(int depth) {
    if (depth > 32) fail("groups nested too deeply");
    std::string alts = concat(depth);
    while (more() && peek() == '|') {
      ++p_;
      alts += " | " + concat(depth);
    }
    return alts;
  }

  std::string concat(int depth) {
    std::string seq;
    while (more() && peek() != '|' && peek() != ')' && !(peek() == '$' && p_ + 1 == re_.size())) {
      std::string a = atom(depth);
      a = quantified(a);
      seq += (seq.empty() ? "" : " ") + a;
    }
    return seq.empty() ? "\"\"" : seq;
  }

  int number() {
    if (!more() || !std::isdigit(static_cast<unsigned char>(peek()))) fail("expected a number in {}");
    long v = 0;
    while (more() && std::isdigit(static_cast<unsigned char>(peek()))) {
      v = v * 10 + (peek() - '0');
      if (v > 1000) fail("repetition counts above 1000 are not supported");
      ++p_;
    }
    return static_cast<int>(v);
  }

  std::string quantified(const std::string& a) {
    if (!more()) return a;
    std::string q;
    const char c = peek();
    if (c == '*' || c == '+' || c == '?') {
      q = std::string(1, c);
      ++p_;
    } else if (c == '{' && p_ + 1 < re_.size() && std::isdigit(static_cast<unsigned char>(re_[p_ + 1]))) {
      ++p_;
      const int lo = number();
      int hi = lo;
      if (more() && peek() == ',') {
        ++p_;
        hi = more() && peek() == '}' ? -1 : number();
      }
      if (!more() || peek() != '}') fail("unfinished {n,m}");
      ++p_;
      if (hi >= 0 && hi < lo) fail("{n,m} with m < n");
      q = "{" + std::to_string(lo) + (hi == lo ? "" : "," + (hi >= 0 ? std::to_string(hi) : std::string())) + "}";
    } else {
      return a;
    }
    if (more() && peek() == '?') ++p_;  // lazy: the same language
    if (more() && (peek() == '*' || peek() == '+' || peek() == '?' || peek() == '{')) fail("a quantifier after a quantifier");
    return "( " + a + " )" + q;
  }

  // One character (code point) as the GBNF of its JSON encoding.
  static std::string json_char(uint32_t cp) {
    char b[16];
    switch (cp) {
      case '"': return "\"\\\\\\\"\"";   // the two bytes \"
      case '\\': return "\"\\\\\\\\\"";  // the two bytes \\ (escaped backslash)
      case '\n': return "\"\\\\n\"";
      case '\t': return "\"\\\\t\"";
      case '\r': return "\"\\\\r\"";
      case '\b': return "\"\\\\b\"";
      case '\f': return "\"\\\\f\"";
      default: break;
    }
    if (cp < 0x20) {
      std::snprintf(b, sizeof b, "\"\\\\u%04x\"", static_cast<unsigned>(cp));
      return b;
    }
    std::snprintf(b, sizeof b, cp <= 0xFFFF ? "\"\\u%04X\"" : "\"\\U%08X\"", static_cast<unsigned>(cp));
    return b;
  }

  // The code points of a class that JSON writes without escaping.
  using Ranges = std::vector<std::pair<uint32_t, uint32_t>>;
  static std::string class_gbnf(const Ranges& ranges, bool negated) {
    char b[40];
    if (negated) {
      std::string o = "[^\\x00-\\x1F\\x7F\"\\\\";
      for (auto [lo, hi] : ranges) {
        std::snprintf(b, sizeof b, "\\U%08X-\\U%08X", static_cast<unsigned>(lo), static_cast<unsigned>(hi));
        o += b;
      }
      return o + "]";
    }
    // Plain members in one class; those JSON escapes as alternatives.
    std::string cls, alts;
    for (auto [lo, hi] : ranges) {
      for (uint32_t special : {0x22u, 0x5Cu}) {
        if (special >= lo && special <= hi) alts += (alts.empty() ? "" : " | ") + json_char(special);
      }
      for (uint32_t c = lo; c <= std::min<uint32_t>(hi, 0x1F); ++c) alts += (alts.empty() ? "" : " | ") + json_char(c);
      // What is left of [lo, hi] after removing 0x00-0x1F, '"' and '\'.
      uint32_t a = std::max<uint32_t>(lo, 0x20);
      auto emit = [&](uint32_t x, uint32_t y) {
        if (x > y) return;
        std::snprintf(b, sizeof b, "\\U%08X-\\U%08X", static_cast<unsigned>(x), static_cast<unsigned>(y));
        cls += b;
      };
      for (uint32_t special : {0x22u, 0x5Cu}) {
        if (special >= a && special <= hi) {
          emit(a, special - 1);
          a = special + 1;
        }
      }
      emit(a, hi);
    }
    std::string o;
    if (!cls.empty()) o = "[" + cls + "]";
    if (!alts.empty()) o += (o.empty() ? "" : " | ") + alts;
    if (o.empty()) return "[^\\x00-\\U0010FFFF]";  // matches nothing
    return "( " + o + " )";
  }

  uint32_t hex_digits(int n) {
    uint32_t v = 0;
    for (int i = 0; i < n; ++i) {
      if (!more() || !std::isxdigit(static_cast<unsigned char>(peek()))) fail("bad hex escape");
      const char c = peek();
      v = v * 16 + static_cast<uint32_t>(std::isdigit(static_cast<unsigned char>(c)) ? c - '0' : (std::tolower(c) - 'a' + 10));
      ++p_;
    }
    return v;
  }

  uint32_t utf8_char() {
    const unsigned char c = static_cast<unsigned char>(peek());
    const int len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (len == 0 || p_ + static_cast<size_t>(len) > re_.size()) fail("invalid UTF-8");
    uint32_t cp = len == 1 ? c : len == 2 ? (c & 0x1Fu) : len == 3 ? (c & 0x0Fu) : (c & 0x07u);
    for (int i = 1; i < len; ++i) {
      const unsigned char d = static_cast<unsigned char>(re_[p_ + static_cast<size_t>(i)]);
      if ((d & 0xC0) != 0x80) fail("invalid UTF-8");
      cp = (cp << 6) | (d & 0x3Fu);
    }
    p_ += static_cast<size_t>(len);
    return cp;
  }

  // An escape after '\': a single code point (set `cp`) or a class (fill
  // `ranges`, set `negated`); returns true for a class.
  bool escape(uint32_t& cp, Ranges& ranges, bool& negated) {
    if (!more()) fail("a pattern may not end with '\\'");
    const char e = peek();
    ++p_;
    negated = std::isupper(static_cast<unsigned char>(e)) && (e == 'D' || e == 'W' || e == 'S');
    switch (e) {
      case 'd': case 'D': ranges = {{'0', '9'}}; return true;
      case 'w': case 'W': ranges = {{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}}; return true;
      case 's': case 'S': ranges = {{'\t', '\r'}, {' ', ' '}, {0xA0, 0xA0}, {0x2028, 0x2029}, {0xFEFF, 0xFEFF}}; return true;
      case 'n': cp = '\n'; return false;
      case 't': cp = '\t'; return false;
      case 'r': cp = '\r'; return false;
      case 'f': cp = '\f'; return false;
      case 'v': cp = '\v'; return false;
      case '0': cp = 0; return false;
      case 'x': cp = hex_digits(2); return false;
      case 'u': cp = hex_digits(4); return false;
      case 'b': case 'B': fail("word boundaries are not supported");
      default: break;
    }
    if (std::isdigit(static_cast<unsigned char>(e))) fail("backreferences are not supported");
    if (std::isalnum(static_cast<unsigned char>(e))) fail(std::string("unknown escape \\") + e);
    cp = static_cast<unsigned char>(e);  // \. \* \( \\ \/ ...
    if (cp >= 0x80) fail("invalid escape");
    return false;
  }

  std::string bracket() {
    // after '['
    bool negated = false;
    if (more() && peek() == '^') {
      negated = true;
      ++p_;
    }
    Ranges ranges;
    bool first = true;
    for (;;) {
      if (!more()) fail("unfinished character class");
      if (peek() == ']' && !first) {
        ++p_;
        break;
      }
      first = false;
      uint32_t lo;
      if (peek() == '\\') {
        ++p_;
        Ranges sub;
        bool sub_neg = false;
        if (escape(lo, sub, sub_neg)) {
          if (sub_neg) fail("\\D, \\W and \\S inside a class are not supported");
          ranges.insert(ranges.end(), sub.begin(), sub.end());
          continue;
        }
      } else {
        lo = utf8_char();
      }
      uint32_t hi = lo;
      if (p_ + 1 < re_.size() && peek() == '-' && re_[p_ + 1] != ']') {
        ++p_;
        if (peek() == '\\') {
          ++p_;
          Ranges sub;
          bool sub_neg = false;
          if (escape(hi, sub, sub_neg)) fail("a class shorthand cannot end a range");
        } else {
          hi = utf8_char();
        }
        if (hi < lo) fail("a range out of order");
      }
      ranges.push_back({lo, hi});
    }
    return class_gbnf(ranges, negated);
  }

  std::string atom(int depth) {
    const char c = peek();
    if (c == '(') {
      ++p_;
      if (more() && peek() == '?') {
        if (p_ + 1 < re_.size() && re_[p_ + 1] == ':') p_ += 2;
        else fail("lookarounds and named groups are not supported");
      }
      std::string inner = alternation(depth + 1);
      if (!more() || peek() != ')') fail("unbalanced '('");
      ++p_;
      return "( " + inner + " )";
    }
    if (c == '[') {
      ++p_;
      return bracket();
    }
    if (c == '.') {
      ++p_;
      return "[^\\x00-\\x1F\\x7F\"\\\\\\u2028\\u2029]";
    }
    if (c == '\\') {
      ++p_;
      uint32_t cp = 0;
      Ranges ranges;
      bool negated = false;
      if (escape(cp, ranges, negated)) return class_gbnf(ranges, negated);
      return json_char(cp);
    }
    if (c == '*' || c == '+' || c == '?') fail("a quantifier with nothing to repeat");
    if (c == '^' || c == '$') fail("'^' or '$' in the middle of the pattern");
    return json_char(utf8_char());
  }

  std::string_view re_;
  size_t p_ = 0;
};

// JSON schema `format`s with a grammar (the others are annotations, as the
// specification allows, and leave the string unconstrained).
const char* format_gbnf(const std::string& f) {
  if (f == "date") return "\"\\\"\" date \"\\\"\" ws";
  if (f == "time") return "\"\\\"\" time \"\\\"\" ws";
  if (f == "date-time") return "\"\\\"\" date \"T\" time \"\\\"\" ws";
  if (f == "uuid")
    return "\"\\\"\" [0-9a-fA-F]{8} \"-\" [0-9a-fA-F]{4} \"-\" [0-9a-fA-F]{4} \"-\" [0-9a-fA-F]{4} \"-\" [0-9a-fA-F]{12} \"\\\"\" ws";
  if (f == "ipv4") return "\"\\\"\" octet \".\" octet \".\" octet \".\" octet \"\\\"\" ws";
  if (f == "email") return "\"\\\"\" [a-zA-Z0-9._%+-]{1,64} \"@\" [a-zA-Z0-9-]{1,63} ( \".\" [a-zA-Z0-9-]{1,63} ){1,4} \"\\\"\" ws";
  return nullptr;
}

// The rules the formats use (RFC 3339 dates and times; a dotted-quad octet).
const char* kFormatBase =
    "date ::= [0-9]{4} \"-\" ( \"0\" [1-9] | \"1\" [0-2] ) \"-\" ( \"0\" [1-9] | [12] [0-9] | \"3\" [01] )\n"
    "time ::= ( [01] [0-9] | \"2\" [0-3] ) \":\" [0-5] [0-9] \":\" ( [0-5] [0-9] | \"60\" ) ( \".\" [0-9]{1,9} )? "
    "( [zZ] | [+-] ( [01] [0-9] | \"2\" [0-3] ) \":\" [0-5] [0-9] )\n"
    "octet ::= [0-9] | [1-9] [0-9] | \"1\" [0-9] [0-9] | \"2\" [0-4] [0-9] | \"25\" [0-5]\n";

// Integers in [lo, hi] (either side may be open) as GBNF over their decimal
// text (no leading zeros, "-0" never written), built digit by digit.
class IntRange {
 public:
  static std::string gbnf(std::optional<int64_t> lo, std::optional<int64_t> hi) {
    std::vector<std::string> alts;
    // Negative values -x: x from 1 (or -hi when hi < 0) up to -lo (or open).
    if (!lo || *lo < 0) {
      const int64_t x_min = (hi && *hi < 0) ? -*hi : 1;
      const std::optional<int64_t> x_max = lo ? std::optional<int64_t>(-*lo) : std::nullopt;
      if (!x_max || *x_max >= x_min) alts.push_back("\"-\" ( " + nonneg(x_min, x_max) + " )");
    }
    // Non-negative part: [max(0, lo), hi].
    if (!hi || *hi >= 0) {
      const int64_t a = lo ? std::max<int64_t>(0, *lo) : 0;
      if (!hi || *hi >= a) alts.push_back(nonneg(a, hi));
    }
    if (alts.empty()) return "";
    std::string o;
    for (size_t i = 0; i < alts.size(); ++i) o += (i ? " | " : "") + alts[i];
    return "( " + o + " )";
  }

 private:
  static std::string digits(int64_t v) { return std::to_string(v); }
  static int64_t pow10(int n) {
    int64_t p = 1;
    for (int i = 0; i < n; ++i) p *= 10;
    return p;
  }
  // [a, b] (b open: any larger), 0 <= a.
  static std::string nonneg(int64_t a, std::optional<int64_t> b) {
    std::vector<std::string> alts;
    const int la = static_cast<int>(digits(a).size());
    const int lb = b ? static_cast<int>(digits(*b).size()) : 18;
    for (int len = la; len <= lb; ++len) {
      const int64_t lo = len == la ? a : pow10(len - 1);
      const int64_t hi = (b && len == lb) ? *b : pow10(len) - 1;
      if (lo > hi) continue;
      alts.push_back(same_len(digits(lo), digits(hi)));
    }
    if (!b) alts.push_back("[1-9] [0-9]{18}");  // up to int64's 19 digits
    std::string o;
    for (size_t i = 0; i < alts.size(); ++i) o += (i ? " | " : "") + alts[i];
    return o;
  }
  static std::string cls(char a, char b) {
    if (a == b) return std::string("\"") + a + "\"";
    return std::string("[") + a + "-" + b + "]";
  }
  // Strings of equal length between lo and hi (as numbers), inclusive.
  static std::string same_len(const std::string& lo, const std::string& hi) {
    const size_t n = lo.size();
    if (n == 0) return "\"\"";
    if (n == 1) return cls(lo[0], hi[0]);
    if (lo[0] == hi[0]) return cls(lo[0], lo[0]) + " ( " + same_len(lo.substr(1), hi.substr(1)) + " )";
    const std::string rest_nines(n - 1, '9'), rest_zeros(n - 1, '0');
    std::vector<std::string> alts;
    const bool lo_full = lo.substr(1) == rest_zeros, hi_full = hi.substr(1) == rest_nines;
    char first = lo[0], last = hi[0];
    if (!lo_full) {
      alts.push_back(cls(lo[0], lo[0]) + " ( " + same_len(lo.substr(1), rest_nines) + " )");
      ++first;
    }
    if (!hi_full) --last;
    if (first <= last) alts.push_back(cls(first, last) + " [0-9]{" + std::to_string(n - 1) + "}");
    if (!hi_full) alts.push_back(cls(hi[0], hi[0]) + " ( " + same_len(rest_zeros, hi.substr(1)) + " )");
    std::string o;
    for (size_t i = 0; i < alts.size(); ++i) o += (i ? " | " : "") + alts[i];
    return "( " + o + " )";
  }
};

class SchemaConverter {
 public:
  explicit SchemaConverter(const JVal& root) : root_(root) {}

  std::string run() {
    const std::string r = visit(root_, "root-value", 0);
    std::string out = "root ::= ws " + r + "\n";
    for (const auto& [name, body] : rules_) out += name + " ::= " + body + "\n";
    return out + kJsonBase + (uses_formats_ ? kFormatBase : "");
  }

 private:
  [[noreturn]] static void unsupported(const std::string& what) {
    raise(Status::InvalidArgument, "json schema: %s", what.c_str());
  }

  std::string new_rule(const std::string& hint, const std::string& body) {
    std::string name;
    for (char c : hint) name += (std::isalnum(static_cast<unsigned char>(c)) || c == '-') ? c : '-';
    if (name.empty()) name = "r";
    name = "s-" + name;
    // The first free name of name, name2, name3, ...: rules are never
    // removed, so the search resumes where the last one for this name ended
    // (a schema with many same-named rules costs n log n, not n^2).
    std::string unique = name;
    if (rules_.count(unique)) {
      int& i = next_suffix_[name];
      if (i < 2) i = 2;
      for (unique = name + std::to_string(i); rules_.count(unique); unique = name + std::to_string(++i)) {
      }
    }
    rules_[unique] = body;
    return unique;
  }

  static int64_t int_field(const JVal& s, const char* k, int64_t def) {
    const JVal* v = s.get(k);
    if (!v) return def;
    if (v->type != JVal::Num || v->num < 0 || v->num != std::floor(v->num)) unsupported(std::string(k) + " must be a non-negative integer");
    return static_cast<int64_t>(std::min(v->num, 1e9));
  }

  // A pattern's grammar compiled on its own, so that one the matcher could
  // not run (left recursion through (a*)*, explosive nested counts) is
  // refused here, naming the pattern, before any text is generated.
  static void check_pattern(const std::string& re, const std::string& gbnf) {
    try {
      Grammar::parse("root ::= " + gbnf + "\n" + kJsonBase);
    } catch (const Error& e) {
      unsupported("pattern '" + re.substr(0, 200) + "' cannot be used: " + e.what());
    }
  }

  std::string visit(const JVal& s, const std::string& hint, int depth) {
    if (depth > 64) unsupported("nested too deeply (more than 64 levels)");
    // Type lists visit a schema once per type, so the walk is bounded in
    // steps as well as in depth.
    if (++visits_ > kMaxVisits) unsupported("the schema expands to too many rules (type lists nested in type lists?)");
    if (s.type == JVal::Bool) {
      if (!s.b) unsupported("the schema 'false' matches nothing");
      return "value";
    }
    if (s.type != JVal::Obj) unsupported("a schema must be an object or a boolean");
    if (const JVal* ref = s.get("$ref")) {
      if (ref->type != JVal::Str) unsupported("$ref must be a string");
      return visit_ref(ref->str, depth);
    }
    if (const JVal* c = s.get("const")) return "( " + gbnf_literal(to_json(*c)) + " ws )";
    if (const JVal* e = s.get("enum")) {
      if (e->type != JVal::Arr || e->arr.empty()) unsupported("enum must be a non-empty array");
      std::string alts;
      for (const JVal& v : e->arr) alts += (alts.empty() ? "" : " | ") + gbnf_literal(to_json(v));
      return "( ( " + alts + " ) ws )";
    }
    for (const char* k : {"anyOf", "oneOf"}) {
      if (const JVal* any = s.get(k)) {
        if (any->type != JVal::Arr || any->arr.empty()) unsupported(std::string(k) + " must be a non-empty array");
        std::string alts;
        for (size_t i = 0; i < any->arr.size(); ++i)
          alts += (i ? " | " : "") + visit(any->arr[i], hint + "-" + std::to_string(i), depth + 1);
        return "( " + alts + " )";
      }
    }
    if (const JVal* all = s.get("allOf")) {
      if (all->type == JVal::Arr && all->arr.size() == 1) return visit(all->arr[0], hint, depth + 1);
      unsupported("allOf with more than one schema is not supported");
    }
    const JVal* type = s.get("type");
    if (type && type->type == JVal::Arr) {
      std::string alts;
      for (const JVal& t : type->arr) {
        JVal one = s;
        for (size_t i = 0; i < one.keys.size(); ++i)
          if (one.keys[i] == "type") one.vals[i] = t;
        alts += (alts.empty() ? "" : " | ") + visit(one, hint, depth + 1);
      }
      if (alts.empty()) unsupported("an empty type list matches nothing");
      return "( " + alts + " )";
    }
    std::string t;
    if (type) {
      if (type->type != JVal::Str) unsupported("type must be a string or an array of strings");
      t = type->str;
    } else if (s.get("properties")) {
      t = "object";
    } else if (s.get("items")) {
      t = "array";
    } else {
      return "value";
    }
    if (t == "object") return visit_object(s, hint, depth);
    if (t == "array") return visit_array(s, hint, depth);
    if (t == "string") {
      const JVal* pat = s.get("pattern");
      const JVal* fmt = s.get("format");
      if (pat && (s.get("minLength") || s.get("maxLength"))) unsupported("pattern together with minLength / maxLength is not supported");
      if (pat) {
        if (pat->type != JVal::Str) unsupported("pattern must be a string");
        if (fmt) unsupported("pattern together with format is not supported");
        const std::string pg = RegexToGbnf(pat->str).run();
        check_pattern(pat->str, pg);
        return new_rule(hint, "\"\\\"\" " + pg + " \"\\\"\" ws");
      }
      if (fmt) {
        if (fmt->type != JVal::Str) unsupported("format must be a string");
        if (const char* g = format_gbnf(fmt->str)) {
          if (s.get("minLength") || s.get("maxLength")) unsupported("format together with minLength / maxLength is not supported");
          uses_formats_ = true;
          return new_rule(hint + "-" + fmt->str, g);
        }
      }
      const int64_t lo = int_field(s, "minLength", 0), hi = int_field(s, "maxLength", -1);
      if (hi >= 0 && hi < lo) unsupported("maxLength < minLength");
      if (lo == 0 && hi < 0) return "string";
      if (hi > 2000 || lo > 2000) unsupported("minLength / maxLength above 2000 are not supported");
      return new_rule(hint, "\"\\\"\" char{" + std::to_string(lo) + "," + (hi >= 0 ? std::to_string(hi) : "") + "} \"\\\"\" ws");
    }
    if (t == "integer") return visit_integer(s, hint);
    if (t == "number") {
      for (const char* k : {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"})
        if (s.get(k)) unsupported(std::string(k) + " on a number is not supported (it is on an integer)");
      return "number";
    }
    if (t == "boolean") return "boolean";
    if (t == "null") return "null";
    unsupported("unknown type '" + t + "'");
  }

  // minimum / maximum / exclusiveMinimum / exclusiveMaximum (numbers; the
  // draft-4 boolean exclusive flags too) on an integer.
  std::string visit_integer(const JVal& s, const std::string& hint) {
    if (s.get("multipleOf")) unsupported("multipleOf is not supported");
    std::optional<int64_t> lo, hi;
    auto bound = [&](const char* k) -> std::optional<double> {
      const JVal* v = s.get(k);
      if (!v || v->type == JVal::Bool) return std::nullopt;
      if (v->type != JVal::Num || !std::isfinite(v->num)) unsupported(std::string(k) + " must be a number");
      if (std::fabs(v->num) > 9e17) unsupported(std::string(k) + " beyond +-9e17 is not supported");
      return v->num;
    };
    auto flag = [&](const char* k) {
      const JVal* v = s.get(k);
      return v && v->type == JVal::Bool && v->b;
    };
    if (auto m = bound("minimum")) lo = static_cast<int64_t>(std::ceil(*m + (flag("exclusiveMinimum") && *m == std::ceil(*m) ? 1 : 0)));
    if (auto m = bound("maximum")) hi = static_cast<int64_t>(std::floor(*m - (flag("exclusiveMaximum") && *m == std::floor(*m) ? 1 : 0)));
    if (auto m = bound("exclusiveMinimum")) {
      const int64_t v = static_cast<int64_t>(std::floor(*m)) + 1;
      lo = lo ? std::max(*lo, v) : v;
    }
    if (auto m = bound("exclusiveMaximum")) {
      const int64_t v = static_cast<int64_t>(std::ceil(*m)) - 1;
      hi = hi ? std::min(*hi, v) : v;
    }
    if (!lo && !hi) return "integer";
    if (lo && hi && *lo > *hi) unsupported("the integer bounds leave no value");
    return new_rule(hint, IntRange::gbnf(lo, hi) + " ws");
  }

  std::string visit_ref(const std::string& ref, int depth) {
    auto it = refs_.find(ref);
    if (it != refs_.end()) return it->second;
    std::string path;
    if (ref.rfind("#/$defs/", 0) == 0) path = ref.substr(8);
    else if (ref.rfind("#/definitions/", 0) == 0) path = ref.substr(14);
    else if (ref == "#") path = "";
    else unsupported("$ref '" + ref + "' is not supported (only #/$defs/NAME and #/definitions/NAME)");
    const JVal* target = &root_;
    if (!path.empty()) {
      const JVal* defs = root_.get(ref[2] == '$' ? "$defs" : "definitions");
      target = defs ? defs->get(path) : nullptr;
      if (!target) unsupported("$ref '" + ref + "' does not resolve");
    }
    // A chain of schemas that are only references must reach a schema.
    {
      std::set<const JVal*> chain{target};
      for (const JVal* t = target; t->type == JVal::Obj && t->keys.size() == 1 && t->get("$ref");) {
        const JVal* next = t->get("$ref");
        if (next->type != JVal::Str) break;
        const std::string& r = next->str;
        const JVal* n = nullptr;
        if (r == "#") n = &root_;
        else if (const JVal* defs = root_.get(r.rfind("#/$defs/", 0) == 0 ? "$defs" : "definitions"))
          n = defs->get(r.substr(r.find('/', 2) + 1));
        if (!n) break;
        if (!chain.insert(n).second)
          unsupported("$ref '" + ref + "' is a cycle of references that never reaches a schema");
        t = n;
      }
    }
    // Named first, so that a recursive reference finds it.
    const std::string name = new_rule("ref-" + path, "value");
    refs_[ref] = name;
    rules_[name] = visit(*target, "def-" + path, depth + 1);
    return name;
  }

  std::string visit_object(const JVal& s, const std::string& hint, int depth) {
    const JVal* props = s.get("properties");
    if (!props || props->type != JVal::Obj || props->keys.empty()) return "object";
    std::set<std::string> required;
    if (const JVal* req = s.get("required")) {
      if (req->type != JVal::Arr) unsupported("required must be an array");
      for (const JVal& r : req->arr)
        if (r.type == JVal::Str) required.insert(r.str);
    }
    // Required properties first (in declared order), then the optional
    // ones, each of which may be left out. Without a 'required' list every
    // property is written (what strict structured output does).
    std::vector<std::string> must, may;
    for (size_t i = 0; i < props->keys.size(); ++i) {
      const std::string& k = props->keys[i];
      JVal key;
      key.type = JVal::Str;
      key.str = k;
      const std::string kv = gbnf_literal(to_json(key)) + " ws \":\" ws " + visit(props->vals[i], hint + "-" + k, depth + 1);
      if (required.empty() || required.count(k)) must.push_back(kv);
      else may.push_back(kv);
    }
    std::string body = "\"{\" ws ";
    if (must.empty()) {
      // Only optional properties: any prefix-free choice is fine; write them
      // all or none.
      std::string all;
      for (size_t i = 0; i < may.size(); ++i) all += (i ? " \",\" ws " : "") + may[i];
      body += "( " + all + " )? ";
    } else {
      for (size_t i = 0; i < must.size(); ++i) body += (i ? "\",\" ws " : "") + must[i] + " ";
      for (const std::string& kv : may) body += "( \",\" ws " + kv + " )? ";
    }
    body += "\"}\" ws";
    return new_rule(hint, body);
  }

  std::string visit_array(const JVal& s, const std::string& hint, int depth) {
    const JVal* items = s.get("items");
    const std::string item = items ? visit(*items, hint + "-item", depth + 1) : "value";
    const int64_t lo = int_field(s, "minItems", 0), hi = int_field(s, "maxItems", -1);
    if (hi >= 0 && hi < lo) unsupported("maxItems < minItems");
    if (lo > 1000 || hi > 1000) unsupported("minItems / maxItems above 1000 are not supported");
    std::string body = "\"[\" ws ";
    if (hi == 0) {
      body += "\"]\" ws";
    } else if (lo == 0) {
      body += "( " + item + " ( \",\" ws " + item + " ){0," + (hi >= 0 ? std::to_string(hi - 1) : "") + "} )? \"]\" ws";
    } else {
      body += item + " ( \",\" ws " + item + " ){" + std::to_string(lo - 1) + "," + (hi >= 0 ? std::to_string(hi - 1) : "") +
              "} \"]\" ws";
    }
    return new_rule(hint, body);
  }

  static constexpr long kMaxVisits = 20000;  // real schemas visit a few hundred
  long visits_ = 0;
  const JVal& root_;
  std::map<std::string, std::string> rules_;
  std::map<std::string, int> next_suffix_;  // new_rule: where the search for a free suffix resumes
  std::map<std::string, std::string> refs_;
  bool uses_formats_ = false;
};

}  // namespace

std::string json_schema_to_gbnf(std::string_view schema) {
  if (schema.size() > (1u << 20)) raise(Status::InvalidArgument, "json schema: longer than 1 MiB");
  const JVal root = to_jval(Json::parse(schema, "json schema", Status::InvalidArgument));
  return SchemaConverter(root).run();
}

std::string json_object_gbnf() { return std::string("root ::= ws object\n") + kJsonBase; }

}  // namespace infer
