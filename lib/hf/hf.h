// Hugging Face model directories as GGUF-shaped views.
//
// A directory holding config.json, *.safetensors (one file, or shards listed
// by model.safetensors.index.json), tokenizer.json and tokenizer_config.json
// becomes a GgufFile (GgufFile::assemble): the metadata keys a GGUF converter
// writes for the architecture ({arch}.embedding_length, rope scaling, sliding
// window, soft-caps, tokenizer.ggml.*, tokenizer.chat_template, ...) and
// tensors under their GGUF names (blk.N.attn_q.weight, ...) whose bytes stay
// in the memory-mapped shards (F32, F16, BF16: no copy). The model code
// cannot tell where its tensors came from.
//
// What is transformed rather than mapped (copied once into memory at load):
//  - Gemma RMSNorm weights: HF stores w with the norm computing x * (1 + w);
//    GGUF stores 1 + w (as the GGUF converters do).
//  - Mixtral experts: per-expert matrices are stacked into the GGUF
//    ffn_{gate,up,down}_exps 3-D tensors.
//  - Phi-3 long-rope factors (config lists) become rope_factors_{long,short}.
//  - Tensors whose bytes are not aligned to their element size.
//  - Mamba, Mamba-2 and Jamba (hf_ssm.h): A = -exp(A_log) and the small SSM
//    vectors as F32; conv1d and Mamba-2's A, D and norm are only re-shaped
//    (the same bytes); Jamba's experts are stacked as Mixtral's.
//  - GPTQ / AWQ 4-bit layers (config.json quantization_config): repacked
//    into INT4_G* blocks (hf_quant.h); an act-order GPTQ layer's input
//    permutation becomes the companion tensor "<name>.perm" (I32).
// HF Llama/Mistral/Mixtral checkpoints store Q and K in the rotate-half rotary
// layout; the view says so with the bool key `infer.rope.neox` (true) instead
// of permuting rows. `infer convert hf` permutes them into the llama GGUF
// layout (lib/tools/convert_hf.*) so the written file is a standard one.
//
// Every file is checked before use (sizes, offsets, dtypes, shapes, names):
// Error(Io) for a missing file, Error(Format) for a malformed one and
// Error(Unsupported) for a model type or tokenizer this loader does not
// know, each message naming the file and what is wrong.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/dtype.h"
#include "core/json.h"
#include "gguf/gguf.h"

namespace infer {
namespace hf {

// Whether `path` is a directory (the caller then loads it as an HF model).
bool is_directory(const std::string& path);

// Opens an HF model directory. vocab_only: the tokenizer metadata only (no
// safetensors needed).
std::unique_ptr<GgufFile> open_directory(const std::string& dir, bool use_mmap = true, bool vocab_only = false);

// ---- the pieces (tests and the fuzzer use them directly) -------------------------------

// One tensor of a safetensors header. `type` is meaningful when `supported`
// (F32, F16, BF16, F64, I8, I16, I32, I64); other dtypes (U8, BOOL, F8_*,
// U16/U32/U64) are sized and range-checked but not loadable.
struct SafeTensor {
  std::string name;
  std::string dtype;
  DType type = DType::F32;
  bool supported = false;
  std::vector<int64_t> shape;  // as stored: slowest-varying first
  uint64_t begin = 0, end = 0;  // absolute offsets in the file
};

// Parses the header of a safetensors file of `size` bytes: u64 little-endian
// header length N, N bytes of JSON {name: {dtype, shape, data_offsets}, ...,
// "__metadata__": {...}}, then the data. Every tensor's range must lie in the
// data section, match its shape and dtype exactly and overlap no other.
// Error(Format) naming `what` otherwise.
std::vector<SafeTensor> parse_safetensors(const uint8_t* data, size_t size, const std::string& what);

// config.json text -> the architecture's GGUF metadata (general.architecture,
// {arch}.*, infer.rope.neox). Error(Format/Unsupported).
std::vector<std::pair<std::string, GgufValue>> config_metadata(std::string_view config_json);

// tokenizer.json (+ tokenizer_config.json, may be empty; config.json, may be
// empty, for bos/eos ids) -> tokenizer.ggml.* and tokenizer.chat_template.
// n_vocab_min: pad the vocabulary with unused tokens up to this size (the
// embedding's rows). Error(Format/Unsupported).
std::vector<std::pair<std::string, GgufValue>> tokenizer_metadata(std::string_view tokenizer_json,
                                                                  std::string_view tokenizer_config_json,
                                                                  std::string_view config_json,
                                                                  int64_t n_vocab_min = 0);

// tokenizer.json's model.vocab (an object token -> id) and added_tokens ->
// tokens and their tokenizer.ggml.token_type values by id: vocabulary
// entries Normal (Byte for "<0xNN>" when `byte_tokens`), added tokens
// Control when special, else UserDefined; ids no entry takes (and ids up to
// n_vocab_min) become "[PADn]", Unused. Error(Format) for bad ids, two
// entries on one id, an added token on another token's id, or no tokens.
void read_tokenizer_vocab(const Json& tokenizer_json, const Json& vocab, int64_t n_vocab_min, bool byte_tokens,
                          std::vector<std::string>& tokens, std::vector<int32_t>& types);

// The GGUF name of an HF tensor name for an architecture ("" when the tensor
// is not part of the model, e.g. rotary_emb.inv_freq). Error(Unsupported)
// naming the tensor when it is not known.
std::string gguf_tensor_name(const std::string& arch, const std::string& hf_name);

}  // namespace hf
}  // namespace infer
