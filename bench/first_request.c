/* Load time and the TTFT of the first requests after infer_model_load,
 * through the public API only: the first request must not pay for weight
 * preparation (it is done at load).
 *
 *   first_request MODEL.gguf [n_requests=10] [prompt_tokens=64] [threads=2]
 *
 * Prints one line per request (its TTFT) and a summary line: load_ms,
 * first_ttft_ms, median TTFT of requests 2..n, and their ratio. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "infer/infer.h"

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static long minor_faults(void) {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return ru.ru_minflt;
}

static int cmp(const void* a, const void* b) {
  const double x = *(const double*)a, y = *(const double*)b;
  return x < y ? -1 : x > y;
}

int main(int argc, char** argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s MODEL.gguf [n_requests] [prompt_tokens] [threads]\n", argv[0]);
    return 2;
  }
  const int n = argc > 2 ? atoi(argv[2]) : 10;
  const int n_prompt = argc > 3 ? atoi(argv[3]) : 64;
  const int threads = argc > 4 ? atoi(argv[4]) : 2;
  if (n < 2 || n > 1000 || n_prompt < 1 || n_prompt > 4096) return 2;
  const double t0 = now_ms();
  infer_model* m = NULL;
  if (infer_model_load(argv[1], NULL, &m) != INFER_OK) {
    fprintf(stderr, "load: %s\n", infer_last_error());
    return 1;
  }
  const double load_ms = now_ms() - t0;
  infer_engine_params ep;
  infer_engine_params_init(&ep);
  ep.n_threads = threads;
  infer_engine* e = NULL;
  if (infer_engine_create(m, &ep, &e) != INFER_OK) {
    fprintf(stderr, "engine: %s\n", infer_last_error());
    return 1;
  }
  int32_t* toks = malloc(sizeof(int32_t) * n_prompt);
  double* ttft = malloc(sizeof(double) * n);
  for (int i = 0; i < n; ++i) {
    /* A different prompt each time (no prefix-cache hits). */
    for (int j = 0; j < n_prompt; ++j) toks[j] = 1 + (j * 7 + i * 131) % 1000;
    infer_request_params rp;
    infer_request_params_init(&rp);
    rp.prompt_tokens = toks;
    rp.n_prompt_tokens = n_prompt;
    rp.max_tokens = 1;
    infer_request* r = NULL;
    const long f0 = minor_faults();
    if (infer_submit(e, &rp, &r) != INFER_OK || infer_engine_run(e) != INFER_OK) {
      fprintf(stderr, "request: %s\n", infer_last_error());
      return 1;
    }
    infer_request_stats st;
    infer_request_stats_init(&st);
    infer_request_get_stats(r, &st);
    ttft[i] = st.ttft_ms;
    printf("request %d: ttft %.1f ms, %ld page faults\n", i + 1, ttft[i], minor_faults() - f0);
    infer_request_free(r);
  }
  double* rest = malloc(sizeof(double) * (n - 1));
  memcpy(rest, ttft + 1, sizeof(double) * (n - 1));
  qsort(rest, n - 1, sizeof(double), cmp);
  const double med = rest[(n - 1) / 2];
  printf("load_ms %.0f first_ttft_ms %.1f median_later_ttft_ms %.1f ratio %.2f\n", load_ms, ttft[0], med,
         ttft[0] / med);
  free(rest);
  free(ttft);
  free(toks);
  infer_engine_free(e);
  infer_model_free(m);
  return 0;
}
