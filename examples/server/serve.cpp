// infer serve: an OpenAI-compatible HTTP server on libinfer's background
// engine. It uses only include/infer/infer.h (like the rest of the CLI),
// its own HTTP/1.1 server (http_server.h) and nlohmann-json for JSON.
//
// Endpoints: POST /v1/chat/completions, /v1/completions, /tokenize,
// /detokenize, /apply-template, /v1/embeddings, /v1/rerank (and /rerank),
// /api/embed (serve_embed.cpp); GET /v1/models, /v1/models/{id}, /health,
// /metrics. Function calling (tools) renders the request's JSON with the
// model's Jinja template and parses the reply (tool_calls.h).
// Requests are parsed and checked by request.cpp, then submitted to one
// engine whose thread batches every request in flight (continuous
// batching, prefix caching). A reply streams as server-sent events or is
// returned whole; a client that goes away cancels its request.
#include <malloc.h>
#include <pthread.h>
#include <signal.h>

#include <algorithm>
#include <cctype>
#include <fstream>
#include <memory>
#include <sstream>
#include <thread>

#include "../cli/cli.h"
#include "serve_common.h"

namespace cli {
namespace {

const FlagTable kServeFlags = kModelFlags + FlagTable{
    {"--host", "ADDR", "127.0.0.1", "address to listen on"},
    {"--port", "N", "8080", "port to listen on (0: any free port; the port is printed)"},
    {"--api-key", "KEY", "none ($INFER_API_KEY)", "require 'Authorization: Bearer KEY' on every endpoint but /health"},
    {"--alias, --served-model-name", "NAME[,NAME...]", "the model file's name",
     "the model's names (repeatable, or comma separated): the first is the id in /v1/models; a request whose 'model' is "
     "none of them gets a 404 (model_not_found); an absent or empty 'model' means the loaded model"},
    {"--template", "NAME", "the model's own, else chatml", "chat template for /v1/chat/completions"},
    {"--chat-template-file", "FILE", "none", "a Jinja chat template to use instead of the model's (tools and tool calls need a Jinja template)"},
    {"--max-seqs, --parallel, -np", "N", "16", "sequences decoded together (and the most n per request)"},
    {"--max-batch-tokens", "N", "512", "tokens per forward step"},
} + kCtxFlags + kThreadFlags + kKvFlags + kSpecFlags + kTpFlags + FlagTable{
    {"--max-body-mb", "N", "8", "largest request body, MiB (larger: 413)"},
    {"--max-connections", "N", "64", "requests run at once (worker threads; more wait in a queue of --max-queue, then 503)"},
    {"--max-open-connections", "N", "1024", "open client connections (more are closed at once)"},
    {"--max-queue", "N", "256", "generation requests in flight at once (more: 429)"},
    {"--timeout", "SEC", "600", "longest time a generation request may take (then 504, or an error event)"},
    {"--stream-interval", "MS", "20",
     "streaming: text arriving sooner than this after a stream's previous event waits and joins the next one (0: one event per piece)"},
    {"--read-timeout", "SEC", "30", "longest time a request's whole body may take to arrive (then 408)"},
    {"--header-timeout", "SEC", "10", "longest time a request's whole header may take to arrive (then 408)"},
    {"--idle-timeout", "SEC", "5", "an idle keep-alive connection is closed after this"},
    {"--write-timeout", "SEC", "30", "a client that reads nothing of its answer for this long is dropped (its request cancelled)"},
    {"--shutdown-timeout", "SEC", "10", "on SIGINT/SIGTERM, time given to requests in flight before they are cancelled"},
    {"--log-requests", nullptr, nullptr, "one line per request on stderr"},
    {"--embed-max-inputs", "N", "2048", "inputs (or rerank documents) per embedding request at most (more: 400)"},
    {"--embed-max-tokens", "N", "1048576", "tokens per embedding or rerank request at most (more: 400)"},
};

// Whether the request carries the server's API key (always, when none is
// set): "Authorization: Bearer KEY" or "x-api-key: KEY", compared in
// constant time.
bool key_accepted(const Server& s, const http::Request& req) {
  if (s.api_key.empty()) return true;
  std::string given = req.header("Authorization");
  if (given.rfind("Bearer ", 0) == 0) given = given.substr(7);
  else given = req.header("x-api-key");
  unsigned diff = given.size() != s.api_key.size();
  for (size_t i = 0; i < s.api_key.size(); ++i) diff |= static_cast<unsigned>(i < given.size() ? given[i] ^ s.api_key[i] : 1);
  return diff == 0;
}

// The most tokens /tokenize answers with their pieces: each costs a few
// dozen bytes of answer (ids alone cost a few).
constexpr size_t kMaxTokenizePieces = 1000000;

// /tokenize: the answer is written as text, token by token (no JSON value per
// token), and a large one gives its memory back when sent.
void handle_tokenize(Server& srv, const http::Request& req, http::Response& res) {
  if (!srv.ready) return send_error(res, 503, "the model is loading", "server_error", "loading");
  serve::RequestError err;
  auto tr = serve::parse_tokenize_request(req.body, &err);
  if (!tr) return send_request_error(res, err);
  size_t n = 0;
  const int32_t add_bos = tr->add_special ? -1 : 0, special = tr->parse_special ? 1 : 0;
  infer_status st = infer_tokenize(srv.model, tr->content.data(), tr->content.size(), add_bos, special, nullptr, 0, &n);
  if (st != INFER_ERR_BUFFER_TOO_SMALL && st != INFER_OK) return send_status_error(res, st, "tokenizing");
  if (tr->with_pieces && n > kMaxTokenizePieces)
    return send_error(res, 413, "content has " + std::to_string(n) + " tokens; with_pieces answers at most " +
                                    std::to_string(kMaxTokenizePieces) + " (send less content, or with_pieces false)",
                      "invalid_request_error", "too_many_tokens", "with_pieces");
  std::vector<int32_t> ids(n);
  st = infer_tokenize(srv.model, tr->content.data(), tr->content.size(), add_bos, special, ids.data(), ids.size(), &n);
  if (st != INFER_OK) return send_status_error(res, st, "tokenizing");
  ids.resize(n);
  tr->content.clear();
  tr->content.shrink_to_fit();
  std::string out;
  out.reserve(n * (tr->with_pieces ? 32 : 7) + 16);
  out += "{\"tokens\":[";
  char buf[256];
  for (size_t i = 0; i < n; ++i) {
    if (i) out += ',';
    if (!tr->with_pieces) {
      out += std::to_string(ids[i]);
      continue;
    }
    size_t nb = 0;
    if (infer_token_piece(srv.model, ids[i], buf, sizeof buf, &nb) != INFER_OK) nb = 0;
    out += "{\"id\":";
    out += std::to_string(ids[i]);
    out += ",\"piece\":";
    http::append_json_string(out, buf, std::min(nb, sizeof buf));
    out += '}';
  }
  out += "]}";
  res.set_content(std::move(out), "application/json");
}

void handle_detokenize(Server& srv, const http::Request& req, http::Response& res) {
  if (!srv.ready) return send_error(res, 503, "the model is loading", "server_error", "loading");
  serve::RequestError err;
  auto ids = serve::parse_detokenize_request(req.body, &err);
  if (!ids) return send_request_error(res, err);
  size_t need = 0;
  infer_status st = infer_detokenize(srv.model, ids->data(), ids->size(), 0, nullptr, 0, &need);
  if (st != INFER_ERR_BUFFER_TOO_SMALL && st != INFER_OK) return send_status_error(res, st, "detokenizing");
  std::string text(need, '\0');
  st = infer_detokenize(srv.model, ids->data(), ids->size(), 0, text.data(), text.size(), &need);
  if (st != INFER_OK) return send_status_error(res, st, "detokenizing");
  text.resize(need ? need - 1 : 0);
  res.set_content(dump(json{{"content", text}}), "application/json");
}

json model_json(const Server& srv) {
  return {{"id", srv.model_id}, {"object", "model"}, {"created", srv.created}, {"owned_by", "libinfer"},
          {"max_model_len", srv.n_ctx}};
}

// Renders a small fixed conversation with the chat template in use; false
// with *why set when the template fails (an error, a budget, a cycle).
bool trial_render(const Server& s, std::string* why) {
  // Tried without tools, then with one (templates made for tool use iterate
  // `tools` unguarded): the template fails only when both fail.
  static const char kContext[] =
      R"({"messages": [{"role": "user", "content": "Hello"}, {"role": "assistant", "content": "Hi there."},)"
      R"( {"role": "user", "content": "What is 2 + 2?"}], "add_generation_prompt": true})";
  static const char kToolsContext[] =
      R"({"messages": [{"role": "user", "content": "Hello"}, {"role": "assistant", "content": "Hi there."},)"
      R"( {"role": "user", "content": "What is 2 + 2?"}], "add_generation_prompt": true, "tools": [{"type": "function",)"
      R"( "function": {"name": "add", "description": "Adds two numbers.", "parameters": {"type": "object", "properties":)"
      R"( {"a": {"type": "number"}, "b": {"type": "number"}}, "required": ["a", "b"]}}}]})";
  static const infer_chat_message kMessages[] = {{"user", "Hello"}, {"assistant", "Hi there."}, {"user", "What is 2 + 2?"}};
  char buf[4096];
  size_t need = 0;
  infer_status st = INFER_OK;
  if (s.jinja) {
    const char* tmpl = s.jinja_file_text.empty() ? nullptr : s.jinja_file_text.c_str();
    st = infer_chat_apply_template_json(s.model, tmpl, kContext, buf, sizeof buf, &need);
    if (st != INFER_OK && st != INFER_ERR_BUFFER_TOO_SMALL) {
      *why = infer_last_error();
      st = infer_chat_apply_template_json(s.model, tmpl, kToolsContext, buf, sizeof buf, &need);
      if (st != INFER_OK && st != INFER_ERR_BUFFER_TOO_SMALL) return false;
      return true;
    }
  } else {
    st = infer_chat_apply_template(s.model, s.own_template ? nullptr : s.tmpl.c_str(), kMessages, 3, 1, buf, sizeof buf, &need);
  }
  if (st == INFER_OK || st == INFER_ERR_BUFFER_TOO_SMALL) return true;
  *why = infer_last_error();
  return false;
}

// SIGINT/SIGTERM are blocked in every thread and taken by sigwait in main.
sigset_t shutdown_signals() {
  sigset_t s;
  sigemptyset(&s);
  sigaddset(&s, SIGINT);
  sigaddset(&s, SIGTERM);
  return s;
}

int cmd_serve(int argc, char** argv) {
  Args a(argc, argv, 2, kServeFlags);
  a.no_positionals();
  auto srv = std::make_unique<Server>();
  const std::string host = a.get("--host", "127.0.0.1");
  const int port = static_cast<int>(a.get_int("--port", 8080, 0, 65535));
  srv->api_key = a.has("--api-key") ? a.get("--api-key") : (std::getenv("INFER_API_KEY") ? std::getenv("INFER_API_KEY") : "");
  infer_engine_params ep;
  infer_engine_params_init(&ep);
  ep.n_threads = static_cast<int32_t>(a.get_int("--threads", 0, 0, 1024));
  ep.max_seqs = static_cast<int32_t>(a.get_int("--max-seqs", 16, 1, 4096));
  ep.max_batch_tokens = static_cast<int32_t>(a.get_int("--max-batch-tokens", 512, 1, 1 << 20));
  ep.n_ctx = static_cast<int32_t>(a.get_int("--ctx-size", 0, 0, 1 << 24));
  apply_kv_flags(a, ep);
  std::string spec_layers;  // kept alive until the engine is created
  DraftModel draft;         // --draft: loaded with the model, freed after the engine
  apply_spec_flags(a, ep, spec_layers);
  const int32_t tp = apply_tp_flags(a, ep);
  const size_t max_body = static_cast<size_t>(a.get_int("--max-body-mb", 8, 1, 4096)) << 20;
  const int max_conn = static_cast<int>(a.get_int("--max-connections", 64, 1, 65536));
  srv->max_queue = static_cast<int>(a.get_int("--max-queue", 256, 1, 1 << 20));
  srv->timeout_s = a.get_float("--timeout", 600, 0.001, 1e9, "(0, 1e9]");
  srv->stream_interval_ms = a.get_float("--stream-interval", 20, 0, 1000, "[0, 1000]");
  const double read_timeout = a.get_float("--read-timeout", 30, 0.001, 1e6, "(0, 1e6]");
  const double header_timeout = a.get_float("--header-timeout", 10, 0.001, 1e6, "(0, 1e6]");
  const double idle_timeout = a.get_float("--idle-timeout", 5, 0.001, 1e6, "(0, 1e6]");
  const double write_timeout = a.get_float("--write-timeout", 30, 0.001, 1e6, "(0, 1e6]");
  const int max_open = static_cast<int>(a.get_int("--max-open-connections", 1024, 1, 1 << 20));
  const double shutdown_timeout = a.get_float("--shutdown-timeout", 10, 0, 1e6, "[0, 1e6]");
  srv->log_requests = a.flag("--log-requests");
  srv->embed_max_inputs = static_cast<size_t>(a.get_int("--embed-max-inputs", 2048, 1, 1000000));
  srv->embed_max_tokens = static_cast<size_t>(a.get_int("--embed-max-tokens", 1 << 20, 1, INT64_MAX));
  srv->limits.max_n = ep.max_seqs;
  const std::string path = model_path(a);
  const infer_backend backend = backend_flag(a);
  std::string tmpl = a.get("--template");
  const std::string tmpl_file = a.get("--chat-template-file");
  if (!tmpl.empty() && !tmpl_file.empty()) throw UsageError{"give either --template or --chat-template-file, not both"};
  if (!tmpl_file.empty()) {
    std::ifstream f(tmpl_file, std::ios::binary);
    if (!f) throw UsageError{"cannot read --chat-template-file " + tmpl_file};
    std::stringstream ss;
    ss << f.rdbuf();
    srv->jinja_file_text = ss.str();
    if (srv->jinja_file_text.find("{{") == std::string::npos && srv->jinja_file_text.find("{%") == std::string::npos)
      throw UsageError{"--chat-template-file " + tmpl_file + " is not a Jinja template (no {{ or {%)"};
  }
  if (!tmpl.empty()) {
    bool known = false;
    for (int32_t i = 0; i < infer_chat_template_count(); ++i) known |= tmpl == infer_chat_template_name(i);
    if (!known) throw UsageError{"unknown chat template '" + tmpl + "'"};
  }
  for (const std::string& v : a.get_all("--served-model-name")) {
    size_t from = 0;
    for (;;) {
      const size_t comma = v.find(',', from);
      std::string name = v.substr(from, comma == std::string::npos ? std::string::npos : comma - from);
      while (!name.empty() && std::isspace(static_cast<unsigned char>(name.front()))) name.erase(name.begin());
      while (!name.empty() && std::isspace(static_cast<unsigned char>(name.back()))) name.pop_back();
      if (name.empty()) throw UsageError{"--served-model-name: empty name in '" + v + "'"};
      if (std::find(srv->model_names.begin(), srv->model_names.end(), name) == srv->model_names.end())
        srv->model_names.push_back(name);
      if (comma == std::string::npos) break;
      from = comma + 1;
    }
  }
  if (srv->model_names.empty()) {
    const size_t slash = path.rfind('/');
    srv->model_names.push_back(slash == std::string::npos ? path : path.substr(slash + 1));
  }
  srv->model_id = srv->model_names.front();
  srv->created = static_cast<int64_t>(std::time(nullptr));

  // Every thread from here on (HTTP pool, engine) inherits the blocked set.
  sigset_t sigs = shutdown_signals();
  pthread_sigmask(SIG_BLOCK, &sigs, nullptr);
  ::signal(SIGPIPE, SIG_IGN);

  // --tp: ranks 1..N-1 (known from the launcher) neither listen nor print:
  // they follow rank 0's engine until it stops (rank 0 alone handles
  // SIGINT/SIGTERM, blocked here too).
  if (tp > 1 && tp_state().rank > 0) {
    Model model(path, backend, false, tp);
    if (!tp_follow(model.m, ep))
      throw ApiError{"the launcher gave this process rank " + std::to_string(tp_state().rank) +
                     " but it is rank 0 of the model's group"};
    return 0;
  }

  http::Options ho;
  ho.workers = max_conn;
  ho.queue = static_cast<size_t>(srv->max_queue);
  ho.max_open = static_cast<size_t>(max_open);
  ho.max_body = max_body;
  ho.body_timeout = read_timeout;
  ho.header_timeout = header_timeout;
  ho.idle_timeout = idle_timeout;
  ho.write_timeout = write_timeout;
  Server& s = *srv;
  auto error_body = [](int status, const std::string& message, const std::string& code) {
    serve::RequestError e;
    e.status = status;
    e.message = message;
    e.type = status >= 500 ? "server_error" : "invalid_request_error";
    e.code = code;
    return serve::error_body(e);
  };
  auto logger = [&s](const http::Request& req, int status) {
    s.metrics.on_http(status);
    if (s.log_requests) std::fprintf(stderr, "%s %s -> %d\n", req.method.c_str(), req.path.c_str(), status);
  };
  http::Server http(ho, error_body, logger);

  // The API key is checked once the whole request has been read (its body
  // consumed), so the next keep-alive request on the connection is parsed
  // from its own first byte.
  auto keyed = [&s](auto handler) {
    return [&s, handler](const http::Request& q, http::Response& r) {
      if (!key_accepted(s, q)) {
        send_error(r, 401, "invalid or missing API key (Authorization: Bearer KEY)", "authentication_error",
                   "invalid_api_key");
        return;
      }
      handler(q, r);
    };
  };
  // An encoder-only model (an embedding model or a reranker) cannot generate.
  auto generation = [&s](const http::Request& q, http::Response& r, serve::Endpoint ep) {
    if (s.ready && s.encoder_only)
      return send_error(r, 400, "the model '" + s.model_id + "' is an encoder-only embedding model: it cannot generate text "
                                "(use /v1/embeddings or /v1/rerank)", "invalid_request_error", "model_not_generative", "model");
    handle_completion(s, q, r, ep);
  };
  http.route("POST", "/v1/chat/completions", keyed([generation](const http::Request& q, http::Response& r) {
    generation(q, r, serve::Endpoint::Chat);
  }));
  http.route("POST", "/v1/completions", keyed([generation](const http::Request& q, http::Response& r) {
    generation(q, r, serve::Endpoint::Completion);
  }));
  http.route("POST", "/v1/embeddings", keyed([&s](const http::Request& q, http::Response& r) { handle_embeddings(s, q, r); }));
  http.route("POST", "/v1/rerank", keyed([&s](const http::Request& q, http::Response& r) { handle_rerank(s, q, r); }));
  http.route("POST", "/rerank", keyed([&s](const http::Request& q, http::Response& r) { handle_rerank(s, q, r); }));
  http.route("POST", "/api/embed", keyed([&s](const http::Request& q, http::Response& r) { handle_ollama_embed(s, q, r); }));
  http.route("POST", "/apply-template", keyed([&s](const http::Request& q, http::Response& r) { handle_apply_template(s, q, r); }));
  http.route("POST", "/tokenize", keyed([&s](const http::Request& q, http::Response& r) { handle_tokenize(s, q, r); }));
  http.route("POST", "/detokenize", keyed([&s](const http::Request& q, http::Response& r) { handle_detokenize(s, q, r); }));
  // Cheap endpoints run on the I/O thread: they answer while every worker is busy.
  constexpr bool kInline = true;
  http.route("GET", "/health", [&s](const http::Request&, http::Response& r) {
    if (s.draining) return send_error(r, 503, "the server is shutting down", "server_error", "shutting_down");
    if (!s.ready) return send_error(r, 503, "the model is loading", "server_error", "loading");
    r.set_content(R"({"status":"ok"})", "application/json");
  }, kInline);
  http.route("GET", "/v1/models", keyed([&s](const http::Request&, http::Response& r) {
    json data = json::array();
    if (s.ready) data.push_back(model_json(s));
    r.set_content(dump(json{{"object", "list"}, {"data", data}}), "application/json");
  }), kInline);
  http.route("GET", "/v1/models/", keyed([&s](const http::Request& q, http::Response& r) {
    if (!s.ready || !s.serves_model(q.match, /*empty_ok=*/false)) return send_model_not_found(s, r, q.match);
    r.set_content(dump(model_json(s)), "application/json");
  }), kInline, /*prefix=*/true);
  http.route("GET", "/metrics", keyed([&s](const http::Request&, http::Response& r) {
    infer_engine_stats es;
    infer_engine_stats_init(&es);
    const bool have = s.ready && infer_engine_get_stats(s.engine, &es) == INFER_OK;
    r.set_content(s.metrics.render(have ? &es : nullptr, s.in_flight.load()), "text/plain; version=0.0.4; charset=utf-8");
  }), kInline);

  // Listen first: /health answers 503 while the model loads.
  std::string why;
  const int bound = http.bind(host, port, &why);
  if (bound < 0) throw ApiError{"cannot listen on " + host + ":" + std::to_string(port) + ": " + why};
  http.start();
  std::fprintf(stderr, "infer serve: listening on http://%s:%d (loading %s)\n", host.c_str(), bound, path.c_str());
  std::fflush(stderr);

  struct Cleanup {
    http::Server& http;
    Server& s;
    ~Cleanup() {
      if (s.engine) infer_engine_stop(s.engine, 0);
      http.stop();
      infer_engine_free(s.engine);
      infer_model_free(s.model);
    }
  } cleanup{http, s};

  infer_model_params mp;
  infer_model_params_init(&mp);
  mp.backend = backend;
  mp.tensor_parallel = tp;
  check(infer_model_load(path.c_str(), &mp, &s.model), ("loading " + path).c_str());
  // --tp under a launcher whose rank variable is not known: rank 1..N-1 is
  // only known now (it listened for nothing).
  if (tp_follow(s.model, ep)) return 0;
  load_draft(a, ep, draft);
  check(infer_engine_create(s.model, &ep, &s.engine), "creating the engine");
  infer_model_info info;
  infer_model_info_init(&info);
  check(infer_model_get_info(s.model, &info), "reading model info");
  s.n_ctx = ep.n_ctx > 0 ? ep.n_ctx : info.n_ctx_train;
  warn_context_over_trained("serve", s.n_ctx, info);
  s.n_vocab = info.n_vocab;
  s.n_embd = info.n_embd;
  {
    const std::string arch = info.architecture ? info.architecture : "";
    s.encoder_only = arch == "bert" || arch == "nomic-bert" || arch.find("bert") != std::string::npos;
  }
  if (!s.jinja_file_text.empty()) {
    s.tmpl = "jinja";
    s.jinja = true;
    s.jinja_text = s.jinja_file_text;
    // Its stop texts: those of the built-in templates that it writes.
    for (int32_t t = 0; t < infer_chat_template_count(); ++t)
      for (int32_t i = 0; const char* st = infer_chat_template_stop(infer_chat_template_name(t), i); ++i)
        if (s.jinja_text.find(st) != std::string::npos &&
            std::find(s.tmpl_stops.begin(), s.tmpl_stops.end(), st) == s.tmpl_stops.end())
          s.tmpl_stops.emplace_back(st);
  } else if (!tmpl.empty()) {
    s.tmpl = tmpl;
  } else {
    char buf[64];
    size_t need = 0;
    const infer_status st = infer_chat_template_detect(s.model, buf, sizeof buf, &need);
    if (st == INFER_OK) {
      s.tmpl = buf;
      s.own_template = true;
      // The model's Jinja text: chat requests are rendered from their JSON.
      size_t tneed = 0;
      if (infer_model_meta(s.model, "tokenizer.chat_template", nullptr, 0, &tneed) == INFER_ERR_BUFFER_TOO_SMALL && tneed > 1) {
        s.jinja_text.assign(tneed, '\0');
        if (infer_model_meta(s.model, "tokenizer.chat_template", s.jinja_text.data(), s.jinja_text.size(), &tneed) == INFER_OK) {
          s.jinja_text.resize(tneed - 1);
          s.jinja = true;
        } else {
          s.jinja_text.clear();
        }
      }
    } else {
      s.tmpl = "chatml";
      std::fprintf(stderr, "infer serve: note: %s; chat requests use the chatml template (--template NAME)\n",
                   st == INFER_ERR_NOT_FOUND ? "the model has no chat template" : "the model's chat template is not recognised");
    }
  }
  // A trial render of a small fixed conversation: a --chat-template-file
  // that fails it is refused; the model's own template that fails it is
  // replaced by chatml, with a warning (as when it is not recognised).
  why.clear();
  if (!trial_render(s, &why)) {
    if (!s.jinja_file_text.empty()) throw UsageError{"--chat-template-file " + tmpl_file + " fails a trial render: " + why};
    if (s.own_template) {
      std::fprintf(stderr, "infer serve: warning: the model's chat template fails a trial render (%s); chat requests use the chatml template (--template NAME)\n",
                   why.c_str());
      s.tmpl = "chatml";
      s.own_template = false;
      s.jinja = false;
      s.jinja_text.clear();
      s.tmpl_stops.clear();
    }
  }
  for (int32_t i = 0; const char* st = infer_chat_template_stop(s.tmpl.c_str(), i); ++i) s.tmpl_stops.emplace_back(st);
  if (s.jinja) {
    s.tool_format = serve::tool_format_for_template(s.jinja_text);
    s.string_arguments = serve::template_wants_string_arguments(s.jinja_text);
  }
  check(infer_engine_start(s.engine), "starting the engine thread");
  s.ready = true;
  std::fprintf(stderr, "infer serve: ready: model '%s', context %d, %d sequences at once, chat template %s%s, tool calls: %s%s\n",
               s.model_id.c_str(), s.n_ctx, ep.max_seqs, s.tmpl.c_str(), s.jinja ? " (Jinja)" : "",
               s.jinja ? serve::tool_format_name(s.tool_format) : "none (no Jinja template)",
               s.api_key.empty() ? "" : ", API key required");
  std::fflush(stderr);

  int sig = 0;
  sigwait(&sigs, &sig);
  // Graceful shutdown: refuse new work, give what is in flight
  // --shutdown-timeout to finish, cancel the rest (their clients get a
  // finish_reason "abort"), then close the listener.
  s.draining = true;
  std::fprintf(stderr, "infer serve: %s: finishing %d request(s) in flight\n", sig == SIGINT ? "SIGINT" : "SIGTERM",
               s.in_flight.load());
  const auto until = Clock::now() + std::chrono::duration<double>(shutdown_timeout);
  while (s.in_flight.load() > 0 && Clock::now() < until) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  if (s.in_flight.load() > 0) std::fprintf(stderr, "infer serve: cancelling %d request(s)\n", s.in_flight.load());
  infer_engine_stop(s.engine, 0);
  const auto until2 = Clock::now() + std::chrono::seconds(5);
  while (s.in_flight.load() > 0 && Clock::now() < until2) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  std::fprintf(stderr, "infer serve: stopped\n");
  return 0;
}

const Register kServeCmd{{"serve", "an OpenAI-compatible HTTP server",
                          "infer serve [-m MODEL] [--host 127.0.0.1] [--port 8080] [--api-key KEY] [options]", &kServeFlags,
                          "Endpoints: POST /v1/chat/completions, /v1/completions, /tokenize, /detokenize, /apply-template,\n"
                          "/v1/embeddings (OpenAI), /v1/rerank and /rerank (Jina/Cohere shape), /api/embed (Ollama);\n"
                          "GET /v1/models, /v1/models/{id}, /health (503 while loading), /metrics (Prometheus text).\n"
                          "Model names: a request's 'model' must be one of the --served-model-name names (default: the\n"
                          "model file's name), else 404 model_not_found; an absent or empty 'model' means the loaded model.\n"
                          "SIGINT/SIGTERM: requests in flight get --shutdown-timeout to finish, then are cancelled.\n"
                          "Function calling (tools, tool_choice, tool_calls, role 'tool') needs a Jinja chat template (the\n"
                          "model's, or --chat-template-file) in the Hermes/Qwen, Llama 3.x or Mistral tool-call format.",
                          cmd_serve}};

}  // namespace
}  // namespace cli
