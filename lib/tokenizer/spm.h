// SentencePiece-style BPE tokenizer (tokenizer.ggml.model = "llama").
// Internal to lib/tokenizer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"

namespace infer {

std::unique_ptr<Tokenizer> make_spm_tokenizer(Vocab vocab);

}  // namespace infer
