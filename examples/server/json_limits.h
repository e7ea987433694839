// infer serve: the one way a client's JSON text becomes a JSON value. Every
// body, and every JSON document nested in a string field (tool-call
// arguments, a json_schema given as text), is parsed here, under one depth
// limit and one size limit, so nothing downstream (schema-to-grammar, the
// chat-template context, serialisation, destruction) ever walks a structure
// deeper than kMaxJsonDepth. nlohmann's parser itself is iterative; the
// depth is counted by its callback as values open, which also tracks where
// in the document the parser is, so a depth error names the field.
#pragma once

#include <cstddef>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace serve {

// Deeper than any real tool schema or message (OpenAI documents 5 levels of
// schema nesting); shallow enough that a recursive walk of it is harmless.
constexpr int kMaxJsonDepth = 64;
// A nested JSON text (arguments, a schema) may be as large as the body that
// carried it; the body itself is bounded by --max-body-mb before parsing.
constexpr size_t kMaxJsonBytes = size_t{64} << 20;

// Why parse_json refused: what (syntax, depth or size), with a message that
// names the field when one was given. `path` is where in the document the
// limit was hit, as a field name ("tools[0].function.parameters.x"; at most
// its first kPathParts parts), empty when not known.
struct JsonLimitError : std::runtime_error {
  enum class Kind { Syntax, Depth, Size } kind;
  std::string path;
  JsonLimitError(Kind k, const std::string& m, std::string p = {}) : std::runtime_error(m), kind(k), path(std::move(p)) {}
};

namespace detail {

constexpr size_t kPathParts = 6;

// Where the parser is: one frame per open array or object.
struct JsonPath {
  struct Frame {
    bool array = false;
    long index = -1;  // array: the element being read
    std::string key;  // object: the member being read
  };
  std::vector<Frame> frames;

  // The path of the value being opened, its first `parts` parts, prefixed
  // by `base` ("" at the top of a body).
  std::string str(const std::string& base, size_t parts, bool ellipsis) const {
    std::string out = base;
    size_t n = 0;
    for (const Frame& f : frames) {
      if (n++ == parts) {
        if (ellipsis) out += "...";
        break;
      }
      if (f.array) out += "[" + std::to_string(f.index < 0 ? 0 : f.index) + "]";
      else out += (out.empty() ? "" : ".") + f.key;
    }
    return out;
  }
  void element() {  // a value starts inside the innermost container
    if (!frames.empty() && frames.back().array) ++frames.back().index;
  }
};

}  // namespace detail

// Parses `text` into J (nlohmann::json or nlohmann::ordered_json). `field`
// names where the text came from ("the body", "tool_calls[0].function.arguments")
// for the error message; `base` is the field name paths inside the text are
// relative to ("" for a body). Throws JsonLimitError; never recurses on the
// input.
template <class J>
J parse_json(std::string_view text, const std::string& field = "the body", int max_depth = kMaxJsonDepth,
             const std::string& base = "") {
  if (text.size() > kMaxJsonBytes)
    throw JsonLimitError(JsonLimitError::Kind::Size,
                         field + " is too large (" + std::to_string(text.size()) + " bytes; at most " +
                             std::to_string(kMaxJsonBytes) + ")",
                         base);
  detail::JsonPath path;
  try {
    return J::parse(text.begin(), text.end(), [&](int depth, typename J::parse_event_t ev, J& v) {
      using E = typename J::parse_event_t;
      if (ev == E::object_start || ev == E::array_start) {
        path.element();
        if (depth >= max_depth) {
          const std::string where = path.str(base, detail::kPathParts, true);
          throw JsonLimitError(JsonLimitError::Kind::Depth,
                               field + " nests JSON deeper than " + std::to_string(max_depth) + " levels" +
                                   (where.empty() ? std::string() : " (in '" + where + "')"),
                               path.str(base, detail::kPathParts, false));
        }
        path.frames.push_back({ev == E::array_start, -1, {}});
      } else if (ev == E::object_end || ev == E::array_end) {
        if (!path.frames.empty()) path.frames.pop_back();
      } else if (ev == E::key) {
        if (!path.frames.empty() && v.is_string()) path.frames.back().key = v.template get<std::string>();
      } else if (ev == E::value) {
        path.element();
      }
      return true;
    });
  } catch (const typename J::exception& e) {
    throw JsonLimitError(JsonLimitError::Kind::Syntax, field + " is not valid JSON: " + e.what(), base);
  }
}

}  // namespace serve
