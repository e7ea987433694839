// Test helper: writes a GGUF model (or just its vocabulary) as a Hugging Face
// directory the way the published checkpoints lay it out: config.json,
// safetensors (one file, or shards with model.safetensors.index.json; F32,
// F16 or BF16), tokenizer.json and tokenizer_config.json. Written from the
// formats' specifications, independently of lib/hf's reader.
//  - Llama Q/K rows go from the llama GGUF layout (interleaved rotary pairs)
//    to HF's rotate-half layout: HF row h*hd + i*hd/2 + j is GGUF row h*hd + 2j + i.
//  - SPM vocabularies become byte-fallback BPE with merges ordered by the
//    merged piece's score (every split of a piece into two pieces); byte-level
//    BPE vocabularies keep their merges, with the pre-tokenizer steps the
//    families' tokenizer.json files use.
#pragma once

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/error.h"
#include "core/fp16.h"
#include "gguf/gguf.h"
#include "tokenizer/pretokenizer.h"
#include "tokenizer/tokenizer.h"

namespace infer_test {

inline std::string json_str(const std::string& s) {
  std::string o = "\"";
  for (unsigned char c : s) {
    if (c == '"') o += "\\\"";
    else if (c == '\\') o += "\\\\";
    else if (c < 0x20) {
      char b[8];
      std::snprintf(b, sizeof b, "\\u%04x", c);
      o += b;
    } else {
      o += static_cast<char>(c);
    }
  }
  return o + "\"";
}

inline void write_text_file(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary);
  f.write(text.data(), static_cast<std::streamsize>(text.size()));
}

struct StTensor {
  std::string name, dtype;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
};

// A safetensors file: u64 header length, JSON header padded with spaces to 8
// bytes, data in order.
inline std::vector<uint8_t> safetensors_bytes(const std::vector<StTensor>& ts) {
  std::string h = "{\"__metadata__\":{\"format\":\"pt\"}";
  uint64_t off = 0;
  for (const StTensor& t : ts) {
    h += "," + json_str(t.name) + ":{\"dtype\":\"" + t.dtype + "\",\"shape\":[";
    for (size_t k = 0; k < t.shape.size(); ++k) h += (k ? "," : "") + std::to_string(t.shape[k]);
    h += "],\"data_offsets\":[" + std::to_string(off) + "," + std::to_string(off + t.bytes.size()) + "]}";
    off += t.bytes.size();
  }
  h += "}";
  while (h.size() % 8) h += ' ';
  std::vector<uint8_t> out(8);
  const uint64_t n = h.size();
  for (int k = 0; k < 8; ++k) out[k] = static_cast<uint8_t>(n >> (8 * k));
  out.insert(out.end(), h.begin(), h.end());
  for (const StTensor& t : ts) out.insert(out.end(), t.bytes.begin(), t.bytes.end());
  return out;
}

// ---- tokenizer.json from a GGUF vocabulary -------------------------------------------

inline std::string pre_tokenizer_json(const std::string& pre) {
  if (pre == "gpt-2" || pre.empty())
    return R"({"type":"ByteLevel","add_prefix_space":false,"trim_offsets":true,"use_regex":true})";
  if (pre == "falcon")
    return R"({"type":"Sequence","pretokenizers":[{"type":"Punctuation","behavior":"Contiguous"},)"
           R"({"type":"ByteLevel","add_prefix_space":false,"trim_offsets":true,"use_regex":true},)"
           R"({"type":"Digits","individual_digits":false},)"
           R"({"type":"Split","pattern":{"Regex":"[0-9][0-9][0-9]"},"behavior":"Isolated","invert":false}]})";
  std::string s = R"({"type":"Sequence","pretokenizers":[)";
  for (const std::string& p : infer::PreTokenizer::patterns(pre))
    s += R"({"type":"Split","pattern":{"Regex":)" + json_str(p) + R"(},"behavior":"Isolated","invert":false},)";
  return s + R"({"type":"ByteLevel","add_prefix_space":false,"trim_offsets":true,"use_regex":false}]})";
}

// tokenizer.json and tokenizer_config.json for a vocabulary.
inline std::pair<std::string, std::string> vocab_to_hf(const infer::Vocab& v) {
  using infer::TokenType;
  const bool spm = v.model == "llama";
  std::string vocab = "{", added = "[", merges = "[";
  bool first = true;
  for (size_t i = 0; i < v.tokens.size(); ++i) {
    const TokenType t = v.types[i];
    if (t == TokenType::Control || t == TokenType::UserDefined || (t == TokenType::Unknown && !spm)) {
      added += std::string(added.size() > 1 ? "," : "") + "{\"id\":" + std::to_string(i) +
               ",\"content\":" + json_str(v.tokens[i]) + ",\"single_word\":false,\"lstrip\":false,\"rstrip\":false," +
               "\"normalized\":false,\"special\":" + (t == TokenType::UserDefined ? "false" : "true") + "}";
      if (spm) {  // SPM models keep their special pieces in the vocabulary too
        vocab += std::string(first ? "" : ",") + json_str(v.tokens[i]) + ":" + std::to_string(i);
        first = false;
      }
      continue;
    }
    vocab += std::string(first ? "" : ",") + json_str(v.tokens[i]) + ":" + std::to_string(i);
    first = false;
  }
  vocab += "}";
  added += "]";
  if (spm) {
    std::unordered_map<std::string, int32_t> idx;
    for (size_t i = 0; i < v.tokens.size(); ++i)
      if (v.types[i] == TokenType::Normal) idx.emplace(v.tokens[i], static_cast<int32_t>(i));
    struct M {
      float score;
      int32_t a, b;
    };
    std::vector<M> ms;
    for (size_t i = 0; i < v.tokens.size(); ++i) {
      if (v.types[i] != TokenType::Normal) continue;
      const std::string& t = v.tokens[i];
      for (size_t k = 1; k < t.size(); ++k) {
        if ((static_cast<unsigned char>(t[k]) & 0xC0) == 0x80) continue;  // whole characters only
        auto a = idx.find(t.substr(0, k)), b = idx.find(t.substr(k));
        if (a != idx.end() && b != idx.end()) ms.push_back({v.scores[i], a->second, b->second});
      }
    }
    std::stable_sort(ms.begin(), ms.end(), [](const M& x, const M& y) {
      if (x.score != y.score) return x.score > y.score;
      return x.a != y.a ? x.a < y.a : x.b < y.b;
    });
    for (size_t k = 0; k < ms.size(); ++k)
      merges += std::string(k ? "," : "") + json_str(v.tokens[ms[k].a] + " " + v.tokens[ms[k].b]);
  } else {
    for (size_t k = 0; k < v.merges.size(); ++k) merges += std::string(k ? "," : "") + json_str(v.merges[k]);
  }
  merges += "]";
  std::string tj = "{\"version\":\"1.0\",\"truncation\":null,\"padding\":null,\"added_tokens\":" + added + ",";
  if (spm) {
    tj += std::string("\"normalizer\":{\"type\":\"Sequence\",\"normalizers\":[") +
          (v.add_space_prefix ? "{\"type\":\"Prepend\",\"prepend\":\"\xe2\x96\x81\"}," : "") +
          "{\"type\":\"Replace\",\"pattern\":{\"String\":\" \"},\"content\":\"\xe2\x96\x81\"}]},"
          "\"pre_tokenizer\":null,";
    tj += "\"model\":{\"type\":\"BPE\",\"dropout\":null,\"unk_token\":" +
          (v.unk >= 0 ? json_str(v.tokens[v.unk]) : std::string("null")) +
          ",\"continuing_subword_prefix\":null,\"end_of_word_suffix\":null,\"fuse_unk\":true,\"byte_fallback\":true,"
          "\"vocab\":" + vocab + ",\"merges\":" + merges + "}}";
  } else {
    infer::PreTokenizerInfo info;
    infer::PreTokenizer::lookup(v.pre, &info);
    tj += std::string("\"normalizer\":") +
          (info.normalization == infer::Normalization::NFC ? "{\"type\":\"NFC\"}" : "null") + ",";
    tj += "\"pre_tokenizer\":" + pre_tokenizer_json(v.pre) + ",";
    tj += R"("post_processor":{"type":"ByteLevel","add_prefix_space":true,"trim_offsets":false,"use_regex":true},)";
    tj += R"("decoder":{"type":"ByteLevel","add_prefix_space":true,"trim_offsets":true,"use_regex":true},)";
    tj += std::string("\"model\":{\"type\":\"BPE\",\"dropout\":null,\"unk_token\":null,\"byte_fallback\":false,") +
          (info.ignore_merges ? "\"ignore_merges\":true," : "") + "\"vocab\":" + vocab + ",\"merges\":" + merges + "}}";
  }
  std::string tc = "{";
  tc += std::string("\"add_bos_token\":") + (v.add_bos ? "true" : "false");
  if (v.bos >= 0) tc += ",\"bos_token\":" + json_str(v.tokens[v.bos]);
  if (v.eos >= 0) tc += ",\"eos_token\":" + json_str(v.tokens[v.eos]);
  if (v.unk >= 0) tc += ",\"unk_token\":" + json_str(v.tokens[v.unk]);
  if (!v.chat_template.empty()) tc += ",\"chat_template\":" + json_str(v.chat_template);
  tc += "}";
  return {tj, tc};
}

// ---- a llama GGUF model as an HF directory --------------------------------------------

struct HfWriteOptions {
  std::string dtype = "F32";  // F32, F16, BF16
  int shards = 1;             // >1: model-0000k-of-0000n.safetensors + index
  bool tie = false;           // drop lm_head (tie_word_embeddings)
};

// The HF name of a GGUF tensor ("" for tensors HF checkpoints do not hold).
inline std::string hf_name_of(const std::string& arch, const std::string& g) {
  if (g == "token_embd.weight") return "model.embed_tokens.weight";
  if (g == "output_norm.weight") return "model.norm.weight";
  if (g == "output.weight") return "lm_head.weight";
  if (g.rfind("blk.", 0) != 0) return "";  // rope_freqs / rope_factors_*: config.json
  const size_t dot = g.find('.', 4);
  const std::string n = g.substr(4, dot - 4), rest = g.substr(dot + 1);
  static const std::map<std::string, std::string> m = {
      {"attn_norm.weight", "input_layernorm.weight"},   {"ffn_norm.weight", "post_attention_layernorm.weight"},
      {"attn_q.weight", "self_attn.q_proj.weight"},     {"attn_k.weight", "self_attn.k_proj.weight"},
      {"attn_v.weight", "self_attn.v_proj.weight"},     {"attn_output.weight", "self_attn.o_proj.weight"},
      {"attn_q.bias", "self_attn.q_proj.bias"},         {"attn_k.bias", "self_attn.k_proj.bias"},
      {"attn_v.bias", "self_attn.v_proj.bias"},         {"attn_q_norm.weight", "self_attn.q_norm.weight"},
      {"attn_k_norm.weight", "self_attn.k_norm.weight"}, {"attn_qkv.weight", "self_attn.qkv_proj.weight"},
      {"ffn_gate.weight", "mlp.gate_proj.weight"},      {"ffn_up.weight", "mlp.up_proj.weight"},
      {"ffn_down.weight", "mlp.down_proj.weight"},      {"ffn_gate_inp.weight", "block_sparse_moe.gate.weight"},
  };
  std::string r;
  if (arch == "gemma2" && rest == "post_attention_norm.weight") r = "post_attention_layernorm.weight";
  else if (arch == "gemma2" && rest == "ffn_norm.weight") r = "pre_feedforward_layernorm.weight";
  else if (arch == "gemma2" && rest == "post_ffw_norm.weight") r = "post_feedforward_layernorm.weight";
  else if (arch == "phi3" && rest == "ffn_up.weight") r = "mlp.gate_up_proj.weight";
  else r = m.at(rest);
  return "model.layers." + n + "." + r;
}

// A GGUF model (F32 tensors) as an HF checkpoint of its architecture.
inline void gguf_to_hf_dir(const infer::GgufFile& g, const std::string& dir, const HfWriteOptions& o = {}) {
  using namespace infer;
  const std::string a = g.get_string("general.architecture").value_or("llama");
  auto gi = [&](const std::string& k, int64_t d) { return g.get_int(a + "." + k).value_or(d); };
  auto gf = [&](const std::string& k, double d) { return g.get_float(a + "." + k).value_or(d); };
  auto num = [](double x) {
    char b[64];
    std::snprintf(b, sizeof b, "%.9g", x);
    return std::string(b);
  };
  const int64_t n_embd = gi("embedding_length", 0), n_head = gi("attention.head_count", 0);
  const int64_t n_head_kv = gi("attention.head_count_kv", n_head);
  const int64_t hd = gi("attention.key_length", n_embd / n_head);
  const int64_t n_expert = gi("expert_count", 0);
  const bool llama = a == "llama";
  const Vocab v = Vocab::from_gguf(g);
  // Llama-architecture GGUFs with a sliding window are Mistral checkpoints.
  const std::string mt = n_expert > 0                                          ? "mixtral"
                         : llama && g.find(a + ".attention.sliding_window") ? "mistral"
                         : llama                                             ? "llama"
                                                                             : a;
  std::string cfg = "{\"architectures\":[\"X\"],\"model_type\":\"" + mt + "\"";
  cfg += ",\"hidden_size\":" + std::to_string(n_embd);
  cfg += ",\"intermediate_size\":" + std::to_string(gi("feed_forward_length", 0));
  cfg += ",\"num_hidden_layers\":" + std::to_string(gi("block_count", 0));
  cfg += ",\"num_attention_heads\":" + std::to_string(n_head);
  cfg += ",\"num_key_value_heads\":" + std::to_string(n_head_kv);
  if (g.find(a + ".attention.key_length")) cfg += ",\"head_dim\":" + std::to_string(hd);
  cfg += ",\"max_position_embeddings\":" + std::to_string(gi("context_length", 2048));
  cfg += ",\"rms_norm_eps\":" + num(gf("attention.layer_norm_rms_epsilon", 1e-5));
  cfg += ",\"rope_theta\":" + num(gf("rope.freq_base", 10000.0));
  cfg += ",\"vocab_size\":" + std::to_string(v.size());
  if (g.find(a + ".attention.sliding_window")) {
    cfg += ",\"sliding_window\":" + std::to_string(gi("attention.sliding_window", 0));
    if (a == "qwen2" || a == "qwen3") cfg += ",\"use_sliding_window\":true";
  }
  if (n_expert > 0)
    cfg += ",\"num_local_experts\":" + std::to_string(n_expert) +
           ",\"num_experts_per_tok\":" + std::to_string(gi("expert_used_count", 2));
  if (g.find(a + ".attn_logit_softcapping")) cfg += ",\"attn_logit_softcapping\":" + num(gf("attn_logit_softcapping", 0));
  if (g.find(a + ".final_logit_softcapping")) cfg += ",\"final_logit_softcapping\":" + num(gf("final_logit_softcapping", 0));
  if (g.find(a + ".attention.query_pre_attn_scalar"))
    cfg += ",\"query_pre_attn_scalar\":" + num(gf("attention.query_pre_attn_scalar", 0));
  const std::string scaling = g.get_string(a + ".rope.scaling.type").value_or("");
  if (scaling == "linear") {
    cfg += ",\"rope_scaling\":{\"type\":\"linear\",\"factor\":" + num(gf("rope.scaling.factor", 1)) + "}";
  } else if (scaling == "llama3") {
    cfg += ",\"rope_scaling\":{\"rope_type\":\"llama3\",\"factor\":" + num(gf("rope.scaling.factor", 1)) +
           ",\"low_freq_factor\":" + num(gf("rope.scaling.low_freq_factor", 1)) +
           ",\"high_freq_factor\":" + num(gf("rope.scaling.high_freq_factor", 4)) +
           ",\"original_max_position_embeddings\":" + std::to_string(gi("rope.scaling.original_context_length", 8192)) + "}";
  }
  if (const GgufTensorInfo* lf = g.find_tensor("rope_factors_long.weight")) {
    const GgufTensorInfo* sf = g.find_tensor("rope_factors_short.weight");
    REQUIRE(sf);
    auto list = [&](const GgufTensorInfo* t) {
      std::string l = "[";
      const float* p = reinterpret_cast<const float*>(g.tensor_data(*t));
      for (int64_t i = 0; i < t->n_elements(); ++i) l += (i ? "," : "") + num(p[i]);
      return l + "]";
    };
    cfg += ",\"original_max_position_embeddings\":" + std::to_string(gi("rope.scaling.original_context_length", 4096));
    cfg += ",\"rope_scaling\":{\"type\":\"longrope\",\"long_factor\":" + list(lf) + ",\"short_factor\":" + list(sf) + "}";
  }
  if (v.bos >= 0) cfg += ",\"bos_token_id\":" + std::to_string(v.bos);
  if (v.eos >= 0) cfg += ",\"eos_token_id\":" + std::to_string(v.eos);
  const bool tied = o.tie || !g.find_tensor("output.weight");
  cfg += std::string(",\"tie_word_embeddings\":") + (tied ? "true" : "false");
  cfg += ",\"torch_dtype\":\"float32\"}";
  write_text_file(dir + "/config.json", cfg);
  auto [tj, tc] = vocab_to_hf(v);
  write_text_file(dir + "/tokenizer.json", tj);
  write_text_file(dir + "/tokenizer_config.json", tc);

  std::vector<StTensor> ts;
  auto add = [&](const std::string& name, std::vector<int64_t> shape, std::vector<float> f) {
    StTensor st;
    st.name = name;
    st.dtype = o.dtype;
    st.shape = std::move(shape);
    if (o.dtype == "F32") {
      st.bytes.resize(f.size() * 4);
      std::memcpy(st.bytes.data(), f.data(), st.bytes.size());
    } else {
      st.bytes.resize(f.size() * 2);
      for (size_t i = 0; i < f.size(); ++i) {
        const uint16_t h = o.dtype == "BF16" ? f32_to_bf16(f[i]) : f32_to_fp16(f[i]);
        std::memcpy(&st.bytes[2 * i], &h, 2);
      }
    }
    ts.push_back(std::move(st));
  };
  for (const GgufTensorInfo& t : g.tensors()) {
    if (tied && t.name == "output.weight") continue;
    REQUIRE(t.type == DType::F32);
    const float* src = reinterpret_cast<const float*>(g.tensor_data(t));
    const int64_t cols = t.dims[0], rows = t.n_rows();
    std::vector<float> f(src, src + cols * rows);
    const size_t pos = t.name.find("_exps.weight");
    if (pos != std::string::npos) {  // Mixtral experts: one matrix each
      const std::string kind = t.name.substr(t.name.find('.', 4) + 1, pos - t.name.find('.', 4) - 1);
      const std::string w = kind == "ffn_gate" ? "w1" : kind == "ffn_up" ? "w3" : "w2";
      const int64_t per = t.dims[0] * t.dims[1];
      for (int64_t e = 0; e < t.dims[2]; ++e)
        add("model.layers." + t.name.substr(4, t.name.find('.', 4) - 4) + ".block_sparse_moe.experts." +
                std::to_string(e) + "." + w + ".weight",
            {t.dims[1], t.dims[0]}, std::vector<float>(src + e * per, src + (e + 1) * per));
      continue;
    }
    const std::string hn = hf_name_of(a, t.name);
    if (hn.empty()) continue;
    const bool q = t.name.find("attn_q.weight") != std::string::npos, k = t.name.find("attn_k.weight") != std::string::npos;
    if (llama && (q || k)) {  // llama GGUF interleaved pairs -> HF rotate-half
      const int64_t heads = q ? n_head : n_head_kv;
      for (int64_t h = 0; h < heads; ++h)
        for (int i = 0; i < 2; ++i)
          for (int64_t j = 0; j < hd / 2; ++j)
            std::memcpy(&f[static_cast<size_t>((h * hd + i * (hd / 2) + j) * cols)],
                        src + (h * hd + 2 * j + i) * cols, static_cast<size_t>(cols) * 4);
    }
    if ((a == "gemma" || a == "gemma2") && t.name.find("norm.weight") != std::string::npos)
      for (float& x : f) x -= 1.0f;  // HF Gemma norms compute x * (1 + w)
    std::vector<int64_t> shape;
    for (size_t d = t.dims.size(); d-- > 0;) shape.push_back(t.dims[d]);
    add(hn, shape, std::move(f));
  }
  if (o.shards <= 1) {
    const std::vector<uint8_t> b = safetensors_bytes(ts);
    write_text_file(dir + "/model.safetensors", std::string(b.begin(), b.end()));
    return;
  }
  char buf[64];
  std::string idx = "{\"metadata\":{\"total_size\":0},\"weight_map\":{";
  const size_t per = (ts.size() + o.shards - 1) / o.shards;
  for (int s = 0; s < o.shards; ++s) {
    std::snprintf(buf, sizeof buf, "model-%05d-of-%05d.safetensors", s + 1, o.shards);
    std::vector<StTensor> part;
    for (size_t k = s * per; k < std::min(ts.size(), (s + 1) * per); ++k) {
      idx += std::string(idx.back() == '{' ? "" : ",") + json_str(ts[k].name) + ":" + json_str(buf);
      part.push_back(ts[k]);
    }
    const std::vector<uint8_t> b = safetensors_bytes(part);
    write_text_file(dir + "/" + buf, std::string(b.begin(), b.end()));
  }
  write_text_file(dir + "/model.safetensors.index.json", idx + "}}");
}

}  // namespace infer_test
