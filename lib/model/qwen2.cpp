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
    bind_layers(/*biases=*/true, /*qk_norm=*/false);
  }
};

}  // namespace

std::unique_ptr<Model> create_qwen2_model(std::unique_ptr<GgufFile> gguf, std::unique_ptr<Tokenizer> tok) {
  return std::make_unique<Qwen2Model>(std::move(gguf), std::move(tok));
}

}  // namespace infer
