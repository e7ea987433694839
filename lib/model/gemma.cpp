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
    layers_.resize(config_.n_layer);
    for (int l = 0; l < config_.n_layer; ++l) {
      const std::string p = "blk." + std::to_string(l) + ".";
      LayerWeights& L = layers_[l];
      L.attn_norm = vector_f32(p + "attn_norm.weight", config_.n_embd);
      L.ffn_norm = vector_f32(p + "ffn_norm.weight", config_.n_embd);
      bind_attention(p, L.attn, /*biases=*/false, /*qk_norm=*/false);
      L.attn.window = config_.layer_window[l];
      bind_ffn(p, L.ffn);
    }
  }

  void forward(const Batch& batch, KvCache& kv, Backend& be, Workspace& ws, float* logits,
               const uint8_t* skip) const override {
    Pass p = begin(batch, kv, be, ws);  // embeddings scaled by embed_scale
    if (p.m == 0) return;
    const int64_t n = p.m * config_.n_embd;
    for (int l = 0; l < config_.n_layer; ++l) {
      if (skip && skip[l]) continue;
      const LayerWeights& L = layers_[l];
      norm(p, L.attn_norm, p.x, p.xb);
      attention(p, l, L.attn, p.xb, p.xb);
      be.add(p.x, p.xb, n);
      norm(p, L.ffn_norm, p.x, p.xb);
      gated_ffn(p, L.ffn, p.xb, p.xb);  // GELU gating (config.ffn_act)
      be.add(p.x, p.xb, n);
    }
    output(p, logits);
  }
};

}  // namespace

std::unique_ptr<Model> create_gemma_model(std::unique_ptr<GgufFile> gguf, std::unique_ptr<Tokenizer> tok) {
  return std::make_unique<GemmaModel>(std::move(gguf), std::move(tok));
}

}  // namespace infer
