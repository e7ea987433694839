// The Jinja-subset interpreter's renderer: statements, expressions, scopes,
// macros and the render's budgets. See jinja.h.
#include "tokenizer/jinja_render.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>
#include <limits>
#include <ctime>

namespace infer::jinja {

std::string Renderer::run(const Node& root, const Value& globals) {
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

Renderer::Flow Renderer::exec(const Node& n) {
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
std::vector<size_t> Renderer::offsets(const std::string& s) {
  charge(uint64_t{sizeof(size_t)} * (s.size() + 1), "indexing a string");
  scan(s.size());
  return cp_offsets(s);
}

  // The items a for loop or a filter walks over (a copy: charged as a new list).
std::vector<Value> Renderer::iterate(const Value& v, int line) {
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

void Renderer::bind_targets(const Node& n, const Value& item) {
  if (n.names.size() == 1) {
    assign(n.names[0], item);
    return;
  }
  if (!item.is_array() || item.arr().size() != n.names.size())
    fail(ErrorKind::Runtime, n.line,
         strformat("cannot unpack %s into %zu loop variables", type_name(item), n.names.size()));
  for (size_t i = 0; i < n.names.size(); ++i) assign(n.names[i], item.arr()[i]);
}

Renderer::Flow Renderer::exec_for(const Node& n) {
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

void Renderer::define_macro(const Node& n) {
  auto c = std::make_shared<Callable>();
  c->name = n.name;
  const Node* node = &n;
  c->call = [this, node](CallArgs& a) { return call_macro(*node, a); };
  assign(n.name, Value::callable(std::move(c)));
}

Value Renderer::call_macro(const Node& n, CallArgs& a) {
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

Value Renderer::eval(const Node& n) {
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

std::string Renderer::describe(const Node& n) {
  if (n.t == NT::Name) return n.name;
  if (n.t == NT::Attr) return describe(*n.kids[0]) + "." + n.name;
  if (n.t == NT::Item && n.kids[1] && n.kids[1]->t == NT::Literal)
    return describe(*n.kids[0]) + "[" + py_repr(n.kids[1]->value) + "]";
  return "value";
}

std::string Renderer::undefined_msg(const Node& n) { return "'" + describe(n) + "' is undefined"; }

Value Renderer::get_attr(const Value& obj, const std::string& name, const Node* src, int line) {
  if (obj.is_undefined()) fail(ErrorKind::Runtime, line, undefined_msg(*src) + " (reading ." + name + ")");
  if (obj.is_object()) {
    if (const Value* v = obj.find(name)) return *v;
  }
  return Value();
}

Value Renderer::get_item(const Value& obj, const Value& key, const Node* src, int line) {
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

CallArgs Renderer::eval_args(const Node& n) {
  CallArgs a;
  const size_t first = n.t == NT::Test || n.t == NT::Filter || n.t == NT::Call ? 1 : 0;
  for (size_t i = first; i < n.kids.size(); ++i) a.positional.push_back(eval(*n.kids[i]));
  for (size_t i = 0; i < n.kwargs.size(); ++i) a.keyword.emplace_back(n.names[i], eval(*n.kwargs[i]));
  return a;
}

  // A call; `caller`: what caller() is in the macro it runs ({% call %}).
Value Renderer::eval_call(const Node& n, Value caller) {
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

Template::Template(std::string_view source, const Limits& limits) : limits_(limits) {
  if (source.size() > limits_.max_source)
    fail(ErrorKind::Limit, 0, strformat("the template is %zu bytes, more than the %zu the interpreter reads", source.size(),
                                        limits_.max_source));
  root_ = parse(lex(source), limits_);
}

Template::~Template() = default;

std::string Template::render(const Value& globals, const RenderOptions& options) const {
  Renderer r(limits_, options);
  return r.run(*root_, globals);
}

}  // namespace infer::jinja
