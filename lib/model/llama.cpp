// The `llama` architecture (Llama 1/2/3, TinyLlama, Mistral without sliding
// window), in the spirit of llama2.c: the math in plain sight.
//
//   x = embed(tokens)
//   for each layer:
//     h = rmsnorm(x) ; q, k, v = h·Wq, h·Wk, h·Wv ; rope(q, k)
//     x += attention(q, K, V) · Wo          (causal, GQA: kv head = head / group)
//     h = rmsnorm(x) ; x += (silu(h·Wgate) * (h·Wup)) · Wdown
//   logits = rmsnorm(x) · Wout              (Wout = embedding when absent)
#include <cmath>
#include <cstring>
#include <deque>

#include "core/error.h"
#include "core/fp16.h"
#include "model/model.h"
#include "quant/dequant.h"

namespace infer {

namespace {

struct Layer {
  std::vector<float> attn_norm, ffn_norm;
  WeightView wq, wk, wv, wo, w_gate, w_up, w_down;
};

class LlamaModel final : public Model {
 public:
  LlamaModel(std::unique_ptr<GgufFile> gguf, std::unique_ptr<Tokenizer> tok, bool vocab_only) {
    gguf_ = std::move(gguf);
    tokenizer_ = std::move(tok);
    vocab_only_ = vocab_only;
    read_config();
    for (const auto& t : gguf_->tensors()) {
      n_params_ += static_cast<uint64_t>(t.n_elements());
      n_bytes_ += t.nbytes;
    }
    if (!vocab_only_) bind_weights();
  }

  void forward(const Batch& batch, KvCache& kv, Backend& be, Workspace& ws, float* logits,
               const uint8_t* skip) const override;
  void reserve_workspace(Workspace& ws, int64_t rows) const override;

  void for_each_weight(const std::function<void(const WeightView&)>& fn) const override {
    for (const Layer& l : layers_)
      for (const WeightView* w : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down})
        if (w->data) fn(*w);
    if (output_.data) fn(output_);
  }

 private:
  std::string key(const char* suffix) const { return config_.arch + "." + suffix; }

  int32_t get_dim(const char* suffix, int64_t fallback) const {
    std::optional<int64_t> v = gguf_->get_int(key(suffix));
    const int64_t x = v ? *v : fallback;
    if (x <= 0 || x > (1 << 24)) raise(Status::Format, "%s = %lld is out of range", key(suffix).c_str(), (long long)x);
    return static_cast<int32_t>(x);
  }

  void read_config();
  void bind_weights();
  WeightView weight(const std::string& name, int64_t n_in, int64_t n_out, bool required = true) const;
  std::vector<float> vector_f32(const std::string& name, int64_t n) const;

  std::vector<Layer> layers_;
  mutable std::deque<WeightCache> caches_;  // one per bound weight (stable addresses)
  WeightView tok_embd_, output_;
  std::vector<float> output_norm_;
  std::vector<float> inv_freq_;  // rope: n_rot / 2 inverse frequencies
};

void LlamaModel::read_config() {
  ModelConfig& c = config_;
  c.arch = gguf_->get_string("general.architecture").value_or("llama");
  c.name = gguf_->get_string("general.name").value_or("");
  c.n_vocab = tokenizer_->n_vocab();
  if (vocab_only_ && (!gguf_->find(key("embedding_length")) || (c.arch != "llama" && c.arch != "mistral")))
    return;
  c.n_embd = get_dim("embedding_length", 0);
  c.n_layer = get_dim("block_count", 0);
  c.n_head = get_dim("attention.head_count", 0);
  c.n_head_kv = get_dim("attention.head_count_kv", c.n_head);
  c.n_ff = get_dim("feed_forward_length", 0);
  c.n_ctx_train = get_dim("context_length", 2048);
  c.head_dim = get_dim("attention.key_length", c.n_embd / c.n_head);
  c.n_rot = get_dim("rope.dimension_count", c.head_dim);
  if (c.n_head % c.n_head_kv != 0)
    raise(Status::Format, "head_count %d is not a multiple of head_count_kv %d", c.n_head, c.n_head_kv);
  if (c.n_rot > c.head_dim || c.n_rot % 2 != 0)
    raise(Status::Format, "rope.dimension_count %d does not fit head size %d", c.n_rot, c.head_dim);
  c.rms_eps = static_cast<float>(gguf_->get_float(key("attention.layer_norm_rms_epsilon")).value_or(1e-5));
  c.rope_freq_base = static_cast<float>(gguf_->get_float(key("rope.freq_base")).value_or(10000.0));
  if (!(c.rms_eps > 0.0f) || !(c.rope_freq_base > 0.0f) || !std::isfinite(c.rope_freq_base))
    raise(Status::Format, "rms epsilon or rope frequency base out of range");
  c.rope_neox = false;  // llama GGUF files store Q/K with interleaved rotary pairs
  // Mistral-style sliding-window attention, when the file declares it.
  if (gguf_->find(key("attention.sliding_window"))) c.sliding_window = get_dim("attention.sliding_window", 0);

  // Rotary inverse frequencies: theta_i = pos / base^(2i / n_rot), computed
  // in float like the reference implementations.
  const int half = c.n_rot / 2;
  inv_freq_.resize(half);
  for (int i = 0; i < half; ++i)
    inv_freq_[i] = 1.0f / std::pow(c.rope_freq_base, static_cast<float>(2 * i) / static_cast<float>(c.n_rot));

  // Rope scaling. "linear": positions divided by the factor. Llama 3.1:
  // per-frequency divisors, either stored as the rope_freqs.weight tensor or
  // derived from the llama3 parameters in the metadata.
  const std::string type = gguf_->get_string(key("rope.scaling.type")).value_or("none");
  const double factor = gguf_->get_float(key("rope.scaling.factor")).value_or(1.0);
  if ((type == "linear" || type == "llama3") && !(factor > 0 && std::isfinite(factor)))
    raise(Status::Format, "rope.scaling.factor is %g: '%s' rope scaling needs a positive factor", factor, type.c_str());
  if (type == "linear") {
    c.rope_pos_scale = static_cast<float>(1.0 / factor);
  } else if (type == "llama3") {
    const double low = gguf_->get_float(key("rope.scaling.low_freq_factor")).value_or(1.0);
    const double high = gguf_->get_float(key("rope.scaling.high_freq_factor")).value_or(4.0);
    const double orig = static_cast<double>(gguf_->get_int(key("rope.scaling.original_context_length")).value_or(8192));
    const double low_wavelen = orig / low, high_wavelen = orig / high;
    for (int i = 0; i < half; ++i) {
      const double wavelen = 2.0 * M_PI / inv_freq_[i];
      if (wavelen > low_wavelen) {
        inv_freq_[i] = static_cast<float>(inv_freq_[i] / factor);
      } else if (wavelen >= high_wavelen && high != low) {
        const double smooth = (orig / wavelen - low) / (high - low);
        inv_freq_[i] = static_cast<float>((1.0 - smooth) * inv_freq_[i] / factor + smooth * inv_freq_[i]);
      }
    }
  } else if (type != "none" && type != "") {
    raise(Status::Unsupported, "rope scaling type '%s' is not supported", type.c_str());
  }
  if (gguf_->find_tensor("rope_freqs.weight")) {
    std::vector<float> f = vector_f32("rope_freqs.weight", half);
    for (int i = 0; i < half; ++i) {
      if (!(f[i] > 0.0f)) raise(Status::Format, "rope_freqs.weight[%d] is not positive", i);
      inv_freq_[i] /= f[i];
    }
  }
}

WeightView LlamaModel::weight(const std::string& name, int64_t n_in, int64_t n_out, bool required) const {
  const GgufTensorInfo* t = gguf_->find_tensor(name);
  if (!t) {
    if (required) raise(Status::Format, "tensor '%s' is missing", name.c_str());
    return WeightView{};
  }
  if (t->dims.size() != 2 || t->dims[0] != n_in || t->dims[1] != n_out)
    raise(Status::Format, "tensor '%s' has shape %s, expected [%lld, %lld]", name.c_str(),
          [&] {
            std::string s = "[";
            for (size_t i = 0; i < t->dims.size(); ++i) s += (i ? ", " : "") + std::to_string(t->dims[i]);
            return s + "]";
          }().c_str(),
          (long long)n_in, (long long)n_out);
  if (!dtype_can_dequantize(t->type) && t->type != DType::W8A8)
    raise(Status::Unsupported, "tensor '%s' has type %s, which this build cannot compute with", name.c_str(),
          dtype_name(t->type));
  WeightView w;
  w.type = t->type;
  w.n_in = n_in;
  w.n_out = n_out;
  w.data = gguf_->tensor_data(*t);
  w.row_bytes = dtype_row_bytes(t->type, n_in);
  if (t->type == DType::W8A8) {
    // Per-row scales live in the companion tensor "<name>.scale" (core/dtype.h).
    const GgufTensorInfo* s = gguf_->find_tensor(name + ".scale");
    if (!s || s->type != DType::F32 || s->n_elements() != n_out)
      raise(Status::Format, "w8a8 tensor '%s' needs its scales '%s.scale' (f32, %lld values)", name.c_str(),
            name.c_str(), (long long)n_out);
    w.scale = reinterpret_cast<const float*>(gguf_->tensor_data(*s));
  }
  w.cache = &caches_.emplace_back();  // repacked copies a backend makes live with the model
  return w;
}

// A 1-D tensor as f32 (norm weights are tiny: converted once at load).
std::vector<float> LlamaModel::vector_f32(const std::string& name, int64_t n) const {
  const GgufTensorInfo* t = gguf_->find_tensor(name);
  if (!t) raise(Status::Format, "tensor '%s' is missing", name.c_str());
  if (t->n_elements() != n) raise(Status::Format, "tensor '%s' has %lld values, expected %lld", name.c_str(),
                                  (long long)t->n_elements(), (long long)n);
  if (!dtype_can_dequantize(t->type) || !dtype_row_ok(t->type, n))
    raise(Status::Unsupported, "tensor '%s' has type %s, which this build cannot read", name.c_str(), dtype_name(t->type));
  std::vector<float> out(static_cast<size_t>(n));
  dequantize_row(t->type, gguf_->tensor_data(*t), out.data(), n);
  return out;
}

void LlamaModel::bind_weights() {
  const ModelConfig& c = config_;
  if (c.n_embd == 0) raise(Status::Format, "model has no %s", key("embedding_length").c_str());
  const int64_t q_dim = static_cast<int64_t>(c.n_head) * c.head_dim;
  const int64_t kv_dim = static_cast<int64_t>(c.n_head_kv) * c.head_dim;
  tok_embd_ = weight("token_embd.weight", c.n_embd, c.n_vocab);
  output_norm_ = vector_f32("output_norm.weight", c.n_embd);
  output_ = weight("output.weight", c.n_embd, c.n_vocab, /*required=*/false);
  if (!output_.data) output_ = tok_embd_;  // tied embeddings
  layers_.resize(c.n_layer);
  for (int l = 0; l < c.n_layer; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    Layer& L = layers_[l];
    L.attn_norm = vector_f32(p + "attn_norm.weight", c.n_embd);
    L.ffn_norm = vector_f32(p + "ffn_norm.weight", c.n_embd);
    L.wq = weight(p + "attn_q.weight", c.n_embd, q_dim);
    L.wk = weight(p + "attn_k.weight", c.n_embd, kv_dim);
    L.wv = weight(p + "attn_v.weight", c.n_embd, kv_dim);
    L.wo = weight(p + "attn_output.weight", q_dim, c.n_embd);
    L.w_gate = weight(p + "ffn_gate.weight", c.n_embd, c.n_ff);
    L.w_up = weight(p + "ffn_up.weight", c.n_embd, c.n_ff);
    L.w_down = weight(p + "ffn_down.weight", c.n_ff, c.n_embd);
  }
}

template <typename T>
T* grow(std::vector<T>& v, size_t n) {
  if (v.size() < n) v.resize(n);
  return v.data();
}

void LlamaModel::reserve_workspace(Workspace& ws, int64_t m) const {
  if (vocab_only_ || m <= 0) return;
  const ModelConfig& c = config_;
  const int64_t d = c.n_embd, q_dim = static_cast<int64_t>(c.n_head) * c.head_dim;
  const int64_t kv_dim = static_cast<int64_t>(c.n_head_kv) * c.head_dim;
  grow(ws.x, m * d);
  grow(ws.xb, m * std::max(d, q_dim));
  grow(ws.q, m * q_dim);
  grow(ws.k, m * kv_dim);
  grow(ws.v, m * kv_dim);
  grow(ws.att, m * q_dim);
  grow(ws.gate, m * c.n_ff);
  grow(ws.up, m * c.n_ff);
  grow(ws.tables, m);
}

void LlamaModel::forward(const Batch& batch, KvCache& kv, Backend& be, Workspace& ws, float* logits,
                         const uint8_t* skip) const {
  if (vocab_only_) raise(Status::InvalidArgument, "model was loaded with vocab_only: it cannot run");
  gguf().file().check_intact();  // a truncated mmapped file: Error(Io), not SIGBUS
  const ModelConfig& c = config_;
  const int64_t m = static_cast<int64_t>(batch.size());
  if (m == 0) return;
  for (int64_t t = 0; t < m; ++t) {
    if (batch.tokens[t] < 0 || batch.tokens[t] >= c.n_vocab)
      raise(Status::InvalidArgument, "token id %d is out of range [0, %d)", batch.tokens[t], c.n_vocab);
    if (!kv.has_sequence(batch.slot[t]) || batch.pos[t] < 0 || batch.pos[t] >= kv.capacity(batch.slot[t]))
      raise(Status::Internal, "batch token %lld has no KV room (slot %d, pos %d)", (long long)t, batch.slot[t],
            batch.pos[t]);
  }
  const int64_t d = c.n_embd, q_dim = static_cast<int64_t>(c.n_head) * c.head_dim;
  const int64_t kv_dim = static_cast<int64_t>(c.n_head_kv) * c.head_dim;
  float* x = grow(ws.x, m * d);
  float* xb = grow(ws.xb, m * std::max(d, q_dim));
  float* q = grow(ws.q, m * q_dim);
  float* k = grow(ws.k, m * kv_dim);
  float* v = grow(ws.v, m * kv_dim);
  float* att = grow(ws.att, m * q_dim);
  float* gate = grow(ws.gate, m * c.n_ff);
  float* up = grow(ws.up, m * c.n_ff);

  const int32_t** tables = grow(ws.tables, m);
  for (int64_t t = 0; t < m; ++t) tables[t] = kv.block_table(batch.slot[t]).data();
  AttnBatch ab{m, batch.pos.data(), batch.slot.data(), c.sliding_window, tables};
  RopeParams rp{c.n_rot, c.rope_neox, inv_freq_.data(), c.rope_pos_scale};
  const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));

  be.get_rows(tok_embd_, batch.tokens.data(), m, x);
  for (int l = 0; l < c.n_layer; ++l) {
    if (skip && skip[l]) continue;
    const Layer& L = layers_[l];
    // Attention block.
    be.rms_norm(x, L.attn_norm.data(), m, d, c.rms_eps, xb);
    be.matmul(L.wq, xb, m, q);
    be.matmul(L.wk, xb, m, k);
    be.matmul(L.wv, xb, m, v);
    be.rope(q, m, c.n_head, c.head_dim, batch.pos.data(), rp);
    be.rope(k, m, c.n_head_kv, c.head_dim, batch.pos.data(), rp);
    be.kv_write(kv.memory(), l, k, v, ab);
    be.attention(q, kv.memory(), l, ab, c.n_head, scale, att);
    be.matmul(L.wo, att, m, xb);
    be.add(x, xb, m * d);
    // Feed-forward block (SwiGLU).
    be.rms_norm(x, L.ffn_norm.data(), m, d, c.rms_eps, xb);
    be.matmul(L.w_gate, xb, m, gate);
    be.matmul(L.w_up, xb, m, up);
    be.swiglu(gate, up, gate, m * c.n_ff);
    be.matmul(L.w_down, gate, m, xb);
    be.add(x, xb, m * d);
  }

  // Only the rows whose logits are wanted go through the output head.
  const int64_t nr = static_cast<int64_t>(batch.logit_rows.size());
  if (nr == 0) return;
  float* rows = grow(ws.rows, nr * d);
  for (int64_t i = 0; i < nr; ++i) std::memcpy(rows + i * d, x + batch.logit_rows[i] * d, sizeof(float) * d);
  be.rms_norm(rows, output_norm_.data(), nr, d, c.rms_eps, rows);
  be.matmul(output_, rows, nr, logits);
}

}  // namespace

std::unique_ptr<Model> create_llama_model(std::unique_ptr<GgufFile> gguf, std::unique_ptr<Tokenizer> tok,
                                          bool vocab_only) {
  return std::make_unique<LlamaModel>(std::move(gguf), std::move(tok), vocab_only);
}

}  // namespace infer
