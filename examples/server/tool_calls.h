// infer serve: OpenAI function calling on top of the model's chat template.
// Which tool-call format a template teaches, and a parser that finds the
// calls in generated text, whole or as it streams. No HTTP and no libinfer
// here, so it is tested on its own (tests/serve_tool_calls_test.cpp).
//
// The format is chosen from the chat template's text (first match wins):
//   - it contains "<tool_call>"           -> Hermes (Hermes 2 Pro, Qwen2.5, Qwen3):
//       <tool_call>{"name": ..., "arguments": {...}}</tool_call>, one or more,
//       anywhere in the reply;
//   - it contains "[TOOL_CALLS]"          -> Mistral (v0.3, Nemo):
//       [TOOL_CALLS][{"name": ..., "arguments": {...}}, ...] anywhere, or the
//       reply starting with the JSON array (the marker is a control token that
//       the detokenizer may not write);
//   - it contains "<|start_header_id|>" and "ipython" or "<|python_tag|>"
//                                         -> Llama 3.1/3.2 JSON:
//       the reply is {"name": ..., "parameters": {...}} (possibly after
//       "<|python_tag|>"; several separated by ";"), naming a declared tool;
//   - otherwise none: the server refuses `tools` for that template.
#pragma once

#include <string>
#include <vector>

namespace serve {

enum class ToolFormat { None, Hermes, Llama3, Mistral };

ToolFormat tool_format_for_template(const std::string& template_text);
const char* tool_format_name(ToolFormat f);

// Whether the template writes an assistant tool call's function.arguments as
// a string it concatenates (DeepSeek R1: "... + tool['function']['arguments']
// + ...") rather than an object it serialises with tojson (Qwen, Hermes,
// Llama 3.x, Mistral). The server passes arguments in the shape the template
// reads.
bool template_wants_string_arguments(const std::string& template_text);

struct ToolCall {
  std::string name;
  std::string arguments;  // JSON text of an object ("{}" when the model gave none)
};

// What the parser makes of generated text, in order: a piece of plain text,
// or a complete tool call.
struct ToolEvent {
  bool is_call = false;
  std::string content;  // !is_call
  ToolCall call;        // is_call
};

// Incremental parser: feed() the text as it arrives, then finish(). Text that
// may start a call is held back until it is known to be one (then a call
// event) or not (then content). A call whose JSON does not parse is content.
// Whitespace between the text and a call, and between calls, is dropped; a
// reply without calls comes out byte for byte as it went in.
class ToolCallParser {
 public:
  // tool_names: the declared tools (the Llama 3 format only accepts these
  // names, its calls being plain JSON objects).
  ToolCallParser(ToolFormat format, std::vector<std::string> tool_names);
  std::vector<ToolEvent> feed(const std::string& text);
  std::vector<ToolEvent> finish();
  int calls() const { return n_calls_; }

 private:
  void run(bool final, std::vector<ToolEvent>& out);
  void release(const std::string& text, std::vector<ToolEvent>& out);
  void emit_call(ToolCall c, std::vector<ToolEvent>& out);
  bool in_call_step(bool final, std::vector<ToolEvent>& out);

  ToolFormat format_;
  std::vector<std::string> names_;
  std::string buf_;       // text not yet released
  std::string held_ws_;   // released text's trailing whitespace, not yet sent
  bool in_call_ = false;  // buf_ starts with a call's opening
  bool at_start_ = true;  // nothing but whitespace seen so far
  bool after_call_ = false;
  int n_calls_ = 0;
};

// The whole text at once: the text outside the calls (joined) and the calls.
struct ParsedReply {
  std::string content;
  std::vector<ToolCall> calls;
};
ParsedReply parse_tool_calls(ToolFormat format, const std::vector<std::string>& tool_names, const std::string& text);

}  // namespace serve
