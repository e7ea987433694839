// BERT-family encoders as the GGUF ecosystem writes them: `bert` (token,
// token-type and absolute position embeddings, post-LN blocks with biases,
// GELU) and `nomic-bert` (no position table but rotary Q/K, a fused QKV
// projection, SwiGLU, no biases). Both are embedding models: they have no
// language-model head and run only through encode() (engine/embed.h); a
// reranker adds the classifier head cls (dense + tanh) and cls.output.
//
//   x = LN_emb(word[tok] + type[t] (+ pos[p]))
//   per layer:  x = LN_attn(x + Wo · attention(x) + bo)      (both ways, within the sequence)
//               x = LN_out(x + ffn(x))                        (bert: down(gelu(up x + b)) + b;
//                                                              nomic: down(silu(gate x) * up x))
//   rank:       score = Wout · tanh(Wcls · x[CLS] + bcls) + bout
#include <cmath>
#include <memory>

#include "core/error.h"
#include "model/transformer.h"

namespace infer {

namespace {

struct EncoderLayer {
  WeightView wq, wk, wv, wo, up, gate, down;
  std::vector<float> bq, bk, bv, bo, bup, bdown;
  std::vector<float> attn_norm_w, attn_norm_b, out_norm_w, out_norm_b;
};

class Bert final : public Transformer {
 public:
  Bert(std::unique_ptr<GgufFile> gguf, std::unique_ptr<Tokenizer> tok, std::shared_ptr<TpGroup> tp)
      : Transformer(std::move(gguf), std::move(tok), false, std::move(tp)) {
    ModelConfig& c = config_;
    nomic_ = c.arch == "nomic-bert";
    read_shape();
    c.encoder_only = true;
    c.causal = file_bool("attention.causal", false);
    if (c.causal) raise(Status::Unsupported, "%s with causal attention is not supported", c.arch.c_str());
    c.norm_eps = get_float("attention.layer_norm_epsilon", 1e-12);
    if (!(c.norm_eps > 0)) raise(Status::Format, "%s must be positive", key("attention.layer_norm_epsilon").c_str());
    if (c.n_head_kv != c.n_head) raise(Status::Format, "%s has %d kv heads for %d heads", c.arch.c_str(), c.n_head_kv, c.n_head);
    if (c.head_dim * c.n_head != c.n_embd)
      raise(Status::Format, "%s: %d heads of %d do not make embedding_length %d", c.arch.c_str(), c.n_head, c.head_dim,
            c.n_embd);
    if (nomic_) setup_rope(/*neox=*/true);
    finish_config();
    bind();
  }

  void forward(const Batch&, KvCache&, Backend&, Workspace&, float*, const uint8_t*) const override {
    raise(Status::InvalidArgument, "'%s' is an embedding model: it does not generate (use infer_embed)",
          config_.arch.c_str());
  }

  void for_each_weight(const std::function<void(const WeightView&)>& fn) const override {
    for (const EncoderLayer& l : enc_)
      for (const WeightView* w : {&l.wq, &l.wk, &l.wv, &l.wo, &l.up, &l.gate, &l.down})
        if (w->data) fn(*w);
    if (cls_.data) fn(cls_);
    if (cls_out_.data) fn(cls_out_);
  }

  void encode(const Batch& batch, Backend& be, Workspace& ws, float* out, bool rank) const override {
    const ModelConfig& c = config_;
    if (rank && !cls_out_.data) raise(Status::InvalidArgument, "this %s model has no classifier head: it cannot rerank", c.arch.c_str());
    const int64_t m = static_cast<int64_t>(batch.size());
    if (!batch.types.empty() && batch.types.size() != batch.tokens.size())
      raise(Status::Internal, "batch has %zu token types for %zu tokens", batch.types.size(), batch.tokens.size());
    for (int64_t t = 0; t < m; ++t) {
      const int32_t ty = batch.types.empty() ? 0 : batch.types[t];
      if (ty < 0 || ty >= std::max<int32_t>(1, c.n_token_types))
        raise(Status::InvalidArgument, "token type %d is out of range [0, %d)", ty, std::max<int32_t>(1, c.n_token_types));
      if (pos_embd_.data && batch.pos[t] >= pos_embd_.n_out)
        raise(Status::InvalidArgument, "position %d is past the model's %lld positions", batch.pos[t],
              (long long)pos_embd_.n_out);
    }
    if (tp_ && tp_->leader()) tp_->announce_pass(batch, nullptr, nullptr, c.n_layer, /*encode=*/true, rank);
    Pass p = begin(batch, nullptr, be, ws);  // validates ids, sizes buffers, x = word embeddings
    if (m == 0) return;
    const int64_t d = c.n_embd;
    // Token types (all 0 when the batch gives none) and positions.
    if (tok_types_.data) {
      ws.ids.assign(static_cast<size_t>(m), 0);
      if (!batch.types.empty()) std::copy(batch.types.begin(), batch.types.end(), ws.ids.begin());
      be.get_rows(tok_types_, ws.ids.data(), m, p.xb);
      be.add(p.x, p.xb, m * d);
    }
    if (pos_embd_.data) {
      be.get_rows(pos_embd_, batch.pos.data(), m, p.xb);
      be.add(p.x, p.xb, m * d);
    }
    be.layer_norm(p.x, emb_norm_w_.data(), emb_norm_b_.data(), m, d, c.norm_eps, p.x);
    for (const EncoderLayer& L : enc_) {
      dense(p, L.wq, L.bq, p.x, m, p.q);
      dense(p, L.wk, L.bk, p.x, m, p.k);
      dense(p, L.wv, L.bv, p.x, m, p.v);
      if (nomic_) {
        be.rope(p.q, m, lh_, c.head_dim, batch.pos.data(), p.rp);
        be.rope(p.k, m, lh_, c.head_dim, batch.pos.data(), p.rp);
      }
      // lh_: this rank's heads (all of them in a single process); the
      // output projection's parts are summed before its bias is added.
      be.attention_dense(p.q, p.k, p.v, p.ab, lh_, lh_, c.head_dim, attn_scale_, /*causal=*/false, p.att);
      linear(p, L.wo, p.att, m, p.xb);
      reduce(p, p.xb, m * d);
      if (!L.bo.empty()) be.add_bias(p.xb, L.bo.data(), m, d);
      be.add(p.x, p.xb, m * d);
      be.layer_norm(p.x, L.attn_norm_w.data(), L.attn_norm_b.data(), m, d, c.norm_eps, p.x);
      if (nomic_) {
        linear(p, L.gate, p.x, m, p.gate);
        linear(p, L.up, p.x, m, p.up);
        be.swiglu(p.gate, p.up, p.gate, m * lff_);
      } else {
        dense(p, L.up, L.bup, p.x, m, p.gate);
        be.gelu(p.gate, m * lff_);
      }
      linear(p, L.down, p.gate, m, p.xb);
      reduce(p, p.xb, m * d);
      if (!L.bdown.empty()) be.add_bias(p.xb, L.bdown.data(), m, d);
      be.add(p.x, p.xb, m * d);
      be.layer_norm(p.x, L.out_norm_w.data(), L.out_norm_b.data(), m, d, c.norm_eps, p.x);
    }
    const int64_t nr = static_cast<int64_t>(batch.logit_rows.size());
    if (nr == 0) return;
    if (!rank) {
      const size_t bytes = sizeof(float) * static_cast<size_t>(nr * d);
      float* rows = static_cast<float*>(p.dws.output(kSlotLogits, out, bytes));
      be.gather_rows(p.x, batch.logit_rows.data(), nr, d, rows);
      p.dws.download(out, rows, bytes);
      return;
    }
    float* rows = p.dws.get<float>(kSlotRows, nr * d);
    be.gather_rows(p.x, batch.logit_rows.data(), nr, d, rows);
    float* hid = p.dws.get<float>(kSlotMoe, nr * d);
    const float* in = rows;
    if (cls_.data) {
      dense(p, cls_, cls_b_, rows, nr, hid);
      be.tanh(hid, nr * d);
      in = hid;
    }
    const size_t bytes = sizeof(float) * static_cast<size_t>(nr * c.n_cls_out);
    float* scores = static_cast<float*>(p.dws.output(kSlotLogits, out, bytes));
    dense(p, cls_out_, cls_out_b_, in, nr, scores);
    p.dws.download(out, scores, bytes);
  }

 private:
  bool file_bool(const char* suffix, bool fallback) const { return file().get_bool(key(suffix)).value_or(fallback); }
  const GgufFile& file() const { return *gguf_; }

  // out = in · Wᵀ (+ bias).
  void dense(Pass& p, const WeightView& w, const std::vector<float>& bias, const float* in, int64_t m, float* out) const {
    linear(p, w, in, m, out);
    if (!bias.empty()) p.be.add_bias(out, bias.data(), m, w.n_out);
  }

  void bind() {
    ModelConfig& c = config_;
    const int64_t d = c.n_embd, ff = c.n_ff;
    tok_embd_ = weight("token_embd.weight", d, c.n_vocab);
    if (const GgufTensorInfo* t = gguf_->find_tensor("token_types.weight")) {
      if (t->dims.size() != 2 || t->dims[0] != d || t->dims[1] < 1 || t->dims[1] > 16)
        raise(Status::Format, "tensor 'token_types.weight' has shape %s, expected [%lld, 1..16]",
              gguf_dims_text(t->dims).c_str(), (long long)d);
      c.n_token_types = static_cast<int32_t>(t->dims[1]);
      tok_types_ = weight("token_types.weight", d, c.n_token_types);
    }
    if (!nomic_) {
      const GgufTensorInfo* t = gguf_->find_tensor("position_embd.weight");
      if (!t) raise(Status::Format, "tensor 'position_embd.weight' is missing");
      if (t->dims.size() != 2 || t->dims[0] != d || t->dims[1] < 1)
        raise(Status::Format, "tensor 'position_embd.weight' has shape %s, expected [%lld, n_ctx]",
              gguf_dims_text(t->dims).c_str(), (long long)d);
      pos_embd_ = weight("position_embd.weight", d, t->dims[1]);
      if (c.n_ctx_train > pos_embd_.n_out) c.n_ctx_train = static_cast<int32_t>(pos_embd_.n_out);
    }
    emb_norm_w_ = vector_f32("token_embd_norm.weight", d);
    emb_norm_b_ = vector_f32("token_embd_norm.bias", d);
    enc_.resize(static_cast<size_t>(c.n_layer));
    for (int l = 0; l < c.n_layer; ++l) {
      const std::string b = "blk." + std::to_string(l) + ".";
      EncoderLayer& L = enc_[static_cast<size_t>(l)];
      if (nomic_) {
        // Tensor parallelism: each rank's heads and FFN units (share()).
        const std::string qkv_name = b + "attn_qkv.weight";
        const WeightView qkv = weight(qkv_name, d, 3 * d);
        L.wq = share(rows(qkv, 0, d), Split::Out, qkv_name);
        L.wk = kv_share(rows(qkv, d, d));
        L.wv = kv_share(rows(qkv, 2 * d, d));
        L.wo = weight(b + "attn_output.weight", d, d, true, Split::In);
        L.up = weight(b + "ffn_up.weight", d, ff, true, Split::Out);
        L.gate = weight(b + "ffn_gate.weight", d, ff, true, Split::Out);
        L.down = weight(b + "ffn_down.weight", ff, d, true, Split::In);
      } else {
        L.wq = weight(b + "attn_q.weight", d, d, true, Split::Out);
        L.wk = kv_share(weight(b + "attn_k.weight", d, d));
        L.wv = kv_share(weight(b + "attn_v.weight", d, d));
        L.wo = weight(b + "attn_output.weight", d, d, true, Split::In);
        L.bq = share(vector_f32(b + "attn_q.bias", d));
        L.bk = kv_share(vector_f32(b + "attn_k.bias", d));
        L.bv = kv_share(vector_f32(b + "attn_v.bias", d));
        L.bo = vector_f32(b + "attn_output.bias", d);
        L.up = weight(b + "ffn_up.weight", d, ff, true, Split::Out);
        L.down = weight(b + "ffn_down.weight", ff, d, true, Split::In);
        L.bup = share(vector_f32(b + "ffn_up.bias", ff));
        L.bdown = vector_f32(b + "ffn_down.bias", d);
      }
      L.attn_norm_w = vector_f32(b + "attn_output_norm.weight", d);
      L.attn_norm_b = vector_f32(b + "attn_output_norm.bias", d);
      L.out_norm_w = vector_f32(b + "layer_output_norm.weight", d);
      L.out_norm_b = vector_f32(b + "layer_output_norm.bias", d);
    }
    // The reranker's head.
    if (const GgufTensorInfo* t = gguf_->find_tensor("cls.output.weight")) {
      if (t->dims.size() != 2 || t->dims[0] != d || t->dims[1] < 1 || t->dims[1] > 4096)
        raise(Status::Format, "tensor 'cls.output.weight' has shape %s, expected [%lld, n_labels]",
              gguf_dims_text(t->dims).c_str(), (long long)d);
      c.n_cls_out = static_cast<int32_t>(t->dims[1]);
      cls_out_ = weight("cls.output.weight", d, c.n_cls_out);
      cls_out_b_ = vector_f32("cls.output.bias", c.n_cls_out, /*required=*/false);
      cls_ = weight("cls.weight", d, d, /*required=*/false);
      if (cls_.data) cls_b_ = vector_f32("cls.bias", d, /*required=*/false);
    }
    if (c.pooling == 4 && !cls_out_.data)
      raise(Status::Format, "%s says rank pooling but the file has no classifier head (cls.output.weight)",
            key("pooling_type").c_str());
  }

  bool nomic_ = false;
  std::vector<EncoderLayer> enc_;
  WeightView tok_types_, pos_embd_, cls_, cls_out_;
  std::vector<float> emb_norm_w_, emb_norm_b_, cls_b_, cls_out_b_;
};

}  // namespace

std::unique_ptr<Model> create_bert_model(std::unique_ptr<GgufFile> gguf, std::unique_ptr<Tokenizer> tok,
                                         std::shared_ptr<TpGroup> tp) {
  return std::make_unique<Bert>(std::move(gguf), std::move(tok), std::move(tp));
}

}  // namespace infer
