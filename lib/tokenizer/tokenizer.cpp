// Tokenizer front end: choosing the algorithm, detokenization and streaming.
#include "tokenizer/tokenizer.h"

#include <string_view>

#include "core/error.h"
#include "tokenizer/spm.h"

namespace infer {

std::unique_ptr<Tokenizer> Tokenizer::create(Vocab vocab) {
  vocab.validate();
  if (vocab.model == "llama") return make_spm_tokenizer(std::move(vocab));
  raise(Status::Unsupported, "tokenizer model '%s' is not supported yet", vocab.model.c_str());
}

namespace {

// Tokens that do not start the text itself: while only these have been seen,
// the text has not begun and the dummy-prefix space is still to be removed.
bool before_text(const Tokenizer& tok, int32_t id, const std::string& piece) {
  return piece.empty() || tok.is_control(id);
}

// The dummy prefix added by encoding: one leading space on the first piece.
void strip_dummy_prefix(const Tokenizer& tok, std::string& piece) {
  if (tok.vocab().add_space_prefix && !piece.empty() && piece[0] == ' ') piece.erase(0, 1);
}

}  // namespace

std::string Tokenizer::decode(const std::vector<int32_t>& ids, bool render_special) const {
  std::string out;
  bool at_start = true;
  for (int32_t id : ids) {
    std::string piece = token_to_piece(id, render_special);
    if (at_start && !before_text(*this, id, piece)) {
      strip_dummy_prefix(*this, piece);
      at_start = false;
    }
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
  if (at_start_ && !before_text(tok_, id, piece)) {
    strip_dummy_prefix(tok_, piece);
    at_start_ = false;
  }
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
