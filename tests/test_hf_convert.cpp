// `infer convert hf` writes only what the loader accepts (issue 27, point 5):
// a directory the loader refuses is refused by convert with the loader's
// error, a file that would not load is never written, and a refused
// conversion leaves nothing at (or beside) the output path.
// (A file of its own beside test_hf.cpp, which is at its size limit.)
#include <dirent.h>
#include <sys/stat.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "core/error.h"
#include "hf/hf.h"
#include "hf_writer.h"
#include "model/model.h"
#include "test_util.h"
#include "tools/convert_hf.h"

using namespace infer;

namespace {

struct Outcome {
  Status status = Status::Ok;
  std::string message;
};

Outcome load_outcome(const std::string& path) {
  try {
    Model::load(path);
    return {};
  } catch (const Error& e) {
    return {e.status(), e.what()};
  }
}

Outcome convert_outcome(const std::string& dir, const std::string& out, const ConvertHfOptions& o = {}) {
  try {
    convert_hf(dir, out, o);
    return {};
  } catch (const Error& e) {
    return {e.status(), e.what()};
  }
}

bool exists(const std::string& path) {
  struct stat s;
  return ::stat(path.c_str(), &s) == 0;
}

// Files of `folder` whose name starts with `prefix` (the output and any
// temporary file written beside it).
std::vector<std::string> files_starting_with(const std::string& folder, const std::string& prefix) {
  std::vector<std::string> out;
  if (DIR* d = ::opendir(folder.c_str())) {
    while (const dirent* e = ::readdir(d))
      if (std::strncmp(e->d_name, prefix.c_str(), prefix.size()) == 0) out.push_back(e->d_name);
    ::closedir(d);
  }
  return out;
}

// Sets element `index` of tensor `name` (F32) in dir/model.safetensors.
void set_value(const std::string& dir, const std::string& name, size_t index, float v) {
  const std::string path = dir + "/model.safetensors";
  std::vector<uint8_t> b = infer_test::read_file(path);
  for (const hf::SafeTensor& t : hf::parse_safetensors(b.data(), b.size(), path)) {
    if (t.name != name) continue;
    REQUIRE(t.dtype == "F32");
    REQUIRE(t.begin + 4 * (index + 1) <= t.end);
    std::memcpy(b.data() + t.begin + 4 * index, &v, 4);
    infer_test::write_text_file(path, std::string(b.begin(), b.end()));
    return;
  }
  FAIL("no tensor " << name);
}

// config.json with `key` set to `value` (replaced where it is, else added).
std::string with_key(std::string cfg, const std::string& key, const std::string& value) {
  const std::string k = "\"" + key + "\":";
  const size_t at = cfg.find(k);
  if (at == std::string::npos) return cfg.substr(0, cfg.rfind('}')) + "," + k + value + "}";
  const size_t b = at + k.size(), e = cfg.find_first_of(",}", b);
  return cfg.replace(b, e - b, value);
}

// dir/model.safetensors with tensor `name` declared with `shape` (same bytes).
void set_shape(const std::string& dir, const std::string& name, std::vector<int64_t> shape) {
  const std::string path = dir + "/model.safetensors";
  const std::vector<uint8_t> b = infer_test::read_file(path);
  std::vector<infer_test::StTensor> ts;
  for (const hf::SafeTensor& t : hf::parse_safetensors(b.data(), b.size(), path))
    ts.push_back({t.name, t.dtype, t.name == name ? shape : t.shape,
                  std::vector<uint8_t>(b.begin() + static_cast<long>(t.begin), b.begin() + static_cast<long>(t.end))});
  const std::vector<uint8_t> out = infer_test::safetensors_bytes(ts);
  infer_test::write_text_file(path, std::string(out.begin(), out.end()));
}

}  // namespace

TEST_CASE("hf: convert refuses what the loader would reject and leaves nothing behind", "[hf][convert]") {
  REQUIRE_SHARED(path, "models/stories260K.gguf");
  auto ref = Model::load(path);
  const std::string root = infer_test::temp_dir() + "/hf-convert-refuse";
  REQUIRE(std::system(("rm -rf '" + root + "' && mkdir -p '" + root + "/out'").c_str()) == 0);
  const std::string dir = root + "/model", outdir = root + "/out", out = outdir + "/m.gguf";
  REQUIRE(std::system(("mkdir -p '" + dir + "'").c_str()) == 0);
  infer_test::gguf_to_hf_dir(ref->gguf(), dir);
  const std::string st = infer_test::read_text(dir + "/model.safetensors");
  const std::string cfg = infer_test::read_text(dir + "/config.json");
  const std::string tok = infer_test::read_text(dir + "/tokenizer.json");
  auto restore = [&] {
    infer_test::write_text_file(dir + "/model.safetensors", st);
    infer_test::write_text_file(dir + "/config.json", cfg);
    infer_test::write_text_file(dir + "/tokenizer.json", tok);
  };
  REQUIRE(load_outcome(dir).status == Status::Ok);

  // What the loader says about the directory, convert says too, and writes nothing.
  auto refused_like_the_loader = [&](const char* what) {
    INFO(what);
    const Outcome l = load_outcome(dir);
    INFO("load: " << l.message);
    REQUIRE(l.status != Status::Ok);
    const Outcome c = convert_outcome(dir, out);
    INFO("convert: " << c.message);
    CHECK(c.status == l.status);
    CHECK_THAT(c.message, Catch::Contains(l.message));
    CHECK(files_starting_with(outdir, "m.gguf").empty());
    restore();
  };

  SECTION("a weight that is NaN or infinite") {
    set_value(dir, "model.layers.0.mlp.down_proj.weight", 5, std::numeric_limits<float>::quiet_NaN());
    refused_like_the_loader("NaN weight");
    set_value(dir, "model.norm.weight", 0, -std::numeric_limits<float>::infinity());
    refused_like_the_loader("-Inf norm weight");
  }

  // The shapes /work/shared/repro/untrusted/gen_hostile_hf.py found that
  // convert wrote and the loader then refused.
  SECTION("config.json values the architecture refuses") {
    for (const auto& [key, value] : std::vector<std::pair<std::string, std::string>>{
             {"head_dim", "7"},                             // rope dimension does not fit the head
             {"num_attention_heads", "64"},                 // heads of one value
             {"max_position_embeddings", "2147483648"},     // context length out of range
             {"rope_theta", "1e308"},                       // frequency base out of range
             {"rope_scaling", R"({"rope_type":"llama3","factor":8,"low_freq_factor":1,"high_freq_factor":1,)"
                              R"("original_max_position_embeddings":0})"}}) {
      infer_test::write_text_file(dir + "/config.json", with_key(cfg, key, value));
      refused_like_the_loader(key.c_str());
    }
  }

  SECTION("tensor shapes the architecture refuses") {
    auto ts = hf::parse_safetensors(reinterpret_cast<const uint8_t*>(st.data()), st.size(), "st");
    std::vector<int64_t> emb;
    for (const hf::SafeTensor& t : ts)
      if (t.name == "model.embed_tokens.weight") emb = t.shape;
    REQUIRE(emb.size() == 2);
    set_shape(dir, "model.embed_tokens.weight", {emb[1], emb[0]});  // transposed
    refused_like_the_loader("transposed embedding");
    REQUIRE(emb[1] % 8 == 0);
    set_shape(dir, "model.embed_tokens.weight", {emb[0], 8, emb[1] / 8});  // 3-D
    refused_like_the_loader("3-D embedding");
  }

  SECTION("a vocabulary the embedding does not cover") {
    const std::string at = "\"added_tokens\":[";
    std::string t = tok;
    REQUIRE(t.find(at) != std::string::npos);
    t.insert(t.find(at) + at.size(), R"({"id":100000,"content":"<far>","special":true})" +
                                         std::string(t[t.find(at) + at.size()] == ']' ? "" : ","));
    infer_test::write_text_file(dir + "/tokenizer.json", t);
    refused_like_the_loader("added token beyond the embedding");
  }

  SECTION("a weight that converting to F16 makes infinite") {
    // Finite in the directory (it loads), beyond F16's range once converted.
    set_value(dir, "model.layers.1.self_attn.o_proj.weight", 3, 1e30f);
    REQUIRE(load_outcome(dir).status == Status::Ok);
    ConvertHfOptions o;
    o.keep_types = false;
    o.type = DType::F16;
    const Outcome c = convert_outcome(dir, out, o);
    INFO(c.message);
    CHECK(c.status == Status::Format);
    CHECK_THAT(c.message, Catch::Contains("would not load"));
    CHECK_THAT(c.message, Catch::Contains("blk.1.attn_output.weight"));
    CHECK(files_starting_with(outdir, "m.gguf").empty());
    // Kept as F32 it converts and loads.
    REQUIRE(convert_outcome(dir, out).status == Status::Ok);
    CHECK(load_outcome(out).status == Status::Ok);
    restore();
  }

  SECTION("a refused conversion leaves an existing output as it was") {
    infer_test::write_text_file(out, "previous");
    set_value(dir, "model.embed_tokens.weight", 0, std::numeric_limits<float>::quiet_NaN());
    CHECK(convert_outcome(dir, out).status == Status::Format);
    CHECK(infer_test::read_text(out) == "previous");
    CHECK(files_starting_with(outdir, "m.gguf").size() == 1);
    restore();
    REQUIRE(convert_outcome(dir, out).status == Status::Ok);
    CHECK(load_outcome(out).status == Status::Ok);
  }
}
