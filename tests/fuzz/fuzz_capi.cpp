// libFuzzer target for the C API as a hostile host drives it: each input is
// a program of C API calls (create / submit / submit_n / step / cancel / free
// / next_text / next_tokens / stats / max_concurrency ...) in any order, with
// parameters drawn from the input: out-of-range enum values, NULL arrays,
// extreme numbers, token ids outside the vocabulary. Every call must return
// a status; anything else (a crash, a hang, a sanitizer report, an exception
// crossing the C boundary, a leak) is a finding. Caller-driven engines only,
// and never a blocking wait, so every input runs in bounded time.
//
// The model: $INFER_SHARED_DIR/models/stories260K.gguf, else
// <source>/../shared/models/stories260K.gguf, else a tiny synthetic model
// written with infer_synth.
#include <unistd.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "infer/infer.h"

namespace {

infer_model* g_model = nullptr;
int32_t g_vocab = 1;

class Input {
 public:
  Input(const uint8_t* p, size_t n) : p_(p), n_(n) {}
  bool empty() const { return n_ == 0; }
  uint8_t u8() {
    if (!n_) return 0;
    --n_;
    return *p_++;
  }
  uint32_t u32() {
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) v = v << 8 | u8();
    return v;
  }
  template <typename T, size_t N>
  T pick(const T (&table)[N]) {
    return table[u8() % N];
  }

 private:
  const uint8_t* p_;
  size_t n_;
};

constexpr int32_t kI32Max = std::numeric_limits<int32_t>::max();
constexpr int32_t kI32Min = std::numeric_limits<int32_t>::min();
const int32_t kSmallInts[] = {0, 1, 2, 3, 4, 8, 16, -1, kI32Max, kI32Min, 1025, 7};
const int32_t kEnumRaw[] = {0, 1, 2, 3, -1, 77, kI32Max, kI32Min};
const int32_t kLengths[] = {1, 2, 8, 16, 100, 512, 0, -1, kI32Max, kI32Max - 1, 1 << 30, kI32Min};
const float kFloats[] = {0.0f, 0.5f, 0.8f, 1.0f, 2.0f, -1.0f, 1e30f, -1e30f,
                         std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                         -std::numeric_limits<float>::infinity(), 1e-30f};
// KV sizes: small pools, or sizes the engine must reject before allocating
// (a real multi-gigabyte pool would only measure the fuzzer's memory limit).
const int32_t kKvBlocks[] = {0, 1, 2, 4, 16, 64, -1, kI32Max, (1 << 30) + 1, kI32Min};
const uint64_t kKvBudget[] = {0, 1, 4096, 1 << 16, 1 << 20, 16 << 20, UINT64_MAX, uint64_t{1} << 63};
const double kTimeouts[] = {0, 1, 50, -1, 1e300, std::numeric_limits<double>::quiet_NaN()};
const char* const kPrompts[] = {"Once upon a time", "", "a", "\xE2\x82\xAC\xF0\x9F\x98\x80 caf\xC3\xA9",
                                "\xFF\xFE invalid \xC3", "<s></s><unk>"};

// A struct_size a caller could send: its own (older or newer) layout's
// size, or one the library must reject. (A size ending inside a field is a
// caller lying about its layout: the library reads that field half-copied,
// as the versioning contract allows, so it is not drawn here.)
uint32_t struct_size(Input& in, size_t real) {
  const uint32_t sizes[] = {0, 4, static_cast<uint32_t>(real), static_cast<uint32_t>(2 * real),
                            static_cast<uint32_t>(2 * real + 8), UINT32_MAX};
  return in.pick(sizes);
}

template <typename E>
E raw_enum(int32_t v) {
  E e;
  static_assert(sizeof e == sizeof v, "C enums are int-sized");
  std::memcpy(&e, &v, sizeof v);
  return e;
}

struct State {
  std::vector<infer_engine*> engines;
  struct Req {
    infer_request* r;
    infer_engine* e;
  };
  std::vector<Req> reqs;
};

void free_requests_of(State& st, infer_engine* e, bool all) {
  for (size_t i = 0; i < st.reqs.size();) {
    if (all || st.reqs[i].e == e) {
      infer_request_free(st.reqs[i].r);
      st.reqs.erase(st.reqs.begin() + static_cast<std::ptrdiff_t>(i));
    } else {
      ++i;
    }
  }
}

infer_request* some_request(State& st, Input& in) {
  if (st.reqs.empty()) return nullptr;
  return st.reqs[in.u8() % st.reqs.size()].r;
}

int32_t token(Input& in) {
  switch (in.u8() % 8) {
    case 0: return -1;
    case 1: return g_vocab;
    case 2: return kI32Max;
    default: return static_cast<int32_t>(in.u32() % static_cast<uint32_t>(g_vocab));
  }
}

void submit(State& st, Input& in, bool many) {
  if (st.engines.empty()) return;
  infer_engine* e = st.engines[in.u8() % st.engines.size()];
  infer_sampling_params sp;
  infer_sampling_params_init(&sp);
  sp.temperature = in.pick(kFloats);
  sp.top_k = in.pick(kSmallInts);
  sp.top_p = in.pick(kFloats);
  sp.min_p = in.pick(kFloats);
  sp.repeat_penalty = in.pick(kFloats);
  sp.frequency_penalty = in.pick(kFloats);
  sp.presence_penalty = in.pick(kFloats);
  sp.penalty_last_n = in.pick(kSmallInts);
  sp.seed = in.u32();
  int32_t bias_tokens[4];
  float bias_values[4];
  const int nb = in.u8() % 5;
  for (int i = 0; i < 4; ++i) {
    bias_tokens[i] = token(in);
    bias_values[i] = in.pick(kFloats);
  }
  sp.n_logit_bias = static_cast<size_t>(nb);
  const uint8_t nulls = in.u8();
  sp.logit_bias_tokens = (nulls & 1) ? nullptr : bias_tokens;
  sp.logit_bias_values = (nulls & 2) ? nullptr : bias_values;

  infer_request_params rp;
  infer_request_params_init(&rp);
  std::vector<int32_t> toks;
  const uint8_t mode = in.u8();
  if (mode % 4 == 0) {
    const int n = in.u8() % 48;
    for (int i = 0; i < n; ++i) toks.push_back(token(in));
    rp.prompt_tokens = toks.empty() ? nullptr : toks.data();
    rp.n_prompt_tokens = toks.size();
    if (mode & 16) rp.prompt = "both";  // both set: invalid
  } else {
    rp.prompt = (mode & 64) && (mode % 4 == 1) ? nullptr : in.pick(kPrompts);
  }
  rp.add_bos = in.pick(kSmallInts) % 3;  // -1, 0, 1, 2, -2 ...
  rp.parse_special = in.u8() & 1;
  rp.max_tokens = std::min(in.pick(kSmallInts), 40);
  if (in.u8() % 16 == 0) rp.max_tokens = kI32Max;
  rp.ignore_eos = in.u8() & 1;
  rp.priority = in.pick(kSmallInts);
  if (in.u8() % 4 == 0) rp.spec_max_draft = in.pick(kSmallInts);
  rp.logits = in.u8() % 8;
  rp.no_prefix_cache = in.u8() & 1;
  const char* stops[2] = {"the", (in.u8() & 1) ? nullptr : "\n"};
  rp.n_stop = in.u8() % 3;
  rp.stop = (in.u8() % 8 == 0) ? nullptr : stops;
  rp.sampling = (in.u8() % 8 == 0) ? nullptr : &sp;
  if (in.u8() % 16 == 0) rp.struct_size = struct_size(in, sizeof rp);
  if (!many) {
    infer_request* r = nullptr;
    if (infer_submit(e, &rp, &r) == INFER_OK) {
      if (!r) std::abort();
      st.reqs.push_back({r, e});
    } else if (r) {
      std::abort();  // a failing submit must not hand out a handle
    }
    return;
  }
  const int32_t n = in.pick(kSmallInts);
  if (n > 8 || n < -1) {
    // Too large for a local array: only the argument checks can be reached.
    if (n < 1 && infer_submit_n(e, &rp, n, nullptr) == INFER_OK) std::abort();
    return;
  }
  infer_request* out[8] = {};
  const int32_t count = n;
  if (infer_submit_n(e, &rp, count, count >= 1 ? out : nullptr) == INFER_OK) {
    for (int32_t i = 0; i < count; ++i) {
      if (!out[i]) std::abort();
      st.reqs.push_back({out[i], e});
    }
  } else {
    for (int32_t i = 0; i < count && i < 8; ++i)
      if (out[i]) std::abort();
  }
}

void create_engine(State& st, Input& in) {
  if (st.engines.size() >= 2) return;
  infer_engine_params ep;
  infer_engine_params_init(&ep);
  // 1 or 2 threads, or a value the engine must reject (never "all cores").
  ep.n_threads = in.u8() % 8 == 0 ? in.pick(kSmallInts) : 1;
  if (ep.n_threads == 0 || (ep.n_threads > 2 && ep.n_threads <= 1024)) ep.n_threads = 1;
  ep.kv_blocks = in.pick(kKvBlocks);
  ep.kv_budget_bytes = in.pick(kKvBudget);
  ep.kv_block_size = in.pick(kSmallInts);
  if (ep.kv_block_size == 0) ep.kv_block_size = 16;
  ep.kv_type = raw_enum<infer_kv_type>(in.pick(kEnumRaw));
  ep.host_kv_budget_bytes = in.u8() % 4 == 0 ? in.pick(kKvBudget) : 0;
  ep.max_seqs = in.pick(kSmallInts);
  ep.max_batch_tokens = in.pick(kLengths);
  // Large contexts only with a bounded pool (an unbounded default pool for
  // n_ctx = INT32_MAX is capped at 1 GiB: fine, but slow under ASan).
  ep.n_ctx = in.u8() % 4 == 0 ? in.pick(kLengths) : 0;
  ep.prefix_caching = in.u8() & 1;
  ep.policy = raw_enum<infer_policy>(in.pick(kEnumRaw));
  ep.batch_timeout_ms = in.pick(kTimeouts);
  ep.step_row_multiple = in.pick(kSmallInts);
  // Speculative decoding: every method (the model as its own draft), odd
  // lengths and layer lists, limits that switch drafting on and off.
  if (in.u8() % 4 == 0) {
    static const char* const kLayers[] = {"0", "1", "0-1", "1-0", "", "x", "0,1,0", "99"};
    ep.spec = raw_enum<infer_spec_method>(in.pick(kEnumRaw));
    ep.spec_k = in.pick(kSmallInts);
    ep.spec_max_batch = in.u8() % 2 ? 0 : in.pick(kSmallInts);
    ep.spec_skip_layers = in.u8() % 8 == 0 ? nullptr : kLayers[in.u8() % 8];
    ep.draft_model = in.u8() % 8 == 0 ? nullptr : g_model;
  }
  if (in.u8() % 16 == 0) ep.struct_size = struct_size(in, sizeof ep);
  infer_engine* e = nullptr;
  if (infer_engine_create(g_model, &ep, &e) == INFER_OK) {
    if (!e) std::abort();
    st.engines.push_back(e);
  } else if (e) {
    std::abort();
  }
}

void run_program(const uint8_t* data, size_t size) {
  Input in(data, size);
  State st;
  int steps_left = 48;
  for (int op = 0; op < 96 && !in.empty(); ++op) {
    switch (in.u8() % 16) {
      case 0:
      case 1: create_engine(st, in); break;
      case 2:
        if (!st.engines.empty()) {
          const size_t i = in.u8() % st.engines.size();
          // Sometimes the engine goes first: its request handles stay valid.
          if (in.u8() & 1) free_requests_of(st, st.engines[i], false);
          infer_engine_free(st.engines[i]);
          for (auto& r : st.reqs)
            if (r.e == st.engines[i]) r.e = nullptr;
          st.engines.erase(st.engines.begin() + static_cast<std::ptrdiff_t>(i));
        }
        break;
      case 3:
      case 4: submit(st, in, false); break;
      case 5: submit(st, in, true); break;
      case 6:
      case 7:
        if (!st.engines.empty() && steps_left > 0) {
          --steps_left;
          int32_t active = -1;
          infer_engine_step(st.engines[in.u8() % st.engines.size()], (in.u8() & 1) ? &active : nullptr);
        }
        break;
      case 8: {
        infer_request* r = some_request(st, in);
        if (r) infer_request_cancel(r);
        break;
      }
      case 9:
        if (!st.reqs.empty()) {
          const size_t i = in.u8() % st.reqs.size();
          infer_request_free(st.reqs[i].r);
          st.reqs.erase(st.reqs.begin() + static_cast<std::ptrdiff_t>(i));
        }
        break;
      case 10: {
        infer_request* r = some_request(st, in);
        if (!r) break;
        static const size_t kSizes[] = {1, 2, 3, 4, 5, 64};
        char buf[64];
        size_t n = 0;
        int32_t fin = 0;
        const size_t cap = in.pick(kSizes);
        const infer_status s = infer_request_next_text(r, 0, buf, cap, &n, &fin);
        if (s == INFER_OK && n >= cap) std::abort();
        if (s == INFER_ERR_BUFFER_TOO_SMALL && n <= cap) std::abort();
        break;
      }
      case 11: {
        infer_request* r = some_request(st, in);
        if (!r) break;
        int32_t toks[8];
        size_t n = 0;
        int32_t fin = 0;
        const size_t cap = in.u8() % 9;
        infer_request_next_tokens(r, 0, cap ? toks : nullptr, cap, &n, &fin);
        if (n > cap) std::abort();
        break;
      }
      case 12: {
        infer_request* r = some_request(st, in);
        if (!r) break;
        infer_request_stats s;
        infer_request_stats_init(&s);
        infer_request_get_stats(r, &s);
        char buf[16];
        size_t need = 0;
        infer_request_text(r, (in.u8() & 1) ? buf : nullptr, in.u8() % 17, &need);
        (void)infer_request_error(r);
        if (s.finish_reason != INFER_FINISH_NONE) {
          const int32_t* t = nullptr;
          size_t nt = 0;
          infer_request_tokens(r, &t, &nt);
          const float* lg = nullptr;
          size_t rows = 0, nv = 0;
          infer_request_logits(r, &lg, &rows, &nv);
        }
        break;
      }
      case 13:
        if (!st.engines.empty()) {
          infer_engine* e = st.engines[in.u8() % st.engines.size()];
          infer_engine_stats s;
          infer_engine_stats_init(&s);
          infer_engine_get_stats(e, &s);
          int32_t out = 0;
          infer_engine_max_concurrency(e, in.pick(kLengths), in.pick(kLengths), &out);
        }
        break;
      case 14: {
        int32_t toks[32];
        size_t n = 0;
        const char* text = in.pick(kPrompts);
        infer_tokenize(g_model, text, std::strlen(text), in.pick(kSmallInts) % 2, in.u8() & 1, toks,
                       in.u8() % 33, &n);
        int32_t ids[4] = {token(in), token(in), token(in), token(in)};
        char buf[32];
        size_t need = 0;
        infer_detokenize(g_model, ids, 4, in.u8() & 1, buf, in.u8() % 33, &need);
        infer_token_piece(g_model, ids[0], buf, in.u8() % 33, &need);
        (void)infer_token_is_eog(g_model, ids[1]);
        break;
      }
      case 15:
        if (!st.engines.empty() && steps_left > 8) {
          // A bounded run: step until idle or out of budget.
          infer_engine* e = st.engines[in.u8() % st.engines.size()];
          for (int i = 0; i < 8; ++i, --steps_left) {
            int32_t active = 0;
            if (infer_engine_step(e, &active) != INFER_OK || active == 0) break;
          }
        }
        break;
    }
  }
  free_requests_of(st, nullptr, true);
  for (infer_engine* e : st.engines) infer_engine_free(e);
}

std::string model_path() {
  const char* env = std::getenv("INFER_SHARED_DIR");
  std::string p = std::string(env ? env : INFER_SOURCE_DIR "/../shared") + "/models/stories260K.gguf";
  if (access(p.c_str(), R_OK) == 0) return p;
  // No shared models: a tiny synthetic one.
  char dir[] = "/tmp/fuzz_capi_XXXXXX";
  if (!mkdtemp(dir)) return p;
  p = std::string(dir) + "/tiny.gguf";
  infer_synth_params sp;
  infer_synth_params_init(&sp);
  sp.preset = "tiny";
  sp.n_threads = 1;
  if (infer_synth(p.c_str(), &sp, nullptr) != INFER_OK)
    std::fprintf(stderr, "fuzz_capi: cannot write a synthetic model: %s\n", infer_last_error());
  return p;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  const std::string path = model_path();
  if (infer_model_load(path.c_str(), nullptr, &g_model) != INFER_OK) {
    std::fprintf(stderr, "fuzz_capi: cannot load %s: %s\n", path.c_str(), infer_last_error());
    std::abort();
  }
  infer_model_info info;
  infer_model_info_init(&info);
  infer_model_get_info(g_model, &info);
  g_vocab = info.n_vocab > 0 ? info.n_vocab : 1;
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    run_program(data, size);
  } catch (...) {
    std::fprintf(stderr, "fuzz_capi: an exception crossed the C API\n");
    std::abort();
  }
  return 0;
}
