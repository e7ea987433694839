// Test helper: one random state-space model (Mamba, Mamba-2 or a Jamba
// hybrid) written twice from the same arrays: as a Hugging Face checkpoint
// (config.json, model.safetensors, tokenizer.json) in the layout the
// transformers classes save, and as an F32 GGUF in the layout the GGUF
// converters write (FACTS: A = -exp(A_log), conv1d [channels, 1, d_conv] ->
// {d_conv, channels}, Mamba-2 A/D {1, n_head} and norm {d_inner/n_group,
// n_group}, Jamba experts stacked, head_count_kv per layer). Written from the
// formats' descriptions, independently of lib/hf's reader.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "gguf/gguf.h"
#include "hf_writer.h"
#include "tokenizer/tokenizer.h"

namespace infer_test {

struct SsmSpec {
  std::string arch = "mamba";  // mamba, mamba2, jamba
  int n_embd = 32, n_layer = 2, d_state = 8, d_conv = 4, expand = 2;
  int dt_rank = 0;                // 0: written as "auto" (ceil(n_embd / 16))
  int head_dim = 8, n_group = 2;  // mamba2
  int n_head = 4, n_head_kv = 2, n_ff = 48, n_expert = 4, n_expert_used = 2;  // jamba
  int attn_period = 2, attn_offset = 1, expert_period = 2, expert_offset = 0;  // jamba
  bool tied = false;              // no lm_head
  int n_ctx = 0;                  // max_position_embeddings (0: 4096 for jamba, none for mamba)
  float eps = 1e-5f;
  uint64_t seed = 7;
};

struct SsmWriteOptions {
  std::string dtype = "F32";  // the checkpoint's dtype (F32, F16, BF16); the GGUF is F32 always
  bool conv_2d = false;       // conv1d weights stored squeezed [channels, d_conv]
  // Edits before writing: drop a tensor (return false) or change it; change
  // config.json's entries (key -> JSON text; erase to drop one).
  std::function<bool(StTensor&)> edit_tensor;
  std::function<void(std::map<std::string, std::string>&)> edit_config;
};

inline int ssm_dt_rank(const SsmSpec& s) { return s.dt_rank > 0 ? s.dt_rank : (s.n_embd + 15) / 16; }
inline bool jamba_attn(const SsmSpec& s, int l) { return l % s.attn_period == s.attn_offset; }
inline bool jamba_moe(const SsmSpec& s, int l) { return s.n_expert > 1 && l % s.expert_period == s.expert_offset; }

// config.json (the transformers class's keys for the spec), tokenizer.json
// and tokenizer_config.json.
inline void write_ssm_hf_config(const SsmSpec& s, const infer::Vocab& vocab, const std::string& hf_dir,
                                const std::function<void(std::map<std::string, std::string>&)>& edit_config) {
  const int V = vocab.size(), E = s.n_embd, Di = s.expand * s.n_embd, S = s.d_state, Dc = s.d_conv;
  const int G = s.n_group, H = Di / s.head_dim;
  const bool m2 = s.arch == "mamba2", jamba = s.arch == "jamba";
  auto num = [](double x) {
    char b[64];
    std::snprintf(b, sizeof b, "%.9g", x);
    return std::string(b);
  };
  std::map<std::string, std::string> cfg;
  const char* cls = jamba ? "JambaForCausalLM" : m2 ? "Mamba2ForCausalLM" : "MambaForCausalLM";
  cfg["architectures"] = std::string("[\"") + cls + "\"]";
  cfg["model_type"] = json_str(s.arch);
  cfg["hidden_size"] = std::to_string(E);
  cfg["num_hidden_layers"] = std::to_string(s.n_layer);
  cfg["vocab_size"] = std::to_string(V);
  cfg["tie_word_embeddings"] = s.tied ? "true" : "false";
  cfg["torch_dtype"] = "\"float32\"";
  if (vocab.bos >= 0) cfg["bos_token_id"] = std::to_string(vocab.bos);
  if (vocab.eos >= 0) cfg["eos_token_id"] = std::to_string(vocab.eos);
  const std::string rank = s.dt_rank > 0 ? std::to_string(s.dt_rank) : "\"auto\"";
  if (jamba) {
    cfg["intermediate_size"] = std::to_string(s.n_ff);
    cfg["num_attention_heads"] = std::to_string(s.n_head);
    cfg["num_key_value_heads"] = std::to_string(s.n_head_kv);
    cfg["max_position_embeddings"] = std::to_string(s.n_ctx > 0 ? s.n_ctx : 4096);
    cfg["rms_norm_eps"] = num(s.eps);
    cfg["mamba_d_state"] = std::to_string(S);
    cfg["mamba_d_conv"] = std::to_string(Dc);
    cfg["mamba_expand"] = std::to_string(s.expand);
    cfg["mamba_dt_rank"] = rank;
    cfg["mamba_conv_bias"] = "true";
    cfg["mamba_proj_bias"] = "false";
    cfg["num_experts"] = std::to_string(s.n_expert);
    cfg["num_experts_per_tok"] = std::to_string(s.n_expert_used);
    cfg["attn_layer_period"] = std::to_string(s.attn_period);
    cfg["attn_layer_offset"] = std::to_string(s.attn_offset);
    cfg["expert_layer_period"] = std::to_string(s.expert_period);
    cfg["expert_layer_offset"] = std::to_string(s.expert_offset);
  } else {
    cfg["state_size"] = std::to_string(S);
    cfg["conv_kernel"] = std::to_string(Dc);
    cfg["expand"] = std::to_string(s.expand);
    cfg["layer_norm_epsilon"] = num(s.eps);
    cfg["time_step_rank"] = rank;
    cfg["use_bias"] = "false";
    cfg["use_conv_bias"] = "true";
    if (s.n_ctx > 0) cfg["max_position_embeddings"] = std::to_string(s.n_ctx);
    if (m2) {
      cfg["num_heads"] = std::to_string(H);
      cfg["head_dim"] = std::to_string(s.head_dim);
      cfg["n_groups"] = std::to_string(G);
      cfg["rms_norm"] = "true";
    } else {
      cfg["intermediate_size"] = std::to_string(Di);
    }
  }
  if (edit_config) edit_config(cfg);
  std::string cj = "{";
  for (const auto& [k, v] : cfg) cj += (cj.size() > 1 ? "," : "") + json_str(k) + ":" + v;
  write_text_file(hf_dir + "/config.json", cj + "}");
  auto [tj, tc] = vocab_to_hf(vocab);
  write_text_file(hf_dir + "/tokenizer.json", tj);
  write_text_file(hf_dir + "/tokenizer_config.json", tc);
}

// Writes `hf_dir` (must exist) and, when gguf_path is not empty, the GGUF.
// The vocabulary (tokenizer.ggml.* keys) comes from `vocab_src`.
inline void write_ssm_model(const SsmSpec& s, const infer::GgufFile& vocab_src, const std::string& hf_dir,
                            const std::string& gguf_path, const SsmWriteOptions& o = {}) {
  using namespace infer;
  const Vocab vocab = Vocab::from_gguf(vocab_src);
  const int V = vocab.size(), E = s.n_embd, Di = s.expand * s.n_embd, S = s.d_state, Dc = s.d_conv;
  const int R = ssm_dt_rank(s), G = s.n_group, H = Di / s.head_dim, C2 = Di + 2 * G * S;
  const bool m2 = s.arch == "mamba2", jamba = s.arch == "jamba";
  std::mt19937_64 rng(s.seed);
  auto uni = [&](size_t n, float lo, float hi) {
    std::uniform_real_distribution<float> d(lo, hi);
    std::vector<float> v(n);
    for (float& x : v) x = d(rng);
    return v;
  };
  auto mat = [&](int rows, int cols, float gain = 1.0f) {  // [rows][cols], std ~ gain / sqrt(cols)
    const float a = gain * std::sqrt(3.0f / static_cast<float>(cols));
    return uni(static_cast<size_t>(rows) * cols, -a, a);
  };

  struct T {
    std::string hf;
    std::vector<int64_t> hf_shape;
    std::vector<float> data;
    std::string gguf;  // "" : not written to the GGUF on its own (experts)
    std::vector<int64_t> dims;
    bool neg_exp = false;
  };
  std::vector<T> ts;
  auto add = [&](std::string hf, std::vector<int64_t> shape, std::vector<float> data, std::string gguf,
                 std::vector<int64_t> dims, bool neg_exp = false) {
    ts.push_back({std::move(hf), std::move(shape), std::move(data), std::move(gguf), std::move(dims), neg_exp});
  };
  auto norm = [&](int n) { return uni(static_cast<size_t>(n), 0.8f, 1.2f); };
  const std::string top = jamba ? "model." : "backbone.";
  add(jamba ? "model.embed_tokens.weight" : "backbone.embeddings.weight", {V, E}, uni(size_t(V) * E, -1.0f, 1.0f),
      "token_embd.weight", {E, V});
  add(jamba ? "model.final_layernorm.weight" : "backbone.norm_f.weight", {E}, norm(E), "output_norm.weight", {E});
  if (!s.tied) add("lm_head.weight", {V, E}, mat(V, E, 2.0f), "output.weight", {E, V});
  // Jamba experts: per expert in HF, stacked in the GGUF.
  std::map<std::string, std::vector<float>> stacked;
  for (int l = 0; l < s.n_layer; ++l) {
    const std::string blk = "blk." + std::to_string(l) + ".";
    const std::string P = jamba ? "model.layers." + std::to_string(l) + "." : "backbone.layers." + std::to_string(l) + ".";
    const bool attn = jamba && jamba_attn(s, l);
    add(P + (jamba ? "input_layernorm.weight" : "norm.weight"), {E}, norm(E), blk + "attn_norm.weight", {E});
    if (attn) {
      const int hd = E / s.n_head;
      add(P + "self_attn.q_proj.weight", {s.n_head * hd, E}, mat(s.n_head * hd, E), blk + "attn_q.weight", {E, s.n_head * hd});
      add(P + "self_attn.k_proj.weight", {s.n_head_kv * hd, E}, mat(s.n_head_kv * hd, E), blk + "attn_k.weight",
          {E, s.n_head_kv * hd});
      add(P + "self_attn.v_proj.weight", {s.n_head_kv * hd, E}, mat(s.n_head_kv * hd, E), blk + "attn_v.weight",
          {E, s.n_head_kv * hd});
      add(P + "self_attn.o_proj.weight", {E, s.n_head * hd}, mat(E, s.n_head * hd, 0.5f), blk + "attn_output.weight",
          {s.n_head * hd, E});
    } else {
      const std::string X = P + (jamba ? "mamba." : "mixer.");
      const int ch = m2 ? C2 : Di, in_rows = m2 ? 2 * Di + 2 * G * S + H : 2 * Di;
      add(X + "in_proj.weight", {in_rows, E}, mat(in_rows, E), blk + "ssm_in.weight", {E, in_rows});
      add(X + "conv1d.weight", {ch, 1, Dc}, uni(size_t(ch) * Dc, -0.5f, 0.5f), blk + "ssm_conv1d.weight", {Dc, ch});
      add(X + "conv1d.bias", {ch}, uni(size_t(ch), -0.2f, 0.2f), blk + "ssm_conv1d.bias", {ch});
      if (m2) {
        add(X + "dt_bias", {H}, uni(size_t(H), -3.0f, -1.0f), blk + "ssm_dt.bias", {H});
        add(X + "A_log", {H}, uni(size_t(H), 0.0f, 2.0f), blk + "ssm_a", {1, H}, true);
        add(X + "D", {H}, uni(size_t(H), 0.5f, 1.5f), blk + "ssm_d", {1, H});
        add(X + "norm.weight", {Di}, norm(Di), blk + "ssm_norm.weight", {Di / G, G});
      } else {
        add(X + "x_proj.weight", {R + 2 * S, Di}, mat(R + 2 * S, Di), blk + "ssm_x.weight", {Di, R + 2 * S});
        add(X + "dt_proj.weight", {Di, R}, mat(Di, R, 0.5f), blk + "ssm_dt.weight", {R, Di});
        add(X + "dt_proj.bias", {Di}, uni(size_t(Di), -3.0f, -1.0f), blk + "ssm_dt.bias", {Di});
        std::vector<float> a_log(size_t(Di) * S);
        for (size_t k = 0; k < a_log.size(); ++k)  // log(1..S) as the reference init, jittered
          a_log[k] = std::log(static_cast<float>(k % S + 1)) + uni(1, -0.1f, 0.1f)[0];
        add(X + "A_log", {Di, S}, a_log, blk + "ssm_a", {S, Di}, true);
        add(X + "D", {Di}, uni(size_t(Di), 0.5f, 1.5f), blk + "ssm_d", {Di});
        if (jamba) {
          add(X + "dt_layernorm.weight", {R}, norm(R), blk + "ssm_dt_norm.weight", {R});
          add(X + "b_layernorm.weight", {S}, norm(S), blk + "ssm_b_norm.weight", {S});
          add(X + "c_layernorm.weight", {S}, norm(S), blk + "ssm_c_norm.weight", {S});
        }
      }
      add(X + "out_proj.weight", {E, Di}, mat(E, Di, 0.5f), blk + "ssm_out.weight", {Di, E});
    }
    if (jamba) {
      const int F = s.n_ff;
      add(P + "pre_ff_layernorm.weight", {E}, norm(E), blk + "ffn_norm.weight", {E});
      if (jamba_moe(s, l)) {
        add(P + "feed_forward.router.weight", {s.n_expert, E}, mat(s.n_expert, E, 2.0f), blk + "ffn_gate_inp.weight",
            {E, s.n_expert});
        for (int x = 0; x < s.n_expert; ++x)
          for (const char* w : {"gate_proj", "up_proj", "down_proj"}) {
            const bool down = std::strcmp(w, "down_proj") == 0;
            std::vector<float> d = down ? mat(E, F, 0.5f) : mat(F, E);
            const std::string g = blk + (down ? "ffn_down_exps.weight" : w[0] == 'g' ? "ffn_gate_exps.weight"
                                                                                     : "ffn_up_exps.weight");
            stacked[g].insert(stacked[g].end(), d.begin(), d.end());
            add(P + "feed_forward.experts." + std::to_string(x) + "." + w + ".weight",
                down ? std::vector<int64_t>{E, F} : std::vector<int64_t>{F, E}, std::move(d), "", {});
          }
      } else {
        add(P + "feed_forward.gate_proj.weight", {F, E}, mat(F, E), blk + "ffn_gate.weight", {E, F});
        add(P + "feed_forward.up_proj.weight", {F, E}, mat(F, E), blk + "ffn_up.weight", {E, F});
        add(P + "feed_forward.down_proj.weight", {E, F}, mat(E, F, 0.5f), blk + "ffn_down.weight", {F, E});
      }
    }
  }

  // ---- the GGUF
  if (!gguf_path.empty()) {
    GgufWriter w;
    const std::string a = s.arch;
    auto u32 = [&](const std::string& k, int64_t v) { w.set(a + "." + k, GgufValue::make_u32(static_cast<uint32_t>(v))); };
    w.set("general.architecture", GgufValue::make_string(a));
    u32("context_length", s.n_ctx > 0 ? s.n_ctx : jamba ? 4096 : 1 << 20);
    u32("embedding_length", E);
    u32("block_count", s.n_layer);
    u32("feed_forward_length", jamba ? s.n_ff : 0);
    u32("attention.head_count", jamba ? s.n_head : 0);
    if (jamba) {
      std::vector<int32_t> kv;
      for (int l = 0; l < s.n_layer; ++l) kv.push_back(jamba_attn(s, l) ? s.n_head_kv : 0);
      w.set(a + ".attention.head_count_kv", GgufValue::make_i32_array(kv));
      if (s.n_expert > 1) {
        u32("expert_count", s.n_expert);
        u32("expert_used_count", s.n_expert_used);
      }
    }
    u32("ssm.conv_kernel", Dc);
    u32("ssm.inner_size", Di);
    u32("ssm.state_size", S);
    u32("ssm.time_step_rank", m2 ? H : R);
    if (m2) u32("ssm.group_count", G);
    if (s.arch == "mamba") w.set(a + ".ssm.dt_b_c_rms", GgufValue::make_bool(false));
    w.set(a + ".attention.layer_norm_rms_epsilon", GgufValue::make_f32(s.eps));
    for (const auto& [k, v] : vocab_src.metadata())
      if (k.rfind("tokenizer.", 0) == 0) w.set(k, v);
    for (const T& t : ts) {
      if (t.gguf.empty()) continue;
      std::vector<float> d = t.data;
      if (t.neg_exp)
        for (float& x : d) x = -std::exp(x);
      w.add_tensor(t.gguf, t.dims, DType::F32, d.data(), d.size() * 4);
    }
    for (const auto& [name, d] : stacked) {
      const bool down = name.find("ffn_down") != std::string::npos;
      w.add_tensor(name, down ? std::vector<int64_t>{s.n_ff, E, s.n_expert} : std::vector<int64_t>{E, s.n_ff, s.n_expert},
                   DType::F32, d.data(), d.size() * 4);
    }
    w.write(gguf_path);
  }

  // ---- the HF directory
  write_ssm_hf_config(s, vocab, hf_dir, o.edit_config);
  std::vector<StTensor> st;
  for (const T& t : ts) {
    StTensor x;
    x.name = t.hf;
    x.dtype = o.dtype;
    x.shape = t.hf_shape;
    if (o.conv_2d && t.hf_shape.size() == 3) x.shape = {t.hf_shape[0], t.hf_shape[2]};
    if (o.dtype == "F32") {
      x.bytes.resize(t.data.size() * 4);
      std::memcpy(x.bytes.data(), t.data.data(), x.bytes.size());
    } else {
      x.bytes.resize(t.data.size() * 2);
      for (size_t i = 0; i < t.data.size(); ++i) {
        const uint16_t h = o.dtype == "BF16" ? f32_to_bf16(t.data[i]) : f32_to_fp16(t.data[i]);
        std::memcpy(&x.bytes[2 * i], &h, 2);
      }
    }
    if (o.edit_tensor && !o.edit_tensor(x)) continue;
    st.push_back(std::move(x));
  }
  const std::vector<uint8_t> b = safetensors_bytes(st);
  write_text_file(hf_dir + "/model.safetensors", std::string(b.begin(), b.end()));
}

// An F32 GGUF of one of the three architectures (an `infer synth` preset) as
// the HF checkpoint it was converted from: A_log = log(-A), conv1d back to
// [channels, 1, d_conv], Mamba-2's A, D and norm flat, Jamba's experts one
// matrix each, and the layer pattern as attn/expert period and offset.
inline void gguf_ssm_to_hf_dir(const infer::GgufFile& g, const std::string& dir) {
  using namespace infer;
  SsmSpec s;
  s.arch = g.get_string("general.architecture").value_or("");
  REQUIRE((s.arch == "mamba" || s.arch == "mamba2" || s.arch == "jamba"));
  const std::string a = s.arch;
  auto gi = [&](const std::string& k) {
    const auto v = g.get_int(a + "." + k);
    REQUIRE(v);
    return static_cast<int>(*v);
  };
  s.n_embd = gi("embedding_length");
  s.n_layer = gi("block_count");
  s.n_ctx = gi("context_length");
  s.d_state = gi("ssm.state_size");
  s.d_conv = gi("ssm.conv_kernel");
  const int Di = gi("ssm.inner_size");
  REQUIRE(Di % s.n_embd == 0);
  s.expand = Di / s.n_embd;
  s.eps = static_cast<float>(g.get_float(a + ".attention.layer_norm_rms_epsilon").value_or(1e-5));
  s.tied = g.find_tensor("output.weight") == nullptr;
  const int R = gi("ssm.time_step_rank");
  if (a == "mamba2") {
    s.n_group = gi("ssm.group_count");
    s.head_dim = Di / R;
  } else {
    s.dt_rank = R;
  }
  std::vector<int> attn, moe;
  if (a == "jamba") {
    s.n_head = gi("attention.head_count");
    s.n_ff = gi("feed_forward_length");
    s.n_expert = g.get_int(a + ".expert_count").value_or(1);
    s.n_expert_used = g.get_int(a + ".expert_used_count").value_or(1);
    const std::vector<int64_t> kv = g.get_int_array(a + ".attention.head_count_kv");
    for (int l = 0; l < s.n_layer; ++l) {
      if (kv[l] > 0) {
        attn.push_back(l);
        s.n_head_kv = static_cast<int>(kv[l]);
      }
      if (g.find_tensor("blk." + std::to_string(l) + ".ffn_gate_inp.weight")) moe.push_back(l);
    }
    // HF's rule: layer l is marked when l % period == offset.
    auto pattern = [&](const std::vector<int>& marked, int& period, int& offset) {
      REQUIRE(!marked.empty());
      offset = marked[0];
      period = marked.size() > 1 ? marked[1] - marked[0] : s.n_layer;
      if (period <= offset) period = offset + 1;  // a single marked layer: nothing after it
      for (int l = 0; l < s.n_layer; ++l)
        REQUIRE((l % period == offset) == (std::find(marked.begin(), marked.end(), l) != marked.end()));
    };
    pattern(attn, s.attn_period, s.attn_offset);
    if (s.n_expert > 1) pattern(moe, s.expert_period, s.expert_offset);
  }
  write_ssm_hf_config(s, Vocab::from_gguf(g), dir, nullptr);

  const bool jamba = a == "jamba";
  std::vector<StTensor> ts;
  auto add = [&](const std::string& name, std::vector<int64_t> shape, const float* p, size_t n) {
    StTensor t;
    t.name = name;
    t.dtype = "F32";
    t.shape = std::move(shape);
    t.bytes.resize(n * 4);
    std::memcpy(t.bytes.data(), p, n * 4);
    ts.push_back(std::move(t));
  };
  static const std::map<std::string, std::string> kMamba = {
      {"attn_norm.weight", "norm.weight"},           {"ssm_in.weight", "mixer.in_proj.weight"},
      {"ssm_conv1d.weight", "mixer.conv1d.weight"},  {"ssm_conv1d.bias", "mixer.conv1d.bias"},
      {"ssm_x.weight", "mixer.x_proj.weight"},       {"ssm_dt.weight", "mixer.dt_proj.weight"},
      {"ssm_dt.bias", "mixer.dt_proj.bias"},         {"ssm_a", "mixer.A_log"},
      {"ssm_d", "mixer.D"},                          {"ssm_norm.weight", "mixer.norm.weight"},
      {"ssm_out.weight", "mixer.out_proj.weight"},
  };
  static const std::map<std::string, std::string> kJamba = {
      {"attn_norm.weight", "input_layernorm.weight"}, {"ffn_norm.weight", "pre_ff_layernorm.weight"},
      {"attn_q.weight", "self_attn.q_proj.weight"},   {"attn_k.weight", "self_attn.k_proj.weight"},
      {"attn_v.weight", "self_attn.v_proj.weight"},   {"attn_output.weight", "self_attn.o_proj.weight"},
      {"ssm_in.weight", "mamba.in_proj.weight"},      {"ssm_conv1d.weight", "mamba.conv1d.weight"},
      {"ssm_conv1d.bias", "mamba.conv1d.bias"},       {"ssm_x.weight", "mamba.x_proj.weight"},
      {"ssm_dt.weight", "mamba.dt_proj.weight"},      {"ssm_dt.bias", "mamba.dt_proj.bias"},
      {"ssm_a", "mamba.A_log"},                       {"ssm_d", "mamba.D"},
      {"ssm_out.weight", "mamba.out_proj.weight"},    {"ssm_dt_norm.weight", "mamba.dt_layernorm.weight"},
      {"ssm_b_norm.weight", "mamba.b_layernorm.weight"}, {"ssm_c_norm.weight", "mamba.c_layernorm.weight"},
      {"ffn_gate.weight", "feed_forward.gate_proj.weight"}, {"ffn_up.weight", "feed_forward.up_proj.weight"},
      {"ffn_down.weight", "feed_forward.down_proj.weight"}, {"ffn_gate_inp.weight", "feed_forward.router.weight"},
  };
  for (const GgufTensorInfo& t : g.tensors()) {
    REQUIRE(t.type == DType::F32);
    const float* src = reinterpret_cast<const float*>(g.tensor_data(t));
    const size_t n = static_cast<size_t>(t.n_elements());
    std::vector<int64_t> shape(t.dims.rbegin(), t.dims.rend());
    if (t.name == "token_embd.weight") {
      add(jamba ? "model.embed_tokens.weight" : "backbone.embeddings.weight", shape, src, n);
      continue;
    }
    if (t.name == "output_norm.weight") {
      add(jamba ? "model.final_layernorm.weight" : "backbone.norm_f.weight", shape, src, n);
      continue;
    }
    if (t.name == "output.weight") {
      add("lm_head.weight", shape, src, n);
      continue;
    }
    REQUIRE(t.name.rfind("blk.", 0) == 0);
    const size_t dot = t.name.find('.', 4);
    const std::string l = t.name.substr(4, dot - 4), rest = t.name.substr(dot + 1);
    const std::string P = jamba ? "model.layers." + l + "." : "backbone.layers." + l + ".";
    const size_t exps = rest.find("_exps.weight");
    if (exps != std::string::npos) {  // {cols, rows, E}: E matrices of [rows][cols]
      const std::string w = rest.substr(0, exps) == "ffn_gate" ? "gate_proj" : rest.substr(0, exps) == "ffn_up" ? "up_proj"
                                                                                                              : "down_proj";
      const size_t per = static_cast<size_t>(t.dims[0] * t.dims[1]);
      for (int64_t e = 0; e < t.dims[2]; ++e)
        add(P + "feed_forward.experts." + std::to_string(e) + "." + w + ".weight", {t.dims[1], t.dims[0]}, src + e * per,
            per);
      continue;
    }
    const auto& map = jamba ? kJamba : kMamba;
    const auto it = map.find(rest);
    REQUIRE(it != map.end());
    std::vector<float> f(src, src + n);
    if (rest == "ssm_a")
      for (float& x : f) x = std::log(-x);
    if (rest == "ssm_conv1d.weight") shape = {t.dims[1], 1, t.dims[0]};
    if (rest == "ssm_a" || rest == "ssm_d" || rest == "ssm_norm.weight")
      if (a == "mamba2") shape = {static_cast<int64_t>(n)};
    const std::string hn = a == "mamba2" && rest == "ssm_dt.bias" ? "mixer.dt_bias" : it->second;
    add(P + hn, shape, f.data(), n);
  }
  const std::vector<uint8_t> b = safetensors_bytes(ts);
  write_text_file(dir + "/model.safetensors", std::string(b.begin(), b.end()));
}

}  // namespace infer_test
