#include "request.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include <nlohmann/json.hpp>

#include "json_limits.h"

namespace serve {
namespace {

// ordered: a JSON schema keeps its properties in the order the client wrote them.
using json = nlohmann::ordered_json;

struct Fail {
  RequestError e;
};

[[noreturn]] void fail(const std::string& param, const std::string& msg, const char* code = "invalid_value") {
  RequestError e;
  e.message = msg;
  e.param = param;
  e.code = code;
  throw Fail{e};
}

const char* type_name(const json& v) {
  switch (v.type()) {
    case json::value_t::null: return "null";
    case json::value_t::boolean: return "a boolean";
    case json::value_t::string: return "a string";
    case json::value_t::array: return "an array";
    case json::value_t::object: return "an object";
    case json::value_t::number_float: return "a number";
    default: return "an integer";
  }
}

[[noreturn]] void wrong_type(const std::string& param, const json& v, const char* expected) {
  fail(param, "'" + param + "' must be " + expected + ", not " + type_name(v), "invalid_type");
}

// The field, or nullptr when absent or null.
const json* field(const json& obj, const char* name) {
  auto it = obj.find(name);
  if (it == obj.end() || it->is_null()) return nullptr;
  return &*it;
}

std::optional<double> number(const json& obj, const char* name, double lo, double hi) {
  const json* v = field(obj, name);
  if (!v) return std::nullopt;
  if (!v->is_number()) wrong_type(name, *v, "a number");
  const double d = v->get<double>();
  if (!std::isfinite(d) || d < lo || d > hi)
    fail(name, "'" + std::string(name) + "' must be in [" + json(lo).dump() + ", " + json(hi).dump() + "]");
  return d;
}

std::optional<int64_t> integer(const json& obj, const char* name, int64_t lo, int64_t hi) {
  const json* v = field(obj, name);
  if (!v) return std::nullopt;
  int64_t x;
  if (v->is_number_integer()) {
    if (v->is_number_unsigned() && v->get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      fail(name, "'" + std::string(name) + "' is out of range");
    x = v->get<int64_t>();
  } else if (v->is_number_float()) {
    // 5.0 is accepted as 5 (some clients send every number as a float).
    const double d = v->get<double>();
    if (!std::isfinite(d) || d != std::floor(d) || std::fabs(d) > 9e15) wrong_type(name, *v, "an integer");
    x = static_cast<int64_t>(d);
  } else {
    wrong_type(name, *v, "an integer");
  }
  if (x < lo || x > hi)
    fail(name, "'" + std::string(name) + "' must be in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
  return x;
}

std::optional<bool> boolean(const json& obj, const char* name) {
  const json* v = field(obj, name);
  if (!v) return std::nullopt;
  if (!v->is_boolean()) wrong_type(name, *v, "a boolean");
  return v->get<bool>();
}

std::optional<std::string> string(const json& obj, const char* name) {
  const json* v = field(obj, name);
  if (!v) return std::nullopt;
  if (!v->is_string()) wrong_type(name, *v, "a string");
  return v->get<std::string>();
}

// Runs f, naming the fields it fails on as members of `prefix`.
template <class F>
auto nested(const std::string& prefix, F&& f) {
  try {
    return f();
  } catch (Fail& e) {
    if (e.e.param.rfind(prefix + ".", 0) != 0) {
      const std::string old = e.e.param;
      e.e.param = prefix + "." + old;
      const size_t at = e.e.message.find("'" + old + "'");
      if (at != std::string::npos) e.e.message.replace(at, old.size() + 2, "'" + e.e.param + "'");
    }
    throw;
  }
}

// A client's JSON text, through the one depth- and size-limited parser; its
// errors name the field (the body's member where the depth limit was hit,
// or `param` for a JSON text nested in a string field).
json parse_text(std::string_view text, const std::string& what, const std::string& param) {
  try {
    return parse_json<json>(text, what, kMaxJsonDepth, param);
  } catch (const JsonLimitError& e) {
    RequestError err;
    err.message = e.what();
    err.param = e.kind == JsonLimitError::Kind::Syntax ? param : e.path;
    err.code = e.kind == JsonLimitError::Kind::Syntax ? "invalid_json"
               : e.kind == JsonLimitError::Kind::Depth ? "too_deep" : "too_large";
    throw Fail{err};
  }
}

json parse_object(const std::string& body) {
  json j = parse_text(body, "the body", "");
  if (!j.is_object()) {
    RequestError err;
    err.message = std::string("the body must be a JSON object, not ") + type_name(j);
    err.code = "invalid_type";
    throw Fail{err};
  }
  return j;
}

// messages[i].content: a string, or an array of {"type": "text", "text": ...} parts.
std::string message_content(const json& v, const std::string& where, const Limits& lim) {
  if (v.is_null()) return "";
  if (v.is_string()) {
    if (v.get_ref<const std::string&>().size() > lim.max_content_bytes)
      fail(where, "'" + where + "' is longer than " + std::to_string(lim.max_content_bytes) + " bytes");
    return v.get<std::string>();
  }
  if (!v.is_array()) wrong_type(where, v, "a string or an array of content parts");
  if (v.size() > lim.max_content_parts)
    fail(where, "'" + where + "' has more than " + std::to_string(lim.max_content_parts) + " parts");
  std::string out;
  for (size_t i = 0; i < v.size(); ++i) {
    const json& part = v[i];
    const std::string pw = where + "[" + std::to_string(i) + "]";
    if (!part.is_object()) wrong_type(pw, part, "an object");
    const auto t = string(part, "type");
    if (!t) fail(pw + ".type", "'" + pw + ".type' is required", "missing_required_parameter");
    if (*t != "text") fail(pw + ".type", "content parts of type '" + *t + "' are not supported (only 'text')");
    const json* text = field(part, "text");
    if (!text || !text->is_string()) fail(pw + ".text", "'" + pw + ".text' must be a string", "invalid_type");
    out += text->get<std::string>();
    if (out.size() > lim.max_content_bytes)
      fail(where, "'" + where + "' is longer than " + std::to_string(lim.max_content_bytes) + " bytes");
  }
  return out;
}

// An assistant message's tool_calls: [{id, type: "function", function: {name, arguments}}].
std::vector<ChatMessage::ToolCall> tool_calls(const json& v, const std::string& where, const Limits& lim) {
  if (!v.is_array()) wrong_type(where, v, "an array");
  if (v.size() > lim.max_tools)
    fail(where, "'" + where + "' has more than " + std::to_string(lim.max_tools) + " calls");
  std::vector<ChatMessage::ToolCall> out;
  for (size_t i = 0; i < v.size(); ++i) {
    const json& c = v[i];
    const std::string w = where + "[" + std::to_string(i) + "]";
    if (!c.is_object()) wrong_type(w, c, "an object");
    ChatMessage::ToolCall tc;
    if (const json* id = field(c, "id")) {
      if (!id->is_string()) wrong_type(w + ".id", *id, "a string");
      tc.id = id->get<std::string>();
    }
    if (const json* t = field(c, "type"); t && (!t->is_string() || *t != "function"))
      fail(w + ".type", "'" + w + ".type' must be \"function\"");
    const json* f = field(c, "function");
    if (!f) fail(w + ".function", "'" + w + ".function' is required", "missing_required_parameter");
    if (!f->is_object()) wrong_type(w + ".function", *f, "an object");
    const json* name = field(*f, "name");
    if (!name) fail(w + ".function.name", "'" + w + ".function.name' is required", "missing_required_parameter");
    if (!name->is_string()) wrong_type(w + ".function.name", *name, "a string");
    tc.name = name->get<std::string>();
    const json* args = field(*f, "arguments");
    if (!args) {
      tc.arguments = "{}";
    } else if (args->is_string()) {
      // The API's shape: the arguments as JSON text. Templates read them as
      // an object, so the text must parse.
      const std::string aw = w + ".function.arguments";
      const json a = parse_text(args->get_ref<const std::string&>(), "'" + aw + "'", aw);
      if (!a.is_object())
        fail(w + ".function.arguments", "'" + w + ".function.arguments' must be a JSON object serialised as a string");
      tc.arguments = args->get<std::string>();
    } else if (args->is_object()) {
      tc.arguments = args->dump();
    } else {
      wrong_type(w + ".function.arguments", *args, "a string");
    }
    out.push_back(std::move(tc));
  }
  return out;
}

// tools, tool_choice, parallel_tool_calls.
void parse_tools(const json& j, CompletionRequest& r, const Limits& lim) {
  const json* tools = field(j, "tools");
  if (tools) {
    if (!tools->is_array()) wrong_type("tools", *tools, "an array");
    if (tools->size() > lim.max_tools) fail("tools", "at most " + std::to_string(lim.max_tools) + " tools");
    json norm = json::array();
    for (size_t i = 0; i < tools->size(); ++i) {
      const json& t = (*tools)[i];
      const std::string w = "tools[" + std::to_string(i) + "]";
      if (!t.is_object()) wrong_type(w, t, "an object");
      const json* type = field(t, "type");
      if (!type) fail(w + ".type", "'" + w + ".type' is required", "missing_required_parameter");
      if (!type->is_string() || *type != "function")
        fail(w + ".type", "'" + w + ".type' must be \"function\" (the only tool type supported)");
      const json* f = field(t, "function");
      if (!f) fail(w + ".function", "'" + w + ".function' is required", "missing_required_parameter");
      if (!f->is_object()) wrong_type(w + ".function", *f, "an object");
      const json* name = field(*f, "name");
      if (!name) fail(w + ".function.name", "'" + w + ".function.name' is required", "missing_required_parameter");
      if (!name->is_string()) wrong_type(w + ".function.name", *name, "a string");
      const std::string n = name->get<std::string>();
      if (n.empty() || n.size() > 64) fail(w + ".function.name", "'" + w + ".function.name' must have 1 to 64 characters");
      for (const std::string& other : r.tool_names)
        if (other == n) fail(w + ".function.name", "two tools are named '" + n + "'");
      json fn = {{"name", n}};
      if (const json* d = field(*f, "description")) {
        if (!d->is_string()) wrong_type(w + ".function.description", *d, "a string");
        fn["description"] = *d;
      }
      if (const json* p = field(*f, "parameters")) {
        if (!p->is_object()) wrong_type(w + ".function.parameters", *p, "an object (a JSON schema)");
        fn["parameters"] = *p;
      }
      if (const json* s = field(*f, "strict")) {
        if (!s->is_boolean()) wrong_type(w + ".function.strict", *s, "a boolean");
      }
      r.tool_names.push_back(n);
      norm.push_back({{"type", "function"}, {"function", fn}});
    }
    if (!norm.empty()) r.tools_json = norm.dump();
  }
  if (auto p = boolean(j, "parallel_tool_calls")) r.parallel_tool_calls = *p;
  const json* tc = field(j, "tool_choice");
  if (!tc) {
    r.tool_choice = r.tool_names.empty() ? ToolChoice::None : ToolChoice::Auto;
    return;
  }
  if (tc->is_string()) {
    const std::string s = tc->get<std::string>();
    if (s == "none") r.tool_choice = ToolChoice::None;
    else if (s == "auto") r.tool_choice = ToolChoice::Auto;
    else if (s == "required") r.tool_choice = ToolChoice::Required;
    else fail("tool_choice", "tool_choice '" + s + "' is not supported (none, auto, required, or {\"type\": \"function\", \"function\": {\"name\": ...}})");
  } else if (tc->is_object()) {
    const json* type = field(*tc, "type");
    if (!type || !type->is_string() || *type != "function") fail("tool_choice.type", "'tool_choice.type' must be \"function\"");
    const json* f = field(*tc, "function");
    if (!f || !f->is_object()) fail("tool_choice.function", "'tool_choice.function' must be an object with a name");
    const json* name = field(*f, "name");
    if (!name || !name->is_string()) fail("tool_choice.function.name", "'tool_choice.function.name' must be a string");
    r.tool_choice = ToolChoice::Named;
    r.tool_choice_name = name->get<std::string>();
    if (std::find(r.tool_names.begin(), r.tool_names.end(), r.tool_choice_name) == r.tool_names.end())
      fail("tool_choice", "tool_choice names '" + r.tool_choice_name + "', which is not among the tools");
  } else {
    wrong_type("tool_choice", *tc, "a string or an object");
  }
  if (r.tool_choice == ToolChoice::Required && r.tool_names.empty()) fail("tool_choice", "tool_choice 'required' needs 'tools'");
  if (r.tool_names.empty()) r.tool_choice = ToolChoice::None;
}

std::vector<int32_t> token_array(const json& v, const std::string& where) {
  std::vector<int32_t> out;
  for (const json& t : v) {
    if (!t.is_number_integer()) wrong_type(where, t, "an array of token ids");
    const int64_t x = t.get<int64_t>();
    if (x < 0 || x > std::numeric_limits<int32_t>::max()) fail(where, "token id " + std::to_string(x) + " is out of range");
    out.push_back(static_cast<int32_t>(x));
  }
  return out;
}

CompletionRequest parse(const std::string& body, Endpoint endpoint, const Limits& lim) {
  const json j = parse_object(body);
  CompletionRequest r;
  r.endpoint = endpoint;
  if (auto m = string(j, "model")) r.model = *m;
  if (auto u = string(j, "user")) r.user = *u;

  if (endpoint == Endpoint::Chat) {
    const json* msgs = field(j, "messages");
    if (!msgs) fail("messages", "'messages' is required", "missing_required_parameter");
    if (!msgs->is_array()) wrong_type("messages", *msgs, "an array");
    if (msgs->empty()) fail("messages", "'messages' must not be empty");
    if (msgs->size() > lim.max_messages) fail("messages", "too many messages");
    for (size_t i = 0; i < msgs->size(); ++i) {
      const json& m = (*msgs)[i];
      const std::string where = "messages[" + std::to_string(i) + "]";
      if (!m.is_object()) wrong_type(where, m, "an object");
      const json* role = field(m, "role");
      if (!role) fail(where + ".role", "'" + where + ".role' is required", "missing_required_parameter");
      if (!role->is_string()) wrong_type(where + ".role", *role, "a string");
      std::string rs = role->get<std::string>();
      if (rs == "developer") rs = "system";
      if (rs != "system" && rs != "user" && rs != "assistant" && rs != "tool")
        fail(where + ".role", "role '" + rs + "' is not supported (system, developer, user, assistant, tool)");
      ChatMessage cm;
      cm.role = rs;
      if (const json* tc = field(m, "tool_calls"); tc && rs == "assistant") cm.tool_calls = tool_calls(*tc, where + ".tool_calls", lim);
      auto it = m.find("content");
      if ((it == m.end() || it->is_null()) && !(rs == "assistant"))
        fail(where + ".content", "'" + where + ".content' is required", "missing_required_parameter");
      if (it != m.end()) cm.content = message_content(*it, where + ".content", lim);
      if (rs == "tool") {
        const json* id = field(m, "tool_call_id");
        if (!id) fail(where + ".tool_call_id", "'" + where + ".tool_call_id' is required", "missing_required_parameter");
        if (!id->is_string()) wrong_type(where + ".tool_call_id", *id, "a string");
        cm.tool_call_id = id->get<std::string>();
      }
      if (const json* nm = field(m, "name")) {
        if (!nm->is_string()) wrong_type(where + ".name", *nm, "a string");
        cm.name = nm->get<std::string>();
      }
      r.messages.push_back(std::move(cm));
    }
    parse_tools(j, r, lim);
  } else {
    const json* p = field(j, "prompt");
    if (!p) fail("prompt", "'prompt' is required", "missing_required_parameter");
    if (p->is_string()) {
      r.prompts.push_back({p->get<std::string>(), {}, false});
    } else if (p->is_array()) {
      if (p->empty()) fail("prompt", "'prompt' must not be empty");
      if ((*p)[0].is_number_integer()) {
        r.prompts.push_back({"", token_array(*p, "prompt"), true});
      } else {
        if (p->size() > lim.max_prompts) fail("prompt", "too many prompts");
        for (const json& e : *p) {
          if (e.is_string()) r.prompts.push_back({e.get<std::string>(), {}, false});
          else if (e.is_array()) r.prompts.push_back({"", token_array(e, "prompt"), true});
          else wrong_type("prompt", e, "a string, an array of strings or an array of token ids");
        }
      }
      for (const auto& pr : r.prompts)
        if (pr.use_tokens && pr.tokens.empty()) fail("prompt", "a token prompt must not be empty");
    } else {
      wrong_type("prompt", *p, "a string, an array of strings or an array of token ids");
    }
    if (auto e = boolean(j, "echo")) r.echo = *e;
  }

  // max_completion_tokens (the newer name) wins over max_tokens.
  if (auto m = integer(j, "max_tokens", 0, std::numeric_limits<int32_t>::max())) r.max_tokens = static_cast<int32_t>(*m);
  if (auto m = integer(j, "max_completion_tokens", 0, std::numeric_limits<int32_t>::max()))
    r.max_tokens = static_cast<int32_t>(*m);
  r.temperature = number(j, "temperature", 0, 1e4);
  r.top_p = number(j, "top_p", 0, 1);
  if (r.top_p && *r.top_p <= 0) fail("top_p", "'top_p' must be in (0, 1]");
  r.min_p = number(j, "min_p", 0, 1);
  r.presence_penalty = number(j, "presence_penalty", -2, 2);
  r.frequency_penalty = number(j, "frequency_penalty", -2, 2);
  r.repetition_penalty = number(j, "repetition_penalty", 1e-6, 1e4);
  if (auto k = integer(j, "top_k", -1, std::numeric_limits<int32_t>::max())) r.top_k = static_cast<int32_t>(*k);
  r.seed = integer(j, "seed", std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max());
  if (auto n = integer(j, "n", 1, lim.max_n)) r.n = static_cast<int32_t>(*n);
  // Each prompt gets n choices; echo writes the prompt into every one.
  if (r.prompts.size() * static_cast<size_t>(r.n) > lim.max_choices)
    fail("n", "'n' times the number of prompts must be at most " + std::to_string(lim.max_choices));
  if (r.echo) {
    size_t echoed = 0;
    for (const auto& pr : r.prompts) echoed += pr.text.size() + pr.tokens.size() * 16;
    if (echoed * static_cast<size_t>(r.n) > lim.max_echo_bytes)
      fail("echo", "'echo' would repeat more than " + std::to_string(lim.max_echo_bytes >> 20) +
                       " MiB of prompt in the answer (use fewer or shorter prompts, or a smaller 'n')");
  }
  if (auto b = boolean(j, "ignore_eos")) r.ignore_eos = *b;

  if (const json* s = field(j, "stop")) {
    if (s->is_string()) {
      r.stop.push_back(s->get<std::string>());
    } else if (s->is_array()) {
      if (s->size() > static_cast<size_t>(lim.max_stop))
        fail("stop", "at most " + std::to_string(lim.max_stop) + " stop sequences");
      for (const json& e : *s) {
        if (!e.is_string()) wrong_type("stop", e, "a string or an array of strings");
        r.stop.push_back(e.get<std::string>());
      }
    } else {
      wrong_type("stop", *s, "a string or an array of strings");
    }
    for (const std::string& st : r.stop) {
      if (st.empty()) fail("stop", "stop sequences must not be empty");
      if (st.size() > lim.max_stop_bytes)
        fail("stop", "stop sequences must be at most " + std::to_string(lim.max_stop_bytes) + " bytes long");
    }
  }

  if (const json* lb = field(j, "logit_bias")) {
    if (!lb->is_object()) wrong_type("logit_bias", *lb, "an object mapping token ids to numbers");
    if (lb->size() > lim.max_logit_bias)
      fail("logit_bias", "at most " + std::to_string(lim.max_logit_bias) + " logit_bias entries");
    for (auto it = lb->begin(); it != lb->end(); ++it) {
      const std::string& k = it.key();
      char* end = nullptr;
      errno = 0;
      const long long id = std::strtoll(k.c_str(), &end, 10);
      if (k.empty() || *end || errno || id < 0 || id > std::numeric_limits<int32_t>::max())
        fail("logit_bias", "logit_bias key '" + k + "' is not a token id");
      if (!it.value().is_number()) wrong_type("logit_bias", it.value(), "a number");
      const double b = it.value().get<double>();
      if (!std::isfinite(b) || b < -100 || b > 100) fail("logit_bias", "logit_bias values must be in [-100, 100]");
      r.logit_bias.emplace_back(static_cast<int32_t>(id), static_cast<float>(b));
    }
  }

  if (endpoint == Endpoint::Chat) {
    if (auto lp = boolean(j, "logprobs")) r.logprobs = *lp;
    if (auto tl = integer(j, "top_logprobs", 0, lim.max_top_logprobs)) {
      if (!r.logprobs && *tl > 0) fail("top_logprobs", "'top_logprobs' needs 'logprobs': true");
      r.top_logprobs = static_cast<int32_t>(*tl);
    }
  } else if (const json* lp = field(j, "logprobs")) {
    // The legacy completions shape: logprobs is how many alternatives.
    if (lp->is_boolean()) {
      r.logprobs = lp->get<bool>();
    } else {
      const auto n = integer(j, "logprobs", 0, 5);
      r.logprobs = true;
      r.top_logprobs = static_cast<int32_t>(*n);
    }
  }

  if (auto s = boolean(j, "stream")) r.stream = *s;
  if (const json* so = field(j, "stream_options")) {
    if (!so->is_object()) wrong_type("stream_options", *so, "an object");
    if (auto iu = nested("stream_options", [&] { return boolean(*so, "include_usage"); })) r.include_usage = *iu;
  }

  if (const json* rf = field(j, "response_format")) {
    if (!rf->is_object()) wrong_type("response_format", *rf, "an object");
    const auto t = nested("response_format", [&] { return string(*rf, "type"); });
    if (!t) fail("response_format.type", "'response_format.type' is required", "missing_required_parameter");
    if (*t == "text") {
      r.response_format = ResponseFormat::Text;
    } else if (*t == "json_object") {
      r.response_format = ResponseFormat::JsonObject;
    } else if (*t == "json_schema") {
      r.response_format = ResponseFormat::JsonSchema;
      const json* js = field(*rf, "json_schema");
      if (!js) fail("response_format.json_schema", "'response_format.json_schema' is required", "missing_required_parameter");
      if (!js->is_object()) wrong_type("response_format.json_schema", *js, "an object");
      const json* schema = field(*js, "schema");
      if (!schema) {
        // Allowed by the API: no schema means any JSON object.
        r.response_format = ResponseFormat::JsonObject;
      } else {
        const std::string sw = "response_format.json_schema.schema";
        if (schema->is_string()) {
          // Some clients send the schema as JSON text.
          const json parsed = parse_text(schema->get_ref<const std::string&>(), "'" + sw + "'", sw);
          if (!parsed.is_object() && !parsed.is_boolean()) wrong_type(sw, parsed, "an object");
          r.json_schema = parsed.dump();
        } else {
          if (!schema->is_object() && !schema->is_boolean()) wrong_type(sw, *schema, "an object");
          r.json_schema = schema->dump();
        }
      }
    } else {
      fail("response_format.type", "response_format type '" + *t + "' is not supported (text, json_object, json_schema)");
    }
  }
  if (auto g = string(j, "grammar")) r.grammar = *g;
  if (!r.grammar.empty() && r.response_format != ResponseFormat::Text)
    fail("grammar", "give either 'grammar' or a JSON response_format, not both");
  return r;
}

}  // namespace

std::optional<CompletionRequest> parse_completion_request(const std::string& body, Endpoint endpoint,
                                                          const Limits& limits, RequestError* err) {
  try {
    return parse(body, endpoint, limits);
  } catch (const Fail& f) {
    if (err) *err = f.e;
  } catch (const std::exception& e) {  // json type errors we did not foresee, bad_alloc
    if (err) {
      *err = RequestError{};
      err->message = std::string("bad request: ") + e.what();
    }
  }
  return std::nullopt;
}

std::optional<TokenizeRequest> parse_tokenize_request(const std::string& body, RequestError* err) {
  try {
    const json j = parse_object(body);
    TokenizeRequest r;
    const json* c = field(j, "content");
    if (!c) fail("content", "'content' is required", "missing_required_parameter");
    if (!c->is_string()) wrong_type("content", *c, "a string");
    r.content = c->get<std::string>();
    if (auto b = boolean(j, "add_special")) r.add_special = *b;
    if (auto b = boolean(j, "parse_special")) r.parse_special = *b;
    if (auto b = boolean(j, "with_pieces")) r.with_pieces = *b;
    return r;
  } catch (const Fail& f) {
    if (err) *err = f.e;
  } catch (const std::exception& e) {
    if (err) {
      *err = RequestError{};
      err->message = std::string("bad request: ") + e.what();
    }
  }
  return std::nullopt;
}

std::optional<std::vector<int32_t>> parse_detokenize_request(const std::string& body, RequestError* err) {
  try {
    const json j = parse_object(body);
    const json* t = field(j, "tokens");
    if (!t) fail("tokens", "'tokens' is required", "missing_required_parameter");
    if (!t->is_array()) wrong_type("tokens", *t, "an array of token ids");
    return token_array(*t, "tokens");
  } catch (const Fail& f) {
    if (err) *err = f.e;
  } catch (const std::exception& e) {
    if (err) {
      *err = RequestError{};
      err->message = std::string("bad request: ") + e.what();
    }
  }
  return std::nullopt;
}

std::string error_body(const RequestError& e) {
  json j = {{"error",
             {{"message", e.message},
              {"type", e.type},
              {"param", e.param.empty() ? json(nullptr) : json(e.param)},
              {"code", e.code.empty() ? json(nullptr) : json(e.code)}}}};
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace serve
