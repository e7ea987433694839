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
#include <deque>
#include <memory>
#include <vector>

#include "core/backend.h"
#include "core/threadpool.h"
#include "engine/request.h"
#include "kv/kv_cache.h"
#include "model/model.h"

namespace infer {

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
  void validate() const;
};

struct EngineStats {
  int32_t n_running = 0, n_waiting = 0;
  uint64_t n_steps = 0, n_prompt_tokens = 0, n_generated_tokens = 0, n_preemptions = 0;
  KvStats kv;
};

class Engine {
 public:
  Engine(const Model& model, const EngineParams& params);
  ~Engine();

  // Validates and queues a request (Error(InvalidArgument / OutOfMemory) for
  // one that can never run; nothing is queued then).
  std::shared_ptr<Request> submit(RequestParams params);
  // n samples of one prompt: the prompt is computed once and its KV blocks
  // are shared by all n (copy-on-write); sample i uses seed + i.
  std::vector<std::shared_ptr<Request>> submit_n(RequestParams params, int32_t n);
  // One forward step. Returns the number of unfinished requests.
  int step();
  // Steps until no request is left.
  void run();

  const Model& model() const { return model_; }
  const KvCache& kv() const { return *kv_; }
  KvCache& kv() { return *kv_; }
  const EngineParams& params() const { return params_; }
  int32_t n_ctx() const { return n_ctx_; }
  EngineStats stats() const;

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

  std::deque<std::shared_ptr<Request>> waiting_;
  std::vector<std::shared_ptr<Request>> running_;
  uint64_t next_id_ = 1;
  uint64_t admit_counter_ = 0;
  EngineStats stats_;
};

}  // namespace infer
