// The Jinja-subset interpreter's builtins: operators, string and dict
// methods, filters and tests, each charged to the render's budgets. See jinja.h.
#include "tokenizer/jinja_render.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>
#include <limits>

namespace infer::jinja {

Value Renderer::binary(const std::string& op, const Value& l, const Value& r, const Node& n) {
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

bool Renderer::contains(const Value& hay, const Value& needle, int line) {
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

bool Renderer::compare(const std::string& op, const Value& l, const Value& r, int line) {
  if (op == "==") return eq(l, r);
  if (op == "!=") return !eq(l, r);
  if (op == "in") return contains(r, l, line);
  if (op == "not in") return !contains(r, l, line);
  if (op == "<") return lt(l, r, line);
  if (op == ">") return lt(r, l, line);
  if (op == "<=") return !lt(r, l, line);
  return !lt(l, r, line);  // >=
}

  // The first occurrence of needle in hay at or after from (linear time; the
  // bytes scanned are charged to the step budget).
Finder Renderer::finder(const std::string& needle) {
  scan(needle.size());  // the table: transient, its making charged as steps
  return Finder(needle);
}

size_t Renderer::search(const std::string& hay, const std::string& needle, size_t from) {
  const Finder f = finder(needle);
  return search(f, hay, needle.size(), from);
}

size_t Renderer::search(const Finder& f, const std::string& hay, size_t needle_size, size_t from) {
  const size_t at = f.find(hay, from);
  const size_t end = at == std::string::npos ? hay.size() : at + needle_size;
  scan(end > from ? end - from : 0);
  return at;
}

void Renderer::unsupported(const char* what, const std::string& name, int line) {
  fail(ErrorKind::Unsupported, line, strformat("the %s '%s' is not supported", what, name.c_str()));
}

std::string Renderer::str_arg(const CallArgs& a, size_t pos, const char* kw, const char* fn, int line) {
  const Value* v = arg_of(a, pos, kw);
  if (!v || !v->is_string()) fail(ErrorKind::Runtime, line, strformat("%s() takes a string argument", fn));
  return v->str();
}

Value Renderer::split(const std::string& s, const Value* sep, int64_t maxsplit, int line) {
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

bool Renderer::affix(const std::string& s, const Value& what, bool prefix) {
  auto one = [&](const std::string& a) {
    return a.size() <= s.size() && (prefix ? s.compare(0, a.size(), a) == 0 : s.compare(s.size() - a.size(), a.size(), a) == 0);
  };
  if (what.is_string()) return one(what.str());
  if (what.is_array())
    for (const Value& v : what.arr())
      if (v.is_string() && one(v.str())) return true;
  return false;
}

std::string Renderer::replace(const std::string& s, const std::string& from, const std::string& to, int64_t count) {
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

std::string Renderer::py_title(const std::string& s, bool jinja_filter) {
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

std::string Renderer::capitalize(const std::string& s) {
  std::string out = ascii_lower(s);
  if (!out.empty() && out[0] >= 'a' && out[0] <= 'z') out[0] = static_cast<char>(out[0] - 32);
  return out;
}

Value Renderer::call_method(const Value& obj, const std::string& name, CallArgs& a, int line) {
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
Value Renderer::indent(std::string s, const CallArgs& a, int line) {
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

Value Renderer::items_of(const Value& v, int line) {
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
Value Renderer::attr_path(const Value& item, const std::string& path) {
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

CallArgs Renderer::tail_args(const CallArgs& a, size_t from) {
  CallArgs t;
  for (size_t i = from; i < a.positional.size(); ++i) t.positional.push_back(a.positional[i]);
  return t;
}

Value Renderer::apply_filter(const std::string& name, const Value& in, CallArgs& a, int line) {
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
    json_dump(out, in, indent, lim_.max_output, w);
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

bool Renderer::apply_test(const std::string& name, const Value& v, CallArgs& a, int line) {
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

}  // namespace infer::jinja
