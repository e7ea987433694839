// Speculative decoding through the C API: engine parameters, the per-request
// cap, the counters in request and engine statistics, refusals, and callers
// built before the speculative fields existed.
#include <catch2/catch.hpp>

#include <cstddef>
#include <string>
#include <vector>

#include "infer/infer.h"
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
