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

std::unique_ptr<Model> create_qwen3_model(std::unique_ptr<GgufFile> gguf, std::unique_ptr<Tokenizer> tok,
                                          std::shared_ptr<TpGroup> tp) {
  return std::make_unique<DenseTransformer>(std::move(gguf), std::move(tok), /*biases=*/false, /*qk_norm=*/true,
                                            [](DenseTransformer& t) { t.cfg().qk_norm = true; }, std::move(tp));
}

}  // namespace infer
