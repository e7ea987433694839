// The HTTP side of `infer bench-serve --url`: the benchmark's workload sent
// to an OpenAI-compatible server (ours, or any other) as streamed
// /v1/completions requests with the prompts as token ids, by `concurrency`
// workers on keep-alive connections. A worker takes the next request in
// arrival order and sends it at its arrival time (at once for --rate 0:
// a closed loop that keeps `concurrency` requests in flight).
//
// The stream is read the way a client that checks its answers would: every
// request must end with `data: [DONE]` after a usage chunk, or with an error
// body (HTTP status >= 400 or an error event), otherwise it counts as lost.
// The parsing is deliberately cheap (substring scans of each event, no JSON
// tree): the client shares the machine with the server it measures.
#include <httplib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <thread>

#include "../cli/cli.h"

namespace cli {
namespace {

using Clock = std::chrono::steady_clock;

// "http://host:port[/prefix]" -> ("http://host:port", "/prefix/v1" or "/v1").
std::pair<std::string, std::string> split_url(const std::string& url) {
  const size_t scheme = url.find("://");
  if (scheme == std::string::npos || url.compare(0, scheme, "http") != 0)
    throw UsageError{"--url: '" + url + "' is not an http://HOST:PORT address"};
  const size_t slash = url.find('/', scheme + 3);
  std::string base = url.substr(0, slash);
  std::string path = slash == std::string::npos ? "" : url.substr(slash);
  while (!path.empty() && path.back() == '/') path.pop_back();
  if (path.size() < 3 || path.compare(path.size() - 3, 3, "/v1") != 0) path += "/v1";
  return {base, path};
}

std::string request_body(const HttpBenchConfig& cfg, const BenchJob& j) {
  std::string b = "{\"model\":\"" + json_escape(cfg.model) + "\",\"prompt\":[";
  for (size_t i = 0; i < j.prompt.size(); ++i) {
    if (i) b += ',';
    b += std::to_string(j.prompt[i]);
  }
  b += "],\"max_tokens\":" + std::to_string(j.max_tokens) +
       ",\"ignore_eos\":true,\"temperature\":0,\"stream\":true,\"stream_options\":{\"include_usage\":true}}";
  return b;
}

// The integer after `"key":` in text, or -1.
int64_t int_after(const std::string& text, const char* key) {
  const size_t at = text.find(key);
  if (at == std::string::npos) return -1;
  size_t i = at + std::strlen(key);
  while (i < text.size() && (text[i] == ' ' || text[i] == ':')) ++i;
  int64_t v = 0;
  bool any = false;
  for (; i < text.size() && text[i] >= '0' && text[i] <= '9'; ++i, any = true) v = v * 10 + (text[i] - '0');
  return any ? v : -1;
}

HttpBenchOutcome run_one(httplib::Client& client, const std::string& path, const HttpBenchConfig& cfg,
                         const BenchJob& job) {
  HttpBenchOutcome out;
  const std::string body = request_body(cfg, job);
  httplib::Request req;
  req.method = "POST";
  req.path = path + "/completions";
  req.body = body;
  req.set_header("Content-Type", "application/json");
  if (!cfg.api_key.empty()) req.set_header("Authorization", "Bearer " + cfg.api_key);
  int status = 0;
  std::string pending, error_text;
  bool done = false, usage = false, failed = false;
  const Clock::time_point t0 = Clock::now();
  req.response_handler = [&](const httplib::Response& r) {
    status = r.status;
    return true;
  };
  req.content_receiver = [&](const char* data, size_t len, uint64_t, uint64_t) {
    if (status != 200) {
      error_text.append(data, len);
      return true;
    }
    pending.append(data, len);
    size_t start = 0;
    for (;;) {
      const size_t end = pending.find("\n\n", start);
      if (end == std::string::npos) break;
      const std::string ev = pending.substr(start, end - start);
      start = end + 2;
      if (ev.compare(0, 6, "data: ") != 0) continue;  // comments, keep-alives
      if (ev.compare(6, std::string::npos, "[DONE]") == 0) {
        done = true;
      } else if (ev.find("\"error\":{") != std::string::npos && ev.find("\"choices\"") == std::string::npos) {
        failed = true;
        error_text = ev.substr(6);
      } else if (ev.find("\"usage\":{") != std::string::npos) {
        usage = true;
        out.tokens = std::max<int64_t>(0, int_after(ev, "\"completion_tokens\""));
      } else if (std::isnan(out.ttft_ms) && ev.find("\"finish_reason\":null") != std::string::npos) {
        out.ttft_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
      }
    }
    pending.erase(0, start);
    return true;
  };
  httplib::Response res;
  httplib::Error err = httplib::Error::Success;
  const bool sent = client.send(req, res, err);
  out.e2e_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  if (!sent) {
    out.what = std::string("the request could not be sent or its answer read (") + httplib::to_string(err) + ")";
    return out;
  }
  if (status != 200) {
    out.kind = error_text.find("\"error\"") != std::string::npos ? HttpBenchOutcome::Failed : HttpBenchOutcome::Lost;
    out.what = "HTTP " + std::to_string(status) + ": " + error_text.substr(0, 300);
    return out;
  }
  if (failed) {
    out.kind = HttpBenchOutcome::Failed;
    out.what = error_text.substr(0, 300);
  } else if (done && usage) {
    out.kind = HttpBenchOutcome::Ok;
  } else {
    out.what = std::string(done ? "no usage chunk" : "no [DONE]") + " (" + std::to_string(pending.size()) +
               " bytes left unparsed)";
  }
  return out;
}

void bench_http(const HttpBenchConfig& cfg, const std::vector<BenchJob>& jobs, std::vector<HttpBenchOutcome>& out) {
  const auto [base, path] = split_url(cfg.url);
  out.assign(jobs.size(), HttpBenchOutcome{});
  std::atomic<size_t> next{0};
  const Clock::time_point start = Clock::now();
  auto worker = [&] {
    httplib::Client client(base);
    client.set_keep_alive(true);
    client.set_tcp_nodelay(true);
    client.set_connection_timeout(10, 0);
    client.set_read_timeout(600, 0);
    client.set_write_timeout(60, 0);
    for (;;) {
      const size_t i = next.fetch_add(1);
      if (i >= jobs.size()) return;
      std::this_thread::sleep_until(start + std::chrono::duration<double>(jobs[i].at_s));
      out[i] = run_one(client, path, cfg, jobs[i]);
    }
  };
  std::vector<std::thread> workers;
  const int n = std::max(1, std::min<int>(cfg.concurrency, static_cast<int>(jobs.size())));
  for (int w = 0; w < n; ++w) workers.emplace_back(worker);
  for (std::thread& t : workers) t.join();
}

// Installs the HTTP side into bench-serve when this file is linked.
const bool kInstalled = [] {
  http_bench() = bench_http;
  return true;
}();

}  // namespace
}  // namespace cli
