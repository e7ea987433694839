// infer serve: the embedding endpoints. POST /v1/embeddings (OpenAI's
// shape), /v1/rerank and /rerank (the shape of llama-server and of the
// Jina/Cohere clients), /api/embed (Ollama's). Each is computed through the
// engine (infer_embed_submit / infer_rerank_submit), so embedding work is
// batched with other embedding work and shares the machine with generation.
#include <algorithm>
#include <cstring>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "json_limits.h"
#include "serve_common.h"

namespace cli {
namespace {

struct Refusal {
  int status;
  std::string message, code, param;
};

[[noreturn]] void refuse(const std::string& message, const std::string& param, const std::string& code = "invalid_value",
                         int status = 400) {
  throw Refusal{status, message, code, param};
}

const char* json_type(const json& j) {
  switch (j.type()) {
    case json::value_t::null: return "null";
    case json::value_t::boolean: return "a boolean";
    case json::value_t::string: return "a string";
    case json::value_t::array: return "an array";
    case json::value_t::object: return "an object";
    default: return "a number";
  }
}

json parse_body(const std::string& body) {
  json j;
  try {
    j = serve::parse_json<json>(body, "the body", serve::kMaxJsonDepth);
  } catch (const serve::JsonLimitError& e) {
    refuse(e.what(), e.path, e.kind == serve::JsonLimitError::Kind::Syntax ? "invalid_json" : "too_deep");
  }
  if (!j.is_object()) refuse(std::string("the body must be a JSON object, not ") + json_type(j), "", "invalid_type");
  return j;
}

// "model": absent, null or a served name (else 404 as on every endpoint).
void check_model(const Server& srv, const json& body) {
  auto it = body.find("model");
  if (it == body.end() || it->is_null()) return;
  if (!it->is_string()) refuse(std::string("'model' must be a string, not ") + json_type(*it), "model", "invalid_type");
  const std::string name = it->get<std::string>();
  if (!srv.serves_model(name)) {
    std::string served;
    for (const std::string& n : srv.model_names) served += (served.empty() ? "'" : ", '") + n + "'";
    refuse("the model '" + name + "' does not exist (this server serves " + served + ")", "model", "model_not_found", 404);
  }
}

// The inputs of a request: texts, or token id lists (not both).
struct Inputs {
  std::vector<std::string> texts;
  std::vector<std::vector<int32_t>> tokens;
  size_t size() const { return texts.empty() ? tokens.size() : texts.size(); }
};

int32_t token_id(const Server& srv, const json& v, const std::string& param) {
  if (!v.is_number_integer()) refuse("'" + param + "' must be an integer token id, not " + json_type(v), param, "invalid_type");
  const int64_t id = v.is_number_unsigned() ? static_cast<int64_t>(std::min<uint64_t>(v.get<uint64_t>(), INT64_MAX))
                                            : v.get<int64_t>();
  if (id < 0 || id >= srv.n_vocab)
    refuse("token id " + std::to_string(id) + " in '" + param + "' is outside the vocabulary [0, " +
               std::to_string(srv.n_vocab) + ")",
           param);
  return static_cast<int32_t>(id);
}

// OpenAI's input: a string, an array of strings, an array of token ids or an
// array of arrays of token ids.
Inputs parse_input(const Server& srv, const json& v, const std::string& param) {
  Inputs in;
  auto text = [&](const json& t, const std::string& p) {
    std::string s = t.get<std::string>();
    if (s.empty()) refuse("'" + p + "' is an empty string (nothing to embed)", p);
    in.texts.push_back(std::move(s));
  };
  if (v.is_string()) {
    text(v, param);
    return in;
  }
  if (!v.is_array())
    refuse("'" + param + "' must be a string, an array of strings or an array of token ids, not " + json_type(v), param,
           "invalid_type");
  if (v.empty()) refuse("'" + param + "' is an empty array (nothing to embed)", param);
  if (v.size() > srv.embed_max_inputs)
    refuse("'" + param + "' has " + std::to_string(v.size()) + " inputs; this server takes at most " +
               std::to_string(srv.embed_max_inputs) + " per request (--embed-max-inputs)",
           param, "too_many_inputs");
  const json& first = v.front();
  if (first.is_string()) {
    for (size_t i = 0; i < v.size(); ++i) {
      const std::string p = param + "[" + std::to_string(i) + "]";
      if (!v[i].is_string()) refuse("'" + p + "' must be a string like the other inputs, not " + json_type(v[i]), p, "invalid_type");
      text(v[i], p);
    }
  } else if (first.is_number()) {
    std::vector<int32_t> ids;
    ids.reserve(v.size());
    for (size_t i = 0; i < v.size(); ++i) ids.push_back(token_id(srv, v[i], param + "[" + std::to_string(i) + "]"));
    in.tokens.push_back(std::move(ids));
  } else if (first.is_array()) {
    for (size_t i = 0; i < v.size(); ++i) {
      const std::string p = param + "[" + std::to_string(i) + "]";
      if (!v[i].is_array()) refuse("'" + p + "' must be an array of token ids like the other inputs, not " + json_type(v[i]), p, "invalid_type");
      if (v[i].empty()) refuse("'" + p + "' is an empty array of token ids (nothing to embed)", p);
      std::vector<int32_t> ids;
      ids.reserve(v[i].size());
      for (size_t k = 0; k < v[i].size(); ++k) ids.push_back(token_id(srv, v[i][k], p + "[" + std::to_string(k) + "]"));
      in.tokens.push_back(std::move(ids));
    }
  } else {
    refuse("'" + param + "[0]' must be a string, a token id or an array of token ids, not " + json_type(first),
           param + "[0]", "invalid_type");
  }
  return in;
}

// Tokens of a text without special tokens (an upper bound check of the
// request's size before anything is queued).
size_t count_tokens(const Server& srv, const std::string& s) {
  size_t n = 0;
  const infer_status st = infer_tokenize(srv.model, s.data(), s.size(), 0, 0, nullptr, 0, &n);
  if (st != INFER_OK && st != INFER_ERR_BUFFER_TOO_SMALL) return s.size();
  return n;
}

void check_total_tokens(const Server& srv, const Inputs& in, const std::string& param) {
  size_t total = 0;
  for (const std::string& t : in.texts) total += count_tokens(srv, t) + 2;
  for (const auto& t : in.tokens) total += t.size();
  if (total > srv.embed_max_tokens)
    refuse("the request has about " + std::to_string(total) + " tokens; this server takes at most " +
               std::to_string(srv.embed_max_tokens) + " per embedding request (--embed-max-tokens)",
           param, "too_many_tokens");
}

// A finished job, or a refusal saying why not.
struct Job {
  infer_embeddings* e = nullptr;
  ~Job() { infer_embeddings_free(e); }
};

void refuse_status(infer_status st, const std::string& what, const std::string& why) {
  const std::string msg = what + ": " + why;
  if (st == INFER_ERR_INVALID_ARGUMENT) refuse(msg, "", "invalid_value", 400);
  if (st == INFER_ERR_UNSUPPORTED) refuse(msg + " (this model cannot embed)", "model", "unsupported", 501);
  if (st == INFER_ERR_BUSY || st == INFER_ERR_CANCELLED) refuse(msg, "", "unavailable", 503);
  if (st == INFER_ERR_OUT_OF_MEMORY) refuse(msg, "", "out_of_memory", 503);
  refuse(msg, "", infer_status_string(st), 500);
}

void wait_job(const Server& srv, Job& job, const std::string& what) {
  const auto until = Clock::now() + std::chrono::duration<double>(srv.timeout_s);
  for (;;) {
    int32_t finished = 0;
    const infer_status st = infer_embeddings_wait(job.e, 100, &finished);
    if (finished) {
      if (st != INFER_OK) refuse_status(st, what, infer_embeddings_error(job.e));
      return;
    }
    if (Clock::now() > until) {
      infer_embeddings_cancel(job.e);
      refuse(what + ": timed out after " + std::to_string(srv.timeout_s) + " s (--timeout)", "", "timeout", 504);
    }
  }
}

void submit_inputs(Server& srv, const Inputs& in, const infer_embed_params& p, Job& job) {
  infer_status st;
  const int32_t n = static_cast<int32_t>(in.size());
  if (!in.texts.empty()) {
    std::vector<const char*> ptrs;
    std::vector<size_t> lens;
    for (const std::string& t : in.texts) {
      ptrs.push_back(t.data());
      lens.push_back(t.size());
    }
    st = infer_embed_submit(srv.engine, ptrs.data(), lens.data(), n, &p, &job.e);
  } else {
    std::vector<const int32_t*> ptrs;
    std::vector<size_t> lens;
    for (const auto& t : in.tokens) {
      ptrs.push_back(t.data());
      lens.push_back(t.size());
    }
    st = infer_embed_submit_tokens(srv.engine, ptrs.data(), lens.data(), n, &p, &job.e);
  }
  if (st != INFER_OK) refuse_status(st, "embedding", infer_last_error());
  wait_job(srv, job, "embedding");
}

void append_float(std::string& out, float v) {
  if (!std::isfinite(v)) {
    out += "null";
    return;
  }
  char b[32];
  const int n = std::snprintf(b, sizeof b, "%.9g", static_cast<double>(v));
  out.append(b, static_cast<size_t>(n));
}

void append_row(std::string& out, const float* row, int32_t dim) {
  out += '[';
  for (int32_t j = 0; j < dim; ++j) {
    if (j) out += ',';
    append_float(out, row[j]);
  }
  out += ']';
}

// The row as base64 of its little-endian float32 bytes (OpenAI's
// encoding_format "base64").
void append_base64(std::string& out, const float* row, int32_t dim) {
  static const char* k = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::vector<unsigned char> bytes(static_cast<size_t>(dim) * 4);
  for (int32_t j = 0; j < dim; ++j) {
    uint32_t u;
    std::memcpy(&u, &row[j], 4);
    for (int b = 0; b < 4; ++b) bytes[static_cast<size_t>(j) * 4 + b] = static_cast<unsigned char>(u >> (8 * b));
  }
  out += '"';
  size_t i = 0;
  for (; i + 3 <= bytes.size(); i += 3) {
    const uint32_t v = (uint32_t{bytes[i]} << 16) | (uint32_t{bytes[i + 1]} << 8) | bytes[i + 2];
    out += k[v >> 18];
    out += k[(v >> 12) & 63];
    out += k[(v >> 6) & 63];
    out += k[v & 63];
  }
  if (i < bytes.size()) {
    const uint32_t v = (uint32_t{bytes[i]} << 16) | (i + 1 < bytes.size() ? uint32_t{bytes[i + 1]} << 8 : 0);
    out += k[v >> 18];
    out += k[(v >> 12) & 63];
    out += i + 1 < bytes.size() ? k[(v >> 6) & 63] : '=';
    out += '=';
  }
  out += '"';
}

// The request parameters shared by the embedding endpoints.
infer_embed_params embed_params(const Server& srv, const json& body, bool truncate_default) {
  infer_embed_params p;
  infer_embed_params_init(&p);
  auto d = body.find("dimensions");
  if (d != body.end() && !d->is_null()) {
    if (!d->is_number_integer())
      refuse(std::string("'dimensions' must be an integer, not ") + json_type(*d), "dimensions", "invalid_type");
    const int64_t v = d->is_number_unsigned() ? static_cast<int64_t>(std::min<uint64_t>(d->get<uint64_t>(), INT64_MAX))
                                              : d->get<int64_t>();
    if (v < 1 || v > srv.n_embd)
      refuse("'dimensions' must be in [1, " + std::to_string(srv.n_embd) + "] (the model's size), got " + std::to_string(v),
             "dimensions");
    p.dimensions = static_cast<int32_t>(v);
  }
  p.truncate = truncate_default ? 1 : 0;
  auto t = body.find("truncate");
  if (t != body.end() && !t->is_null()) {
    if (!t->is_boolean()) refuse(std::string("'truncate' must be a boolean, not ") + json_type(*t), "truncate", "invalid_type");
    p.truncate = t->get<bool>() ? 1 : 0;
  }
  return p;
}

// Runs a handler body, turning a refusal into its error reply, and counts it
// in /metrics.
template <class F>
void guarded(Server& srv, http::Response& res, const char* endpoint, F&& f) {
  if (srv.draining) return send_error(res, 503, "the server is shutting down", "server_error", "shutting_down");
  if (!srv.ready) return send_error(res, 503, "the model is loading", "server_error", "loading");
  struct InFlight {
    Server& s;
    explicit InFlight(Server& s) : s(s) { ++s.in_flight; }
    ~InFlight() { --s.in_flight; }
  } guard(srv);
  srv.metrics.on_embed_request(endpoint);
  try {
    const int64_t tokens = f();
    srv.metrics.on_embed_done(endpoint, "ok", tokens);
  } catch (const Refusal& r) {
    srv.metrics.on_embed_done(endpoint, r.status >= 500 ? "error" : "refused", 0);
    send_error(res, r.status, r.message, r.status >= 500 ? "server_error" : "invalid_request_error", r.code, r.param);
  } catch (const std::bad_alloc&) {
    srv.metrics.on_embed_done(endpoint, "error", 0);
    send_error(res, 503, "out of memory", "server_error", "out_of_memory");
  }
}

// The row of input i of a finished job (one row per input: POOLING_NONE is
// not offered by the server).
const float* input_row(const Job& job, int32_t i) {
  int64_t first = 0;
  int32_t n_rows = 0;
  if (infer_embeddings_input_rows(job.e, i, &first, &n_rows) != INFER_OK || n_rows < 1)
    refuse("no result", "", "internal", 500);
  return infer_embeddings_data(job.e) + first * infer_embeddings_dim(job.e);
}

}  // namespace

void handle_embeddings(Server& srv, const http::Request& req, http::Response& res) {
  guarded(srv, res, "embeddings", [&]() -> int64_t {
    json body = parse_body(req.body);
    check_model(srv, body);
    auto in_it = body.find("input");
    if (in_it == body.end()) refuse("'input' is required", "input", "missing_required_parameter");
    Inputs in = parse_input(srv, *in_it, "input");
    bool base64 = false;
    auto ef = body.find("encoding_format");
    if (ef != body.end() && !ef->is_null()) {
      if (!ef->is_string() || (*ef != "float" && *ef != "base64"))
        refuse("'encoding_format' must be \"float\" or \"base64\"", "encoding_format");
      base64 = *ef == "base64";
    }
    const infer_embed_params p = embed_params(srv, body, false);
    body = json();
    check_total_tokens(srv, in, "input");
    Job job;
    submit_inputs(srv, in, p, job);
    const int32_t dim = infer_embeddings_dim(job.e);
    const int64_t n_tokens = infer_embeddings_n_tokens(job.e);
    std::string out;
    out.reserve(in.size() * (static_cast<size_t>(dim) * (base64 ? 6 : 14) + 48) + 128);
    out += "{\"object\":\"list\",\"data\":[";
    for (int32_t i = 0; i < static_cast<int32_t>(in.size()); ++i) {
      if (i) out += ',';
      out += "{\"object\":\"embedding\",\"index\":" + std::to_string(i) + ",\"embedding\":";
      if (base64) append_base64(out, input_row(job, i), dim);
      else append_row(out, input_row(job, i), dim);
      out += '}';
    }
    out += "],\"model\":";
    http::append_json_string(out, srv.model_id.data(), srv.model_id.size());
    out += ",\"usage\":{\"prompt_tokens\":" + std::to_string(n_tokens) + ",\"total_tokens\":" + std::to_string(n_tokens) + "}}";
    res.set_content(std::move(out), "application/json");
    return n_tokens;
  });
}

// Ollama's POST /api/embed: {"model", "input": str | [str], "truncate",
// "dimensions"} -> {"model", "embeddings": [[...]], "prompt_eval_count"}.
void handle_ollama_embed(Server& srv, const http::Request& req, http::Response& res) {
  guarded(srv, res, "ollama_embed", [&]() -> int64_t {
    json body = parse_body(req.body);
    check_model(srv, body);
    auto in_it = body.find("input");
    if (in_it == body.end()) refuse("'input' is required", "input", "missing_required_parameter");
    if (!in_it->is_string() && !(in_it->is_array() && (in_it->empty() || in_it->front().is_string())))
      refuse("'input' must be a string or an array of strings", "input", "invalid_type");
    Inputs in = parse_input(srv, *in_it, "input");
    const infer_embed_params p = embed_params(srv, body, /*truncate_default=*/true);
    check_total_tokens(srv, in, "input");
    Job job;
    submit_inputs(srv, in, p, job);
    const int32_t dim = infer_embeddings_dim(job.e);
    const int64_t n_tokens = infer_embeddings_n_tokens(job.e);
    std::string out = "{\"model\":";
    http::append_json_string(out, srv.model_id.data(), srv.model_id.size());
    out += ",\"embeddings\":[";
    for (int32_t i = 0; i < static_cast<int32_t>(in.size()); ++i) {
      if (i) out += ',';
      append_row(out, input_row(job, i), dim);
    }
    out += "],\"prompt_eval_count\":" + std::to_string(n_tokens) + "}";
    res.set_content(std::move(out), "application/json");
    return n_tokens;
  });
}

// POST /v1/rerank, /rerank: {"model", "query", "documents": [str | {"text"}],
// "top_n", "return_documents"} -> {"model", "object": "list", "results":
// [{"index", "relevance_score", "document": {"text"}}] best first, "usage"}.
void handle_rerank(Server& srv, const http::Request& req, http::Response& res) {
  guarded(srv, res, "rerank", [&]() -> int64_t {
    json body = parse_body(req.body);
    check_model(srv, body);
    auto q = body.find("query");
    if (q == body.end()) refuse("'query' is required", "query", "missing_required_parameter");
    if (!q->is_string()) refuse(std::string("'query' must be a string, not ") + json_type(*q), "query", "invalid_type");
    const std::string query = q->get<std::string>();
    if (query.empty()) refuse("'query' is an empty string", "query");
    auto d = body.find("documents");
    if (d == body.end()) d = body.find("texts");  // Hugging Face TEI's name
    if (d == body.end()) refuse("'documents' is required", "documents", "missing_required_parameter");
    if (!d->is_array()) refuse(std::string("'documents' must be an array, not ") + json_type(*d), "documents", "invalid_type");
    if (d->empty()) refuse("'documents' is an empty array (nothing to rank)", "documents");
    if (d->size() > srv.embed_max_inputs)
      refuse("'documents' has " + std::to_string(d->size()) + " documents; this server takes at most " +
                 std::to_string(srv.embed_max_inputs) + " per request (--embed-max-inputs)",
             "documents", "too_many_inputs");
    std::vector<std::string> docs;
    docs.reserve(d->size());
    for (size_t i = 0; i < d->size(); ++i) {
      const json& v = (*d)[i];
      const std::string p = "documents[" + std::to_string(i) + "]";
      const json* t = &v;
      if (v.is_object()) {
        auto it = v.find("text");
        if (it == v.end()) refuse("'" + p + "' is an object without 'text'", p, "missing_required_parameter");
        t = &*it;
      }
      if (!t->is_string()) refuse("'" + p + "' must be a string or {\"text\": string}, not " + json_type(*t), p, "invalid_type");
      std::string s = t->get<std::string>();
      if (s.empty()) refuse("'" + p + "' is an empty string", p);
      docs.push_back(std::move(s));
    }
    size_t top_n = docs.size();
    auto tn = body.find("top_n");
    if (tn != body.end() && !tn->is_null()) {
      if (!tn->is_number_integer()) refuse("'top_n' must be a positive integer", "top_n", "invalid_type");
      if (!tn->is_number_unsigned() && tn->get<int64_t>() < 1) refuse("'top_n' must be a positive integer", "top_n");
      const uint64_t want = tn->get<uint64_t>();
      if (want == 0) refuse("'top_n' must be a positive integer", "top_n");
      top_n = static_cast<size_t>(std::min<uint64_t>(top_n, want));
    }
    bool return_documents = true;
    auto rd = body.find("return_documents");
    if (rd != body.end() && !rd->is_null()) {
      if (!rd->is_boolean()) refuse("'return_documents' must be a boolean", "return_documents", "invalid_type");
      return_documents = rd->get<bool>();
    }
    infer_embed_params p = embed_params(srv, json::object(), false);
    auto t = body.find("truncate");
    if (t != body.end() && t->is_boolean()) p.truncate = t->get<bool>() ? 1 : 0;
    body = json();
    {
      const size_t qn = count_tokens(srv, query) + 1;
      size_t total = 0;
      for (const std::string& s : docs) total += count_tokens(srv, s) + 2 + qn;
      if (total > srv.embed_max_tokens)
        refuse("the request has about " + std::to_string(total) + " tokens (the query counts once per document); this "
                   "server takes at most " + std::to_string(srv.embed_max_tokens) + " per request (--embed-max-tokens)",
               "documents", "too_many_tokens");
    }
    std::vector<const char*> ptrs;
    for (const std::string& s : docs) ptrs.push_back(s.c_str());
    Job job;
    const infer_status st =
        infer_rerank_submit(srv.engine, query.c_str(), ptrs.data(), static_cast<int32_t>(docs.size()), &p, &job.e);
    if (st != INFER_OK) refuse_status(st, "reranking", infer_last_error());
    wait_job(srv, job, "reranking");
    const int32_t dim = infer_embeddings_dim(job.e);
    const float* data = infer_embeddings_data(job.e);
    if (dim < 1 || !data || infer_embeddings_rows(job.e) != static_cast<int64_t>(docs.size()))
      refuse("reranking: no scores", "", "internal", 500);
    std::vector<size_t> order(docs.size());
    std::iota(order.begin(), order.end(), size_t{0});
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return data[a * dim] > data[b * dim]; });
    const int64_t n_tokens = infer_embeddings_n_tokens(job.e);
    std::string out = "{\"model\":";
    http::append_json_string(out, srv.model_id.data(), srv.model_id.size());
    out += ",\"object\":\"list\",\"results\":[";
    for (size_t r = 0; r < top_n; ++r) {
      const size_t i = order[r];
      if (r) out += ',';
      out += "{\"index\":" + std::to_string(i) + ",\"relevance_score\":";
      append_float(out, data[i * dim]);
      if (return_documents) {
        out += ",\"document\":{\"text\":";
        http::append_json_string(out, docs[i].data(), docs[i].size());
        out += '}';
      }
      out += '}';
    }
    out += "],\"usage\":{\"prompt_tokens\":" + std::to_string(n_tokens) + ",\"total_tokens\":" + std::to_string(n_tokens) + "}}";
    res.set_content(std::move(out), "application/json");
    return n_tokens;
  });
}

}  // namespace cli
