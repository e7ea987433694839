// Speculative decoding as one component of the engine: the Speculator owns
// the drafter, the draft model's KV cache and the step-cost model, and each
// sequence's speculation state (Sequence::spec, written here only).
//
// In a step it is asked twice:
//   propose  before planning: the sequences that will decode get their
//            drafts (SpecState::draft), which the scheduler plans as extra
//            rows after the last known token;
//   verify   in post-processing: decide() judges each draft row against the
//            target's logits (the lossless rule of engine/speculative.h), and
//            verified() settles the step (draft cache, counters, length).
// The rule, the draft-length controller and the cost model that do not
// depend on the engine are in engine/speculative.h.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "engine/speculative.h"
#include "kv/kv_cache.h"
#include "kv/kv_plan.h"
#include "model/model.h"

namespace infer {

class Backend;
class Sequence;

// One sequence's speculation state: written by the Speculator alone (the
// scheduler reads `draft` to plan the verification rows).
struct SpecState {
  bool on = false;             // this sequence drafts
  std::vector<int32_t> draft;  // tokens proposed for this step, after the sequence's tokens
  DraftLength len{0};
  std::mt19937_64 rng;         // acceptance draws (seeded from the request's seed)
  // Draft model: this sequence's slot in the draft model's KV cache and how
  // many of its tokens have draft K/V there. Released with the sequence.
  KvCache* kv = nullptr;
  int32_t slot = -1;
  int32_t computed = 0;

  void release_slot() {
    if (kv && slot >= 0) {
      try {
        kv->remove_sequence(slot);
      } catch (...) {
      }
    }
    slot = -1;
    computed = 0;
  }
  SpecState() = default;
  SpecState(const SpecState&) = delete;
  SpecState& operator=(const SpecState&) = delete;
  ~SpecState() { release_slot(); }
};

// What the Speculator is built from (the engine's parameters).
struct SpecConfig {
  SpecMethod method = SpecMethod::None;
  int32_t k = 4;                  // most drafts per sequence and step
  int32_t ngram_max = 3, ngram_min = 1;
  std::string skip_layers;        // LayerSkip
  const Model* draft_model = nullptr;  // Draft
  int32_t max_batch = 4;          // no drafting above this many decoding sequences (0: no limit)
  int32_t n_ctx = 0;
  int32_t max_batch_tokens = 512;
  KvSizing kv;                    // the engine's pool: the draft pool takes its blocks and element type
  bool prefix_caching = true;
};

// A drafter proposes, for a batch of decoding sequences, up to k[i] tokens
// after the tokens of seqs[i], appended to seqs[i]->spec.draft.
class Drafter {
 public:
  virtual ~Drafter() = default;
  virtual const char* name() const = 0;
  virtual void propose(const std::vector<Sequence*>& seqs, const std::vector<int32_t>& k) = 0;
  // After verification kept `accepted` drafts of s (the draft model trims
  // its cache to them).
  virtual void verified(Sequence& s, int32_t accepted) {}
  // Runs a model: its time per drafted token enters the cost model.
  virtual bool runs_model() const { return false; }
  // Positions a recurrent draft model recomputes after rejections.
  virtual uint64_t n_recomputed() const { return 0; }
};

class Speculator {
 public:
  // Error(InvalidArgument) for a method whose inputs are missing or wrong
  // (no layers to skip, no draft model, a draft vocabulary that differs).
  Speculator(const SpecConfig& config, const Model& target, Backend& backend, KvCache& kv, Workspace& ws);
  ~Speculator();

  bool enabled() const { return drafter_ != nullptr; }
  // At submission: whether the sequence drafts, its length and its draws.
  void start(Sequence& s) const;
  // Before planning: drafts for the running sequences that will decode,
  // unless more than max_batch of them decode.
  void propose(const std::vector<std::shared_ptr<Sequence>>& running);
  // The forward pass of `rows` rows took `ms` (the cost model).
  void record_step(int32_t rows, double ms) { costs_.record_step(rows, ms); }
  // Judges draft j of s against the target's logits row `lg` (the sampler's
  // distribution of it; the grammar moves past the chosen token). Errors
  // finish the request and return nullopt.
  std::optional<DraftVerdict> decide(Sequence& s, int32_t j, const float* lg, int32_t n_vocab);
  // Settles s's verification step: n drafts, `accepted` kept.
  void verified(Sequence& s, int32_t n, int32_t accepted);

  const SpecCounters& counters() const { return counters_; }
  // Positions a recurrent draft model fed again after rejected drafts.
  uint64_t n_draft_recomputed() const { return drafter_ ? drafter_->n_recomputed() : 0; }
  // The draft model's KV cache (nullptr without a draft model).
  const KvCache* draft_kv() const;

 private:
  SpecConfig config_;
  std::unique_ptr<Drafter> drafter_;
  StepCosts costs_;  // forward and draft costs as measured here
  SpecCounters counters_;
};

}  // namespace infer
