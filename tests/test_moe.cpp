// Mixtral-style mixture-of-experts FFN (lib/model/moe.*): the routing rule,
// the block against the published definition computed here in double, that
// each token's output depends on its own experts only (and that unrouted
// experts' weights are not read), quantized expert slices, a whole
// mixtral-tiny model against the independent numpy reference
// (tests/ref/moe_ref.py), batch invariance, and the load-time checks.
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <fstream>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "core/threadpool.h"
#include "cpu/cpu_backend.h"
#include "cpu/matmul.h"
#include "engine/backends.h"
#include "engine/engine.h"
#include "gguf/gguf.h"
#include "model/model.h"
#include "model/moe.h"
#include "quant/dequant.h"
#include "quant/formats.h"
#include "tools/quantize.h"
#include "tools/synth.h"
#include "test_util.h"

using namespace infer;

namespace {

// ---- the block on weights made here ----

// Expert weights as f32, row-major: router [E][d], gate/up [E][ff][d],
// down [E][d][ff] (GGUF's 3-D layout: expert e is a contiguous slice).
struct Experts {
  int E = 0, k = 0;
  int64_t d = 0, ff = 0;
  std::vector<float> router, gate, up, down;
};

Experts random_experts(int E, int k, int64_t d, int64_t ff, uint32_t seed) {
  Experts x{E, k, d, ff, {}, {}, {}, {}};
  std::mt19937 rng(seed);
  std::normal_distribution<float> n(0.0f, 0.2f);
  auto fill = [&](std::vector<float>& v, size_t size) {
    v.resize(size);
    for (float& f : v) f = n(rng);
  };
  fill(x.router, static_cast<size_t>(E * d));
  fill(x.gate, static_cast<size_t>(E * ff * d));
  fill(x.up, static_cast<size_t>(E * ff * d));
  fill(x.down, static_cast<size_t>(E * d * ff));
  return x;
}

WeightView f32_view(const float* data, int64_t n_in, int64_t n_out) {
  WeightView w;
  w.type = DType::F32;
  w.n_in = n_in;
  w.n_out = n_out;
  w.data = reinterpret_cast<const uint8_t*>(data);
  w.row_bytes = sizeof(float) * static_cast<size_t>(n_in);
  return w;
}

// The block over the F32 weights in place (no caches: nothing is repacked).
MoeFfn f32_block(const Experts& x) {
  MoeFfn f;
  f.n_expert = x.E;
  f.n_used = x.k;
  f.n_embd = x.d;
  f.n_ff = x.ff;
  f.router = f32_view(x.router.data(), x.d, x.E);
  for (int e = 0; e < x.E; ++e) {
    f.gate.push_back(f32_view(x.gate.data() + e * x.ff * x.d, x.d, x.ff));
    f.up.push_back(f32_view(x.up.data() + e * x.ff * x.d, x.d, x.ff));
    f.down.push_back(f32_view(x.down.data() + e * x.d * x.ff, x.ff, x.d));
  }
  return f;
}

// The published definition in double: softmax over all experts, the top k
// (ties to the lower index), weights renormalized, Σ w · down(silu(gate h) * up h).
std::vector<double> reference_block(const Experts& x, const std::vector<float>& h, int64_t m) {
  const int64_t d = x.d, ff = x.ff;
  std::vector<double> out(static_cast<size_t>(m * d), 0.0);
  for (int64_t t = 0; t < m; ++t) {
    const float* ht = h.data() + t * d;
    std::vector<double> p(static_cast<size_t>(x.E));
    double mx = -1e300, sum = 0;
    for (int e = 0; e < x.E; ++e) {
      double z = 0;
      for (int64_t i = 0; i < d; ++i) z += double(x.router[e * d + i]) * ht[i];
      p[e] = z;
      mx = std::max(mx, z);
    }
    for (double& v : p) sum += v = std::exp(v - mx);
    for (double& v : p) v /= sum;
    std::vector<int> idx(static_cast<size_t>(x.E));
    for (int e = 0; e < x.E; ++e) idx[e] = e;
    std::stable_sort(idx.begin(), idx.end(), [&](int a, int b) { return p[a] > p[b]; });
    double ks = 0;
    for (int i = 0; i < x.k; ++i) ks += p[idx[i]];
    for (int i = 0; i < x.k; ++i) {
      const int e = idx[i];
      std::vector<double> a(static_cast<size_t>(ff));
      for (int64_t j = 0; j < ff; ++j) {
        double g = 0, u = 0;
        for (int64_t c = 0; c < d; ++c) {
          g += double(x.gate[(e * ff + j) * d + c]) * ht[c];
          u += double(x.up[(e * ff + j) * d + c]) * ht[c];
        }
        a[j] = g / (1.0 + std::exp(-g)) * u;
      }
      for (int64_t c = 0; c < d; ++c) {
        double y = 0;
        for (int64_t j = 0; j < ff; ++j) y += double(x.down[(e * d + c) * ff + j]) * a[j];
        out[t * d + c] += p[e] / ks * y;
      }
    }
  }
  return out;
}

std::vector<float> run_block(const MoeFfn& f, Backend& be, const std::vector<float>& h, int64_t m) {
  // The CPU backend's memory is host memory: h and out are passed as they are.
  std::unique_ptr<BackendWorkspace> ws = be.make_workspace();
  std::vector<float> out(static_cast<size_t>(m * f.n_embd));
  MoeHostScratch host;
  moe_ffn_forward(f, be, *ws, 0, h.data(), m, out.data(), host);
  return out;
}

double max_abs_diff(const float* a, const float* b, size_t n) {
  double mx = 0;
  for (size_t i = 0; i < n; ++i) mx = std::max(mx, std::fabs(double(a[i]) - double(b[i])));
  return mx;
}

// ---- whole models ----

std::string synth_file(const std::string& preset, DType t) {
  const std::string path = infer_test::temp_dir() + "/" + preset + "-" + dtype_name(t) + ".gguf";
  SynthOptions o;
  o.type = t;
  o.n_threads = 2;
  write_synth_model(*find_synth_preset(preset), path, o);
  return path;
}

struct Run {
  std::vector<float> logits;  // every prompt position
  std::vector<int32_t> generated;
};

// Greedy generation of n tokens after each prompt, all submitted to one
// engine (so their rows share steps), with the prompts' logits.
std::vector<Run> run_engine(const Model& m, const std::vector<std::vector<int32_t>>& prompts, int n) {
  EngineParams ep;
  ep.n_threads = 2;
  ep.n_ctx = 128;
  Engine e(m, ep);
  std::vector<std::shared_ptr<Request>> rs;
  for (const auto& p : prompts) {
    RequestParams rp;
    rp.prompt = p;
    rp.max_tokens = n;
    rp.logits = kLogitsPrompt;
    rp.sampling.temperature = 0;
    rp.ignore_eos = true;
    rs.push_back(e.submit(rp));
  }
  e.run();
  std::vector<Run> out;
  for (const auto& r : rs) {
    REQUIRE(r->finish_reason() != FinishReason::Error);
    out.push_back({r->logits(), std::vector<int32_t>(r->generated(), r->generated() + r->n_generated())});
  }
  return out;
}

// A python3 with numpy: the one on PATH, else Debian's (python3-numpy), which
// a PATH python (pyenv, a virtualenv) may hide. Empty when there is none.
std::string numpy_python() {
  for (const char* py : {"python3", "/usr/bin/python3"})
    if (std::system((std::string(py) + " -c 'import numpy' >/dev/null 2>&1").c_str()) == 0) return py;
  return "";
}

// tests/ref/moe_ref.py's logits for every prompt position and its greedy tokens.
Run numpy_reference(const std::string& model, const std::vector<int32_t>& prompt, int n_gen,
                    const std::string& variant = "") {
  const std::string prefix = model + ".ref" + variant;
  std::string cmd = numpy_python() + " " + std::string(INFER_SOURCE_DIR) + "/tests/ref/moe_ref.py " + model + " " + prefix +
                    " " + std::to_string(n_gen);
  for (int32_t t : prompt) cmd += " " + std::to_string(t);
  if (!variant.empty()) cmd += " --variant " + variant;
  INFO(cmd);
  REQUIRE(std::system(cmd.c_str()) == 0);
  Run r;
  const std::vector<uint8_t> raw = infer_test::read_file(prefix + ".logits.f32");
  r.logits.resize(raw.size() / 4);
  std::memcpy(r.logits.data(), raw.data(), r.logits.size() * 4);
  std::istringstream in(infer_test::read_text(prefix + ".greedy"));
  for (int32_t t; in >> t;) r.generated.push_back(t);
  return r;
}

// A copy of a GGUF file with its metadata and tensors edited: `meta` may
// change the key/value list, `keep` drop a tensor or change its dims (the
// data is cut to the new size).
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

void set_u32(std::vector<std::pair<std::string, GgufValue>>& kv, const std::string& key, uint32_t v) {
  for (auto& p : kv)
    if (p.first == key) {
      p.second = GgufValue::make_u32(v);
      return;
    }
  kv.emplace_back(key, GgufValue::make_u32(v));
}

}  // namespace

TEST_CASE("moe: routing is softmax, top-k and renormalization, ties to the lower index", "[moe]") {
  const float logits[] = {0.0f, 1.0f, 2.0f, 3.0f,  // plain order
                          1.0f, 1.0f, 1.0f, 0.0f,  // a three-way tie
                          5.0f, -1.0f, 4.0f, 4.0f};
  int32_t sel[6];
  float w[6];
  moe_route(logits, 3, 4, 2, sel, w);
  CHECK(sel[0] == 3);
  CHECK(sel[1] == 2);
  const double e1 = std::exp(1.0);  // p3 / p2
  CHECK(w[0] == Approx(e1 / (1 + e1)).epsilon(1e-6));
  CHECK(w[1] == Approx(1 / (1 + e1)).epsilon(1e-6));
  CHECK(sel[2] == 0);
  CHECK(sel[3] == 1);
  CHECK(w[2] == Approx(0.5).epsilon(1e-6));
  CHECK(sel[4] == 0);
  CHECK(sel[5] == 2);
  CHECK(w[4] + w[5] == Approx(1.0).epsilon(1e-6));
  // k = E: every expert, the weights the full softmax.
  int32_t all[4];
  float wall[4];
  moe_route(logits, 1, 4, 4, all, wall);
  CHECK(all[0] == 3);
  CHECK(all[3] == 0);
}

TEST_CASE("moe: the block computes the published definition and each token uses its own experts only", "[moe]") {
  ThreadPool pool(2);
  std::unique_ptr<Backend> be = make_cpu_backend(pool);
  const int E = 4, k = 2;
  const int64_t d = 32, ff = 48;
  Experts x = random_experts(E, k, d, ff, 7);
  // A router that reads dims 0..3: token t's preferred experts are set by
  // making those dims large.
  std::fill(x.router.begin(), x.router.end(), 0.0f);
  for (int e = 0; e < E; ++e) x.router[e * d + e] = 4.0f;
  const int64_t m = 5;
  const int prefer[m][2] = {{3, 2}, {0, 1}, {1, 3}, {2, 0}, {0, 2}};
  std::vector<float> h(static_cast<size_t>(m * d));
  std::mt19937 rng(3);
  std::normal_distribution<float> n(0.0f, 0.1f);
  for (float& v : h) v = n(rng);
  for (int64_t t = 0; t < m; ++t) {
    h[t * d + prefer[t][0]] += 3.0f;
    h[t * d + prefer[t][1]] += 2.0f;
  }
  const MoeFfn f = f32_block(x);
  const std::vector<float> out = run_block(f, *be, h, m);
  const std::vector<double> ref = reference_block(x, h, m);
  double scale = 0;
  for (double v : ref) scale = std::max(scale, std::fabs(v));
  REQUIRE(scale > 0.1);
  for (size_t i = 0; i < out.size(); ++i) REQUIRE(std::fabs(out[i] - ref[i]) < 1e-5 * scale + 1e-6);

  // Changing expert 3 changes exactly the tokens routed to it (0 and 2).
  Experts x2 = x;
  for (int64_t i = 0; i < d * ff; ++i) x2.down[3 * d * ff + i] += 0.05f;
  const std::vector<float> out2 = run_block(f32_block(x2), *be, h, m);
  for (int64_t t = 0; t < m; ++t) {
    const bool routed = prefer[t][0] == 3 || prefer[t][1] == 3;
    INFO("token " << t);
    const double diff = max_abs_diff(out.data() + t * d, out2.data() + t * d, static_cast<size_t>(d));
    if (routed)
      CHECK(diff > 1e-4);
    else
      CHECK(diff == 0.0);
  }

  // Experts no token is routed to are not read: token 1 alone (experts 0
  // and 1) with NaN in every weight of experts 2 and 3 gives its output.
  Experts x3 = x;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (int e : {2, 3}) {
    std::fill_n(x3.gate.begin() + e * ff * d, ff * d, nan);
    std::fill_n(x3.up.begin() + e * ff * d, ff * d, nan);
    std::fill_n(x3.down.begin() + e * d * ff, d * ff, nan);
  }
  const std::vector<float> h1(h.begin() + d, h.begin() + 2 * d);
  const std::vector<float> out3 = run_block(f32_block(x3), *be, h1, 1);
  CHECK(std::memcmp(out3.data(), out.data() + d, sizeof(float) * d) == 0);
}

TEST_CASE("moe: quantized experts: each 2-D slice of a 3-D tensor, prepared at load", "[moe]") {
  ThreadPool pool(2);
  std::unique_ptr<Backend> be = make_cpu_backend(pool);
  const std::string dir = infer_test::temp_dir();
  const int E = 4, k = 2;
  const int64_t d = 256, ff = 256;  // rows that fit every block size (k-quants: 256)
  const Experts x = random_experts(E, k, d, ff, 11);
  const int64_t m = 9;
  std::vector<float> h(static_cast<size_t>(m * d));
  std::mt19937 rng(5);
  std::normal_distribution<float> n(0.0f, 1.0f);
  for (float& v : h) v = n(rng);
  for (DType t : {DType::F16, DType::BF16, DType::Q8_0, DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1,
                  DType::Q4_K, DType::Q6_K, DType::INT4_G32, DType::W8A8}) {
    INFO(dtype_name(t));
    // The experts in format t as a GGUF file, as Mixtral's are stored.
    GgufWriter w;
    w.add_tensor("blk.0.ffn_gate_inp.weight", {d, E}, DType::F32, x.router.data(), x.router.size() * 4);
    Experts deq = x;  // what the stored weights decode to
    auto add = [&](const char* name, const std::vector<float>& src, std::vector<float>& back, int64_t n_in,
                   int64_t rows) {
      const size_t rb = t == DType::W8A8 ? static_cast<size_t>(n_in) : dtype_row_bytes(t, n_in);
      std::vector<uint8_t> q(rb * static_cast<size_t>(rows));
      std::vector<float> sc(static_cast<size_t>(rows));
      for (int64_t r = 0; r < rows; ++r) {
        if (t == DType::W8A8) {
          quantize_row_w8a8(src.data() + r * n_in, reinterpret_cast<int8_t*>(q.data() + r * rb), &sc[r], n_in);
          for (int64_t i = 0; i < n_in; ++i)
            back[r * n_in + i] = static_cast<float>(reinterpret_cast<int8_t*>(q.data() + r * rb)[i]) * sc[r];
        } else {
          quantize_row(t, src.data() + r * n_in, q.data() + r * rb, n_in);
          dequantize_row(t, q.data() + r * rb, back.data() + r * n_in, n_in);
        }
      }
      w.add_tensor(name, {n_in, rows / E, E}, t, q.data(), q.size());
      if (t == DType::W8A8) w.add_tensor(std::string(name) + ".scale", {rows}, DType::F32, sc.data(), sc.size() * 4);
    };
    add("blk.0.ffn_gate_exps.weight", x.gate, deq.gate, d, E * ff);
    add("blk.0.ffn_up_exps.weight", x.up, deq.up, d, E * ff);
    add("blk.0.ffn_down_exps.weight", x.down, deq.down, ff, E * d);
    const std::string path = dir + "/experts-" + dtype_name(t) + ".gguf";
    w.write(path);
    std::unique_ptr<GgufFile> g = GgufFile::open(path);
    std::deque<WeightCache> caches;
    const MoeFfn f = bind_moe_ffn(*g, "blk.0.", d, ff, E, k, [&] { return &caches.emplace_back(); });

    // Load-time preparation sees the router and each of the 3 x E slices.
    int seen = 0;
    f.for_each_weight([&](const WeightView& v) {
      ++seen;
      be->prepare_weight(v);
    });
    CHECK(seen == 1 + 3 * E);
    for (int e = 1; e < E; ++e) CHECK(f.gate[e].data == f.gate[e - 1].data + ff * f.gate[e].row_bytes);

    // Against the definition on the weights the file decodes to: what is
    // left is the activations' rounding of the int8 kernels (a slice read
    // at a wrong offset would be off by the whole output).
    const std::vector<float> out = run_block(f, *be, h, m);
    const std::vector<double> ref = reference_block(deq, h, m);
    double err = 0, scale = 0;
    for (size_t i = 0; i < out.size(); ++i) {
      err = std::max(err, std::fabs(out[i] - ref[i]));
      scale = std::max(scale, std::fabs(ref[i]));
    }
    INFO("max error " << err << " of max " << scale);
    CHECK(err < 2e-2 * scale);
    // Decode: one row alone gives the same bits as in the batch.
    const std::vector<float> h0(h.begin() + 4 * d, h.begin() + 5 * d);
    const std::vector<float> one = run_block(f, *be, h0, 1);
    CHECK(std::memcmp(one.data(), out.data() + 4 * d, sizeof(float) * d) == 0);
  }
}

TEST_CASE("moe: mixtral-tiny matches the numpy reference on every prompt position with the same greedy tokens", "[moe][ref]") {
  if (numpy_python().empty()) {
    WARN("SKIPPED: python3 with numpy is not available");
    return;
  }
  const std::string path = synth_file("mixtral-tiny", DType::F32);
  std::unique_ptr<Model> m = Model::load(path);
  REQUIRE(m->config().n_expert == 4);
  REQUIRE(m->config().n_expert_used == 2);
  const std::vector<int32_t> prompt = m->tokenizer().encode("the quick brown fox jumps over a lazy dog", true);
  REQUIRE(prompt.size() >= 8);
  const int n_gen = 8;
  const Run ours = run_engine(*m, {prompt}, n_gen)[0];
  const Run ref = numpy_reference(path, prompt, n_gen);
  const size_t V = static_cast<size_t>(m->config().n_vocab);
  REQUIRE(ours.logits.size() == prompt.size() * V);
  REQUIRE(ref.logits.size() == ours.logits.size());
  double err = 0, scale = 0;
  for (size_t i = 0; i < ref.logits.size(); ++i) {
    err = std::max(err, std::fabs(double(ours.logits[i]) - ref.logits[i]));
    scale = std::max(scale, std::fabs(double(ref.logits[i])));
  }
  INFO("max |ours - numpy| = " << err << ", max |logit| = " << scale);
  CHECK(scale > 0.05);
  CHECK(err < 1e-4);
  CHECK(ours.generated == ref.generated);
  // The tolerance tells wrong MoE rules apart: no renormalization, or top-1.
  for (const char* variant : {"norenorm", "top1"}) {
    const Run wrong = numpy_reference(path, prompt, 0, variant);
    INFO(variant);
    CHECK(max_abs_diff(wrong.logits.data(), ours.logits.data(), ours.logits.size()) > 1e-3);
  }
}

TEST_CASE("moe: a sequence's logits are the same alone and in a batch of several", "[moe][batch_invariance]") {
  // Every matmul row's bits are independent of the row count
  // (tests/test_batch_invariance.cpp), so the MoE block's gathering and its
  // router (F32, as in published files) must keep them so.
  for (DType t : {DType::F32, DType::Q8_0, DType::Q4_0}) {
    INFO(dtype_name(t));
    std::unique_ptr<Model> m = Model::load(synth_file("mixtral-tiny", t));
    REQUIRE(m->gguf().find_tensor("blk.0.ffn_gate_inp.weight")->type == DType::F32);
    const std::vector<std::vector<int32_t>> prompts = {
        m->tokenizer().encode("experts route every token", true),
        m->tokenizer().encode("another sequence with other words in it", true),
        m->tokenizer().encode("a third one", true),
    };
    const std::vector<Run> together = run_engine(*m, prompts, 6);
    for (size_t i = 0; i < prompts.size(); ++i) {
      INFO("sequence " << i);
      const Run alone = run_engine(*m, {prompts[i]}, 6)[0];
      REQUIRE(alone.logits.size() == together[i].logits.size());
      CHECK(std::memcmp(alone.logits.data(), together[i].logits.data(), alone.logits.size() * 4) == 0);
      CHECK(alone.generated == together[i].generated);
    }
  }
}

TEST_CASE("moe: quantizing a mixtral model quantizes the expert stacks and keeps the router", "[moe]") {
  const std::string src = synth_file("mixtral-tiny", DType::F32);
  std::unique_ptr<Model> f32 = Model::load(src);
  const std::vector<int32_t> prompt = f32->tokenizer().encode("quantized experts route the same", true);
  for (DType t : {DType::Q8_0, DType::Q4_0}) {
    INFO(dtype_name(t));
    const std::string out = infer_test::temp_dir() + "/mixtral-tiny-quantized-" + dtype_name(t) + ".gguf";
    QuantizeOptions o;
    o.type = t;
    o.n_threads = 2;
    quantize_model(src, out, o);
    std::unique_ptr<Model> m = Model::load(out);
    for (int l = 0; l < m->config().n_layer; ++l) {
      const std::string b = "blk." + std::to_string(l) + ".";
      CHECK(m->gguf().find_tensor(b + "ffn_gate_inp.weight")->type == DType::F32);
      for (const char* e : {"ffn_gate_exps.weight", "ffn_up_exps.weight", "ffn_down_exps.weight"}) {
        INFO(b + e);
        // Every row of every expert decodes to its F32 source within the
        // format's rounding (relative RMS error; a row written to the wrong
        // place would be off by about sqrt(2)).
        const GgufTensorInfo* q = m->gguf().find_tensor(b + e);
        const GgufTensorInfo* r = f32->gguf().find_tensor(b + e);
        REQUIRE(q->type == t);
        REQUIRE(q->dims == r->dims);
        const int64_t n = q->dims[0], rows = q->n_rows();
        std::vector<float> row(static_cast<size_t>(n));
        const float* ref = reinterpret_cast<const float*>(f32->gguf().tensor_data(*r));
        double err = 0, norm = 0;
        for (int64_t i = 0; i < rows; ++i) {
          dequantize_row(t, m->gguf().tensor_data(*q) + i * dtype_row_bytes(t, n), row.data(), n);
          for (int64_t c = 0; c < n; ++c) {
            err += (double(row[c]) - ref[i * n + c]) * (double(row[c]) - ref[i * n + c]);
            norm += double(ref[i * n + c]) * ref[i * n + c];
          }
        }
        CHECK(std::sqrt(err / norm) < (t == DType::Q8_0 ? 0.01 : 0.12));
      }
    }
    // It runs. (Its logits are not compared with F32's: in this small random
    // model the 2nd and 3rd experts' probabilities of some tokens differ by
    // 0.1%, so rounding sends such tokens to another expert, by design.)
    const Run q = run_engine(*m, {prompt}, 4)[0];
    CHECK(q.generated.size() == 4);
    CHECK(std::all_of(q.logits.begin(), q.logits.end(), [](float v) { return std::isfinite(v); }));
  }
}

TEST_CASE("moe: a model's weights include every expert slice, prepared at load", "[moe]") {
  std::unique_ptr<Model> m = Model::load(synth_file("mixtral-tiny", DType::Q4_0));
  const ModelConfig& c = m->config();
  int n = 0;
  std::vector<const uint8_t*> starts;
  m->for_each_weight([&](const WeightView& w) {
    ++n;
    starts.push_back(w.data);
  });
  // per layer q, k, v, o, the router and 3 x E slices; then the output
  CHECK(n == c.n_layer * (4 + 1 + 3 * c.n_expert) + 1);
  std::sort(starts.begin(), starts.end());
  CHECK(std::adjacent_find(starts.begin(), starts.end()) == starts.end());
  prepare_model(*m, BackendKind::Cpu, 1);
  // Where the CPU kernels repack Q4_0 (AVX2 and up; the scalar kernels read
  // the file's blocks as they are), every Q4_0 matrix is repacked: each expert
  // slice has its copy. Where they do not, none has one.
  const bool repacks = std::string(cpu::matmul_kernel_isa(DType::Q4_0, 1, c.n_embd, c.n_embd)) != "scalar";
  int q4 = 0, prepared = 0;
  m->for_each_weight([&](const WeightView& w) {
    if (w.type != DType::Q4_0) return;
    ++q4;
    prepared += w.cache && w.cache->size() > 0;
  });
  CHECK(q4 >= c.n_layer * 3 * c.n_expert);
  INFO("Q4_0 kernels repack: " << repacks);
  CHECK(prepared == (repacks ? q4 : 0));
}

TEST_CASE("moe: malformed expert metadata and tensors are Format errors naming the problem", "[moe]") {
  const std::string good = synth_file("mixtral-tiny", DType::F32);
  const std::string dir = infer_test::temp_dir();
  auto keep_all = [](const std::string&, std::vector<int64_t>&) { return true; };
  auto no_meta = [](std::vector<std::pair<std::string, GgufValue>>&) {};
  struct Case {
    const char* what;
    std::function<void(std::vector<std::pair<std::string, GgufValue>>&)> meta;
    std::function<bool(const std::string&, std::vector<int64_t>&)> keep;
    const char* message;
  };
  const std::vector<Case> cases = {
      {"more experts used than exist", [](auto& kv) { set_u32(kv, "llama.expert_used_count", 5); }, keep_all,
       "expert_used_count"},
      {"no experts used", [](auto& kv) { set_u32(kv, "llama.expert_used_count", 0); }, keep_all,
       "expert_used_count"},
      {"used count missing",
       [](auto& kv) {
         kv.erase(std::remove_if(kv.begin(), kv.end(), [](auto& p) { return p.first == "llama.expert_used_count"; }),
                  kv.end());
       },
       keep_all, "expert_used_count"},
      {"more experts declared than stored", [](auto& kv) { set_u32(kv, "llama.expert_count", 8); }, keep_all,
       "ffn_gate_inp"},
      {"an expert tensor missing", no_meta,
       [](const std::string& n, std::vector<int64_t>&) { return n != "blk.1.ffn_down_exps.weight"; },
       "blk.1.ffn_down_exps.weight"},
      {"an expert tensor with fewer experts", no_meta,
       [](const std::string& n, std::vector<int64_t>& dims) {
         if (n == "blk.0.ffn_up_exps.weight") dims[2] = 3;
         return true;
       },
       "blk.0.ffn_up_exps.weight"},
      {"experts stored as 2-D", no_meta,
       [](const std::string& n, std::vector<int64_t>& dims) {
         if (n == "blk.0.ffn_gate_exps.weight") dims = {dims[0], dims[1] * dims[2]};
         return true;
       },
       "blk.0.ffn_gate_exps.weight"},
      {"the router missing", no_meta,
       [](const std::string& n, std::vector<int64_t>&) { return n != "blk.0.ffn_gate_inp.weight"; },
       "blk.0.ffn_gate_inp.weight"},
  };
  for (const Case& c : cases) {
    INFO(c.what);
    const std::string path = dir + "/bad-moe.gguf";
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
