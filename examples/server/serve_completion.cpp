// infer serve's generation endpoints: /v1/chat/completions and
// /v1/completions (parse -> build the job -> submit -> respond, streamed as
// server-sent events or whole) and /apply-template.
#include <algorithm>
#include <cmath>
#include <memory>

#include "json_limits.h"
#include "serve_common.h"
#include "tool_grammar.h"

namespace cli {
namespace {

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
  http::Response* res = nullptr;  // the client's connection (whether it went away)

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
    if (job.res && job.res->client_gone()) {
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
                            {"arguments", srv.string_arguments ? ojson(c.arguments) : serve::parse_json<ojson>(c.arguments, "tool_calls.function.arguments")}};
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
  if (rq.tool_choice != serve::ToolChoice::None && !rq.tools_json.empty()) ctx["tools"] = serve::parse_json<ojson>(rq.tools_json, "tools");
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
    std::string ctx;
    try {
      ctx = chat_context(srv, rq);
    } catch (const serve::JsonLimitError& e) {
      err->message = e.what();
      err->param = "messages";
      return "";
    }
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

bool count_tokens(Server& srv, const std::string& text, int32_t add_bos, int32_t special, int32_t* n) {
  size_t count = 0;
  const infer_status st = infer_tokenize(srv.model, text.data(), text.size(), add_bos, special, nullptr, 0, &count);
  if (st != INFER_OK && st != INFER_ERR_BUFFER_TOO_SMALL) return false;
  *n = static_cast<int32_t>(count);
  return true;
}

// The request field a submit-time INVALID_ARGUMENT is about: the field its
// message names, else the constraint (grammar, response_format, tool_choice)
// when the request has one.
const char* submit_error_param(const std::string& msg, const char* constraint_param) {
  static const std::pair<const char*, const char*> kFields[] = {
      {"logit_bias", "logit_bias"}, {"grammar", nullptr},          {"schema", "response_format"},
      {"pattern", "response_format"}, {"stop", "stop"},            {"max_tokens", "max_tokens"},
      {"temperature", "temperature"}, {"top_p", "top_p"},          {"top_k", "top_k"},
      {"min_p", "min_p"},             {"penalty", nullptr},        {"seed", "seed"},
      {"logprobs", "top_logprobs"},   {"prompt", nullptr}};
  for (const auto& [word, field] : kFields)
    if (msg.find(word) != std::string::npos) {
      if (field) return field;
      if (std::string(word) == "grammar") return constraint_param ? constraint_param : "grammar";
      if (std::string(word) == "penalty") return "presence_penalty";
      return nullptr;
    }
  return constraint_param;
}

}  // namespace


// /v1/chat/completions and /v1/completions.
void handle_completion(Server& srv, const http::Request& req, http::Response& res, serve::Endpoint ep) {
  const char* ep_name = ep == serve::Endpoint::Chat ? "chat" : "completions";
  if (!srv.ready) return send_error(res, 503, "the model is loading", "server_error", "loading");
  if (srv.draining) return send_error(res, 503, "the server is shutting down", "server_error", "shutting_down");
  serve::RequestError err;
  auto parsed = serve::parse_completion_request(req.body, ep, srv.limits, &err);
  if (!parsed) return send_request_error(res, err);
  if (!srv.serves_model(parsed->model)) return send_model_not_found(srv, res, parsed->model);
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
      rq.grammar = serve::forced_call_grammar(srv.tool_format, rq, &gerr);
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
      // The client's mistake, found at submit (before any byte of a stream
      // is sent): a 400 naming the field the library's message names.
      if (st == INFER_ERR_INVALID_ARGUMENT) {
        const std::string msg = infer_last_error();
        const char* param = submit_error_param(msg, constraint_param);
        return send_error(res, 400, msg, "invalid_request_error", "invalid_value", param ? param : "");
      }
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
    job->res = &res;
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
  job->res = &res;
  res.set_header("Cache-Control", "no-cache");
  res.set_header("X-Accel-Buffering", "no");
  if (!res.start_stream("text/event-stream")) {
    job->cancel_all();
    srv.metrics.on_request_ended(ep_name, "disconnected");
    return;
  }
  {
        const bool chat = ep == serve::Endpoint::Chat;
        const bool usage = job->rq.include_usage;
        // Events are collected in `out` and written together: one send per
        // piece of text, and the last one (final chunks, usage, [DONE]) in
        // one write, not four (each write on loopback wakes the client).
        std::string out;
        auto flush = [&] {
          if (out.empty()) return true;
          const bool ok = res.write(out);
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
          return;
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
        srv.metrics.on_request_ended(ep_name, end == PumpEnd::Timeout ? "timeout" : failed ? "error" : "ok");
  }
}

// /apply-template (as llama-server's): a chat request's body, answered with
// the prompt its conversation renders to ({"prompt": "..."}), nothing generated.
void handle_apply_template(Server& srv, const http::Request& req, http::Response& res) {
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

}  // namespace cli
