#include "model/transformer.h"

#include <sys/mman.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "core/log.h"
#include "quant/dequant.h"

namespace infer {

Transformer::Transformer(std::unique_ptr<GgufFile> gguf, std::unique_ptr<Tokenizer> tok, bool vocab_only,
                         std::shared_ptr<TpGroup> tp) {
  if (tp && tp->size() > 1) {
    tp_ = std::move(tp);
    config_.tp_size = tp_->size();
    config_.tp_rank = tp_->rank();
  }
  gguf_ = std::move(gguf);
  tokenizer_ = std::move(tok);
  vocab_only_ = vocab_only;
  config_.arch = gguf_->get_string("general.architecture").value_or("llama");
  config_.name = gguf_->get_string("general.name").value_or("");
  config_.n_vocab = tokenizer_->n_vocab();
  for (const auto& t : gguf_->tensors()) {
    n_params_ += static_cast<uint64_t>(t.n_elements());
    n_bytes_ += t.nbytes;
  }
}

int32_t Transformer::get_dim(const char* suffix, int64_t fallback) const {
  std::optional<int64_t> v = gguf_->get_int(key(suffix));
  const int64_t x = v ? *v : fallback;
  if (x <= 0 || x > (1 << 24)) raise(Status::Format, "%s = %lld is out of range", key(suffix).c_str(), (long long)x);
  return static_cast<int32_t>(x);
}

float Transformer::get_float(const char* suffix, double fallback) const {
  const double v = gguf_->get_float(key(suffix)).value_or(fallback);
  if (!std::isfinite(v)) raise(Status::Format, "%s is not finite", key(suffix).c_str());
  return static_cast<float>(v);
}

void Transformer::read_shape() {
  ModelConfig& c = config_;
  c.n_embd = get_dim("embedding_length", 0);
  c.n_layer = get_dim("block_count", 0);
  c.n_head = get_dim("attention.head_count", 0);
  c.n_head_kv = get_dim("attention.head_count_kv", c.n_head);
  c.n_ff = get_dim("feed_forward_length", 0);
  c.n_ctx_train = get_dim("context_length", 2048);
  c.head_dim = get_dim("attention.key_length", c.n_embd / c.n_head);
  if (gguf_->find(key("attention.value_length")) && get_dim("attention.value_length", c.head_dim) != c.head_dim)
    raise(Status::Unsupported, "%s differs from the key length %d", key("attention.value_length").c_str(),
          c.head_dim);
  c.n_rot = get_dim("rope.dimension_count", c.head_dim);
  if (c.n_head % c.n_head_kv != 0)
    raise(Status::Format, "head_count %d is not a multiple of head_count_kv %d", c.n_head, c.n_head_kv);
  if (c.n_rot > c.head_dim || c.n_rot % 2 != 0)
    raise(Status::Format, "rope.dimension_count %d does not fit head size %d", c.n_rot, c.head_dim);
  c.rms_eps = static_cast<float>(gguf_->get_float(key("attention.layer_norm_rms_epsilon")).value_or(1e-5));
  c.rope_freq_base = static_cast<float>(gguf_->get_float(key("rope.freq_base")).value_or(10000.0));
  if (!(c.rms_eps > 0.0f) || !(c.rope_freq_base > 0.0f) || !std::isfinite(c.rope_freq_base))
    raise(Status::Format, "rms epsilon or rope frequency base out of range");
  // Mistral-style sliding-window attention, when the file declares it.
  if (gguf_->find(key("attention.sliding_window"))) c.sliding_window = get_dim("attention.sliding_window", 0);
  // Embedding models (engine/embed.h): how the file says to pool, and
  // whether attention looks both ways.
  c.causal = gguf_->get_bool(key("attention.causal")).value_or(true);
  if (gguf_->find(key("pooling_type"))) {
    const int64_t pt = gguf_->get_int(key("pooling_type")).value_or(-2);
    if (pt < 0 || pt > 4) raise(Status::Format, "%s = %lld is not a pooling type (0..4)", key("pooling_type").c_str(), (long long)pt);
    c.pooling = static_cast<int32_t>(pt);
  }
}

void Transformer::setup_rope(bool neox) {
  ModelConfig& c = config_;
  // infer.rope.neox: Q/K rows in the other pair layout than the
  // architecture's (set by the HF-directory loader for llama checkpoints,
  // whose Q/K rows are in rotate-half order).
  c.rope_neox = gguf_->get_bool("infer.rope.neox").value_or(neox);

  // Rotary inverse frequencies: theta_i = pos / base^(2i / n_rot), computed
  // in float like the reference implementations.
  const int half = c.n_rot / 2;
  inv_freq_.resize(half);
  for (int i = 0; i < half; ++i)
    inv_freq_[i] = 1.0f / std::pow(c.rope_freq_base, static_cast<float>(2 * i) / static_cast<float>(c.n_rot));

  // Rope scaling. "linear": positions divided by the factor. Llama 3.1+:
  // per-frequency divisors, stored as the rope_freqs.weight tensor (what
  // GGUF converters write; it wins when present) or derived from the llama3
  // parameters in the metadata. Phi-3 "longrope": per-frequency factors in
  // rope_factors_long/short.weight and an attention factor.
  const std::string type = gguf_->get_string(key("rope.scaling.type")).value_or("none");
  const double factor = gguf_->get_float(key("rope.scaling.factor")).value_or(1.0);
  const bool freqs_tensor = gguf_->find_tensor("rope_freqs.weight") != nullptr;
  if ((type == "linear" || type == "llama3") && !(factor > 0 && std::isfinite(factor)))
    raise(Status::Format, "rope.scaling.factor is %g: '%s' rope scaling needs a positive factor", factor, type.c_str());
  if (type == "linear") {
    c.rope_pos_scale = static_cast<float>(1.0 / factor);
    c.rope_scaling = "linear";
  } else if (type == "llama3" && !freqs_tensor) {
    const double low = gguf_->get_float(key("rope.scaling.low_freq_factor")).value_or(1.0);
    const double high = gguf_->get_float(key("rope.scaling.high_freq_factor")).value_or(4.0);
    const double orig = static_cast<double>(gguf_->get_int(key("rope.scaling.original_context_length")).value_or(8192));
    if (!(low > 0) || !(high > 0) || !(orig > 0))
      raise(Status::Format, "llama3 rope scaling needs positive frequency factors and original context length");
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
    c.rope_scaling = "llama3";
  } else if (type != "none" && type != "" && type != "llama3" && type != "longrope" && type != "su") {
    raise(Status::Unsupported, "rope scaling type '%s' is not supported", type.c_str());
  }
  if (freqs_tensor) {
    std::vector<float> f = vector_f32("rope_freqs.weight", half);
    for (int i = 0; i < half; ++i) {
      if (!(f[i] > 0.0f) || !std::isfinite(f[i])) raise(Status::Format, "rope_freqs.weight[%d] is not positive", i);
      inv_freq_[i] /= f[i];
    }
    c.rope_scaling = "llama3";
  }
  // Long-rope factors (Phi-3 128k): the long factors when the model's
  // context is longer than its original one (what llama.cpp does at the
  // trained context; Hugging Face switches by the sequence length), with the
  // attention factor sqrt(1 + ln(ctx / orig) / ln(orig)) unless the file
  // gives rope.scaling.attn_factor.
  const bool has_long = gguf_->find_tensor("rope_factors_long.weight") != nullptr;
  const bool has_short = gguf_->find_tensor("rope_factors_short.weight") != nullptr;
  if (has_long || has_short) {
    if (!has_long || !has_short)
      raise(Status::Format, "long-rope scaling needs both rope_factors_long.weight and rope_factors_short.weight");
    const int64_t orig = gguf_->get_int(key("rope.scaling.original_context_length")).value_or(c.n_ctx_train);
    if (orig <= 0) raise(Status::Format, "%s is not positive", key("rope.scaling.original_context_length").c_str());
    const bool use_long = c.n_ctx_train > orig;
    std::vector<float> f = vector_f32(use_long ? "rope_factors_long.weight" : "rope_factors_short.weight", half);
    for (int i = 0; i < half; ++i) {
      if (!(f[i] > 0.0f) || !std::isfinite(f[i])) raise(Status::Format, "rope factor %d is not positive", i);
      inv_freq_[i] /= f[i];
    }
    const double scale = static_cast<double>(c.n_ctx_train) / static_cast<double>(orig);
    double mscale = scale > 1.0 ? std::sqrt(1.0 + std::log(scale) / std::log(static_cast<double>(orig))) : 1.0;
    if (gguf_->find(key("rope.scaling.attn_factor"))) mscale = get_float("rope.scaling.attn_factor", 1.0);
    if (!(mscale > 0)) raise(Status::Format, "%s is not positive", key("rope.scaling.attn_factor").c_str());
    c.rope_mscale = static_cast<float>(mscale);
    c.rope_scaling = use_long ? "longrope (long factors)" : "longrope (short factors)";
  }
}

void Transformer::finish_config() {
  ModelConfig& c = config_;
  if (c.layer_window.empty()) c.layer_window.assign(static_cast<size_t>(c.n_layer), c.sliding_window);
  if (c.layer_window.size() != static_cast<size_t>(c.n_layer))
    raise(Status::Internal, "layer_window has %zu values for %d layers", c.layer_window.size(), c.n_layer);
  attn_scale_ = c.attn_scale > 0 ? c.attn_scale : 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  // This rank's share: whole heads (a query head's KV head stays on its
  // rank: both counts split alike), whole FFN units, a run of vocabulary rows.
  const int n = tp_size();
  // Fewer KV heads than ranks (multi-query and narrow grouped attention:
  // Gemma 2B has one): each rank keeps a copy of the one KV head its query
  // heads read, which needs the ranks to divide evenly among the KV heads.
  lkv_ = c.n_head_kv / n;
  kv_first_ = lkv_ * tp_rank();
  if (n > 1) {
    const bool replicate = c.n_head_kv % n != 0 && n % c.n_head_kv == 0;
    if (c.n_head % n != 0 || (c.n_head_kv % n != 0 && !replicate))
      raise(Status::Unsupported, "'%s' cannot be split %d ways: its %d attention heads must be a multiple of %d and "
            "its %d KV heads a multiple or a divisor of %d", c.arch.c_str(), n, c.n_head, n, c.n_head_kv, n);
    if (replicate) {
      lkv_ = 1;
      kv_first_ = tp_rank() / (n / c.n_head_kv);
    }
    if (c.n_ff % n != 0)
      raise(Status::Unsupported, "'%s' cannot be split %d ways: its %d FFN units are not a multiple of %d",
            c.arch.c_str(), n, c.n_ff, n);
  }
  lh_ = c.n_head / n;
  lff_ = c.n_ff / n;
  vocab_chunk_ = (static_cast<int64_t>(c.n_vocab) + n - 1) / n;
  vocab_first_ = vocab_chunk_ * tp_rank();
  vocab_n_ = std::min<int64_t>(vocab_chunk_, c.n_vocab - vocab_first_);
  if (vocab_n_ <= 0)
    raise(Status::Unsupported, "a vocabulary of %d tokens cannot be split %d ways", c.n_vocab, n);
  if (!(c.attn_softcap >= 0) || !(c.final_softcap >= 0) || !std::isfinite(c.attn_softcap) ||
      !std::isfinite(c.final_softcap))
    raise(Status::Format, "soft-capping values must be positive");
}

WeightView Transformer::weight(const std::string& name, int64_t n_in, int64_t n_out, bool required,
                               Split split) const {
  const GgufTensorInfo* t = gguf_->find_tensor(name);
  if (!t) {
    if (required) raise(Status::Format, "tensor '%s' is missing", name.c_str());
    return WeightView{};
  }
  if (t->dims.size() != 2 || t->dims[0] != n_in || t->dims[1] != n_out)
    raise(Status::Format, "tensor '%s' has shape %s, expected [%lld, %lld]", name.c_str(), gguf_dims_text(t->dims).c_str(),
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
  if (const GgufTensorInfo* pt = gguf_->find_tensor(name + ".perm")) {
    // Act-order GPTQ (lib/hf/hf_quant.cpp): the columns are the inputs in
    // the order perm gives. Copied (the file's bytes need not be aligned) and
    // checked to be a permutation, so the gather never reads out of range.
    if (pt->type != DType::I32 || pt->dims.size() != 1 || pt->dims[0] != n_in)
      raise(Status::Format, "tensor '%s.perm' is %s %s; an input permutation is i32 [%lld]", name.c_str(),
            dtype_name(pt->type), gguf_dims_text(pt->dims).c_str(), (long long)n_in);
    std::vector<int32_t> perm(static_cast<size_t>(n_in));
    std::memcpy(perm.data(), gguf_->tensor_data(*pt), perm.size() * 4);
    std::vector<uint8_t> seen(static_cast<size_t>(n_in), 0);
    for (int64_t j = 0; j < n_in; ++j) {
      const int32_t v = perm[static_cast<size_t>(j)];
      if (v < 0 || v >= n_in || seen[static_cast<size_t>(v)]++)
        raise(Status::Format, "tensor '%s.perm' is not a permutation of 0..%lld (value %d at %lld)", name.c_str(),
              (long long)n_in - 1, v, (long long)j);
    }
    for (const std::vector<int32_t>& q : perms_)
      if (q == perm) w.perm = q.data();
    if (!w.perm) w.perm = perms_.emplace_back(std::move(perm)).data();
  }
  w.cache = &caches_.emplace_back();  // repacked copies a backend makes live with the model
  return share(w, split, name);
}

WeightView Transformer::share(const WeightView& w, Split split, const std::string& name) const {
  const int n = tp_size(), r = tp_rank();
  if (split == Split::None || n == 1 || !w.data) return w;
  if (split == Split::Out) {
    if (w.n_out % n != 0)
      raise(Status::Unsupported, "tensor '%s' cannot be split %d ways: its %lld rows are not a multiple of %d",
            name.c_str(), n, (long long)w.n_out, n);
    return rows(w, w.n_out / n * r, w.n_out / n);
  }
  // Input columns: every row's run [r k, (r + 1) k) of k = n_in / N values,
  // copied out of the file (whole quantized blocks only), then the file's
  // pages of the whole tensor are given back so they do not count against
  // this rank's memory.
  const int64_t k = w.n_in / n;
  if (w.perm)
    raise(Status::Unsupported, "tensor '%s' cannot be split %d ways: its act-order input permutation mixes the "
          "columns of every rank", name.c_str(), n);
  const DTypeInfo* info = dtype_info(w.type);
  if (w.n_in % n != 0 || !info || !dtype_row_ok(w.type, k))
    raise(Status::Unsupported, "tensor '%s' (%s, %u values per block) cannot be split %d ways: %lld input columns "
          "per rank would cut a block", name.c_str(), dtype_name(w.type), info ? info->block : 0u, n,
          (long long)w.n_in / n);
  const bool w8 = w.type == DType::W8A8;  // one byte per value, the row scales apply to every part
  const size_t part = w8 ? static_cast<size_t>(k) : dtype_row_bytes(w.type, k);
  const size_t offset = part * static_cast<size_t>(r);
  OwnedBytes& buf = owned_.emplace_back(part * static_cast<size_t>(w.n_out));
  for (int64_t row = 0; row < w.n_out; ++row) std::memcpy(buf.data + part * row, w.row(row) + offset, part);
  gguf_->release(w.data, w.row_bytes * static_cast<size_t>(w.n_out));
  WeightView s = w;
  s.n_in = k;
  s.data = buf.data;
  s.row_bytes = part;
  s.cache = &caches_.emplace_back();
  return s;
}

Transformer::OwnedBytes::OwnedBytes(size_t n) : size(n) {
  if (n == 0) return;
  void* p = ::mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) raise(Status::OutOfMemory, "cannot allocate %zu bytes for a weight's share", n);
  data = static_cast<uint8_t*>(p);
}

void Transformer::OwnedBytes::free() {
  if (data) ::munmap(data, size);
  data = nullptr;
  size = 0;
}

std::vector<float> Transformer::share(const std::vector<float>& v) const {
  const int n = tp_size();
  if (n == 1 || v.empty()) return v;
  const size_t k = v.size() / static_cast<size_t>(n);
  const auto first = v.begin() + static_cast<std::ptrdiff_t>(k * static_cast<size_t>(tp_rank()));
  return std::vector<float>(first, first + static_cast<std::ptrdiff_t>(k));
}

WeightView Transformer::kv_share(const WeightView& w) const {
  if (tp_size() == 1 || !w.data) return w;
  return rows(w, static_cast<int64_t>(kv_first_) * config_.head_dim, static_cast<int64_t>(lkv_) * config_.head_dim);
}

std::vector<float> Transformer::kv_share(const std::vector<float>& v) const {
  if (tp_size() == 1 || v.empty()) return v;
  const auto first = v.begin() + static_cast<std::ptrdiff_t>(kv_first_) * config_.head_dim;
  return std::vector<float>(first, first + static_cast<std::ptrdiff_t>(lkv_) * config_.head_dim);
}

void Transformer::reduce(Pass& p, float* x, int64_t n) const {
  if (!tp_) return;
  tp_->check(tp_->comm().all_reduce_sum_f32(x, static_cast<size_t>(n)));
}

const float* Transformer::permuted(Pass& p, const WeightView& w, const float* in, int64_t m, int slot) const {
  if (!w.perm) return in;
  float* out = p.dws.get<float>(kSlotXperm + slot, m * w.n_in);
  p.be.permute_cols(in, m, w.n_in, w.perm, out);
  return out;
}

WeightView Transformer::rows(const WeightView& w, int64_t first, int64_t n) const {
  if (first < 0 || n <= 0 || first + n > w.n_out) raise(Status::Internal, "rows [%lld, +%lld) of a %lld-row matrix",
                                                        (long long)first, (long long)n, (long long)w.n_out);
  WeightView r = w;
  r.n_out = n;
  r.data = w.row(first);
  if (w.scale) r.scale = w.scale + first;
  r.cache = &caches_.emplace_back();
  return r;
}

std::vector<float> Transformer::vector_f32(const std::string& name, int64_t n, bool required) const {
  const GgufTensorInfo* t = gguf_->find_tensor(name);
  if (!t) {
    if (required) raise(Status::Format, "tensor '%s' is missing", name.c_str());
    return {};
  }
  if (t->n_elements() != n) raise(Status::Format, "tensor '%s' has %lld values, expected %lld", name.c_str(),
                                  (long long)t->n_elements(), (long long)n);
  if (!dtype_can_dequantize(t->type) || !dtype_row_ok(t->type, n))
    raise(Status::Unsupported, "tensor '%s' has type %s, which this build cannot read", name.c_str(), dtype_name(t->type));
  std::vector<float> out(static_cast<size_t>(n));
  dequantize_row(t->type, gguf_->tensor_data(*t), out.data(), n);
  return out;
}

void Transformer::bind_embeddings() {
  const ModelConfig& c = config_;
  if (c.n_embd == 0) raise(Status::Format, "model has no %s", key("embedding_length").c_str());
  tok_embd_ = weight("token_embd.weight", c.n_embd, c.n_vocab);
  if (tok_embd_.perm)
    raise(Status::Unsupported, "token_embd.weight has an input permutation (token_embd.weight.perm): an embedding "
          "cannot be stored with permuted columns");
  output_norm_ = vector_f32("output_norm.weight", c.n_embd);
  output_ = weight("output.weight", c.n_embd, c.n_vocab, /*required=*/false);
  config_.tied_embeddings = !output_.data;
  if (!output_.data) output_ = tok_embd_;  // tied embeddings
  // A lookup reads scattered rows: fault in only their pages (readahead
  // would bring most of the table into memory over a few hundred tokens).
  gguf_->advise_random(tok_embd_.data, tok_embd_.row_bytes * static_cast<size_t>(tok_embd_.n_out));
  // Tensor parallelism: this rank's run of vocabulary rows (the embedding
  // itself stays whole: a lookup reads only the rows of its tokens).
  if (tp_size() > 1) output_ = rows(output_, vocab_first_, vocab_n_);
}

void Transformer::bind_attention(const std::string& p, AttnWeights& a, bool biases, bool qk_norm) {
  const ModelConfig& c = config_;
  const int64_t q_dim = static_cast<int64_t>(c.n_head) * c.head_dim;
  const int64_t kv_dim = static_cast<int64_t>(c.n_head_kv) * c.head_dim;
  a.wq = weight(p + "attn_q.weight", c.n_embd, q_dim, true, Split::Out);
  a.wk = kv_share(weight(p + "attn_k.weight", c.n_embd, kv_dim));
  a.wv = kv_share(weight(p + "attn_v.weight", c.n_embd, kv_dim));
  a.wo = weight(p + "attn_output.weight", q_dim, c.n_embd, true, Split::In);
  if (biases) {
    a.bq = share(vector_f32(p + "attn_q.bias", q_dim));
    a.bk = kv_share(vector_f32(p + "attn_k.bias", kv_dim));
    a.bv = kv_share(vector_f32(p + "attn_v.bias", kv_dim));
  }
  if (qk_norm) {
    a.q_norm = vector_f32(p + "attn_q_norm.weight", c.head_dim);
    a.k_norm = vector_f32(p + "attn_k_norm.weight", c.head_dim);
  }
}

void Transformer::bind_ffn(const std::string& p, FfnWeights& f) {
  const ModelConfig& c = config_;
  f.gate = weight(p + "ffn_gate.weight", c.n_embd, c.n_ff, true, Split::Out);
  f.up = weight(p + "ffn_up.weight", c.n_embd, c.n_ff, true, Split::Out);
  f.down = weight(p + "ffn_down.weight", c.n_ff, c.n_embd, true, Split::In);
}

void Transformer::bind_each_layer(const std::function<void(const std::string& prefix, LayerWeights& L)>& bind) {
  const ModelConfig& c = config_;
  layers_.resize(c.n_layer);
  for (int l = 0; l < c.n_layer; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    LayerWeights& L = layers_[l];
    L.attn_norm = vector_f32(p + "attn_norm.weight", c.n_embd);
    L.ffn_norm = vector_f32(p + "ffn_norm.weight", c.n_embd);
    if (c.post_norms) {
      L.post_attn_norm = vector_f32(p + "post_attention_norm.weight", c.n_embd);
      L.post_ffn_norm = vector_f32(p + "post_ffw_norm.weight", c.n_embd);
    }
    bind(p, L);
    L.attn.window = c.layer_window[l];
  }
}

void Transformer::bind_layers(bool biases, bool qk_norm) {
  bind_each_layer([&](const std::string& p, LayerWeights& L) {
    bind_attention(p, L.attn, biases, qk_norm);
    bind_ffn(p, L.ffn);
  });
}

DenseTransformer::DenseTransformer(std::unique_ptr<GgufFile> gguf, std::unique_ptr<Tokenizer> tok, bool biases,
                                   bool qk_norm, Configure configure, std::shared_ptr<TpGroup> tp)
    : Transformer(std::move(gguf), std::move(tok), false, std::move(tp)) {
  read_shape();
  configure(*this);
  setup_rope(/*neox=*/true);
  finish_config();
  bind_embeddings();
  bind_layers(biases, qk_norm);
}

void Transformer::forward(const Batch& batch, KvCache& kv, Backend& be, Workspace& ws, float* logits,
                          const uint8_t* skip) const {
  if (config_.encoder_only) raise(Status::InvalidArgument, "'%s' is an embedding model: it does not generate", config_.arch.c_str());
  if (tp_ && tp_->leader()) tp_->announce_pass(batch, &kv, skip, config_.n_layer, /*encode=*/false, false);
  Pass p = begin(batch, &kv, be, ws);  // embeddings scaled by config.embed_scale
  if (p.m == 0) return;
  run_layers(p, skip);
  output(p, logits);  // final soft-cap: config
}

void Transformer::run_layers(Pass& p, const uint8_t* skip) const {
  Backend& be = p.be;
  const int64_t n = p.m * config_.n_embd;
  for (int l = 0; l < config_.n_layer; ++l) {
    if (skip && skip[l]) continue;  // the self-speculative draft
    const LayerWeights& L = layers_[l];
    norm(p, L.attn_norm, p.x, p.xb);
    attention(p, l, L.attn, p.xb, p.xb);  // window, soft-cap, scale: config and L.attn
    reduce(p, p.xb, n);                   // tensor parallelism: the heads' parts summed
    if (!L.post_attn_norm.empty()) norm(p, L.post_attn_norm, p.xb, p.xb);
    be.add(p.x, p.xb, n);
    norm(p, L.ffn_norm, p.x, p.xb);
    ffn(p, l, p.xb, p.xb);
    reduce(p, p.xb, n);  // the FFN units' parts
    if (!L.post_ffn_norm.empty()) norm(p, L.post_ffn_norm, p.xb, p.xb);
    be.add(p.x, p.xb, n);
  }
}

void Transformer::encode(const Batch& batch, Backend& be, Workspace& ws, float* out, bool rank) const {
  if (rank) raise(Status::InvalidArgument, "'%s' has no classifier head: it cannot rerank", config_.arch.c_str());
  if (tp_ && tp_->leader()) tp_->announce_pass(batch, nullptr, nullptr, config_.n_layer, /*encode=*/true, false);
  Pass p = begin(batch, nullptr, be, ws);
  if (p.m == 0) return;
  run_layers(p, nullptr);
  output_hidden(p, out);
}

void Transformer::for_each_weight(const std::function<void(const WeightView&)>& fn) const {
  for (const LayerWeights& l : layers_)
    for (const WeightView* w : {&l.attn.wq, &l.attn.wk, &l.attn.wv, &l.attn.wo, &l.ffn.gate, &l.ffn.up, &l.ffn.down})
      if (w->data) fn(*w);
  if (output_.data) fn(output_);
}

void Transformer::release_prepared(const std::function<bool(const WeightView&)>& held) {
  size_t bytes = 0;
  int n = 0, total = 0;
  for_each_weight([&](const WeightView& w) {
    ++total;
    if (!w.data || !held(w)) return;
    ++n;
    bytes += w.row_bytes * static_cast<size_t>(w.n_out);
    gguf_->release(w.data, w.row_bytes * static_cast<size_t>(w.n_out));
    for (OwnedBytes& b : owned_)
      if (b.data == w.data) b.free();  // a share copied at load
  });
  // Every other page read so far goes back too (the norms and biases read
  // at load, with the kernel's readahead around them); a page read later
  // comes back on demand.
  gguf_->release_all();
  log(LogLevel::Info, "model: %d of %d weights (%.1f MiB) now live only in the backend's layout", n, total,
      bytes / 1048576.0);
}

void Transformer::reserve_workspace(Workspace& ws, Backend& be, int64_t m) const {
  if (vocab_only_ || m <= 0) return;
  const ModelConfig& c = config_;
  const int64_t d = c.n_embd, q_dim = static_cast<int64_t>(lh_) * c.head_dim;  // this rank's heads
  const int64_t kv_dim = static_cast<int64_t>(lkv_) * c.head_dim;
  BackendWorkspace& dws = ws.on(be);
  dws.get<float>(kSlotX, m * d);
  dws.get<float>(kSlotXb, m * std::max(d, q_dim));
  dws.get<float>(kSlotQ, m * q_dim);
  dws.get<float>(kSlotK, m * kv_dim);
  dws.get<float>(kSlotV, m * kv_dim);
  dws.get<float>(kSlotAtt, m * q_dim);
  dws.get<float>(kSlotGate, m * lff_);
  dws.get<float>(kSlotUp, m * lff_);
  if (ws.tables.size() < static_cast<size_t>(m)) ws.tables.resize(static_cast<size_t>(m));
  if (!perms_.empty())  // act-order weights: their gathered inputs (permuted())
    for (int i = 0; i < 3; ++i) dws.get<float>(kSlotXperm + i, m * std::max({d, q_dim, static_cast<int64_t>(lff_)}));
}

Pass Transformer::begin(const Batch& batch, KvCache* kv, Backend& be, Workspace& ws) const {
  if (vocab_only_) raise(Status::InvalidArgument, "model was loaded with vocab_only: it cannot run");
  gguf().check_intact();  // a truncated mmapped file (any shard of an HF directory): Error(Io), not SIGBUS
  const ModelConfig& c = config_;
  const int64_t m = static_cast<int64_t>(batch.size());
  for (int64_t t = 0; t < m; ++t) {
    if (batch.tokens[t] < 0 || batch.tokens[t] >= c.n_vocab)
      raise(Status::InvalidArgument, "token id %d is out of range [0, %d)", batch.tokens[t], c.n_vocab);
    if (!kv) {
      if (batch.pos[t] < 0 || (t > 0 && batch.slot[t] == batch.slot[t - 1] && batch.pos[t] <= batch.pos[t - 1]))
        raise(Status::Internal, "encode batch token %lld: positions must rise within a sequence", (long long)t);
    } else if (!kv->has_sequence(batch.slot[t]) || batch.pos[t] < 0 || batch.pos[t] >= kv->capacity(batch.slot[t]))
      raise(Status::Internal, "batch token %lld has no KV room (slot %d, pos %d)", (long long)t, batch.slot[t],
            batch.pos[t]);
  }
  BackendWorkspace& dws = ws.on(be);
  Pass p{batch, kv, be, ws, dws, m, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, {}, {}};
  if (m == 0) return p;
  const int64_t d = c.n_embd, q_dim = static_cast<int64_t>(lh_) * c.head_dim;  // this rank's heads
  const int64_t kv_dim = static_cast<int64_t>(lkv_) * c.head_dim;
  p.x = dws.get<float>(kSlotX, m * d);
  p.xb = dws.get<float>(kSlotXb, m * std::max(d, q_dim));
  p.q = dws.get<float>(kSlotQ, m * q_dim);
  p.k = dws.get<float>(kSlotK, m * kv_dim);
  p.v = dws.get<float>(kSlotV, m * kv_dim);
  p.att = dws.get<float>(kSlotAtt, m * q_dim);
  p.gate = dws.get<float>(kSlotGate, m * lff_);
  p.up = dws.get<float>(kSlotUp, m * lff_);
  // The edge in: token ids (get_rows), positions and block tables (host
  // metadata, copied once per pass by a device backend).
  if (ws.tables.size() < static_cast<size_t>(m)) ws.tables.resize(static_cast<size_t>(m));
  const int32_t** tables = ws.tables.data();
  for (int64_t t = 0; t < m; ++t) tables[t] = kv ? kv->block_table(batch.slot[t]).data() : nullptr;
  p.ab = AttnBatch{m, batch.pos.data(), batch.slot.data(), c.sliding_window, tables, c.attn_softcap};
  p.rp = RopeParams{c.n_rot, c.rope_neox, inv_freq_.data(), c.rope_pos_scale, c.rope_mscale};
  be.upload_batch(p.ab);
  be.get_rows(tok_embd_, batch.tokens.data(), m, p.x);
  if (c.embed_scale != 1.0f) be.scale(p.x, m * d, c.embed_scale);
  return p;
}

void Transformer::attention(Pass& p, int layer, const AttnWeights& a, const float* in, float* out) const {
  const ModelConfig& c = config_;
  Backend& be = p.be;
  const int64_t m = p.m;
  const int64_t q_dim = static_cast<int64_t>(lh_) * c.head_dim;  // this rank's heads
  const int64_t kv_dim = static_cast<int64_t>(lkv_) * c.head_dim;
  // Act-order weights multiply x[perm]; q, k and v share one gathered copy
  // when their permutations are the same (as GPTQ's are: one input, one order).
  const float* xq = permuted(p, a.wq, in, m, 0);
  const float* xk = a.wk.perm == a.wq.perm ? xq : permuted(p, a.wk, in, m, 1);
  const float* xv = a.wv.perm == a.wq.perm ? xq : a.wv.perm == a.wk.perm ? xk : permuted(p, a.wv, in, m, 2);
  be.matmul(a.wq, xq, m, p.q);
  be.matmul(a.wk, xk, m, p.k);
  be.matmul(a.wv, xv, m, p.v);
  if (!a.bq.empty()) {
    be.add_bias(p.q, a.bq.data(), m, q_dim);
    be.add_bias(p.k, a.bk.data(), m, kv_dim);
    be.add_bias(p.v, a.bv.data(), m, kv_dim);
  }
  if (!a.q_norm.empty()) {  // per head: rows of head_dim values
    be.rms_norm(p.q, a.q_norm.data(), m * lh_, c.head_dim, c.rms_eps, p.q);
    be.rms_norm(p.k, a.k_norm.data(), m * lkv_, c.head_dim, c.rms_eps, p.k);
  }
  if (c.n_rot > 0) {  // Jamba's attention has no position encoding (n_rot 0)
    be.rope(p.q, m, lh_, c.head_dim, p.batch.pos.data(), p.rp);
    be.rope(p.k, m, lkv_, c.head_dim, p.batch.pos.data(), p.rp);
  }
  p.ab.window = a.window;
  if (!p.kv) {  // an encode pass: within the batch, no KV
    if (a.window > 0 || c.attn_softcap > 0)
      raise(Status::Unsupported, "embedding with sliding-window or soft-capped attention is not supported");
    be.attention_dense(p.q, p.k, p.v, p.ab, lh_, lkv_, c.head_dim, attn_scale_, c.causal, p.att);
  } else {
    be.kv_write(p.kv->memory(), layer, p.k, p.v, p.ab);
    be.attention(p.q, p.kv->memory(), layer, p.ab, lh_, attn_scale_, p.att);
  }
  linear(p, a.wo, p.att, m, out);
}

void Transformer::gated_ffn(Pass& p, const FfnWeights& f, const float* in, float* out) const {
  const ModelConfig& c = config_;
  Backend& be = p.be;
  const float* xg = permuted(p, f.gate, in, p.m, 0);
  const float* xu = f.up.perm == f.gate.perm ? xg : permuted(p, f.up, in, p.m, 1);
  be.matmul(f.gate, xg, p.m, p.gate);
  be.matmul(f.up, xu, p.m, p.up);
  if (c.ffn_act == "gelu")
    be.geglu(p.gate, p.up, p.gate, p.m * lff_);
  else
    be.swiglu(p.gate, p.up, p.gate, p.m * lff_);
  linear(p, f.down, p.gate, p.m, out);
}

void Transformer::output(Pass& p, float* logits) const {
  const ModelConfig& c = config_;
  const int64_t d = c.n_embd;
  // Only the rows whose logits are wanted go through the output head.
  const int64_t nr = static_cast<int64_t>(p.batch.logit_rows.size());
  if (nr == 0) return;
  float* rows = p.dws.get<float>(kSlotRows, nr * d);
  p.be.gather_rows(p.x, p.batch.logit_rows.data(), nr, d, rows);
  p.be.rms_norm(rows, output_norm_.data(), nr, d, c.rms_eps, rows);
  if (tp_) return output_shared(p, rows, nr, logits);
  // The edge out: on the CPU the head writes `logits` itself.
  const size_t bytes = sizeof(float) * static_cast<size_t>(nr) * static_cast<size_t>(c.n_vocab);
  float* out = static_cast<float*>(p.dws.output(kSlotLogits, logits, bytes));
  linear(p, output_, rows, nr, out);
  if (c.final_softcap > 0) p.be.softcap(out, nr * c.n_vocab, c.final_softcap);
  p.dws.download(logits, out, bytes);
}

void Transformer::output_shared(Pass& p, const float* rows, int64_t nr, float* logits) const {
  // Each rank's run of vocabulary rows, gathered: rank q's part of row i
  // is logits[i][q chunk, q chunk + its rows). Host memory (tensor
  // parallelism runs on the CPU backend).
  const int64_t V = config_.n_vocab, chunk = vocab_chunk_, n = tp_size();
  float* part = p.dws.get<float>(kSlotLogits, nr * chunk);
  linear(p, output_, rows, nr, part);  // [nr][vocab_n_]
  if (config_.final_softcap > 0) p.be.softcap(part, nr * vocab_n_, config_.final_softcap);
  if (vocab_n_ < chunk)  // the last rank's shorter run: rows restrided to the chunk, tails zeroed
    for (int64_t i = nr - 1; i >= 0; --i) {
      std::memmove(part + i * chunk, part + i * vocab_n_, sizeof(float) * static_cast<size_t>(vocab_n_));
      std::fill(part + i * chunk + vocab_n_, part + (i + 1) * chunk, 0.0f);
    }
  std::vector<float>& all = p.ws.gathered;
  all.resize(static_cast<size_t>(n * nr * chunk));
  Communicator& comm = tp_->comm();
  tp_->check(comm.all_gather(part, sizeof(float) * static_cast<size_t>(nr * chunk), all.data()));
  for (int64_t q = 0; q < n; ++q) {
    const int64_t first = q * chunk, cnt = std::min(chunk, V - first);
    for (int64_t i = 0; i < nr; ++i)
      std::memcpy(logits + i * V + first, all.data() + (q * nr + i) * chunk, sizeof(float) * static_cast<size_t>(cnt));
  }
}

void Transformer::output_hidden(Pass& p, float* out) const {
  const int64_t d = config_.n_embd;
  const int64_t nr = static_cast<int64_t>(p.batch.logit_rows.size());
  if (nr == 0) return;
  const size_t bytes = sizeof(float) * static_cast<size_t>(nr) * static_cast<size_t>(d);
  float* rows = static_cast<float*>(p.dws.output(kSlotLogits, out, bytes));
  p.be.gather_rows(p.x, p.batch.logit_rows.data(), nr, d, rows);
  p.be.rms_norm(rows, output_norm_.data(), nr, d, config_.rms_eps, rows);
  p.dws.download(out, rows, bytes);
}

}  // namespace infer
