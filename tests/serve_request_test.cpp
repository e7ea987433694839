// infer serve's request parser (examples/server/request.*) against hostile
// bodies: JSON nested 100,000 deep in every kind of field (a 400 naming the
// field, never a crash), the size limit of json_limits.h, and the per-request
// caps of serve::Limits. Built into infer_serve_tool_calls_test (the server
// sources need nlohmann-json, the library's tests do not).
#include <catch2/catch.hpp>

#include <string>

#include <nlohmann/json.hpp>

#include "server/json_limits.h"
#include "server/request.h"
#include "server/tool_calls.h"

using serve::Endpoint;
using serve::RequestError;

namespace {

constexpr int kDeep = 100000;

std::string deep_array(int n) { return std::string(static_cast<size_t>(n), '[') + std::string(static_cast<size_t>(n), ']'); }
std::string deep_object(int n) {
  std::string s;
  for (int i = 0; i < n; ++i) s += "{\"a\":";
  s += "1";
  return s + std::string(static_cast<size_t>(n), '}');
}

const std::string kUser = R"({"role":"user","content":"hi"})";

// The error a body gets (REQUIREs that it is refused).
RequestError refused(const std::string& body, Endpoint ep = Endpoint::Chat, const serve::Limits& lim = {}) {
  RequestError err;
  const auto r = serve::parse_completion_request(body, ep, lim, &err);
  REQUIRE_FALSE(r.has_value());
  CHECK(err.status == 400);
  return err;
}

}  // namespace

TEST_CASE("serve request: JSON nested 100,000 deep in any field is a 400 naming the field", "[serve][request]") {
  for (const std::string& deep : {deep_array(kDeep), deep_object(kDeep)}) {
    struct Case {
      std::string body, param;
      Endpoint ep = Endpoint::Chat;
    };
    const std::string args_text = nlohmann::json(std::string("{\"x\":") + deep + "}").dump();
    const Case cases[] = {
        {R"({"messages":[)" + kUser + R"(],"tools":[{"type":"function","function":{"name":"f","parameters":{"x":)" + deep + "}}}]}",
         "tools[0].function.parameters"},
        {R"({"messages":[)" + kUser + R"(],"response_format":{"type":"json_schema","json_schema":{"name":"x","schema":{"x":)" + deep +
             "}}}}",
         "response_format.json_schema.schema"},
        {R"({"messages":[)" + kUser + R"(,{"role":"assistant","tool_calls":[{"id":"1","type":"function","function":{"name":"f","arguments":{"x":)" +
             deep + "}}}]}]}",
         "messages[1].tool_calls[0]"},
        {R"({"messages":[)" + kUser + R"(,{"role":"assistant","tool_calls":[{"id":"1","type":"function","function":{"name":"f","arguments":)" +
             args_text + "}}]}]}",
         "messages[1].tool_calls[0].function.arguments"},
        {R"({"messages":[)" + kUser + R"(],"response_format":{"type":"json_schema","json_schema":{"name":"x","schema":)" +
             nlohmann::json(deep).dump() + "}}}",
         "response_format.json_schema.schema"},
        {R"({"messages":[{"role":"user","content":)" + deep + "}]}", "messages[0].content"},
        {R"({"messages":[)" + kUser + R"(],"extension":)" + deep + "}", "extension"},
        {R"({"prompt":)" + deep + "}", "prompt", Endpoint::Completion},
        {R"({"prompt":"a","logit_bias":{"1":)" + deep + "}}", "logit_bias", Endpoint::Completion},
        {R"({"prompt":"a","stop":)" + deep + "}", "stop", Endpoint::Completion},
        {deep, "", Endpoint::Completion},
    };
    for (const Case& c : cases) {
      INFO(c.param);
      const RequestError e = refused(c.body, c.ep);
      CHECK(e.param.rfind(c.param, 0) == 0);
      CHECK_THAT(e.message, Catch::Contains("deeper than 64"));
      CHECK(nlohmann::json::parse(serve::error_body(e)).contains("error"));
    }
    RequestError e;
    CHECK_FALSE(serve::parse_tokenize_request(R"({"content":"a","x":)" + deep + "}", &e));
    CHECK(e.param.rfind("x", 0) == 0);
    CHECK_FALSE(serve::parse_detokenize_request(R"({"tokens":)" + deep + "}", &e));
    CHECK(e.param.rfind("tokens", 0) == 0);
  }
}

TEST_CASE("serve request: 64 levels are accepted, 65 are not", "[serve][request]") {
  auto body = [](int levels) {  // the body is level 1, "x" holds the rest
    return R"({"prompt":"a","x":)" + deep_array(levels - 1) + "}";
  };
  RequestError err;
  CHECK(serve::parse_completion_request(body(64), Endpoint::Completion, {}, &err).has_value());
  CHECK(refused(body(65), Endpoint::Completion).param.rfind("x[0]", 0) == 0);
}

TEST_CASE("serve request: the size limit of parse_json", "[serve][request]") {
  const std::string big(serve::kMaxJsonBytes + 1, ' ');
  try {
    (void)serve::parse_json<nlohmann::json>(big, "'f'", serve::kMaxJsonDepth, "f");
    FAIL("accepted");
  } catch (const serve::JsonLimitError& e) {
    CHECK(e.kind == serve::JsonLimitError::Kind::Size);
    CHECK(e.path == "f");
    CHECK_THAT(std::string(e.what()), Catch::Contains("too large"));
  }
}

TEST_CASE("serve request: per-request caps are 400s naming the field", "[serve][request]") {
  serve::Limits lim;
  lim.max_stop_bytes = 8;
  lim.max_logit_bias = 2;
  lim.max_content_bytes = 10;
  lim.max_content_parts = 2;
  lim.max_tools = 1;
  lim.max_choices = 4;
  lim.max_echo_bytes = 100;
  const std::string tool = R"({"type":"function","function":{"name":"f"}})";
  const std::string tool2 = R"({"type":"function","function":{"name":"g"}})";
  const std::string call = R"({"id":"1","type":"function","function":{"name":"f","arguments":"{}"}})";
  struct Case {
    std::string body, param;
    Endpoint ep = Endpoint::Chat;
  } cases[] = {
      {R"({"prompt":"a","stop":["123456789"]})", "stop", Endpoint::Completion},
      {R"({"prompt":"a","logit_bias":{"1":1,"2":1,"3":1}})", "logit_bias", Endpoint::Completion},
      {R"({"messages":[{"role":"user","content":"12345678901"}]})", "messages[0].content"},
      {R"({"messages":[{"role":"user","content":[{"type":"text","text":"123456"},{"type":"text","text":"123456"}]}]})",
       "messages[0].content"},
      {R"({"messages":[{"role":"user","content":[{"type":"text","text":"1"},{"type":"text","text":"1"},{"type":"text","text":"1"}]}]})",
       "messages[0].content"},
      {R"({"messages":[)" + kUser + R"(],"tools":[)" + tool + "," + tool2 + "]}", "tools"},
      {R"({"messages":[)" + kUser + R"(,{"role":"assistant","tool_calls":[)" + call + "," + call + "]}]}", "messages[1].tool_calls"},
      {R"({"prompt":["a","b","c"],"n":2})", "n", Endpoint::Completion},
      {R"({"prompt":")" + std::string(60, 'x') + R"(","n":2,"echo":true})", "echo", Endpoint::Completion},
      {R"({"prompt":"a","n":17})", "n", Endpoint::Completion},
      {R"({"messages":[)" + kUser + R"(],"logprobs":true,"top_logprobs":21})", "top_logprobs"},
      {R"({"prompt":"a","logprobs":6})", "logprobs", Endpoint::Completion},
  };
  for (const Case& c : cases) {
    INFO(c.body);
    CHECK(refused(c.body, c.ep, lim).param == c.param);
  }
  // Within the caps: accepted.
  RequestError err;
  CHECK(serve::parse_completion_request(R"({"prompt":["a","b"],"n":2,"echo":true,"stop":["12345678"]})", Endpoint::Completion, lim,
                                        &err));
}

TEST_CASE("serve tool-call parser: generated JSON nested 100,000 deep is text", "[serve][request]") {
  const std::string deep = deep_object(kDeep);
  for (serve::ToolFormat f : {serve::ToolFormat::Hermes, serve::ToolFormat::Mistral, serve::ToolFormat::Llama3}) {
    const std::string text = f == serve::ToolFormat::Hermes ? "<tool_call>{\"name\":\"f\",\"arguments\":" + deep + "}</tool_call>"
                             : f == serve::ToolFormat::Mistral ? "[TOOL_CALLS][{\"name\":\"f\",\"arguments\":" + deep + "}]"
                                                                : "{\"name\":\"f\",\"parameters\":" + deep + "}";
    const serve::ParsedReply r = serve::parse_tool_calls(f, {"f"}, text);
    CHECK(r.calls.empty());
    CHECK(r.content == text);
  }
  // Arguments given as a JSON string inside the call: the same limit.
  const std::string inner = nlohmann::json(deep).dump();
  const serve::ParsedReply r =
      serve::parse_tool_calls(serve::ToolFormat::Hermes, {"f"}, "<tool_call>{\"name\":\"f\",\"arguments\":" + inner + "}</tool_call>");
  CHECK(r.calls.empty());
}
