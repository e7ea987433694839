// The figures users compare engines by, computed once from a request's
// timestamps, for the C API, the CLI and the benchmarks alike:
//   queue   submit -> first scheduled
//   TTFT    submit -> first generated token (queue + prefill + first sample)
//   prefill prompt tokens / (first scheduled -> first token)
//   TPOT    (first token -> last token) / (generated - 1)
//   decode  (generated - 1) / (first token -> last token)
#pragma once

#include "engine/request.h"

namespace infer {

struct RequestMetrics {
  FinishReason finish = FinishReason::None;
  Status status = Status::Ok;
  int32_t n_prompt = 0, n_cached = 0, n_generated = 0, n_preemptions = 0;
  double queue_ms = 0, ttft_ms = 0, tpot_ms = 0, total_ms = 0;  // 0 where not (yet) defined
  double prefill_tokens_per_s = 0, decode_tokens_per_s = 0;
  SpecCounters spec;  // speculative decoding (zero when it did not draft)
};

// The caller holds r.mutex() when another thread may be stepping the engine.
// `now` ends total_ms of a request that has not finished.
RequestMetrics request_metrics(const Request& r, Clock::time_point now = Clock::now());

}  // namespace infer
