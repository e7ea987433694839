#include <memory>

#include "cli.h"

namespace cli {
namespace {

// ---- perplexity ----

int cmd_perplexity(int argc, char** argv) {
  Args a(argc, argv, 2, {"-m", "--model", "--backend", "-f", "--file", "--ctx", "-c", "-t", "--threads", "--base"}, {"--json"});
  if (!a.positionals().empty()) throw UsageError{"unexpected argument '" + a.positionals()[0] + "'"};
  if (!a.has("-f") && !a.has("--file")) throw UsageError{"perplexity needs -f TEXT_FILE"};
  const std::string text = read_file(a.get2("-f", "--file"));
  Model model(model_path(a), backend_flag(a));
  std::unique_ptr<Model> base;
  if (a.has("--base")) base = std::make_unique<Model>(a.get("--base"), backend_flag(a));
  infer_perplexity_params pp;
  infer_perplexity_params_init(&pp);
  pp.n_ctx = static_cast<int32_t>(a.get_int("--ctx", "-c", 0, 0, 1 << 20));
  pp.n_threads = static_cast<int32_t>(a.get_int("-t", "--threads", 0, 0, 1024));
  pp.base = base ? base->m : nullptr;
  infer_perplexity_result r;
  std::memset(&r, 0, sizeof r);
  r.struct_size = sizeof r;
  check(infer_perplexity_ex(model.m, text.c_str(), &pp, &r), "computing perplexity");
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

int cmd_bench(int argc, char** argv) {
  Args a(argc, argv, 2, with({"-m", "--model", "--backend", "-p", "-n", "-t", "--threads", "-r", "--reps", "--batch"}, kKvFlags),
         with({"--json"}, kKvBoolFlags));
  if (!a.positionals().empty()) throw UsageError{"unexpected argument '" + a.positionals()[0] + "'"};
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
  Model model(model_path(a), backend_flag(a));
  infer_engine_params ep;
  infer_engine_params_init(&ep);
  apply_kv_flags(a, ep);
  for (int32_t batch : batches) {
    infer_bench_params bp;
    infer_bench_params_init(&bp);
    bp.n_prompt = static_cast<int32_t>(a.get_int("-p", "-p", 64, 1, 1 << 20));
    bp.n_gen = static_cast<int32_t>(a.get_int("-n", "-n", 32, 0, 1 << 20));
    bp.n_threads = static_cast<int32_t>(a.get_int("-t", "--threads", 2, 0, 1024));
    bp.repetitions = static_cast<int32_t>(a.get_int("-r", "--reps", 3, 1, 1000));
    bp.batch = batch;
    bp.engine = &ep;
    infer_bench_result r;
    std::memset(&r, 0, sizeof r);
    r.struct_size = sizeof r;
    check(infer_bench(model.m, &bp, &r), "benchmarking");
    if (a.flag("--json"))
      std::printf("{\"batch\": %d, \"n_prompt\": %d, \"n_gen\": %d, \"threads\": %d, \"kv_type\": \"%s\", "
                  "\"prefill_tokens_per_s\": %s, \"decode_tokens_per_s\": %s, \"prefill_ms\": %s, \"decode_ms\": %s}\n",
                  r.batch, r.n_prompt, r.n_gen, r.n_threads, kv_type_name(ep.kv_type), num(r.prefill_tokens_per_s).c_str(),
                  num(r.decode_tokens_per_s).c_str(), num(r.prefill_ms).c_str(), num(r.decode_ms).c_str());
    else
      std::printf("batch %d, threads %d: prefill %d tokens each: %.1f tok/s (%.2f ms); decode %d each: %.1f tok/s "
                  "(%.2f ms)\n",
                  r.batch, r.n_threads, r.n_prompt, r.prefill_tokens_per_s, r.prefill_ms, r.n_gen,
                  r.decode_tokens_per_s, r.decode_ms);
  }
  return 0;
}

// ---- convert ----

int cmd_convert(int argc, char** argv) {
  Args a(argc, argv, 2, {"-o", "--output"}, {});
  const auto& pos = a.positionals();
  if (pos.empty() || pos[0] != "llama2c")
    throw UsageError{"usage: infer convert llama2c CHECKPOINT TOKENIZER.bin -o OUT.gguf"};
  if (pos.size() != 3 || !a.has("-o") && !a.has("--output"))
    throw UsageError{"usage: infer convert llama2c CHECKPOINT TOKENIZER.bin -o OUT.gguf"};
  const std::string out = a.get2("-o", "--output");
  check(infer_convert_llama2c(pos[1].c_str(), pos[2].c_str(), out.c_str()), "converting");
  std::fprintf(stderr, "wrote %s\n", out.c_str());
  return 0;
}

const Register kPerplexity{{"perplexity", "-m MODEL -f TEXT [--ctx N] [-t N] [--base MODEL] [--json]", cmd_perplexity}};
const Register kBench{{"bench", "prefill and decode speed: -m MODEL [-p 64] [-n 32] [-t 2] [-r 3] [--batch 1,4,16]\n"
                               "              [--kv-type T] [--kv-budget-mb N] [--kv-block N] [--no-prefix-cache] [--json]", cmd_bench}};
const Register kConvert{{"convert", "llama2c CHECKPOINT TOKENIZER.bin -o OUT.gguf", cmd_convert}};
}  // namespace
}  // namespace cli
