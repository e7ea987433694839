// BERT's WordPiece tokenizer (tokenizer.ggml.model = "bert"). Internal to
// lib/tokenizer.
//
// Normalization, as BERT's basic tokenizer for uncased models: text in NFD;
// NUL, U+FFFD and control characters (Cc, Cf) dropped; whitespace (Zs, \t
// \n \r) separates words; combining marks (Mn) dropped (accents stripped);
// lowercase; every punctuation character (P*, and the ASCII symbols) and
// every CJK ideograph is a word of its own.
//
// Pieces: each word is matched greedily, longest piece first, from its
// start; the first piece must be a word-start piece, the rest continuation
// pieces. A word with no complete match, or longer than 100 characters, is
// one [UNK]. Vocabularies come in two spellings, both read: the GGUF one
// (word starts "▁word", continuations bare "ing") and the Hugging Face one
// (word starts bare "word", continuations "##ing"; tokenizer.json).
//
// encode(text, add_bos) gives [CLS] pieces [SEP] (bos = [CLS], eos = [SEP]);
// decode joins continuations to the word before and puts a space between
// words.
#pragma once

#include <memory>

#include "tokenizer/tokenizer.h"

namespace infer {

std::unique_ptr<Tokenizer> make_wordpiece_tokenizer(Vocab vocab);

}  // namespace infer
