#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <memory>

#include "cli.h"

namespace cli {
namespace {

// ---- perplexity ----

const FlagTable kPerplexityFlags = kModelFlags + FlagTable{
    {"-f, --file", "FILE", nullptr, "the text to score (required)"},
    {"-c, --ctx-size, --ctx", "N", "0 (the model's context, at most 512)", "tokens per window"},
    {"-t, --threads", "N", "0 (all cores)", "compute threads"},
    {"--base", "MODEL", nullptr, "compare with this model (same vocabulary): KL divergence, top-1 agreement"},
    {"--json", nullptr, nullptr, "one JSON object on stdout"},
};

int cmd_perplexity(int argc, char** argv) {
  Args a(argc, argv, 2, kPerplexityFlags);
  a.no_positionals();
  if (!a.has("--file")) throw UsageError{"perplexity needs -f TEXT_FILE"};
  const int32_t n_ctx = static_cast<int32_t>(a.get_int("--ctx-size", 0, 0, 1 << 20));
  const int32_t n_threads = static_cast<int32_t>(a.get_int("--threads", 0, 0, 1024));
  const std::string text = read_file(a.get("--file"));
  Model model(model_path(a), backend_flag(a));
  std::unique_ptr<Model> base;
  if (a.has("--base")) base = std::make_unique<Model>(a.get("--base"), backend_flag(a));
  infer_perplexity_params pp;
  infer_perplexity_params_init(&pp);
  pp.n_ctx = n_ctx;
  pp.n_threads = n_threads;
  pp.base = base ? base->m : nullptr;
  // On a terminal, one line on stderr updated in place after each group of
  // windows (the library's "perplexity: ..." debug messages; erased at the
  // end); nothing when stderr is a file or a pipe.
  const bool tty = isatty(fileno(stderr)) != 0;
  if (tty) {
    infer_set_log_callback(
        [](infer_log_level, const char* msg, void*) {
          if (std::strncmp(msg, "perplexity: ", 12) != 0) return;
          std::fprintf(stderr, "\r%s", msg);
          std::fflush(stderr);
        },
        nullptr, INFER_LOG_DEBUG);
  }
  infer_perplexity_result r;
  std::memset(&r, 0, sizeof r);
  r.struct_size = sizeof r;
  const infer_status st = infer_perplexity(model.m, text.c_str(), &pp, &r);
  if (tty) {
    infer_set_log_callback(nullptr, nullptr, INFER_LOG_ERROR);
    std::fprintf(stderr, "\r\x1b[K");  // erase the progress line
  }
  check(st, "computing perplexity");
  if (a.flag("--json")) {
    std::printf("{\"perplexity\": %s, \"nll\": %s, \"n_tokens\": %lld, \"n_chunks\": %d", num(r.perplexity).c_str(),
                num(r.nll).c_str(), (long long)r.n_tokens, r.n_chunks);
    if (base)
      std::printf(", \"kl_divergence\": %s, \"top1_agreement\": %s, \"base_perplexity\": %s",
                  num(r.kl_divergence).c_str(), num(r.top1_agreement).c_str(), num(r.base_perplexity).c_str());
    std::printf("}\n");
  } else {
    std::printf("perplexity %.4f over %lld tokens (%d windows)\n", r.perplexity, (long long)r.n_tokens, r.n_chunks);
    if (base)
      std::printf("vs base: KL divergence %.6f nats/token, top-1 agreement %.2f%%, base perplexity %.4f\n",
                  r.kl_divergence, 100.0 * r.top1_agreement, r.base_perplexity);
  }
  return 0;
}


// ---- bench ----

const FlagTable kBenchFlags = kModelFlags + FlagTable{
    {"-p", "N", "64", "prompt tokens per sequence"},
    {"-n", "N", "32", "generated tokens per sequence"},
    {"-t, --threads", "N", "2", "compute threads (0: all cores)"},
    {"-r, --reps", "N", "3", "repetitions (the best counts)"},
    {"--batch", "B1,B2,...", "1", "sequences decoded together; one measurement per size"},
} + kKvFlags + kSpecFlags + kTpFlags + FlagTable{
    {"--json", nullptr, nullptr, "one JSON object per batch size on stdout (with --tp: also the communication time)"},
};

int cmd_bench(int argc, char** argv) {
  Args a(argc, argv, 2, kBenchFlags);
  a.no_positionals();
  // --batch 1,4,16: one measurement per batch size.
  std::vector<int32_t> batches;
  {
    std::stringstream ss(a.get("--batch", "1"));
    std::string item;
    while (std::getline(ss, item, ',')) {
      char* end = nullptr;
      const long v = std::strtol(item.c_str(), &end, 10);
      if (item.empty() || *end || v < 1 || v > 4096) throw UsageError{"--batch takes sizes in [1, 4096], e.g. 1,4,16"};
      batches.push_back(static_cast<int32_t>(v));
    }
  }
  infer_engine_params ep;
  infer_engine_params_init(&ep);
  apply_kv_flags(a, ep);
  std::string spec_layers;
  DraftModel draft;
  apply_spec_flags(a, ep, spec_layers, &draft);
  infer_bench_params base;
  infer_bench_params_init(&base);
  base.n_prompt = static_cast<int32_t>(a.get_int("-p", 64, 1, 1 << 20));
  base.n_gen = static_cast<int32_t>(a.get_int("-n", 32, 0, 1 << 20));
  base.n_threads = static_cast<int32_t>(a.get_int("--threads", 2, 0, 1024));
  base.repetitions = static_cast<int32_t>(a.get_int("--reps", 3, 1, 1000));
  const int32_t tp = apply_tp_flags(a, ep);
  Model model(model_path(a), backend_flag(a), false, tp);
  const int32_t rank = infer_model_tp_rank(model.m);
  if (infer_model_tp_size(model.m) > 1) tp_state().rank = rank;
  for (int32_t batch : batches) {
    infer_bench_params bp = base;
    bp.batch = batch;
    bp.engine = &ep;
    infer_bench_result r;
    std::memset(&r, 0, sizeof r);
    r.struct_size = sizeof r;
    // Ranks 1..N-1 of --tp follow rank 0's bench (the same calls) and print nothing.
    const infer_status st = infer_bench(model.m, &bp, &r);
    if (rank > 0) {
      if (st != INFER_OK) throw RankError{rank, std::string(infer_status_string(st)) + ": " + infer_last_error()};
      continue;
    }
    check(st, "benchmarking");
    // Tensor parallelism: time in collectives per decode step and per generated token.
    const double decode_tokens = static_cast<double>(r.batch) * (r.n_gen > 1 ? r.n_gen - 1 : 0);
    const double comm_step_ms = r.decode_steps > 0 ? r.decode_comm_ms / r.decode_steps : 0;
    const double comm_token_ms = decode_tokens > 0 ? r.decode_comm_ms / decode_tokens : 0;
    if (a.flag("--json") && tp > 1)
      std::printf("{\"batch\": %d, \"n_prompt\": %d, \"n_gen\": %d, \"threads\": %d, \"kv_type\": \"%s\", "
                  "\"prefill_tokens_per_s\": %s, \"decode_tokens_per_s\": %s, \"prefill_ms\": %s, \"decode_ms\": %s, "
                  "\"tp\": %d, \"decode_steps\": %lld, \"prefill_comm_ms\": %s, \"decode_comm_ms\": %s, "
                  "\"comm_ms_per_step\": %s, \"comm_ms_per_token\": %s, \"decode_comm_bytes\": %llu}\n",
                  r.batch, r.n_prompt, r.n_gen, r.n_threads, kv_type_name(ep.kv_type), num(r.prefill_tokens_per_s).c_str(),
                  num(r.decode_tokens_per_s).c_str(), num(r.prefill_ms).c_str(), num(r.decode_ms).c_str(), tp,
                  static_cast<long long>(r.decode_steps), num(r.prefill_comm_ms).c_str(), num(r.decode_comm_ms).c_str(),
                  num(comm_step_ms).c_str(), num(comm_token_ms).c_str(), static_cast<unsigned long long>(r.decode_comm_bytes));
    else if (a.flag("--json"))
      std::printf("{\"batch\": %d, \"n_prompt\": %d, \"n_gen\": %d, \"threads\": %d, \"kv_type\": \"%s\", "
                  "\"prefill_tokens_per_s\": %s, \"decode_tokens_per_s\": %s, \"prefill_ms\": %s, \"decode_ms\": %s}\n",
                  r.batch, r.n_prompt, r.n_gen, r.n_threads, kv_type_name(ep.kv_type), num(r.prefill_tokens_per_s).c_str(),
                  num(r.decode_tokens_per_s).c_str(), num(r.prefill_ms).c_str(), num(r.decode_ms).c_str());
    else
      std::printf("batch %d, threads %d: prefill %d tokens each: %.1f tok/s (%.2f ms); decode %d each: %.1f tok/s "
                  "(%.2f ms)\n",
                  r.batch, r.n_threads, r.n_prompt, r.prefill_tokens_per_s, r.prefill_ms, r.n_gen,
                  r.decode_tokens_per_s, r.decode_ms);
    if (tp > 1 && !a.flag("--json"))
      std::printf("  tp %d: communication %.3f ms per decode step, %.3f ms per generated token (%.1f%% of decode); "
                  "prefill %.2f ms (%.1f%%)\n",
                  tp, comm_step_ms, comm_token_ms, r.decode_ms > 0 ? 100 * r.decode_comm_ms / r.decode_ms : 0.0,
                  r.prefill_comm_ms, r.prefill_ms > 0 ? 100 * r.prefill_comm_ms / r.prefill_ms : 0.0);
  }
  return 0;
}

// ---- convert ----

const FlagTable kConvertFlags = {
    {"-o, --output", "OUT.gguf", nullptr, "the GGUF file to write (required)"},
    {"--type", "TYPE", "the checkpoint's", "hf: weight format of the matrices (f32, f16, bf16, q8_0, q4_0, ...)"},
    {"--group", "N", "128", "hf: int4 group size"},
    {"-t, --threads", "N", "0 (all cores)", "hf: threads"},
    {"--quiet", nullptr, nullptr, "hf: no progress bar"},
};

int cmd_convert_hf(const Args& a) {
  const auto& pos = a.positionals();
  if (pos.size() != 2 || !a.has("--output"))
    throw UsageError{"usage: infer convert hf DIR -o OUT.gguf [--type TYPE]"};
  const std::string out = a.get("--output"), type = a.get("--type", "");
  infer_quantize_params p;
  infer_quantize_params_init(&p);
  p.type = type.empty() ? nullptr : type.c_str();
  p.group_size = static_cast<int32_t>(a.get_int("--group", 128, 1, 1 << 20));
  p.n_threads = static_cast<int32_t>(a.get_int("--threads", 0, 0, 1024));
  // One line per tensor group of 10% on stderr; notes as they come.
  static int last_decile;
  last_decile = -1;
  if (!a.flag("--quiet"))
    p.progress = [](double f, const char* what, void*) {
      const int d = static_cast<int>(f * 10);
      if (d == last_decile) return;
      last_decile = d;
      std::fprintf(stderr, "%3d%% %s\n", d * 10, what);
    };
  p.note = [](const char* msg, void*) { std::fprintf(stderr, "note: %s\n", msg); };
  infer_quantize_result r;
  r.struct_size = sizeof r;
  check(infer_convert_hf(pos[1].c_str(), out.c_str(), &p, &r), "converting");
  std::fprintf(stderr, "wrote %s: %lld tensors, %.1f MiB\n", out.c_str(), (long long)r.n_tensors, r.bytes_out / 1048576.0);
  return 0;
}

int cmd_convert(int argc, char** argv) {
  Args a(argc, argv, 2, kConvertFlags);
  const auto& pos = a.positionals();
  if (!pos.empty() && pos[0] == "hf") return cmd_convert_hf(a);
  if (pos.empty() || pos[0] != "llama2c")
    throw UsageError{"usage: infer convert llama2c CHECKPOINT TOKENIZER.bin -o OUT.gguf | infer convert hf DIR -o OUT.gguf [--type TYPE]"};
  if (pos.size() != 3 || !a.has("--output"))
    throw UsageError{"usage: infer convert llama2c CHECKPOINT TOKENIZER.bin -o OUT.gguf"};
  const std::string out = a.get("--output");
  check(infer_convert_llama2c(pos[1].c_str(), pos[2].c_str(), out.c_str()), "converting");
  std::fprintf(stderr, "wrote %s\n", out.c_str());
  return 0;
}

const Register kPerplexity{{"perplexity", "perplexity of a model on a text (and the comparison with a base model)",
                            "infer perplexity [-m MODEL] -f TEXT [-c N] [--base MODEL] [--json]", &kPerplexityFlags,
                            nullptr, cmd_perplexity}};
const Register kBench{{"bench", "prefill and decode speed", "infer bench [-m MODEL] [-p 64] [-n 32] [-t 2] [--batch 1,4,16] [options]",
                       &kBenchFlags, nullptr, cmd_bench}};
const Register kConvert{{"convert", "convert a llama2.c checkpoint or a Hugging Face directory to GGUF",
                         "infer convert llama2c CHECKPOINT.bin TOKENIZER.bin -o OUT.gguf | infer convert hf DIR -o OUT.gguf "
                         "[--type TYPE]",
                         &kConvertFlags, nullptr,
                         cmd_convert}};
}  // namespace
}  // namespace cli
