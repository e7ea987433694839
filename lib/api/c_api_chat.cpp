// The C API of chat templates: argument checks and error translation around
// lib/tokenizer/chat.h (built-in templates) and lib/tokenizer/jinja.h (the
// model's own Jinja template).
#include <cstring>
#include <new>
#include <string>
#include <vector>

#include "api/api_util.h"
#include "core/error.h"
#include "core/log.h"
#include "infer/infer.h"
#include "model/model.h"
#include "tokenizer/chat.h"

namespace {

using infer::api::copy_out;
using infer::api::fail;
using infer::api::guarded;

// The text of a special token of the model ("" when it has none).
std::string token_text(const infer::Tokenizer& tok, int32_t id) {
  if (id < 0 || id >= tok.n_vocab()) return std::string();
  return tok.vocab().tokens[static_cast<size_t>(id)];
}

const std::string& model_template(const infer_model* model) {
  const std::string& jinja = infer::api::model_of(model).tokenizer().vocab().chat_template;
  if (jinja.empty())
    infer::raise(infer::Status::NotFound,
                 "the model has no chat template (tokenizer.chat_template): pass a template name");
  return jinja;
}

// The special tokens a template sees: the model's, else the usual ones of
// the family `family` (a built-in name; "" for none).
infer::ChatSpecials specials_for(const infer_model* model, const std::string& family) {
  infer::ChatSpecials sp = infer::chat_template_default_specials(family);
  if (model) {
    const infer::Tokenizer& tok = infer::api::model_of(model).tokenizer();
    sp.bos = token_text(tok, tok.vocab().bos);
    sp.eos = token_text(tok, tok.vocab().eos);
  }
  return sp;
}

// The family a Jinja text is recognised as ("" when none).
std::string family_of(std::string_view jinja) {
  try {
    return infer::chat_template_detect(jinja).name;
  } catch (const infer::Error&) {
    return std::string();
  }
}

bool outside_subset(const infer::jinja::TemplateError& e) {
  return e.kind() == infer::jinja::ErrorKind::Syntax || e.kind() == infer::jinja::ErrorKind::Unsupported;
}

// Renders a conversation (ctx: the template's variables) as the C API
// documents: a built-in name renders the built-in template; a Jinja text,
// or "jinja" (the model's own text), renders with the interpreter and fails
// when the text uses what the interpreter lacks; NULL renders the model's
// own template with the interpreter and falls back to the built-in template
// of its family (with a warning in the log) when it uses what the
// interpreter lacks. `builtin` renders the built-in template `tmpl`.
template <typename Builtin>
std::string render_conversation(const infer_model* model, const char* template_name, const infer::jinja::Value& ctx,
                                Builtin builtin) {
  const bool explicit_text = template_name && infer::chat_template_is_jinja(template_name);
  const bool explicit_model = template_name && std::strcmp(template_name, "jinja") == 0;
  if (template_name && !explicit_text && !explicit_model) {
    const infer::ChatTemplate t = infer::chat_template_by_name(template_name);
    return builtin(t, specials_for(model, t.name));
  }
  if (explicit_model && !model)
    infer::raise(infer::Status::InvalidArgument,
                 "infer_chat_apply_template: the template \"jinja\" (the model's own) needs a model");
  const std::string& text = explicit_text ? std::string(template_name) : model_template(model);
  const std::string family = family_of(text);
  if (!template_name) {
    // The model's own template failed its trial render at load (a value that
    // contains itself, a budget overrun): the built-in template of its
    // family, else chatml, as for a model without a template.
    const std::string& broken = infer::api::model_of(model).tokenizer().vocab().chat_template_error;
    if (!broken.empty()) {
      const infer::ChatTemplate t = family.empty() ? infer::chat_template_by_name("chatml") : infer::chat_template_detect(text);
      infer::log(infer::LogLevel::Warn,
                 "the model's chat template failed its trial render at load (%s); rendering with the built-in "
                 "template '%s'",
                 broken.c_str(), t.name.c_str());
      return builtin(t, specials_for(model, t.name));
    }
  }
  const infer::ChatSpecials sp = specials_for(model, family);
  try {
    return infer::chat_render_jinja(text, ctx, sp);
  } catch (const infer::jinja::TemplateError& e) {
    if (!outside_subset(e)) throw;
    if (template_name || family.empty())
      infer::raise(infer::Status::Unsupported,
                   "%s; libinfer's Jinja interpreter cannot render this chat template: pass a built-in template name",
                   e.what());
    infer::log(infer::LogLevel::Warn,
               "the model's chat template uses what libinfer's Jinja interpreter lacks (%s); "
               "rendering with the built-in template '%s'",
               e.what(), family.c_str());
    const infer::ChatTemplate t = infer::chat_template_detect(text);
    return builtin(t, sp);
  }
}

}  // namespace

extern "C" {

// These build their tables on first use (allocating): an exception becomes
// 0 / NULL, never crosses into C.
int32_t infer_chat_template_count(void) {
  return infer::api::guarded_value<int32_t>(0, [] { return static_cast<int32_t>(infer::chat_template_names().size()); });
}

const char* infer_chat_template_name(int32_t index) {
  return infer::api::guarded_value<const char*>(nullptr, [&]() -> const char* {
    const auto& names = infer::chat_template_names();
    if (index < 0 || static_cast<size_t>(index) >= names.size()) return nullptr;
    return names[static_cast<size_t>(index)].c_str();
  });
}

const char* infer_chat_template_stop(const char* template_name, int32_t index) {
  if (!template_name || index < 0) return nullptr;
  return infer::api::guarded_value<const char*>(nullptr, [&]() -> const char* {
    const auto& stops = infer::chat_template_stops(template_name);
    if (static_cast<size_t>(index) >= stops.size()) return nullptr;
    return stops[static_cast<size_t>(index)].c_str();
  });
}

infer_status infer_chat_template_detect(const infer_model* model, char* buf, size_t buf_size, size_t* needed) {
  if (needed) *needed = 0;
  if (!model) return fail(INFER_ERR_INVALID_ARGUMENT, "infer_chat_template_detect: model must not be NULL");
  return guarded([&] {
    const std::string& text = model_template(model);
    try {
      return copy_out(infer::chat_template_detect(text).name, buf, buf_size, needed);
    } catch (const infer::Error& e) {
      // Not a family libinfer knows: "jinja" when the interpreter reads it.
      if (e.status() != infer::Status::Unsupported || !infer::chat_template_is_jinja(text)) throw;
      try {
        const infer::jinja::Template parsed(text);
      } catch (const infer::jinja::TemplateError& te) {
        infer::raise(infer::Status::Unsupported, "%s; and libinfer's Jinja interpreter cannot read it: %s", e.what(),
                     te.what());
      }
      return copy_out("jinja", buf, buf_size, needed);
    }
  });
}

infer_status infer_chat_apply_template(const infer_model* model, const char* template_name,
                                       const infer_chat_message* messages, size_t n_messages,
                                       int32_t add_generation_prompt, char* buf, size_t buf_size, size_t* needed) {
  if (needed) *needed = 0;
  if (!model && !template_name)
    return fail(INFER_ERR_INVALID_ARGUMENT,
                "infer_chat_apply_template: give a model, a template name, or both");
  if (!messages && n_messages > 0)
    return fail(INFER_ERR_INVALID_ARGUMENT, "infer_chat_apply_template: messages is NULL but n_messages is not 0");
  for (size_t i = 0; i < n_messages; ++i)
    if (!messages[i].role || !messages[i].content)
      return fail(INFER_ERR_INVALID_ARGUMENT,
                  infer::strformat("infer_chat_apply_template: message %zu has a NULL role or content", i));
  return guarded([&] {
    std::vector<infer::ChatMessage> msgs;
    msgs.reserve(n_messages);
    infer::jinja::Value list = infer::jinja::Value::array();
    for (size_t i = 0; i < n_messages; ++i) {
      msgs.push_back({messages[i].role, messages[i].content});
      infer::jinja::Value m = infer::jinja::Value::object();
      m.set("role", infer::jinja::Value(messages[i].role));
      m.set("content", infer::jinja::Value(messages[i].content));
      list.push(std::move(m));
    }
    infer::jinja::Value ctx = infer::jinja::Value::object();
    ctx.set("messages", std::move(list));
    ctx.set("add_generation_prompt", infer::jinja::Value(add_generation_prompt != 0));
    const std::string text = render_conversation(
        model, template_name, ctx, [&](const infer::ChatTemplate& t, const infer::ChatSpecials& sp) {
          return infer::chat_render(t, msgs, add_generation_prompt != 0, sp);
        });
    return copy_out(text, buf, buf_size, needed);
  });
}

infer_status infer_chat_apply_template_json(const infer_model* model, const char* template_name,
                                            const char* context_json, char* buf, size_t buf_size, size_t* needed) {
  if (needed) *needed = 0;
  if (!model && !template_name)
    return fail(INFER_ERR_INVALID_ARGUMENT,
                "infer_chat_apply_template_json: give a model, a template name, or both");
  if (!context_json) return fail(INFER_ERR_INVALID_ARGUMENT, "infer_chat_apply_template_json: context_json is NULL");
  return guarded([&] {
    const infer::jinja::Value ctx = infer::jinja::Value::from_json(context_json);
    if (!ctx.is_object())
      infer::raise(infer::Status::InvalidArgument, "infer_chat_apply_template_json: the context must be a JSON object");
    const infer::jinja::Value* list = ctx.find("messages");
    if (!list || !list->is_array())
      infer::raise(infer::Status::InvalidArgument,
                   "infer_chat_apply_template_json: the context needs \"messages\", an array of objects");
    for (size_t i = 0; i < list->arr().size(); ++i)
      if (!list->arr()[i].is_object())
        infer::raise(infer::Status::InvalidArgument, "infer_chat_apply_template_json: message %zu is not an object", i);
    const infer::jinja::Value* gen = ctx.find("add_generation_prompt");
    const bool add_gen = gen && gen->kind() == infer::jinja::Value::Kind::Bool && gen->as_bool();
    const std::string text = render_conversation(
        model, template_name, ctx, [&](const infer::ChatTemplate& t, const infer::ChatSpecials& sp) {
          std::vector<infer::ChatMessage> msgs;
          for (size_t i = 0; i < list->arr().size(); ++i) {
            const infer::jinja::Value* role = list->arr()[i].find("role");
            const infer::jinja::Value* content = list->arr()[i].find("content");
            if (!role || !role->is_string() || !content || !content->is_string())
              infer::raise(infer::Status::InvalidArgument,
                           "message %zu needs a string role and content for the built-in template '%s'", i,
                           t.name.c_str());
            msgs.push_back({role->str(), content->str()});
          }
          return infer::chat_render(t, msgs, add_gen, sp);
        });
    return copy_out(text, buf, buf_size, needed);
  });
}

}  // extern "C"
