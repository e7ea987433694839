// The C API of chat templates: argument checks and error translation around
// lib/tokenizer/chat.h.
#include <cstring>
#include <new>
#include <string>
#include <vector>

#include "api/api_util.h"
#include "core/error.h"
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
    const infer::ChatTemplate t = infer::chat_template_detect(model_template(model));
    return copy_out(t.name, buf, buf_size, needed);
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
    // A built-in name, else a Jinja text to recognise, else the model's own.
    const infer::ChatTemplate tmpl = template_name ? infer::chat_template_detect(template_name)
                                                   : infer::chat_template_detect(model_template(model));
    infer::ChatSpecials specials = infer::chat_template_default_specials(tmpl.name);
    if (model) {
      const infer::Tokenizer& tok = infer::api::model_of(model).tokenizer();
      specials.bos = token_text(tok, tok.vocab().bos);
      specials.eos = token_text(tok, tok.vocab().eos);
    }
    std::vector<infer::ChatMessage> msgs;
    msgs.reserve(n_messages);
    for (size_t i = 0; i < n_messages; ++i) msgs.push_back({messages[i].role, messages[i].content});
    return copy_out(infer::chat_render(tmpl, msgs, add_generation_prompt != 0, specials), buf, buf_size,
                    needed);
  });
}

}  // extern "C"
