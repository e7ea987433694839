// Hugging Face encoders: BERT and nomic-bert config.json, tensor names,
// sentence-transformers pooling and WordPiece tokenizer.json (hf_encoder.h).
//
// Layouts, from the published checkpoints:
//  - BERT (BertModel; BertForMaskedLM and BertForSequenceClassification add the
//    prefix "bert."): embeddings.{word,position,token_type}_embeddings,
//    embeddings.LayerNorm, encoder.layer.N.attention.self.{query,key,value},
//    attention.output.dense, attention.output.LayerNorm, intermediate.dense,
//    output.dense, output.LayerNorm; pooler.dense and classifier (a sequence
//    classifier: the reranker head cls / cls.output). Old checkpoints name
//    LayerNorm parameters gamma/beta. Every matrix is [out, in] as GGUF's
//    [in, out] is, so nothing is transposed.
//  - NomicBertModel: embeddings.{word,token_type}_embeddings, emb_ln,
//    encoder.layers.N.attn.Wqkv (rows Q, K, V: GGUF's attn_qkv), attn.out_proj,
//    mlp.fc11 (up), mlp.fc12 (gate, SiLU), mlp.fc2 (down), norm1, norm2;
//    rotary in the rotate-half pairing (rotary_emb_interleaved false), which is
//    the pairing the nomic-bert architecture applies.
#include "hf/hf_encoder.h"
#include "hf/hf.h"

#include <sys/stat.h>

#include <cmath>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>
#include <unordered_map>

#include "core/error.h"
#include "core/log.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/wordpiece.h"

namespace infer {
namespace hf {

namespace {

int64_t get_int(const Json& cfg, std::initializer_list<const char*> keys, int64_t dflt, bool required,
                int64_t lo = 1, int64_t hi = int64_t(1) << 31) {
  for (const char* key : keys) {
    const Json* v = cfg.find(key);
    if (!v || v->is_null()) continue;
    if (!v->is_int()) raise(Status::Format, "config.json: %s is %s, not an integer", key, json_kind_name(v->kind()));
    if (v->as_int() < lo || v->as_int() > hi)
      raise(Status::Format, "config.json: %s = %lld is out of range [%lld, %lld]", key, (long long)v->as_int(),
            (long long)lo, (long long)hi);
    return v->as_int();
  }
  if (required) raise(Status::Format, "config.json has no %s", *keys.begin());
  return dflt;
}

double get_float(const Json& cfg, std::initializer_list<const char*> keys, double dflt) {
  for (const char* key : keys) {
    const Json* v = cfg.find(key);
    if (!v || v->is_null()) continue;
    if (!v->is_number() || !std::isfinite(v->as_double()))
      raise(Status::Format, "config.json: %s is %s, not a finite number", key, json_kind_name(v->kind()));
    return v->as_double();
  }
  return dflt;
}

std::string get_string(const Json& cfg, const char* key, const std::string& dflt) {
  const Json* v = cfg.find(key);
  if (!v || v->is_null()) return dflt;
  if (!v->is_string()) raise(Status::Format, "config.json: %s is %s, not a string", key, json_kind_name(v->kind()));
  return v->as_string();
}

bool get_bool(const Json& cfg, const char* key, bool dflt) {
  const Json* v = cfg.find(key);
  if (!v || v->is_null()) return dflt;
  if (!v->is_bool()) raise(Status::Format, "config.json: %s is %s, not a boolean", key, json_kind_name(v->kind()));
  return v->as_bool();
}

bool has_architecture(const Json& cfg, const char* name) {
  if (const Json* a = cfg.find("architectures"); a && a->is_array())
    for (const Json& x : a->items())
      if (x.is_string() && x.as_string() == name) return true;
  return false;
}

bool file_exists(const std::string& p) {
  struct stat st;
  return ::stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

Json read_json_file(const std::string& path, const char* what) {
  std::ifstream f(path, std::ios::binary);
  if (!f) raise(Status::Io, "%s: cannot read", path.c_str());
  std::stringstream ss;
  ss << f.rdbuf();
  const std::string text = ss.str();
  if (text.size() > (size_t(1) << 20)) raise(Status::Format, "%s is too large", path.c_str());
  Json j = Json::parse(text, what);
  return j;
}

}  // namespace

bool is_encoder(const std::string& model_type) { return model_type == "bert" || model_type == "nomic_bert"; }

MetaList encoder_config_metadata(const Json& cfg, const std::string& model_type) {
  const bool nomic = model_type == "nomic_bert";
  const std::string a = nomic ? "nomic-bert" : "bert";
  MetaList m;
  auto k = [&](const char* suffix) { return a + "." + suffix; };
  auto u32 = [&](const char* suffix, int64_t v) { m.emplace_back(k(suffix), GgufValue::make_u32(static_cast<uint32_t>(v))); };
  auto f32 = [&](const char* suffix, double v) { m.emplace_back(k(suffix), GgufValue::make_f32(static_cast<float>(v))); };
  m.emplace_back("general.architecture", GgufValue::make_string(a));
  if (const Json* n = cfg.find("_name_or_path"); n && n->is_string() && !n->as_string().empty())
    m.emplace_back("general.name", GgufValue::make_string(n->as_string()));
  m.emplace_back("general.source.model_type", GgufValue::make_string(model_type));

  int64_t n_embd, n_layer, n_head, n_ff, n_ctx;
  double eps;
  if (nomic) {
    // NomicBertConfig spells GPT-2's names; hidden_size etc. are accepted too.
    n_embd = get_int(cfg, {"n_embd", "hidden_size"}, 0, true);
    n_layer = get_int(cfg, {"n_layer", "num_hidden_layers"}, 0, true, 1, 1 << 16);
    n_head = get_int(cfg, {"n_head", "num_attention_heads"}, 0, true, 1, 1 << 16);
    n_ff = get_int(cfg, {"n_inner", "intermediate_size"}, 4 * n_embd, false);
    n_ctx = get_int(cfg, {"n_positions", "max_position_embeddings"}, 2048, false);
    eps = get_float(cfg, {"layer_norm_epsilon", "layer_norm_eps"}, 1e-12);
    const std::string act = get_string(cfg, "activation_function", "swiglu");
    if (act != "swiglu")
      raise(Status::Unsupported, "config.json: nomic_bert activation_function '%s' is not supported (swiglu)", act.c_str());
    if (get_bool(cfg, "rotary_emb_interleaved", false))
      raise(Status::Unsupported, "config.json: nomic_bert with rotary_emb_interleaved is not supported (rotate-half only)");
    const double frac = get_float(cfg, {"rotary_emb_fraction"}, 1.0);
    if (frac != 1.0) raise(Status::Unsupported, "config.json: nomic_bert rotary_emb_fraction %g is not supported (1.0)", frac);
    if (get_float(cfg, {"rotary_scaling_factor"}, 0.0) != 0.0)
      raise(Status::Unsupported, "config.json: nomic_bert with rotary_scaling_factor is not supported");
    for (const char* b : {"qkv_proj_bias", "mlp_fc1_bias", "mlp_fc2_bias"})
      if (get_bool(cfg, b, false)) raise(Status::Unsupported, "config.json: nomic_bert with %s is not supported", b);
    if (get_bool(cfg, "prenorm", false))
      raise(Status::Unsupported, "config.json: nomic_bert with prenorm is not supported (post-norm only)");
    if (get_bool(cfg, "causal", false)) raise(Status::Unsupported, "config.json: causal nomic_bert is not supported");
    const double base = get_float(cfg, {"rotary_emb_base", "rope_theta"}, 10000.0);
    if (!(base > 0)) raise(Status::Format, "config.json: rotary_emb_base %g is not positive", base);
    f32("rope.freq_base", base);
  } else {
    n_embd = get_int(cfg, {"hidden_size"}, 0, true);
    n_layer = get_int(cfg, {"num_hidden_layers"}, 0, true, 1, 1 << 16);
    n_head = get_int(cfg, {"num_attention_heads"}, 0, true, 1, 1 << 16);
    n_ff = get_int(cfg, {"intermediate_size"}, 0, true);
    n_ctx = get_int(cfg, {"max_position_embeddings"}, 512, false);
    eps = get_float(cfg, {"layer_norm_eps"}, 1e-12);
    const std::string act = get_string(cfg, "hidden_act", "gelu");
    if (act != "gelu")
      raise(Status::Unsupported, "config.json: bert hidden_act '%s' is not supported (gelu, the erf form)", act.c_str());
    const std::string pe = get_string(cfg, "position_embedding_type", "absolute");
    if (pe != "absolute")
      raise(Status::Unsupported, "config.json: bert position_embedding_type '%s' is not supported (absolute)", pe.c_str());
    if (get_bool(cfg, "is_decoder", false)) raise(Status::Unsupported, "config.json: a bert decoder is not supported");
    if (has_architecture(cfg, "BertForSequenceClassification")) u32("pooling_type", 4);  // rank
  }
  if (n_embd % n_head != 0)
    raise(Status::Format, "config.json: hidden size %lld is not a multiple of the %lld heads", (long long)n_embd,
          (long long)n_head);
  if (!(eps > 0 && eps < 1)) raise(Status::Format, "config.json: layer norm epsilon %g is out of range", eps);
  u32("context_length", n_ctx);
  u32("embedding_length", n_embd);
  u32("feed_forward_length", n_ff);
  u32("block_count", n_layer);
  u32("attention.head_count", n_head);
  f32("attention.layer_norm_epsilon", eps);
  m.emplace_back(k("attention.causal"), GgufValue::make_bool(false));
  return m;
}

std::string encoder_tensor_name(const std::string& model_type, const std::string& hf_name) {
  const bool nomic = model_type == "nomic_bert";
  std::string n = hf_name;
  if (n.rfind("bert.", 0) == 0) n = n.substr(5);
  // LayerNorm parameters of old checkpoints.
  auto fix_ln = [](std::string s) {
    if (s.size() > 6 && s.compare(s.size() - 6, 6, ".gamma") == 0) return s.substr(0, s.size() - 6) + ".weight";
    if (s.size() > 5 && s.compare(s.size() - 5, 5, ".beta") == 0) return s.substr(0, s.size() - 5) + ".bias";
    return s;
  };
  n = fix_ln(n);
  static const std::map<std::string, std::string> kTop = {
      {"embeddings.word_embeddings.weight", "token_embd.weight"},
      {"embeddings.token_type_embeddings.weight", "token_types.weight"},
      {"embeddings.position_embeddings.weight", "position_embd.weight"},
      {"embeddings.LayerNorm.weight", "token_embd_norm.weight"},
      {"embeddings.LayerNorm.bias", "token_embd_norm.bias"},
      {"emb_ln.weight", "token_embd_norm.weight"},
      {"emb_ln.bias", "token_embd_norm.bias"},
      {"pooler.dense.weight", "cls.weight"},
      {"pooler.dense.bias", "cls.bias"},
      {"classifier.weight", "cls.output.weight"},
      {"classifier.bias", "cls.output.bias"},
  };
  if (n == "embeddings.position_ids" || n.rfind("cls.predictions.", 0) == 0 || n.rfind("cls.seq_relationship.", 0) == 0 ||
      n.find("rotary_emb.inv_freq") != std::string::npos)
    return "";  // buffers and the masked-LM / next-sentence heads
  if (auto it = kTop.find(n); it != kTop.end()) {
    if (nomic && (it->second == "position_embd.weight" || it->second.rfind("cls", 0) == 0))
      raise(Status::Unsupported, "tensor '%s' is not part of the nomic_bert layout this loader knows", hf_name.c_str());
    return it->second;
  }
  static const std::regex kBert(R"(encoder\.layer\.(\d{1,5})\.(.+))");
  static const std::regex kNomic(R"(encoder\.layers\.(\d{1,5})\.(.+))");
  static const std::map<std::string, std::string> kBertLayer = {
      {"attention.self.query.weight", "attn_q.weight"},     {"attention.self.query.bias", "attn_q.bias"},
      {"attention.self.key.weight", "attn_k.weight"},       {"attention.self.key.bias", "attn_k.bias"},
      {"attention.self.value.weight", "attn_v.weight"},     {"attention.self.value.bias", "attn_v.bias"},
      {"attention.output.dense.weight", "attn_output.weight"}, {"attention.output.dense.bias", "attn_output.bias"},
      {"attention.output.LayerNorm.weight", "attn_output_norm.weight"},
      {"attention.output.LayerNorm.bias", "attn_output_norm.bias"},
      {"intermediate.dense.weight", "ffn_up.weight"},       {"intermediate.dense.bias", "ffn_up.bias"},
      {"output.dense.weight", "ffn_down.weight"},           {"output.dense.bias", "ffn_down.bias"},
      {"output.LayerNorm.weight", "layer_output_norm.weight"}, {"output.LayerNorm.bias", "layer_output_norm.bias"},
  };
  static const std::map<std::string, std::string> kNomicLayer = {
      {"attn.Wqkv.weight", "attn_qkv.weight"}, {"attn.out_proj.weight", "attn_output.weight"},
      {"mlp.fc11.weight", "ffn_up.weight"},    {"mlp.fc12.weight", "ffn_gate.weight"},
      {"mlp.fc2.weight", "ffn_down.weight"},   {"norm1.weight", "attn_output_norm.weight"},
      {"norm1.bias", "attn_output_norm.bias"}, {"norm2.weight", "layer_output_norm.weight"},
      {"norm2.bias", "layer_output_norm.bias"},
  };
  std::smatch mt;
  if (std::regex_match(n, mt, nomic ? kNomic : kBert)) {
    const auto& table = nomic ? kNomicLayer : kBertLayer;
    if (auto it = table.find(mt[2].str()); it != table.end()) return "blk." + mt[1].str() + "." + it->second;
  }
  raise(Status::Unsupported, "tensor '%s' is not part of the %s layout this loader knows", hf_name.c_str(),
        model_type.c_str());
}

MetaList sentence_transformers_metadata(const std::string& dir, const std::string& gguf_arch) {
  MetaList m;
  const std::string modules_path = dir + "/modules.json";
  if (!file_exists(modules_path)) return m;
  const Json mods = read_json_file(modules_path, "modules.json");
  if (!mods.is_array()) raise(Status::Format, "%s is not a JSON array of modules", modules_path.c_str());
  int64_t pooling = -1;
  for (const Json& mod : mods.items()) {
    const Json* type = mod.find("type");
    const Json* path = mod.find("path");
    if (!type || !type->is_string()) raise(Status::Format, "modules.json: a module has no type string");
    const std::string& t = type->as_string();
    const std::string kind = t.substr(t.rfind('.') == std::string::npos ? 0 : t.rfind('.') + 1);
    if (kind == "Transformer") continue;
    if (kind == "Normalize") continue;  // embeddings are L2-normalized by default (EmbedOptions)
    if (kind != "Pooling")
      raise(Status::Unsupported, "modules.json: module '%s' is not supported (Transformer, Pooling, Normalize): it "
            "would change the embedding", t.c_str());
    if (!path || !path->is_string() || path->as_string().empty() || path->as_string().find("..") != std::string::npos ||
        path->as_string()[0] == '/')
      raise(Status::Format, "modules.json: the Pooling module has no relative path");
    const std::string pc_path = dir + "/" + path->as_string() + "/config.json";
    if (!file_exists(pc_path)) raise(Status::Io, "%s: the Pooling module's config.json is missing", pc_path.c_str());
    const Json pc = read_json_file(pc_path, "Pooling config.json");
    if (!pc.is_object()) raise(Status::Format, "%s is not a JSON object", pc_path.c_str());
    static const std::pair<const char*, int64_t> kModes[] = {
        {"pooling_mode_cls_token", 2},        {"pooling_mode_mean_tokens", 1},
        {"pooling_mode_lasttoken", 3},        {"pooling_mode_max_tokens", -2},
        {"pooling_mode_mean_sqrt_len_tokens", -2}, {"pooling_mode_weightedmean_tokens", -2},
    };
    std::vector<std::string> on;
    int64_t mode = -1;
    for (const auto& [key, value] : kModes) {
      const Json* v = pc.find(key);
      if (v && v->is_bool() && v->as_bool()) {
        on.push_back(key);
        mode = value;
      }
    }
    if (on.empty()) raise(Status::Unsupported, "%s: no pooling mode is set", pc_path.c_str());
    if (on.size() > 1) {
      std::string list;
      for (const std::string& s : on) list += (list.empty() ? "" : ", ") + s;
      raise(Status::Unsupported, "%s: several pooling modes at once (%s) are not supported", pc_path.c_str(), list.c_str());
    }
    if (mode < 0)
      raise(Status::Unsupported, "%s: %s is not supported (cls, mean, last token)", pc_path.c_str(), on[0].c_str());
    if (pooling >= 0) raise(Status::Unsupported, "modules.json: two Pooling modules are not supported");
    pooling = mode;
  }
  if (pooling >= 0) m.emplace_back(gguf_arch + ".pooling_type", GgufValue::make_u32(static_cast<uint32_t>(pooling)));
  return m;
}

MetaList wordpiece_metadata(const Json& tj, const Json& tc, const Json& cfg, int64_t n_vocab_min) {
  const Json* model = tj.find("model");
  // The normalizer and pre-tokenizer: BERT's (uncased, Chinese characters split).
  if (const Json* n = tj.find("normalizer"); n && !n->is_null()) {
    const Json* t = n->find("type");
    if (!t || !t->is_string() || t->as_string() != "BertNormalizer")
      raise(Status::Unsupported, "tokenizer.json: a WordPiece tokenizer's normalizer must be BertNormalizer");
    auto flag = [&](const char* key, bool dflt) {
      const Json* v = n->find(key);
      return v && v->is_bool() ? v->as_bool() : dflt;
    };
    const bool lower = flag("lowercase", true);
    const Json* sa = n->find("strip_accents");
    const bool strip = sa && sa->is_bool() ? sa->as_bool() : lower;  // null: as lowercase
    if (!lower || !strip || !flag("handle_chinese_chars", true) || !flag("clean_text", true))
      raise(Status::Unsupported, "tokenizer.json: BertNormalizer without lowercase, strip_accents, clean_text and "
            "handle_chinese_chars (a cased model) is not supported");
  } else {
    raise(Status::Unsupported, "tokenizer.json: a WordPiece tokenizer without a BertNormalizer is not supported");
  }
  if (const Json* p = tj.find("pre_tokenizer"); p && !p->is_null()) {
    const Json* t = p->find("type");
    if (!t || !t->is_string() || t->as_string() != "BertPreTokenizer")
      raise(Status::Unsupported, "tokenizer.json: a WordPiece tokenizer's pre_tokenizer must be BertPreTokenizer");
  }
  if (const Json* c = model->find("continuing_subword_prefix"); c && !c->is_null() &&
                                                                   (!c->is_string() || c->as_string() != "##"))
    raise(Status::Unsupported, "tokenizer.json: WordPiece continuing_subword_prefix must be \"##\"");
  if (const Json* c = model->find("max_input_chars_per_word"); c && !c->is_null() && (!c->is_int() || c->as_int() != 100))
    raise(Status::Unsupported, "tokenizer.json: WordPiece max_input_chars_per_word must be 100");

  // Tokens: the vocabulary, then added tokens at their ids.
  const Json* vocab = model->find("vocab");
  if (!vocab || !vocab->is_object()) raise(Status::Format, "tokenizer.json: model.vocab is not an object");
  std::vector<std::string> tokens;
  std::vector<int32_t> types;
  read_tokenizer_vocab(tj, *vocab, n_vocab_min, /*byte_tokens=*/false, tokens, types);
  std::unordered_map<std::string, int32_t> index;
  for (size_t i = 0; i < tokens.size(); ++i) index.emplace(tokens[i], static_cast<int32_t>(i));
  auto id_of = [&](const std::string& s) -> int64_t {
    auto it = index.find(s);
    return it == index.end() ? -1 : it->second;
  };
  auto tc_token = [&](const char* key, const char* dflt) -> std::string {
    const Json* v = tc.is_object() ? tc.find(key) : nullptr;
    if (v && v->is_string()) return v->as_string();
    if (v && v->is_object())
      if (const Json* c = v->find("content"); c && c->is_string()) return c->as_string();
    return dflt;
  };

  // [CLS] and [SEP]: the post-processor's (BertProcessing or TemplateProcessing), else tokenizer_config's.
  std::string cls = tc_token("cls_token", "[CLS]"), sep = tc_token("sep_token", "[SEP]");
  if (const Json* pp = tj.find("post_processor"); pp && pp->is_object()) {
    const Json* t = pp->find("type");
    const std::string pt = t && t->is_string() ? t->as_string() : "";
    if (pt == "BertProcessing") {
      auto pair_name = [&](const char* key, std::string& out) {
        const Json* v = pp->find(key);
        if (!v || !v->is_array() || v->items().size() != 2 || !v->items()[0].is_string())
          raise(Status::Format, "tokenizer.json: BertProcessing %s is not [token, id]", key);
        out = v->items()[0].as_string();
      };
      pair_name("cls", cls);
      pair_name("sep", sep);
    } else if (pt == "TemplateProcessing") {
      const Json* single = pp->find("single");
      if (!single || !single->is_array() || single->items().size() != 3)
        raise(Status::Unsupported, "tokenizer.json: a WordPiece TemplateProcessing must be [CLS] $A [SEP]");
      auto special = [&](const Json& x) -> std::string {
        const Json* s = x.find("SpecialToken");
        const Json* id = s ? s->find("id") : nullptr;
        if (!id || !id->is_string())
          raise(Status::Unsupported, "tokenizer.json: a WordPiece TemplateProcessing must be [CLS] $A [SEP]");
        return id->as_string();
      };
      cls = special(single->items()[0]);
      sep = special(single->items()[2]);
    } else if (!pt.empty()) {
      raise(Status::Unsupported, "tokenizer.json: post_processor '%s' is not supported for WordPiece", pt.c_str());
    }
  }
  const int64_t cls_id = id_of(cls), sep_id = id_of(sep);
  if (cls_id < 0 || sep_id < 0)
    raise(Status::Format, "tokenizer.json: the vocabulary has no '%s' or no '%s' (the [CLS] and [SEP] tokens)",
          cls.c_str(), sep.c_str());
  std::string unk = "[UNK]";
  if (const Json* u = model->find("unk_token"); u && u->is_string()) unk = u->as_string();
  const int64_t unk_id = id_of(unk);
  if (unk_id < 0) raise(Status::Format, "tokenizer.json: the unknown token '%s' is not in the vocabulary", unk.c_str());
  if (types[unk_id] == static_cast<int32_t>(TokenType::Normal)) types[unk_id] = static_cast<int32_t>(TokenType::Unknown);
  // The specials are control tokens even when a file lists them only in the vocabulary.
  const int64_t pad_id = id_of(tc_token("pad_token", "[PAD]")), mask_id = id_of(tc_token("mask_token", "[MASK]"));
  for (int64_t i : {cls_id, sep_id, pad_id, mask_id})
    if (i >= 0) types[i] = static_cast<int32_t>(TokenType::Control);

  MetaList m;
  auto u32 = [&](const char* key, int64_t v) {
    if (v >= 0) m.emplace_back(key, GgufValue::make_u32(static_cast<uint32_t>(v)));
  };
  m.emplace_back("tokenizer.ggml.model", GgufValue::make_string("bert"));
  // Written in the GGUF spelling ("▁word", bare continuations), so a
  // converted file is what other GGUF readers expect.
  m.emplace_back("tokenizer.ggml.tokens", GgufValue::make_string_array(wordpiece_to_gguf_spelling(tokens, types)));
  m.emplace_back("tokenizer.ggml.token_type", GgufValue::make_i32_array(types));
  const Json* tv = cfg.is_object() ? cfg.find("type_vocab_size") : nullptr;
  u32("tokenizer.ggml.token_type_count", tv && tv->is_int() && tv->as_int() > 0 && tv->as_int() <= 16 ? tv->as_int() : 2);
  u32("tokenizer.ggml.padding_token_id", pad_id);
  u32("tokenizer.ggml.unknown_token_id", unk_id);
  u32("tokenizer.ggml.cls_token_id", cls_id);
  u32("tokenizer.ggml.seperator_token_id", sep_id);  // sic: the ecosystem's key
  u32("tokenizer.ggml.mask_token_id", mask_id);
  u32("tokenizer.ggml.bos_token_id", cls_id);
  u32("tokenizer.ggml.eos_token_id", sep_id);
  m.emplace_back("tokenizer.ggml.add_bos_token", GgufValue::make_bool(true));
  m.emplace_back("tokenizer.ggml.add_eos_token", GgufValue::make_bool(true));
  return m;
}

}  // namespace hf
}  // namespace infer
