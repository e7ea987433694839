// infer serve: an OpenAI-compatible HTTP server on libinfer's background
// engine. It uses only include/infer/infer.h (like the rest of the CLI),
// cpp-httplib for HTTP and nlohmann-json for JSON.
//
// Endpoints: POST /v1/chat/completions, /v1/completions, /tokenize,
// /detokenize, /apply-template; GET /v1/models, /v1/models/{id}, /health,
// /metrics. Function calling (tools) renders the request's JSON with the
// model's Jinja template and parses the reply (tool_calls.h).
// Requests are parsed and checked by request.cpp, then submitted to one
// engine whose thread batches every request in flight (continuous
// batching, prefix caching). A reply streams as server-sent events or is
// returned whole; a client that goes away cancels its request.
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>
#include <dirent.h>
#include <netinet/in.h>
#include <arpa/inet.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <fstream>
#include <memory>
#include <mutex>
#include <random>
#include <sstream>
#include <thread>

#include <httplib.h>
#include <nlohmann/json.hpp>

#include "../cli/cli.h"
#include "metrics.h"
#include "request.h"
#include "tool_calls.h"

namespace cli {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

const FlagTable kServeFlags = kModelFlags + FlagTable{
    {"--host", "ADDR", "127.0.0.1", "address to listen on"},
    {"--port", "N", "8080", "port to listen on (0: any free port; the port is printed)"},
    {"--api-key", "KEY", "none ($INFER_API_KEY)", "require 'Authorization: Bearer KEY' on every endpoint but /health"},
    {"--alias", "NAME", "the model file's name", "the model id clients see in /v1/models"},
    {"--template", "NAME", "the model's own, else chatml", "chat template for /v1/chat/completions"},
    {"--chat-template-file", "FILE", "none", "a Jinja chat template to use instead of the model's (tools and tool calls need a Jinja template)"},
    {"--max-seqs, --parallel, -np", "N", "16", "sequences decoded together (and the most n per request)"},
    {"--max-batch-tokens", "N", "512", "tokens per forward step"},
} + kCtxFlags + kThreadFlags + kKvFlags + kSpecFlags + FlagTable{
    {"--max-body-mb", "N", "8", "largest request body, MiB (larger: 413)"},
    {"--max-connections", "N", "64", "connections served at once (threads of the HTTP pool)"},
    {"--max-queue", "N", "256", "generation requests in flight at once (more: 429)"},
    {"--timeout", "SEC", "600", "longest time a generation request may take (then 504, or an error event)"},
    {"--stream-interval", "MS", "20",
     "streaming: text arriving sooner than this after a stream's previous event waits and joins the next one (0: one event per piece)"},
    {"--read-timeout", "SEC", "30", "longest wait for a slow client's request bytes"},
    {"--shutdown-timeout", "SEC", "10", "on SIGINT/SIGTERM, time given to requests in flight before they are cancelled"},
    {"--log-requests", nullptr, nullptr, "one line per request on stderr"},
};

// ---- the server's state ----

struct Server {
  std::atomic<bool> ready{false};
  std::atomic<bool> draining{false};
  std::atomic<int> in_flight{0};  // generation requests being served
  infer_model* model = nullptr;
  infer_engine* engine = nullptr;
  std::string model_id;
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
  int64_t created = 0;
  std::string api_key;
  serve::Limits limits;
  double timeout_s = 600;
  double stream_interval_ms = 0;
  int max_queue = 256;
  bool log_requests = false;
  serve::Metrics metrics;
};

void send_error(httplib::Response& res, int status, const std::string& message, const char* type,
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

void send_request_error(httplib::Response& res, const serve::RequestError& e) {
  res.status = e.status;
  res.set_content(serve::error_body(e), "application/json");
}

// Whether the request carries the server's API key (always, when none is
// set): "Authorization: Bearer KEY" or "x-api-key: KEY", compared in
// constant time.
bool key_accepted(const Server& s, const httplib::Request& req) {
  if (s.api_key.empty()) return true;
  std::string given = req.get_header_value("Authorization");
  if (given.rfind("Bearer ", 0) == 0) given = given.substr(7);
  else given = req.get_header_value("x-api-key");
  unsigned diff = given.size() != s.api_key.size();
  for (size_t i = 0; i < s.api_key.size(); ++i) diff |= static_cast<unsigned>(i < given.size() ? given[i] ^ s.api_key[i] : 1);
  return diff == 0;
}

// A C API failure as an HTTP error: the caller's fault is a 400, running
// out of room a 503, anything else a 500.
void send_status_error(httplib::Response& res, infer_status st, const std::string& what) {
  const std::string msg = what + ": " + infer_last_error();
  if (st == INFER_ERR_INVALID_ARGUMENT) send_error(res, 400, msg, "invalid_request_error", "invalid_value");
  else if (st == INFER_ERR_BUSY) send_error(res, 503, msg, "server_error", "unavailable");
  else if (st == INFER_ERR_OUT_OF_MEMORY) send_error(res, 503, msg, "server_error", "out_of_memory");
  else send_error(res, 500, msg, "server_error", infer_status_string(st));
}

// One generator a handler thread, seeded once (std::random_device opens
// /dev/urandom each time it is made).
std::mt19937_64& thread_rng() {
  static thread_local std::mt19937_64 rng(std::random_device{}() ^ std::hash<std::thread::id>{}(std::this_thread::get_id()));
  return rng;
}

std::string random_id(const char* prefix) {
  static const char* hex = "0123456789abcdef";
  std::string s = prefix;
  std::mt19937_64& rng = thread_rng();
  for (int i = 0; i < 24; ++i) s += hex[rng() & 15];
  return s;
}

// ---- the client's connection ----

// Whether fd is a socket whose peer is host:port.
bool peer_is(int fd, const std::string& host_want, int port_want) {
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) return false;
  char host[INET6_ADDRSTRLEN] = {0};
  int port = -1;
  if (ss.ss_family == AF_INET) {
    auto* a = reinterpret_cast<sockaddr_in*>(&ss);
    inet_ntop(AF_INET, &a->sin_addr, host, sizeof host);
    port = ntohs(a->sin_port);
  } else if (ss.ss_family == AF_INET6) {
    auto* a = reinterpret_cast<sockaddr_in6*>(&ss);
    inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof host);
    port = ntohs(a->sin6_port);
  } else {
    return false;
  }
  return port == port_want && host_want == host;
}

// httplib 0.11 does not give a handler its socket; it is found by its peer
// address among the process's sockets, once per request. Then a client that
// closed its end (POLLRDHUP/POLLHUP) is seen at once, even while nothing is
// written to it (a non-streamed reply).
int find_client_socket(const httplib::Request& req) {
  // httplib serves a keep-alive connection's requests on one pool thread:
  // the socket found for the previous request is checked first (one
  // getpeername rather than a walk over every descriptor). A peer address
  // names one live connection, so a match is the right socket.
  static thread_local int last_fd = -1;
  if (last_fd >= 0 && peer_is(last_fd, req.remote_addr, req.remote_port)) return last_fd;
  last_fd = -1;
  DIR* d = opendir("/proc/self/fd");
  if (!d) return -1;
  int found = -1;
  while (dirent* e = readdir(d)) {
    char* end = nullptr;
    const long fd = std::strtol(e->d_name, &end, 10);
    if (*end || fd < 0) continue;
    if (peer_is(static_cast<int>(fd), req.remote_addr, req.remote_port)) {
      found = static_cast<int>(fd);
      break;
    }
  }
  closedir(d);
  last_fd = found;
  return found;
}

bool client_gone(int fd) {
  if (fd < 0) return false;
  pollfd p{fd, static_cast<short>(POLLRDHUP), 0};
  if (::poll(&p, 1, 0) <= 0) return false;
  return (p.revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0;
}

// ---- one generation job: every choice of one HTTP request ----

struct Choice {
  infer_request* req = nullptr;
  int32_t index = 0;
  int32_t prompt_index = 0;
  std::string text;
  bool done = false;
  bool started = false;  // streaming: the role delta was sent
  size_t lp_sent = 0;    // tokens whose log-probabilities were sent
  size_t text_sent = 0;  // bytes of text sent (completions' text_offset)
  std::string held;      // text received but not yet emitted (--stream-interval)
  std::shared_ptr<serve::ToolCallParser> tools;  // streaming with tools: finds the calls
  int32_t n_tool_calls = 0;                      // streaming: calls sent
  Clock::time_point last_emit{};
  infer_request_stats stats{};
};

struct Job {
  Server* srv = nullptr;
  serve::CompletionRequest rq;
  std::vector<Choice> choices;
  std::vector<int32_t> prompt_tokens;  // per prompt
  std::vector<std::string> prompt_texts;
  std::string id;
  int64_t created = 0;
  Clock::time_point start = Clock::now();
  int client_fd = -1;

  explicit Job(Server* s) : srv(s) { srv->in_flight.fetch_add(1); }
  ~Job() {
    for (Choice& c : choices) infer_request_free(c.req);  // cancels what is unfinished
    srv->in_flight.fetch_sub(1);
  }
  Job(const Job&) = delete;
  Job& operator=(const Job&) = delete;
  void cancel_all() {
    for (Choice& c : choices)
      if (!c.done) infer_request_cancel(c.req);
  }
};

enum class PumpEnd { Done, ClientGone, Timeout };

// Collects the text of every choice as it arrives; emit(choice, delta,
// finished) returns false when the client can no longer be written to.
//
// Coalescing (--stream-interval): text that arrives less than the interval
// after the choice's previous piece is held until the interval has passed
// (or the choice ends), so a small model producing thousands of tokens a
// second sends one event per interval rather than one per token. The first
// piece and any piece after a pause longer than the interval go out at
// once: a model slower than one token per interval per stream never waits.
template <class Emit>
PumpEnd pump(Job& job, Emit&& emit) {
  const auto deadline = job.start + std::chrono::duration<double>(job.srv->timeout_s);
  const auto interval = std::chrono::microseconds(static_cast<int64_t>(job.srv->stream_interval_ms * 1000.0));
  char buf[4096];
  for (;;) {
    // How long to wait for the next text: until the earliest held piece is
    // due, or 20 ms to look at the client and the clock again.
    Clock::time_point due = Clock::now() + std::chrono::milliseconds(20);
    bool holding = false;
    for (const Choice& c : job.choices)
      if (!c.done && !c.held.empty()) {
        holding = true;
        due = std::min(due, c.last_emit + interval);
      }
    // While holding text, wait for the due time without waking on every
    // token, but not past the end of a request: one that finishes while its
    // text is held ends its response at once (a closed-loop client waits for
    // it to send its next request; sleeping the whole interval left the
    // sequence's slot idle for half an interval on average).
    if (holding) {
      for (const Choice& c : job.choices) {
        if (c.done) continue;
        const auto left = std::chrono::ceil<std::chrono::milliseconds>(due - Clock::now()).count();
        if (left <= 0) break;
        int32_t fin = 0;
        if (infer_request_wait(c.req, static_cast<int32_t>(std::min<int64_t>(left, 20)), &fin) != INFER_OK || fin) break;
      }
    }
    bool waited = holding, all_done = true;
    for (Choice& c : job.choices) {
      if (c.done) continue;
      all_done = false;
      size_t n = 0;
      int32_t fin = 0;
      int32_t wait_ms = 0;
      if (!waited) {
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(due - Clock::now()).count();
        wait_ms = static_cast<int32_t>(std::clamp<int64_t>(left, 0, 20));
      }
      const infer_status st = infer_request_next_text(c.req, wait_ms, buf, sizeof buf, &n, &fin);
      waited = true;
      if (st != INFER_OK) fin = 1;
      c.held.append(buf, n);
      if (fin) {
        c.done = true;
        infer_request_stats_init(&c.stats);
        infer_request_get_stats(c.req, &c.stats);
      }
      const Clock::time_point now = Clock::now();
      if (fin || (!c.held.empty() && now - c.last_emit >= interval)) {
        std::string delta;
        delta.swap(c.held);
        c.text += delta;
        c.last_emit = now;
        if ((!delta.empty() || fin) && !emit(c, delta, fin != 0)) {
          job.cancel_all();
          return PumpEnd::ClientGone;
        }
      }
    }
    if (all_done) return PumpEnd::Done;
    if (client_gone(job.client_fd)) {
      job.cancel_all();
      return PumpEnd::ClientGone;
    }
    if (Clock::now() > deadline) {
      job.cancel_all();
      return PumpEnd::Timeout;
    }
  }
}

// ---- log-probabilities in the OpenAI shapes ----

double json_logprob(float lp) { return std::isfinite(lp) ? static_cast<double>(lp) : -9999.0; }

std::string token_text(const Server& srv, int32_t id) {
  char buf[256];
  size_t n = 0;
  if (infer_token_piece(srv.model, id, buf, sizeof buf, &n) != INFER_OK) return "";
  return std::string(buf, std::min(n, sizeof buf));
}

json token_bytes(const std::string& t) {
  json b = json::array();
  for (unsigned char c : t) b.push_back(static_cast<int>(c));
  return b;
}

// The log-probabilities of tokens [from, ...) of a choice that are known so
// far; advances `from`. Chat: entries of logprobs.content.
json chat_logprobs(const Server& srv, const Choice& c, size_t& from, int32_t k) {
  json out = json::array();
  std::vector<infer_token_logprob> top(static_cast<size_t>(std::max(k, 0)));
  for (;; ++from) {
    infer_token_logprob chosen{};
    size_t n = 0;
    if (infer_request_logprobs(c.req, from, &chosen, top.data(), top.size(), &n) != INFER_OK) break;
    const std::string t = token_text(srv, chosen.token);
    json alts = json::array();
    for (size_t i = 0; i < std::min(n, top.size()); ++i) {
      const std::string at = token_text(srv, top[i].token);
      alts.push_back({{"token", at}, {"logprob", json_logprob(top[i].logprob)}, {"bytes", token_bytes(at)}});
    }
    out.push_back({{"token", t}, {"logprob", json_logprob(chosen.logprob)}, {"bytes", token_bytes(t)}, {"top_logprobs", alts}});
  }
  return out;
}

// The legacy completions shape: tokens, token_logprobs, top_logprobs (maps),
// text_offset.
json completion_logprobs(const Server& srv, const Choice& c, size_t& from, int32_t k, size_t text_offset) {
  json tokens = json::array(), lps = json::array(), tops = json::array(), offs = json::array();
  for (const json& e : chat_logprobs(srv, c, from, k)) {
    tokens.push_back(e["token"]);
    lps.push_back(e["logprob"]);
    json m = json::object();
    for (const json& a : e["top_logprobs"]) m[a["token"].get<std::string>()] = a["logprob"];
    tops.push_back(m);
    offs.push_back(text_offset);
    text_offset += e["token"].get<std::string>().size();
  }
  return {{"tokens", tokens}, {"token_logprobs", lps}, {"top_logprobs", tops}, {"text_offset", offs}};
}

const char* finish_reason(const infer_request_stats& s) {
  switch (s.finish_reason) {
    case INFER_FINISH_STOP: return "stop";
    case INFER_FINISH_LENGTH: return "length";
    case INFER_FINISH_CANCELLED: return "abort";
    case INFER_FINISH_ERROR: return "error";
    default: return "stop";
  }
}

json usage_json(const Job& job) {
  int64_t prompt = 0, completion = 0, cached = 0;
  std::vector<bool> counted(job.prompt_tokens.size(), false);
  for (const Choice& c : job.choices) {
    completion += c.stats.n_generated_tokens;
    if (!counted[c.prompt_index]) {
      counted[c.prompt_index] = true;
      prompt += job.prompt_tokens[c.prompt_index];
      cached += c.stats.n_cached_tokens;
    }
  }
  return {{"prompt_tokens", prompt},
          {"completion_tokens", completion},
          {"total_tokens", prompt + completion},
          {"prompt_tokens_details", {{"cached_tokens", cached}}}};
}

// ---- building the request ----

// The conversation as the Jinja template's variables, in the shapes Hugging
// Face's apply_chat_template passes them: messages (role, content, and
// tool_calls / tool_call_id / name where given), tools (unless tool_choice is
// "none"), add_generation_prompt. Ordered: a template that serialises the
// tools or the arguments (tojson) writes their keys in the client's order.
std::string chat_context(const Server& srv, const serve::CompletionRequest& rq) {
  using ojson = nlohmann::ordered_json;
  ojson msgs = ojson::array();
  for (const auto& m : rq.messages) {
    ojson o = {{"role", m.role}};
    // content null (an assistant message that only calls tools) is given as
    // "": of the real templates in tests/data/chat_templates, none renders ""
    // worse than null, and Qwen3's, Phi-3's, Zephyr's, DeepSeek's and others
    // fail on null (string concatenation, `in`).
    o["content"] = m.content;
    if (!m.tool_calls.empty()) {
      ojson calls = ojson::array();
      for (const auto& c : m.tool_calls) {
        ojson call = ojson::object();
        if (!c.id.empty()) call["id"] = c.id;
        call["type"] = "function";
        // Object or text, as the template reads them (serve::template_wants_string_arguments).
        call["function"] = {{"name", c.name},
                            {"arguments", srv.string_arguments ? ojson(c.arguments) : ojson::parse(c.arguments)}};
        calls.push_back(std::move(call));
      }
      o["tool_calls"] = std::move(calls);
    }
    if (m.role == "tool") o["tool_call_id"] = m.tool_call_id;
    std::string name = m.name;
    if (m.role == "tool" && name.empty()) {
      // The function's name, from the call this result answers (Hermes 2
      // Pro's template requires it; OpenAI's tool messages do not carry it).
      for (const auto& prev : rq.messages)
        for (const auto& c : prev.tool_calls)
          if (!c.id.empty() && c.id == m.tool_call_id) name = c.name;
    }
    if (!name.empty()) o["name"] = name;
    msgs.push_back(std::move(o));
  }
  ojson ctx = {{"messages", std::move(msgs)}};
  if (rq.tool_choice != serve::ToolChoice::None && !rq.tools_json.empty()) ctx["tools"] = ojson::parse(rq.tools_json);
  ctx["add_generation_prompt"] = true;
  return ctx.dump(-1, ' ', false, ojson::error_handler_t::replace);
}

std::string render_chat(Server& srv, const serve::CompletionRequest& rq, serve::RequestError* err) {
  const auto& msgs = rq.messages;
  auto run = [&](auto&& call) -> std::string {
    size_t need = 0;
    infer_status st = call(nullptr, 0, &need);
    if (st == INFER_ERR_BUFFER_TOO_SMALL) {
      std::string out(need, '\0');
      st = call(out.data(), out.size(), &need);
      if (st == INFER_OK) {
        out.resize(need - 1);
        return out;
      }
    }
    err->message = std::string("the conversation does not fit the chat template: ") + infer_last_error();
    err->param = "messages";
    return "";
  };
  if (srv.jinja) {
    const std::string ctx = chat_context(srv, rq);
    const char* tmpl = srv.jinja_file_text.empty() ? nullptr : srv.jinja_file_text.c_str();
    return run([&](char* buf, size_t size, size_t* need) {
      return infer_chat_apply_template_json(srv.model, tmpl, ctx.c_str(), buf, size, need);
    });
  }
  // A built-in template: role and content only.
  for (size_t i = 0; i < msgs.size(); ++i)
    if (msgs[i].role == "tool" || !msgs[i].tool_calls.empty()) {
      err->message = "messages with tool calls or tool results need a Jinja chat template; the chat template in use is the built-in '" +
                     srv.tmpl + "' (use a model with a Jinja template, or --chat-template-file)";
      err->param = "messages[" + std::to_string(i) + "]";
      return "";
    }
  std::vector<infer_chat_message> cm;
  for (const auto& m : msgs) cm.push_back({m.role.c_str(), m.content.c_str()});
  const char* tmpl = srv.own_template ? nullptr : srv.tmpl.c_str();
  return run([&](char* buf, size_t size, size_t* need) {
    return infer_chat_apply_template(srv.model, tmpl, cm.data(), cm.size(), 1, buf, size, need);
  });
}

// A GBNF grammar with every rule name (identifiers outside literals, character
// classes, repetition counts and comments) prefixed, so that several converted grammars can live
// in one without their rules colliding.
std::string prefix_rules(const std::string& g, const std::string& prefix) {
  std::string out;
  auto ident = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_'; };
  for (size_t i = 0; i < g.size();) {
    const char c = g[i];
    if (c == '"' || c == '[' || c == '{') {  // literals, classes, repetition counts {m,n}
      const char close = c == '"' ? '"' : c == '[' ? ']' : '}';
      size_t k = i + 1;
      while (k < g.size() && g[k] != close) k += g[k] == '\\' ? 2 : 1;
      k = std::min(k + 1, g.size());
      out.append(g, i, k - i);
      i = k;
    } else if (ident(c)) {
      size_t k = i;
      while (k < g.size() && ident(g[k])) ++k;
      out += prefix;
      out.append(g, i, k - i);
      i = k;
    } else if (c == '#') {
      size_t k = g.find('\n', i);
      if (k == std::string::npos) k = g.size();
      out.append(g, i, k - i);
      i = k;
    } else {
      out += c;
      ++i;
    }
  }
  return out;
}

// Text as a GBNF string literal.
std::string gbnf_literal(const std::string& text) {
  std::string out = "\"";
  for (char c : text) {
    if (c == '"' || c == '\\') out += '\\', out += c;
    else if (c == '\n') out += "\\n";
    else if (c == '\r') out += "\\r";
    else if (c == '\t') out += "\\t";
    else out += c;
  }
  return out + "\"";
}

// tool_choice "required" or a named function: a grammar that lets the model
// write only calls in its template's format: {"name": "NAME", "arguments":
// ARGS} (Llama 3: "parameters") with ARGS valid against the tool's parameters
// schema (the library's JSON-schema conversion). Empty with *err set when
// the format has none or a schema cannot be converted.
std::string forced_call_grammar(const Server& srv, const serve::CompletionRequest& rq, std::string* err) {
  using ojson = nlohmann::ordered_json;
  const ojson tools = ojson::parse(rq.tools_json);
  const char* args_key = srv.tool_format == serve::ToolFormat::Llama3 ? "parameters" : "arguments";
  std::string g, alts;
  int n = 0;
  for (const ojson& t : tools) {
    const ojson& f = t["function"];
    const std::string name = f["name"].get<std::string>();
    if (rq.tool_choice == serve::ToolChoice::Named && name != rq.tool_choice_name) continue;
    const std::string head = "{\"name\": " + ojson(name).dump() + ", \"" + args_key + "\": ";
    std::string args = gbnf_literal("{}");  // no parameters declared: no arguments
    const ojson* params = f.contains("parameters") ? &f["parameters"] : nullptr;
    if (params && !(params->contains("properties") && (*params)["properties"].is_object() && (*params)["properties"].empty())) {
      const std::string schema = params->dump();
      size_t need = 0;
      infer_status st = infer_json_schema_to_grammar(schema.c_str(), nullptr, 0, &need);
      std::string sub;
      if (st == INFER_ERR_BUFFER_TOO_SMALL) {
        sub.assign(need, '\0');
        st = infer_json_schema_to_grammar(schema.c_str(), sub.data(), sub.size(), &need);
        sub.resize(need ? need - 1 : 0);
      }
      if (st != INFER_OK) {
        *err = "the parameters of tool '" + name + "' cannot be turned into a grammar: " + infer_last_error();
        return "";
      }
      const std::string prefix = "tool" + std::to_string(n) + "-";
      g += prefix_rules(sub, prefix) + "\n";
      args = prefix + "root";
    }
    alts += std::string(alts.empty() ? "" : " | ") + gbnf_literal(head) + " " + args + " " + gbnf_literal("}");
    ++n;
  }
  g += "tool-call-json ::= " + alts + "\n";
  const bool many = rq.parallel_tool_calls && rq.tool_choice == serve::ToolChoice::Required;
  switch (srv.tool_format) {
    case serve::ToolFormat::Hermes:
      g += many ? "root ::= tool-call-tagged (\"\\n\" tool-call-tagged)*\n" : "root ::= tool-call-tagged\n";
      g += "tool-call-tagged ::= \"<tool_call>\\n\" tool-call-json \"\\n</tool_call>\"\n";
      break;
    case serve::ToolFormat::Mistral:
      g += many ? "root ::= \"[\" tool-call-json (\", \" tool-call-json)* \"]\"\n" : "root ::= \"[\" tool-call-json \"]\"\n";
      break;
    case serve::ToolFormat::Llama3:
      g += "root ::= tool-call-json\n";
      break;
    default:
      *err = "tool_choice 'required' or a named function needs a template whose tool-call format infer serve knows";
      return "";
  }
  return g;
}

bool count_tokens(Server& srv, const std::string& text, int32_t add_bos, int32_t special, int32_t* n) {
  size_t count = 0;
  const infer_status st = infer_tokenize(srv.model, text.data(), text.size(), add_bos, special, nullptr, 0, &count);
  if (st != INFER_OK && st != INFER_ERR_BUFFER_TOO_SMALL) return false;
  *n = static_cast<int32_t>(count);
  return true;
}

void log_line(const Server& srv, const httplib::Request& req, const httplib::Response& res, double ms) {
  if (srv.log_requests)
    std::fprintf(stderr, "%s %s -> %d (%.1f ms)\n", req.method.c_str(), req.path.c_str(), res.status, ms);
}

// /v1/chat/completions and /v1/completions.
void handle_completion(Server& srv, const httplib::Request& req, httplib::Response& res, serve::Endpoint ep) {
  const char* ep_name = ep == serve::Endpoint::Chat ? "chat" : "completions";
  if (!srv.ready) return send_error(res, 503, "the model is loading", "server_error", "loading");
  if (srv.draining) return send_error(res, 503, "the server is shutting down", "server_error", "shutting_down");
  serve::RequestError err;
  auto parsed = serve::parse_completion_request(req.body, ep, srv.limits, &err);
  if (!parsed) return send_request_error(res, err);
  if (srv.in_flight.load() >= srv.max_queue)
    return send_error(res, 429, "too many requests in flight (--max-queue " + std::to_string(srv.max_queue) + ")",
                      "rate_limit_error", "too_many_requests");
  auto job = std::make_shared<Job>(&srv);
  job->rq = std::move(*parsed);
  serve::CompletionRequest& rq = job->rq;
  job->id = random_id(ep == serve::Endpoint::Chat ? "chatcmpl-" : "cmpl-");
  job->created = static_cast<int64_t>(std::time(nullptr));
  // Constrained output: the library matches a grammar token by token.
  std::string schema;
  if (rq.response_format == serve::ResponseFormat::JsonObject) schema = R"({"type": "object"})";
  else if (rq.response_format == serve::ResponseFormat::JsonSchema) schema = rq.json_schema;
  const char* constraint_param = !rq.grammar.empty() ? "grammar" : !schema.empty() ? "response_format" : nullptr;
  // Function calling (tools): the template must be Jinja and teach a format
  // the parser reads; "required" or a named function force a call with a grammar.
  const bool use_tools = ep == serve::Endpoint::Chat && rq.tool_choice != serve::ToolChoice::None;
  if (use_tools) {
    if (!srv.jinja)
      return send_error(res, 400, "'tools' need the model's Jinja chat template; the chat template in use is the built-in '" + srv.tmpl +
                                      "', which has no tool format (use a model with a Jinja template, or --chat-template-file)",
                        "invalid_request_error", "invalid_value", "tools");
    if (srv.tool_format == serve::ToolFormat::None)
      return send_error(res, 400, "'tools' are not supported with this model's chat template: it teaches none of the tool-call formats "
                                  "infer serve reads (<tool_call> of Hermes/Qwen, Llama 3.x JSON, Mistral [TOOL_CALLS])",
                        "invalid_request_error", "invalid_value", "tools");
    if (rq.tool_choice == serve::ToolChoice::Required || rq.tool_choice == serve::ToolChoice::Named) {
      if (constraint_param)
        return send_error(res, 400, std::string("give either tool_choice 'required' / a named function or '") + constraint_param + "', not both",
                          "invalid_request_error", "invalid_value", "tool_choice");
      std::string gerr;
      rq.grammar = forced_call_grammar(srv, rq, &gerr);
      if (rq.grammar.empty()) return send_error(res, 400, gerr, "invalid_request_error", "invalid_value", "tool_choice");
      constraint_param = "tool_choice";
    }
  }
  if (!schema.empty()) {
    // Checked (and converted) once here, so that a bad schema is a 400 naming it.
    size_t need = 0;
    const infer_status st = infer_json_schema_to_grammar(schema.c_str(), nullptr, 0, &need);
    if (st != INFER_OK && st != INFER_ERR_BUFFER_TOO_SMALL)
      return send_error(res, 400, infer_last_error(), "invalid_request_error", "invalid_schema", "response_format");
  } else if (!rq.grammar.empty() && infer_grammar_check(rq.grammar.c_str()) != INFER_OK) {
    return send_error(res, 400, infer_last_error(), "invalid_request_error", "invalid_grammar", "grammar");
  }

  // Prompts: the rendered conversation, or the given texts / token ids.
  int32_t add_bos = -1, special = 0;
  std::vector<std::string> stops = rq.stop;
  if (ep == serve::Endpoint::Chat) {
    const std::string text = render_chat(srv, rq, &err);
    if (!err.message.empty()) return send_request_error(res, err);
    job->prompt_texts.push_back(text);
    add_bos = 0;
    special = 1;
    for (const std::string& s : srv.tmpl_stops) stops.push_back(s);
  } else {
    for (const auto& p : rq.prompts) job->prompt_texts.push_back(p.text);
  }
  std::vector<const char*> stop_ptrs;
  for (const std::string& s : stops) stop_ptrs.push_back(s.c_str());

  infer_sampling_params sp;
  infer_sampling_params_init(&sp);
  // OpenAI's defaults: plain sampling at temperature 1.
  sp.temperature = static_cast<float>(rq.temperature.value_or(1.0));
  sp.top_p = static_cast<float>(rq.top_p.value_or(1.0));
  sp.top_k = rq.top_k.value_or(0);
  sp.min_p = static_cast<float>(rq.min_p.value_or(0.0));
  sp.presence_penalty = static_cast<float>(rq.presence_penalty.value_or(0.0));
  sp.frequency_penalty = static_cast<float>(rq.frequency_penalty.value_or(0.0));
  sp.repeat_penalty = static_cast<float>(rq.repetition_penalty.value_or(1.0));
  sp.seed = rq.seed ? static_cast<uint64_t>(*rq.seed) : thread_rng()();
  std::vector<int32_t> bias_ids;
  std::vector<float> bias_values;
  for (const auto& [id, b] : rq.logit_bias) {
    if (id >= srv.n_vocab)
      return send_error(res, 400, "logit_bias: token id " + std::to_string(id) + " is out of range (vocabulary of " +
                                      std::to_string(srv.n_vocab) + ")", "invalid_request_error", "invalid_value", "logit_bias");
    bias_ids.push_back(id);
    bias_values.push_back(b <= -100 ? -INFINITY : b);
  }
  sp.logit_bias_tokens = bias_ids.empty() ? nullptr : bias_ids.data();
  sp.logit_bias_values = bias_values.empty() ? nullptr : bias_values.data();
  sp.n_logit_bias = bias_ids.size();

  for (size_t pi = 0; pi < job->prompt_texts.size(); ++pi) {
    const bool use_tokens = ep == serve::Endpoint::Completion && rq.prompts[pi].use_tokens;
    int32_t n_prompt = 0;
    if (use_tokens) {
      n_prompt = static_cast<int32_t>(rq.prompts[pi].tokens.size());
      for (int32_t t : rq.prompts[pi].tokens)
        if (t >= srv.n_vocab)
          return send_error(res, 400, "prompt: token id " + std::to_string(t) + " is out of range", "invalid_request_error",
                            "invalid_value", "prompt");
    } else if (!count_tokens(srv, job->prompt_texts[pi], add_bos, special, &n_prompt)) {
      return send_status_error(res, INFER_ERR_INVALID_ARGUMENT, "tokenizing the prompt");
    }
    n_prompt = std::max(n_prompt, 1);
    if (n_prompt >= srv.n_ctx)
      return send_error(res, 400, "the prompt has " + std::to_string(n_prompt) + " tokens; the context holds " +
                                      std::to_string(srv.n_ctx) + " (prompt and completion together)",
                        "invalid_request_error", "context_length_exceeded", ep == serve::Endpoint::Chat ? "messages" : "prompt");
    job->prompt_tokens.push_back(n_prompt);
    const int32_t room = srv.n_ctx - n_prompt;
    infer_request_params rp;
    infer_request_params_init(&rp);
    if (use_tokens) {
      rp.prompt_tokens = rq.prompts[pi].tokens.data();
      rp.n_prompt_tokens = rq.prompts[pi].tokens.size();
    } else {
      rp.prompt = job->prompt_texts[pi].c_str();
      rp.prompt_len = job->prompt_texts[pi].size();
      rp.add_bos = add_bos;
      rp.parse_special = special;
    }
    rp.max_tokens = std::min(rq.max_tokens.value_or(room), room);
    rp.sampling = &sp;
    rp.stop = stop_ptrs.empty() ? nullptr : stop_ptrs.data();
    rp.n_stop = stop_ptrs.size();
    rp.ignore_eos = rq.ignore_eos ? 1 : 0;
    rp.logprobs = rq.logprobs ? rq.top_logprobs : -1;
    if (!rq.grammar.empty()) rp.grammar = rq.grammar.c_str();
    if (!schema.empty()) rp.json_schema = schema.c_str();
    std::vector<infer_request*> handles(static_cast<size_t>(rq.n), nullptr);
    const infer_status st = rq.n == 1 ? infer_submit(srv.engine, &rp, handles.data())
                                      : infer_submit_n(srv.engine, &rp, rq.n, handles.data());
    if (st != INFER_OK) {
      if (st == INFER_ERR_INVALID_ARGUMENT && constraint_param)
        return send_error(res, 400, infer_last_error(), "invalid_request_error", "invalid_value", constraint_param);
      return send_status_error(res, st, "submitting the request");
    }
    for (int32_t i = 0; i < rq.n; ++i) {
      Choice c;
      c.req = handles[static_cast<size_t>(i)];
      c.index = static_cast<int32_t>(pi) * rq.n + i;
      c.prompt_index = static_cast<int32_t>(pi);
      if (use_tools && rq.stream) c.tools = std::make_shared<serve::ToolCallParser>(srv.tool_format, rq.tool_names);
      job->choices.push_back(std::move(c));
    }
  }
  srv.metrics.on_request_started(ep_name);
  const std::string model_name = rq.model.empty() ? srv.model_id : rq.model;

  if (!rq.stream) {
    job->client_fd = find_client_socket(req);
    const PumpEnd end = pump(*job, [](Choice&, const std::string&, bool) { return true; });
    if (end == PumpEnd::ClientGone) {
      srv.metrics.on_request_ended(ep_name, "disconnected");
      res.status = 499;
      return;
    }
    if (end == PumpEnd::Timeout) {
      srv.metrics.on_request_ended(ep_name, "timeout");
      return send_error(res, 504, "the request took longer than --timeout", "server_error", "timeout");
    }
    for (const Choice& c : job->choices) {
      srv.metrics.on_finished(c.stats);
      if (c.stats.finish_reason == INFER_FINISH_ERROR) {
        srv.metrics.on_request_ended(ep_name, "error");
        const std::string msg = std::string("generation failed: ") + infer_request_error(c.req);
        return send_error(res, c.stats.status == INFER_ERR_OUT_OF_MEMORY ? 503 : 500, msg, "server_error",
                          infer_status_string(c.stats.status));
      }
    }
    json choices = json::array();
    for (const Choice& c : job->choices) {
      size_t from = 0;
      if (ep == serve::Endpoint::Chat) {
        json lp = rq.logprobs ? json{{"content", chat_logprobs(srv, c, from, rq.top_logprobs)}, {"refusal", nullptr}} : json(nullptr);
        json message = {{"role", "assistant"}, {"content", c.text}, {"refusal", nullptr}};
        const char* fr = finish_reason(c.stats);
        if (use_tools) {
          const serve::ParsedReply pr = serve::parse_tool_calls(srv.tool_format, rq.tool_names, c.text);
          if (!pr.calls.empty()) {
            message["content"] = pr.content.empty() ? json(nullptr) : json(pr.content);
            json calls = json::array();
            for (const serve::ToolCall& tc : pr.calls)
              calls.push_back({{"id", random_id("call_")}, {"type", "function"},
                               {"function", {{"name", tc.name}, {"arguments", tc.arguments}}}});
            message["tool_calls"] = calls;
            if (c.stats.finish_reason == INFER_FINISH_STOP) fr = "tool_calls";
          }
        }
        choices.push_back({{"index", c.index}, {"message", message}, {"logprobs", lp}, {"finish_reason", fr}});
      } else {
        const std::string prefix = rq.echo ? job->prompt_texts[c.prompt_index] : "";
        json lp = rq.logprobs ? completion_logprobs(srv, c, from, rq.top_logprobs, prefix.size()) : json(nullptr);
        choices.push_back({{"index", c.index}, {"text", prefix + c.text}, {"logprobs", lp}, {"finish_reason", finish_reason(c.stats)}});
      }
    }
    json out = {{"id", job->id},
                {"object", ep == serve::Endpoint::Chat ? "chat.completion" : "text_completion"},
                {"created", job->created},
                {"model", model_name},
                {"system_fingerprint", std::string("libinfer-") + infer_version()},
                {"choices", choices},
                {"usage", usage_json(*job)}};
    srv.metrics.on_request_ended(ep_name, "ok");
    res.set_content(dump(out), "application/json");
    return;
  }

  // Streaming: server-sent events, one chunk per piece of text of a choice,
  // a last chunk per choice with its finish_reason, the usage chunk (empty
  // choices) when asked, then [DONE].
  job->client_fd = find_client_socket(req);
  res.set_header("Cache-Control", "no-cache");
  res.set_header("X-Accel-Buffering", "no");
  res.set_chunked_content_provider(
      "text/event-stream",
      [job, ep, ep_name, model_name](size_t, httplib::DataSink& sink) {
        Server& srv = *job->srv;
        const bool chat = ep == serve::Endpoint::Chat;
        const bool usage = job->rq.include_usage;
        // Events are collected in `out` and written together: one send per
        // piece of text, and the last one (final chunks, usage, [DONE]) in
        // one write, not four (each write on loopback wakes the client).
        std::string out;
        // (sink.write checks that the socket is writable itself.)
        auto flush = [&] {
          if (out.empty()) return true;
          const bool ok = sink.write(out.data(), out.size());
          out.clear();
          return ok;
        };
        auto add_event = [&](const json& j) {
          out += "data: ";
          out += dump(j);
          out += "\n\n";
        };
        auto chunk = [&](json choice) {
          json j = {{"id", job->id},
                    {"object", chat ? "chat.completion.chunk" : "text_completion"},
                    {"created", job->created},
                    {"model", model_name},
                    {"system_fingerprint", std::string("libinfer-") + infer_version()},
                    {"choices", json::array({std::move(choice)})}};
          if (usage) j["usage"] = nullptr;
          add_event(j);
        };
        bool failed = false;
        const PumpEnd end = pump(*job, [&](Choice& c, const std::string& delta, bool fin) {
          if (chat && !c.started) {
            c.started = true;
            chunk({{"index", c.index}, {"delta", {{"role", "assistant"}, {"content", ""}}}, {"logprobs", nullptr},
                   {"finish_reason", nullptr}});
          }
          if (c.tools) {
            // Function calling: text that may open a call is held until the
            // parser knows; complete calls go out as delta.tool_calls.
            std::vector<serve::ToolEvent> evs = c.tools->feed(delta);
            if (fin) {
              std::vector<serve::ToolEvent> rest = c.tools->finish();
              evs.insert(evs.end(), std::make_move_iterator(rest.begin()), std::make_move_iterator(rest.end()));
            }
            for (serve::ToolEvent& ev : evs) {
              json lp = nullptr;
              if (job->rq.logprobs) lp = {{"content", chat_logprobs(srv, c, c.lp_sent, job->rq.top_logprobs)}, {"refusal", nullptr}};
              json d;
              if (ev.is_call) {
                d = {{"tool_calls", json::array({{{"index", c.n_tool_calls++},
                                                  {"id", random_id("call_")},
                                                  {"type", "function"},
                                                  {"function", {{"name", ev.call.name}, {"arguments", ev.call.arguments}}}}})}};
              } else {
                d = {{"content", ev.content}};
              }
              chunk(json{{"index", c.index}, {"delta", d}, {"logprobs", lp}, {"finish_reason", nullptr}});
            }
            c.text_sent += delta.size();
          } else if (!delta.empty()) {
            json lp = nullptr;
            if (job->rq.logprobs) {
              if (chat) lp = {{"content", chat_logprobs(srv, c, c.lp_sent, job->rq.top_logprobs)}, {"refusal", nullptr}};
              else lp = completion_logprobs(srv, c, c.lp_sent, job->rq.top_logprobs, c.text_sent);
            }
            c.text_sent += delta.size();
            json ch = chat ? json{{"index", c.index}, {"delta", {{"content", delta}}}, {"logprobs", lp}, {"finish_reason", nullptr}}
                           : json{{"index", c.index}, {"text", delta}, {"logprobs", lp}, {"finish_reason", nullptr}};
            chunk(ch);
          }
          if (fin) {
            srv.metrics.on_finished(c.stats);
            if (c.stats.finish_reason == INFER_FINISH_ERROR) {
              failed = true;
              serve::RequestError e;
              e.status = 500;
              e.type = "server_error";
              e.code = infer_status_string(c.stats.status);
              e.message = std::string("generation failed: ") + infer_request_error(c.req);
              out += "data: " + serve::error_body(e) + "\n\n";
              return flush();
            }
            json lp = nullptr;  // tokens not covered by a text delta (held back, or a stop string)
            if (job->rq.logprobs) {
              if (chat) lp = {{"content", chat_logprobs(srv, c, c.lp_sent, job->rq.top_logprobs)}, {"refusal", nullptr}};
              else lp = completion_logprobs(srv, c, c.lp_sent, job->rq.top_logprobs, c.text_sent);
            }
            const char* fr = c.n_tool_calls > 0 && c.stats.finish_reason == INFER_FINISH_STOP ? "tool_calls" : finish_reason(c.stats);
            json ch = chat ? json{{"index", c.index}, {"delta", json::object()}, {"logprobs", lp}, {"finish_reason", fr}}
                           : json{{"index", c.index}, {"text", ""}, {"logprobs", lp}, {"finish_reason", finish_reason(c.stats)}};
            chunk(ch);
            // The last choice's end waits for the usage chunk and [DONE].
            const bool last = std::all_of(job->choices.begin(), job->choices.end(), [](const Choice& o) { return o.done; });
            return last || flush();
          }
          return flush();
        });
        if (end == PumpEnd::ClientGone) {
          srv.metrics.on_request_ended(ep_name, "disconnected");
          sink.done();
          return false;
        }
        if (end == PumpEnd::Timeout) {
          serve::RequestError e;
          e.status = 504;
          e.type = "server_error";
          e.code = "timeout";
          e.message = "the request took longer than --timeout";
          out += "data: " + serve::error_body(e) + "\n\n";
        } else if (usage) {
          json j = {{"id", job->id},
                    {"object", chat ? "chat.completion.chunk" : "text_completion"},
                    {"created", job->created},
                    {"model", model_name},
                    {"choices", json::array()},
                    {"usage", usage_json(*job)}};
          add_event(j);
        }
        out += "data: [DONE]\n\n";
        flush();
        sink.done();
        srv.metrics.on_request_ended(ep_name, end == PumpEnd::Timeout ? "timeout" : failed ? "error" : "ok");
        return true;
      });
}

// /apply-template (as llama-server's): a chat request's body, answered with
// the prompt its conversation renders to ({"prompt": "..."}), nothing generated.
void handle_apply_template(Server& srv, const httplib::Request& req, httplib::Response& res) {
  if (!srv.ready) return send_error(res, 503, "the model is loading", "server_error", "loading");
  serve::RequestError err;
  auto rq = serve::parse_completion_request(req.body, serve::Endpoint::Chat, srv.limits, &err);
  if (!rq) return send_request_error(res, err);
  if (rq->tool_choice != serve::ToolChoice::None && !srv.jinja)
    return send_error(res, 400, "'tools' need the model's Jinja chat template", "invalid_request_error", "invalid_value", "tools");
  const std::string text = render_chat(srv, *rq, &err);
  if (!err.message.empty()) return send_request_error(res, err);
  res.set_content(dump(json{{"prompt", text}}), "application/json");
}

void handle_tokenize(Server& srv, const httplib::Request& req, httplib::Response& res) {
  if (!srv.ready) return send_error(res, 503, "the model is loading", "server_error", "loading");
  serve::RequestError err;
  auto tr = serve::parse_tokenize_request(req.body, &err);
  if (!tr) return send_request_error(res, err);
  size_t n = 0;
  const int32_t add_bos = tr->add_special ? -1 : 0, special = tr->parse_special ? 1 : 0;
  infer_status st = infer_tokenize(srv.model, tr->content.data(), tr->content.size(), add_bos, special, nullptr, 0, &n);
  std::vector<int32_t> ids(n);
  if (st == INFER_ERR_BUFFER_TOO_SMALL || st == INFER_OK)
    st = infer_tokenize(srv.model, tr->content.data(), tr->content.size(), add_bos, special, ids.data(), ids.size(), &n);
  if (st != INFER_OK) return send_status_error(res, st, "tokenizing");
  json toks = json::array();
  for (size_t i = 0; i < n; ++i) {
    if (!tr->with_pieces) {
      toks.push_back(ids[i]);
      continue;
    }
    char buf[256];
    size_t nb = 0;
    infer_token_piece(srv.model, ids[i], buf, sizeof buf, &nb);
    toks.push_back({{"id", ids[i]}, {"piece", std::string(buf, nb)}});
  }
  res.set_content(dump(json{{"tokens", toks}}), "application/json");
}

void handle_detokenize(Server& srv, const httplib::Request& req, httplib::Response& res) {
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
  const size_t max_body = static_cast<size_t>(a.get_int("--max-body-mb", 8, 1, 4096)) << 20;
  const int max_conn = static_cast<int>(a.get_int("--max-connections", 64, 1, 65536));
  srv->max_queue = static_cast<int>(a.get_int("--max-queue", 256, 1, 1 << 20));
  srv->timeout_s = a.get_float("--timeout", 600, 0.001, 1e9, "(0, 1e9]");
  srv->stream_interval_ms = a.get_float("--stream-interval", 20, 0, 1000, "[0, 1000]");
  const double read_timeout = a.get_float("--read-timeout", 30, 0.001, 1e6, "(0, 1e6]");
  const double shutdown_timeout = a.get_float("--shutdown-timeout", 10, 0, 1e6, "[0, 1e6]");
  srv->log_requests = a.flag("--log-requests");
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
  srv->model_id = a.get("--alias");
  if (srv->model_id.empty()) {
    const size_t slash = path.rfind('/');
    srv->model_id = slash == std::string::npos ? path : path.substr(slash + 1);
  }
  srv->created = static_cast<int64_t>(std::time(nullptr));

  // Every thread from here on (HTTP pool, engine) inherits the blocked set.
  sigset_t sigs = shutdown_signals();
  pthread_sigmask(SIG_BLOCK, &sigs, nullptr);
  ::signal(SIGPIPE, SIG_IGN);

  httplib::Server http;
  http.new_task_queue = [max_conn] { return new httplib::ThreadPool(static_cast<size_t>(max_conn)); };
  http.set_payload_max_length(max_body);
  http.set_read_timeout(std::chrono::duration<double>(read_timeout));
  http.set_write_timeout(std::chrono::seconds(30));
  http.set_keep_alive_timeout(5);
  // httplib closes a keep-alive connection after 5 requests by default: a
  // client sending requests back to back reconnected every fifth one (a new
  // connection, a new pool task, the client socket searched for again).
  http.set_keep_alive_max_count(100000);
  // Streamed events are small writes: without TCP_NODELAY, Nagle's algorithm
  // holds each one until the client's delayed ACK (about 40 ms on Linux), so
  // a stream arrived in bursts and TTFT read ~90 ms on loopback.
  http.set_tcp_nodelay(true);
  Server& s = *srv;
  http.set_error_handler([&s](const httplib::Request&, httplib::Response& res) {
    if (!res.body.empty()) return;
    if (res.status == 404) send_error(res, 404, "no such endpoint", "invalid_request_error", "not_found");
    else if (res.status == 413) send_error(res, 413, "the request body is too large (--max-body-mb)", "invalid_request_error", "payload_too_large");
    else if (res.status == 405) send_error(res, 405, "method not allowed", "invalid_request_error", "method_not_allowed");
    else send_error(res, res.status, "HTTP error " + std::to_string(res.status), "invalid_request_error");
  });
  http.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
    std::string what = "internal error";
    try {
      std::rethrow_exception(ep);
    } catch (const std::bad_alloc&) {
      what = "out of memory";
    } catch (const std::exception& e) {
      what = e.what();
    } catch (...) {
    }
    send_error(res, 500, what, "server_error", "internal_error");
  });
  http.set_logger([&s](const httplib::Request& req, const httplib::Response& res) {
    s.metrics.on_http(res.status);
    log_line(s, req, res, 0);
  });

  // The API key is checked in each handler, after httplib has read the
  // request's body: answering earlier (in a pre-routing handler) leaves the
  // refused body in the connection, where the next keep-alive request on it
  // would be parsed from it (a 400 for a well-formed request).
  auto keyed = [&s](auto handler) {
    return [&s, handler](const httplib::Request& q, httplib::Response& r) {
      if (!key_accepted(s, q)) {
        send_error(r, 401, "invalid or missing API key (Authorization: Bearer KEY)", "authentication_error",
                   "invalid_api_key");
        return;
      }
      handler(q, r);
    };
  };
  http.Post("/v1/chat/completions", keyed([&s](const httplib::Request& q, httplib::Response& r) {
    handle_completion(s, q, r, serve::Endpoint::Chat);
  }));
  http.Post("/v1/completions", keyed([&s](const httplib::Request& q, httplib::Response& r) {
    handle_completion(s, q, r, serve::Endpoint::Completion);
  }));
  http.Post("/apply-template", keyed([&s](const httplib::Request& q, httplib::Response& r) { handle_apply_template(s, q, r); }));
  http.Post("/tokenize", keyed([&s](const httplib::Request& q, httplib::Response& r) { handle_tokenize(s, q, r); }));
  http.Post("/detokenize", keyed([&s](const httplib::Request& q, httplib::Response& r) { handle_detokenize(s, q, r); }));
  http.Get("/health", [&s](const httplib::Request&, httplib::Response& r) {
    if (s.draining) return send_error(r, 503, "the server is shutting down", "server_error", "shutting_down");
    if (!s.ready) return send_error(r, 503, "the model is loading", "server_error", "loading");
    r.set_content(R"({"status":"ok"})", "application/json");
  });
  http.Get("/v1/models", keyed([&s](const httplib::Request&, httplib::Response& r) {
    json data = json::array();
    if (s.ready) data.push_back(model_json(s));
    r.set_content(dump(json{{"object", "list"}, {"data", data}}), "application/json");
  }));
  http.Get(R"(/v1/models/(.+))", keyed([&s](const httplib::Request& q, httplib::Response& r) {
    if (!s.ready || q.matches[1] != s.model_id)
      return send_error(r, 404, "the model '" + std::string(q.matches[1]) + "' does not exist", "invalid_request_error",
                        "model_not_found", "model");
    r.set_content(dump(model_json(s)), "application/json");
  }));
  http.Get("/metrics", keyed([&s](const httplib::Request&, httplib::Response& r) {
    infer_engine_stats es;
    infer_engine_stats_init(&es);
    const bool have = s.ready && infer_engine_get_stats(s.engine, &es) == INFER_OK;
    r.set_content(s.metrics.render(have ? &es : nullptr, s.in_flight.load()), "text/plain; version=0.0.4; charset=utf-8");
  }));

  // Listen first: /health answers 503 while the model loads.
  const int bound = port == 0 ? http.bind_to_any_port(host) : (http.bind_to_port(host, port) ? port : -1);
  if (bound < 0) throw ApiError{"cannot listen on " + host + ":" + std::to_string(port)};
  std::thread listener([&http] { http.listen_after_bind(); });
  std::fprintf(stderr, "infer serve: listening on http://%s:%d (loading %s)\n", host.c_str(), bound, path.c_str());
  std::fflush(stderr);

  struct Cleanup {
    httplib::Server& http;
    std::thread& listener;
    Server& s;
    ~Cleanup() {
      if (s.engine) infer_engine_stop(s.engine, 0);
      http.stop();
      if (listener.joinable()) listener.join();
      infer_engine_free(s.engine);
      infer_model_free(s.model);
    }
  } cleanup{http, listener, s};

  infer_model_params mp;
  infer_model_params_init(&mp);
  mp.backend = backend;
  check(infer_model_load(path.c_str(), &mp, &s.model), ("loading " + path).c_str());
  load_draft(a, ep, draft);
  check(infer_engine_create(s.model, &ep, &s.engine), "creating the engine");
  infer_model_info info;
  infer_model_info_init(&info);
  check(infer_model_get_info(s.model, &info), "reading model info");
  s.n_ctx = ep.n_ctx > 0 ? ep.n_ctx : info.n_ctx_train;
  s.n_vocab = info.n_vocab;
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
                          "Endpoints: POST /v1/chat/completions, /v1/completions, /tokenize, /detokenize, /apply-template;\n"
                          "GET /v1/models, /v1/models/{id}, /health (503 while loading), /metrics (Prometheus text).\n"
                          "SIGINT/SIGTERM: requests in flight get --shutdown-timeout to finish, then are cancelled.\n"
                          "Function calling (tools, tool_choice, tool_calls, role 'tool') needs a Jinja chat template (the\n"
                          "model's, or --chat-template-file) in the Hermes/Qwen, Llama 3.x or Mistral tool-call format.",
                          cmd_serve}};

}  // namespace
}  // namespace cli
