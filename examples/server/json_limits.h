// infer serve: the one way a client's JSON text becomes a JSON value. Every
// body, and every JSON document nested in a string field (tool-call
// arguments, a json_schema given as text), is parsed here, under one depth
// limit and one size limit, so nothing downstream (schema-to-grammar, the
// chat-template context, serialisation, destruction) ever walks a structure
// deeper than kMaxJsonDepth. nlohmann's parser itself is iterative; the
// depth is counted by its callback as values open.
#pragma once

#include <cstddef>
#include <stdexcept>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace serve {

// Deeper than any real tool schema or message (OpenAI documents 5 levels of
// schema nesting); shallow enough that a recursive walk of it is harmless.
constexpr int kMaxJsonDepth = 64;
// A nested JSON text (arguments, a schema) may be as large as the body that
// carried it; the body itself is bounded by --max-body-mb before parsing.
constexpr size_t kMaxJsonBytes = size_t{64} << 20;

// Why parse_json refused: what (syntax, depth or size), with a message that
// names the field when one was given.
struct JsonLimitError : std::runtime_error {
  enum class Kind { Syntax, Depth, Size } kind;
  JsonLimitError(Kind k, const std::string& m) : std::runtime_error(m), kind(k) {}
};

// Parses `text` into J (nlohmann::json or nlohmann::ordered_json). `field`
// names where the text came from ("the body", "tool_calls[0].function.arguments")
// for the error message. Throws JsonLimitError; never recurses on the input.
template <class J>
J parse_json(std::string_view text, const std::string& field = "the body", int max_depth = kMaxJsonDepth) {
  if (text.size() > kMaxJsonBytes)
    throw JsonLimitError(JsonLimitError::Kind::Size,
                         field + " is too large (" + std::to_string(text.size()) + " bytes; at most " +
                             std::to_string(kMaxJsonBytes) + ")");
  try {
    return J::parse(text.begin(), text.end(), [&](int depth, typename J::parse_event_t ev, J&) {
      if ((ev == J::parse_event_t::object_start || ev == J::parse_event_t::array_start) && depth >= max_depth)
        throw JsonLimitError(JsonLimitError::Kind::Depth,
                             field + " nests JSON deeper than " + std::to_string(max_depth) + " levels");
      return true;
    });
  } catch (const typename J::exception& e) {
    throw JsonLimitError(JsonLimitError::Kind::Syntax, field + " is not valid JSON: " + e.what());
  }
}

}  // namespace serve
