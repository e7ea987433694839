#include "engine/prompt.h"

#include "core/error.h"
#include "tokenizer/tokenizer.h"

namespace infer {

std::vector<int32_t> tokenize_text(const Tokenizer& tok, std::string_view text, int add_bos, bool parse_special) {
  if (add_bos < -1 || add_bos > 1) raise(Status::InvalidArgument, "add_bos must be -1, 0 or 1 (got %d)", add_bos);
  const bool bos = add_bos < 0 ? tok.vocab().add_bos : add_bos != 0;
  return tok.encode(text, bos, parse_special);
}

std::vector<int32_t> tokenize_prompt(const Tokenizer& tok, std::string_view text, int add_bos, bool parse_special) {
  std::vector<int32_t> ids = tokenize_text(tok, text, add_bos, parse_special);
  if (ids.empty() && tok.vocab().bos >= 0) ids.push_back(tok.vocab().bos);
  return ids;
}

}  // namespace infer
