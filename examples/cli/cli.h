// Shared pieces of the infer CLI: flag parsing, errors, RAII owners of the C
// handles, and the command registry. Only include/infer/infer.h is used.
#pragma once

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "infer/infer.h"

namespace cli {

inline const char* kDefaultModel = "../shared/models/stories260K.gguf";

struct UsageError {
  std::string msg;
};

// A failure already reported through infer_last_error.
struct ApiError {
  std::string msg;
};

inline void check(infer_status st, const char* what) {
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

// RAII owners for the C handles.
// --backend auto|cpu|cuda, taken by every command that loads a model.
inline infer_backend backend_flag(const Args& a) {
  const std::string b = a.has("--backend") ? a.get("--backend") : "auto";
  if (b == "auto") return INFER_BACKEND_AUTO;
  if (b == "cpu") return INFER_BACKEND_CPU;
  if (b == "cuda") return INFER_BACKEND_CUDA;
  throw UsageError{"--backend must be auto, cpu or cuda (got '" + b + "')"};
}

struct Model {
  infer_model* m = nullptr;
  Model(const std::string& path, infer_backend backend, bool vocab_only = false) {
    infer_model_params p;
    infer_model_params_init(&p);
    p.backend = backend;
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

inline std::string model_path(const Args& a) { return a.get2("-m", "--model", kDefaultModel); }

// KV cache flags shared by run, bench and chat.
inline const std::vector<std::string> kKvFlags = {"--kv-type", "--kv-budget-mb", "--kv-block", "--host-kv-mb"};
inline const std::vector<std::string> kKvBoolFlags = {"--no-prefix-cache"};

inline std::vector<std::string> with(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

inline void apply_kv_flags(const Args& a, infer_engine_params& ep) {
  const std::string t = a.get("--kv-type", "f32");
  if (t == "f32") ep.kv_type = INFER_KV_F32;
  else if (t == "f16") ep.kv_type = INFER_KV_F16;
  else if (t == "int8" || t == "i8" || t == "q8") ep.kv_type = INFER_KV_INT8;
  else throw UsageError{"--kv-type must be f32, f16 or int8, not '" + t + "'"};
  ep.kv_budget_bytes = static_cast<uint64_t>(a.get_int("--kv-budget-mb", "--kv-budget-mb", 0, 0, 1 << 20)) << 20;
  ep.kv_block_size = static_cast<int32_t>(a.get_int("--kv-block", "--kv-block", 16, 1, 1024));
  ep.host_kv_budget_bytes = static_cast<uint64_t>(a.get_int("--host-kv-mb", "--host-kv-mb", 0, 0, 1 << 20)) << 20;
  ep.prefix_caching = a.flag("--no-prefix-cache") ? 0 : 1;
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

// A subcommand: `infer NAME ...`. Each cmd_*.cpp registers its own with a
// static Register object, so adding a command touches no other file.
struct Command {
  const char* name;
  const char* usage;  // one or more lines shown by `infer --help`
  int (*run)(int argc, char** argv);  // argv[1] is the command name
};

inline std::vector<Command>& commands() {
  static std::vector<Command> all;
  return all;
}

struct Register {
  explicit Register(Command c) { commands().push_back(c); }
};

}  // namespace cli
