// Tokenizer front end: choosing the algorithm, detokenization and streaming.
#include "tokenizer/tokenizer.h"

#include <cctype>
#include <string_view>

#include "core/error.h"
#include "tokenizer/bpe.h"
#include "tokenizer/spm.h"
#include "tokenizer/wordpiece.h"

namespace infer {

std::unique_ptr<Tokenizer> Tokenizer::create(Vocab vocab) {
  vocab.validate();
  if (vocab.model == "llama") return make_spm_tokenizer(std::move(vocab));
  if (vocab.model == "gpt2") return make_bpe_tokenizer(std::move(vocab));
  if (vocab.model == "bert") return make_wordpiece_tokenizer(std::move(vocab));
  raise(Status::Unsupported, "tokenizer model '%s' is not supported (supported: llama, gpt2, bert)",
        vocab.model.c_str());
}

Tokenizer::Tokenizer(Vocab v) : vocab_(std::move(v)) {
  std::string name = vocab_.name;
  for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  const size_t n = vocab_.tokens.size();
  auto special = [&](size_t i) {
    const TokenType t = vocab_.types[i];
    return t == TokenType::Control || t == TokenType::UserDefined || t == TokenType::Unknown;
  };
  if (name.find("phi-3") != std::string::npos || name.find("phi3") != std::string::npos) {
    strip_.assign(n, 0);
    for (size_t i = 0; i < n; ++i) {
      const std::string& t = vocab_.tokens[i];
      if (special(i) || t == "</s>") strip_[i] = kRStrip;
      if (t == "<unk>" || t == "<s>" || t == "<|endoftext|>") strip_[i] = 0;
    }
  } else if (vocab_.pre == "jina-v2-de" || vocab_.pre == "jina-v2-es" || vocab_.pre == "jina-v2-code") {
    strip_.assign(n, 0);
    for (size_t i = 0; i < n; ++i)
      if (vocab_.tokens[i] == "<mask>") strip_[i] = kLStrip;
  }
}

namespace {

// The start-of-text rule shared by decode() and StreamDecoder, applied to one
// token's piece while no text has been produced yet. Returns whether the
// text is still at its start afterwards.
//  - Control tokens and tokens that render as nothing do not start the text.
//  - A normal piece beginning with "▁" loses that one space: it is the dummy
//    prefix encoding added. Byte tokens are literal and keep theirs, as in
//    SentencePiece's decoder.
//  - With remove_extra_whitespaces (text never starts with a space), a piece
//    that was only that space leaves us at the start, so SentencePiece's
//    decoder drops every leading space then; otherwise just the first.
bool text_start_rule(const Tokenizer& tok, int32_t id, std::string& piece) {
  if (piece.empty() || tok.is_control(id)) return true;
  const Vocab& v = tok.vocab();
  const TokenType t = v.types[static_cast<size_t>(id)];
  if (!v.add_space_prefix || piece[0] != ' ' ||
      (t != TokenType::Normal && t != TokenType::Undefined))
    return false;
  piece.erase(0, 1);
  return v.remove_extra_whitespaces && piece.empty();
}

}  // namespace

std::string Tokenizer::decode(const std::vector<int32_t>& ids, bool render_special) const {
  std::string out;
  bool at_start = true;
  for (int32_t id : ids) {
    std::string piece = token_to_piece(id, render_special);
    if (at_start) at_start = text_start_rule(*this, id, piece);
    out += piece;
  }
  return out;
}

bool Tokenizer::is_control(int32_t id) const {
  return id >= 0 && id < n_vocab() && vocab_.types[static_cast<size_t>(id)] == TokenType::Control;
}

bool Tokenizer::is_eog(int32_t id) const {
  if (id < 0 || id >= n_vocab()) return false;
  if (id == vocab_.eos || id == vocab_.eot) return true;
  if (!is_control(id)) return false;
  // End-of-turn / end-of-message control tokens of common chat formats.
  static constexpr std::string_view kEndOfTurn[] = {
      "<|eot_id|>", "<|im_end|>", "<|end|>",  "<end_of_turn>", "<|endoftext|>",
      "<|eom_id|>", "<EOT>",      "_<EOT>",   "<|end_of_text|>",
      "<\xEF\xBD\x9C" "end\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>",  // <｜end▁of▁sentence｜>
  };
  const std::string& text = vocab_.tokens[static_cast<size_t>(id)];
  for (std::string_view name : kEndOfTurn)
    if (text == name) return true;
  return false;
}

// ---- streaming ------------------------------------------------------------

std::string StreamDecoder::push(int32_t id) {
  std::string piece = tok_.token_to_piece(id, render_special_);
  if (at_start_) at_start_ = text_start_rule(tok_, id, piece);
  pending_ += piece;

  // Emit every complete code point; hold back a well-formed but truncated
  // tail, which the next byte tokens may complete. Bytes that can never form
  // a code point become U+FFFD (one per maximal ill-formed subpart).
  std::string out;
  size_t pos = 0;
  while (pos < pending_.size()) {
    size_t len = 0;
    const Utf8Status st = utf8_next(pending_, pos, &len);
    if (st == Utf8Status::Truncated) break;
    if (st == Utf8Status::Valid)
      out.append(pending_, pos, len);
    else
      out += kUtf8Replacement;
    pos += len;
  }
  pending_.erase(0, pos);
  return out;
}

std::string StreamDecoder::flush() {
  // Whatever is held is a truncated sequence: one U+FFFD.
  std::string out = pending_.empty() ? std::string() : std::string(kUtf8Replacement);
  pending_.clear();
  return out;
}

}  // namespace infer
