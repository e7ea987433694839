// Constrained sampling: GBNF parsing and matching, JSON schema -> GBNF, the
// sampler's token masking, and per-token log-probabilities.
#include <catch2/catch.hpp>

#include <cmath>
#include <random>
#include <regex>

#include "core/error.h"
#include "infer/infer.h"
#include "sampling/grammar.h"
#include "sampling/sampler.h"
#include "test_util.h"

using namespace infer;

namespace {

bool full_match(const std::string& gbnf, const std::string& text) {
  GrammarMatcher m(Grammar::parse(gbnf));
  return m.advance(text) && m.can_end();
}

bool prefix_ok(const std::string& gbnf, const std::string& text) {
  GrammarMatcher m(Grammar::parse(gbnf));
  return m.accepts(text);
}

}  // namespace

TEST_CASE("grammar: literals, classes, alternatives, repetition", "[grammar]") {
  const std::string g = "root ::= \"ab\" [0-9]+ ( \"x\" | \"y\" )? tail\ntail ::= [^a-z]{2,3}\n";
  CHECK(full_match(g, "ab1xAB"));
  CHECK(full_match(g, "ab123BBB"));
  CHECK(full_match(g, "ab9y--"));
  CHECK_FALSE(full_match(g, "ab1xA"));      // tail too short
  CHECK_FALSE(full_match(g, "ab1xABCD"));   // tail too long
  CHECK_FALSE(full_match(g, "abxAB"));      // no digit
  CHECK_FALSE(full_match(g, "ab1xzz"));     // tail from the negated class
  CHECK(prefix_ok(g, "ab12"));
  CHECK_FALSE(prefix_ok(g, "b"));
  GrammarMatcher m(Grammar::parse(g));
  CHECK(m.advance("ab1"));
  CHECK_FALSE(m.can_end());
  CHECK_FALSE(m.advance("q"));  // refused, state kept
  CHECK(m.advance("xAB"));
  CHECK(m.can_end());
  CHECK_FALSE(m.must_end());  // a third tail character may follow
  CHECK(m.advance("C"));
  CHECK(m.must_end());
}

TEST_CASE("grammar: escapes, comments, any char, UTF-8", "[grammar]") {
  const std::string g = "# a comment\nroot ::= \"\\\"\" [^\"\\\\]* \"\\\"\" \"\\n\"? # trailing\n";
  CHECK(full_match(g, "\"hello\""));
  CHECK(full_match(g, "\"h\xc3\xa9llo \xe2\x82\xac\"\n"));
  CHECK_FALSE(full_match(g, "\"a\"b"));
  CHECK_FALSE(full_match(g, "\"a\\\""));
  // A token ending inside a multi-byte character is allowed when it can still match.
  CHECK(prefix_ok(g, "\"\xe2\x82"));
  CHECK_FALSE(prefix_ok("root ::= [a-z]*", "\xe2\x82"));  // only ASCII can follow
  CHECK_FALSE(prefix_ok(g, "\"\xff"));                      // invalid UTF-8
  CHECK(full_match("root ::= [\\u00e9-\\u00ea] . \"\\x41\"", "\xc3\xa9zA"));
}

TEST_CASE("grammar: bad grammars are clear errors", "[grammar]") {
  auto msg = [](const std::string& g) {
    try {
      Grammar::parse(g);
    } catch (const Error& e) {
      CHECK(e.status() == Status::InvalidArgument);
      return std::string(e.what());
    }
    return std::string("no error");
  };
  CHECK_THAT(msg("root ::= foo"), Catch::Contains("'foo' is used but not defined"));
  CHECK_THAT(msg("start ::= \"a\""), Catch::Contains("no 'root' rule"));
  CHECK_THAT(msg("root ::= \"abc"), Catch::Contains("unterminated string"));
  CHECK_THAT(msg("root ::= [a-"), Catch::Contains("unterminated"));
  CHECK_THAT(msg("root ::= ( \"a\""), Catch::Contains("missing ')'"));
  CHECK_THAT(msg("root ::= root \"a\" | \"b\""), Catch::Contains("left recursion"));
  CHECK_THAT(msg("root ::= \"a\"\nroot ::= \"b\""), Catch::Contains("defined twice"));
  CHECK_THAT(msg("root ::= \"a\"{3,1}"), Catch::Contains("n < m"));
  CHECK_THAT(msg(""), Catch::Contains("empty"));
  CHECK_THAT(msg("root ::= * \"a\""), Catch::Contains("without an item"));
}

TEST_CASE("grammar: JSON object grammar accepts JSON objects only", "[grammar]") {
  const std::string g = json_object_gbnf();
  CHECK(full_match(g, "{}"));
  CHECK(full_match(g, " {\"a\": [1, -2.5e3, true, null, \"x\\n\\u00e9\"], \"b\": {\"c\": {}}}\n"));
  CHECK_FALSE(full_match(g, "[1]"));
  CHECK_FALSE(full_match(g, "{\"a\": 01}"));
  CHECK_FALSE(full_match(g, "{\"a\" 1}"));
  CHECK_FALSE(full_match(g, "{a: 1}"));
  CHECK_FALSE(full_match(g, "{\"a\": 1,}"));
  CHECK_FALSE(full_match(g, "{\"a\": \"\x01\"}"));
  CHECK(prefix_ok(g, "{\"ke"));
}

TEST_CASE("grammar: JSON grammars allow one space or one newline with a bounded indent between tokens", "[grammar]") {
  // A model steered by the grammar must not be able to spend its tokens on
  // whitespace: between two JSON tokens at most one space, or one newline
  // followed by at most 16 spaces (2-space pretty printing, 8 levels deep).
  const std::string schema = R"({"type": "object", "properties": {"a": {"type": "integer"},
      "b": {"type": "array", "items": {"enum": [true, null]}}, "c": {"type": "object", "properties": {"d": {"type": "string"}}}},
    "required": ["a", "b", "c"]})";
  const std::string obj = R"({"a":1,"b":[],"c":{"d":""}})";
  for (const std::string& g : {json_object_gbnf(), json_schema_to_gbnf(schema)}) {
    INFO(g);
    // Compact, one space, and 2-space pretty printing all still match.
    CHECK(full_match(g, R"({"a":1,"b":[true,null],"c":{"d":"x"}})"));
    CHECK(full_match(g, R"({"a": 1, "b": [true, null], "c": {"d": "x"}})"));
    CHECK(full_match(g, R"( { "a" : 1 , "b" : [ true , null ] , "c" : { "d" : "x" } } )"));
    CHECK(full_match(g, "{\n  \"a\": 1,\n  \"b\": [\n    true,\n    null\n  ],\n  \"c\": {\n    \"d\": \"x\"\n  }\n}\n"));
    // Runs are refused: several newlines, several spaces, a newline after a
    // space, an indent deeper than 16, before the object and after it.
    CHECK_FALSE(full_match(g, "{\n\n\n\"a\":1,\"b\":[],\"c\":{\"d\":\"\"}}"));
    CHECK_FALSE(full_match(g, "{   \"a\" :1,\"b\":[],\"c\":{\"d\":\"\"}}"));
    CHECK_FALSE(full_match(g, "{\"a\"  :1,\"b\":[],\"c\":{\"d\":\"\"}}"));
    CHECK_FALSE(full_match(g, "{\"a\": \n1,\"b\":[],\"c\":{\"d\":\"\"}}"));
    CHECK_FALSE(full_match(g, "{\"a\":1,\"b\":[\t\ttrue],\"c\":{\"d\":\"\"}}"));
    CHECK(prefix_ok(g, "{\n" + std::string(16, ' ')));
    CHECK_FALSE(prefix_ok(g, "{\n" + std::string(17, ' ')));
    CHECK_FALSE(prefix_ok(g, " \n\n\n{"));
    CHECK_FALSE(prefix_ok(g, "  {"));
    CHECK(full_match(g, obj + "\n"));
    CHECK_FALSE(prefix_ok(g, obj + "\n\n"));
    CHECK_FALSE(prefix_ok(g, obj + "  "));
  }
  // A string's characters are not whitespace between tokens: any run inside one.
  CHECK(full_match(json_object_gbnf(), "{\"a\":\"   x   \"}"));
}

TEST_CASE("grammar: JSON schema to GBNF", "[grammar]") {
  const std::string schema = R"({"type": "object", "properties": {
      "name": {"type": "string", "maxLength": 5},
      "age": {"type": "integer"},
      "mood": {"enum": ["happy", "sad"]},
      "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 2},
      "pet": {"$ref": "#/$defs/pet"},
      "note": {"type": ["string", "null"]}},
    "required": ["name", "age", "mood", "tags", "pet"],
    "$defs": {"pet": {"type": "object", "properties": {"kind": {"const": "dog"}}, "required": ["kind"]}}})";
  const std::string g = json_schema_to_gbnf(schema);
  INFO(g);
  CHECK(full_match(g, R"({"name": "Tom", "age": 3, "mood": "sad", "tags": ["a", "b"], "pet": {"kind": "dog"}})"));
  CHECK(full_match(g, R"({"name":"","age":-12,"mood":"happy","tags":[],"pet":{"kind":"dog"},"note":null})"));
  CHECK(full_match(g, R"({"name":"","age":0,"mood":"happy","tags":[],"pet":{"kind":"dog"},"note":"x"})"));
  CHECK_FALSE(full_match(g, R"({"name": "Tommy!", "age": 3, "mood": "sad", "tags": [], "pet": {"kind": "dog"}})"));  // maxLength
  CHECK_FALSE(full_match(g, R"({"name": "Tom", "age": 3.5, "mood": "sad", "tags": [], "pet": {"kind": "dog"}})"));    // integer
  CHECK_FALSE(full_match(g, R"({"name": "Tom", "age": 3, "mood": "angry", "tags": [], "pet": {"kind": "dog"}})"));   // enum
  CHECK_FALSE(full_match(g, R"({"name": "Tom", "age": 3, "mood": "sad", "tags": ["a","b","c"], "pet": {"kind": "dog"}})"));
  CHECK_FALSE(full_match(g, R"({"name": "Tom", "age": 3, "mood": "sad", "tags": [], "pet": {"kind": "cat"}})"));     // const
  CHECK_FALSE(full_match(g, R"({"age": 3, "name": "Tom", "mood": "sad", "tags": [], "pet": {"kind": "dog"}})"));     // order
  CHECK(full_match(json_schema_to_gbnf("{}"), "[1, {\"a\": null}]"));
  CHECK(full_match(json_schema_to_gbnf("true"), "\"s\""));
  CHECK(full_match(json_schema_to_gbnf(R"({"type": "array", "items": {"type": "number"}, "minItems": 2})"), "[1, 2.5]"));
  CHECK_FALSE(full_match(json_schema_to_gbnf(R"({"type": "array", "items": {"type": "number"}, "minItems": 2})"), "[1]"));
  // Recursive references.
  const std::string tree = json_schema_to_gbnf(R"({"$ref": "#/$defs/node", "$defs": {"node": {"type": "object",
      "properties": {"v": {"type": "integer"}, "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}}},
      "required": ["v", "kids"]}}})");
  CHECK(full_match(tree, R"({"v": 1, "kids": [{"v": 2, "kids": []}]})"));
  for (const char* bad : {"{", "[1,", R"({"type": "tuple"})", R"({"$ref": "http://x"})", R"({"$ref": "#/$defs/none"})", "false",
                          R"({"type": "string", "maxLength": -1})", "3"}) {
    INFO(bad);
    CHECK_THROWS_AS(json_schema_to_gbnf(bad), Error);
  }
}

namespace {

// The JSON text of a string (what a schema's string value looks like).
std::string json_string(const std::string& s) {
  std::string o = "\"";
  for (unsigned char c : s) {
    if (c == '"') o += "\\\"";
    else if (c == '\\') o += "\\\\";
    else if (c == '\n') o += "\\n";
    else if (c == '\t') o += "\\t";
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

std::string pattern_schema(const std::string& re) {
  return R"({"type": "string", "pattern": )" + json_string(re) + "}";
}

}  // namespace

TEST_CASE("grammar: JSON schema pattern agrees with std::regex on random strings", "[grammar]") {
  // std::regex (ECMAScript) is the oracle: regex_search, since a schema
  // pattern is not anchored unless it says so.
  const char* patterns[] = {
      "^[a-z]+$", "^\\d{3}-\\d{4}$", "^(cat|dog)s?$", "ab", "^a.c$", "^[^ab]*$", "^(?:x|yz){2,3}$", "^\\w+@\\w+\\.com$",
      "^[A-Fa-f0-9]{2,}$", "^a*b+c?$", "^\\s*\\S+\\s*$", "^[-+]?[0-9]+(\\.[0-9]+)?$", "^a{0,2}b{1}$", "x$", "^(a|)b$",
      "^\\D\\W$", "^[a\\-z]$", "^a+?b*?$",
  };
  const std::string alphabet = "abcxyzAF09-+.@ _s";
  std::mt19937 rng(7);
  for (const char* re : patterns) {
    INFO("pattern " << re);
    const std::string g = json_schema_to_gbnf(pattern_schema(re));
    const std::regex oracle(re, std::regex::ECMAScript);
    auto check = [&](const std::string& s) {
      INFO("string '" << s << "'");
      CHECK(full_match(g, json_string(s)) == std::regex_search(s, oracle));
    };
    for (const char* s : {"", "a", "ab", "cat", "dogs", "555-1234", "abc", "xyzyz", "a@b.com", "Ff09", "aab", " s ", "-1.5",
                          "b", "ax", "x", ".-", "-"})
      check(s);
    for (int i = 0; i < 300; ++i) {
      std::string s;
      const int n = static_cast<int>(rng() % 7);
      for (int j = 0; j < n; ++j) s += alphabet[rng() % alphabet.size()];
      check(s);
    }
  }
  // Characters JSON escapes: a literal quote or backslash in the pattern is
  // written escaped; '.' and negated classes never produce them.
  const std::string q = json_schema_to_gbnf(pattern_schema("^a\"b\\\\c$"));
  CHECK(full_match(q, json_string("a\"b\\c")));
  CHECK_FALSE(full_match(q, "\"a\"b\\c\""));
  CHECK_FALSE(full_match(json_schema_to_gbnf(pattern_schema("^.$")), json_string("\"")));
  CHECK(full_match(json_schema_to_gbnf(pattern_schema("^[\"x]$")), json_string("\"")));
  CHECK(full_match(json_schema_to_gbnf(pattern_schema("^\\t$")), json_string("\t")));
  CHECK(full_match(json_schema_to_gbnf(pattern_schema("^é+$")), json_string("ééé")));
  // What a context-free grammar cannot do, or the subset leaves out, is a clear error.
  for (const char* bad : {"(?=a)b", "(a)\\1", "a^b", "a$b", "(ab", "ab)", "[ab", "*a", "a**", "a{2,1}", "\\bword", "a{5000}",
                          "(?<n>a)", "\\q"}) {
    INFO(bad);
    CHECK_THROWS_AS(json_schema_to_gbnf(pattern_schema(bad)), Error);
  }
  CHECK_THROWS_AS(json_schema_to_gbnf(R"({"type": "string", "pattern": 5})"), Error);
}

TEST_CASE("grammar: JSON schema integer bounds, checked against every value", "[grammar]") {
  struct Case {
    const char* bounds;
    int64_t lo, hi;  // the allowed values within [-1200, 1200]
  };
  const Case cases[] = {
      {R"("minimum": 0)", 0, 1200},
      {R"("minimum": 5, "maximum": 5)", 5, 5},
      {R"("minimum": -17, "maximum": 123)", -17, 123},
      {R"("minimum": -1000, "maximum": -99)", -1000, -99},
      {R"("maximum": 19)", -1200, 19},
      {R"("exclusiveMinimum": 9, "exclusiveMaximum": 1001)", 10, 1000},
      {R"("minimum": 2.5, "maximum": 7.5)", 3, 7},
      {R"("minimum": 10, "exclusiveMinimum": true, "maximum": 20, "exclusiveMaximum": true)", 11, 19},
      {R"("minimum": 199, "maximum": 201)", 199, 201},
      {R"("minimum": -9, "maximum": 0)", -9, 0},
  };
  for (const Case& c : cases) {
    const std::string g = json_schema_to_gbnf(std::string(R"({"type": "integer", )") + c.bounds + "}");
    INFO(c.bounds << "\n" << g);
    GrammarMatcher base(Grammar::parse(g));
    int wrong = 0;
    for (int64_t v = -1200; v <= 1200; ++v) {
      GrammarMatcher m = base;
      const bool ok = m.advance(std::to_string(v)) && m.can_end();
      if (ok != (v >= c.lo && v <= c.hi) && ++wrong <= 3) FAIL_CHECK("value " << v << " matched: " << ok);
    }
    CHECK(wrong == 0);
    GrammarMatcher m = base;
    CHECK_FALSE((m.advance("007") && m.can_end()));  // no leading zeros
    GrammarMatcher z = base;
    CHECK_FALSE((z.advance("-0") && z.can_end()));
  }
  // Large open ranges: int64-sized values still match.
  CHECK(full_match(json_schema_to_gbnf(R"({"type": "integer", "minimum": 1})"), "9223372036854775807"));
  for (const char* bad : {R"({"type": "integer", "minimum": 5, "maximum": 4})", R"({"type": "integer", "minimum": "a"})",
                          R"({"type": "integer", "multipleOf": 2})", R"({"type": "number", "minimum": 0})"}) {
    INFO(bad);
    CHECK_THROWS_AS(json_schema_to_gbnf(bad), Error);
  }
}

TEST_CASE("grammar: JSON schema string formats", "[grammar]") {
  auto fmt = [](const char* f) { return json_schema_to_gbnf(std::string(R"({"type": "string", "format": ")") + f + "\"}"); };
  const std::string date = fmt("date"), time = fmt("time"), dt = fmt("date-time"), uuid = fmt("uuid"), ip = fmt("ipv4"),
                    email = fmt("email");
  CHECK(full_match(date, "\"2026-12-01\""));
  CHECK_FALSE(full_match(date, "\"2026-13-01\""));
  CHECK_FALSE(full_match(date, "\"2026-1-01\""));
  CHECK(full_match(time, "\"13:37:59Z\""));
  CHECK(full_match(time, "\"23:59:60.123+01:00\""));
  CHECK_FALSE(full_match(time, "\"24:00:00Z\""));
  CHECK_FALSE(full_match(time, "\"12:00:00\""));  // RFC 3339 needs the offset
  CHECK(full_match(dt, "\"2026-12-01T13:37:00.5z\""));
  CHECK_FALSE(full_match(dt, "\"2026-12-01 13:37:00Z\""));
  CHECK(full_match(uuid, "\"123e4567-e89b-12d3-a456-426614174000\""));
  CHECK_FALSE(full_match(uuid, "\"123e4567e89b-12d3-a456-426614174000\""));
  CHECK(full_match(ip, "\"192.168.0.255\""));
  CHECK_FALSE(full_match(ip, "\"192.168.0.256\""));
  CHECK(full_match(email, "\"tom.dog@example.org\""));
  CHECK_FALSE(full_match(email, "\"tom@localhost\""));
  // Formats without a grammar are annotations: any string.
  CHECK(full_match(fmt("hostname"), "\"anything at all\""));
  CHECK_THROWS_AS(json_schema_to_gbnf(R"({"type": "string", "format": "date", "maxLength": 3})"), Error);
}

TEST_CASE("sampler: a grammar masks tokens and advances with each draw", "[grammar]") {
  // A toy vocabulary: token 0 is the end of text, 1 a control token (no piece).
  auto tg = std::make_shared<TokenGrammar>();
  tg->grammar = Grammar::parse("root ::= \"{\" [0-9]+ \"}\"");
  tg->pieces = {"", "", "{", "}", "1", "23", "{1", "a", "1}", "}x"};
  tg->is_eog = {1, 0, 0, 0, 0, 0, 0, 0, 0, 0};
  for (float temp : {0.0f, 1.0f}) {
    SamplingParams p;
    p.temperature = temp;
    p.top_k = 0;
    p.top_p = 1;
    p.min_p = 0;
    p.seed = 3;
    p.grammar = tg;
    for (int run = 0; run < 20; ++run) {
      p.seed = static_cast<uint64_t>(run);
      Sampler s(p, 10);
      std::string text;
      std::mt19937 rng(static_cast<unsigned>(run));
      for (int i = 0; i < 20; ++i) {
        // Random logits that favour the tokens the grammar refuses.
        std::vector<float> logits(10);
        for (float& l : logits) l = static_cast<float>(rng() % 100) / 10.0f;
        logits[7] = 50;
        logits[9] = 50;
        const int32_t t = s.sample(logits, {});
        REQUIRE(t != 7);
        REQUIRE(t != 9);
        REQUIRE(t != 1);
        if (t == 0) break;
        text += tg->pieces[static_cast<size_t>(t)];
      }
      INFO(text);
      CHECK(full_match("root ::= \"{\" [0-9]+ \"}\"", text));
    }
  }
  // Everything banned but what the grammar refuses: a clear error.
  SamplingParams p;
  p.temperature = 0;
  p.grammar = tg;
  Sampler s(p, 10);
  std::vector<float> logits(10, -INFINITY);
  logits[7] = 1;
  CHECK_THROWS_AS(s.sample(logits, {}), Error);
  // A grammar bound to another vocabulary size is refused.
  CHECK_THROWS_AS(Sampler(p, 11), Error);
}

TEST_CASE("sampler: log-probabilities of the drawn token and the top k", "[grammar]") {
  const std::vector<float> logits = {1.0f, 3.0f, 2.0f, -INFINITY, 3.0f};
  const TokenLogprobs lp = logprobs_of(logits, 2, 3);
  double z = std::exp(1.0) + 2 * std::exp(3.0) + std::exp(2.0);
  CHECK(std::fabs(lp.chosen.logprob - (2.0 - std::log(z))) < 1e-5);
  REQUIRE(lp.top.size() == 3);
  CHECK(lp.top[0].token == 1);  // ties by id
  CHECK(lp.top[1].token == 4);
  CHECK(lp.top[2].token == 2);
  CHECK(std::fabs(lp.top[0].logprob - (3.0 - std::log(z))) < 1e-5);
  CHECK(logprobs_of(logits, 3, 0).chosen.logprob == -INFINITY);
  CHECK(logprobs_of(logits, 0, 0).top.empty());

  // Through the sampler: one report per draw, before bias and temperature.
  SamplingParams p;
  p.temperature = 0.5f;
  p.logprobs = 2;
  p.logit_bias = {{0, 100.0f}};
  Sampler s(p, 5);
  std::vector<TokenLogprobs> got;
  s.set_logprobs_sink([&](TokenLogprobs&& x) { got.push_back(std::move(x)); });
  std::vector<float> l = logits;
  const int32_t t = s.sample(l, {});
  CHECK(t == 0);  // the bias wins the draw ...
  REQUIRE(got.size() == 1);
  CHECK(got[0].chosen.token == 0);
  CHECK(std::fabs(got[0].chosen.logprob - (1.0 - std::log(z))) < 1e-5);  // ... but the report is the model's
  CHECK(got[0].top.size() == 2);
  p.logprobs = 101;
  CHECK_THROWS_AS(Sampler(p, 5), Error);
}

// ---- through the C API, on a real model ----

namespace {

struct CapiRun {
  std::vector<std::string> texts;
  std::vector<infer_request*> reqs;
};

std::string request_text(infer_request* r) {
  size_t need = 0;
  infer_request_text(r, nullptr, 0, &need);
  std::string t(need, '\0');
  REQUIRE(infer_request_text(r, t.data(), t.size(), &need) == INFER_OK);
  t.resize(need ? need - 1 : 0);
  return t;
}

}  // namespace

TEST_CASE("C API: json_schema, grammar and logprobs on stories260K", "[grammar][capi]") {
  REQUIRE_SHARED(path, "models/stories260K.gguf");
  infer_model* model = nullptr;
  REQUIRE(infer_model_load(path.c_str(), nullptr, &model) == INFER_OK);
  infer_engine_params ep;
  infer_engine_params_init(&ep);
  ep.n_threads = 1;
  infer_engine* engine = nullptr;
  REQUIRE(infer_engine_create(model, &ep, &engine) == INFER_OK);
  infer_sampling_params sp;
  infer_sampling_params_init(&sp);
  sp.temperature = 1.0f;
  sp.seed = 11;

  const char* schema = R"({"type": "object", "properties": {"name": {"type": "string", "maxLength": 6},
      "n": {"type": "integer"}, "ok": {"type": "boolean"}}, "required": ["name", "n", "ok"]})";
  size_t need = 0;
  REQUIRE(infer_json_schema_to_grammar(schema, nullptr, 0, &need) == INFER_ERR_BUFFER_TOO_SMALL);
  std::string gbnf(need, '\0');
  REQUIRE(infer_json_schema_to_grammar(schema, gbnf.data(), gbnf.size(), &need) == INFER_OK);
  gbnf.resize(need - 1);

  SECTION("every sample of a json_schema request is a complete JSON text of the schema") {
    infer_request_params rp;
    infer_request_params_init(&rp);
    CHECK(rp.logprobs == -1);
    CHECK(rp.grammar == nullptr);
    CHECK(rp.json_schema == nullptr);
    rp.prompt = "Once upon a time";
    rp.max_tokens = 200;
    rp.sampling = &sp;
    rp.json_schema = schema;
    infer_request* reqs[4] = {};
    REQUIRE(infer_submit_n(engine, &rp, 4, reqs) == INFER_OK);
    REQUIRE(infer_engine_run(engine) == INFER_OK);
    for (infer_request* r : reqs) {
      infer_request_stats st;
      infer_request_stats_init(&st);
      REQUIRE(infer_request_get_stats(r, &st) == INFER_OK);
      const std::string text = request_text(r);
      INFO(text);
      CHECK(st.finish_reason == INFER_FINISH_STOP);
      GrammarMatcher m(Grammar::parse(gbnf));
      CHECK(m.advance(text));
      CHECK(m.can_end());
      infer_request_free(r);
    }
  }

  SECTION("a GBNF grammar; logprobs of every token, greedy picks the best") {
    infer_request_params rp;
    infer_request_params_init(&rp);
    rp.prompt = "Once upon a time";
    rp.max_tokens = 40;
    infer_sampling_params greedy;
    infer_sampling_params_init(&greedy);
    greedy.temperature = 0;
    rp.sampling = &greedy;
    rp.grammar = "root ::= \" \" ( \"yes\" | \"no\" ) \".\"";
    rp.logprobs = 3;
    infer_request* r = nullptr;
    REQUIRE(infer_submit(engine, &rp, &r) == INFER_OK);
    REQUIRE(infer_engine_run(engine) == INFER_OK);
    const std::string text = request_text(r);
    CHECK((text == " yes." || text == " no." || text == "yes." || text == "no."));
    infer_request_stats st;
    infer_request_stats_init(&st);
    REQUIRE(infer_request_get_stats(r, &st) == INFER_OK);
    CHECK(st.finish_reason == INFER_FINISH_STOP);
    REQUIRE(st.n_generated_tokens >= 1);
    const int32_t* toks = nullptr;
    size_t nt = 0;
    REQUIRE(infer_request_tokens(r, &toks, &nt) == INFER_OK);
    for (size_t i = 0; i < nt; ++i) {
      infer_token_logprob chosen{}, top[5] = {};
      size_t n_top = 0;
      REQUIRE(infer_request_logprobs(r, i, &chosen, top, 5, &n_top) == INFER_OK);
      CHECK(chosen.token == toks[i]);
      CHECK(n_top == 3);
      CHECK(top[0].logprob >= top[1].logprob);
      CHECK(top[1].logprob >= top[2].logprob);
      CHECK(chosen.logprob <= top[0].logprob + 1e-6f);
      CHECK(chosen.logprob <= 0);
    }
    CHECK(infer_request_logprobs(r, nt, nullptr, nullptr, 0, nullptr) == INFER_ERR_NOT_FOUND);
    infer_request_free(r);

    // Without a grammar, greedy decoding draws the top token every time.
    rp.grammar = nullptr;
    rp.max_tokens = 8;
    REQUIRE(infer_submit(engine, &rp, &r) == INFER_OK);
    REQUIRE(infer_engine_run(engine) == INFER_OK);
    REQUIRE(infer_request_tokens(r, &toks, &nt) == INFER_OK);
    REQUIRE(nt == 8);
    for (size_t i = 0; i < nt; ++i) {
      infer_token_logprob chosen{}, top[3] = {};
      REQUIRE(infer_request_logprobs(r, i, &chosen, top, 3, nullptr) == INFER_OK);
      CHECK(chosen.token == top[0].token);
      CHECK(chosen.logprob == top[0].logprob);
    }
    infer_request_free(r);
  }

  SECTION("bad grammars, schemas and logprobs are refused with a message") {
    infer_request_params rp;
    infer_request_params_init(&rp);
    rp.prompt = "Once";
    infer_request* r = nullptr;
    rp.grammar = "root ::= undefined-rule";
    CHECK(infer_submit(engine, &rp, &r) == INFER_ERR_INVALID_ARGUMENT);
    CHECK(r == nullptr);
    CHECK(std::string(infer_last_error()).find("undefined-rule") != std::string::npos);
    rp.grammar = nullptr;
    rp.json_schema = "{\"type\": \"tuple\"}";
    CHECK(infer_submit(engine, &rp, &r) == INFER_ERR_INVALID_ARGUMENT);
    CHECK(std::string(infer_last_error()).find("tuple") != std::string::npos);
    rp.grammar = "root ::= \"a\"";
    rp.json_schema = "{}";
    CHECK(infer_submit(engine, &rp, &r) == INFER_ERR_INVALID_ARGUMENT);
    rp.grammar = nullptr;
    rp.json_schema = nullptr;
    rp.logprobs = 101;
    CHECK(infer_submit(engine, &rp, &r) == INFER_ERR_INVALID_ARGUMENT);
    rp.logprobs = -1;
    REQUIRE(infer_submit(engine, &rp, &r) == INFER_OK);
    REQUIRE(infer_engine_run(engine) == INFER_OK);
    CHECK(infer_request_logprobs(r, 0, nullptr, nullptr, 0, nullptr) == INFER_ERR_INVALID_ARGUMENT);
    CHECK(infer_request_logprobs(nullptr, 0, nullptr, nullptr, 0, nullptr) == INFER_ERR_INVALID_ARGUMENT);
    infer_request_free(r);
    CHECK(infer_grammar_check("root ::= [a-z]+") == INFER_OK);
    CHECK(infer_grammar_check("root ::= [a-z") == INFER_ERR_INVALID_ARGUMENT);
    CHECK(infer_grammar_check(nullptr) == INFER_ERR_INVALID_ARGUMENT);
    CHECK(infer_json_schema_to_grammar("{", nullptr, 0, nullptr) == INFER_ERR_INVALID_ARGUMENT);
  }

  SECTION("metadata keys in file order") {
    const int32_t n = infer_model_meta_count(model);
    REQUIRE(n > 5);
    bool saw_arch = false;
    for (int32_t i = 0; i < n; ++i) {
      char key[256];
      size_t kn = 0;
      REQUIRE(infer_model_meta_key(model, i, key, sizeof key, &kn) == INFER_OK);
      saw_arch |= std::string(key) == "general.architecture";
      CHECK(infer_model_meta(model, key, nullptr, 0, &kn) != INFER_ERR_NOT_FOUND);
    }
    CHECK(saw_arch);
    CHECK(infer_model_meta_key(model, n, nullptr, 0, nullptr) == INFER_ERR_NOT_FOUND);
    CHECK(infer_model_meta_key(model, -1, nullptr, 0, nullptr) == INFER_ERR_NOT_FOUND);
    CHECK(infer_model_meta_count(nullptr) == 0);
  }
  infer_engine_free(engine);
  infer_model_free(model);
}

// Issue #27: every condition the matcher could fail on is refused when the
// grammar is compiled, so a request never fails in the middle of its text.
namespace {
std::string compile_error(const std::string& gbnf) {
  try {
    Grammar::parse(gbnf);
  } catch (const Error& e) {
    CHECK(e.status() == Status::InvalidArgument);
    return e.what();
  }
  return "no error";
}
std::string schema_error(const std::string& schema) {
  try {
    Grammar::parse(json_schema_to_gbnf(schema));
  } catch (const Error& e) {
    CHECK(e.status() == Status::InvalidArgument);
    return e.what();
  }
  return "no error";
}
}  // namespace

TEST_CASE("grammar: left recursion through nullable rules is refused at compile time", "[grammar]") {
  // Each of these used to compile, then fail ("left recursion") only once
  // the matcher reached the rule, after text was out.
  for (const char* g : {"root ::= \"x\" a\na ::= a \"b\" | \"c\"",       // reached only after a character
                        "root ::= \"x\" a\na ::= b a \"c\" | \"d\"\nb ::= \"y\"?",  // through a nullable rule
                        "root ::= \"x\" ( ( \"a\"* )* )*",              // nested stars
                        "root ::= \"x\" ( \"a\"? )+ \"b\"",
                        "root ::= \"x\" a\na ::= b\nb ::= c | \"q\"\nc ::= ( \"\" | \"z\" ) a"}) {
    INFO(g);
    CHECK_THAT(compile_error(g), Catch::Contains("left recursion"));
  }
  CHECK_THAT(compile_error("root ::= \"x\" a\na ::= \"y\" a"), Catch::Contains("can never end"));
}

TEST_CASE("grammar: JSON schema patterns the matcher cannot hold are refused at compile time", "[grammar]") {
  for (const char* pat : {"^((((a*)*)*)*)*$", "^(a*)*$", "^(a?)+$", "(b|a*)*", "^((a?){2,})+$"}) {
    INFO(pat);
    const std::string schema = std::string(R"({"type":"object","properties":{"a":{"type":"string","pattern":")") + pat +
                               R"("}},"required":["a"]})";
    const std::string e = schema_error(schema);
    CHECK_THAT(e, Catch::Contains("pattern"));
    CHECK_THAT(e, Catch::Contains("left recursion"));
  }
  // Bounded counts of something that can be empty: countless parses of one
  // text (the old matcher ran out of its budget mid-text). Refused.
  for (const char* pat : {"^((a{0,100}){0,100}){0,100}$", "^(((a{0,100}){0,100}){0,100}){0,100}$", "^(a?){0,50}$"}) {
    INFO(pat);
    CHECK_THAT(schema_error(std::string(R"({"type":"string","pattern":")") + pat + "\"}"),
               Catch::Contains("can match the empty text"));
  }
  CHECK_THAT(compile_error("root ::= ( [a-z]{0,50} ){0,50}"), Catch::Contains("can match the empty text"));
  // Non-empty items in counts, and a single optional empty-able item, are fine.
  CHECK(full_match("root ::= \"a\"{0,50} \"b\"{2,9} ( \"x\" \"y\"? ){0,5} ( \"c\"* )?", "aaabbxyxcc"));
  CHECK(schema_error(R"({"type":"string","pattern":"^(ab?){0,100}(c*)?$"})") == "no error");
}

TEST_CASE("grammar: a long chain of nullable rules matches without deep recursion", "[grammar]") {
  // 250 optional items in a row, and a right recursion whose pending tail
  // grows with the text: the old matcher counted both as nesting and failed
  // past 256 ("left recursion") in the middle of the text.
  std::string g = "root ::=";
  for (int i = 0; i < 250; ++i) g += " \"a\"?";
  g += " \"b\"";
  CHECK(full_match(g, "b"));
  CHECK(full_match(g, "aaab"));
  const std::string tail = "root ::= \"x\" root e | \"y\"\ne ::= \"\" | \"z\"";
  std::string text(400, 'x');
  text += "y";
  CHECK(full_match(tail, text));
}

TEST_CASE("grammar: JSON schema depth, size and $ref cycles are bounded", "[grammar]") {
  std::string deep;
  for (int i = 0; i < 100000; ++i) deep += "{\"items\":";
  deep += "{}" + std::string(100000, '}');
  CHECK_THAT(schema_error(deep), Catch::Contains("nested too deeply"));
  CHECK_THAT(schema_error(deep + std::string(100000, ' ')), Catch::Contains("longer than 1 MiB"));
  deep.clear();
  for (int i = 0; i < 20000; ++i) deep += "[";
  CHECK_THAT(schema_error("{\"x\":" + deep + "}"), Catch::Contains("nested too deeply"));
  // 70 nested array schemas: within the JSON limit, beyond the schema walk's.
  deep.clear();
  for (int i = 0; i < 62; ++i) deep += "{\"items\":";
  deep += "{}" + std::string(62, '}');
  CHECK(schema_error(deep) == "no error");
  // $ref chains and cycles.
  CHECK_THAT(schema_error(R"({"$defs":{"a":{"$ref":"#/$defs/b"},"b":{"$ref":"#/$defs/a"}},"$ref":"#/$defs/a"})"),
             Catch::Contains("cycle"));
  CHECK_THAT(schema_error(R"({"$ref":"#"})"), Catch::Contains("cycle"));
  CHECK_THAT(schema_error(R"({"anyOf":[{"$ref":"#"}]})"), Catch::Contains("never end"));
  std::string chain = R"({"$defs":{)";
  for (int i = 0; i < 100; ++i) chain += "\"d" + std::to_string(i) + "\":{\"$ref\":\"#/$defs/d" + std::to_string(i + 1) + "\"},";
  chain += R"("d100":{"type":"integer"}},"$ref":"#/$defs/d0"})";
  CHECK_THAT(schema_error(chain), Catch::Contains("nested too deeply"));
  // A recursive schema that can end is fine.
  CHECK(schema_error(R"({"$defs":{"n":{"type":"object","properties":{"next":{"anyOf":[{"$ref":"#/$defs/n"},{"type":"null"}]}}}},"$ref":"#/$defs/n"})") ==
        "no error");
  // Type lists inside type lists would visit the schema exponentially often.
  std::string types = "{}";
  for (int i = 0; i < 25; ++i) types = R"({"type":["array","array"],"items":)" + types + "}";
  CHECK_THAT(schema_error(types), Catch::Contains("too many rules"));
}

TEST_CASE("C API: logit_bias that bans every token is refused at submit", "[grammar][capi]") {
  REQUIRE_SHARED(path, "models/stories260K.gguf");
  infer_model* model = nullptr;
  REQUIRE(infer_model_load(path.c_str(), nullptr, &model) == INFER_OK);
  infer_engine_params ep;
  infer_engine_params_init(&ep);
  ep.n_threads = 1;
  infer_engine* engine = nullptr;
  REQUIRE(infer_engine_create(model, &ep, &engine) == INFER_OK);
  infer_model_info info;
  infer_model_info_init(&info);
  REQUIRE(infer_model_get_info(model, &info) == INFER_OK);
  const int32_t n_vocab = info.n_vocab;
  std::vector<int32_t> ids;
  std::vector<float> values;
  for (int32_t i = 0; i < n_vocab; ++i) {
    ids.push_back(i);
    values.push_back(i % 2 ? -INFINITY : -3e38f);  // both ban in effect
  }
  infer_sampling_params sp;
  infer_sampling_params_init(&sp);
  sp.logit_bias_tokens = ids.data();
  sp.logit_bias_values = values.data();
  sp.n_logit_bias = ids.size();
  infer_request_params rp;
  infer_request_params_init(&rp);
  rp.prompt = "Once";
  rp.max_tokens = 2;
  rp.sampling = &sp;
  infer_request* req = nullptr;
  CHECK(infer_submit(engine, &rp, &req) == INFER_ERR_INVALID_ARGUMENT);
  CHECK_THAT(std::string(infer_last_error()), Catch::Contains("logit_bias"));
  CHECK(req == nullptr);
  // One token left possible: accepted and drawn.
  values[5] = 0.0f;
  REQUIRE(infer_submit(engine, &rp, &req) == INFER_OK);
  REQUIRE(infer_engine_run(engine) == INFER_OK);
  infer_request_free(req);
  infer_engine_free(engine);
  infer_model_free(model);
}
