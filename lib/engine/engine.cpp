#include "engine/engine.h"

#include <algorithm>
#include <new>

#include "core/fault.h"
#include "core/log.h"
#include "engine/backends.h"
#include "engine/kv_budget.h"

namespace infer {

namespace {

int32_t context_length(const Model& model, const EngineParams& params) {
  int32_t n = params.n_ctx > 0 ? params.n_ctx : model.config().n_ctx_train;
  return n > 0 ? n : 2048;
}

KvPlan plan_kv(const Model& model, const EngineParams& params, int32_t n_ctx) {
  if (model.vocab_only()) raise(Status::InvalidArgument, "the model was loaded vocab_only: it cannot generate");
  KvSizing sizing = params.kv_sizing(n_ctx);
  if (model.config().encoder_only) {  // embeddings only: no request ever holds KV
    sizing.kv_blocks = 1;
    sizing.host_budget_bytes = 0;
  }
  return KvPlan::make(model.kv_layout(), sizing, model.config().sliding_window);
}

SchedulerConfig scheduler_config(const Model& model, const EngineParams& p, const Backend& backend) {
  SchedulerConfig c;
  c.policy = p.policy;
  c.max_seqs = p.max_seqs;
  c.max_batch_tokens = p.max_batch_tokens;
  c.row_multiple = p.step_row_multiple > 0 ? p.step_row_multiple : backend.preferred_row_multiple();
  c.batch_timeout_ms = p.batch_timeout_ms;
  c.prefix_caching = p.prefix_caching;
  c.window = model.config().sliding_window;
  c.recurrent = model.config().recurrent();
  c.state_only = model.config().attention_free();
  return c;
}

SpecConfig spec_config(const EngineParams& p, int32_t n_ctx) {
  SpecConfig c;
  c.method = p.spec;
  c.k = p.spec_k;
  c.ngram_max = p.spec_ngram_max;
  c.ngram_min = p.spec_ngram_min;
  c.skip_layers = p.spec_skip_layers;
  c.draft_model = p.draft_model;
  c.max_batch = p.spec_max_batch;
  c.n_ctx = n_ctx;
  c.max_batch_tokens = p.max_batch_tokens;
  c.kv = p.kv_sizing(n_ctx);
  c.prefix_caching = p.prefix_caching;
  return c;
}

}  // namespace

uint64_t tp_params_hash(const EngineParams& p) {
  // What every rank must share: what shapes the KV pool and the passes.
  // Threads, timeouts and the draft model (rank 0's alone) may differ.
  uint64_t h = 1469598103934665603ull;
  const auto mix = [&h](int64_t v) {
    for (int i = 0; i < 8; ++i) h = (h ^ static_cast<uint8_t>(v >> (8 * i))) * 1099511628211ull;
  };
  mix(static_cast<int64_t>(p.kv_budget_bytes));
  mix(p.kv_blocks);
  mix(p.block_size);
  mix(static_cast<int64_t>(p.kv_type));
  mix(static_cast<int64_t>(p.host_kv_budget_bytes));
  mix(p.max_seqs);
  mix(p.max_batch_tokens);
  mix(p.n_ctx);
  mix(p.prefix_caching);
  mix(static_cast<int64_t>(p.spec));
  for (char ch : p.spec_skip_layers) mix(ch);
  return h;
}

void check_tensor_parallel(const Model& model, const EngineParams& p, const char* backend) {
  const TpGroup* tp = model.tp();
  if (!tp) return;
  if (p.tensor_parallel != 0 && p.tensor_parallel != tp->size())
    raise(Status::InvalidArgument, "tensor_parallel is %d but the model was loaded split %d ways", p.tensor_parallel,
          tp->size());
  if (std::string(backend) != "cpu")
    raise(Status::Unsupported, "tensor parallelism runs on the CPU backend (this engine's is %s)", backend);
  if (model.config().recurrent())
    raise(Status::Unsupported, "tensor parallelism does not split state-space (%s) models", model.config().arch.c_str());
  if (p.draft_model && p.draft_model->tp())
    raise(Status::InvalidArgument, "the draft model runs on rank 0 alone: load it whole (without tensor_parallel)");
}

Engine::Engine(const Model& model, const EngineParams& params)
    : model_(model),
      params_((params.validate(), params)),
      n_ctx_(context_length(model, params)),
      kv_plan_(plan_kv(model, params, n_ctx_)),
      pool_(params.n_threads),
      backend_(make_backend(model.backend(), pool_)),
      kv_(make_kv_cache(kv_plan_, *backend_)),
      spec_(spec_config(params, n_ctx_), model, *backend_, *kv_, ws_),
      sched_(scheduler_config(model, params, *backend_), *kv_),
      finisher_(model.tokenizer(), model.config().n_vocab, n_ctx_),
      created_(Clock::now()),
      embedder_(std::make_unique<Embedder>(model, *backend_)) {
  if (TpGroup* tp = model.tp()) start_tensor_parallel(*tp);
  // The first request should not pay the page faults of the step's buffers.
  if (!model.vocab_only()) model.reserve_workspace(ws_, *backend_, params.max_batch_tokens);
  const KvLayout& layout = kv_->layout();
  log(LogLevel::Info, "engine: %d %s KV blocks of %d tokens (%.1f MiB), %d host blocks, n_ctx %d, %d threads",
      layout.n_blocks, kv_type_name(layout.type), layout.block_size, kv_plan_.bytes(layout.n_blocks) / 1048576.0,
      layout.n_host_blocks, n_ctx_, pool_.size());
  publish_stats();
}

// Nothing is left unfinished: every request still queued or running ends as
// cancelled, so readers blocked on it wake up (their handles stay valid).
Engine::~Engine() {
  try {
    cancel_all();
  } catch (...) {
  }
  if (tp_started_) {
    TpGroup& tp = *model_.tp();
    try {
      tp.announce_stop();  // the followers return from follow_engine
    } catch (const Error& e) {
      log(LogLevel::Error, "engine: tensor parallel: %s", e.what());
    }
    tp.release_engine();
  }
}

// Rank 0 of a tensor-parallel model: the ranks agree on the parameters
// (follow_engine does the same on theirs), then learn the KV pool's shape
// and, from here on, every block copy the cache makes.
void Engine::start_tensor_parallel(TpGroup& tp) {
  if (!tp.leader())
    raise(Status::InvalidArgument, "rank %d of a tensor-parallel model follows rank 0's engine (follow_engine)",
          tp.rank());
  check_tensor_parallel(model_, params_, backend_->name());
  tp.claim_engine();
  try {
    tp.comm().set_timeout_ms(params_.tp_timeout_ms > 0 ? params_.tp_timeout_ms : 60000);
    tp.agree(tp_params_hash(params_), "the engine parameters");
    kv_->set_copy_observer([&tp](KvTier dt, int d, KvTier st, int s) { tp.record_copy(dt, d, st, s); });
    tp.announce_kv(kv_->layout());
  } catch (...) {
    tp.release_engine();
    throw;
  }
  tp_started_ = true;
  comm_base_ = tp.comm().stats();
}

std::shared_ptr<Sequence> Engine::make_sequence(RequestParams& p) {
  const int32_t n_vocab = model_.config().n_vocab;
  if (model_.config().encoder_only)
    raise(Status::InvalidArgument, "'%s' is an embedding model: it does not generate (embed with it instead)",
          model_.config().arch.c_str());
  if (p.prompt.empty()) raise(Status::InvalidArgument, "the prompt is empty (give at least one token, e.g. BOS)");
  for (int32_t t : p.prompt)
    if (t < 0 || t >= n_vocab) raise(Status::InvalidArgument, "prompt token id %d is out of range [0, %d)", t, n_vocab);
  if (p.max_tokens < 0) raise(Status::InvalidArgument, "max_tokens %d is negative", p.max_tokens);
  if (p.prompt.size() > static_cast<size_t>(n_ctx_))
    raise(Status::InvalidArgument, "the prompt has %zu tokens, more than the context length %d", p.prompt.size(),
          n_ctx_);
  // Blocks the prompt holds at once (a sliding window bounds them).
  const int64_t need =
      kv_plan_.blocks_held(static_cast<int64_t>(p.prompt.size()) + (p.max_tokens > 0 ? 1 : 0), params_.max_batch_tokens);
  if (need > kv_->n_blocks_total())
    raise(Status::OutOfMemory, "the prompt needs %lld KV blocks but the cache has only %d", static_cast<long long>(need),
          kv_->n_blocks_total());
  if (p.logits & ~7u) raise(Status::InvalidArgument, "unknown logits flags 0x%x", p.logits);
  if (p.spec_max_draft < -1 || p.spec_max_draft > 32)
    raise(Status::InvalidArgument, "spec_max_draft %d is out of range [-1, 32]", p.spec_max_draft);
  p.sampling.validate(n_vocab);
  auto req = std::make_shared<Request>(next_id_.fetch_add(1), std::move(p));
  auto seq = std::make_shared<Sequence>(std::move(req), model_.tokenizer(), n_vocab);
  spec_.start(*seq);
  return seq;
}
std::shared_ptr<Request> Engine::submit(RequestParams p) {
  auto s = make_sequence(p);
  std::shared_ptr<Request> r = s->request_ptr();
  std::lock_guard<std::mutex> lock(inbox_mu_);
  inbox_.push_back(std::move(s));
  return r;
}

std::vector<std::shared_ptr<Request>> Engine::submit_n(RequestParams p, int32_t n, std::vector<TokenCallback> callbacks) {
  if (n < 1 || n > params_.max_seqs)
    raise(Status::InvalidArgument, "n = %d samples must be in [1, max_seqs = %d]", n, params_.max_seqs);
  if (!callbacks.empty() && callbacks.size() != static_cast<size_t>(n))
    raise(Status::InvalidArgument, "submit_n: %zu callbacks for %d samples", callbacks.size(), n);
  std::vector<std::shared_ptr<Sequence>> family;
  for (int32_t i = 0; i < n; ++i) {
    RequestParams q = p;
    q.sampling.seed = p.sampling.seed + static_cast<uint64_t>(i);
    if (!callbacks.empty()) q.on_token = std::move(callbacks[i]);
    family.push_back(make_sequence(q));
  }
  std::vector<std::shared_ptr<Request>> out;
  for (auto& s : family) out.push_back(s->request_ptr());
  for (int32_t i = 1; i < n; ++i) family[0]->followers.push_back(family[i]);
  std::lock_guard<std::mutex> lock(inbox_mu_);
  inbox_.push_back(family[0]);
  return out;
}

std::shared_ptr<EmbedJob> Engine::submit_embed(std::vector<EmbedInput> inputs, const EmbedOptions& o) {
  const Pooling pooling = resolve_pooling(model_, o.pooling);
  check_inputs(model_, inputs, o);
  auto job = std::make_shared<EmbedJob>();
  job->inputs = std::move(inputs);
  job->options = o;
  job->pooling = pooling;
  embedder_->prepare(job->inputs, o, pooling, job->result_);
  std::lock_guard<std::mutex> lock(inbox_mu_);
  embed_inbox_.push_back(job);
  return job;
}

void Engine::run_embeds(double gen_ms) {
  {
    std::lock_guard<std::mutex> lock(inbox_mu_);
    for (auto& j : embed_inbox_) embed_jobs_.push_back(std::move(j));
    embed_inbox_.clear();
  }
  while (!embed_jobs_.empty() && embed_jobs_.front()->cancelled()) {
    embed_jobs_.front()->finish(Status::Cancelled, "cancelled");
    embed_jobs_.pop_front();
  }
  if (embed_jobs_.empty()) return;
  // The next inputs, in order, across jobs of the first job's kind.
  const bool rank = embed_jobs_.front()->pooling == Pooling::Rank;
  // Time-fair with generation. Steps that generate earn embedding time
  // equal to theirs (a credit, capped at a second); a pass spends it, sized
  // from the measured cost of a token in earlier passes, and runs only while
  // the credit is positive. An input is never split (an encoder sees a whole
  // text), so a pass may overdraw: the steps after it then generate alone
  // until the credit is back. Under both loads each kind gets about half the
  // machine, whatever the model's or the inputs' size. With nothing
  // generating, every step runs a full pass of max_batch_tokens.
  const size_t max_tokens = static_cast<size_t>(std::max<int32_t>(1, params_.max_batch_tokens));
  size_t budget = max_tokens;
  if (gen_ms > 0) {
    embed_credit_ms_ = std::min(embed_credit_ms_ + gen_ms, 1000.0);
    if (embed_credit_ms_ <= 0) return;
    budget = embed_ms_per_token_ > 0
                 ? std::min(max_tokens, static_cast<size_t>(embed_credit_ms_ / embed_ms_per_token_) + 1)
                 : std::max<size_t>(1, max_tokens / 4);  // no cost measured yet
  } else {
    embed_credit_ms_ = 0;
  }
  std::vector<Embedder::Item> items;
  std::vector<std::pair<EmbedJob*, size_t>> taken;  // job, inputs taken
  size_t tokens = 0;
  for (auto& job : embed_jobs_) {
    if (job->cancelled() || (job->pooling == Pooling::Rank) != rank) continue;
    size_t k = job->next;
    while (k < job->inputs.size() &&
           (items.empty() || tokens + job->inputs[k].tokens.size() <= budget)) {
      items.push_back(Embedder::Item{&job->inputs[k], &job->result_, k, &job->options});
      tokens += job->inputs[k].tokens.size();
      ++k;
    }
    if (k > job->next) taken.emplace_back(job.get(), k);
    if (tokens >= budget) break;
  }
  try {
    fault::point("engine.embed");
    const Clock::time_point t0 = Clock::now();
    embedder_->pass(items);
    const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    if (gen_ms > 0) embed_credit_ms_ -= ms;
    if (tokens > 0) {  // cost per token, smoothed
      const double per = ms / static_cast<double>(tokens);
      embed_ms_per_token_ = embed_ms_per_token_ > 0 ? 0.7 * embed_ms_per_token_ + 0.3 * per : per;
    }
    for (auto& [job, k] : taken) job->next = k;
    ++stats_.n_embed_passes;
    stats_.n_embed_tokens += tokens;
  } catch (const Error& e) {
    for (auto& [job, k] : taken) job->finish(e.status(), e.what());
  } catch (const std::bad_alloc&) {
    for (auto& [job, k] : taken) job->finish(Status::OutOfMemory, "out of memory while computing embeddings");
  } catch (const std::exception& e) {
    for (auto& [job, k] : taken) job->finish(Status::Internal, e.what());
  }
  for (auto it = embed_jobs_.begin(); it != embed_jobs_.end();) {
    EmbedJob& j = **it;
    if (j.next == j.inputs.size() && !j.done()) {
      j.finish(Status::Ok, "");
      ++stats_.n_embed_jobs;
    }
    if (j.done()) {
      it = embed_jobs_.erase(it);
    } else {
      ++it;
    }
  }
}

void Engine::take_inbox() {
  std::vector<std::shared_ptr<Sequence>> arrived;
  {
    std::lock_guard<std::mutex> lock(inbox_mu_);
    arrived.swap(inbox_);
  }
  for (auto& s : arrived) {
    try {
      sched_.enqueue(s);
    } catch (const std::bad_alloc&) {
      // Not queued, so not lost: it (and any followers) ends now, with a reason.
      s->request().finish(FinishReason::Error, Status::OutOfMemory, "out of memory while queueing the request");
      for (auto& f : s->followers)
        f->request().finish(FinishReason::Error, Status::OutOfMemory, "out of memory while queueing the request");
    }
  }
}

// The forward pass of one plan. On failure every request of the step ends
// with the failure's status (an allocation failure: OUT_OF_MEMORY); their
// blocks are released when they retire, so nothing half-written stays cached.
bool Engine::forward(const StepPlan& plan) {
  const int32_t n_vocab = model_.config().n_vocab;
  Status status = Status::Ok;
  std::string message;
  try {
    fault::point("engine.forward");
    logits_.resize(plan.batch.logit_rows.size() * static_cast<size_t>(n_vocab));
    const auto t0 = Clock::now();
    model_.forward(plan.batch, *kv_, *backend_, ws_, logits_.data());
    const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    spec_.record_step(static_cast<int32_t>(plan.batch.size()), ms);
    if (log_enabled(LogLevel::Debug)) {  // one line per step: where serving time goes
      int64_t positions = 0;
      for (size_t i = 0; i < plan.batch.size(); ++i) positions += plan.batch.pos[i] + 1;
      log(LogLevel::Debug, "engine step %llu: %zu rows, %zu sequences, %lld attended positions, forward %.2f ms",
          static_cast<unsigned long long>(stats_.n_steps), plan.batch.size(), plan.entries.size(),
          static_cast<long long>(positions), ms);
    }
    return true;
  } catch (const Error& e) {
    status = e.status();
    message = e.what();
  } catch (const std::bad_alloc&) {
    status = Status::OutOfMemory;
    message = "out of memory in the forward pass";
  } catch (const std::exception& e) {
    status = Status::Internal;
    message = e.what();
  }
  for (const StepPlan::Entry& e : plan.entries) e.seq->request().finish(FinishReason::Error, status, message);
  log(LogLevel::Error, "engine: forward failed: %s", message.c_str());
  return false;
}

// The rows of one speculating entry: row 0 is the last known token, row j
// (1..n) draft j-1. Drafts are decided in order (engine/speculative.h); the
// first rejected one is replaced and ends the step; when all are accepted the
// last row gives one more token, sampled as plain decoding would.
size_t Engine::verify(const StepPlan& plan, size_t first) {
  const size_t n_vocab = static_cast<size_t>(model_.config().n_vocab);
  Sequence& s = *plan.entries[plan.rows[first].entry].seq;
  const int32_t n = plan.entries[plan.rows[first].entry].n_draft;
  if (s.done()) return static_cast<size_t>(n) + 1;  // cancelled: retired at the step's end
  int32_t accepted = 0;
  bool ended = false;
  for (int32_t j = 0; j < n && !ended; ++j) {
    std::optional<DraftVerdict> v;
    if (finisher_.may_take(s)) v = spec_.decide(s, j, logits_.data() + (first + j) * n_vocab, model_.config().n_vocab);
    if (!v) break;
    if (v->accepted) ++accepted;
    ended = !finisher_.emit(s, v->token) || !v->accepted;
  }
  if (accepted == n && !ended) finisher_.sample(s, logits_.data() + (first + n) * n_vocab);
  // Accepted drafts' K/V were computed at the right positions: they count.
  spec_.verified(s, n, accepted);
  stats_.n_spec_recomputed += static_cast<uint64_t>(sched_.verified(s, accepted, accepted < n));
  return static_cast<size_t>(n) + 1;
}

// Logits rows in batch order: stored where the request asked for them;
// sampled where a sequence has consumed all its known tokens.
void Engine::postprocess(const StepPlan& plan) {
  const int32_t n_vocab = model_.config().n_vocab;
  for (size_t i = 0; i < plan.rows.size(); ++i) {
    const StepPlan::Row& row = plan.rows[i];
    Sequence& s = *plan.entries[row.entry].seq;
    const float* lg = logits_.data() + i * static_cast<size_t>(n_vocab);
    if (row.keep) {
      try {
        s.request().add_logits_row(lg, n_vocab);
      } catch (const std::bad_alloc&) {
        s.request().finish(FinishReason::Error, Status::OutOfMemory, "out of memory while storing logits");
      }
      s.next_logit_pos = row.pos + 1;
    }
    if (!row.sample) continue;
    if (plan.entries[row.entry].n_draft > 0) {
      i += verify(plan, i) - 1;
      continue;
    }
    if (s.done()) continue;
    if (!s.followers.empty())
      for (Sequence* f : sched_.fork_followers(s)) {
        f->next_logit_pos = s.next_logit_pos;
        finisher_.sample(*f, lg);
      }
    finisher_.sample(s, lg);
  }
}

// Drafts, then the scheduler's plan. An allocation failure is retried next
// step (what it changed stays consistent: KV reservations are kept, nothing
// counts as computed); if it keeps failing, the requests end with
// OUT_OF_MEMORY rather than wait forever.
StepPlan Engine::plan_step() {
  try {
    spec_.propose(sched_.running());
    StepPlan plan = sched_.schedule();
    plan_failures_ = 0;
    return plan;
  } catch (const std::bad_alloc&) {
    log(LogLevel::Error, "engine: out of memory while planning a step");
    if (++plan_failures_ >= 3) {
      sched_.fail_all(Status::OutOfMemory, "out of memory while planning the engine's steps");
      plan_failures_ = 0;
    }
    return StepPlan{};
  }
}

int Engine::step() {
  take_inbox();
  const StepPlan plan = plan_step();
  const Clock::time_point t_step = Clock::now();
  if (!plan.empty()) {
    if (forward(plan)) {
      for (const StepPlan::Entry& e : plan.entries)
        if (e.begin < e.seq->n_prompt()) stats_.n_prompt_tokens += std::min(e.begin + e.count, e.seq->n_prompt()) - e.begin;
      sched_.computed(plan);
      postprocess(plan);
      sched_.commit_blocks();
    }
    ++stats_.n_steps;
  }
  run_embeds(plan.empty() ? 0.0 : std::chrono::duration<double, std::milli>(Clock::now() - t_step).count());
  // Sequences that finished this step give their blocks back now (or, if
  // that runs out of memory, at the start of the next step).
  try {
    sched_.retire();
    publish_stats();
  } catch (const std::bad_alloc&) {
    log(LogLevel::Error, "engine: out of memory while retiring finished requests");
  }
  std::lock_guard<std::mutex> lock(inbox_mu_);
  return static_cast<int>(sched_.running().size() + sched_.waiting().size() + inbox_.size() + embed_jobs_.size() +
                          embed_inbox_.size());
}

void Engine::run() {
  while (step() > 0) {
  }
}

void Engine::cancel_all() {
  take_inbox();
  {
    std::lock_guard<std::mutex> lock(inbox_mu_);
    for (auto& j : embed_inbox_) embed_jobs_.push_back(std::move(j));
    embed_inbox_.clear();
  }
  for (auto& j : embed_jobs_) j->finish(Status::Cancelled, "cancelled: the engine stopped");
  embed_jobs_.clear();
  sched_.cancel_all();
  publish_stats();
}

void Engine::publish_stats() {
  EngineStats s = stats_;
  s.n_generated_tokens = finisher_.n_emitted();
  s.spec = spec_.counters();
  s.n_draft_recomputed = spec_.n_draft_recomputed();
  s.n_preemptions = sched_.n_preemptions();
  s.n_finished = sched_.n_finished();
  s.n_running = static_cast<int32_t>(sched_.running().size());
  s.n_waiting = static_cast<int32_t>(sched_.waiting().size());
  s.kv = kv_->stats();
  if (tp_started_) {  // this rank's collectives since the engine started
    const CommStats& c = model_.tp()->comm().stats();
    s.tp_comm_calls = c.calls - comm_base_.calls;
    s.tp_comm_bytes = c.bytes - comm_base_.bytes;
    s.tp_comm_seconds = c.seconds - comm_base_.seconds;
  }
  std::lock_guard<std::mutex> lock(stats_mu_);
  published_ = s;
}

EngineStats Engine::stats() const {
  EngineStats s;
  {
    std::lock_guard<std::mutex> lock(stats_mu_);
    s = published_;
  }
  {
    std::lock_guard<std::mutex> lock(inbox_mu_);
    s.n_waiting += static_cast<int32_t>(inbox_.size());
  }
  s.uptime_s = std::chrono::duration<double>(Clock::now() - created_).count();
  return s;
}

int32_t Engine::max_concurrency(int32_t prompt_len, int32_t output_len) const {
  if (prompt_len < 1 || output_len < 0) raise(Status::InvalidArgument, "prompt_len must be >= 1 and output_len >= 0");
  if (prompt_len > n_ctx_) return 0;
  const int64_t n = std::min<int64_t>(static_cast<int64_t>(prompt_len) + output_len, n_ctx_);
  return kv_plan_.concurrency(n, params_.max_seqs);
}

void follow_engine(const Model& model, const EngineParams& params) {
  params.validate();
  TpGroup* tp = model.tp();
  if (!tp) raise(Status::InvalidArgument, "the model is whole (not loaded with tensor_parallel): nothing to follow");
  if (tp->leader()) raise(Status::InvalidArgument, "rank 0 runs the engine; ranks 1..%d follow it", tp->size() - 1);
  ThreadPool pool(params.n_threads);
  std::unique_ptr<Backend> be = make_backend(model.backend(), pool);
  check_tensor_parallel(model, params, be->name());
  tp->claim_engine();
  struct Release {
    TpGroup* tp;
    ~Release() { tp->release_engine(); }
  } release{tp};
  tp->comm().set_timeout_ms(params.tp_timeout_ms > 0 ? params.tp_timeout_ms : 60000);
  tp->agree(tp_params_hash(params), "the engine parameters");
  tp->follow(model, *be);
}

}  // namespace infer
