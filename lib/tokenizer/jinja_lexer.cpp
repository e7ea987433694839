// The Jinja-subset interpreter's lexer: text and tags, whitespace control,
// string literals. See jinja.h.
#include "tokenizer/jinja_internal.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>
#include <limits>

#include "core/utf8.h"

namespace infer::jinja {

// ---- lexer --------------------------------------------------------------------------------

namespace {

bool is_name_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool is_name_char(char c) { return is_name_start(c) || (c >= '0' && c <= '9'); }

// Python's str.rstrip() of a UTF-8 string.
std::string py_rstrip(std::string_view s) { return py_strip(s, false, true, nullptr); }

}  // namespace

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

namespace {

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

}  // namespace

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

}  // namespace infer::jinja
