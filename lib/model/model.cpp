#include "model/model.h"

#include "core/error.h"
#include "hf/hf.h"
#include "model/weight_check.h"

namespace infer {

std::unique_ptr<Model> Model::load(const std::string& path, const LoadOptions& opts) {
  // A directory is a Hugging Face model (config.json, safetensors, tokenizer.json),
  // seen through the same GGUF-shaped view (lib/hf).
  std::unique_ptr<GgufFile> gguf = hf::is_directory(path) ? hf::open_directory(path, opts.use_mmap, opts.vocab_only)
                                                          : GgufFile::open(path, opts.use_mmap);
  std::unique_ptr<Tokenizer> tok = Tokenizer::create(*gguf);
  std::string arch = gguf->get_string("general.architecture").value_or("");
  if (arch.empty()) {
    if (!opts.vocab_only) raise(Status::Format, "'%s' has no general.architecture", path.c_str());
    arch = "llama";  // a vocabulary-only file: only the tokenizer is used
  }
  // Mistral-style models are published under the llama architecture; the
  // name is accepted too for files that spell it out.
  // Weights are data: a NaN or Inf is a malformed file, reported here and not
  // as every request's failure later.
  if (!opts.vocab_only) check_finite_weights(*gguf);
  if (arch == "llama" || arch == "mistral") return create_llama_model(std::move(gguf), std::move(tok), opts.vocab_only);
  // Only the tokenizer of a vocabulary-only load is used, whatever the
  // architecture (gpt2, falcon, qwen2, ... vocabularies).
  if (opts.vocab_only) return create_llama_model(std::move(gguf), std::move(tok), true);
  if (arch == "qwen2") return create_qwen2_model(std::move(gguf), std::move(tok));
  if (arch == "qwen3") return create_qwen3_model(std::move(gguf), std::move(tok));
  if (arch == "phi3") return create_phi3_model(std::move(gguf), std::move(tok));
  if (arch == "gemma") return create_gemma_model(std::move(gguf), std::move(tok));
  if (arch == "gemma2") return create_gemma2_model(std::move(gguf), std::move(tok));
  if (arch == "bert" || arch == "nomic-bert") return create_bert_model(std::move(gguf), std::move(tok));
  std::string names;
  for (const std::string& a : supported_architectures()) names += (names.empty() ? "" : ", ") + a;
  raise(Status::Unsupported, "model architecture '%s' is not supported (supported: %s)", arch.c_str(), names.c_str());
}

const std::vector<std::string>& supported_architectures() {
  static const std::vector<std::string> kArchs = {"llama", "mistral", "qwen2", "qwen3", "phi3", "gemma", "gemma2", "bert", "nomic-bert"};
  return kArchs;
}

void Model::encode(const Batch&, Backend&, Workspace&, float*, bool) const {
  raise(Status::Unsupported, "'%s' models cannot compute embeddings", config_.arch.c_str());
}

KvLayout Model::kv_layout() const {
  KvLayout l;
  l.n_layers = config_.n_layer;
  l.n_kv_heads = config_.n_head_kv;
  l.head_dim = config_.head_dim;
  return l;
}

uint64_t Model::fingerprint() const { return 0; }

}  // namespace infer
