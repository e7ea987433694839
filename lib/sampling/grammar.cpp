#include "sampling/grammar.h"

#include <algorithm>
#include <map>

#include "core/error.h"

namespace infer {

namespace {
constexpr long kExpandBudget = 200000;
constexpr size_t kMaxElements = 1u << 20;
}  // namespace

bool GrammarElement::matches(uint32_t cp) const {
  bool in = false;
  for (const auto& [lo, hi] : ranges)
    if (cp >= lo && cp <= hi) {
      in = true;
      break;
    }
  return in != negated;
}

// ---- GBNF parsing ----------------------------------------------------------------------

class GbnfParser {
 public:
  explicit GbnfParser(std::string_view t) : t_(t) {}

  std::shared_ptr<const Grammar> run() {
    auto g = std::make_shared<Grammar>();
    g_ = g.get();
    skip();
    if (pos_ >= t_.size()) fail("the grammar is empty");
    while (pos_ < t_.size()) {
      const std::string name = ident();
      if (name.empty()) fail("expected a rule name");
      skip();
      if (t_.substr(pos_, 3) != "::=") fail("expected '::=' after '" + name + "'");
      pos_ += 3;
      const uint32_t id = rule_id(name);
      if (defined_.size() <= id) defined_.resize(id + 1, false);
      if (defined_[id]) fail("rule '" + name + "' is defined twice");
      defined_[id] = true;
      g_->rules_[id] = alternatives(name, /*in_group=*/false);
      skip();
    }
    for (size_t i = 0; i < g_->names_.size(); ++i)
      if (i >= defined_.size() || !defined_[i]) {
        if (!synthetic_.count(static_cast<uint32_t>(i))) fail("rule '" + g_->names_[i] + "' is used but not defined");
      }
    auto it = ids_.find("root");
    if (it == ids_.end()) fail("the grammar has no 'root' rule");
    g->root_ = it->second;
    return g;
  }

 private:
  using Alt = Grammar::Alternative;
  using Unit = std::vector<GrammarElement>;  // an item: one or more elements (a literal)

  [[noreturn]] void fail(const std::string& what) const {
    size_t line = 1;
    for (size_t i = 0; i < pos_ && i < t_.size(); ++i) line += t_[i] == '\n';
    raise(Status::InvalidArgument, "grammar: line %zu: %s", line, what.c_str());
  }

  void skip() {
    while (pos_ < t_.size()) {
      const char c = t_[pos_];
      if (c == '#') {
        while (pos_ < t_.size() && t_[pos_] != '\n') ++pos_;
      } else if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
        ++pos_;
      } else {
        break;
      }
    }
  }

  static bool ident_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_' || c == '.';
  }

  std::string ident() {
    const size_t start = pos_;
    while (pos_ < t_.size() && ident_char(t_[pos_]) && !(t_[pos_] == '.' && pos_ == start)) ++pos_;
    return std::string(t_.substr(start, pos_ - start));
  }

  // Whether the text at pos_ is `name ::=` (the start of the next rule).
  bool at_rule_start() const {
    size_t p = pos_;
    while (p < t_.size() && ident_char(t_[p])) ++p;
    if (p == pos_) return false;
    while (p < t_.size() && (t_[p] == ' ' || t_[p] == '\t' || t_[p] == '\n' || t_[p] == '\r')) ++p;
    return t_.substr(p, 3) == "::=";
  }

  uint32_t rule_id(const std::string& name) {
    auto it = ids_.find(name);
    if (it != ids_.end()) return it->second;
    if (g_->names_.size() > 100000) fail("too many rules");
    const uint32_t id = static_cast<uint32_t>(g_->names_.size());
    ids_[name] = id;
    g_->names_.push_back(name);
    g_->rules_.emplace_back();
    return id;
  }

  uint32_t new_rule(const std::string& base, std::vector<Alt> alts) {
    const uint32_t id = rule_id(base + "~" + std::to_string(g_->names_.size()));
    g_->rules_[id] = std::move(alts);
    synthetic_.insert({id, true});
    return id;
  }

  // One code point of a literal or class, escapes decoded.
  uint32_t code_point() {
    if (pos_ >= t_.size()) fail("unexpected end of the grammar");
    unsigned char c = static_cast<unsigned char>(t_[pos_]);
    if (c == '\\') {
      ++pos_;
      if (pos_ >= t_.size()) fail("unfinished escape");
      const char e = t_[pos_++];
      switch (e) {
        case 'n': return '\n';
        case 't': return '\t';
        case 'r': return '\r';
        case '\\': return '\\';
        case '"': return '"';
        case '\'': return '\'';
        case '[': return '[';
        case ']': return ']';
        case '-': return '-';
        case '^': return '^';
        case '/': return '/';
        case 'x': return hex(2);
        case 'u': return hex(4);
        case 'U': return hex(8);
        default: fail(std::string("unknown escape \\") + e);
      }
    }
    // UTF-8
    int len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (len == 0 || pos_ + static_cast<size_t>(len) > t_.size()) fail("invalid UTF-8 in the grammar");
    uint32_t cp = len == 1 ? c : len == 2 ? (c & 0x1F) : len == 3 ? (c & 0x0F) : (c & 0x07);
    for (int i = 1; i < len; ++i) {
      const unsigned char d = static_cast<unsigned char>(t_[pos_ + static_cast<size_t>(i)]);
      if ((d & 0xC0) != 0x80) fail("invalid UTF-8 in the grammar");
      cp = cp << 6 | (d & 0x3F);
    }
    pos_ += static_cast<size_t>(len);
    return cp;
  }

  uint32_t hex(int n) {
    uint32_t v = 0;
    for (int i = 0; i < n; ++i) {
      if (pos_ >= t_.size()) fail("unfinished hex escape");
      const char c = t_[pos_++];
      v <<= 4;
      if (c >= '0' && c <= '9') v |= static_cast<uint32_t>(c - '0');
      else if (c >= 'a' && c <= 'f') v |= static_cast<uint32_t>(c - 'a' + 10);
      else if (c >= 'A' && c <= 'F') v |= static_cast<uint32_t>(c - 'A' + 10);
      else fail("bad hex escape");
    }
    if (v > 0x10FFFF) fail("code point out of range");
    return v;
  }

  // alternatives := sequence ('|' sequence)*; ends at ')' (in a group), at
  // the next `name ::=` or at the end.
  std::vector<Alt> alternatives(const std::string& name, bool in_group) {
    if (++depth_ > 200) fail("groups nested too deeply");
    std::vector<Alt> alts;
    for (;;) {
      alts.push_back(sequence(name, in_group));
      skip();
      if (pos_ < t_.size() && t_[pos_] == '|') {
        ++pos_;
        continue;
      }
      break;
    }
    --depth_;
    return alts;
  }

  Alt sequence(const std::string& name, bool in_group) {
    std::vector<Unit> units;
    for (;;) {
      skip();
      if (pos_ >= t_.size()) break;
      const char c = t_[pos_];
      if (c == '|' || (c == ')' && in_group)) break;
      if (c == ')') fail("unbalanced ')'");
      if (!in_group && at_rule_start()) break;
      if (c == '"') {
        ++pos_;
        Unit u;
        while (pos_ < t_.size() && t_[pos_] != '"') {
          GrammarElement e;
          e.kind = GrammarElement::Char;
          const uint32_t cp = code_point();
          e.ranges.push_back({cp, cp});
          u.push_back(std::move(e));
        }
        if (pos_ >= t_.size()) fail("unterminated string literal");
        ++pos_;
        units.push_back(std::move(u));
      } else if (c == '[') {
        ++pos_;
        GrammarElement e;
        e.kind = GrammarElement::Char;
        if (pos_ < t_.size() && t_[pos_] == '^') {
          e.negated = true;
          ++pos_;
        }
        while (pos_ < t_.size() && t_[pos_] != ']') {
          const uint32_t lo = code_point();
          uint32_t hi = lo;
          if (pos_ + 1 < t_.size() && t_[pos_] == '-' && t_[pos_ + 1] != ']') {
            ++pos_;
            hi = code_point();
            if (hi < lo) fail("character range with its end before its start");
          }
          e.ranges.push_back({lo, hi});
        }
        if (pos_ >= t_.size()) fail("unterminated character class");
        ++pos_;
        units.push_back({std::move(e)});
      } else if (c == '.') {
        ++pos_;
        GrammarElement e;
        e.kind = GrammarElement::Char;
        e.negated = true;  // not in the empty set: any character
        units.push_back({std::move(e)});
      } else if (c == '(') {
        ++pos_;
        auto alts = alternatives(name, true);
        skip();
        if (pos_ >= t_.size() || t_[pos_] != ')') fail("missing ')'");
        ++pos_;
        units.push_back({ref(new_rule(name, std::move(alts)))});
      } else if (ident_char(c)) {
        const std::string r = ident();
        units.push_back({ref(rule_id(r))});
      } else if (c == '*' || c == '+' || c == '?' || c == '{') {
        if (units.empty()) fail(std::string("'") + c + "' without an item before it");
        Unit last = std::move(units.back());
        units.pop_back();
        int min = 0, max = -1;
        if (c == '*') {
          ++pos_;
        } else if (c == '+') {
          ++pos_;
          min = 1;
        } else if (c == '?') {
          ++pos_;
          max = 1;
        } else {
          ++pos_;
          min = number();
          skip();
          if (pos_ < t_.size() && t_[pos_] == ',') {
            ++pos_;
            skip();
            max = (pos_ < t_.size() && t_[pos_] == '}') ? -1 : number();
          } else {
            max = min;
          }
          skip();
          if (pos_ >= t_.size() || t_[pos_] != '}') fail("missing '}'");
          ++pos_;
          if (max >= 0 && max < min) fail("repetition {m,n} with n < m");
        }
        for (Unit& u : repeat(name, last, min, max)) units.push_back(std::move(u));
      } else {
        fail(std::string("unexpected character '") + c + "'");
      }
    }
    Alt alt;
    for (Unit& u : units)
      for (GrammarElement& e : u) alt.push_back(std::move(e));
    alt.push_back(GrammarElement{});  // End
    elements_ += alt.size();
    if (elements_ > kMaxElements) fail("the grammar is too large (more than 1M elements once repetitions are expanded)");
    return alt;
  }

  int number() {
    skip();
    const size_t start = pos_;
    long v = 0;
    while (pos_ < t_.size() && t_[pos_] >= '0' && t_[pos_] <= '9') {
      v = v * 10 + (t_[pos_++] - '0');
      if (v > 10000) fail("repetition count too large");
    }
    if (pos_ == start) fail("expected a number");
    return static_cast<int>(v);
  }

  static GrammarElement ref(uint32_t id) {
    GrammarElement e;
    e.kind = GrammarElement::RuleRef;
    e.rule = id;
    return e;
  }

  static Alt alt_of(const Unit& u, const GrammarElement* tail = nullptr) {
    Alt a(u.begin(), u.end());
    if (tail) a.push_back(*tail);
    a.push_back(GrammarElement{});
    return a;
  }

  // x{min,max} (max -1: unbounded) as units.
  std::vector<Unit> repeat(const std::string& name, const Unit& x, int min, int max) {
    std::vector<Unit> out;
    elements_ += x.size() * static_cast<size_t>(std::max(min, max) + 1);
    if (elements_ > kMaxElements) fail("the grammar is too large (more than 1M elements once repetitions are expanded)");
    for (int i = 0; i < min; ++i) out.push_back(x);
    if (max < 0) {
      // star ::= x star | ""
      const uint32_t star = rule_id(name + "~star" + std::to_string(g_->names_.size()));
      synthetic_.insert({star, true});
      const GrammarElement self = ref(star);
      g_->rules_[star] = {alt_of(x, &self), Alt{GrammarElement{}}};
      out.push_back({ref(star)});
    } else if (max > min) {
      // opt_k ::= x opt_{k-1} | ""  (nested: up to max - min more)
      uint32_t prev = 0;
      bool have_prev = false;
      for (int k = 0; k < max - min; ++k) {
        const uint32_t id = rule_id(name + "~opt" + std::to_string(g_->names_.size()));
        synthetic_.insert({id, true});
        const GrammarElement p = ref(prev);
        g_->rules_[id] = {alt_of(x, have_prev ? &p : nullptr), Alt{GrammarElement{}}};
        prev = id;
        have_prev = true;
      }
      out.push_back({ref(prev)});
    }
    return out;
  }

  std::string_view t_;
  size_t pos_ = 0;
  int depth_ = 0;
  size_t elements_ = 0;
  Grammar* g_ = nullptr;
  std::map<std::string, uint32_t> ids_;
  std::vector<bool> defined_;
  std::map<uint32_t, bool> synthetic_;
};

std::shared_ptr<const Grammar> Grammar::parse(std::string_view text) {
  if (text.size() > (1u << 20)) raise(Status::InvalidArgument, "grammar: longer than 1 MiB");
  auto g = GbnfParser(text).run();
  GrammarMatcher probe(g);  // expands root: left recursion fails here
  (void)probe;
  return g;
}

// ---- matching -------------------------------------------------------------------------------

GrammarMatcher::GrammarMatcher(std::shared_ptr<const Grammar> g) : g_(std::move(g)) {
  long budget = kExpandBudget;
  for (const Grammar::Alternative& alt : g_->rules()[g_->root()]) {
    Stack s;
    if (alt[0].kind != GrammarElement::End) s.push_back(&alt[0]);
    expand(s, state_.stacks, 0, budget);
  }
  dedupe(state_.stacks);
}

void GrammarMatcher::expand(const Stack& s, std::vector<Stack>& out, int depth, long& budget) const {
  if (depth > 256) raise(Status::InvalidArgument, "grammar: left recursion (or rules nested more than 256 deep without text)");
  if (--budget < 0) raise(Status::InvalidArgument, "grammar: too ambiguous (more than 200000 expansions for one character)");
  if (s.empty() || s.back()->kind == GrammarElement::Char) {
    out.push_back(s);
    return;
  }
  const GrammarElement* top = s.back();  // a RuleRef
  Stack rest(s.begin(), s.end() - 1);
  const GrammarElement* next = top + 1;
  if (next->kind != GrammarElement::End) rest.push_back(next);
  for (const Grammar::Alternative& alt : g_->rules()[top->rule]) {
    Stack n = rest;
    if (alt[0].kind != GrammarElement::End) n.push_back(&alt[0]);
    expand(n, out, depth + 1, budget);
  }
  if (out.size() > 100000) raise(Status::InvalidArgument, "grammar: too ambiguous (more than 100000 parses at once)");
}

void GrammarMatcher::dedupe(std::vector<Stack>& stacks) {
  std::sort(stacks.begin(), stacks.end());
  stacks.erase(std::unique(stacks.begin(), stacks.end()), stacks.end());
}

bool GrammarMatcher::step(State& st, unsigned char b) const {
  uint32_t cp;
  if (st.pending == 0) {
    if (b < 0x80) {
      cp = b;
    } else {
      int more;
      if ((b & 0xE0) == 0xC0 && b >= 0xC2) {
        st.partial = b & 0x1F;
        more = 1;
      } else if ((b & 0xF0) == 0xE0) {
        st.partial = b & 0x0F;
        more = 2;
      } else if ((b & 0xF8) == 0xF0 && b <= 0xF4) {
        st.partial = b & 0x07;
        more = 3;
      } else {
        return false;  // not a UTF-8 lead byte
      }
      // Some stack must be able to take a non-ASCII character.
      bool any = false;
      for (const Stack& s : st.stacks) {
        if (s.empty()) continue;
        const GrammarElement& e = *s.back();
        if (e.negated) any = true;
        for (const auto& r : e.ranges) any |= r.second >= 0x80;
        if (any) break;
      }
      if (!any) return false;
      st.pending = more;
      return true;
    }
  } else {
    if ((b & 0xC0) != 0x80) return false;
    st.partial = st.partial << 6 | (b & 0x3F);
    if (--st.pending > 0) return true;
    cp = st.partial;
  }
  std::vector<Stack> next;
  long budget = kExpandBudget;
  for (const Stack& s : st.stacks) {
    if (s.empty() || !s.back()->matches(cp)) continue;
    Stack n(s.begin(), s.end() - 1);
    const GrammarElement* after = s.back() + 1;
    if (after->kind != GrammarElement::End) n.push_back(after);
    expand(n, next, 0, budget);
  }
  if (next.empty()) return false;
  dedupe(next);
  st.stacks = std::move(next);
  return true;
}

bool GrammarMatcher::accepts(std::string_view bytes) const {
  State s = state_;
  for (char c : bytes)
    if (!step(s, static_cast<unsigned char>(c))) return false;
  return true;
}

bool GrammarMatcher::advance(std::string_view bytes) {
  State s = state_;
  for (char c : bytes)
    if (!step(s, static_cast<unsigned char>(c))) return false;
  state_ = std::move(s);
  return true;
}

bool GrammarMatcher::can_end() const {
  if (state_.pending) return false;
  for (const Stack& s : state_.stacks)
    if (s.empty()) return true;
  return false;
}

bool GrammarMatcher::must_end() const {
  for (const Stack& s : state_.stacks)
    if (!s.empty()) return false;
  return state_.pending == 0;
}

}  // namespace infer
