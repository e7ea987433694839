// The core JSON reader (lib/core/json.*) under hostile input (issue #27): the
// one depth limit (64 levels, the server's too) at 100,000 levels of arrays
// and of objects, and the size limit, each a clear error, never a crash.
#include <catch2/catch.hpp>

#include <string>

#include "core/error.h"
#include "core/json.h"

using namespace infer;

namespace {
std::string error_of(std::string_view text) {
  try {
    Json::parse(text, "t", Status::InvalidArgument);
  } catch (const Error& e) {
    CHECK(e.status() == Status::InvalidArgument);
    return e.what();
  }
  return "no error";
}
}  // namespace

TEST_CASE("json: nesting is limited to 64 levels, at any depth of attack", "[json]") {
  auto arrays = [](int n) { return std::string(static_cast<size_t>(n), '[') + std::string(static_cast<size_t>(n), ']'); };
  auto objects = [](int n) {
    std::string s;
    for (int i = 0; i < n; ++i) s += "{\"a\":";
    return s + "1" + std::string(static_cast<size_t>(n), '}');
  };
  CHECK(error_of(arrays(64)) == "no error");
  CHECK(error_of(objects(64)) == "no error");
  CHECK_THAT(error_of(arrays(65)), Catch::Contains("more than 64 levels"));
  CHECK_THAT(error_of(objects(65)), Catch::Contains("more than 64 levels"));
  for (int n : {1000, 100000}) {
    CHECK_THAT(error_of(arrays(n)), Catch::Contains("nested too deeply"));
    CHECK_THAT(error_of(objects(n)), Catch::Contains("nested too deeply"));
    CHECK_THAT(error_of(std::string(static_cast<size_t>(n), '[')), Catch::Contains("nested too deeply"));
  }
  // Scalars at the deepest level do not count as a level.
  CHECK(error_of(std::string(64, '[') + "1" + std::string(64, ']')) == "no error");
}

TEST_CASE("json: texts above the size limit are refused before parsing", "[json]") {
  const std::string big(Json::kMaxBytes + 1, ' ');
  CHECK_THAT(error_of(big), Catch::Contains("too large"));
}
