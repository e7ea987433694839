// Model loading beyond the reference files: architecture variants (tied
// embeddings, rope frequency factors, F16 weights) checked by equivalence, and
// GGUF files that parse but describe an impossible model.
#include <cmath>
#include <cstring>

#include "core/fp16.h"
#include "engine/engine.h"
#include "model/model.h"
#include "test_util.h"

using namespace infer;

namespace {

// Rewrites stories260K.gguf through `edit`, which may change metadata and
// return replacement bytes/types for tensors (or drop them).
struct TensorEdit {
  bool drop = false;
  DType type = DType::F32;
  std::vector<int64_t> dims;
  std::vector<uint8_t> data;
};

using Editor = std::function<bool(const GgufTensorInfo&, const uint8_t*, TensorEdit&)>;

std::string rewrite(const std::string& src, const std::string& name,
                    const std::function<void(GgufWriter&)>& meta, const Editor& tensors) {
  auto in = GgufFile::open(src);
  GgufWriter w;
  for (const auto& [k, v] : in->metadata()) w.set(k, v);
  if (meta) meta(w);
  for (const auto& t : in->tensors()) {
    TensorEdit e;
    e.type = t.type;
    e.dims = t.dims;
    const uint8_t* d = in->tensor_data(t);
    e.data.assign(d, d + t.nbytes);
    if (tensors && tensors(t, d, e) && e.drop) continue;
    w.add_tensor(t.name, e.dims, e.type, e.data.data(), e.data.size());
  }
  const std::string out = infer_test::temp_dir() + "/" + name + ".gguf";
  w.write(out);
  return out;
}

std::vector<float> prompt_logits(const Model& m) {
  Engine engine(m, EngineParams{});
  RequestParams rp;
  rp.prompt = {1, 403, 407, 261, 378};
  rp.max_tokens = 8;
  rp.sampling.temperature = 0;
  rp.ignore_eos = true;
  rp.logits = kLogitsPrompt | kLogitsGenerated;
  auto r = engine.submit(rp);
  engine.run();
  REQUIRE(r->finish_reason() == FinishReason::Length);
  return r->logits();
}

float max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  REQUIRE(a.size() == b.size());
  float d = 0;
  for (size_t i = 0; i < a.size(); ++i) d = std::max(d, std::fabs(a[i] - b[i]));
  return d;
}

void require_load_error(const std::string& path, Status status, const std::string& fragment) {
  try {
    Model::load(path);
    FAIL("loading " << path << " should fail");
  } catch (const Error& e) {
    INFO("message: " << e.what());
    REQUIRE(e.status() == status);
    REQUIRE(std::string(e.what()).find(fragment) != std::string::npos);
  }
}

}  // namespace

TEST_CASE("tied embeddings: no output.weight means the embedding is the head", "[model]") {
  REQUIRE_SHARED(src, "models/stories260K.gguf");
  // Replace output.weight by the embedding, then drop it: both files must agree.
  auto base = GgufFile::open(src);
  const GgufTensorInfo* emb = base->find_tensor("token_embd.weight");
  std::vector<uint8_t> emb_bytes(base->tensor_data(*emb), base->tensor_data(*emb) + emb->nbytes);
  const std::string explicit_head = rewrite(src, "explicit-head", nullptr, [&](const GgufTensorInfo& t, const uint8_t*, TensorEdit& e) {
    if (t.name == "output.weight") e.data = emb_bytes;
    return true;
  });
  const std::string tied = rewrite(src, "tied", nullptr, [](const GgufTensorInfo& t, const uint8_t*, TensorEdit& e) {
    e.drop = t.name == "output.weight";
    return true;
  });
  auto a = Model::load(explicit_head);
  auto b = Model::load(tied);
  REQUIRE(max_abs_diff(prompt_logits(*a), prompt_logits(*b)) == 0.0f);
}

TEST_CASE("rope frequency factors (Llama 3 style) divide the frequencies", "[model]") {
  REQUIRE_SHARED(src, "models/stories260K.gguf");
  auto base = Model::load(src);
  const std::vector<float> ref = prompt_logits(*base);
  // Factors of 1 change nothing; factors of 2 change the output.
  for (float f : {1.0f, 2.0f}) {
    auto in = GgufFile::open(src);
    GgufWriter w;
    for (const auto& [k, v] : in->metadata()) w.set(k, v);
    for (const auto& t : in->tensors()) w.add_tensor(t.name, t.dims, t.type, in->tensor_data(t), t.nbytes);
    std::vector<float> factors(4, f);  // n_rot 8 -> 4 pairs
    w.add_tensor("rope_freqs.weight", {4}, DType::F32, factors.data(), factors.size() * 4);
    const std::string path = infer_test::temp_dir() + "/rope-freqs.gguf";
    w.write(path);
    auto m = Model::load(path);
    const float d = max_abs_diff(ref, prompt_logits(*m));
    if (f == 1.0f)
      REQUIRE(d == 0.0f);
    else
      REQUIRE(d > 1e-3f);
  }
}

TEST_CASE("F16 weights give nearly the F32 model's logits", "[model][f16]") {
  REQUIRE_SHARED(src, "models/stories260K.gguf");
  const std::string f16 = rewrite(src, "f16", nullptr, [](const GgufTensorInfo& t, const uint8_t* d, TensorEdit& e) {
    if (t.dims.size() != 2) return true;  // norms stay f32
    const int64_t n = t.n_elements();
    e.type = DType::F16;
    e.data.resize(n * 2);
    for (int64_t i = 0; i < n; ++i) {
      float v;
      std::memcpy(&v, d + i * 4, 4);
      const uint16_t h = f32_to_fp16(v);
      std::memcpy(&e.data[i * 2], &h, 2);
    }
    return true;
  });
  auto a = Model::load(src);
  auto b = Model::load(f16);
  const float d = max_abs_diff(prompt_logits(*a), prompt_logits(*b));
  INFO("max |f16 - f32| logit difference " << d);
  REQUIRE(d < 0.05f);
  REQUIRE(d > 0.0f);
}

TEST_CASE("files that parse but describe an impossible model are refused", "[model]") {
  REQUIRE_SHARED(src, "models/stories260K.gguf");
  require_load_error(rewrite(src, "missing", nullptr, [](const GgufTensorInfo& t, const uint8_t*, TensorEdit& e) {
                       e.drop = t.name == "blk.3.ffn_up.weight";
                       return true;
                     }),
                     Status::Format, "blk.3.ffn_up.weight");
  require_load_error(rewrite(src, "shape", nullptr, [](const GgufTensorInfo& t, const uint8_t*, TensorEdit& e) {
                       if (t.name == "blk.0.attn_k.weight") e.dims = {32, 64};
                       return true;
                     }),
                     Status::Format, "blk.0.attn_k.weight");
  require_load_error(rewrite(src, "heads", [](GgufWriter& w) { w.set("llama.attention.head_count_kv", GgufValue::make_u32(3)); }, nullptr),
                     Status::Format, "head_count");
  require_load_error(rewrite(src, "zero-heads", [](GgufWriter& w) { w.set("llama.attention.head_count", GgufValue::make_u32(0)); }, nullptr),
                     Status::Format, "head_count");
  require_load_error(rewrite(src, "arch", [](GgufWriter& w) { w.set("general.architecture", GgufValue::make_string("gpt-j")); }, nullptr),
                     Status::Unsupported, "gpt-j");
  require_load_error(rewrite(src, "rope-type", [](GgufWriter& w) { w.set("llama.rope.scaling.type", GgufValue::make_string("yarn")); }, nullptr),
                     Status::Unsupported, "yarn");
  require_load_error(rewrite(src, "emb-type", nullptr, [](const GgufTensorInfo& t, const uint8_t*, TensorEdit& e) {
                       if (t.name == "token_embd.weight") {  // an integer tensor cannot be a weight
                         e.type = DType::I32;
                       }
                       return true;
                     }),
                     Status::Unsupported, "token_embd.weight");
  // The model that failed to load left nothing behind: a good one still loads.
  REQUIRE(Model::load(src)->config().n_layer == 5);
}
