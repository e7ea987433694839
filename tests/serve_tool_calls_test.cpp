// infer serve's tool-call parser (examples/server/tool_calls.*): each
// family's format, several calls, malformed JSON, text around the calls, and
// the streaming parser fed the text split at every byte position (it must
// give what the whole text gives). Its own executable: the server sources
// need nlohmann-json, the library's tests do not.
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>

#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "server/tool_calls.h"

using serve::ParsedReply;
using serve::ToolCallParser;
using serve::ToolEvent;
using serve::ToolFormat;

namespace {

const std::vector<std::string> kNames = {"get_weather", "get_time"};

ParsedReply whole(ToolFormat f, const std::string& text) { return serve::parse_tool_calls(f, kNames, text); }

// Feeds the text in pieces cut at the given positions.
ParsedReply pieces(ToolFormat f, const std::string& text, const std::vector<size_t>& cuts) {
  ToolCallParser p(f, kNames);
  ParsedReply r;
  auto take = [&](std::vector<ToolEvent> evs) {
    for (ToolEvent& e : evs) {
      if (e.is_call) r.calls.push_back(e.call);
      else r.content += e.content;
    }
  };
  size_t at = 0;
  for (size_t c : cuts) {
    take(p.feed(text.substr(at, c - at)));
    at = c;
  }
  take(p.feed(text.substr(at)));
  take(p.finish());
  return r;
}

void same(const ParsedReply& a, const ParsedReply& b) {
  REQUIRE(a.content == b.content);
  REQUIRE(a.calls.size() == b.calls.size());
  for (size_t i = 0; i < a.calls.size(); ++i) {
    REQUIRE(a.calls[i].name == b.calls[i].name);
    REQUIRE(a.calls[i].arguments == b.calls[i].arguments);
  }
}

// Whole text, then every split into two and into three pieces (one byte
// at a time as well): always the same result.
ParsedReply check_splits(ToolFormat f, const std::string& text) {
  const ParsedReply w = whole(f, text);
  for (size_t i = 0; i <= text.size(); ++i) {
    INFO("split at " << i << " of " << text);
    same(w, pieces(f, text, {i}));
  }
  for (size_t i = 0; i <= text.size(); i += 3)
    for (size_t j = i; j <= text.size(); j += 5) same(w, pieces(f, text, {i, j}));
  std::vector<size_t> every;
  for (size_t i = 1; i < text.size(); ++i) every.push_back(i);
  same(w, pieces(f, text, every));
  return w;
}

std::string read_template(const std::string& name) {
  std::ifstream in(std::string(INFER_SOURCE_DIR) + "/tests/data/chat_templates/" + name, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

TEST_CASE("tool format chosen from the template's text", "[serve][tools]") {
  CHECK(serve::tool_format_for_template(read_template("qwen2.5-7b-instruct.jinja")) == ToolFormat::Hermes);
  CHECK(serve::tool_format_for_template(read_template("qwen3-0.6b.jinja")) == ToolFormat::Hermes);
  CHECK(serve::tool_format_for_template(read_template("hermes-2-pro-llama-3-8b.jinja")) == ToolFormat::Hermes);
  CHECK(serve::tool_format_for_template(read_template("llama3.1-8b-instruct.jinja")) == ToolFormat::Llama3);
  CHECK(serve::tool_format_for_template(read_template("llama3.2-3b-instruct.jinja")) == ToolFormat::Llama3);
  CHECK(serve::tool_format_for_template(read_template("mistral-7b-instruct-v0.3.jinja")) == ToolFormat::Mistral);
  CHECK(serve::tool_format_for_template(read_template("mistral-nemo-instruct-2407.jinja")) == ToolFormat::Mistral);
  // Templates without tools.
  for (const char* t : {"llama3-8b-instruct.jinja", "qwen2-0.5b-instruct.jinja", "gemma2-2b-it.jinja", "phi3-mini-4k-instruct.jinja",
                        "zephyr-7b-beta.jinja", "mixtral-8x7b-instruct-v0.1.jinja"}) {
    INFO(t);
    CHECK(serve::tool_format_for_template(read_template(t)) == ToolFormat::None);
  }
  // Arguments: an object for the templates that tojson them, text for DeepSeek R1's concatenation.
  CHECK_FALSE(serve::template_wants_string_arguments(read_template("qwen2.5-7b-instruct.jinja")));
  CHECK_FALSE(serve::template_wants_string_arguments(read_template("qwen3-0.6b.jinja")));
  CHECK_FALSE(serve::template_wants_string_arguments(read_template("llama3.1-8b-instruct.jinja")));
  CHECK_FALSE(serve::template_wants_string_arguments(read_template("mistral-7b-instruct-v0.3.jinja")));
  CHECK(serve::template_wants_string_arguments(read_template("deepseek-r1.jinja")));
}

TEST_CASE("Hermes / Qwen <tool_call> format", "[serve][tools]") {
  const ToolFormat H = ToolFormat::Hermes;
  SECTION("one call, the arguments as compact JSON text") {
    const ParsedReply r = check_splits(H, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"location\": \"Paris\", \"days\": [1, 2]}}\n</tool_call>");
    REQUIRE(r.calls.size() == 1);
    CHECK(r.calls[0].name == "get_weather");
    CHECK(r.calls[0].arguments == "{\"location\":\"Paris\",\"days\":[1,2]}");
    CHECK(r.content.empty());
  }
  SECTION("text before and after, several calls") {
    const ParsedReply r = check_splits(
        H, "Let me look.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"location\": \"Paris\"}}\n</tool_call>\n"
           "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>\nDone <tool_ish>.");
    REQUIRE(r.calls.size() == 2);
    CHECK(r.calls[0].name == "get_weather");
    CHECK(r.calls[1].name == "get_time");
    CHECK(r.calls[1].arguments == "{}");
    CHECK(r.content == "Let me look.Done <tool_ish>.");
  }
  SECTION("malformed JSON stays text") {
    const std::string t = "Hi <tool_call>{\"name\": \"get_weather\", \"arguments\": {\"location\": }</tool_call> there";
    const ParsedReply r = check_splits(H, t);
    CHECK(r.calls.empty());
    CHECK(r.content == t);
  }
  SECTION("a call without a name, or arguments not an object, stays text") {
    CHECK(check_splits(H, "<tool_call>{\"arguments\": {}}</tool_call>").calls.empty());
    CHECK(check_splits(H, "<tool_call>{\"name\": \"get_time\", \"arguments\": 5}</tool_call>").calls.empty());
  }
  SECTION("arguments given as a JSON string, or as parameters") {
    const ParsedReply r = check_splits(H, "<tool_call>{\"name\": \"get_time\", \"arguments\": \"{\\\"tz\\\": \\\"UTC\\\"}\"}</tool_call>"
                                          "<tool_call>{\"name\": \"get_weather\", \"parameters\": {\"x\": 1}}</tool_call>");
    REQUIRE(r.calls.size() == 2);
    CHECK(r.calls[0].arguments == "{\"tz\":\"UTC\"}");
    CHECK(r.calls[1].arguments == "{\"x\":1}");
  }
  SECTION("an unclosed call at the end is a call when its JSON is complete") {
    const ParsedReply r = check_splits(H, "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n");
    REQUIRE(r.calls.size() == 1);
    CHECK(check_splits(H, "<tool_call>\n{\"name\": \"get_time\", \"argu").calls.empty());
    CHECK(check_splits(H, "<tool_call>\n{\"name\": \"get_time\", \"argu").content == "<tool_call>\n{\"name\": \"get_time\", \"argu");
  }
  SECTION("plain text passes through unchanged, whitespace and partial markers included") {
    for (const char* t : {"", "  ", "Hello, world!\n", "a < b and <tool", " x <tool_call", "\n\n<tool_calls are fun>\n "}) {
      const ParsedReply r = check_splits(H, t);
      CHECK(r.calls.empty());
      CHECK(r.content == t);
    }
  }
  SECTION("brackets and the closing tag inside strings") {
    const ParsedReply r = check_splits(H, "<tool_call>{\"name\": \"get_weather\", \"arguments\": {\"q\": \"{[}] \\\" x\"}}</tool_call>");
    REQUIRE(r.calls.size() == 1);
    CHECK(r.calls[0].arguments == "{\"q\":\"{[}] \\\" x\"}");
  }
}

TEST_CASE("Llama 3.x JSON format", "[serve][tools]") {
  const ToolFormat L = ToolFormat::Llama3;
  SECTION("the reply is the call") {
    const ParsedReply r = check_splits(L, "{\"name\": \"get_weather\", \"parameters\": {\"location\": \"Paris\"}}");
    REQUIRE(r.calls.size() == 1);
    CHECK(r.calls[0].name == "get_weather");
    CHECK(r.calls[0].arguments == "{\"location\":\"Paris\"}");
    CHECK(r.content.empty());
  }
  SECTION("after <|python_tag|>, and several separated by ;") {
    const ParsedReply r = check_splits(L, "<|python_tag|>{\"name\": \"get_weather\", \"parameters\": {\"location\": \"Paris\"}}; "
                                          "{\"name\": \"get_time\", \"parameters\": {}}");
    REQUIRE(r.calls.size() == 2);
    CHECK(r.calls[1].name == "get_time");
    const ParsedReply t = check_splits(L, "Checking.<|python_tag|>{\"name\": \"get_time\", \"arguments\": {}}");
    REQUIRE(t.calls.size() == 1);
    CHECK(t.content == "Checking.");
  }
  SECTION("JSON that is not a call of a declared tool stays text") {
    for (const char* t : {"{\"name\": \"rm_rf\", \"parameters\": {}}", "{\"answer\": 42}", "{\"name\": \"get_time\", \"parameters\": {}} and more",
                          "{\"name\": \"get_time\", \"parameters\": {", "The answer is {\"a\": 1}", "Hello", "<|python", "  "}) {
      const ParsedReply r = check_splits(L, t);
      CHECK(r.calls.empty());
      CHECK(r.content == t);
    }
  }
}

TEST_CASE("Mistral [TOOL_CALLS] format", "[serve][tools]") {
  const ToolFormat M = ToolFormat::Mistral;
  SECTION("with the marker, several calls in the array") {
    const ParsedReply r = check_splits(M, "[TOOL_CALLS] [{\"name\": \"get_weather\", \"arguments\": {\"location\": \"Paris\"}, \"id\": \"abcdefghi\"}, "
                                          "{\"name\": \"get_time\", \"arguments\": {}}]");
    REQUIRE(r.calls.size() == 2);
    CHECK(r.calls[0].arguments == "{\"location\":\"Paris\"}");
    CHECK(r.content.empty());
  }
  SECTION("without the marker (a control token the detokenizer may drop)") {
    const ParsedReply r = check_splits(M, "[{\"name\": \"get_time\", \"arguments\": {}}]");
    REQUIRE(r.calls.size() == 1);
  }
  SECTION("text before the marker; malformed and non-call arrays stay text") {
    const ParsedReply r = check_splits(M, "Sure.[TOOL_CALLS][{\"name\": \"get_time\", \"arguments\": {}}]");
    REQUIRE(r.calls.size() == 1);
    CHECK(r.content == "Sure.");
    for (const char* t : {"[1, 2] are numbers", "[TOOL_CALLS][{\"name\": }]", "[{\"name\": \"get_time\"", "Use [brackets]", "[TOOL_CALLS]"}) {
      const ParsedReply p = check_splits(M, t);
      CHECK(p.calls.empty());
      CHECK(p.content == t);
    }
  }
}

TEST_CASE("streaming holds back only what may be a call", "[serve][tools]") {
  ToolCallParser p(ToolFormat::Hermes, kNames);
  auto content = [](const std::vector<ToolEvent>& evs) {
    std::string s;
    for (const ToolEvent& e : evs) s += e.is_call ? "<CALL>" : e.content;
    return s;
  };
  CHECK(content(p.feed("Hello")) == "Hello");
  CHECK(content(p.feed(" wor")) == " wor");
  CHECK(content(p.feed("ld <tool")) == "ld");  // " <tool" may open a call
  CHECK(content(p.feed("_call>{\"name\": \"get_time\",")) == "");
  CHECK(content(p.feed(" \"arguments\": {}}</tool_call>")) == "<CALL>");
  CHECK(content(p.feed("\nBye")) == "Bye");
  CHECK(content(p.finish()) == "");
  CHECK(p.calls() == 1);
}
