// The `llama` architecture (Llama 1/2/3.x, TinyLlama, Mistral), in the
// spirit of llama2.c: the math in plain sight (blocks: transformer.h).
//
//   x = embed(tokens)
//   for each layer:
//     h = rmsnorm(x) ; q, k, v = h·Wq, h·Wk, h·Wv ; rope(q, k)
//     x += attention(q, K, V) · Wo          (causal, GQA: kv head = head / group;
//                                            Mistral: the last sliding_window positions)
//     h = rmsnorm(x) ; x += ffn(h)          (SwiGLU: (silu(h·Wgate) * (h·Wup)) · Wdown)
//   logits = rmsnorm(x) · Wout              (Wout = embedding when absent: Llama 3.2)
//
// Rope: interleaved pairs (GGUF llama files are converted to them; an HF
// directory's rotate-half rows come with infer.rope.neox), scaling linear or
// llama3 (rope_freqs.weight or the metadata's factors).
#include "core/error.h"
#include "model/moe.h"
#include "model/transformer.h"

namespace infer {

namespace {

class LlamaModel final : public Transformer {
 public:
  LlamaModel(std::unique_ptr<GgufFile> gguf, std::unique_ptr<Tokenizer> tok, bool vocab_only,
             std::shared_ptr<TpGroup> tp)
      : Transformer(std::move(gguf), std::move(tok), vocab_only, std::move(tp)) {
    // A vocabulary-only load of any architecture comes here: only the
    // tokenizer is used, and the shape is read when it is a llama one.
    const bool llama = config_.arch == "llama" || config_.arch == "mistral";
    if (vocab_only_ && (!gguf_->find(key("embedding_length")) || !llama)) return;
    read_shape();
    read_experts();
    setup_rope(/*neox=*/false);
    finish_config();
    if (!vocab_only_) bind();
  }

 private:
  void bind() {
    bind_embeddings();
    bind_each_layer([this](const std::string& p, LayerWeights& L) {
      bind_attention(p, L.attn, /*biases=*/false, /*qk_norm=*/false);
      if (config_.n_expert > 0) {
        moe_.push_back(bind_moe_ffn(*gguf_, p, config_.n_embd, config_.n_ff, config_.n_expert,
                                    config_.n_expert_used, [this] { return &caches_.emplace_back(); }));
        // Tensor parallelism: every expert split like a dense FFN (the
        // router stays whole: each rank routes every token alike).
        MoeFfn& f = moe_.back();
        f.n_ff = lff_;
        for (WeightView& w : f.gate) w = share(w, Split::Out, p + "ffn_gate_exps.weight");
        for (WeightView& w : f.up) w = share(w, Split::Out, p + "ffn_up_exps.weight");
        for (WeightView& w : f.down) w = share(w, Split::In, p + "ffn_down_exps.weight");
      } else {
        bind_ffn(p, L.ffn);
      }
    });
  }

  // Mixtral: llama.expert_count experts per layer, expert_used_count per token.
  void read_experts() {
    const std::optional<int64_t> e = gguf_->get_int(key("expert_count"));
    if (!e || *e == 0) return;  // a dense FFN (some files write 0)
    const std::optional<int64_t> k = gguf_->get_int(key("expert_used_count"));
    if (!k) raise(Status::Format, "%s is %lld but %s is missing", key("expert_count").c_str(), (long long)*e,
                  key("expert_used_count").c_str());
    check_moe_counts(*e, *k);
    config_.n_expert = static_cast<int32_t>(*e);
    config_.n_expert_used = static_cast<int32_t>(*k);
  }

  // The layer's feed-forward block: out = SwiGLU FFN of in (in may be out).
  // Mixtral's layers route each token to its experts (model/moe.h).
  void ffn(Pass& p, int layer, const float* in, float* out) const override {
    if (moe_.empty()) return gated_ffn(p, layers_[layer].ffn, in, out);
    moe_ffn_forward(moe_[layer], p.be, p.dws, kSlotMoe, in, p.m, out, p.ws.moe);
  }

 public:
  void for_each_weight(const std::function<void(const WeightView&)>& fn) const override {
    Transformer::for_each_weight(fn);
    for (const MoeFfn& f : moe_) f.for_each_weight(fn);
  }
  void reserve_workspace(Workspace& ws, Backend& be, int64_t rows) const override {
    Transformer::reserve_workspace(ws, be, rows);
    if (moe_.empty() || rows <= 0) return;
    moe_reserve(moe_[0], ws.on(be), kSlotMoe, rows, ws.moe);
  }

 private:
  std::vector<MoeFfn> moe_;  // one per layer when the model has experts
};

}  // namespace

std::unique_ptr<Model> create_llama_model(std::unique_ptr<GgufFile> gguf, std::unique_ptr<Tokenizer> tok,
                                          bool vocab_only, std::shared_ptr<TpGroup> tp) {
  return std::make_unique<LlamaModel>(std::move(gguf), std::move(tok), vocab_only, std::move(tp));
}

}  // namespace infer
