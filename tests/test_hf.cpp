// Hugging Face directories (lib/hf): the same weights as GGUF and as an HF
// directory give identical logits; tokenizer.json tokenizes like the GGUF
// vocabulary; hostile files fail with a clear status.
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <limits>
#include <cstring>
#include <fstream>
#include <functional>

#include "core/error.h"
#include "engine/engine.h"
#include "hf/hf.h"
#include "hf/hf_quant.h"
#include "core/fp16.h"
#include "core/json.h"
#include "hf_writer.h"
#include "model/model.h"
#include "quant/dequant.h"
#include "test_util.h"
#include "tools/convert_hf.h"
#include "tools/synth.h"

using namespace infer;

namespace {

std::string fresh_dir(const std::string& name) {
  const std::string d = infer_test::temp_dir() + "/" + name;
  std::string cmd = "rm -rf '" + d + "' && mkdir -p '" + d + "'";
  REQUIRE(std::system(cmd.c_str()) == 0);
  return d;
}

std::vector<float> prompt_logits(const Model& m, const std::vector<int32_t>& prompt) {
  EngineParams ep;
  ep.n_threads = 2;
  ep.n_ctx = 64;
  Engine e(m, ep);
  RequestParams rp;
  rp.prompt = prompt;
  rp.max_tokens = 1;
  rp.logits = kLogitsPrompt;
  rp.sampling.temperature = 0;
  auto r = e.submit(rp);
  e.run();
  REQUIRE(r->finish_reason() != FinishReason::Error);
  return r->logits();
}

float max_diff(const std::vector<float>& a, const std::vector<float>& b) {
  REQUIRE(a.size() == b.size());
  float d = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const float e = std::fabs(a[i] - b[i]);
    if (std::isnan(e)) return std::numeric_limits<float>::infinity();  // a NaN is never "close"
    d = std::max(d, e);
  }
  return d;
}

const std::vector<int32_t> kPrompt = {1, 403, 407, 261, 378, 30, 200, 17, 99};

Status load_status(const std::string& path, std::string* msg = nullptr) {
  try {
    Model::load(path);
    return Status::Ok;
  } catch (const Error& e) {
    if (msg) *msg = e.what();
    return e.status();
  }
}

}  // namespace

TEST_CASE("hf: json reader", "[hf]") {
  using infer::Json;
  const Json j = Json::parse(R"( {"a": [1, -2.5e1, true, null, "x\u00e9\ud83d\ude00\n"], "b": {"c": 9007199254740993}} )", "t");
  REQUIRE(j.is_object());
  const Json* a = j.find("a");
  REQUIRE(a->items().size() == 5);
  CHECK(a->items()[0].as_int() == 1);
  CHECK(a->items()[1].as_double() == -25.0);
  CHECK_FALSE(a->items()[1].is_int());
  CHECK(a->items()[3].is_null());
  CHECK(a->items()[4].as_string() == "x\xc3\xa9\xf0\x9f\x98\x80\n");
  CHECK(j.find("b")->find("c")->as_int() == 9007199254740993LL);
  for (const char* bad : {"", "{", "[1,]", "{\"a\" 1}", "\"\\ud800\"", "01", "1 2", "\"\x01\"", "\"\xff\"", "nul",
                          "{\"a\":}", "[\"abc", "-", "1e", "\"\\x\""}) {
    INFO(bad);
    CHECK_THROWS_AS(Json::parse(bad, "t"), Error);
  }
  std::string deep(1000, '[');
  CHECK_THROWS_WITH(Json::parse(deep, "t"), Catch::Contains("nested too deeply"));
}

TEST_CASE("hf: safetensors headers that lie are refused", "[hf]") {
  auto st = [](const std::string& hdr, size_t data) {
    std::vector<uint8_t> b(8);
    for (int k = 0; k < 8; ++k) b[k] = static_cast<uint8_t>(hdr.size() >> (8 * k));
    b.insert(b.end(), hdr.begin(), hdr.end());
    b.resize(b.size() + data, 0);
    return b;
  };
  auto parse = [](const std::vector<uint8_t>& b) { return hf::parse_safetensors(b.data(), b.size(), "x.safetensors"); };
  const std::string good = R"({"w":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]},"__metadata__":{}})";
  auto ok = parse(st(good, 24));
  REQUIRE(ok.size() == 1);
  CHECK(ok[0].begin == 8 + good.size());
  CHECK(ok[0].shape == std::vector<int64_t>{2, 3});
  struct Bad {
    std::string hdr;
    size_t data;
    const char* msg;
  } bad[] = {
      {R"({"w":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]}})", 16, "past the data section"},
      {R"({"w":{"dtype":"F32","shape":[2,3],"data_offsets":[0,20]}})", 24, "need 24"},
      {R"({"w":{"dtype":"F16","shape":[2,3],"data_offsets":[0,24]}})", 24, "need 12"},
      {R"({"w":{"dtype":"Q9","shape":[2],"data_offsets":[0,8]}})", 8, "unknown dtype"},
      {R"({"w":{"dtype":"F32","shape":[2,-3],"data_offsets":[0,24]}})", 24, "non-negative"},
      {R"({"w":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,24]}})", 24, "larger than"},
      {R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}})", 24, "begin <= end"},
      {R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},"b":{"dtype":"F32","shape":[4],"data_offsets":[8,24]}})", 24, "overlap"},
      {R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"a":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})", 24, "twice"},
      {R"({"w":{"dtype":"F32","shape":[2]}})", 24, "data_offsets"},
      {R"([1,2])", 0, "not a JSON object"},
      {R"({"w":)", 8, "invalid JSON"},
  };
  for (const Bad& b : bad) {
    INFO(b.hdr);
    CHECK_THROWS_WITH(parse(st(b.hdr, b.data)), Catch::Contains(b.msg));
  }
  std::vector<uint8_t> tiny = {1, 2, 3};
  CHECK_THROWS_AS(parse(tiny), Error);
  std::vector<uint8_t> huge_len = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, '{', '}'};
  CHECK_THROWS_WITH(parse(huge_len), Catch::Contains("header length"));
}

TEST_CASE("hf: config.json becomes the architecture's GGUF keys", "[hf]") {
  auto meta = hf::config_metadata(R"({"model_type":"qwen2","hidden_size":64,"num_hidden_layers":2,
      "num_attention_heads":4,"num_key_value_heads":2,"intermediate_size":128,"rope_theta":1000000.0,
      "rms_norm_eps":1e-6,"max_position_embeddings":4096,"sliding_window":4096,"use_sliding_window":false})");
  auto get = [&](const std::string& k) -> const GgufValue* {
    for (auto& [key, v] : meta)
      if (key == k) return &v;
    return nullptr;
  };
  REQUIRE(get("general.architecture"));
  CHECK(get("general.architecture")->s == "qwen2");
  CHECK(get("qwen2.attention.head_count_kv")->as_int() == 2);
  CHECK(get("qwen2.rope.freq_base")->as_float() == 1000000.0);
  CHECK_FALSE(get("qwen2.attention.sliding_window"));
  CHECK_FALSE(get("infer.rope.neox"));  // qwen2 GGUF files are already rotate-half
  meta = hf::config_metadata(R"({"model_type":"mistral","hidden_size":64,"num_hidden_layers":2,"head_dim":32,
      "num_attention_heads":4,"num_key_value_heads":2,"intermediate_size":128,"sliding_window":4096,
      "rope_scaling":{"rope_type":"llama3","factor":8.0,"low_freq_factor":1.0,"high_freq_factor":4.0,
      "original_max_position_embeddings":8192}})");
  CHECK(get("general.architecture")->s == "llama");
  CHECK(get("llama.attention.sliding_window")->as_int() == 4096);
  CHECK(get("llama.attention.key_length")->as_int() == 32);
  CHECK(get("llama.rope.scaling.type")->s == "llama3");
  CHECK(get("infer.rope.neox")->u == 1);
  meta = hf::config_metadata(R"({"model_type":"gemma2","hidden_size":64,"num_hidden_layers":2,"head_dim":16,
      "num_attention_heads":4,"num_key_value_heads":2,"intermediate_size":128,"sliding_window":4096,
      "attn_logit_softcapping":50.0,"final_logit_softcapping":30.0})");
  CHECK(get("gemma2.attn_logit_softcapping")->as_float() == 50.0);
  CHECK(get("gemma2.final_logit_softcapping")->as_float() == 30.0);
  CHECK(get("gemma2.attention.sliding_window")->as_int() == 4096);

  struct Bad {
    const char* cfg;
    Status st;
    const char* msg;
  } bad[] = {
      {R"({"model_type":"xlm-roberta"})", Status::Unsupported, "model_type 'xlm-roberta'"},
      {R"({"hidden_size":64})", Status::Format, "model_type"},
      {R"({"model_type":"llama","num_hidden_layers":2})", Status::Format, "hidden_size"},
      {R"({"model_type":"llama","hidden_size":"64","num_hidden_layers":2,"num_attention_heads":4,"intermediate_size":8})",
       Status::Format, "not an integer"},
      {R"({"model_type":"llama","hidden_size":64,"num_hidden_layers":2,"num_attention_heads":4,"num_key_value_heads":3,"intermediate_size":8})",
       Status::Format, "multiple"},
      {R"({"model_type":"llama","hidden_size":-64,"num_hidden_layers":2,"num_attention_heads":4,"intermediate_size":8})",
       Status::Format, "out of range"},
      {R"({"model_type":"llama","hidden_size":64,"num_hidden_layers":2,"num_attention_heads":4,"intermediate_size":8,"rope_theta":-1})",
       Status::Format, "rope_theta"},
      {R"({"model_type":"llama","hidden_size":64,"num_hidden_layers":2,"num_attention_heads":4,"intermediate_size":8,"rope_scaling":{"type":"dynamic","factor":2}})",
       Status::Unsupported, "dynamic"},
      {R"({"model_type":"llama",)", Status::Format, "invalid JSON"},
  };
  for (const Bad& b : bad) {
    INFO(b.cfg);
    try {
      hf::config_metadata(b.cfg);
      FAIL("accepted");
    } catch (const Error& e) {
      CHECK(e.status() == b.st);
      CHECK_THAT(e.what(), Catch::Contains(b.msg));
    }
  }
}

TEST_CASE("hf: the same weights as GGUF and as an HF directory give identical logits", "[hf]") {
  REQUIRE_SHARED(path, "models/stories260K.gguf");
  auto ref = Model::load(path);
  const std::vector<float> want = prompt_logits(*ref, kPrompt);
  SECTION("F32, one file") {
    const std::string dir = fresh_dir("hf-f32");
    infer_test::gguf_to_hf_dir(ref->gguf(), dir);
    auto m = Model::load(dir);
    CHECK(m->config().n_layer == ref->config().n_layer);
    CHECK(m->config().rope_neox);  // HF rotate-half rows, flagged instead of permuted
    CHECK(m->tokenizer().n_vocab() == ref->tokenizer().n_vocab());
    CHECK(m->tokenizer().encode("Once upon a time", true) == ref->tokenizer().encode("Once upon a time", true));
    // Same weights, same products; only the order of the head dimensions in
    // the q.k sums differs (rotate-half vs interleaved rows).
    const float d = max_diff(prompt_logits(*m, kPrompt), want);
    INFO("max |logit difference| " << d);
    CHECK(d < 1e-4f);
    // infer convert hf permutes Q/K back into the llama GGUF layout: the
    // tensors are the original bytes and the logits are bit-identical.
    const std::string out = infer_test::temp_dir() + "/hf-f32.gguf";
    ConvertHfOptions co;
    const QuantizeStats st = convert_hf(dir, out, co);
    CHECK(st.n_tensors == static_cast<int64_t>(ref->gguf().tensors().size()));
    auto c = Model::load(out);
    CHECK_FALSE(c->gguf().find("infer.rope.neox"));
    for (const GgufTensorInfo& t : ref->gguf().tensors()) {
      const GgufTensorInfo* u = c->gguf().find_tensor(t.name);
      REQUIRE(u);
      CHECK(u->dims == t.dims);
      CHECK(std::memcmp(c->gguf().tensor_data(*u), ref->gguf().tensor_data(t), t.nbytes) == 0);
    }
    CHECK(max_diff(prompt_logits(*c, kPrompt), want) == 0.0f);
    // And to another type on the way.
    co.keep_types = false;
    co.type = DType::Q8_0;
    convert_hf(dir, out, co);
    auto q = Model::load(out);
    CHECK(q->gguf().find_tensor("blk.0.attn_q.weight")->type == DType::Q8_0);
    CHECK(max_diff(prompt_logits(*q, kPrompt), want) < 0.5f);
  }
  SECTION("F32 in three shards with an index, no mmap") {
    const std::string dir = fresh_dir("hf-shards");
    infer_test::HfWriteOptions o;
    o.shards = 3;
    infer_test::gguf_to_hf_dir(ref->gguf(), dir, o);
    LoadOptions lo;
    lo.use_mmap = false;
    auto m = Model::load(dir, lo);
    CHECK(m->gguf().n_files() >= 3);
    CHECK(max_diff(prompt_logits(*m, kPrompt), want) < 1e-4f);
  }
  SECTION("BF16 and F16 stay within their rounding") {
    for (const char* dt : {"BF16", "F16"}) {
      const std::string dir = fresh_dir(std::string("hf-") + dt);
      infer_test::HfWriteOptions o;
      o.dtype = dt;
      infer_test::gguf_to_hf_dir(ref->gguf(), dir, o);
      auto m = Model::load(dir);
      const GgufTensorInfo* t = m->gguf().find_tensor("blk.0.attn_q.weight");
      REQUIRE(t);
      CHECK(t->type == (std::string(dt) == "BF16" ? DType::BF16 : DType::F16));
      const float d = max_diff(prompt_logits(*m, kPrompt), want);
      INFO(dt << " max |logit difference| " << d);
      CHECK(d < (std::string(dt) == "BF16" ? 0.2f : 0.02f));
      CHECK(d > 0.0f);
    }
  }
  SECTION("tied embeddings: no lm_head") {
    // stories260K's output.weight is a byte-for-byte copy of its embedding
    // (llama2.c ties them), so with lm_head dropped the model must read the
    // embedding as its output matrix and give the same logits. A missing or
    // misread tie changes them. (Equality can be bitwise: under the scalar
    // ISA cap both paths are the same code.)
    const std::string dir = fresh_dir("hf-tied");
    infer_test::HfWriteOptions o;
    o.tie = true;
    infer_test::gguf_to_hf_dir(ref->gguf(), dir, o);
    auto m = Model::load(dir);
    CHECK_FALSE(m->gguf().find_tensor("output.weight"));
    const float d = max_diff(prompt_logits(*m, kPrompt), want);
    INFO("max |logit difference| " << d);
    CHECK(d < 1e-3f);
  }
}

TEST_CASE("hf: hostile directories fail with a clear status", "[hf]") {
  REQUIRE_SHARED(path, "models/stories260K.gguf");
  auto ref = Model::load(path);
  const std::string dir = fresh_dir("hf-hostile");
  infer_test::HfWriteOptions o;
  o.shards = 2;
  infer_test::gguf_to_hf_dir(ref->gguf(), dir, o);
  REQUIRE(load_status(dir) == Status::Ok);
  const std::string s1 = dir + "/model-00001-of-00002.safetensors";
  const std::string s1_bytes = infer_test::read_text(s1);
  const std::string idx = infer_test::read_text(dir + "/model.safetensors.index.json");
  const std::string cfg = infer_test::read_text(dir + "/config.json");
  const std::string tok = infer_test::read_text(dir + "/tokenizer.json");
  auto restore = [&]() {
    infer_test::write_text_file(s1, s1_bytes);
    infer_test::write_text_file(dir + "/model.safetensors.index.json", idx);
    infer_test::write_text_file(dir + "/config.json", cfg);
    infer_test::write_text_file(dir + "/tokenizer.json", tok);
  };
  auto expect = [&](Status st, const char* msg) {
    std::string m;
    CHECK(load_status(dir, &m) == st);
    CHECK_THAT(m, Catch::Contains(msg));
    restore();
  };
  // A missing shard.
  std::remove(s1.c_str());
  expect(Status::Io, "missing");
  // A shard cut short.
  infer_test::write_text_file(s1, s1_bytes.substr(0, s1_bytes.size() - 100));
  expect(Status::Format, "past the data section");
  // The index names a tensor the shard does not hold, or a path outside the directory.
  {
    std::string bad = idx;
    const std::string wm = "\"weight_map\":{";
    bad.insert(bad.find(wm) + wm.size(), "\"model.layers.0.mlp.extra.weight\":\"model-00001-of-00002.safetensors\",");
    infer_test::write_text_file(dir + "/model.safetensors.index.json", bad);
    std::string m;
    CHECK(load_status(dir, &m) != Status::Ok);
    restore();
  }
  infer_test::write_text_file(dir + "/model.safetensors.index.json",
                              R"({"weight_map":{"model.norm.weight":"../../etc/passwd"}})");
  expect(Status::Format, "not a file name");
  infer_test::write_text_file(dir + "/model.safetensors.index.json", R"({"weight_map":[]})");
  expect(Status::Format, "weight_map");
  // config.json that disagrees with the tensors' shapes.
  {
    std::string bad = cfg;
    bad.replace(bad.find("\"hidden_size\":64"), 16, "\"hidden_size\":32");
    infer_test::write_text_file(dir + "/config.json", bad);
    std::string m;
    CHECK(load_status(dir, &m) == Status::Format);
    INFO(m);
    restore();
  }
  infer_test::write_text_file(dir + "/config.json", "{\"model_type\": \"llama\", \"hidden_size\": ");
  expect(Status::Format, "config.json");
  // A dtype that lies: the header says F16 for a tensor stored as F32 (sizes disagree).
  {
    std::string bad = s1_bytes;
    const size_t p = bad.find("\"F32\"");
    REQUIRE(p != std::string::npos);
    bad.replace(p, 5, "\"F16\"");
    infer_test::write_text_file(s1, bad);
    expect(Status::Format, "need");
  }
  // tokenizer.json broken or of an unknown kind.
  infer_test::write_text_file(dir + "/tokenizer.json", "{\"model\": {\"type\": \"WordPiece\", \"vocab\": {}}}");
  expect(Status::Unsupported, "WordPiece");
  infer_test::write_text_file(dir + "/tokenizer.json", "{\"model\": 7}");
  expect(Status::Format, "tokenizer.json");
  std::remove((dir + "/tokenizer.json").c_str());
  expect(Status::Io, "tokenizer.json");
  std::remove((dir + "/config.json").c_str());
  expect(Status::Io, "config.json");
  REQUIRE(load_status(dir) == Status::Ok);
}

namespace {

struct Vectors {
  std::vector<std::string> inputs;
  std::vector<std::vector<int32_t>> expected;
};

Vectors read_vectors(const std::string& inp_path, const std::string& out_path) {
  Vectors v;
  const std::string inp = infer_test::read_text(inp_path);
  const std::string sep = "\n__ggml_vocab_test__\n";
  for (size_t pos = 0;;) {
    const size_t next = inp.find(sep, pos);
    if (next == std::string::npos) break;
    v.inputs.push_back(inp.substr(pos, next - pos));
    pos = next + sep.size();
  }
  const std::string out = infer_test::read_text(out_path);
  for (size_t s = 0; s < out.size();) {
    size_t nl = out.find('\n', s);
    if (nl == std::string::npos) nl = out.size();
    std::vector<int32_t> ids;
    const std::string line = out.substr(s, nl - s);
    const char* p = line.c_str();
    char* end = nullptr;
    for (long x = std::strtol(p, &end, 10); end != p; x = std::strtol(p, &end, 10)) {
      ids.push_back(static_cast<int32_t>(x));
      p = end;
    }
    v.expected.push_back(ids);
    s = nl + 1;
  }
  return v;
}

}  // namespace

TEST_CASE("hf: tokenizer.json made from each GGUF vocabulary tokenizes like it", "[hf][tokenizer]") {
  for (const char* name : {"llama-spm", "gpt-2", "falcon", "deepseek-llm"}) {
    const std::string rel = std::string("vocab/ggml-vocab-") + name + ".gguf";
    REQUIRE_SHARED(path, rel);
    INFO(name);
    auto g = GgufFile::open(path);
    const Vocab want = Vocab::from_gguf(*g);
    auto [tj0, tc] = infer_test::vocab_to_hf(want);
    std::string tj = tj0;
    if (want.model == "llama") {
      // The newer SentencePiece-style files: no normalizer, a Metaspace
      // pre-tokenizer that adds the dummy prefix to the first word only.
      const std::string norm_start = "\"normalizer\":";
      const size_t a = tj.find(norm_start), b = tj.find("\"pre_tokenizer\":null,");
      REQUIRE(a != std::string::npos);
      REQUIRE(b != std::string::npos);
      tj = tj.substr(0, a) + "\"normalizer\":null,\"pre_tokenizer\":{\"type\":\"Metaspace\",\"replacement\":\"\xe2\x96\x81\","
           "\"prepend_scheme\":\"first\",\"split\":false}," + tj.substr(b + std::string("\"pre_tokenizer\":null,").size());
    }
    std::vector<std::string> variants = {tj0};
    if (tj != tj0) variants.push_back(tj);
    for (const std::string& json : variants) {
      INFO((json == tj0 ? "as written" : "Metaspace variant"));
      auto meta = hf::tokenizer_metadata(json, tc, "");
      // The metadata as a GGUF view, read back by the GGUF vocabulary reader.
      std::vector<std::unique_ptr<MappedFile>> files;
      files.push_back(MappedFile::own(std::vector<uint8_t>(32)));
      auto view = GgufFile::assemble(std::move(files), meta, {});
      const Vocab got = Vocab::from_gguf(*view);
      CHECK(got.model == want.model);
      if (want.model == "gpt2") CHECK(got.pre == want.pre);
      CHECK(got.tokens == want.tokens);
      CHECK(got.merges == want.merges);
      CHECK(got.bos == want.bos);
      CHECK(got.eos == want.eos);
      CHECK(got.add_space_prefix == want.add_space_prefix);
      size_t type_diff = 0;
      for (size_t i = 0; i < want.types.size() && i < got.types.size(); ++i) type_diff += got.types[i] != want.types[i];
      CHECK(type_diff == 0);
      auto tok = Tokenizer::create(*view);
      const Vectors v = read_vectors(path + ".inp", path + ".out");
      REQUIRE(v.inputs.size() == v.expected.size());
      size_t fails = 0;
      for (size_t i = 0; i < v.inputs.size(); ++i) {
        const std::vector<int32_t> ids = tok->encode(v.inputs[i], false);
        if (ids != v.expected[i]) {
          if (++fails <= 3) UNSCOPED_INFO("input " << i << " '" << v.inputs[i] << "' differs");
        }
      }
      CHECK(fails == 0);
    }
  }
}

TEST_CASE("hf: GPTQ and AWQ checkpoints load onto INT4 blocks without re-quantizing", "[hf]") {
  // tests/hf_quant_check.py writes checkpoints from known codes, zeros and
  // scales, and numpy's dequantized weights beside them.
  const std::string root = fresh_dir("hf-quant");
  struct stat sb;
  const std::string py = ::stat("/usr/bin/python3", &sb) == 0 ? "/usr/bin/python3" : "python3";
  const std::string cmd = py + " '" INFER_SOURCE_DIR "/tests/hf_quant_check.py' '" + root + "'";
  const int rc = std::system(cmd.c_str());
  if (WIFEXITED(rc) && WEXITSTATUS(rc) == 77) {
    WARN("SKIPPED: python3 with numpy not found");
    return;
  }
  REQUIRE(rc == 0);
  const char* layers[] = {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
                          "mlp.gate_proj",    "mlp.up_proj",      "mlp.down_proj"};
  for (const char* kind : {"gptq", "awq"}) {  // act-order: the next test case
    INFO(kind);
    auto g = hf::open_directory(root + "/" + kind);
    CHECK(g->get_string("infer.quant.method").value_or("") == (std::string(kind) == "awq" ? "awq" : "gptq"));
    for (int l = 0; l < 2; ++l)
      for (const char* layer : layers) {
        const std::string pfx = "model.layers." + std::to_string(l) + "." + layer;
        INFO(pfx);
        const std::vector<uint8_t> ref = infer_test::read_file(root + "/" + kind + "/ref." + pfx + ".f32");
        const GgufTensorInfo* t = g->find_tensor(hf::gguf_tensor_name("llama", pfx + ".weight"));
        REQUIRE(t);
        // In-order groups of 32 are INT4_G32 blocks.
        CHECK(t->type == DType::INT4_G32);
        const int64_t n = t->dims[0], rows = t->dims[1];
        REQUIRE(ref.size() == static_cast<size_t>(n * rows) * 4);
        std::vector<float> row(static_cast<size_t>(n));
        const size_t rb = dtype_row_bytes(t->type, n);
        int64_t bad = 0;
        for (int64_t r = 0; r < rows; ++r) {
          dequantize_row(t->type, g->tensor_data(*t) + r * rb, row.data(), n);
          bad += std::memcmp(row.data(), ref.data() + r * n * 4, static_cast<size_t>(n) * 4) != 0;
        }
        CHECK(bad == 0);  // every weight exactly numpy's s * (q - z)
      }
  }
  // GPTQ's and AWQ's packings of the same codes land on the same INT4 blocks.
  {
    auto g = hf::open_directory(root + "/gptq"), a = hf::open_directory(root + "/awq");
    for (const GgufTensorInfo& t : g->tensors()) {
      const GgufTensorInfo* u = a->find_tensor(t.name);
      REQUIRE(u);
      CHECK(u->type == t.type);
      CHECK(std::memcmp(g->tensor_data(t), a->tensor_data(*u), t.nbytes) == 0);
    }
  }
  // The model on INT4 blocks against the same weights as F32 (numpy's
  // dequantization): the CPU's INT4 kernels quantize activations to int8 per
  // block, so the logits differ by that rounding, not by the weights.
  const std::vector<int32_t> prompt = {256, 72, 101, 108, 108, 111, 32, 119, 111, 114};
  auto f = Model::load(root + "/gptq-f32");
  const std::vector<float> lf = prompt_logits(*f, prompt);
  float scale = 0;
  for (float x : lf) scale = std::max(scale, std::fabs(x));
  for (const char* kind : {"gptq", "awq"}) {
    auto m = Model::load(root + "/" + kind);
    const std::vector<float> lm = prompt_logits(*m, prompt);
    const float d = max_diff(lm, lf);
    INFO(kind << ": max |logit difference| INT4 vs F32 " << d << " (max |logit| " << scale << ")");
    CHECK(d < 0.03f * scale);
    // Converted to GGUF, the INT4 blocks are kept as they are (Q/K rows permuted).
    const std::string out = root + "/" + kind + ".gguf";
    convert_hf(root + "/" + kind, out, ConvertHfOptions{});
    auto c = Model::load(out);
    CHECK(c->gguf().find_tensor("blk.1.ffn_down.weight")->type == DType::INT4_G32);
    CHECK(max_diff(prompt_logits(*c, prompt), lm) < 1e-3f);
  }
}

namespace {

// The rows of a matrix of an HF view dequantized, in input order: an
// act-order tensor's columns put back through its "<name>.perm".
std::vector<uint8_t> rows_in_input_order(const GgufFile& g, const GgufTensorInfo& t) {
  const int64_t n = t.dims[0], rows = t.dims[1];
  std::vector<int32_t> perm(static_cast<size_t>(n));
  for (int64_t j = 0; j < n; ++j) perm[static_cast<size_t>(j)] = static_cast<int32_t>(j);
  if (const GgufTensorInfo* p = g.find_tensor(t.name + ".perm")) {
    REQUIRE(p->type == DType::I32);
    REQUIRE(p->n_elements() == n);
    std::memcpy(perm.data(), g.tensor_data(*p), perm.size() * 4);
  }
  std::vector<float> row(static_cast<size_t>(n)), out(static_cast<size_t>(n * rows));
  const size_t rb = dtype_row_bytes(t.type, n);
  for (int64_t r = 0; r < rows; ++r) {
    dequantize_row(t.type, g.tensor_data(t) + r * rb, row.data(), n);
    for (int64_t j = 0; j < n; ++j) out[static_cast<size_t>(r * n + perm[static_cast<size_t>(j)])] = row[static_cast<size_t>(j)];
  }
  std::vector<uint8_t> b(out.size() * 4);
  std::memcpy(b.data(), out.data(), b.size());
  return b;
}

std::vector<int32_t> greedy_tokens(const Model& m, const std::vector<int32_t>& prompt, int n) {
  EngineParams ep;
  ep.n_threads = 2;
  ep.n_ctx = 64;
  Engine e(m, ep);
  RequestParams rp;
  rp.prompt = prompt;
  rp.max_tokens = n;
  rp.ignore_eos = true;
  rp.sampling.temperature = 0;
  auto r = e.submit(rp);
  e.run();
  REQUIRE(r->finish_reason() == FinishReason::Length);
  return std::vector<int32_t>(r->generated(), r->generated() + r->n_generated());
}

// tests/hf_quant_check.py's checkpoints in a fresh directory; "" without numpy.
std::string quant_checkpoints(const std::string& name) {
  const std::string root = fresh_dir(name);
  struct stat sb;
  const std::string py = ::stat("/usr/bin/python3", &sb) == 0 ? "/usr/bin/python3" : "python3";
  const int rc = std::system((py + " '" INFER_SOURCE_DIR "/tests/hf_quant_check.py' '" + root + "'").c_str());
  if (WIFEXITED(rc) && WEXITSTATUS(rc) == 77) return "";
  REQUIRE(rc == 0);
  return root;
}

const char* const kQuantLayers[] = {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
                                    "mlp.gate_proj",    "mlp.up_proj",      "mlp.down_proj"};

}  // namespace

TEST_CASE("hf: act-order GPTQ loads onto INT4 blocks with an input permutation", "[hf][gptq]") {
  // actorder: groups of 32 assigned to the inputs in a random order (each
  // group 32 members); g256: act-order groups of 256 (two INT4_G128 blocks
  // each, same scale and zero); perchannel: group_size -1 (one group of all
  // inputs: INT4_G128 blocks); uneven: act-order whose group 0 has 33 inputs
  // and group 1 has 31, which blocks cannot hold: exact f32.
  const std::string root = quant_checkpoints("hf-actorder");
  if (root.empty()) {
    WARN("SKIPPED: python3 with numpy not found");
    return;
  }
  struct Kind {
    const char* name;
    DType type;
    bool perm;
  };
  for (const Kind& k : {Kind{"actorder", DType::INT4_G32, true}, Kind{"g256", DType::INT4_G128, true},
                        Kind{"perchannel", DType::INT4_G128, false}, Kind{"uneven", DType::F32, false}}) {
    INFO(k.name);
    auto g = hf::open_directory(root + "/" + k.name);
    for (int l = 0; l < 2; ++l)
      for (const char* layer : kQuantLayers) {
        const std::string pfx = "model.layers." + std::to_string(l) + "." + layer;
        INFO(pfx);
        const GgufTensorInfo* t = g->find_tensor(hf::gguf_tensor_name("llama", pfx + ".weight"));
        REQUIRE(t);
        CHECK(t->type == k.type);  // INT4 blocks, not an f32 expansion
        CHECK((g->find_tensor(t->name + ".perm") != nullptr) == k.perm);
        // Every weight exactly numpy's s * (q - z) (f16 scale times a code
        // difference of at most 15: exact in f32 and in double alike).
        const std::vector<uint8_t> ref = infer_test::read_file(root + "/" + k.name + "/ref." + pfx + ".f32");
        const std::vector<uint8_t> got = rows_in_input_order(*g, *t);
        REQUIRE(ref.size() == got.size());
        CHECK(std::memcmp(ref.data(), got.data(), ref.size()) == 0);
      }
  }
  // The models against the same weights as f32: within the INT4 kernels'
  // activation rounding (as for in-order GPTQ above), and the same greedy
  // continuation. Skipping the gather of x[perm] fails both by far.
  const std::vector<int32_t> prompt = {256, 72, 101, 108, 108, 111, 32, 119, 111, 114};
  for (const char* kind : {"actorder", "g256", "perchannel"}) {
    INFO(kind);
    auto f = Model::load(root + "/" + kind + "-f32");
    auto m = Model::load(root + "/" + kind);
    CHECK(m->gguf().find_tensor("blk.0.attn_q.weight")->type != DType::F32);
    const std::vector<float> lf = prompt_logits(*f, prompt), lm = prompt_logits(*m, prompt);
    float scale = 0;
    for (float x : lf) scale = std::max(scale, std::fabs(x));
    const float d = max_diff(lm, lf);
    INFO("max |logit difference| INT4 vs F32 " << d << " (max |logit| " << scale << ")");
    CHECK(d < 0.03f * scale);
    CHECK(greedy_tokens(*m, prompt, 12) == greedy_tokens(*f, prompt, 12));
    {  // batch invariance: the same logits bits with another sequence in the steps
      EngineParams ep;
      ep.n_threads = 2;
      ep.n_ctx = 64;
      Engine e(*m, ep);
      RequestParams rp;
      rp.prompt = prompt;
      rp.max_tokens = 1;
      rp.logits = kLogitsPrompt;
      rp.sampling.temperature = 0;
      RequestParams other = rp;
      other.prompt = {256, 50, 60, 70, 80, 90, 100, 110, 120, 130, 140, 150, 160};
      auto r = e.submit(rp);
      auto r2 = e.submit(other);
      e.run();
      REQUIRE(r->finish_reason() != FinishReason::Error);
      REQUIRE(r2->finish_reason() != FinishReason::Error);
      CHECK(max_diff(r->logits(), lm) == 0.0f);
    }
    // infer convert hf: the INT4 blocks and their permutations as they are
    // (libinfer's "<name>.perm" I32 companions), so the same logits.
    const std::string out = root + "/" + kind + ".gguf";
    convert_hf(root + "/" + kind, out, ConvertHfOptions{});
    auto c = Model::load(out);
    const GgufTensorInfo* cp = c->gguf().find_tensor("blk.1.ffn_down.weight.perm");
    CHECK((cp != nullptr) == (std::string(kind) != "perchannel"));
    if (cp) CHECK(cp->type == DType::I32);
    CHECK(c->gguf().find_tensor("blk.1.ffn_down.weight")->type == m->gguf().find_tensor("blk.1.ffn_down.weight")->type);
    // (Not bit for bit: the converter puts llama Q/K rows in the interleaved
    // rope layout, so attention sums in another order, and the INT4 kernels'
    // int8 rounding of activations can turn such last-bit differences into
    // a step of the rounding.)
    CHECK(max_diff(prompt_logits(*c, prompt), lm) < 0.01f * scale);
    // Converted to another type, the columns are put back in input order: an
    // ordinary GGUF without .perm tensors. As f32, that is the f32 model.
    ConvertHfOptions f32;
    f32.keep_types = false;
    f32.type = DType::F32;
    const std::string out32 = root + "/" + kind + "-f32.gguf";
    convert_hf(root + "/" + kind, out32, f32);
    auto c32 = Model::load(out32);
    for (const GgufTensorInfo& t : c32->gguf().tensors()) CHECK(t.name.find(".perm") == std::string::npos);
    CHECK(max_diff(prompt_logits(*c32, prompt), lf) < 1e-4f);
  }
  // The uneven one runs too (f32 where the groups are not blocks).
  auto u = Model::load(root + "/uneven");
  for (float x : prompt_logits(*u, prompt)) REQUIRE(std::isfinite(x));
}

TEST_CASE("hf: act-order group assignments, direct", "[hf][gptq]") {
  // hf::repack_int4 on a 64-input, 8-output layer, groups of 32.
  const int64_t in = 64, out = 8, G = 32;
  std::vector<int32_t> qweight(static_cast<size_t>(in / 8 * out)), qzeros(static_cast<size_t>(in / G * out / 8));
  std::vector<uint16_t> scales(static_cast<size_t>(in / G * out));
  uint32_t x = 12345;
  auto rnd = [&]() { return (x = x * 1103515245u + 12345u) >> 16; };
  for (int32_t& v : qweight) v = static_cast<int32_t>(rnd() << 16 ^ rnd());
  for (int32_t& v : qzeros) v = static_cast<int32_t>(rnd() << 16 ^ rnd());
  for (uint16_t& v : scales) v = f32_to_fp16(0.001f * static_cast<float>(1 + rnd() % 50));
  std::vector<int32_t> g_idx(static_cast<size_t>(in));
  for (int64_t i = 0; i < in; ++i) g_idx[static_cast<size_t>(i)] = static_cast<int32_t>((i * 37 % in) / G);
  hf::QuantLayer L;
  L.name = "layer";
  L.n_in = in;
  L.n_out = out;
  L.group = G;
  L.qweight = reinterpret_cast<const uint8_t*>(qweight.data());
  L.qzeros = reinterpret_cast<const uint8_t*>(qzeros.data());
  L.scales = reinterpret_cast<const uint8_t*>(scales.data());
  L.g_idx = reinterpret_cast<const uint8_t*>(g_idx.data());
  // The exact weights, in double: s[g][o] * (q[i][o] - z[g][o]).
  auto ref = [&](int64_t o, int64_t i) {
    const int64_t g = g_idx[static_cast<size_t>(i)];
    const int q = (qweight[static_cast<size_t>((i / 8) * out + o)] >> (4 * (i % 8))) & 15;
    const int z = (((qzeros[static_cast<size_t>(g * (out / 8) + o / 8)] >> (4 * (o % 8))) & 15) + 1) & 15;
    return static_cast<double>(fp16_to_f32(scales[static_cast<size_t>(g * out + o)])) * (q - z);
  };
  {
    const hf::PackedInt4 p = hf::repack_int4(L);
    REQUIRE(p.type == DType::INT4_G32);
    REQUIRE(p.perm.size() == static_cast<size_t>(in));
    for (int64_t j = 0; j < in; ++j)  // a stable sort by group: each group's inputs in input order
      CHECK(g_idx[static_cast<size_t>(p.perm[static_cast<size_t>(j)])] == j / G);
    for (int64_t j = 1; j < in; ++j)
      if (j % G) CHECK(p.perm[static_cast<size_t>(j)] > p.perm[static_cast<size_t>(j - 1)]);
    std::vector<float> row(static_cast<size_t>(in));
    int64_t bad = 0;
    for (int64_t o = 0; o < out; ++o) {
      dequantize_row(p.type, p.bytes.data() + o * dtype_row_bytes(p.type, in), row.data(), in);
      for (int64_t j = 0; j < in; ++j) bad += static_cast<double>(row[static_cast<size_t>(j)]) != ref(o, p.perm[static_cast<size_t>(j)]);
    }
    CHECK(bad == 0);
  }
  {  // not allowed to permute (embedding, router): exact f32
    hf::QuantLayer e = L;
    e.allow_perm = false;
    const hf::PackedInt4 p = hf::repack_int4(e);
    CHECK(p.type == DType::F32);
    CHECK(p.perm.empty());
    CHECK_THAT(p.note, Catch::Contains("cannot be permuted"));
  }
  {  // a group with 33 members and one with 31: f32, the reason said
    std::vector<int32_t> uneven = g_idx;
    for (int32_t& v : uneven)
      if (v == 1) { v = 0; break; }
    hf::QuantLayer e = L;
    e.g_idx = reinterpret_cast<const uint8_t*>(uneven.data());
    const hf::PackedInt4 p = hf::repack_int4(e);
    CHECK(p.type == DType::F32);
    CHECK_THAT(p.note, Catch::Contains("33 inputs, not 32"));
    const float* w = reinterpret_cast<const float*>(p.bytes.data());
    int64_t bad = 0;
    for (int64_t o = 0; o < out; ++o)
      for (int64_t i = 0; i < in; ++i) {
        const int64_t g = uneven[static_cast<size_t>(i)];
        const int q = (qweight[static_cast<size_t>((i / 8) * out + o)] >> (4 * (i % 8))) & 15;
        const int z = (((qzeros[static_cast<size_t>(g * (out / 8) + o / 8)] >> (4 * (o % 8))) & 15) + 1) & 15;
        bad += static_cast<double>(w[o * in + i]) != static_cast<double>(fp16_to_f32(scales[static_cast<size_t>(g * out + o)])) * (q - z);
      }
    CHECK(bad == 0);
  }
  {  // group sizes no INT4 block size divides: f32 with the reason
    hf::QuantLayer e = L;
    e.g_idx = nullptr;
    e.group = 16;
    std::vector<int32_t> z2(static_cast<size_t>(in / 16 * out / 8)), s2(static_cast<size_t>(in / 16 * out / 2));
    e.qzeros = reinterpret_cast<const uint8_t*>(z2.data());
    e.scales = reinterpret_cast<const uint8_t*>(s2.data());
    const hf::PackedInt4 p = hf::repack_int4(e);
    CHECK(p.type == DType::F32);
    CHECK_THAT(p.note, Catch::Contains("group size 16"));
  }
  for (int32_t bad : {-1, 2, 1 << 30}) {  // a g_idx naming no group: Error(Format), not a crash
    std::vector<int32_t> h = g_idx;
    h[17] = bad;
    hf::QuantLayer e = L;
    e.g_idx = reinterpret_cast<const uint8_t*>(h.data());
    try {
      hf::repack_int4(e);
      FAIL("no error for g_idx " << bad);
    } catch (const Error& err) {
      CHECK(err.status() == Status::Format);
      CHECK_THAT(std::string(err.what()), Catch::Contains("g_idx[17]"));
    }
  }
}

TEST_CASE("hf: hostile act-order g_idx and permutations fail with a clear status", "[hf][gptq]") {
  const std::string root = quant_checkpoints("hf-actorder-bad");
  if (root.empty()) {
    WARN("SKIPPED: python3 with numpy not found");
    return;
  }
  const std::string dir = root + "/actorder";
  const std::string st_path = dir + "/model.safetensors";
  const std::vector<uint8_t> orig = infer_test::read_file(st_path);
  // Rewrites one tensor of the checkpoint (its dtype, shape and bytes), loads, restores.
  auto with_tensor = [&](const std::string& name, const std::string& dtype, std::vector<int64_t> shape,
                         std::function<void(std::vector<uint8_t>&)> edit) {
    std::vector<infer_test::StTensor> ts;
    for (const hf::SafeTensor& t : hf::parse_safetensors(orig.data(), orig.size(), "orig")) {
      infer_test::StTensor s{t.name, t.dtype, t.shape,
                             std::vector<uint8_t>(orig.begin() + static_cast<long>(t.begin),
                                                  orig.begin() + static_cast<long>(t.end))};
      if (t.name == name) {
        s.dtype = dtype;
        s.shape = shape;
        edit(s.bytes);
      }
      ts.push_back(std::move(s));
    }
    const std::vector<uint8_t> b = infer_test::safetensors_bytes(ts);
    std::ofstream(st_path, std::ios::binary).write(reinterpret_cast<const char*>(b.data()), static_cast<long>(b.size()));
    std::string m;
    const Status s = load_status(dir, &m);
    std::ofstream(st_path, std::ios::binary).write(reinterpret_cast<const char*>(orig.data()), static_cast<long>(orig.size()));
    INFO(m);
    return std::make_pair(s, m);
  };
  const std::string gi = "model.layers.1.mlp.up_proj.g_idx";  // 64 inputs, 2 groups
  auto set = [](int64_t at, int32_t v) {
    return [=](std::vector<uint8_t>& b) { std::memcpy(b.data() + 4 * at, &v, 4); };
  };
  auto r = with_tensor(gi, "I32", {64}, set(5, 2));
  CHECK(r.first == Status::Format);
  CHECK_THAT(r.second, Catch::Contains("g_idx[5] = 2"));
  r = with_tensor(gi, "I32", {64}, set(63, -7));
  CHECK(r.first == Status::Format);
  CHECK_THAT(r.second, Catch::Contains("g_idx[63] = -7"));
  r = with_tensor(gi, "I32", {60}, [](std::vector<uint8_t>& b) { b.resize(240); });
  CHECK(r.first == Status::Format);
  CHECK_THAT(r.second, Catch::Contains("g_idx has 60 values for 64 inputs"));
  r = with_tensor(gi, "I32", {2, 32}, [](std::vector<uint8_t>&) {});
  CHECK(r.first == Status::Format);
  r = with_tensor(gi, "F32", {64}, [](std::vector<uint8_t>&) {});
  CHECK(r.first == Status::Format);
  REQUIRE(load_status(dir) == Status::Ok);

  // A GGUF whose "<name>.perm" is not a permutation of the inputs.
  const std::string out = root + "/actorder.gguf";
  convert_hf(dir, out, ConvertHfOptions{});
  const std::vector<uint8_t> good = infer_test::read_file(out);
  size_t at = 0;
  {
    auto g = GgufFile::open(out);
    const GgufTensorInfo* p = g->find_tensor("blk.0.attn_k.weight.perm");
    REQUIRE(p);
    at = g->data_offset() + p->offset;
  }
  auto patched = [&](int64_t index, int32_t v) {
    std::vector<uint8_t> b = good;
    std::memcpy(b.data() + at + 4 * index, &v, 4);
    std::ofstream(out, std::ios::binary).write(reinterpret_cast<const char*>(b.data()), static_cast<long>(b.size()));
    std::string m;
    const Status s = load_status(out, &m);
    INFO(m);
    return std::make_pair(s, m);
  };
  int32_t first = 0;
  std::memcpy(&first, good.data() + at, 4);
  for (int32_t v : {-1, 64, 1 << 30, first}) {  // out of range, and a duplicate (index 1 = index 0)
    auto q = patched(1, v);
    CHECK(q.first == Status::Format);
    CHECK_THAT(q.second, Catch::Contains("blk.0.attn_k.weight.perm") && Catch::Contains("not a permutation"));
  }
  std::ofstream(out, std::ios::binary).write(reinterpret_cast<const char*>(good.data()), static_cast<long>(good.size()));
  REQUIRE(load_status(out) == Status::Ok);
}

TEST_CASE("hf: GPTQ tensors that disagree are refused", "[hf]") {
  const std::string root = fresh_dir("hf-quant-bad");
  struct stat sb;
  const std::string py = ::stat("/usr/bin/python3", &sb) == 0 ? "/usr/bin/python3" : "python3";
  const int rc = std::system((py + " '" INFER_SOURCE_DIR "/tests/hf_quant_check.py' '" + root + "'").c_str());
  if (WIFEXITED(rc) && WEXITSTATUS(rc) == 77) {
    WARN("SKIPPED: python3 with numpy not found");
    return;
  }
  REQUIRE(rc == 0);
  const std::string dir = root + "/gptq";
  const std::string cfg = infer_test::read_text(dir + "/config.json");
  auto with_cfg = [&](const std::string& from, const std::string& to) {
    std::string c = cfg;
    REQUIRE(c.find(from) != std::string::npos);
    c.replace(c.find(from), from.size(), to);
    infer_test::write_text_file(dir + "/config.json", c);
    std::string m;
    const Status st = load_status(dir, &m);
    infer_test::write_text_file(dir + "/config.json", cfg);
    INFO(m);
    return std::make_pair(st, m);
  };
  CHECK(with_cfg("\"group_size\": 32", "\"group_size\": 16").first == Status::Format);
  CHECK(with_cfg("\"bits\": 4", "\"bits\": 3").first == Status::Unsupported);
  CHECK(with_cfg("\"quant_method\": \"gptq\"", "\"quant_method\": \"bnb\"").first == Status::Unsupported);
  auto r = with_cfg(", \"quantization_config\"", ", \"x_quantization_config\"");
  CHECK(r.first == Status::Format);
  CHECK_THAT(r.second, Catch::Contains("qweight"));
  REQUIRE(load_status(dir) == Status::Ok);
}

TEST_CASE("hf: every architecture's synthetic model as an HF directory gives the GGUF's logits", "[hf]") {
  // infer synth's test presets (every particular of each architecture on),
  // written as F32 GGUF and as an HF checkpoint of that architecture.
  const std::vector<int32_t> prompt = {1, 17, 200, 33, 400, 5, 99, 250, 3, 77, 12, 300, 8, 64, 128, 256,
                                       2, 19, 21, 23, 29, 31, 37, 41, 43, 47};
  for (const char* preset : {"tiny", "tiny-llama3", "tiny-mistral", "tiny-qwen2", "tiny-qwen3", "tiny-phi3",
                             "tiny-gemma", "tiny-gemma2", "mixtral-tiny"}) {
    INFO(preset);
    const SynthPreset* p = find_synth_preset(preset);
    if (!p) {
      WARN("no synth preset " << preset);
      continue;
    }
    const std::string gguf = infer_test::temp_dir() + "/hf-arch-" + preset + ".gguf";
    SynthOptions so;
    so.type = DType::F32;
    write_synth_model(*p, gguf, so);
    auto ref = Model::load(gguf);
    const std::string dir = fresh_dir(std::string("hf-arch-") + preset);
    infer_test::gguf_to_hf_dir(ref->gguf(), dir);
    auto m = Model::load(dir);
    CHECK(m->config().arch == ref->config().arch);
    const std::vector<float> want = prompt_logits(*ref, prompt);
    const float d = max_diff(prompt_logits(*m, prompt), want);
    INFO(preset << ": max |logit difference| " << d);
    CHECK(d < 1e-4f);
    // infer convert hf: back to the GGUF's tensors (Q/K rows permuted back,
    // Gemma norms +1, experts stacked, rope factors), so the same logits bit for bit.
    const std::string out = infer_test::temp_dir() + "/hf-arch-" + preset + "-back.gguf";
    convert_hf(dir, out, ConvertHfOptions{});
    auto c = Model::load(out);
    size_t same = 0;
    for (const GgufTensorInfo& t : ref->gguf().tensors()) {
      const GgufTensorInfo* u = c->gguf().find_tensor(t.name);
      if (!u && t.name == "rope_freqs.weight") continue;  // HF keeps llama3 scaling in config.json
      REQUIRE(u);
      same += u->dims == t.dims && u->type == t.type &&
              std::memcmp(c->gguf().tensor_data(*u), ref->gguf().tensor_data(t), t.nbytes) == 0;
      if (!(u->dims == t.dims && u->type == t.type)) UNSCOPED_INFO(t.name << " differs in shape or type");
    }
    CHECK(same + (ref->gguf().find_tensor("rope_freqs.weight") ? 1 : 0) == ref->gguf().tensors().size());
    CHECK(max_diff(prompt_logits(*c, prompt), want) == 0.0f);
  }
}

TEST_CASE("hf: a shard truncated after load fails the request, not the process", "[hf]") {
  // Every mapped shard is checked before a forward pass (GgufFile::check_intact
  // over all files), so reading a shard that shrank is Error(Io), not SIGBUS.
  REQUIRE_SHARED(path, "models/stories260K.gguf");
  auto ref = Model::load(path);
  const std::string dir = fresh_dir("hf-truncated");
  infer_test::HfWriteOptions o;
  o.shards = 3;
  infer_test::gguf_to_hf_dir(ref->gguf(), dir, o);
  auto m = Model::load(dir);
  EngineParams ep;
  ep.n_threads = 2;
  ep.n_ctx = 64;
  Engine e(*m, ep);
  const std::string last = dir + "/model-00003-of-00003.safetensors";
  struct stat sb;
  REQUIRE(::stat(last.c_str(), &sb) == 0);
  REQUIRE(::truncate(last.c_str(), sb.st_size / 4) == 0);
  RequestParams rp;
  rp.prompt = kPrompt;
  rp.max_tokens = 4;
  auto r = e.submit(rp);
  e.run();
  CHECK(r->finish_reason() == FinishReason::Error);
}

TEST_CASE("hf: a directory whose config.json has no _name_or_path is named after the directory", "[hf]") {
  REQUIRE_SHARED(path, "models/stories260K.gguf");
  auto ref = Model::load(path);
  const std::string dir = fresh_dir("hf-named-after-dir");
  infer_test::gguf_to_hf_dir(ref->gguf(), dir);
  auto m = Model::load(dir + "/");  // a trailing slash too
  CHECK(m->gguf().get_string("general.name").value_or("") == "hf-named-after-dir");
}
