// Tensor parallelism end to end (issue #31), run by CTest under
//   mpirun --allow-run-as-root --oversubscribe -np 2 infer_tp_model_test DIR
// (tests/mpi/tp_run.sh). For every architecture preset of infer synth, in
// F32 and Q4_0:
//   - every rank loads the model with LoadOptions::comm = make_mpi_comm();
//   - rank 0 runs an Engine over it (greedy, a few prompts, every logits
//     row kept), ranks 1.. follow_engine();
//   - rank 0 alone then loads the whole model and runs the same requests:
//     logits within kF32Tol (F32) / kQ4Tol (Q4_0) and identical tokens;
//     encoders: the embedding vectors within kF32Tol.
// A Q4_0 shape whose slices would cut a 32-value block (n_ff / 2 or the
// attention width / 2 not a multiple of 32) must be refused with
// Error(Unsupported) "cannot be split"; its split-friendly variant (n_ff 128)
// must then pass. Then the engine's features on TP (a batch of 16 under
// continuous batching with preemption and prefix caching, int8 KV, n-gram and
// LayerSkip speculation, a grammar-constrained request): identical tokens to
// the single process. Last, memory: each rank's RSS growth over load +
// engine + run is at most 0.6 x the whole model's weight bytes.
//
// Exit: 0 all passed, 1 a failure (printed as "FAIL ..."), 77 this build
// has no MPI (skipped). Arguments: DIR (scratch files) [--only SUBSTR]
// [--no-rss] [--rss-only] [--dry: one process, no MPI, whole models on both
// sides: checks the harness itself] [--local: no MPI, the two ranks are
// threads joined by make_local_group: the TP core without a launcher].
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"
#include "dist/comm.h"
#include "engine/backends.h"
#include "engine/engine.h"
#include "engine/embed.h"
#include "model/model.h"
#include "sampling/grammar.h"
#include "sampling/sampler.h"
#include "tools/synth.h"

using namespace infer;

namespace {

// A model as the C API loads one: mapped, then prepared for the CPU backend
// (the weights repacked once; what the backend then holds in its own layout
// leaves memory, which the RSS check measures).
std::unique_ptr<Model> load_prepared(const std::string& path, const LoadOptions& lo = {}) {
  std::unique_ptr<Model> m = Model::load(path, lo);
  prepare_model(*m, BackendKind::Cpu, 1);
  return m;
}

}  // namespace

namespace {

// F32: the pieces a rank computes are the single process's own sums cut in
// two and added by the all-reduce, so only the order of float additions
// differs (relative error ~1e-6 of the logits' size).
constexpr double kF32Tol = 1e-4;
// Q4_0: the weight blocks are the same bytes on both sides (slices are cut on
// block boundaries), and so are the activations' 32-value quantization
// blocks, but the quantized dot products are summed in another order and
// rounded to f32 at the all-reduce, and a hidden state that moves by 1 ulp
// can land an activation on the other side of a q8 rounding step, which
// moves that block's product by up to scale/2 * |w|. Bound: 1e-3 of the
// largest logit magnitude of the row (at least 1e-3).
constexpr double kQ4Rel = 1e-3;

// Per rank: in --local mode the ranks are threads of this process.
thread_local int g_rank = 0;
int g_size = 1;
// --dry: no MPI; one process plays both sides (whole models), so the
// harness itself (cases, features, bounds) can be checked without TP.
bool g_dry = false;
// --local: no MPI; the ranks are threads joined by make_local_group (the
// tensor-parallel core tested without a launcher; no memory check).
bool g_local = false;
thread_local int g_failures = 0;
thread_local std::shared_ptr<Communicator> g_comm;  // the harness's own (barriers, results)

void fail(const std::string& what) {
  std::fprintf(stderr, "FAIL rank %d: %s\n", g_rank, what.c_str());
  std::fflush(stderr);
  ++g_failures;
}

void note(const std::string& what) {
  if (g_rank == 0) {
    std::printf("%s\n", what.c_str());
    std::fflush(stdout);
  }
}

// A failure that leaves the ranks out of step (one in a collective the other
// never joins): printed, then the job is ended.
[[noreturn]] void fatal(const std::string& what) {
  std::fprintf(stderr, "FAIL rank %d (fatal, ending the job): %s\n", g_rank, what.c_str());
  std::fflush(stderr);
  if (!g_local) g_comm->abort(1);
  std::_Exit(1);
}

void barrier() { g_comm->check(g_comm->barrier()); }

// The sum over ranks.
int sum_ranks(int v) {
  float f = static_cast<float>(v);
  g_comm->check(g_comm->all_reduce_sum_f32(&f, 1));
  return static_cast<int>(std::lround(f));
}

struct Rss {
  long rss = 0, anon = 0, file = 0;  // kB
};
Rss read_rss() {
  Rss r;
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line)) {
    long v = 0;
    if (std::sscanf(line.c_str(), "VmRSS: %ld", &v) == 1) r.rss = v;
    if (std::sscanf(line.c_str(), "RssAnon: %ld", &v) == 1) r.anon = v;
    if (std::sscanf(line.c_str(), "RssFile: %ld", &v) == 1) r.file = v;
  }
  return r;
}

// ---------------------------------------------------------------- models

struct Case {
  std::string name;  // preset name, "+variant"
  SynthPreset preset;
  DType type;
};

bool q4_splittable(const SynthPreset& p, int n) {
  const int hd = p.head_dim ? p.head_dim : p.n_embd / p.n_head;
  const int attn = p.n_head * hd;
  auto ok = [&](int v) { return v % n == 0 && (v / n) % 32 == 0; };
  return ok(p.n_embd) && ok(p.n_ff) && ok(attn);
}

// Query heads split N ways; KV heads too, or (fewer KV heads than ranks,
// MQA) each rank keeps a copy of the KV head its query heads use.
bool heads_splittable(const SynthPreset& p, int n) {
  return p.n_head % n == 0 && (p.n_head_kv % n == 0 || n % p.n_head_kv == 0);
}

bool is_encoder(const SynthPreset& p) {
  return std::strcmp(p.arch, "bert") == 0 || std::strcmp(p.arch, "nomic-bert") == 0;
}

std::string g_dir;

std::string model_path(const Case& c) {
  std::string n = c.name;
  for (char& ch : n)
    if (ch == '+') ch = '_';
  return g_dir + "/" + n + (c.type == DType::F32 ? "-f32" : "-q4_0") + ".gguf";
}

// Rank 0 writes the file; everyone waits for it.
void write_model(const Case& c) {
  if (g_rank == 0) {
    SynthOptions o;
    o.type = c.type;
    o.seed = 7;
    o.n_threads = 1;
    write_synth_model(c.preset, model_path(c), o);
  }
  barrier();
}

// A fresh communicator of the group for one model (every rank calls it).
std::vector<std::shared_ptr<Communicator>> g_local_slot;
std::shared_ptr<Communicator> new_comm() {
  if (!g_local) return make_mpi_comm();
  barrier();
  if (g_rank == 0) g_local_slot = make_local_group(g_size);
  barrier();
  std::shared_ptr<Communicator> c = g_local_slot[static_cast<size_t>(g_rank)];
  barrier();
  return c;
}

// ---------------------------------------------------------------- runs

// What a run produced, per request.
struct Out {
  std::vector<std::vector<int32_t>> tokens;
  std::vector<std::vector<float>> logits;
  std::vector<std::vector<float>> embed;  // encoders: rows x dim
  EngineStats stats;
  std::vector<int32_t> n_cached, n_preempt;
};

struct Job {
  std::vector<RequestParams> reqs;
  std::vector<std::vector<EmbedInput>> embeds;
};

Out run_engine(const Model& m, const EngineParams& ep, const Job& job) {
  Out out;
  Engine engine(m, ep);
  std::vector<std::shared_ptr<Request>> rs;
  for (const auto& rp : job.reqs) rs.push_back(engine.submit(rp));
  std::vector<std::shared_ptr<EmbedJob>> js;
  EmbedOptions eo;
  eo.normalize = false;
  for (const auto& in : job.embeds) js.push_back(engine.submit_embed(in, eo));
  engine.run();
  for (auto& r : rs) {
    if (r->status() != Status::Ok) throw Error(r->status(), "request failed: " + r->error());
    out.tokens.emplace_back(r->generated(), r->generated() + r->n_generated());
    out.logits.push_back(r->logits());
    out.n_cached.push_back(r->n_cached());
    out.n_preempt.push_back(r->n_preemptions());
  }
  for (auto& j : js) {
    if (!j->wait(60000)) throw Error(Status::Internal, "embedding job not done after run()");
    if (j->status() != Status::Ok) throw Error(j->status(), "embedding job failed: " + j->error());
    out.embed.push_back(j->result().data);
  }
  out.stats = engine.stats();
  return out;
}

std::vector<int32_t> tokens_of(const Model& m, const std::string& text) {
  return m.tokenizer().encode(text, true);
}

RequestParams greedy(std::vector<int32_t> prompt, int n, uint32_t logits) {
  RequestParams rp;
  rp.prompt = std::move(prompt);
  rp.max_tokens = n;
  rp.sampling.temperature = 0;
  rp.ignore_eos = true;
  rp.logits = logits;
  return rp;
}

const char* kPrompts[] = {"once upon a time there was", "the quick brown fox", "a b c d e f g h"};

Job basic_job(const Model& m, bool encoder) {
  Job j;
  if (encoder) {
    std::vector<EmbedInput> in;
    for (const char* p : kPrompts) in.push_back({tokens_of(m, p), {}});
    j.embeds.push_back(in);
    j.embeds.push_back({{tokens_of(m, "hello world"), {}}});
  } else {
    for (const char* p : kPrompts) j.reqs.push_back(greedy(tokens_of(m, p), 12, kLogitsPrompt | kLogitsGenerated));
  }
  return j;
}

// Largest |a - b| over |b|'s largest magnitude, per row of n.
bool compare_rows(const std::vector<float>& tp, const std::vector<float>& one, size_t n, bool f32,
                  const std::string& what, double* worst) {
  if (tp.size() != one.size()) {
    fail(what + ": " + std::to_string(tp.size()) + " values against the single process's " +
         std::to_string(one.size()));
    return false;
  }
  bool ok = true;
  int n_bad = 0;
  for (size_t r = 0; n && r < tp.size() / n; ++r) {
    double amax = 0, dmax = 0;
    for (size_t i = 0; i < n; ++i) {
      amax = std::max(amax, std::fabs(static_cast<double>(one[r * n + i])));
      const double d = std::fabs(static_cast<double>(tp[r * n + i]) - one[r * n + i]);
      dmax = std::isnan(d) ? 1e30 : std::max(dmax, d);
    }
    const double tol = f32 ? kF32Tol : kQ4Rel * std::max(1.0, amax);
    *worst = std::max(*worst, dmax);
    if (dmax > tol && n_bad++ == 0) {
      char b[256];
      std::snprintf(b, sizeof b, ": row %zu differs by %.3g (bound %.3g, largest |value| %.3g)", r, dmax, tol, amax);
      fail(what + b);
      ok = false;
    }
  }
  if (n_bad > 1) std::fprintf(stderr, "     (%d rows over the bound in all)\n", n_bad);
  return ok;
}

bool same_tokens(const Out& tp, const Out& one, const std::string& what) {
  bool ok = tp.tokens == one.tokens;
  if (!ok) {
    for (size_t i = 0; i < std::min(tp.tokens.size(), one.tokens.size()); ++i)
      if (tp.tokens[i] != one.tokens[i]) {
        std::string s = what + ": request " + std::to_string(i) + " tokens differ: tp";
        for (int32_t t : tp.tokens[i]) s += " " + std::to_string(t);
        s += " / single";
        for (int32_t t : one.tokens[i]) s += " " + std::to_string(t);
        fail(s);
        return false;
      }
    fail(what + ": request counts differ");
  }
  return ok;
}

EngineParams base_params() {
  EngineParams ep;
  ep.n_threads = 1;
  return ep;
}

// Loads `c` on every rank with the MPI communicator. Returns null (on every
// rank) when the load failed with Unsupported on every rank (the message in
// *err); a load that fails on some ranks only ends the job.
std::unique_ptr<Model> load_tp(const Case& c, std::string* err) {
  LoadOptions lo;
  std::unique_ptr<Model> m;
  Status st = Status::Ok;
  try {
    if (!g_dry) lo.comm = new_comm();
    m = load_prepared(model_path(c), lo);
  } catch (const Error& e) {
    st = e.status();
    *err = e.what();
  }
  const int n_failed = sum_ranks(m ? 0 : 1);
  if (n_failed != 0 && n_failed != g_size)
    fatal(c.name + ": the load failed on " + std::to_string(n_failed) + " of " + std::to_string(g_size) +
          " ranks: " + (m ? std::string("(this rank loaded)") : *err));
  if (!m && st != Status::Unsupported && st != Status::InvalidArgument) {
    fatal(c.name + ": tensor-parallel load failed: " + *err);
  }
  return m;
}

// One tensor-parallel run of `job` on every rank (rank 0 engine, others
// follow), then rank 0's single-process run. Returns rank 0's pair.
struct Pair {
  Out tp, one;
};
Pair run_both(const Model& tpm, const std::string& path, EngineParams ep, const Job& job, const std::string& what,
              const Model* whole = nullptr) {
  Pair p;
  EngineParams tp_ep = ep;
  tp_ep.tensor_parallel = g_dry ? 0 : g_size;
  try {
    if (g_rank == 0)
      p.tp = run_engine(tpm, tp_ep, job);
    else
      follow_engine(tpm, tp_ep);
  } catch (const std::exception& e) {
    fatal(what + ": tensor-parallel run: " + e.what());
  }
  if (g_rank == 0) {
    try {
      std::unique_ptr<Model> own;
      if (!whole) {
        own = load_prepared(path);
        whole = own.get();
      }
      p.one = run_engine(*whole, ep, job);
    } catch (const std::exception& e) {
      fatal(what + ": single-process run: " + e.what());
    }
  }
  return p;
}

// ---------------------------------------------------------------- cases

void check_case(const Case& c) {
  const bool q4 = c.type == DType::Q4_0;
  const bool expect_heads_error = !heads_splittable(c.preset, g_size);
  const bool expect_block_error = q4 && !q4_splittable(c.preset, g_size);
  const std::string what = c.name + (q4 ? " q4_0" : " f32");
  write_model(c);
  std::string err;
  std::unique_ptr<Model> m = load_tp(c, &err);
  if (!m) {
    if (expect_block_error && err.find("cannot be split") != std::string::npos) {
      note("ok   " + what + ": refused as expected (" + err + ")");
    } else if (expect_heads_error) {
      note("ok   " + what + ": refused (" + err + ")");
    } else {
      fail(what + ": tensor-parallel load refused a splittable shape: " + err);
    }
    return;
  }
  if (expect_block_error && !g_dry) {
    fail(what + ": loaded, but its Q4_0 slices cut 32-value blocks (Unsupported \"cannot be split\" expected)");
    // go on: the numbers say whether the load did something sensible
  }
  if (!g_dry && (m->config().tp_size != g_size || m->config().tp_rank != g_rank))
    fail(what + ": config tp_size/tp_rank " + std::to_string(m->config().tp_size) + "/" +
         std::to_string(m->config().tp_rank));
  const bool enc = is_encoder(c.preset);
  const Job job = basic_job(*m, enc);
  Pair p = run_both(*m, model_path(c), base_params(), job, what);
  if (g_rank != 0) return;
  double worst = 0;
  bool ok = true;
  if (enc) {
    ok = p.tp.embed.size() == p.one.embed.size();
    if (!ok) fail(what + ": embedding job counts differ");
    for (size_t i = 0; ok && i < p.one.embed.size(); ++i)
      ok = compare_rows(p.tp.embed[i], p.one.embed[i], static_cast<size_t>(c.preset.n_embd), true,
                        what + " embeddings of job " + std::to_string(i), &worst);
  } else {
    ok = same_tokens(p.tp, p.one, what);
    const size_t nv = static_cast<size_t>(m->config().n_vocab);
    for (size_t i = 0; i < p.one.logits.size(); ++i) {
      if (p.one.logits[i].empty()) fail(what + ": no logits rows kept");
      ok = compare_rows(p.tp.logits[i], p.one.logits[i], nv, !q4, what + " logits of request " + std::to_string(i),
                        &worst) && ok;
    }
  }
  if (ok) {
    char b[160];
    std::snprintf(b, sizeof b, "ok   %s: %s identical, largest difference %.3g, %llu collectives", what.c_str(),
                  enc ? "embeddings" : "tokens", worst, static_cast<unsigned long long>(p.tp.stats.tp_comm_calls));
    note(b);
  }
}

// The engine's features over TP against the single process, on `c`.
void check_features(const Case& c) {
  const std::string base = c.name + (c.type == DType::Q4_0 ? " q4_0" : " f32");
  write_model(c);
  std::string err;
  std::unique_ptr<Model> m = load_tp(c, &err);
  if (!m) {
    fail(base + ": features: load refused: " + err);
    return;
  }
  std::unique_ptr<Model> whole;
  if (g_rank == 0) whole = load_prepared(model_path(c));

  // 1. Sixteen prompts with a shared 40-token prefix, a KV pool of 24 blocks
  //    of 16: continuous batching preempts, the prefix cache shares.
  {
    Job j;
    std::vector<int32_t> prefix = tokens_of(*m, "in a small town by the sea there lived an old man who");
    while (prefix.size() < 40) prefix.push_back(prefix[1 + prefix.size() % 7]);
    for (int i = 0; i < 16; ++i) {
      std::vector<int32_t> pr = prefix;
      auto suf = m->tokenizer().encode(std::string("story number ") + std::to_string(i * 7 + 3), false);
      pr.insert(pr.end(), suf.begin(), suf.end());
      j.reqs.push_back(greedy(pr, 24 + i % 5, 0));
    }
    EngineParams ep = base_params();
    ep.kv_blocks = 24;
    ep.block_size = 16;
    ep.max_seqs = 16;
    ep.prefix_caching = true;
    const std::string what = base + " batch of 16, preemption, prefix cache";
    Pair p = run_both(*m, "", ep, j, what, whole.get());
    if (g_rank == 0 && same_tokens(p.tp, p.one, what)) {
      int cached = 0;
      for (int v : p.tp.n_cached) cached += v;
      note("ok   " + what + ": tokens identical (tp: " + std::to_string(p.tp.stats.n_preemptions) +
           " preemptions, " + std::to_string(cached) + " prompt tokens from the prefix cache)");
      if (p.tp.stats.n_preemptions == 0 || p.one.stats.n_preemptions == 0)
        fail(what + ": no preemption happened (the test's KV budget no longer forces one)");
      if (cached == 0) fail(what + ": no prompt token came from the prefix cache");
    }
  }
  // 2. int8 KV.
  {
    EngineParams ep = base_params();
    ep.kv_type = KvType::I8;
    const std::string what = base + " int8 KV";
    Pair p = run_both(*m, "", ep, basic_job(*m, false), what, whole.get());
    if (g_rank == 0 && same_tokens(p.tp, p.one, what)) note("ok   " + what + ": tokens identical");
  }
  // 3. n-gram speculation (prompts that repeat themselves) and 4. LayerSkip.
  for (SpecMethod sm : {SpecMethod::Ngram, SpecMethod::LayerSkip}) {
    EngineParams ep = base_params();
    ep.spec = sm;
    ep.spec_k = 4;
    if (sm == SpecMethod::LayerSkip) ep.spec_skip_layers = std::to_string(c.preset.n_layer - 1);
    Job j;
    for (const char* t : {"a b c a b c a b c a b c a b", "one two three one two three one two"})
      j.reqs.push_back(greedy(tokens_of(*m, t), 32, 0));
    const std::string what = base + (sm == SpecMethod::Ngram ? " n-gram speculation" : " LayerSkip speculation");
    Pair p = run_both(*m, "", ep, j, what, whole.get());
    if (g_rank == 0 && same_tokens(p.tp, p.one, what)) {
      note("ok   " + what + ": tokens identical (" + std::to_string(p.tp.stats.spec.drafted) + " drafted, " +
           std::to_string(p.tp.stats.spec.accepted) + " accepted)");
      if (p.tp.stats.spec.drafted == 0) fail(what + ": nothing was drafted");
    }
  }
  // 5. A grammar-constrained request (a JSON object of one integer field).
  {
    auto tg = std::make_shared<TokenGrammar>();
    tg->grammar = Grammar::parse("root ::= \"{\\\"n\\\": \" [1-9] [0-9]* \"}\"");
    const Tokenizer& tok = m->tokenizer();
    const int32_t n = tok.n_vocab();
    tg->pieces.resize(static_cast<size_t>(n));
    tg->is_eog.resize(static_cast<size_t>(n));
    for (int32_t i = 0; i < n; ++i) {
      tg->is_eog[static_cast<size_t>(i)] = tok.is_eog(i) ? 1 : 0;
      if (!tok.is_control(i)) tg->pieces[static_cast<size_t>(i)] = tok.token_to_piece(i, false);
    }
    Job j;
    RequestParams rp = greedy(tokens_of(*m, "the answer as json"), 16, 0);
    rp.ignore_eos = false;
    rp.sampling.grammar = tg;
    j.reqs.push_back(rp);
    const std::string what = base + " grammar-constrained";
    Pair p = run_both(*m, "", base_params(), j, what, whole.get());
    if (g_rank == 0 && same_tokens(p.tp, p.one, what)) {
      const std::string text = m->tokenizer().decode(p.tp.tokens[0]);
      note("ok   " + what + ": tokens identical (" + text + ")");
      if (text.rfind("{\"n\": ", 0) != 0) fail(what + ": the output does not follow the grammar: " + text);
    }
  }
}

// Each rank's RSS growth over load + engine + run against the whole model's
// weight bytes. The engine is small (one sequence, 64-token batches, 16 KV
// blocks): what is measured is the weights, not the workspace or the cache.
// Rank 0 then measures the single process the same way (printed, for scale).
std::string rss_line(const Rss& before, const Rss& after, double weights) {
  char b[200];
  std::snprintf(b, sizeof b, "grew %.1f MB (anon %+.1f MB, file-backed %+.1f MB) for %.1f MB of weights: %.3f x",
                (after.rss - before.rss) / 1024.0, (after.anon - before.anon) / 1024.0,
                (after.file - before.file) / 1024.0, weights / 1e6, (after.rss - before.rss) * 1024.0 / weights);
  return b;
}

void check_rss(const Case& c) {
  const std::string what = c.name + (c.type == DType::Q4_0 ? " q4_0" : " f32") + " memory";
  write_model(c);
  Job j;
  EngineParams ep = base_params();
  ep.max_seqs = 1;
  ep.max_batch_tokens = 64;
  ep.kv_blocks = 16;
  // MPI maps its shared-memory segments and grows its buffers on first use:
  // that is the transport's, not the model's, so it happens before the
  // baseline (the passes' largest messages: a step's all-reduce, the
  // logits gather).
  {
    std::vector<float> warm(size_t{1} << 20, 1.0f), all(warm.size() * static_cast<size_t>(g_size));
    g_comm->check(g_comm->all_reduce_sum_f32(warm.data(), warm.size()));
    g_comm->check(g_comm->all_gather(warm.data(), warm.size() * sizeof(float), all.data()));
    g_comm->check(g_comm->broadcast(warm.data(), warm.size() * sizeof(float), 0));
  }
  const Rss before = read_rss();
  std::string err;
  std::unique_ptr<Model> m = load_tp(c, &err);
  if (!m) {
    fail(what + ": load refused: " + err);
    return;
  }
  j.reqs.push_back(greedy(tokens_of(*m, "once upon a time"), 8, 0));
  EngineParams tp_ep = ep;
  tp_ep.tensor_parallel = g_dry ? 0 : g_size;
  try {
    if (g_rank == 0)
      run_engine(*m, tp_ep, j);
    else
      follow_engine(*m, tp_ep);
  } catch (const std::exception& e) {
    fatal(what + ": " + e.what());
  }
  const Rss after = read_rss();
  m.reset();
  // The whole model: its weight bytes, and the single process's growth.
  float wb = 0;
  barrier();
  std::string single;
  if (g_rank == 0) {
    const Rss b1 = read_rss();
    std::unique_ptr<Model> whole = load_prepared(model_path(c));
    wb = static_cast<float>(whole->n_bytes());
    run_engine(*whole, ep, j);
    single = rss_line(b1, read_rss(), wb);
  }
  g_comm->check(g_comm->broadcast(&wb, sizeof wb, 0));
  const double ratio = (after.rss - before.rss) * 1024.0 / wb;
  for (int r = 0; r < g_size; ++r) {
    if (r == g_rank) {
      std::printf("%s %s: rank %d %s\n", ratio <= 0.6 ? "ok  " : "FAIL", what.c_str(), g_rank,
                  rss_line(before, after, wb).c_str());
      std::fflush(stdout);
    }
    barrier();
  }
  note("     " + what + ": the single process " + single);
  if (ratio > 0.6) fail(what + ": RSS growth above 0.6 x the weights");
}

}  // namespace

struct Options {
  std::string only;
  bool rss = true, rss_only = false;
};

// One rank's whole run over the harness communicator `comm`.
int rank_main(std::shared_ptr<Communicator> comm, const Options& opt) {
  g_comm = std::move(comm);
  g_comm->set_timeout_ms(600000);
  g_rank = g_comm->rank();
  const std::string& only = opt.only;
  const bool rss = opt.rss && !g_local, rss_only = opt.rss_only;
  if (g_rank == 0) {
    std::string cmd = "mkdir -p '" + g_dir + "'";
    if (std::system(cmd.c_str()) != 0) return 1;
  }
  barrier();

  std::vector<Case> cases;
  const char* names[] = {"tiny",       "tiny-llama3", "tiny-mistral", "tiny-qwen2",   "tiny-qwen3",     "tiny-phi3",
                         "tiny-gemma", "tiny-gemma2", "mixtral-tiny", "tiny-bert",    "tiny-nomic-bert"};
  for (const char* n : names) {
    const SynthPreset* p = find_synth_preset(n);
    if (!p) {
      fail(std::string("no synth preset ") + n);
      continue;
    }
    for (DType t : {DType::F32, DType::Q4_0}) {
      cases.push_back({n, *p, t});
      SynthPreset v = *p;
      std::string vname = n;
      // A split-friendly variant of each Q4_0 shape the split refuses.
      if (t == DType::Q4_0 && !q4_splittable(v, g_size)) {
        v.n_ff = 64 * g_size;
        vname += "+ff" + std::to_string(v.n_ff);
      }
      if (vname != n) cases.push_back({vname, v, t});
    }
  }
  if (!rss_only) {
    for (const Case& c : cases) {
      if (!only.empty() && (c.name + (c.type == DType::F32 ? " f32" : " q4_0")).find(only) == std::string::npos)
        continue;
      check_case(c);
    }
    if (only.empty() || std::string("features").find(only) != std::string::npos) {
      check_features({"tiny", *find_synth_preset("tiny"), DType::F32});
      SynthPreset t = *find_synth_preset("tiny");
      t.n_ff = 64 * g_size;
      check_features({"tiny+ff" + std::to_string(t.n_ff), t, DType::Q4_0});
    }
  }
  if (rss || rss_only) {
    // Big enough for the weights to dominate the RSS (a 1024-wide llama
    // with TinyLlama's head layout and a small vocabulary), small enough for
    // CI: 4 layers, 68M parameters (38 MB in Q4_0, 272 MB in F32).
    SynthPreset big{"tp-check", "llama", 1024, 4, 16, 4, 4096, 4096, 512, 10000.0f, 1e-5f};
    // Q4_0 with 12 layers (98 MB): a rank's fixed costs (engine, workspace,
    // communicator, about 10 MB) would otherwise weigh like a third of a
    // 39 MB model's share.
    SynthPreset big_q = big;
    big_q.name = "tp-check12";
    big_q.n_layer = 12;
    check_rss({"tp-check12", big_q, DType::Q4_0});
    check_rss({"tp-check", big, DType::F32});
  }
  const int total = sum_ranks(g_failures);
  if (g_rank == 0) std::printf("%s: %d failure(s) over %d ranks\n", total ? "FAILED" : "PASSED", total, g_size);
  return total ? 1 : 0;
}

int main(int argc, char** argv) {
  if (argc >= 2 && std::strcmp(argv[1], "--mpi-built") == 0) return mpi_built() ? 0 : 77;
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s DIR [--only SUBSTR] [--no-rss] [--rss-only] [--dry | --local]\n", argv[0]);
    return 2;
  }
  g_dir = argv[1];
  Options opt;
  for (int i = 2; i < argc; ++i) {
    if (std::strcmp(argv[i], "--only") == 0 && i + 1 < argc) opt.only = argv[++i];
    if (std::strcmp(argv[i], "--no-rss") == 0) opt.rss = false;
    if (std::strcmp(argv[i], "--rss-only") == 0) opt.rss_only = true;
    if (std::strcmp(argv[i], "--dry") == 0) g_dry = true;
    if (std::strcmp(argv[i], "--local") == 0) g_local = true;
  }
  if (g_dry) {
    g_size = 2;  // the cases of two ranks, both sides run whole
    return rank_main(make_single_comm(), opt);
  }
  if (g_local) {
    g_size = 2;
    auto group = make_local_group(g_size);
    std::vector<int> rc(static_cast<size_t>(g_size));
    std::vector<std::thread> ts;
    for (int r = 0; r < g_size; ++r)
      ts.emplace_back([&, r] { rc[static_cast<size_t>(r)] = rank_main(group[static_cast<size_t>(r)], opt); });
    for (auto& t : ts) t.join();
    return *std::max_element(rc.begin(), rc.end());
  }
  if (!mpi_built()) {
    std::printf("SKIPPED: this build has no MPI (INFER_MPI)\n");
    return 77;
  }
  std::shared_ptr<Communicator> comm;
  try {
    comm = make_mpi_comm();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "FAIL: make_mpi_comm: %s\n", e.what());
    return 1;
  }
  g_size = comm->size();
  if (g_size < 2) {
    std::fprintf(stderr, "FAIL: run under mpirun -np 2 or more (size %d)\n", g_size);
    return 1;
  }
  return rank_main(comm, opt);
}
