// Pre-tokenizers of byte-level BPE vocabularies, chosen by the GGUF key
// `tokenizer.ggml.pre` (internal to lib/tokenizer).
//
// A pre-tokenizer cuts text into the pieces ("words") that BPE merges
// within. Each family is a list of regular expressions applied in sequence,
// as the reference tokenizers' `Split(pattern, behavior = Isolated)` steps
// are: every regex runs over every piece the previous one produced, and both
// its matches and the text between matches become pieces. The patterns are
// each family's published ones (tokenizer.json, as carried into llama.cpp),
// compiled with PCRE2 in UTF + UCP mode and JIT-compiled. `\s` is spelled out
// as the Unicode White_Space set, which is what the reference engines use
// (PCRE2's own \s also matches U+180E).
//
// Invalid UTF-8 never fails: each run of ill-formed bytes is a piece of its
// own that no regex sees (the regexes only ever match well-formed text), and
// byte-level BPE encodes it losslessly.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tokenizer/unicode.h"

namespace infer {

// What a `tokenizer.ggml.pre` value implies besides its regexes.
struct PreTokenizerInfo {
  std::string family;          // canonical name ("llama3" for "llama-bpe", ...)
  Normalization normalization = Normalization::None;  // applied before splitting
  bool ignore_merges = false;  // a piece that is itself a token is emitted whole
  bool add_bos = false;        // default of tokenizer.ggml.add_bos_token
};

class PreTokenizer {
 public:
  // Error(Unsupported) naming the value when `pre` is not a known
  // pre-tokenizer. An empty name is "default" (llama.cpp's choice for files
  // written before the key existed).
  // use_jit = false interprets the regexes (for measuring what JIT buys).
  static std::unique_ptr<PreTokenizer> create(std::string_view pre, bool use_jit = true);
  // Just the facts about a name (no regex compiled); nullopt-like: returns
  // false when the name is unknown.
  static bool lookup(std::string_view pre, PreTokenizerInfo* info);
  // Every accepted `tokenizer.ggml.pre` value.
  static std::vector<std::string> names();
  // The regexes of a name's family as published (before `\s` is spelled
  // out), in order; empty when the name is unknown. The Hugging Face loader
  // (lib/hf) matches tokenizer.json's pre-tokenizer steps against them.
  static std::vector<std::string> patterns(std::string_view pre);

  ~PreTokenizer();
  PreTokenizer(const PreTokenizer&) = delete;
  PreTokenizer& operator=(const PreTokenizer&) = delete;

  const PreTokenizerInfo& info() const { return info_; }

  // Splits text into pieces: (offset, length) pairs in order, covering all
  // of text. Thread-safe.
  using Span = std::pair<uint32_t, uint32_t>;
  void split(std::string_view text, std::vector<Span>& out) const;

 private:
  PreTokenizer() = default;
  struct Regex;
  PreTokenizerInfo info_;
  std::vector<std::unique_ptr<Regex>> regexes_;
};

}  // namespace infer
