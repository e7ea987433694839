#include "cli.h"
#include <memory>

namespace cli {
namespace {

// ---- run ----

const FlagTable kRunFlags = kModelFlags + FlagTable{
    {"-p, --prompt", "TEXT", "\"\" (BOS alone)", "the prompt"},
    {"-f, --file", "FILE", nullptr, "read the prompt from FILE"},
    {"--tokens", "FILE", nullptr, "the prompt as token ids (whitespace separated), used as they are"},
    {"-n, --n-predict", "N", "128", "tokens to generate; -1: until end of text or the context is full"},
    {"--stop", "STR", nullptr, "stop before this text (may be repeated)"},
    {"--ignore-eos", nullptr, nullptr, "keep generating after the end-of-text token"},
    {"--no-bos", nullptr, nullptr, "do not add the BOS token to a text prompt"},
    {"--special", nullptr, nullptr, "parse special-token text such as <s> in the prompt"},
    {"--grammar", "FILE", nullptr, "constrain the output to a GBNF grammar (start rule root)"},
    {"--json-schema", "FILE", nullptr, "constrain the output to JSON that validates against this JSON schema"},
} + kSamplingFlags + kCtxFlags + kThreadFlags + kKvFlags + kSpecFlags + kTpFlags + FlagTable{
    {"--dump-logits", "OUT.f32", nullptr, "write every position's logits row (float32 x n_vocab) to OUT.f32"},
    {"--json", nullptr, nullptr, "print one JSON object (text and statistics) on stdout instead of streaming"},
    {"--quiet", nullptr, nullptr, "print only the generated text (no prompt echo, no statistics)"},
};

struct RunOutput {
  bool stream = true;
};

int32_t run_token(infer_request*, int32_t, const char* text, size_t len, void* user) {
  if (static_cast<RunOutput*>(user)->stream) {
    std::fwrite(text, 1, len, stdout);
    std::fflush(stdout);
  }
  return interrupted() ? 1 : 0;  // Ctrl-C: cancel; the statistics still print
}

int cmd_run(int argc, char** argv) {
  Args a(argc, argv, 2, kRunFlags);
  a.no_positionals();
  const int sources = a.has("--prompt") + a.has("--file") + a.has("--tokens");
  if (sources > 1) throw UsageError{"give only one of -p, -f and --tokens"};
  // Every argument is checked before the model loads.
  infer_sampling_params sp = sampling_flags(a);
  const long long n_predict = a.get_int("-n", "--n-predict", 128, -1, 1 << 24);
  infer_engine_params ep;
  infer_engine_params_init(&ep);
  ep.n_threads = static_cast<int32_t>(a.get_int("--threads", 0, 0, 1024));
  ep.max_seqs = 1;
  ep.n_ctx = static_cast<int32_t>(a.get_int("--ctx-size", 0, 0, 1 << 24));
  apply_kv_flags(a, ep);
  std::string spec_layers;
  DraftModel draft;
  apply_spec_flags(a, ep, spec_layers);
  const int32_t tp = apply_tp_flags(a, ep);
  const bool json = a.flag("--json"), quiet = a.flag("--quiet");
  // Ctrl-C from here on stops the run with its statistics: a signal that
  // comes while the model loads or the prompt is read is seen at the first
  // token (a second Ctrl-C ends the program at once).
  catch_interrupt();
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
  } else {
    prompt = a.has("--file") ? read_file(a.get("--file")) : a.get("--prompt", "");
  }
  if (a.has("--grammar") && a.has("--json-schema")) throw UsageError{"give only one of --grammar and --json-schema"};
  const std::string grammar = a.has("--grammar") ? read_file(a.get("--grammar")) : "";
  const std::string schema = a.has("--json-schema") ? read_file(a.get("--json-schema")) : "";
  if (a.has("--grammar") && infer_grammar_check(grammar.c_str()) != INFER_OK)
    throw UsageError{std::string("--grammar: ") + infer_last_error()};
  if (a.has("--json-schema")) {
    const infer_status st = infer_json_schema_to_grammar(schema.c_str(), nullptr, 0, nullptr);
    if (st != INFER_OK && st != INFER_ERR_BUFFER_TOO_SMALL) throw UsageError{std::string("--json-schema: ") + infer_last_error()};
  }

  Model model(model_path(a), backend_flag(a), false, tp);
  if (tp_follow(model.m, ep)) return 0;  // ranks 1..N-1 of --tp
  load_draft(a, ep, draft);              // rank 0 alone runs a draft model
  Engine engine(model.m, ep);
  infer_model_info info;
  infer_model_info_init(&info);
  check(infer_model_get_info(model.m, &info), "reading model info");
  const int32_t n_ctx = ep.n_ctx > 0 ? ep.n_ctx : info.n_ctx_train;
  warn_context_over_trained("run", n_ctx, info);

  infer_request_params rp;
  infer_request_params_init(&rp);
  rp.max_tokens = n_predict < 0 ? n_ctx : static_cast<int32_t>(n_predict);
  rp.sampling = &sp;
  rp.add_bos = a.flag("--no-bos") ? 0 : -1;
  rp.parse_special = a.flag("--special") ? 1 : 0;
  rp.ignore_eos = a.flag("--ignore-eos") ? 1 : 0;
  if (a.has("--grammar")) rp.grammar = grammar.c_str();
  if (a.has("--json-schema")) rp.json_schema = schema.c_str();
  if (!prompt_tokens.empty()) {
    rp.prompt_tokens = prompt_tokens.data();
    rp.n_prompt_tokens = prompt_tokens.size();
  } else {
    rp.prompt = prompt.c_str();
    rp.prompt_len = prompt.size();
  }
  const std::vector<std::string> stops = a.get_all("--stop");
  std::vector<const char*> stop_ptrs;
  for (auto& s : stops) stop_ptrs.push_back(s.c_str());
  rp.stop = stop_ptrs.empty() ? nullptr : stop_ptrs.data();
  rp.n_stop = stop_ptrs.size();
  const bool dump = a.has("--dump-logits");
  if (dump) rp.logits = INFER_LOGITS_PROMPT | INFER_LOGITS_GENERATED;
  RunOutput out;
  out.stream = !json;
  rp.on_token = run_token;
  rp.user_data = &out;

  infer_request* req = nullptr;
  check(infer_submit(engine.e, &rp, &req), "submitting the request");
  // Freed on every path out, including the errors thrown below.
  const std::unique_ptr<infer_request, void (*)(infer_request*)> req_owner(req, infer_request_free);
  // Echo the prompt as text (the reference output includes it).
  if (!quiet && !json) {
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
  if (!json) std::fputc('\n', stdout);
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
  size_t need = 0;
  infer_request_text(req, nullptr, 0, &need);
  std::string text(need, '\0');
  check(infer_request_text(req, text.data(), text.size(), &need), "reading the text");
  text.resize(need ? need - 1 : 0);
  // Why it stopped, when the reason is not the obvious one.
  std::string note;
  if (s.finish_reason == INFER_FINISH_CANCELLED) note = "interrupted";
  else if (s.finish_reason == INFER_FINISH_LENGTH && s.n_prompt_tokens + s.n_generated_tokens >= n_ctx)
    note = "the context is full (" + std::to_string(n_ctx) + " tokens; -c N sets it)";
  static const char* reasons[] = {"none", "stop", "length", "cancelled", "error"};
  if (json) {
    infer_engine_stats es;
    infer_engine_stats_init(&es);
    check(infer_engine_get_stats(engine.e, &es), "reading engine stats");
    std::printf("{\"text\": \"%s\", \"prompt_tokens\": %d, \"generated_tokens\": %d, \"cached_prompt_tokens\": %d, \"ttft_ms\": %s, "
                "\"tpot_ms\": %s, \"prefill_tokens_per_s\": %s, \"decode_tokens_per_s\": %s, \"total_ms\": %s, "
                "\"finish_reason\": \"%s\", \"context_full\": %s, \"n_ctx\": %d, \"kv_type\": \"%s\", \"kv_block_size\": %d, \"kv_blocks_total\": %d, "
                "\"kv_blocks_used\": %d, \"kv_blocks_free\": %d, \"kv_blocks_cached\": %d, \"kv_bytes_total\": %llu, "
                "\"kv_bytes_used\": %llu, \"prefix_hit_tokens\": %llu, \"prefix_query_tokens\": %llu, "
                "\"draft_tokens\": %llu, \"accepted_tokens\": %llu, \"acceptance_rate\": %s, \"mean_accepted_length\": %s, \"seed\": %llu}\n",
                json_escape(text).c_str(), s.n_prompt_tokens, s.n_generated_tokens, s.n_cached_tokens, num(s.ttft_ms).c_str(),
                num(s.tpot_ms).c_str(), num(s.prefill_tokens_per_s).c_str(), num(s.decode_tokens_per_s).c_str(),
                num(s.total_ms).c_str(), reasons[s.finish_reason],
                s.finish_reason == INFER_FINISH_LENGTH && s.n_prompt_tokens + s.n_generated_tokens >= n_ctx ? "true" : "false",
                n_ctx, kv_type_name(es.kv_type), es.kv_block_size,
                es.kv_blocks_total, es.kv_blocks_used, es.kv_blocks_free, es.kv_blocks_cached,
                (unsigned long long)es.kv_bytes_total, (unsigned long long)es.kv_bytes_used,
                (unsigned long long)es.prefix_hit_tokens, (unsigned long long)es.prefix_query_tokens,
                (unsigned long long)s.draft_tokens, (unsigned long long)s.accepted_tokens, num(s.acceptance_rate).c_str(),
                num(s.mean_accepted_length).c_str(), (unsigned long long)sp.seed);
  } else if (!quiet) {
    if (!note.empty()) std::fprintf(stderr, "\n[stopped: %s]", note.c_str());
    std::fprintf(stderr, "\n%d prompt tokens, %d generated; TTFT %.2f ms, TPOT %.2f ms; prefill %.1f tok/s, decode %.1f tok/s\n",
                 s.n_prompt_tokens, s.n_generated_tokens, s.ttft_ms, s.tpot_ms, s.prefill_tokens_per_s,
                 s.decode_tokens_per_s);
    if (s.draft_tokens > 0)
      std::fprintf(stderr, "speculative: %llu drafted, %llu accepted (%.1f%%), %.2f tokens per verification step\n",
                   (unsigned long long)s.draft_tokens, (unsigned long long)s.accepted_tokens, 100 * s.acceptance_rate,
                   s.mean_accepted_length);
  }
  return s.finish_reason == INFER_FINISH_CANCELLED ? 130 : 0;
}

const Register kRun{{"run", "generate text from a prompt",
                     "infer run [-m MODEL] [-p PROMPT | -f FILE | --tokens IDS_FILE] [-n N] [sampling] [options]",
                     &kRunFlags,
                     "Prints the prompt, then streams the continuation; statistics go to stderr. Ctrl-C stops the\n"
                     "generation and prints the statistics so far (exit status 130).",
                     cmd_run}};
}  // namespace
}  // namespace cli
