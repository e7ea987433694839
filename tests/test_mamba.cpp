// The state-space architectures (lib/model/mamba.*): a prompt's logits are
// the same computed in one pass, token by token, in chunks of 3 and beside
// another sequence (the recurrent state carried through the KV blocks);
// greedy text through the engine is the direct forward pass's; quantized
// files keep the convolution taps and give near logits; hostile files are
// Format errors naming the key or tensor; what the models refuse.
// (tests/ref/ssm_ref_test.py checks the logits against a numpy reference.)
#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/threadpool.h"
#include "dist/comm.h"
#include "engine/backends.h"
#include "engine/engine.h"
#include "gguf/gguf.h"
#include "model/model.h"
#include "quant/formats.h"
#include "tools/quantize.h"
#include "tools/synth.h"
#include "test_util.h"


using namespace infer;

namespace {

const char* const kPresets[] = {"tiny-mamba", "tiny-mamba2", "tiny-jamba"};

std::string ssm_file(const std::string& preset, DType t) {
  const std::string path = infer_test::temp_dir() + "/ssm-" + preset + "-" + dtype_name(t) + ".gguf";
  SynthOptions o;
  o.type = t;
  o.n_threads = 2;
  write_synth_model(*find_synth_preset(preset), path, o);
  return path;
}

std::vector<int32_t> tokens(int n, uint32_t seed, int n_vocab) {
  std::vector<int32_t> t = {1};
  uint32_t s = seed;
  while (static_cast<int>(t.size()) < n) {
    s = s * 1664525u + 1013904223u;
    t.push_back(3 + static_cast<int32_t>((s >> 8) % static_cast<uint32_t>(n_vocab - 3)));
  }
  return t;
}

// A model's forward pass run directly: a CPU backend, a KV cache of small
// blocks (so the state crosses many block boundaries), sequences fed in
// chunks.
struct Direct {
  const Model& m;
  ThreadPool pool{2};
  std::unique_ptr<Backend> be;
  std::unique_ptr<KvCache> kv;
  Workspace ws;
  explicit Direct(const Model& model, int block_size = 4, int n_blocks = 64) : m(model) {
    be = make_backend(BackendKind::Cpu, pool);
    KvLayout l = m.kv_layout();
    l.block_size = block_size;
    l.n_blocks = n_blocks;
    kv = std::make_unique<KvCache>(l, [&](const KvLayout& L, int n, KvTier tier) { return be->make_kv_memory(L, n, tier); });
  }
  // Logits of every position of `t` (a new sequence), fed `chunk` tokens per pass.
  std::vector<float> run(const std::vector<int32_t>& t, size_t chunk) {
    const int s = kv->add_sequence();
    REQUIRE(kv->reserve(s, static_cast<int>(t.size())));
    const size_t V = static_cast<size_t>(m.config().n_vocab);
    std::vector<float> out(t.size() * V);
    for (size_t i = 0; i < t.size(); i += chunk) {
      Batch b;
      const size_t e = std::min(t.size(), i + chunk);
      for (size_t j = i; j < e; ++j) b.add(t[j], static_cast<int32_t>(j), s, true);
      m.forward(b, *kv, *be, ws, out.data() + i * V);
    }
    kv->remove_sequence(s);
    return out;
  }
};

double max_diff(const std::vector<float>& a, const std::vector<float>& b) {
  REQUIRE(a.size() == b.size());
  double mx = 0;
  for (size_t i = 0; i < a.size(); ++i) mx = std::max(mx, std::fabs(double(a[i]) - double(b[i])));
  return mx;
}

double max_abs(const std::vector<float>& a) {
  double mx = 0;
  for (float v : a) mx = std::max(mx, std::fabs(double(v)));
  return mx;
}

// A copy of a GGUF file with its metadata edited by `meta` and its tensors by
// `keep` (false drops one; changed dims cut its data to the new size).
void rewrite(const std::string& src, const std::string& dst,
             const std::function<void(std::vector<std::pair<std::string, GgufValue>>&)>& meta,
             const std::function<bool(const std::string&, std::vector<int64_t>&)>& keep) {
  std::unique_ptr<GgufFile> f = GgufFile::open(src);
  std::vector<std::pair<std::string, GgufValue>> kv = f->metadata();
  meta(kv);
  GgufWriter w;
  for (auto& p : kv) w.set(p.first, p.second);
  for (const GgufTensorInfo& t : f->tensors()) {
    std::vector<int64_t> dims = t.dims;
    if (!keep(t.name, dims)) continue;
    int64_t n = 1;
    for (int64_t x : dims) n *= x;
    const size_t bytes = dtype_row_bytes(t.type, dims[0]) * static_cast<size_t>(n / dims[0]);
    REQUIRE(bytes <= t.nbytes);
    w.add_tensor(t.name, dims, t.type, f->tensor_data(t), bytes);
  }
  w.write(dst);
}

void set_key(std::vector<std::pair<std::string, GgufValue>>& kv, const std::string& key, GgufValue v) {
  for (auto& p : kv)
    if (p.first == key) {
      p.second = std::move(v);
      return;
    }
  kv.emplace_back(key, std::move(v));
}

void drop_key(std::vector<std::pair<std::string, GgufValue>>& kv, const std::string& key) {
  kv.erase(std::remove_if(kv.begin(), kv.end(), [&](const auto& p) { return p.first == key; }), kv.end());
}

}  // namespace

TEST_CASE("mamba: the presets load with the shapes the file declares", "[mamba]") {
  std::unique_ptr<Model> m = Model::load(ssm_file("tiny-mamba", DType::F32));
  const ModelConfig& c = m->config();
  CHECK(c.arch == "mamba");
  CHECK(c.ssm_d_inner == 128);
  CHECK(c.ssm_d_state == 16);
  CHECK(c.ssm_d_conv == 4);
  CHECK(c.ssm_dt_rank == 4);
  CHECK(c.ssm_n_head == 128);
  CHECK(c.ssm_conv_channels == 128);
  CHECK(c.attention_free());
  KvLayout l = m->kv_layout();
  CHECK(l.n_layers == 0);
  CHECK(l.n_ssm_layers == 3);
  CHECK(l.ssm_conv_elems == 3 * 128);
  CHECK(l.ssm_state_elems == 128 * 16);

  std::unique_ptr<Model> m2 = Model::load(ssm_file("tiny-mamba2", DType::F32));
  CHECK(m2->config().ssm_n_head == 8);
  CHECK(m2->config().ssm_n_group == 2);
  CHECK(m2->config().ssm_conv_channels == 128 + 2 * 2 * 16);
  CHECK(m2->kv_layout().ssm_state_elems == 8 * 16 * 16);

  std::unique_ptr<Model> j = Model::load(ssm_file("tiny-jamba", DType::F32));
  const ModelConfig& jc = j->config();
  REQUIRE(jc.layer_ssm.size() == 5);
  CHECK(jc.layer_ssm == std::vector<uint8_t>{1, 0, 1, 1, 0});
  CHECK(jc.recurrent());
  CHECK_FALSE(jc.attention_free());
  CHECK(jc.n_head == 4);
  CHECK(jc.n_head_kv == 2);
  CHECK(jc.n_expert == 4);
  CHECK(j->kv_layout().n_layers == 2);
  CHECK(j->kv_layout().n_ssm_layers == 3);
}

TEST_CASE("mamba: a prompt's logits are the same in one pass, token by token, in chunks and beside another sequence", "[mamba]") {
  for (const char* preset : kPresets) {
    INFO(preset);
    std::unique_ptr<Model> m = Model::load(ssm_file(preset, DType::F32));
    const std::vector<int32_t> t = tokens(23, 7, m->config().n_vocab);
    Direct d(*m);
    const std::vector<float> whole = d.run(t, t.size());
    CHECK(max_abs(whole) > 0.5);
    const std::vector<float> single = d.run(t, 1);
    const std::vector<float> chunks = d.run(t, 3);
    CHECK(max_diff(whole, single) < 1e-5);
    CHECK(max_diff(whole, chunks) < 1e-5);
    // Two sequences in one batch, each a run of rows: each as alone.
    const std::vector<int32_t> u = tokens(9, 99, m->config().n_vocab);
    const std::vector<float> u_alone = d.run(u, u.size());
    const int s1 = d.kv->add_sequence(), s2 = d.kv->add_sequence();
    REQUIRE(d.kv->reserve(s1, static_cast<int>(t.size())));
    REQUIRE(d.kv->reserve(s2, static_cast<int>(u.size())));
    Batch b;
    for (size_t i = 0; i < u.size(); ++i) b.add(u[i], static_cast<int32_t>(i), s2, true);
    for (size_t i = 0; i < t.size(); ++i) b.add(t[i], static_cast<int32_t>(i), s1, true);
    const size_t V = static_cast<size_t>(m->config().n_vocab);
    std::vector<float> both((t.size() + u.size()) * V);
    m->forward(b, *d.kv, *d.be, d.ws, both.data());
    CHECK(max_diff(std::vector<float>(both.begin(), both.begin() + u.size() * V), u_alone) < 1e-5);
    CHECK(max_diff(std::vector<float>(both.begin() + u.size() * V, both.end()), whole) < 1e-5);
    // The state matters: the last position's logits differ from those of
    // the same token at the start of a sequence.
    const std::vector<float> first = d.run({t.back()}, 1);
    CHECK(max_diff(std::vector<float>(whole.end() - V, whole.end()), first) > 1e-2);
  }
}

TEST_CASE("mamba: greedy text through the engine is the direct forward pass's", "[mamba]") {
  for (const char* preset : kPresets) {
    INFO(preset);
    std::unique_ptr<Model> m = Model::load(ssm_file(preset, DType::F32));
    const std::vector<int32_t> prompt = m->tokenizer().encode("the state of a long sequence is carried along", true);
    const int n = 16;
    // Direct: greedy, one token at a time after the prompt.
    Direct d(*m);
    std::vector<int32_t> seq = prompt, want;
    {
      const int s = d.kv->add_sequence();
      REQUIRE(d.kv->reserve(s, static_cast<int>(prompt.size()) + n));
      const size_t V = static_cast<size_t>(m->config().n_vocab);
      std::vector<float> logits(V);
      Batch b;
      for (size_t i = 0; i < prompt.size(); ++i) b.add(prompt[i], static_cast<int32_t>(i), s, i + 1 == prompt.size());
      m->forward(b, *d.kv, *d.be, d.ws, logits.data());
      for (int k = 0; k < n; ++k) {
        const int32_t next = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
        want.push_back(next);
        b.clear();
        b.add(next, static_cast<int32_t>(seq.size()), s, true);
        seq.push_back(next);
        m->forward(b, *d.kv, *d.be, d.ws, logits.data());
      }
    }
    std::vector<int32_t> distinct = want;
    std::sort(distinct.begin(), distinct.end());
    CHECK(std::unique(distinct.begin(), distinct.end()) - distinct.begin() >= 3);  // not degenerate
    EngineParams ep;
    ep.n_threads = 2;
    ep.n_ctx = 256;
    Engine e(*m, ep);
    RequestParams rp;
    rp.prompt = prompt;
    rp.max_tokens = n;
    rp.sampling.temperature = 0;
    rp.ignore_eos = true;
    auto r = e.submit(rp);
    e.run();
    REQUIRE(r->finish_reason() != FinishReason::Error);
    CHECK(std::vector<int32_t>(r->generated(), r->generated() + r->n_generated()) == want);
  }
}

TEST_CASE("mamba: quantized files keep the conv taps and the small projections fit, and stay close to f32", "[mamba]") {
  // The fallback rule for projections whose rows do not fit a block.
  CHECK_FALSE(is_quantizable("blk.0.ssm_conv1d.weight", {4, 1536}));
  CHECK_FALSE(is_quantizable("blk.0.ssm_a", {16, 1536}));
  CHECK(is_quantizable("blk.0.ssm_x.weight", {1536, 80}));
  CHECK(tensor_type(DType::Q8_0, 48, nullptr) == DType::F16);   // mamba-130m's ssm_dt: dt_rank 48
  CHECK(tensor_type(DType::Q4_0, 1536, nullptr) == DType::Q4_0);
  for (const char* preset : {"tiny-mamba", "tiny-mamba2"}) {
    const std::string src = ssm_file(preset, DType::F32);
    std::unique_ptr<Model> f32 = Model::load(src);
    const std::vector<int32_t> t = tokens(20, 3, f32->config().n_vocab);
    const std::vector<float> ref = Direct(*f32).run(t, t.size());
    for (DType q : {DType::Q8_0, DType::Q4_0}) {
      INFO(preset << " " << dtype_name(q));
      const std::string out = infer_test::temp_dir() + "/ssm-" + preset + "-quantized-" + dtype_name(q) + ".gguf";
      QuantizeOptions o;
      o.type = q;
      o.n_threads = 2;
      const QuantizeStats st = quantize_model(src, out, o);
      CHECK(st.n_quantized > 0);
      std::unique_ptr<Model> m = Model::load(out);
      const GgufFile& g = m->gguf();
      CHECK(g.find_tensor("blk.0.ssm_in.weight")->type == q);
      CHECK(g.find_tensor("blk.0.ssm_out.weight")->type == q);
      CHECK(g.find_tensor("blk.0.ssm_conv1d.weight")->type == DType::F32);
      CHECK(g.find_tensor("blk.0.ssm_a")->type == DType::F32);
      CHECK(g.find_tensor("blk.0.ssm_d")->type == DType::F32);
      if (std::string(preset) == "tiny-mamba") {
        CHECK(st.n_fallback > 0);
        CHECK(g.find_tensor("blk.0.ssm_x.weight")->type == q);
        CHECK(g.find_tensor("blk.0.ssm_dt.weight")->type == DType::F16);  // rows of dt_rank = 4 values
      }
      const std::vector<float> got = Direct(*m).run(t, t.size());
      const double err = max_diff(got, ref), scale = max_abs(ref);
      double mean = 0;
      for (size_t i = 0; i < ref.size(); ++i) mean += std::fabs(double(got[i]) - double(ref[i]));
      mean /= static_cast<double>(ref.size());
      INFO("max |quantized - f32| = " << err << ", mean " << mean << ", max |logit| = " << scale);
      CHECK(err > 0);  // the weights did change
      CHECK(err < (q == DType::Q8_0 ? 0.05 : 0.4) * scale);
      CHECK(mean < (q == DType::Q8_0 ? 0.01 : 0.08) * scale);
      // The same top token at most positions.
      const size_t V = static_cast<size_t>(m->config().n_vocab);
      int same = 0;
      for (size_t i = 0; i < t.size(); ++i) {
        auto a = std::max_element(got.begin() + i * V, got.begin() + (i + 1) * V) - (got.begin() + i * V);
        auto b = std::max_element(ref.begin() + i * V, ref.begin() + (i + 1) * V) - (ref.begin() + i * V);
        same += a == b;
      }
      CHECK(same >= static_cast<int>(t.size()) * (q == DType::Q8_0 ? 9 : 6) / 10);
    }
  }
}

TEST_CASE("mamba: hostile files are Format errors naming the key or tensor", "[mamba]") {
  using Meta = std::function<void(std::vector<std::pair<std::string, GgufValue>>&)>;
  using Keep = std::function<bool(const std::string&, std::vector<int64_t>&)>;
  const Meta no_meta = [](auto&) {};
  const Keep keep_all = [](const std::string&, std::vector<int64_t>&) { return true; };
  auto drop = [](const char* name) -> Keep { return [name](const std::string& n, std::vector<int64_t>&) { return n != name; }; };
  auto reshape = [](const char* name, std::vector<int64_t> dims) -> Keep {
    return [name, dims](const std::string& n, std::vector<int64_t>& d) {
      if (n == name) d = dims;
      return true;
    };
  };
  auto set_u32 = [](const char* key, uint32_t v) -> Meta { return [key, v](auto& kv) { set_key(kv, key, GgufValue::make_u32(v)); }; };
  struct Case {
    const char* what;
    const char* preset;
    Meta meta;
    Keep keep;
    const char* message;
  };
  const std::vector<Case> cases = {
      {"ssm_a with a smaller state", "tiny-mamba", no_meta, reshape("blk.1.ssm_a", {8, 128}), "blk.1.ssm_a"},
      {"mamba2 ssm_a per state, not per head", "tiny-mamba2", no_meta, reshape("blk.0.ssm_a", {2, 4}), "blk.0.ssm_a"},
      {"d_state that the tensors do not have", "tiny-mamba", set_u32("mamba.ssm.state_size", 8), keep_all, "blk.0.ssm_x.weight"},
      {"d_inner that ssm_in does not have", "tiny-mamba", set_u32("mamba.ssm.inner_size", 96), keep_all,
       "blk.0.ssm_in.weight"},
      {"ssm_out narrower than d_inner", "tiny-mamba", no_meta, reshape("blk.2.ssm_out.weight", {64, 64}),
       "blk.2.ssm_out.weight"},
      {"conv taps for fewer channels", "tiny-mamba", no_meta, reshape("blk.0.ssm_conv1d.weight", {4, 64}),
       "blk.0.ssm_conv1d.weight"},
      {"mamba2 d_inner that ssm_in does not have", "tiny-mamba2", set_u32("mamba2.ssm.inner_size", 64), keep_all,
       "blk.0.ssm_in.weight"},
      {"the conv taps missing", "tiny-mamba", no_meta, drop("blk.1.ssm_conv1d.weight"), "blk.1.ssm_conv1d.weight"},
      {"the conv bias missing", "tiny-mamba2", no_meta, drop("blk.0.ssm_conv1d.bias"), "blk.0.ssm_conv1d.bias"},
      {"ssm_x missing", "tiny-mamba", no_meta, drop("blk.0.ssm_x.weight"), "blk.0.ssm_x.weight"},
      {"ssm_d missing", "tiny-mamba", no_meta, drop("blk.2.ssm_d"), "blk.2.ssm_d"},
      {"ssm_norm missing", "tiny-mamba2", no_meta, drop("blk.1.ssm_norm.weight"), "blk.1.ssm_norm.weight"},
      {"jamba's dt norm missing", "tiny-jamba", no_meta, drop("blk.0.ssm_dt_norm.weight"), "blk.0.ssm_dt_norm.weight"},
      {"d_conv 0", "tiny-mamba", set_u32("mamba.ssm.conv_kernel", 0), keep_all, "mamba.ssm.conv_kernel"},
      {"d_conv absurd", "tiny-mamba", set_u32("mamba.ssm.conv_kernel", 65), keep_all, "mamba.ssm.conv_kernel"},
      {"d_conv that the taps do not have", "tiny-mamba", set_u32("mamba.ssm.conv_kernel", 3), keep_all,
       "blk.0.ssm_conv1d.weight"},
      {"no state size", "tiny-mamba", [](auto& kv) { drop_key(kv, "mamba.ssm.state_size"); }, keep_all,
       "mamba.ssm.state_size"},
      {"d_inner not a multiple of the heads", "tiny-mamba2", set_u32("mamba2.ssm.time_step_rank", 7), keep_all,
       "mamba2.ssm.inner_size"},
      {"heads not a multiple of the groups", "tiny-mamba2", set_u32("mamba2.ssm.group_count", 3), keep_all,
       "mamba2.ssm.group_count"},
      {"jamba head_count_kv of the wrong length", "tiny-jamba",
       [](auto& kv) { set_key(kv, "jamba.attention.head_count_kv", GgufValue::make_i32_array({0, 2, 0})); }, keep_all,
       "jamba.attention.head_count_kv"},
      {"jamba head_count_kv not per layer", "tiny-jamba", set_u32("jamba.attention.head_count_kv", 2), keep_all,
       "jamba.attention.head_count_kv"},
      {"jamba attention where the file has a Mamba layer", "tiny-jamba",
       [](auto& kv) { set_key(kv, "jamba.attention.head_count_kv", GgufValue::make_i32_array({2, 2, 0, 0, 2})); },
       keep_all, "blk.0.attn_q.weight"},
  };
  for (const Case& c : cases) {
    INFO(c.what);
    const std::string good = ssm_file(c.preset, DType::F32);
    const std::string path = infer_test::temp_dir() + "/bad-ssm.gguf";
    rewrite(good, path, c.meta, c.keep);
    try {
      Model::load(path);
      FAIL("loaded");
    } catch (const Error& e) {
      INFO(e.what());
      CHECK(e.status() == Status::Format);
      CHECK(std::string(e.what()).find(c.message) != std::string::npos);
    }
  }
}

TEST_CASE("mamba: tensor parallelism, layer skipping, embeddings and scattered sequence rows are refused", "[mamba]") {
  for (const char* preset : kPresets) {
    INFO(preset);
    LoadOptions lo;
    lo.comm = make_local_group(2)[0];
    try {
      Model::load(ssm_file(preset, DType::F32), lo);
      FAIL("split across ranks");
    } catch (const Error& e) {
      CHECK(e.status() == Status::Unsupported);
      CHECK(std::string(e.what()).find("cannot be split across ranks") != std::string::npos);
    }
  }
  std::unique_ptr<Model> m = Model::load(ssm_file("tiny-jamba", DType::F32));
  Direct d(*m);
  const int s = d.kv->add_sequence(), s2 = d.kv->add_sequence();
  REQUIRE(d.kv->reserve(s, 8));
  REQUIRE(d.kv->reserve(s2, 8));
  std::vector<float> logits(static_cast<size_t>(m->config().n_vocab) * 8);
  Batch b;
  for (int i = 0; i < 4; ++i) b.add(5 + i, i, s, true);
  std::vector<uint8_t> skip(5, 0);
  skip[1] = 1;  // even an attention layer: the draft would still run every recurrent one
  try {
    m->forward(b, *d.kv, *d.be, d.ws, logits.data(), skip.data());
    FAIL("skipped a layer");
  } catch (const Error& e) {
    CHECK(e.status() == Status::Unsupported);
  }
  skip[1] = 0;
  m->forward(b, *d.kv, *d.be, d.ws, logits.data(), skip.data());  // no flag set: runs
  try {
    m->encode(b, *d.be, d.ws, logits.data(), false);
    FAIL("encoded");
  } catch (const Error& e) {
    CHECK(e.status() == Status::Unsupported);
  }
  // A sequence's rows split by another's, or with a gap in positions.
  for (int bad = 0; bad < 2; ++bad) {
    Batch x;
    if (bad == 0) {
      x.add(7, 4, s, true);
      x.add(8, 0, s2, true);
      x.add(9, 5, s, true);
    } else {
      x.add(7, 4, s, true);
      x.add(9, 6, s, true);
    }
    try {
      m->forward(x, *d.kv, *d.be, d.ws, logits.data());
      FAIL("ran a scattered batch");
    } catch (const Error& e) {
      CHECK(e.status() == Status::Internal);
    }
  }
}
