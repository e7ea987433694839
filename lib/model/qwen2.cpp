// The `qwen2` architecture (Qwen2, Qwen2.5): llama's layer with biases on
// the Q, K and V projections and rotate-half RoPE.
//
//   x = embed(tokens)
//   for each layer:
//     h = rmsnorm(x) ; q, k, v = h·Wq + bq, h·Wk + bk, h·Wv + bv ; rope_neox(q, k)
//     x += attention(q, K, V) · Wo
//     h = rmsnorm(x) ; x += (silu(h·Wgate) * (h·Wup)) · Wdown
//   logits = rmsnorm(x) · Wout              (Wout = embedding when absent: 0.5B, 1.5B, 3B)
#include "model/transformer.h"

namespace infer {

namespace {

class Qwen2Model final : public Transformer {
 public:
  Qwen2Model(std::unique_ptr<GgufFile> gguf, std::unique_ptr<Tokenizer> tok)
      : Transformer(std::move(gguf), std::move(tok), false) {
    read_shape();
    config_.attn_bias = true;
    setup_rope(/*neox=*/true);
    finish_config();
    bind_embeddings();
    layers_.resize(config_.n_layer);
    for (int l = 0; l < config_.n_layer; ++l) {
      const std::string p = "blk." + std::to_string(l) + ".";
      LayerWeights& L = layers_[l];
      L.attn_norm = vector_f32(p + "attn_norm.weight", config_.n_embd);
      L.ffn_norm = vector_f32(p + "ffn_norm.weight", config_.n_embd);
      bind_attention(p, L.attn, /*biases=*/true, /*qk_norm=*/false);
      L.attn.window = config_.layer_window[l];
      bind_ffn(p, L.ffn);
    }
  }

  void forward(const Batch& batch, KvCache& kv, Backend& be, Workspace& ws, float* logits,
               const uint8_t* skip) const override {
    Pass p = begin(batch, kv, be, ws);
    if (p.m == 0) return;
    const int64_t n = p.m * config_.n_embd;
    for (int l = 0; l < config_.n_layer; ++l) {
      if (skip && skip[l]) continue;
      const LayerWeights& L = layers_[l];
      norm(p, L.attn_norm, p.x, p.xb);
      attention(p, l, L.attn, p.xb, p.xb);
      be.add(p.x, p.xb, n);
      norm(p, L.ffn_norm, p.x, p.xb);
      gated_ffn(p, L.ffn, p.xb, p.xb);
      be.add(p.x, p.xb, n);
    }
    output(p, logits);
  }
};

}  // namespace

std::unique_ptr<Model> create_qwen2_model(std::unique_ptr<GgufFile> gguf, std::unique_ptr<Tokenizer> tok) {
  return std::make_unique<Qwen2Model>(std::move(gguf), std::move(tok));
}

}  // namespace infer
