// Hugging Face directories: config.json, tensor names, shards.
#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>

#include "core/error.h"
#include "core/fp16.h"
#include "core/log.h"
#include "core/mmap.h"
#include "hf/hf.h"
#include "hf/hf_encoder.h"
#include "hf/hf_quant.h"
#include "hf/hf_ssm.h"
#include "core/json.h"

namespace infer {
namespace hf {

namespace {

using Meta = std::vector<std::pair<std::string, GgufValue>>;

bool file_exists(const std::string& p) {
  struct stat st;
  return ::stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

// Reads a small text file (config, index, tokenizer); Error(Io) when absent.
std::string read_text(const std::string& path, uint64_t max_bytes = uint64_t(1) << 30) {
  std::unique_ptr<MappedFile> f = MappedFile::open(path, false);
  if (f->size() > max_bytes) raise(Status::Format, "%s is too large (%zu bytes)", path.c_str(), f->size());
  return std::string(reinterpret_cast<const char*>(f->data()), f->size());
}

// ---- config.json -------------------------------------------------------------------

struct Arch {
  std::string hf;    // model_type
  std::string gguf;  // general.architecture
  bool neox_flag;    // HF rotate-half Q/K where the GGUF architecture expects interleaved pairs
};

const Arch kArchs[] = {
    {"llama", "llama", true},   {"mistral", "llama", true}, {"mixtral", "llama", true},
    {"qwen2", "qwen2", false},  {"qwen3", "qwen3", false},  {"phi3", "phi3", false},
    {"gemma", "gemma", false},  {"gemma2", "gemma2", false},
    // Encoders (embedding models and rerankers): hf_encoder.cpp.
    {"bert", "bert", false},    {"nomic_bert", "nomic-bert", false},
    // State-space models and the Jamba hybrid: hf_ssm.cpp.
    {"mamba", "mamba", false},  {"mamba2", "mamba2", false}, {"jamba", "jamba", false},
};

// config.json files without model_type: the model class names it.
const std::pair<const char*, const char*> kClasses[] = {
    {"MambaForCausalLM", "mamba"}, {"Mamba2ForCausalLM", "mamba2"}, {"JambaForCausalLM", "jamba"},
};

const Arch& find_arch(const Json& cfg) {
  const Json* mt = cfg.find("model_type");
  if (!mt || mt->is_null()) {
    const Json* classes = cfg.find("architectures");
    if (classes && classes->is_array() && classes->items().size() == 1 && classes->items()[0].is_string())
      for (const auto& [cls, type] : kClasses)
        if (classes->items()[0].as_string() == cls)
          for (const Arch& a : kArchs)
            if (a.hf == type) return a;
  }
  if (!mt || !mt->is_string()) raise(Status::Format, "config.json has no model_type string");
  for (const Arch& a : kArchs)
    if (mt->as_string() == a.hf) return a;
  if (mt->as_string() == "xlm-roberta" || mt->as_string() == "roberta")
    raise(Status::Unsupported, "config.json: model_type '%s' is not supported (its position table is offset by the "
          "padding id and its tokenizer is a Unigram model; supported encoders: bert, nomic_bert)",
          mt->as_string().c_str());
  raise(Status::Unsupported, "config.json: model_type '%s' is not supported (supported: llama, mistral, mixtral, "
        "qwen2, qwen3, phi3, gemma, gemma2, bert, nomic_bert, mamba, mamba2, jamba)", mt->as_string().c_str());
}

int64_t cfg_int(const Json& cfg, const char* key, int64_t dflt, bool required, int64_t lo = 1,
                int64_t hi = int64_t(1) << 31) {
  const Json* v = cfg.find(key);
  if (!v || v->is_null()) {
    if (required) raise(Status::Format, "config.json has no %s", key);
    return dflt;
  }
  if (!v->is_int()) raise(Status::Format, "config.json: %s is %s, not an integer", key, json_kind_name(v->kind()));
  if (v->as_int() < lo || v->as_int() > hi)
    raise(Status::Format, "config.json: %s = %lld is out of range [%lld, %lld]", key, (long long)v->as_int(),
          (long long)lo, (long long)hi);
  return v->as_int();
}

double num(const Json* v, const char* key) {
  if (!v->is_number() || !std::isfinite(v->as_double()))
    raise(Status::Format, "config.json: %s is %s, not a finite number", key, json_kind_name(v->kind()));
  return v->as_double();
}

double cfg_float(const Json& cfg, const char* key, double dflt) {
  const Json* v = cfg.find(key);
  if (!v || v->is_null()) return dflt;
  return num(v, key);
}

const Json& parse_object(std::string_view text, const char* what, Json& store) {
  store = Json::parse(text, what);
  if (!store.is_object()) raise(Status::Format, "%s is not a JSON object", what);
  return store;
}

}  // namespace

Meta config_metadata(std::string_view config_json) {
  Json store;
  const Json& cfg = parse_object(config_json, "config.json", store);
  const Arch& arch = find_arch(cfg);
  if (is_encoder(arch.hf)) return encoder_config_metadata(cfg, arch.hf);
  if (is_ssm(arch.hf)) return ssm_config_metadata(cfg, arch.hf);
  const std::string a = arch.gguf;
  Meta m;
  auto k = [&](const char* suffix) { return a + "." + suffix; };
  auto u32 = [&](const std::string& key, int64_t v) { m.emplace_back(key, GgufValue::make_u32(static_cast<uint32_t>(v))); };
  auto f32 = [&](const std::string& key, double v) { m.emplace_back(key, GgufValue::make_f32(static_cast<float>(v))); };
  m.emplace_back("general.architecture", GgufValue::make_string(a));
  if (const Json* n = cfg.find("_name_or_path"); n && n->is_string() && !n->as_string().empty())
    m.emplace_back("general.name", GgufValue::make_string(n->as_string()));
  m.emplace_back("general.source.model_type", GgufValue::make_string(arch.hf));

  const int64_t n_embd = cfg_int(cfg, "hidden_size", 0, true);
  const int64_t n_layer = cfg_int(cfg, "num_hidden_layers", 0, true, 1, 1 << 16);
  const int64_t n_head = cfg_int(cfg, "num_attention_heads", 0, true, 1, 1 << 16);
  const int64_t n_head_kv = cfg_int(cfg, "num_key_value_heads", n_head, false, 1, 1 << 16);
  const int64_t n_ff = cfg_int(cfg, "intermediate_size", 0, true);
  const int64_t n_ctx = cfg_int(cfg, "max_position_embeddings", 2048, false);
  if (n_head % n_head_kv != 0)
    raise(Status::Format, "config.json: num_attention_heads %lld is not a multiple of num_key_value_heads %lld",
          (long long)n_head, (long long)n_head_kv);
  const bool explicit_hd = cfg.find("head_dim") && !cfg.find("head_dim")->is_null();
  const int64_t head_dim = cfg_int(cfg, "head_dim", n_embd / n_head, false);
  if (!explicit_hd && n_embd % n_head != 0)
    raise(Status::Format, "config.json: hidden_size %lld is not a multiple of num_attention_heads %lld",
          (long long)n_embd, (long long)n_head);
  u32(k("context_length"), n_ctx);
  u32(k("embedding_length"), n_embd);
  u32(k("block_count"), n_layer);
  u32(k("feed_forward_length"), n_ff);
  u32(k("attention.head_count"), n_head);
  u32(k("attention.head_count_kv"), n_head_kv);
  if (explicit_hd) {
    u32(k("attention.key_length"), head_dim);
    u32(k("attention.value_length"), head_dim);
  }
  int64_t n_rot = head_dim;
  if (const Json* p = cfg.find("partial_rotary_factor"); p && !p->is_null()) {
    const double f = num(p, "partial_rotary_factor");
    if (!(f > 0 && f <= 1)) raise(Status::Format, "config.json: partial_rotary_factor %g is not in (0, 1]", f);
    n_rot = static_cast<int64_t>(std::llround(f * static_cast<double>(head_dim)));
  }
  u32(k("rope.dimension_count"), n_rot);
  const double theta = cfg_float(cfg, "rope_theta", 10000.0);
  if (!(theta > 0)) raise(Status::Format, "config.json: rope_theta %g is not positive", theta);
  f32(k("rope.freq_base"), theta);
  const bool gemma = arch.hf == "gemma" || arch.hf == "gemma2";
  const double eps = cfg_float(cfg, "rms_norm_eps", 1e-6);
  if (!(eps > 0 && eps < 1)) raise(Status::Format, "config.json: rms_norm_eps %g is out of range", eps);
  f32(k("attention.layer_norm_rms_epsilon"), eps);

  // Sliding window: Mistral and Phi-3 always when set; Qwen2 only with
  // use_sliding_window; Gemma 2 on alternating layers (the architecture knows which).
  if (const Json* sw = cfg.find("sliding_window"); sw && !sw->is_null()) {
    bool use = true;
    if (arch.hf == "qwen2" || arch.hf == "qwen3") {
      const Json* u = cfg.find("use_sliding_window");
      use = u && u->is_bool() && u->as_bool();
    }
    if (arch.hf == "llama" || arch.hf == "gemma") use = false;
    if (use) u32(k("attention.sliding_window"), cfg_int(cfg, "sliding_window", 0, true));
  }
  if (arch.hf == "gemma2") {
    if (const Json* v = cfg.find("attn_logit_softcapping"); v && !v->is_null())
      f32(k("attn_logit_softcapping"), num(v, "attn_logit_softcapping"));
    if (const Json* v = cfg.find("final_logit_softcapping"); v && !v->is_null())
      f32(k("final_logit_softcapping"), num(v, "final_logit_softcapping"));
    if (const Json* v = cfg.find("query_pre_attn_scalar"); v && !v->is_null())
      f32(k("attention.query_pre_attn_scalar"), num(v, "query_pre_attn_scalar"));
  }
  if (arch.hf == "mixtral") {
    u32(k("expert_count"), cfg_int(cfg, "num_local_experts", 0, true, 1, 1 << 12));
    u32(k("expert_used_count"), cfg_int(cfg, "num_experts_per_tok", 0, true, 1, 1 << 12));
  }

  // Rope scaling.
  if (const Json* rs = cfg.find("rope_scaling"); rs && !rs->is_null()) {
    if (!rs->is_object()) raise(Status::Format, "config.json: rope_scaling is not an object");
    const Json* t = rs->find("rope_type");
    if (!t) t = rs->find("type");
    if (!t || !t->is_string()) raise(Status::Format, "config.json: rope_scaling has no type");
    const std::string type = t->as_string();
    auto factor = [&]() {
      const Json* f = rs->find("factor");
      if (!f) raise(Status::Format, "config.json: rope_scaling '%s' has no factor", type.c_str());
      const double x = num(f, "rope_scaling.factor");
      if (!(x > 0)) raise(Status::Format, "config.json: rope_scaling.factor %g is not positive", x);
      return x;
    };
    auto opt = [&](const char* key, double d) {
      const Json* v = rs->find(key);
      return v && !v->is_null() ? num(v, key) : d;
    };
    if (type == "default") {
    } else if (type == "linear") {
      m.emplace_back(k("rope.scaling.type"), GgufValue::make_string("linear"));
      f32(k("rope.scaling.factor"), factor());
    } else if (type == "llama3") {
      m.emplace_back(k("rope.scaling.type"), GgufValue::make_string("llama3"));
      f32(k("rope.scaling.factor"), factor());
      f32(k("rope.scaling.low_freq_factor"), opt("low_freq_factor", 1.0));
      f32(k("rope.scaling.high_freq_factor"), opt("high_freq_factor", 4.0));
      u32(k("rope.scaling.original_context_length"),
          static_cast<int64_t>(opt("original_max_position_embeddings", 8192)));
    } else if (type == "yarn") {
      m.emplace_back(k("rope.scaling.type"), GgufValue::make_string("yarn"));
      f32(k("rope.scaling.factor"), factor());
      u32(k("rope.scaling.original_context_length"),
          static_cast<int64_t>(opt("original_max_position_embeddings", static_cast<double>(n_ctx))));
    } else if ((type == "longrope" || type == "su") && arch.hf == "phi3") {
      // The factor lists become tensors (open_directory); here the attention factor.
      const int64_t orig = cfg_int(cfg, "original_max_position_embeddings", n_ctx, false);
      const double scale = static_cast<double>(n_ctx) / static_cast<double>(orig);
      const double attn = scale <= 1.0 ? 1.0 : std::sqrt(1.0 + std::log(scale) / std::log(static_cast<double>(orig)));
      u32(k("rope.scaling.original_context_length"), orig);
      f32(k("rope.scaling.attn_factor"), attn);
    } else {
      raise(Status::Unsupported, "config.json: rope_scaling type '%s' is not supported for %s", type.c_str(),
            arch.hf.c_str());
    }
  }
  if (arch.neox_flag) m.emplace_back("infer.rope.neox", GgufValue::make_bool(true));
  (void)gemma;
  return m;
}

// ---- tensor names ------------------------------------------------------------------

std::string gguf_tensor_name(const std::string& arch, const std::string& n_in) {
  if (is_encoder(arch)) return encoder_tensor_name(arch, n_in);
  if (is_ssm(arch)) return ssm_tensor_name(arch, ssm_canonical_name(n_in, nullptr));
  // Checkpoints saved from the bare model class (e.g. Qwen3-Embedding's) have
  // no "model." prefix.
  const bool bare = n_in.rfind("layers.", 0) == 0 || n_in == "embed_tokens.weight" || n_in == "norm.weight";
  const std::string n = bare ? "model." + n_in : n_in;
  static const std::map<std::string, std::string> kTop = {
      {"model.embed_tokens.weight", "token_embd.weight"},
      {"model.norm.weight", "output_norm.weight"},
      {"lm_head.weight", "output.weight"},
  };
  if (auto it = kTop.find(n); it != kTop.end()) return it->second;
  static const std::regex kLayer(R"(model\.layers\.(\d{1,5})\.(.+))");
  std::smatch mt;
  if (!std::regex_match(n, mt, kLayer)) raise(Status::Unsupported, "tensor '%s' is not part of a known model layout", n.c_str());
  const std::string blk = "blk." + mt[1].str() + ".";
  const std::string rest = mt[2].str();
  if (rest.find("rotary_emb.inv_freq") != std::string::npos) return "";
  const bool gemma2 = arch == "gemma2";
  static const std::map<std::string, std::string> kLayerMap = {
      {"input_layernorm.weight", "attn_norm.weight"},
      {"self_attn.q_proj.weight", "attn_q.weight"},
      {"self_attn.k_proj.weight", "attn_k.weight"},
      {"self_attn.v_proj.weight", "attn_v.weight"},
      {"self_attn.o_proj.weight", "attn_output.weight"},
      {"self_attn.q_proj.bias", "attn_q.bias"},
      {"self_attn.k_proj.bias", "attn_k.bias"},
      {"self_attn.v_proj.bias", "attn_v.bias"},
      {"self_attn.o_proj.bias", "attn_output.bias"},
      {"self_attn.q_norm.weight", "attn_q_norm.weight"},
      {"self_attn.k_norm.weight", "attn_k_norm.weight"},
      {"self_attn.qkv_proj.weight", "attn_qkv.weight"},
      {"mlp.gate_proj.weight", "ffn_gate.weight"},
      {"mlp.up_proj.weight", "ffn_up.weight"},
      {"mlp.down_proj.weight", "ffn_down.weight"},
      {"mlp.gate_up_proj.weight", "ffn_up.weight"},
      // Bias tensors some GPTQ exporters write for every linear layer (zeros).
      {"mlp.gate_proj.bias", "ffn_gate.bias"},
      {"mlp.up_proj.bias", "ffn_up.bias"},
      {"mlp.down_proj.bias", "ffn_down.bias"},  // Phi-3: gate and up fused, as GGUF's ffn_up
      {"block_sparse_moe.gate.weight", "ffn_gate_inp.weight"},
  };
  if (gemma2) {
    if (rest == "post_attention_layernorm.weight") return blk + "post_attention_norm.weight";
    if (rest == "pre_feedforward_layernorm.weight") return blk + "ffn_norm.weight";
    if (rest == "post_feedforward_layernorm.weight") return blk + "post_ffw_norm.weight";
  } else if (rest == "post_attention_layernorm.weight") {
    return blk + "ffn_norm.weight";
  }
  if (auto it = kLayerMap.find(rest); it != kLayerMap.end()) return blk + it->second;
  // Mixtral experts: stacked by open_directory (this name marks the slot).
  static const std::regex kExpert(R"(block_sparse_moe\.experts\.(\d{1,4})\.(w1|w2|w3)\.weight)");
  std::smatch me;
  if (std::regex_match(rest, me, kExpert)) {
    const std::string w = me[2].str();
    const char* stacked = w == "w1" ? "ffn_gate_exps.weight" : w == "w3" ? "ffn_up_exps.weight" : "ffn_down_exps.weight";
    return blk + stacked + "#" + me[1].str();
  }
  raise(Status::Unsupported, "tensor '%s' is not part of the %s layout this loader knows", n.c_str(), arch.c_str());
}

// ---- the directory -----------------------------------------------------------------

bool is_directory(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

namespace {

// Shard file names come from the index: plain names in the directory only.
void check_shard_name(const std::string& s) {
  if (s.empty() || s.find('/') != std::string::npos || s.find('\\') != std::string::npos || s == "." || s == ".." ||
      s.find('\0') != std::string::npos)
    raise(Status::Format, "model.safetensors.index.json names a shard '%s' that is not a file name in the directory",
          s.c_str());
}

struct Builder {
  std::vector<std::unique_ptr<MappedFile>> files;
  std::vector<uint8_t> owned;  // derived tensors (the last file)
  std::vector<GgufTensorInfo> tensors;
  std::vector<std::pair<GgufTensorInfo, std::vector<uint8_t>>> derived;

  void add_owned(const std::string& name, std::vector<int64_t> dims, DType type, std::vector<uint8_t> bytes) {
    GgufTensorInfo t;
    t.name = name;
    t.dims = std::move(dims);
    t.type = type;
    derived.emplace_back(std::move(t), std::move(bytes));
  }
};

std::vector<float> to_f32(const SafeTensor& st, const uint8_t* p, size_t count) {
  std::vector<float> out(count);
  for (size_t i = 0; i < count; ++i) {
    switch (st.type) {
      case DType::F32: std::memcpy(&out[i], p + 4 * i, 4); break;
      case DType::F16: { uint16_t h; std::memcpy(&h, p + 2 * i, 2); out[i] = fp16_to_f32(h); break; }
      case DType::BF16: { uint16_t h; std::memcpy(&h, p + 2 * i, 2); out[i] = bf16_to_f32(h); break; }
      default: raise(Status::Unsupported, "tensor '%s': dtype %s cannot be read as floats", st.name.c_str(), st.dtype.c_str());
    }
  }
  return out;
}

std::vector<uint8_t> f32_bytes(const std::vector<float>& v) {
  std::vector<uint8_t> b(v.size() * 4);
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

std::vector<float> json_floats(const Json* v, const char* key) {
  if (!v || !v->is_array()) raise(Status::Format, "config.json: %s is not an array of numbers", key);
  std::vector<float> out;
  for (const Json& x : v->items()) out.push_back(static_cast<float>(num(&x, key)));
  return out;
}

using TensorMap = std::map<std::string, std::pair<size_t, const SafeTensor*>>;

// GPTQ / AWQ layers (config.json quantization_config): each X.qweight with its
// X.qzeros, X.scales and X.g_idx becomes the GGUF tensor of X.weight.
void add_quantized_layers(const Json& cfg, const std::string& arch, const TensorMap& by_name, Builder& b,
                          std::set<std::string>& consumed, Meta& meta) {
  const Json* qc = cfg.find("quantization_config");
  bool any = false;
  for (const auto& kv : by_name)
    if (kv.first.size() > 8 && kv.first.compare(kv.first.size() - 8, 8, ".qweight") == 0) any = true;
  if (!qc || qc->is_null()) {
    if (any) raise(Status::Format, "config.json has no quantization_config but the checkpoint has packed .qweight tensors");
    return;
  }
  if (!qc->is_object()) raise(Status::Format, "config.json: quantization_config is not an object");
  const Json* qm = qc->find("quant_method");
  const std::string method = qm && qm->is_string() ? qm->as_string() : "";
  if (method != "gptq" && method != "awq")
    raise(Status::Unsupported, "config.json: quant_method '%s' is not supported (gptq, awq)", method.c_str());
  const Json* bits_v = qc->find("bits");
  if (!bits_v) bits_v = qc->find("w_bit");
  if (!bits_v || !bits_v->is_int() || bits_v->as_int() != 4)
    raise(Status::Unsupported, "config.json: only 4-bit %s checkpoints are supported", method.c_str());
  const Json* gs = qc->find("group_size");
  if (!gs) gs = qc->find("q_group_size");
  if (!gs || !gs->is_int() || gs->as_int() == 0 || gs->as_int() < -1 || gs->as_int() > (1 << 20))
    raise(Status::Format, "config.json: quantization_config has no valid group_size");
  const bool awq = method == "awq";
  bool zero_minus_one = true;
  if (awq) {
    const Json* ver = qc->find("version");
    std::string v = ver && ver->is_string() ? ver->as_string() : "gemm";
    for (char& c : v) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (v != "gemm") raise(Status::Unsupported, "config.json: AWQ version '%s' is not supported (gemm)", v.c_str());
    const Json* zp = qc->find("zero_point");
    if (zp && zp->is_bool() && !zp->as_bool()) raise(Status::Unsupported, "config.json: AWQ without zero points is not supported");
    zero_minus_one = false;
  } else {
    const Json* cf = qc->find("checkpoint_format");
    if (cf && cf->is_string() && cf->as_string() == "gptq_v2") zero_minus_one = false;
    else if (cf && cf->is_string() && cf->as_string() != "gptq")
      raise(Status::Unsupported, "config.json: GPTQ checkpoint_format '%s' is not supported", cf->as_string().c_str());
  }
  int64_t group_sizes = 0, n_permuted = 0, n_expanded = 0;
  for (const auto& kv : by_name) {
    const std::string& n = kv.first;
    if (n.size() <= 8 || n.compare(n.size() - 8, 8, ".qweight") != 0) continue;
    const std::string P = n.substr(0, n.size() - 8);
    auto get = [&](const char* suffix, DType type, bool required) -> const SafeTensor* {
      auto it = by_name.find(P + suffix);
      if (it == by_name.end()) {
        if (required) raise(Status::Format, "%s%s is missing", P.c_str(), suffix);
        return nullptr;
      }
      const SafeTensor* t = it->second.second;
      if (!t->supported || t->type != type || t->shape.size() != (type == DType::I32 && std::strcmp(suffix, ".g_idx") == 0 ? 1u : 2u))
        raise(Status::Format, "%s%s has dtype %s and %zu dimensions, not what %s stores", P.c_str(), suffix,
              t->dtype.c_str(), t->shape.size(), method.c_str());
      consumed.insert(P + suffix);
      return t;
    };
    const SafeTensor* qw = get(".qweight", DType::I32, true);
    const SafeTensor* qz = get(".qzeros", DType::I32, true);
    const SafeTensor* sc = get(".scales", DType::F16, true);
    const SafeTensor* gi = awq ? nullptr : get(".g_idx", DType::I32, false);
    QuantLayer L;
    L.name = P;
    L.awq = awq;
    L.zero_minus_one = zero_minus_one;
    L.n_in = awq ? qw->shape[0] : qw->shape[0] * 8;
    L.n_out = sc->shape[1];
    L.group = gs->as_int() == -1 ? L.n_in : gs->as_int();
    if (gi && gi->shape[0] != L.n_in)
      raise(Status::Format, "%s.g_idx has %lld values for %lld inputs", P.c_str(), (long long)gi->shape[0],
            (long long)L.n_in);
    const int64_t groups = L.group > 0 && L.n_in % L.group == 0 ? L.n_in / L.group : -1;
    const bool ok = groups > 0 && L.n_out % 8 == 0 && qw->shape[1] == (awq ? L.n_out / 8 : L.n_out) &&
                    qz->shape[0] == groups && qz->shape[1] == L.n_out / 8 && sc->shape[0] == groups &&
                    (!gi || gi->shape[0] == L.n_in);
    if (!ok)
      raise(Status::Format, "%s: qweight [%lld, %lld], qzeros [%lld, %lld] and scales [%lld, %lld] do not agree "
            "(group size %lld)", P.c_str(), (long long)qw->shape[0], (long long)qw->shape[1], (long long)qz->shape[0],
            (long long)qz->shape[1], (long long)sc->shape[0], (long long)sc->shape[1], (long long)L.group);
    auto ptr = [&](const SafeTensor* t) {
      return t ? b.files[by_name.at(t->name).first]->data() + t->begin : nullptr;
    };
    L.qweight = ptr(qw);
    L.qzeros = ptr(qz);
    L.scales = ptr(sc);
    L.g_idx = ptr(gi);
    const std::string gname = gguf_tensor_name(arch, P + ".weight");
    if (gname.empty() || gname.find('#') != std::string::npos)
      raise(Status::Unsupported, "%s: quantized tensors of this kind are not supported", P.c_str());
    // The model permutes the input of the matrices it binds with
    // Transformer::weight; the embedding (row lookups) and the MoE router
    // (model/moe.cpp) are read otherwise.
    L.allow_perm = gname != "token_embd.weight" && gname.find("ffn_gate_inp") == std::string::npos;
    PackedInt4 packed = repack_int4(L);
    if (packed.type != DType::F32) group_sizes = dtype_info(packed.type)->block;
    n_expanded += packed.type == DType::F32;
    if (!packed.perm.empty()) {
      // Act-order: the input permutation as the companion tensor "<name>.perm"
      // (a libinfer extension, like W8A8's "<name>.scale": lib/core/dtype.h).
      std::vector<uint8_t> pb(packed.perm.size() * 4);
      std::memcpy(pb.data(), packed.perm.data(), pb.size());
      b.add_owned(gname + ".perm", {L.n_in}, DType::I32, std::move(pb));
      ++n_permuted;
    }
    b.add_owned(gname, {L.n_in, L.n_out}, packed.type, std::move(packed.bytes));
  }
  if (n_permuted > 0)
    log(LogLevel::Info, "%s: %lld act-order layers loaded as INT4 blocks with their input columns permuted",
        method.c_str(), (long long)n_permuted);
  if (n_expanded > 0)
    log(LogLevel::Info, "%s: %lld layers expanded to f32 (the reasons are logged above)", method.c_str(),
        (long long)n_expanded);
  meta.emplace_back("infer.quant.version", GgufValue::make_u32(1));
  meta.emplace_back("infer.quant.type", GgufValue::make_string("int4"));
  if (group_sizes == 32 || group_sizes == 64 || group_sizes == 128)
    meta.emplace_back("infer.quant.group_size", GgufValue::make_u32(static_cast<uint32_t>(group_sizes)));
  meta.emplace_back("infer.quant.method", GgufValue::make_string(method));
}

}  // namespace

std::unique_ptr<GgufFile> open_directory(const std::string& dir_in, bool use_mmap, bool vocab_only) {
  std::string dir = dir_in;
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  const std::string cfg_path = dir + "/config.json";
  if (!file_exists(cfg_path))
    raise(Status::Io, "%s: not a model directory (no config.json; a Hugging Face model directory holds config.json, "
          "*.safetensors and tokenizer.json)", dir.c_str());
  const std::string cfg_text = read_text(cfg_path, uint64_t(16) << 20);
  Meta meta = config_metadata(cfg_text);
  // A config.json without _name_or_path (most saved checkpoints): the
  // directory's own name, as `infer info` and /v1/models show it.
  if (std::none_of(meta.begin(), meta.end(), [](const auto& kv) { return kv.first == "general.name"; })) {
    const size_t slash = dir.rfind('/');
    const std::string base = slash == std::string::npos ? dir : dir.substr(slash + 1);
    if (!base.empty() && base != "." && base != "..") meta.emplace_back("general.name", GgufValue::make_string(base));
  }
  Json cfg_store;
  const Json& cfg = parse_object(cfg_text, "config.json", cfg_store);
  const Arch& arch = find_arch(cfg);

  // ---- shards
  Builder b;
  std::vector<std::vector<SafeTensor>> shard_tensors;
  std::map<std::string, std::pair<size_t, const SafeTensor*>> by_name;  // HF name -> (file, tensor)
  if (!vocab_only) {
    std::vector<std::string> shards;
    std::map<std::string, std::string> weight_map;
    const std::string index_path = dir + "/model.safetensors.index.json";
    if (file_exists(index_path)) {
      Json idx_store;
      const Json& idx = parse_object(read_text(index_path, uint64_t(64) << 20), "model.safetensors.index.json", idx_store);
      const Json* wm = idx.find("weight_map");
      if (!wm || !wm->is_object() || wm->members().empty())
        raise(Status::Format, "model.safetensors.index.json has no weight_map object");
      std::set<std::string> seen;
      for (const auto& [tn, file] : wm->members()) {
        if (!file.is_string()) raise(Status::Format, "model.safetensors.index.json: '%s' maps to %s, not a file name",
                                     tn.c_str(), json_kind_name(file.kind()));
        check_shard_name(file.as_string());
        if (!weight_map.emplace(tn, file.as_string()).second)
          raise(Status::Format, "model.safetensors.index.json lists tensor '%s' twice", tn.c_str());
        if (seen.insert(file.as_string()).second) shards.push_back(file.as_string());
      }
      std::sort(shards.begin(), shards.end());
    } else if (file_exists(dir + "/model.safetensors")) {
      shards.push_back("model.safetensors");
    } else {
      raise(Status::Io, "%s: no model.safetensors and no model.safetensors.index.json", dir.c_str());
    }
    for (const std::string& s : shards) {
      const std::string p = dir + "/" + s;
      if (!file_exists(p)) raise(Status::Io, "%s: shard '%s' is missing", dir.c_str(), s.c_str());
      b.files.push_back(MappedFile::open(p, use_mmap));
      shard_tensors.push_back(parse_safetensors(b.files.back()->data(), b.files.back()->size(), s));
    }
    for (size_t f = 0; f < shard_tensors.size(); ++f)
      for (const SafeTensor& t : shard_tensors[f]) {
        if (!weight_map.empty()) {
          auto it = weight_map.find(t.name);
          if (it == weight_map.end() || it->second != shards[f]) {
            log(LogLevel::Warn, "%s: tensor '%s' is not listed for it in the index: ignored", shards[f].c_str(), t.name.c_str());
            continue;
          }
        }
        if (!by_name.emplace(t.name, std::make_pair(f, &t)).second)
          raise(Status::Format, "tensor '%s' is in two shards", t.name.c_str());
      }
    for (const auto& [tn, file] : weight_map)
      if (!by_name.count(tn))
        raise(Status::Format, "model.safetensors.index.json puts tensor '%s' in '%s', which does not hold it", tn.c_str(),
              file.c_str());
  }

  // ---- state-space models: canonical names, then every tensor checked
  // against the layout config.json describes before anything is mapped.
  const bool ssm = is_ssm(arch.hf);
  SsmLayout ssm_shape;
  if (ssm && !vocab_only) {
    ssm_shape = ssm_layout(cfg, arch.hf);
    std::map<std::string, std::pair<size_t, const SafeTensor*>> renamed;
    std::map<std::string, std::vector<int64_t>> shapes;
    for (const auto& [n, loc] : by_name) {
      const std::string c = ssm_canonical_name(n, &ssm_shape);
      if (!renamed.emplace(c, loc).second)
        raise(Status::Format, "tensors '%s' and '%s' are the same tensor under two spellings", n.c_str(),
              renamed.at(c).second->name.c_str());
      shapes[c] = loc.second->shape;
    }
    by_name = std::move(renamed);
    ssm_check_tensors(ssm_shape, shapes, nullptr);
  }

  // ---- tensors
  const bool gemma = arch.hf == "gemma" || arch.hf == "gemma2";
  struct ExpertSlot {
    std::vector<const SafeTensor*> parts;
    std::vector<size_t> files;
  };
  std::map<std::string, ExpertSlot> experts;
  int64_t embd_rows = 0;
  std::set<std::string> consumed;
  if (!vocab_only) add_quantized_layers(cfg, arch.hf, by_name, b, consumed, meta);
  // A BERT checkpoint's pooler is the reranker head's first half only when a
  // classifier follows it; a BertModel's pooler is not used for embeddings.
  const bool classifier = by_name.count("classifier.weight") || by_name.count("bert.classifier.weight");
  for (const auto& [hf_name, loc] : by_name) {
    if (consumed.count(hf_name)) continue;
    const SafeTensor& st = *loc.second;
    std::string name = gguf_tensor_name(arch.hf, hf_name);
    if (name.empty()) continue;
    if (is_encoder(arch.hf) && !classifier && (name == "cls.weight" || name == "cls.bias")) continue;
    if (!st.supported)
      raise(Status::Unsupported, "tensor '%s' has dtype %s (supported: F32, F16, BF16)", hf_name.c_str(), st.dtype.c_str());
    if (st.shape.empty() || st.shape.size() > 3)
      raise(Status::Format, "tensor '%s' has %zu dimensions", hf_name.c_str(), st.shape.size());
    for (int64_t d : st.shape)
      if (d <= 0) raise(Status::Format, "tensor '%s' has an empty dimension", hf_name.c_str());
    if (st.type != DType::F32 && st.type != DType::F16 && st.type != DType::BF16)
      raise(Status::Unsupported, "tensor '%s' has dtype %s (supported: F32, F16, BF16)", hf_name.c_str(), st.dtype.c_str());
    std::vector<int64_t> dims(st.shape.rbegin(), st.shape.rend());
    if (name == "token_embd.weight") embd_rows = st.shape[0];
    const size_t hash = name.find('#');
    if (hash != std::string::npos) {
      const std::string base = name.substr(0, hash);
      const size_t e = std::stoul(name.substr(hash + 1));
      ExpertSlot& s = experts[base];
      if (s.parts.size() <= e) { s.parts.resize(e + 1, nullptr); s.files.resize(e + 1, 0); }
      s.parts[e] = &st;
      s.files[e] = loc.first;
      continue;
    }
    const uint8_t* p = b.files[loc.first]->data() + st.begin;
    const size_t count = static_cast<size_t>((st.end - st.begin) / dtype_info(st.type)->bytes);
    if (ssm) {
      const SsmView v = ssm_view(ssm_shape, name, hf_name, st.shape);
      dims = v.dims;
      if (v.neg_exp || (v.to_f32 && st.type != DType::F32)) {
        std::vector<float> f = to_f32(st, p, count);
        if (v.neg_exp)
          for (float& x : f) {
            x = -std::exp(x);
            if (!std::isfinite(x))
              raise(Status::Format, "tensor '%s' holds a value whose A = -exp(A_log) is not finite", hf_name.c_str());
          }
        b.add_owned(name, dims, DType::F32, f32_bytes(f));
        continue;
      }
    }
    const bool is_norm = name.find("norm.weight") != std::string::npos;
    if (gemma && is_norm) {
      std::vector<float> v = to_f32(st, p, count);
      for (float& x : v) x += 1.0f;
      b.add_owned(name, dims, DType::F32, f32_bytes(v));
      continue;
    }
    const uint32_t esize = dtype_info(st.type)->bytes;
    if (reinterpret_cast<uintptr_t>(p) % esize != 0) {  // unaligned: a copy
      b.add_owned(name, dims, st.type, std::vector<uint8_t>(p, p + (st.end - st.begin)));
      continue;
    }
    GgufTensorInfo t;
    t.name = name;
    t.dims = dims;
    t.type = st.type;
    t.offset = st.begin;
    t.source = static_cast<uint32_t>(loc.first);
    b.tensors.push_back(std::move(t));
  }
  for (const auto& [base, s] : experts) {
    const SafeTensor* first = s.parts.empty() ? nullptr : s.parts[0];
    for (size_t e = 0; e < s.parts.size(); ++e) {
      if (!s.parts[e]) raise(Status::Format, "%s: expert %zu is missing", base.c_str(), e);
      if (s.parts[e]->type != first->type || s.parts[e]->shape != first->shape)
        raise(Status::Format, "%s: expert %zu differs in dtype or shape from expert 0", base.c_str(), e);
    }
    std::vector<uint8_t> bytes;
    for (size_t e = 0; e < s.parts.size(); ++e) {
      const uint8_t* p = b.files[s.files[e]]->data() + s.parts[e]->begin;
      bytes.insert(bytes.end(), p, p + (s.parts[e]->end - s.parts[e]->begin));
    }
    std::vector<int64_t> dims(first->shape.rbegin(), first->shape.rend());
    dims.push_back(static_cast<int64_t>(s.parts.size()));
    b.add_owned(base, dims, first->type, std::move(bytes));
  }
  if (!vocab_only) {
    if (embd_rows == 0)
      raise(Status::Format, "%s: no %s", dir.c_str(),
            is_encoder(arch.hf) ? "embeddings.word_embeddings.weight" : "model.embed_tokens.weight");
    // Phi-3 long-rope factors.
    if (const Json* rs = cfg.find("rope_scaling"); rs && rs->is_object() && arch.hf == "phi3") {
      const Json* t = rs->find("type");
      if (!t) t = rs->find("rope_type");
      if (t && t->is_string() && (t->as_string() == "longrope" || t->as_string() == "su")) {
        std::vector<float> lf = json_floats(rs->find("long_factor"), "rope_scaling.long_factor");
        std::vector<float> sf = json_floats(rs->find("short_factor"), "rope_scaling.short_factor");
        if (lf.empty() || lf.size() != sf.size())
          raise(Status::Format, "config.json: rope_scaling long_factor and short_factor differ in length");
        const int64_t n = static_cast<int64_t>(lf.size());
        b.add_owned("rope_factors_long.weight", {n}, DType::F32, f32_bytes(lf));
        b.add_owned("rope_factors_short.weight", {n}, DType::F32, f32_bytes(sf));
      }
    }
  }

  // ---- sentence-transformers pooling (modules.json), unless config.json said (a classifier ranks)
  for (auto& kv : sentence_transformers_metadata(dir, arch.gguf))
    if (std::none_of(meta.begin(), meta.end(), [&](const auto& x) { return x.first == kv.first; }))
      meta.push_back(std::move(kv));

  // ---- tokenizer
  const std::string tok_path = dir + "/tokenizer.json";
  if (!file_exists(tok_path))
    raise(Status::Io, "%s: no tokenizer.json (only tokenizer.json tokenizers are supported)", dir.c_str());
  const std::string tc_path = dir + "/tokenizer_config.json";
  const std::string tc = file_exists(tc_path) ? read_text(tc_path, uint64_t(64) << 20) : std::string();
  Meta tmeta = tokenizer_metadata(read_text(tok_path), tc, cfg_text, embd_rows);
  for (auto& kv : tmeta) meta.push_back(std::move(kv));

  // ---- derived tensors into one owned buffer, 32-byte aligned
  if (!b.derived.empty() || b.files.empty()) {
    const uint32_t src = static_cast<uint32_t>(b.files.size());
    for (auto& [t, bytes] : b.derived) {
      b.owned.resize((b.owned.size() + 31) / 32 * 32);
      t.offset = b.owned.size();
      t.source = src;
      b.owned.insert(b.owned.end(), bytes.begin(), bytes.end());
      b.tensors.push_back(t);
    }
    if (b.owned.empty()) b.owned.resize(32);
    b.files.push_back(MappedFile::own(std::move(b.owned)));
  }
  // Tensors in a stable order: by GGUF name with block numbers in order.
  auto key = [](const std::string& n) {
    if (n.rfind("blk.", 0) != 0) return std::make_pair(n == "token_embd.weight" ? -2L : 1L << 30, n);
    return std::make_pair(std::strtol(n.c_str() + 4, nullptr, 10), n);
  };
  std::sort(b.tensors.begin(), b.tensors.end(),
            [&](const GgufTensorInfo& x, const GgufTensorInfo& y) { return key(x.name) < key(y.name); });
  try {
    return GgufFile::assemble(std::move(b.files), std::move(meta), std::move(b.tensors));
  } catch (const Error& e) {
    throw Error(e.status(), strformat("%s: %s", dir.c_str(), e.what()));
  }
}

}  // namespace hf
}  // namespace infer
