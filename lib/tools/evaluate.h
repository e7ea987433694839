// Whole-model tools built on the engine, reachable through the C API (and so
// the CLI and every FFI language): perplexity and a prefill/decode benchmark.
#pragma once

#include <cstdint>
#include <string>

#include "engine/engine.h"
#include "model/model.h"

namespace infer {

struct PerplexityResult {
  double perplexity = 0, nll = 0;
  int64_t n_tokens = 0;
  int32_t n_chunks = 0;
  // With a base model (0 without): mean KL(base || model) of the next-token
  // distributions (nats), the fraction of positions whose most likely token
  // is the same, and the base model's own perplexity.
  double kl_divergence = 0, top1_agreement = 0, base_perplexity = 0;
};

// Splits the tokenized text into windows of n_ctx - 1 tokens, each scored
// after a BOS: every token's log-probability given the ones before it in its
// window. n_ctx 0 = the model's context capped at 512. With `base` (same
// vocabulary size; the text is tokenized by `model`), the same tokens also
// run through base and the two distributions are compared position by
// position (windows go four at a time, so memory stays bounded).
PerplexityResult perplexity(const Model& model, const std::string& text, int32_t n_ctx, int32_t n_threads,
                            const Model* base = nullptr);

struct BenchResult {
  int32_t n_prompt = 0, n_gen = 0, n_threads = 0, batch = 1;
  double prefill_ms = 0, decode_ms = 0;
  double prefill_tokens_per_s = 0, decode_tokens_per_s = 0;  // aggregate over the batch
  // The engine steps of the best decode run, and the time this rank spent
  // in tensor-parallel collectives during the best prefill and the best
  // decode run (0 for a whole model; EngineStats::tp_comm_*).
  int64_t decode_steps = 0;
  double prefill_comm_ms = 0, decode_comm_ms = 0;
  uint64_t decode_comm_bytes = 0;
};

// Prefill of `batch` prompts of n_prompt pseudo-random tokens, then n_gen
// greedy decode steps of all of them together; the best of `repetitions`
// runs of each phase. The engine is built from `engine` (its max_seqs and
// context are raised to fit the batch). On ranks 1..N-1 of a tensor-parallel
// model it follows rank 0's bench (called with the same arguments) and
// returns no figures.
BenchResult bench(const Model& model, int32_t n_prompt, int32_t n_gen, int32_t batch, int32_t repetitions,
                  EngineParams engine);

}  // namespace infer
