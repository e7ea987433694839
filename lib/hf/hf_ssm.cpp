// Hugging Face Mamba, Mamba-2 and Jamba checkpoints: config.json, tensor
// names, shape checks and the transforms the GGUF layout needs (hf_ssm.h).
#include "hf/hf_ssm.h"

#include <cmath>
#include <cstring>
#include <regex>
#include <set>

#include "core/error.h"

namespace infer {
namespace hf {

namespace {

const Json* find_any(const Json& cfg, std::initializer_list<const char*> keys, const char** which) {
  for (const char* k : keys) {
    const Json* v = cfg.find(k);
    if (v && !v->is_null()) {
      if (which) *which = k;
      return v;
    }
  }
  return nullptr;
}

// An integer under any of `keys`; `dflt` when none is present (-1: required).
int64_t get_int(const Json& cfg, std::initializer_list<const char*> keys, int64_t dflt, int64_t lo = 1,
                int64_t hi = int64_t(1) << 31) {
  const char* k = *keys.begin();
  const Json* v = find_any(cfg, keys, &k);
  if (!v) {
    if (dflt < 0) raise(Status::Format, "config.json has no %s", k);
    return dflt;
  }
  if (!v->is_int()) raise(Status::Format, "config.json: %s is %s, not an integer", k, json_kind_name(v->kind()));
  if (v->as_int() < lo || v->as_int() > hi)
    raise(Status::Format, "config.json: %s = %lld is out of range [%lld, %lld]", k, (long long)v->as_int(),
          (long long)lo, (long long)hi);
  return v->as_int();
}

bool get_bool(const Json& cfg, const char* key, bool dflt) {
  const Json* v = cfg.find(key);
  if (!v || v->is_null()) return dflt;
  if (!v->is_bool()) raise(Status::Format, "config.json: %s is %s, not a boolean", key, json_kind_name(v->kind()));
  return v->as_bool();
}

double get_eps(const Json& cfg, std::initializer_list<const char*> keys, double dflt) {
  const char* k = *keys.begin();
  const Json* v = find_any(cfg, keys, &k);
  if (!v) return dflt;
  if (!v->is_number() || !std::isfinite(v->as_double()) || !(v->as_double() > 0 && v->as_double() < 1))
    raise(Status::Format, "config.json: %s is not a number in (0, 1)", k);
  return v->as_double();
}

// time_step_rank / mamba_dt_rank: an integer or "auto" (ceil(hidden / 16), as
// the reference Mamba code computes it).
int64_t get_dt_rank(const Json& cfg, std::initializer_list<const char*> keys, int64_t n_embd) {
  const char* k = *keys.begin();
  const Json* v = find_any(cfg, keys, &k);
  if (!v || (v->is_string() && v->as_string() == "auto")) return (n_embd + 15) / 16;
  if (v->is_string()) raise(Status::Format, "config.json: %s is '%s', not an integer or \"auto\"", k, v->as_string().c_str());
  return get_int(cfg, keys, 0, 1, int64_t(1) << 24);
}

// Per-layer flags from a period and an offset: layer i is marked when
// i % period == offset (the HF rule). An offset not below the period marks
// nothing in HF and something else in other readers; refused.
std::vector<uint8_t> layer_pattern(const Json& cfg, const char* period_key, const char* offset_key, int64_t dperiod,
                                   int64_t doffset, int64_t n_layer) {
  const int64_t period = get_int(cfg, {period_key}, dperiod, 1, 1 << 16);
  const int64_t offset = get_int(cfg, {offset_key}, doffset, 0, 1 << 16);
  if (offset >= period)
    raise(Status::Format, "config.json: %s %lld is not below %s %lld (no layer i has i %% period == offset)",
          offset_key, (long long)offset, period_key, (long long)period);
  if (offset >= n_layer)
    raise(Status::Format, "config.json: %s %lld does not fit num_hidden_layers %lld (no layer would be marked)",
          offset_key, (long long)offset, (long long)n_layer);
  std::vector<uint8_t> f(static_cast<size_t>(n_layer));
  for (int64_t i = 0; i < n_layer; ++i) f[i] = i % period == offset;
  return f;
}

}  // namespace

bool is_ssm(const std::string& mt) { return mt == "mamba" || mt == "mamba2" || mt == "jamba"; }

SsmLayout ssm_layout(const Json& cfg, const std::string& mt) {
  SsmLayout L;
  L.model_type = mt;
  L.arch = mt;
  L.n_embd = get_int(cfg, {"hidden_size", "d_model"}, -1, 1, 1 << 20);
  L.n_layer = get_int(cfg, {"num_hidden_layers", "n_layer"}, -1, 1, 1 << 16);
  L.n_ctx = get_int(cfg, {"max_position_embeddings"}, int64_t(1) << 20, 1);
  if (mt == "mamba" || mt == "mamba2") {
    L.d_state = get_int(cfg, {"state_size", "d_state"}, mt == "mamba" ? 16 : 128, 1, 1 << 16);
    L.d_conv = get_int(cfg, {"conv_kernel", "d_conv"}, 4, 1, 1 << 10);
    L.eps = get_eps(cfg, {"layer_norm_epsilon", "rms_norm_eps"}, 1e-5);
    const bool has_expand = find_any(cfg, {"expand"}, nullptr) != nullptr;
    const int64_t expand = get_int(cfg, {"expand"}, 2, 1, 1 << 10);
    L.d_inner = get_int(cfg, {"intermediate_size", "d_inner"}, expand * L.n_embd, 1, int64_t(1) << 24);
    if (has_expand && L.d_inner != expand * L.n_embd)
      raise(Status::Format, "config.json: intermediate_size %lld is not expand %lld x hidden_size %lld",
            (long long)L.d_inner, (long long)expand, (long long)L.n_embd);
    if (get_bool(cfg, "use_bias", false))
      raise(Status::Unsupported, "config.json: use_bias (biased in_proj/out_proj) is not supported for %s", mt.c_str());
    L.conv_bias = get_bool(cfg, "use_conv_bias", true);
    if (mt == "mamba") {
      L.dt_rank = get_dt_rank(cfg, {"time_step_rank", "dt_rank"}, L.n_embd);
    } else {
      L.n_group = get_int(cfg, {"n_groups"}, 1, 1, 1 << 16);
      L.head_dim_ssm = get_int(cfg, {"head_dim", "mamba_d_head"}, 64, 1, 1 << 16);
      if (L.d_inner % L.head_dim_ssm != 0)
        raise(Status::Format, "config.json: d_inner %lld (expand x hidden_size) is not a multiple of head_dim %lld",
              (long long)L.d_inner, (long long)L.head_dim_ssm);
      L.n_head_ssm = L.d_inner / L.head_dim_ssm;
      const int64_t nh = get_int(cfg, {"num_heads"}, L.n_head_ssm, 1, 1 << 20);
      if (nh != L.n_head_ssm)
        raise(Status::Format, "config.json: num_heads %lld is not d_inner %lld / head_dim %lld", (long long)nh,
              (long long)L.d_inner, (long long)L.head_dim_ssm);
      if (L.n_head_ssm % L.n_group != 0 || L.d_inner % L.n_group != 0)
        raise(Status::Format, "config.json: n_groups %lld does not divide num_heads %lld and d_inner %lld",
              (long long)L.n_group, (long long)L.n_head_ssm, (long long)L.d_inner);
      if (!get_bool(cfg, "rms_norm", true))
        raise(Status::Unsupported, "config.json: Mamba-2 without its gated RMSNorm (rms_norm false) is not supported");
      L.dt_rank = L.n_head_ssm;
    }
    L.attn.assign(static_cast<size_t>(L.n_layer), 0);
    L.moe.assign(static_cast<size_t>(L.n_layer), 0);
  } else {  // jamba
    L.n_head = get_int(cfg, {"num_attention_heads"}, -1, 1, 1 << 16);
    L.n_head_kv = get_int(cfg, {"num_key_value_heads"}, L.n_head, 1, 1 << 16);
    if (L.n_embd % L.n_head != 0 || L.n_head % L.n_head_kv != 0)
      raise(Status::Format, "config.json: hidden_size %lld, num_attention_heads %lld and num_key_value_heads %lld do "
            "not divide", (long long)L.n_embd, (long long)L.n_head, (long long)L.n_head_kv);
    L.n_ff = get_int(cfg, {"intermediate_size"}, -1, 1, int64_t(1) << 24);
    L.d_state = get_int(cfg, {"mamba_d_state"}, 16, 1, 1 << 16);
    L.d_conv = get_int(cfg, {"mamba_d_conv"}, 4, 1, 1 << 10);
    L.d_inner = get_int(cfg, {"mamba_expand"}, 2, 1, 1 << 10) * L.n_embd;
    L.dt_rank = get_dt_rank(cfg, {"mamba_dt_rank"}, L.n_embd);
    L.eps = get_eps(cfg, {"rms_norm_eps", "layer_norm_epsilon"}, 1e-6);
    if (get_bool(cfg, "mamba_proj_bias", false))
      raise(Status::Unsupported, "config.json: mamba_proj_bias (biased in_proj/out_proj) is not supported for jamba");
    L.conv_bias = get_bool(cfg, "mamba_conv_bias", true);
    L.n_expert = get_int(cfg, {"num_experts", "num_local_experts"}, 16, 1, 1 << 12);
    L.n_expert_used = get_int(cfg, {"num_experts_per_tok", "num_experts_per_token"}, 2, 1, 1 << 12);
    if (L.n_expert > 1 && L.n_expert_used > L.n_expert)
      raise(Status::Format, "config.json: num_experts_per_tok %lld exceeds num_experts %lld", (long long)L.n_expert_used,
            (long long)L.n_expert);
    if (const Json* lt = cfg.find("layers_block_type"); lt && !lt->is_null()) {
      if (!lt->is_array() || static_cast<int64_t>(lt->items().size()) != L.n_layer)
        raise(Status::Format, "config.json: layers_block_type is not a list of num_hidden_layers (%lld) entries",
              (long long)L.n_layer);
      for (const Json& e : lt->items()) {
        if (!e.is_string() || (e.as_string() != "attention" && e.as_string() != "mamba"))
          raise(Status::Format, "config.json: layers_block_type holds something other than \"attention\" and \"mamba\"");
        L.attn.push_back(e.as_string() == "attention");
      }
    } else {
      L.attn = layer_pattern(cfg, "attn_layer_period", "attn_layer_offset", 8, 4, L.n_layer);
    }
    if (L.n_expert > 1) L.moe = layer_pattern(cfg, "expert_layer_period", "expert_layer_offset", 2, 1, L.n_layer);
    else L.moe.assign(static_cast<size_t>(L.n_layer), 0);
  }
  if (!L.conv_bias)
    raise(Status::Unsupported, "config.json: a conv1d without bias (use_conv_bias / mamba_conv_bias false) is not "
          "supported for %s", mt.c_str());
  return L;
}

std::vector<std::pair<std::string, GgufValue>> ssm_config_metadata(const Json& cfg, const std::string& mt) {
  const SsmLayout L = ssm_layout(cfg, mt);
  std::vector<std::pair<std::string, GgufValue>> m;
  const std::string& a = L.arch;
  auto u32 = [&](const char* k, int64_t v) { m.emplace_back(a + "." + k, GgufValue::make_u32(static_cast<uint32_t>(v))); };
  m.emplace_back("general.architecture", GgufValue::make_string(a));
  if (const Json* n = cfg.find("_name_or_path"); n && n->is_string() && !n->as_string().empty())
    m.emplace_back("general.name", GgufValue::make_string(n->as_string()));
  m.emplace_back("general.source.model_type", GgufValue::make_string(mt));
  u32("context_length", L.n_ctx);
  u32("embedding_length", L.n_embd);
  u32("block_count", L.n_layer);
  if (mt == "jamba") {
    u32("feed_forward_length", L.n_ff);
    u32("attention.head_count", L.n_head);
    std::vector<int32_t> kv;
    for (uint8_t f : L.attn) kv.push_back(f ? static_cast<int32_t>(L.n_head_kv) : 0);
    m.emplace_back(a + ".attention.head_count_kv", GgufValue::make_i32_array(kv));
    if (L.n_expert > 1) {
      u32("expert_count", L.n_expert);
      u32("expert_used_count", L.n_expert_used);
    }
  } else {  // as the GGUF converters write them: unused, present
    u32("feed_forward_length", 0);
    u32("attention.head_count", 0);
  }
  u32("ssm.conv_kernel", L.d_conv);
  u32("ssm.inner_size", L.d_inner);
  u32("ssm.state_size", L.d_state);
  u32("ssm.time_step_rank", L.dt_rank);
  if (mt == "mamba2") u32("ssm.group_count", L.n_group);
  if (mt == "mamba") m.emplace_back(a + ".ssm.dt_b_c_rms", GgufValue::make_bool(false));
  m.emplace_back(a + ".attention.layer_norm_rms_epsilon", GgufValue::make_f32(static_cast<float>(L.eps)));
  return m;
}

std::string ssm_canonical_name(const std::string& in, const SsmLayout* L) {
  std::string n = in;
  if (n.rfind("model.backbone.", 0) == 0 || n.rfind("model.lm_head.", 0) == 0) n = n.substr(6);
  auto replace = [&](const std::string& a, const std::string& b) {
    const size_t p = n.find(a);
    if (p != std::string::npos) n.replace(p, a.size(), b);
  };
  replace(".moe.", ".feed_forward.");
  replace(".mamba.B_layernorm.", ".mamba.b_layernorm.");
  replace(".mamba.C_layernorm.", ".mamba.c_layernorm.");
  if (L && L->model_type == "jamba" && n.find(".feed_forward.experts.0.") != std::string::npos) {
    static const std::regex kLayer(R"(model\.layers\.(\d{1,5})\..*)");
    std::smatch mt;
    if (std::regex_match(n, mt, kLayer)) {
      const long l = std::stol(mt[1].str());
      if (l < L->n_layer && !L->moe[static_cast<size_t>(l)]) replace(".feed_forward.experts.0.", ".feed_forward.");
    }
  }
  return n;
}

std::string ssm_tensor_name(const std::string& mt, const std::string& n) {
  if (mt == "mamba" || mt == "mamba2") {
    if (n == "backbone.embeddings.weight" || n == "backbone.embedding.weight") return "token_embd.weight";
    if (n == "backbone.norm_f.weight") return "output_norm.weight";
    if (n == "lm_head.weight") return "output.weight";
    static const std::regex kLayer(R"(backbone\.layers\.(\d{1,5})\.(.+))");
    std::smatch m;
    if (std::regex_match(n, m, kLayer)) {
      const std::string blk = "blk." + m[1].str() + ".", rest = m[2].str();
      static const std::map<std::string, std::string> kMap = {
          {"norm.weight", "attn_norm.weight"},
          {"mixer.in_proj.weight", "ssm_in.weight"},
          {"mixer.conv1d.weight", "ssm_conv1d.weight"},
          {"mixer.conv1d.bias", "ssm_conv1d.bias"},
          {"mixer.x_proj.weight", "ssm_x.weight"},
          {"mixer.dt_proj.weight", "ssm_dt.weight"},
          {"mixer.dt_proj.bias", "ssm_dt.bias"},
          {"mixer.dt_bias", "ssm_dt.bias"},
          {"mixer.A_log", "ssm_a"},
          {"mixer.D", "ssm_d"},
          {"mixer.norm.weight", "ssm_norm.weight"},
          {"mixer.out_proj.weight", "ssm_out.weight"},
      };
      if (auto it = kMap.find(rest); it != kMap.end()) return blk + it->second;
    }
    raise(Status::Unsupported, "tensor '%s' is not part of the %s layout this loader knows", n.c_str(), mt.c_str());
  }
  // jamba
  if (n == "model.embed_tokens.weight") return "token_embd.weight";
  if (n == "model.final_layernorm.weight") return "output_norm.weight";
  if (n == "lm_head.weight") return "output.weight";
  static const std::regex kLayer(R"(model\.layers\.(\d{1,5})\.(.+))");
  std::smatch m;
  if (std::regex_match(n, m, kLayer)) {
    const std::string blk = "blk." + m[1].str() + ".", rest = m[2].str();
    static const std::map<std::string, std::string> kMap = {
        {"input_layernorm.weight", "attn_norm.weight"},
        {"pre_ff_layernorm.weight", "ffn_norm.weight"},
        {"self_attn.q_proj.weight", "attn_q.weight"},
        {"self_attn.k_proj.weight", "attn_k.weight"},
        {"self_attn.v_proj.weight", "attn_v.weight"},
        {"self_attn.o_proj.weight", "attn_output.weight"},
        {"mamba.in_proj.weight", "ssm_in.weight"},
        {"mamba.conv1d.weight", "ssm_conv1d.weight"},
        {"mamba.conv1d.bias", "ssm_conv1d.bias"},
        {"mamba.x_proj.weight", "ssm_x.weight"},
        {"mamba.dt_proj.weight", "ssm_dt.weight"},
        {"mamba.dt_proj.bias", "ssm_dt.bias"},
        {"mamba.A_log", "ssm_a"},
        {"mamba.D", "ssm_d"},
        {"mamba.out_proj.weight", "ssm_out.weight"},
        {"mamba.dt_layernorm.weight", "ssm_dt_norm.weight"},
        {"mamba.b_layernorm.weight", "ssm_b_norm.weight"},
        {"mamba.c_layernorm.weight", "ssm_c_norm.weight"},
        {"feed_forward.gate_proj.weight", "ffn_gate.weight"},
        {"feed_forward.up_proj.weight", "ffn_up.weight"},
        {"feed_forward.down_proj.weight", "ffn_down.weight"},
        {"feed_forward.router.weight", "ffn_gate_inp.weight"},
    };
    if (auto it = kMap.find(rest); it != kMap.end()) return blk + it->second;
    static const std::regex kExpert(R"(feed_forward\.experts\.(\d{1,4})\.(gate_proj|up_proj|down_proj)\.weight)");
    std::smatch me;
    if (std::regex_match(rest, me, kExpert)) {
      const std::string w = me[2].str();
      const char* stacked = w == "gate_proj" ? "ffn_gate_exps.weight" : w == "up_proj" ? "ffn_up_exps.weight"
                                                                                      : "ffn_down_exps.weight";
      return blk + stacked + "#" + me[1].str();
    }
  }
  raise(Status::Unsupported, "tensor '%s' is not part of the %s layout this loader knows", n.c_str(), mt.c_str());
}

void ssm_check_tensors(const SsmLayout& L, const std::map<std::string, std::vector<int64_t>>& shapes,
                       int64_t* n_vocab_rows) {
  using Shape = std::vector<int64_t>;
  // Canonical HF name -> shape (slowest first), in the order they are
  // checked: in_proj before the rest of a layer, as it shows d_inner best.
  struct Need {
    std::vector<std::pair<std::string, Shape>> list;
    std::set<std::string> names;
    Shape& operator[](const std::string& n) {
      names.insert(n);
      list.emplace_back(n, Shape());
      return list.back().second;
    }
  } need;
  const bool jamba = L.model_type == "jamba";
  const std::string embd = jamba ? "model.embed_tokens.weight" : "backbone.embeddings.weight";
  const std::string norm_f = jamba ? "model.final_layernorm.weight" : "backbone.norm_f.weight";
  auto e = shapes.find(embd);
  if (e == shapes.end() && !jamba) e = shapes.find("backbone.embedding.weight");
  if (e == shapes.end()) raise(Status::Format, "the checkpoint has no %s", embd.c_str());
  if (e->second.size() != 2 || e->second[1] != L.n_embd)
    raise(Status::Format, "%s is not [vocab, hidden_size %lld]", e->first.c_str(), (long long)L.n_embd);
  const int64_t n_vocab = e->second[0];
  if (n_vocab_rows) *n_vocab_rows = n_vocab;
  need[e->first] = e->second;
  need[norm_f] = {L.n_embd};
  const std::string ssm_where = jamba ? "mamba_d_state, mamba_expand x hidden_size, mamba_dt_rank, mamba_d_conv"
                                      : "state_size, expand x hidden_size (intermediate_size), time_step_rank, "
                                        "conv_kernel, num_heads, n_groups";
  auto str = [](const Shape& s) {
    std::string o = "[";
    for (size_t k = 0; k < s.size(); ++k) o += (k ? ", " : "") + std::to_string(s[k]);
    return o + "]";
  };
  auto kind = [&](const std::string& name) -> std::string {
    static const std::regex kLayer(R"((?:model|backbone)\.layers\.(\d{1,5})\..*)");
    std::smatch m;
    if (!jamba || !std::regex_match(name, m, kLayer)) return "";
    const long l = std::stol(m[1].str());
    if (l >= L.n_layer) return "";
    return std::string(" (layer ") + m[1].str() + " is " + (L.attn[l] ? "an attention" : "a Mamba") + " layer with " +
           (L.moe[l] ? "a mixture of experts" : "a dense FFN") +
           " by attn_layer_period/offset, expert_layer_period/offset or layers_block_type)";
  };
  // Checked a layer at a time (and the names kept only of tensors found), so
  // a config.json that claims a huge model fails at its first missing tensor
  // without building the whole list.
  auto flush = [&] {
    for (const auto& [name, want] : need.list) {
      auto it = shapes.find(name);
      if (it == shapes.end()) raise(Status::Format, "tensor '%s' is missing%s", name.c_str(), kind(name).c_str());
      Shape have = it->second;
      // conv1d weights: [channels, 1, d_conv] as stored by PyTorch, or squeezed.
      if (name.size() > 13 && name.compare(name.size() - 13, 13, "conv1d.weight") == 0 && have.size() == 2 &&
          want.size() == 3)
        have.insert(have.begin() + 1, 1);
      if (have != want)
        raise(Status::Format, "tensor '%s' has shape %s where config.json (%s) gives %s", name.c_str(), str(it->second).c_str(),
              (name.find("layers.") != std::string::npos && (name.find(".mamba.") != std::string::npos ||
                                                             name.find(".mixer.") != std::string::npos))
                  ? ssm_where.c_str()
                  : "hidden_size, heads, intermediate_size, experts",
              str(want).c_str());
    }
    need.list.clear();
  };
  flush();
  for (int64_t l = 0; l < L.n_layer; ++l) {
    const std::string P = jamba ? "model.layers." + std::to_string(l) + "." : "backbone.layers." + std::to_string(l) + ".";
    if (!L.attn[l]) {
      const std::string X = P + (jamba ? "mamba." : "mixer.");
      const int64_t ch = L.conv_channels();
      need[jamba ? P + "input_layernorm.weight" : P + "norm.weight"] = {L.n_embd};
      need[X + "in_proj.weight"] = {L.in_proj_rows(), L.n_embd};
      need[X + "conv1d.weight"] = {ch, 1, L.d_conv};
      need[X + "conv1d.bias"] = {ch};
      need[X + "out_proj.weight"] = {L.n_embd, L.d_inner};
      if (L.model_type == "mamba2") {
        need[X + "dt_bias"] = {L.n_head_ssm};
        need[X + "A_log"] = {L.n_head_ssm};
        need[X + "D"] = {L.n_head_ssm};
        need[X + "norm.weight"] = {L.d_inner};
      } else {
        need[X + "x_proj.weight"] = {L.dt_rank + 2 * L.d_state, L.d_inner};
        need[X + "dt_proj.weight"] = {L.d_inner, L.dt_rank};
        need[X + "dt_proj.bias"] = {L.d_inner};
        need[X + "A_log"] = {L.d_inner, L.d_state};
        need[X + "D"] = {L.d_inner};
        if (jamba) {
          need[X + "dt_layernorm.weight"] = {L.dt_rank};
          need[X + "b_layernorm.weight"] = {L.d_state};
          need[X + "c_layernorm.weight"] = {L.d_state};
        }
      }
    } else {
      const int64_t hd = L.n_embd / L.n_head;
      need[P + "input_layernorm.weight"] = {L.n_embd};
      need[P + "self_attn.q_proj.weight"] = {L.n_head * hd, L.n_embd};
      need[P + "self_attn.k_proj.weight"] = {L.n_head_kv * hd, L.n_embd};
      need[P + "self_attn.v_proj.weight"] = {L.n_head_kv * hd, L.n_embd};
      need[P + "self_attn.o_proj.weight"] = {L.n_embd, L.n_head * hd};
    }
    if (jamba) {
      need[P + "pre_ff_layernorm.weight"] = {L.n_embd};
      if (L.moe[l]) {
        need[P + "feed_forward.router.weight"] = {L.n_expert, L.n_embd};
        for (int64_t x = 0; x < L.n_expert; ++x) {
          const std::string E = P + "feed_forward.experts." + std::to_string(x) + ".";
          need[E + "gate_proj.weight"] = {L.n_ff, L.n_embd};
          need[E + "up_proj.weight"] = {L.n_ff, L.n_embd};
          need[E + "down_proj.weight"] = {L.n_embd, L.n_ff};
        }
      } else {
        need[P + "feed_forward.gate_proj.weight"] = {L.n_ff, L.n_embd};
        need[P + "feed_forward.up_proj.weight"] = {L.n_ff, L.n_embd};
        need[P + "feed_forward.down_proj.weight"] = {L.n_embd, L.n_ff};
      }
    }
    flush();
  }
  for (const auto& [name, shape] : shapes) {
    if (need.names.count(name) || name == "lm_head.weight") continue;
    raise(Status::Format, "tensor '%s' has no place in the layout config.json describes%s", name.c_str(),
          kind(name).c_str());
  }
  if (auto h = shapes.find("lm_head.weight"); h != shapes.end() && h->second != Shape{n_vocab, L.n_embd})
    raise(Status::Format, "lm_head.weight has shape %s, not the embedding's %s", str(h->second).c_str(),
          str({n_vocab, L.n_embd}).c_str());
}

SsmView ssm_view(const SsmLayout& L, const std::string& g, const std::string& hf_name, const std::vector<int64_t>& shape) {
  SsmView v;
  v.dims.assign(shape.rbegin(), shape.rend());
  auto ends = [&](const char* s) {
    const size_t n = std::strlen(s);
    return g.size() >= n && g.compare(g.size() - n, n, s) == 0;
  };
  if (ends(".ssm_conv1d.weight")) {
    v.dims = {L.d_conv, L.conv_channels()};
    v.to_f32 = true;
  } else if (ends(".ssm_a")) {
    v.to_f32 = v.neg_exp = true;
    if (L.model_type == "mamba2") v.dims = {1, L.n_head_ssm};
  } else if (ends(".ssm_d")) {
    v.to_f32 = true;
    if (L.model_type == "mamba2") v.dims = {1, L.n_head_ssm};
  } else if (ends(".ssm_norm.weight")) {
    v.to_f32 = true;
    v.dims = {L.d_inner / L.n_group, L.n_group};
  } else if (ends(".ssm_conv1d.bias") || ends(".ssm_dt.bias") || ends(".ssm_dt_norm.weight") ||
             ends(".ssm_b_norm.weight") || ends(".ssm_c_norm.weight")) {
    v.to_f32 = true;
  }
  (void)hf_name;
  return v;
}

}  // namespace hf
}  // namespace infer
