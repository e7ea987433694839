// The C API of embeddings and reranking (infer.h, since 1.5) on the synth
// presets tiny-bert, tiny-bert-rerank and tiny: argument checks, synchronous
// against asynchronous results, caller buffers, cancel and free of
// unfinished jobs, rerank without a head, generation on an encoder.
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "infer/infer.h"
#include "test_util.h"

namespace {

std::string synth(const char* preset) {
  const std::string path = infer_test::temp_dir() + "/capi-embed-" + preset + ".gguf";
  infer_synth_params sp;
  infer_synth_params_init(&sp);
  sp.preset = preset;
  sp.type = "f32";
  sp.n_threads = 2;
  REQUIRE(infer_synth(path.c_str(), &sp, nullptr) == INFER_OK);
  return path;
}

// A loaded model, freed at scope end.
struct ModelHandle {
  infer_model* m = nullptr;
  explicit ModelHandle(const char* preset) {
    const std::string path = synth(preset);
    const infer_status st = infer_model_load(path.c_str(), nullptr, &m);
    INFO(infer_last_error());
    REQUIRE(st == INFER_OK);
  }
  ~ModelHandle() { infer_model_free(m); }
};

struct Emb {
  infer_embeddings* e = nullptr;
  ~Emb() { infer_embeddings_free(e); }
};

std::vector<float> rows_of(const infer_embeddings* e) {
  const float* d = infer_embeddings_data(e);
  REQUIRE(d);
  return std::vector<float>(d, d + infer_embeddings_rows(e) * infer_embeddings_dim(e));
}

bool mentions(const char* what) { return std::strstr(infer_last_error(), what) != nullptr; }

const char* kTexts[] = {"hello world", "the quick brown fox jumps over the lazy dog", "a"};

}  // namespace

TEST_CASE("C API embed: parameters and argument checks", "[embed][capi]") {
  infer_embed_params p;
  infer_embed_params_init(&p);
  CHECK(p.struct_size == sizeof p);
  CHECK(p.pooling == INFER_POOLING_DEFAULT);
  CHECK(p.normalize == 2);
  CHECK(p.dimensions == 0);
  CHECK(p.truncate == 0);

  ModelHandle bert("tiny-bert");
  Emb r;
  // NULLs
  CHECK(infer_embed(nullptr, kTexts, nullptr, 1, nullptr, &r.e) == INFER_ERR_INVALID_ARGUMENT);
  CHECK(infer_embed(bert.m, kTexts, nullptr, 1, nullptr, nullptr) == INFER_ERR_INVALID_ARGUMENT);
  CHECK(infer_embed(bert.m, nullptr, nullptr, 1, nullptr, &r.e) == INFER_ERR_INVALID_ARGUMENT);
  const char* with_null[] = {"x", nullptr};
  CHECK(infer_embed(bert.m, with_null, nullptr, 2, nullptr, &r.e) == INFER_ERR_INVALID_ARGUMENT);
  CHECK(mentions("text 1 is NULL"));
  // counts
  CHECK(infer_embed(bert.m, kTexts, nullptr, 0, nullptr, &r.e) == INFER_ERR_INVALID_ARGUMENT);
  CHECK(mentions("n_texts"));
  CHECK(infer_embed(bert.m, kTexts, nullptr, -1, nullptr, &r.e) == INFER_ERR_INVALID_ARGUMENT);
  CHECK(infer_embed(bert.m, kTexts, nullptr, 1000001, nullptr, &r.e) == INFER_ERR_INVALID_ARGUMENT);
  // empty text, by NUL and by length
  const char* empty[] = {"x", ""};
  CHECK(infer_embed(bert.m, empty, nullptr, 2, nullptr, &r.e) == INFER_ERR_INVALID_ARGUMENT);
  CHECK(mentions("text 1 is empty"));
  const size_t lens[] = {1, 0};
  CHECK(infer_embed(bert.m, kTexts, lens, 2, nullptr, &r.e) == INFER_ERR_INVALID_ARGUMENT);
  CHECK(r.e == nullptr);
  // ill-formed parameters
  infer_embed_params bad = p;
  bad.struct_size = 2;
  CHECK(infer_embed(bert.m, kTexts, nullptr, 1, &bad, &r.e) == INFER_ERR_INVALID_ARGUMENT);
  CHECK(mentions("struct_size"));
  bad = p;
  bad.pooling = static_cast<infer_pooling>(7);
  CHECK(infer_embed(bert.m, kTexts, nullptr, 1, &bad, &r.e) == INFER_ERR_INVALID_ARGUMENT);
  bad = p;
  bad.normalize = 1;
  CHECK(infer_embed(bert.m, kTexts, nullptr, 1, &bad, &r.e) == INFER_ERR_INVALID_ARGUMENT);
  bad = p;
  bad.dimensions = 65;  // tiny-bert has 64
  CHECK(infer_embed(bert.m, kTexts, nullptr, 1, &bad, &r.e) == INFER_ERR_INVALID_ARGUMENT);
  bad = p;
  bad.n_threads = 1025;
  CHECK(infer_embed(bert.m, kTexts, nullptr, 1, &bad, &r.e) == INFER_ERR_INVALID_ARGUMENT);
  CHECK(r.e == nullptr);

  // token ids: out of the vocabulary, empty input, NULL arrays
  const int32_t ok_ids[] = {2, 5, 3};
  const int32_t bad_ids[] = {2, 1000000, 3};
  const int32_t* ids[] = {ok_ids, bad_ids};
  const size_t n_ids[] = {3, 3};
  CHECK(infer_embed_tokens(bert.m, ids, n_ids, 2, nullptr, &r.e) == INFER_ERR_INVALID_ARGUMENT);
  CHECK(std::strlen(infer_last_error()) > 0);
  const int32_t neg_ids[] = {-1};
  const int32_t* ids2[] = {neg_ids};
  const size_t n1[] = {1};
  CHECK(infer_embed_tokens(bert.m, ids2, n1, 1, nullptr, &r.e) == INFER_ERR_INVALID_ARGUMENT);
  const size_t n0[] = {0};
  CHECK(infer_embed_tokens(bert.m, ids, n0, 1, nullptr, &r.e) == INFER_ERR_INVALID_ARGUMENT);
  CHECK(infer_embed_tokens(bert.m, nullptr, n_ids, 1, nullptr, &r.e) == INFER_ERR_INVALID_ARGUMENT);
  CHECK(infer_embed_tokens(bert.m, ids, nullptr, 1, nullptr, &r.e) == INFER_ERR_INVALID_ARGUMENT);
  CHECK(r.e == nullptr);
  // valid ids pass
  CHECK(infer_embed_tokens(bert.m, ids, n_ids, 1, nullptr, &r.e) == INFER_OK);
  CHECK(infer_embeddings_rows(r.e) == 1);
  CHECK(infer_embeddings_n_tokens(r.e) == 3);

  // NULL handles are harmless
  CHECK(infer_embeddings_dim(nullptr) == 0);
  CHECK(infer_embeddings_rows(nullptr) == 0);
  CHECK(infer_embeddings_data(nullptr) == nullptr);
  CHECK(std::string(infer_embeddings_error(nullptr)).empty());
  CHECK(infer_embeddings_wait(nullptr, 0, nullptr) == INFER_ERR_INVALID_ARGUMENT);
  CHECK(infer_embeddings_copy(nullptr, nullptr, 0, nullptr) == INFER_ERR_INVALID_ARGUMENT);
  infer_embeddings_free(nullptr);
}

TEST_CASE("C API embed: vectors, pooling, dimensions, truncation and caller buffers", "[embed][capi]") {
  ModelHandle bert("tiny-bert");
  Emb r;
  REQUIRE(infer_embed(bert.m, kTexts, nullptr, 3, nullptr, &r.e) == INFER_OK);
  CHECK(infer_embeddings_dim(r.e) == 64);
  CHECK(infer_embeddings_rows(r.e) == 3);
  CHECK(infer_embeddings_pooling(r.e) == INFER_POOLING_MEAN);  // the preset's
  CHECK(infer_embeddings_n_tokens(r.e) > 6);
  int32_t fin = 0;
  CHECK(infer_embeddings_wait(r.e, 0, &fin) == INFER_OK);
  CHECK(fin == 1);  // synchronous: finished from the start
  const std::vector<float> v = rows_of(r.e);
  for (int row = 0; row < 3; ++row) {
    double n2 = 0;
    for (int j = 0; j < 64; ++j) n2 += double(v[row * 64 + j]) * v[row * 64 + j];
    CHECK(std::fabs(std::sqrt(n2) - 1.0) < 1e-4);
  }
  int64_t first = -1;
  int32_t n_rows = -1;
  CHECK(infer_embeddings_input_rows(r.e, 2, &first, &n_rows) == INFER_OK);
  CHECK(first == 2);
  CHECK(n_rows == 1);
  CHECK(infer_embeddings_input_rows(r.e, 3, &first, &n_rows) == INFER_ERR_INVALID_ARGUMENT);
  CHECK(infer_embeddings_input_rows(r.e, -1, &first, &n_rows) == INFER_ERR_INVALID_ARGUMENT);

  // copy into caller memory
  size_t needed = 0;
  std::vector<float> buf(3 * 64 - 1, -7.0f);
  CHECK(infer_embeddings_copy(r.e, buf.data(), buf.size(), &needed) == INFER_ERR_BUFFER_TOO_SMALL);
  CHECK(needed == 3 * 64);
  CHECK(buf[0] == -7.0f);
  CHECK(infer_embeddings_copy(r.e, nullptr, 0, &needed) == INFER_ERR_BUFFER_TOO_SMALL);
  CHECK(needed == 3 * 64);
  buf.resize(needed);
  CHECK(infer_embeddings_copy(r.e, buf.data(), buf.size(), &needed) == INFER_OK);
  CHECK(buf == v);

  // explicit byte lengths: only the first 5 bytes of text 1 and "hello world"
  const size_t lens[] = {11, 5};
  const char* two[] = {"hello world, and more", "hello world"};
  Emb cut;
  REQUIRE(infer_embed(bert.m, two, lens, 2, nullptr, &cut.e) == INFER_OK);
  const std::vector<float> c = rows_of(cut.e);
  for (int j = 0; j < 64; ++j) CHECK(c[j] == Approx(v[j]).margin(1e-6));  // "hello world" both ways

  // Matryoshka: the first 16 values, renormalized
  infer_embed_params p;
  infer_embed_params_init(&p);
  p.dimensions = 16;
  p.normalize = 0;
  Emb small;
  REQUIRE(infer_embed(bert.m, kTexts, nullptr, 1, &p, &small.e) == INFER_OK);
  CHECK(infer_embeddings_dim(small.e) == 16);
  // pooling none: a row per token, [CLS] ... [SEP] included
  p = {};
  infer_embed_params_init(&p);
  p.pooling = INFER_POOLING_NONE;
  Emb none;
  REQUIRE(infer_embed(bert.m, kTexts, nullptr, 2, &p, &none.e) == INFER_OK);
  CHECK(infer_embeddings_pooling(none.e) == INFER_POOLING_NONE);
  CHECK(infer_embeddings_rows(none.e) == infer_embeddings_n_tokens(none.e));
  CHECK(infer_embeddings_input_rows(none.e, 1, &first, &n_rows) == INFER_OK);
  CHECK(first + n_rows == infer_embeddings_rows(none.e));

  // too long: refused without truncate, cut with it
  std::string long_text;
  for (int i = 0; i < 400; ++i) long_text += "hello world ";
  const char* longs[] = {"a", long_text.c_str()};
  Emb lr;
  CHECK(infer_embed(bert.m, longs, nullptr, 2, nullptr, &lr.e) == INFER_ERR_INVALID_ARGUMENT);
  CHECK(mentions("1"));
  CHECK(lr.e == nullptr);
  infer_embed_params_init(&p);
  p.truncate = 1;
  REQUIRE(infer_embed(bert.m, longs, nullptr, 2, &p, &lr.e) == INFER_OK);
  CHECK(infer_embeddings_rows(lr.e) == 2);
  CHECK(infer_embeddings_n_tokens(lr.e) <= 1 + 128 + 2);
}

TEST_CASE("C API embed: the engine's jobs give the synchronous vectors", "[embed][capi]") {
  ModelHandle bert("tiny-bert");
  Emb sync;
  REQUIRE(infer_embed(bert.m, kTexts, nullptr, 3, nullptr, &sync.e) == INFER_OK);
  const std::vector<float> want = rows_of(sync.e);

  for (int threaded = 0; threaded < 2; ++threaded) {
    INFO("threaded " << threaded);
    infer_engine* eng = nullptr;
    REQUIRE(infer_engine_create(bert.m, nullptr, &eng) == INFER_OK);
    if (threaded) REQUIRE(infer_engine_start(eng) == INFER_OK);
    Emb a;
    REQUIRE(infer_embed_submit(eng, kTexts, nullptr, 3, nullptr, &a.e) == INFER_OK);
    CHECK(infer_embeddings_pooling(a.e) == INFER_POOLING_MEAN);
    if (!threaded) {
      // not stepped yet: nothing to read
      int32_t fin = 1;
      CHECK(infer_embeddings_wait(a.e, 0, &fin) == INFER_OK);
      CHECK(fin == 0);
      CHECK(infer_embeddings_rows(a.e) == 0);
      CHECK(infer_embeddings_data(a.e) == nullptr);
      int64_t first = 0;
      CHECK(infer_embeddings_input_rows(a.e, 0, &first, nullptr) == INFER_ERR_BUSY);
      float f;
      CHECK(infer_embeddings_copy(a.e, &f, 1, nullptr) == INFER_ERR_BUSY);
      REQUIRE(infer_engine_run(eng) == INFER_OK);
    }
    int32_t fin = 0;
    CHECK(infer_embeddings_wait(a.e, -1, &fin) == INFER_OK);
    CHECK(fin == 1);
    const std::vector<float> got = rows_of(a.e);
    REQUIRE(got.size() == want.size());
    for (size_t i = 0; i < got.size(); ++i) CHECK(got[i] == Approx(want[i]).margin(1e-5));
    CHECK(infer_embeddings_n_tokens(a.e) == infer_embeddings_n_tokens(sync.e));

    // submission errors come back at once, nothing queued
    Emb b;
    CHECK(infer_embed_submit(eng, kTexts, nullptr, 0, nullptr, &b.e) == INFER_ERR_INVALID_ARGUMENT);
    const int32_t bad_ids[] = {2, 999999};
    const int32_t* ids[] = {bad_ids};
    const size_t n_ids[] = {2};
    CHECK(infer_embed_submit_tokens(eng, ids, n_ids, 1, nullptr, &b.e) == INFER_ERR_INVALID_ARGUMENT);
    CHECK(infer_rerank_submit(eng, "q", kTexts, 1, nullptr, &b.e) == INFER_ERR_INVALID_ARGUMENT);  // no head
    CHECK(b.e == nullptr);

    // generation is refused on an encoder-only model
    infer_request_params rp;
    infer_request_params_init(&rp);
    rp.prompt = "hello";
    rp.max_tokens = 2;
    infer_request* req = nullptr;
    CHECK(infer_submit(eng, &rp, &req) == INFER_ERR_INVALID_ARGUMENT);
    CHECK(mentions("embedding model"));
    CHECK(req == nullptr);
    infer_engine_free(eng);
  }
}

TEST_CASE("C API embed: cancel and free of unfinished jobs", "[embed][capi]") {
  ModelHandle bert("tiny-bert");
  infer_engine* eng = nullptr;
  REQUIRE(infer_engine_create(bert.m, nullptr, &eng) == INFER_OK);
  // caller-stepped engine: the jobs stay unfinished until stepped
  infer_embeddings *a = nullptr, *b = nullptr, *c = nullptr;
  REQUIRE(infer_embed_submit(eng, kTexts, nullptr, 3, nullptr, &a) == INFER_OK);
  REQUIRE(infer_embed_submit(eng, kTexts, nullptr, 2, nullptr, &b) == INFER_OK);
  REQUIRE(infer_embed_submit(eng, kTexts, nullptr, 1, nullptr, &c) == INFER_OK);
  CHECK(infer_embeddings_cancel(a) == INFER_OK);
  infer_embeddings_free(b);  // unfinished: cancelled, and the engine still holds the job safely
  REQUIRE(infer_engine_run(eng) == INFER_OK);
  int32_t fin = 0;
  CHECK(infer_embeddings_wait(a, -1, &fin) == INFER_ERR_CANCELLED);
  CHECK(fin == 1);
  CHECK(infer_embeddings_rows(a) == 0);
  CHECK(infer_embeddings_data(a) == nullptr);
  CHECK(infer_embeddings_copy(a, nullptr, 0, nullptr) == INFER_ERR_CANCELLED);
  CHECK(std::strlen(infer_embeddings_error(a)) > 0);
  CHECK(infer_embeddings_wait(c, -1, &fin) == INFER_OK);
  CHECK(infer_embeddings_rows(c) == 1);
  CHECK(std::string(infer_embeddings_error(c)).empty());
  infer_embeddings_free(a);
  infer_embeddings_free(c);

  // a job left unfinished when the engine goes: freed after the engine, it is cancelled
  infer_embeddings* d = nullptr;
  REQUIRE(infer_embed_submit(eng, kTexts, nullptr, 1, nullptr, &d) == INFER_OK);
  infer_engine_free(eng);
  CHECK(infer_embeddings_wait(d, 1000, &fin) == INFER_ERR_CANCELLED);
  CHECK(fin == 1);
  infer_embeddings_free(d);
}

TEST_CASE("C API rerank: scores with a head, refused without one", "[embed][capi]") {
  ModelHandle rr("tiny-bert-rerank");
  const char* docs[] = {"the fox", "a dog", "hello"};
  Emb r;
  REQUIRE(infer_rerank(rr.m, "quick fox", docs, 3, nullptr, &r.e) == INFER_OK);
  CHECK(infer_embeddings_pooling(r.e) == INFER_POOLING_RANK);
  CHECK(infer_embeddings_dim(r.e) == 1);
  CHECK(infer_embeddings_rows(r.e) == 3);
  const std::vector<float> s = rows_of(r.e);
  // order-independent per document: the second alone gives its score
  Emb one;
  REQUIRE(infer_rerank(rr.m, "quick fox", docs + 1, 1, nullptr, &one.e) == INFER_OK);
  CHECK(rows_of(one.e)[0] == Approx(s[1]).margin(1e-5));
  // the engine's form agrees
  infer_engine* eng = nullptr;
  REQUIRE(infer_engine_create(rr.m, nullptr, &eng) == INFER_OK);
  Emb a;
  REQUIRE(infer_rerank_submit(eng, "quick fox", docs, 3, nullptr, &a.e) == INFER_OK);
  REQUIRE(infer_engine_run(eng) == INFER_OK);
  CHECK(infer_embeddings_wait(a.e, -1, nullptr) == INFER_OK);
  const std::vector<float> sa = rows_of(a.e);
  REQUIRE(sa.size() == s.size());
  for (size_t i = 0; i < s.size(); ++i) CHECK(sa[i] == Approx(s[i]).margin(1e-5));
  infer_engine_free(eng);

  // argument checks
  Emb bad;
  CHECK(infer_rerank(rr.m, nullptr, docs, 1, nullptr, &bad.e) == INFER_ERR_INVALID_ARGUMENT);
  CHECK(infer_rerank(rr.m, "", docs, 1, nullptr, &bad.e) == INFER_ERR_INVALID_ARGUMENT);
  CHECK(infer_rerank(rr.m, "q", docs, 0, nullptr, &bad.e) == INFER_ERR_INVALID_ARGUMENT);
  const char* empty_doc[] = {""};
  CHECK(infer_rerank(rr.m, "q", empty_doc, 1, nullptr, &bad.e) == INFER_ERR_INVALID_ARGUMENT);
  infer_embed_params p;
  infer_embed_params_init(&p);
  p.pooling = INFER_POOLING_MEAN;
  CHECK(infer_rerank(rr.m, "q", docs, 1, &p, &bad.e) == INFER_ERR_INVALID_ARGUMENT);
  CHECK(mentions("DEFAULT or RANK"));
  CHECK(bad.e == nullptr);

  // a model without a classifier head
  ModelHandle bert("tiny-bert");
  CHECK(infer_rerank(bert.m, "q", docs, 1, nullptr, &bad.e) == INFER_ERR_INVALID_ARGUMENT);
  CHECK(std::strlen(infer_last_error()) > 0);
  CHECK(bad.e == nullptr);
}

TEST_CASE("C API embed: a decoder without pooling metadata embeds with LAST", "[embed][capi]") {
  ModelHandle tiny("tiny");
  Emb r;
  const infer_status st = infer_embed(tiny.m, kTexts, nullptr, 1, nullptr, &r.e);
  INFO(infer_last_error());
  if (st == INFER_OK) {
    CHECK(infer_embeddings_pooling(r.e) == INFER_POOLING_LAST);
    CHECK(infer_embeddings_rows(r.e) == 1);
  } else {
    CHECK(st == INFER_ERR_UNSUPPORTED);
  }
}
