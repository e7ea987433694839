// The Jinja-subset interpreter's parser: tokens to the syntax tree, with the
// subset checked at parse time and the nesting and node budgets. See jinja.h.
#include "tokenizer/jinja_internal.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>
#include <initializer_list>
#include <limits>

namespace infer::jinja {

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
      n->kwargs.push_back(expression_after(is_op("=")));  // a default value
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

  // When `present` (the current token introduces one): skips that token and
  // parses the expression after it; otherwise nullptr.
  NodeP expression_after(bool present) {
    if (!present) return nullptr;
    ++p_;
    return parse_expression();
  }

  NodeP parse_expression() {
    Guard g(*this);
    NodeP e = parse_or();
    while (is_name("if")) {
      const int line = cur().line;
      ++p_;
      NodeP n = make(NT::Cond, line);
      n->kids.push_back(std::move(e));
      n->kids.push_back(parse_or());
      n->kids.push_back(expression_after(is_name("else")));
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

  // One left-associative binary level: operands from next(), operators
  // among `ops` (keywords when `words`, operator tokens otherwise).
  template <class Next>
  NodeP left_assoc(NT t, std::initializer_list<const char*> ops, bool words, Next next) {
    NodeP l = next();
    for (;;) {
      const char* op = nullptr;
      for (const char* o : ops)
        if (words ? is_name(o) : is_op(o)) op = o;
      if (op == nullptr) return l;
      const int line = cur().line;
      ++p_;
      l = binary(t, op, std::move(l), next(), line);
    }
  }

  NodeP parse_or() { return left_assoc(NT::Or, {"or"}, true, [this] { return parse_and(); }); }
  NodeP parse_and() { return left_assoc(NT::And, {"and"}, true, [this] { return parse_not(); }); }

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

  NodeP parse_math1() { return left_assoc(NT::Binary, {"+", "-"}, false, [this] { return parse_concat(); }); }

  NodeP parse_concat() { return left_assoc(NT::Binary, {"~"}, false, [this] { return parse_math2(); }); }

  NodeP parse_math2() { return left_assoc(NT::Binary, {"*", "/", "//", "%"}, false, [this] { return parse_pow(); }); }

  NodeP parse_pow() { return left_assoc(NT::Binary, {"**"}, false, [this] { return parse_unary(true); }); }

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
        n = parse_call(std::move(n), line);
      } else {
        return n;
      }
    }
  }

  // callee(...), at the '('.
  NodeP parse_call(NodeP callee, int line) {
    check_method(*callee, line);
    NodeP c = make(NT::Call, line);
    c->kids.push_back(std::move(callee));
    parse_call_args(*c);
    return done(std::move(c));
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
        n = parse_call(std::move(n), line);
      } else {
        return n;
      }
    }
  }
};

}  // namespace

std::unique_ptr<Node> parse(std::vector<Token> toks, const Limits& lim) {
  Parser p(std::move(toks), lim);
  return p.parse_template();
}

}  // namespace infer::jinja
