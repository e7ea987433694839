// The `gemma2` architecture (Gemma 2): Gemma's layer with norms after the
// attention and the FFN too, soft-capped attention scores and logits,
// sliding-window attention on every other layer (even layers: the last
// sliding_window positions; odd layers: all), and its own query scale.
//
//   x = embed(tokens) * sqrt(n_embd)
//   for each layer l:
//     h = rmsnorm(x) ; q, k, v = h·Wq, h·Wk, h·Wv ; rope_neox(q, k)
//     s = softcap(q·K / sqrt(query_pre_attn_scalar), attn_logit_softcapping)  (window when l is even)
//     x += rmsnorm_post_attn(softmax(s) V · Wo)
//     h = rmsnorm(x) ; x += rmsnorm_post_ffw((gelu_tanh(h·Wgate) * (h·Wup)) · Wdown)
//   logits = softcap(rmsnorm(x) · Wembed, final_logit_softcapping)
//
// softcap(s, c) = c * tanh(s / c). Norm tensors hold 1 + w (see gemma.cpp).
// The query scale: GGUF has no key for Hugging Face's query_pre_attn_scalar;
// it is head_dim for Gemma 2 2B and 9B and n_embd / n_head for 27B (46
// layers), as llama.cpp decides it; a file may give it as
// gemma2.attention.query_pre_attn_scalar. Since layers differ, the engine
// keeps every KV block (config.sliding_window stays 0).
#include <cmath>

#include "core/error.h"
#include "model/transformer.h"

namespace infer {

std::unique_ptr<Model> create_gemma2_model(std::unique_ptr<GgufFile> gguf, std::unique_ptr<Tokenizer> tok,
                                          std::shared_ptr<TpGroup> tp) {
  const auto configure = [](DenseTransformer& t) {
    ModelConfig& c = t.cfg();
    c.ffn_act = "gelu";
    c.post_norms = true;
    c.embed_scale = std::sqrt(static_cast<float>(c.n_embd));
    c.attn_softcap = t.get_float("attn_logit_softcapping", 50.0);
    c.final_softcap = t.get_float("final_logit_softcapping", 30.0);
    const double qpas = t.file()
                            .get_float(t.key("attention.query_pre_attn_scalar"))
                            .value_or(c.n_layer == 46 ? static_cast<double>(c.n_embd) / c.n_head : c.head_dim);
    if (!(qpas > 0) || !std::isfinite(qpas)) raise(Status::Format, "query_pre_attn_scalar %g is not positive", qpas);
    c.attn_scale = static_cast<float>(1.0 / std::sqrt(qpas));
    const int32_t window = c.sliding_window > 0 ? c.sliding_window : 4096;
    c.sliding_window = 0;  // not every layer: the engine keeps all blocks
    c.layer_window.resize(c.n_layer);
    for (int l = 0; l < c.n_layer; ++l) c.layer_window[l] = l % 2 == 0 ? window : 0;
  };
  return std::make_unique<DenseTransformer>(std::move(gguf), std::move(tok), false, false, configure, std::move(tp));
}

}  // namespace infer
