// The `phi3` architecture (Phi-3, Phi-3.5 mini): llama's layer with fused
// tensors and rotate-half RoPE, with Phi-3's long-rope scaling (128k
// models: per-frequency factors rope_factors_long/short.weight and an
// attention factor on cos and sin; transformer.cpp setup_rope).
//
//   x = embed(tokens)
//   for each layer:
//     h = rmsnorm(x) ; [q | k | v] = h·Wqkv ; rope_neox(q, k)      (attn_qkv: q_dim + 2 kv_dim rows)
//     x += attention(q, K, V) · Wo
//     h = rmsnorm(x) ; [g | u] = h·Wup ; x += (silu(g) * u) · Wdown  (ffn_up: 2 n_ff rows, gate first)
//   logits = rmsnorm(x) · Wout
//
// The fused matrices are bound as row ranges (views of the mmapped file),
// so each part is one matmul like llama's. Files with separate attn_q/k/v
// or ffn_gate tensors load too.
#include "model/transformer.h"

namespace infer {

namespace {

class Phi3Model final : public Transformer {
 public:
  Phi3Model(std::unique_ptr<GgufFile> gguf, std::unique_ptr<Tokenizer> tok, std::shared_ptr<TpGroup> tp)
      : Transformer(std::move(gguf), std::move(tok), false, std::move(tp)) {
    read_shape();
    setup_rope(/*neox=*/true);
    finish_config();
    bind_embeddings();
    const ModelConfig& c = config_;
    const int64_t q_dim = static_cast<int64_t>(c.n_head) * c.head_dim;
    const int64_t kv_dim = static_cast<int64_t>(c.n_head_kv) * c.head_dim;
    bind_each_layer([&](const std::string& p, LayerWeights& L) {
      if (gguf_->find_tensor(p + "attn_qkv.weight")) {
        // Tensor parallelism: this rank's heads of each part (share()).
        const WeightView qkv = weight(p + "attn_qkv.weight", c.n_embd, q_dim + 2 * kv_dim);
        L.attn.wq = share(rows(qkv, 0, q_dim), Split::Out, p + "attn_qkv.weight");
        L.attn.wk = kv_share(rows(qkv, q_dim, kv_dim));
        L.attn.wv = kv_share(rows(qkv, q_dim + kv_dim, kv_dim));
        L.attn.wo = weight(p + "attn_output.weight", q_dim, c.n_embd, true, Split::In);
      } else {
        bind_attention(p, L.attn, /*biases=*/false, /*qk_norm=*/false);
      }
      if (gguf_->find_tensor(p + "ffn_gate.weight")) {
        bind_ffn(p, L.ffn);
      } else {
        const WeightView up = weight(p + "ffn_up.weight", c.n_embd, 2 * static_cast<int64_t>(c.n_ff));
        L.ffn.gate = share(rows(up, 0, c.n_ff), Split::Out, p + "ffn_up.weight");
        L.ffn.up = share(rows(up, c.n_ff, c.n_ff), Split::Out, p + "ffn_up.weight");
        L.ffn.down = weight(p + "ffn_down.weight", c.n_ff, c.n_embd, true, Split::In);
      }
    });
  }
};

}  // namespace

std::unique_ptr<Model> create_phi3_model(std::unique_ptr<GgufFile> gguf, std::unique_ptr<Tokenizer> tok,
                                         std::shared_ptr<TpGroup> tp) {
  return std::make_unique<Phi3Model>(std::move(gguf), std::move(tok), std::move(tp));
}

}  // namespace infer
