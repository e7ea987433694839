// The library's one JSON reader: the Hugging Face files (config.json,
// safetensors headers, model.safetensors.index.json, tokenizer.json,
// tokenizer_config.json), JSON schemas for constrained output, and the
// conversations given to chat templates. Strict RFC 8259 syntax, nesting
// limited to kMaxDepth levels and the text to kMaxBytes, strings validated as UTF-8 (\u escapes with
// surrogate pairs decoded); integers without fraction or exponent that fit
// int64 are kept exact, and every number keeps its own text. Any defect is
// Error(status) naming `what` and the byte offset.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/error.h"

namespace infer {

class Json {
 public:
  enum class Kind { Null, Bool, Number, String, Array, Object };
  // The one depth limit for every JSON text the library reads (the server
  // uses the same, kMaxJsonDepth): deeper than any real config, schema or
  // conversation, shallow enough that the parser's recursion, the
  // destructor's and every walk of a parsed value are harmless.
  static constexpr int kMaxDepth = 64;
  // The size limit: above the largest tokenizer.json or safetensors header
  // seen in practice (tens of MB), far below what would exhaust a host.
  static constexpr size_t kMaxBytes = size_t{256} << 20;

  // Parses a whole document (only whitespace may follow the value).
  static Json parse(std::string_view text, const char* what, Status status = Status::Format);

  Kind kind() const { return kind_; }
  bool is_null() const { return kind_ == Kind::Null; }
  bool is_bool() const { return kind_ == Kind::Bool; }
  bool is_number() const { return kind_ == Kind::Number; }
  bool is_int() const { return kind_ == Kind::Number && is_int_; }
  bool is_string() const { return kind_ == Kind::String; }
  bool is_array() const { return kind_ == Kind::Array; }
  bool is_object() const { return kind_ == Kind::Object; }

  bool as_bool() const { return b_; }
  double as_double() const { return d_; }
  int64_t as_int() const { return i_; }
  const std::string& as_string() const { return s_; }
  // A number as it was written (e.g. "1.50", "-0", "1e3").
  const std::string& number_text() const { return s_; }
  const std::vector<Json>& items() const { return arr_; }                          // Array
  const std::vector<std::pair<std::string, Json>>& members() const { return obj_; }  // Object
  // Object member (the last one of that name), nullptr when absent or not an object.
  const Json* find(std::string_view key) const;

 private:
  friend class JsonParser;
  Kind kind_ = Kind::Null;
  bool b_ = false, is_int_ = false;
  double d_ = 0;
  int64_t i_ = 0;
  std::string s_;  // String: the value; Number: its text
  std::vector<Json> arr_;
  std::vector<std::pair<std::string, Json>> obj_;
};

const char* json_kind_name(Json::Kind k);

// ---- writing ------------------------------------------------------------------

// Appends s as a JSON string literal, quotes included: '"', '\\' and the
// control characters are escaped (\n \r \t \b \f, the others \u00xx);
// every other byte, non-ASCII included, is copied as is (Python's
// json.dumps(..., ensure_ascii=False)).
void json_append_string(std::string& out, std::string_view s);

// The library's one JSON writer: appends a document to `out`, laid out as
// Python's json.dumps(..., indent=indent) does. indent < 0: one line with
// ", " and ": " separators; indent >= 0: each member or item on its own line,
// indented by indent spaces per level, "," and ": " separators; empty
// containers are "[]" and "{}". The caller keeps the calls well nested
// (key() before each member's value); numbers are written from their text.
class JsonWriter {
 public:
  explicit JsonWriter(std::string& out, int indent = -1) : out_(out), indent_(indent) {}

  void null() { scalar("null"); }
  void boolean(bool b) { scalar(b ? "true" : "false"); }
  void integer(int64_t v) { scalar(std::to_string(v)); }
  void number(std::string_view text) { scalar(text); }  // a number's text as is
  void string(std::string_view s);
  void key(std::string_view k);  // the next member's name (inside an object)
  void begin_array() { open('['); }
  void end_array() { close(']'); }
  void begin_object() { open('{'); }
  void end_object() { close('}'); }

  std::string& out() { return out_; }

 private:
  void separate();  // the separator and line break before a value or key
  void scalar(std::string_view text);
  void open(char bracket);
  void close(char bracket);
  void newline(size_t level);

  std::string& out_;
  int indent_;
  std::vector<size_t> counts_;  // entries written so far in each open container
  bool after_key_ = false;
};

}  // namespace infer
