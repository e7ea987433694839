// How text becomes the token ids a request starts from: one rule for the C
// API (infer_submit, infer_tokenize), the CLI and the tools.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

namespace infer {

class Tokenizer;

// add_bos: 1 prepends BOS, 0 does not, -1 follows the vocabulary
// (tokenizer.ggml.add_bos_token); anything else is Error(InvalidArgument).
// parse_special turns special-token text such as "<s>" into its id.
std::vector<int32_t> tokenize_text(const Tokenizer& tok, std::string_view text, int add_bos, bool parse_special);

// A request's prompt: tokenize_text, and an empty result becomes the BOS token
// alone (a model needs one token to start from) when the vocabulary has one.
std::vector<int32_t> tokenize_prompt(const Tokenizer& tok, std::string_view text, int add_bos, bool parse_special);

}  // namespace infer
