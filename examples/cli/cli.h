// Shared pieces of the infer CLI: flag parsing, errors, RAII owners of the C
// handles, and the command registry. Only include/infer/infer.h is used.
#pragma once

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "infer/infer.h"

namespace cli {

// The model used when -m is not given: stories260K.gguf from the shared data
// directory, looked for where the program is, not where it is run from
// (default_model() in main.cpp).
std::string default_model();

struct UsageError {
  std::string msg;
};

// A failure already reported through infer_last_error.
struct ApiError {
  std::string msg;
};

// `infer CMD --help` / `-h`: thrown by Args once the whole command line has
// parsed; main prints the command's help.
struct HelpRequested {};

inline void check(infer_status st, const char* what) {
  if (st != INFER_OK)
    throw ApiError{std::string(what) + ": " + infer_status_string(st) + ": " + infer_last_error()};
}

// One flag of a command: the parser accepts exactly the flags of the
// command's table, and `infer CMD --help` prints the same table, so the two
// cannot drift apart.
struct Flag {
  const char* names;  // "-n, --n-predict": every spelling, comma separated
  const char* arg;    // the value's placeholder ("N"), or nullptr for a switch
  const char* def;    // the default as shown in the help, or nullptr
  const char* help;   // one line
};
using FlagTable = std::vector<Flag>;

inline FlagTable operator+(FlagTable a, const FlagTable& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// The spellings of a table entry ("-n, --n-predict" -> {"-n", "--n-predict"}).
inline std::vector<std::string> flag_names(const Flag& f) {
  std::vector<std::string> out;
  std::string cur;
  for (const char* p = f.names;; ++p) {
    if (*p == ',' || *p == ' ' || *p == '\0') {
      if (!cur.empty()) out.push_back(cur);
      cur.clear();
      if (*p == '\0') break;
    } else {
      cur += *p;
    }
  }
  return out;
}

// Flag parser over a command's table: flags that take a value (`--x V` or
// `--x=V`), switches, positionals. -h/--help is accepted everywhere.
// Querying a flag that the table does not declare is a bug (std::logic_error),
// so every flag a command reads is one its help shows.
class Args {
 public:
  Args(int argc, char** argv, int first, const FlagTable& table) : table_(table) {
    for (int i = first; i < argc; ++i) {
      std::string a = argv[i];
      if (a.size() > 1 && a[0] == '-') {
        if (a == "-h" || a == "--help") {
          help_ = true;
          continue;
        }
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
        const Flag* f = find(a);
        if (!f) throw UsageError{"unknown flag " + a};
        const std::string key = canonical(*f);
        if (f->arg) {
          if (!has_eq) {
            if (i + 1 >= argc) throw UsageError{"flag " + a + " needs a value (" + f->arg + ")"};
            value = argv[++i];
          }
          values_[key] = value;
          all_[key].push_back(value);
          spelled_[key] = a;
        } else {
          if (has_eq) throw UsageError{"flag " + a + " takes no value"};
          flags_[key] = true;
        }
      } else {
        positionals_.push_back(a);
      }
    }
    if (help_) throw HelpRequested{};
  }
  // Any spelling of a flag names it ("-n" and "--n-predict" are the same flag).
  bool has(const std::string& k) const {
    const std::string c = key(k);
    return values_.count(c) || flags_.count(c);
  }
  std::string get(const std::string& k, const std::string& def = "") const {
    auto it = values_.find(key(k));
    return it == values_.end() ? def : it->second;
  }
  bool flag(const std::string& k) const { return flags_.count(key(k)) > 0; }
  // Every value of a flag given several times, in order.
  std::vector<std::string> get_all(const std::string& k) const {
    auto it = all_.find(key(k));
    return it == all_.end() ? std::vector<std::string>{} : it->second;
  }
  const std::vector<std::string>& positionals() const { return positionals_; }

  long long get_int(const std::string& a, const std::string& b, long long def, long long lo, long long hi) const {
    const std::string k = has(a) ? a : b;
    if (!has(k)) return def;
    const std::string s = get(k);
    const std::string shown = spelling(k);
    char* end = nullptr;
    errno = 0;
    const long long v = std::strtoll(s.c_str(), &end, 10);
    if (s.empty() || *end || errno) throw UsageError{"expected an integer for " + shown + ", got '" + s + "'"};
    if (v < lo || v > hi)
      throw UsageError{shown + " must be in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], got " + s};
    return v;
  }
  long long get_int(const std::string& k, long long def, long long lo, long long hi) const {
    return get_int(k, k, def, lo, hi);
  }
  double get_float(const std::string& k, double def) const {
    if (!has(k)) return def;
    const std::string s = get(k);
    char* end = nullptr;
    const double v = std::strtod(s.c_str(), &end);
    if (s.empty() || *end || !std::isfinite(v))
      throw UsageError{"expected a number for " + spelling(k) + ", got '" + s + "'"};
    return v;
  }
  double get_float(const std::string& k, double def, double lo, double hi, const char* range) const {
    const double v = get_float(k, def);
    if (!(v >= lo && v <= hi)) throw UsageError{spelling(k) + " must be in " + range + ", got " + get(k)};
    return v;
  }
  void no_positionals() const {
    if (!positionals_.empty()) throw UsageError{"unexpected argument '" + positionals_[0] + "'"};
  }

 private:
  const Flag* find(const std::string& name) const {
    for (const Flag& f : table_)
      for (const std::string& n : flag_names(f))
        if (n == name) return &f;
    return nullptr;
  }
  static std::string canonical(const Flag& f) { return flag_names(f).back(); }
  std::string key(const std::string& name) const {
    const Flag* f = find(name);
    if (!f) throw std::logic_error("the command reads flag " + name + ", which its flag table does not declare");
    return canonical(*f);
  }
  std::string spelling(const std::string& name) const {
    auto it = spelled_.find(key(name));
    return it == spelled_.end() ? name : it->second;
  }
  const FlagTable& table_;
  bool help_ = false;
  std::map<std::string, std::string> values_;
  std::map<std::string, std::string> spelled_;
  std::map<std::string, std::vector<std::string>> all_;
  std::map<std::string, bool> flags_;
  std::vector<std::string> positionals_;
};

// Reads a regular file. Opened non-blocking and checked with fstat before
// any read: a FIFO would block open() forever, a directory reads as empty.
inline std::string read_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) throw UsageError{"cannot read '" + path + "': " + std::strerror(errno)};
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    throw UsageError{"cannot read '" + path + "': not a regular file"};
  }
  std::string out;
  char buf[65536];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      ::close(fd);
      throw UsageError{"cannot read '" + path + "': " + std::strerror(err)};
    }
    if (n == 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return out;
}

inline std::string json_escape(const std::string& s) {
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

inline std::string num(double v) {
  if (!std::isfinite(v)) return "null";
  char b[64];
  std::snprintf(b, sizeof b, "%.6g", v);
  return b;
}

// --backend auto|cpu|cuda, taken by every command that loads a model.
inline infer_backend backend_flag(const Args& a) {
  const std::string b = a.has("--backend") ? a.get("--backend") : "auto";
  if (b == "auto") return INFER_BACKEND_AUTO;
  if (b == "cpu") return INFER_BACKEND_CPU;
  if (b == "cuda") return INFER_BACKEND_CUDA;
  throw UsageError{"--backend must be auto, cpu or cuda (got '" + b + "')"};
}

// RAII owners for the C handles.
// What to do with a file that is not a model the loader reads: a llama2.c
// checkpoint or a lone safetensors file gets the command that converts it.
inline std::string model_file_hint(const std::string& path) {
  auto ends = [&](const char* suf) {
    const size_t n = std::strlen(suf);
    return path.size() >= n && path.compare(path.size() - n, n, suf) == 0;
  };
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return "";
  char magic[4] = {};
  if (std::FILE* f = std::fopen(path.c_str(), "rb")) {
    const size_t got = std::fread(magic, 1, 4, f);
    std::fclose(f);
    if (got == 4 && std::memcmp(magic, "GGUF", 4) == 0) return "";
  }
  if (ends(".bin"))
    return "\n(a llama2.c checkpoint? convert it first: infer convert llama2c " + path +
           " TOKENIZER.bin -o MODEL.gguf)";
  if (ends(".safetensors"))
    return "\n(give the Hugging Face model directory that holds it, or convert it: infer convert hf DIR -o MODEL.gguf)";
  return "";
}

// infer_model_load, with a hint for files that need converting first.
inline void load_model_checked(const std::string& path, const infer_model_params* p, infer_model** m,
                               const std::string& what) {
  const infer_status st = infer_model_load(path.c_str(), p, m);
  if (st == INFER_OK) return;
  const std::string msg = std::string(what) + ": " + infer_status_string(st) + ": " + infer_last_error();
  throw ApiError{msg + model_file_hint(path)};
}

struct Model {
  infer_model* m = nullptr;
  // tp > 1: this process's share of a tensor-parallel model (--tp).
  Model(const std::string& path, infer_backend backend, bool vocab_only = false, int32_t tp = 0) {
    infer_model_params p;
    infer_model_params_init(&p);
    p.backend = backend;
    p.vocab_only = vocab_only ? 1 : 0;
    p.tensor_parallel = tp;
    load_model_checked(path, &p, &m, "loading " + path);
  }
  ~Model() { infer_model_free(m); }
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;
};

struct Engine {
  infer_engine* e = nullptr;
  Engine(infer_model* m, const infer_engine_params& p) { check(infer_engine_create(m, &p, &e), "creating the engine"); }
  ~Engine() { infer_engine_free(e); }
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;
};

// -m, else the default model; a default that is not there is a usage error
// that says to give -m (an installed infer run from any folder, without the
// shared data, lands here).
inline std::string model_path(const Args& a) {
  if (a.has("--model")) return a.get("--model");
  std::string p = default_model();
  struct stat st {};
  if (::stat(p.c_str(), &st) != 0)
    throw UsageError{"no model given and the default model is not at " + p +
                     ": give -m MODEL (a GGUF file or a Hugging Face model directory)"};
  return p;
}

// ---- flag groups shared by several commands ----

// -m and --backend: every command that loads a model.
inline const FlagTable kModelFlags = {
    {"-m, --model", "MODEL", "stories260K.gguf of the shared data", "the model to load: a GGUF file or a Hugging Face model directory"},
    {"--backend", "auto|cpu|cuda", "auto", "compute backend (auto: the best available)"},
};
inline const FlagTable kThreadFlags = {
    {"-t, --threads", "N", "0 (all cores)", "compute threads"},
};
inline const FlagTable kCtxFlags = {
    {"-c, --ctx-size, --ctx", "N", "0 (the model's context)", "tokens per sequence (prompt + output)"},
};
// The KV cache: run, chat, bench, bench-serve, serve.
inline const FlagTable kKvFlags = {
    {"--kv-type", "f32|f16|int8", "f32", "KV cache element type"},
    {"--kv-budget-mb", "N", "0 (enough for every sequence, at most 1024)", "KV cache size in MiB"},
    {"--kv-block", "N", "16", "tokens per KV block"},
    {"--host-kv-mb", "N", "0 (off)", "host-memory KV tier for preempted sequences and evicted prefixes, MiB"},
    {"--no-prefix-cache", nullptr, nullptr, "do not share the KV blocks of common prompt prefixes"},
};
// Speculative decoding: run, chat, bench, bench-serve.
inline const FlagTable kSpecFlags = {
    {"--spec", "ngram[:N]|layerskip:LAYERS", "off",
     "speculative decoding: n-gram prompt lookup (suffixes of up to N tokens, default 3), or the model with "
     "LAYERS left out as its own draft (e.g. layerskip:4-17)"},
    {"--draft", "MODEL", nullptr, "speculative decoding with MODEL (same vocabulary, smaller) as the draft"},
    {"--spec-k", "K", "4", "most draft tokens per sequence and step, in [1, 32]"},
    {"--spec-max-batch", "N", "4", "no drafting while more than N sequences decode (0: always draft)"},
};

// Tensor parallelism: run, chat, bench, serve. Launched as
// `mpirun -np N infer CMD ... --tp N`: every rank loads its 1/N of the
// weights; rank 0 does what the command does without --tp, ranks 1..N-1
// follow its engine and print nothing (tp_follow).
inline const FlagTable kTpFlags = {
    {"--tp", "N", "1 (the whole model)",
     "tensor parallelism: this process is one of the N ranks of an MPI job (mpirun -np N ... --tp N), each holding "
     "1/N of the weights; rank 0 prints (or serves), the others follow; -t is per rank"},
    {"--tp-timeout", "MS", "60000",
     "tensor parallelism: a rank that waits longer than this for the others (one died or hung) fails and ends the job"},
};

// This process in a --tp job (on: --tp N > 1 was given; rank -1: not known
// yet). Errors on ranks 1..N-1 print as "infer: rank R: ..." (main.cpp),
// and any rank's error ends the process at once: a rank that went on to
// MPI's finalization at exit would wait there for ranks still in a pass.
struct TpState {
  bool on = false;
  int rank = -1;
};
inline TpState& tp_state() {
  static TpState s;
  return s;
}

// The rank an MPI launcher gave this process (Open MPI, MPICH/Hydra, PMIx,
// Slurm's srun), or -1: known before the model loads, which serve needs to
// decide whether to listen.
inline int launcher_rank() {
  for (const char* v : {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "SLURM_PROCID"})
    if (const char* s = std::getenv(v); s && *s) {
      char* end = nullptr;
      const long r = std::strtol(s, &end, 10);
      if (!*end && r >= 0 && r < (1 << 20)) return static_cast<int>(r);
    }
  return -1;
}

// --tp and --tp-timeout into the engine parameters (every rank builds them
// the same way: the ranks compare them at start-up). Returns N (1: whole).
inline int32_t apply_tp_flags(const Args& a, infer_engine_params& ep) {
  const int32_t n = static_cast<int32_t>(a.get_int("--tp", 1, 1, 4096));
  ep.tensor_parallel = n > 1 ? n : 0;
  ep.tp_timeout_ms = static_cast<int32_t>(a.get_int("--tp-timeout", 0, 0, INT32_MAX));
  if (n > 1) tp_state() = {true, launcher_rank()};
  return n;
}

// An error on rank R > 0 of a --tp job (main prints "infer: rank R: MSG").
struct RankError {
  int rank;
  std::string msg;
};

// After the model loaded: on ranks 1..N-1 runs rank 0's engine passes until
// rank 0 frees its engine, and returns true (the command then ends, having
// printed nothing); on rank 0 and for a whole model returns false.
inline bool tp_follow(const infer_model* m, const infer_engine_params& ep) {
  const int32_t rank = infer_model_tp_rank(m);
  if (infer_model_tp_size(m) > 1) tp_state().rank = rank;
  if (rank <= 0) return false;
  const infer_status st = infer_engine_follow(m, &ep);
  if (st != INFER_OK) throw RankError{rank, std::string(infer_status_string(st)) + ": " + infer_last_error()};
  return true;
}

// Sampling: run, chat, serve (serve's are request defaults).
inline const FlagTable kSamplingFlags = {
    {"--temp", "T", "0.8", "temperature; 0 is greedy"},
    {"--top-k", "K", "40", "keep the K most likely tokens; 0 off"},
    {"--top-p", "P", "0.95", "nucleus sampling, in (0, 1]; 1 off"},
    {"--min-p", "P", "0.05", "drop tokens below P times the best one's probability, in [0, 1]; 0 off"},
    {"--repeat-penalty", "R", "1 (off)", "divide repeated tokens' logits by R (> 0)"},
    {"--repeat-last-n", "N", "64", "tokens the penalties look back at; -1 all"},
    {"--frequency-penalty", "F", "0", "subtract F times each token's count"},
    {"--presence-penalty", "P", "0", "subtract P from every token already seen"},
    {"--seed", "S", "-1 (random)", "sampling seed: the same seed gives the same output; -1 draws one (run --json reports it)"},
};

inline void apply_kv_flags(const Args& a, infer_engine_params& ep) {
  const std::string t = a.get("--kv-type", "f32");
  if (t == "f32") ep.kv_type = INFER_KV_F32;
  else if (t == "f16") ep.kv_type = INFER_KV_F16;
  else if (t == "int8" || t == "i8" || t == "q8") ep.kv_type = INFER_KV_INT8;
  else throw UsageError{"--kv-type must be f32, f16 or int8, not '" + t + "'"};
  ep.kv_budget_bytes = static_cast<uint64_t>(a.get_int("--kv-budget-mb", 0, 0, 1 << 20)) << 20;
  ep.kv_block_size = static_cast<int32_t>(a.get_int("--kv-block", 16, 1, 1024));
  ep.host_kv_budget_bytes = static_cast<uint64_t>(a.get_int("--host-kv-mb", 0, 0, 1 << 20)) << 20;
  ep.prefix_caching = a.flag("--no-prefix-cache") ? 0 : 1;
}

// The draft model of --draft, loaded after the arguments are checked.
struct DraftModel {
  infer_model* m = nullptr;
  ~DraftModel() { infer_model_free(m); }
};

// Loads the model of --draft (after every argument was checked).
inline void load_draft(const Args& a, infer_engine_params& ep, DraftModel& draft) {
  if (!a.has("--draft") || draft.m) return;
  load_model_checked(a.get("--draft"), nullptr, &draft.m, "loading the draft model");
  ep.draft_model = draft.m;
}

// -c above the context the model was trained with is allowed (the KV cache
// holds it; RoPE positions past the trained range may degrade the output):
// a warning on stderr names both numbers. `cmd`: "run", "chat", "serve".
inline void warn_context_over_trained(const char* cmd, int32_t n_ctx, const infer_model_info& info) {
  if (info.n_ctx_train > 0 && n_ctx > info.n_ctx_train)
    std::fprintf(stderr,
                 "infer %s: warning: -c %d is above the model's trained context of %d tokens; output past %d tokens may "
                 "degrade\n",
                 cmd, static_cast<int>(n_ctx), static_cast<int>(info.n_ctx_train), static_cast<int>(info.n_ctx_train));
}

// --spec and friends; `layers` keeps the layer list alive until the engine
// is created (it copies it). --draft loads its model into `draft` (call it
// after every other argument is checked).
inline void apply_spec_flags(const Args& a, infer_engine_params& ep, std::string& layers, DraftModel* draft = nullptr) {
  ep.spec_k = static_cast<int32_t>(a.get_int("--spec-k", 4, 1, 32));
  ep.spec_max_batch = static_cast<int32_t>(a.get_int("--spec-max-batch", 4, 0, 1 << 20));
  if (a.has("--draft")) {
    if (a.has("--spec")) throw UsageError{"give only one of --draft and --spec"};
    ep.spec = INFER_SPEC_DRAFT;
    if (draft) load_draft(a, ep, *draft);
    return;
  }
  if (!a.has("--spec")) return;
  const std::string s = a.get("--spec", "");
  if (s == "ngram" || s.rfind("ngram:", 0) == 0) {
    ep.spec = INFER_SPEC_NGRAM;
    if (s.size() > 6) {
      char* end = nullptr;
      const long n = std::strtol(s.c_str() + 6, &end, 10);
      if (*end || n < 1 || n > 64) throw UsageError{"--spec ngram:N takes N in [1, 64], not '" + s.substr(6) + "'"};
      ep.spec_ngram_max = static_cast<int32_t>(n);
    }
  } else if (s.rfind("layerskip:", 0) == 0 && s.size() > 10) {
    ep.spec = INFER_SPEC_LAYERSKIP;
    layers = s.substr(10);
    ep.spec_skip_layers = layers.c_str();
  } else {
    throw UsageError{"--spec takes ngram, ngram:N or layerskip:LAYERS (e.g. layerskip:4-17), not '" + s + "'"};
  }
}

// A seed for --seed -1: from the OS's entropy where there is one, else the
// clock and the process id. Kept below 2^63 so that --seed can repeat it.
inline uint64_t random_seed() {
  uint64_t x = 0;
  try {
    std::random_device rd;
    x = (static_cast<uint64_t>(rd()) << 32) ^ rd();
  } catch (...) {
    x = static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count()) ^
        (static_cast<uint64_t>(::getpid()) << 40);
  }
  return x & 0x7fffffffffffffffULL;
}

// The sampling flags, checked (before any model loads).
inline infer_sampling_params sampling_flags(const Args& a) {
  infer_sampling_params sp;
  infer_sampling_params_init(&sp);
  sp.temperature = static_cast<float>(a.get_float("--temp", sp.temperature, 0, 1e6, "[0, 1e6]"));
  sp.top_k = static_cast<int32_t>(a.get_int("--top-k", sp.top_k, -1, 1 << 30));
  sp.top_p = static_cast<float>(a.get_float("--top-p", sp.top_p, 1e-9, 1, "(0, 1]"));
  sp.min_p = static_cast<float>(a.get_float("--min-p", sp.min_p, 0, 1, "[0, 1]"));
  sp.repeat_penalty = static_cast<float>(a.get_float("--repeat-penalty", sp.repeat_penalty, 1e-6, 1e6, "(0, 1e6]"));
  sp.penalty_last_n = static_cast<int32_t>(a.get_int("--repeat-last-n", sp.penalty_last_n, -1, 1 << 30));
  sp.frequency_penalty = static_cast<float>(a.get_float("--frequency-penalty", sp.frequency_penalty, -1e6, 1e6, "[-1e6, 1e6]"));
  sp.presence_penalty = static_cast<float>(a.get_float("--presence-penalty", sp.presence_penalty, -1e6, 1e6, "[-1e6, 1e6]"));
  const int64_t seed = a.get_int("--seed", -1, -1, INT64_MAX);
  sp.seed = seed >= 0 ? static_cast<uint64_t>(seed) : random_seed();
  return sp;
}

inline const char* kv_type_name(infer_kv_type t) {
  return t == INFER_KV_F16 ? "f16" : t == INFER_KV_INT8 ? "int8" : "f32";
}

// Token callback that streams each piece of text to stdout; user_data
// points to a bool that silences it when true.
inline int32_t print_token(infer_request*, int32_t, const char* text, size_t len, void* quiet) {
  if (!*static_cast<const bool*>(quiet)) {
    std::fwrite(text, 1, len, stdout);
    std::fflush(stdout);
  }
  return 0;
}

// Ctrl-C during generation: the first one sets a flag that token callbacks
// turn into a cancel (the command then prints what it has), the second one
// ends the program as usual.
bool interrupted();
void catch_interrupt();

// A subcommand: `infer NAME ...`. Each cmd_*.cpp registers its own with a
// static Register object, so adding a command touches no other file.
struct Command {
  const char* name;
  const char* summary;   // one line for `infer --help`
  const char* synopsis;  // "infer run [options]" line(s)
  const FlagTable* flags;
  const char* notes;     // more text after the flags, or nullptr
  int (*run)(int argc, char** argv);  // argv[1] is the command name
};

inline std::vector<Command>& commands() {
  static std::vector<Command> all;
  return all;
}

struct Register {
  explicit Register(Command c) { commands().push_back(c); }
};

// `infer bench-serve --url`: the same workload sent over HTTP to an
// OpenAI-compatible server (examples/server/bench_http.cpp, built with
// `infer serve`; http_bench() is nullptr in a CLI built without it).
// One request of bench-serve's workload (in process or over HTTP).
struct BenchJob {
  double at_s = 0;               // arrival time from the start (0 for all: closed loop)
  std::vector<int32_t> prompt;   // token ids, sent as the prompt
  int32_t max_tokens = 0;
};
struct HttpBenchOutcome {
  enum Kind { Lost = 0, Ok, Failed } kind = Lost;  // Failed: an HTTP or in-stream error body
  int64_t tokens = 0;                              // usage.completion_tokens
  double ttft_ms = NAN, e2e_ms = NAN;
  std::string what;                                // why it failed or was lost
};
struct HttpBenchConfig {
  std::string url;       // http://HOST:PORT (the API under /v1)
  std::string api_key;
  std::string model;     // the "model" field of each request
  int concurrency = 1;   // requests in flight at most
};
using HttpBenchFn = void (*)(const HttpBenchConfig& cfg, const std::vector<BenchJob>& jobs,
                             std::vector<HttpBenchOutcome>& out);
inline HttpBenchFn& http_bench() {
  static HttpBenchFn fn = nullptr;
  return fn;
}

// The help of one command: synopsis, then every flag of its table with its
// value and default.
void print_command_help(const Command& c, std::FILE* f);

}  // namespace cli
