// Tensor parallelism inside one process: the ranks are threads joined by an
// in-process communicator (dist/comm.h: make_local_group), so these run
// everywhere, sanitizers included. The MPI runs (tests/mpi/) check the
// same across processes.
#include <cmath>
#include <filesystem>
#include <cstring>
#include <thread>

#include "dist/comm.h"
#include "engine/backends.h"
#include "engine/embed.h"
#include "engine/engine.h"
#include "model/model.h"
#include "tools/synth.h"
#include "hf_writer.h"
#include "test_util.h"

using namespace infer;

namespace {

// ff > 0: the preset with that FFN width (192 splits into whole 32-value
// blocks; the tiny presets' 160 does not).
std::string synth(const char* preset, DType type, int ff = 0) {
  const std::string path = infer_test::temp_dir() + "/tp-" + preset + "-" + dtype_name(type) + "-" +
                           std::to_string(ff) + ".gguf";
  SynthOptions o;
  o.type = type;
  o.n_threads = 1;
  SynthPreset p = *find_synth_preset(preset);
  if (ff > 0) p.n_ff = ff;
  write_synth_model(p, path, o);
  return path;
}

// The n ranks' models (loading is collective: every rank at once).
std::vector<std::unique_ptr<Model>> load_split(const std::string& path, int n) {
  std::vector<std::shared_ptr<Communicator>> comms = make_local_group(n);
  std::vector<std::unique_ptr<Model>> models(static_cast<size_t>(n));
  std::vector<std::string> errors(static_cast<size_t>(n));
  std::vector<std::thread> ts;
  for (int r = 0; r < n; ++r)
    ts.emplace_back([&, r] {
      try {
        LoadOptions lo;
        lo.comm = comms[static_cast<size_t>(r)];
        models[static_cast<size_t>(r)] = Model::load(path, lo);
        prepare_model(*models[static_cast<size_t>(r)], BackendKind::Cpu, 1);
      } catch (const std::exception& e) {
        errors[static_cast<size_t>(r)] = e.what();
      }
    });
  for (auto& t : ts) t.join();
  for (const std::string& e : errors)
    if (!e.empty()) throw Error(Status::Unsupported, e);
  return models;
}

struct Run {
  std::vector<std::vector<int32_t>> tokens;
  std::vector<std::vector<float>> logits;
};

std::vector<RequestParams> requests(const Model& m, int n_req, int max_tokens) {
  std::vector<RequestParams> rs;
  for (int i = 0; i < n_req; ++i) {
    RequestParams rp;
    for (int t = 0; t < 5 + 3 * i; ++t) rp.prompt.push_back(1 + (t * 7 + i * 13) % (m.config().n_vocab - 1));
    rp.max_tokens = max_tokens;
    rp.sampling.temperature = 0;
    rp.logits = kLogitsPrompt | kLogitsGenerated;
    rs.push_back(rp);
  }
  return rs;
}

Run collect(Engine& engine, const std::vector<RequestParams>& rps) {
  std::vector<std::shared_ptr<Request>> rs;
  for (const RequestParams& rp : rps) rs.push_back(engine.submit(rp));
  engine.run();
  Run out;
  for (auto& r : rs) {
    out.tokens.emplace_back(r->generated(), r->generated() + r->n_generated());
    out.logits.push_back(r->logits());
  }
  return out;
}

// rank 0's engine runs the requests; the others follow it.
Run run_split(std::vector<std::unique_ptr<Model>>& models, const EngineParams& ep, const std::vector<RequestParams>& rps,
              EngineStats* stats = nullptr) {
  std::vector<std::string> errors(models.size());
  std::vector<std::thread> ts;
  for (size_t r = 1; r < models.size(); ++r)
    ts.emplace_back([&, r] {
      try {
        follow_engine(*models[r], ep);
      } catch (const std::exception& e) {
        errors[r] = e.what();
      }
    });
  Run out;
  {
    Engine engine(*models[0], ep);
    out = collect(engine, rps);
    if (stats) *stats = engine.stats();
  }
  for (auto& t : ts) t.join();
  for (const std::string& e : errors) REQUIRE(e.empty());
  return out;
}

void require_same(const Run& a, const Run& b, float tol) {
  REQUIRE(a.tokens == b.tokens);
  REQUIRE(a.logits.size() == b.logits.size());
  double worst = 0;
  size_t wi = 0, wj = 0;
  for (size_t i = 0; i < a.logits.size(); ++i) {
    REQUIRE(a.logits[i].size() == b.logits[i].size());
    for (size_t j = 0; j < a.logits[i].size(); ++j) {
      const double d = std::fabs(static_cast<double>(a.logits[i][j]) - b.logits[i][j]) /
                       std::max(1.0, std::fabs(static_cast<double>(b.logits[i][j])));
      if (d > worst) worst = d, wi = i, wj = j;
    }
  }
  INFO("largest logit difference " << worst << " (request " << wi << ", value " << wj << " of "
                                   << a.logits[wi].size() << ": " << a.logits[wi][wj] << " vs " << b.logits[wi][wj]
                                   << ")");
  REQUIRE(worst <= tol);
}

}  // namespace

TEST_CASE("tensor parallel: every architecture matches the whole model (2 ranks in one process)", "[tp]") {
  const char* presets[] = {"tiny", "tiny-llama3", "tiny-mistral", "tiny-qwen2", "tiny-qwen3", "tiny-phi3",
                           "tiny-gemma", "tiny-gemma2", "mixtral-tiny"};
  for (const char* preset : presets)
    for (DType type : {DType::F32, DType::Q8_0, DType::Q4_0}) {
      DYNAMIC_SECTION(preset << " " << dtype_name(type)) {
        const std::string path = synth(preset, type, type == DType::F32 ? 0 : 192);
        std::unique_ptr<Model> whole = Model::load(path);
        prepare_model(*whole, BackendKind::Cpu, 1);
        EngineParams ep;
        ep.n_threads = 1;
        const std::vector<RequestParams> rps = requests(*whole, 3, 6);
        Run ref;
        {
          Engine engine(*whole, ep);
          ref = collect(engine, rps);
        }
        std::vector<std::unique_ptr<Model>> split = load_split(path, 2);
        REQUIRE(split[0]->config().tp_size == 2);
        REQUIRE(split[1]->config().tp_rank == 1);
        // Each rank holds half the KV heads, or one copy of the single KV head.
        REQUIRE(split[0]->kv_layout().n_kv_heads == std::max(1, whole->kv_layout().n_kv_heads / 2));
        EngineStats st;
        const Run got = run_split(split, ep, rps, &st);
        // F32: the 1e-4. Quantized: identical tokens, and logits
        // close. The split adds the row-parallel partial sums in another
        // order, so the residual differs in its last bits; the next layer's
        // int8 activation rounding (x * 127 / amax to the nearest integer)
        // can then flip by one step for an element near a .5 boundary, which
        // moves logits by up to a few percent (tiny-gemma2 q4_0: 3e-2; a
        // TinyLlama-shaped q4_0: 4e-2), where F32 and F16 weights stay within
        // 1e-5. Every other tiny preset stays within 2e-6.
        require_same(got, ref, type == DType::F32 ? 1e-4f : 5e-2f);
        REQUIRE(st.tp_comm_calls > 0);
        REQUIRE(st.tp_comm_bytes > 0);
      }
    }
}

TEST_CASE("tensor parallel: shapes that cannot be split are refused by name", "[tp]") {
  // The tiny presets' FFN of 160 units: 80 input columns per rank cut a
  // 32-value q8_0 block of ffn_down.
  const std::string path = synth("tiny", DType::Q8_0);
  try {
    load_split(path, 2);
    FAIL("a split inside a block was accepted");
  } catch (const Error& e) {
    INFO(e.what());
    REQUIRE(std::string(e.what()).find("ffn_down.weight") != std::string::npos);
    REQUIRE(std::string(e.what()).find("cannot be split 2 ways") != std::string::npos);
  }
  // tiny's 4 heads do not split 8 ways.
  try {
    load_split(synth("tiny", DType::F32), 8);
    FAIL("4 heads were split 8 ways");
  } catch (const Error& e) {
    INFO(e.what());
    REQUIRE(std::string(e.what()).find("4 attention heads must be a multiple of 8") != std::string::npos);
  }
}

TEST_CASE("tensor parallel: engine features give the whole model's tokens", "[tp]") {
  const std::string path = synth("tiny", DType::F32);
  std::unique_ptr<Model> whole = Model::load(path);
  prepare_model(*whole, BackendKind::Cpu, 1);
  std::vector<std::unique_ptr<Model>> split = load_split(path, 2);
  // 16 prompts sharing a 20-token prefix (prefix caching), then their own.
  std::vector<RequestParams> rps = requests(*whole, 16, 12);
  for (size_t i = 0; i < rps.size(); ++i) {
    std::vector<int32_t> pre;
    for (int t = 0; t < 20; ++t) pre.push_back(2 + (t * 5) % 300);
    rps[i].prompt.insert(rps[i].prompt.begin(), pre.begin(), pre.end());
    rps[i].logits = 0;
  }
  struct Case {
    const char* name;
    EngineParams ep;
  };
  std::vector<Case> cases;
  EngineParams base;
  base.n_threads = 1;
  cases.push_back({"continuous batching, prefix caching", base});
  EngineParams pre = base;  // too few blocks for all 16: preemption, swap to the host tier
  pre.kv_blocks = 24;
  pre.block_size = 4;
  pre.host_kv_budget_bytes = 4 << 20;
  cases.push_back({"preemption with swap", pre});
  EngineParams i8 = base;
  i8.kv_type = KvType::I8;
  cases.push_back({"int8 KV", i8});
  EngineParams ng = base;
  ng.spec = SpecMethod::Ngram;
  ng.spec_max_batch = 0;
  cases.push_back({"n-gram speculation", ng});
  EngineParams ls = base;
  ls.spec = SpecMethod::LayerSkip;
  ls.spec_skip_layers = "1";
  ls.spec_max_batch = 0;
  cases.push_back({"layer-skip speculation", ls});
  // A draft model (another tiny of the same vocabulary, whole, on rank 0
  // alone: the followers never see it).
  const std::string draft_path = infer_test::temp_dir() + "/tp-tiny-draft.gguf";
  {
    SynthOptions o;
    o.type = DType::F32;
    o.seed = 7;
    write_synth_model(*find_synth_preset("tiny"), draft_path, o);
  }
  std::unique_ptr<Model> draft = Model::load(draft_path);
  prepare_model(*draft, BackendKind::Cpu, 1);
  EngineParams dr = base;
  dr.spec = SpecMethod::Draft;
  dr.draft_model = draft.get();
  dr.spec_max_batch = 0;
  cases.push_back({"draft-model speculation", dr});
  for (const Case& c : cases) {
    DYNAMIC_SECTION(c.name) {
      Run ref;
      {
        Engine engine(*whole, c.ep);
        ref = collect(engine, rps);
      }
      EngineStats st;
      const Run got = run_split(split, c.ep, rps, &st);
      REQUIRE(got.tokens == ref.tokens);
      if (c.ep.kv_blocks > 0) REQUIRE(st.n_preemptions > 0);
      if (c.ep.spec != SpecMethod::None) REQUIRE(st.spec.drafted > 0);
      REQUIRE(st.kv.prefix_hit_tokens > 0);
    }
  }
}

TEST_CASE("tensor parallel: encoders and decoder embeddings match the whole model", "[tp]") {
  for (const char* preset : {"tiny-bert", "tiny-bert-rerank", "tiny-nomic-bert", "tiny-qwen3-embed"}) {
    DYNAMIC_SECTION(preset) {
      const std::string path = synth(preset, DType::F32);
      std::unique_ptr<Model> whole = Model::load(path);
      prepare_model(*whole, BackendKind::Cpu, 1);
      std::vector<EmbedInput> in(3);
      for (int i = 0; i < 3; ++i)
        for (int t = 0; t < 6 + 4 * i; ++t) in[i].tokens.push_back(5 + (t * 11 + i) % 200);
      EmbedOptions o;
      if (whole->config().n_cls_out > 0) o.pooling = Pooling::Rank;
      EngineParams ep;
      ep.n_threads = 1;
      std::vector<float> ref;
      {
        Engine engine(*whole, ep);
        auto job = engine.submit_embed(in, o);
        engine.run();
        REQUIRE(job->status() == Status::Ok);
        ref = job->result().data;
      }
      std::vector<std::unique_ptr<Model>> split = load_split(path, 2);
      std::thread follower([&] { follow_engine(*split[1], ep); });
      std::vector<float> got;
      {
        Engine engine(*split[0], ep);
        auto job = engine.submit_embed(in, o);
        engine.run();
        REQUIRE(job->status() == Status::Ok);
        got = job->result().data;
      }
      follower.join();
      REQUIRE(got.size() == ref.size());
      for (size_t i = 0; i < got.size(); ++i) REQUIRE(std::fabs(got[i] - ref[i]) <= 1e-4f);
    }
  }
}

TEST_CASE("tensor parallel: ranks with different models or parameters fail at start, a stuck rank times out", "[tp]") {
  // Two files of one shape with other weights: the model check fails on both ranks.
  const std::string a = synth("tiny", DType::F32);
  const std::string b = infer_test::temp_dir() + "/tp-tiny-seed2.gguf";
  {
    SynthOptions o;
    o.type = DType::F32;
    o.seed = 2;
    write_synth_model(*find_synth_preset("tiny"), b, o);
  }
  std::vector<std::shared_ptr<Communicator>> comms = make_local_group(2);
  std::string err0, err1;
  std::thread t1([&] {
    try {
      LoadOptions lo;
      lo.comm = comms[1];
      Model::load(b, lo);
    } catch (const std::exception& e) {
      err1 = e.what();
    }
  });
  try {
    LoadOptions lo;
    lo.comm = comms[0];
    Model::load(a, lo);
  } catch (const std::exception& e) {
    err0 = e.what();
  }
  t1.join();
  INFO(err0 << " / " << err1);
  REQUIRE(err0.find("disagree on the model") != std::string::npos);
  REQUIRE(err1.find("disagree on the model") != std::string::npos);

  // The same model, other engine parameters on rank 1.
  std::vector<std::unique_ptr<Model>> split = load_split(a, 2);
  EngineParams ep;
  ep.n_threads = 1;
  EngineParams other = ep;
  other.block_size = 8;
  std::string ferr;
  std::thread f([&] {
    try {
      follow_engine(*split[1], other);
    } catch (const std::exception& e) {
      ferr = e.what();
    }
  });
  try {
    Engine engine(*split[0], ep);
    FAIL("rank 0 started with other parameters than rank 1");
  } catch (const Error& e) {
    REQUIRE(std::string(e.what()).find("disagree on the engine parameters") != std::string::npos);
  }
  f.join();
  REQUIRE(ferr.find("disagree on the engine parameters") != std::string::npos);

  // Rank 1 never follows: rank 0's first collective gives up after the
  // timeout with the reason, instead of hanging.
  std::vector<std::unique_ptr<Model>> split2 = load_split(a, 2);
  EngineParams quick = ep;
  quick.tp_timeout_ms = 300;
  try {
    Engine engine(*split2[0], quick);
    FAIL("an engine started without its follower");
  } catch (const Error& e) {
    INFO(e.what());
    REQUIRE(e.status() == Status::Backend);
    REQUIRE(std::string(e.what()).find("timed out after 300 ms") != std::string::npos);
  }
}

TEST_CASE("tensor parallel: Hugging Face directories split like GGUF files", "[tp]") {
  for (const char* preset : {"tiny", "tiny-qwen2", "tiny-phi3", "mixtral-tiny"}) {
    DYNAMIC_SECTION(preset) {
      const std::string gguf = synth(preset, DType::F32);
      std::unique_ptr<Model> ref = Model::load(gguf);
      const std::string dir = infer_test::temp_dir() + "/tp-hf-" + preset;
      std::filesystem::remove_all(dir);
      std::filesystem::create_directories(dir);
      infer_test::gguf_to_hf_dir(ref->gguf(), dir);
      std::unique_ptr<Model> whole = Model::load(dir);
      prepare_model(*whole, BackendKind::Cpu, 1);
      EngineParams ep;
      ep.n_threads = 1;
      const std::vector<RequestParams> rps = requests(*whole, 2, 5);
      Run want;
      {
        Engine engine(*whole, ep);
        want = collect(engine, rps);
      }
      std::vector<std::unique_ptr<Model>> split = load_split(dir, 2);
      require_same(run_split(split, ep, rps), want, 1e-4f);
    }
  }
}
