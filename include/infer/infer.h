/*
 * libinfer: an embeddable LLM inference library.  THE public API, plain C99.
 *
 * Conventions (like SQLite, zstd and libcurl):
 *  - Opaque handles with explicit lifecycles: infer_model (immutable weights and
 *    vocabulary), infer_engine (KV cache + scheduler, many sequences),
 *    infer_request (one generation).
 *  - Every fallible call returns infer_status (INFER_OK = 0). The message of
 *    the last failure on the calling thread is infer_last_error().
 *  - Parameter structs are passed by pointer, begin with `uint32_t struct_size`
 *    and are filled with defaults by their infer_*_params_init() function;
 *    fields are only ever appended, so old callers keep working.
 *  - The library never aborts, never exits and never prints: log messages go
 *    to the callback installed with infer_set_log_callback (none by default).
 *  - Output strings and arrays go into caller buffers; when a buffer is too
 *    small the call returns INFER_ERR_BUFFER_TOO_SMALL and reports the size
 *    it needs, so the caller can retry. A NULL buffer with size 0 is the
 *    way to ask for the size. Size/count out-pointers may be NULL.
 *  - Result structs (infer_*_stats, infer_model_info, ...) are filled up to
 *    the struct_size the caller set, so callers built against an older,
 *    shorter layout keep working.
 *  - Every enum has a *_FORCE_32BIT member (not a value to use) so that it is
 *    32 bits wide whatever the compiler or the values added later (bindings
 *    mirror enums as int32). ABI rules: docs/ABI.md.
 *
 * Thread safety:
 *  - Global functions (version, status strings, log callback setup) may be
 *    called from any thread. infer_last_error() is per thread.
 *  - infer_model: immutable once loaded; every function taking a
 *    `const infer_model *` may be called concurrently from many threads, and
 *    one model may back many engines. Free it only after every engine built
 *    on it is freed.
 *  - infer_engine, driven by the caller (infer_engine_step / run): use it and
 *    its requests from one thread at a time. Distinct engines may run
 *    concurrently on distinct threads.
 *  - infer_engine with a background thread (infer_engine_start): infer_submit,
 *    infer_submit_n, infer_request_cancel, infer_request_get_stats,
 *    infer_request_next_tokens / next_text, infer_request_text,
 *    infer_engine_get_stats and infer_engine_wait_idle may be called from any
 *    number of threads at once. infer_engine_step / run return
 *    INFER_ERR_BUSY while the thread runs. infer_request_tokens and
 *    infer_request_logits return pointers into live state: read them only
 *    after the request has finished. Token callbacks run on the engine's
 *    thread and must not call infer_engine_stop or infer_engine_free.
 *  - An infer_request handle must not be freed while another thread uses it.
 */
#ifndef INFER_INFER_H
#define INFER_INFER_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(INFER_BUILDING_LIBRARY)
#define INFER_API __attribute__((visibility("default")))
#else
#define INFER_API
#endif

/* ---- version ------------------------------------------------------------ */

#define INFER_VERSION_MAJOR 1
#define INFER_VERSION_MINOR 6
#define INFER_VERSION_PATCH 0
#define INFER_VERSION_NUMBER (INFER_VERSION_MAJOR * 10000 + INFER_VERSION_MINOR * 100 + INFER_VERSION_PATCH)

/* "MAJOR.MINOR.PATCH" of the library actually linked. */
INFER_API const char *infer_version(void);
/* MAJOR*10000 + MINOR*100 + PATCH of the library actually linked. */
INFER_API uint32_t infer_version_number(void);

/* ---- status and errors ---------------------------------------------------- */

typedef enum infer_status {
  INFER_OK = 0,
  INFER_ERR_IO = 1,               /* a file could not be opened, read or written */
  INFER_ERR_FORMAT = 2,           /* malformed, truncated or hostile input data */
  INFER_ERR_UNSUPPORTED = 3,      /* valid input this build does not handle */
  INFER_ERR_OUT_OF_MEMORY = 4,    /* an allocation or the KV budget was exhausted */
  INFER_ERR_INVALID_ARGUMENT = 5, /* a bad parameter, handle or token id */
  INFER_ERR_CANCELLED = 6,        /* the operation was cancelled */
  INFER_ERR_BACKEND = 7,          /* the compute backend failed */
  INFER_ERR_INTERNAL = 8,         /* a bug: please report it */
  INFER_ERR_BUFFER_TOO_SMALL = 9, /* retry with the size reported */
  INFER_ERR_NOT_FOUND = 10,       /* a key or item does not exist */
  INFER_ERR_BUSY = 11,            /* the object is in use */
  INFER_STATUS_FORCE_32BIT = 0x7fffffff /* not a status: keeps the enum 32 bits wide (ABI) */
} infer_status;

/* Static English name of a status; never NULL. */
INFER_API const char *infer_status_string(infer_status status);
/* Message of the last failed call on this thread ("" if none). Valid until
 * the next infer_* call on this thread. */
INFER_API const char *infer_last_error(void);

/* ---- logging ------------------------------------------------------------------ */

typedef enum infer_log_level {
  INFER_LOG_DEBUG = 0,
  INFER_LOG_INFO = 1,
  INFER_LOG_WARN = 2,
  INFER_LOG_ERROR = 3,
  INFER_LOG_LEVEL_FORCE_32BIT = 0x7fffffff
} infer_log_level;

typedef void (*infer_log_fn)(infer_log_level level, const char *message, void *user_data);

/* Installs the process-wide log sink (NULL: silent, the default). Messages
 * below min_level are dropped. The callback may be called from any thread,
 * and concurrently from several; it runs with no library lock held, so it may
 * call the library (a message may still reach a callback just replaced). */
INFER_API void infer_set_log_callback(infer_log_fn fn, void *user_data, infer_log_level min_level);

/* Frees memory the library allocated for the caller (infer_generate's text). */
INFER_API void infer_free(void *ptr);

/* ---- models -------------------------------------------------------------------- */

typedef struct infer_model infer_model;

typedef enum infer_backend {
  INFER_BACKEND_AUTO = 0, /* the best available: the CPU in this version (one INFO log line
                             says why: no usable GPU, or a CUDA backend not yet validated) */
  INFER_BACKEND_CPU = 1,
  INFER_BACKEND_CUDA = 2, /* experimental (f16/f32 KV, no host tier); infer_model_load fails
                             with INFER_ERR_BACKEND when the machine has no usable NVIDIA
                             driver or device, INFER_ERR_UNSUPPORTED when the library was built
                             without CUDA; infer_last_error() names the reason */
  INFER_BACKEND_FORCE_32BIT = 0x7fffffff
} infer_backend;

typedef struct infer_model_params {
  uint32_t struct_size;
  infer_backend backend; /* default AUTO */
  int32_t use_mmap;      /* default 1: map the file read-only instead of reading it */
  int32_t vocab_only;    /* default 0: 1 loads only the tokenizer (tensors may be absent) */
  /* Since 1.6, tensor parallelism (README "Running one model on several processes"): */
  int32_t tensor_parallel; /* default 0 (or 1): this process holds the whole model. N > 1: this
                              process is one of the N ranks of an MPI job (mpirun -np N, srun) and
                              loads only its 1/N of the weights: attention by heads (the KV cache
                              too), the FFN by hidden units, the output head by vocabulary.
                              N must be the communicator's size. INFER_ERR_UNSUPPORTED in a build
                              without MPI, on the CUDA backend, or for a shape that cannot be
                              split N ways (heads or KV heads not a multiple of N, a quantized row
                              that would be cut inside a block); infer_last_error() says which */
  void *mpi_comm;          /* default NULL: MPI_COMM_WORLD (initialized by the library when the
                              host has not). Else a pointer to the host's MPI_Comm, whose ranks
                              are the group; it must outlive the model */
} infer_model_params;

INFER_API void infer_model_params_init(infer_model_params *params);

/* Loads a GGUF model. params may be NULL (defaults). On failure *out is NULL
 * and the status says why (IO, FORMAT, UNSUPPORTED, OUT_OF_MEMORY).
 * Since 1.2, path may also be a Hugging Face model directory: config.json
 * (model_type llama, mistral, mixtral, qwen2, qwen3, phi3, gemma, gemma2),
 * model.safetensors or shards listed by model.safetensors.index.json (F32,
 * F16, BF16 tensors, memory-mapped, not converted), tokenizer.json (BPE:
 * byte-level or SentencePiece-style with byte fallback) and
 * tokenizer_config.json (special tokens, chat_template). */
INFER_API infer_status infer_model_load(const char *path, const infer_model_params *params,
                                        infer_model **out);
/* NULL is accepted. */
INFER_API void infer_model_free(infer_model *model);

typedef struct infer_model_info {
  uint32_t struct_size;
  const char *architecture;    /* "llama"; owned by the model */
  const char *name;            /* general.name or "" */
  const char *tokenizer;       /* tokenizer.ggml.model, e.g. "llama" */
  int32_t n_vocab;
  int32_t n_ctx_train;         /* context length from the metadata */
  int32_t n_embd;
  int32_t n_layer;
  int32_t n_head;
  int32_t n_head_kv;
  int32_t n_ff;
  int32_t n_rot;               /* rotary dimensions */
  float rope_freq_base;
  float rms_norm_eps;
  uint64_t n_params;           /* parameters in all tensors */
  uint64_t n_bytes;            /* bytes of all tensors */
  int32_t n_tensors;
  int32_t bos_token;           /* -1 when none */
  int32_t eos_token;           /* -1 when none */
  int32_t vocab_only;
} infer_model_info;

/* Fills *info (set info->struct_size first; infer_model_info_init does). */
INFER_API void infer_model_info_init(infer_model_info *info);
INFER_API infer_status infer_model_get_info(const infer_model *model, infer_model_info *info);

/* A metadata value rendered as text (numbers in decimal, arrays as
 * "[a, b, ...]"). NOT_FOUND when the key is absent. *needed (if not NULL)
 * receives the size including the terminating NUL. */
INFER_API infer_status infer_model_meta(const infer_model *model, const char *key, char *buf,
                                        size_t buf_size, size_t *needed);
/* Number of metadata keys, and the name of key `index` (0 <= index < count)
 * in file order (NUL-terminated; caller buffer, *needed receives the size
 * including the NUL; NOT_FOUND past the last). Since 1.1. */
INFER_API int32_t infer_model_meta_count(const infer_model *model);
INFER_API infer_status infer_model_meta_key(const infer_model *model, int32_t index, char *buf, size_t buf_size,
                                            size_t *needed);

typedef struct infer_tensor_info {
  uint32_t struct_size;
  const char *name;  /* owned by the model */
  const char *type;  /* "f32", "q4_0", ... */
  int32_t n_dims;
  int64_t dims[4];   /* dims[0] is the row length */
  uint64_t n_bytes;
} infer_tensor_info;

INFER_API int32_t infer_model_tensor_count(const infer_model *model);
INFER_API infer_status infer_model_tensor(const infer_model *model, int32_t index,
                                          infer_tensor_info *info);

/* ---- tokens ------------------------------------------------------------------------ */

/* Text to token ids. add_bos: 1 prepend BOS, 0 not, -1 as the vocabulary
 * says. parse_special: 1 turns special-token text like "<s>" into its id.
 * Writes at most `capacity` ids; *n_tokens receives the number produced, and
 * BUFFER_TOO_SMALL is returned (nothing lost: retry) when capacity was short.
 * Invalid UTF-8 is not an error: each invalid byte becomes its byte token. */
INFER_API infer_status infer_tokenize(const infer_model *model, const char *text, size_t text_len,
                                      int32_t add_bos, int32_t parse_special, int32_t *tokens,
                                      size_t capacity, size_t *n_tokens);

/* Token ids to text (UTF-8, NUL-terminated). render_special: 1 writes control
 * tokens like "<s>" too. *needed receives the byte count including the NUL. */
INFER_API infer_status infer_detokenize(const infer_model *model, const int32_t *tokens,
                                        size_t n_tokens, int32_t render_special, char *buf,
                                        size_t buf_size, size_t *needed);

/* The bytes one token stands for (not NUL-terminated, may be a partial UTF-8
 * sequence). */
INFER_API infer_status infer_token_piece(const infer_model *model, int32_t token, char *buf,
                                         size_t buf_size, size_t *n_bytes);

/* 1 if the token ends generation (EOS/EOT), 0 otherwise. */
INFER_API int32_t infer_token_is_eog(const infer_model *model, int32_t token);

/* ---- engines ---------------------------------------------------------------------------- */

typedef struct infer_engine infer_engine;
typedef struct infer_request infer_request;

typedef enum infer_kv_type {
  INFER_KV_F32 = 0,
  INFER_KV_F16 = 1,
  INFER_KV_INT8 = 2,
  INFER_KV_TYPE_FORCE_32BIT = 0x7fffffff
} infer_kv_type;

typedef enum infer_policy {
  INFER_POLICY_CONTINUOUS = 0, /* iteration-level: a free slot is refilled at the next step */
  INFER_POLICY_STATIC = 1,     /* a batch forms when idle and runs to completion */
  INFER_POLICY_DYNAMIC = 2,    /* like static, but waits for a full batch or a timeout */
  INFER_POLICY_FORCE_32BIT = 0x7fffffff
} infer_policy;

/* Speculative decoding: cheap drafts of the next tokens, checked by the model
 * in one batched step. Lossless: greedy output is the plain greedy output
 * token for token, and sampled output has the model's own distribution. */
typedef enum infer_spec_method {
  INFER_SPEC_NONE = 0,
  INFER_SPEC_NGRAM = 1,     /* prompt lookup: what followed the latest earlier occurrence of the
                               last n tokens in the prompt and the output (no model) */
  INFER_SPEC_LAYERSKIP = 2, /* self-speculative: the model itself with spec_skip_layers left out */
  INFER_SPEC_DRAFT = 3,     /* a smaller draft_model with the same vocabulary (its own KV cache) */
  INFER_SPEC_FORCE_32BIT = 0x7fffffff
} infer_spec_method;

typedef struct infer_engine_params {
  uint32_t struct_size;
  int32_t n_threads;          /* default 0: all cores; at most 1024 */
  uint64_t kv_budget_bytes;   /* default 0: enough for max_seqs full contexts, capped at 1 GiB */
  int32_t kv_blocks;          /* if > 0, overrides kv_budget_bytes */
  int32_t kv_block_size;      /* tokens per block, default 16 */
  infer_kv_type kv_type;      /* default F32; F16 halves the memory, INT8 (a scale per token and
                                 head) quarters it plus the scales */
  int32_t max_seqs;           /* sequences decoded together, default 16 */
  int32_t max_batch_tokens;   /* tokens per forward step, default 512 */
  int32_t n_ctx;              /* max tokens per sequence, default 0: the model's context */
  int32_t prefix_caching;     /* default 1: requests whose prompts start alike share the KV
                                 blocks of the common prefix (automatic prefix caching) */
  uint64_t host_kv_budget_bytes; /* default 0: a second KV tier in host memory for preempted
                                    sequences and evicted prefix blocks */
  infer_policy policy;          /* default CONTINUOUS */
  double batch_timeout_ms;      /* dynamic batching: longest wait for a full batch, default 50 */
  int32_t step_row_multiple;    /* continuous batching: while sequences decode, prompt chunks are
                                   sized so that a step's rows end on a multiple of this (the CPU
                                   kernels' row tile, whose partly filled tiles cost about as much
                                   as full ones), trading a few steps of a short prompt's TTFT for
                                   throughput; default 0: 16; 1: off */
  /* Since 1.1: */
  infer_spec_method spec;       /* default NONE. Requests that keep generated logits rows decode
                                   without speculation; grammar-constrained requests and those
                                   with log-probabilities speculate (the grammar masks the target
                                   distribution drafts are judged by) */
  int32_t spec_k;               /* most draft tokens per sequence and step, default 4, in [1, 32];
                                   each sequence adapts its own to its acceptance, and one
                                   decoding alone to the step costs measured on this machine
                                   (the length with the most expected tokens per millisecond) */
  int32_t spec_ngram_max;       /* NGRAM: suffix lengths matched, longest first; default 3 */
  int32_t spec_ngram_min;       /* default 1; 1 <= min <= max <= 64 */
  int32_t spec_max_batch;       /* no drafting in a step where more sequences than this decode
                                   (drafts then cost more than they save); default 4; 0: no limit */
  const char *spec_skip_layers; /* LAYERSKIP: layers the draft leaves out, e.g. "4-17" or
                                   "3,5,9-11" (copied; required for LAYERSKIP) */
  const infer_model *draft_model; /* DRAFT: the draft model (required; the same vocabulary, checked:
                                     INVALID_ARGUMENT names the first difference); it must
                                     outlive the engine */
  /* Since 1.6, tensor parallelism: */
  int32_t tensor_parallel; /* default 0: the model's group (infer_model_params.tensor_parallel);
                              otherwise it must equal it (INVALID_ARGUMENT). On rank 0 the engine
                              is the group's one engine; ranks 1..N-1 call infer_engine_follow */
  int32_t tp_timeout_ms;   /* a collective of a pass that waits longer than this (a rank died or
                              hung) fails, and the job is ended with the reason; default 0: 60000 */
} infer_engine_params;

INFER_API void infer_engine_params_init(infer_engine_params *params);
/* The engine keeps a reference to the model; the model must outlive it.
 * INFER_ERR_OUT_OF_MEMORY (with the bytes in infer_last_error) when the KV
 * cache is more than the process can still commit (MemAvailable, memory
 * cgroup limit): its pages are committed lazily, so it would otherwise fail
 * later as an OOM kill. More n_threads than the process may start: also
 * OUT_OF_MEMORY. */
INFER_API infer_status infer_engine_create(const infer_model *model, const infer_engine_params *params,
                                           infer_engine **out);
/* Cancels and releases everything; request handles stay valid until freed. */
INFER_API void infer_engine_free(infer_engine *engine);

/* Since 1.6. The model's tensor-parallel rank and group size (0 and 1 for a whole model; -1
 * for NULL). */
INFER_API int32_t infer_model_tp_rank(const infer_model *model);
INFER_API int32_t infer_model_tp_size(const infer_model *model);
/* Since 1.6. On ranks 1..N-1 of a tensor-parallel model: runs the passes of rank 0's engine on
 * this rank's share of the weights, and returns INFER_OK when rank 0 frees its engine. Rank 0
 * creates the engine (infer_engine_create) and owns every request; the other ranks never see
 * one. params must match rank 0's (checked at start, with the model's bytes: INVALID_ARGUMENT
 * names what differs). INFER_ERR_BACKEND when the group breaks (a rank died or hung past
 * tp_timeout_ms). INVALID_ARGUMENT on rank 0 or for a whole model. Blocks the calling thread. */
INFER_API infer_status infer_engine_follow(const infer_model *model, const infer_engine_params *params);

/* ---- requests ------------------------------------------------------------------------------ */

typedef struct infer_sampling_params {
  uint32_t struct_size;
  float temperature;         /* default 0.8; <= 0 is greedy */
  int32_t top_k;             /* default 40; <= 0 off */
  float top_p;               /* default 0.95; in (0, 1]; 1 off */
  float min_p;               /* default 0.05; in [0, 1]; 0 off */
  float repeat_penalty;      /* default 1 (off) */
  float frequency_penalty;   /* default 0 */
  float presence_penalty;    /* default 0 */
  int32_t penalty_last_n;    /* default 64; -1 the whole history */
  uint64_t seed;             /* default 0; same seed + same inputs = same output */
  const int32_t *logit_bias_tokens; /* n_logit_bias ids ... */
  const float *logit_bias_values;   /* ... and what to add to their logits (-INFINITY bans;
                                       NaN and +INFINITY are invalid) */
  size_t n_logit_bias;
} infer_sampling_params;

INFER_API void infer_sampling_params_init(infer_sampling_params *params);

typedef enum infer_finish_reason {
  INFER_FINISH_NONE = 0,      /* still running or waiting */
  INFER_FINISH_STOP = 1,      /* an end-of-generation token or a stop string */
  INFER_FINISH_LENGTH = 2,    /* max_tokens or the context length reached */
  INFER_FINISH_CANCELLED = 3, /* infer_request_cancel or the callback asked */
  INFER_FINISH_ERROR = 4,     /* see infer_request_stats' status / message */
  INFER_FINISH_FORCE_32BIT = 0x7fffffff
} infer_finish_reason;

/* Called for every generated token with the text it completes (complete
 * UTF-8 only; held-back bytes of stop strings come later). Return non-zero
 * to cancel the request (the token just reported still counts as
 * generated). */
typedef int32_t (*infer_token_fn)(infer_request *request, int32_t token, const char *text,
                                  size_t text_len, void *user_data);

/* Which logits to keep for infer_request_logits. */
#define INFER_LOGITS_PROMPT 1u    /* every prompt position */
#define INFER_LOGITS_GENERATED 2u /* every generated position */
#define INFER_LOGITS_LOGPROBS 4u  /* store log-softmax instead of raw logits */

typedef struct infer_request_params {
  uint32_t struct_size;
  const char *prompt;           /* UTF-8 text, or NULL when prompt_tokens is given. An
                                   empty text is the BOS token alone (a model needs one
                                   token to start from), whatever add_bos says. */
  size_t prompt_len;            /* bytes of prompt; 0 means strlen(prompt) */
  const int32_t *prompt_tokens; /* token ids used as they are (no BOS added) */
  size_t n_prompt_tokens;
  int32_t add_bos;              /* text prompts: 1, 0, or -1 as the vocabulary says (default) */
  int32_t parse_special;        /* text prompts: default 0 */
  int32_t max_tokens;           /* default 256; 0 only scores the prompt; < 0 is invalid */
  const infer_sampling_params *sampling; /* NULL: defaults */
  const char *const *stop;      /* stop strings; the text is cut before the match */
  size_t n_stop;
  int32_t ignore_eos;           /* default 0 */
  infer_token_fn on_token;      /* may be NULL */
  void *user_data;
  uint32_t logits;              /* INFER_LOGITS_* flags, default 0. Requests that keep prompt
                                   logits compute their whole prompt (no prefix cache hit). */
  int32_t no_prefix_cache;      /* default 0; 1: neither reuse nor offer cached KV blocks */
  uint64_t cache_salt;          /* default 0; cached blocks are shared only between requests
                                   with the same salt (keeps tenants apart) */
  int32_t priority;             /* default 0; higher is admitted first and preempted last */
  /* Since 1.1: */
  int32_t logprobs;             /* default -1: off. k in [0, 100]: keep each generated token's
                                   log-probability and its k most likely alternatives
                                   (infer_request_logprobs) */
  const char *grammar;          /* default NULL; a GBNF grammar (rules `name ::= ...`, start rule
                                   `root`): only text it can derive is generated, token by token,
                                   and end-of-generation only once the text is complete */
  const char *json_schema;      /* default NULL; a JSON schema (its JSON text): the output is a JSON
                                   text that validates against it ("{}": any JSON value,
                                   {"type": "object"}: any object). At most one of grammar and
                                   json_schema; an invalid one fails infer_submit with
                                   INVALID_ARGUMENT and a message that says where */
  int32_t spec_max_draft;       /* default -1: the engine's speculative draft length; 0: this
                                   request decodes without speculation; > 0: at most this many */
} infer_request_params;

INFER_API void infer_request_params_init(infer_request_params *params);

/* Queues a request. Bad parameters (empty prompt, token ids out of range,
 * a prompt longer than the context) fail here and nothing is queued. The
 * handle belongs to the caller: free it with infer_request_free. */
INFER_API infer_status infer_submit(infer_engine *engine, const infer_request_params *params,
                                    infer_request **out);

/* n samples of one prompt: the prompt is computed once and its KV blocks are
 * shared by all n sequences (copied on write); sample i uses seed + i. out
 * receives n handles (each freed with infer_request_free). */
INFER_API infer_status infer_submit_n(infer_engine *engine, const infer_request_params *params, int32_t n,
                                      infer_request **out);

/* Runs one forward step over every active request. *n_active (if not NULL)
 * receives how many requests are still unfinished. A failure of one request
 * finishes that request with INFER_FINISH_ERROR; the engine stays usable. */
INFER_API infer_status infer_engine_step(infer_engine *engine, int32_t *n_active);
/* Steps until every request has finished. */
INFER_API infer_status infer_engine_run(infer_engine *engine);

/* Asks a request to stop; it finishes with INFER_FINISH_CANCELLED at the next
 * step (or at once when it has not started). */
INFER_API infer_status infer_request_cancel(infer_request *request);
/* Releases the handle; an unfinished request is cancelled. NULL accepted.
 * If the request's token callback is running on another thread, waits for it
 * to return: once infer_request_free returns, the callback is never called
 * with this handle again. */
INFER_API void infer_request_free(infer_request *request);

typedef struct infer_request_stats {
  uint32_t struct_size;
  infer_finish_reason finish_reason;
  infer_status status;         /* INFER_OK unless finish_reason is ERROR */
  int32_t n_prompt_tokens;
  int32_t n_cached_tokens;     /* prompt tokens served from the prefix cache */
  int32_t n_generated_tokens;
  double queue_ms;             /* submit -> first scheduled */
  double ttft_ms;              /* submit -> first generated token */
  double tpot_ms;              /* mean time per generated token after the first */
  double total_ms;             /* submit -> finish */
  double prefill_tokens_per_s; /* prompt tokens / prefill time */
  double decode_tokens_per_s;  /* generated tokens after the first / decode time */
  int32_t n_preemptions;       /* times the request was preempted (swapped or recomputed) */
  /* Since 1.1, speculative decoding (all 0 when nothing was drafted): */
  uint64_t draft_tokens;       /* draft tokens the model checked */
  uint64_t accepted_tokens;    /* of which it accepted */
  double acceptance_rate;      /* accepted_tokens / draft_tokens */
  double mean_accepted_length; /* tokens emitted per verification step (accepted drafts + 1) */
  uint64_t draft_tokens_at[16];    /* by position in the step's drafts (the last entry: 15 and up) */
  uint64_t accepted_tokens_at[16];
} infer_request_stats;

INFER_API void infer_request_stats_init(infer_request_stats *stats);
INFER_API infer_status infer_request_get_stats(const infer_request *request,
                                               infer_request_stats *stats);
/* The generated token ids so far (pointer valid until the next step or free). */
INFER_API infer_status infer_request_tokens(const infer_request *request, const int32_t **tokens,
                                            size_t *n_tokens);
/* The generated text so far, NUL-terminated (stop string excluded). */
INFER_API infer_status infer_request_text(const infer_request *request, char *buf,
                                          size_t buf_size, size_t *needed);
/* Kept logits: n_rows rows of n_vocab floats. A row is the distribution
 * after one position of the sequence, in position order, and only positions
 * fed to the model have one (the last generated token is never fed):
 *  - INFER_LOGITS_PROMPT: the rows after each prompt token (n_prompt rows;
 *    the last is the one the first generated token was drawn from).
 *  - INFER_LOGITS_GENERATED: the row each generated token was drawn from
 *    (n_generated rows, starting at the last prompt position).
 *  - both: n_prompt + n_generated - 1 rows, positions 0, 1, 2, ... as in a
 *    reference dump of every position.
 * INVALID_ARGUMENT when the request was submitted without these flags.
 * Pointer valid until the next step or free. */
INFER_API infer_status infer_request_logits(const infer_request *request, const float **data,
                                            size_t *n_rows, size_t *n_vocab);
/* The error message when finish_reason is INFER_FINISH_ERROR ("" otherwise). */
INFER_API const char *infer_request_error(const infer_request *request);

/* A token and its log-probability under the model: log-softmax of the raw
 * logits, before logit bias, penalties, temperature and constraints. */
typedef struct infer_token_logprob {
  int32_t token;
  float logprob; /* -INFINITY for a token the model gives no chance */
} infer_token_logprob;

/* The log-probabilities of generated token `index` (0: the first), kept when
 * the request was submitted with logprobs = k >= 0: *chosen (may be NULL)
 * receives the token generated and its log-probability; `top` receives up to
 * `capacity` of the k most likely tokens, best first (ties by id), and
 * *n_top (may be NULL) how many the request keeps (k). Available as soon as
 * the token is generated (any thread; streaming readers may call it for the
 * tokens infer_request_next_tokens returned). NOT_FOUND when fewer than
 * index + 1 tokens were generated; INVALID_ARGUMENT without logprobs.
 * Since 1.1. */
INFER_API infer_status infer_request_logprobs(const infer_request *request, size_t index, infer_token_logprob *chosen,
                                              infer_token_logprob *top, size_t capacity, size_t *n_top);

/* The GBNF grammar that infer_request_params.json_schema stands for
 * (NUL-terminated; caller buffer, *needed receives the size including the
 * NUL). INVALID_ARGUMENT with the reason for malformed JSON or a construct
 * not supported (see lib/sampling/grammar.h for the list). Thread-safe.
 * Since 1.1. */
INFER_API infer_status infer_json_schema_to_grammar(const char *json_schema, char *buf, size_t buf_size,
                                                    size_t *needed);

/* Checks a GBNF grammar without submitting anything: INVALID_ARGUMENT with
 * the line and the reason when it is malformed. Thread-safe. Since 1.1. */
INFER_API infer_status infer_grammar_check(const char *grammar);

typedef struct infer_engine_stats {
  uint32_t struct_size;
  int32_t n_running;
  int32_t n_waiting;
  int32_t kv_blocks_total;
  int32_t kv_blocks_used;
  int32_t kv_block_size;
  uint64_t kv_bytes_total;
  uint64_t kv_bytes_used;
  uint64_t n_steps;
  uint64_t n_prompt_tokens;    /* processed since creation */
  uint64_t n_generated_tokens;
  int32_t kv_blocks_free;      /* allocatable: unused, including cached ones */
  int32_t kv_blocks_cached;    /* blocks holding a cached prefix (in use or not) */
  int32_t host_kv_blocks_total;
  int32_t host_kv_blocks_used;
  uint64_t prefix_query_tokens; /* prompt tokens looked up in the prefix cache */
  uint64_t prefix_hit_tokens;   /* of which were found (hit rate = hit / query) */
  uint64_t n_preemptions;
  uint64_t kv_evictions;        /* cached blocks evicted to make room */
  infer_kv_type kv_type;
  uint64_t n_finished;          /* requests finished since creation */
  double uptime_s;              /* since creation */
  double generated_tokens_per_s; /* n_generated_tokens / uptime_s */
  /* Since 1.1, speculative decoding over all requests (as in infer_request_stats): */
  uint64_t draft_tokens;
  uint64_t accepted_tokens;
  double acceptance_rate;
  double mean_accepted_length;
  uint64_t draft_tokens_at[16];
  uint64_t accepted_tokens_at[16];
  /* Since 1.6, tensor parallelism: this rank's collectives since creation (0 for a whole model) */
  uint64_t tp_comm_calls;
  uint64_t tp_comm_bytes;
  double tp_comm_seconds;       /* time inside them, waiting included */
} infer_engine_stats;

INFER_API void infer_engine_stats_init(infer_engine_stats *stats);
INFER_API infer_status infer_engine_get_stats(const infer_engine *engine, infer_engine_stats *stats);

/* How many sequences of prompt_len + output_len tokens the engine's KV
 * budget holds at once without prefix sharing (at most max_seqs): the "max
 * batch size" deployments are sized by. */
INFER_API infer_status infer_engine_max_concurrency(const infer_engine *engine, int32_t prompt_len,
                                                    int32_t output_len, int32_t *out);

/* ---- background engine thread ----------------------------------------------------------- */

/* Starts a thread that steps the engine whenever there is work (and sleeps
 * when there is none). Starting a started engine is a no-op. */
INFER_API infer_status infer_engine_start(infer_engine *engine);
/* Stops the thread. drain = 1: first let every request finish; drain = 0:
 * cancel what is in flight (each finishes as CANCELLED). No-op when not
 * started. infer_engine_free stops the thread with drain = 0. While a drain
 * runs, infer_submit / infer_submit_n on this engine return INFER_ERR_BUSY
 * (so that threads that keep submitting cannot keep it from finishing);
 * after infer_engine_stop returns they queue requests for the caller to
 * step again. */
INFER_API infer_status infer_engine_stop(infer_engine *engine, int32_t drain);
/* Blocks until the engine has no request left. */
INFER_API infer_status infer_engine_wait_idle(infer_engine *engine);

/* Waits up to timeout_ms (< 0: no limit; 0: just look) for tokens generated
 * since the previous call on this handle, and copies up to `capacity` of them
 * (the rest come next time). *finished is 1 once the request has finished
 * and every token was returned. A timeout is not an error: *n_tokens is 0. */
INFER_API infer_status infer_request_next_tokens(infer_request *request, int32_t timeout_ms, int32_t *tokens,
                                                 size_t capacity, size_t *n_tokens, int32_t *finished);
/* The same for text: the text released since the previous call (at most
 * buf_size - 1 bytes, never a split UTF-8 sequence; NUL-terminated).
 * Independent of infer_request_next_tokens' position. When the next UTF-8
 * character does not fit in buf_size - 1 bytes: INFER_ERR_BUFFER_TOO_SMALL,
 * *n_bytes = the buf_size it needs (at most 5), nothing consumed. */
INFER_API infer_status infer_request_next_text(infer_request *request, int32_t timeout_ms, char *buf,
                                               size_t buf_size, size_t *n_bytes, int32_t *finished);
/* Since 1.3. Waits up to timeout_ms (< 0: no limit; 0: just look) for the
 * request to finish, without waking for each token (a reader that only needs
 * the end, or one holding streamed text back for a while, costs the engine no
 * wake-up per token). *finished is 1 once it has finished (its tokens and
 * text may not have been read yet: next_tokens / next_text still return
 * them). A timeout is not an error. Does not move either read position. */
INFER_API infer_status infer_request_wait(const infer_request *request, int32_t timeout_ms, int32_t *finished);

/* ---- one-call convenience ---------------------------------------------------------------- */

/* Generates up to max_tokens after prompt with a private engine. *out_text
 * receives a NUL-terminated string to release with infer_free. sampling may
 * be NULL (defaults). */
INFER_API infer_status infer_generate(const infer_model *model, const char *prompt,
                                      const infer_sampling_params *sampling, int32_t max_tokens,
                                      char **out_text);

/* ---- chat templates ------------------------------------------------------------------------ */

/* Chat models expect their conversation in the format they were trained on.
 * A GGUF file carries it as a Jinja template (tokenizer.chat_template; a
 * Hugging Face directory's tokenizer_config.json chat_template arrives the
 * same way). libinfer renders the model's own template with its Jinja-subset
 * interpreter exactly as Hugging Face's apply_chat_template does (jinja2 with
 * trim_blocks and lstrip_blocks; the subset is what the published templates
 * of Llama 2/3.x, Mistral/Mixtral, Qwen 2/2.5/3, Phi-3, Gemma, Zephyr, ChatML
 * and DeepSeek use). It also recognises the common families by their markers
 * and has each family's format built in, used when asked for by name, and as
 * the fallback when a model's template uses a construct the interpreter
 * lacks. Built-in templates: "llama2", "llama3", "llama3.1", "chatml" (Qwen,
 * Hermes, ...), "mistral-v0", "mistral-v1", "mistral-v3", "mistral-v3-tekken",
 * "mistral-v7", "phi3", "gemma", "zephyr", "deepseek" (DeepSeek Coder),
 * "deepseek2", "deepseek3"; see infer_chat_template_name(). The name "jinja"
 * (not in that list) means the model's own template through the interpreter,
 * without fallback.
 *
 * The rendered prompt contains the special tokens as text (e.g. "<|im_start|>",
 * and the BOS token where the template writes one): submit it with
 * parse_special = 1 and add_bos = 0. All functions here are thread-safe. */

typedef struct infer_chat_message {
  const char *role;    /* "system", "user" or "assistant" */
  const char *content; /* UTF-8, NUL-terminated */
} infer_chat_message;

/* Number of built-in templates, and the name of template `index`
 * (0 <= index < count; NULL otherwise). Names are static strings. */
INFER_API int32_t infer_chat_template_count(void);
INFER_API const char *infer_chat_template_name(int32_t index);

/* The built-in template that the model's tokenizer.chat_template matches,
 * written to buf (NUL-terminated; *needed receives the size including the
 * NUL); "jinja" when it matches none but the interpreter reads it (the
 * template is then rendered only by the interpreter, and has no stop texts).
 * NOT_FOUND when the model has no chat template, UNSUPPORTED (with the
 * template's opening and what the interpreter lacks in the message) when it
 * is neither recognised nor readable. */
INFER_API infer_status infer_chat_template_detect(const infer_model *model, char *buf, size_t buf_size,
                                                  size_t *needed);

/* Renders n_messages messages into prompt text (UTF-8, NUL-terminated; caller
 * buffer, *needed receives the size including the NUL, BUFFER_TOO_SMALL
 * when buf is short).
 *  - template_name: NULL renders the model's tokenizer.chat_template with the
 *    interpreter; when the template uses a construct the interpreter lacks,
 *    the built-in template of the family it is recognised as is used instead
 *    (with a warning through the log callback), and UNSUPPORTED (naming the
 *    construct and its line) when it is recognised as none. "jinja": the
 *    model's template with the interpreter, UNSUPPORTED instead of a
 *    fallback. A Jinja template text (containing {{ or {%) is rendered with
 *    the interpreter, UNSUPPORTED instead of a fallback. A built-in name
 *    renders that built-in template; an unknown name is UNSUPPORTED (the
 *    message names it).
 *  - model: supplies the BOS/EOS token texts (and the template when
 *    template_name is NULL). May be NULL when template_name is given: the
 *    family's usual token texts are used.
 *  - add_generation_prompt: 1 appends the header that opens the assistant's
 *    reply.
 * The interpreter passes each message's role and content, add_generation_prompt,
 * bos_token and eos_token (the model's token texts, else the family's usual
 * ones), tools and documents (none), and any role to the template.
 * INVALID_ARGUMENT for a NULL message, role or content, a role other than
 * system/user/assistant for a built-in template, or a conversation the
 * template refuses: the message is the template's own raise_exception()
 * text (e.g. roles that do not alternate user/assistant where the template
 * requires it), or says what failed and on which line of the template. */
INFER_API infer_status infer_chat_apply_template(const infer_model *model, const char *template_name,
                                                 const infer_chat_message *messages, size_t n_messages,
                                                 int32_t add_generation_prompt, char *buf, size_t buf_size,
                                                 size_t *needed);

/* Since 1.2. As infer_chat_apply_template, with the conversation given as
 * JSON, for what role/content pairs cannot carry (tool calls and results, a
 * tools list, enable_thinking, ...). context_json is a JSON object whose keys
 * become the template's variables as Hugging Face's apply_chat_template
 * passes them: "messages" (an array of objects with "role", "content" and
 * whatever else the template reads, e.g. "tool_calls"), "tools",
 * "add_generation_prompt" (default false), "enable_thinking", ...; bos_token
 * and eos_token are the model's (else the family's) unless given, tools and
 * documents none unless given. template_name as for
 * infer_chat_apply_template; a built-in template reads only the messages'
 * "role" and "content" (strings) and "add_generation_prompt".
 * INVALID_ARGUMENT for malformed JSON (the message gives the byte offset), a
 * context that is not an object or whose "messages" is not an array of
 * objects, and as infer_chat_apply_template. */
INFER_API infer_status infer_chat_apply_template_json(const infer_model *model, const char *template_name,
                                                      const char *context_json, char *buf, size_t buf_size,
                                                      size_t *needed);

/* The texts that end an assistant turn in a template's format, for use as
 * stop strings alongside the model's end-of-generation tokens: stop string
 * `index` (0, 1, ...) of template `template_name`, or NULL past the last one
 * or for an unknown name. Static strings. */
INFER_API const char *infer_chat_template_stop(const char *template_name, int32_t index);

/* ---- embeddings and reranking (since 1.5) -------------------------------------------------------
 *
 * Embedding models: BERT-family encoders (GGUF `bert`, `nomic-bert`; Hugging Face BERT
 * directories with their sentence-transformers pooling) and the decoder architectures
 * used as embedding models (their GGUF *.pooling_type and *.attention.causal say how).
 * Rerankers: encoders with a classifier head, scoring (query, document) pairs.
 *
 * Results come back in an infer_embeddings handle (a library buffer: read it in place
 * with infer_embeddings_data, or copy it into caller memory with infer_embeddings_copy),
 * from the synchronous calls (infer_embed, infer_embed_tokens, infer_rerank: the calling
 * thread computes, with its own threads) or from the asynchronous ones
 * (infer_embed_submit, ...: the engine computes them between its generation steps,
 * batched with other embedding work; wait with infer_embeddings_wait). */

typedef enum infer_pooling {
  INFER_POOLING_DEFAULT = -1, /* the model's own: its *.pooling_type, else MEAN for encoders and
                                 LAST for decoders */
  INFER_POOLING_NONE = 0,     /* one vector per token */
  INFER_POOLING_MEAN = 1,     /* the mean of the token vectors */
  INFER_POOLING_CLS = 2,      /* the first token's vector ([CLS]) */
  INFER_POOLING_LAST = 3,     /* the last token's vector */
  INFER_POOLING_RANK = 4,     /* rerankers: the classifier head's score(s) of the first token */
  INFER_POOLING_FORCE_32BIT = 0x7fffffff
} infer_pooling;

typedef struct infer_embed_params {
  uint32_t struct_size;
  infer_pooling pooling; /* default INFER_POOLING_DEFAULT */
  int32_t normalize;     /* 2: L2 normalization (default); 0: none. Rank scores are never normalized */
  int32_t dimensions;    /* Matryoshka: keep the first `dimensions` values (then normalize); 0
                            (default): all. More than the model has: INVALID_ARGUMENT */
  int32_t truncate;      /* 1: an input longer than the model's context is cut to it (its last
                            special token kept); 0 (default): INVALID_ARGUMENT naming the input */
  int32_t n_threads;     /* synchronous calls: 0 (default): all cores; at most 1024 */
} infer_embed_params;

typedef struct infer_embeddings infer_embeddings;

INFER_API void infer_embed_params_init(infer_embed_params *params);

/* Embeds n_texts texts (UTF-8; text_lens NULL: NUL-terminated, else their byte lengths),
 * each with the model's special tokens. params may be NULL (defaults). On success *out is a
 * new handle (free it with infer_embeddings_free). Empty texts, a text longer than the
 * context without truncate, n_texts < 1 or more than 1,000,000: INVALID_ARGUMENT; a model
 * that cannot embed: UNSUPPORTED. */
INFER_API infer_status infer_embed(const infer_model *model, const char *const *texts, const size_t *text_lens,
                                   int32_t n_texts, const infer_embed_params *params, infer_embeddings **out);
/* The same for inputs given as token ids (taken as they are: no special tokens added);
 * an id outside the vocabulary: INVALID_ARGUMENT. */
INFER_API infer_status infer_embed_tokens(const infer_model *model, const int32_t *const *tokens,
                                          const size_t *n_tokens, int32_t n_inputs,
                                          const infer_embed_params *params, infer_embeddings **out);
/* Relevance of each document to the query: one row of infer_embeddings_dim values (1 for
 * the usual rerankers: the head's raw score, higher is more relevant) per document, in
 * order. params->pooling must be DEFAULT or RANK; a model without a classifier head:
 * INVALID_ARGUMENT. */
INFER_API infer_status infer_rerank(const infer_model *model, const char *query, const char *const *documents,
                                    int32_t n_documents, const infer_embed_params *params, infer_embeddings **out);

/* The asynchronous forms: queued on the engine (which must have a background thread, or be
 * stepped by the caller), computed between generation steps. *out is returned at once;
 * errors found at submission (bad inputs) are returned here and nothing is queued. */
INFER_API infer_status infer_embed_submit(infer_engine *engine, const char *const *texts, const size_t *text_lens,
                                          int32_t n_texts, const infer_embed_params *params, infer_embeddings **out);
INFER_API infer_status infer_embed_submit_tokens(infer_engine *engine, const int32_t *const *tokens,
                                                 const size_t *n_tokens, int32_t n_inputs,
                                                 const infer_embed_params *params, infer_embeddings **out);
INFER_API infer_status infer_rerank_submit(infer_engine *engine, const char *query, const char *const *documents,
                                           int32_t n_documents, const infer_embed_params *params,
                                           infer_embeddings **out);

/* Waits up to timeout_ms (< 0: forever) for the result; *finished (may be NULL) is 1 when
 * it is there. Returns the job's status once finished (INFER_OK, or why it failed:
 * infer_embeddings_error; INFER_ERR_CANCELLED when cancelled or the engine stopped), INFER_OK
 * while it is not. Synchronous results are finished from the start. */
INFER_API infer_status infer_embeddings_wait(infer_embeddings *emb, int32_t timeout_ms, int32_t *finished);
/* Asks the engine to drop an unfinished job (it finishes as CANCELLED). */
INFER_API infer_status infer_embeddings_cancel(infer_embeddings *emb);
/* The failure message of a failed job ("" otherwise). Valid until the handle is freed. */
INFER_API const char *infer_embeddings_error(const infer_embeddings *emb);
/* Values per row (the vector size after `dimensions`; the head's outputs for RANK); 0 until
 * finished. */
INFER_API int32_t infer_embeddings_dim(const infer_embeddings *emb);
/* Rows: one per input, or one per token of every input with POOLING_NONE; 0 until finished. */
INFER_API int64_t infer_embeddings_rows(const infer_embeddings *emb);
/* The rows of input `index`: its first row and row count. INVALID_ARGUMENT for an index out
 * of range; BUSY until finished. */
INFER_API infer_status infer_embeddings_input_rows(const infer_embeddings *emb, int32_t index, int64_t *first_row,
                                                   int32_t *n_rows);
/* The pooling used (DEFAULT resolved). */
INFER_API infer_pooling infer_embeddings_pooling(const infer_embeddings *emb);
/* Tokens computed (what usage reports); 0 until finished. */
INFER_API int64_t infer_embeddings_n_tokens(const infer_embeddings *emb);
/* rows x dim floats, row-major, owned by the handle; NULL until finished (or after a
 * failure). */
INFER_API const float *infer_embeddings_data(const infer_embeddings *emb);
/* Copies the rows x dim floats into buf (n_floats of room). *needed (may be NULL) receives
 * rows x dim; too small a buffer: BUFFER_TOO_SMALL. BUSY until finished. */
INFER_API infer_status infer_embeddings_copy(const infer_embeddings *emb, float *buf, size_t n_floats,
                                             size_t *needed);
/* Frees the handle; an unfinished job is cancelled first. NULL is a no-op. */
INFER_API void infer_embeddings_free(infer_embeddings *emb);

/* ========================================================================================
 * OFFLINE TOOLS
 *
 * What the infer CLI does besides serving, for every language: quantize a model, write a
 * synthetic one, convert a llama2.c checkpoint, measure perplexity and speed. None of
 * these is needed to load a model and generate; each runs to completion on the calling
 * thread with its own engine or files, and is thread-safe in the sense that distinct
 * calls share nothing (they may run concurrently). Callbacks receive the `user_data`
 * pointer of the parameter struct that installed them.
 * ======================================================================================== */

/* Progress of a long operation: fraction in [0, 1] and what it is working on. */
typedef void (*infer_progress_fn)(double fraction, const char *what, void *user_data);
/* A note for the user (e.g. which tensors fell back to another type). */
typedef void (*infer_note_fn)(const char *message, void *user_data);

/* ---- quantization ------------------------------------------------------------------------ */

/* Weight formats, by name (infer_quantize_params.type, infer_synth_params.type):
 *   GGUF standard: "f32" "f16" "bf16" "q8_0" "q4_0" "q4_1" "q5_0" "q5_1" "q4_k" "q5_k" "q6_k"
 *   libinfer's own (other GGUF readers refuse them with an unknown-type error):
 *   "w8a8"  per-output-channel symmetric int8 weights (tensor type 1008, row
 *           scales in the f32 tensor "<name>.scale"); activations quantized
 *           per token to int8 at run time.
 *   "int4"  W4A16: group-wise asymmetric 4-bit weights with f16 scales and
 *           4-bit zero points; group 32, 64 or 128 (tensor types 1032, 1064,
 *           1128). Also "int4_g32", "int4_g64", "int4_g128".
 * Files using them carry the metadata keys infer.quant.version (1),
 * infer.quant.type ("w8a8" | "int4"), infer.quant.group_size and
 * infer.quant.method ("rtn" | "gptq" | "awq"). */

typedef enum infer_quant_method {
  INFER_QUANT_RTN = 0,  /* round to nearest, block by block */
  INFER_QUANT_GPTQ = 1, /* Hessian-aware error feedback from calibration text */
  INFER_QUANT_AWQ = 2,  /* activation-aware channel scaling and clipping from calibration text */
  INFER_QUANT_METHOD_FORCE_32BIT = 0x7fffffff
} infer_quant_method;

typedef struct infer_quantize_params {
  uint32_t struct_size;
  const char *type;            /* format name (see above); default "q4_0" */
  int32_t group_size;          /* "int4": 32, 64 or 128; default 128 */
  infer_quant_method method;   /* default INFER_QUANT_RTN. GPTQ/AWQ need a format with one grid
                                  per block: q8_0, q4_0, q4_1, q5_0, q5_1, int4 */
  const char *calib_text;      /* GPTQ/AWQ: calibration text, UTF-8 (required for them) */
  int32_t n_threads;           /* 0: all cores; at most 1024 (else INVALID_ARGUMENT) */
  int32_t calib_ctx;           /* tokens per calibration window; default 256 */
  int32_t max_calib_tokens;    /* default 8192 */
  float gptq_damp;             /* fraction of the mean Hessian diagonal added to it; default 0.01 */
  int32_t act_order;           /* GPTQ: 1 = columns in order of decreasing Hessian diagonal */
  infer_progress_fn progress;  /* may be NULL */
  infer_note_fn note;          /* may be NULL */
  void *user_data;             /* passed to progress and note */
  /* Since 1.4. Formats of the output head (output.weight) and of the token
   * embedding (token_embd.weight), as llama-quantize's --output-tensor-type
   * and --token-embedding-type; NULL: `type`. A model with tied embeddings
   * (no output.weight) uses token_embd as its head: output_type applies to it
   * when set. infer_convert_hf ignores them. */
  const char *output_type;
  const char *token_embedding_type;
} infer_quantize_params;

INFER_API void infer_quantize_params_init(infer_quantize_params *params);

typedef struct infer_quantize_result {
  uint32_t struct_size;
  int64_t n_tensors;    /* tensors written */
  int64_t n_quantized;  /* weight matrices converted */
  int64_t n_fallback;   /* of those, written in another type because their rows do not fit the blocks */
  uint64_t bytes_in;    /* tensor bytes read */
  uint64_t bytes_out;   /* tensor bytes written */
} infer_quantize_result;

/* Reads the GGUF model at in_path and writes it to out_path (atomically:
 * a temporary file renamed into place) with its weight matrices
 * (token_embd, output, attention and feed-forward) in params->type; norms
 * and other tensors are copied. A matrix whose rows the format's block does
 * not divide falls back to a format that fits (k-quants to 32-value formats,
 * int4 to smaller groups, then f16) and params->note says which. result may
 * be NULL. GPTQ/AWQ support llama-architecture models. */
INFER_API infer_status infer_quantize(const char *in_path, const char *out_path,
                                      const infer_quantize_params *params, infer_quantize_result *result);

/* ---- synthetic models ----------------------------------------------------------------------- */

typedef struct infer_synth_params {
  uint32_t struct_size;
  const char *preset;          /* a name from infer_synth_preset_name: "tinyllama-1.1b",
                                  "llama-2-7b", "llama-3-8b", "tiny" */
  const char *type;            /* weight format name; default "f16" */
  int32_t group_size;          /* "int4": 32, 64 or 128; default 128 */
  uint64_t seed;               /* default 1 */
  int32_t n_threads;           /* 0: all cores; at most 1024 (else INVALID_ARGUMENT) */
  infer_progress_fn progress;  /* may be NULL */
  infer_note_fn note;          /* may be NULL */
  void *user_data;             /* passed to progress and note */
  /* Since 1.1: */
  const char *grow_from;       /* default NULL. A small llama GGUF to embed in the preset's shape
                                  (zero padding, the same function), with `noise` added to every
                                  matrix: a large target that agrees with the small model as often
                                  as the noise allows (speculative decoding benchmarks) */
  float noise;                 /* grow_from: std of the Gaussian noise, in [0, 1]; default 0 */
} infer_synth_params;

INFER_API void infer_synth_params_init(infer_synth_params *params);

/* Writes a random-weight model with the exact shapes of a real one (for
 * speed measurements without downloading weights), streaming tensor by
 * tensor so even 7B/8B presets need little memory. Every preset writes a
 * model this build loads. *file_bytes (may be NULL) receives the file size. */
INFER_API infer_status infer_synth(const char *out_path, const infer_synth_params *params, uint64_t *file_bytes);

/* Name of synth preset `index` (0, 1, ...), NULL past the last. Static strings. */
INFER_API const char *infer_synth_preset_name(int32_t index);

/* ---- conversion ------------------------------------------------------------------------------ */

/* Converts a llama2.c checkpoint (legacy format) and its tokenizer.bin into a
 * GGUF file. */
INFER_API infer_status infer_convert_llama2c(const char *checkpoint_path,
                                             const char *tokenizer_path, const char *out_path);

/* Since 1.2. Converts a Hugging Face model directory (what infer_model_load
 * accepts) into a GGUF file at out_path (atomically). params NULL, or
 * params->type NULL: the matrices keep the checkpoint's types (F32, F16,
 * BF16); otherwise they are converted to params->type by round to nearest
 * (params->method must be INFER_QUANT_RTN; calibration is infer_quantize's
 * job, on the converted file). Llama, Mistral and Mixtral Q/K rows are
 * permuted from the checkpoint's rotate-half layout into the llama GGUF
 * layout, so the file is a standard llama GGUF. result may be NULL. */
INFER_API infer_status infer_convert_hf(const char *dir, const char *out_path, const infer_quantize_params *params,
                                        infer_quantize_result *result);

/* ---- perplexity -------------------------------------------------------------------------------- */

typedef struct infer_perplexity_params {
  uint32_t struct_size;
  int32_t n_ctx;            /* window; default 0: the model's context, capped at 512 */
  int32_t n_threads;        /* default 0: all cores */
  const infer_model *base;  /* default NULL; or a model with the same vocabulary to compare with
                               (e.g. the unquantized original): fills kl_divergence,
                               top1_agreement and base_perplexity. The text is tokenized by
                               `model`. */
} infer_perplexity_params;

INFER_API void infer_perplexity_params_init(infer_perplexity_params *params);

typedef struct infer_perplexity_result {
  uint32_t struct_size;
  double perplexity;
  double nll;             /* mean negative log-likelihood (nats per token) */
  int64_t n_tokens;       /* tokens scored */
  int32_t n_chunks;
  /* With params->base (0 otherwise): */
  double kl_divergence;   /* mean KL(base || model) of the next-token distributions, nats */
  double top1_agreement;  /* fraction of positions where both models' most likely token agree */
  double base_perplexity; /* the base model's perplexity on the same tokens */
} infer_perplexity_result;

/* Perplexity of text (UTF-8, NUL-terminated) over non-overlapping windows of
 * params->n_ctx tokens, each starting with BOS, and with params->base the
 * comparison with a base model. params may be NULL (defaults). */
INFER_API infer_status infer_perplexity(const infer_model *model, const char *text,
                                        const infer_perplexity_params *params,
                                        infer_perplexity_result *result);

/* ---- speed ---------------------------------------------------------------------------------------- */

typedef struct infer_bench_params {
  uint32_t struct_size;
  int32_t n_prompt;        /* default 64 prompt tokens per sequence */
  int32_t n_gen;           /* default 32 generated tokens per sequence */
  int32_t n_threads;       /* default 0: all cores */
  int32_t repetitions;     /* default 3: the best run counts */
  int32_t batch;           /* default 1: sequences decoded together */
  const infer_engine_params *engine; /* NULL: defaults (KV type, budget, block size, ...) */
} infer_bench_params;

INFER_API void infer_bench_params_init(infer_bench_params *params);

typedef struct infer_bench_result {
  uint32_t struct_size;
  int32_t n_prompt;
  int32_t n_gen;
  int32_t n_threads;
  int32_t batch;
  double prefill_ms;           /* all prompts of the batch */
  double decode_ms;            /* all decode steps after the first token */
  double prefill_tokens_per_s; /* batch * n_prompt / prefill_ms */
  double decode_tokens_per_s;  /* batch * (n_gen - 1) / decode_ms: aggregate */
  /* Since 1.6: the engine steps of the best decode run, and the time this rank spent in
   * tensor-parallel collectives (infer_engine_stats.tp_comm_seconds) in the best prefill and
   * the best decode run; 0 for a whole model */
  int64_t decode_steps;
  double prefill_comm_ms;
  double decode_comm_ms;
  uint64_t decode_comm_bytes;
} infer_bench_result;

/* Times the prefill of `batch` prompts of n_prompt pseudo-random tokens, then
 * n_gen greedy decode steps of all of them together (best of `repetitions`).
 * Since 1.6, on ranks 1..N-1 of a tensor-parallel model: follows rank 0's bench
 * (called with the same parameters; infer_engine_follow) and returns no figures. */
INFER_API infer_status infer_bench(const infer_model *model, const infer_bench_params *params,
                                   infer_bench_result *result);

#ifdef __cplusplus
}
#endif

#endif /* INFER_INFER_H */
