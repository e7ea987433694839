// Request metrics (TTFT, TPOT, throughput) computed once in the engine layer.
#include <thread>

#include "engine/engine.h"
#include "engine/metrics.h"
#include "test_models.h"

using namespace infer;

TEST_CASE("request metrics follow from the request's timestamps", "[engine][metrics]") {
  NEED_MODEL(model);
  EngineParams ep;
  ep.n_threads = 1;
  Engine e(*model, ep);
  RequestParams rp;
  rp.prompt = model->tokenizer().encode("Once upon a time", true);
  rp.max_tokens = 12;
  rp.ignore_eos = true;
  rp.sampling.temperature = 0;
  auto r = e.submit(rp);
  const RequestMetrics before = request_metrics(*r);
  CHECK(before.finish == FinishReason::None);
  CHECK(before.n_generated == 0);
  CHECK(before.ttft_ms == 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));  // queued for 20 ms at least
  e.run();
  const RequestMetrics m = request_metrics(*r);
  CHECK(m.finish == FinishReason::Length);
  CHECK(m.n_prompt == static_cast<int32_t>(rp.prompt.size()));
  CHECK(m.n_generated == 12);
  CHECK(m.queue_ms >= 20);
  CHECK(m.ttft_ms >= m.queue_ms);
  CHECK(m.total_ms >= m.ttft_ms);
  const RequestTimes& t = r->times();
  const double decode_ms = std::chrono::duration<double, std::milli>(t.last_token - t.first_token).count();
  CHECK(m.tpot_ms == Approx(decode_ms / 11));
  if (decode_ms > 0) CHECK(m.decode_tokens_per_s == Approx(11 / (decode_ms / 1000)));
  CHECK(m.prefill_tokens_per_s > 0);
  // A finished request's figures no longer move.
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  CHECK(request_metrics(*r).total_ms == m.total_ms);
}
