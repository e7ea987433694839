// Embeddings (lib/engine/embed.h, issue #30) on decoder models: the encode
// path against the decoder's own forward pass, batching invariance, input
// checks, and the engine's embedding jobs against the synchronous form.
// (Encoders are checked against the numpy reference: tests/ref/embed_ref.py.)
#include <cmath>
#include <cstring>
#include <memory>
#include <vector>

#include "core/threadpool.h"
#include "engine/backends.h"
#include "engine/embed.h"
#include "engine/engine.h"
#include "lib/tools/synth.h"
#include "tools/quantize.h"
#include "model/model.h"
#include "test_util.h"

using namespace infer;

namespace {

std::string tiny_decoder(const char* preset) {
  const std::string path = infer_test::temp_dir() + "/embed-" + preset + ".gguf";
  SynthOptions o;
  o.type = DType::F32;
  write_synth_model(*find_synth_preset(preset), path, o);
  return path;
}

std::vector<int32_t> toks(int n, int salt) {
  std::vector<int32_t> t;
  for (int i = 0; i < n; ++i) t.push_back(3 + (i * 37 + salt * 11) % 200);
  return t;
}

EmbedInput input(std::vector<int32_t> t) {
  EmbedInput in;
  in.tokens = std::move(t);
  return in;
}

double max_diff(const float* a, const float* b, int64_t n) {
  double m = 0;
  for (int64_t i = 0; i < n; ++i) m = std::max(m, std::fabs(double(a[i]) - b[i]));
  return m;
}

}  // namespace

TEST_CASE("decoder embeddings: the last token's hidden state is what the LM head reads", "[embed]") {
  for (const char* preset : {"tiny", "tiny-qwen3"}) {
    INFO(preset);
    std::unique_ptr<Model> m = Model::load(tiny_decoder(preset));
    const ModelConfig& c = m->config();
    const std::vector<int32_t> t = toks(9, 1);
    // The forward pass's logits of the last position.
    ThreadPool pool(2);
    std::unique_ptr<Backend> be = make_backend(BackendKind::Cpu, pool);
    KvLayout l = m->kv_layout();
    l.block_size = 4;
    l.n_blocks = 8;
    KvCache kv(l, [&](const KvLayout& L, int n, KvTier tier) { return be->make_kv_memory(L, n, tier); });
    const int s = kv.add_sequence();
    REQUIRE(kv.reserve(s, static_cast<int>(t.size())));
    Batch b;
    for (size_t i = 0; i < t.size(); ++i) b.add(t[i], static_cast<int32_t>(i), s, i + 1 == t.size());
    Workspace ws;
    std::vector<float> logits(static_cast<size_t>(c.n_vocab));
    m->forward(b, kv, *be, ws, logits.data());
    // The embedding (last pooling, not normalized) through the F32 head.
    EmbedOptions o;
    o.pooling = Pooling::Last;
    o.normalize = false;
    EmbedResult r = embed(*m, {input(t)}, o, 2);
    REQUIRE(r.dim == c.n_embd);
    REQUIRE(r.n_rows() == 1);
    const GgufTensorInfo* head = m->gguf().find_tensor("output.weight");
    if (!head) head = m->gguf().find_tensor("token_embd.weight");
    REQUIRE(head);
    REQUIRE(head->type == DType::F32);
    const float* w = reinterpret_cast<const float*>(m->gguf().tensor_data(*head));
    double worst = 0;
    for (int v = 0; v < c.n_vocab; ++v) {
      double acc = 0;
      for (int k = 0; k < c.n_embd; ++k) acc += double(w[int64_t(v) * c.n_embd + k]) * r.data[k];
      worst = std::max(worst, std::fabs(acc - logits[v]));
    }
    REQUIRE(worst < 1e-3);
  }
}

TEST_CASE("embeddings do not depend on what shares the batch", "[embed]") {
  std::unique_ptr<Model> m = Model::load(tiny_decoder("tiny-qwen3"));
  for (Pooling p : {Pooling::Mean, Pooling::Last, Pooling::Cls, Pooling::None}) {
    INFO(pooling_name(p));
    EmbedOptions o;
    o.pooling = p;
    std::vector<EmbedInput> all = {input(toks(5, 1)), input(toks(17, 2)), input(toks(1, 3)), input(toks(8, 4))};
    EmbedResult together = embed(*m, all, o, 2);
    int64_t rows = 0;
    for (size_t i = 0; i < all.size(); ++i) {
      EmbedResult alone = embed(*m, {all[i]}, o, 1);
      REQUIRE(together.rows[i] == alone.rows[0]);
      REQUIRE(together.first[i] == rows);
      REQUIRE(max_diff(together.row(together.first[i]), alone.row(0), alone.rows[0] * alone.dim) < 1e-5);
      rows += alone.rows[0];
      if (p != Pooling::None) {  // L2-normalized
        double ss = 0;
        for (int k = 0; k < alone.dim; ++k) ss += double(alone.data[k]) * alone.data[k];
        REQUIRE(std::fabs(ss - 1.0) < 1e-5);
      }
    }
    REQUIRE(together.n_tokens == 31);
  }
  // Mean pooling is the mean of the per-token rows.
  EmbedOptions none, mean;
  none.pooling = Pooling::None;
  none.normalize = false;
  mean.pooling = Pooling::Mean;
  mean.normalize = false;
  EmbedResult a = embed(*m, {input(toks(6, 9))}, none, 2), b = embed(*m, {input(toks(6, 9))}, mean, 2);
  REQUIRE(a.n_rows() == 6);
  for (int k = 0; k < a.dim; ++k) {
    double s = 0;
    for (int r = 0; r < 6; ++r) s += a.row(r)[k];
    REQUIRE(std::fabs(s / 6 - b.data[k]) < 1e-5);
  }
  // Matryoshka: the first N values, then normalized.
  EmbedOptions cut;
  cut.pooling = Pooling::Mean;
  cut.dimensions = 16;
  EmbedResult c = embed(*m, {input(toks(6, 9))}, cut, 2);
  REQUIRE(c.dim == 16);
  double ss = 0;
  for (int k = 0; k < 16; ++k) ss += double(b.data[k]) * b.data[k];
  for (int k = 0; k < 16; ++k) REQUIRE(std::fabs(c.data[k] - b.data[k] / std::sqrt(ss)) < 1e-5);
}

TEST_CASE("embedding inputs are checked with clear errors", "[embed]") {
  std::unique_ptr<Model> m = Model::load(tiny_decoder("tiny"));
  const ModelConfig& c = m->config();
  EmbedOptions o;
  auto fails = [&](std::vector<EmbedInput> in, const EmbedOptions& opt, Status st, const char* what) {
    try {
      embed(*m, std::move(in), opt, 1);
      FAIL("no error for: " << what);
    } catch (const Error& e) {
      REQUIRE(e.status() == st);
      REQUIRE(std::string(e.what()).find(what) != std::string::npos);
    }
  };
  fails({}, o, Status::InvalidArgument, "no inputs");
  fails({input(toks(3, 1)), input({})}, o, Status::InvalidArgument, "input 1 is empty");
  fails({input({1, c.n_vocab})}, o, Status::InvalidArgument, "out of range");
  fails({input({-1})}, o, Status::InvalidArgument, "out of range");
  fails({input(toks(c.n_ctx_train + 1, 1))}, o, Status::InvalidArgument, "more than the model's context");
  EmbedOptions big = o;
  big.dimensions = c.n_embd + 1;
  fails({input(toks(3, 1))}, big, Status::InvalidArgument, "dimensions");
  EmbedOptions rank = o;
  rank.pooling = Pooling::Rank;
  fails({input(toks(3, 1))}, rank, Status::InvalidArgument, "no classifier head");
  // Truncation cuts to the context.
  EmbedOptions tr = o;
  tr.truncate = true;
  std::vector<EmbedInput> in = {input(toks(c.n_ctx_train + 40, 1))};
  check_inputs(*m, in, tr);
  REQUIRE(in[0].tokens.size() == static_cast<size_t>(c.n_ctx_train));
}

TEST_CASE("the engine computes embedding jobs between generation steps", "[embed][engine]") {
  std::unique_ptr<Model> m = Model::load(tiny_decoder("tiny-qwen3"));
  EngineParams ep;
  ep.n_threads = 2;
  ep.max_batch_tokens = 32;  // several passes per job
  Engine e(*m, ep);
  EmbedOptions o;
  o.pooling = Pooling::Mean;
  std::vector<EmbedInput> in;
  for (int i = 0; i < 12; ++i) in.push_back(input(toks(3 + i * 2, i)));
  const EmbedResult want = embed(*m, in, o, 2);
  RequestParams rp;
  rp.prompt = toks(10, 7);
  rp.max_tokens = 8;
  std::shared_ptr<Request> gen = e.submit(rp);
  std::shared_ptr<EmbedJob> job = e.submit_embed(in, o), cancelled = e.submit_embed(in, o);
  cancelled->cancel();
  REQUIRE_THROWS_AS(e.submit_embed({input({})}, o), Error);  // refused at submission, nothing queued
  e.run();
  REQUIRE(job->done());
  REQUIRE(job->status() == Status::Ok);
  REQUIRE(job->result().data.size() == want.data.size());
  REQUIRE(max_diff(job->result().data.data(), want.data.data(), static_cast<int64_t>(want.data.size())) < 1e-5);
  REQUIRE(cancelled->done());
  REQUIRE(cancelled->status() == Status::Cancelled);
  REQUIRE(gen->finished());
  const EngineStats st = e.stats();
  REQUIRE(st.n_embed_jobs == 1);
  REQUIRE(st.n_embed_passes >= 4);  // 12 inputs of 3..25 tokens in passes of <= 32 tokens
}

TEST_CASE("quantized encoders keep their added tables in F32", "[embed][quant]") {
  // The token-type and position tables are added to the embedding rows, and
  // other GGUF readers refuse them quantized: synth (and quantize, through
  // the same rule) leave them F32 while the matrices take the format.
  for (const char* preset : {"tiny-bert", "tiny-nomic-bert"}) {
    INFO(preset);
    const std::string path = infer_test::temp_dir() + "/embed-q8-" + preset + ".gguf";
    SynthOptions o;
    o.type = DType::Q8_0;
    write_synth_model(*find_synth_preset(preset), path, o);
    std::unique_ptr<Model> m = Model::load(path);
    const GgufFile& g = m->gguf();
    REQUIRE(g.find_tensor("token_types.weight")->type == DType::F32);
    if (const GgufTensorInfo* p = g.find_tensor("position_embd.weight")) REQUIRE(p->type == DType::F32);
    REQUIRE(g.find_tensor("blk.0.ffn_up.weight")->type == DType::Q8_0);
    REQUIRE(!is_quantizable("token_types.weight", {64, 2}));
    REQUIRE(is_quantizable("token_embd.weight", {64, 1000}));
  }
}
