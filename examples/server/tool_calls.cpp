#include "tool_calls.h"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "json_limits.h"

namespace serve {
namespace {

using json = nlohmann::ordered_json;

constexpr const char* kHermesOpen = "<tool_call>";
constexpr const char* kHermesClose = "</tool_call>";
constexpr const char* kMistralOpen = "[TOOL_CALLS]";
constexpr const char* kPythonTag = "<|python_tag|>";

bool is_ws(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

size_t skip_ws(const std::string& s, size_t i) {
  while (i < s.size() && is_ws(s[i])) ++i;
  return i;
}

// The length of the longest suffix of s that is a proper prefix of `marker`.
size_t partial_suffix(const std::string& s, const std::string& marker) {
  for (size_t n = std::min(s.size(), marker.size() - 1); n > 0; --n)
    if (s.compare(s.size() - n, n, marker, 0, n) == 0) return n;
  return 0;
}

// Where the JSON object or array starting at s[i] ('{' or '[') ends (one
// past its closing bracket), or npos when the text ends first. Brackets in
// strings do not count.
size_t json_end(const std::string& s, size_t i) {
  int depth = 0;
  bool in_str = false, esc = false;
  for (; i < s.size(); ++i) {
    const char c = s[i];
    if (in_str) {
      if (esc) esc = false;
      else if (c == '\\') esc = true;
      else if (c == '"') in_str = false;
      continue;
    }
    if (c == '"') in_str = true;
    else if (c == '{' || c == '[') ++depth;
    else if (c == '}' || c == ']') {
      if (--depth == 0) return i + 1;
    }
  }
  return std::string::npos;
}

// {"name": "...", "arguments" | "parameters": {...} or a JSON string} as a call.
bool parse_json_text(const std::string& text, json* out);

bool call_from_json(const json& j, ToolCall* out) {
  if (!j.is_object()) return false;
  auto n = j.find("name");
  if (n == j.end() || !n->is_string() || n->get<std::string>().empty()) return false;
  out->name = n->get<std::string>();
  auto a = j.find("arguments");
  if (a == j.end()) a = j.find("parameters");
  if (a == j.end() || a->is_null()) {
    out->arguments = "{}";
  } else if (a->is_object()) {
    out->arguments = a->dump(-1, ' ', false, json::error_handler_t::replace);
  } else if (a->is_string()) {
    // Some models write the arguments as a JSON string, as the API does.
    json inner;
    if (!parse_json_text(a->get<std::string>(), &inner) || !inner.is_object()) return false;
    out->arguments = inner.dump(-1, ' ', false, json::error_handler_t::replace);
  } else {
    return false;
  }
  return true;
}

// Generated text is as untrusted as a client's: the same depth and size
// limits (a call nested too deeply is plain text).
bool parse_json_text(const std::string& text, json* out) {
  try {
    *out = parse_json<json>(text, "a tool call");
    return true;
  } catch (const JsonLimitError&) {
    return false;
  }
}

}  // namespace

ToolFormat tool_format_for_template(const std::string& t) {
  if (t.find(kHermesOpen) != std::string::npos) return ToolFormat::Hermes;
  if (t.find(kMistralOpen) != std::string::npos) return ToolFormat::Mistral;
  if (t.find("<|start_header_id|>") != std::string::npos &&
      (t.find("ipython") != std::string::npos || t.find(kPythonTag) != std::string::npos))
    return ToolFormat::Llama3;
  return ToolFormat::None;
}

const char* tool_format_name(ToolFormat f) {
  switch (f) {
    case ToolFormat::Hermes: return "hermes";
    case ToolFormat::Llama3: return "llama3";
    case ToolFormat::Mistral: return "mistral";
    default: return "none";
  }
}

bool template_wants_string_arguments(const std::string& t) {
  const bool concatenates = t.find("['arguments'] +") != std::string::npos || t.find("+ tool['function']['arguments']") != std::string::npos ||
                            t.find(".arguments +") != std::string::npos;
  const bool tojson = t.find("arguments | tojson") != std::string::npos || t.find("arguments|tojson") != std::string::npos;
  return concatenates && !tojson;
}

ToolCallParser::ToolCallParser(ToolFormat format, std::vector<std::string> tool_names)
    : format_(format), names_(std::move(tool_names)) {}

std::vector<ToolEvent> ToolCallParser::feed(const std::string& text) {
  std::vector<ToolEvent> out;
  buf_ += text;
  run(false, out);
  return out;
}

std::vector<ToolEvent> ToolCallParser::finish() {
  std::vector<ToolEvent> out;
  run(true, out);
  if (!buf_.empty()) release(buf_, out);
  buf_.clear();
  // Whitespace at the end is the reply's own when it made no call.
  if (n_calls_ == 0 && !held_ws_.empty()) out.push_back({false, held_ws_, {}});
  held_ws_.clear();
  return out;
}

void ToolCallParser::release(const std::string& text, std::vector<ToolEvent>& out) {
  std::string t = text;
  if (after_call_) {
    const size_t b = skip_ws(t, 0);
    if (b == t.size()) return;
    t.erase(0, b);
    after_call_ = false;
  }
  t = held_ws_ + t;
  held_ws_.clear();
  size_t e = t.size();
  while (e > 0 && is_ws(t[e - 1])) --e;
  held_ws_ = t.substr(e);
  t.resize(e);
  if (t.empty()) return;
  at_start_ = false;
  if (!out.empty() && !out.back().is_call) out.back().content += t;
  else out.push_back({false, t, {}});
}

void ToolCallParser::emit_call(ToolCall c, std::vector<ToolEvent>& out) {
  held_ws_.clear();
  after_call_ = true;
  at_start_ = false;
  ++n_calls_;
  ToolEvent ev;
  ev.is_call = true;
  ev.call = std::move(c);
  out.push_back(std::move(ev));
}

// buf_ starts with a call's opening. Returns true when it consumed something
// (a call, or text that turned out not to be one), false when it needs more.
bool ToolCallParser::in_call_step(bool final, std::vector<ToolEvent>& out) {
  auto as_text = [&](size_t n) {
    release(buf_.substr(0, n), out);
    buf_.erase(0, n);
    in_call_ = false;
    return true;
  };
  if (format_ == ToolFormat::Hermes) {
    const size_t open = std::char_traits<char>::length(kHermesOpen);
    const size_t close = buf_.find(kHermesClose, open);
    if (close == std::string::npos && !final) return false;
    const size_t body_end = close == std::string::npos ? buf_.size() : close;
    const size_t end = close == std::string::npos ? buf_.size() : close + std::char_traits<char>::length(kHermesClose);
    json j;
    ToolCall c;
    if (!parse_json_text(buf_.substr(open, body_end - open), &j) || !call_from_json(j, &c)) return as_text(end);
    buf_.erase(0, end);
    in_call_ = false;
    emit_call(std::move(c), out);
    return true;
  }
  if (format_ == ToolFormat::Mistral) {
    size_t i = buf_.compare(0, std::char_traits<char>::length(kMistralOpen), kMistralOpen) == 0
                   ? std::char_traits<char>::length(kMistralOpen) : 0;
    i = skip_ws(buf_, i);
    if (i == buf_.size()) return final ? as_text(buf_.size()) : false;
    if (buf_[i] != '[' && buf_[i] != '{') return as_text(i);
    const size_t end = json_end(buf_, i);
    if (end == std::string::npos) return final ? as_text(buf_.size()) : false;
    json j;
    if (!parse_json_text(buf_.substr(i, end - i), &j)) return as_text(end);
    if (j.is_object()) j = json::array({j});
    std::vector<ToolCall> calls;
    for (const json& e : j) {
      ToolCall c;
      if (!call_from_json(e, &c)) return as_text(end);
      calls.push_back(std::move(c));
    }
    if (calls.empty()) return as_text(end);
    buf_.erase(0, end);
    in_call_ = false;
    for (ToolCall& c : calls) emit_call(std::move(c), out);
    return true;
  }
  // Llama 3: JSON objects separated by ';' up to the end of the reply.
  if (!final) return false;
  size_t i = buf_.compare(0, std::char_traits<char>::length(kPythonTag), kPythonTag) == 0
                 ? std::char_traits<char>::length(kPythonTag) : 0;
  std::vector<ToolCall> calls;
  for (;;) {
    i = skip_ws(buf_, i);
    if (i == buf_.size() || buf_[i] != '{') return as_text(buf_.size());
    const size_t end = json_end(buf_, i);
    json j;
    ToolCall c;
    if (end == std::string::npos || !parse_json_text(buf_.substr(i, end - i), &j) || !call_from_json(j, &c) ||
        std::find(names_.begin(), names_.end(), c.name) == names_.end())
      return as_text(buf_.size());
    calls.push_back(std::move(c));
    i = skip_ws(buf_, end);
    if (i == buf_.size()) break;
    if (buf_[i] != ';') return as_text(buf_.size());
    ++i;
  }
  buf_.clear();
  in_call_ = false;
  for (ToolCall& c : calls) emit_call(std::move(c), out);
  return true;
}

void ToolCallParser::run(bool final, std::vector<ToolEvent>& out) {
  if (format_ == ToolFormat::None) {
    release(buf_, out);
    buf_.clear();
    return;
  }
  for (;;) {
    if (in_call_) {
      if (!in_call_step(final, out)) return;
      continue;
    }
    if (buf_.empty()) return;
    // A call at the very start in the formats that may open without a marker.
    if (at_start_ && format_ != ToolFormat::Hermes) {
      const size_t i = skip_ws(buf_, 0);
      if (i == buf_.size()) {
        if (final) break;
        return;  // only whitespace so far
      }
      const char want = format_ == ToolFormat::Mistral ? '[' : '{';
      if (buf_[i] == want) {
        release(buf_.substr(0, i), out);
        buf_.erase(0, i);
        at_start_ = false;
        in_call_ = true;
        continue;
      }
    }
    const std::string marker = format_ == ToolFormat::Hermes ? kHermesOpen : format_ == ToolFormat::Mistral ? kMistralOpen : kPythonTag;
    const size_t p = buf_.find(marker);
    if (p != std::string::npos) {
      release(buf_.substr(0, p), out);
      buf_.erase(0, p);
      in_call_ = true;
      continue;
    }
    // No call opens here: release all but what may be the start of a marker.
    const size_t keep = final ? 0 : partial_suffix(buf_, marker);
    // At the start, the marker-less openings are decided above; a partial
    // marker keeps at_start_ as it is.
    release(buf_.substr(0, buf_.size() - keep), out);
    buf_.erase(0, buf_.size() - keep);
    return;
  }
}

ParsedReply parse_tool_calls(ToolFormat format, const std::vector<std::string>& tool_names, const std::string& text) {
  ToolCallParser p(format, tool_names);
  ParsedReply r;
  auto take = [&](std::vector<ToolEvent> evs) {
    for (ToolEvent& e : evs) {
      if (e.is_call) r.calls.push_back(std::move(e.call));
      else r.content += e.content;
    }
  };
  take(p.feed(text));
  take(p.finish());
  return r;
}

}  // namespace serve
