#include "engine/engine.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <new>

#include "core/fault.h"
#include "core/log.h"
#include "engine/backends.h"

namespace infer {

void EngineParams::validate() const {
  if (n_threads < 0 || n_threads > 1024) raise(Status::InvalidArgument, "n_threads %d is out of range", n_threads);
  if (block_size < 1 || block_size > 1024)
    raise(Status::InvalidArgument, "kv_block_size %d is out of range [1, 1024]", block_size);
  if (kv_blocks < 0) raise(Status::InvalidArgument, "kv_blocks %d is negative", kv_blocks);
  if (kv_type != KvType::F32 && kv_type != KvType::F16 && kv_type != KvType::I8)
    raise(Status::InvalidArgument, "unknown KV element type %d", static_cast<int>(kv_type));
  if (max_seqs < 1 || max_seqs > 65536) raise(Status::InvalidArgument, "max_seqs %d is out of range", max_seqs);
  if (max_batch_tokens < 1 || max_batch_tokens > (1 << 20))
    raise(Status::InvalidArgument, "max_batch_tokens %d is out of range", max_batch_tokens);
  if (n_ctx < 0) raise(Status::InvalidArgument, "n_ctx %d is negative", n_ctx);
  if (policy != SchedPolicy::Continuous && policy != SchedPolicy::Static && policy != SchedPolicy::Dynamic)
    raise(Status::InvalidArgument, "unknown scheduling policy %d", static_cast<int>(policy));
  if (!(batch_timeout_ms >= 0) || batch_timeout_ms > 3.6e6)
    raise(Status::InvalidArgument, "batch_timeout_ms must be in [0, 3600000]");
  if (step_row_multiple < 0 || step_row_multiple > 4096)
    raise(Status::InvalidArgument, "step_row_multiple %d is out of range [0, 4096]", step_row_multiple);
  if (spec != SpecMethod::None && spec != SpecMethod::Ngram && spec != SpecMethod::LayerSkip &&
      spec != SpecMethod::Draft)
    raise(Status::InvalidArgument, "unknown speculative method %d", static_cast<int>(spec));
  if (spec_k < 1 || spec_k > 32) raise(Status::InvalidArgument, "spec_k %d is out of range [1, 32]", spec_k);
  if (spec_ngram_min < 1 || spec_ngram_max < spec_ngram_min || spec_ngram_max > 64)
    raise(Status::InvalidArgument, "n-gram lengths must satisfy 1 <= min (%d) <= max (%d) <= 64", spec_ngram_min,
          spec_ngram_max);
  if (spec_max_batch < 0) raise(Status::InvalidArgument, "spec_max_batch %d is negative", spec_max_batch);
}

namespace {

// A draft model's proposal: the most likely token of a logits row.
int32_t argmax_row(const float* lg, int32_t n_vocab) {
  return static_cast<int32_t>(std::max_element(lg, lg + n_vocab) - lg);
}

int32_t context_length(const Model& model, const EngineParams& params) {
  int32_t n = params.n_ctx > 0 ? params.n_ctx : model.config().n_ctx_train;
  return n > 0 ? n : 2048;
}

// The KV pool: kv_blocks, else the byte budget, else room for max_seqs full
// contexts capped at 1 GiB. (64-bit math: n_ctx may be as large as INT32_MAX.)
std::unique_ptr<KvCache> make_kv(const Model& model, const EngineParams& params, int32_t n_ctx, Backend& backend) {
  if (model.vocab_only()) raise(Status::InvalidArgument, "the model was loaded vocab_only: it cannot generate");
  KvLayout layout = model.kv_layout();
  layout.block_size = params.block_size;
  layout.type = params.kv_type;
  const uint64_t per_block = layout.block_bytes();
  if (per_block == 0) raise(Status::InvalidArgument, "the model has an empty KV layout");
  uint64_t n_blocks = static_cast<uint64_t>(params.kv_blocks);
  if (n_blocks == 0) {
    uint64_t budget = params.kv_budget_bytes;
    if (budget == 0) {
      const uint64_t full = static_cast<uint64_t>(params.max_seqs) * (static_cast<uint64_t>(n_ctx) + params.block_size) /
                            params.block_size;
      n_blocks = std::min<uint64_t>(full, (1ull << 30) / per_block);
    } else {
      n_blocks = budget / per_block;
    }
  }
  if (n_blocks < 1) raise(Status::InvalidArgument, "the KV budget is smaller than one block (%llu bytes)",
                          static_cast<unsigned long long>(per_block));
  if (n_blocks > (1u << 30)) raise(Status::InvalidArgument, "the KV budget is too large");
  layout.n_blocks = static_cast<int>(n_blocks);
  const uint64_t host_blocks = params.host_kv_budget_bytes / per_block;
  if (host_blocks > (1u << 30)) raise(Status::InvalidArgument, "the host KV budget is too large");
  layout.n_host_blocks = static_cast<int>(host_blocks);
  // The books here, the bytes in the backend's memory.
  return std::make_unique<KvCache>(layout, [&backend](const KvLayout& l, int n, KvTier tier) {
    return backend.make_kv_memory(l, n, tier);
  });
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
  return c;
}

}  // namespace

Engine::Engine(const Model& model, const EngineParams& params)
    : model_(model),
      params_(params),
      n_ctx_(context_length(model, params)),
      pool_((params.validate(), params.n_threads)),
      backend_(make_backend(model.backend(), pool_)),
      kv_(make_kv(model, params, n_ctx_, *backend_)),
      sched_(scheduler_config(model, params, *backend_), *kv_),
      created_(Clock::now()) {
  // The first request should not pay the page faults of the step's buffers.
  if (!model.vocab_only()) model.reserve_workspace(ws_, *backend_, params.max_batch_tokens);
  if (params.spec == SpecMethod::Ngram) drafter_ = std::make_unique<NgramDrafter>(params.spec_ngram_max, params.spec_ngram_min);
  if (params.spec == SpecMethod::LayerSkip) {
    if (params.spec_skip_layers.empty())
      raise(Status::InvalidArgument, "layer-skip speculation needs the layers to skip (e.g. \"4-17\")");
    skip_layers_ = parse_layer_list(params.spec_skip_layers, model.config().n_layer);
  }
  if (params.spec == SpecMethod::Draft) {
    const Model* d = params.draft_model;
    if (!d) raise(Status::InvalidArgument, "draft-model speculation needs a draft model");
    if (d->vocab_only()) raise(Status::InvalidArgument, "the draft model was loaded vocab_only: it cannot run");
    check_draft_vocab(model.tokenizer(), d->tokenizer());
    // Room for every sequence's whole context plus its drafts, within 256 MiB.
    KvLayout layout = d->kv_layout();
    layout.block_size = params.block_size;
    layout.type = params.kv_type;
    const uint64_t per_block = std::max<uint64_t>(1, layout.block_bytes());
    const uint64_t per_seq = (static_cast<uint64_t>(n_ctx_) + params.spec_k + params.block_size) / params.block_size;
    uint64_t n = static_cast<uint64_t>(params.max_seqs) * per_seq;
    n = std::max<uint64_t>(1, std::min<uint64_t>({n, (256ull << 20) / per_block, 1u << 30}));
    layout.n_blocks = static_cast<int>(n);
    layout.n_host_blocks = 0;
    Backend* be = backend_.get();
    draft_kv_ = std::make_unique<KvCache>(layout, [be](const KvLayout& l, int nb, KvTier tier) {
      return be->make_kv_memory(l, nb, tier);
    });
  }
  const KvLayout& layout = kv_->layout();
  log(LogLevel::Info, "engine: %d %s KV blocks of %d tokens (%.1f MiB), %d host blocks, n_ctx %d, %d threads",
      layout.n_blocks, kv_type_name(layout.type), layout.block_size, kv_->bytes_total() / 1048576.0,
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
}

std::shared_ptr<Sequence> Engine::make_sequence(RequestParams& p) {
  const int32_t n_vocab = model_.config().n_vocab;
  if (p.prompt.empty()) raise(Status::InvalidArgument, "the prompt is empty (give at least one token, e.g. BOS)");
  for (int32_t t : p.prompt)
    if (t < 0 || t >= n_vocab) raise(Status::InvalidArgument, "prompt token id %d is out of range [0, %d)", t, n_vocab);
  if (p.max_tokens < 0) raise(Status::InvalidArgument, "max_tokens %d is negative", p.max_tokens);
  if (p.prompt.size() > static_cast<size_t>(n_ctx_))
    raise(Status::InvalidArgument, "the prompt has %zu tokens, more than the context length %d", p.prompt.size(),
          n_ctx_);
  const int32_t n_prompt = static_cast<int32_t>(p.prompt.size());
  // Blocks the prompt holds at once (a sliding window bounds them).
  const int64_t window = model_.config().sliding_window;
  int64_t need = kv_->blocks_for(n_prompt + (p.max_tokens > 0 ? 1 : 0));
  if (window > 0)
    need = std::min<int64_t>(need, (window + params_.max_batch_tokens + params_.block_size - 1) / params_.block_size + 1);
  if (need > kv_->n_blocks_total())
    raise(Status::OutOfMemory, "the prompt needs %lld KV blocks but the cache has only %d", static_cast<long long>(need),
          kv_->n_blocks_total());
  if (p.logits & ~7u) raise(Status::InvalidArgument, "unknown logits flags 0x%x", p.logits);
  if (p.spec_max_draft < -1 || p.spec_max_draft > 32)
    raise(Status::InvalidArgument, "spec_max_draft %d is out of range [-1, 32]", p.spec_max_draft);
  p.sampling.validate(n_vocab);
  auto req = std::make_shared<Request>(next_id_.fetch_add(1), std::move(p), model_.tokenizer());
  auto seq = std::make_shared<Sequence>(std::move(req), n_vocab);
  // Speculation needs every emitted token to come out of the verification
  // rule alone: requests that store generated logits rows decode one token
  // per step. Grammar-constrained requests speculate (the target
  // distribution is masked by the grammar as sampling would mask it; drafts
  // it excludes are rejected), and log-probabilities are reported for each
  // emitted token from its row.
  const RequestParams& rp = seq->request().params();
  if ((drafter_ || !skip_layers_.empty() || draft_kv_) && rp.spec_max_draft != 0 && !(rp.logits & kLogitsGenerated)) {
    seq->speculates = true;
    seq->draft_len = DraftLength(rp.spec_max_draft > 0 ? std::min(rp.spec_max_draft, params_.spec_k) : params_.spec_k);
    seq->spec_rng.seed(rp.sampling.seed ^ 0x9e3779b97f4a7c15ull);
  }
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
    step_costs_.record_step(static_cast<int32_t>(plan.batch.size()), ms);
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

void Engine::sample_next(Sequence& s, const float* lg) {
  Request& r = s.request();
  if (r.finished()) return;
  const int32_t n_vocab = model_.config().n_vocab;
  if (r.n_generated() >= r.params().max_tokens) {
    r.finish(FinishReason::Length);
    return;
  }
  int32_t t;
  try {
    s.scratch.assign(lg, lg + n_vocab);
    t = s.sampler.sample(s.scratch, r.tokens());
  } catch (const Error& e) {
    r.finish(FinishReason::Error, e.status(), e.what());
    return;
  } catch (const std::bad_alloc&) {
    r.finish(FinishReason::Error, Status::OutOfMemory, "out of memory while sampling");
    return;
  }
  emit(s, t);
}

bool Engine::emit(Sequence& s, int32_t t) {
  Request& r = s.request();
  const bool eog = !r.params().ignore_eos && model_.tokenizer().is_eog(t);
  const bool at_limit = r.n_generated() + 1 >= r.params().max_tokens || s.n_tokens() + 1 >= n_ctx_;
  ++stats_.n_generated_tokens;
  try {
    r.accept_token(t, eog, at_limit);
  } catch (const std::bad_alloc&) {
    r.finish(FinishReason::Error, Status::OutOfMemory, "out of memory while appending a token");
  }
  return !r.finished();
}

// Drafts for the sequences that will decode this step, unless the batch is
// already large enough (params.spec_max_batch) that drafting does not pay.
void Engine::draft() {
  int32_t decoding = 0;
  for (const auto& p : sched_.running()) {
    p->draft.clear();
    if (p->on_device() && !p->done() && p->pending() == 1) ++decoding;
  }
  if ((!drafter_ && skip_layers_.empty() && !draft_kv_) ||
      (params_.spec_max_batch > 0 && decoding > params_.spec_max_batch))
    return;
  std::vector<Sequence*> model_seqs;
  std::vector<int32_t> model_k;
  for (const auto& p : sched_.running()) {
    Sequence& s = *p;
    if (!s.speculates || !s.on_device() || s.done() || s.pending() != 1) continue;
    const Request& r = s.request();
    // No further than the token limit and the context allow: every draft
    // position must exist, and the token after the drafts is emitted too.
    int32_t k = s.draft_len.next();
    // One sequence decoding alone (the case speculation exists for): the
    // length that makes the most tokens per millisecond by this machine's
    // measured step costs, at most the adaptive rule's length.
    if (decoding == 1 && k > 1) k = cost_aware_draft_length(s.draft_len.acceptance(), k, step_costs_);
    k = std::min(k, r.params().max_tokens - r.n_generated() - 1);
    k = std::min(k, n_ctx_ - s.n_tokens() - 1);
    if (k <= 0) {
      s.draft_len.update(0, 0);
      continue;
    }
    if (drafter_) {
      drafter_->propose(s.tokens(), k, s.draft);
      if (s.draft.empty()) s.draft_len.update(0, 0);
    } else {
      model_seqs.push_back(&s);
      model_k.push_back(k);
    }
  }
  if (model_seqs.empty()) return;
  const auto t0 = Clock::now();
  if (draft_kv_) draft_model_step(model_seqs, model_k); else draft_layerskip(model_seqs, model_k);
  if (model_seqs.size() == 1 && !model_seqs[0]->draft.empty())
    step_costs_.record_draft(std::chrono::duration<double, std::milli>(Clock::now() - t0).count() /
                             static_cast<double>(model_seqs[0]->draft.size()));
}

bool Engine::draft_forward(const Batch& b) {
  try {
    draft_logits_.resize(b.logit_rows.size() * static_cast<size_t>(model_.config().n_vocab));
    params_.draft_model->forward(b, *draft_kv_, *backend_, draft_ws_, draft_logits_.data());
    return true;
  } catch (const std::exception& e) {
    log(LogLevel::Warn, "engine: the draft model failed (%s); decoding without drafts this step", e.what());
    return false;
  }
}

// The draft model keeps its own K/V for each sequence's tokens (its own slot
// in draft_kv_). Pass 0 feeds every token the draft has not seen, always
// including the last one, whose logits give the first draft; pass j feeds
// draft j-1. A sequence whose draft cache has no room stops drafting (its
// slot is given back, to be rebuilt later); a failure drops this step's
// drafts. After verification the draft's K/V are kept for the accepted
// drafts only (Engine::verify).
void Engine::draft_model_step(const std::vector<Sequence*>& seqs, const std::vector<int32_t>& k) {
  const int32_t n_vocab = model_.config().n_vocab;
  std::vector<uint8_t> active(seqs.size(), 0);
  Batch b;
  std::vector<size_t> who;
  int32_t rows = 0;
  for (size_t i = 0; i < seqs.size(); ++i) {
    Sequence& s = *seqs[i];
    try {
      if (s.draft_slot < 0) {
        s.draft_kv = draft_kv_.get();
        s.draft_slot = draft_kv_->add_sequence();
        s.draft_computed = 0;
        // The draft's own prefix cache: a prompt it has seen (another
        // request's, a fork's leader's, its own before preemption) is not
        // computed again.
        if (sched_.caches_prefix(s))
          s.draft_computed = draft_kv_->match_prefix(s.draft_slot, s.tokens().data(), s.n_tokens(),
                                                     s.request().params().cache_salt);
      }
      const int32_t from = std::min(s.draft_computed, s.n_tokens() - 1), to = s.n_tokens();
      // A long catch-up (a new sequence's prompt) waits for a step with room.
      if (rows > 0 && rows + (to - from) > params_.max_batch_tokens) continue;
      if (!draft_kv_->reserve(s.draft_slot, to) || !draft_kv_->prepare_write(s.draft_slot, from, to)) {
        s.release_draft_slot();
        continue;
      }
      for (int32_t p = from; p < to; ++p) b.add(s.tokens()[p], p, s.draft_slot, p == to - 1);
      rows += to - from;
      who.push_back(i);
      active[i] = 1;
    } catch (const std::bad_alloc&) {
      s.release_draft_slot();
    }
  }
  if (who.empty() || !draft_forward(b)) return;
  for (size_t r = 0; r < who.size(); ++r) {
    Sequence& s = *seqs[who[r]];
    s.draft_computed = s.n_tokens();
    // Known tokens only (no drafts yet): their full blocks are final.
    if (sched_.caches_prefix(s))
      draft_kv_->commit_blocks(s.draft_slot, s.tokens().data(), s.draft_computed, s.request().params().cache_salt);
    const float* lg = draft_logits_.data() + r * static_cast<size_t>(n_vocab);
    s.draft.push_back(argmax_row(lg, n_vocab));
  }
  const int32_t max_k = *std::max_element(k.begin(), k.end());
  for (int32_t j = 1; j < max_k; ++j) {
    Batch d;
    who.clear();
    for (size_t i = 0; i < seqs.size(); ++i) {
      Sequence& s = *seqs[i];
      if (!active[i] || k[i] <= j || static_cast<int32_t>(s.draft.size()) != j) continue;
      const int32_t pos = s.n_tokens() - 1 + j;
      bool room = false;
      try {
        room = draft_kv_->reserve(s.draft_slot, pos + 1) && draft_kv_->prepare_write(s.draft_slot, pos, pos + 1);
      } catch (const std::bad_alloc&) {
      }
      if (!room) continue;
      d.add(s.draft[j - 1], pos, s.draft_slot, true);
      who.push_back(i);
    }
    if (who.empty() || !draft_forward(d)) break;
    for (size_t r = 0; r < who.size(); ++r) {
      const float* lg = draft_logits_.data() + r * static_cast<size_t>(n_vocab);
      seqs[who[r]]->draft.push_back(argmax_row(lg, n_vocab));
    }
  }
  for (Sequence* s : seqs)
    if (s->draft.empty()) s->draft_len.update(0, 0);
}

// Draft position j of every sequence still drafting is one row of a forward
// of the model without the skipped layers: row j feeds the last known token
// (j = 0) or the previous draft, at its position, and the argmax of its
// logits is the next draft (a point mass for verification). Its K/V go where
// the verifying forward writes them again with every layer, so nothing the
// draft writes survives; a sequence whose next position has no free block
// stops drafting (drafts never preempt).
void Engine::draft_layerskip(const std::vector<Sequence*>& seqs, const std::vector<int32_t>& k) {
  const int32_t n_vocab = model_.config().n_vocab;
  const int32_t max_k = *std::max_element(k.begin(), k.end());
  std::vector<uint8_t> stopped(seqs.size(), 0);
  for (int32_t j = 0; j < max_k; ++j) {
    Batch b;
    std::vector<size_t> who;
    for (size_t i = 0; i < seqs.size(); ++i) {
      Sequence& s = *seqs[i];
      if (stopped[i] || k[i] <= j || static_cast<int32_t>(s.draft.size()) != j) continue;
      const int32_t pos = s.n_tokens() - 1 + j;
      bool room = false;
      try {
        room = kv_->reserve(s.slot, pos + 1) && kv_->prepare_write(s.slot, pos, pos + 1);
      } catch (const std::bad_alloc&) {
      }
      if (!room) {
        stopped[i] = 1;
        continue;
      }
      b.add(j == 0 ? s.tokens().back() : s.draft[j - 1], pos, s.slot, true);
      who.push_back(i);
    }
    if (who.empty()) break;
    try {
      draft_logits_.resize(who.size() * static_cast<size_t>(n_vocab));
      model_.forward(b, *kv_, *backend_, ws_, draft_logits_.data(), skip_layers_.data());
    } catch (const std::exception& e) {
      // A failed draft costs the drafts, nothing else: this step decodes plainly.
      log(LogLevel::Warn, "engine: the layer-skip draft failed (%s); decoding without drafts this step", e.what());
      for (Sequence* s : seqs) s->draft.clear();
      return;
    }
    for (size_t r = 0; r < who.size(); ++r) {
      const float* lg = draft_logits_.data() + r * static_cast<size_t>(n_vocab);
      seqs[who[r]]->draft.push_back(argmax_row(lg, n_vocab));
    }
  }
  for (Sequence* s : seqs)
    if (s->draft.empty()) s->draft_len.update(0, 0);
}

// The rows of one speculating entry: row 0 is the last known token, row j
// (1..n) draft j-1. Drafts are decided in order (engine/speculative.h); the
// first rejected one is replaced and ends the step; when all are accepted the
// last row gives one more token, sampled as plain decoding would.
size_t Engine::verify(const StepPlan& plan, size_t first) {
  const int32_t n_vocab = model_.config().n_vocab;
  const StepPlan::Row& row0 = plan.rows[first];
  const StepPlan::Entry& en = plan.entries[row0.entry];
  Sequence& s = *en.seq;
  Request& r = s.request();
  const int32_t n = en.n_draft;
  if (s.done()) return static_cast<size_t>(n) + 1;  // cancelled: retired at the step's end
  int32_t accepted = 0;
  bool ended = false;
  for (int32_t j = 0; j <= n && !ended; ++j) {
    const float* lg = logits_.data() + (first + j) * static_cast<size_t>(n_vocab);
    if (j == n) {
      sample_next(s, lg);
      break;
    }
    if (r.finished()) break;
    if (r.n_generated() >= r.params().max_tokens) {
      r.finish(FinishReason::Length);
      break;
    }
    DraftVerdict v;
    try {
      s.scratch.assign(lg, lg + n_vocab);
      v = verify_draft(s.sampler.distribution(s.scratch, r.tokens()), s.draft[j], nullptr, s.spec_rng);
      // As sample() would after its draw: the grammar moves past the token,
      // its log-probabilities are reported.
      s.sampler.accept(v.token, lg);
    } catch (const Error& e) {
      r.finish(FinishReason::Error, e.status(), e.what());
      break;
    } catch (const std::bad_alloc&) {
      r.finish(FinishReason::Error, Status::OutOfMemory, "out of memory while verifying drafts");
      break;
    }
    if (v.accepted) ++accepted;
    ended = !emit(s, v.token) || !v.accepted;
  }
  // Accepted drafts' K/V were computed at the right positions: they count.
  // The draft model fed drafts 1..n-1 after the known tokens: the accepted
  // ones among them stay in its cache.
  if (s.draft_slot >= 0 && s.draft_computed >= s.n_computed) {
    const int32_t fed = static_cast<int32_t>(s.draft.size()) - 1;
    s.draft_computed = s.n_computed + std::max(0, std::min(accepted, fed));
    try {
      if (!s.done()) draft_kv_->truncate(s.draft_slot, s.draft_computed);
    } catch (...) {
      s.release_draft_slot();
    }
  }
  s.n_computed += accepted;
  stats_.spec.add_step(n, accepted);
  r.note_spec_step(n, accepted);
  s.draft_len.update(n, accepted);
  s.draft.clear();
  sched_.rolled_back(s);
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
      for (Sequence* f : sched_.fork_followers(s)) sample_next(*f, lg);
    sample_next(s, lg);
  }
}

int Engine::step() {
  take_inbox();
  StepPlan plan;
  try {
    draft();
    plan = sched_.schedule();
    plan_failures_ = 0;
  } catch (const std::bad_alloc&) {
    // Planning is retried next step (what it changed stays consistent: KV
    // reservations are kept, nothing counts as computed). If it keeps
    // failing, the requests end with OUT_OF_MEMORY rather than wait forever.
    log(LogLevel::Error, "engine: out of memory while planning a step");
    plan = StepPlan{};
    if (++plan_failures_ >= 3) {
      sched_.fail_all(Status::OutOfMemory, "out of memory while planning the engine's steps");
      plan_failures_ = 0;
    }
  }
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
  // Sequences that finished this step give their blocks back now (or, if
  // that runs out of memory, at the start of the next step).
  try {
    sched_.retire();
    publish_stats();
  } catch (const std::bad_alloc&) {
    log(LogLevel::Error, "engine: out of memory while retiring finished requests");
  }
  std::lock_guard<std::mutex> lock(inbox_mu_);
  return static_cast<int>(sched_.running().size() + sched_.waiting().size() + inbox_.size());
}

void Engine::run() {
  while (step() > 0) {
  }
}

void Engine::cancel_all() {
  take_inbox();
  sched_.cancel_all();
  publish_stats();
}

void Engine::publish_stats() {
  EngineStats s = stats_;
  s.n_preemptions = sched_.n_preemptions();
  s.n_finished = sched_.n_finished();
  s.n_running = static_cast<int32_t>(sched_.running().size());
  s.n_waiting = static_cast<int32_t>(sched_.waiting().size());
  s.kv = kv_->stats();
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
  const int64_t bs = kv_->layout().block_size;
  int64_t need = (static_cast<int64_t>(prompt_len) + output_len + bs - 1) / bs;
  const int64_t window = model_.config().sliding_window;
  if (window > 0) need = std::min<int64_t>(need, (window + bs - 1) / bs + 1);
  need = std::max<int64_t>(need, 1);
  return static_cast<int32_t>(std::min<int64_t>(params_.max_seqs, kv_->n_blocks_total() / need));
}

}  // namespace infer
