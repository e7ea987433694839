// Helpers shared by the tests: where ../shared is, skipping when it is not.
#pragma once

#include <catch2/catch.hpp>
#include <cstdint>
#include <string>
#include <vector>

namespace infer_test {

// $INFER_SHARED_DIR, else <source>/../shared. Empty when it does not exist.
std::string shared_dir();
// shared_dir() + "/" + rel, or "" when that file does not exist.
std::string shared_file(const std::string& rel);
// A fresh scratch directory for this test binary.
std::string temp_dir();
std::vector<uint8_t> read_file(const std::string& path);
std::string read_text(const std::string& path);
// llama.cpp's tokenizer test vectors: PATH.inp holds texts separated by
// "\n__ggml_vocab_test__\n" (also after the last), PATH.out one line of
// token ids per text.
void read_vocab_vectors(const std::string& path, std::vector<std::string>& inputs,
                        std::vector<std::vector<int32_t>>& expected);

}  // namespace infer_test

// Skips the rest of a test case, with a visible message, when a file from
// ../shared is missing. Catch2 v2 has no SKIP: the message is a WARN and the
// test returns early.
#define REQUIRE_SHARED(var, rel)                                                    \
  std::string var = infer_test::shared_file(rel);                                   \
  if (var.empty()) {                                                                \
    WARN("SKIPPED: " << rel << " not found (set INFER_SHARED_DIR to ../shared)"); \
    return;                                                                         \
  }
