#include "engine/metrics.h"

namespace infer {

namespace {
double ms(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double, std::milli>(b - a).count(); }
}  // namespace

RequestMetrics request_metrics(const Request& r, Clock::time_point now) {
  const RequestTimes& t = r.times();
  RequestMetrics m;
  m.finish = r.finish_reason();
  m.status = r.status();
  m.n_prompt = r.n_prompt();
  m.n_cached = r.n_cached();
  m.n_generated = r.n_generated();
  m.n_preemptions = r.n_preemptions();
  m.spec = r.spec();
  if (t.scheduled) m.queue_ms = ms(t.submit, t.first_scheduled);
  if (m.n_generated > 0) {
    m.ttft_ms = ms(t.submit, t.first_token);
    const double prefill_ms = ms(t.first_scheduled, t.first_token);
    if (prefill_ms > 0) m.prefill_tokens_per_s = m.n_prompt / (prefill_ms / 1000.0);
  }
  if (m.n_generated > 1) {
    const double decode_ms = ms(t.first_token, t.last_token);
    m.tpot_ms = decode_ms / (m.n_generated - 1);
    if (decode_ms > 0) m.decode_tokens_per_s = (m.n_generated - 1) / (decode_ms / 1000.0);
  }
  m.total_ms = ms(t.submit, r.finished() ? t.finish : now);
  return m;
}

}  // namespace infer
