// The C API of embeddings and reranking (since 1.5): argument checks and
// translation over engine/embed.h. The synchronous calls run embed() on the
// calling thread; the asynchronous ones queue an EmbedJob on the engine
// (Engine::submit_embed), and the infer_embeddings handle wraps either the
// finished result or the shared job.
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "api/api_util.h"
#include "core/error.h"
#include "engine/embed.h"
#include "infer/infer.h"
#include "model/model.h"

static_assert(static_cast<int>(infer::Pooling::Default) == INFER_POOLING_DEFAULT);
static_assert(static_cast<int>(infer::Pooling::None) == INFER_POOLING_NONE);
static_assert(static_cast<int>(infer::Pooling::Mean) == INFER_POOLING_MEAN);
static_assert(static_cast<int>(infer::Pooling::Cls) == INFER_POOLING_CLS);
static_assert(static_cast<int>(infer::Pooling::Last) == INFER_POOLING_LAST);
static_assert(static_cast<int>(infer::Pooling::Rank) == INFER_POOLING_RANK);

// A result: finished from the start (synchronous calls), or an engine job.
struct infer_embeddings {
  std::shared_ptr<infer::EmbedJob> job;  // null for synchronous results
  infer::EmbedResult result;             // synchronous results
  infer::Pooling pooling = infer::Pooling::Mean;

  bool finished() const { return !job || job->done(); }
  // The result once finished and successful, else null.
  const infer::EmbedResult* done_result() const {
    if (!job) return &result;
    if (!job->done() || job->status() != infer::Status::Ok) return nullptr;
    return &job->result();
  }
};

namespace {

using infer::api::fail;
using infer::api::guarded;
using infer::api::read_params;
using infer::api::size_ok;

constexpr int32_t kMaxInputs = 1000000;

// The caller's parameters as core options (and the thread count); throws
// Error(InvalidArgument) for values out of range.
infer::EmbedOptions to_options(const char* fn, const infer_embed_params* params, int32_t* n_threads) {
  if (params && !size_ok(params))
    infer::raise(infer::Status::InvalidArgument, "%s: params->struct_size is wrong (call infer_embed_params_init)", fn);
  const infer_embed_params p = read_params(params, infer_embed_params_init);
  const int64_t pooling = infer::api::enum_value(p.pooling);
  if (pooling < INFER_POOLING_DEFAULT || pooling > INFER_POOLING_RANK)
    infer::raise(infer::Status::InvalidArgument, "%s: unknown pooling %lld", fn, static_cast<long long>(pooling));
  if (p.normalize != 0 && p.normalize != 2)
    infer::raise(infer::Status::InvalidArgument, "%s: normalize must be 2 (L2) or 0 (none), not %d", fn, p.normalize);
  if (p.dimensions < 0)
    infer::raise(infer::Status::InvalidArgument, "%s: dimensions %d is negative", fn, p.dimensions);
  if (p.truncate != 0 && p.truncate != 1)
    infer::raise(infer::Status::InvalidArgument, "%s: truncate must be 0 or 1, not %d", fn, p.truncate);
  if (p.n_threads < 0 || p.n_threads > 1024)
    infer::raise(infer::Status::InvalidArgument, "%s: n_threads %d is out of range [0, 1024]", fn, p.n_threads);
  infer::EmbedOptions o;
  o.pooling = static_cast<infer::Pooling>(pooling);
  o.normalize = p.normalize == 2;
  o.dimensions = p.dimensions;
  o.truncate = p.truncate == 1;
  if (n_threads) *n_threads = p.n_threads;
  return o;
}

void check_count(const char* fn, const char* what, int32_t n) {
  if (n < 1 || n > kMaxInputs)
    infer::raise(infer::Status::InvalidArgument, "%s: %s is %d: give 1 to %d", fn, what, n, kMaxInputs);
}

std::string_view text_at(const char* fn, const char* const* texts, const size_t* lens, int32_t i) {
  if (!texts[i]) infer::raise(infer::Status::InvalidArgument, "%s: text %d is NULL", fn, i);
  std::string_view t(texts[i], lens ? lens[i] : std::strlen(texts[i]));
  if (t.empty()) infer::raise(infer::Status::InvalidArgument, "%s: text %d is empty", fn, i);
  return t;
}

std::vector<infer::EmbedInput> text_inputs(const char* fn, const infer::Model& model, const char* const* texts,
                                           const size_t* lens, int32_t n) {
  check_count(fn, "n_texts", n);
  if (!texts) infer::raise(infer::Status::InvalidArgument, "%s: texts is NULL", fn);
  std::vector<infer::EmbedInput> inputs;
  inputs.reserve(static_cast<size_t>(n));
  for (int32_t i = 0; i < n; ++i) inputs.push_back(infer::embed_tokenize(model, text_at(fn, texts, lens, i)));
  return inputs;
}

std::vector<infer::EmbedInput> token_inputs(const char* fn, const int32_t* const* tokens, const size_t* n_tokens,
                                            int32_t n) {
  check_count(fn, "n_inputs", n);
  if (!tokens || !n_tokens) infer::raise(infer::Status::InvalidArgument, "%s: tokens and n_tokens must not be NULL", fn);
  std::vector<infer::EmbedInput> inputs(static_cast<size_t>(n));
  for (int32_t i = 0; i < n; ++i) {
    if (n_tokens[i] == 0) infer::raise(infer::Status::InvalidArgument, "%s: input %d is empty", fn, i);
    if (!tokens[i]) infer::raise(infer::Status::InvalidArgument, "%s: tokens[%d] is NULL", fn, i);
    inputs[i].tokens.assign(tokens[i], tokens[i] + n_tokens[i]);  // ids are checked by check_inputs
  }
  return inputs;
}

std::vector<infer::EmbedInput> rerank_inputs(const char* fn, const infer::Model& model, const char* query,
                                             const char* const* docs, int32_t n) {
  check_count(fn, "n_documents", n);
  if (!query || !docs) infer::raise(infer::Status::InvalidArgument, "%s: query and documents must not be NULL", fn);
  if (!*query) infer::raise(infer::Status::InvalidArgument, "%s: the query is empty", fn);
  std::vector<infer::EmbedInput> inputs;
  inputs.reserve(static_cast<size_t>(n));
  for (int32_t i = 0; i < n; ++i) {
    if (!docs[i]) infer::raise(infer::Status::InvalidArgument, "%s: document %d is NULL", fn, i);
    if (!*docs[i]) infer::raise(infer::Status::InvalidArgument, "%s: document %d is empty", fn, i);
    inputs.push_back(infer::rerank_tokenize(model, query, docs[i]));
  }
  return inputs;
}

// Rerankers score with the head: DEFAULT and RANK only.
void to_rank(const char* fn, infer::EmbedOptions& o) {
  if (o.pooling != infer::Pooling::Default && o.pooling != infer::Pooling::Rank)
    infer::raise(infer::Status::InvalidArgument, "%s: params->pooling must be DEFAULT or RANK, not %s", fn,
                 infer::pooling_name(o.pooling));
  o.pooling = infer::Pooling::Rank;
}

infer_status sync_result(const infer::Model& model, std::vector<infer::EmbedInput> inputs,
                         const infer::EmbedOptions& o, int32_t n_threads, infer_embeddings** out) {
  // The synchronous calls run the model on the calling thread, outside the
  // engine whose passes the other ranks follow.
  if (model.tp() && model.tp()->size() > 1)
    infer::raise(infer::Status::InvalidArgument,
                 "a tensor-parallel model embeds through its engine on rank 0 (infer_embed_submit, infer_rerank_submit), "
                 "not with the synchronous calls");
  auto h = std::make_unique<infer_embeddings>();
  h->result = infer::embed(model, std::move(inputs), o, n_threads);
  h->pooling = h->result.pooling;
  *out = h.release();
  return INFER_OK;
}

infer_status async_result(infer_engine* engine, std::vector<infer::EmbedInput> inputs, const infer::EmbedOptions& o,
                          infer_embeddings** out) {
  auto h = std::make_unique<infer_embeddings>();
  h->job = infer::api::submit_embed(engine, std::move(inputs), o);
  h->pooling = h->job->pooling;
  *out = h.release();
  return INFER_OK;
}

}  // namespace

extern "C" {

void infer_embed_params_init(infer_embed_params* p) {
  if (!p) return;
  std::memset(p, 0, sizeof *p);
  p->struct_size = sizeof *p;
  p->pooling = INFER_POOLING_DEFAULT;
  p->normalize = 2;
  p->dimensions = 0;
  p->truncate = 0;
  p->n_threads = 0;
}

infer_status infer_embed(const infer_model* model, const char* const* texts, const size_t* text_lens, int32_t n_texts,
                         const infer_embed_params* params, infer_embeddings** out) {
  if (out) *out = nullptr;
  INFER_CHECK_ARG(model && out, "infer_embed: model and out must not be NULL");
  return guarded([&] {
    int32_t n_threads = 0;
    const infer::EmbedOptions o = to_options("infer_embed", params, &n_threads);
    const infer::Model& m = infer::api::model_of(model);
    infer::resolve_pooling(m, o.pooling);  // a model that cannot embed: before tokenizing
    return sync_result(m, text_inputs("infer_embed", m, texts, text_lens, n_texts), o, n_threads, out);
  });
}

infer_status infer_embed_tokens(const infer_model* model, const int32_t* const* tokens, const size_t* n_tokens,
                                int32_t n_inputs, const infer_embed_params* params, infer_embeddings** out) {
  if (out) *out = nullptr;
  INFER_CHECK_ARG(model && out, "infer_embed_tokens: model and out must not be NULL");
  return guarded([&] {
    int32_t n_threads = 0;
    const infer::EmbedOptions o = to_options("infer_embed_tokens", params, &n_threads);
    return sync_result(infer::api::model_of(model), token_inputs("infer_embed_tokens", tokens, n_tokens, n_inputs), o,
                       n_threads, out);
  });
}

infer_status infer_rerank(const infer_model* model, const char* query, const char* const* documents,
                          int32_t n_documents, const infer_embed_params* params, infer_embeddings** out) {
  if (out) *out = nullptr;
  INFER_CHECK_ARG(model && out, "infer_rerank: model and out must not be NULL");
  return guarded([&] {
    int32_t n_threads = 0;
    infer::EmbedOptions o = to_options("infer_rerank", params, &n_threads);
    to_rank("infer_rerank", o);
    const infer::Model& m = infer::api::model_of(model);
    infer::resolve_pooling(m, o.pooling);  // no classifier head: INVALID_ARGUMENT before tokenizing
    return sync_result(m, rerank_inputs("infer_rerank", m, query, documents, n_documents), o, n_threads, out);
  });
}

infer_status infer_embed_submit(infer_engine* engine, const char* const* texts, const size_t* text_lens,
                                int32_t n_texts, const infer_embed_params* params, infer_embeddings** out) {
  if (out) *out = nullptr;
  INFER_CHECK_ARG(engine && out, "infer_embed_submit: engine and out must not be NULL");
  return guarded([&] {
    const infer::EmbedOptions o = to_options("infer_embed_submit", params, nullptr);
    const infer::Model& m = infer::api::engine_model(engine);
    infer::resolve_pooling(m, o.pooling);
    return async_result(engine, text_inputs("infer_embed_submit", m, texts, text_lens, n_texts), o, out);
  });
}

infer_status infer_embed_submit_tokens(infer_engine* engine, const int32_t* const* tokens, const size_t* n_tokens,
                                       int32_t n_inputs, const infer_embed_params* params, infer_embeddings** out) {
  if (out) *out = nullptr;
  INFER_CHECK_ARG(engine && out, "infer_embed_submit_tokens: engine and out must not be NULL");
  return guarded([&] {
    const infer::EmbedOptions o = to_options("infer_embed_submit_tokens", params, nullptr);
    return async_result(engine, token_inputs("infer_embed_submit_tokens", tokens, n_tokens, n_inputs), o, out);
  });
}

infer_status infer_rerank_submit(infer_engine* engine, const char* query, const char* const* documents,
                                 int32_t n_documents, const infer_embed_params* params, infer_embeddings** out) {
  if (out) *out = nullptr;
  INFER_CHECK_ARG(engine && out, "infer_rerank_submit: engine and out must not be NULL");
  return guarded([&] {
    infer::EmbedOptions o = to_options("infer_rerank_submit", params, nullptr);
    to_rank("infer_rerank_submit", o);
    const infer::Model& m = infer::api::engine_model(engine);
    infer::resolve_pooling(m, o.pooling);
    return async_result(engine, rerank_inputs("infer_rerank_submit", m, query, documents, n_documents), o, out);
  });
}

infer_status infer_embeddings_wait(infer_embeddings* emb, int32_t timeout_ms, int32_t* finished) {
  if (finished) *finished = 0;
  INFER_CHECK_ARG(emb, "infer_embeddings_wait: emb must not be NULL");
  return guarded([&] {
    if (emb->job && !emb->job->wait(timeout_ms)) return INFER_OK;
    if (finished) *finished = 1;
    if (emb->job && emb->job->status() != infer::Status::Ok)
      return fail(static_cast<infer_status>(emb->job->status()), emb->job->error());
    return INFER_OK;
  });
}

infer_status infer_embeddings_cancel(infer_embeddings* emb) {
  INFER_CHECK_ARG(emb, "infer_embeddings_cancel: emb must not be NULL");
  if (emb->job) emb->job->cancel();
  return INFER_OK;
}

const char* infer_embeddings_error(const infer_embeddings* emb) {
  if (!emb || !emb->job) return "";
  return infer::api::guarded_value<const char*>("", [&] { return emb->job->done() ? emb->job->error().c_str() : ""; });
}

int32_t infer_embeddings_dim(const infer_embeddings* emb) {
  if (!emb) return 0;
  return infer::api::guarded_value<int32_t>(0, [&] {
    const infer::EmbedResult* r = emb->done_result();
    return r ? r->dim : 0;
  });
}

int64_t infer_embeddings_rows(const infer_embeddings* emb) {
  if (!emb) return 0;
  return infer::api::guarded_value<int64_t>(0, [&] {
    const infer::EmbedResult* r = emb->done_result();
    return r ? r->n_rows() : 0;
  });
}

infer_status infer_embeddings_input_rows(const infer_embeddings* emb, int32_t index, int64_t* first_row,
                                         int32_t* n_rows) {
  if (first_row) *first_row = 0;
  if (n_rows) *n_rows = 0;
  INFER_CHECK_ARG(emb, "infer_embeddings_input_rows: emb must not be NULL");
  return guarded([&] {
    if (!emb->finished()) return fail(INFER_ERR_BUSY, "infer_embeddings_input_rows: the job is not finished");
    const infer::EmbedResult* r = emb->done_result();
    const size_t n = r ? r->first.size() : 0;
    if (index < 0 || static_cast<size_t>(index) >= n)
      return fail(INFER_ERR_INVALID_ARGUMENT,
                  infer::strformat("infer_embeddings_input_rows: index %d is out of range [0, %zu)", index, n));
    if (first_row) *first_row = r->first[static_cast<size_t>(index)];
    if (n_rows) *n_rows = r->rows[static_cast<size_t>(index)];
    return INFER_OK;
  });
}

infer_pooling infer_embeddings_pooling(const infer_embeddings* emb) {
  if (!emb) return INFER_POOLING_DEFAULT;
  return static_cast<infer_pooling>(static_cast<int32_t>(emb->pooling));
}

int64_t infer_embeddings_n_tokens(const infer_embeddings* emb) {
  if (!emb) return 0;
  return infer::api::guarded_value<int64_t>(0, [&] {
    const infer::EmbedResult* r = emb->done_result();
    return r ? static_cast<int64_t>(r->n_tokens) : 0;
  });
}

const float* infer_embeddings_data(const infer_embeddings* emb) {
  if (!emb) return nullptr;
  return infer::api::guarded_value<const float*>(nullptr, [&]() -> const float* {
    const infer::EmbedResult* r = emb->done_result();
    return r && !r->data.empty() ? r->data.data() : nullptr;
  });
}

infer_status infer_embeddings_copy(const infer_embeddings* emb, float* buf, size_t n_floats, size_t* needed) {
  if (needed) *needed = 0;
  INFER_CHECK_ARG(emb, "infer_embeddings_copy: emb must not be NULL");
  return guarded([&] {
    if (!emb->finished()) return fail(INFER_ERR_BUSY, "infer_embeddings_copy: the job is not finished");
    const infer::EmbedResult* r = emb->done_result();
    if (!r) return fail(static_cast<infer_status>(emb->job->status()), emb->job->error());
    const size_t n = r->data.size();
    if (needed) *needed = n;
    if ((!buf && n) || n_floats < n)
      return fail(INFER_ERR_BUFFER_TOO_SMALL,
                  infer::strformat("infer_embeddings_copy: room for %zu floats, %zu needed", n_floats, n));
    if (n) std::memcpy(buf, r->data.data(), n * sizeof(float));
    return INFER_OK;
  });
}

void infer_embeddings_free(infer_embeddings* emb) {
  if (!emb) return;
  if (emb->job) emb->job->cancel();  // an unfinished job is dropped by the engine
  delete emb;
}

}  // extern "C"
