// Byte-level BPE tokenizer (tokenizer.ggml.model = "gpt2"). Internal to
// lib/tokenizer.
#pragma once

#include <memory>

#include "tokenizer/tokenizer.h"

namespace infer {

// Error(Unsupported) when tokenizer.ggml.pre names an unknown pre-tokenizer,
// Error(Format) when the vocabulary has no merges.
std::unique_ptr<Tokenizer> make_bpe_tokenizer(Vocab vocab);

}  // namespace infer
