// Chat templates rendered in code; see chat.h for the formats.
#include "tokenizer/chat.h"

#include <algorithm>

#include "core/error.h"
#include "tokenizer/unicode.h"

namespace infer {

namespace {

struct Family {
  const char* name;
  const char* bos;  // typical texts, for rendering without a model
  const char* eos;
  std::vector<std::string> stops;
};

const std::vector<Family>& families() {
  static const std::vector<Family> all = {
      {"llama2", "<s>", "</s>", {"[INST]"}},
      {"llama3", "<|begin_of_text|>", "<|eot_id|>", {"<|eot_id|>", "<|start_header_id|>"}},
      {"llama3.1", "<|begin_of_text|>", "<|eot_id|>", {"<|eot_id|>", "<|eom_id|>", "<|start_header_id|>"}},
      {"chatml", "", "<|im_end|>", {"<|im_end|>", "<|im_start|>"}},
      {"mistral-v0", "<s>", "</s>", {"[INST]"}},
      {"mistral-v1", "<s>", "</s>", {"[INST]"}},
      {"mistral-v3", "<s>", "</s>", {"[INST]"}},
      {"mistral-v3-tekken", "<s>", "</s>", {"[INST]"}},
      {"mistral-v7", "<s>", "</s>", {"[INST]"}},
      {"phi3", "<s>", "<|endoftext|>", {"<|end|>", "<|user|>"}},
      {"gemma", "<bos>", "<eos>", {"<end_of_turn>", "<start_of_turn>"}},
      {"zephyr", "<s>", "</s>", {"</s>", "<|user|>"}},
      {"deepseek", "<\xEF\xBD\x9C" "begin\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>", "<|EOT|>",
       {"<|EOT|>", "### Instruction:"}},
      {"deepseek2", "<\xEF\xBD\x9C" "begin\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>",
       "<\xEF\xBD\x9C" "end\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>", {"User:"}},
      {"deepseek3", "<\xEF\xBD\x9C" "begin\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>",
       "<\xEF\xBD\x9C" "end\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>",
       {"<\xEF\xBD\x9C" "end\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>", "<\xEF\xBD\x9CUser\xEF\xBD\x9C>"}},
  };
  return all;
}

const Family* find_family(std::string_view name) {
  for (const Family& f : families())
    if (name == f.name) return &f;
  return nullptr;
}

// DeepSeek's full-width markers.
const std::string kDsUser = "<\xEF\xBD\x9CUser\xEF\xBD\x9C>";            // <｜User｜>
const std::string kDsAssistant = "<\xEF\xBD\x9C" "Assistant\xEF\xBD\x9C>";  // <｜Assistant｜>
const std::string kDsEnd = "<\xEF\xBD\x9C" "end\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>";

const char* kDeepseekCoderSystem =
    "You are an AI programming assistant, utilizing the Deepseek Coder model, developed by Deepseek "
    "Company, and you only answer questions related to computer science. For politically sensitive "
    "questions, security and privacy issues, and other non-computer science questions, you will refuse "
    "to answer\n";

// Python's str.isspace() (what Jinja's trim filter and str.strip() use).
bool py_space(uint32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x20) || cp == 0x85 || cp == 0xA0 ||
         cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 ||
         cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

// Decodes the well-formed code point at s[pos] (len > 1 only for valid
// multi-byte sequences); invalid bytes decode as themselves (never spaces
// except the ASCII ones).
uint32_t decode_at(std::string_view s, size_t pos, size_t* len) { return utf8_decode_lossy(s, pos, len); }

// Jinja's `| trim` / Python's str.strip().
std::string strip(std::string_view s) {
  size_t b = 0;
  while (b < s.size()) {
    size_t len;
    if (!py_space(decode_at(s, b, &len))) break;
    b += len;
  }
  size_t e = s.size();
  while (e > b) {
    // Step back to the start of the last code point.
    size_t start = e - 1;
    while (start > b && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80 && e - start < 4) --start;
    size_t len;
    const uint32_t cp = decode_at(s, start, &len);
    if (start + len != e || !py_space(cp)) break;
    e = start;
  }
  return std::string(s.substr(b, e - b));
}

bool contains(std::string_view hay, std::string_view needle) {
  return hay.find(needle) != std::string_view::npos;
}

[[noreturn]] void template_error(const char* msg) { raise(Status::InvalidArgument, "%s", msg); }

const char* kAlternate = "Conversation roles must alternate user/assistant/user/assistant/...";
const char* kAlternateAfterSystem =
    "After the optional system message, conversation roles must alternate user/assistant/user/assistant/...";
const char* kOnlyUserAssistant =
    "Only user and assistant roles are supported, with the exception of an initial optional system message!";

// Splits off a leading system message.
struct Split {
  const ChatMessage* system = nullptr;
  std::vector<const ChatMessage*> rest;
};
Split split_system(const std::vector<ChatMessage>& msgs) {
  Split s;
  for (size_t i = 0; i < msgs.size(); ++i) {
    if (i == 0 && msgs[0].role == "system")
      s.system = &msgs[0];
    else
      s.rest.push_back(&msgs[i]);
  }
  return s;
}

// ---- the formats -------------------------------------------------------------------

std::string render_llama2(const std::vector<ChatMessage>& msgs, const ChatSpecials& sp) {
  const Split s = split_system(msgs);
  std::string out;
  for (size_t i = 0; i < s.rest.size(); ++i) {
    const ChatMessage& m = *s.rest[i];
    if ((m.role == "user") != (i % 2 == 0)) template_error(kAlternate);
    std::string content = m.content;
    if (i == 0 && s.system) content = "<<SYS>>\n" + s.system->content + "\n<</SYS>>\n\n" + m.content;
    if (m.role == "user")
      out += sp.bos + "[INST] " + strip(content) + " [/INST]";
    else if (m.role == "assistant")
      out += " " + strip(content) + " " + sp.eos;
    // A later system message at an assistant position renders nothing, as
    // in the published template.
  }
  return out;
}

std::string render_llama3(const std::vector<ChatMessage>& msgs, bool gen, const ChatSpecials& sp) {
  std::string out;
  for (size_t i = 0; i < msgs.size(); ++i) {
    if (i == 0) out += sp.bos;
    out += "<|start_header_id|>" + msgs[i].role + "<|end_header_id|>\n\n" + strip(msgs[i].content) + "<|eot_id|>";
  }
  if (gen) out += "<|start_header_id|>assistant<|end_header_id|>\n\n";
  return out;
}

std::string render_llama31(const std::vector<ChatMessage>& msgs, bool gen, const ChatSpecials& sp) {
  const Split s = split_system(msgs);
  std::string out = sp.bos;
  out += "<|start_header_id|>system<|end_header_id|>\n\n";
  out += "Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n";
  if (s.system) out += strip(s.system->content);
  out += "<|eot_id|>";
  for (const ChatMessage* m : s.rest)
    out += "<|start_header_id|>" + m->role + "<|end_header_id|>\n\n" + strip(m->content) + "<|eot_id|>";
  if (gen) out += "<|start_header_id|>assistant<|end_header_id|>\n\n";
  return out;
}

std::string render_chatml(const std::vector<ChatMessage>& msgs, bool gen, const std::string& default_system) {
  std::string out;
  if (!default_system.empty() && !msgs.empty() && msgs[0].role != "system")
    out += "<|im_start|>system\n" + default_system + "<|im_end|>\n";
  for (const ChatMessage& m : msgs) out += "<|im_start|>" + m.role + "\n" + m.content + "<|im_end|>\n";
  if (gen) out += "<|im_start|>assistant\n";
  return out;
}

// Mistral's official templates: https://github.com/mistralai/cookbook
// (concept-deep-dive/tokenization/chat_templates.md).
std::string render_mistral_v0(const std::vector<ChatMessage>& msgs, const ChatSpecials& sp) {
  std::string out = sp.bos;
  for (size_t i = 0; i < msgs.size(); ++i) {
    const ChatMessage& m = msgs[i];
    if ((m.role == "user") != (i % 2 == 0)) template_error(kAlternate);
    if (m.role == "user")
      out += "[INST] " + m.content + " [/INST]";
    else if (m.role == "assistant")
      out += m.content + sp.eos;
    else
      template_error("Only user and assistant roles are supported!");
  }
  return out;
}

std::string render_mistral_v1(const std::vector<ChatMessage>& msgs, const ChatSpecials& sp) {
  const Split s = split_system(msgs);
  std::string out = sp.bos;
  for (size_t i = 0; i < s.rest.size(); ++i) {
    const ChatMessage& m = *s.rest[i];
    if ((m.role == "user") != (i % 2 == 0)) template_error(kAlternateAfterSystem);
    if (m.role == "user") {
      if (i == 0 && s.system)
        out += " [INST] " + s.system->content + "\n\n" + m.content + " [/INST]";
      else
        out += " [INST] " + m.content + " [/INST]";
    } else if (m.role == "assistant") {
      out += " " + m.content + sp.eos;
    } else {
      template_error(kOnlyUserAssistant);
    }
  }
  return out;
}

// v3 and v3-tekken put the system prompt before the LAST user message (when
// the conversation ends with one).
std::string render_mistral_v3(const std::vector<ChatMessage>& msgs, const ChatSpecials& sp, bool tekken) {
  const Split s = split_system(msgs);
  for (size_t i = 0; i < s.rest.size(); ++i)
    if ((s.rest[i]->role == "user") != (i % 2 == 0)) template_error(kAlternateAfterSystem);
  const std::string open = tekken ? "[INST]" : "[INST] ";
  std::string out = sp.bos;
  for (size_t i = 0; i < s.rest.size(); ++i) {
    const ChatMessage& m = *s.rest[i];
    if (m.role == "user") {
      if (i + 1 == s.rest.size() && s.system)
        out += open + s.system->content + "\n\n" + m.content + "[/INST]";
      else
        out += open + m.content + "[/INST]";
    } else if (m.role == "assistant") {
      out += tekken ? m.content + sp.eos : " " + strip(m.content) + sp.eos;
    } else {
      template_error(kOnlyUserAssistant);
    }
  }
  return out;
}

std::string render_mistral_v7(const std::vector<ChatMessage>& msgs, const ChatSpecials& sp) {
  std::string out = sp.bos;
  for (const ChatMessage& m : msgs) {
    if (m.role == "user")
      out += "[INST] " + m.content + "[/INST]";
    else if (m.role == "system")
      out += "[SYSTEM_PROMPT] " + m.content + "[/SYSTEM_PROMPT]";
    else
      out += " " + m.content + sp.eos;
  }
  return out;
}

std::string render_phi3(const std::vector<ChatMessage>& msgs, bool gen, const ChatSpecials& sp,
                        bool eos_when_done) {
  std::string out = sp.bos;
  for (const ChatMessage& m : msgs) {
    if (m.role == "system" && m.content.empty()) continue;  // Phi-3.5 skips an empty system message
    out += "<|" + m.role + "|>\n" + m.content + "<|end|>\n";
  }
  if (gen)
    out += "<|assistant|>\n";
  else if (eos_when_done)
    out += sp.eos;
  return out;
}

std::string render_gemma(const std::vector<ChatMessage>& msgs, bool gen, const ChatSpecials& sp) {
  const Split s = split_system(msgs);
  std::string out = sp.bos;
  for (size_t i = 0; i < s.rest.size(); ++i) {
    const ChatMessage& m = *s.rest[i];
    if ((m.role == "user") != (i % 2 == 0)) template_error(kAlternate);
    const std::string role = m.role == "assistant" ? "model" : m.role;
    out += "<start_of_turn>" + role + "\n";
    if (i == 0 && s.system) out += s.system->content + "\n\n";
    out += strip(m.content) + "<end_of_turn>\n";
  }
  if (gen) out += "<start_of_turn>model\n";
  return out;
}

std::string render_zephyr(const std::vector<ChatMessage>& msgs, bool gen, const ChatSpecials& sp) {
  std::string out;
  for (const ChatMessage& m : msgs) out += "<|" + m.role + "|>\n" + m.content + sp.eos + "\n";
  if (gen && !msgs.empty()) out += "<|assistant|>\n";
  return out;
}

std::string render_deepseek(const std::vector<ChatMessage>& msgs, bool gen, const ChatSpecials& sp) {
  std::string out = sp.bos;
  const bool has_system =
      std::any_of(msgs.begin(), msgs.end(), [](const ChatMessage& m) { return m.role == "system"; });
  if (!has_system) out += kDeepseekCoderSystem;
  for (const ChatMessage& m : msgs) {
    if (m.role == "system")
      out += m.content;
    else if (m.role == "user")
      out += "### Instruction:\n" + m.content + "\n";
    else
      out += "### Response:\n" + m.content + "\n<|EOT|>\n";
  }
  if (gen) out += "### Response:\n";
  return out;
}

std::string render_deepseek2(const std::vector<ChatMessage>& msgs, bool gen, const ChatSpecials& sp) {
  std::string out = sp.bos;
  for (const ChatMessage& m : msgs) {
    if (m.role == "user")
      out += "User: " + m.content + "\n\n";
    else if (m.role == "assistant")
      out += "Assistant: " + m.content + sp.eos;
    else
      out += m.content + "\n\n";
  }
  if (gen) out += "Assistant:";
  return out;
}

std::string render_deepseek3(const std::vector<ChatMessage>& msgs, bool gen, const ChatSpecials& sp) {
  std::string system;
  bool first = true;
  for (const ChatMessage& m : msgs) {
    if (m.role != "system") continue;
    if (!first) system += "\n\n";
    system += m.content;
    first = false;
  }
  std::string out = sp.bos + system;
  for (const ChatMessage& m : msgs) {
    if (m.role == "user")
      out += kDsUser + m.content;
    else if (m.role == "assistant")
      out += kDsAssistant + m.content + kDsEnd;
  }
  if (gen) out += kDsAssistant;
  return out;
}

// ChatML templates of Qwen models open with a constant default system
// message when the conversation has none: '<|im_start|>system\nTEXT<|im_end|>\n'
// written as one string literal. Returns TEXT, or "" when there is none.
std::string chatml_default_system(std::string_view jinja) {
  for (std::string_view nl : {std::string_view("\\n"), std::string_view("\n")}) {
    const std::string open = "<|im_start|>system" + std::string(nl);
    size_t pos = 0;
    while ((pos = jinja.find(open, pos)) != std::string_view::npos) {
      const size_t start = pos + open.size();
      const size_t end = jinja.find("<|im_end|>", start);
      if (end == std::string_view::npos) break;
      const std::string_view text = jinja.substr(start, end - start);
      // A constant: no string concatenation, expression or escape inside.
      if (!text.empty() && text.find_first_of("'\"+{}\\") == std::string_view::npos) return std::string(text);
      pos = start;
    }
  }
  return std::string();
}

}  // namespace

const std::vector<std::string>& chat_template_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> n;
    for (const Family& f : families()) n.emplace_back(f.name);
    return n;
  }();
  return names;
}

ChatTemplate chat_template_by_name(std::string_view name) {
  const Family* f = find_family(name);
  if (!f) {
    std::string known;
    for (const Family& k : families()) known += std::string(known.empty() ? "" : ", ") + k.name;
    raise(Status::Unsupported, "chat template '%.*s' is not supported (built-in templates: %s)",
          static_cast<int>(name.size()), name.data(), known.c_str());
  }
  ChatTemplate t;
  t.name = f->name;
  t.emit_bos = true;
  t.eos_when_done = t.name == "phi3";
  return t;
}

ChatTemplate chat_template_detect(std::string_view jinja) {
  // Not Jinja at all: a template name (Error(Unsupported) naming it).
  if (find_family(jinja) || (!contains(jinja, "{{") && !contains(jinja, "{%")))
    return chat_template_by_name(jinja);
  auto has = [&](std::string_view s) { return contains(jinja, s); };
  std::string name;
  if (has("<|im_start|>") && !has("<|im_sep|>")) {
    name = "chatml";
  } else if (has("[INST]")) {
    if (has("[SYSTEM_PROMPT]"))
      name = "mistral-v7";
    else if (has("' [INST] ' + system_message") || has("[AVAILABLE_TOOLS]"))
      name = has(" [INST]") ? "mistral-v1" : has("\"[INST]\"") ? "mistral-v3-tekken" : "mistral-v3";
    else if (has("<<SYS>>"))
      name = "llama2";
    else
      name = "mistral-v0";
  } else if (has("<|assistant|>") && has("<|end|>")) {
    name = "phi3";
  } else if (has("<start_of_turn>")) {
    name = "gemma";
  } else if (has("<|user|>") && has("<|assistant|>") && !has("[gMASK]")) {
    name = "zephyr";
  } else if (has("### Instruction:") && has("<|EOT|>")) {
    name = "deepseek";
  } else if (has("<|start_header_id|>") && has("<|end_header_id|>")) {
    name = has("Cutting Knowledge Date") ? "llama3.1" : "llama3";
  } else if (has("'Assistant: ' + message['content'] + eos_token")) {
    name = "deepseek2";
  } else if (has(kDsAssistant) && has(kDsUser)) {
    name = "deepseek3";
  }
  if (name.empty()) {
    // Name the template by its opening, which is what people recognise.
    std::string head(jinja.substr(0, 60));
    for (char& c : head)
      if (c == '\n' || c == '\r') c = ' ';
    raise(Status::Unsupported, "chat template not recognised (it begins \"%s%s\"); pass a template name",
          head.c_str(), jinja.size() > 60 ? "..." : "");
  }
  ChatTemplate t = chat_template_by_name(name);
  t.emit_bos = has("bos_token");
  t.eos_when_done = name == "phi3" && has("eos_token");
  if (name == "chatml") t.default_system = chatml_default_system(jinja);
  return t;
}

ChatSpecials chat_template_default_specials(std::string_view name) {
  const Family* f = find_family(name);
  if (!f) return {};
  return {f->bos, f->eos};
}

const std::vector<std::string>& chat_template_stops(std::string_view name) {
  static const std::vector<std::string> none;
  const Family* f = find_family(name);
  return f ? f->stops : none;
}

bool chat_template_is_jinja(std::string_view text) { return contains(text, "{{") || contains(text, "{%"); }

std::string chat_render_jinja(std::string_view jinja_text, const jinja::Value& context, const ChatSpecials& specials) {
  const jinja::Template tmpl(jinja_text);
  jinja::Value ctx = jinja::Value::object();
  ctx.set("bos_token", jinja::Value(specials.bos));
  ctx.set("eos_token", jinja::Value(specials.eos));
  ctx.set("add_generation_prompt", jinja::Value(false));
  ctx.set("tools", jinja::Value::none());
  ctx.set("documents", jinja::Value::none());
  if (context.is_object())
    for (const auto& kv : context.obj().items) ctx.set(kv.first, kv.second);
  return tmpl.render(ctx);
}

std::string chat_template_trial(std::string_view jinja, bool* unusable) {
  if (unusable) *unusable = false;
  if (!chat_template_is_jinja(jinja)) return std::string();
  std::string family;
  try {
    family = chat_template_detect(jinja).name;
  } catch (const Error&) {
  }
  const std::vector<ChatMessage> msgs = {
      {"user", "Hello!"}, {"assistant", "Hi. How can I help?"}, {"user", "Tell me a story."}};
  try {
    chat_render_jinja(jinja, msgs, true, chat_template_default_specials(family));
    return std::string();
  } catch (const jinja::TemplateError& e) {
    if (unusable) *unusable = e.kind() == jinja::ErrorKind::Limit;
    return e.what();
  } catch (const Error& e) {
    if (unusable) *unusable = true;
    return e.what();
  }
}

std::string chat_render_jinja(std::string_view jinja_text, const std::vector<ChatMessage>& messages,
                              bool add_generation_prompt, const ChatSpecials& specials) {
  jinja::Value msgs = jinja::Value::array();
  for (const ChatMessage& m : messages) {
    jinja::Value o = jinja::Value::object();
    o.set("role", jinja::Value(m.role));
    o.set("content", jinja::Value(m.content));
    msgs.push(std::move(o));
  }
  jinja::Value ctx = jinja::Value::object();
  ctx.set("messages", std::move(msgs));
  ctx.set("add_generation_prompt", jinja::Value(add_generation_prompt));
  return chat_render_jinja(jinja_text, ctx, specials);
}

std::string chat_render(const ChatTemplate& tmpl, const std::vector<ChatMessage>& messages,
                        bool add_generation_prompt, const ChatSpecials& specials) {
  for (const ChatMessage& m : messages)
    if (m.role != "system" && m.role != "user" && m.role != "assistant")
      raise(Status::InvalidArgument, "chat message role '%s' is not one of system, user, assistant",
            m.role.c_str());
  ChatSpecials sp = specials;
  if (!tmpl.emit_bos) sp.bos.clear();
  const bool gen = add_generation_prompt;
  const std::string& n = tmpl.name;
  if (n == "llama2") return render_llama2(messages, sp);
  if (n == "llama3") return render_llama3(messages, gen, sp);
  if (n == "llama3.1") return render_llama31(messages, gen, sp);
  if (n == "chatml") return render_chatml(messages, gen, tmpl.default_system);
  if (n == "mistral-v0") return render_mistral_v0(messages, sp);
  if (n == "mistral-v1") return render_mistral_v1(messages, sp);
  if (n == "mistral-v3") return render_mistral_v3(messages, sp, false);
  if (n == "mistral-v3-tekken") return render_mistral_v3(messages, sp, true);
  if (n == "mistral-v7") return render_mistral_v7(messages, sp);
  if (n == "phi3") return render_phi3(messages, gen, sp, tmpl.eos_when_done);
  if (n == "gemma") return render_gemma(messages, gen, sp);
  if (n == "zephyr") return render_zephyr(messages, gen, sp);
  if (n == "deepseek") return render_deepseek(messages, gen, sp);
  if (n == "deepseek2") return render_deepseek2(messages, gen, sp);
  if (n == "deepseek3") return render_deepseek3(messages, gen, sp);
  raise(Status::Unsupported, "chat template '%s' is not supported", n.c_str());
}

}  // namespace infer
