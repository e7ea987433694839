// The engine: owns a paged KV cache (sized by kv/kv_plan.h), a thread pool,
// a backend, a scheduler and a speculator, and turns queued requests into
// batches, one step at a time.
//
// A step reads as inbox -> propose -> schedule -> forward -> post-process:
//   inbox        submissions from any thread join the scheduler's queue,
//   propose      the speculator drafts for the sequences that will decode
//                (engine/speculation.h; nothing without speculation),
//   schedule     the scheduler picks the rows of this step, drafts included
//                (engine/scheduler.h),
//   forward      the model computes them over the paged KV cache,
//   post-process logits rows are stored, drafts are verified, the next token
//                of every sequence that consumed all its known tokens is
//                sampled and emitted (engine/finish.h: text, stop strings,
//                the callback, whether the request ends), followers of n > 1
//                families fork, and new full blocks join the prefix cache.
// A failure inside the forward pass (including an allocation failure) fails
// the requests of that step alone; the engine and every other request go on.
#pragma once

#include <cstdint>
#include <atomic>
#include <deque>
#include <mutex>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/backend.h"
#include "core/threadpool.h"
#include "engine/request.h"
#include "engine/scheduler.h"
#include "engine/finish.h"
#include "engine/embed.h"
#include "engine/sequence.h"
#include "engine/speculation.h"
#include "kv/kv_cache.h"
#include "kv/kv_plan.h"
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
  SchedPolicy policy = SchedPolicy::Continuous;
  double batch_timeout_ms = 50;    // dynamic batching: the longest a request waits for a full batch
  int32_t step_row_multiple = 0;   // continuous: prompt chunks end decoding steps on a multiple of this; 0: the backend's row tile; 1: off
  // Speculative decoding (engine/speculative.h). Ngram: prompt lookup.
  SpecMethod spec = SpecMethod::None;
  int32_t spec_k = 4;              // most draft tokens per sequence and step (1..32)
  int32_t spec_ngram_max = 3;      // n-gram lengths matched, longest first
  int32_t spec_ngram_min = 1;
  std::string spec_skip_layers;    // LayerSkip: the layers the draft leaves out ("4-17", "3,5,9-11")
  const Model* draft_model = nullptr;  // Draft: the draft model (same vocabulary; must outlive the engine)
  // No drafting in a step where more than this many sequences decode: a
  // larger batch already fills the matmul tiles drafts would have used, and
  // rejected drafts then cost real time (0: no limit). See bench/RESULTS.md.
  int32_t spec_max_batch = 4;
  // Tensor parallelism (model/tp.h): 0, or the model's group size (checked).
  int32_t tensor_parallel = 0;
  // A collective of a tensor-parallel pass that waits longer than this
  // fails the pass and ends the job (a rank died or hung); 0: 60 s.
  int64_t tp_timeout_ms = 0;
  void validate() const;
  // What the KV pool is sized from, for a context of n_ctx tokens.
  KvSizing kv_sizing(int32_t n_ctx) const;
};

struct EngineStats {
  int32_t n_running = 0, n_waiting = 0;
  uint64_t n_steps = 0, n_prompt_tokens = 0, n_generated_tokens = 0, n_preemptions = 0;
  uint64_t n_finished = 0;
  uint64_t n_embed_jobs = 0, n_embed_passes = 0, n_embed_tokens = 0;  // embedding jobs finished, their passes and tokens
  SpecCounters spec;               // speculative decoding, all requests
  // Recurrent (state-space) models: positions fed again after rejected
  // drafts to rebuild the state from a block boundary's snapshot, in the
  // target model's cache and in a recurrent draft model's own.
  uint64_t n_spec_recomputed = 0, n_draft_recomputed = 0;
  double uptime_s = 0;             // since the engine was created
  KvStats kv;
  // Tensor parallelism: this rank's collectives (dist/comm.h) since the
  // engine was created: count, bytes and the time spent in them.
  uint64_t tp_comm_calls = 0, tp_comm_bytes = 0;
  double tp_comm_seconds = 0;
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
  // callbacks: empty, or one token callback per sample (replacing
  // params.on_token), installed before the requests are published.
  std::vector<std::shared_ptr<Request>> submit_n(RequestParams params, int32_t n,
                                                 std::vector<TokenCallback> callbacks = {});
  // Queues an embedding job (engine/embed.h): check_inputs now (its errors
  // are thrown here and nothing is queued); the stepping thread computes it
  // between generation steps, at most max_batch_tokens of its tokens per
  // step, and finishes it. Any thread.
  std::shared_ptr<EmbedJob> submit_embed(std::vector<EmbedInput> inputs, const EmbedOptions& o);
  // One forward step. Returns the number of unfinished requests (embedding
  // jobs included).
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
  const KvPlan& kv_plan() const { return kv_plan_; }
  int32_t n_ctx() const { return n_ctx_; }
  // A consistent snapshot, safe from any thread (taken at the end of a step).
  EngineStats stats() const;
  // How many sequences of prompt_len + output_len tokens the KV budget holds
  // at once without prefix sharing (capped by max_seqs): the "max batch
  // size" deployments are sized by. A prompt longer than the context is
  // never admitted (0); output stops at the context.
  int32_t max_concurrency(int32_t prompt_len, int32_t output_len) const;

 // Dynamic batching: when the waiting batch starts even if not full
  // (nullopt: nothing waits for a deadline). Stepping thread only.
  std::optional<Clock::time_point> admission_deadline() const { return sched_.admission_deadline(); }
  // The draft model's KV cache (nullptr without a draft model): tests and stats.
  const KvCache* draft_kv() const { return spec_.draft_kv(); }

 private:
  std::shared_ptr<Sequence> make_sequence(RequestParams& p);
  void take_inbox();
  StepPlan plan_step();
  bool forward(const StepPlan& plan);
  void postprocess(const StepPlan& plan);
  // Decides the drafts of the entry whose rows start at plan row `first`;
  // returns the number of rows it consumed.
  size_t verify(const StepPlan& plan, size_t first);
  void publish_stats();
  // One embedding pass over the queued jobs' next inputs (jobs of one kind,
  // vectors or rank), finishing the jobs it completes. gen_ms: how long this
  // step's generation took (0: none): embeddings get as much time as
  // generation over the steps (a credit), or a whole max_batch_tokens pass
  // each step when nothing generates.
  void run_embeds(double gen_ms);
  // Rank 0 of a tensor-parallel model: the start-up handshake (model/tp.h).
  void start_tensor_parallel(TpGroup& tp);

  const Model& model_;
  EngineParams params_;
  int32_t n_ctx_;
  KvPlan kv_plan_;
  ThreadPool pool_;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<KvCache> kv_;
  Workspace ws_;
  Speculator spec_;  // before sched_: sequences release their draft-cache slots into it
  Scheduler sched_;
  Finisher finisher_;
  std::vector<float> logits_;
  EngineStats stats_;
  int plan_failures_ = 0;  // consecutive steps whose planning ran out of memory
  Clock::time_point created_;

  // Submissions from any thread land here; the stepping thread moves them to
  // the scheduler at the start of each step.
  mutable std::mutex inbox_mu_;
  std::vector<std::shared_ptr<Sequence>> inbox_;
  std::vector<std::shared_ptr<EmbedJob>> embed_inbox_;
  // Embedding jobs (stepping thread), computed by embedder_ on the engine's backend.
  std::deque<std::shared_ptr<EmbedJob>> embed_jobs_;
  std::unique_ptr<Embedder> embedder_;
  double embed_ms_per_token_ = 0;  // measured cost of an embedding pass, per token
  double embed_credit_ms_ = 0;     // embedding time earned by generation steps, not yet spent
  std::atomic<uint64_t> next_id_{1};
  mutable std::mutex stats_mu_;
  EngineStats published_;
  bool tp_started_ = false;  // this engine is its tensor-parallel group's (announce_stop at the end)
  CommStats comm_base_;      // the communicator's counters when the engine started
};

// Ranks 1..N-1 of a tensor-parallel model (model/tp.h): runs the passes of
// rank 0's engine on this rank's shard until that engine goes away
// (returns), or fails with Error when the group breaks (a collective timed
// out, a rank died) or the ranks disagree at start-up (model bytes or
// parameters: Error(InvalidArgument)). params: as rank 0's. Error(
// InvalidArgument) on rank 0 or for a whole model.
void follow_engine(const Model& model, const EngineParams& params);
// What the ranks compare of their engine parameters (those that shape the
// KV pool and the passes; not threads, timeouts or the draft model).
uint64_t tp_params_hash(const EngineParams& params);
// Error(InvalidArgument / Unsupported) when `params` or the backend cannot
// run `model`'s tensor-parallel group (nothing for a whole model).
void check_tensor_parallel(const Model& model, const EngineParams& params, const char* backend);

}  // namespace infer
