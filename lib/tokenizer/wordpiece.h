// BERT's WordPiece tokenizer (tokenizer.ggml.model = "bert"). Internal to
// lib/tokenizer; lib/hf builds one from a tokenizer.json "WordPiece" model.
//
// Encoding, as BERT's reference tokenizer does (uncased models):
//  1. normalize: drop NUL, U+FFFD and control characters (Unicode category C*
//     except \t \n \r), turn whitespace into ' '; put spaces around CJK
//     ideographs (handle_chinese_chars); NFD and drop nonspacing marks (Mn)
//     (strip_accents); lowercase (lowercase);
//  2. split into words at whitespace, and make every punctuation character
//     (Unicode P*, plus the ASCII symbols !"#$%&'()*+,-./:;<=>?@[\]^_`{|}~) a
//     word of its own;
//  3. WordPiece: greedy longest-match-first inside each word, pieces after
//     the first carry the continuing prefix ("##"); a word longer than
//     max_input_chars_per_word characters, or one that cannot be covered,
//     becomes the unknown token.
// encode(text, add_bos=true) gives [CLS] ... [SEP] (Tokenizer::cls()/sep()).
// With parse_special, control tokens written literally in the text ("[SEP]")
// become their ids before normalization, as Hugging Face's added tokens do.
// Invalid UTF-8 bytes are dropped like U+FFFD (never an error).
// Decoding: a "##x" piece joins the previous one, others are preceded by a
// space (none at the start of the text, none before . , ! ?).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "tokenizer/tokenizer.h"

namespace infer {

struct WordPieceOptions {
  bool clean_text = true;            // drop controls / U+FFFD, whitespace -> ' '
  bool handle_chinese_chars = true;  // CJK ideographs are words of their own
  bool strip_accents = true;         // NFD, drop Mn marks (HF: strip_accents, default = lowercase)
  bool lowercase = true;             // full Unicode lowercase
  std::string continuing_prefix = "##";
  size_t max_input_chars_per_word = 100;
  // -1: take vocab.unk / vocab.cls / vocab.sep, then the token named "[UNK]"
  // / "[CLS]" / "[SEP]". Set ids are stored into the vocabulary.
  int32_t unk = -1, cls = -1, sep = -1;
};

// vocab.model should be "bert". Vocab::validate() rules apply; Error(Format)
// when there is no unknown token.
std::unique_ptr<Tokenizer> make_wordpiece_tokenizer(Vocab vocab, const WordPieceOptions& opt = {});

}  // namespace infer
