// Tokenizers built from GGUF metadata (tokenizer.ggml.*).
//
// Tokenizer::create picks the algorithm from `tokenizer.ggml.model`:
//  - "llama" -> SentencePiece-style BPE (score-driven merges, byte fallback);
//  - "gpt2"  -> byte-level BPE (rank-driven merges from tokenizer.ggml.merges)
//    with the pre-tokenizer named by `tokenizer.ggml.pre` (see pretokenizer.h).
// Anything else, and an unknown pre-tokenizer, is Error(Unsupported) naming
// the value.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace infer {

class GgufFile;

// GGUF token types (tokenizer.ggml.token_type).
enum class TokenType : int32_t {
  Undefined = 0,
  Normal = 1,
  Unknown = 2,
  Control = 3,
  UserDefined = 4,
  Unused = 5,
  Byte = 6,
};

struct Vocab {
  std::string model;               // tokenizer.ggml.model
  std::string pre;                 // tokenizer.ggml.pre (may be empty)
  std::vector<std::string> tokens; // tokenizer.ggml.tokens
  std::vector<float> scores;       // tokenizer.ggml.scores (0 when absent)
  std::vector<TokenType> types;    // tokenizer.ggml.token_type (Normal when absent)
  std::vector<std::string> merges; // tokenizer.ggml.merges (BPE only)
  int32_t bos = -1, eos = -1, unk = -1, pad = -1, eot = -1;
  bool add_bos = true;             // tokenizer.ggml.add_bos_token
  bool add_eos = false;            // tokenizer.ggml.add_eos_token
  bool add_space_prefix = true;    // tokenizer.ggml.add_space_prefix
  // tokenizer.ggml.remove_extra_whitespaces (SentencePiece normalizer option,
  // default false): drop leading and trailing spaces and collapse runs of
  // spaces to one before encoding. Llama-family GGUFs do not set it.
  bool remove_extra_whitespaces = false;

  // Context some tokenizer rules depend on (GGUF does not store per-token
  // lstrip/rstrip flags; they are derived from the model name, see
  // Tokenizer::strip_flags), and the chat template for lib/tokenizer/chat.
  std::string name;           // general.name ("" when absent)
  std::string arch;           // general.architecture ("" when absent)
  std::string chat_template;  // tokenizer.chat_template ("" when absent)
  // Set at load when chat_template fails its trial render (see
  // chat_template_trial in chat.h) in a way that does not depend on the
  // conversation: the error; chat then falls back to a built-in template.
  std::string chat_template_error;

  // Reads and validates the tokenizer.ggml.* keys (sizes agree, special ids
  // in range). Error(Format) with the key name when something is wrong.
  static Vocab from_gguf(const GgufFile& gguf);
  // Fills absent scores (0) and token types (Normal) when those vectors are
  // empty, then checks what from_gguf checks: sizes agree, special ids are -1
  // or in range, types are known. Error(Format) otherwise. Tokenizer::create
  // calls it, so vocabularies built in code are checked too.
  void validate();
  int32_t size() const { return static_cast<int32_t>(tokens.size()); }
};

class Tokenizer {
 public:
  static std::unique_ptr<Tokenizer> create(Vocab vocab);
  static std::unique_ptr<Tokenizer> create(const GgufFile& gguf) {
    return create(Vocab::from_gguf(gguf));
  }
  virtual ~Tokenizer() = default;

  const Vocab& vocab() const { return vocab_; }
  int32_t n_vocab() const { return vocab_.size(); }

  // Text to token ids. add_bos prepends BOS (when the vocabulary has one);
  // EOS is never appended (add_eos is only reported).
  // parse_special: control (and unknown) tokens written literally in the text
  // (e.g. "<s>") become their ids, leftmost-longest match; otherwise they are
  // plain text. User-defined tokens are always atomic, as in SentencePiece
  // and Hugging Face's added tokens.
  // Invalid UTF-8 never fails or crashes. SPM: as SentencePiece does, each
  // invalid byte is replaced by U+FFFD before encoding (so it becomes that
  // token or its byte tokens). Byte-level BPE: invalid bytes are encoded as
  // their byte tokens, losslessly (decode gives the same bytes back).
  virtual std::vector<int32_t> encode(std::string_view text, bool add_bos,
                                      bool parse_special = false) const = 0;

  // The bytes a token stands for in output text: byte tokens give their raw
  // byte, the SPM space marker U+2581 becomes ' '. Control and unknown tokens
  // give "" unless render_special. Out-of-range ids: Error(InvalidArgument).
  virtual std::string token_to_piece(int32_t id, bool render_special = false) const = 0;

  // Whole-sequence decode. With add_space_prefix vocabularies the single
  // leading space that encoding added is removed when the sequence starts at
  // the beginning of the text: from the first normal piece, after any control
  // tokens (BOS); byte tokens are literal. This matches SentencePiece's
  // decoder, so decode(encode(s)) == s for well-formed UTF-8 (leading spaces
  // included) unless remove_extra_whitespaces is set. Byte-level BPE adds
  // no prefix and removes none, and applies no "clean up tokenization
  // spaces": decode(encode(s)) == s unless the vocabulary normalizes s
  // (NFC). Invalid UTF-8 in the token bytes is passed through unchanged
  // (StreamDecoder replaces it).
  std::string decode(const std::vector<int32_t>& ids, bool render_special = false) const;

  // End of generation: EOS, EOT, or another end-of-generation control token.
  bool is_eog(int32_t id) const;
  bool is_control(int32_t id) const;

  // Special-token whitespace rules for text matched with parse_special (and
  // user-defined tokens): kLStrip drops the whitespace just before the token,
  // kRStrip the whitespace just after it. As in llama.cpp, which reproduces
  // the reference tokenizers' added-token flags: every special token of a
  // Phi-3 model (general.name contains "phi-3"/"phi3") except <unk>, <s> and
  // <|endoftext|> has rstrip; "<mask>" of jina-v2 vocabularies has lstrip.
  enum : uint8_t { kLStrip = 1, kRStrip = 2 };
  uint8_t strip_flags(int32_t id) const {
    return strip_.empty() ? 0 : strip_[static_cast<size_t>(id)];
  }

 protected:
  explicit Tokenizer(Vocab v);
  Vocab vocab_;
  std::vector<uint8_t> strip_;  // per token, empty when no token has flags
};

// Incremental detokenization for streaming: push() returns only complete
// UTF-8 text, holding back the bytes of a code point split across tokens, and
// strips the leading space at the start of the text as decode() does.
class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer& tok, bool at_text_start = true,
                         bool render_special = false)
      : tok_(tok), at_start_(at_text_start), render_special_(render_special) {}
  // Invalid UTF-8 in the token bytes comes out as U+FFFD, so the
  // concatenated output is always valid UTF-8.
  std::string push(int32_t id);
  // Remaining held bytes (invalid or incomplete sequences become U+FFFD).
  std::string flush();

 private:
  const Tokenizer& tok_;
  bool at_start_;
  bool render_special_;
  std::string pending_;
};

}  // namespace infer
