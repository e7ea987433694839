// Tensor parallelism: one model run by N ranks (processes, on one machine
// or several), each holding 1/N of the weights (Megatron's split, see
// docs/ARCHITECTURE.md "Tensor parallelism"):
//   - attention by heads: Q/K/V rows of the rank's heads (and so its KV
//     heads, the KV cache sharded the same way), the output projection's
//     matching input columns;
//   - the FFN (and each MoE expert) by its hidden units: gate/up rows,
//     down's input columns;
//   - one all-reduce of the residual update after attention and one after
//     the FFN in every layer;
//   - the output head by vocabulary rows, the logits all-gathered; the token
//     embedding replicated (a lookup reads only the rows of the batch's
//     tokens, so its pages stay mostly unread).
//
// One engine: rank 0 owns the scheduler, the sampler and every request.
// Before each pass it runs, it announces the pass to the other ranks (its
// batch, the block tables of the batch's sequences, the KV block copies the
// cache made since the last pass, the skipped layers of a self-speculative
// draft); they replay the copies on their KV shard and run the same pass on
// their weights. Followers never see a request. A draft model runs on rank 0
// alone.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "dist/comm.h"

namespace infer {

class Backend;
class KvCache;
class Model;
struct Batch;
struct KvLayout;
struct EngineParams;
enum class KvTier : int;

class TpGroup {
 public:
  explicit TpGroup(std::shared_ptr<Communicator> comm);
  Communicator& comm() const { return *comm_; }
  int rank() const { return comm_->rank(); }
  int size() const { return comm_->size(); }
  bool leader() const { return comm_->rank() == 0; }

  // A collective's status: Ok passes; a failure marks the group broken
  // (failed()) and raises Error with the communicator's message. On rank 0
  // it first prints the reason on stderr and ends the job
  // (Communicator::abort: MPI_Abort), as infer.h's tp_timeout_ms promises. Every
  // collective of a pass goes through here, so a follower can tell a broken
  // group (it must stop) from a pass that failed alike on every rank (a
  // batch rank 0 also refused: it goes on).
  void check(Status s);
  bool failed() const { return failed_; }
  // The engine on rank 0, so that a second one (which the followers could
  // not tell apart) is refused: Error(InvalidArgument).
  void claim_engine();
  void release_engine() { engine_ = false; }

  // All ranks, together: Error(InvalidArgument) on every rank when the
  // ranks' values differ, naming the first rank that differs from rank 0
  // and `what` ("the model", "the engine parameters").
  void agree(uint64_t value, const char* what) const;

  // ---- rank 0 ----
  // The engine made its KV cache: followers make pools of the same block
  // counts (their heads' share of each block) and mirror its tables.
  void announce_kv(const KvLayout& layout);
  // The cache copied a block (copy-on-write, swap, spill to the host tier):
  // replayed by followers before the next pass.
  void record_copy(KvTier dst_tier, int dst_block, KvTier src_tier, int src_block);
  // Rank 0 is about to run a pass: sends it (kv: the engine's cache, null
  // for an encode pass; skip: n_layer flags or null; rank: a reranking
  // encode).
  void announce_pass(const Batch& batch, const KvCache* kv, const uint8_t* skip, int n_layer, bool encode,
                     bool rank_head);
  // The engine is going away: followers return from follow().
  void announce_stop();

  // ---- ranks 1..N-1 ----
  // Runs rank 0's passes on this rank's shard of `model` with backend `be`
  // until rank 0 stops (returns) or a collective fails (Error).
  void follow(const Model& model, Backend& be);

 private:
  struct Copy {
    int32_t dst_tier, dst, src_tier, src;
  };
  void send(uint32_t kind, const std::vector<int32_t>& payload);
  std::shared_ptr<Communicator> comm_;
  std::vector<Copy> copies_;  // rank 0: recorded since the last pass
  std::vector<int32_t> msg_;  // rank 0: the message being sent (reused)
  bool failed_ = false;
  bool engine_ = false;
};

}  // namespace infer
