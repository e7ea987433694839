// Hugging Face encoder directories (issue #30): BERT, a BERT sequence
// classifier (the reranker) and nomic-bert, written from the converted GGUF
// files lib/tools/synth.cpp makes, load as that GGUF: the same keys, tensor
// names and bytes, the same embeddings, and `infer convert hf` of the
// directory writes the same file back. Hostile directories fail clearly.
#include <cstring>

#include "core/error.h"
#include "engine/embed.h"
#include "hf/hf.h"
#include "hf_writer_encoder.h"
#include "model/model.h"
#include "test_util.h"
#include "tools/convert_hf.h"
#include "tools/synth.h"

using namespace infer;
using infer_test::EncoderHfOptions;

namespace {

struct Case {
  const char* preset;
  std::string pooling_mode;  // sentence-transformers' Pooling key, "" for none
  int pooling;               // the pooling_type the view must have (-1: none)
  EncoderHfOptions opts;
};

std::string synth_gguf(const std::string& dir, const char* preset) {
  const SynthPreset* p = find_synth_preset(preset);
  REQUIRE(p);
  SynthOptions o;
  o.type = DType::F32;
  o.n_threads = 2;
  const std::string path = dir + "/" + preset + ".gguf";
  write_synth_model(*p, path, o);
  return path;
}

// Every arch.* and tokenizer.ggml.* key of `want` is in `got` with the same
// value (general.name and quantization notes aside), and the tensors agree in
// names, shapes, types and bytes.
void check_same_file(const GgufFile& want, const GgufFile& got, bool check_pooling) {
  const std::string a = want.get_string("general.architecture").value_or("");
  CHECK(got.get_string("general.architecture").value_or("") == a);
  for (const auto& kv : want.metadata()) {
    const std::string& k = kv.first;
    if (k.rfind(a + ".", 0) != 0 && k.rfind("tokenizer.ggml.", 0) != 0) continue;
    if (!check_pooling && k == a + ".pooling_type") continue;
    INFO(k);
    const GgufValue* v = got.find(k);
    REQUIRE(v);
    if (v->type == GgufType::Array) CHECK(*v == kv.second);
    else if (v->is_float() || kv.second.is_float()) CHECK(v->as_float() == kv.second.as_float());
    else CHECK(v->as_int() == kv.second.as_int());
  }
  REQUIRE(got.tensors().size() == want.tensors().size());
  for (const GgufTensorInfo& t : want.tensors()) {
    INFO(t.name);
    const GgufTensorInfo* u = got.find_tensor(t.name);
    REQUIRE(u);
    CHECK(u->dims == t.dims);
    REQUIRE(u->type == t.type);
    CHECK(std::memcmp(got.tensor_data(*u), want.tensor_data(t), static_cast<size_t>(t.n_elements()) * 4) == 0);
  }
}

// Model::load, or null when this build has no WordPiece tokenizer yet.
std::unique_ptr<Model> load_or_skip(const std::string& path) {
  try {
    return Model::load(path);
  } catch (const Error& e) {
    if (std::string(e.what()).find("tokenizer model 'bert' is not supported") == std::string::npos) throw;
    WARN("no WordPiece tokenizer in this build: the model-level checks are skipped (" << e.what() << ")");
    return nullptr;
  }
}

Status load_status(const std::string& path, std::string* msg) {
  try {
    Model::load(path);
    return Status::Ok;
  } catch (const Error& e) {
    *msg = e.what();
    return e.status();
  }
}

}  // namespace

TEST_CASE("hf: BERT, BERT reranker and nomic-bert directories are their converted GGUF", "[hf][embed]") {
  const std::string tmp = infer_test::temp_dir();
  EncoderHfOptions prefixed;
  prefixed.bert_prefix = true;
  prefixed.gamma_beta = true;
  const Case cases[] = {
      {"tiny-bert", "pooling_mode_mean_tokens", 1, {}},
      {"tiny-bert", "", -1, prefixed},  // BertForMaskedLM-style names, old LayerNorm names, no sentence-transformers
      {"tiny-bert-rerank", "", 4, {}},
      {"tiny-nomic-bert", "pooling_mode_mean_tokens", 1, {}},
  };
  int k = 0;
  for (const Case& c : cases) {
    INFO(c.preset << " " << c.pooling_mode);
    const std::string gguf_path = synth_gguf(tmp, c.preset);
    const std::string dir = tmp + "/hf-enc-" + std::to_string(k++);
    ::mkdir(dir.c_str(), 0755);
    EncoderHfOptions o = c.opts;
    o.pooling_mode = c.pooling_mode;
    std::unique_ptr<GgufFile> want = GgufFile::open(gguf_path);
    infer_test::encoder_gguf_to_hf_dir(*want, dir, o);
    std::unique_ptr<GgufFile> view = hf::open_directory(dir);
    const std::string a = want->get_string("general.architecture").value_or("");
    check_same_file(*want, *view, c.pooling >= 0);
    CHECK(view->get_int(a + ".pooling_type").value_or(-1) == c.pooling);
    CHECK(!view->find_tensor("cls.weight") == (std::string(c.preset) != "tiny-bert-rerank"));  // pooler dropped

    // `infer convert hf` writes the same file (when this build can load it).
    const std::string out = dir + ".gguf";
    bool converted = false;
    try {
      ConvertHfOptions co;
      convert_hf(dir, out, co);
      converted = true;
    } catch (const Error& e) {
      if (std::string(e.what()).find("tokenizer model 'bert' is not supported") == std::string::npos) throw;
      WARN("convert-hf of a bert directory needs the WordPiece tokenizer: " << e.what());
    }
    if (converted) {
      std::unique_ptr<GgufFile> back = GgufFile::open(out);
      check_same_file(*want, *back, c.pooling >= 0);
    }

    // The same embeddings (or scores) from the directory and the GGUF.
    std::unique_ptr<Model> from_dir = load_or_skip(dir);
    if (!from_dir) continue;
    std::unique_ptr<Model> from_gguf = Model::load(gguf_path);
    CHECK(from_dir->config().n_cls_out == from_gguf->config().n_cls_out);
    CHECK(from_dir->tokenizer().encode("hello world, un-affable", true) ==
          from_gguf->tokenizer().encode("hello world, un-affable", true));
    std::vector<EmbedInput> in(2);
    in[0].tokens = {2, 40, 41, 42, 3};
    in[1].tokens = {2, 50, 3, 60, 61, 3};
    in[1].types = {0, 0, 0, 1, 1, 1};
    EmbedOptions eo;
    eo.pooling = c.pooling == 4 ? Pooling::Rank : Pooling::Mean;
    const EmbedResult x = embed(*from_dir, in, eo, 2), y = embed(*from_gguf, in, eo, 2);
    REQUIRE(x.data.size() == y.data.size());
    CHECK(x.data == y.data);
  }
}

TEST_CASE("hf: sentence-transformers pooling modes become pooling_type, others are refused", "[hf][embed]") {
  const std::string tmp = infer_test::temp_dir();
  const std::string gguf_path = synth_gguf(tmp, "tiny-bert");
  std::unique_ptr<GgufFile> g = GgufFile::open(gguf_path);
  struct Mode {
    const char* key;
    int pooling;  // -1: refused
  } modes[] = {{"pooling_mode_cls_token", 2},          {"pooling_mode_mean_tokens", 1},
               {"pooling_mode_lasttoken", 3},          {"pooling_mode_max_tokens", -1},
               {"pooling_mode_weightedmean_tokens", -1}, {"pooling_mode_mean_sqrt_len_tokens", -1}};
  int k = 0;
  for (const Mode& m : modes) {
    INFO(m.key);
    const std::string dir = tmp + "/st-" + std::to_string(k++);
    ::mkdir(dir.c_str(), 0755);
    EncoderHfOptions o;
    o.pooling_mode = m.key;
    infer_test::encoder_gguf_to_hf_dir(*g, dir, o);
    if (m.pooling >= 0) {
      CHECK(hf::open_directory(dir)->get_int("bert.pooling_type").value_or(-1) == m.pooling);
    } else {
      try {
        hf::open_directory(dir);
        FAIL("accepted");
      } catch (const Error& e) {
        CHECK(e.status() == Status::Unsupported);
        CHECK_THAT(e.what(), Catch::Contains(m.key));
      }
    }
  }
}

TEST_CASE("hf: hostile encoder directories fail with a clear status", "[hf][embed]") {
  const std::string tmp = infer_test::temp_dir();
  std::unique_ptr<GgufFile> bert = GgufFile::open(synth_gguf(tmp, "tiny-bert"));
  std::unique_ptr<GgufFile> nomic = GgufFile::open(synth_gguf(tmp, "tiny-nomic-bert"));
  int k = 0;
  auto fresh = [&](const GgufFile& g, const EncoderHfOptions& o = {}) {
    const std::string dir = tmp + "/bad-" + std::to_string(k++);
    ::mkdir(dir.c_str(), 0755);
    infer_test::encoder_gguf_to_hf_dir(g, dir, o);
    return dir;
  };
  auto edit = [](const std::string& path, const std::string& from, const std::string& to) {
    const std::vector<uint8_t> b = infer_test::read_file(path);
    std::string s(b.begin(), b.end());
    const size_t at = s.find(from);
    REQUIRE(at != std::string::npos);
    infer_test::write_text_file(path, s.replace(at, from.size(), to));
  };
  auto refused = [](const std::string& dir, Status st, const char* msg) {
    INFO(dir << ": " << msg);
    try {
      hf::open_directory(dir);
      FAIL("accepted");
    } catch (const Error& e) {
      CHECK(e.status() == st);
      CHECK_THAT(e.what(), Catch::Contains(msg));
    }
  };
  // The view refuses what the encoders would compute differently.
  {
    const std::string d = fresh(*bert);
    edit(d + "/config.json", "\"hidden_act\":\"gelu\"", "\"hidden_act\":\"gelu_new\"");
    refused(d, Status::Unsupported, "gelu_new");
  }
  {
    const std::string d = fresh(*bert);
    edit(d + "/config.json", "\"absolute\"", "\"relative_key\"");
    refused(d, Status::Unsupported, "relative_key");
  }
  {
    const std::string d = fresh(*nomic);
    edit(d + "/config.json", "\"rotary_emb_interleaved\":false", "\"rotary_emb_interleaved\":true");
    refused(d, Status::Unsupported, "interleaved");
  }
  {
    const std::string d = fresh(*nomic);
    edit(d + "/config.json", "\"qkv_proj_bias\":false", "\"qkv_proj_bias\":true");
    refused(d, Status::Unsupported, "qkv_proj_bias");
  }
  {
    const std::string d = fresh(*bert);
    edit(d + "/tokenizer.json", "\"lowercase\":true", "\"lowercase\":false");
    refused(d, Status::Unsupported, "cased");
  }
  {
    const std::string d = fresh(*bert);
    edit(d + "/tokenizer.json", "\"[CLS]\":2,", "\"[CLX]\":2,");
    edit(d + "/tokenizer.json", "\"content\":\"[CLS]\"", "\"content\":\"[CLX]\"");
    refused(d, Status::Format, "[CLS]");
  }
  {
    EncoderHfOptions o;
    o.pooling_mode = "pooling_mode_mean_tokens";
    const std::string d = fresh(*bert, o);
    edit(d + "/modules.json", "sentence_transformers.models.Normalize", "sentence_transformers.models.Dense");
    refused(d, Status::Unsupported, "Dense");
  }
  {
    EncoderHfOptions o;
    o.pooling_mode = "pooling_mode_mean_tokens";
    const std::string d = fresh(*bert, o);
    edit(d + "/1_Pooling/config.json", "\"pooling_mode_cls_token\":false", "\"pooling_mode_cls_token\":true");
    refused(d, Status::Unsupported, "several pooling modes");
  }
  {
    EncoderHfOptions o;
    o.pooling_mode = "pooling_mode_mean_tokens";
    const std::string d = fresh(*bert, o);
    edit(d + "/modules.json", "\"1_Pooling\"", "\"../1_Pooling\"");
    refused(d, Status::Format, "relative path");
  }
  {
    EncoderHfOptions o;
    o.pooling_mode = "pooling_mode_mean_tokens";
    const std::string d = fresh(*bert, o);
    edit(d + "/1_Pooling/config.json", "\"pooling_mode_mean_tokens\":true", "\"pooling_mode_mean_tokens\":false");
    refused(d, Status::Unsupported, "no pooling mode");
  }
  {  // a tensor no BERT has
    const std::string d = fresh(*bert);
    const std::string path = d + "/model.safetensors";
    const std::vector<uint8_t> b = infer_test::read_file(path);
    std::vector<infer_test::StTensor> ts;
    for (const hf::SafeTensor& t : hf::parse_safetensors(b.data(), b.size(), path))
      ts.push_back({t.name == "encoder.layer.1.output.dense.bias" ? "encoder.layer.1.output.dense.scale" : t.name, t.dtype,
                    t.shape, std::vector<uint8_t>(b.begin() + static_cast<long>(t.begin), b.begin() + static_cast<long>(t.end))});
    const std::vector<uint8_t> out = infer_test::safetensors_bytes(ts);
    infer_test::write_text_file(path, std::string(out.begin(), out.end()));
    refused(d, Status::Unsupported, "encoder.layer.1.output.dense.scale");
  }

  // A missing tensor and a wrong shape: the model names the GGUF tensor.
  auto rewrite = [](const std::string& dir, const std::string& name, bool drop, std::vector<int64_t> shape) {
    const std::string path = dir + "/model.safetensors";
    const std::vector<uint8_t> b = infer_test::read_file(path);
    std::vector<infer_test::StTensor> ts;
    for (const hf::SafeTensor& t : hf::parse_safetensors(b.data(), b.size(), path)) {
      if (t.name == name && drop) continue;
      ts.push_back({t.name, t.dtype, t.name == name ? shape : t.shape,
                    std::vector<uint8_t>(b.begin() + static_cast<long>(t.begin), b.begin() + static_cast<long>(t.end))});
    }
    const std::vector<uint8_t> out = infer_test::safetensors_bytes(ts);
    infer_test::write_text_file(path, std::string(out.begin(), out.end()));
  };
  struct Bad {
    const GgufFile* g;
    const char* tensor;
    bool drop;
    std::vector<int64_t> shape;
    const char* msg;
  } bad[] = {
      {bert.get(), "encoder.layer.1.attention.self.query.weight", true, {}, "blk.1.attn_q.weight"},
      {bert.get(), "encoder.layer.0.intermediate.dense.weight", false, {64, 128}, "blk.0.ffn_up.weight"},
      {bert.get(), "embeddings.LayerNorm.bias", true, {}, "token_embd_norm.bias"},
      {nomic.get(), "encoder.layers.0.attn.Wqkv.weight", false, {64, 192}, "blk.0.attn_qkv.weight"},
      {nomic.get(), "encoder.layers.1.mlp.fc12.weight", true, {}, "blk.1.ffn_gate.weight"},
  };
  for (const Bad& x : bad) {
    INFO(x.tensor);
    const std::string d = fresh(*x.g);
    rewrite(d, x.tensor, x.drop, x.shape);
    std::string msg;
    const Status st = load_status(d, &msg);
    if (msg.find("tokenizer model 'bert' is not supported") != std::string::npos) {
      WARN("no WordPiece tokenizer in this build: " << msg);
      continue;
    }
    CHECK(st == Status::Format);
    CHECK_THAT(msg, Catch::Contains(x.msg));
  }
}

TEST_CASE("hf: a decoder embedding directory takes its pooling from sentence-transformers", "[hf][embed]") {
  const std::string tmp = infer_test::temp_dir();
  std::unique_ptr<GgufFile> g = GgufFile::open(synth_gguf(tmp, "tiny-qwen3-embed"));
  const std::string dir = tmp + "/qwen3-embed";
  ::mkdir(dir.c_str(), 0755);
  infer_test::gguf_to_hf_dir(*g, dir);
  CHECK(!hf::open_directory(dir)->find("qwen3.pooling_type"));  // no modules.json: not said
  infer_test::write_text_file(dir + "/modules.json",
                              R"([{"idx":0,"name":"0","path":"","type":"sentence_transformers.models.Transformer"},)"
                              R"({"idx":1,"name":"1","path":"1_Pooling","type":"sentence_transformers.models.Pooling"},)"
                              R"({"idx":2,"name":"2","path":"2_Normalize","type":"sentence_transformers.models.Normalize"}])");
  ::mkdir((dir + "/1_Pooling").c_str(), 0755);
  infer_test::write_text_file(dir + "/1_Pooling/config.json",
                              R"({"word_embedding_dimension":64,"pooling_mode_cls_token":false,)"
                              R"("pooling_mode_mean_tokens":false,"pooling_mode_lasttoken":true})");
  std::unique_ptr<GgufFile> view = hf::open_directory(dir);
  CHECK(view->get_int("qwen3.pooling_type").value_or(-1) == 3);
  std::unique_ptr<Model> m = Model::load(dir);
  CHECK(m->config().pooling == 3);
  // Checkpoints saved from the bare model class have no "model." prefix.
  CHECK(hf::gguf_tensor_name("qwen3", "layers.3.self_attn.q_proj.weight") == "blk.3.attn_q.weight");
  CHECK(hf::gguf_tensor_name("qwen3", "embed_tokens.weight") == "token_embd.weight");
  CHECK(hf::gguf_tensor_name("qwen3", "norm.weight") == "output_norm.weight");
  CHECK(hf::gguf_tensor_name("bert", "bert.encoder.layer.11.output.LayerNorm.gamma") == "blk.11.layer_output_norm.weight");
  CHECK(hf::gguf_tensor_name("bert", "cls.predictions.transform.dense.weight").empty());
  CHECK(hf::gguf_tensor_name("nomic_bert", "encoder.layers.0.mlp.fc12.weight") == "blk.0.ffn_gate.weight");
}
