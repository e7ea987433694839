// The engine: owns a paged KV cache, a thread pool and a backend, and turns
// queued requests into batches, one forward step at a time.
//
// Each step: drop cancelled requests; give every running sequence its next
// tokens under the token budget (decode tokens first, then prompt chunks,
// i.e. chunked prefill); admit waiting requests while sequences and blocks
// allow, starting each after the longest cached prefix of its prompt; run
// one forward over the whole batch; sample where a sequence has consumed all
// its known tokens; register newly filled blocks in the prefix cache. When
// the KV pool runs dry the most recently admitted sequence is preempted: its
// blocks move to the host tier when there is one, else they are freed and
// recomputed later (cheaply, through the prefix cache); either way it
// continues exactly where it was.
#pragma once

#include <cstdint>
#include <atomic>
#include <deque>
#include <mutex>
#include <memory>
#include <vector>

#include "core/backend.h"
#include "core/threadpool.h"
#include "engine/request.h"
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

struct EngineParams {
  int32_t n_threads = 0;           // 0: all cores
  uint64_t kv_budget_bytes = 0;    // 0: max_seqs full contexts, capped at 1 GiB
  int32_t kv_blocks = 0;           // > 0 overrides the byte budget
  int32_t block_size = 16;
  KvType kv_type = KvType::F32;
  uint64_t host_kv_budget_bytes = 0;  // second tier (swap / evicted prefixes); 0: none
  int32_t max_seqs = 16;
  int32_t max_batch_tokens = 512;
  int32_t n_ctx = 0;               // 0: the model's training context
  bool prefix_caching = true;
  SchedPolicy policy = SchedPolicy::Continuous;
  double batch_timeout_ms = 50;    // dynamic batching: the longest a request waits for a full batch
  int32_t step_row_multiple = 16;  // continuous: prompt chunks end decoding steps on a multiple of this; 1: off
  void validate() const;
};

// Continuous batching: how many of `want` prompt tokens a step with `decode`
// decode rows takes so that its rows end on a multiple of g (engine.cpp).
int32_t aligned_prompt_tokens(int32_t decode, int32_t want, int32_t g);

struct EngineStats {
  int32_t n_running = 0, n_waiting = 0;
  uint64_t n_steps = 0, n_prompt_tokens = 0, n_generated_tokens = 0, n_preemptions = 0;
  uint64_t n_finished = 0;
  double uptime_s = 0;             // since the engine was created
  KvStats kv;
};

class Engine {
 public:
  Engine(const Model& model, const EngineParams& params);
  ~Engine();

  // Validates and queues a request (Error(InvalidArgument / OutOfMemory) for
  // one that can never run; nothing is queued then). submit and submit_n may
  // be called from any thread, also while another thread runs step(); every
  // other member belongs to the thread that steps.
  std::shared_ptr<Request> submit(RequestParams params);
  // n samples of one prompt: the prompt is computed once and its KV blocks
  // are shared by all n (copy-on-write); sample i uses seed + i.
  std::vector<std::shared_ptr<Request>> submit_n(RequestParams params, int32_t n);
  // One forward step. Returns the number of unfinished requests.
  int step();
  // Steps until no request is left.
  void run();
  // Finishes every unfinished request as cancelled and frees its blocks
  // (shutdown). Stepping thread only.
  void cancel_all();

  const Model& model() const { return model_; }
  const KvCache& kv() const { return *kv_; }
  KvCache& kv() { return *kv_; }
  const EngineParams& params() const { return params_; }
  int32_t n_ctx() const { return n_ctx_; }
  // A consistent snapshot, safe from any thread (taken at the end of a step).
  EngineStats stats() const;
  // How many sequences of prompt_len + output_len tokens the KV budget holds
  // at once without prefix sharing (capped by max_seqs): the "max batch
  // size" deployments are sized by.
  int32_t max_concurrency(int32_t prompt_len, int32_t output_len) const;

 private:
  struct Slot;  // a sequence scheduled in the current step
  std::shared_ptr<Request> make_request(RequestParams& p);
  bool schedule(std::vector<Slot>& plan);
  bool admit(const std::shared_ptr<Request>& r, int32_t budget, std::vector<Slot>& plan, int32_t& used);
  bool make_room(Request& r, int32_t begin, int32_t end);
  void preempt(Request& r);
  void release(Request& r);
  void drop_finished();
  void release_followers(Request& leader);
  void fork_followers(Request& leader, const float* logits);
  void process_logits(const std::vector<Slot>& plan);
  void sample_next(Request& r, const float* logits);
  bool caches_prefix(const Request& r) const;
  void enqueue(const std::shared_ptr<Request>& r);
  bool admission_open() const;
  void publish_stats();

  const Model& model_;
  EngineParams params_;
  int32_t n_ctx_;
  int32_t window_;  // sliding window of the model (0: none)
  ThreadPool pool_;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<KvCache> kv_;
  Workspace ws_;
  Batch batch_;
  std::vector<float> logits_;

  std::deque<std::shared_ptr<Request>> waiting_;  // by priority, then arrival
  std::vector<std::shared_ptr<Request>> running_;
  uint64_t admit_counter_ = 0;
  EngineStats stats_;
  Clock::time_point created_;

  // Submissions from any thread land here; the stepping thread moves them to
  // waiting_ at the start of each step.
  mutable std::mutex inbox_mu_;
  std::vector<std::shared_ptr<Request>> inbox_;
  std::atomic<uint64_t> next_id_{1};
  mutable std::mutex stats_mu_;
  EngineStats published_;
};

}  // namespace infer
