// Vocab: the tokenizer.ggml.* metadata of a GGUF file, read and checked.
#include <cmath>
#include <cstdint>
#include <optional>

#include "core/error.h"
#include "core/log.h"
#include "gguf/gguf.h"
#include "tokenizer/chat.h"
#include "tokenizer/pretokenizer.h"
#include "tokenizer/tokenizer.h"

namespace infer {

namespace {

// Special token ids are stored as u32 (sometimes i32); all-ones (-1) means
// "none". Anything else outside the vocabulary is an error.
int32_t read_token_id(const GgufFile& g, const char* key, int32_t dflt, size_t n_vocab) {
  const std::optional<int64_t> v = g.get_int(key);
  if (!v) return dflt;
  const int64_t x = *v;
  if (x == -1 || x == static_cast<int64_t>(UINT32_MAX)) return -1;
  if (x < 0 || static_cast<uint64_t>(x) >= n_vocab)
    raise(Status::Format, "%s = %lld is out of range (vocabulary of %zu tokens)", key,
          static_cast<long long>(x), n_vocab);
  return static_cast<int32_t>(x);
}

void check_id(int32_t id, const char* key, size_t n_vocab) {
  if (id < -1 || (id >= 0 && static_cast<size_t>(id) >= n_vocab))
    raise(Status::Format, "%s = %d is out of range (vocabulary of %zu tokens)", key, id, n_vocab);
}

}  // namespace

Vocab Vocab::from_gguf(const GgufFile& g) {
  Vocab v;
  const std::optional<std::string> model = g.get_string("tokenizer.ggml.model");
  if (!model) raise(Status::Format, "no tokenizer.ggml.model");
  v.model = *model;
  v.pre = g.get_string("tokenizer.ggml.pre").value_or("");

  if (!g.get_array("tokenizer.ggml.tokens")) raise(Status::Format, "no tokenizer.ggml.tokens");
  v.tokens = g.get_string_array("tokenizer.ggml.tokens");
  const size_t n = v.tokens.size();
  if (n == 0) raise(Status::Format, "tokenizer.ggml.tokens is empty");
  if (n > static_cast<size_t>(INT32_MAX))
    raise(Status::Format, "tokenizer.ggml.tokens has too many entries (%zu)", n);

  if (g.get_array("tokenizer.ggml.scores")) {
    v.scores = g.get_f32_array("tokenizer.ggml.scores");
    if (v.scores.size() != n)
      raise(Status::Format, "tokenizer.ggml.scores has %zu entries but tokenizer.ggml.tokens has %zu",
            v.scores.size(), n);
  }
  if (g.get_array("tokenizer.ggml.token_type")) {
    const std::vector<int64_t> types = g.get_int_array("tokenizer.ggml.token_type");
    if (types.size() != n)
      raise(Status::Format,
            "tokenizer.ggml.token_type has %zu entries but tokenizer.ggml.tokens has %zu",
            types.size(), n);
    v.types.resize(n);
    for (size_t i = 0; i < n; ++i) {
      if (types[i] < 0 || types[i] > static_cast<int64_t>(TokenType::Byte))
        raise(Status::Format, "tokenizer.ggml.token_type[%zu] = %lld is not a known token type", i,
              static_cast<long long>(types[i]));
      v.types[i] = static_cast<TokenType>(types[i]);
    }
  }
  if (g.get_array("tokenizer.ggml.merges")) v.merges = g.get_string_array("tokenizer.ggml.merges");

  v.bos = read_token_id(g, "tokenizer.ggml.bos_token_id", -1, n);
  v.eos = read_token_id(g, "tokenizer.ggml.eos_token_id", -1, n);
  v.unk = read_token_id(g, "tokenizer.ggml.unknown_token_id", -1, n);
  v.pad = read_token_id(g, "tokenizer.ggml.padding_token_id", -1, n);
  v.eot = read_token_id(g, "tokenizer.ggml.eot_token_id", -1, n);
  // BERT vocabularies (WordPiece) name [CLS] and [SEP] instead: they are what
  // a text starts and ends with (encode with add_bos gives [CLS] text [SEP]).
  const bool wpm = v.model == "bert";
  if (wpm && v.bos < 0) v.bos = read_token_id(g, "tokenizer.ggml.cls_token_id", -1, n);
  if (wpm && v.eos < 0) v.eos = read_token_id(g, "tokenizer.ggml.seperator_token_id", -1, n);

  // SentencePiece vocabularies add BOS and the dummy prefix unless told
  // otherwise. Byte-level BPE ones add BOS when their pre-tokenizer family
  // does (Llama 3, Tekken, Chameleon), as the reference tokenizers do.
  const bool spm = v.model == "llama";
  PreTokenizerInfo pre_info;
  const bool bpe_bos = v.model == "gpt2" && PreTokenizer::lookup(v.pre, &pre_info) && pre_info.add_bos;
  v.add_bos = g.get_bool("tokenizer.ggml.add_bos_token").value_or(spm || bpe_bos || wpm);
  v.add_eos = g.get_bool("tokenizer.ggml.add_eos_token").value_or(false);
  v.add_space_prefix = g.get_bool("tokenizer.ggml.add_space_prefix").value_or(spm || wpm);
  v.remove_extra_whitespaces =
      g.get_bool("tokenizer.ggml.remove_extra_whitespaces").value_or(false);
  v.name = g.get_string("general.name").value_or("");
  v.arch = g.get_string("general.architecture").value_or("");
  v.chat_template = g.get_string("tokenizer.chat_template").value_or("");
  if (!v.chat_template.empty()) {
    // A hostile or broken template must not take down the host that renders
    // it later: try it once now, with the interpreter's budgets.
    bool unusable = false;
    const std::string err = chat_template_trial(v.chat_template, &unusable);
    if (!err.empty()) {
      log(LogLevel::Warn, "the model's chat template fails a trial render (%s)%s", err.c_str(),
          unusable ? "; chat will use a built-in template instead" : "");
      if (unusable) v.chat_template_error = err;
    }
  }

  v.validate();
  return v;
}

void Vocab::validate() {
  const size_t n = tokens.size();
  if (n == 0) raise(Status::Format, "no tokenizer.ggml.tokens (the vocabulary is empty)");
  if (n > static_cast<size_t>(INT32_MAX))
    raise(Status::Format, "tokenizer.ggml.tokens has too many entries (%zu)", n);
  if (scores.empty()) scores.assign(n, 0.0f);
  if (types.empty()) types.assign(n, TokenType::Normal);
  if (scores.size() != n)
    raise(Status::Format, "tokenizer.ggml.scores has %zu entries but tokenizer.ggml.tokens has %zu",
          scores.size(), n);
  if (types.size() != n)
    raise(Status::Format,
          "tokenizer.ggml.token_type has %zu entries but tokenizer.ggml.tokens has %zu",
          types.size(), n);
  for (size_t i = 0; i < n; ++i) {
    // NaN would break the ordering the merge heap relies on.
    if (std::isnan(scores[i]))
      raise(Status::Format, "tokenizer.ggml.scores[%zu] is not a number", i);
    const auto t = static_cast<int32_t>(types[i]);
    if (t < 0 || t > static_cast<int32_t>(TokenType::Byte))
      raise(Status::Format, "tokenizer.ggml.token_type[%zu] = %d is not a known token type", i, t);
  }
  check_id(bos, "tokenizer.ggml.bos_token_id", n);
  check_id(eos, "tokenizer.ggml.eos_token_id", n);
  check_id(unk, "tokenizer.ggml.unknown_token_id", n);
  check_id(pad, "tokenizer.ggml.padding_token_id", n);
  check_id(eot, "tokenizer.ggml.eot_token_id", n);
}

}  // namespace infer
