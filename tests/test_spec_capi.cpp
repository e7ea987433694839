// Speculative decoding through the C API: engine parameters, the per-request
// cap, the counters in request and engine statistics, refusals, and callers
// built before the speculative fields existed.
#include <catch2/catch.hpp>

#include <cstddef>
#include <string>
#include <vector>

#include "infer/infer.h"
#include "sampling/grammar.h"
#include "test_util.h"

namespace {

struct Out {
  std::vector<int32_t> tokens;
  infer_request_stats stats;
};

// Greedy continuation of `prompt` with the given engine parameters.
std::vector<Out> run(infer_model* m, const infer_engine_params& ep, const std::vector<int32_t>& spec_max_draft) {
  infer_engine* e = nullptr;
  REQUIRE(infer_engine_create(m, &ep, &e) == INFER_OK);
  infer_sampling_params sp;
  infer_sampling_params_init(&sp);
  sp.temperature = 0;
  std::vector<infer_request*> rs;
  for (int32_t cap : spec_max_draft) {
    infer_request_params rp;
    infer_request_params_init(&rp);
    rp.prompt = "Once upon a time, there was a little girl named Lily. Once upon a time";
    rp.max_tokens = 60;
    rp.ignore_eos = 1;
    rp.sampling = &sp;
    rp.spec_max_draft = cap;
    infer_request* r = nullptr;
    REQUIRE(infer_submit(e, &rp, &r) == INFER_OK);
    rs.push_back(r);
  }
  REQUIRE(infer_engine_run(e) == INFER_OK);
  std::vector<Out> out;
  for (infer_request* r : rs) {
    Out o;
    const int32_t* t = nullptr;
    size_t n = 0;
    REQUIRE(infer_request_tokens(r, &t, &n) == INFER_OK);
    o.tokens.assign(t, t + n);
    infer_request_stats_init(&o.stats);
    REQUIRE(infer_request_get_stats(r, &o.stats) == INFER_OK);
    out.push_back(o);
    infer_request_free(r);
  }
  infer_engine_stats es;
  infer_engine_stats_init(&es);
  REQUIRE(infer_engine_get_stats(e, &es) == INFER_OK);
  uint64_t drafted = 0, accepted = 0, at = 0;
  for (const Out& o : out) {
    drafted += o.stats.draft_tokens;
    accepted += o.stats.accepted_tokens;
  }
  CHECK(es.draft_tokens == drafted);
  CHECK(es.accepted_tokens == accepted);
  for (int i = 0; i < 16; ++i) at += es.draft_tokens_at[i];
  CHECK(at == es.draft_tokens);
  infer_engine_free(e);
  return out;
}

}  // namespace

TEST_CASE("C API: speculative decoding parameters, per-request cap and counters", "[spec_capi]") {
  REQUIRE_SHARED(path, "models/stories260K.gguf");
  infer_model* m = nullptr;
  REQUIRE(infer_model_load(path.c_str(), nullptr, &m) == INFER_OK);
  infer_engine_params ep;
  infer_engine_params_init(&ep);
  CHECK(ep.spec == INFER_SPEC_NONE);
  CHECK(ep.spec_k == 4);
  const std::vector<Out> plain = run(m, ep, {-1, -1, -1});
  for (const Out& o : plain) CHECK(o.stats.draft_tokens == 0);

  for (infer_spec_method method : {INFER_SPEC_NGRAM, INFER_SPEC_LAYERSKIP}) {
    CAPTURE(method);
    infer_engine_params sp = ep;
    sp.spec = method;
    sp.spec_skip_layers = "4";
    // Requests: the engine's length, off, at most 1.
    const std::vector<Out> spec = run(m, sp, {-1, 0, 1});
    for (size_t i = 0; i < spec.size(); ++i) CHECK(spec[i].tokens == plain[i].tokens);
    CHECK(spec[0].stats.draft_tokens > 0);
    CHECK(spec[0].stats.accepted_tokens <= spec[0].stats.draft_tokens);
    CHECK(spec[0].stats.acceptance_rate ==
          Approx(double(spec[0].stats.accepted_tokens) / double(spec[0].stats.draft_tokens)));
    CHECK(spec[0].stats.mean_accepted_length >= 1.0);
    CHECK(spec[1].stats.draft_tokens == 0);  // spec_max_draft = 0
    CHECK(spec[2].stats.draft_tokens > 0);
    CHECK(spec[2].stats.draft_tokens_at[1] == 0);  // never more than one draft per step
  }

  // A draft model (the target itself: every draft agrees).
  {
    infer_model* d = nullptr;
    REQUIRE(infer_model_load(path.c_str(), nullptr, &d) == INFER_OK);
    infer_engine_params sp = ep;
    sp.spec = INFER_SPEC_DRAFT;
    sp.draft_model = d;
    const std::vector<Out> spec = run(m, sp, {-1, 0});
    for (size_t i = 0; i < spec.size(); ++i) CHECK(spec[i].tokens == plain[i].tokens);
    CHECK(spec[0].stats.draft_tokens > 0);
    CHECK(spec[0].stats.accepted_tokens == spec[0].stats.draft_tokens);
    CHECK(spec[1].stats.draft_tokens == 0);
    infer_model_free(d);
    REQUIRE_SHARED(other, "models/llama-2-tiny-random.gguf");
    REQUIRE(infer_model_load(other.c_str(), nullptr, &d) == INFER_OK);
    sp.draft_model = d;
    infer_engine* e = nullptr;
    CHECK(infer_engine_create(m, &sp, &e) == INFER_ERR_INVALID_ARGUMENT);
    CHECK(std::string(infer_last_error()).find("vocabulary") != std::string::npos);
    sp.draft_model = nullptr;
    CHECK(infer_engine_create(m, &sp, &e) == INFER_ERR_INVALID_ARGUMENT);
    infer_model_free(d);
  }

  // Refusals, and the engine stays usable.
  infer_engine* e = nullptr;
  infer_engine_params bad = ep;
  bad.spec = static_cast<infer_spec_method>(9);
  CHECK(infer_engine_create(m, &bad, &e) == INFER_ERR_INVALID_ARGUMENT);
  bad = ep;
  bad.spec = INFER_SPEC_LAYERSKIP;  // no layers given
  CHECK(infer_engine_create(m, &bad, &e) == INFER_ERR_INVALID_ARGUMENT);
  bad.spec_skip_layers = "0-99";
  CHECK(infer_engine_create(m, &bad, &e) == INFER_ERR_INVALID_ARGUMENT);
  CHECK(std::string(infer_last_error()).find("out of range") != std::string::npos);
  bad = ep;
  bad.spec = INFER_SPEC_NGRAM;
  bad.spec_k = 0;
  CHECK(infer_engine_create(m, &bad, &e) == INFER_ERR_INVALID_ARGUMENT);
  CHECK(e == nullptr);
  REQUIRE(infer_engine_create(m, &ep, &e) == INFER_OK);
  infer_request_params rp;
  infer_request_params_init(&rp);
  CHECK(rp.spec_max_draft == -1);
  rp.prompt = "Hi";
  rp.spec_max_draft = 33;
  infer_request* r = nullptr;
  CHECK(infer_submit(e, &rp, &r) == INFER_ERR_INVALID_ARGUMENT);
  infer_engine_free(e);

  // A caller built before the speculative fields: they take their defaults.
  infer_engine_params old;
  infer_engine_params_init(&old);
  old.spec = INFER_SPEC_NGRAM;  // beyond the old struct: must be ignored
  old.struct_size = offsetof(infer_engine_params, spec);
  REQUIRE(infer_engine_create(m, &old, &e) == INFER_OK);
  infer_engine_free(e);
  infer_model_free(m);
}

namespace {

struct Constrained {
  std::vector<int32_t> tokens;
  std::vector<infer_token_logprob> chosen;
  std::vector<infer_token_logprob> top;  // 3 per token
  std::string text;
  uint64_t drafted = 0;
};

// A grammar-constrained request with log-probabilities, greedy or sampled.
Constrained constrained(infer_model* m, const infer_engine_params& ep, const char* schema, float temp) {
  infer_engine* e = nullptr;
  REQUIRE(infer_engine_create(m, &ep, &e) == INFER_OK);
  infer_sampling_params sp;
  infer_sampling_params_init(&sp);
  sp.temperature = temp;
  sp.seed = 11;
  infer_request_params rp;
  infer_request_params_init(&rp);
  rp.prompt = "Once upon a time, there was a little girl named Lily. Once upon a time";
  rp.max_tokens = 40;
  rp.sampling = &sp;
  rp.logprobs = 3;
  rp.json_schema = schema;
  infer_request* r = nullptr;
  REQUIRE(infer_submit(e, &rp, &r) == INFER_OK);
  REQUIRE(infer_engine_run(e) == INFER_OK);
  Constrained c;
  const int32_t* t = nullptr;
  size_t n = 0;
  REQUIRE(infer_request_tokens(r, &t, &n) == INFER_OK);
  c.tokens.assign(t, t + n);
  for (size_t i = 0; i < n; ++i) {
    infer_token_logprob ch, top[3];
    size_t n_top = 0;
    REQUIRE(infer_request_logprobs(r, i, &ch, top, 3, &n_top) == INFER_OK);
    CHECK(ch.token == c.tokens[i]);
    c.chosen.push_back(ch);
    for (size_t k = 0; k < n_top && k < 3; ++k) c.top.push_back(top[k]);
  }
  char buf[4096];
  size_t need = 0;
  int32_t fin = 0;
  REQUIRE(infer_request_next_text(r, 0, buf, sizeof buf, &need, &fin) == INFER_OK);
  c.text.assign(buf, need);
  infer_request_stats st;
  infer_request_stats_init(&st);
  REQUIRE(infer_request_get_stats(r, &st) == INFER_OK);
  c.drafted = st.draft_tokens;
  infer_request_free(r);
  infer_engine_free(e);
  return c;
}

bool same_logprobs(const std::vector<infer_token_logprob>& a, const std::vector<infer_token_logprob>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i].token != b[i].token || a[i].logprob != b[i].logprob) return false;
  return true;
}

}  // namespace

TEST_CASE("C API: grammar-constrained requests with log-probabilities speculate losslessly", "[spec_capi]") {
  REQUIRE_SHARED(path, "models/stories260K.gguf");
  infer_model* m = nullptr;
  REQUIRE(infer_model_load(path.c_str(), nullptr, &m) == INFER_OK);
  // An object whose string values the model can fill with story text, and
  // whose "n" the grammar forces to digits: drafts from the story text are
  // often accepted inside the strings and rejected at the structure.
  const char* schema = R"({"type": "object", "properties": {"who": {"type": "string", "maxLength": 40},
      "n": {"type": "integer", "minimum": 0, "maximum": 99}, "what": {"type": "string", "maxLength": 60}},
      "required": ["who", "n", "what"]})";
  infer_engine_params ep;
  infer_engine_params_init(&ep);
  ep.spec_max_batch = 0;
  const Constrained plain = constrained(m, ep, schema, 0);
  REQUIRE(plain.tokens.size() > 5);
  for (infer_spec_method method : {INFER_SPEC_NGRAM, INFER_SPEC_LAYERSKIP}) {
    infer_engine_params sp = ep;
    sp.spec = method;
    sp.spec_skip_layers = "3-4";
    sp.spec_ngram_min = 1;
    INFO("method " << static_cast<int>(method));
    const Constrained spec = constrained(m, sp, schema, 0);
    CHECK(spec.drafted > 0);  // it did speculate
    CHECK(spec.tokens == plain.tokens);
    CHECK(spec.text == plain.text);
    CHECK(same_logprobs(spec.chosen, plain.chosen));
    CHECK(same_logprobs(spec.top, plain.top));
  }
  // Sampled: the output still follows the grammar (a prefix of a sentence
  // of it, whole when it ended by itself), reproducibly.
  infer_engine_params sp = ep;
  sp.spec = INFER_SPEC_LAYERSKIP;
  sp.spec_skip_layers = "3-4";
  const Constrained s1 = constrained(m, sp, schema, 0.9f), s2 = constrained(m, sp, schema, 0.9f);
  CHECK(s1.tokens == s2.tokens);
  CHECK(s1.drafted > 0);
  REQUIRE_FALSE(s1.text.empty());
  infer::GrammarMatcher gm(infer::Grammar::parse(infer::json_schema_to_gbnf(schema)));
  CHECK(gm.advance(s1.text));
  CHECK(s1.text.find("\"who\"") != std::string::npos);
  CHECK(s1.chosen.size() == s1.tokens.size());
  infer_model_free(m);
}
