// The `gemma` architecture (Gemma 1): embeddings scaled by sqrt(n_embd),
// GELU (tanh) gating, rotate-half RoPE, tied embeddings, head size 256.
//
//   x = embed(tokens) * sqrt(n_embd)
//   for each layer:
//     h = rmsnorm(x) ; q, k, v = h·Wq, h·Wk, h·Wv ; rope_neox(q, k)
//     x += attention(q, K, V) · Wo
//     h = rmsnorm(x) ; x += (gelu_tanh(h·Wgate) * (h·Wup)) · Wdown
//   logits = rmsnorm(x) · Wembed
//
// Gemma's RMSNorm multiplies by (1 + w); GGUF converters store 1 + w in the
// norm tensors, so the norm here is the plain one (a loader of Hugging Face
// weights adds the 1 when it binds them).
#include <cmath>

#include "model/transformer.h"

namespace infer {

namespace {

class GemmaModel final : public Transformer {
 public:
  GemmaModel(std::unique_ptr<GgufFile> gguf, std::unique_ptr<Tokenizer> tok)
      : Transformer(std::move(gguf), std::move(tok), false) {
    read_shape();
    config_.ffn_act = "gelu";
    config_.embed_scale = std::sqrt(static_cast<float>(config_.n_embd));
    setup_rope(/*neox=*/true);
    finish_config();
    bind_embeddings();
    bind_layers(/*biases=*/false, /*qk_norm=*/false);
  }
};

}  // namespace

std::unique_ptr<Model> create_gemma_model(std::unique_ptr<GgufFile> gguf, std::unique_ptr<Tokenizer> tok) {
  return std::make_unique<GemmaModel>(std::move(gguf), std::move(tok));
}

}  // namespace infer
