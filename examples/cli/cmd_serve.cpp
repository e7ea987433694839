// infer bench-serve: an open-loop serving benchmark. Requests arrive as a
// Poisson process at --rate per second with prompt and output lengths drawn
// from distributions with a long tail; a background engine thread serves
// them under the chosen batching policy. Reports throughput and TTFT / TPOT
// percentiles, the figures users compare serving engines by.
#include <algorithm>
#include <atomic>
#include <mutex>
#include <chrono>
#include <cstring>
#include <random>
#include <thread>

#include "cli.h"

namespace cli {
namespace {

// A length distribution: "N", "uniform:A:B", "exp:MEAN", "lognormal:MEDIAN:SIGMA".
struct Dist {
  std::string kind = "fixed";
  double a = 0, b = 0;

  static Dist parse(const std::string& s, const char* flag) {
    Dist d;
    std::vector<std::string> parts;
    std::stringstream ss(s);
    std::string item;
    while (std::getline(ss, item, ':')) parts.push_back(item);
    auto number = [&](const std::string& x) {
      char* end = nullptr;
      const double v = std::strtod(x.c_str(), &end);
      if (x.empty() || *end || !(v > 0) || !std::isfinite(v))
        throw UsageError{std::string(flag) + ": '" + x + "' is not a positive number"};
      return v;
    };
    if (parts.size() == 1) {
      d.a = number(parts[0]);
    } else if (parts[0] == "uniform" && parts.size() == 3) {
      d.kind = "uniform";
      d.a = number(parts[1]);
      d.b = number(parts[2]);
      if (d.b < d.a) throw UsageError{std::string(flag) + ": uniform:A:B needs A <= B"};
    } else if (parts[0] == "exp" && parts.size() == 2) {
      d.kind = "exp";
      d.a = number(parts[1]);
    } else if (parts[0] == "lognormal" && parts.size() == 3) {
      d.kind = "lognormal";
      d.a = number(parts[1]);
      d.b = number(parts[2]);
    } else {
      throw UsageError{std::string(flag) + " takes N, uniform:A:B, exp:MEAN or lognormal:MEDIAN:SIGMA"};
    }
    return d;
  }

  int32_t draw(std::mt19937_64& rng, int32_t lo, int32_t hi) const {
    double v = a;
    if (kind == "uniform") v = std::uniform_real_distribution<double>(a, b + 1)(rng);
    if (kind == "exp") v = std::exponential_distribution<double>(1.0 / a)(rng);
    if (kind == "lognormal") v = std::lognormal_distribution<double>(std::log(a), b)(rng);
    return static_cast<int32_t>(std::clamp<double>(std::floor(v), lo, hi));
  }
};

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return NAN;
  std::sort(v.begin(), v.end());
  const double idx = p / 100.0 * (v.size() - 1);
  const size_t i = static_cast<size_t>(idx);
  const double f = idx - i;
  return i + 1 < v.size() ? v[i] * (1 - f) + v[i + 1] * f : v[i];
}

// The latency percentiles: as JSON members (no braces) and as two text lines.
std::string latency_json(const std::vector<double>& ttft, const std::vector<double>& tpot,
                         const std::vector<double>& e2e) {
  std::string s;
  auto add = [&](const char* key, const std::vector<double>& v, double p) {
    s += std::string(s.empty() ? "" : ", ") + "\"" + key + "\": " + num(percentile(v, p));
  };
  add("ttft_ms_p50", ttft, 50);
  add("ttft_ms_p90", ttft, 90);
  add("ttft_ms_p99", ttft, 99);
  add("tpot_ms_p50", tpot, 50);
  add("tpot_ms_p90", tpot, 90);
  add("tpot_ms_p99", tpot, 99);
  add("e2e_ms_p50", e2e, 50);
  add("e2e_ms_p99", e2e, 99);
  return s;
}

void print_latency(const std::vector<double>& ttft, const std::vector<double>& tpot) {
  std::printf("  TTFT ms p50 %.1f  p90 %.1f  p99 %.1f\n", percentile(ttft, 50), percentile(ttft, 90), percentile(ttft, 99));
  std::printf("  TPOT ms p50 %.2f  p90 %.2f  p99 %.2f\n", percentile(tpot, 50), percentile(tpot, 90), percentile(tpot, 99));
}

// The workload, drawn up front (so every policy and both ways of sending it
// see the same one): Poisson arrivals at `rate` (all at 0 for rate 0), prompts
// of random token ids after BOS, output lengths, within the model's context.
std::vector<BenchJob> draw_workload(const infer_model_info& info, double rate, const Dist& prompt_len,
                                    const Dist& output_len, std::mt19937_64& rng, int32_t n_requests) {
  const int32_t ctx = std::min(info.n_ctx_train > 0 ? info.n_ctx_train : 2048, 4096);
  std::vector<BenchJob> jobs(static_cast<size_t>(n_requests));
  double t = 0;
  for (BenchJob& j : jobs) {
    if (rate > 0) t += std::exponential_distribution<double>(rate)(rng);
    j.at_s = t;
    const int32_t pl = prompt_len.draw(rng, 1, ctx / 2);
    j.max_tokens = output_len.draw(rng, 1, ctx - pl - 1);
    j.prompt.push_back(info.bos_token >= 0 ? info.bos_token : 1);
    for (int32_t k = 1; k < pl; ++k) j.prompt.push_back(static_cast<int32_t>(3 + rng() % (info.n_vocab - 3)));
  }
  return jobs;
}

const FlagTable kBenchServeFlags = kModelFlags + FlagTable{
    {"--requests", "N", "100", "requests to send"},
    {"--rate", "R", "10", "mean arrivals per second (Poisson); 0: all at once"},
    {"--policy", "static|dynamic|continuous", "continuous", "batching policy"},
    {"--prompt-len", "DIST", "lognormal:32:0.8", "prompt lengths"},
    {"--output-len", "DIST", "lognormal:48:1.0", "output lengths"},
    {"--max-seqs", "N", "16", "sequences decoded together"},
    {"--max-batch-tokens", "N", "512", "tokens per forward step"},
    {"--batch-timeout-ms", "MS", "50", "dynamic policy: longest wait for a full batch"},
    {"--step-row-multiple", "N", "0 (16)", "continuous policy: step rows end on a multiple of N (1: off)"},
    {"--seed", "S", "1", "seed of the workload"},
} + kThreadFlags + kKvFlags + kSpecFlags + FlagTable{
    {"--step-log", "FILE", nullptr, "write one line per engine step (rows, sequences, forward time)"},
    {"--json", nullptr, nullptr, "one JSON object on stdout"},
    {"--url", "URL", nullptr, "send the workload to an OpenAI-compatible server at URL (http://HOST:PORT) instead"},
    {"--concurrency", "N", "no limit (--url: --max-seqs)", "requests in flight at most: a closed loop of N clients that each wait for their request to end before sending the next"},
    {"--api-key", "KEY", nullptr, "with --url: the server's API key"},
    {"--served-model", "NAME", "the model file's name", "with --url: the requests' \"model\" field"},
};

// bench-serve --url: the workload over HTTP (examples/server/bench_http.cpp).
// The model file is opened for its vocabulary only (the token ids of the
// prompts); the engine flags do not apply, the server has its own.
int bench_serve_url(const Args& a, double rate, const Dist& prompt_len,
                    const Dist& output_len, std::mt19937_64& rng, int32_t n_requests) {
  if (!http_bench()) throw UsageError{"--url: this infer was built without the HTTP client (libcpp-httplib-dev)"};
  const std::string path = model_path(a);
  Model model(path, backend_flag(a), /*vocab_only=*/true);
  infer_model_info info;
  infer_model_info_init(&info);
  check(infer_model_get_info(model.m, &info), "reading model info");
  HttpBenchConfig cfg;
  cfg.url = a.get("--url", "");
  cfg.api_key = a.get("--api-key", "");
  cfg.concurrency = static_cast<int>(a.get_int("--concurrency", a.get_int("--max-seqs", 16, 1, 65536), 1, 65536));
  const size_t slash = path.find_last_of('/');
  cfg.model = a.get("--served-model", slash == std::string::npos ? path : path.substr(slash + 1));
  const std::vector<BenchJob> jobs = draw_workload(info, rate, prompt_len, output_len, rng, n_requests);
  std::vector<HttpBenchOutcome> out;
  const auto start = std::chrono::steady_clock::now();
  http_bench()(cfg, jobs, out);
  const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::vector<double> ttft, tpot, e2e;
  long long generated = 0;
  int ok = 0, failed = 0, lost = 0, short_ = 0;
  std::string first_problem;
  for (size_t i = 0; i < out.size(); ++i) {
    const HttpBenchOutcome& o = out[i];
    if (o.kind != HttpBenchOutcome::Ok) {
      (o.kind == HttpBenchOutcome::Failed ? failed : lost) += 1;
      if (first_problem.empty()) first_problem = "request " + std::to_string(i) + ": " + o.what;
      continue;
    }
    ++ok;
    // ignore_eos: a request ends short only at the server's context limit.
    if (o.tokens < jobs[i].max_tokens) ++short_;
    generated += o.tokens;
    ttft.push_back(o.ttft_ms);
    if (o.tokens > 1) tpot.push_back((o.e2e_ms - o.ttft_ms) / double(o.tokens - 1));
    e2e.push_back(o.e2e_ms);
  }
  const double tok_s = generated / elapsed, req_s = n_requests / elapsed;
  if (a.flag("--json")) {
    std::printf("{\"url\": \"%s\", \"concurrency\": %d, \"requests\": %d, \"rate\": %s, \"duration_s\": %s, "
                "\"generated_tokens\": %lld, \"generated_tokens_per_s\": %s, \"requests_per_s\": %s, %s, "
                "\"requests_ok\": %d, \"requests_short\": %d, \"requests_failed\": %d, \"requests_lost\": %d, "
                "\"errors\": %d}\n",
                json_escape(cfg.url).c_str(), cfg.concurrency, n_requests, num(rate).c_str(), num(elapsed).c_str(),
                generated, num(tok_s).c_str(), num(req_s).c_str(), latency_json(ttft, tpot, e2e).c_str(), ok, short_,
                failed, lost, failed + lost);
  } else {
    std::printf("%s: %d requests at %.2f/s, %d in flight at most, in %.2f s (%d ok, %d short, %d failed, %d lost)\n",
                cfg.url.c_str(), n_requests, rate, cfg.concurrency, elapsed, ok, short_, failed, lost);
    std::printf("  generated %lld tokens: %.1f tok/s, %.2f req/s\n", generated, tok_s, req_s);
    print_latency(ttft, tpot);
  }
  if (!first_problem.empty()) std::fprintf(stderr, "bench-serve: first problem: %s\n", first_problem.c_str());
  return failed + lost ? 1 : 0;
}

int cmd_bench_serve(int argc, char** argv) {
  Args a(argc, argv, 2, kBenchServeFlags);
  a.no_positionals();
  const int32_t n_requests = static_cast<int32_t>(a.get_int("--requests", 100, 1, 1000000));
  const double rate = a.get_float("--rate", 10.0);  // requests per second; 0: all at once
  if (rate < 0) throw UsageError{"--rate must be >= 0"};
  const std::string policy = a.get("--policy", "continuous");
  const Dist prompt_len = Dist::parse(a.get("--prompt-len", "lognormal:32:0.8"), "--prompt-len");
  const Dist output_len = Dist::parse(a.get("--output-len", "lognormal:48:1.0"), "--output-len");
  std::mt19937_64 rng(static_cast<uint64_t>(a.get_int("--seed", 1, 0, INT64_MAX)));

  if (policy != "continuous" && policy != "static" && policy != "dynamic")
    throw UsageError{"--policy must be static, dynamic or continuous"};
  if (a.has("--url")) return bench_serve_url(a, rate, prompt_len, output_len, rng, n_requests);
  for (const char* f : {"--api-key", "--served-model"})
    if (a.has(f)) throw UsageError{std::string(f) + " needs --url"};
  (void)backend_flag(a);
  Model model(model_path(a), backend_flag(a));
  infer_model_info info;
  infer_model_info_init(&info);
  check(infer_model_get_info(model.m, &info), "reading model info");
  infer_engine_params ep;
  infer_engine_params_init(&ep);
  apply_kv_flags(a, ep);
  std::string spec_layers;
  DraftModel draft;
  apply_spec_flags(a, ep, spec_layers, &draft);
  ep.n_threads = static_cast<int32_t>(a.get_int("--threads", 0, 0, 1024));
  ep.max_seqs = static_cast<int32_t>(a.get_int("--max-seqs", 16, 1, 65536));
  ep.max_batch_tokens = static_cast<int32_t>(a.get_int("--max-batch-tokens", 512, 1, 1 << 20));
  ep.batch_timeout_ms = a.get_float("--batch-timeout-ms", 50);
  ep.step_row_multiple = static_cast<int32_t>(a.get_int("--step-row-multiple", 0, 0, 4096));
  ep.policy = policy == "static" ? INFER_POLICY_STATIC : policy == "dynamic" ? INFER_POLICY_DYNAMIC : INFER_POLICY_CONTINUOUS;
  // --step-log FILE: the engine's per-step debug lines (rows, sequences,
  // attended positions, forward time), for seeing where serving time goes.
  struct StepLog {
    FILE* f = nullptr;
    ~StepLog() {
      if (f) {
        infer_set_log_callback(nullptr, nullptr, INFER_LOG_ERROR);
        std::fclose(f);
      }
    }
  } step_log;
  Engine engine(model.m, ep);  // declared after step_log: stopped before the log closes
  if (a.has("--step-log")) {
    step_log.f = std::fopen(a.get("--step-log", "").c_str(), "w");
    if (!step_log.f) throw UsageError{"--step-log: cannot open '" + a.get("--step-log", "") + "' for writing"};
    infer_set_log_callback(
        [](infer_log_level, const char* msg, void* f) {
          if (std::strncmp(msg, "engine step ", 12) == 0) std::fprintf(static_cast<FILE*>(f), "%s\n", msg);
        },
        step_log.f, INFER_LOG_DEBUG);
  }

  const std::vector<BenchJob> jobs = draw_workload(info, rate, prompt_len, output_len, rng, n_requests);
  std::vector<infer_request*> reqs(jobs.size(), nullptr);

  check(infer_engine_start(engine.e), "starting the engine thread");
  const int64_t concurrency = a.get_int("--concurrency", 0, 1, 65536);
  const auto start = std::chrono::steady_clock::now();
  auto submit = [&](size_t i) {
    const BenchJob& j = jobs[i];
    infer_request_params rp;
    infer_request_params_init(&rp);
    rp.prompt_tokens = j.prompt.data();
    rp.n_prompt_tokens = j.prompt.size();
    rp.max_tokens = j.max_tokens;
    rp.ignore_eos = 1;
    infer_sampling_params sp;
    infer_sampling_params_init(&sp);
    sp.temperature = 0;
    rp.sampling = &sp;
    check(infer_submit(engine.e, &rp, &reqs[i]), "submitting");
  };
  if (concurrency > 0) {
    // A closed loop: `concurrency` clients, each waiting for its request to
    // end (infer_request_wait: no wake-up per token) before taking the next
    // job, so at most that many requests are in flight (as with --url).
    std::atomic<size_t> next{0};
    std::atomic<bool> failed{false};
    std::string failure;
    std::mutex failure_mu;
    auto client = [&] {
      try {
        for (size_t i; !failed && (i = next.fetch_add(1)) < jobs.size();) {
          std::this_thread::sleep_until(start + std::chrono::duration<double>(jobs[i].at_s));
          submit(i);
          for (int32_t fin = 0; !fin;) check(infer_request_wait(reqs[i], 1000, &fin), "waiting for the request");
        }
      } catch (const ApiError& e) {
        std::lock_guard<std::mutex> lock(failure_mu);
        failed = true;
        failure = e.msg;
      }
    };
    std::vector<std::thread> clients;
    for (int64_t c = 0; c < std::min<int64_t>(concurrency, n_requests); ++c) clients.emplace_back(client);
    for (std::thread& t : clients) t.join();
    if (failed) throw ApiError{failure};
  } else {
    for (size_t i = 0; i < jobs.size(); ++i) {
      std::this_thread::sleep_until(start + std::chrono::duration<double>(jobs[i].at_s));
      submit(i);
    }
  }
  check(infer_engine_wait_idle(engine.e), "waiting");
  const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  check(infer_engine_stop(engine.e, 1), "stopping the engine thread");

  std::vector<double> ttft, tpot, e2e;
  long long generated = 0;
  int errors = 0;
  for (infer_request* req : reqs) {
    infer_request_stats s;
    infer_request_stats_init(&s);
    check(infer_request_get_stats(req, &s), "reading stats");
    if (s.finish_reason == INFER_FINISH_ERROR) ++errors;
    generated += s.n_generated_tokens;
    ttft.push_back(s.ttft_ms);
    if (s.n_generated_tokens > 1) tpot.push_back(s.tpot_ms);
    e2e.push_back(s.total_ms);
    infer_request_free(req);
  }
  infer_engine_stats es;
  infer_engine_stats_init(&es);
  check(infer_engine_get_stats(engine.e, &es), "reading engine stats");
  const double tok_s = generated / elapsed, req_s = n_requests / elapsed;
  if (a.flag("--json")) {
    std::printf("{\"policy\": \"%s\", \"concurrency\": %lld, \"requests\": %d, \"rate\": %s, \"duration_s\": %s, "
                "\"generated_tokens\": %lld, \"generated_tokens_per_s\": %s, \"requests_per_s\": %s, %s, "
                "\"preemptions\": %llu, \"steps\": %llu, \"tokens_per_step\": %s, \"errors\": %d}\n",
                policy.c_str(), (long long)concurrency, n_requests, num(rate).c_str(), num(elapsed).c_str(), generated,
                num(tok_s).c_str(), num(req_s).c_str(), latency_json(ttft, tpot, e2e).c_str(),
                (unsigned long long)es.n_preemptions, (unsigned long long)es.n_steps,
                num(es.n_steps ? double(es.n_prompt_tokens + es.n_generated_tokens) / es.n_steps : 0).c_str(), errors);
  } else {
    std::printf("policy %s: %d requests at %.2f/s in %.2f s (%d errors, %llu preemptions)\n", policy.c_str(),
                n_requests, rate, elapsed, errors, (unsigned long long)es.n_preemptions);
    std::printf("  generated %lld tokens: %.1f tok/s, %.2f req/s\n", generated, tok_s, req_s);
    print_latency(ttft, tpot);
  }
  return errors ? 1 : 0;
}

const Register kServe{{"bench-serve", "open-loop serving benchmark: Poisson arrivals, TTFT/TPOT percentiles",
                       "infer bench-serve [-m MODEL] --requests N --rate R --policy static|dynamic|continuous [options]",
                       &kBenchServeFlags, "DIST: N, uniform:A:B, exp:MEAN, lognormal:MEDIAN:SIGMA", cmd_bench_serve}};

}  // namespace
}  // namespace cli
