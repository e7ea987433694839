// Internals of the Jinja-subset interpreter (lib/tokenizer/jinja*.cpp), shared
// by its lexer, parser, renderer and builtins; not part of the library's API.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.h"
#include "tokenizer/jinja.h"

namespace infer::jinja {

[[noreturn]] void fail(ErrorKind kind, int line, const std::string& msg);

// ---- text (jinja_value.cpp) ---------------------------------------------------------------

// Decodes the code point at s[pos] (core/utf8.h's utf8_decode_lossy): a byte
// that does not start a well-formed code point is one U+FFFD of length 1.
uint32_t decode(std::string_view s, size_t pos, size_t* len);
bool py_space(uint32_t cp);  // Python's str.isspace()
std::vector<size_t> cp_offsets(std::string_view s);  // byte offsets of each code point, plus the end
size_t cp_count(std::string_view s);
// Strips code points in `chars` (nullptr: whitespace) from the left and/or right.
std::string py_strip(std::string_view s, bool left, bool right, const std::string* chars);
std::string ascii_upper(std::string s);
std::string ascii_lower(std::string s);
std::string py_float(double d);  // a float as Python prints it

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

// ---- JSON and Python's printing of values (jinja_value.cpp) --------------------------------

// Appends json.dumps(v, ensure_ascii=False, indent=indent) to out through
// core/json.h's JsonWriter (Limit
// error once out passes `limit`; cycles and depth refused by the walk).
void json_dump(std::string& out, const Value& v, int indent, size_t limit, Walk& w);

// The default bound of text made outside a render's budgets (error messages, to_json).
constexpr size_t kDefaultTextLimit = size_t{16} << 20;

const char* type_name(const Value& v);
bool is_number(const Value& v);
bool is_intlike(const Value& v);
double num(const Value& v);
bool truthy(const Value& v);
// Python's str() and repr(); lists, dicts and namespaces bounded: `limit`
// bytes, cycles and depth refused.
std::string to_str(const Value& v, size_t limit = kDefaultTextLimit, Meter* meter = nullptr, int line = 0);
std::string py_repr(const Value& v, size_t limit = kDefaultTextLimit, Meter* meter = nullptr, int line = 0);
std::string repr_string(const std::string& s);
bool py_eq(const Value& a, const Value& b, Walk& w);  // Python's ==
bool py_lt(const Value& a, const Value& b, Walk& w);  // Python's <; Runtime error for types that do not order
int64_t norm_index(int64_t i, size_t n);              // a[i]'s index, -1 when out of range
// The indices a[start:stop:step] selects (Python's slice.indices).
std::vector<size_t> slice_indices(size_t n, const Value& start, const Value& stop, const Value& step, int line);
const Value* arg_of(const CallArgs& a, size_t pos, const char* kw);
Value arg_or(const CallArgs& a, size_t pos, const char* kw, Value def);

// ---- tokens (jinja_lexer.cpp) ----------------------------------------------------------------


enum class Tok { Text, VarBegin, VarEnd, BlockBegin, BlockEnd, Name, String, Int, Float, Op, End };

struct Token {
  Tok t;
  std::string s;  // text, name, string value, operator
  int64_t i = 0;
  double f = 0;
  int line = 1;
};


// Splits the source into text and tag tokens, applying jinja2's whitespace
// rules with trim_blocks and lstrip_blocks (see jinja.h).
std::vector<Token> lex(std::string_view src);
size_t skip_py_space(std::string_view s, size_t pos);  // skips Python whitespace from pos


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


// Parses tokens into the syntax tree (jinja_parser.cpp).
std::unique_ptr<Node> parse(std::vector<Token> toks, const Limits& lim);

}  // namespace infer::jinja
