// libFuzzer target: infer serve's request parser (examples/server/request.cpp)
// on arbitrary bodies. It must never crash, throw or hang: every input is a
// request or a RequestError with a 4xx status and a message, and the error
// body it renders is JSON.
#include <cstdint>
#include <cstdlib>
#include <string>

#include <nlohmann/json.hpp>

#include "../../examples/server/request.h"

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
  return 0;
}
