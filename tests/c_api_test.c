/*
 * The C API test: strict C99 against include/infer/infer.h only, no framework.
 *
 * It exercises the public contract end to end on the real stories260K model
 * from ../shared: errors and status strings, loading, metadata, tokens,
 * engines and requests (greedy text against the reference implementation,
 * concurrency, cancellation, stop strings, bad input, logits), the one-call
 * convenience function, logging and cleanup.
 *
 * Prints "N passed, M failed" and exits 0 (all passed), 1 (a failure) or 77
 * (skipped: the shared model was not found; CTest reports it as skipped).
 * The shared directory is $INFER_SHARED_DIR, else ../shared, ../../shared or
 * ../../../shared relative to the working directory (CTest runs the test in
 * BUILD/tests, and ../shared sits beside the checkout).
 */
#include <infer/infer.h>

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- a tiny checking harness ------------------------------------------------------ */

static int g_passed = 0;
static int g_failed = 0;

static void check_impl(int ok, const char *expr, const char *file, int line) {
  if (ok) {
    g_passed++;
  } else {
    g_failed++;
    fprintf(stderr, "%s:%d: FAILED: %s\n", file, line, expr);
  }
}

#define CHECK(cond) check_impl((cond) != 0, #cond, __FILE__, __LINE__)
#define FAIL(what) check_impl(0, what, __FILE__, __LINE__)

/* Checks a call's status, printing both statuses and the error message. */
static void check_status_impl(infer_status got, infer_status want, const char *expr, const char *file,
                              int line) {
  if (got == want) {
    g_passed++;
  } else {
    char message[512]; /* copied first: the next infer_* call may reuse it */
    snprintf(message, sizeof message, "%s", infer_last_error());
    g_failed++;
    fprintf(stderr, "%s:%d: FAILED: %s returned %d (%s), expected %d (%s); last error: \"%s\"\n", file, line,
            expr, (int)got, infer_status_string(got), (int)want, infer_status_string(want), message);
  }
}

#define CHECK_STATUS(call, want) check_status_impl((call), (want), #call, __FILE__, __LINE__)

static void check_str_impl(const char *got, const char *want, const char *expr, const char *file, int line) {
  if (got != NULL && want != NULL && strcmp(got, want) == 0) {
    g_passed++;
  } else {
    g_failed++;
    fprintf(stderr, "%s:%d: FAILED: %s\n  got:      \"%s\"\n  expected: \"%s\"\n", file, line, expr,
            got ? got : "(null)", want ? want : "(null)");
  }
}

#define CHECK_STR(got, want) check_str_impl((got), (want), #got " == " #want, __FILE__, __LINE__)

/* ---- files ------------------------------------------------------------------------ */

static int file_exists(const char *path) {
  FILE *f = fopen(path, "rb");
  if (f == NULL) return 0;
  fclose(f);
  return 1;
}

/* Reads a whole file, NUL-terminated; NULL on failure. Free with free(). */
static char *read_all(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  char *buf = NULL;
  size_t cap = 0, n = 0;
  if (f == NULL) return NULL;
  for (;;) {
    size_t got;
    if (cap - n < 4096) {
      char *grown = (char *)realloc(buf, cap + 65536);
      if (grown == NULL) {
        free(buf);
        fclose(f);
        return NULL;
      }
      buf = grown;
      cap += 65536;
    }
    got = fread(buf + n, 1, cap - n - 1, f);
    n += got;
    if (got == 0) break;
  }
  fclose(f);
  buf[n] = '\0';
  if (len != NULL) *len = n;
  return buf;
}

/* out = dir + rel; 0 when it does not fit (a path that long is not ours). */
static int path_join(char *out, size_t n, const char *dir, const char *rel) {
  size_t a = strlen(dir), b = strlen(rel);
  if (a + b + 1 > n) {
    if (n > 0) out[0] = '\0';
    return 0;
  }
  memcpy(out, dir, a);
  memcpy(out + a, rel, b + 1);
  return 1;
}

/* Finds the shared directory (see the top of the file); 1 when found. */
static int find_shared(char *dir, size_t size) {
  static const char *const candidates[] = {"../shared", "../../shared", "../../../shared"};
  char probe[1024];
  const char *env = getenv("INFER_SHARED_DIR");
  size_t i;
  if (env != NULL && *env != '\0') {
    snprintf(dir, size, "%s", env);
    path_join(probe, sizeof probe, dir, "/models/stories260K.gguf");
    return file_exists(probe);
  }
  for (i = 0; i < sizeof candidates / sizeof candidates[0]; i++) {
    snprintf(dir, size, "%s", candidates[i]);
    path_join(probe, sizeof probe, dir, "/models/stories260K.gguf");
    if (file_exists(probe)) return 1;
  }
  return 0;
}

/* The test links libinfer only, not libm: small local versions of fabs, exp
 * and log, accurate far beyond what the checks need. */
static double abs_d(double x) { return x < 0 ? -x : x; }

static double exp_d(double x) {
  /* exp(x) = exp(x / 2^k)^(2^k); a Taylor series for the small argument. */
  double sum = 1.0, term = 1.0;
  int k = 0, i;
  if (x != x) return x;
  if (x < -700.0) return 0.0;
  while (x > 0.5 || x < -0.5) {
    x /= 2.0;
    k++;
  }
  for (i = 1; i < 20; i++) {
    term *= x / i;
    sum += term;
  }
  while (k-- > 0) sum *= sum;
  return sum;
}

static double log_d(double x) {
  /* Halley's iteration on exp(y) = x (x >= 1 here). */
  double y = 0.0;
  int i;
  for (i = 0; i < 100; i++) {
    double e = exp_d(y);
    y += 2.0 * (x - e) / (x + e);
  }
  return y;
}

static int little_endian(void) {
  const uint32_t one = 1;
  unsigned char b;
  memcpy(&b, &one, 1);
  return b == 1;
}

/* ---- a token callback that records everything ------------------------------------ */

typedef struct collector {
  infer_request *expected_request; /* set after submit; NULL: not checked */
  int bad_request;                 /* the callback saw another handle */
  int n_calls;
  int32_t tokens[1024];
  char text[16384];
  size_t text_len;
  int cancel_after; /* > 0: return non-zero on that call */
} collector;

static void collector_init(collector *c) { memset(c, 0, sizeof *c); }

static int32_t collect_token(infer_request *request, int32_t token, const char *text, size_t text_len,
                             void *user_data) {
  collector *c = (collector *)user_data;
  if (c->expected_request != NULL && request != c->expected_request) c->bad_request = 1;
  if (c->n_calls < (int)(sizeof c->tokens / sizeof c->tokens[0])) c->tokens[c->n_calls] = token;
  c->n_calls++;
  if (text_len > 0 && text != NULL && c->text_len + text_len < sizeof c->text) {
    memcpy(c->text + c->text_len, text, text_len);
    c->text_len += text_len;
    c->text[c->text_len] = '\0';
  }
  return c->cancel_after > 0 && c->n_calls >= c->cancel_after;
}

/* ---- a log callback that counts ------------------------------------------------------ */

typedef struct log_counter {
  int n;
  int n_warn_or_worse;
} log_counter;

static void count_log(infer_log_level level, const char *message, void *user_data) {
  log_counter *lc = (log_counter *)user_data;
  lc->n++;
  if (level >= INFER_LOG_WARN) {
    lc->n_warn_or_worse++;
    fprintf(stderr, "  (log %d: %s)\n", (int)level, message ? message : "(null)");
  }
}

/* ---- tests that need no model --------------------------------------------------------- */

static void test_version(void) {
  /* The library's string comes from the build (CMake's project version, which
   * also names the SONAME), its number and this header's macros from infer.h:
   * all three must agree. */
  char expect[64];
  unsigned major = 0, minor = 0, patch = 0;
  char rest = 0;
  CHECK(infer_version_number() == (uint32_t)INFER_VERSION_NUMBER);
  CHECK(infer_version() != NULL);
  CHECK(infer_version() != NULL && sscanf(infer_version(), "%u.%u.%u%c", &major, &minor, &patch, &rest) == 3);
  CHECK(minor < 100 && patch < 100);
  CHECK(infer_version_number() == major * 10000u + minor * 100u + patch);
  snprintf(expect, sizeof expect, "%d.%d.%d", INFER_VERSION_MAJOR, INFER_VERSION_MINOR, INFER_VERSION_PATCH);
  CHECK_STR(infer_version(), expect);
}

static void test_status_strings(void) {
  int s;
  for (s = INFER_OK; s <= INFER_ERR_BUSY; s++) {
    const char *str = infer_status_string((infer_status)s);
    CHECK(str != NULL && str[0] != '\0');
  }
  CHECK(infer_status_string((infer_status)999) != NULL);
  CHECK(infer_status_string((infer_status)-1) != NULL);
  CHECK(strcmp(infer_status_string(INFER_OK), infer_status_string(INFER_ERR_IO)) != 0);
  CHECK(infer_last_error() != NULL);
}

static void test_params_init(void) {
  infer_model_params mp;
  infer_engine_params ep;
  infer_sampling_params sp;
  infer_request_params rp;
  infer_request_stats rs;
  infer_engine_stats es;
  infer_model_info mi;
  memset(&mp, 0xAB, sizeof mp);
  memset(&ep, 0xAB, sizeof ep);
  memset(&sp, 0xAB, sizeof sp);
  memset(&rp, 0xAB, sizeof rp);
  memset(&rs, 0xAB, sizeof rs);
  memset(&es, 0xAB, sizeof es);
  memset(&mi, 0xAB, sizeof mi);

  infer_model_params_init(&mp);
  CHECK(mp.struct_size == sizeof mp);
  CHECK(mp.backend == INFER_BACKEND_AUTO);
  CHECK(mp.use_mmap == 1);
  CHECK(mp.vocab_only == 0);

  infer_engine_params_init(&ep);
  CHECK(ep.struct_size == sizeof ep);
  CHECK(ep.n_threads == 0);
  CHECK(ep.kv_block_size == 16);
  CHECK(ep.kv_type == INFER_KV_F32);
  CHECK(ep.max_seqs == 16);
  CHECK(ep.max_batch_tokens == 512);
  CHECK(ep.n_ctx == 0);

  infer_sampling_params_init(&sp);
  CHECK(sp.struct_size == sizeof sp);
  CHECK(abs_d(sp.temperature - 0.8f) < 1e-6f);
  CHECK(sp.top_k == 40);
  CHECK(abs_d(sp.top_p - 0.95f) < 1e-6f);
  CHECK(abs_d(sp.min_p - 0.05f) < 1e-6f);
  CHECK(sp.repeat_penalty == 1.0f);
  CHECK(sp.frequency_penalty == 0.0f);
  CHECK(sp.presence_penalty == 0.0f);
  CHECK(sp.penalty_last_n == 64);
  CHECK(sp.seed == 0);
  CHECK(sp.n_logit_bias == 0);

  infer_request_params_init(&rp);
  CHECK(rp.struct_size == sizeof rp);
  CHECK(rp.prompt == NULL);
  CHECK(rp.prompt_tokens == NULL);
  CHECK(rp.n_prompt_tokens == 0);
  CHECK(rp.add_bos == -1);
  CHECK(rp.parse_special == 0);
  CHECK(rp.max_tokens == 256);
  CHECK(rp.sampling == NULL);
  CHECK(rp.n_stop == 0);
  CHECK(rp.ignore_eos == 0);
  CHECK(rp.on_token == NULL);
  CHECK(rp.logits == 0);

  infer_request_stats_init(&rs);
  CHECK(rs.struct_size == sizeof rs);
  infer_engine_stats_init(&es);
  CHECK(es.struct_size == sizeof es);
  infer_model_info_init(&mi);
  CHECK(mi.struct_size == sizeof mi);
}

static void test_load_errors(const char *tmp_junk) {
  infer_model *m = (infer_model *)&g_passed; /* a non-NULL sentinel */
  FILE *f;

  CHECK_STATUS(infer_model_load("./no-such-dir/no-such-model.gguf", NULL, &m), INFER_ERR_IO);
  CHECK(m == NULL);
  CHECK(infer_last_error() != NULL && infer_last_error()[0] != '\0');

  /* A file that is not GGUF at all. */
  f = fopen(tmp_junk, "wb");
  CHECK(f != NULL);
  if (f != NULL) {
    int i;
    for (i = 0; i < 1000; i++) fputc("not a gguf file\n"[i % 16], f);
    fclose(f);
    m = (infer_model *)&g_passed;
    CHECK_STATUS(infer_model_load(tmp_junk, NULL, &m), INFER_ERR_FORMAT);
    CHECK(m == NULL);
    CHECK(infer_last_error()[0] != '\0');

    /* GGUF v3 whose tensor and key counts are absurd and whose data ends
     * early: FORMAT, never a crash or a huge allocation. */
    f = fopen(tmp_junk, "wb");
    if (f != NULL) {
      static const unsigned char v3[4] = {3, 0, 0, 0};
      fputs("GGUF", f);
      fwrite(v3, 1, 4, f);
      for (i = 0; i < 40; i++) fputc(0xFF, f);
      fclose(f);
      m = (infer_model *)&g_passed;
      CHECK_STATUS(infer_model_load(tmp_junk, NULL, &m), INFER_ERR_FORMAT);
      CHECK(m == NULL);
    }
    remove(tmp_junk);
  }

  /* An empty file. */
  f = fopen(tmp_junk, "wb");
  if (f != NULL) {
    fclose(f);
    m = (infer_model *)&g_passed;
    CHECK_STATUS(infer_model_load(tmp_junk, NULL, &m), INFER_ERR_FORMAT);
    CHECK(m == NULL);
    remove(tmp_junk);
  }

  CHECK_STATUS(infer_model_load(NULL, NULL, &m), INFER_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(infer_model_load("x.gguf", NULL, NULL), INFER_ERR_INVALID_ARGUMENT);
}

static void test_null_frees(void) {
  /* Documented no-ops: must simply return. */
  infer_model_free(NULL);
  infer_engine_free(NULL);
  infer_request_free(NULL);
  infer_free(NULL);
  CHECK(1);
}

/* ---- tests on stories260K --------------------------------------------------------------- */

static const int32_t k_once_tokens[5] = {1, 403, 407, 261, 378}; /* BOS " Once upon a time" */

static void test_model_info(const infer_model *model) {
  infer_model_info info;
  infer_tensor_info ti;
  int32_t n;
  infer_model_info_init(&info);
  CHECK_STATUS(infer_model_get_info(model, &info), INFER_OK);
  CHECK_STR(info.architecture, "llama");
  CHECK(info.name != NULL);
  CHECK_STR(info.tokenizer, "llama");
  CHECK(info.n_vocab == 512);
  CHECK(info.n_embd == 64);
  CHECK(info.n_layer == 5);
  CHECK(info.n_head == 8);
  CHECK(info.n_head_kv == 4);
  CHECK(info.n_ff == 172);
  CHECK(info.n_rot == 8);
  CHECK(info.n_ctx_train == 2048);
  CHECK(abs_d(info.rms_norm_eps - 1e-5f) < 1e-9f);
  CHECK(info.n_tensors == 48);
  CHECK(info.n_params > 200000 && info.n_params < 400000);
  CHECK(info.n_bytes == info.n_params * 4); /* all F32 */
  CHECK(info.bos_token == 1);
  CHECK(info.eos_token == 2);
  CHECK(info.vocab_only == 0);

  CHECK_STATUS(infer_model_get_info(NULL, &info), INFER_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(infer_model_get_info(model, NULL), INFER_ERR_INVALID_ARGUMENT);

  n = infer_model_tensor_count(model);
  CHECK(n == 48);
  memset(&ti, 0, sizeof ti);
  ti.struct_size = sizeof ti;
  CHECK_STATUS(infer_model_tensor(model, 0, &ti), INFER_OK);
  CHECK(ti.name != NULL && ti.name[0] != '\0');
  CHECK_STR(ti.type, "f32");
  CHECK(ti.n_dims >= 1 && ti.n_dims <= 4);
  CHECK(ti.n_bytes > 0);
  CHECK(infer_model_tensor(model, n, &ti) != INFER_OK);
  CHECK(infer_model_tensor(model, -1, &ti) != INFER_OK);
}

static void test_model_meta(const infer_model *model) {
  char small[3];
  char buf[64];
  size_t needed = 0;
  CHECK_STATUS(infer_model_meta(model, "general.architecture", small, sizeof small, &needed),
               INFER_ERR_BUFFER_TOO_SMALL);
  CHECK(needed == 6); /* "llama" + NUL */
  needed = 0;
  /* A NULL buffer of size 0 is a too-small buffer: the size query idiom. */
  CHECK_STATUS(infer_model_meta(model, "general.architecture", NULL, 0, &needed), INFER_ERR_BUFFER_TOO_SMALL);
  CHECK(needed == 6);
  needed = 0;
  CHECK_STATUS(infer_model_meta(model, "general.architecture", buf, 6, &needed), INFER_OK);
  CHECK_STR(buf, "llama");
  CHECK(needed == 6);
  CHECK_STATUS(infer_model_meta(model, "llama.block_count", buf, sizeof buf, NULL), INFER_OK);
  CHECK_STR(buf, "5");
  CHECK_STATUS(infer_model_meta(model, "no.such.key", buf, sizeof buf, &needed), INFER_ERR_NOT_FOUND);
  CHECK_STATUS(infer_model_meta(model, NULL, buf, sizeof buf, &needed), INFER_ERR_INVALID_ARGUMENT);
}

static void test_tokens(const infer_model *model) {
  const char *text = "Once upon a time";
  int32_t toks[64];
  size_t n = 0, needed = 0;
  char buf[128];
  char piece[32];
  int i;
  const int32_t bad[3] = {1, 99999, 403};
  const int32_t neg[2] = {403, -1};

  CHECK_STATUS(infer_tokenize(model, text, strlen(text), 1, 0, toks, 64, &n), INFER_OK);
  CHECK(n == 5);
  for (i = 0; i < 5 && (size_t)i < n; i++) CHECK(toks[i] == k_once_tokens[i]);

  CHECK_STATUS(infer_tokenize(model, text, strlen(text), 0, 0, toks, 64, &n), INFER_OK);
  CHECK(n == 4);
  if (n == 4) CHECK(toks[0] == 403 && toks[3] == 378);

  n = 0;
  CHECK_STATUS(infer_tokenize(model, text, strlen(text), 1, 0, toks, 3, &n), INFER_ERR_BUFFER_TOO_SMALL);
  CHECK(n == 5);

  /* text_len counts: only "Once" here. */
  CHECK_STATUS(infer_tokenize(model, text, 4, 1, 0, toks, 64, &n), INFER_OK);
  CHECK(n == 2 && toks[1] == 403);

  CHECK_STATUS(infer_tokenize(model, "", 0, 1, 0, toks, 64, &n), INFER_OK);
  CHECK(n == 1 && toks[0] == 1);

  /* Invalid UTF-8 is not an error. */
  CHECK_STATUS(infer_tokenize(model, "a\xff\xfe z", 5, 0, 0, toks, 64, &n), INFER_OK);
  CHECK(n >= 3);

  CHECK_STATUS(infer_tokenize(NULL, text, strlen(text), 1, 0, toks, 64, &n), INFER_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(infer_tokenize(model, NULL, 4, 1, 0, toks, 64, &n), INFER_ERR_INVALID_ARGUMENT);

  CHECK_STATUS(infer_detokenize(model, k_once_tokens, 5, 0, buf, sizeof buf, &needed), INFER_OK);
  CHECK_STR(buf, "Once upon a time");
  CHECK(needed == strlen("Once upon a time") + 1);
  needed = 0;
  CHECK_STATUS(infer_detokenize(model, k_once_tokens, 5, 0, buf, 4, &needed), INFER_ERR_BUFFER_TOO_SMALL);
  CHECK(needed == strlen("Once upon a time") + 1);
  CHECK_STATUS(infer_detokenize(model, k_once_tokens, 5, 1, buf, sizeof buf, &needed), INFER_OK);
  CHECK(strstr(buf, "Once upon a time") != NULL);
  CHECK(strstr(buf, "<s>") != NULL); /* render_special writes BOS */

  CHECK_STATUS(infer_detokenize(model, bad, 3, 0, buf, sizeof buf, &needed), INFER_ERR_INVALID_ARGUMENT);
  CHECK(infer_last_error()[0] != '\0');
  CHECK_STATUS(infer_detokenize(model, neg, 2, 0, buf, sizeof buf, &needed), INFER_ERR_INVALID_ARGUMENT);

  n = 0;
  CHECK_STATUS(infer_token_piece(model, 403, piece, sizeof piece, &n), INFER_OK);
  CHECK(n == 5 && memcmp(piece, " Once", 5) == 0);
  CHECK_STATUS(infer_token_piece(model, 512, piece, sizeof piece, &n), INFER_ERR_INVALID_ARGUMENT);

  CHECK(infer_token_is_eog(model, 2) == 1);
  CHECK(infer_token_is_eog(model, 403) == 0);
}

/* The reference continuation after "Once upon a time" (greedy). */
typedef struct reference {
  char *once_txt;         /* whole file */
  const char *once_cont;  /* after the prompt */
  float *once_logits;     /* 128 x 512 */
  size_t once_rows;
  int32_t once_tokens[128];
  int n_once_tokens;
} reference;

static void load_reference(const char *shared, reference *ref) {
  char path[1024];
  size_t len = 0;
  char *toks;
  memset(ref, 0, sizeof *ref);
  path_join(path, sizeof path, shared, "/reference/stories260K-once.txt");
  ref->once_txt = read_all(path, &len);
  CHECK(ref->once_txt != NULL);
  if (ref->once_txt != NULL) {
    CHECK(strncmp(ref->once_txt, "Once upon a time", 16) == 0);
    ref->once_cont = ref->once_txt + (len >= 16 ? 16 : len);
  } else {
    ref->once_cont = "";
  }

  path_join(path, sizeof path, shared, "/reference/stories260K-once.logits.f32");
  if (little_endian()) {
    char *raw = read_all(path, &len);
    CHECK(raw != NULL && len == 128 * 512 * 4);
    if (raw != NULL) {
      ref->once_rows = len / (512 * 4);
      ref->once_logits = (float *)malloc(ref->once_rows * 512 * sizeof(float));
      if (ref->once_logits != NULL) memcpy(ref->once_logits, raw, ref->once_rows * 512 * sizeof(float));
      free(raw);
    }
  }

  path_join(path, sizeof path, shared, "/reference/stories260K-once.tokens");
  toks = read_all(path, &len);
  CHECK(toks != NULL);
  if (toks != NULL) {
    char *p = toks, *end;
    while (ref->n_once_tokens < 128) {
      long v = strtol(p, &end, 10);
      if (end == p) break;
      ref->once_tokens[ref->n_once_tokens++] = (int32_t)v;
      p = end;
    }
    free(toks);
  }
}

static void free_reference(reference *ref) {
  free(ref->once_txt);
  free(ref->once_logits);
}

static void greedy_sampling(infer_sampling_params *sp) {
  infer_sampling_params_init(sp);
  sp->temperature = 0.0f;
}

/* Submits "Once upon a time" greedily with a collector; returns the status. */
static infer_status submit_once(infer_engine *engine, const infer_sampling_params *sp, int32_t max_tokens,
                                collector *c, infer_request **out) {
  infer_request_params rp;
  infer_status st;
  infer_request_params_init(&rp);
  rp.prompt = "Once upon a time";
  rp.add_bos = 1;
  rp.max_tokens = max_tokens;
  rp.sampling = sp;
  rp.on_token = collect_token;
  rp.user_data = c;
  st = infer_submit(engine, &rp, out);
  if (st == INFER_OK) c->expected_request = *out;
  return st;
}

static void get_text(const infer_request *req, char *buf, size_t size) {
  size_t needed = 0;
  buf[0] = '\0';
  CHECK_STATUS(infer_request_text(req, buf, size, &needed), INFER_OK);
}

/* Greedy generation, checked against the reference; returns the request. */
static infer_request *test_greedy(infer_engine *engine, const reference *ref, char *text_out, size_t text_size,
                                  int32_t *tokens_out) {
  infer_sampling_params sp;
  infer_request *req = NULL;
  infer_request_stats st;
  collector c;
  const int32_t *toks = NULL;
  size_t n_toks = 0, needed = 0, i;
  char tiny[4];

  greedy_sampling(&sp);
  collector_init(&c);
  CHECK_STATUS(submit_once(engine, &sp, 32, &c, &req), INFER_OK);
  if (req == NULL) return NULL;
  CHECK_STATUS(infer_engine_run(engine), INFER_OK);

  infer_request_stats_init(&st);
  CHECK_STATUS(infer_request_get_stats(req, &st), INFER_OK);
  CHECK(st.finish_reason == INFER_FINISH_LENGTH);
  CHECK(st.status == INFER_OK);
  CHECK(st.n_prompt_tokens == 5);
  CHECK(st.n_generated_tokens == 32);
  CHECK(st.ttft_ms > 0.0);
  CHECK(st.total_ms >= st.ttft_ms);
  CHECK(st.tpot_ms >= 0.0);
  CHECK(st.queue_ms >= 0.0);
  CHECK(st.decode_tokens_per_s > 0.0);
  CHECK(st.prefill_tokens_per_s > 0.0);
  CHECK(infer_request_error(req) != NULL && infer_request_error(req)[0] == '\0');

  CHECK(c.n_calls == 32);
  CHECK(c.bad_request == 0);
  CHECK_STATUS(infer_request_tokens(req, &toks, &n_toks), INFER_OK);
  CHECK(n_toks == 32);
  for (i = 0; i < n_toks && i < 32 && toks != NULL; i++) {
    CHECK(toks[i] == c.tokens[i]);
    tokens_out[i] = toks[i];
  }
  /* Greedy tokens are the reference's: "Once upon a time" is positions 0..4. */
  for (i = 0; i < 32 && toks != NULL && i < n_toks && (int)(5 + i) < ref->n_once_tokens; i++)
    if (toks[i] != ref->once_tokens[5 + i]) {
      fprintf(stderr, "  greedy token %d: got %d, reference %d\n", (int)i, (int)toks[i],
              (int)ref->once_tokens[5 + i]);
      CHECK(toks[i] == ref->once_tokens[5 + i]);
      break;
    }

  get_text(req, text_out, text_size);
  CHECK_STR(text_out, c.text); /* what streamed == what was kept */
  CHECK(strlen(text_out) >= 40);
  if (strncmp(text_out, ref->once_cont, 40) != 0) {
    fprintf(stderr, "  generated: \"%.60s\"\n  reference: \"%.60s\"\n", text_out, ref->once_cont);
    FAIL("greedy text starts like the reference");
  } else {
    CHECK(1);
  }

  /* Text into a short buffer: the size it needs. */
  CHECK_STATUS(infer_request_text(req, tiny, sizeof tiny, &needed), INFER_ERR_BUFFER_TOO_SMALL);
  CHECK(needed == strlen(text_out) + 1);

  /* An old caller's shorter stats struct: fields past struct_size are untouched. */
  {
    infer_request_stats old;
    memset(&old, 0, sizeof old);
    old.struct_size = (uint32_t)offsetof(infer_request_stats, queue_ms);
    old.queue_ms = -7.0;
    CHECK_STATUS(infer_request_get_stats(req, &old), INFER_OK);
    CHECK(old.n_generated_tokens == 32);
    CHECK(old.queue_ms == -7.0);
  }
  return req;
}

static void test_concurrent(infer_engine *engine, const char *greedy_text) {
  infer_sampling_params sp;
  infer_request *a = NULL, *b = NULL;
  collector ca, cb;
  char ta[4096], tb[4096];
  int32_t n_active = -1;
  infer_engine_stats es;
  int steps = 0;

  greedy_sampling(&sp);
  collector_init(&ca);
  collector_init(&cb);
  CHECK_STATUS(submit_once(engine, &sp, 32, &ca, &a), INFER_OK);
  CHECK_STATUS(submit_once(engine, &sp, 32, &cb, &b), INFER_OK);
  if (a == NULL || b == NULL) {
    infer_request_free(a);
    infer_request_free(b);
    return;
  }
  /* Drive it step by step this time. */
  do {
    CHECK_STATUS(infer_engine_step(engine, &n_active), INFER_OK);
  } while (n_active > 0 && ++steps < 1000);
  CHECK(n_active == 0);
  CHECK(steps < 1000);

  get_text(a, ta, sizeof ta);
  get_text(b, tb, sizeof tb);
  CHECK_STR(ta, tb);
  CHECK_STR(ta, greedy_text);
  CHECK(ca.bad_request == 0 && cb.bad_request == 0);

  infer_engine_stats_init(&es);
  CHECK_STATUS(infer_engine_get_stats(engine, &es), INFER_OK);
  CHECK(es.n_running == 0);
  CHECK(es.n_waiting == 0);
  CHECK(es.kv_block_size == 16);
  CHECK(es.kv_blocks_total > 0);
  CHECK(es.kv_blocks_used <= es.kv_blocks_total);
  CHECK(es.n_steps > 0);
  CHECK(es.n_generated_tokens >= 96);

  infer_request_free(a);
  infer_request_free(b);
}

static void test_cancel(infer_engine *engine) {
  infer_sampling_params sp;
  infer_request *req = NULL;
  infer_request_stats st;
  collector c;

  /* From the callback. */
  greedy_sampling(&sp);
  collector_init(&c);
  c.cancel_after = 5;
  CHECK_STATUS(submit_once(engine, &sp, 64, &c, &req), INFER_OK);
  if (req != NULL) {
    CHECK_STATUS(infer_engine_run(engine), INFER_OK);
    infer_request_stats_init(&st);
    CHECK_STATUS(infer_request_get_stats(req, &st), INFER_OK);
    CHECK(st.finish_reason == INFER_FINISH_CANCELLED);
    CHECK(c.n_calls == 5); /* no callback after the one that cancelled */
    CHECK(st.n_generated_tokens >= 5 && st.n_generated_tokens < 64);
    infer_request_free(req);
  }

  /* Before it starts. */
  req = NULL;
  collector_init(&c);
  CHECK_STATUS(submit_once(engine, &sp, 64, &c, &req), INFER_OK);
  if (req != NULL) {
    CHECK_STATUS(infer_request_cancel(req), INFER_OK);
    CHECK_STATUS(infer_engine_run(engine), INFER_OK);
    infer_request_stats_init(&st);
    CHECK_STATUS(infer_request_get_stats(req, &st), INFER_OK);
    CHECK(st.finish_reason == INFER_FINISH_CANCELLED);
    CHECK(st.n_generated_tokens == 0);
    CHECK(c.n_calls == 0);
    infer_request_free(req);
  }
  CHECK_STATUS(infer_request_cancel(NULL), INFER_ERR_INVALID_ARGUMENT);

  /* Freeing an unfinished request cancels it; the engine carries on. */
  req = NULL;
  collector_init(&c);
  CHECK_STATUS(submit_once(engine, &sp, 64, &c, &req), INFER_OK);
  if (req != NULL) {
    int32_t n_active = -1;
    CHECK_STATUS(infer_engine_step(engine, &n_active), INFER_OK);
    infer_request_free(req);
    CHECK_STATUS(infer_engine_run(engine), INFER_OK);
    CHECK_STATUS(infer_engine_step(engine, &n_active), INFER_OK);
    CHECK(n_active == 0);
  }
}

static void test_stop_strings(infer_engine *engine, const reference *ref) {
  infer_sampling_params sp;
  infer_request *req = NULL;
  infer_request_stats st;
  collector c;
  infer_request_params rp;
  const char *stops[2] = {"Lily", "zzzz-never"};
  char text[4096], expect[4096];
  const char *lily = strstr(ref->once_cont, "Lily");

  greedy_sampling(&sp);
  collector_init(&c);
  infer_request_params_init(&rp);
  rp.prompt = "Once upon a time";
  rp.add_bos = 1;
  rp.max_tokens = 32;
  rp.sampling = &sp;
  rp.stop = stops;
  rp.n_stop = 2;
  rp.on_token = collect_token;
  rp.user_data = &c;
  CHECK_STATUS(infer_submit(engine, &rp, &req), INFER_OK);
  if (req == NULL) return;
  CHECK_STATUS(infer_engine_run(engine), INFER_OK);
  infer_request_stats_init(&st);
  CHECK_STATUS(infer_request_get_stats(req, &st), INFER_OK);
  CHECK(st.finish_reason == INFER_FINISH_STOP);
  CHECK(st.n_generated_tokens < 32);
  get_text(req, text, sizeof text);
  CHECK(lily != NULL);
  if (lily != NULL) {
    size_t n = (size_t)(lily - ref->once_cont);
    memcpy(expect, ref->once_cont, n);
    expect[n] = '\0';
    CHECK_STR(text, expect); /* ", there was a little girl named " */
  }
  CHECK(strstr(text, "Lily") == NULL);
  CHECK_STR(c.text, text); /* no held-back byte of "Lily" was streamed */
  infer_request_free(req);
}

static void test_invalid_requests(infer_engine *engine, const int32_t *greedy_tokens) {
  infer_sampling_params sp;
  infer_request_params rp;
  infer_request *req = (infer_request *)&g_passed;
  const int32_t bad_tokens[3] = {1, 99999, 403};
  const int32_t neg_tokens[2] = {1, -3};
  const int32_t bias_ids[1] = {512};
  const float bias_vals[1] = {1.0f};
  const int32_t *toks = NULL;
  size_t n_toks = 0, i;
  collector c;

  greedy_sampling(&sp);
  infer_request_params_init(&rp);
  rp.prompt = "Once upon a time";
  rp.sampling = &sp;

  CHECK_STATUS(infer_submit(engine, NULL, &req), INFER_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(infer_submit(engine, &rp, NULL), INFER_ERR_INVALID_ARGUMENT);
  req = NULL;
  CHECK_STATUS(infer_submit(NULL, &rp, &req), INFER_ERR_INVALID_ARGUMENT);
  CHECK(req == NULL);

  /* Token ids out of range. */
  rp.prompt = NULL;
  rp.prompt_tokens = bad_tokens;
  rp.n_prompt_tokens = 3;
  req = (infer_request *)&g_passed;
  CHECK_STATUS(infer_submit(engine, &rp, &req), INFER_ERR_INVALID_ARGUMENT);
  CHECK(req == NULL);
  CHECK(infer_last_error()[0] != '\0');
  rp.prompt_tokens = neg_tokens;
  rp.n_prompt_tokens = 2;
  CHECK_STATUS(infer_submit(engine, &rp, &req), INFER_ERR_INVALID_ARGUMENT);

  /* No prompt at all. */
  rp.prompt_tokens = NULL;
  rp.n_prompt_tokens = 0;
  CHECK_STATUS(infer_submit(engine, &rp, &req), INFER_ERR_INVALID_ARGUMENT);
  /* Token ids given, but none of them. */
  rp.prompt = NULL;
  rp.prompt_tokens = k_once_tokens;
  rp.n_prompt_tokens = 0;
  CHECK_STATUS(infer_submit(engine, &rp, &req), INFER_ERR_INVALID_ARGUMENT);
  rp.prompt_tokens = NULL;
  rp.prompt = "Once upon a time";

  /* Impossible sampling parameters. */
  sp.top_p = 2.0f;
  CHECK_STATUS(infer_submit(engine, &rp, &req), INFER_ERR_INVALID_ARGUMENT);
  sp.top_p = 0.95f;
  sp.temperature = (float)NAN;
  CHECK_STATUS(infer_submit(engine, &rp, &req), INFER_ERR_INVALID_ARGUMENT);
  sp.temperature = 0.0f;
  sp.logit_bias_tokens = bias_ids;
  sp.logit_bias_values = bias_vals;
  sp.n_logit_bias = 1;
  CHECK_STATUS(infer_submit(engine, &rp, &req), INFER_ERR_INVALID_ARGUMENT);
  sp.n_logit_bias = 0;
  sp.logit_bias_tokens = NULL;
  sp.logit_bias_values = NULL;
  rp.max_tokens = -5;
  CHECK_STATUS(infer_submit(engine, &rp, &req), INFER_ERR_INVALID_ARGUMENT);

  CHECK_STATUS(infer_engine_step(NULL, NULL), INFER_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(infer_engine_run(NULL), INFER_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(infer_request_get_stats(NULL, NULL), INFER_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(infer_request_tokens(NULL, &toks, &n_toks), INFER_ERR_INVALID_ARGUMENT);

  /* The engine still works, and gives the same greedy tokens. */
  req = NULL;
  collector_init(&c);
  CHECK_STATUS(submit_once(engine, &sp, 8, &c, &req), INFER_OK);
  if (req == NULL) return;
  CHECK_STATUS(infer_engine_run(engine), INFER_OK);
  CHECK_STATUS(infer_request_tokens(req, &toks, &n_toks), INFER_OK);
  CHECK(n_toks == 8);
  for (i = 0; i < n_toks && i < 8 && toks != NULL; i++) CHECK(toks[i] == greedy_tokens[i]);
  infer_request_free(req);
}

/* Submits the reference prompt's 5 tokens greedily with logits `flags`, and
 * checks the kept rows: `want_rows` of them, equal to the reference rows
 * from `first_ref_row` on (as log-softmax when INFER_LOGITS_LOGPROBS). */
static void check_logits(infer_engine *engine, const reference *ref, uint32_t flags, int32_t max_tokens,
                         size_t want_rows, size_t first_ref_row, const char *what) {
  infer_sampling_params sp;
  infer_request_params rp;
  infer_request *req = NULL;
  infer_request_stats st;
  const float *data = NULL;
  size_t n_rows = 0, n_vocab = 0, r, v;
  const int32_t *toks = NULL;
  size_t n_toks = 0;
  double max_diff = 0.0, worst_sum = 0.0;
  int positive = 0;
  const int logprobs = (flags & INFER_LOGITS_LOGPROBS) != 0;

  greedy_sampling(&sp);
  infer_request_params_init(&rp);
  rp.prompt_tokens = k_once_tokens;
  rp.n_prompt_tokens = 5;
  rp.max_tokens = max_tokens;
  rp.sampling = &sp;
  rp.logits = flags;
  CHECK_STATUS(infer_submit(engine, &rp, &req), INFER_OK);
  if (req == NULL) return;
  CHECK_STATUS(infer_engine_run(engine), INFER_OK);
  infer_request_stats_init(&st);
  CHECK_STATUS(infer_request_get_stats(req, &st), INFER_OK);
  CHECK(st.finish_reason == INFER_FINISH_LENGTH);
  CHECK(st.n_generated_tokens == max_tokens);
  CHECK_STATUS(infer_request_tokens(req, &toks, &n_toks), INFER_OK);
  for (r = 0; r < n_toks && toks != NULL && (int)(5 + r) < ref->n_once_tokens; r++)
    CHECK(toks[r] == ref->once_tokens[5 + r]);

  CHECK_STATUS(infer_request_logits(req, &data, &n_rows, &n_vocab), INFER_OK);
  if (n_rows != want_rows) fprintf(stderr, "  %s: %d rows, expected %d\n", what, (int)n_rows, (int)want_rows);
  CHECK(n_rows == want_rows);
  CHECK(n_vocab == 512);
  CHECK(data != NULL);
  if (data != NULL && n_vocab == 512 && ref->once_logits != NULL) {
    for (r = 0; r < n_rows && first_ref_row + r < ref->once_rows; r++) {
      const float *row = ref->once_logits + (first_ref_row + r) * 512;
      double lse = 0.0, mx = -1e30, sum = 0.0;
      if (logprobs) { /* log-softmax of the reference row */
        for (v = 0; v < 512; v++) mx = row[v] > mx ? row[v] : mx;
        for (v = 0; v < 512; v++) lse += exp_d((double)row[v] - mx);
        lse = mx + log_d(lse);
      }
      for (v = 0; v < 512; v++) {
        const double got = (double)data[r * 512 + v];
        const double d = abs_d(got - ((double)row[v] - lse));
        if (!(d <= max_diff)) max_diff = d; /* NaN sticks */
        if (logprobs) {
          positive += !(got <= 1e-6);
          sum += exp_d(got);
        }
      }
      if (logprobs && !(abs_d(sum - 1.0) <= worst_sum)) worst_sum = abs_d(sum - 1.0);
    }
    if (!(max_diff <= 1e-4)) fprintf(stderr, "  %s: max |logit - reference| = %g\n", what, max_diff);
    CHECK(max_diff <= 1e-4);
    if (logprobs) {
      CHECK(positive == 0); /* log-probabilities are <= 0 */
      CHECK(worst_sum <= 1e-3); /* and their exponentials sum to 1 */
    }
  }
  infer_request_free(req);
}

/* Kept logits against the reference rows. A row is kept per position that
 * is fed to the model: prompt positions, then generated tokens; the last
 * generated token is never fed. GENERATED alone keeps the distributions the
 * generated tokens were drawn from, the first being the last prompt row. */
static void test_logits(infer_engine *engine, const reference *ref) {
  infer_sampling_params sp;
  infer_request_params rp;
  infer_request *req = NULL;
  const float *data = NULL;
  size_t n_rows = 99, n_vocab = 0;
  infer_status st;

  check_logits(engine, ref, INFER_LOGITS_PROMPT | INFER_LOGITS_GENERATED, 3, 5 + 3 - 1, 0, "prompt+generated");
  check_logits(engine, ref, INFER_LOGITS_PROMPT | INFER_LOGITS_GENERATED, 0, 5, 0, "prompt+generated, n 0");
  check_logits(engine, ref, INFER_LOGITS_PROMPT, 3, 5, 0, "prompt");
  check_logits(engine, ref, INFER_LOGITS_GENERATED, 3, 3, 4, "generated");
  check_logits(engine, ref, INFER_LOGITS_PROMPT | INFER_LOGITS_LOGPROBS, 0, 5, 0, "prompt logprobs");
  check_logits(engine, ref, INFER_LOGITS_GENERATED | INFER_LOGITS_LOGPROBS, 3, 3, 4, "generated logprobs");

  /* No flags: no rows (an empty result or a clear refusal). */
  greedy_sampling(&sp);
  infer_request_params_init(&rp);
  rp.prompt_tokens = k_once_tokens;
  rp.n_prompt_tokens = 5;
  rp.max_tokens = 1;
  rp.sampling = &sp;
  CHECK_STATUS(infer_submit(engine, &rp, &req), INFER_OK);
  if (req == NULL) return;
  CHECK_STATUS(infer_engine_run(engine), INFER_OK);
  st = infer_request_logits(req, &data, &n_rows, &n_vocab);
  CHECK((st == INFER_OK && n_rows == 0) || st == INFER_ERR_INVALID_ARGUMENT);
  infer_request_free(req);

  /* Unknown flags are refused. */
  req = (infer_request *)&g_passed;
  rp.logits = 0x100u;
  CHECK_STATUS(infer_submit(engine, &rp, &req), INFER_ERR_INVALID_ARGUMENT);
  CHECK(req == NULL);
}

static void test_generate(infer_model *model, const reference *ref) {
  infer_sampling_params sp;
  char *text = NULL;
  greedy_sampling(&sp);
  CHECK_STATUS(infer_generate(model, "Once upon a time", &sp, 16, &text), INFER_OK);
  CHECK(text != NULL);
  if (text != NULL) {
    CHECK(strlen(text) >= 20);
    if (strncmp(text, ref->once_cont, 20) != 0) {
      fprintf(stderr, "  infer_generate: \"%.40s\"\n", text);
      FAIL("infer_generate starts like the reference");
    }
    infer_free(text);
  }
  text = (char *)&g_passed;
  CHECK_STATUS(infer_generate(NULL, "Once", &sp, 4, &text), INFER_ERR_INVALID_ARGUMENT);
  CHECK(text == NULL);
  CHECK_STATUS(infer_generate(model, "Once", &sp, 4, NULL), INFER_ERR_INVALID_ARGUMENT);
}

int main(void) {
  char shared[1024], path[1200];
  const char *junk = "infer_c_api_test_junk.gguf";
  infer_model *model = NULL;
  infer_engine *engine = NULL;
  infer_engine_params ep;
  infer_request *kept = NULL;
  reference ref;
  log_counter logs = {0, 0};
  char greedy_text[4096];
  int32_t greedy_tokens[32];
  int have_shared;

  memset(greedy_tokens, 0, sizeof greedy_tokens);
  greedy_text[0] = '\0';

  test_version();
  test_status_strings();
  test_params_init();
  test_null_frees();

  /* A logger at WARN: nothing should reach it during normal use. */
  infer_set_log_callback(count_log, &logs, INFER_LOG_WARN);
  test_load_errors(junk);
  logs.n = logs.n_warn_or_worse = 0; /* failures above may log errors */

  have_shared = find_shared(shared, sizeof shared);
  if (!have_shared) {
    infer_set_log_callback(NULL, NULL, INFER_LOG_WARN);
    printf("SKIPPED: stories260K.gguf not found (set INFER_SHARED_DIR to the shared directory)\n");
    printf("%d passed, %d failed\n", g_passed, g_failed);
    return g_failed ? 1 : 77;
  }
  load_reference(shared, &ref);

  path_join(path, sizeof path, shared, "/models/stories260K.gguf");
  CHECK_STATUS(infer_model_load(path, NULL, &model), INFER_OK);
  if (model == NULL) {
    fprintf(stderr, "cannot load %s: %s\n", path, infer_last_error());
    free_reference(&ref);
    printf("%d passed, %d failed\n", g_passed, g_failed);
    return 1;
  }
  test_model_info(model);
  test_model_meta(model);
  test_tokens(model);

  infer_engine_params_init(&ep);
  ep.n_threads = 2;
  CHECK_STATUS(infer_engine_create(NULL, &ep, &engine), INFER_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(infer_engine_create(model, &ep, NULL), INFER_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(infer_engine_create(model, &ep, &engine), INFER_OK);
  if (engine != NULL) {
    kept = test_greedy(engine, &ref, greedy_text, sizeof greedy_text, greedy_tokens);
    test_concurrent(engine, greedy_text);
    test_cancel(engine);
    test_stop_strings(engine, &ref);
    test_invalid_requests(engine, greedy_tokens);
    test_logits(engine, &ref);
  }
  test_generate(model, &ref);
  CHECK(logs.n_warn_or_worse == 0);

  /* Uninstalling the logger: it is not called any more, even on errors. */
  infer_set_log_callback(NULL, NULL, INFER_LOG_DEBUG);
  logs.n = 0;
  {
    infer_model *none = NULL;
    CHECK_STATUS(infer_model_load("./no-such-model.gguf", NULL, &none), INFER_ERR_IO);
  }
  CHECK(logs.n == 0);

  /* Request handles outlive their engine until freed. */
  infer_engine_free(engine);
  if (kept != NULL) {
    infer_request_stats st;
    infer_request_stats_init(&st);
    CHECK_STATUS(infer_request_get_stats(kept, &st), INFER_OK);
    CHECK(st.n_generated_tokens == 32);
    infer_request_free(kept);
  }
  infer_model_free(model);
  free_reference(&ref);

  printf("%d passed, %d failed\n", g_passed, g_failed);
  return g_failed ? 1 : 0;
}
