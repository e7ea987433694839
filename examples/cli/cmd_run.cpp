#include "cli.h"
#include <memory>

namespace cli {
namespace {

// ---- run ----

int cmd_run(int argc, char** argv) {
  Args a(argc, argv, 2,
         with({"-m", "--model", "--backend", "-p", "--prompt", "-f", "--file", "-n", "--n-predict", "--temp", "--top-k", "--top-p",
               "--min-p", "--repeat-penalty", "--repeat-last-n", "--frequency-penalty", "--presence-penalty", "--seed",
               "-t", "--threads", "--tokens", "--dump-logits", "--ctx", "--stop"},
              kKvFlags),
         with({"--json", "--no-bos", "--special", "--ignore-eos", "--quiet"}, kKvBoolFlags));
  if (!a.positionals().empty()) throw UsageError{"unexpected argument '" + a.positionals()[0] + "'"};
  const int sources = (a.has("-p") || a.has("--prompt")) + (a.has("-f") || a.has("--file")) + a.has("--tokens");
  if (sources > 1) throw UsageError{"give only one of -p, -f and --tokens"};
  Model model(model_path(a), backend_flag(a));

  infer_sampling_params sp;
  infer_sampling_params_init(&sp);
  sp.temperature = static_cast<float>(a.get_float("--temp", sp.temperature));
  sp.top_k = static_cast<int32_t>(a.get_int("--top-k", "--top-k", sp.top_k, -1, 1 << 30));
  sp.top_p = static_cast<float>(a.get_float("--top-p", sp.top_p));
  sp.min_p = static_cast<float>(a.get_float("--min-p", sp.min_p));
  sp.repeat_penalty = static_cast<float>(a.get_float("--repeat-penalty", sp.repeat_penalty));
  sp.penalty_last_n = static_cast<int32_t>(a.get_int("--repeat-last-n", "--repeat-last-n", sp.penalty_last_n, -1, 1 << 30));
  sp.frequency_penalty = static_cast<float>(a.get_float("--frequency-penalty", sp.frequency_penalty));
  sp.presence_penalty = static_cast<float>(a.get_float("--presence-penalty", sp.presence_penalty));
  sp.seed = static_cast<uint64_t>(a.get_int("--seed", "--seed", 0, 0, INT64_MAX));

  infer_engine_params ep;
  infer_engine_params_init(&ep);
  ep.n_threads = static_cast<int32_t>(a.get_int("-t", "--threads", 0, 0, 1024));
  ep.max_seqs = 1;
  ep.n_ctx = static_cast<int32_t>(a.get_int("--ctx", "--ctx", 0, 0, 1 << 24));
  apply_kv_flags(a, ep);
  Engine engine(model.m, ep);

  infer_request_params rp;
  infer_request_params_init(&rp);
  rp.max_tokens = static_cast<int32_t>(a.get_int("-n", "--n-predict", 128, 0, 1 << 24));
  rp.sampling = &sp;
  rp.add_bos = a.flag("--no-bos") ? 0 : -1;
  rp.parse_special = a.flag("--special") ? 1 : 0;
  rp.ignore_eos = a.flag("--ignore-eos") ? 1 : 0;
  std::string prompt;
  std::vector<int32_t> prompt_tokens;
  if (a.has("--tokens")) {
    std::istringstream in(read_file(a.get("--tokens")));
    std::string w;
    while (in >> w) {
      char* end = nullptr;
      const long v = std::strtol(w.c_str(), &end, 10);
      if (*end || v < INT32_MIN || v > INT32_MAX) throw UsageError{"--tokens: '" + w + "' is not a token id"};
      prompt_tokens.push_back(static_cast<int32_t>(v));
    }
    if (prompt_tokens.empty()) throw UsageError{"--tokens: the file holds no token ids"};
    rp.prompt_tokens = prompt_tokens.data();
    rp.n_prompt_tokens = prompt_tokens.size();
  } else {
    prompt = a.has("-f") || a.has("--file") ? read_file(a.get2("-f", "--file")) : a.get2("-p", "--prompt", "");
    rp.prompt = prompt.c_str();
    rp.prompt_len = prompt.size();
    if (prompt.empty()) rp.prompt_len = 0;
  }
  std::vector<std::string> stops;
  if (a.has("--stop")) stops.push_back(a.get("--stop"));
  std::vector<const char*> stop_ptrs;
  for (auto& s : stops) stop_ptrs.push_back(s.c_str());
  rp.stop = stop_ptrs.empty() ? nullptr : stop_ptrs.data();
  rp.n_stop = stop_ptrs.size();
  const bool dump = a.has("--dump-logits");
  if (dump) rp.logits = INFER_LOGITS_PROMPT | INFER_LOGITS_GENERATED;
  const bool quiet = a.flag("--quiet");
  rp.on_token = print_token;
  rp.user_data = const_cast<bool*>(&quiet);

  infer_request* req = nullptr;
  check(infer_submit(engine.e, &rp, &req), "submitting the request");
  // Freed on every path out, including the errors thrown below.
  const std::unique_ptr<infer_request, void (*)(infer_request*)> req_owner(req, infer_request_free);
  // Echo the prompt as text (the reference output includes it).
  if (!quiet) {
    std::vector<int32_t> ids = prompt_tokens;
    if (ids.empty() && !prompt.empty()) {
      size_t n = 0;
      infer_tokenize(model.m, prompt.data(), prompt.size(), 0, rp.parse_special, nullptr, 0, &n);
      ids.resize(n);
      check(infer_tokenize(model.m, prompt.data(), prompt.size(), 0, rp.parse_special, ids.data(), n, &n), "tokenizing");
    }
    size_t need = 0;
    infer_detokenize(model.m, ids.data(), ids.size(), 0, nullptr, 0, &need);
    std::string echo(need, '\0');
    check(infer_detokenize(model.m, ids.data(), ids.size(), 0, echo.data(), echo.size(), &need), "detokenizing");
    echo.resize(need ? need - 1 : 0);
    std::fwrite(echo.data(), 1, echo.size(), stdout);
    std::fflush(stdout);
  }
  const infer_status st = infer_engine_run(engine.e);
  check(st, "generating");
  infer_request_stats s;
  infer_request_stats_init(&s);
  infer_request_get_stats(req, &s);
  if (!quiet) std::fputc('\n', stdout);
  if (s.finish_reason == INFER_FINISH_ERROR) {
    const std::string msg = infer_request_error(req);
    throw ApiError{"generation failed: " + msg};
  }
  if (dump) {
    const float* data = nullptr;
    size_t rows = 0, n_vocab = 0;
    check(infer_request_logits(req, &data, &rows, &n_vocab), "reading logits");
    std::FILE* f = std::fopen(a.get("--dump-logits").c_str(), "wb");
    if (!f) throw UsageError{"cannot write '" + a.get("--dump-logits") + "': " + std::strerror(errno)};
    const size_t n = rows * n_vocab;
    const bool ok = (n == 0 || std::fwrite(data, sizeof(float), n, f) == n);
    if (std::fclose(f) != 0 || !ok) throw UsageError{"cannot write '" + a.get("--dump-logits") + "'"};
  }
  if (a.flag("--json")) {
    static const char* reasons[] = {"none", "stop", "length", "cancelled", "error"};
    infer_engine_stats es;
    infer_engine_stats_init(&es);
    check(infer_engine_get_stats(engine.e, &es), "reading engine stats");
    std::printf("{\"prompt_tokens\": %d, \"generated_tokens\": %d, \"cached_prompt_tokens\": %d, \"ttft_ms\": %s, "
                "\"tpot_ms\": %s, \"prefill_tokens_per_s\": %s, \"decode_tokens_per_s\": %s, \"total_ms\": %s, "
                "\"finish_reason\": \"%s\", \"kv_type\": \"%s\", \"kv_block_size\": %d, \"kv_blocks_total\": %d, "
                "\"kv_blocks_used\": %d, \"kv_blocks_free\": %d, \"kv_blocks_cached\": %d, \"kv_bytes_total\": %llu, "
                "\"kv_bytes_used\": %llu, \"prefix_hit_tokens\": %llu, \"prefix_query_tokens\": %llu}\n",
                s.n_prompt_tokens, s.n_generated_tokens, s.n_cached_tokens, num(s.ttft_ms).c_str(),
                num(s.tpot_ms).c_str(), num(s.prefill_tokens_per_s).c_str(), num(s.decode_tokens_per_s).c_str(),
                num(s.total_ms).c_str(), reasons[s.finish_reason], kv_type_name(es.kv_type), es.kv_block_size,
                es.kv_blocks_total, es.kv_blocks_used, es.kv_blocks_free, es.kv_blocks_cached,
                (unsigned long long)es.kv_bytes_total, (unsigned long long)es.kv_bytes_used,
                (unsigned long long)es.prefix_hit_tokens, (unsigned long long)es.prefix_query_tokens);
  } else {
    std::fprintf(stderr, "\n%d prompt tokens, %d generated; TTFT %.2f ms, TPOT %.2f ms; prefill %.1f tok/s, decode %.1f tok/s\n",
                 s.n_prompt_tokens, s.n_generated_tokens, s.ttft_ms, s.tpot_ms, s.prefill_tokens_per_s,
                 s.decode_tokens_per_s);
  }
  return 0;
}

const Register kRun{{"run",
                     "generate text: -m MODEL [-p PROMPT | -f FILE | --tokens FILE] [-n N] [--temp T]\n"
                     "              [--top-k K] [--top-p P] [--min-p P] [--repeat-penalty R] [--seed S] [-t THREADS]\n"
                     "              [--stop STR] [--dump-logits OUT] [--kv-type f32|f16|int8] [--kv-budget-mb N]\n"
                     "              [--kv-block N] [--host-kv-mb N] [--no-prefix-cache] [--json]",
                     cmd_run}};
}  // namespace
}  // namespace cli
