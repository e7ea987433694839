// The scheduler: which sequences run in the next step and which of their
// tokens, under a token budget, with the KV blocks they need.
//
// Each step it (1) drops sequences that ended, (2) gives every running
// sequence its next tokens, decode tokens before prompt chunks (chunked
// prefill), reserving KV blocks and preempting others when the pool is dry,
// (3) admits waiting sequences by priority, then arrival, as the policy
// allows, each starting after the longest cached prefix of its prompt, and
// (4) returns a StepPlan: the batch rows, the sequence that owns each row,
// and the rows whose logits are wanted (to store, to sample from, or both).
//
// Preemption takes the sequence that yields first (the lowest priority, among
// equals the most recently admitted). Its blocks move to the host tier when
// there is room there, else they are freed and its tokens are recomputed on
// re-admission; either way it continues exactly where it stopped. A preempted
// sequence loses its place in the plan at once (its rows and budget go back)
// and is not re-admitted in the same step. A sequence that could not fit even
// with the whole pool to itself is finished with OUT_OF_MEMORY instead of
// being preempted and re-admitted forever. An allocation failure inside the
// KV manager fails only the sequence it was for (OUT_OF_MEMORY).
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <vector>

#include "engine/sequence.h"
#include "kv/kv_cache.h"
#include "model/model.h"

namespace infer {

// How waiting requests join the running batch.
//  Continuous: at every step, as soon as a sequence slot and blocks are free
//              (iteration-level scheduling).
//  Static:     a batch of up to max_seqs starts when the engine is idle and
//              runs to completion before the next one is formed.
//  Dynamic:    like static, but a batch starts only once max_seqs requests
//              wait or the oldest has waited batch_timeout_ms.
enum class SchedPolicy : int { Continuous = 0, Static = 1, Dynamic = 2 };

struct SchedulerConfig {
  SchedPolicy policy = SchedPolicy::Continuous;
  int32_t max_seqs = 16;
  int32_t max_batch_tokens = 512;
  int32_t row_multiple = 1;      // continuous: prompt chunks end steps on a multiple of this many rows
  double batch_timeout_ms = 50;  // dynamic
  bool prefix_caching = true;
  int32_t window = 0;            // the model's sliding window (0: none)
  // Recurrent state (state-space layers, model/model.h): a sequence's state
  // lives in the block of its last computed position, and every full block
  // holds a snapshot of it at the block's end (kv/kv_format.h).
  bool recurrent = false;
  // No attention at all: a sequence keeps only the two blocks it may still
  // read (its last computed position's, and the one before it for the
  // boundary snapshot a rollback reads), so its memory does not grow with
  // its length.
  bool state_only = false;
};

// Continuous batching: how many of `want` prompt tokens a step with `decode`
// decode rows takes so that its rows end on a multiple of g.
int32_t aligned_prompt_tokens(int32_t decode, int32_t want, int32_t g);

struct StepPlan {
  struct Entry {
    Sequence* seq;
    int32_t begin;  // first token index fed this step
    int32_t count;  // tokens fed this step
    int32_t n_draft = 0;  // draft tokens fed after them (seq->spec.draft[0..n_draft)), to be verified
  };
  // One per batch row whose logits are computed, in batch order.
  struct Row {
    int32_t entry;  // index into entries
    int32_t pos;    // token position in its sequence
    bool keep;      // stored in the request's logits output
    bool sample;    // the sequence's last known token (or a draft): sample / verify the next one from it
  };
  std::vector<Entry> entries;
  std::vector<Row> rows;
  Batch batch;
  bool empty() const { return entries.empty(); }
};

class Scheduler {
 public:
  Scheduler(const SchedulerConfig& config, KvCache& kv);

  const SchedulerConfig& config() const { return config_; }
  // Queues a sequence (new, or preempted) by priority, then arrival.
  void enqueue(std::shared_ptr<Sequence> s);
  // Plans the next step. Sequences that can never run are finished here.
  StepPlan schedule();
  // After a successful forward: the planned tokens' K/V are in the cache
  // (draft tokens' K/V count only once the engine accepts them).
  void computed(const StepPlan& plan);
  // After verification kept `accepted` drafts of s: they count as computed;
  // positions past them held rejected drafts, and blocks wholly past the
  // sequence's tokens go back to the pool (nothing is copied: the next step
  // overwrites the rest). A recurrent model's state went past the accepted
  // tokens, and the blocks hold exact snapshots only at block boundaries:
  // when drafts were rejected, the positions after the last boundary at or
  // below the accepted end count as not computed again (Sequence::replay), so
  // the next step rebuilds the state from that boundary's snapshot. Returns
  // how many positions it marked so.
  int32_t verified(Sequence& s, int32_t accepted, bool rejected);
  // A leader whose prompt is computed: each follower forks its KV (all blocks
  // shared) and runs on its own. Returns the followers now running (their
  // decoder state is the caller's to copy).
  std::vector<Sequence*> fork_followers(Sequence& leader);
  // After post-processing: newly filled blocks join the prefix cache; blocks
  // that slid out of the attention window are released, and so are a
  // state-only model's blocks behind the two it may still read.
  void commit_blocks();
  // Drops the sequences that ended (finishing cancelled ones as cancelled)
  // and gives their blocks back; followers of a leader that ended before its
  // prompt was computed run on their own.
  void retire();
  // Finishes every sequence as cancelled and retires it (shutdown).
  void cancel_all();
  // Ends every queued and running request with an error (the engine could not
  // plan a step at all, repeatedly); retire() then releases them.
  void fail_all(Status status, const char* message);

  bool admission_open() const;
  // Dynamic policy: when the waiting batch will be admitted even if it is not
  // full (nullopt: no deadline pending).
  std::optional<std::chrono::steady_clock::time_point> admission_deadline() const;

  const std::vector<std::shared_ptr<Sequence>>& running() const { return running_; }
  const std::deque<std::shared_ptr<Sequence>>& waiting() const { return waiting_; }
  uint64_t n_preemptions() const { return n_preemptions_; }
  uint64_t n_finished() const { return n_finished_; }
  // Whether the sequence's full blocks join (and may come from) the prefix
  // cache: the engine's setting and the request's.
  bool caches_prefix(const Sequence& s) const;

 private:
  enum class Room { Ok, Yield, Never, Failed };
  Room make_room(Sequence& s, int32_t begin, int32_t end, StepPlan& plan, int32_t& budget);
  bool never_fits(const Sequence& s, int32_t end) const;
  void preempt(Sequence& s, StepPlan& plan, int32_t& budget);
  enum class Admit { Ok, NotNow, Failed };
  Admit admit(const std::shared_ptr<Sequence>& s, int32_t budget, StepPlan& plan, int32_t& used);
  void release_kv(Sequence& s);
  void release_behind(Sequence& s);
  void fail(Sequence& s, Status status, const char* message);
  int32_t step_budget(bool open) const;
  void build_batch(StepPlan& plan) const;

  SchedulerConfig config_;
  KvCache& kv_;
  std::deque<std::shared_ptr<Sequence>> waiting_;  // by priority, then arrival
  std::vector<std::shared_ptr<Sequence>> running_;
  std::vector<std::shared_ptr<Sequence>> dropped_;  // failed at admission: retired at the next retire()
  uint64_t step_ = 0;
  uint64_t admit_counter_ = 0;
  uint64_t n_preemptions_ = 0;
  uint64_t n_finished_ = 0;
};

}  // namespace infer
