// A Jinja-subset interpreter for chat templates.
//
// Models carry their prompt format as a Jinja template (GGUF
// tokenizer.chat_template, Hugging Face tokenizer_config.json chat_template).
// This renders those templates as Hugging Face's apply_chat_template does:
// Python's jinja2 with trim_blocks and lstrip_blocks, the loopcontrols
// extension, a tojson filter that keeps non-ASCII text (json.dumps with
// ensure_ascii=False, keys in insertion order), and the globals
// raise_exception(msg) and strftime_now(format).
//
// The subset is what the published templates of Llama 2/3.x, Mistral and
// Mixtral (with tools), Qwen 2/2.5/3, Phi-3, Gemma, Zephyr, ChatML and
// DeepSeek use:
//   statements  {% if/elif/else %}, {% for x in xs [if cond] %} with {% else %},
//               loop.index/index0/revindex/revindex0/first/last/length/
//               previtem/nextitem/cycle(), {% break %}, {% continue %},
//               {% set x = e %}, {% set ns.attr = e %}, {% set x %}...{% endset %},
//               {% macro m(a, b=default) %} (called as m(...)),
//               {% call m(...) %}...{% endcall %} (caller() without arguments),
//               {% generation %} (rendered as its body), comments,
//               whitespace control {%- -%} {{- -}} {%+
//   expressions literals (strings with Python escapes, ints, floats, true/false/
//               none in both cases, lists, dicts, tuples as lists), names,
//               a.b, a[b], a[i:j:k], calls with keyword arguments, filters,
//               tests (is / is not), not/and/or, in/not in, comparisons,
//               + - * / // % ** ~ and unary -, conditional expressions
//   filters     trim length count tojson upper lower default d first last join
//               map select reject selectattr rejectattr string int float safe
//               items replace list capitalize title abs reverse indent
//   tests       defined undefined none string number integer float boolean true
//               false mapping iterable sequence callable odd even divisibleby
//               equalto eq ne == != in lower upper
//   methods     str: strip lstrip rstrip split startswith endswith upper lower
//               replace title capitalize join find count;
//               dict: items keys values get
//   globals     namespace(...) range(...) raise_exception(msg) strftime_now(fmt)
//
// Anything else fails with TemplateError naming the construct and its line.
// Strings are UTF-8: length, indexing and slicing count code points; upper,
// lower, title and capitalize change ASCII letters only.
// Rendering is bounded (Limits below): an output budget, a step budget, a
// working-memory budget, macro recursion depth and nesting depth. Values
// that contain themselves (a namespace stored in itself, directly or through
// a list or dict) are refused when printed, serialized or compared, and
// every walk over a value graph has a depth bound.
#pragma once

#include <cstdint>
#include <ctime>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/error.h"

namespace infer::jinja {

class Value;
struct Object;
struct Callable;
using Array = std::vector<Value>;

// A template value: Python's None/bool/int/float/str/list/dict, jinja2's
// Undefined, and callables (macros, globals, bound methods).
class Value {
 public:
  enum class Kind : uint8_t { Undefined, None, Bool, Int, Float, String, Array, Object, Callable };

  Value() = default;  // undefined
  Value(bool b) : kind_(Kind::Bool), i_(b) {}
  Value(int v) : kind_(Kind::Int), i_(v) {}
  Value(int64_t v) : kind_(Kind::Int), i_(v) {}
  Value(double v) : kind_(Kind::Float), f_(v) {}
  Value(std::string s);
  Value(std::string_view s) : Value(std::string(s)) {}
  Value(const char* s) : Value(std::string(s)) {}

  static Value none();
  static Value array(Array items = {});
  static Value tuple(Array items);  // a list that prints as a Python tuple
  static Value object();  // an empty dict (keys keep insertion order)
  static Value callable(std::shared_ptr<Callable> fn);

  // Parses JSON text (objects keep their key order; integers that fit in
  // int64 are ints, other numbers floats). Error(InvalidArgument) with the
  // byte offset on malformed input.
  static Value from_json(std::string_view json);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::Undefined; }
  bool is_none() const { return kind_ == Kind::None; }
  bool is_string() const { return kind_ == Kind::String; }
  bool is_array() const { return kind_ == Kind::Array; }
  bool is_object() const { return kind_ == Kind::Object; }
  bool is_tuple() const { return tuple_; }

  bool as_bool() const { return i_ != 0; }
  int64_t as_int() const { return i_; }
  double as_float() const { return f_; }
  const std::string& str() const { return *s_; }
  Array& arr() const { return *a_; }
  Object& obj() const { return *o_; }
  Callable& fn() const { return *c_; }

  // Objects: sets (or replaces) key; arrays: appends.
  void set(const std::string& key, Value v);
  void push(Value v);
  // Objects: the value of key, or nullptr.
  const Value* find(std::string_view key) const;

  // Python's json.dumps(value, ensure_ascii=False, indent=indent) (indent < 0:
  // one line with ", " and ": "). Error for undefined or callables.
  std::string to_json(int indent = -1) const;

 private:
  Kind kind_ = Kind::Undefined;
  bool tuple_ = false;
  int64_t i_ = 0;
  double f_ = 0;
  std::shared_ptr<const std::string> s_;
  std::shared_ptr<Array> a_;
  std::shared_ptr<Object> o_;
  std::shared_ptr<Callable> c_;
};

// A dict with insertion order (also jinja2's namespace() and the loop
// variable, told apart by the flags).
struct Object {
  std::vector<std::pair<std::string, Value>> items;
  bool is_namespace = false;
  bool is_loop = false;
  Value* find(std::string_view key);
  void set(const std::string& key, Value v);
};

struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
};

struct Callable {
  std::string name;
  std::function<Value(CallArgs&)> call;
};

// Why a template failed.
enum class ErrorKind {
  Syntax,       // not valid template syntax (jinja2 would refuse it too, or it is syntax we lack)
  Unsupported,  // a tag, filter, test, method or function outside the subset
  Raised,       // the template called raise_exception(message)
  Runtime,      // a type error, undefined value, ... while rendering
  Limit,        // output size, steps, memory or recursion bound reached
};

// Syntax and Unsupported carry Status::Unsupported; Raised, Runtime and
// Limit Status::InvalidArgument. what() is "chat template line N: ..."
// except for Raised, whose what() is the template's own message.
class TemplateError : public Error {
 public:
  TemplateError(ErrorKind kind, int line, const std::string& message);
  ErrorKind kind() const { return kind_; }
  int line() const { return line_; }

 private:
  ErrorKind kind_;
  int line_;
};

// The budgets of one template: every render stops with a Limit error naming
// the budget it overran, long before it could take a second or a few hundred
// megabytes; real chat templates use a small fraction of each.
struct Limits {
  // Output budget: bytes of rendered text (also any one string made).
  size_t max_output = size_t{16} << 20;
  // Step budget: statements run, expressions evaluated, loop iterations,
  // containers walked (printing, tojson, comparing) and one step per 64 bytes
  // scanned (compared, searched, copied).
  uint64_t max_steps = 5'000'000;
  // Working-memory budget: bytes of every string, list and dict the render
  // makes, charged when made (and before, where the size is known), the
  // copies loops and filters take included.
  uint64_t max_work_bytes = uint64_t{256} << 20;
  int max_call_depth = 16;          // macro recursion
  int max_nesting = 64;             // depth of the syntax tree (blocks and expressions)
  size_t max_source = size_t{1} << 20;  // bytes of template text
  size_t max_nodes = 200'000;       // syntax nodes of a parsed template
};

// What a render spent of its budgets (filled when the render ends, also
// when it fails).
struct RenderStats {
  uint64_t steps = 0;       // of Limits::max_steps
  uint64_t work_bytes = 0;  // of Limits::max_work_bytes
};

struct RenderOptions {
  // The time strftime_now formats (local time, as Hugging Face's
  // datetime.now()); 0 = now.
  std::time_t now = 0;
  RenderStats* stats = nullptr;  // optional: what the render spent
};

struct Node;

class Template {
 public:
  // Parses source (TemplateError of kind Syntax or Unsupported).
  explicit Template(std::string_view source, const Limits& limits = {});
  ~Template();
  Template(const Template&) = delete;
  Template& operator=(const Template&) = delete;

  // Renders with the variables of `globals` (an object). raise_exception,
  // strftime_now, namespace and range are provided unless globals has them.
  std::string render(const Value& globals, const RenderOptions& options = {}) const;

 private:
  std::unique_ptr<Node> root_;
  Limits limits_;
};

}  // namespace infer::jinja
