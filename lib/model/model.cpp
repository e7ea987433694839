#include "model/model.h"

#include <algorithm>

#include "core/error.h"
#include "hf/hf.h"
#include "model/mamba.h"
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
  // Identified while the check's pages are still in memory (sampling the
  // tensors later would read them back in, with the kernel's readahead).
  const int32_t tp_size = opts.comm ? opts.comm->size() : 1;
  const uint64_t fp = file_fingerprint(*gguf, tp_size);
  // Tensor parallelism: this process loads its rank's share (model/tp.h).
  std::shared_ptr<TpGroup> tp;
  if (tp_size > 1) {
    if (opts.vocab_only) raise(Status::InvalidArgument, "a vocabulary-only load cannot be split between ranks");
    tp = std::make_shared<TpGroup>(opts.comm);
    // The check read every page; a rank keeps only those of its share.
    gguf->release_all();
  }
  std::unique_ptr<Model> m = create(std::move(gguf), std::move(tok), arch, opts.vocab_only, tp);
  m->fingerprint_ = fp;
  // Every rank must hold the same file, split the same way: compared
  // before any pass (a rank with another file would compute garbage).
  if (tp) tp->agree(fp, "the model");
  return m;
}

std::unique_ptr<Model> Model::create(std::unique_ptr<GgufFile> gguf, std::unique_ptr<Tokenizer> tok,
                                     const std::string& arch, bool vocab_only, std::shared_ptr<TpGroup> tp) {
  if (arch == "llama" || arch == "mistral") return create_llama_model(std::move(gguf), std::move(tok), vocab_only, tp);
  // Only the tokenizer of a vocabulary-only load is used, whatever the
  // architecture (gpt2, falcon, qwen2, ... vocabularies).
  if (vocab_only) return create_llama_model(std::move(gguf), std::move(tok), true);
  if (arch == "qwen2") return create_qwen2_model(std::move(gguf), std::move(tok), tp);
  if (arch == "qwen3") return create_qwen3_model(std::move(gguf), std::move(tok), tp);
  if (arch == "phi3") return create_phi3_model(std::move(gguf), std::move(tok), tp);
  if (arch == "gemma") return create_gemma_model(std::move(gguf), std::move(tok), tp);
  if (arch == "gemma2") return create_gemma2_model(std::move(gguf), std::move(tok), tp);
  if (arch == "bert" || arch == "nomic-bert") return create_bert_model(std::move(gguf), std::move(tok), tp);
  if (arch == "mamba" || arch == "mamba2" || arch == "jamba") return create_mamba_model(std::move(gguf), std::move(tok), tp);
  std::string names;
  for (const std::string& a : supported_architectures()) names += (names.empty() ? "" : ", ") + a;
  raise(Status::Unsupported, "model architecture '%s' is not supported (supported: %s)", arch.c_str(), names.c_str());
}

const std::vector<std::string>& supported_architectures() {
  static const std::vector<std::string> kArchs = {"llama", "mistral", "qwen2", "qwen3", "phi3", "gemma", "gemma2", "bert", "nomic-bert",
                                                  "mamba", "mamba2", "jamba"};
  return kArchs;
}

void Model::encode(const Batch&, Backend&, Workspace&, float*, bool) const {
  raise(Status::Unsupported, "'%s' models cannot compute embeddings", config_.arch.c_str());
}

KvLayout Model::kv_layout() const {
  KvLayout l;
  // State-space layers keep recurrent state instead of K/V (kv/kv_format.h);
  // the attention layers' K/V are numbered 0.. in layer order, skipping them.
  const int32_t n_ssm = config_.n_ssm_layers();
  l.n_layers = config_.n_layer - n_ssm;
  // Tensor parallelism: this rank's KV heads (one when there are fewer than ranks).
  l.n_kv_heads = l.n_layers > 0 ? std::max(1, config_.n_head_kv / config_.tp_size) : 0;
  l.head_dim = l.n_layers > 0 ? config_.head_dim : 0;
  if (n_ssm > 0) {
    l.n_ssm_layers = n_ssm;
    l.ssm_conv_elems = static_cast<int64_t>(config_.ssm_d_conv - 1) * config_.ssm_conv_channels;
    l.ssm_state_elems = static_cast<int64_t>(config_.ssm_d_inner) * config_.ssm_d_state;
  }
  return l;
}

uint64_t Model::file_fingerprint(const GgufFile& g, int32_t tp_size) {
  // FNV-1a over the metadata's keys, the tensor table, 64 bytes at the
  // start, middle and end of every tensor, and the split. Cheap (no full
  // read of a 70B file) and enough to tell two different files apart: a
  // different conversion, quantization or model changes the table or the
  // sampled bytes.
  uint64_t h = 1469598103934665603ull;
  const auto mix = [&h](const void* p, size_t n) {
    const uint8_t* b = static_cast<const uint8_t*>(p);
    for (size_t i = 0; i < n; ++i) h = (h ^ b[i]) * 1099511628211ull;
  };
  for (const auto& kv : g.metadata()) mix(kv.first.data(), kv.first.size());
  for (const GgufTensorInfo& t : g.tensors()) {
    mix(t.name.data(), t.name.size());
    const uint32_t type = static_cast<uint32_t>(t.type);
    mix(&type, sizeof type);
    for (int64_t d : t.dims) mix(&d, sizeof d);
    const uint8_t* data = g.tensor_data(t);
    const size_t n = std::min<size_t>(64, t.nbytes);
    if (data && n > 0)
      for (size_t at : {size_t{0}, (t.nbytes - n) / 2, t.nbytes - n}) mix(data + at, n);
  }
  mix(&tp_size, sizeof tp_size);
  return h;
}

}  // namespace infer
