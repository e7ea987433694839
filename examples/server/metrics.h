// infer serve's /metrics: Prometheus text exposition (version 0.0.4) of the
// server's counters and latency histograms and the engine's gauges.
#pragma once

#include <cstdint>
#include <cstdio>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "infer/infer.h"

namespace serve {

class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds) : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {}
  void observe(double v) {
    size_t i = 0;
    while (i < bounds_.size() && v > bounds_[i]) ++i;
    ++counts_[i];
    sum_ += v;
    ++count_;
  }
  void render(std::string& out, const char* name, const char* help) const {
    out += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " histogram\n";
    uint64_t cum = 0;
    char line[256];
    for (size_t i = 0; i < bounds_.size(); ++i) {
      cum += counts_[i];
      std::snprintf(line, sizeof line, "%s_bucket{le=\"%g\"} %llu\n", name, bounds_[i], (unsigned long long)cum);
      out += line;
    }
    cum += counts_.back();
    std::snprintf(line, sizeof line, "%s_bucket{le=\"+Inf\"} %llu\n%s_sum %.9g\n%s_count %llu\n", name,
                  (unsigned long long)cum, name, sum_, name, (unsigned long long)count_);
    out += line;
  }

 private:
  std::vector<double> bounds_;
  std::vector<uint64_t> counts_;
  double sum_ = 0;
  uint64_t count_ = 0;
};

class Metrics {
 public:
  void on_http(int status) {
    std::lock_guard<std::mutex> l(mu_);
    ++http_[status];
  }
  void on_request_started(const std::string& endpoint) {
    std::lock_guard<std::mutex> l(mu_);
    ++started_[endpoint];
  }
  void on_request_ended(const std::string& endpoint, const std::string& outcome) {
    std::lock_guard<std::mutex> l(mu_);
    ++ended_[endpoint + "\",outcome=\"" + outcome];
  }
  // Embedding endpoints: a request started, and how it ended with the tokens it computed.
  void on_embed_request(const std::string& endpoint) {
    std::lock_guard<std::mutex> l(mu_);
    ++embed_started_[endpoint];
  }
  void on_embed_done(const std::string& endpoint, const std::string& outcome, int64_t tokens) {
    std::lock_guard<std::mutex> l(mu_);
    ++embed_ended_[endpoint + "\",outcome=\"" + outcome];
    embed_tokens_ += tokens > 0 ? static_cast<uint64_t>(tokens) : 0;
  }
  // One finished choice (sequence).
  void on_finished(const infer_request_stats& s) {
    std::lock_guard<std::mutex> l(mu_);
    prompt_tokens_ += static_cast<uint64_t>(s.n_prompt_tokens);
    generated_tokens_ += static_cast<uint64_t>(s.n_generated_tokens);
    if (s.n_generated_tokens > 0) ttft_.observe(s.ttft_ms / 1000.0);
    if (s.n_generated_tokens > 1) tpot_.observe(s.tpot_ms / 1000.0);
    e2e_.observe(s.total_ms / 1000.0);
    queue_.observe(s.queue_ms / 1000.0);
    static const char* reasons[] = {"none", "stop", "length", "cancelled", "error"};
    const int r = s.finish_reason >= 0 && s.finish_reason <= 4 ? static_cast<int>(s.finish_reason) : 0;
    ++finish_[reasons[r]];
  }

  std::string render(const infer_engine_stats* es, int in_flight) const {
    std::lock_guard<std::mutex> l(mu_);
    std::string out;
    char line[256];
    auto gauge = [&](const char* name, const char* help, double v, const char* type = "gauge") {
      std::snprintf(line, sizeof line, "# HELP %s %s\n# TYPE %s %s\n%s %.9g\n", name, help, name, type, name, v);
      out += line;
    };
    out += "# HELP infer_http_responses_total HTTP responses by status code.\n# TYPE infer_http_responses_total counter\n";
    for (const auto& [code, n] : http_) {
      std::snprintf(line, sizeof line, "infer_http_responses_total{code=\"%d\"} %llu\n", code, (unsigned long long)n);
      out += line;
    }
    out += "# HELP infer_requests_started_total Generation requests accepted, by endpoint.\n# TYPE infer_requests_started_total counter\n";
    for (const auto& [ep, n] : started_)
      out += "infer_requests_started_total{endpoint=\"" + ep + "\"} " + std::to_string(n) + "\n";
    out += "# HELP infer_requests_ended_total Generation requests ended, by endpoint and outcome (ok, error, timeout, disconnected).\n"
           "# TYPE infer_requests_ended_total counter\n";
    for (const auto& [k, n] : ended_) out += "infer_requests_ended_total{endpoint=\"" + k + "\"} " + std::to_string(n) + "\n";
    out += "# HELP infer_sequences_finished_total Sequences (choices) finished, by finish reason.\n# TYPE infer_sequences_finished_total counter\n";
    for (const auto& [k, n] : finish_) out += "infer_sequences_finished_total{reason=\"" + k + "\"} " + std::to_string(n) + "\n";
    out += "# HELP infer_embedding_requests_total Embedding and rerank requests accepted, by endpoint.\n"
           "# TYPE infer_embedding_requests_total counter\n";
    for (const auto& [ep, n] : embed_started_)
      out += "infer_embedding_requests_total{endpoint=\"" + ep + "\"} " + std::to_string(n) + "\n";
    out += "# HELP infer_embedding_requests_ended_total Embedding and rerank requests ended, by endpoint and outcome (ok, refused, error).\n"
           "# TYPE infer_embedding_requests_ended_total counter\n";
    for (const auto& [k, n] : embed_ended_)
      out += "infer_embedding_requests_ended_total{endpoint=\"" + k + "\"} " + std::to_string(n) + "\n";
    gauge("infer_embedding_tokens_total", "Tokens computed by embedding and rerank requests.", static_cast<double>(embed_tokens_),
          "counter");
    gauge("infer_prompt_tokens_total", "Prompt tokens of finished sequences.", static_cast<double>(prompt_tokens_), "counter");
    gauge("infer_generation_tokens_total", "Tokens generated by finished sequences.", static_cast<double>(generated_tokens_), "counter");
    ttft_.render(out, "infer_time_to_first_token_seconds", "Time from submission to the first generated token.");
    tpot_.render(out, "infer_time_per_output_token_seconds", "Mean time per generated token after the first, per sequence.");
    e2e_.render(out, "infer_request_duration_seconds", "Time from submission to the end of a sequence.");
    queue_.render(out, "infer_queue_time_seconds", "Time from submission to the first scheduled step.");
    gauge("infer_requests_in_flight", "HTTP generation requests being served.", in_flight);
    if (es) {
      gauge("infer_num_requests_running", "Sequences the engine is computing.", es->n_running);
      gauge("infer_num_requests_waiting", "Sequences waiting for admission (queue depth).", es->n_waiting);
      gauge("infer_kv_cache_blocks_total", "KV cache blocks.", es->kv_blocks_total);
      gauge("infer_kv_cache_blocks_used", "KV cache blocks in use.", es->kv_blocks_used);
      gauge("infer_kv_cache_usage_ratio", "Fraction of the KV cache in use.",
            es->kv_blocks_total > 0 ? static_cast<double>(es->kv_blocks_used) / es->kv_blocks_total : 0.0);
      gauge("infer_kv_cache_bytes_used", "KV cache bytes in use.", static_cast<double>(es->kv_bytes_used));
      gauge("infer_prefix_cache_queries_total", "Prompt tokens looked up in the prefix cache.",
            static_cast<double>(es->prefix_query_tokens), "counter");
      gauge("infer_prefix_cache_hits_total", "Prompt tokens found in the prefix cache.", static_cast<double>(es->prefix_hit_tokens),
            "counter");
      gauge("infer_prefix_cache_hit_rate", "Prefix cache hits / queries since start.",
            es->prefix_query_tokens ? static_cast<double>(es->prefix_hit_tokens) / es->prefix_query_tokens : 0.0);
      gauge("infer_preemptions_total", "Sequences preempted for KV space.", static_cast<double>(es->n_preemptions), "counter");
      gauge("infer_engine_steps_total", "Engine forward steps.", static_cast<double>(es->n_steps), "counter");
      gauge("infer_engine_generated_tokens_total", "Tokens the engine generated.", static_cast<double>(es->n_generated_tokens),
            "counter");
      gauge("infer_spec_draft_tokens_total", "Speculative draft tokens the model checked.", static_cast<double>(es->draft_tokens),
            "counter");
      gauge("infer_spec_accepted_tokens_total", "Speculative draft tokens accepted.", static_cast<double>(es->accepted_tokens),
            "counter");
      gauge("infer_spec_acceptance_rate", "Accepted / drafted tokens since start (0 without speculation).",
            es->draft_tokens ? static_cast<double>(es->accepted_tokens) / static_cast<double>(es->draft_tokens) : 0.0);
      gauge("infer_spec_mean_accepted_length", "Tokens emitted per verification step (accepted drafts + 1).",
            es->mean_accepted_length);
    }
    return out;
  }

 private:
  mutable std::mutex mu_;
  std::map<int, uint64_t> http_;
  std::map<std::string, uint64_t> started_, ended_, finish_;
  std::map<std::string, uint64_t> embed_started_, embed_ended_;
  uint64_t prompt_tokens_ = 0, generated_tokens_ = 0, embed_tokens_ = 0;
  Histogram ttft_{{0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}};
  Histogram tpot_{{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1}};
  Histogram e2e_{{0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300}};
  Histogram queue_{{0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10, 60}};
};

}  // namespace serve
