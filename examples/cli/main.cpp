// infer: the command-line front end of libinfer. It uses only the public C
// API (include/infer/infer.h), like SQLite's shell uses only sqlite3.h.
//
//   infer run -m MODEL [-p PROMPT | -f FILE | --tokens FILE] [-n N] [sampling flags] [--json]
//   infer info -m MODEL [--json]
//   infer tokenize -m MODEL (-p TEXT | -f FILE) [--no-bos] [--special]
//   infer perplexity -m MODEL -f TEXT [--ctx N] [-t N] [--json]
//   infer bench -m MODEL [-p 64] [-n 32] [-t 2] [-r 3] [--json]
//   infer convert llama2c CHECKPOINT TOKENIZER.bin -o OUT.gguf
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "infer/infer.h"

namespace {

const char* kDefaultModel = "../shared/models/stories260K.gguf";

struct UsageError {
  std::string msg;
};

// A failure already reported through infer_last_error.
struct ApiError {
  std::string msg;
};

void check(infer_status st, const char* what) {
  if (st != INFER_OK)
    throw ApiError{std::string(what) + ": " + infer_status_string(st) + ": " + infer_last_error()};
}

// Minimal flag parser: flags that take a value, boolean flags, positionals.
class Args {
 public:
  Args(int argc, char** argv, int first, const std::vector<std::string>& valued, const std::vector<std::string>& boolean) {
    for (int i = first; i < argc; ++i) {
      std::string a = argv[i];
      if (a.size() > 1 && a[0] == '-') {
        std::string value;
        bool has_eq = false;
        if (a.rfind("--", 0) == 0) {
          const size_t eq = a.find('=');
          if (eq != std::string::npos) {
            value = a.substr(eq + 1);
            a = a.substr(0, eq);
            has_eq = true;
          }
        }
        if (contains(valued, a)) {
          if (!has_eq) {
            if (i + 1 >= argc) throw UsageError{"flag " + a + " needs a value"};
            value = argv[++i];
          }
          values_[a] = value;
        } else if (contains(boolean, a)) {
          if (has_eq) throw UsageError{"flag " + a + " takes no value"};
          flags_[a] = true;
        } else {
          throw UsageError{"unknown flag " + a};
        }
      } else {
        positionals_.push_back(a);
      }
    }
  }
  bool has(const std::string& k) const { return values_.count(k) || flags_.count(k); }
  std::string get(const std::string& k, const std::string& def = "") const {
    auto it = values_.find(k);
    return it == values_.end() ? def : it->second;
  }
  std::string get2(const std::string& a, const std::string& b, const std::string& def = "") const {
    return has(a) ? get(a) : get(b, def);
  }
  bool flag(const std::string& k) const { return flags_.count(k) > 0; }
  const std::vector<std::string>& positionals() const { return positionals_; }

  long long get_int(const std::string& a, const std::string& b, long long def, long long lo, long long hi) const {
    if (!has(a) && !has(b)) return def;
    const std::string s = has(a) ? get(a) : get(b);
    char* end = nullptr;
    errno = 0;
    const long long v = std::strtoll(s.c_str(), &end, 10);
    if (s.empty() || *end || errno) throw UsageError{"expected an integer for " + (has(a) ? a : b) + ", got '" + s + "'"};
    if (v < lo || v > hi)
      throw UsageError{(has(a) ? a : b) + " must be in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]"};
    return v;
  }
  double get_float(const std::string& k, double def) const {
    if (!has(k)) return def;
    const std::string s = get(k);
    char* end = nullptr;
    const double v = std::strtod(s.c_str(), &end);
    if (s.empty() || *end || !std::isfinite(v)) throw UsageError{"expected a number for " + k + ", got '" + s + "'"};
    return v;
  }

 private:
  static bool contains(const std::vector<std::string>& v, const std::string& s) {
    for (const auto& x : v)
      if (x == s) return true;
    return false;
  }
  std::map<std::string, std::string> values_;
  std::map<std::string, bool> flags_;
  std::vector<std::string> positionals_;
};

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw UsageError{"cannot read '" + path + "': " + std::strerror(errno)};
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::string json_escape(const std::string& s) {
  std::string o;
  for (unsigned char c : s) {
    switch (c) {
      case '"': o += "\\\""; break;
      case '\\': o += "\\\\"; break;
      case '\n': o += "\\n"; break;
      case '\r': o += "\\r"; break;
      case '\t': o += "\\t"; break;
      default:
        if (c < 0x20) {
          char b[8];
          std::snprintf(b, sizeof b, "\\u%04x", c);
          o += b;
        } else {
          o += static_cast<char>(c);
        }
    }
  }
  return o;
}

std::string num(double v) {
  if (!std::isfinite(v)) return "null";
  char b[64];
  std::snprintf(b, sizeof b, "%.6g", v);
  return b;
}

// RAII owners for the C handles.
struct Model {
  infer_model* m = nullptr;
  Model(const std::string& path, bool vocab_only = false) {
    infer_model_params p;
    infer_model_params_init(&p);
    p.vocab_only = vocab_only ? 1 : 0;
    check(infer_model_load(path.c_str(), &p, &m), ("loading " + path).c_str());
  }
  ~Model() { infer_model_free(m); }
};

struct Engine {
  infer_engine* e = nullptr;
  Engine(infer_model* m, const infer_engine_params& p) { check(infer_engine_create(m, &p, &e), "creating the engine"); }
  ~Engine() { infer_engine_free(e); }
};

std::string model_path(const Args& a) { return a.get2("-m", "--model", kDefaultModel); }

// ---- run ----

struct RunState {
  bool quiet;
};

int32_t on_token(infer_request*, int32_t, const char* text, size_t len, void* user) {
  if (!static_cast<RunState*>(user)->quiet) {
    std::fwrite(text, 1, len, stdout);
    std::fflush(stdout);
  }
  return 0;
}

int cmd_run(int argc, char** argv) {
  Args a(argc, argv, 2,
         {"-m", "--model", "-p", "--prompt", "-f", "--file", "-n", "--n-predict", "--temp", "--top-k", "--top-p",
          "--min-p", "--repeat-penalty", "--repeat-last-n", "--frequency-penalty", "--presence-penalty", "--seed",
          "-t", "--threads", "--tokens", "--dump-logits", "--ctx", "--stop"},
         {"--json", "--no-bos", "--special", "--ignore-eos", "--quiet"});
  if (!a.positionals().empty()) throw UsageError{"unexpected argument '" + a.positionals()[0] + "'"};
  const int sources = (a.has("-p") || a.has("--prompt")) + (a.has("-f") || a.has("--file")) + a.has("--tokens");
  if (sources > 1) throw UsageError{"give only one of -p, -f and --tokens"};
  Model model(model_path(a));

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
  RunState state{a.flag("--quiet")};
  rp.on_token = on_token;
  rp.user_data = &state;

  infer_request* req = nullptr;
  check(infer_submit(engine.e, &rp, &req), "submitting the request");
  // Echo the prompt as text (the reference output includes it).
  if (!state.quiet) {
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
  if (st != INFER_OK) {
    infer_request_free(req);
    check(st, "generating");
  }
  infer_request_stats s;
  infer_request_stats_init(&s);
  infer_request_get_stats(req, &s);
  if (!state.quiet) std::fputc('\n', stdout);
  if (s.finish_reason == INFER_FINISH_ERROR) {
    const std::string msg = infer_request_error(req);
    infer_request_free(req);
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
    std::printf("{\"prompt_tokens\": %d, \"generated_tokens\": %d, \"ttft_ms\": %s, \"tpot_ms\": %s, "
                "\"prefill_tokens_per_s\": %s, \"decode_tokens_per_s\": %s, \"total_ms\": %s, \"finish_reason\": \"%s\"}\n",
                s.n_prompt_tokens, s.n_generated_tokens, num(s.ttft_ms).c_str(), num(s.tpot_ms).c_str(),
                num(s.prefill_tokens_per_s).c_str(), num(s.decode_tokens_per_s).c_str(), num(s.total_ms).c_str(),
                reasons[s.finish_reason]);
  } else {
    std::fprintf(stderr, "\n%d prompt tokens, %d generated; TTFT %.2f ms, TPOT %.2f ms; prefill %.1f tok/s, decode %.1f tok/s\n",
                 s.n_prompt_tokens, s.n_generated_tokens, s.ttft_ms, s.tpot_ms, s.prefill_tokens_per_s,
                 s.decode_tokens_per_s);
  }
  infer_request_free(req);
  return 0;
}

// ---- info ----

int cmd_info(int argc, char** argv) {
  Args a(argc, argv, 2, {"-m", "--model"}, {"--json"});
  if (!a.positionals().empty()) throw UsageError{"unexpected argument '" + a.positionals()[0] + "'"};
  infer_model_params mp;
  infer_model_params_init(&mp);
  Model model(model_path(a));
  infer_model_info in;
  infer_model_info_init(&in);
  check(infer_model_get_info(model.m, &in), "reading model info");
  std::map<std::string, int> types;
  const int32_t nt = infer_model_tensor_count(model.m);
  for (int32_t i = 0; i < nt; ++i) {
    infer_tensor_info ti;
    std::memset(&ti, 0, sizeof ti);
    ti.struct_size = sizeof ti;
    check(infer_model_tensor(model.m, i, &ti), "reading tensor info");
    types[ti.type]++;
  }
  if (a.flag("--json")) {
    std::string t;
    for (auto& [k, v] : types) t += (t.empty() ? "" : ", ") + std::string("\"") + k + "\": " + std::to_string(v);
    std::printf("{\"architecture\": \"%s\", \"name\": \"%s\", \"n_vocab\": %d, \"n_ctx_train\": %d, \"n_embd\": %d, "
                "\"n_layer\": %d, \"n_head\": %d, \"n_head_kv\": %d, \"n_ff\": %d, \"n_rot\": %d, \"rope_freq_base\": %s, "
                "\"rms_norm_eps\": %s, \"n_params\": %llu, \"n_bytes\": %llu, \"n_tensors\": %d, \"tensor_types\": {%s}, "
                "\"tokenizer\": \"%s\", \"bos_token\": %d, \"eos_token\": %d}\n",
                json_escape(in.architecture).c_str(), json_escape(in.name).c_str(), in.n_vocab, in.n_ctx_train,
                in.n_embd, in.n_layer, in.n_head, in.n_head_kv, in.n_ff, in.n_rot, num(in.rope_freq_base).c_str(),
                num(in.rms_norm_eps).c_str(), (unsigned long long)in.n_params, (unsigned long long)in.n_bytes,
                in.n_tensors, t.c_str(), json_escape(in.tokenizer).c_str(), in.bos_token, in.eos_token);
  } else {
    std::printf("architecture:   %s\nname:           %s\nparameters:     %llu (%.2f MiB in %d tensors)\n",
                in.architecture, in.name, (unsigned long long)in.n_params, in.n_bytes / 1048576.0, in.n_tensors);
    std::printf("shape:          n_embd %d, n_layer %d, n_head %d, n_head_kv %d, n_ff %d, n_rot %d\n", in.n_embd,
                in.n_layer, in.n_head, in.n_head_kv, in.n_ff, in.n_rot);
    std::printf("context length: %d\nrope base:      %g\nrms eps:        %g\n", in.n_ctx_train, in.rope_freq_base,
                in.rms_norm_eps);
    std::printf("tokenizer:      %s, %d tokens, bos %d, eos %d\ntensor types:  ", in.tokenizer, in.n_vocab,
                in.bos_token, in.eos_token);
    for (auto& [k, v] : types) std::printf(" %s x%d", k.c_str(), v);
    std::printf("\n");
  }
  return 0;
}

// ---- tokenize ----

int cmd_tokenize(int argc, char** argv) {
  Args a(argc, argv, 2, {"-m", "--model", "-p", "--prompt", "-f", "--file"}, {"--no-bos", "--special"});
  if (!a.positionals().empty()) throw UsageError{"unexpected argument '" + a.positionals()[0] + "'"};
  const bool has_p = a.has("-p") || a.has("--prompt"), has_f = a.has("-f") || a.has("--file");
  if (has_p == has_f) throw UsageError{"give exactly one of -p TEXT and -f FILE"};
  const std::string text = has_f ? read_file(a.get2("-f", "--file")) : a.get2("-p", "--prompt");
  Model model(model_path(a), /*vocab_only=*/true);
  const int32_t add_bos = a.flag("--no-bos") ? 0 : -1;
  const int32_t special = a.flag("--special") ? 1 : 0;
  size_t n = 0;
  std::vector<int32_t> ids(text.size() + 8);
  infer_status st = infer_tokenize(model.m, text.data(), text.size(), add_bos, special, ids.data(), ids.size(), &n);
  if (st == INFER_ERR_BUFFER_TOO_SMALL) {
    ids.resize(n);
    st = infer_tokenize(model.m, text.data(), text.size(), add_bos, special, ids.data(), ids.size(), &n);
  }
  check(st, "tokenizing");
  std::string out;
  for (size_t i = 0; i < n; ++i) {
    if (i) out += ' ';
    out += std::to_string(ids[i]);
  }
  std::printf("%s\n", out.c_str());
  return 0;
}

// ---- perplexity ----

int cmd_perplexity(int argc, char** argv) {
  Args a(argc, argv, 2, {"-m", "--model", "-f", "--file", "--ctx", "-c", "-t", "--threads"}, {"--json"});
  if (!a.positionals().empty()) throw UsageError{"unexpected argument '" + a.positionals()[0] + "'"};
  if (!a.has("-f") && !a.has("--file")) throw UsageError{"perplexity needs -f TEXT_FILE"};
  const std::string text = read_file(a.get2("-f", "--file"));
  Model model(model_path(a));
  infer_perplexity_result r;
  std::memset(&r, 0, sizeof r);
  r.struct_size = sizeof r;
  check(infer_perplexity(model.m, text.c_str(), static_cast<int32_t>(a.get_int("--ctx", "-c", 0, 0, 1 << 20)),
                         static_cast<int32_t>(a.get_int("-t", "--threads", 0, 0, 1024)), &r),
        "computing perplexity");
  if (a.flag("--json"))
    std::printf("{\"perplexity\": %s, \"nll\": %s, \"n_tokens\": %lld, \"n_chunks\": %d}\n", num(r.perplexity).c_str(),
                num(r.nll).c_str(), (long long)r.n_tokens, r.n_chunks);
  else
    std::printf("perplexity %.4f over %lld tokens (%d windows)\n", r.perplexity, (long long)r.n_tokens, r.n_chunks);
  return 0;
}

// ---- bench ----

int cmd_bench(int argc, char** argv) {
  Args a(argc, argv, 2, {"-m", "--model", "-p", "-n", "-t", "--threads", "-r", "--reps"}, {"--json"});
  if (!a.positionals().empty()) throw UsageError{"unexpected argument '" + a.positionals()[0] + "'"};
  Model model(model_path(a));
  infer_bench_result r;
  std::memset(&r, 0, sizeof r);
  r.struct_size = sizeof r;
  const int32_t threads = static_cast<int32_t>(a.get_int("-t", "--threads", 2, 0, 1024));
  check(infer_bench(model.m, static_cast<int32_t>(a.get_int("-p", "-p", 64, 1, 1 << 20)),
                    static_cast<int32_t>(a.get_int("-n", "-n", 32, 0, 1 << 20)), threads,
                    static_cast<int32_t>(a.get_int("-r", "--reps", 3, 1, 1000)), &r),
        "benchmarking");
  if (a.flag("--json"))
    std::printf("{\"n_prompt\": %d, \"n_gen\": %d, \"threads\": %d, \"prefill_tokens_per_s\": %s, "
                "\"decode_tokens_per_s\": %s, \"prefill_ms\": %s, \"decode_ms\": %s}\n",
                r.n_prompt, r.n_gen, r.n_threads, num(r.prefill_tokens_per_s).c_str(),
                num(r.decode_tokens_per_s).c_str(), num(r.prefill_ms).c_str(), num(r.decode_ms).c_str());
  else
    std::printf("prefill %d tokens: %.1f tok/s (%.2f ms)\ndecode  %d tokens: %.1f tok/s (%.2f ms)\nthreads %d\n",
                r.n_prompt, r.prefill_tokens_per_s, r.prefill_ms, r.n_gen, r.decode_tokens_per_s, r.decode_ms,
                r.n_threads);
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

void usage(std::FILE* f) {
  std::fprintf(f,
               "infer %s: LLM inference with libinfer\n\n"
               "usage: infer COMMAND [options]\n\n"
               "commands:\n"
               "  run         generate text: -m MODEL [-p PROMPT | -f FILE | --tokens FILE] [-n N] [--temp T]\n"
               "              [--top-k K] [--top-p P] [--min-p P] [--repeat-penalty R] [--seed S] [-t THREADS]\n"
               "              [--stop STR] [--dump-logits OUT] [--json]\n"
               "  info        describe a model: -m MODEL [--json]\n"
               "  tokenize    print token ids: -m MODEL (-p TEXT | -f FILE) [--no-bos] [--special]\n"
               "  perplexity  -m MODEL -f TEXT [--ctx N] [-t N] [--json]\n"
               "  bench       prefill and decode speed: -m MODEL [-p 64] [-n 32] [-t 2] [-r 3] [--json]\n"
               "  convert     llama2c CHECKPOINT TOKENIZER.bin -o OUT.gguf\n\n"
               "MODEL defaults to %s\n",
               infer_version(), kDefaultModel);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    usage(stderr);
    return 2;
  }
  const std::string cmd = argv[1];
  try {
    if (cmd == "run") return cmd_run(argc, argv);
    if (cmd == "info") return cmd_info(argc, argv);
    if (cmd == "tokenize") return cmd_tokenize(argc, argv);
    if (cmd == "perplexity") return cmd_perplexity(argc, argv);
    if (cmd == "bench") return cmd_bench(argc, argv);
    if (cmd == "convert") return cmd_convert(argc, argv);
    if (cmd == "-h" || cmd == "--help" || cmd == "help") {
      usage(stdout);
      return 0;
    }
    if (cmd == "--version") {
      std::printf("infer %s\n", infer_version());
      return 0;
    }
    std::fprintf(stderr, "infer: unknown command '%s'\n\n", cmd.c_str());
    usage(stderr);
    return 2;
  } catch (const UsageError& e) {
    std::fprintf(stderr, "infer %s: %s\n", cmd.c_str(), e.msg.c_str());
    return 2;
  } catch (const ApiError& e) {
    std::fprintf(stderr, "infer %s: %s\n", cmd.c_str(), e.msg.c_str());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "infer %s: %s\n", cmd.c_str(), e.what());
    return 1;
  }
}
