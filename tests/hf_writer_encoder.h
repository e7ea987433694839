// Test helper: a BERT / nomic-bert GGUF (the converted layout, lib/tools/synth.cpp's
// tiny-bert, tiny-bert-rerank, tiny-nomic-bert) written back as the Hugging Face
// directory it would come from: config.json (BertModel, BertForSequenceClassification
// or NomicBertModel), model.safetensors under the published names, a WordPiece
// tokenizer.json (BertNormalizer, BertPreTokenizer, TemplateProcessing [CLS] $A [SEP])
// and, optionally, sentence-transformers' modules.json with a Pooling module.
// Written from the formats' specifications, independently of lib/hf's reader.
#pragma once

#include <sys/stat.h>

#include <map>
#include <string>
#include <vector>

#include "hf_writer.h"

namespace infer_test {

struct EncoderHfOptions {
  std::string pooling_mode;   // "": no modules.json; else the Pooling key set true ("pooling_mode_mean_tokens", ...)
  bool normalize = true;      // a Normalize module after the Pooling one
  bool bert_prefix = false;   // "bert." before the encoder's names (BertForMaskedLM / a classifier always)
  bool gamma_beta = false;    // LayerNorm parameters named gamma / beta (old checkpoints)
  bool pooler = true;         // BertModel: write an (unused) pooler.dense
};

// The HF name of a converted encoder's GGUF tensor.
inline std::string encoder_hf_name(bool nomic, const std::string& g, const EncoderHfOptions& o) {
  static const std::map<std::string, std::string> top = {
      {"token_embd.weight", "embeddings.word_embeddings.weight"},
      {"token_types.weight", "embeddings.token_type_embeddings.weight"},
      {"position_embd.weight", "embeddings.position_embeddings.weight"},
      {"token_embd_norm.weight", "embeddings.LayerNorm.weight"},
      {"token_embd_norm.bias", "embeddings.LayerNorm.bias"},
      {"cls.weight", "bert.pooler.dense.weight"},
      {"cls.bias", "bert.pooler.dense.bias"},
      {"cls.output.weight", "classifier.weight"},
      {"cls.output.bias", "classifier.bias"},
  };
  static const std::map<std::string, std::string> bert = {
      {"attn_q.weight", "attention.self.query.weight"},     {"attn_q.bias", "attention.self.query.bias"},
      {"attn_k.weight", "attention.self.key.weight"},       {"attn_k.bias", "attention.self.key.bias"},
      {"attn_v.weight", "attention.self.value.weight"},     {"attn_v.bias", "attention.self.value.bias"},
      {"attn_output.weight", "attention.output.dense.weight"}, {"attn_output.bias", "attention.output.dense.bias"},
      {"attn_output_norm.weight", "attention.output.LayerNorm.weight"},
      {"attn_output_norm.bias", "attention.output.LayerNorm.bias"},
      {"ffn_up.weight", "intermediate.dense.weight"},       {"ffn_up.bias", "intermediate.dense.bias"},
      {"ffn_down.weight", "output.dense.weight"},           {"ffn_down.bias", "output.dense.bias"},
      {"layer_output_norm.weight", "output.LayerNorm.weight"}, {"layer_output_norm.bias", "output.LayerNorm.bias"},
  };
  static const std::map<std::string, std::string> nomic_l = {
      {"attn_qkv.weight", "attn.Wqkv.weight"}, {"attn_output.weight", "attn.out_proj.weight"},
      {"ffn_up.weight", "mlp.fc11.weight"},    {"ffn_gate.weight", "mlp.fc12.weight"},
      {"ffn_down.weight", "mlp.fc2.weight"},   {"attn_output_norm.weight", "norm1.weight"},
      {"attn_output_norm.bias", "norm1.bias"}, {"layer_output_norm.weight", "norm2.weight"},
      {"layer_output_norm.bias", "norm2.bias"},
  };
  std::string r;
  if (g.rfind("blk.", 0) == 0) {
    const size_t dot = g.find('.', 4);
    const std::string n = g.substr(4, dot - 4), rest = g.substr(dot + 1);
    r = nomic ? "encoder.layers." + n + "." + nomic_l.at(rest) : "encoder.layer." + n + "." + bert.at(rest);
  } else {
    r = top.at(g);
    if (nomic && g == "token_embd_norm.weight") r = "emb_ln.weight";
    if (nomic && g == "token_embd_norm.bias") r = "emb_ln.bias";
    if (r.rfind("bert.", 0) == 0 || r.rfind("classifier", 0) == 0) return r;
  }
  if (o.gamma_beta && r.find("LayerNorm.") != std::string::npos) {
    if (r.compare(r.size() - 7, 7, ".weight") == 0) r = r.substr(0, r.size() - 7) + ".gamma";
    else r = r.substr(0, r.size() - 5) + ".beta";
  }
  return (o.bert_prefix ? "bert." : "") + r;
}

// WordPiece tokenizer.json and tokenizer_config.json for a bert vocabulary
// (the specials [PAD] [UNK] [CLS] [SEP] [MASK] in the vocabulary and as added tokens).
inline std::pair<std::string, std::string> wordpiece_to_hf(const std::vector<std::string>& tokens,
                                                         const std::vector<int32_t>& types) {
  std::string vocab = "{", added = "[";
  for (size_t i = 0; i < tokens.size(); ++i) {
    vocab += (i ? "," : "") + json_str(tokens[i]) + ":" + std::to_string(i);
    if (types[i] == 3)
      added += std::string(added.size() > 1 ? "," : "") + "{\"id\":" + std::to_string(i) + ",\"content\":" +
               json_str(tokens[i]) +
               ",\"single_word\":false,\"lstrip\":false,\"rstrip\":false,\"normalized\":false,\"special\":true}";
  }
  vocab += "}";
  added += "]";
  auto id = [&](const std::string& t) {
    for (size_t i = 0; i < tokens.size(); ++i)
      if (tokens[i] == t) return std::to_string(i);
    return std::string("-1");
  };
  const std::string tj =
      "{\"version\":\"1.0\",\"truncation\":null,\"padding\":null,\"added_tokens\":" + added +
      ",\"normalizer\":{\"type\":\"BertNormalizer\",\"clean_text\":true,\"handle_chinese_chars\":true,"
      "\"strip_accents\":null,\"lowercase\":true},\"pre_tokenizer\":{\"type\":\"BertPreTokenizer\"},"
      "\"post_processor\":{\"type\":\"TemplateProcessing\",\"single\":[{\"SpecialToken\":{\"id\":\"[CLS]\",\"type_id\":0}},"
      "{\"Sequence\":{\"id\":\"A\",\"type_id\":0}},{\"SpecialToken\":{\"id\":\"[SEP]\",\"type_id\":0}}],"
      "\"pair\":[{\"SpecialToken\":{\"id\":\"[CLS]\",\"type_id\":0}},{\"Sequence\":{\"id\":\"A\",\"type_id\":0}},"
      "{\"SpecialToken\":{\"id\":\"[SEP]\",\"type_id\":0}},{\"Sequence\":{\"id\":\"B\",\"type_id\":1}},"
      "{\"SpecialToken\":{\"id\":\"[SEP]\",\"type_id\":1}}],\"special_tokens\":{"
      "\"[CLS]\":{\"id\":\"[CLS]\",\"ids\":[" + id("[CLS]") + "],\"tokens\":[\"[CLS]\"]},"
      "\"[SEP]\":{\"id\":\"[SEP]\",\"ids\":[" + id("[SEP]") + "],\"tokens\":[\"[SEP]\"]}}},"
      "\"decoder\":{\"type\":\"WordPiece\",\"prefix\":\"##\",\"cleanup\":true},"
      "\"model\":{\"type\":\"WordPiece\",\"unk_token\":\"[UNK]\",\"continuing_subword_prefix\":\"##\","
      "\"max_input_chars_per_word\":100,\"vocab\":" + vocab + "}}";
  const std::string tc =
      "{\"do_lower_case\":true,\"cls_token\":\"[CLS]\",\"sep_token\":\"[SEP]\",\"pad_token\":\"[PAD]\","
      "\"unk_token\":\"[UNK]\",\"mask_token\":\"[MASK]\",\"model_max_length\":512,\"tokenize_chinese_chars\":true,"
      "\"strip_accents\":null,\"tokenizer_class\":\"BertTokenizer\"}";
  return {tj, tc};
}

// A converted bert / nomic-bert GGUF (F32) as an HF directory.
inline void encoder_gguf_to_hf_dir(const infer::GgufFile& g, const std::string& dir, const EncoderHfOptions& o = {}) {
  using namespace infer;
  const std::string a = g.get_string("general.architecture").value_or("");
  REQUIRE((a == "bert" || a == "nomic-bert"));
  const bool nomic = a == "nomic-bert", classifier = g.find_tensor("cls.output.weight") != nullptr;
  auto gi = [&](const std::string& k) { return std::to_string(g.get_int(a + "." + k).value_or(0)); };
  auto num = [](double x) {
    char b[64];
    std::snprintf(b, sizeof b, "%.9g", x);
    return std::string(b);
  };
  const std::vector<std::string> tokens = g.get_string_array("tokenizer.ggml.tokens");
  const GgufValue* tt = g.find("tokenizer.ggml.token_type");
  REQUIRE(tt);
  std::vector<int32_t> types;
  for (size_t i = 0; i < tt->size(); ++i) types.push_back(static_cast<int32_t>(tt->int_at(i)));
  const double eps = g.get_float(a + ".attention.layer_norm_epsilon").value_or(1e-12);
  std::string cfg;
  if (nomic) {
    cfg = "{\"architectures\":[\"NomicBertModel\"],\"model_type\":\"nomic_bert\",\"n_embd\":" + gi("embedding_length") +
          ",\"n_layer\":" + gi("block_count") + ",\"n_head\":" + gi("attention.head_count") + ",\"n_inner\":" +
          gi("feed_forward_length") + ",\"n_positions\":" + gi("context_length") + ",\"layer_norm_epsilon\":" +
          num(eps) + ",\"rotary_emb_base\":" + num(g.get_float(a + ".rope.freq_base").value_or(10000)) +
          ",\"rotary_emb_fraction\":1.0,\"rotary_emb_interleaved\":false,\"activation_function\":\"swiglu\","
          "\"qkv_proj_bias\":false,\"mlp_fc1_bias\":false,\"mlp_fc2_bias\":false,\"prenorm\":false,\"causal\":false,"
          "\"type_vocab_size\":2,\"vocab_size\":" + std::to_string(tokens.size()) + "}";
  } else {
    cfg = std::string("{\"architectures\":[\"") + (classifier ? "BertForSequenceClassification" : "BertModel") +
          "\"],\"model_type\":\"bert\",\"hidden_size\":" + gi("embedding_length") + ",\"num_hidden_layers\":" +
          gi("block_count") + ",\"num_attention_heads\":" + gi("attention.head_count") + ",\"intermediate_size\":" +
          gi("feed_forward_length") + ",\"max_position_embeddings\":" + gi("context_length") +
          ",\"type_vocab_size\":2,\"layer_norm_eps\":" + num(eps) +
          ",\"hidden_act\":\"gelu\",\"position_embedding_type\":\"absolute\",\"pad_token_id\":0,\"vocab_size\":" +
          std::to_string(tokens.size()) + (classifier ? ",\"id2label\":{\"0\":\"LABEL_0\"}" : "") + "}";
  }
  write_text_file(dir + "/config.json", cfg);
  auto [tj, tc] = wordpiece_to_hf(tokens, types);
  write_text_file(dir + "/tokenizer.json", tj);
  write_text_file(dir + "/tokenizer_config.json", tc);
  if (!o.pooling_mode.empty()) {
    std::string mods = "[{\"idx\":0,\"name\":\"0\",\"path\":\"\",\"type\":\"sentence_transformers.models.Transformer\"},"
                       "{\"idx\":1,\"name\":\"1\",\"path\":\"1_Pooling\",\"type\":\"sentence_transformers.models.Pooling\"}";
    if (o.normalize) mods += ",{\"idx\":2,\"name\":\"2\",\"path\":\"2_Normalize\",\"type\":\"sentence_transformers.models.Normalize\"}";
    write_text_file(dir + "/modules.json", mods + "]");
    ::mkdir((dir + "/1_Pooling").c_str(), 0755);
    std::string pc = "{\"word_embedding_dimension\":" + gi("embedding_length");
    for (const char* k : {"pooling_mode_cls_token", "pooling_mode_mean_tokens", "pooling_mode_max_tokens",
                          "pooling_mode_mean_sqrt_len_tokens", "pooling_mode_weightedmean_tokens", "pooling_mode_lasttoken"})
      pc += std::string(",\"") + k + "\":" + (o.pooling_mode == k ? "true" : "false");
    write_text_file(dir + "/1_Pooling/config.json", pc + ",\"include_prompt\":true}");
  }
  std::vector<StTensor> ts;
  const bool prefix = o.bert_prefix || classifier;
  EncoderHfOptions no = o;
  no.bert_prefix = prefix;
  for (const GgufTensorInfo& t : g.tensors()) {
    REQUIRE(t.type == DType::F32);
    const uint8_t* src = g.tensor_data(t);
    StTensor st;
    st.name = encoder_hf_name(nomic, t.name, no);
    st.dtype = "F32";
    for (size_t d = t.dims.size(); d-- > 0;) st.shape.push_back(t.dims[d]);
    st.bytes.assign(src, src + t.n_elements() * 4);
    ts.push_back(std::move(st));
  }
  const int64_t d = g.get_int(a + ".embedding_length").value_or(0);
  if (!nomic) {  // the buffer every BertModel checkpoint carries
    const int64_t n_ctx = g.get_int(a + ".context_length").value_or(0);
    StTensor st{std::string(prefix ? "bert." : "") + "embeddings.position_ids", "I64", {1, n_ctx}, {}};
    for (int64_t i = 0; i < n_ctx; ++i)
      for (int k = 0; k < 8; ++k) st.bytes.push_back(static_cast<uint8_t>(k == 0 ? i & 0xff : k == 1 ? i >> 8 : 0));
    ts.push_back(std::move(st));
    if (!classifier && o.pooler) {  // a BertModel's pooler, unused for embeddings
      ts.push_back({std::string(prefix ? "bert." : "") + "pooler.dense.weight", "F32", {d, d},
                    std::vector<uint8_t>(static_cast<size_t>(d * d * 4), 0)});
      ts.push_back({std::string(prefix ? "bert." : "") + "pooler.dense.bias", "F32", {d},
                    std::vector<uint8_t>(static_cast<size_t>(d * 4), 0)});
    }
  }
  const std::vector<uint8_t> b = safetensors_bytes(ts);
  write_text_file(dir + "/model.safetensors", std::string(b.begin(), b.end()));
}

}  // namespace infer_test
