// Allocation failures through the C API (../shared/repro/failmalloc, #8):
// runs one API scenario again and again with the N-th allocation of the
// calling thread failing (operator new throws std::bad_alloc), N = 1, 2, ...
// until the scenario completes without reaching N. Every call must return a
// status: no exception may cross the C boundary (std::bad_alloc escaped
// infer_request_text), nothing may abort, and afterwards the library must
// work normally.
//
// Its own program, linked against the shared library: it replaces the
// global operator new, which the library's allocations then go through.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>

#include "infer/infer.h"

namespace {
thread_local long t_countdown = 0;  // > 0: the allocation that brings it to 0 fails
thread_local long t_failed = 0;

void* allocate(std::size_t n) {
  if (t_countdown > 0 && --t_countdown == 0) {
    ++t_failed;
    throw std::bad_alloc();
  }
  void* p = std::malloc(n ? n : 1);
  if (!p) throw std::bad_alloc();
  return p;
}
}  // namespace

void* operator new(std::size_t n) { return allocate(n); }
void* operator new[](std::size_t n) { return allocate(n); }
void* operator new(std::size_t n, const std::nothrow_t&) noexcept {
  try {
    return allocate(n);
  } catch (...) {
    return nullptr;
  }
}
void* operator new[](std::size_t n, const std::nothrow_t&) noexcept {
  try {
    return allocate(n);
  } catch (...) {
    return nullptr;
  }
}
void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }

namespace {

int g_bad = 0;

#define EXPECT(cond, ...)                          \
  do {                                             \
    if (!(cond)) {                                 \
      std::fprintf(stderr, "FAIL (N=%ld): ", n);   \
      std::fprintf(stderr, __VA_ARGS__);           \
      std::fprintf(stderr, "\n");                  \
      ++g_bad;                                     \
    }                                              \
  } while (0)

bool ok_or_oom(infer_status s) { return s == INFER_OK || s == INFER_ERR_OUT_OF_MEMORY; }

// One pass of the scenario; returns whether it ran to its end.
void scenario(infer_model* model, long n) {
  infer_engine_params ep;
  infer_engine_params_init(&ep);
  ep.n_threads = 1;
  ep.max_seqs = 4;
  infer_engine* e = nullptr;
  infer_status s = infer_engine_create(model, &ep, &e);
  EXPECT(ok_or_oom(s), "infer_engine_create: %s", infer_status_string(s));
  if (s != INFER_OK) return;
  infer_request_params rp;
  infer_request_params_init(&rp);
  rp.prompt = "Once upon a time";
  rp.max_tokens = 6;
  rp.ignore_eos = 1;
  infer_request* r[2] = {nullptr, nullptr};
  s = infer_submit(e, &rp, &r[0]);
  EXPECT(ok_or_oom(s), "infer_submit: %s", infer_status_string(s));
  s = infer_submit_n(e, &rp, 1, &r[1]);
  EXPECT(ok_or_oom(s), "infer_submit_n: %s", infer_status_string(s));
  for (int i = 0; i < 3; ++i) {
    int32_t active = 0;
    s = infer_engine_step(e, &active);
    EXPECT(ok_or_oom(s), "infer_engine_step: %s", infer_status_string(s));
  }
  for (infer_request* q : r) {
    if (!q) continue;
    char buf[64];
    size_t need = 0, nb = 0;
    int32_t fin = 0, toks[8];
    s = infer_request_text(q, buf, sizeof buf, &need);
    EXPECT(ok_or_oom(s) || s == INFER_ERR_BUFFER_TOO_SMALL, "infer_request_text: %s", infer_status_string(s));
    s = infer_request_next_text(q, 0, buf, sizeof buf, &nb, &fin);
    EXPECT(ok_or_oom(s), "infer_request_next_text: %s", infer_status_string(s));
    s = infer_request_next_tokens(q, 0, toks, 8, &nb, &fin);
    EXPECT(ok_or_oom(s), "infer_request_next_tokens: %s", infer_status_string(s));
    infer_request_stats st;
    infer_request_stats_init(&st);
    s = infer_request_get_stats(q, &st);
    EXPECT(ok_or_oom(s), "infer_request_get_stats: %s", infer_status_string(s));
    (void)infer_request_error(q);
    s = infer_request_cancel(q);
    EXPECT(ok_or_oom(s), "infer_request_cancel: %s", infer_status_string(s));
  }
  infer_engine_stats es;
  infer_engine_stats_init(&es);
  s = infer_engine_get_stats(e, &es);
  EXPECT(ok_or_oom(s), "infer_engine_get_stats: %s", infer_status_string(s));
  int32_t toks[64];
  size_t nt = 0;
  s = infer_tokenize(model, "Hello world, once more", 22, 1, 0, toks, 64, &nt);
  EXPECT(ok_or_oom(s), "infer_tokenize: %s", infer_status_string(s));
  char text[256];
  size_t need = 0;
  if (s == INFER_OK) {
    s = infer_detokenize(model, toks, nt, 0, text, sizeof text, &need);
    EXPECT(ok_or_oom(s), "infer_detokenize: %s", infer_status_string(s));
  }
  s = infer_model_meta(model, "general.architecture", text, sizeof text, &need);
  EXPECT(ok_or_oom(s), "infer_model_meta: %s", infer_status_string(s));
  s = infer_model_meta(model, "no.such.key.of.a.long.name.beyond.sso", text, sizeof text, &need);
  EXPECT(s == INFER_ERR_NOT_FOUND || s == INFER_ERR_OUT_OF_MEMORY, "infer_model_meta (missing): %s",
         infer_status_string(s));
  for (int i = 0; i < 20; ++i) {  // bounded: the scenario must end whatever the engine does
    int32_t active = 0;
    s = infer_engine_step(e, &active);
    EXPECT(ok_or_oom(s), "infer_engine_step: %s", infer_status_string(s));
    if (s == INFER_OK && active == 0) break;
  }
  infer_request_free(r[0]);
  infer_request_free(r[1]);
  infer_engine_free(e);
}

}  // namespace

int main(int argc, char** argv) {
  const char* env = std::getenv("INFER_SHARED_DIR");
  std::string path = std::string(env ? env : INFER_SOURCE_DIR "/../shared") + "/models/stories260K.gguf";
  if (argc > 1) path = argv[1];
  infer_model* model = nullptr;
  if (infer_model_load(path.c_str(), nullptr, &model) != INFER_OK) {
    std::fprintf(stderr, "SKIPPED: %s: %s\n", path.c_str(), infer_last_error());
    return 77;
  }
  long n = 1, runs = 0;
  const long max_n = argc > 2 ? std::atol(argv[2]) : 200000;
  for (; n <= max_n; ++runs) {
    t_failed = 0;
    t_countdown = n;
    try {
      scenario(model, n);
    } catch (const std::exception& ex) {
      t_countdown = 0;
      std::fprintf(stderr, "FAIL (N=%ld): an exception crossed the C API: %s\n", n, ex.what());
      ++g_bad;
    } catch (...) {
      t_countdown = 0;
      std::fprintf(stderr, "FAIL (N=%ld): an unknown exception crossed the C API\n", n);
      ++g_bad;
    }
    const bool reached = t_failed > 0;
    t_countdown = 0;
    if (!reached) break;  // the scenario needs fewer than n allocations: all covered
    if (g_bad > 20) break;
    // Every allocation up to 2000, then a sample that thins out.
    n += n < 2000 ? 1 : n / 500;
  }
  // And the library still works.
  char* text = nullptr;
  if (infer_generate(model, "Once", nullptr, 4, &text) != INFER_OK) {
    std::fprintf(stderr, "FAIL: infer_generate after the fault runs: %s\n", infer_last_error());
    ++g_bad;
  }
  infer_free(text);
  infer_model_free(model);
  std::printf("%ld runs, allocations 1..%ld failed in turn, %d failures\n", runs, n, g_bad);
  return g_bad ? 1 : 0;
}
