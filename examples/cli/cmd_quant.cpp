// infer quantize / infer synth: model quantization (RTN, GPTQ, AWQ) and
// synthetic models of real shapes, through the C API's quantization section.
#include <chrono>
#include <unistd.h>

#include "cli.h"

namespace cli {
namespace {

// A progress bar on stderr, redrawn at most every 100 ms (only on a terminal;
// otherwise one line per 10%).
struct Progress {
  std::chrono::steady_clock::time_point last{};
  int last_decile = -1;
  bool tty = isatty(2) != 0;
  bool drawn = false;
  static void cb(double f, const char* what, void* user) { static_cast<Progress*>(user)->update(f, what); }
  void update(double f, const char* what) {
    const auto now = std::chrono::steady_clock::now();
    if (tty) {
      if (f < 1.0 && now - last < std::chrono::milliseconds(100)) return;
      last = now;
      const int width = 30, filled = static_cast<int>(f * width + 0.5);
      std::fprintf(stderr, "\r[%.*s%.*s] %3d%% %-40.40s", filled, "##############################", width - filled,
                   "..............................", static_cast<int>(f * 100 + 0.5), what);
      drawn = true;
      if (f >= 1.0) {
        std::fputc('\n', stderr);
        drawn = false;
      }
    } else {
      const int decile = static_cast<int>(f * 10);
      if (decile == last_decile) return;
      last_decile = decile;
      std::fprintf(stderr, "%3d%% %s\n", decile * 10, what);
    }
  }
  static void note(const char* msg, void* user) {
    Progress* p = static_cast<Progress*>(user);
    if (p->drawn) std::fputc('\n', stderr);
    p->drawn = false;
    std::fprintf(stderr, "note: %s\n", msg);
  }
};

const FlagTable kQuantizeFlags = {
    {"--method", "rtn|gptq|awq", "rtn", "how weights are rounded (gptq and awq need --calib)"},
    {"--calib", "FILE", nullptr, "calibration text for gptq / awq"},
    {"--group", "N", "128", "int4 group size: 32, 64 or 128"},
    {"--output-tensor-type", "TYPE", "TYPE", "format of the output head (output.weight, or token_embd when tied)"},
    {"--token-embedding-type", "TYPE", "TYPE", "format of the token embedding (token_embd.weight)"},
    {"-t, --threads", "N", "0 (all cores)", "threads"},
    {"--calib-ctx", "N", "256", "tokens per calibration window"},
    {"--calib-tokens", "N", "8192", "most calibration tokens"},
    {"--damp", "F", "0.01", "GPTQ dampening (fraction of the mean Hessian diagonal)"},
    {"--act-order", nullptr, nullptr, "GPTQ: columns in order of decreasing Hessian diagonal"},
    {"--quiet", nullptr, nullptr, "no progress bar"},
};

int cmd_quantize(int argc, char** argv) {
  Args a(argc, argv, 2, kQuantizeFlags);
  const auto& pos = a.positionals();
  if (pos.size() != 3)
    throw UsageError{"usage: infer quantize IN.gguf OUT.gguf TYPE [--method rtn|gptq|awq] [--calib FILE] [--group N] "
                     "[--output-tensor-type TYPE] [--token-embedding-type TYPE] [--threads N]"};
  infer_quantize_params p;
  infer_quantize_params_init(&p);
  p.type = pos[2].c_str();
  const std::string output_type = a.get("--output-tensor-type", ""), embd_type = a.get("--token-embedding-type", "");
  if (!output_type.empty()) p.output_type = output_type.c_str();
  if (!embd_type.empty()) p.token_embedding_type = embd_type.c_str();
  p.group_size = static_cast<int32_t>(a.get_int("--group", 128, 1, 1 << 20));
  const std::string method = a.get("--method", "rtn");
  if (method == "rtn") p.method = INFER_QUANT_RTN;
  else if (method == "gptq") p.method = INFER_QUANT_GPTQ;
  else if (method == "awq") p.method = INFER_QUANT_AWQ;
  else throw UsageError{"--method must be rtn, gptq or awq, not '" + method + "'"};
  std::string calib;
  if (a.has("--calib")) calib = read_file(a.get("--calib"));
  if (p.method != INFER_QUANT_RTN && calib.empty()) throw UsageError{"--method " + method + " needs --calib FILE"};
  p.calib_text = calib.empty() ? nullptr : calib.c_str();
  p.n_threads = static_cast<int32_t>(a.get_int("--threads", 0, 0, 1024));
  p.calib_ctx = static_cast<int32_t>(a.get_int("--calib-ctx", 256, 2, 1 << 20));
  p.max_calib_tokens = static_cast<int32_t>(a.get_int("--calib-tokens", 8192, 2, 1 << 24));
  p.gptq_damp = static_cast<float>(a.get_float("--damp", 0.01));
  p.act_order = a.flag("--act-order") ? 1 : 0;
  Progress prog;
  if (!a.flag("--quiet")) p.progress = Progress::cb;
  p.note = Progress::note;
  p.user_data = &prog;
  infer_quantize_result r;
  std::memset(&r, 0, sizeof r);
  r.struct_size = sizeof r;
  check(infer_quantize(pos[0].c_str(), pos[1].c_str(), &p, &r), "quantizing");
  std::fprintf(stderr, "wrote %s: %lld tensors, %lld quantized (%lld fell back), %.1f MiB -> %.1f MiB\n",
               pos[1].c_str(), (long long)r.n_tensors, (long long)r.n_quantized, (long long)r.n_fallback,
               r.bytes_in / 1048576.0, r.bytes_out / 1048576.0);
  return 0;
}

const FlagTable kSynthFlags = {
    {"--preset", "NAME", nullptr, "model shape and architecture, e.g. tinyllama-1.1b, qwen2.5-0.5b, gemma2-2b, tiny-qwen3, tiny-chat (tiny, with a chat vocabulary and template; --list: all)"},
    {"--type", "TYPE", "f16", "weight format (as for quantize)"},
    {"--grow-from", "SMALL.gguf", nullptr,
     "embed this small llama model in the preset's shape (the same function, zero padded), then add --noise"},
    {"--noise", "S", "0", "with --grow-from: std of the Gaussian noise added to every matrix"},
    {"-o, --output", "OUT.gguf", nullptr, "the file to write (required)"},
    {"--group", "N", "128", "int4 group size"},
    {"--seed", "S", "1", "random seed of the weights"},
    {"-t, --threads", "N", "0 (all cores)", "threads"},
    {"--list", nullptr, nullptr, "print the preset names"},
    {"--quiet", nullptr, nullptr, "no progress bar"},
};

int cmd_synth(int argc, char** argv) {
  Args a(argc, argv, 2, kSynthFlags);
  if (a.flag("--list")) {
    for (int32_t i = 0; const char* n = infer_synth_preset_name(i); ++i) std::printf("%s\n", n);
    return 0;
  }
  if (!a.positionals().empty()) throw UsageError{"unexpected argument '" + a.positionals()[0] + "'"};
  if (!a.has("--preset") || !a.has("--output"))
    throw UsageError{"usage: infer synth --preset NAME --type TYPE -o OUT.gguf [--group N] [--seed N] [--threads N]"};
  const std::string preset = a.get("--preset"), type = a.get("--type", "f16"), out = a.get("--output");
  infer_synth_params p;
  infer_synth_params_init(&p);
  p.preset = preset.c_str();
  p.type = type.c_str();
  p.group_size = static_cast<int32_t>(a.get_int("--group", 128, 1, 1 << 20));
  p.seed = static_cast<uint64_t>(a.get_int("--seed", 1, 0, INT64_MAX));
  p.n_threads = static_cast<int32_t>(a.get_int("--threads", 0, 0, 1024));
  const std::string grow = a.get("--grow-from", "");
  if (!grow.empty()) p.grow_from = grow.c_str();
  p.noise = static_cast<float>(a.get_float("--noise", 0, 0, 1, "[0, 1]"));
  if (a.has("--noise") && grow.empty()) throw UsageError{"--noise goes with --grow-from"};
  Progress prog;
  if (!a.flag("--quiet")) p.progress = Progress::cb;
  p.note = Progress::note;
  p.user_data = &prog;
  uint64_t bytes = 0;
  check(infer_synth(out.c_str(), &p, &bytes), "writing the synthetic model");
  std::fprintf(stderr, "wrote %s (%s, %s): %.1f MiB\n", out.c_str(), preset.c_str(), type.c_str(), bytes / 1048576.0);
  return 0;
}

const Register kQuantize{{"quantize", "convert a model's weights to another format",
                          "infer quantize IN.gguf OUT.gguf TYPE [--method rtn|gptq|awq] [--calib FILE] [options]",
                          &kQuantizeFlags,
                          "TYPE: q8_0 q4_0 q4_1 q5_0 q5_1 q4_k q5_k q6_k f16 bf16 f32 w8a8 int4 (int4_g32, int4_g64, int4_g128; w4a16 = int4)",
                          cmd_quantize}};
const Register kSynth{{"synth", "write a random-weight model with a real model's shapes",
                       "infer synth --preset NAME [--type TYPE] -o OUT.gguf [options] | infer synth --list", &kSynthFlags,
                       nullptr, cmd_synth}};

}  // namespace
}  // namespace cli
