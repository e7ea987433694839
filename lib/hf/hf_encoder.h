// Hugging Face encoders (embedding models and rerankers) as GGUF-shaped views:
// the pieces hf_model.cpp and hf_tokenizer.cpp call for BERT and nomic-bert
// directories, sentence-transformers pooling and WordPiece tokenizer.json.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "core/json.h"
#include "gguf/gguf.h"

namespace infer {
namespace hf {

using MetaList = std::vector<std::pair<std::string, GgufValue>>;

// model_type "bert" or "nomic_bert".
bool is_encoder(const std::string& model_type);

// config.json of a BERT (BertModel, BertForMaskedLM, BertForSequenceClassification)
// or NomicBertModel checkpoint -> general.architecture "bert" / "nomic-bert" and
// the converted files' keys. A sequence classifier (the reranker shape) gets
// pooling_type 4 (rank). Error(Unsupported) for variants the encoders do not run
// (another activation, relative positions, interleaved rotary, biases in nomic).
MetaList encoder_config_metadata(const Json& cfg, const std::string& model_type);

// An HF encoder tensor name -> its GGUF name; "" for tensors that are not part
// of the model (position_ids, the masked-LM head, a BertModel's unused pooler
// is left to the caller: "cls.weight" is returned for pooler.dense).
// Error(Unsupported) naming the tensor when it is not known.
std::string encoder_tensor_name(const std::string& model_type, const std::string& hf_name);

// sentence-transformers: modules.json and its Pooling module's config.json in
// `dir` -> {arch}.pooling_type (nothing when the directory has no modules.json).
// Error(Unsupported) for a pooling mode or module that would change the output
// (max / weighted-mean / sqrt-length pooling, several modes at once, Dense).
MetaList sentence_transformers_metadata(const std::string& dir, const std::string& gguf_arch);

// tokenizer.json with model.type "WordPiece" -> tokenizer.ggml.model "bert" and
// its keys (tokens, token types with the specials as control, cls/sep/pad/unk/
// mask ids, token_type_count from config.json's type_vocab_size).
MetaList wordpiece_metadata(const Json& tokenizer_json, const Json& tokenizer_config, const Json& config,
                            int64_t n_vocab_min);

}  // namespace hf
}  // namespace infer
