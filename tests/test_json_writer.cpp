// The core JSON writer (lib/core/json.*) and the core UTF-8 decoder
// (lib/core/utf8.h), issue #27: Python's json.dumps layout with and without
// indent, string escaping, and the decoder's invalid-byte policies.
#include <catch2/catch.hpp>

#include <string>

#include "core/json.h"
#include "core/utf8.h"

using namespace infer;

namespace {
std::string sample(int indent) {
  std::string out;
  JsonWriter w(out, indent);
  w.begin_object();
  w.key("a");
  w.integer(-3);
  w.key("b\n");
  w.begin_array();
  w.null();
  w.boolean(true);
  w.number("1.5");
  w.begin_array();
  w.end_array();
  w.begin_object();
  w.end_object();
  w.end_array();
  w.key("c");
  w.string("q\"\\\x01\t\xC3\xA9");
  w.end_object();
  return out;
}
}  // namespace

TEST_CASE("json writer: json.dumps layout and escaping", "[json]") {
  CHECK(sample(-1) == "{\"a\": -3, \"b\\n\": [null, true, 1.5, [], {}], \"c\": \"q\\\"\\\\\\u0001\\t\xC3\xA9\"}");
  CHECK(sample(2) ==
        "{\n  \"a\": -3,\n  \"b\\n\": [\n    null,\n    true,\n    1.5,\n    [],\n    {}\n  ],\n"
        "  \"c\": \"q\\\"\\\\\\u0001\\t\xC3\xA9\"\n}");
  std::string s;
  json_append_string(s, std::string("\b\f\r\x1f\0/", 6));
  CHECK(s == "\"\\b\\f\\r\\u001f\\u0000/\"");
  // What the writer escapes, the reader reads back.
  CHECK(Json::parse(s, "t").as_string() == std::string("\b\f\r\x1f\0/", 6));
}

TEST_CASE("utf8 decoder: strict forms and the two invalid-byte policies", "[json]") {
  auto d = utf8_decode("\xF0\x9F\x98\x80", 0);
  CHECK((d.status == Utf8Status::Valid && d.cp == 0x1F600 && d.len == 4));
  d = utf8_decode("\xED\xA0\x80", 0);  // a surrogate: the maximal subpart is one byte
  CHECK((d.status == Utf8Status::Invalid && d.cp == 0xFFFD && d.len == 1));
  d = utf8_decode("\xE2\x82", 0);
  CHECK((d.status == Utf8Status::Truncated && d.len == 2));
  d = utf8_decode("\xE2\x82x", 0);
  CHECK((d.status == Utf8Status::Invalid && d.len == 2));
  size_t len = 0;
  CHECK(utf8_decode_lossy("\xE2\x82x", 0, &len) == 0xFFFD);
  CHECK(len == 1);
  CHECK(utf8_decode_lossy("\xC3\xA9", 0, &len) == 0xE9);
  CHECK(len == 2);
}
