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

std::unique_ptr<Model> create_qwen2_model(std::unique_ptr<GgufFile> gguf, std::unique_ptr<Tokenizer> tok,
                                          std::shared_ptr<TpGroup> tp) {
  return std::make_unique<DenseTransformer>(std::move(gguf), std::move(tok), /*biases=*/true, /*qk_norm=*/false,
                                            [](DenseTransformer& t) { t.cfg().attn_bias = true; }, std::move(tp));
}

}  // namespace infer
