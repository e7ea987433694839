// The renderer of the Jinja-subset interpreter: statements and expressions
// in jinja_render.cpp, operators, methods, filters and tests in
// jinja_builtins.cpp. Internal to lib/tokenizer/jinja*.cpp.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tokenizer/jinja_internal.h"

namespace infer::jinja {

class Renderer final : public Meter {
 public:
  Renderer(const Limits& lim, const RenderOptions& opt) : lim_(lim), opt_(opt) {}
  // Namespaces are the one value that can be made to contain itself: the
  // render's own are emptied when it ends, so that no cycle of shared
  // pointers outlives it.
  ~Renderer() override {
    for (Value& ns : namespaces_) ns.obj().items.clear();
    if (opt_.stats) {
      opt_.stats->steps = steps_;
      opt_.stats->work_bytes = work_;
    }
  }

  void steps(uint64_t n) override {
    if (n > lim_.max_steps - std::min(steps_, lim_.max_steps)) {
      steps_ = lim_.max_steps + 1;  // the work is refused before it is done
      step_budget_overrun(line_);
    }
    steps_ += n;
  }

  std::string run(const Node& root, const Value& globals);

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

  Flow exec(const Node& n);

  // Byte offsets of a string's code points, charged (8 bytes a byte, and the scan).
  std::vector<size_t> offsets(const std::string& s);

  // The items a for loop or a filter walks over (a copy: charged as a new list).
  std::vector<Value> iterate(const Value& v, int line);
  void bind_targets(const Node& n, const Value& item);
  Flow exec_for(const Node& n);
  void define_macro(const Node& n);
  Value call_macro(const Node& n, CallArgs& a);

  // ---- expressions ----

  Value eval(const Node& n);
  static std::string describe(const Node& n);
  static std::string undefined_msg(const Node& n);
  Value get_attr(const Value& obj, const std::string& name, const Node* src, int line);
  Value get_item(const Value& obj, const Value& key, const Node* src, int line);
  CallArgs eval_args(const Node& n);

  // A call; `caller`: what caller() is in the macro it runs ({% call %}).
  Value eval_call(const Node& n, Value caller = Value());

  // ---- operators ----

  Value binary(const std::string& op, const Value& l, const Value& r, const Node& n);
  bool contains(const Value& hay, const Value& needle, int line);
  bool compare(const std::string& op, const Value& l, const Value& r, int line);

  // ---- methods, filters, tests ----

  // The first occurrence of needle in hay at or after from (linear time; the
  // bytes scanned are charged to the step budget).
  Finder finder(const std::string& needle);
  size_t search(const std::string& hay, const std::string& needle, size_t from);
  size_t search(const Finder& f, const std::string& hay, size_t needle_size, size_t from);
  [[noreturn]] void unsupported(const char* what, const std::string& name, int line);
  std::string str_arg(const CallArgs& a, size_t pos, const char* kw, const char* fn, int line);
  Value split(const std::string& s, const Value* sep, int64_t maxsplit, int line);
  static bool affix(const std::string& s, const Value& what, bool prefix);
  std::string replace(const std::string& s, const std::string& from, const std::string& to, int64_t count);
  static std::string py_title(const std::string& s, bool jinja_filter);
  static std::string capitalize(const std::string& s);
  Value call_method(const Value& obj, const std::string& name, CallArgs& a, int line);

  // jinja2's indent filter (width as a count or a string; first; blank),
  // lines split as Python's str.splitlines() splits them.
  Value indent(std::string s, const CallArgs& a, int line);
  Value items_of(const Value& v, int line);

  // jinja2's attribute getter for filters: dotted names, each part an item
  // lookup (integers index lists).
  Value attr_path(const Value& item, const std::string& path);
  CallArgs tail_args(const CallArgs& a, size_t from);
  Value apply_filter(const std::string& name, const Value& in, CallArgs& a, int line);
  bool apply_test(const std::string& name, const Value& v, CallArgs& a, int line);
};

}  // namespace infer::jinja
