#include "engine/engine.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/log.h"

namespace infer {

struct Engine::Slot {
  Request* req;
  int32_t begin;  // first token index fed this step
  int32_t count;  // tokens fed this step
};

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
  if (step_row_multiple < 1 || step_row_multiple > 4096)
    raise(Status::InvalidArgument, "step_row_multiple %d is out of range [1, 4096]", step_row_multiple);
}

// Prompt tokens to schedule in a continuous-batching step that already has
// `decode` decode rows, when `want` prompt tokens could go (already capped by
// the token budget). A step costs about the same whether its last tile of
// rows is full or not (cpu/: AMX tiles of 16 rows; VNNI tiles of 8), so while
// sequences decode, prompt chunks end the step on a multiple of G rows: a
// short prompt that would open a new, mostly empty tile instead trickles into
// the free rows of the next few steps. With nothing decoding, or when no
// boundary can be reached, everything wanted goes (never starves a prompt).
int32_t aligned_prompt_tokens(int32_t decode, int32_t want, int32_t g) {
  if (g <= 1 || decode == 0 || want == 0) return want;
  int32_t p = (decode + want) / g * g - decode;  // end on a tile boundary
  if (p <= 0) p = std::min(want, (decode + g - 1) / g * g - decode);  // fill the open tile
  return p > 0 ? p : want;
}

Engine::Engine(const Model& model, const EngineParams& params)
    : model_(model), params_(params), pool_((params.validate(), params.n_threads)) {
  if (model.vocab_only()) raise(Status::InvalidArgument, "the model was loaded vocab_only: it cannot generate");
  const ModelConfig& c = model.config();
  n_ctx_ = params.n_ctx > 0 ? params.n_ctx : c.n_ctx_train;
  if (n_ctx_ <= 0) n_ctx_ = 2048;
  window_ = c.sliding_window;
  created_ = Clock::now();
  backend_ = make_cpu_backend(pool_);

  KvLayout layout = model.kv_layout();
  layout.block_size = params.block_size;
  layout.type = params.kv_type;
  const size_t per_block = layout.block_bytes();
  int64_t n_blocks = params.kv_blocks;
  if (n_blocks == 0) {
    uint64_t budget = params.kv_budget_bytes;
    if (budget == 0) {
      const uint64_t full = static_cast<uint64_t>(params.max_seqs) * (n_ctx_ + params.block_size) * per_block /
                            params.block_size;
      budget = std::min<uint64_t>(full, 1ull << 30);
    }
    n_blocks = static_cast<int64_t>(budget / per_block);
  }
  if (n_blocks < 1)
    raise(Status::InvalidArgument, "the KV budget is smaller than one block (%zu bytes)", per_block);
  if (n_blocks > (1 << 30)) raise(Status::InvalidArgument, "the KV budget is too large");
  layout.n_blocks = static_cast<int>(n_blocks);
  const uint64_t host_blocks = params.host_kv_budget_bytes / per_block;
  if (host_blocks > (1u << 30)) raise(Status::InvalidArgument, "the host KV budget is too large");
  layout.n_host_blocks = static_cast<int>(host_blocks);
  kv_ = std::make_unique<KvCache>(layout);
  log(LogLevel::Info, "engine: %d %s KV blocks of %d tokens (%.1f MiB), %d host blocks, n_ctx %d, %d threads",
      layout.n_blocks, kv_type_name(layout.type), layout.block_size, kv_->bytes_total() / 1048576.0,
      layout.n_host_blocks, n_ctx_, pool_.size());
  publish_stats();
}

Engine::~Engine() = default;

bool Engine::caches_prefix(const Request& r) const { return params_.prefix_caching && r.params_.prefix_cache; }

std::shared_ptr<Request> Engine::make_request(RequestParams& p) {
  const int32_t n_vocab = model_.config().n_vocab;
  if (p.prompt.empty()) raise(Status::InvalidArgument, "the prompt is empty (give at least one token, e.g. BOS)");
  for (int32_t t : p.prompt)
    if (t < 0 || t >= n_vocab) raise(Status::InvalidArgument, "prompt token id %d is out of range [0, %d)", t, n_vocab);
  if (p.max_tokens < 0) raise(Status::InvalidArgument, "max_tokens %d is negative", p.max_tokens);
  const int32_t n_prompt = static_cast<int32_t>(p.prompt.size());
  if (n_prompt > n_ctx_)
    raise(Status::InvalidArgument, "the prompt has %d tokens, more than the context length %d", n_prompt, n_ctx_);
  // Blocks the prompt holds at once (a sliding window bounds them).
  int need = kv_->blocks_for(n_prompt + (p.max_tokens > 0 ? 1 : 0));
  if (window_ > 0) need = std::min(need, kv_->blocks_for(window_ + params_.max_batch_tokens) + 1);
  if (need > kv_->n_blocks_total())
    raise(Status::OutOfMemory, "the prompt needs %d KV blocks but the cache has only %d", need, kv_->n_blocks_total());
  if (p.logits & ~7u) raise(Status::InvalidArgument, "unknown logits flags 0x%x", p.logits);
  p.sampling.validate(n_vocab);
  return std::make_shared<Request>(next_id_.fetch_add(1), std::move(p), model_.tokenizer(), n_vocab);
}

std::shared_ptr<Request> Engine::submit(RequestParams p) {
  auto r = make_request(p);
  std::lock_guard<std::mutex> lock(inbox_mu_);
  inbox_.push_back(r);
  return r;
}

// Waiting requests are ordered by priority (higher first), then by arrival
// (request id): a preempted request goes back ahead of later arrivals.
void Engine::enqueue(const std::shared_ptr<Request>& r) {
  auto before = [&](const std::shared_ptr<Request>& w) {
    return w->params_.priority < r->params_.priority ||
           (w->params_.priority == r->params_.priority && w->id() > r->id());
  };
  waiting_.insert(std::find_if(waiting_.begin(), waiting_.end(), before), r);
}

std::vector<std::shared_ptr<Request>> Engine::submit_n(RequestParams p, int32_t n) {
  if (n < 1 || n > params_.max_seqs)
    raise(Status::InvalidArgument, "n = %d samples must be in [1, max_seqs = %d]", n, params_.max_seqs);
  std::vector<std::shared_ptr<Request>> family;
  for (int32_t i = 0; i < n; ++i) {
    RequestParams q = p;
    q.sampling.seed = p.sampling.seed + static_cast<uint64_t>(i);
    family.push_back(make_request(q));
  }
  for (int32_t i = 1; i < n; ++i) {
    family[i]->is_follower_ = true;
    family[0]->followers_.push_back(family[i]);
  }
  std::lock_guard<std::mutex> lock(inbox_mu_);
  inbox_.push_back(family[0]);
  return family;
}

void Engine::release(Request& r) {
  if (r.slot_ >= 0) {
    kv_->remove_sequence(r.slot_);
    r.slot_ = -1;
  }
  r.n_computed_ = 0;
  r.swapped_ = false;
}

// Takes a running sequence off the GPU/CPU pool and puts it back at the front
// of the queue: swapped to the host tier when there is room (it resumes with
// no recomputation), else its blocks are freed and its tokens (prompt and
// generated so far) are recomputed when it is admitted again. Either way it
// continues exactly where it stopped.
void Engine::preempt(Request& r) {
  ++r.n_preemptions_;
  ++stats_.n_preemptions;
  if (kv_->host_enabled() && kv_->swap_out(r.slot_)) {
    r.swapped_ = true;
  } else {
    release(r);
  }
  auto it = std::find_if(running_.begin(), running_.end(), [&](const auto& p) { return p.get() == &r; });
  std::shared_ptr<Request> keep = *it;
  running_.erase(it);
  enqueue(keep);
  log(LogLevel::Debug, "engine: preempted request %llu (%s)", (unsigned long long)r.id(),
      r.swapped_ ? "swapped to host" : "will recompute");
}

// Reserves blocks for positions [begin, end) of r and makes them writable
// (copy-on-write of shared blocks), preempting other running sequences while
// blocks are short: the lowest priority first, among equals the most recently
// admitted. False when r itself is the one to give way.
bool Engine::make_room(Request& r, int32_t begin, int32_t end) {
  for (;;) {
    if (kv_->reserve(r.slot_, end) && kv_->prepare_write(r.slot_, begin, end)) return true;
    auto yields_to = [](const Request* a, const Request* b) {  // a gives way before b
      if (a->params_.priority != b->params_.priority) return a->params_.priority < b->params_.priority;
      return a->admit_order_ > b->admit_order_;
    };
    Request* victim = nullptr;
    for (auto& p : running_)
      if (p.get() != &r && p->slot_ >= 0 && !p->swapped_ && (!victim || yields_to(p.get(), victim)))
        victim = p.get();
    if (!victim || !yields_to(victim, &r)) return false;
    preempt(*victim);
  }
}

bool Engine::admit(const std::shared_ptr<Request>& rp, int32_t budget, std::vector<Slot>& plan, int32_t& used) {
  Request& r = *rp;
  const int32_t seqs = 1 + static_cast<int32_t>(r.followers_.size());
  if (static_cast<int32_t>(running_.size()) + seqs > params_.max_seqs) return false;
  const bool was_swapped = r.swapped_;
  if (was_swapped) {
    if (!kv_->swap_in(r.slot_)) return false;
    r.swapped_ = false;
  } else {
    r.slot_ = kv_->add_sequence();
    r.n_computed_ = 0;
    // Prompt logits rows must be computed, so such requests skip the cache.
    if (caches_prefix(r) && !(r.params_.logits & kLogitsPrompt)) {
      const int32_t hit = kv_->match_prefix(r.slot_, r.tokens_.data(), static_cast<int>(r.tokens_.size()),
                                            r.params_.cache_salt);
      r.n_computed_ = hit;
      if (!r.times_.scheduled) r.n_cached_ = std::min(hit, r.n_prompt_);
    }
  }
  const int32_t take = std::min(static_cast<int32_t>(r.tokens_.size()) - r.n_computed_, budget);
  // (take may be 0 for static/dynamic batches: the prompt starts next step.)
  if (!kv_->reserve(r.slot_, r.n_computed_ + take) || !kv_->prepare_write(r.slot_, r.n_computed_, r.n_computed_ + take)) {
    // Not now: give back what was taken (the prefix blocks stay cached).
    if (was_swapped && kv_->swap_out(r.slot_)) {
      r.swapped_ = true;
    } else {
      release(r);
    }
    return false;
  }
  r.admit_order_ = ++admit_counter_;
  if (!r.times_.scheduled) {
    r.times_.scheduled = true;
    r.times_.first_scheduled = Clock::now();
  }
  running_.push_back(rp);
  if (take > 0) plan.push_back({&r, r.n_computed_, take});
  used = take;
  return true;
}

// A leader that ends before its prompt was computed lets its followers run on
// their own.
void Engine::release_followers(Request& leader) {
  for (auto& f : leader.followers_) {
    if (f->finished()) continue;
    f->is_follower_ = false;
    enqueue(f);
  }
  leader.followers_.clear();
}

void Engine::drop_finished() {
  std::vector<Request*> orphaned_leaders;
  for (size_t i = 0; i < running_.size();) {
    Request& r = *running_[i];
    if (r.cancel_requested() && !r.finished()) r.finish(FinishReason::Cancelled);
    if (r.finished()) {
      release(r);
      ++stats_.n_finished;
      if (!r.followers_.empty()) orphaned_leaders.push_back(&r);
      running_.erase(running_.begin() + i);
    } else {
      ++i;
    }
  }
  std::vector<std::shared_ptr<Request>> keep_alive;
  for (auto it = waiting_.begin(); it != waiting_.end();) {
    Request& r = **it;
    if (r.cancel_requested() && !r.finished()) r.finish(FinishReason::Cancelled);
    if (r.finished()) {
      release(r);
      ++stats_.n_finished;
      if (!r.followers_.empty()) {
        keep_alive.push_back(*it);
        orphaned_leaders.push_back(&r);
      }
      it = waiting_.erase(it);
    } else {
      ++it;
    }
  }
  for (Request* r : orphaned_leaders) release_followers(*r);
}

bool Engine::schedule(std::vector<Slot>& plan) {
  plan.clear();
  batch_.clear();
  int32_t budget = params_.max_batch_tokens;
  {
    std::vector<std::shared_ptr<Request>> arrived;
    {
      std::lock_guard<std::mutex> lock(inbox_mu_);
      arrived.swap(inbox_);
    }
    for (auto& r : arrived) enqueue(r);
  }
  drop_finished();
  const bool open = admission_open();

  // Running sequences: decode tokens first (one each), then prompt chunks.
  std::vector<Request*> order;
  for (auto& p : running_) order.push_back(p.get());
  std::stable_sort(order.begin(), order.end(), [](const Request* a, const Request* b) {
    const bool da = static_cast<int32_t>(a->tokens_.size()) - a->n_computed_ == 1;
    const bool db = static_cast<int32_t>(b->tokens_.size()) - b->n_computed_ == 1;
    return da > db;
  });
  if (params_.policy == SchedPolicy::Continuous && params_.step_row_multiple > 1) {
    // Shrink the budget so the prompt chunks end the step on a row-tile boundary.
    int32_t decode = 0, want = 0;
    for (Request* r : order) {
      if (r->slot_ < 0 || r->swapped_) continue;
      const int32_t pending = static_cast<int32_t>(r->tokens_.size()) - r->n_computed_;
      if (pending == 1) ++decode; else want += pending;
    }
    // Only the prompts that can be admitted this step: the free sequence
    // slots bound them (counting every waiting prompt made the step end
    // wherever the last admitted prompt did, off the tile boundary).
    if (open) {
      int32_t free_slots = params_.max_seqs - static_cast<int32_t>(running_.size());
      for (const auto& w : waiting_) {
        const int32_t seqs = 1 + static_cast<int32_t>(w->followers_.size());
        if (want >= budget || seqs > free_slots) break;
        free_slots -= seqs;
        want += static_cast<int32_t>(w->tokens_.size()) - w->n_computed_;
      }
    }
    decode = std::min(decode, budget);
    want = std::min(want, budget - decode);
    budget = decode + aligned_prompt_tokens(decode, want, params_.step_row_multiple);
  }
  for (Request* r : order) {
    if (budget == 0) break;
    if (r->slot_ < 0 || r->swapped_) continue;  // preempted while making room for another
    const int32_t pending = static_cast<int32_t>(r->tokens_.size()) - r->n_computed_;
    const int32_t take = std::min(pending, budget);
    if (!make_room(*r, r->n_computed_, r->n_computed_ + take)) {
      preempt(*r);
      continue;
    }
    plan.push_back({r, r->n_computed_, take});
    budget -= take;
  }
  // Admit waiting requests in order while there is room. Static and dynamic
  // batching admit a whole batch at once (prompts then prefill over the
  // following steps) and nothing more until it has finished.
  const bool whole_batch = params_.policy != SchedPolicy::Continuous;
  while (open && !waiting_.empty() && (budget > 0 || whole_batch)) {
    std::shared_ptr<Request> r = waiting_.front();
    int32_t used = 0;
    if (!admit(r, budget, plan, used)) break;
    waiting_.pop_front();
    budget -= used;
  }
  // A plan entry may belong to a sequence preempted after it was planned.
  plan.erase(std::remove_if(plan.begin(), plan.end(),
                            [](const Slot& s) { return s.req->slot_ < 0 || s.req->swapped_; }),
             plan.end());

  for (const Slot& s : plan) {
    Request& r = *s.req;
    const int32_t last = static_cast<int32_t>(r.tokens_.size()) - 1;
    for (int32_t i = s.begin; i < s.begin + s.count; ++i) {
      const bool keep_prompt_row = (r.params_.logits & kLogitsPrompt) && i < r.n_prompt_ && i >= r.next_logit_pos_;
      const bool keep_gen_row = (r.params_.logits & kLogitsGenerated) && i >= r.n_prompt_ - 1 && i >= r.next_logit_pos_;
      batch_.add(r.tokens_[i], i, r.slot_, i == last || keep_prompt_row || keep_gen_row);
    }
  }
  return !plan.empty();
}

bool Engine::admission_open() const {
  switch (params_.policy) {
    case SchedPolicy::Continuous:
      return true;
    case SchedPolicy::Static:
      return running_.empty();
    case SchedPolicy::Dynamic: {
      if (!running_.empty() || waiting_.empty()) return false;
      if (static_cast<int32_t>(waiting_.size()) >= params_.max_seqs) return true;
      const auto oldest = std::min_element(waiting_.begin(), waiting_.end(), [](const auto& a, const auto& b) {
        return a->times_.submit < b->times_.submit;
      });
      return std::chrono::duration<double, std::milli>(Clock::now() - (*oldest)->times_.submit).count() >=
             params_.batch_timeout_ms;
    }
  }
  return true;
}

void Engine::sample_next(Request& r, const float* lg) {
  const int32_t n_vocab = model_.config().n_vocab;
  if (r.n_generated() >= r.params_.max_tokens) {
    r.finish(FinishReason::Length);
    return;
  }
  r.scratch_.assign(lg, lg + n_vocab);
  int32_t t;
  try {
    t = r.sampler_.sample(r.scratch_, r.tokens_);
  } catch (const Error& e) {
    r.finish(FinishReason::Error, e.status(), e.what());
    return;
  }
  const bool eog = !r.params_.ignore_eos && model_.tokenizer().is_eog(t);
  const bool at_limit = r.n_generated() + 1 >= r.params_.max_tokens ||
                        static_cast<int32_t>(r.tokens_.size()) + 1 >= n_ctx_;
  ++stats_.n_generated_tokens;
  r.accept_token(t, eog, at_limit);
}

// The leader's prompt is in the cache: every follower takes a fork of its
// sequence (all blocks shared, the partial last one copied on first write)
// and draws its own first token from the same distribution.
void Engine::fork_followers(Request& leader, const float* lg) {
  std::vector<std::shared_ptr<Request>> followers;
  followers.swap(leader.followers_);
  for (auto& fp : followers) {
    Request& f = *fp;
    f.is_follower_ = false;
    if (f.finished()) continue;
    f.slot_ = kv_->fork(leader.slot_);
    f.n_computed_ = leader.n_computed_;
    f.n_cached_ = leader.n_cached_;
    f.logits_ = leader.logits_;
    f.n_logit_rows_ = leader.n_logit_rows_;
    f.next_logit_pos_ = leader.next_logit_pos_;
    f.times_.scheduled = true;
    f.times_.first_scheduled = leader.times_.first_scheduled;
    f.admit_order_ = ++admit_counter_;
    running_.push_back(fp);
    if (f.cancel_requested()) {
      f.finish(FinishReason::Cancelled);
      continue;
    }
    sample_next(f, lg);
  }
}

void Engine::process_logits(const std::vector<Slot>& plan) {
  const int32_t n_vocab = model_.config().n_vocab;
  size_t row = 0;  // index into logits_, in batch order
  for (const Slot& s : plan) {
    Request& r = *s.req;
    const int32_t last = static_cast<int32_t>(r.tokens_.size()) - 1;
    for (int32_t i = s.begin; i < s.begin + s.count; ++i) {
      const bool keep_prompt_row = (r.params_.logits & kLogitsPrompt) && i < r.n_prompt_ && i >= r.next_logit_pos_;
      const bool keep_gen_row = (r.params_.logits & kLogitsGenerated) && i >= r.n_prompt_ - 1 && i >= r.next_logit_pos_;
      if (!(i == last || keep_prompt_row || keep_gen_row)) continue;
      const float* lg = logits_.data() + row * n_vocab;
      ++row;
      if (keep_prompt_row || keep_gen_row) {
        std::lock_guard<std::mutex> lock(r.mu_);
        const size_t off = r.logits_.size();
        r.logits_.insert(r.logits_.end(), lg, lg + n_vocab);
        if (r.params_.logits & kLogitsLogprobs) {
          float* d = r.logits_.data() + off;
          const float mx = *std::max_element(d, d + n_vocab);
          double sum = 0;
          for (int32_t j = 0; j < n_vocab; ++j) sum += std::exp(static_cast<double>(d[j] - mx));
          const float lse = mx + static_cast<float>(std::log(sum));
          for (int32_t j = 0; j < n_vocab; ++j) d[j] -= lse;
        }
        ++r.n_logit_rows_;
        r.next_logit_pos_ = i + 1;
      }
      if (i != last) continue;
      // All known tokens are now in the cache: generate the next one.
      r.n_computed_ = last + 1;
      if (!r.followers_.empty()) fork_followers(r, lg);
      sample_next(r, lg);
    }
    if (s.begin + s.count <= last) r.n_computed_ = s.begin + s.count;  // a prompt chunk, not the end
  }
  // Newly filled blocks join the prefix cache; blocks that slid out of the
  // attention window are released.
  for (auto& p : running_) {
    Request& r = *p;
    if (r.slot_ < 0 || r.swapped_) continue;
    if (caches_prefix(r)) kv_->commit_blocks(r.slot_, r.tokens_.data(), r.n_computed_, r.params_.cache_salt);
    if (window_ > 0) kv_->release_before(r.slot_, std::max(0, r.n_computed_ + 1 - window_));
  }
}

int Engine::step() {
  std::vector<Slot> plan;
  if (schedule(plan)) {
    const size_t n_rows = batch_.logit_rows.size();
    logits_.resize(n_rows * static_cast<size_t>(model_.config().n_vocab));
    bool ok = true;
    try {
      const auto t0 = Clock::now();
      model_.forward(batch_, *kv_, *backend_, ws_, logits_.data());
      if (log_enabled(LogLevel::Debug)) {  // one line per step: where serving time goes
        int64_t positions = 0;
        for (size_t i = 0; i < batch_.size(); ++i) positions += batch_.pos[i] + 1;
        log(LogLevel::Debug, "engine step %llu: %zu rows, %zu sequences, %lld attended positions, forward %.2f ms",
            static_cast<unsigned long long>(stats_.n_steps), batch_.size(), plan.size(),
            static_cast<long long>(positions), std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
      }
    } catch (const Error& e) {
      // A failed step fails the requests in it; the engine and others go on.
      ok = false;
      for (const Slot& s : plan) s.req->finish(FinishReason::Error, e.status(), e.what());
      log(LogLevel::Error, "engine: forward failed: %s", e.what());
    }
    if (ok) {
      for (const Slot& s : plan)
        if (s.begin < s.req->n_prompt_)
          stats_.n_prompt_tokens += std::min(s.begin + s.count, s.req->n_prompt_) - s.begin;
      process_logits(plan);
    }
    ++stats_.n_steps;
  } else if (!waiting_.empty() && running_.empty() && admission_open()) {
    // Nothing runs and the head of the queue cannot be admitted with every
    // block free: it can never fit.
    waiting_.front()->finish(FinishReason::Error, Status::OutOfMemory, "the request does not fit in the KV cache");
  }
  // Sequences that finished this step give their blocks back now.
  drop_finished();
  publish_stats();
  std::lock_guard<std::mutex> lock(inbox_mu_);
  return static_cast<int>(running_.size() + waiting_.size() + inbox_.size());
}

void Engine::run() {
  while (step() > 0) {
  }
}

void Engine::cancel_all() {
  {
    std::lock_guard<std::mutex> lock(inbox_mu_);
    for (auto& r : inbox_) enqueue(r);
    inbox_.clear();
  }
  // Followers released by a cancelled leader rejoin the queue: repeat.
  while (!running_.empty() || !waiting_.empty()) {
    for (auto& r : running_) r->request_cancel();
    for (auto& r : waiting_) r->request_cancel();
    drop_finished();
  }
  publish_stats();
}

void Engine::publish_stats() {
  EngineStats s = stats_;
  s.n_running = static_cast<int32_t>(running_.size());
  s.n_waiting = static_cast<int32_t>(waiting_.size());
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
  int need = kv_->blocks_for(prompt_len + output_len);
  if (window_ > 0) need = std::min(need, kv_->blocks_for(window_) + 1);
  return std::min(params_.max_seqs, kv_->n_blocks_total() / need);
}

}  // namespace infer
