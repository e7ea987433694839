/*
 * simple.c: the smallest complete libinfer program.
 *
 *   simple MODEL.gguf "prompt" [n]
 *
 * Loads a model, creates an engine, submits one request, streams the
 * generated text to stdout as it is produced, then prints timing statistics
 * to stderr. Every call's status is checked; on failure the program prints
 * infer_last_error() and exits with status 1.
 *
 * It uses nothing but the public header <infer/infer.h>.
 */
#include <infer/infer.h>

#include <stdio.h>
#include <stdlib.h>

/* Called by the engine for every generated token, on the thread that runs
 * the engine. `text` holds the complete UTF-8 text this token finishes (it
 * may be empty, e.g. for half of a multi-byte character). Returning non-zero
 * would cancel the request. */
static int32_t print_token(infer_request *request, int32_t token, const char *text, size_t text_len,
                           void *user_data) {
  (void)request;
  (void)token;
  (void)user_data;
  fwrite(text, 1, text_len, stdout);
  fflush(stdout);
  return 0;
}

/* Prints what failed and why, and says the program should stop. */
static int failed(const char *what, infer_status status) {
  fprintf(stderr, "error: %s: %s (%s)\n", what, infer_last_error(), infer_status_string(status));
  return 1;
}

int main(int argc, char **argv) {
  infer_model *model = NULL;
  infer_engine *engine = NULL;
  infer_request *request = NULL;
  infer_sampling_params sampling;
  infer_request_params params;
  infer_request_stats stats;
  infer_status status;
  int n = 64;
  int rc = 1;

  if (argc < 3 || argc > 4) {
    fprintf(stderr, "usage: %s MODEL.gguf \"prompt\" [n_tokens]\n", argv[0]);
    return 2;
  }
  if (argc == 4) {
    char *end;
    long v = strtol(argv[3], &end, 10);
    if (*end != '\0' || v < 0 || v > 100000) {
      fprintf(stderr, "error: n_tokens must be a number from 0 to 100000\n");
      return 2;
    }
    n = (int)v;
  }

  /* 1. The model: weights and vocabulary, read-only, shareable. NULL params
   *    mean the defaults (memory-mapped, best backend). */
  status = infer_model_load(argv[1], NULL, &model);
  if (status != INFER_OK) return failed("loading the model", status);

  /* 2. An engine: the KV cache and the scheduler. Parameter structs are
   *    always filled by their _init function first, then adjusted. */
  {
    infer_engine_params engine_params;
    infer_engine_params_init(&engine_params);
    status = infer_engine_create(model, &engine_params, &engine);
    if (status != INFER_OK) {
      failed("creating the engine", status);
      goto done;
    }
  }

  /* 3. A request: the prompt, how to sample, where the tokens go. */
  infer_sampling_params_init(&sampling); /* temperature 0.8, top-k 40, top-p 0.95 */
  sampling.seed = 1234;                  /* same seed, same text */

  infer_request_params_init(&params);
  params.prompt = argv[2];
  params.max_tokens = n;
  params.sampling = &sampling;
  params.on_token = print_token;
  status = infer_submit(engine, &params, &request);
  if (status != INFER_OK) {
    failed("submitting the request", status);
    goto done;
  }

  /* 4. Run until every request has finished; print_token streams the text. */
  fputs(argv[2], stdout);
  status = infer_engine_run(engine);
  fputc('\n', stdout);
  if (status != INFER_OK) {
    failed("generating", status);
    goto done;
  }

  /* 5. How it went. A request that failed on its own reports it here. */
  infer_request_stats_init(&stats);
  status = infer_request_get_stats(request, &stats);
  if (status != INFER_OK) {
    failed("reading the statistics", status);
    goto done;
  }
  if (stats.finish_reason == INFER_FINISH_ERROR) {
    fprintf(stderr, "error: generation failed: %s\n", infer_request_error(request));
    goto done;
  }
  fprintf(stderr, "\n%d prompt tokens, %d generated\n", (int)stats.n_prompt_tokens,
          (int)stats.n_generated_tokens);
  fprintf(stderr, "time to first token: %8.2f ms\n", stats.ttft_ms);
  fprintf(stderr, "time per token:      %8.2f ms\n", stats.tpot_ms);
  fprintf(stderr, "prompt processing:   %8.1f tokens/s\n", stats.prefill_tokens_per_s);
  fprintf(stderr, "generation:          %8.1f tokens/s\n", stats.decode_tokens_per_s);
  rc = 0;

done:
  /* 6. Free in reverse order. Every free function accepts NULL. */
  infer_request_free(request);
  infer_engine_free(engine);
  infer_model_free(model);
  return rc;
}
