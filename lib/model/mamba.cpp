// mamba, mamba2 and jamba (model/mamba.h): the configuration read and
// checked against the tensors, the weights bound, and the forward pass as a
// loop over the blocks of transformer.h plus the state-space mixer, whose
// conv and scan run in the backend (Backend::ssm_conv, ssm_scan) on the
// state kept in the KV blocks.
#include "model/mamba.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "core/tls.h"
#include "model/moe.h"
#include "model/transformer.h"

namespace infer {

namespace {

// The mixer's buffers, from kSlotSsm.
enum : int { kIn = 0, kConv, kDtIn, kB, kC, kDt, kY };
static_assert(kY < kSsmSlots, "the state-space layers' workspace slots");

struct SsmLayer {
  int32_t index = 0;  // among the SSM layers (the KV pool's numbering)
  WeightView in, out;
  // Mamba-1: ssm_x split into its dt, B and C rows (three contiguous
  // outputs), and the dt projection.
  WeightView x_dt, x_b, x_c, dt;
  std::vector<float> conv_w, conv_b;  // [channels][d_conv], [channels]
  std::vector<float> dt_bias, A, D;
  std::vector<float> norm;                      // Mamba-2: the grouped norm's weight
  std::vector<float> dt_norm, b_norm, c_norm;   // Jamba (and Falcon-Mamba: ones): RMSNorm of dt, B, C
};

// Where a batch's sequence runs are kept between passes on one thread (the
// forward pass does not allocate once warmed up).
struct SsmRuns {
  std::vector<int32_t> row0, n_rows, pos0, slots;
  std::vector<const int32_t*> tables;
};

class MambaModel final : public Transformer {
 public:
  MambaModel(std::unique_ptr<GgufFile> gguf, std::unique_ptr<Tokenizer> tok, std::shared_ptr<TpGroup> tp)
      : Transformer(std::move(gguf), std::move(tok), /*vocab_only=*/false, std::move(tp)) {
    if (tp_) raise(Status::Unsupported, "state-space models cannot be split across ranks yet");
    v2_ = config_.arch == "mamba2";
    hybrid_ = config_.arch == "jamba";
    read_config();
    finish_config();
    bind();
  }

  void forward(const Batch& batch, KvCache& kv, Backend& be, Workspace& ws, float* logits,
               const uint8_t* skip) const override {
    if (skip)
      for (int l = 0; l < config_.n_layer; ++l)
        if (skip[l])
          raise(Status::Unsupported, "'%s' models cannot skip layers (self-speculative drafts): a skipped "
                "state-space layer would leave its recurrent state behind", config_.arch.c_str());
    Pass p = begin(batch, &kv, be, ws);
    if (p.m == 0) return;
    const SsmBatch sb = ssm_batch(p);
    const ModelConfig& c = config_;
    const int64_t n = p.m * c.n_embd;
    for (int l = 0; l < c.n_layer; ++l) {
      const LayerWeights& L = layers_[l];
      norm(p, L.attn_norm, p.x, p.xb);
      if (c.layer_ssm[l])
        mixer(p, sb, ssm_[l], p.xb, p.xb);
      else
        attention(p, kv_index_[l], L.attn, p.xb, p.xb);  // the KV pool numbers attention layers only
      be.add(p.x, p.xb, n);
      if (!hybrid_) continue;
      norm(p, L.ffn_norm, p.x, p.xb);
      ffn(p, l, p.xb, p.xb);
      be.add(p.x, p.xb, n);
    }
    output(p, logits);
  }

  void encode(const Batch&, Backend&, Workspace&, float*, bool) const override {
    raise(Status::Unsupported, "'%s' models cannot compute embeddings", config_.arch.c_str());
  }

  void for_each_weight(const std::function<void(const WeightView&)>& fn) const override {
    Transformer::for_each_weight(fn);
    for (const SsmLayer& s : ssm_)
      for (const WeightView* w : {&s.in, &s.x_dt, &s.x_b, &s.x_c, &s.dt, &s.out})
        if (w->data) fn(*w);
    for (const MoeFfn& f : moe_) f.for_each_weight(fn);
  }

  void reserve_workspace(Workspace& ws, Backend& be, int64_t rows) const override {
    Transformer::reserve_workspace(ws, be, rows);
    if (rows <= 0) return;
    BackendWorkspace& dws = ws.on(be);
    for (int i = kIn; i <= kY; ++i) dws.get<float>(kSlotSsm + i, rows * slot_width(i));
    for (const MoeFfn& f : moe_)
      if (!f.empty()) {
        moe_reserve(f, dws, kSlotMoe, rows, ws.moe);
        break;
      }
  }

 private:
  // ---- configuration ----

  // A dimension the architecture needs: Error(Format) naming the key when
  // it is absent or out of range.
  int32_t need(const char* suffix) const {
    if (!gguf_->find(key(suffix))) raise(Status::Format, "'%s' is missing", key(suffix).c_str());
    return get_dim(suffix, 0);
  }

  void read_config() {
    ModelConfig& c = config_;
    c.n_embd = need("embedding_length");
    c.n_layer = need("block_count");
    c.n_ctx_train = get_dim("context_length", 1 << 20);  // a recurrence has no trained limit; converters write 1M
    c.rms_eps = get_float("attention.layer_norm_rms_epsilon", 1e-5);
    if (!(c.rms_eps > 0.0f)) raise(Status::Format, "%s is not positive", key("attention.layer_norm_rms_epsilon").c_str());
    c.ssm_d_conv = need("ssm.conv_kernel");
    if (c.ssm_d_conv > 64)
      raise(Status::Format, "%s = %d is out of range [1, 64]", key("ssm.conv_kernel").c_str(), c.ssm_d_conv);
    c.ssm_d_inner = need("ssm.inner_size");
    c.ssm_d_state = need("ssm.state_size");
    c.ssm_dt_rank = need("ssm.time_step_rank");
    if (v2_) {
      c.ssm_n_group = need("ssm.group_count");
      c.ssm_n_head = c.ssm_dt_rank;
      if (c.ssm_d_inner % c.ssm_n_head != 0)
        raise(Status::Format, "%s = %d is not a multiple of the %d heads (%s)", key("ssm.inner_size").c_str(),
              c.ssm_d_inner, c.ssm_n_head, key("ssm.time_step_rank").c_str());
      if (c.ssm_n_head % c.ssm_n_group != 0)
        raise(Status::Format, "the %d heads (%s) are not a multiple of %s = %d", c.ssm_n_head,
              key("ssm.time_step_rank").c_str(), key("ssm.group_count").c_str(), c.ssm_n_group);
    } else {
      c.ssm_n_group = 1;
      c.ssm_n_head = c.ssm_d_inner;
    }
    // The state of one layer, and the convolved channels, must stay within
    // what a KV block can index.
    const int64_t channels = v2_ ? int64_t{c.ssm_d_inner} + 2 * int64_t{c.ssm_n_group} * c.ssm_d_state : c.ssm_d_inner;
    const int64_t state = int64_t{c.ssm_d_inner} * c.ssm_d_state;
    if (channels > (1 << 24) || state > (int64_t{1} << 31) / 4)
      raise(Status::Format, "%s = %d with %s = %d is too large a state", key("ssm.inner_size").c_str(), c.ssm_d_inner,
            key("ssm.state_size").c_str(), c.ssm_d_state);
    c.ssm_conv_channels = static_cast<int32_t>(channels);
    c.layer_ssm.assign(static_cast<size_t>(c.n_layer), 1);
    if (hybrid_) read_hybrid();
    dt_b_c_rms_ = gguf_->get_bool(key("ssm.dt_b_c_rms")).value_or(false);
  }

  // Jamba: heads, FFN, experts, and which layers attend (head_count_kv per layer).
  void read_hybrid() {
    ModelConfig& c = config_;
    c.n_head = need("attention.head_count");
    c.n_ff = need("feed_forward_length");
    if (c.n_embd % c.n_head != 0 && !gguf_->find(key("attention.key_length")))
      raise(Status::Format, "%s = %d is not a multiple of %s = %d", key("embedding_length").c_str(), c.n_embd,
            key("attention.head_count").c_str(), c.n_head);
    c.head_dim = get_dim("attention.key_length", c.n_embd / c.n_head);
    if (gguf_->find(key("attention.value_length")) && get_dim("attention.value_length", c.head_dim) != c.head_dim)
      raise(Status::Unsupported, "%s differs from the key length %d", key("attention.value_length").c_str(), c.head_dim);
    const std::string kv_key = key("attention.head_count_kv");
    const GgufValue* v = gguf_->find(kv_key);
    if (!v) raise(Status::Format, "'%s' is missing", kv_key.c_str());
    if (v->type != GgufType::Array)
      raise(Status::Format, "'%s' must be a per-layer array (0 marks a Mamba layer)", kv_key.c_str());
    const std::vector<int64_t> kv = gguf_->get_int_array(kv_key);
    if (kv.size() != static_cast<size_t>(c.n_layer))
      raise(Status::Format, "'%s' has %zu values for %d layers", kv_key.c_str(), kv.size(), c.n_layer);
    c.n_head_kv = 0;
    for (int l = 0; l < c.n_layer; ++l) {
      const int64_t h = kv[static_cast<size_t>(l)];
      if (h < 0 || h > c.n_head || (h > 0 && c.n_head % h != 0))
        raise(Status::Format, "'%s'[%d] = %lld does not divide the %d heads", kv_key.c_str(), l, (long long)h, c.n_head);
      c.layer_ssm[static_cast<size_t>(l)] = h == 0;
      if (h == 0) continue;
      if (c.n_head_kv != 0 && h != c.n_head_kv)
        raise(Status::Unsupported, "'%s': attention layers with different KV head counts (%d and %lld)",
              kv_key.c_str(), c.n_head_kv, (long long)h);
      c.n_head_kv = static_cast<int32_t>(h);
    }
    c.n_rot = 0;  // no position encoding: the Mamba layers carry order
    const std::optional<int64_t> e = gguf_->get_int(key("expert_count"));
    if (e && *e > 0) {
      const std::optional<int64_t> k = gguf_->get_int(key("expert_used_count"));
      if (!k) raise(Status::Format, "%s is %lld but %s is missing", key("expert_count").c_str(), (long long)*e,
                    key("expert_used_count").c_str());
      check_moe_counts(*e, *k);
      c.n_expert = static_cast<int32_t>(*e);
      c.n_expert_used = static_cast<int32_t>(*k);
    }
  }

  // ---- weights ----

  // A small tensor read as f32 (conv taps, biases, A, D, norms), with its
  // exact GGUF dims checked.
  std::vector<float> vec(const std::string& name, const std::vector<int64_t>& dims) const {
    const GgufTensorInfo* t = gguf_->find_tensor(name);
    if (!t) raise(Status::Format, "tensor '%s' is missing", name.c_str());
    if (t->dims != dims)
      raise(Status::Format, "tensor '%s' has shape %s, expected %s", name.c_str(), gguf_dims_text(t->dims).c_str(),
            gguf_dims_text(dims).c_str());
    int64_t n = 1;
    for (int64_t d : dims) n *= d;
    return vector_f32(name, n);
  }

  void bind() {
    const ModelConfig& c = config_;
    bind_embeddings();
    layers_.resize(static_cast<size_t>(c.n_layer));
    ssm_.resize(static_cast<size_t>(c.n_layer));
    kv_index_.assign(static_cast<size_t>(c.n_layer), -1);
    if (hybrid_) moe_.resize(static_cast<size_t>(c.n_layer));
    int32_t n_attn = 0, n_ssm = 0;
    for (int l = 0; l < c.n_layer; ++l) {
      const std::string p = "blk." + std::to_string(l) + ".";
      LayerWeights& L = layers_[static_cast<size_t>(l)];
      L.attn_norm = vector_f32(p + "attn_norm.weight", c.n_embd);
      if (c.layer_ssm[static_cast<size_t>(l)]) {
        SsmLayer& s = ssm_[static_cast<size_t>(l)];
        s.index = n_ssm++;
        if (v2_)
          bind_mamba2(p, s);
        else
          bind_mamba1(p, s);
      } else {
        bind_attention(p, L.attn, /*biases=*/false, /*qk_norm=*/false);
        kv_index_[static_cast<size_t>(l)] = n_attn++;
      }
      if (!hybrid_) continue;
      L.ffn_norm = vector_f32(p + "ffn_norm.weight", c.n_embd);
      if (gguf_->find_tensor(p + "ffn_gate_inp.weight")) {
        if (c.n_expert == 0)
          raise(Status::Format, "tensor '%sffn_gate_inp.weight' is present but %s is missing", p.c_str(),
                key("expert_count").c_str());
        MoeFfn& f = moe_[static_cast<size_t>(l)];
        f = bind_moe_ffn(*gguf_, p, c.n_embd, c.n_ff, c.n_expert, c.n_expert_used,
                         [this] { return &caches_.emplace_back(); });
        f.renormalize = false;  // Jamba weighs the chosen experts by their softmax over all
      } else {
        bind_ffn(p, L.ffn);
      }
    }
  }

  void bind_mamba1(const std::string& p, SsmLayer& s) {
    const ModelConfig& c = config_;
    const int64_t d = c.n_embd, di = c.ssm_d_inner, N = c.ssm_d_state, R = c.ssm_dt_rank, K = c.ssm_d_conv;
    s.in = weight(p + "ssm_in.weight", d, 2 * di);
    s.conv_w = vec(p + "ssm_conv1d.weight", {K, di});
    s.conv_b = vec(p + "ssm_conv1d.bias", {di});
    const WeightView x = weight(p + "ssm_x.weight", di, R + 2 * N);
    s.x_dt = rows(x, 0, R);
    s.x_b = rows(x, R, N);
    s.x_c = rows(x, R + N, N);
    s.dt = weight(p + "ssm_dt.weight", R, di);
    s.dt_bias = vec(p + "ssm_dt.bias", {di});
    s.A = vec(p + "ssm_a", {N, di});
    s.D = vec(p + "ssm_d", {di});
    s.out = weight(p + "ssm_out.weight", di, d);
    if (hybrid_) {
      s.dt_norm = vec(p + "ssm_dt_norm.weight", {R});
      s.b_norm = vec(p + "ssm_b_norm.weight", {N});
      s.c_norm = vec(p + "ssm_c_norm.weight", {N});
    } else if (dt_b_c_rms_) {  // Falcon-Mamba: the norms without weights
      s.dt_norm.assign(static_cast<size_t>(R), 1.0f);
      s.b_norm.assign(static_cast<size_t>(N), 1.0f);
      s.c_norm.assign(static_cast<size_t>(N), 1.0f);
    }
  }

  void bind_mamba2(const std::string& p, SsmLayer& s) {
    const ModelConfig& c = config_;
    const int64_t d = c.n_embd, di = c.ssm_d_inner, N = c.ssm_d_state, H = c.ssm_n_head, G = c.ssm_n_group;
    const int64_t K = c.ssm_d_conv, ch = c.ssm_conv_channels;
    s.in = weight(p + "ssm_in.weight", d, di + ch + H);
    s.conv_w = vec(p + "ssm_conv1d.weight", {K, ch});
    s.conv_b = vec(p + "ssm_conv1d.bias", {ch});
    s.dt_bias = vec(p + "ssm_dt.bias", {H});
    s.A = vec(p + "ssm_a", {1, H});
    s.D = vec(p + "ssm_d", {1, H});
    s.norm = vec(p + "ssm_norm.weight", {di / G, G});
    s.out = weight(p + "ssm_out.weight", di, d);
    (void)N;
  }

  // ---- forward ----

  // Floats per row of workspace slot i (from kSlotSsm).
  int64_t slot_width(int i) const {
    const ModelConfig& c = config_;
    const int64_t di = c.ssm_d_inner;
    switch (i) {
      case kIn: return v2_ ? di + c.ssm_conv_channels + c.ssm_n_head : 2 * di;
      case kConv: return c.ssm_conv_channels;
      case kDtIn: return v2_ ? 0 : c.ssm_dt_rank;
      case kB: case kC: return v2_ ? 0 : c.ssm_d_state;
      case kDt: return v2_ ? 0 : di;
      case kY: return di;
    }
    return 0;
  }

  float* buf(Pass& p, int i) const { return p.dws.get<float>(kSlotSsm + i, std::max<int64_t>(1, p.m * slot_width(i))); }

  // The batch's sequences as runs of consecutive rows (a sequence's rows
  // must be contiguous, at consecutive positions, and named once).
  SsmBatch ssm_batch(Pass& p) const {
    static thread_local SsmRuns* slot = nullptr;
    SsmRuns& r = tls_object(slot);
    r.row0.clear();
    r.n_rows.clear();
    r.pos0.clear();
    r.slots.clear();
    r.tables.clear();
    const Batch& b = p.batch;
    for (int64_t t = 0; t < p.m;) {
      const int32_t s = b.slot[static_cast<size_t>(t)];
      if (std::find(r.slots.begin(), r.slots.end(), s) != r.slots.end())
        raise(Status::Internal, "state-space batch: the rows of sequence slot %d are not contiguous (row %lld)", s,
              static_cast<long long>(t));
      int64_t e = t + 1;
      while (e < p.m && b.slot[static_cast<size_t>(e)] == s) {
        if (b.pos[static_cast<size_t>(e)] != b.pos[static_cast<size_t>(e - 1)] + 1)
          raise(Status::Internal, "state-space batch: sequence slot %d has position %d after %d (row %lld): "
                "positions must be consecutive", s, b.pos[static_cast<size_t>(e)], b.pos[static_cast<size_t>(e - 1)],
                static_cast<long long>(e));
        ++e;
      }
      r.slots.push_back(s);
      r.row0.push_back(static_cast<int32_t>(t));
      r.n_rows.push_back(static_cast<int32_t>(e - t));
      r.pos0.push_back(b.pos[static_cast<size_t>(t)]);
      r.tables.push_back(p.kv->block_table(s).data());
      t = e;
    }
    SsmBatch sb;
    sb.n_seqs = static_cast<int32_t>(r.row0.size());
    sb.row0 = r.row0.data();
    sb.n_rows = r.n_rows.data();
    sb.pos0 = r.pos0.data();
    sb.table = r.tables.data();
    return sb;
  }

  // out[m][n_embd] = the state-space mixer of `in` (out may be in: in is
  // read by the first projection only).
  void mixer(Pass& p, const SsmBatch& sb, const SsmLayer& s, const float* in, float* out) const {
    const ModelConfig& c = config_;
    Backend& be = p.be;
    KvMemory& kvm = p.kv->memory();
    const int64_t m = p.m, di = c.ssm_d_inner, N = c.ssm_d_state, K = c.ssm_d_conv;
    const int64_t ch = c.ssm_conv_channels;
    float* proj = buf(p, kIn);
    float* conv = buf(p, kConv);
    float* y = buf(p, kY);
    linear(p, s.in, in, m, proj);
    SsmScanParams sp;
    sp.d_state = N;
    sp.y = y;
    sp.dt_bias = s.dt_bias.data();
    sp.A = s.A.data();
    sp.D = s.D.data();
    if (!v2_) {
      // [x | z]: the conv runs on x; z gates the scan's output.
      be.ssm_conv(kvm, s.index, sb, proj, 2 * di, di, static_cast<int>(K), s.conv_w.data(), s.conv_b.data(), conv);
      float* r = buf(p, kDtIn);
      float* B = buf(p, kB);
      float* C = buf(p, kC);
      float* dt = buf(p, kDt);
      linear(p, s.x_dt, conv, m, r);
      linear(p, s.x_b, conv, m, B);
      linear(p, s.x_c, conv, m, C);
      if (!s.dt_norm.empty()) {  // contiguous rows: normalized in place
        be.rms_norm_groups(r, c.ssm_dt_rank, s.dt_norm.data(), m, 1, c.ssm_dt_rank, c.rms_eps, r);
        be.rms_norm_groups(B, N, s.b_norm.data(), m, 1, N, c.rms_eps, B);
        be.rms_norm_groups(C, N, s.c_norm.data(), m, 1, N, c.rms_eps, C);
      }
      linear(p, s.dt, r, m, dt);
      sp.n_head = di;
      sp.head_dim = 1;
      sp.n_group = 1;
      sp.x = conv, sp.x_stride = di;
      sp.dt = dt, sp.dt_stride = di;
      sp.B = B, sp.b_stride = N;
      sp.C = C, sp.c_stride = N;
      sp.z = proj + di, sp.z_stride = 2 * di;
      sp.a_per_state = true;
      be.ssm_scan(kvm, s.index, sb, sp);
    } else {
      // [z | xBC | dt]: the conv runs on xBC, then splits into [x | B | C].
      const int64_t H = c.ssm_n_head, G = c.ssm_n_group, width = slot_width(kIn);
      be.ssm_conv(kvm, s.index, sb, proj + di, width, ch, static_cast<int>(K), s.conv_w.data(), s.conv_b.data(), conv);
      sp.n_head = H;
      sp.head_dim = di / H;
      sp.n_group = G;
      sp.x = conv, sp.x_stride = ch;
      sp.B = conv + di, sp.b_stride = ch;
      sp.C = conv + di + G * N, sp.c_stride = ch;
      sp.dt = proj + di + ch, sp.dt_stride = width;
      sp.z = proj, sp.z_stride = width;
      sp.a_per_state = false;
      be.ssm_scan(kvm, s.index, sb, sp);
      be.rms_norm_groups(y, di, s.norm.data(), m, G, di / G, c.rms_eps, y);
    }
    linear(p, s.out, y, m, out);
  }

  void ffn(Pass& p, int layer, const float* in, float* out) const override {
    const MoeFfn& f = moe_[static_cast<size_t>(layer)];
    if (f.empty()) return gated_ffn(p, layers_[static_cast<size_t>(layer)].ffn, in, out);
    moe_ffn_forward(f, p.be, p.dws, kSlotMoe, in, p.m, out, p.ws.moe);
  }

  bool v2_ = false, hybrid_ = false, dt_b_c_rms_ = false;
  std::vector<SsmLayer> ssm_;      // per layer (used where config.layer_ssm says)
  std::vector<int32_t> kv_index_;  // per layer: its attention KV layer (-1: an SSM layer)
  std::vector<MoeFfn> moe_;        // jamba: per layer (empty: a dense FFN)
};

}  // namespace

std::unique_ptr<Model> create_mamba_model(std::unique_ptr<GgufFile> gguf, std::unique_ptr<Tokenizer> tok,
                                          std::shared_ptr<TpGroup> tp) {
  return std::make_unique<MambaModel>(std::move(gguf), std::move(tok), std::move(tp));
}

}  // namespace infer
