#include "engine/speculation.h"

#include <algorithm>
#include <chrono>

#include "core/backend.h"
#include "core/log.h"
#include "engine/kv_budget.h"
#include "engine/sequence.h"

namespace infer {

namespace {

// A model drafter's proposal: the most likely token of a logits row.
int32_t argmax_row(const float* lg, int32_t n_vocab) {
  return static_cast<int32_t>(std::max_element(lg, lg + n_vocab) - lg);
}

// The draft positions of a batch, one batched forward per position: row j of
// sequence i feeds the last known token (j = 0) or draft j-1 at position
// n_tokens - 1 + j of `slot_of(s)` in `kv`, and the argmax of its logits is
// draft j. Positions start at `first` (the draft model's pass 0 is its own).
// A sequence whose next position has no free block stops drafting (drafts
// never preempt). False when a forward failed (the drafts so far are kept).
template <class Slot, class Forward>
bool draft_positions(const std::vector<Sequence*>& seqs, const std::vector<int32_t>& k, int32_t first, KvCache& kv,
                     int32_t n_vocab, std::vector<float>& logits, Slot slot_of, Forward forward) {
  const int32_t max_k = *std::max_element(k.begin(), k.end());
  std::vector<size_t> who;
  for (int32_t j = first; j < max_k; ++j) {
    Batch b;
    who.clear();
    for (size_t i = 0; i < seqs.size(); ++i) {
      Sequence& s = *seqs[i];
      if (k[i] <= j || static_cast<int32_t>(s.spec.draft.size()) != j) continue;
      const int32_t pos = s.n_tokens() - 1 + j;
      const int32_t slot = slot_of(s);
      bool room = false;
      try {
        room = slot >= 0 && kv.reserve(slot, pos + 1) && kv.prepare_write(slot, pos, pos + 1);
      } catch (const std::bad_alloc&) {
      }
      if (!room) continue;
      b.add(j == 0 ? s.tokens().back() : s.spec.draft[j - 1], pos, slot, true);
      who.push_back(i);
    }
    if (who.empty()) return true;
    logits.resize(who.size() * static_cast<size_t>(n_vocab));
    if (!forward(b, logits.data())) return false;
    for (size_t r = 0; r < who.size(); ++r)
      seqs[who[r]]->spec.draft.push_back(argmax_row(logits.data() + r * static_cast<size_t>(n_vocab), n_vocab));
  }
  return true;
}

// A sequence that drafted nothing this step counts a step without drafts.
void settle_empty(const std::vector<Sequence*>& seqs) {
  for (Sequence* s : seqs)
    if (s->spec.draft.empty()) s->spec.len.update(0, 0);
}

// Prompt lookup over each sequence's own tokens (engine/speculative.h).
class NgramDrafts final : public Drafter {
 public:
  NgramDrafts(int32_t n_max, int32_t n_min) : ngram_(n_max, n_min) {}
  const char* name() const override { return "ngram"; }
  void propose(const std::vector<Sequence*>& seqs, const std::vector<int32_t>& k) override {
    for (size_t i = 0; i < seqs.size(); ++i) ngram_.propose(seqs[i]->tokens(), k[i], seqs[i]->spec.draft);
    settle_empty(seqs);
  }

 private:
  NgramDrafter ngram_;
};

// The target without some layers: its K/V go where the verifying forward
// writes them again with every layer, so nothing the draft writes survives.
class LayerSkipDrafts final : public Drafter {
 public:
  LayerSkipDrafts(const Model& model, const std::string& layers, Backend& backend, KvCache& kv, Workspace& ws)
      : model_(model), backend_(backend), kv_(kv), ws_(ws) {
    if (layers.empty())
      raise(Status::InvalidArgument, "layer-skip speculation needs the layers to skip (e.g. \"4-17\")");
    skip_ = parse_layer_list(layers, model.config().n_layer);
  }
  const char* name() const override { return "layer-skip"; }
  bool runs_model() const override { return true; }
  void propose(const std::vector<Sequence*>& seqs, const std::vector<int32_t>& k) override {
    const bool ok = draft_positions(seqs, k, 0, kv_, model_.config().n_vocab, logits_,
                                    [](const Sequence& s) { return s.slot; },
                                    [&](const Batch& b, float* lg) {
                                      try {
                                        model_.forward(b, kv_, backend_, ws_, lg, skip_.data());
                                        return true;
                                      } catch (const std::exception& e) {
                                        log(LogLevel::Warn,
                                            "engine: the layer-skip draft failed (%s); decoding without drafts this "
                                            "step",
                                            e.what());
                                        return false;
                                      }
                                    });
    // A failed draft costs the drafts, nothing else: this step decodes plainly.
    if (!ok) {
      for (Sequence* s : seqs) s->spec.draft.clear();
      return;
    }
    settle_empty(seqs);
  }

 private:
  const Model& model_;
  Backend& backend_;
  KvCache& kv_;
  Workspace& ws_;
  std::vector<uint8_t> skip_;
  std::vector<float> logits_;
};

// A separate model with its own K/V for each sequence's tokens (its own slot
// in its own cache). Pass 0 feeds every token the draft has not seen, always
// including the last one, whose logits give the first draft; pass j feeds
// draft j-1 (draft_positions). A sequence whose draft cache has no room stops
// drafting (its slot is given back, to be rebuilt later); a failure drops
// this step's further drafts. After verification the draft's K/V are kept
// for the accepted drafts only (verified()).
class DraftModelDrafts final : public Drafter {
 public:
  DraftModelDrafts(const SpecConfig& c, const Model& target, Backend& backend)
      : c_(c), model_(*c.draft_model), backend_(backend) {
    if (model_.vocab_only()) raise(Status::InvalidArgument, "the draft model was loaded vocab_only: it cannot run");
    check_draft_vocab(target.tokenizer(), model_.tokenizer());
    // Room for every sequence's whole context plus its drafts, within 256 MiB.
    KvSizing z = c.kv;
    z.kv_blocks = 0;
    z.budget_bytes = z.host_budget_bytes = 0;
    z.extra_tokens = c.k;
    z.default_cap_bytes = uint64_t{256} << 20;
    z.clamp = true;
    kv_ = make_kv_cache(KvPlan::make(model_.kv_layout(), z, 0), backend_);
  }
  const char* name() const override { return "draft-model"; }
  bool runs_model() const override { return true; }
  uint64_t n_recomputed() const override { return recomputed_; }
  const KvCache* kv() const { return kv_.get(); }

  void propose(const std::vector<Sequence*>& seqs, const std::vector<int32_t>& k) override {
    const int32_t n_vocab = model_.config().n_vocab;
    Batch b;
    who_.clear();
    int32_t rows = 0;
    for (size_t i = 0; i < seqs.size(); ++i) {
      Sequence& s = *seqs[i];
      SpecState& st = s.spec;
      try {
        if (st.slot < 0) {
          st.kv = kv_.get();
          st.slot = kv_->add_sequence();
          st.computed = 0;
          // The draft's own prefix cache: a prompt it has seen (another
          // request's, a fork's leader's, its own before preemption) is not
          // computed again.
          if (caches_prefix(s))
            st.computed = kv_->match_prefix(st.slot, s.tokens().data(), s.n_tokens(), s.request().params().cache_salt);
        }
        const int32_t from = std::min(st.computed, s.n_tokens() - 1), to = s.n_tokens();
        // A long catch-up (a new sequence's prompt) waits for a step with room.
        if (rows > 0 && rows + (to - from) > c_.max_batch_tokens) continue;
        if (!kv_->reserve(st.slot, to) || !kv_->prepare_write(st.slot, from, to)) {
          st.release_slot();
          continue;
        }
        for (int32_t p = from; p < to; ++p) b.add(s.tokens()[p], p, st.slot, p == to - 1);
        rows += to - from;
        who_.push_back(i);
      } catch (const std::bad_alloc&) {
        st.release_slot();
      }
    }
    logits_.resize(who_.size() * static_cast<size_t>(n_vocab));
    if (who_.empty() || !forward(b, logits_.data())) return;
    // Only the sequences fed in pass 0 go on: the others draft nothing.
    std::vector<Sequence*> fed;
    std::vector<int32_t> fed_k;
    for (size_t r = 0; r < who_.size(); ++r) {
      Sequence& s = *seqs[who_[r]];
      s.spec.computed = s.n_tokens();
      // Known tokens only (no drafts yet): their full blocks are final.
      if (caches_prefix(s))
        kv_->commit_blocks(s.spec.slot, s.tokens().data(), s.spec.computed, s.request().params().cache_salt);
      // An attention-free draft reads only the state in the block of its
      // last position (and the boundary snapshot before it after a rollback).
      if (state_only_) {
        const int32_t bs = kv_->layout().block_size, keep = (s.spec.computed - 1) / bs - 1;
        if (keep > 0) kv_->release_before(s.spec.slot, keep * bs);
      }
      s.spec.draft.push_back(argmax_row(logits_.data() + r * static_cast<size_t>(n_vocab), n_vocab));
      fed.push_back(&s);
      fed_k.push_back(k[who_[r]]);
    }
    draft_positions(fed, fed_k, 1, *kv_, n_vocab, logits_, [](const Sequence& s) { return s.spec.slot; },
                    [&](const Batch& d, float* lg) { return forward(d, lg); });
    settle_empty(seqs);
  }

  // The draft model fed drafts 1..n-1 after the known tokens: the accepted
  // ones among them stay in its cache.
  void verified(Sequence& s, int32_t accepted) override {
    SpecState& st = s.spec;
    if (st.slot < 0 || st.computed < s.n_computed) return;
    const int32_t fed = static_cast<int32_t>(st.draft.size()) - 1;
    st.computed = s.n_computed + std::max(0, std::min(accepted, fed));
    // A recurrent draft's state went as far as the drafts it was fed: when
    // some were rejected, it is rebuilt from the last block boundary's
    // snapshot (the next pass 0 feeds the positions after it again).
    if (recurrent_ && st.computed < s.n_computed + std::max(0, fed)) {
      const int32_t bs = kv_->layout().block_size;
      const int32_t boundary = st.computed / bs * bs;
      recomputed_ += static_cast<uint64_t>(st.computed - boundary);
      st.computed = boundary;
    }
    try {
      if (!s.done()) kv_->truncate(st.slot, st.computed);
    } catch (...) {
      st.release_slot();
    }
  }

 private:
  bool caches_prefix(const Sequence& s) const { return c_.prefix_caching && s.request().params().prefix_cache; }
  bool forward(const Batch& b, float* lg) {
    try {
      model_.forward(b, *kv_, backend_, ws_, lg);
      return true;
    } catch (const std::exception& e) {
      log(LogLevel::Warn, "engine: the draft model failed (%s); decoding without drafts this step", e.what());
      return false;
    }
  }

  SpecConfig c_;
  const Model& model_;
  Backend& backend_;
  std::unique_ptr<KvCache> kv_;
  Workspace ws_;
  std::vector<float> logits_;
  std::vector<size_t> who_;
  bool recurrent_ = model_.config().recurrent();
  bool state_only_ = model_.config().attention_free();
  uint64_t recomputed_ = 0;
};

}  // namespace

Speculator::Speculator(const SpecConfig& c, const Model& target, Backend& backend, KvCache& kv, Workspace& ws)
    : config_(c) {
  switch (c.method) {
    case SpecMethod::None:
      break;
    case SpecMethod::Ngram:
      drafter_ = std::make_unique<NgramDrafts>(c.ngram_max, c.ngram_min);
      break;
    case SpecMethod::LayerSkip:
      if (target.config().recurrent())
        raise(Status::Unsupported,
              "layer-skip speculation cannot run a state-space (%s) model: a skipped SSM layer would leave its "
              "recurrent state behind the tokens (use ngram or a draft model)",
              target.config().arch.c_str());
      drafter_ = std::make_unique<LayerSkipDrafts>(target, c.skip_layers, backend, kv, ws);
      break;
    case SpecMethod::Draft:
      if (!c.draft_model) raise(Status::InvalidArgument, "draft-model speculation needs a draft model");
      drafter_ = std::make_unique<DraftModelDrafts>(c, target, backend);
      break;
  }
}

Speculator::~Speculator() = default;

const KvCache* Speculator::draft_kv() const {
  if (config_.method != SpecMethod::Draft) return nullptr;
  return static_cast<const DraftModelDrafts*>(drafter_.get())->kv();
}

// Speculation needs every emitted token to come out of the verification rule
// alone: requests that store generated logits rows decode one token per step.
// Grammar-constrained requests speculate (the target distribution is masked
// by the grammar as sampling would mask it; drafts it excludes are rejected),
// and log-probabilities are reported for each emitted token from its row.
void Speculator::start(Sequence& s) const {
  const RequestParams& rp = s.request().params();
  if (!drafter_ || rp.spec_max_draft == 0 || (rp.logits & kLogitsGenerated)) return;
  s.spec.on = true;
  s.spec.len = DraftLength(rp.spec_max_draft > 0 ? std::min(rp.spec_max_draft, config_.k) : config_.k);
  s.spec.rng.seed(rp.sampling.seed ^ 0x9e3779b97f4a7c15ull);
}

void Speculator::propose(const std::vector<std::shared_ptr<Sequence>>& running) {
  int32_t decoding = 0;
  for (const auto& p : running) {
    p->spec.draft.clear();
    if (p->on_device() && !p->done() && p->decoding()) ++decoding;
  }
  if (!drafter_ || (config_.max_batch > 0 && decoding > config_.max_batch)) return;
  std::vector<Sequence*> seqs;
  std::vector<int32_t> ks;
  for (const auto& p : running) {
    Sequence& s = *p;
    if (!s.spec.on || !s.on_device() || s.done() || !s.decoding()) continue;
    const Request& r = s.request();
    int32_t k = s.spec.len.next();
    // One sequence decoding alone (the case speculation exists for): the
    // length that makes the most tokens per millisecond by this machine's
    // measured step costs, at most the adaptive rule's length.
    if (decoding == 1 && k > 1) k = cost_aware_draft_length(s.spec.len.acceptance(), k, costs_);
    // No further than the token limit and the context allow: every draft
    // position must exist, and the token after the drafts is emitted too.
    k = std::min(k, r.params().max_tokens - r.n_generated() - 1);
    k = std::min(k, config_.n_ctx - s.n_tokens() - 1);
    if (k <= 0) {
      s.spec.len.update(0, 0);
      continue;
    }
    seqs.push_back(&s);
    ks.push_back(k);
  }
  if (seqs.empty()) return;
  const auto t0 = std::chrono::steady_clock::now();
  drafter_->propose(seqs, ks);
  if (drafter_->runs_model() && seqs.size() == 1 && !seqs[0]->spec.draft.empty())
    costs_.record_draft(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() /
                        static_cast<double>(seqs[0]->spec.draft.size()));
}

std::optional<DraftVerdict> Speculator::decide(Sequence& s, int32_t j, const float* lg, int32_t n_vocab) {
  Request& r = s.request();
  try {
    s.scratch.assign(lg, lg + n_vocab);
    DraftVerdict v = verify_draft(s.sampler.distribution(s.scratch, r.tokens()), s.spec.draft[j], nullptr, s.spec.rng);
    // As sample() would after its draw: the grammar moves past the token,
    // its log-probabilities are reported.
    s.sampler.accept(v.token, lg);
    return v;
  } catch (const Error& e) {
    r.finish(FinishReason::Error, e.status(), e.what());
  } catch (const std::bad_alloc&) {
    r.finish(FinishReason::Error, Status::OutOfMemory, "out of memory while verifying drafts");
  }
  return std::nullopt;
}

void Speculator::verified(Sequence& s, int32_t n, int32_t accepted) {
  drafter_->verified(s, accepted);
  counters_.add_step(n, accepted);
  s.request().note_spec_step(n, accepted);
  s.spec.len.update(n, accepted);
  s.spec.draft.clear();
}

}  // namespace infer
