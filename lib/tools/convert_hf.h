// `infer convert hf`: a Hugging Face model directory (lib/hf) written as a
// GGUF file, with its weight matrices kept in the checkpoint's float types
// or converted by round to nearest (tools/quantize.h's writer pieces).
//
// Q and K of llama-architecture checkpoints (Llama, Mistral, Mixtral) are
// stored in HF's rotate-half layout; the directory view marks them with
// `infer.rope.neox`. The converter permutes their rows (and biases) into the
// interleaved layout llama GGUF files use and drops the key, so the output
// is an ordinary llama GGUF that other readers run too. The permutation moves
// whole rows, so the converted model computes exactly what the directory does.
//
// GPTQ / AWQ layers are INT4 blocks in the view and are written as they are;
// an act-order layer's columns are permuted and its "<name>.perm" (I32, the
// input permutation: docs/ARCHITECTURE.md) is written beside it, a libinfer
// extension that our loader applies. Converted to another type (--type), the
// rows' columns are put back in input order before they are quantized and no
// .perm is written: an ordinary GGUF, as for the Q/K rows above.
#pragma once

#include <string>

#include "tools/quantize.h"

namespace infer {

struct ConvertHfOptions {
  bool keep_types = true;    // matrices as the checkpoint stores them (F32/F16/BF16)
  DType type = DType::F16;   // else: this format for the quantizable matrices
  int n_threads = 0;
  std::function<void(double, const std::string&)> progress;
  std::function<void(const std::string&)> note;
};

// The output is a file the loader accepts, or nothing: the directory is
// loaded by Model::load first (its GGUF, metadata, shape, tensor type,
// vocabulary and finite-weight checks), and the written file is loaded again
// under a temporary name before it takes out_path's (converting can make a
// finite weight infinite). A refusal is the loader's Error, with what was
// refused in front; out_path is then left as it was.
// Error(Io/Format/Unsupported) as the loader reports them;
// Error(InvalidArgument) for a type that cannot be written.
QuantizeStats convert_hf(const std::string& dir, const std::string& out_path, const ConvertHfOptions& o);

}  // namespace infer
