// Hugging Face state-space checkpoints (lib/hf/hf_ssm.*): MambaForCausalLM,
// Mamba2ForCausalLM and JambaForCausalLM directories written from the same
// random arrays as an F32 GGUF in the converters' layout
// (tests/hf_writer_ssm.h) give that GGUF's tensors, keys and logits; `infer
// convert hf` writes that GGUF back; hostile directories fail with
// Error(Format) naming what is wrong.
#include <cmath>
#include <cstring>
#include <limits>

#include "core/error.h"
#include "engine/engine.h"
#include "hf/hf.h"
#include "hf_writer_ssm.h"
#include "model/model.h"
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

// The vocabulary every model here uses: the "tiny" synth preset's (512 SPM
// tokens with byte fallback).
const GgufFile& vocab_source() {
  static std::unique_ptr<GgufFile> g;
  if (!g) {
    const std::string path = infer_test::temp_dir() + "/hf-ssm-vocab.gguf";
    SynthOptions so;
    so.type = DType::F32;
    write_synth_model(*find_synth_preset("tiny"), path, so);
    g = GgufFile::open(path);
  }
  return *g;
}

infer_test::SsmSpec spec(const std::string& arch) {
  infer_test::SsmSpec s;
  s.arch = arch;
  if (arch == "mamba2") {
    s.d_state = 16;  // heads of 8, 2 groups of B/C
  } else if (arch == "jamba") {
    s.n_layer = 4;  // attention on 1 and 3, mixtures on 0 and 2
    s.eps = 1e-6f;
  }
  return s;
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
    if (std::isnan(e)) return std::numeric_limits<float>::infinity();
    d = std::max(d, e);
  }
  return d;
}

const std::vector<int32_t> kPrompt = {1, 403, 407, 261, 378, 30, 200, 17, 99, 12, 300, 8, 64, 128, 256, 2, 19};

// Every tensor and <arch>.* key of `want` is in `got`, the same; no tensor more.
void check_same_view(const GgufFile& got, const GgufFile& want, const std::string& arch, bool exact) {
  CHECK(got.tensors().size() == want.tensors().size());
  for (const GgufTensorInfo& t : want.tensors()) {
    INFO(t.name);
    const GgufTensorInfo* u = got.find_tensor(t.name);
    REQUIRE(u);
    CHECK(u->dims == t.dims);
    if (exact) {
      REQUIRE(u->type == DType::F32);
      CHECK(std::memcmp(got.tensor_data(*u), want.tensor_data(t), t.nbytes) == 0);
    }
  }
  for (const auto& [k, v] : want.metadata()) {
    if (k.rfind(arch + ".", 0) != 0 && k != "general.architecture") continue;
    INFO(k);
    const GgufValue* g = got.find(k);
    REQUIRE(g);
    if (v.is_float()) CHECK(g->as_float() == Approx(v.as_float()).epsilon(1e-6));
    else CHECK(*g == v);
  }
}

Status open_status(const std::string& dir, std::string* msg) {
  try {
    hf::open_directory(dir);
    return Status::Ok;
  } catch (const Error& e) {
    *msg = e.what();
    return e.status();
  }
}

}  // namespace

TEST_CASE("hf_ssm: config.json becomes the GGUF keys of mamba, mamba2 and jamba", "[hf_ssm]") {
  auto get = [](const std::vector<std::pair<std::string, GgufValue>>& m, const std::string& k) -> const GgufValue* {
    for (const auto& kv : m)
      if (kv.first == k) return &kv.second;
    return nullptr;
  };
  // Mamba: time_step_rank "auto" is ceil(hidden / 16); d_inner from expand.
  auto m = hf::config_metadata(R"({"architectures":["MambaForCausalLM"],"model_type":"mamba","hidden_size":40,
      "num_hidden_layers":3,"state_size":12,"expand":3,"conv_kernel":3,"time_step_rank":"auto","vocab_size":100})");
  REQUIRE(get(m, "general.architecture"));
  CHECK(get(m, "general.architecture")->s == "mamba");
  CHECK(get(m, "mamba.ssm.time_step_rank")->as_int() == 3);
  CHECK(get(m, "mamba.ssm.inner_size")->as_int() == 120);
  CHECK(get(m, "mamba.ssm.state_size")->as_int() == 12);
  CHECK(get(m, "mamba.ssm.conv_kernel")->as_int() == 3);
  CHECK(get(m, "mamba.block_count")->as_int() == 3);
  // No model_type: the class in "architectures" says which.
  m = hf::config_metadata(R"({"architectures":["Mamba2ForCausalLM"],"hidden_size":64,"num_hidden_layers":2,
      "state_size":16,"expand":2,"head_dim":16,"n_groups":2,"num_heads":8})");
  CHECK(get(m, "general.architecture")->s == "mamba2");
  CHECK(get(m, "mamba2.ssm.time_step_rank")->as_int() == 8);  // the heads
  CHECK(get(m, "mamba2.ssm.group_count")->as_int() == 2);
  // Jamba: attention every 4th layer from 2 -> head_count_kv per layer, 0 on Mamba layers.
  m = hf::config_metadata(R"({"model_type":"jamba","hidden_size":64,"num_hidden_layers":7,"num_attention_heads":4,
      "num_key_value_heads":2,"intermediate_size":96,"attn_layer_period":4,"attn_layer_offset":2,
      "expert_layer_period":2,"expert_layer_offset":1,"num_experts":4,"num_experts_per_tok":2,"mamba_dt_rank":"auto"})");
  const GgufValue* kv = get(m, "jamba.attention.head_count_kv");
  REQUIRE(kv);
  REQUIRE(kv->size() == 7);
  const int64_t want[] = {0, 0, 2, 0, 0, 0, 2};
  for (size_t i = 0; i < 7; ++i) CHECK(kv->int_at(i) == want[i]);
  CHECK(get(m, "jamba.expert_count")->as_int() == 4);
  CHECK(get(m, "jamba.ssm.inner_size")->as_int() == 128);
  CHECK(get(m, "jamba.ssm.time_step_rank")->as_int() == 4);
  // Inconsistent configs.
  auto status = [](const char* cfg) {
    try {
      hf::config_metadata(cfg);
      return Status::Ok;
    } catch (const Error& e) {
      return e.status();
    }
  };
  CHECK(status(R"({"model_type":"mamba","hidden_size":40,"num_hidden_layers":2,"expand":2,"intermediate_size":100})") ==
        Status::Format);
  CHECK(status(R"({"model_type":"mamba2","hidden_size":64,"num_hidden_layers":2,"head_dim":16,"num_heads":4})") ==
        Status::Format);  // 128 / 16 = 8 heads
  CHECK(status(R"({"model_type":"mamba2","hidden_size":64,"num_hidden_layers":2,"head_dim":16,"n_groups":3})") ==
        Status::Format);
  CHECK(status(R"({"model_type":"jamba","hidden_size":64,"num_hidden_layers":4,"num_attention_heads":4,
      "intermediate_size":96,"attn_layer_period":2,"attn_layer_offset":2})") == Status::Format);
  CHECK(status(R"({"model_type":"jamba","hidden_size":64,"num_hidden_layers":4,"num_attention_heads":4,
      "intermediate_size":96,"attn_layer_period":8,"attn_layer_offset":5})") == Status::Format);
  CHECK(status(R"({"model_type":"jamba","hidden_size":64,"num_hidden_layers":3,"num_attention_heads":4,
      "intermediate_size":96,"layers_block_type":["mamba","attention"]})") == Status::Format);
  CHECK(status(R"({"model_type":"mamba","hidden_size":40,"num_hidden_layers":2,"use_bias":true})") ==
        Status::Unsupported);
  CHECK(status(R"({"model_type":"mamba","hidden_size":40,"num_hidden_layers":2,"time_step_rank":"big"})") ==
        Status::Format);
}

// Writes arch's model as an HF directory and a GGUF (tied: no lm_head, and
// squeezed conv1d weights, which read the same).
static std::pair<std::string, std::string> write_pair(const char* arch, bool tied) {
  infer_test::SsmSpec s = spec(arch);
  s.tied = tied;
  const std::string name = std::string("hf-ssm-") + arch + (tied ? "-tied" : "");
  const std::string dir = fresh_dir(name), gguf = infer_test::temp_dir() + "/" + name + ".gguf";
  infer_test::SsmWriteOptions o;
  o.conv_2d = tied;
  infer_test::write_ssm_model(s, vocab_source(), dir, gguf, o);
  return {dir, gguf};
}

TEST_CASE("hf_ssm: each architecture's HF directory is its GGUF: tensors and keys", "[hf_ssm]") {
  for (const char* arch : {"mamba", "mamba2", "jamba"}) {
    for (bool tied : {false, true}) {
      INFO(arch << (tied ? " tied" : ""));
      const auto [dir, gguf] = write_pair(arch, tied);
      auto want = GgufFile::open(gguf);
      auto view = hf::open_directory(dir);
      check_same_view(*view, *want, arch, true);
      CHECK((view->find_tensor("output.weight") != nullptr) == !tied);
    }
  }
}

TEST_CASE("hf_ssm: Jamba's other spellings (a dense layer's experts.0, Mini-Jamba's moe and B_layernorm)", "[hf_ssm]") {
  const infer_test::SsmSpec s = spec("jamba");
  const std::string dir = fresh_dir("hf-ssm-jamba-spellings"), gguf = infer_test::temp_dir() + "/hf-ssm-jamba-spellings.gguf";
  infer_test::SsmWriteOptions o;
  int renamed = 0;
  o.edit_tensor = [&](infer_test::StTensor& t) {
    auto rename = [&](const std::string& from, const std::string& to) {
      const size_t p = t.name.find(from);
      if (p == std::string::npos) return;
      t.name.replace(p, from.size(), to);
      ++renamed;
    };
    // Layers 1 and 3 are dense: their FFN as expert 0 of a one-expert block.
    if (t.name.rfind("model.layers.1.", 0) == 0 || t.name.rfind("model.layers.3.", 0) == 0)
      rename(".feed_forward.", ".feed_forward.experts.0.");
    if (t.name.rfind("model.layers.2.", 0) == 0) {
      rename(".feed_forward.", ".moe.");
      rename(".b_layernorm.", ".B_layernorm.");
      rename(".c_layernorm.", ".C_layernorm.");
    }
    return true;
  };
  infer_test::write_ssm_model(s, vocab_source(), dir, gguf, o);
  CHECK(renamed == 6 + 1 + 3 * 4 + 2);  // dense gate/up/down x2; router; 4 experts x3; B/C norms
  auto view = hf::open_directory(dir);
  check_same_view(*view, *GgufFile::open(gguf), "jamba", true);
}

TEST_CASE("hf_ssm: each architecture's HF directory gives its GGUF's logits, and converts back", "[hf_ssm]") {
  for (const char* arch : {"mamba", "mamba2", "jamba"}) {
    for (bool tied : {false, true}) {
      INFO(arch << (tied ? " tied" : ""));
      const auto [dir, gguf] = write_pair(arch, tied);
      auto ref = Model::load(gguf);
      auto m = Model::load(dir);
      CHECK(m->config().arch == ref->config().arch);
      CHECK(m->config().n_ssm_layers() == ref->config().n_ssm_layers());
      CHECK(m->config().n_ssm_layers() == 2);
      const std::vector<float> lw = prompt_logits(*ref, kPrompt);
      const float d = max_diff(prompt_logits(*m, kPrompt), lw);
      INFO("max |logit difference| " << d);
      CHECK(d <= 1e-5f);

      // infer convert hf: the GGUF's tensors again, bit for bit, and its logits.
      const std::string out = gguf.substr(0, gguf.size() - 5) + "-back.gguf";
      convert_hf(dir, out, ConvertHfOptions{});
      auto want = GgufFile::open(gguf), c = GgufFile::open(out);
      check_same_view(*c, *want, arch, true);
      CHECK(max_diff(prompt_logits(*Model::load(out), kPrompt), lw) <= 1e-5f);
    }
  }
}

TEST_CASE("hf_ssm: the synth presets as HF checkpoints give the presets' logits", "[hf_ssm]") {
  // infer synth's tiny state-space presets (F32), written back as the HF
  // checkpoints they could have been converted from (A_log = log(-A), so
  // A comes back within an ulp or so: the logits agree to 1e-5, not bitwise).
  for (const char* preset : {"tiny-mamba", "tiny-mamba2", "tiny-jamba"}) {
    INFO(preset);
    const SynthPreset* p = find_synth_preset(preset);
    REQUIRE(p);
    const std::string gguf = infer_test::temp_dir() + "/hf-ssm-" + preset + ".gguf";
    SynthOptions so;
    so.type = DType::F32;
    write_synth_model(*p, gguf, so);
    auto ref = Model::load(gguf);
    const std::string dir = fresh_dir(std::string("hf-ssm-") + preset);
    infer_test::gguf_ssm_to_hf_dir(ref->gguf(), dir);
    auto m = Model::load(dir);
    CHECK(m->config().arch == ref->config().arch);
    CHECK(m->config().layer_ssm == ref->config().layer_ssm);
    check_same_view(m->gguf(), ref->gguf(), p->arch, false);
    const float d = max_diff(prompt_logits(*m, kPrompt), prompt_logits(*ref, kPrompt));
    INFO("max |logit difference| " << d);
    CHECK(d <= 1e-5f);
  }
}

TEST_CASE("hf_ssm: BF16 checkpoints keep their matrices and get F32 SSM vectors", "[hf_ssm]") {
  for (const char* arch : {"mamba", "mamba2", "jamba"}) {
    INFO(arch);
    const infer_test::SsmSpec s = spec(arch);
    const std::string name = std::string("hf-ssm-bf16-") + arch;
    const std::string dir = fresh_dir(name), gguf = infer_test::temp_dir() + "/" + name + ".gguf";
    infer_test::SsmWriteOptions o;
    o.dtype = "BF16";
    infer_test::write_ssm_model(s, vocab_source(), dir, gguf, o);
    auto view = hf::open_directory(dir);
    auto want = GgufFile::open(gguf);
    check_same_view(*view, *want, arch, false);
    // The first SSM layer (0 in every spec here).
    CHECK(view->find_tensor("blk.0.ssm_in.weight")->type == DType::BF16);
    for (const char* t : {"blk.0.ssm_a", "blk.0.ssm_d", "blk.0.ssm_conv1d.weight", "blk.0.ssm_conv1d.bias",
                          "blk.0.ssm_dt.bias"}) {
      INFO(t);
      const GgufTensorInfo* u = view->find_tensor(t);
      REQUIRE(u);
      CHECK(u->type == DType::F32);
      // Within BF16's rounding of the F32 values (A through exp: relative).
      const float* a = reinterpret_cast<const float*>(view->tensor_data(*u));
      const float* b = reinterpret_cast<const float*>(want->tensor_data(*want->find_tensor(t)));
      float worst = 0;
      for (int64_t i = 0; i < u->n_elements(); ++i)
        worst = std::max(worst, std::fabs(a[i] - b[i]) / std::max(1.0f, std::fabs(b[i])));
      CHECK(worst < 0.02f);
    }
    auto m = Model::load(dir);
    const float d = max_diff(prompt_logits(*m, kPrompt), prompt_logits(*Model::load(gguf), kPrompt));
    INFO("max |logit difference| " << d);
    CHECK(d > 0.0f);
    CHECK(d < 0.5f);
  }
}

TEST_CASE("hf_ssm: hostile directories fail with Error(Format) naming what is wrong", "[hf_ssm]") {
  struct Case {
    const char* what;
    const char* arch;
    std::function<bool(infer_test::StTensor&)> edit_tensor;
    std::function<void(std::map<std::string, std::string>&)> edit_config;
    const char* needle;
  };
  auto drop = [](const char* n) {
    return [n](infer_test::StTensor& t) { return t.name != n; };
  };
  auto reshape = [](const char* n, std::vector<int64_t> shape) {
    return [n, shape](infer_test::StTensor& t) {
      if (t.name == n) {
        int64_t c = 1;
        for (int64_t d : shape) c *= d;
        t.shape = shape;
        t.bytes.resize(static_cast<size_t>(c) * 4);
      }
      return true;
    };
  };
  const std::vector<Case> cases = {
      {"no A_log", "mamba", drop("backbone.layers.1.mixer.A_log"), nullptr, "A_log"},
      {"no conv1d", "mamba", drop("backbone.layers.0.mixer.conv1d.weight"), nullptr, "conv1d.weight"},
      {"no conv1d bias", "mamba2", drop("backbone.layers.0.mixer.conv1d.bias"), nullptr, "conv1d.bias"},
      {"no embedding", "mamba", drop("backbone.embeddings.weight"), nullptr, "embeddings"},
      {"no D", "jamba", drop("model.layers.0.mamba.D"), nullptr, "mamba.D"},
      {"no dt norm", "jamba", drop("model.layers.2.mamba.dt_layernorm.weight"), nullptr, "dt_layernorm"},
      {"A_log of the wrong state size", "mamba", reshape("backbone.layers.0.mixer.A_log", {64, 4}), nullptr, "A_log"},
      {"conv1d of the wrong width", "mamba", reshape("backbone.layers.0.mixer.conv1d.weight", {64, 1, 3}), nullptr,
       "conv1d"},
      {"x_proj of another rank", "mamba", reshape("backbone.layers.1.mixer.x_proj.weight", {20, 64}), nullptr, "x_proj"},
      {"mamba2 norm of another width", "mamba2", reshape("backbone.layers.0.mixer.norm.weight", {32}), nullptr,
       "mixer.norm"},
      {"expand that does not match in_proj", "mamba", nullptr,
       [](auto& c) { c["expand"] = "3"; c.erase("intermediate_size"); }, "in_proj"},
      {"intermediate_size against expand", "mamba", nullptr, [](auto& c) { c["intermediate_size"] = "96"; },
       "intermediate_size"},
      {"state_size that does not match", "mamba2", nullptr, [](auto& c) { c["state_size"] = "8"; }, "in_proj"},
      {"attention layers elsewhere", "jamba", nullptr, [](auto& c) { c["attn_layer_offset"] = "0"; }, "layer"},
      {"an offset past the layers", "jamba", nullptr,
       [](auto& c) { c["attn_layer_period"] = "8"; c["attn_layer_offset"] = "6"; }, "num_hidden_layers"},
      {"a layer list of the wrong length", "jamba", nullptr,
       [](auto& c) { c["layers_block_type"] = R"(["mamba","attention","mamba"])"; }, "layers_block_type"},
      {"more layers in the config than the checkpoint", "mamba", nullptr,
       [](auto& c) { c["num_hidden_layers"] = "3"; }, "layers.2"},
      {"a config that claims a huge model", "jamba", nullptr,
       [](auto& c) { c["num_hidden_layers"] = "60000"; c["num_experts"] = "4000"; }, "router"},
      {"a tensor from another layer", "mamba",
       [](infer_test::StTensor& t) {
         if (t.name == "lm_head.weight") t.name = "backbone.layers.5.mixer.D";
         return true;
       },
       nullptr, "layers.5"},
      {"lm_head of another vocabulary", "mamba", reshape("lm_head.weight", {100, 32}), nullptr, "lm_head"},
      {"an A_log whose exp overflows", "mamba2",
       [](infer_test::StTensor& t) {
         if (t.name == "backbone.layers.1.mixer.A_log") {
           const float big = 100.0f;
           std::memcpy(t.bytes.data() + 4, &big, 4);
         }
         return true;
       },
       nullptr, "A_log"},
  };
  for (const Case& c : cases) {
    INFO(c.what);
    const std::string dir = fresh_dir("hf-ssm-hostile");
    infer_test::SsmWriteOptions o;
    o.edit_tensor = c.edit_tensor;
    o.edit_config = c.edit_config;
    infer_test::write_ssm_model(spec(c.arch), vocab_source(), dir, "", o);
    std::string msg;
    CHECK(open_status(dir, &msg) == Status::Format);
    INFO(msg);
    CHECK(msg.find(c.needle) != std::string::npos);
  }
  // Variants the GGUF architectures do not run: Unsupported.
  const std::string dir = fresh_dir("hf-ssm-hostile");
  infer_test::SsmWriteOptions o;
  o.edit_config = [](auto& c) { c["use_conv_bias"] = "false"; };
  infer_test::write_ssm_model(spec("mamba"), vocab_source(), dir, "", o);
  std::string msg;
  CHECK(open_status(dir, &msg) == Status::Unsupported);
  // And the untouched directory opens (the cases above fail for their edit alone).
  infer_test::write_ssm_model(spec("jamba"), vocab_source(), dir, "", {});
  CHECK(open_status(dir, &msg) == Status::Ok);
}
