#include "sampling/grammar.h"

#include <algorithm>
#include <iterator>
#include <map>
#include <unordered_set>

#include "core/error.h"

namespace infer {

namespace {
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
      if (max - min > 1) g_->opt_chains_.push_back(prev);
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

// ---- compile-time analysis ----------------------------------------------------------------
//
// What the matcher would otherwise discover in the middle of a text, found
// once here: left recursion (also through rules that can match the empty
// text), rules that can never end, and how many states one expansion may
// visit (the fanout). All passes are iterative (worklists, Kahn's order), so
// a grammar of 100,000 rules nested in one long chain is analysed without
// deep recursion.

class GrammarAnalysis {
 public:
  explicit GrammarAnalysis(Grammar& g) : g_(g), n_(g.rules_.size()) {}

  void run() {
    reachable();
    nullable_ = fixpoint(/*chars_ok=*/false);
    const std::vector<char> productive = fixpoint(/*chars_ok=*/true);
    for (uint32_t r = 0; r < n_; ++r)
      if (reach_[r] && !productive[r])
        raise(Status::InvalidArgument,
              "grammar: %s can never end (each of its alternatives needs it again, or another rule that never ends)",
              rule_name(r).c_str());
    // x{m,n} of an x that can match the empty text: each of the n - m
    // optional copies may be empty, so one text has countless parses (and
    // nested, (a{0,100}){0,100}, millions of live ones).
    for (uint32_t r : g_.opt_chains_) {
      if (!reach_[r]) continue;
      bool empty_ok = true;
      for (const GrammarElement& e : g_.rules_[r][0]) {
        if (e.kind == GrammarElement::End) break;
        if (&e == &g_.rules_[r][0][g_.rules_[r][0].size() - 2] && e.kind == GrammarElement::RuleRef &&
            g_.rules_[r][0].size() > 2)
          break;  // the chain's own next link
        if (e.kind == GrammarElement::Char || !nullable_[e.rule]) {
          empty_ok = false;
          break;
        }
      }
      if (empty_ok)
        raise(Status::InvalidArgument,
              "grammar: %s repeats {m,n} something that can match the empty text (like (a?){0,100} or "
              "(a{0,100}){0,100}): one text would have countless parses; make the repeated item non-empty",
              rule_name(r).c_str());
    }
    const std::vector<uint32_t> order = left_order();
    fanout(order);
  }

 private:
  static constexpr uint64_t kSaturate = uint64_t{1} << 60;
  static uint64_t add(uint64_t a, uint64_t b) { return std::min(kSaturate, a + b); }

  std::string rule_name(uint32_t r) const {
    const std::string& n = g_.names_[r];
    const size_t t = n.find('~');
    if (t == std::string::npos) return "rule '" + n + "'";
    return "a group or repetition in rule '" + n.substr(0, t) + "'";
  }

  void reachable() {
    reach_.assign(n_, 0);
    std::vector<uint32_t> work{g_.root_};
    reach_[g_.root_] = 1;
    while (!work.empty()) {
      const uint32_t r = work.back();
      work.pop_back();
      for (const auto& alt : g_.rules_[r])
        for (const GrammarElement& e : alt)
          if (e.kind == GrammarElement::RuleRef && !reach_[e.rule]) {
            reach_[e.rule] = 1;
            work.push_back(e.rule);
          }
    }
  }

  // The rules with an alternative made only of such rules (chars_ok: and
  // characters): nullable (false) or productive (true), by a worklist.
  std::vector<char> fixpoint(bool chars_ok) const {
    std::vector<char> yes(n_, 0);
    std::vector<std::vector<std::pair<uint32_t, uint32_t>>> uses(n_);
    std::vector<std::vector<uint32_t>> missing(n_);
    std::vector<uint32_t> work;
    constexpr uint32_t kNever = 1u << 30;
    for (uint32_t r = 0; r < n_; ++r) {
      if (!reach_[r]) continue;
      missing[r].resize(g_.rules_[r].size());
      for (uint32_t a = 0; a < g_.rules_[r].size(); ++a) {
        uint32_t m = 0;
        for (const GrammarElement& e : g_.rules_[r][a]) {
          if (e.kind == GrammarElement::Char && !chars_ok) m = kNever;
          if (e.kind == GrammarElement::RuleRef) {
            if (m < kNever) ++m;
            uses[e.rule].push_back({r, a});
          }
        }
        missing[r][a] = m;
        if (m == 0 && !yes[r]) {
          yes[r] = 1;
          work.push_back(r);
        }
      }
    }
    while (!work.empty()) {
      const uint32_t b = work.back();
      work.pop_back();
      for (const auto& [r, a] : uses[b]) {
        uint32_t& m = missing[r][a];
        if (m >= kNever || m == 0) continue;
        if (--m == 0 && !yes[r]) {
          yes[r] = 1;
          work.push_back(r);
        }
      }
    }
    return yes;
  }

  // The rules each rule may expand first (before any character): the left
  // graph. Returns its rules in an order where each comes after every rule
  // it may expand first; a cycle is left recursion.
  std::vector<uint32_t> left_order() {
    std::vector<std::vector<uint32_t>> firsts(n_), users(n_);
    std::vector<size_t> pending(n_, 0);
    for (uint32_t r = 0; r < n_; ++r) {
      if (!reach_[r]) continue;
      for (const auto& alt : g_.rules_[r])
        for (const GrammarElement& e : alt) {
          if (e.kind != GrammarElement::RuleRef) break;
          firsts[r].push_back(e.rule);
          users[e.rule].push_back(r);
          if (!nullable_[e.rule]) break;
        }
      pending[r] = firsts[r].size();
    }
    std::vector<uint32_t> order, work;
    for (uint32_t r = 0; r < n_; ++r)
      if (reach_[r] && pending[r] == 0) work.push_back(r);
    while (!work.empty()) {
      const uint32_t b = work.back();
      work.pop_back();
      order.push_back(b);
      for (uint32_t r : users[b])
        if (--pending[r] == 0) work.push_back(r);
    }
    size_t reached = 0;
    for (uint32_t r = 0; r < n_; ++r) reached += reach_[r];
    if (order.size() < reached) {
      // Walk unfinished rules until one repeats: it is on a cycle.
      uint32_t r = 0;
      while (!(reach_[r] && pending[r] > 0)) ++r;
      std::vector<char> seen(n_, 0);
      while (!seen[r]) {
        seen[r] = 1;
        for (uint32_t f : firsts[r])
          if (pending[f] > 0) {
            r = f;
            break;
          }
      }
      raise(Status::InvalidArgument,
            "grammar: left recursion: %s can reach itself again before any character (directly, or through "
            "rules that can match the empty text, such as (x*)* or (x?)+)",
            rule_name(r).c_str());
    }
    return order;
  }

  // Per element: the states one expansion starting there may visit (a
  // character: 1; a rule: 1 + its alternatives' first elements, and what
  // follows when the rule can match the empty text).
  void fanout(const std::vector<uint32_t>& order) {
    std::vector<uint64_t> rule_fan(n_, 0);
    auto contrib = [&](const GrammarElement& e) {
      return e.kind == GrammarElement::Char ? uint64_t{1} : add(1, rule_fan[e.rule]);
    };
    for (uint32_t r : order) {
      uint64_t sum = 0;
      for (const auto& alt : g_.rules_[r])
        for (const GrammarElement& e : alt) {
          if (e.kind == GrammarElement::End) break;
          sum = add(sum, contrib(e));
          if (e.kind == GrammarElement::Char || !nullable_[e.rule]) break;
        }
      rule_fan[r] = sum;
    }
    uint64_t worst = add(1, rule_fan[g_.root_]);
    uint32_t worst_rule = g_.root_;
    for (uint32_t r = 0; r < n_; ++r) {
      if (!reach_[r]) continue;
      for (const auto& alt : g_.rules_[r]) {
        uint64_t c = 0;
        for (size_t i = alt.size() - 1; i-- > 0;) {
          const GrammarElement& e = alt[i];
          c = add(contrib(e), e.kind == GrammarElement::RuleRef && nullable_[e.rule] ? c : 0);
          if (c > worst) {
            worst = c;
            worst_rule = r;
          }
        }
      }
    }
    if (worst > Grammar::kMaxFanout)
      raise(Status::InvalidArgument,
            "grammar: too ambiguous: in %s the text could continue in up to %llu ways at once (at most %llu); "
            "nested repetitions of optional items, like (x?){0,100} inside another repetition, do this",
            rule_name(worst_rule).c_str(), static_cast<unsigned long long>(worst),
            static_cast<unsigned long long>(Grammar::kMaxFanout));
    g_.fanout_ = worst;
  }

  Grammar& g_;
  const size_t n_;
  std::vector<char> reach_, nullable_;
};

std::shared_ptr<const Grammar> Grammar::parse(std::string_view text) {
  if (text.size() > (1u << 20)) raise(Status::InvalidArgument, "grammar: longer than 1 MiB");
  auto g = GbnfParser(text).run();
  GrammarAnalysis(*std::const_pointer_cast<Grammar>(g)).run();  // still ours alone
  return g;
}

// ---- matching -------------------------------------------------------------------------------

namespace {
struct StackHash {
  size_t operator()(const std::vector<const GrammarElement*>& s) const {
    size_t h = s.size();
    for (const GrammarElement* p : s) h = h * 1000003u ^ std::hash<const GrammarElement*>{}(p);
    return h;
  }
};
}  // namespace

GrammarMatcher::GrammarMatcher(std::shared_ptr<const Grammar> g) : g_(std::move(g)) {
  std::vector<Stack> from;
  for (const Grammar::Alternative& alt : g_->rules()[g_->root()]) {
    Stack s;
    if (alt[0].kind != GrammarElement::End) s.push_back(&alt[0]);
    from.push_back(std::move(s));
  }
  expand(std::move(from), state_.stacks);
}

void GrammarMatcher::expand(std::vector<Stack> from, std::vector<Stack>& out) const {
  // What parse() proved one expansion may visit, for each stack (every
  // element of a stack may be expanded once its elements above match the
  // empty text), plus the end.
  uint64_t budget = 1;
  for (const Stack& s : from) budget += (g_->max_fanout() + 1) * (s.size() + 1);
  std::unordered_set<Stack, StackHash> seen;
  std::vector<Stack> work(std::make_move_iterator(from.rbegin()), std::make_move_iterator(from.rend()));
  while (!work.empty() && out.size() < kMaxStacks) {
    Stack s = std::move(work.back());
    work.pop_back();
    if (!seen.insert(s).second) continue;
    if (budget-- == 0) raise(Status::Internal, "grammar: an expansion went beyond the bound proved at compile time");
    if (s.empty() || s.back()->kind == GrammarElement::Char) {
      out.push_back(std::move(s));
      continue;
    }
    const GrammarElement* top = s.back();  // a RuleRef
    s.pop_back();
    if ((top + 1)->kind != GrammarElement::End) s.push_back(top + 1);
    const auto& alts = g_->rules()[top->rule];
    for (size_t i = alts.size(); i-- > 0;) {
      Stack n = s;
      if (alts[i][0].kind != GrammarElement::End) n.push_back(&alts[i][0]);
      work.push_back(std::move(n));
    }
  }
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
  std::vector<Stack> from;
  for (const Stack& s : st.stacks) {
    if (s.empty() || !s.back()->matches(cp)) continue;
    Stack n(s.begin(), s.end() - 1);
    const GrammarElement* after = s.back() + 1;
    if (after->kind != GrammarElement::End) n.push_back(after);
    from.push_back(std::move(n));
  }
  if (from.empty()) return false;
  std::vector<Stack> next;
  expand(std::move(from), next);
  if (next.empty()) return false;
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
