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
  if (block_size < 1 || block_size > 1024) raise(Status::InvalidArgument, "kv_block_size %d is out of range [1, 1024]", block_size);
  if (kv_blocks < 0) raise(Status::InvalidArgument, "kv_blocks %d is negative", kv_blocks);
  if (max_seqs < 1 || max_seqs > 65536) raise(Status::InvalidArgument, "max_seqs %d is out of range", max_seqs);
  if (max_batch_tokens < 1 || max_batch_tokens > (1 << 20))
    raise(Status::InvalidArgument, "max_batch_tokens %d is out of range", max_batch_tokens);
  if (n_ctx < 0) raise(Status::InvalidArgument, "n_ctx %d is negative", n_ctx);
}

Engine::Engine(const Model& model, const EngineParams& params)
    : model_(model), params_(params), pool_((params.validate(), params.n_threads)) {
  if (model.vocab_only()) raise(Status::InvalidArgument, "the model was loaded vocab_only: it cannot generate");
  const ModelConfig& c = model.config();
  n_ctx_ = params.n_ctx > 0 ? params.n_ctx : c.n_ctx_train;
  if (n_ctx_ <= 0) n_ctx_ = 2048;
  backend_ = make_cpu_backend(pool_);

  KvLayout layout = model.kv_layout();
  layout.block_size = params.block_size;
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
  kv_ = std::make_unique<KvCache>(layout);
  log(LogLevel::Info, "engine: %d KV blocks of %d tokens (%.1f MiB), n_ctx %d, %d threads", layout.n_blocks,
      layout.block_size, kv_->bytes_total() / 1048576.0, n_ctx_, pool_.size());
}

Engine::~Engine() = default;

std::shared_ptr<Request> Engine::submit(RequestParams p) {
  const int32_t n_vocab = model_.config().n_vocab;
  if (p.prompt.empty()) raise(Status::InvalidArgument, "the prompt is empty (give at least one token, e.g. BOS)");
  for (int32_t t : p.prompt)
    if (t < 0 || t >= n_vocab) raise(Status::InvalidArgument, "prompt token id %d is out of range [0, %d)", t, n_vocab);
  if (p.max_tokens < 0) raise(Status::InvalidArgument, "max_tokens %d is negative", p.max_tokens);
  const int32_t n_prompt = static_cast<int32_t>(p.prompt.size());
  if (n_prompt > n_ctx_)
    raise(Status::InvalidArgument, "the prompt has %d tokens, more than the context length %d", n_prompt, n_ctx_);
  if (kv_->blocks_for(n_prompt + (p.max_tokens > 0 ? 1 : 0)) > kv_->n_blocks_total())
    raise(Status::OutOfMemory, "the prompt needs %d KV blocks but the cache has only %d",
          kv_->blocks_for(n_prompt + 1), kv_->n_blocks_total());
  if (p.logits & ~7u) raise(Status::InvalidArgument, "unknown logits flags 0x%x", p.logits);
  p.sampling.validate(n_vocab);
  auto r = std::make_shared<Request>(next_id_++, std::move(p), model_.tokenizer(), n_vocab);
  waiting_.push_back(r);
  return r;
}

void Engine::release(Request& r) {
  if (r.slot_ >= 0) {
    kv_->remove_sequence(r.slot_);
    r.slot_ = -1;
  }
  r.n_computed_ = 0;
}

void Engine::finish_and_release(Request& r, FinishReason reason, Status status, std::string msg) {
  r.finish(reason, status, std::move(msg));
  release(r);
}

// Frees a running sequence's blocks and puts it back at the front of the
// queue; its tokens (prompt + generated so far) are recomputed when it is
// admitted again, so it continues exactly where it stopped.
void Engine::preempt(Request& r) {
  release(r);
  ++r.n_preemptions_;
  auto it = std::find_if(running_.begin(), running_.end(), [&](const auto& p) { return p.get() == &r; });
  std::shared_ptr<Request> keep = *it;
  running_.erase(it);
  waiting_.push_front(keep);
  log(LogLevel::Debug, "engine: preempted request %llu", (unsigned long long)r.id());
}

// Makes room for n_tokens positions of r, preempting the most recently
// admitted other running sequences while blocks are short. Returns false when
// r itself does not fit.
bool Engine::ensure_room(Request& r, int32_t n_tokens) {
  while (!kv_->reserve(r.slot_, n_tokens)) {
    Request* victim = nullptr;
    for (auto& p : running_)
      if (p.get() != &r && p->slot_ >= 0 && (!victim || p->admit_order_ > victim->admit_order_)) victim = p.get();
    if (!victim || victim->admit_order_ < r.admit_order_) return false;
    preempt(*victim);
  }
  return true;
}

bool Engine::schedule(std::vector<Slot>& plan) {
  plan.clear();
  batch_.clear();
  int32_t budget = params_.max_batch_tokens;

  // Cancelled or already-finished requests leave first.
  for (size_t i = 0; i < running_.size();) {
    Request& r = *running_[i];
    if (r.cancel_requested() && !r.finished()) r.finish(FinishReason::Cancelled);
    if (r.finished()) {
      release(r);
      running_.erase(running_.begin() + i);
    } else {
      ++i;
    }
  }
  for (auto it = waiting_.begin(); it != waiting_.end();) {
    if ((*it)->cancel_requested() && !(*it)->finished()) (*it)->finish(FinishReason::Cancelled);
    it = (*it)->finished() ? waiting_.erase(it) : it + 1;
  }

  // Running sequences: decode tokens first (one each), then prompt chunks.
  std::vector<Request*> order;
  for (auto& p : running_) order.push_back(p.get());
  std::stable_sort(order.begin(), order.end(), [](const Request* a, const Request* b) {
    const bool da = static_cast<int32_t>(a->tokens_.size()) - a->n_computed_ == 1;
    const bool db = static_cast<int32_t>(b->tokens_.size()) - b->n_computed_ == 1;
    return da > db;
  });
  for (Request* r : order) {
    if (budget == 0) break;
    if (r->slot_ < 0) continue;  // preempted while making room for another
    const int32_t pending = static_cast<int32_t>(r->tokens_.size()) - r->n_computed_;
    const int32_t take = std::min(pending, budget);
    if (!ensure_room(*r, r->n_computed_ + take)) {
      preempt(*r);
      continue;
    }
    plan.push_back({r, r->n_computed_, take});
    budget -= take;
  }
  // Admit waiting requests (FCFS) while there is room.
  while (budget > 0 && !waiting_.empty() && static_cast<int32_t>(running_.size()) < params_.max_seqs) {
    std::shared_ptr<Request> r = waiting_.front();
    const int32_t pending = static_cast<int32_t>(r->tokens_.size());
    const int32_t take = std::min(pending, budget);
    if (kv_->blocks_for(take) > kv_->n_blocks_free()) break;
    r->slot_ = kv_->add_sequence();
    kv_->reserve(r->slot_, take);
    r->n_computed_ = 0;
    r->admit_order_ = ++admit_counter_;
    if (!r->times_.scheduled) {
      r->times_.scheduled = true;
      r->times_.first_scheduled = Clock::now();
    }
    waiting_.pop_front();
    running_.push_back(r);
    plan.push_back({r.get(), 0, take});
    budget -= take;
  }
  // A plan entry may belong to a sequence preempted after it was planned.
  plan.erase(std::remove_if(plan.begin(), plan.end(), [](const Slot& s) { return s.req->slot_ < 0; }), plan.end());

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

void Engine::process_logits(const std::vector<Slot>& plan) {
  const int32_t n_vocab = model_.config().n_vocab;
  const Tokenizer& tok = model_.tokenizer();
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
      if (r.n_generated() >= r.params_.max_tokens) {
        r.finish(FinishReason::Length);
        continue;
      }
      r.scratch_.assign(lg, lg + n_vocab);
      int32_t t;
      try {
        t = r.sampler_.sample(r.scratch_, r.tokens_);
      } catch (const Error& e) {
        r.finish(FinishReason::Error, e.status(), e.what());
        continue;
      }
      const bool eog = !r.params_.ignore_eos && tok.is_eog(t);
      const bool at_limit = r.n_generated() + 1 >= r.params_.max_tokens ||
                            static_cast<int32_t>(r.tokens_.size()) + 1 >= n_ctx_;
      ++stats_.n_generated_tokens;
      r.accept_token(t, eog, at_limit);
    }
    if (s.begin + s.count <= last) r.n_computed_ = s.begin + s.count;  // a prompt chunk, not the end
  }
}

int Engine::step() {
  std::vector<Slot> plan;
  if (schedule(plan)) {
    const size_t n_rows = batch_.logit_rows.size();
    logits_.resize(n_rows * static_cast<size_t>(model_.config().n_vocab));
    bool ok = true;
    try {
      model_.forward(batch_, *kv_, *backend_, ws_, logits_.data());
    } catch (const Error& e) {
      // A failed step fails the requests in it; the engine and others go on.
      ok = false;
      for (const Slot& s : plan) finish_and_release(*s.req, FinishReason::Error, e.status(), e.what());
      log(LogLevel::Error, "engine: forward failed: %s", e.what());
    }
    if (ok) {
      for (const Slot& s : plan)
        if (s.begin < s.req->n_prompt_)
          stats_.n_prompt_tokens += std::min(s.begin + s.count, s.req->n_prompt_) - s.begin;
      process_logits(plan);
    }
    ++stats_.n_steps;
  } else if (!waiting_.empty() && running_.empty()) {
    // Nothing runs and the head of the queue cannot be admitted: with every
    // block free this can only mean it can never fit.
    std::shared_ptr<Request> r = waiting_.front();
    waiting_.pop_front();
    r->finish(FinishReason::Error, Status::OutOfMemory, "the request does not fit in the KV cache");
  }
  // Sequences that finished this step give their blocks back now.
  for (size_t i = 0; i < running_.size();) {
    if (running_[i]->finished()) {
      release(*running_[i]);
      running_.erase(running_.begin() + i);
    } else {
      ++i;
    }
  }
  return static_cast<int>(running_.size() + waiting_.size());
}

void Engine::run() {
  while (step() > 0) {
  }
}

EngineStats Engine::stats() const {
  EngineStats s = stats_;
  s.n_running = static_cast<int32_t>(running_.size());
  s.n_waiting = static_cast<int32_t>(waiting_.size());
  return s;
}

}  // namespace infer
