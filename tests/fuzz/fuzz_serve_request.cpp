// libFuzzer target: infer serve's request parser (examples/server/request.cpp)
// on arbitrary bodies. It must never crash, throw or hang: every input is a
// request or a RequestError with a 4xx status and a message, and the error
// body it renders is JSON. The same bytes as generated text go through the
// tool-call parser (examples/server/tool_calls.cpp) of each format: a text
// without calls comes out unchanged, and fed in two pieces it gives what it
// gives whole.
#include <cstdint>
#include <cstdlib>
#include <string>

#include <nlohmann/json.hpp>

#include "../../examples/server/request.h"
#include "../../examples/server/tool_calls.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string body(reinterpret_cast<const char*>(data), size);
  serve::Limits lim;
  for (serve::Endpoint ep : {serve::Endpoint::Chat, serve::Endpoint::Completion}) {
    serve::RequestError err;
    auto r = serve::parse_completion_request(body, ep, lim, &err);
    if (!r) {
      if (err.status < 400 || err.status > 499 || err.message.empty()) std::abort();
      const auto j = nlohmann::json::parse(serve::error_body(err));  // throws (-> crash) if not JSON
      if (!j.contains("error")) std::abort();
    } else {
      if (r->n < 1 || r->n > lim.max_n || r->stop.size() > static_cast<size_t>(lim.max_stop)) std::abort();
      if (ep == serve::Endpoint::Chat && r->messages.empty()) std::abort();
      if (ep == serve::Endpoint::Completion && r->prompts.empty()) std::abort();
    }
  }
  serve::RequestError err;
  (void)serve::parse_tokenize_request(body, &err);
  (void)serve::parse_detokenize_request(body, &err);

  const std::vector<std::string> names = {"get_weather", "f"};
  for (serve::ToolFormat f : {serve::ToolFormat::Hermes, serve::ToolFormat::Llama3, serve::ToolFormat::Mistral}) {
    const serve::ParsedReply whole = serve::parse_tool_calls(f, names, body);
    if (whole.calls.empty() && whole.content != body) std::abort();
    for (const serve::ToolCall& c : whole.calls)
      if (c.name.empty() || !nlohmann::json::parse(c.arguments).is_object()) std::abort();
    serve::ToolCallParser p(f, names);
    const size_t cut = size ? data[0] % (size + 1) : 0;
    serve::ParsedReply split;
    for (const std::string& piece : {body.substr(0, cut), body.substr(cut)})
      for (serve::ToolEvent& e : p.feed(piece)) e.is_call ? split.calls.push_back(e.call) : void(split.content += e.content);
    for (serve::ToolEvent& e : p.finish()) e.is_call ? split.calls.push_back(e.call) : void(split.content += e.content);
    if (split.content != whole.content || split.calls.size() != whole.calls.size()) std::abort();
  }
  return 0;
}
