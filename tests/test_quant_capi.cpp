// The C API of quantization, synthetic models and perplexity against a base
// model (include/infer/infer.h, the OFFLINE TOOLS section).
#include <cstring>
#include <string>
#include <vector>

#include "gguf/gguf.h"
#include "infer/infer.h"
#include "test_util.h"

namespace {

struct Calls {
  int progress = 0;
  double last = -1;
  std::vector<std::string> notes;
  static void on_progress(double f, const char* what, void* u) {
    Calls* c = static_cast<Calls*>(u);
    ++c->progress;
    CHECK(f >= c->last);  // monotone
    CHECK(what != nullptr);
    c->last = f;
  }
  static void on_note(const char* m, void* u) { static_cast<Calls*>(u)->notes.push_back(m); }
};

}  // namespace

TEST_CASE("C API: infer_synth, infer_quantize and infer_perplexity", "[quant][capi]") {
  const std::string dir = infer_test::temp_dir();
  const std::string tiny = dir + "/capi-tiny.gguf";

  infer_synth_params sp;
  infer_synth_params_init(&sp);
  CHECK(std::string(sp.preset) == "tinyllama-1.1b");
  sp.preset = "no-such-model";
  CHECK(infer_synth(tiny.c_str(), &sp, nullptr) == INFER_ERR_INVALID_ARGUMENT);
  CHECK(std::string(infer_last_error()).find("tinyllama-1.1b") != std::string::npos);  // lists the presets
  sp.preset = "tiny";
  sp.type = "q9_9";
  CHECK(infer_synth(tiny.c_str(), &sp, nullptr) == INFER_ERR_INVALID_ARGUMENT);
  sp.type = "f32";
  Calls calls;
  sp.progress = Calls::on_progress;
  sp.user_data = &calls;
  uint64_t bytes = 0;
  REQUIRE(infer_synth(tiny.c_str(), &sp, &bytes) == INFER_OK);
  CHECK(bytes > 100000);
  CHECK(calls.progress > 0);
  CHECK(calls.last == 1.0);
  CHECK(std::string(infer_synth_preset_name(0)) == "tinyllama-1.1b");
  CHECK(infer_synth_preset_name(1000) == nullptr);

  infer_quantize_params qp;
  infer_quantize_params_init(&qp);
  CHECK(std::string(qp.type) == "q4_0");
  const std::string q8 = dir + "/capi-q8.gguf", i4 = dir + "/capi-int4.gguf";
  qp.type = "int4";
  qp.group_size = 48;
  CHECK(infer_quantize(tiny.c_str(), i4.c_str(), &qp, nullptr) == INFER_ERR_INVALID_ARGUMENT);
  qp.group_size = 128;
  qp.method = INFER_QUANT_GPTQ;  // without calibration text
  CHECK(infer_quantize(tiny.c_str(), i4.c_str(), &qp, nullptr) == INFER_ERR_INVALID_ARGUMENT);
  qp.method = INFER_QUANT_RTN;
  Calls qcalls;  // one user_data for both callbacks
  qp.progress = Calls::on_progress;
  qp.note = Calls::on_note;
  qp.user_data = &qcalls;
  infer_quantize_result qr;
  std::memset(&qr, 0, sizeof qr);
  qr.struct_size = sizeof qr;
  REQUIRE(infer_quantize(tiny.c_str(), i4.c_str(), &qp, &qr) == INFER_OK);
  CHECK(qr.n_quantized == 16);  // 2 layers x 7, token_embd and output
  CHECK(qr.n_fallback > 0);     // 64-wide rows: int4_g128 -> int4_g64
  CHECK(!qcalls.notes.empty());
  CHECK(qcalls.progress > 0);
  CHECK(qcalls.last == 1.0);
  qp.progress = nullptr;
  CHECK(qr.bytes_out < qr.bytes_in);
  qp.type = "q8_0";
  REQUIRE(infer_quantize(tiny.c_str(), q8.c_str(), &qp, nullptr) == INFER_OK);
  CHECK(infer_quantize(tiny.c_str(), tiny.c_str(), &qp, nullptr) == INFER_ERR_INVALID_ARGUMENT);
  CHECK(infer_quantize(nullptr, q8.c_str(), &qp, nullptr) == INFER_ERR_INVALID_ARGUMENT);

  infer_model *base = nullptr, *model = nullptr;
  REQUIRE(infer_model_load(tiny.c_str(), nullptr, &base) == INFER_OK);
  REQUIRE(infer_model_load(q8.c_str(), nullptr, &model) == INFER_OK);
  const char* text = "once upon a time there was a little synthetic model that liked numbers";
  infer_perplexity_params pp;
  infer_perplexity_params_init(&pp);
  pp.n_threads = 2;
  infer_perplexity_result r;
  std::memset(&r, 0, sizeof r);
  r.struct_size = sizeof r;
  REQUIRE(infer_perplexity(model, text, &pp, &r) == INFER_OK);  // no base: no comparison
  CHECK(r.perplexity > 1);
  CHECK(r.kl_divergence == 0);
  infer_perplexity_result d;  // NULL params: the defaults, the same windows
  std::memset(&d, 0, sizeof d);
  d.struct_size = sizeof d;
  REQUIRE(infer_perplexity(model, text, nullptr, &d) == INFER_OK);
  CHECK(d.perplexity == Approx(r.perplexity).epsilon(1e-4));
  CHECK(d.n_tokens == r.n_tokens);
  pp.n_ctx = 1;  // nothing to score in a window of one token
  CHECK(infer_perplexity(model, text, &pp, &d) == INFER_ERR_INVALID_ARGUMENT);
  pp.n_ctx = 0;
  pp.base = base;
  REQUIRE(infer_perplexity(base, text, &pp, &r) == INFER_OK);  // against itself
  CHECK(r.kl_divergence == Approx(0).margin(1e-9));
  CHECK(r.top1_agreement == 1.0);
  CHECK(r.base_perplexity == Approx(r.perplexity));
  REQUIRE(infer_perplexity(model, text, &pp, &r) == INFER_OK);
  CHECK(r.kl_divergence > 0);
  CHECK(r.kl_divergence < 0.05);
  CHECK(r.top1_agreement > 0.5);
  // An old caller's shorter result struct is filled only up to its size.
  infer_perplexity_result old;
  std::memset(&old, 0xAB, sizeof old);
  old.struct_size = offsetof(infer_perplexity_result, kl_divergence);
  REQUIRE(infer_perplexity(model, text, &pp, &old) == INFER_OK);
  unsigned char tail[sizeof old - offsetof(infer_perplexity_result, kl_divergence)];
  std::memcpy(tail, reinterpret_cast<unsigned char*>(&old) + offsetof(infer_perplexity_result, kl_divergence), sizeof tail);
  for (unsigned char b : tail) CHECK(b == 0xAB);
  infer_model_free(model);
  infer_model_free(base);
}

// llama-quantize's --output-tensor-type and --token-embedding-type: the head
// and the embedding in their own formats, the other matrices in `type`; with
// tied embeddings token_embd is the head and takes the output type.
TEST_CASE("C API: infer_quantize gives the output head and the token embedding their own formats", "[quant][capi]") {
  const std::string dir = infer_test::temp_dir();
  const std::string untied = dir + "/capi-heads.gguf", tied = dir + "/capi-heads-tied.gguf";
  infer_synth_params sp;
  infer_synth_params_init(&sp);
  sp.type = "f32";
  sp.preset = "tiny";
  REQUIRE(infer_synth(untied.c_str(), &sp, nullptr) == INFER_OK);
  sp.preset = "tiny-llama3";  // tied embeddings
  REQUIRE(infer_synth(tied.c_str(), &sp, nullptr) == INFER_OK);
  auto types = [](const std::string& path) {
    std::vector<std::pair<std::string, infer::DType>> out;
    const auto f = infer::GgufFile::open(path);
    for (const infer::GgufTensorInfo& t : f->tensors()) out.emplace_back(t.name, t.type);
    return out;
  };
  auto type_of = [&](const std::string& path, const std::string& name) {
    for (const auto& [n, t] : types(path))
      if (n == name) return t;
    FAIL("no tensor " << name << " in " << path);
    return infer::DType::F32;
  };

  infer_quantize_params qp;
  infer_quantize_params_init(&qp);
  CHECK(qp.output_type == nullptr);
  CHECK(qp.token_embedding_type == nullptr);
  const std::string out = dir + "/capi-heads-q4.gguf";
  qp.type = "q4_0";
  qp.output_type = "q8_0";
  qp.token_embedding_type = "f16";
  REQUIRE(infer_quantize(untied.c_str(), out.c_str(), &qp, nullptr) == INFER_OK);
  CHECK(type_of(out, "output.weight") == infer::DType::Q8_0);
  CHECK(type_of(out, "token_embd.weight") == infer::DType::F16);
  CHECK(type_of(out, "blk.0.attn_q.weight") == infer::DType::Q4_0);
  CHECK(type_of(out, "blk.1.ffn_down.weight") == infer::DType::Q4_0);
  infer_model* m = nullptr;
  REQUIRE(infer_model_load(out.c_str(), nullptr, &m) == INFER_OK);  // the mixed file loads and runs
  infer_perplexity_result r;
  std::memset(&r, 0, sizeof r);
  r.struct_size = sizeof r;
  REQUIRE(infer_perplexity(m, "once upon a time there was a model with a precise head", nullptr, &r) == INFER_OK);
  CHECK(r.perplexity > 1);
  infer_model_free(m);

  // Tied: the output type goes to token_embd (the head), over the embedding type.
  const std::string out_tied = dir + "/capi-heads-tied-q4.gguf";
  REQUIRE(infer_quantize(tied.c_str(), out_tied.c_str(), &qp, nullptr) == INFER_OK);
  CHECK(type_of(out_tied, "token_embd.weight") == infer::DType::Q8_0);
  CHECK(type_of(out_tied, "blk.0.attn_q.weight") == infer::DType::Q4_0);
  qp.output_type = nullptr;  // only the embedding type: token_embd takes it
  REQUIRE(infer_quantize(tied.c_str(), out_tied.c_str(), &qp, nullptr) == INFER_OK);
  CHECK(type_of(out_tied, "token_embd.weight") == infer::DType::F16);

  // Unset (NULL), as an older caller's shorter struct leaves them: everything in `type`.
  infer_quantize_params old = qp;
  old.struct_size = offsetof(infer_quantize_params, output_type);
  old.token_embedding_type = "f16";  // past the caller's struct: never read
  REQUIRE(infer_quantize(untied.c_str(), out.c_str(), &old, nullptr) == INFER_OK);
  CHECK(type_of(out, "output.weight") == infer::DType::Q4_0);
  CHECK(type_of(out, "token_embd.weight") == infer::DType::Q4_0);

  // Bad names are refused before anything is written.
  qp.output_type = "q9_9";
  CHECK(infer_quantize(untied.c_str(), out.c_str(), &qp, nullptr) == INFER_ERR_INVALID_ARGUMENT);
  CHECK(std::string(infer_last_error()).find("q9_9") != std::string::npos);
  qp.output_type = "w8a8";  // GPTQ writes the head round-to-nearest in a block format
  qp.method = INFER_QUANT_GPTQ;
  qp.calib_text = "some calibration text for the tiny model, long enough to make a window or two of tokens";
  CHECK(infer_quantize(untied.c_str(), out.c_str(), &qp, nullptr) == INFER_ERR_UNSUPPORTED);
}
