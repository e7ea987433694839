// The `qwen3` architecture (Qwen3 dense): no projection biases; Q and K are
// RMS-normalised per head (attn_q_norm, attn_k_norm: head_dim weights)
// before rotate-half RoPE; the head size is its own (attention.key_length).
//
//   x = embed(tokens)
//   for each layer:
//     h = rmsnorm(x) ; q, k, v = h·Wq, h·Wk, h·Wv
//     q, k = rmsnorm_per_head(q) * wqn, rmsnorm_per_head(k) * wkn ; rope_neox(q, k)
//     x += attention(q, K, V) · Wo
//     h = rmsnorm(x) ; x += (silu(h·Wgate) * (h·Wup)) · Wdown
//   logits = rmsnorm(x) · Wout              (Wout = embedding when absent)
#include "model/transformer.h"

namespace infer {

namespace {

class Qwen3Model final : public Transformer {
 public:
  Qwen3Model(std::unique_ptr<GgufFile> gguf, std::unique_ptr<Tokenizer> tok)
      : Transformer(std::move(gguf), std::move(tok), false) {
    read_shape();
    config_.qk_norm = true;
    setup_rope(/*neox=*/true);
    finish_config();
    bind_embeddings();
    layers_.resize(config_.n_layer);
    for (int l = 0; l < config_.n_layer; ++l) {
      const std::string p = "blk." + std::to_string(l) + ".";
      LayerWeights& L = layers_[l];
      L.attn_norm = vector_f32(p + "attn_norm.weight", config_.n_embd);
      L.ffn_norm = vector_f32(p + "ffn_norm.weight", config_.n_embd);
      bind_attention(p, L.attn, /*biases=*/false, /*qk_norm=*/true);
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

std::unique_ptr<Model> create_qwen3_model(std::unique_ptr<GgufFile> gguf, std::unique_ptr<Tokenizer> tok) {
  return std::make_unique<Qwen3Model>(std::move(gguf), std::move(tok));
}

}  // namespace infer
