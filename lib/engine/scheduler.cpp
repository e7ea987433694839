#include "engine/scheduler.h"

#include <algorithm>
#include <new>

#include "core/fault.h"
#include "core/log.h"

namespace infer {

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

Scheduler::Scheduler(const SchedulerConfig& config, KvCache& kv) : config_(config), kv_(kv) {}

bool Scheduler::caches_prefix(const Sequence& s) const {
  return config_.prefix_caching && s.request().params().prefix_cache;
}

void Scheduler::enqueue(std::shared_ptr<Sequence> s) {
  auto before = [&](const std::shared_ptr<Sequence>& w) {
    return w->priority() < s->priority() || (w->priority() == s->priority() && w->id() > s->id());
  };
  waiting_.insert(std::find_if(waiting_.begin(), waiting_.end(), before), std::move(s));
}

void Scheduler::release_kv(Sequence& s) {
  if (s.slot >= 0) kv_.remove_sequence(s.slot);
  s.slot = -1;
  s.swapped = false;
  s.n_computed = 0;
  s.replay = 0;
}

// A state-only layout: the blocks wholly before the block that precedes the
// one of the last computed position go back to the pool (cached ones stay in
// the prefix cache until evicted).
void Scheduler::release_behind(Sequence& s) {
  if (!config_.state_only || s.n_computed < 1 || !s.on_device()) return;
  const int32_t bs = kv_.layout().block_size;
  const int32_t keep_from = (s.n_computed - 1) / bs - 1;
  if (keep_from > 0) kv_.release_before(s.slot, keep_from * bs);
}

void Scheduler::fail(Sequence& s, Status status, const char* message) {
  s.request().finish(FinishReason::Error, status, message);
}

bool Scheduler::admission_open() const {
  switch (config_.policy) {
    case SchedPolicy::Continuous:
      return true;
    case SchedPolicy::Static:
      return running_.empty();
    case SchedPolicy::Dynamic: {
      if (!running_.empty() || waiting_.empty()) return false;
      if (static_cast<int32_t>(waiting_.size()) >= config_.max_seqs) return true;
      return Clock::now() >= *admission_deadline();
    }
  }
  return true;
}

std::optional<Clock::time_point> Scheduler::admission_deadline() const {
  if (config_.policy != SchedPolicy::Dynamic || waiting_.empty()) return std::nullopt;
  Clock::time_point oldest = waiting_.front()->request().times().submit;
  for (const auto& w : waiting_) oldest = std::min(oldest, w->request().times().submit);
  return oldest + std::chrono::duration_cast<Clock::duration>(
                      std::chrono::duration<double, std::milli>(config_.batch_timeout_ms));
}

// True when s could not hold positions [0, end) even with the whole pool:
// preempting it and trying again later could never help.
bool Scheduler::never_fits(const Sequence& s, int32_t end) const {
  int held = 0;
  for (int32_t b : kv_.block_table(s.slot)) held += b >= 0;
  return held + kv_.blocks_needed(s.slot, end) > kv_.n_blocks_total();
}

// Takes s off the pool and puts it back in the queue; its plan entries (and
// their budget) go back.
void Scheduler::preempt(Sequence& s, StepPlan& plan, int32_t& budget) {
  s.request().note_preemption();
  ++n_preemptions_;
  bool swapped = false;
  if (kv_.host_enabled()) {
    try {
      swapped = kv_.swap_out(s.slot);
    } catch (const std::bad_alloc&) {
      swapped = false;  // recompute instead
    }
  }
  if (swapped) {
    s.swapped = true;
  } else {
    release_kv(s);
  }
  s.preempted_in_step = step_;
  for (auto it = plan.entries.begin(); it != plan.entries.end();) {
    if (it->seq == &s) {
      budget += it->count;
      it = plan.entries.erase(it);
    } else {
      ++it;
    }
  }
  auto it = std::find_if(running_.begin(), running_.end(), [&](const auto& p) { return p.get() == &s; });
  std::shared_ptr<Sequence> keep = std::move(*it);
  running_.erase(it);
  log(LogLevel::Debug, "scheduler: preempted request %llu (%s)", static_cast<unsigned long long>(keep->id()),
      keep->swapped ? "swapped to host" : "will recompute");
  enqueue(std::move(keep));
}

// Reserves blocks for positions [begin, end) of s and makes them writable
// (copy-on-write of shared blocks), preempting sequences that yield to s
// while blocks are short.
Scheduler::Room Scheduler::make_room(Sequence& s, int32_t begin, int32_t end, StepPlan& plan, int32_t& budget) {
  auto yields_to = [](const Sequence* a, const Sequence* b) {  // a gives way before b
    if (a->priority() != b->priority()) return a->priority() < b->priority();
    return a->admit_order > b->admit_order;
  };
  for (;;) {
    try {
      if (kv_.reserve(s.slot, end) && kv_.prepare_write(s.slot, begin, end)) return Room::Ok;
    } catch (const std::bad_alloc&) {
      return Room::Failed;
    }
    Sequence* victim = nullptr;
    for (auto& p : running_)
      if (p.get() != &s && p->on_device() && (!victim || yields_to(p.get(), victim))) victim = p.get();
    if (victim && yields_to(victim, &s)) {
      preempt(*victim, plan, budget);
      continue;
    }
    return never_fits(s, end) ? Room::Never : Room::Yield;
  }
}

Scheduler::Admit Scheduler::admit(const std::shared_ptr<Sequence>& sp, int32_t budget, StepPlan& plan,
                                  int32_t& used) {
  Sequence& s = *sp;
  used = 0;
  if (static_cast<int32_t>(running_.size()) + s.n_seqs() > config_.max_seqs) return Admit::NotNow;
  const bool was_swapped = s.swapped;
  int32_t cached = 0;
  try {
    if (was_swapped) {
      if (!kv_.swap_in(s.slot)) return Admit::NotNow;
      s.swapped = false;
    } else {
      s.slot = kv_.add_sequence();
      s.n_computed = 0;
      // Prompt logits rows must be computed, so such requests skip the cache.
      if (caches_prefix(s) && !(s.request().params().logits & kLogitsPrompt)) {
        s.n_computed = kv_.match_prefix(s.slot, s.tokens().data(), s.n_tokens(), s.request().params().cache_salt);
        cached = std::min(s.n_computed, s.n_prompt());
        release_behind(s);  // a state-only model reads the last cached block alone
      }
    }
    const int32_t take = std::min(s.pending(), budget);
    // (take may be 0 for static/dynamic batches: the prompt starts next step.)
    if (!kv_.reserve(s.slot, s.n_computed + take) || !kv_.prepare_write(s.slot, s.n_computed, s.n_computed + take)) {
      // Not now: give back what was taken (the prefix blocks stay cached).
      bool back_to_host = false;
      if (was_swapped) {
        try {
          back_to_host = kv_.swap_out(s.slot);
        } catch (const std::bad_alloc&) {
        }
      }
      if (back_to_host) s.swapped = true; else release_kv(s);
      return Admit::NotNow;
    }
    used = take;
  } catch (const std::bad_alloc&) {
    release_kv(s);
    fail(s, Status::OutOfMemory, "out of memory in the KV cache manager while admitting the request");
    return Admit::Failed;
  }
  s.admit_order = ++admit_counter_;
  s.request().mark_scheduled(cached);
  running_.push_back(sp);
  if (used > 0) plan.entries.push_back({&s, s.n_computed, used});
  return Admit::Ok;
}

// The step's token budget; continuous batching shrinks it so the prompt
// chunks end the step on a row-tile boundary.
int32_t Scheduler::step_budget(bool open) const {
  int32_t budget = config_.max_batch_tokens;
  if (config_.policy != SchedPolicy::Continuous || config_.row_multiple <= 1) return budget;
  int32_t decode = 0, want = 0;
  for (const auto& s : running_) {
    if (!s->on_device() || s->done()) continue;
    if (s->decoding()) decode += s->pending() + static_cast<int32_t>(s->spec.draft.size()); else want += s->pending();
  }
  // Only the prompts that can be admitted this step: the free sequence slots
  // bound them (counting every waiting prompt made the step end wherever the
  // last admitted prompt did, off the tile boundary).
  if (open) {
    int32_t free_slots = config_.max_seqs - static_cast<int32_t>(running_.size());
    for (const auto& w : waiting_) {
      if (want >= budget || w->n_seqs() > free_slots) break;
      free_slots -= w->n_seqs();
      want += w->pending();
    }
  }
  decode = std::min(decode, budget);
  want = std::min(want, budget - decode);
  return decode + aligned_prompt_tokens(decode, want, config_.row_multiple);
}

StepPlan Scheduler::schedule() {
  ++step_;
  StepPlan plan;
  retire();
  const bool open = admission_open();
  int32_t budget = step_budget(open);

  // Running sequences: decode tokens first (one each), then prompt chunks.
  std::vector<Sequence*> order;
  for (auto& p : running_) order.push_back(p.get());
  std::stable_sort(order.begin(), order.end(),
                   [](const Sequence* a, const Sequence* b) { return a->decoding() > b->decoding(); });
  for (Sequence* s : order) {
    if (budget <= 0) break;
    if (!s->on_device()) continue;  // preempted while making room for another
    const int32_t take = std::min(s->pending(), budget);
    switch (make_room(*s, s->n_computed, s->n_computed + take, plan, budget)) {
      case Room::Ok: {
        // Drafts ride along when budget and free blocks allow; they never
        // preempt anyone (they are a bet, the real token is not). They follow
        // the last known token, so only when all pending tokens go.
        int32_t n_draft = 0;
        if (s->decoding() && take == s->pending() && !s->spec.draft.empty()) {
          n_draft = std::min<int32_t>(static_cast<int32_t>(s->spec.draft.size()), budget - take);
          const int32_t end = s->n_computed + take + n_draft;
          try {
            if (n_draft > 0 && !(kv_.reserve(s->slot, end) && kv_.prepare_write(s->slot, s->n_computed + take, end)))
              n_draft = 0;
          } catch (const std::bad_alloc&) {
            n_draft = 0;
          }
        }
        plan.entries.push_back({s, s->n_computed, take, n_draft});
        budget -= take + n_draft;
        break;
      }
      case Room::Yield:
        preempt(*s, plan, budget);
        break;
      case Room::Never:
        fail(*s, Status::OutOfMemory,
             "the request needs more KV blocks than the whole cache has (raise the KV budget or lower max_tokens)");
        break;
      case Room::Failed:
        fail(*s, Status::OutOfMemory, "out of memory in the KV cache manager");
        break;
    }
  }
  // Admit waiting requests in order while there is room. Static and dynamic
  // batching admit a whole batch at once (prompts then prefill over the
  // following steps) and nothing more until it has finished.
  const bool whole_batch = config_.policy != SchedPolicy::Continuous;
  bool head_blocked = false;
  while (open && !waiting_.empty() && (budget > 0 || whole_batch)) {
    std::shared_ptr<Sequence> s = waiting_.front();
    if (s->preempted_in_step == step_) {
      head_blocked = false;
      break;
    }
    int32_t used = 0;
    const Admit a = admit(s, budget, plan, used);
    if (a == Admit::NotNow) {
      head_blocked = true;
      break;
    }
    waiting_.pop_front();
    if (a == Admit::Ok) budget -= used;
    if (a == Admit::Failed) dropped_.push_back(std::move(s));  // retired (with its followers) at the step's end
  }
  // Nothing runs and the head of the queue cannot be admitted with every
  // block free: it can never fit.
  if (head_blocked && running_.empty() && plan.empty()) {
    std::shared_ptr<Sequence> s = waiting_.front();
    fail(*s, Status::OutOfMemory, "the request does not fit in the KV cache");
  }
  build_batch(plan);
  return plan;
}

void Scheduler::build_batch(StepPlan& plan) const {
  fault::point("sched.plan");
  for (size_t e = 0; e < plan.entries.size(); ++e) {
    const StepPlan::Entry& en = plan.entries[e];
    const Sequence& s = *en.seq;
    const uint32_t want = s.request().params().logits;
    const int32_t last = s.n_tokens() - 1;
    for (int32_t i = en.begin; i < en.begin + en.count; ++i) {
      const bool keep_prompt = (want & kLogitsPrompt) && i < s.n_prompt() && i >= s.next_logit_pos;
      const bool keep_gen = (want & kLogitsGenerated) && i >= s.n_prompt() - 1 && i >= s.next_logit_pos;
      const bool keep = keep_prompt || keep_gen;
      const bool sample = i == last;
      plan.batch.add(s.tokens()[i], i, s.slot, keep || sample);
      if (keep || sample) plan.rows.push_back({static_cast<int32_t>(e), i, keep, sample});
    }
    // Draft tokens follow the last known token; each row's logits verify the
    // next draft (the last row's give the token after all of them).
    for (int32_t j = 0; j < en.n_draft; ++j) {
      const int32_t pos = s.n_tokens() + j;
      plan.batch.add(s.spec.draft[j], pos, s.slot, true);
      plan.rows.push_back({static_cast<int32_t>(e), pos, false, true});
    }
  }
}

int32_t Scheduler::verified(Sequence& s, int32_t accepted, bool rejected) {
  s.n_computed += accepted;
  int32_t marked = 0;
  // The verify pass left the state after the last draft row in the last
  // block it wrote, and a snapshot at each block end it crossed: the exact
  // state after the accepted tokens is the snapshot of the last boundary at
  // or below them plus the tokens after it, fed again.
  if (config_.recurrent && rejected && !s.done()) {
    const int32_t bs = kv_.layout().block_size;
    const int32_t boundary = s.n_computed / bs * bs;
    marked = s.n_computed - boundary;
    s.n_computed = boundary;
    s.replay = marked;
  }
  if (s.on_device() && !s.done()) kv_.truncate(s.slot, s.n_tokens());
  return marked;
}

void Scheduler::computed(const StepPlan& plan) {
  for (const StepPlan::Entry& e : plan.entries) {
    Sequence& s = *e.seq;
    s.n_computed = e.begin + e.count;
    s.replay = std::max(0, s.replay - e.count);
  }
}

std::vector<Sequence*> Scheduler::fork_followers(Sequence& leader) {
  std::vector<std::shared_ptr<Sequence>> followers;
  followers.swap(leader.followers);
  std::vector<Sequence*> forked;
  for (auto& f : followers) {
    if (f->done()) {  // cancelled before it started
      f->request().finish(FinishReason::Cancelled);
      ++n_finished_;
      continue;
    }
    try {
      f->slot = kv_.fork(leader.slot);
    } catch (const std::bad_alloc&) {
      fail(*f, Status::OutOfMemory, "out of memory in the KV cache manager while forking the sample");
      ++n_finished_;
      continue;
    }
    f->n_computed = leader.n_computed;
    f->replay = leader.replay;
    f->admit_order = ++admit_counter_;
    f->request().copy_prompt_outputs(leader.request());
    running_.push_back(f);
    forked.push_back(f.get());
  }
  return forked;
}

void Scheduler::commit_blocks() {
  for (auto& p : running_) {
    Sequence& s = *p;
    if (!s.on_device()) continue;
    // A request that ended in this step still computed its blocks: they
    // join the cache before it retires (a one-token request's prompt too).
    if (caches_prefix(s)) kv_.commit_blocks(s.slot, s.tokens().data(), s.n_computed, s.request().params().cache_salt);
    if (s.done()) continue;
    if (config_.window > 0) kv_.release_before(s.slot, std::max(0, s.n_computed + 1 - config_.window));
    release_behind(s);
  }
}

void Scheduler::retire() {
  // Collect first, then act: a sequence's last owner may be the queue it is
  // removed from, so it is held here until its followers are dealt with.
  std::vector<std::shared_ptr<Sequence>> ended;
  auto take_ended = [&](auto& queue) {
    for (auto it = queue.begin(); it != queue.end();) {
      if ((*it)->done()) {
        ended.push_back(std::move(*it));
        it = queue.erase(it);
      } else {
        ++it;
      }
    }
  };
  // Room first: a failed allocation must leave every sequence in a queue.
  ended.reserve(running_.size() + waiting_.size() + dropped_.size());
  ended.insert(ended.end(), std::make_move_iterator(dropped_.begin()), std::make_move_iterator(dropped_.end()));
  dropped_.clear();  // failed at admission, already out of the queues
  take_ended(running_);
  take_ended(waiting_);
  for (size_t first = 0; first < ended.size();) {
    const size_t end = ended.size();
    for (size_t i = first; i < end; ++i) {
      Sequence& s = *ended[i];
      if (!s.request().finished()) s.request().finish(FinishReason::Cancelled);
      release_kv(s);
      ++n_finished_;
      // A leader that ended before its prompt was computed: its followers
      // compute the prompt on their own.
      for (auto& f : s.followers) {
        try {
          enqueue(f);
        } catch (const std::bad_alloc&) {
          f->request().finish(FinishReason::Error, Status::OutOfMemory, "out of memory while queueing the sample");
        }
      }
      s.followers.clear();
    }
    first = end;
    ended.reserve(ended.size() + waiting_.size());
    take_ended(waiting_);  // followers just queued that had ended as well
  }
}

void Scheduler::cancel_all() {
  while (!running_.empty() || !waiting_.empty()) {
    for (auto& s : running_) s->request().request_cancel();
    for (auto& s : waiting_) {
      s->request().request_cancel();
      for (auto& f : s->followers) f->request().request_cancel();
    }
    retire();
  }
}

void Scheduler::fail_all(Status status, const char* message) {
  auto fail_seq = [&](Sequence& q) {
    q.request().finish(FinishReason::Error, status, message);
    for (auto& f : q.followers) f->request().finish(FinishReason::Error, status, message);
  };
  for (auto& q : running_) fail_seq(*q);
  for (auto& q : waiting_) fail_seq(*q);
  for (auto& q : dropped_) fail_seq(*q);
}

}  // namespace infer
