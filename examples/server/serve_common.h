// infer serve: the server's state and what its handlers share (serve.cpp:
// flags, startup, routes; serve_completion.cpp: the generation endpoints).
#pragma once

#include <atomic>
#include <chrono>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <infer/infer.h>
#include <nlohmann/json.hpp>

#include "http_server.h"
#include "metrics.h"
#include "request.h"
#include "tool_calls.h"

namespace cli {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

inline std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

// ---- the server's state ----

struct Server {
  std::atomic<bool> ready{false};
  std::atomic<bool> draining{false};
  std::atomic<int> in_flight{0};  // generation requests being served
  infer_model* model = nullptr;
  infer_engine* engine = nullptr;
  std::string model_id;                  // the first of model_names: the id in /v1/models
  std::vector<std::string> model_names;  // --served-model-name (default: the model file's name)
  std::string tmpl;             // the chat template's name
  bool own_template = false;    // render with the model's own text (its variations)
  std::vector<std::string> tmpl_stops;
  // The Jinja template (the model's, or --chat-template-file): chat requests
  // are rendered from their JSON (tools, tool calls, tool results) with it.
  bool jinja = false;
  std::string jinja_text;          // the template's text
  std::string jinja_file_text;     // --chat-template-file: passed as the template itself
  serve::ToolFormat tool_format = serve::ToolFormat::None;
  bool string_arguments = false;   // the template concatenates function.arguments as text
  int32_t n_ctx = 0;
  int32_t n_vocab = 0;
  int32_t n_embd = 0;
  // Embedding endpoints (serve_embed.cpp): inputs and tokens per request at
  // most; an encoder-only model (bert, nomic-bert) refuses generation.
  size_t embed_max_inputs = 2048;
  size_t embed_max_tokens = 1 << 20;
  bool encoder_only = false;
  int64_t created = 0;
  std::string api_key;
  serve::Limits limits;
  double timeout_s = 600;
  double stream_interval_ms = 0;
  int max_queue = 256;
  bool log_requests = false;
  serve::Metrics metrics;

  // Whether a request's "model" names the served model: one of its names,
  // or absent/empty (the loaded model, as most engines take it).
  bool serves_model(const std::string& name, bool empty_ok = true) const {
    if (name.empty()) return empty_ok;
    for (const std::string& n : model_names)
      if (n == name) return true;
    return false;
  }
};

inline void send_error(http::Response& res, int status, const std::string& message, const char* type,
                       const std::string& code = "", const std::string& param = "") {
  serve::RequestError e;
  e.status = status;
  e.message = message;
  e.type = type;
  e.code = code;
  e.param = param;
  res.status = status;
  res.set_content(serve::error_body(e), "application/json");
}

// 404 for a "model" the server does not serve (OpenAI's model_not_found).
inline void send_model_not_found(const Server& srv, http::Response& res, const std::string& name) {
  std::string served;
  for (const std::string& n : srv.model_names) served += (served.empty() ? "'" : ", '") + n + "'";
  send_error(res, 404, "the model '" + name + "' does not exist (this server serves " + served + ")",
             "invalid_request_error", "model_not_found", "model");
}

inline void send_request_error(http::Response& res, const serve::RequestError& e) {
  res.status = e.status;
  res.set_content(serve::error_body(e), "application/json");
}

// A C API failure as an HTTP error: the caller's fault is a 400, running
// out of room a 503, anything else a 500.
inline void send_status_error(http::Response& res, infer_status st, const std::string& what) {
  const std::string msg = what + ": " + infer_last_error();
  if (st == INFER_ERR_INVALID_ARGUMENT) send_error(res, 400, msg, "invalid_request_error", "invalid_value");
  else if (st == INFER_ERR_BUSY) send_error(res, 503, msg, "server_error", "unavailable");
  else if (st == INFER_ERR_OUT_OF_MEMORY) send_error(res, 503, msg, "server_error", "out_of_memory");
  else send_error(res, 500, msg, "server_error", infer_status_string(st));
}

// One generator a handler thread, seeded once (std::random_device opens
// /dev/urandom each time it is made).
inline std::mt19937_64& thread_rng() {
  static thread_local std::mt19937_64 rng(std::random_device{}() ^ std::hash<std::thread::id>{}(std::this_thread::get_id()));
  return rng;
}

inline std::string random_id(const char* prefix) {
  static const char* hex = "0123456789abcdef";
  std::string s = prefix;
  std::mt19937_64& rng = thread_rng();
  for (int i = 0; i < 24; ++i) s += hex[rng() & 15];
  return s;
}

// serve_completion.cpp
void handle_completion(Server& srv, const http::Request& req, http::Response& res, serve::Endpoint ep);
void handle_apply_template(Server& srv, const http::Request& req, http::Response& res);
// serve_embed.cpp
void handle_embeddings(Server& srv, const http::Request& req, http::Response& res);
void handle_ollama_embed(Server& srv, const http::Request& req, http::Response& res);
void handle_rerank(Server& srv, const http::Request& req, http::Response& res);

}  // namespace cli
