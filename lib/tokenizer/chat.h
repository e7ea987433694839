// Chat templates: messages with roles in, prompt text out.
//
// GGUF files carry the model's Jinja chat template (tokenizer.chat_template;
// the Hugging Face loader passes tokenizer_config.json's chat_template through
// the same key). chat_render_jinja renders it with libinfer's Jinja-subset
// interpreter (tokenizer/jinja.h) exactly as Hugging Face's
// apply_chat_template does. Besides, libinfer recognises the template of each
// common family by markers in its text and can render that family's format in
// code (the built-in templates below): the fallback for a model without a
// template or whose template uses what the interpreter lacks, and what a
// caller gets by naming a template. Each produces what the published template
// renders with Hugging Face's settings (trim_blocks, lstrip_blocks):
//
//   llama2             Llama 2 chat: <s>[INST] <<SYS>>...<</SYS>> ... [/INST] ... </s>
//   llama3             Llama 3: <|start_header_id|>role<|end_header_id|>\n\n...<|eot_id|>
//   llama3.1           Llama 3.1 / 3.2 / 3.3: as llama3 plus the system header with
//                      "Cutting Knowledge Date: December 2023" and "Today Date: 26 Jul 2024"
//                      (the template's own date when strftime_now is not provided)
//   chatml             ChatML (Qwen, Hermes, Yi, ...): <|im_start|>role\n...<|im_end|>\n;
//                      a Qwen template's built-in default system prompt is kept
//   mistral-v1         Mistral 7B v0.1/v0.2 official: " [INST] sys\n\nuser [/INST] answer</s>"
//   mistral-v3         Mistral 7B v0.3, Mixtral, Large 2407: "[INST] user[/INST] answer</s>",
//                      system prompt before the last user message
//   mistral-v3-tekken  Mistral NeMo: as v3 without the spaces
//   mistral-v7         Mistral Large 2411: [SYSTEM_PROMPT] ...[/SYSTEM_PROMPT][INST] ...[/INST]
//   phi3               Phi-3 / Phi-3.5: <|role|>\n...<|end|>\n
//   gemma              Gemma 1/2/3: <start_of_turn>user\n...<end_of_turn>\n, "model" for
//                      the assistant; a system message is put before the first user
//                      message (Gemma 3's template; Gemma 1/2 refuse system messages)
//   zephyr             Zephyr: <|role|>\n...</s>\n
//   deepseek           DeepSeek Coder instruct: ### Instruction: / ### Response: ... <|EOT|>
//   deepseek2          DeepSeek LLM chat / V2: "User: ...\n\nAssistant: ...<eos>"
//   deepseek3          DeepSeek V3 / R1: <｜User｜>...<｜Assistant｜>...<｜end▁of▁sentence｜>
//
// Roles are "system", "user" and "assistant". Where the published template
// raises an error (roles not alternating user/assistant after an optional
// system message, in llama2, mistral-* and gemma), rendering fails with
// Error(InvalidArgument) and the template's message.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/jinja.h"

namespace infer {

struct ChatMessage {
  std::string role;
  std::string content;
};

// A built-in template and the variations that a model's own Jinja text
// selects.
struct ChatTemplate {
  std::string name;            // one of chat_template_names()
  bool emit_bos = true;        // the template writes bos_token (false when its text has none)
  bool eos_when_done = false;  // phi3: eos_token after the last turn without a generation prompt
  std::string default_system;  // chatml: system prompt used when the messages have none
};

// Names of the built-in templates, in a stable order.
const std::vector<std::string>& chat_template_names();

// The built-in template called `name`; Error(Unsupported) naming it when
// there is none.
ChatTemplate chat_template_by_name(std::string_view name);

// Recognises a Jinja chat template (tokenizer.chat_template). A text with
// no Jinja tags is taken as a template name (chat_template_by_name).
// Error(Unsupported) when the family is not recognised.
ChatTemplate chat_template_detect(std::string_view jinja);

// The model's special tokens as the template sees them.
struct ChatSpecials {
  std::string bos;
  std::string eos;
};

// Typical bos/eos texts of a family, for rendering without a model.
ChatSpecials chat_template_default_specials(std::string_view name);

// Renders the conversation. add_generation_prompt appends the header that
// starts the assistant's reply.
std::string chat_render(const ChatTemplate& tmpl, const std::vector<ChatMessage>& messages,
                        bool add_generation_prompt, const ChatSpecials& specials);

// Whether a text is a Jinja template rather than a template name (it has a
// {{ or {% tag).
bool chat_template_is_jinja(std::string_view text);

// Renders a Jinja chat template with the interpreter, with the variables
// Hugging Face's apply_chat_template passes: messages (objects with role and
// content), add_generation_prompt, bos_token, eos_token, tools and documents
// (none). Any role is passed through (the template decides). Throws
// jinja::TemplateError (see jinja.h: raise_exception's message, unsupported
// constructs with their line, limits).
std::string chat_render_jinja(std::string_view jinja, const std::vector<ChatMessage>& messages,
                              bool add_generation_prompt, const ChatSpecials& specials);

// The same with every variable given: `context` is an object whose keys
// become the template's variables (messages, tools, enable_thinking, ...);
// bos_token, eos_token, add_generation_prompt (false), tools and documents
// (none) are added where absent.
std::string chat_render_jinja(std::string_view jinja, const jinja::Value& context, const ChatSpecials& specials);

// The trial render a model's own template gets when the model is loaded: the
// template renders a small fixed conversation (user, assistant, user, with
// the generation prompt) within the interpreter's budgets. Returns "" when it
// renders; else the template error (a value that contains itself, a budget
// overrun, syntax or a construct outside the subset, the template's own
// raise_exception, ...). *unusable is set for the errors of kind Limit (a
// value that contains itself, a budget overrun: the template is hostile or
// broken whatever the conversation); chat then renders a built-in template
// instead (see infer_chat_apply_template). Syntax and constructs outside the
// subset keep their own fallback, decided at render time.
std::string chat_template_trial(std::string_view jinja, bool* unusable = nullptr);

// Texts that end an assistant turn in this format (for stop strings when a
// model writes them as plain text rather than as its end-of-turn token).
const std::vector<std::string>& chat_template_stops(std::string_view name);

}  // namespace infer
