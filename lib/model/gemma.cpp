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

std::unique_ptr<Model> create_gemma_model(std::unique_ptr<GgufFile> gguf, std::unique_ptr<Tokenizer> tok,
                                          std::shared_ptr<TpGroup> tp) {
  const auto configure = [](DenseTransformer& t) {
    ModelConfig& c = t.cfg();
    c.ffn_act = "gelu";
    c.embed_scale = std::sqrt(static_cast<float>(c.n_embd));
  };
  return std::make_unique<DenseTransformer>(std::move(gguf), std::move(tok), false, false, configure, std::move(tp));
}

}  // namespace infer
