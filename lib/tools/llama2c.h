// Import of llama2.c checkpoints (the legacy "version 0" format written by
// llama2.c's export, as read by its run.c) and their tokenizer.bin into GGUF
// (`llama` architecture, all tensors F32, SentencePiece vocabulary).
//
// The output always contains output.weight: when the checkpoint shares the
// classifier with the token embedding (positive vocab_size in its header),
// the embedding is written twice, so every converted file has the same tensor
// set as llama.cpp's stories260K.gguf and needs no tied-weight rule to load.
#pragma once

#include <string>

#include "gguf/gguf.h"

namespace infer {

// Reads and validates both files and returns the GGUF ready to write.
// Error(Io) when a file cannot be read; Error(Format) naming the file when its
// header is absurd, its size is not what the header implies, or the tokenizer
// does not hold exactly vocab_size tokens.
GgufWriter llama2c_to_gguf(const std::string& checkpoint, const std::string& tokenizer_bin);

// llama2c_to_gguf, then writes the result to out_gguf (atomically).
void convert_llama2c(const std::string& checkpoint, const std::string& tokenizer_bin,
                     const std::string& out_gguf);

}  // namespace infer
