// infer serve: the OpenAI-style request bodies, parsed and checked into plain
// structs before anything touches the engine. No HTTP and no libinfer here,
// so the parser can be fuzzed on its own (tests/fuzz/fuzz_serve_request.cpp).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace serve {

// A request the server refuses: HTTP status, OpenAI error type, the field
// at fault ("" when none) and a code ("invalid_type", "invalid_value", ...).
struct RequestError {
  int status = 400;
  std::string message;
  std::string param;
  std::string code = "invalid_value";
  std::string type = "invalid_request_error";
};

struct ChatMessage {
  std::string role;  // system, user, assistant or tool ("developer" is read as system)
  std::string content;
  // assistant: its tool calls, each {id, type: "function", function: {name,
  // arguments}} with arguments the JSON text the client gave (serialised
  // when it gave an object).
  struct ToolCall {
    std::string id, name, arguments;
  };
  std::vector<ToolCall> tool_calls;
  std::string tool_call_id;  // tool: the call it answers
  std::string name;          // tool (or any role): the optional name
};

// tool_choice: "none", "auto" (the default), "required", or one named function.
enum class ToolChoice { None, Auto, Required, Named };

enum class Endpoint { Chat, Completion };

enum class ResponseFormat { Text, JsonObject, JsonSchema };

struct CompletionRequest {
  Endpoint endpoint = Endpoint::Completion;
  std::string model;
  // Chat: the conversation. Completion: one or more prompts, each text or
  // token ids (a prompt given as ids has text empty and use_tokens set).
  std::vector<ChatMessage> messages;
  struct Prompt {
    std::string text;
    std::vector<int32_t> tokens;
    bool use_tokens = false;
  };
  std::vector<Prompt> prompts;

  std::optional<int32_t> max_tokens;  // max_tokens or max_completion_tokens
  std::optional<double> temperature, top_p, min_p, presence_penalty, frequency_penalty, repetition_penalty;
  std::optional<int32_t> top_k;
  std::optional<int64_t> seed;
  int32_t n = 1;
  std::vector<std::string> stop;
  std::vector<std::pair<int32_t, float>> logit_bias;
  bool logprobs = false;   // chat: logprobs: true; completion: logprobs: N
  int32_t top_logprobs = 0;
  bool echo = false;       // completion only
  bool stream = false;
  bool include_usage = false;
  bool ignore_eos = false;  // extension (vLLM, llama-server)
  ResponseFormat response_format = ResponseFormat::Text;
  std::string json_schema;  // response_format json_schema: the schema, serialised
  std::string grammar;      // extension: a GBNF grammar
  std::string user;
  // Function calling: the declared tools, as the JSON array of
  // {type: "function", function: {name, description?, parameters?}} (checked;
  // serialised), their names, and tool_choice.
  std::string tools_json;
  std::vector<std::string> tool_names;
  ToolChoice tool_choice = ToolChoice::Auto;
  std::string tool_choice_name;  // Named
  bool parallel_tool_calls = true;
};

// Per-request caps on what a client may ask for (each a 400 naming the field).
// The body's size is bounded before parsing (--max-body-mb), its nesting by
// json_limits.h; these bound what one request makes the server hold or write.
struct Limits {
  int32_t max_n = 16;             // n at most (the engine's max_seqs)
  int32_t max_stop = 16;          // stop sequences
  size_t max_stop_bytes = 1024;   // each stop sequence's length
  int32_t max_top_logprobs = 20;  // chat top_logprobs (completions: logprobs <= 5)
  size_t max_messages = 4096;
  size_t max_content_parts = 4096;         // parts of one message's content
  size_t max_content_bytes = size_t{32} << 20;  // one message's content
  size_t max_prompts = 64;
  size_t max_choices = 64;                      // n x prompts
  size_t max_echo_bytes = size_t{16} << 20;     // echo: prompt bytes x n
  size_t max_logit_bias = 10000;  // logit_bias entries
  size_t max_tools = 128;         // tools, and one message's tool_calls
};

// Parses a chat (/v1/chat/completions) or completion (/v1/completions)
// body. Unknown fields are ignored; null is the same as absent. Returns
// the request, or fills *err and returns nullopt.
std::optional<CompletionRequest> parse_completion_request(const std::string& body, Endpoint endpoint,
                                                          const Limits& limits, RequestError* err);

// /tokenize: {"content": "...", "add_special": bool, "with_pieces": bool}
struct TokenizeRequest {
  std::string content;
  bool add_special = true;
  bool parse_special = false;
  bool with_pieces = false;
};
std::optional<TokenizeRequest> parse_tokenize_request(const std::string& body, RequestError* err);

// /detokenize: {"tokens": [ids]}
std::optional<std::vector<int32_t>> parse_detokenize_request(const std::string& body, RequestError* err);

// {"error": {"message", "type", "param", "code"}} as JSON text.
std::string error_body(const RequestError& e);

}  // namespace serve
