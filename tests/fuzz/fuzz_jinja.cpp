// libFuzzer target: the chat-template interpreter (lib/tokenizer/jinja.*).
// The input is split at the first NUL: template text, then JSON for the
// template's variables (a fixed conversation with tools when absent or not
// an object). Parsing and rendering may fail only with jinja::TemplateError
// (the JSON reader with Error(InvalidArgument)); limits are tight so that
// runaway templates end quickly.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "core/error.h"
#include "tokenizer/jinja.h"

namespace {

const char* kContext = R"({"messages": [
  {"role": "system", "content": "You are a helpful assistant."},
  {"role": "user", "content": "Hello \u00e9"},
  {"role": "assistant", "content": null, "tool_calls": [{"id": "abcdef123", "type": "function",
    "function": {"name": "get_weather", "arguments": {"location": "Paris"}}}]},
  {"role": "tool", "content": "22"},
  {"role": "assistant", "content": "<think>x</think> It is 22."}],
 "tools": [{"type": "function", "function": {"name": "get_weather", "description": "d",
   "parameters": {"type": "object", "properties": {"location": {"type": "string"}}, "required": ["location"]}}}],
 "add_generation_prompt": true, "bos_token": "<s>", "eos_token": "</s>", "enable_thinking": false})";

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string all(reinterpret_cast<const char*>(data), size);
  const size_t nul = all.find('\0');
  const std::string text = all.substr(0, nul);
  infer::jinja::Value ctx;
  if (nul != std::string::npos) {
    try {
      ctx = infer::jinja::Value::from_json(all.substr(nul + 1));
    } catch (const infer::jinja::TemplateError&) {
      std::abort();  // the JSON reader raises plain errors
    } catch (const infer::Error& e) {
      if (e.status() != infer::Status::InvalidArgument) std::abort();
    }
  }
  if (!ctx.is_object()) ctx = infer::jinja::Value::from_json(kContext);
  infer::jinja::Limits lim;
  lim.max_steps = 200000;
  lim.max_output = 1 << 20;
  lim.max_work_bytes = 16 << 20;
  try {
    const infer::jinja::Template t(text, lim);
    infer::jinja::RenderOptions opt;
    opt.now = 1721995200;
    const std::string out = t.render(ctx, opt);
    if (out.size() > lim.max_output) std::abort();
  } catch (const infer::jinja::TemplateError& e) {
    if (e.kind() == infer::jinja::ErrorKind::Syntax || e.kind() == infer::jinja::ErrorKind::Unsupported) {
      if (e.status() != infer::Status::Unsupported) std::abort();
    } else if (e.status() != infer::Status::InvalidArgument) {
      std::abort();
    }
  }
  return 0;
}
