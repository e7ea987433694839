// JSON schema -> GBNF (see grammar.h). A small JSON reader for the schema
// text, then one grammar rule per schema node.
#include <cmath>
#include <map>
#include <set>

#include "core/error.h"
#include "sampling/grammar.h"

namespace infer {
namespace {

struct JVal {
  enum Type { Null, Bool, Num, Str, Arr, Obj } type = Null;
  bool b = false;
  double num = 0;
  std::string str;    // Str; Num: the number's own text
  std::vector<JVal> arr;
  std::vector<std::string> keys;  // Obj: keys and values in document order
  std::vector<JVal> vals;

  const JVal* get(const std::string& k) const {
    if (type != Obj) return nullptr;
    for (size_t i = 0; i < keys.size(); ++i)
      if (keys[i] == k) return &vals[i];
    return nullptr;
  }
};

class JsonReader {
 public:
  explicit JsonReader(std::string_view t) : t_(t) {}
  JVal document() {
    JVal v = value(0);
    ws();
    if (p_ != t_.size()) fail("trailing characters");
    return v;
  }

 private:
  [[noreturn]] void fail(const char* what) const {
    raise(Status::InvalidArgument, "json schema: not valid JSON at offset %zu: %s", p_, what);
  }
  void ws() {
    while (p_ < t_.size() && (t_[p_] == ' ' || t_[p_] == '\t' || t_[p_] == '\n' || t_[p_] == '\r')) ++p_;
  }
  bool lit(const char* s) {
    const size_t n = std::char_traits<char>::length(s);
    if (t_.substr(p_, n) != s) return false;
    p_ += n;
    return true;
  }
  JVal value(int depth) {
    if (depth > 64) fail("nested too deeply");
    ws();
    if (p_ >= t_.size()) fail("unexpected end");
    JVal v;
    const char c = t_[p_];
    if (c == '{') {
      ++p_;
      v.type = JVal::Obj;
      ws();
      if (p_ < t_.size() && t_[p_] == '}') {
        ++p_;
        return v;
      }
      for (;;) {
        ws();
        if (p_ >= t_.size() || t_[p_] != '"') fail("expected a key");
        std::string k = string();
        ws();
        if (p_ >= t_.size() || t_[p_] != ':') fail("expected ':'");
        ++p_;
        JVal item = value(depth + 1);
        v.keys.push_back(std::move(k));
        v.vals.push_back(std::move(item));
        ws();
        if (p_ < t_.size() && t_[p_] == ',') {
          ++p_;
          continue;
        }
        if (p_ < t_.size() && t_[p_] == '}') {
          ++p_;
          return v;
        }
        fail("expected ',' or '}'");
      }
    }
    if (c == '[') {
      ++p_;
      v.type = JVal::Arr;
      ws();
      if (p_ < t_.size() && t_[p_] == ']') {
        ++p_;
        return v;
      }
      for (;;) {
        v.arr.push_back(value(depth + 1));
        ws();
        if (p_ < t_.size() && t_[p_] == ',') {
          ++p_;
          continue;
        }
        if (p_ < t_.size() && t_[p_] == ']') {
          ++p_;
          return v;
        }
        fail("expected ',' or ']'");
      }
    }
    if (c == '"') {
      v.type = JVal::Str;
      v.str = string();
      return v;
    }
    if (lit("true")) {
      v.type = JVal::Bool;
      v.b = true;
      return v;
    }
    if (lit("false")) {
      v.type = JVal::Bool;
      return v;
    }
    if (lit("null")) return v;
    // number
    const size_t start = p_;
    if (p_ < t_.size() && t_[p_] == '-') ++p_;
    while (p_ < t_.size() && ((t_[p_] >= '0' && t_[p_] <= '9') || t_[p_] == '.' || t_[p_] == 'e' || t_[p_] == 'E' ||
                              t_[p_] == '+' || t_[p_] == '-'))
      ++p_;
    if (p_ == start) fail("unexpected character");
    v.type = JVal::Num;
    v.str = std::string(t_.substr(start, p_ - start));
    char* end = nullptr;
    v.num = std::strtod(v.str.c_str(), &end);
    if (*end || !std::isfinite(v.num)) fail("bad number");
    return v;
  }
  // A string with its escapes decoded (UTF-8 out).
  std::string string() {
    ++p_;  // opening quote
    std::string out;
    while (p_ < t_.size() && t_[p_] != '"') {
      char c = t_[p_++];
      if (static_cast<unsigned char>(c) < 0x20) fail("control character in a string");
      if (c != '\\') {
        out += c;
        continue;
      }
      if (p_ >= t_.size()) fail("unfinished escape");
      c = t_[p_++];
      switch (c) {
        case '"': out += '"'; break;
        case '\\': out += '\\'; break;
        case '/': out += '/'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'u': {
          uint32_t cp = hex4();
          if (cp >= 0xD800 && cp < 0xDC00 && lit("\\u")) {
            const uint32_t lo = hex4();
            if (lo >= 0xDC00 && lo < 0xE000) cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
          }
          utf8(out, cp);
          break;
        }
        default: fail("bad escape");
      }
    }
    if (p_ >= t_.size()) fail("unterminated string");
    ++p_;
    return out;
  }
  uint32_t hex4() {
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) {
      if (p_ >= t_.size()) fail("bad \\u escape");
      const char c = t_[p_++];
      v <<= 4;
      if (c >= '0' && c <= '9') v |= static_cast<uint32_t>(c - '0');
      else if (c >= 'a' && c <= 'f') v |= static_cast<uint32_t>(c - 'a' + 10);
      else if (c >= 'A' && c <= 'F') v |= static_cast<uint32_t>(c - 'A' + 10);
      else fail("bad \\u escape");
    }
    return v;
  }
  static void utf8(std::string& o, uint32_t cp) {
    if (cp < 0x80) {
      o += static_cast<char>(cp);
    } else if (cp < 0x800) {
      o += static_cast<char>(0xC0 | (cp >> 6));
      o += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      o += static_cast<char>(0xE0 | (cp >> 12));
      o += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      o += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
      o += static_cast<char>(0xF0 | (cp >> 18));
      o += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
      o += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      o += static_cast<char>(0x80 | (cp & 0x3F));
    }
  }
  std::string_view t_;
  size_t p_ = 0;
};

// The JSON text of a value, compact (for const / enum literals).
std::string to_json(const JVal& v) {
  switch (v.type) {
    case JVal::Null: return "null";
    case JVal::Bool: return v.b ? "true" : "false";
    case JVal::Num: return v.str;
    case JVal::Str: {
      std::string o = "\"";
      for (unsigned char c : v.str) {
        if (c == '"') o += "\\\"";
        else if (c == '\\') o += "\\\\";
        else if (c == '\n') o += "\\n";
        else if (c == '\t') o += "\\t";
        else if (c == '\r') o += "\\r";
        else if (c < 0x20) {
          char b[8];
          std::snprintf(b, sizeof b, "\\u%04x", c);
          o += b;
        } else {
          o += static_cast<char>(c);
        }
      }
      return o + "\"";
    }
    case JVal::Arr: {
      std::string o = "[";
      for (size_t i = 0; i < v.arr.size(); ++i) o += (i ? "," : "") + to_json(v.arr[i]);
      return o + "]";
    }
    case JVal::Obj: {
      std::string o = "{";
      for (size_t i = 0; i < v.keys.size(); ++i) {
        JVal k;
        k.type = JVal::Str;
        k.str = v.keys[i];
        o += (i ? "," : "") + to_json(k) + ":" + to_json(v.vals[i]);
      }
      return o + "}";
    }
  }
  return "null";
}

// Bytes as a GBNF string literal.
std::string gbnf_literal(const std::string& s) {
  std::string o = "\"";
  for (unsigned char c : s) {
    if (c == '"') o += "\\\"";
    else if (c == '\\') o += "\\\\";
    else if (c < 0x20 || c == 0x7f) {
      char b[8];
      std::snprintf(b, sizeof b, "\\x%02x", c);
      o += b;
    } else {
      o += static_cast<char>(c);
    }
  }
  return o + "\"";
}

// The shared rules every JSON grammar uses. Whitespace between tokens is
// limited so that a model cannot stall in it forever.
const char* kJsonBase =
    "value ::= object | array | string | number | boolean | null\n"
    "object ::= \"{\" ws ( string \":\" ws value ( \",\" ws string \":\" ws value )* )? \"}\" ws\n"
    "array ::= \"[\" ws ( value ( \",\" ws value )* )? \"]\" ws\n"
    "char ::= [^\"\\\\\\x7F\\x00-\\x1F] | \"\\\\\" ( [\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4} )\n"
    "string ::= \"\\\"\" char* \"\\\"\" ws\n"
    "integer ::= \"-\"? ( [0-9] | [1-9] [0-9]{1,15} ) ws\n"
    "number ::= \"-\"? ( [0-9] | [1-9] [0-9]{1,15} ) ( \".\" [0-9]{1,16} )? ( [eE] [-+]? [0-9]{1,3} )? ws\n"
    "boolean ::= ( \"true\" | \"false\" ) ws\n"
    "null ::= \"null\" ws\n"
    "ws ::= [ \\t\\n]{0,4}\n";

class SchemaConverter {
 public:
  explicit SchemaConverter(const JVal& root) : root_(root) {}

  std::string run() {
    const std::string r = visit(root_, "root-value", 0);
    std::string out = "root ::= ws " + r + "\n";
    for (const auto& [name, body] : rules_) out += name + " ::= " + body + "\n";
    return out + kJsonBase;
  }

 private:
  [[noreturn]] static void unsupported(const std::string& what) {
    raise(Status::InvalidArgument, "json schema: %s", what.c_str());
  }

  std::string new_rule(const std::string& hint, const std::string& body) {
    std::string name;
    for (char c : hint) name += (std::isalnum(static_cast<unsigned char>(c)) || c == '-') ? c : '-';
    if (name.empty()) name = "r";
    name = "s-" + name;
    std::string unique = name;
    for (int i = 2; rules_.count(unique); ++i) unique = name + std::to_string(i);
    rules_[unique] = body;
    return unique;
  }

  static int64_t int_field(const JVal& s, const char* k, int64_t def) {
    const JVal* v = s.get(k);
    if (!v) return def;
    if (v->type != JVal::Num || v->num < 0 || v->num != std::floor(v->num)) unsupported(std::string(k) + " must be a non-negative integer");
    return static_cast<int64_t>(std::min(v->num, 1e9));
  }

  std::string visit(const JVal& s, const std::string& hint, int depth) {
    if (depth > 64) unsupported("nested too deeply");
    if (s.type == JVal::Bool) {
      if (!s.b) unsupported("the schema 'false' matches nothing");
      return "value";
    }
    if (s.type != JVal::Obj) unsupported("a schema must be an object or a boolean");
    if (const JVal* ref = s.get("$ref")) {
      if (ref->type != JVal::Str) unsupported("$ref must be a string");
      return visit_ref(ref->str, depth);
    }
    if (const JVal* c = s.get("const")) return "( " + gbnf_literal(to_json(*c)) + " ws )";
    if (const JVal* e = s.get("enum")) {
      if (e->type != JVal::Arr || e->arr.empty()) unsupported("enum must be a non-empty array");
      std::string alts;
      for (const JVal& v : e->arr) alts += (alts.empty() ? "" : " | ") + gbnf_literal(to_json(v));
      return "( ( " + alts + " ) ws )";
    }
    for (const char* k : {"anyOf", "oneOf"}) {
      if (const JVal* any = s.get(k)) {
        if (any->type != JVal::Arr || any->arr.empty()) unsupported(std::string(k) + " must be a non-empty array");
        std::string alts;
        for (size_t i = 0; i < any->arr.size(); ++i)
          alts += (i ? " | " : "") + visit(any->arr[i], hint + "-" + std::to_string(i), depth + 1);
        return "( " + alts + " )";
      }
    }
    if (const JVal* all = s.get("allOf")) {
      if (all->type == JVal::Arr && all->arr.size() == 1) return visit(all->arr[0], hint, depth + 1);
      unsupported("allOf with more than one schema is not supported");
    }
    const JVal* type = s.get("type");
    if (type && type->type == JVal::Arr) {
      std::string alts;
      for (const JVal& t : type->arr) {
        JVal one = s;
        for (size_t i = 0; i < one.keys.size(); ++i)
          if (one.keys[i] == "type") one.vals[i] = t;
        alts += (alts.empty() ? "" : " | ") + visit(one, hint, depth + 1);
      }
      if (alts.empty()) unsupported("an empty type list matches nothing");
      return "( " + alts + " )";
    }
    std::string t;
    if (type) {
      if (type->type != JVal::Str) unsupported("type must be a string or an array of strings");
      t = type->str;
    } else if (s.get("properties")) {
      t = "object";
    } else if (s.get("items")) {
      t = "array";
    } else {
      return "value";
    }
    if (t == "object") return visit_object(s, hint, depth);
    if (t == "array") return visit_array(s, hint, depth);
    if (t == "string") {
      const int64_t lo = int_field(s, "minLength", 0), hi = int_field(s, "maxLength", -1);
      if (hi >= 0 && hi < lo) unsupported("maxLength < minLength");
      if (lo == 0 && hi < 0) return "string";
      if (hi > 2000 || lo > 2000) unsupported("minLength / maxLength above 2000 are not supported");
      return new_rule(hint, "\"\\\"\" char{" + std::to_string(lo) + "," + (hi >= 0 ? std::to_string(hi) : "") + "} \"\\\"\" ws");
    }
    if (t == "integer") return "integer";
    if (t == "number") return "number";
    if (t == "boolean") return "boolean";
    if (t == "null") return "null";
    unsupported("unknown type '" + t + "'");
  }

  std::string visit_ref(const std::string& ref, int depth) {
    auto it = refs_.find(ref);
    if (it != refs_.end()) return it->second;
    std::string path;
    if (ref.rfind("#/$defs/", 0) == 0) path = ref.substr(8);
    else if (ref.rfind("#/definitions/", 0) == 0) path = ref.substr(14);
    else if (ref == "#") path = "";
    else unsupported("$ref '" + ref + "' is not supported (only #/$defs/NAME and #/definitions/NAME)");
    const JVal* target = &root_;
    if (!path.empty()) {
      const JVal* defs = root_.get(ref[2] == '$' ? "$defs" : "definitions");
      target = defs ? defs->get(path) : nullptr;
      if (!target) unsupported("$ref '" + ref + "' does not resolve");
    }
    // Named first, so that a recursive reference finds it.
    const std::string name = new_rule("ref-" + path, "value");
    refs_[ref] = name;
    rules_[name] = visit(*target, "def-" + path, depth + 1);
    return name;
  }

  std::string visit_object(const JVal& s, const std::string& hint, int depth) {
    const JVal* props = s.get("properties");
    if (!props || props->type != JVal::Obj || props->keys.empty()) return "object";
    std::set<std::string> required;
    if (const JVal* req = s.get("required")) {
      if (req->type != JVal::Arr) unsupported("required must be an array");
      for (const JVal& r : req->arr)
        if (r.type == JVal::Str) required.insert(r.str);
    }
    // Required properties first (in declared order), then the optional
    // ones, each of which may be left out. Without a 'required' list every
    // property is written (what strict structured output does).
    std::vector<std::string> must, may;
    for (size_t i = 0; i < props->keys.size(); ++i) {
      const std::string& k = props->keys[i];
      JVal key;
      key.type = JVal::Str;
      key.str = k;
      const std::string kv = gbnf_literal(to_json(key)) + " ws \":\" ws " + visit(props->vals[i], hint + "-" + k, depth + 1);
      if (required.empty() || required.count(k)) must.push_back(kv);
      else may.push_back(kv);
    }
    std::string body = "\"{\" ws ";
    if (must.empty()) {
      // Only optional properties: any prefix-free choice is fine; write them
      // all or none.
      std::string all;
      for (size_t i = 0; i < may.size(); ++i) all += (i ? " \",\" ws " : "") + may[i];
      body += "( " + all + " )? ";
    } else {
      for (size_t i = 0; i < must.size(); ++i) body += (i ? "\",\" ws " : "") + must[i] + " ";
      for (const std::string& kv : may) body += "( \",\" ws " + kv + " )? ";
    }
    body += "\"}\" ws";
    return new_rule(hint, body);
  }

  std::string visit_array(const JVal& s, const std::string& hint, int depth) {
    const JVal* items = s.get("items");
    const std::string item = items ? visit(*items, hint + "-item", depth + 1) : "value";
    const int64_t lo = int_field(s, "minItems", 0), hi = int_field(s, "maxItems", -1);
    if (hi >= 0 && hi < lo) unsupported("maxItems < minItems");
    if (lo > 1000 || hi > 1000) unsupported("minItems / maxItems above 1000 are not supported");
    std::string body = "\"[\" ws ";
    if (hi == 0) {
      body += "\"]\" ws";
    } else if (lo == 0) {
      body += "( " + item + " ( \",\" ws " + item + " ){0," + (hi >= 0 ? std::to_string(hi - 1) : "") + "} )? \"]\" ws";
    } else {
      body += item + " ( \",\" ws " + item + " ){" + std::to_string(lo - 1) + "," + (hi >= 0 ? std::to_string(hi - 1) : "") +
              "} \"]\" ws";
    }
    return new_rule(hint, body);
  }

  const JVal& root_;
  std::map<std::string, std::string> rules_;
  std::map<std::string, std::string> refs_;
};

}  // namespace

std::string json_schema_to_gbnf(std::string_view schema) {
  if (schema.size() > (1u << 20)) raise(Status::InvalidArgument, "json schema: longer than 1 MiB");
  const JVal root = JsonReader(schema).document();
  return SchemaConverter(root).run();
}

std::string json_object_gbnf() { return std::string("root ::= ws object\n") + kJsonBase; }

}  // namespace infer
