// Quantizers (quant/formats.h), the streaming GGUF writer, model
// quantization (RTN, GPTQ, AWQ) and synthetic models.
#include <cmath>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "core/backend.h"
#include "core/error.h"
#include "core/fp16.h"
#include "core/threadpool.h"
#include "gguf/gguf.h"
#include "gguf/gguf_stream.h"
#include "model/model.h"
#include "quant/dequant.h"
#include "quant/formats.h"
#include "tools/evaluate.h"
#include "tools/quantize.h"
#include "tools/synth.h"
#include "test_util.h"

using namespace infer;

namespace {

std::vector<float> randn(size_t n, uint32_t seed, float sd = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, sd);
  std::vector<float> v(n);
  for (auto& x : v) x = nd(rng);
  return v;
}

double rms(const std::vector<float>& v) {
  double s = 0;
  for (float x : v) s += double(x) * x;
  return std::sqrt(s / v.size());
}

const DType kStandard[] = {DType::Q8_0, DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1,
                           DType::Q4_K, DType::Q5_K, DType::Q6_K};

}  // namespace

TEST_CASE("quantize_row: round trip error per format", "[quant]") {
  // Relative RMS error bounds for Gaussian data (a 4-bit grid has 16 levels, so ~1/16 of the range).
  const struct {
    DType t;
    double max_rel;
  } cases[] = {{DType::Q8_0, 0.01},     {DType::Q4_0, 0.13},     {DType::Q4_1, 0.11},      {DType::Q5_0, 0.065},
               {DType::Q5_1, 0.055},    {DType::Q4_K, 0.11},     {DType::Q5_K, 0.055},     {DType::Q6_K, 0.03},
               {DType::INT4_G32, 0.11}, {DType::INT4_G64, 0.12}, {DType::INT4_G128, 0.13}, {DType::F16, 1e-3},
               {DType::BF16, 5e-3}};
  const int64_t n = 1024;
  const std::vector<float> x = randn(n, 42);
  for (const auto& c : cases) {
    std::vector<uint8_t> q(dtype_row_bytes(c.t, n));
    quantize_row(c.t, x.data(), q.data(), n);
    std::vector<float> y(n);
    dequantize_row(c.t, q.data(), y.data(), n);
    std::vector<float> err(n);
    for (int64_t i = 0; i < n; ++i) err[i] = y[i] - x[i];
    INFO(dtype_name(c.t) << " relative RMS error " << rms(err) / rms(x));
    CHECK(rms(err) / rms(x) < c.max_rel);
  }
}

TEST_CASE("quantize_row: values on the grid come back exactly", "[quant]") {
  // Q4_0: value of largest magnitude -2 gives d = 0.25, every (q - 8) / 4 is exact.
  std::vector<float> x(32);
  for (int i = 0; i < 32; ++i) x[i] = static_cast<float>(i % 16 - 8) * 0.25f;
  for (DType t : {DType::Q4_0, DType::Q4_1, DType::INT4_G32}) {
    std::vector<uint8_t> q(dtype_row_bytes(t, 32));
    quantize_row(t, x.data(), q.data(), 32);
    std::vector<float> y(32);
    dequantize_row(t, q.data(), y.data(), 32);
    for (int i = 0; i < 32; ++i) CHECK(y[i] == x[i]);
  }
  // Q8_0 with max |x| = 127 * 2^-6.
  for (int i = 0; i < 32; ++i) x[i] = static_cast<float>(i * 8 - 127) / 64.0f;
  std::vector<uint8_t> q(34);
  quantize_row(DType::Q8_0, x.data(), q.data(), 32);
  std::vector<float> y(32);
  dequantize_row(DType::Q8_0, q.data(), y.data(), 32);
  for (int i = 0; i < 32; ++i) CHECK(y[i] == x[i]);
  // Byte layout of Q4_0: f16 d, then byte j = q[j] | q[j + 16] << 4.
  for (int i = 0; i < 32; ++i) x[i] = static_cast<float>(i % 16 - 8) * 0.25f;
  std::vector<uint8_t> q4(18);
  quantize_row(DType::Q4_0, x.data(), q4.data(), 32);
  uint16_t d;
  std::memcpy(&d, q4.data(), 2);
  CHECK(fp16_to_f32(d) == 0.25f);
  for (int j = 0; j < 16; ++j) CHECK(q4[2 + j] == static_cast<uint8_t>((j % 16) | ((j % 16) << 4)));
}

TEST_CASE("grids: encode_block dequantizes to Grid::value exactly", "[quant]") {
  for (DType t : {DType::Q8_0, DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::INT4_G32, DType::INT4_G64,
                  DType::INT4_G128}) {
    const int G = static_cast<int>(dtype_info(t)->block);
    for (int trial = 0; trial < 20; ++trial) {
      const std::vector<float> x = randn(G, 100 + trial, 0.1f);
      for (float clip : {1.0f, 0.8f}) {
        const Grid g = grid_for_block(t, x.data(), clip);
        std::vector<int> q(G);
        for (int i = 0; i < G; ++i) q[i] = g.quantize(x[i]);
        std::vector<uint8_t> b(dtype_info(t)->bytes);
        encode_block(t, g, q.data(), b.data());
        std::vector<float> y(G);
        dequantize_row(t, b.data(), y.data(), G);
        for (int i = 0; i < G; ++i) REQUIRE(y[i] == g.value(q[i]));
      }
    }
  }
}

TEST_CASE("formats: names, fallbacks, file types", "[quant]") {
  DType t;
  CHECK((parse_quant_type("Q4_K", 0, &t) && t == DType::Q4_K));
  CHECK((parse_quant_type("int4", 64, &t) && t == DType::INT4_G64));
  CHECK((parse_quant_type("int4", 0, &t) && t == DType::INT4_G128));
  CHECK(!parse_quant_type("int4", 48, &t));
  CHECK(!parse_quant_type("q3_x", 0, &t));
  CHECK(fallback_type(DType::Q4_K, 4096) == DType::Q4_K);
  CHECK(fallback_type(DType::Q4_K, 64) == DType::Q5_0);
  CHECK(fallback_type(DType::Q6_K, 96) == DType::Q8_0);
  CHECK(fallback_type(DType::Q4_0, 172) == DType::F16);
  CHECK(fallback_type(DType::INT4_G128, 192) == DType::INT4_G64);
  CHECK(fallback_type(DType::INT4_G128, 96) == DType::INT4_G32);
  CHECK(llama_file_type(DType::Q4_0) == 2);
  CHECK(llama_file_type(DType::Q8_0) == 7);
  CHECK(dtype_is_infer_own(DType::W8A8));
  CHECK(!dtype_is_infer_own(DType::Q4_0));
  CHECK(!dtype_can_dequantize(DType::W8A8));  // needs its scales
  CHECK_THROWS_AS(quantize_row(DType::Q2_K, std::vector<float>(256).data(), std::vector<uint8_t>(84).data(), 256),
                  Error);
}

TEST_CASE("GGUF stream writer writes what GgufWriter writes", "[quant]") {
  const std::string dir = infer_test::temp_dir();
  GgufWriter a;
  GgufStreamWriter b(dir + "/stream.gguf");
  a.set("general.architecture", GgufValue::make_string("llama"));
  b.set("general.architecture", GgufValue::make_string("llama"));
  a.set("x.list", GgufValue::make_i32_array({1, 2, 3}));
  b.set("x.list", GgufValue::make_i32_array({1, 2, 3}));
  const std::vector<float> v1 = randn(64 * 3, 1), v2 = randn(7, 2);
  std::vector<uint8_t> q(dtype_row_bytes(DType::Q4_0, 64) * 3);
  for (int r = 0; r < 3; ++r) quantize_row(DType::Q4_0, &v1[r * 64], &q[r * 36], 64);
  a.add_tensor("w", {64, 3}, DType::Q4_0, q.data(), q.size());
  a.add_tensor("v", {7}, DType::F32, v2.data(), 28);
  b.add_tensor("w", {64, 3}, DType::Q4_0);
  b.add_tensor("v", {7}, DType::F32);
  b.begin();
  b.write(q.data(), 36);  // in pieces
  b.write(q.data() + 36, q.size() - 36);
  b.write(v2.data(), 28);
  b.finish();
  const std::vector<uint8_t> expect = a.to_bytes();
  const std::vector<uint8_t> got = infer_test::read_file(dir + "/stream.gguf");
  CHECK(got == expect);
  // A writer that is not finished leaves no file behind.
  {
    GgufStreamWriter c(dir + "/partial.gguf");
    c.add_tensor("v", {7}, DType::F32);
    c.begin();
    CHECK_THROWS_AS(c.write(v2.data(), 32), Error);  // past the tensor's end
  }
  CHECK(!std::ifstream(dir + "/partial.gguf").good());
}

TEST_CASE("quantize: standard types round-trip through a file", "[quant]") {
  REQUIRE_SHARED(model, "models/stories260K.gguf");
  const std::string dir = infer_test::temp_dir();
  std::unique_ptr<GgufFile> src = GgufFile::open(model);
  for (DType t : kStandard) {
    const std::string out = dir + "/rt-" + dtype_name(t) + ".gguf";
    QuantizeOptions o;
    o.type = t;
    o.n_threads = 2;
    std::vector<std::string> notes;
    o.note = [&](const std::string& m) { notes.push_back(m); };
    const QuantizeStats st = quantize_model(model, out, o);
    CHECK(st.n_quantized == 37);
    std::unique_ptr<GgufFile> q = GgufFile::open(out);
    REQUIRE(q->tensors().size() == src->tensors().size());
    CHECK(q->get_int("general.file_type").value_or(-1) == llama_file_type(t));
    for (const GgufTensorInfo& ti : q->tensors()) {
      CHECK(ti.offset % q->alignment() == 0);
      const GgufTensorInfo* s = src->find_tensor(ti.name);
      REQUIRE(s != nullptr);
      CHECK(ti.dims == s->dims);
      if (!is_quantizable(ti.name, ti.dims)) {
        CHECK(ti.type == s->type);
        CHECK(std::memcmp(q->tensor_data(ti), src->tensor_data(*s), ti.nbytes) == 0);
        continue;
      }
      const DType expect = fallback_type(t, ti.dims[0]);
      CHECK(ti.type == expect);
      // The stored bytes are exactly what quantize_row makes of the source rows.
      const int64_t n = ti.dims[0];
      const size_t rb = dtype_row_bytes(expect, n);
      std::vector<uint8_t> row(rb);
      for (int64_t r = 0; r < ti.n_rows(); ++r) {
        quantize_row(expect, reinterpret_cast<const float*>(src->tensor_data(*s)) + r * n, row.data(), n);
        REQUIRE(std::memcmp(row.data(), q->tensor_data(ti) + r * rb, rb) == 0);
      }
    }
    // stories260K: the ffn_down rows (172) fit no 32-value block.
    bool noted = false;
    for (const auto& m : notes) noted |= m.find("ffn_down") != std::string::npos;
    CHECK(noted);
    std::unique_ptr<Model> loaded = Model::load(out);
    CHECK(loaded->config().n_layer == 5);
  }
}

TEST_CASE("quantize: w8a8 and int4 files load, carry their metadata and stay close to f32", "[quant]") {
  REQUIRE_SHARED(model, "models/stories260K.gguf");
  REQUIRE_SHARED(eval, "text/stories-eval.txt");
  const std::string dir = infer_test::temp_dir();
  const std::string text = infer_test::read_text(eval).substr(0, 3000);
  std::unique_ptr<Model> base = Model::load(model);
  const double ppl_f32 = perplexity(*base, text, 0, 2).perplexity;
  for (DType t : {DType::W8A8, DType::INT4_G32, DType::Q8_0}) {
    const std::string out = dir + "/own-" + dtype_name(t) + ".gguf";
    QuantizeOptions o;
    o.type = t;
    quantize_model(model, out, o);
    std::unique_ptr<Model> m = Model::load(out);
    if (dtype_is_infer_own(t)) {
      CHECK(m->gguf().get_string("infer.quant.type").value_or("") == (t == DType::W8A8 ? "w8a8" : "int4"));
      CHECK(m->gguf().get_int("infer.quant.version").value_or(0) == 1);
    }
    const PerplexityResult r = perplexity(*m, text, 0, 2, base.get());
    INFO(dtype_name(t) << ": perplexity " << r.perplexity << " vs f32 " << ppl_f32 << ", KL " << r.kl_divergence);
    CHECK(r.base_perplexity == Approx(ppl_f32).epsilon(1e-9));
    if (t == DType::INT4_G32) {
      CHECK(r.perplexity < ppl_f32 * 1.15);
    } else {
      CHECK(std::fabs(r.perplexity / ppl_f32 - 1.0) < 0.01);  // 8-bit: within 1%
      CHECK(r.top1_agreement > 0.95);
    }
    CHECK(r.kl_divergence > 0);
  }
}

TEST_CASE("quantize: a w8a8 tensor without its scales is refused", "[quant]") {
  const std::string dir = infer_test::temp_dir();
  SynthOptions so;
  so.type = DType::W8A8;
  write_synth_model(*find_synth_preset("tiny"), dir + "/w8.gguf", so);
  // Rewrite the file without the scale of attn_q of layer 0.
  std::unique_ptr<GgufFile> f = GgufFile::open(dir + "/w8.gguf");
  GgufWriter w;
  for (const auto& [k, v] : f->metadata()) w.set(k, v);
  for (const GgufTensorInfo& t : f->tensors())
    if (t.name != "blk.0.attn_q.weight.scale") w.add_tensor(t.name, t.dims, t.type, f->tensor_data(t), t.nbytes);
  w.write(dir + "/w8-noscale.gguf");
  try {
    Model::load(dir + "/w8-noscale.gguf");
    FAIL("loaded a w8a8 file without scales");
  } catch (const Error& e) {
    CHECK(e.status() == Status::Format);
    CHECK(std::string(e.what()).find("scale") != std::string::npos);
  }
}

TEST_CASE("quantize: GPTQ and AWQ beat RTN on KL at the same bits and group", "[quant][calib]") {
  REQUIRE_SHARED(model, "models/stories260K.gguf");
  REQUIRE_SHARED(calib, "text/stories-calib.txt");
  REQUIRE_SHARED(eval, "text/stories-eval.txt");
  const std::string dir = infer_test::temp_dir();
  const std::string text = infer_test::read_text(eval);
  std::unique_ptr<Model> base = Model::load(model);
  double kl[3];
  for (int m = 0; m < 3; ++m) {
    QuantizeOptions o;
    o.type = DType::INT4_G32;
    o.method = static_cast<QuantMethod>(m);
    o.calib_text = infer_test::read_text(calib);
    o.n_threads = 2;
    const std::string out = dir + "/calib-" + quant_method_name(o.method) + ".gguf";
    quantize_model(model, out, o);
    std::unique_ptr<Model> q = Model::load(out);
    CHECK(q->gguf().get_string("infer.quant.method").value_or("") == quant_method_name(o.method));
    kl[m] = perplexity(*q, text, 0, 2, base.get()).kl_divergence;
  }
  INFO("KL rtn " << kl[0] << ", gptq " << kl[1] << ", awq " << kl[2]);
  CHECK(kl[1] < kl[0]);
  CHECK(kl[2] < kl[0]);
}

TEST_CASE("quantize: GPTQ with act-order, and refusals", "[quant][calib]") {
  REQUIRE_SHARED(model, "models/stories260K.gguf");
  REQUIRE_SHARED(calib, "text/stories-calib.txt");
  const std::string dir = infer_test::temp_dir();
  QuantizeOptions o;
  o.type = DType::Q4_0;
  o.method = QuantMethod::Gptq;
  o.act_order = true;
  o.calib_text = infer_test::read_text(calib).substr(0, 4000);
  quantize_model(model, dir + "/ao.gguf", o);
  CHECK(Model::load(dir + "/ao.gguf")->config().n_layer == 5);
  o.type = DType::Q4_K;  // no per-block grid
  CHECK_THROWS_AS(quantize_model(model, dir + "/x.gguf", o), Error);
  o.type = DType::Q4_0;
  o.calib_text.clear();
  CHECK_THROWS_AS(quantize_model(model, dir + "/x.gguf", o), Error);
  CHECK_THROWS_AS(quantize_model(model, model, QuantizeOptions{}), Error);  // in place
}
