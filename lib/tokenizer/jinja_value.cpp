// The Jinja-subset interpreter's values: UTF-8 and Python's text rules,
// numbers and JSON as Python prints them, Value, and the bounded walks that
// print, serialize and compare value graphs. See jinja.h.
#include "tokenizer/jinja_internal.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>
#include <limits>

#include "core/json.h"
#include "core/utf8.h"

namespace infer::jinja {

void fail(ErrorKind kind, int line, const std::string& msg) { throw TemplateError(kind, line, msg); }

// ---- UTF-8 and Python's notion of whitespace ---------------------------------------------

// core/utf8.h's decoder, one U+FFFD per invalid byte.
uint32_t decode(std::string_view s, size_t pos, size_t* len) { return utf8_decode_lossy(s, pos, len); }

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

// ---- JSON --------------------------------------------------------------------------------

namespace {

// json_dump's walk: the values through core/json.h's writer, the output
// budget and the walk's cycle and depth checks around each container.
void json_walk(JsonWriter& jw, const Value& v, size_t limit, Walk& w) {
  if (jw.out().size() > limit)
    fail(ErrorKind::Limit, w.line(), strformat("tojson output exceeds the output budget (%zu bytes)", limit));
  switch (v.kind()) {
    case Value::Kind::None: jw.null(); return;
    case Value::Kind::Bool: jw.boolean(v.as_bool()); return;
    case Value::Kind::Int: jw.integer(v.as_int()); return;
    case Value::Kind::Float: {
      const double d = v.as_float();
      jw.number(std::isnan(d) ? "NaN" : std::isinf(d) ? (d > 0 ? "Infinity" : "-Infinity") : py_float(d));
      return;
    }
    case Value::Kind::String: jw.string(v.str()); return;
    case Value::Kind::Array: {
      const Array& a = v.arr();
      if (!a.empty()) w.enter(&a);  // an empty container neither nests nor cycles
      jw.begin_array();
      for (const Value& item : a) json_walk(jw, item, limit, w);
      jw.end_array();
      if (!a.empty()) w.leave();
      return;
    }
    case Value::Kind::Object: {
      const auto& items = v.obj().items;
      if (!items.empty()) w.enter(&v.obj());
      jw.begin_object();
      for (const auto& [key, item] : items) {
        jw.key(key);
        json_walk(jw, item, limit, w);
      }
      jw.end_object();
      if (!items.empty()) w.leave();
      return;
    }
    case Value::Kind::Undefined: fail(ErrorKind::Runtime, w.line(), "tojson: an undefined value is not JSON serializable");
    case Value::Kind::Callable: fail(ErrorKind::Runtime, w.line(), "tojson: a function is not JSON serializable");
  }
}

}  // namespace

void json_dump(std::string& out, const Value& v, int indent, size_t limit, Walk& w) {
  JsonWriter jw(out, indent);
  json_walk(jw, v, limit, w);
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
  json_dump(out, *this, indent, std::numeric_limits<size_t>::max(), w);
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

// ---- rendering ----------------------------------------------------------------------------

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


// Python's str(); lists, dicts and namespaces through repr_into (bounded:
// `limit` bytes, cycles and depth refused).
std::string to_str(const Value& v, size_t limit, Meter* meter, int line) {
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
std::string py_repr(const Value& v, size_t limit, Meter* meter, int line) {
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

}  // namespace infer::jinja
