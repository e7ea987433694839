//! Raw declarations of libinfer's C API, written by hand from
//! `include/infer/infer.h` (version 1.0). Every struct is `#[repr(C)]`; the
//! `infer` crate's tests compare each one's size and field offsets with the C
//! compiler's. Enums are plain `i32` constants: infer.h pins every enum to 32
//! bits, and a value this crate does not know must not be undefined behaviour.
#![allow(non_camel_case_types)]

use std::os::raw::{c_char, c_double, c_float, c_void};

pub const INFER_VERSION_MAJOR: u32 = 1;
pub const INFER_VERSION_MINOR: u32 = 6;
pub const INFER_VERSION_PATCH: u32 = 0;
pub const INFER_VERSION_NUMBER: u32 =
    INFER_VERSION_MAJOR * 10000 + INFER_VERSION_MINOR * 100 + INFER_VERSION_PATCH;

pub type infer_status = i32;
pub const INFER_OK: infer_status = 0;
pub const INFER_ERR_IO: infer_status = 1;
pub const INFER_ERR_FORMAT: infer_status = 2;
pub const INFER_ERR_UNSUPPORTED: infer_status = 3;
pub const INFER_ERR_OUT_OF_MEMORY: infer_status = 4;
pub const INFER_ERR_INVALID_ARGUMENT: infer_status = 5;
pub const INFER_ERR_CANCELLED: infer_status = 6;
pub const INFER_ERR_BACKEND: infer_status = 7;
pub const INFER_ERR_INTERNAL: infer_status = 8;
pub const INFER_ERR_BUFFER_TOO_SMALL: infer_status = 9;
pub const INFER_ERR_NOT_FOUND: infer_status = 10;
pub const INFER_ERR_BUSY: infer_status = 11;

pub type infer_log_level = i32;
pub const INFER_LOG_DEBUG: infer_log_level = 0;
pub const INFER_LOG_INFO: infer_log_level = 1;
pub const INFER_LOG_WARN: infer_log_level = 2;
pub const INFER_LOG_ERROR: infer_log_level = 3;

pub type infer_backend = i32;
pub const INFER_BACKEND_AUTO: infer_backend = 0;
pub const INFER_BACKEND_CPU: infer_backend = 1;
pub const INFER_BACKEND_CUDA: infer_backend = 2;

pub type infer_kv_type = i32;
pub const INFER_KV_F32: infer_kv_type = 0;
pub const INFER_KV_F16: infer_kv_type = 1;
pub const INFER_KV_INT8: infer_kv_type = 2;

pub type infer_policy = i32;
pub const INFER_POLICY_CONTINUOUS: infer_policy = 0;
pub const INFER_POLICY_STATIC: infer_policy = 1;
pub const INFER_POLICY_DYNAMIC: infer_policy = 2;
pub type infer_spec_method = i32;
pub const INFER_SPEC_NONE: infer_spec_method = 0;
pub const INFER_SPEC_NGRAM: infer_spec_method = 1;
pub const INFER_SPEC_LAYERSKIP: infer_spec_method = 2;
pub const INFER_SPEC_DRAFT: infer_spec_method = 3;

pub type infer_finish_reason = i32;
pub const INFER_FINISH_NONE: infer_finish_reason = 0;
pub const INFER_FINISH_STOP: infer_finish_reason = 1;
pub const INFER_FINISH_LENGTH: infer_finish_reason = 2;
pub const INFER_FINISH_CANCELLED: infer_finish_reason = 3;
pub const INFER_FINISH_ERROR: infer_finish_reason = 4;

pub type infer_quant_method = i32;
pub const INFER_QUANT_RTN: infer_quant_method = 0;
pub const INFER_QUANT_GPTQ: infer_quant_method = 1;
pub const INFER_QUANT_AWQ: infer_quant_method = 2;

pub const INFER_LOGITS_PROMPT: u32 = 1;
pub const INFER_LOGITS_GENERATED: u32 = 2;
pub const INFER_LOGITS_LOGPROBS: u32 = 4;

#[repr(C)]
pub struct infer_model {
    _private: [u8; 0],
}
#[repr(C)]
pub struct infer_engine {
    _private: [u8; 0],
}
#[repr(C)]
pub struct infer_request {
    _private: [u8; 0],
}

pub type infer_log_fn =
    Option<unsafe extern "C" fn(level: infer_log_level, message: *const c_char, user_data: *mut c_void)>;
pub type infer_token_fn = Option<
    unsafe extern "C" fn(
        request: *mut infer_request,
        token: i32,
        text: *const c_char,
        text_len: usize,
        user_data: *mut c_void,
    ) -> i32,
>;
pub type infer_progress_fn =
    Option<unsafe extern "C" fn(fraction: c_double, what: *const c_char, user_data: *mut c_void)>;
pub type infer_note_fn = Option<unsafe extern "C" fn(message: *const c_char, user_data: *mut c_void)>;

#[repr(C)]
#[derive(Debug, Copy, Clone)]
pub struct infer_model_params {
    pub struct_size: u32,
    pub backend: infer_backend,
    pub use_mmap: i32,
    pub vocab_only: i32,
    // 1.6: tensor parallelism (mpi_comm: a pointer to the host's MPI_Comm, or null)
    pub tensor_parallel: i32,
    pub mpi_comm: *mut c_void,
}

#[repr(C)]
#[derive(Debug, Copy, Clone)]
pub struct infer_model_info {
    pub struct_size: u32,
    pub architecture: *const c_char,
    pub name: *const c_char,
    pub tokenizer: *const c_char,
    pub n_vocab: i32,
    pub n_ctx_train: i32,
    pub n_embd: i32,
    pub n_layer: i32,
    pub n_head: i32,
    pub n_head_kv: i32,
    pub n_ff: i32,
    pub n_rot: i32,
    pub rope_freq_base: c_float,
    pub rms_norm_eps: c_float,
    pub n_params: u64,
    pub n_bytes: u64,
    pub n_tensors: i32,
    pub bos_token: i32,
    pub eos_token: i32,
    pub vocab_only: i32,
}

#[repr(C)]
#[derive(Debug, Copy, Clone)]
pub struct infer_tensor_info {
    pub struct_size: u32,
    pub name: *const c_char,
    pub type_: *const c_char,
    pub n_dims: i32,
    pub dims: [i64; 4],
    pub n_bytes: u64,
}

#[repr(C)]
#[derive(Debug, Copy, Clone)]
pub struct infer_engine_params {
    pub struct_size: u32,
    pub n_threads: i32,
    pub kv_budget_bytes: u64,
    pub kv_blocks: i32,
    pub kv_block_size: i32,
    pub kv_type: infer_kv_type,
    pub max_seqs: i32,
    pub max_batch_tokens: i32,
    pub n_ctx: i32,
    pub prefix_caching: i32,
    pub host_kv_budget_bytes: u64,
    pub policy: infer_policy,
    pub batch_timeout_ms: c_double,
    pub step_row_multiple: i32,
    // 1.1
    pub spec: infer_spec_method,
    pub spec_k: i32,
    pub spec_ngram_max: i32,
    pub spec_ngram_min: i32,
    pub spec_max_batch: i32,
    pub spec_skip_layers: *const c_char,
    pub draft_model: *const infer_model,
    // 1.6
    pub tensor_parallel: i32,
    pub tp_timeout_ms: i32,
}

#[repr(C)]
#[derive(Debug, Copy, Clone)]
pub struct infer_sampling_params {
    pub struct_size: u32,
    pub temperature: c_float,
    pub top_k: i32,
    pub top_p: c_float,
    pub min_p: c_float,
    pub repeat_penalty: c_float,
    pub frequency_penalty: c_float,
    pub presence_penalty: c_float,
    pub penalty_last_n: i32,
    pub seed: u64,
    pub logit_bias_tokens: *const i32,
    pub logit_bias_values: *const c_float,
    pub n_logit_bias: usize,
}

#[repr(C)]
#[derive(Debug, Copy, Clone)]
pub struct infer_request_params {
    pub struct_size: u32,
    pub prompt: *const c_char,
    pub prompt_len: usize,
    pub prompt_tokens: *const i32,
    pub n_prompt_tokens: usize,
    pub add_bos: i32,
    pub parse_special: i32,
    pub max_tokens: i32,
    pub sampling: *const infer_sampling_params,
    pub stop: *const *const c_char,
    pub n_stop: usize,
    pub ignore_eos: i32,
    pub on_token: infer_token_fn,
    pub user_data: *mut c_void,
    pub logits: u32,
    pub no_prefix_cache: i32,
    pub cache_salt: u64,
    pub priority: i32,
    // 1.1
    pub logprobs: i32,
    pub grammar: *const c_char,
    pub json_schema: *const c_char,
    pub spec_max_draft: i32,
}

/// A token and its log-probability (1.1; a plain struct, used in arrays).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct infer_token_logprob {
    pub token: i32,
    pub logprob: f32,
}

#[repr(C)]
#[derive(Debug, Copy, Clone)]
pub struct infer_request_stats {
    pub struct_size: u32,
    pub finish_reason: infer_finish_reason,
    pub status: infer_status,
    pub n_prompt_tokens: i32,
    pub n_cached_tokens: i32,
    pub n_generated_tokens: i32,
    pub queue_ms: c_double,
    pub ttft_ms: c_double,
    pub tpot_ms: c_double,
    pub total_ms: c_double,
    pub prefill_tokens_per_s: c_double,
    pub decode_tokens_per_s: c_double,
    pub n_preemptions: i32,
    // 1.1
    pub draft_tokens: u64,
    pub accepted_tokens: u64,
    pub acceptance_rate: c_double,
    pub mean_accepted_length: c_double,
    pub draft_tokens_at: [u64; 16],
    pub accepted_tokens_at: [u64; 16],
}

#[repr(C)]
#[derive(Debug, Copy, Clone)]
pub struct infer_engine_stats {
    pub struct_size: u32,
    pub n_running: i32,
    pub n_waiting: i32,
    pub kv_blocks_total: i32,
    pub kv_blocks_used: i32,
    pub kv_block_size: i32,
    pub kv_bytes_total: u64,
    pub kv_bytes_used: u64,
    pub n_steps: u64,
    pub n_prompt_tokens: u64,
    pub n_generated_tokens: u64,
    pub kv_blocks_free: i32,
    pub kv_blocks_cached: i32,
    pub host_kv_blocks_total: i32,
    pub host_kv_blocks_used: i32,
    pub prefix_query_tokens: u64,
    pub prefix_hit_tokens: u64,
    pub n_preemptions: u64,
    pub kv_evictions: u64,
    pub kv_type: infer_kv_type,
    pub n_finished: u64,
    pub uptime_s: c_double,
    pub generated_tokens_per_s: c_double,
    // 1.1
    pub draft_tokens: u64,
    pub accepted_tokens: u64,
    pub acceptance_rate: c_double,
    pub mean_accepted_length: c_double,
    pub draft_tokens_at: [u64; 16],
    pub accepted_tokens_at: [u64; 16],
    // 1.6
    pub tp_comm_calls: u64,
    pub tp_comm_bytes: u64,
    pub tp_comm_seconds: c_double,
}

#[repr(C)]
#[derive(Debug, Copy, Clone)]
pub struct infer_chat_message {
    pub role: *const c_char,
    pub content: *const c_char,
}

/// Since 1.5: how token vectors become one embedding.
pub type infer_pooling = i32;
pub const INFER_POOLING_DEFAULT: infer_pooling = -1;
pub const INFER_POOLING_NONE: infer_pooling = 0;
pub const INFER_POOLING_MEAN: infer_pooling = 1;
pub const INFER_POOLING_CLS: infer_pooling = 2;
pub const INFER_POOLING_LAST: infer_pooling = 3;
pub const INFER_POOLING_RANK: infer_pooling = 4;

/// Since 1.5.
#[repr(C)]
#[derive(Debug, Copy, Clone)]
pub struct infer_embed_params {
    pub struct_size: u32,
    pub pooling: infer_pooling,
    pub normalize: i32,
    pub dimensions: i32,
    pub truncate: i32,
    pub n_threads: i32,
}

#[repr(C)]
pub struct infer_embeddings {
    _p: [u8; 0],
}

#[repr(C)]
#[derive(Debug, Copy, Clone)]
pub struct infer_quantize_params {
    pub struct_size: u32,
    pub type_: *const c_char,
    pub group_size: i32,
    pub method: infer_quant_method,
    pub calib_text: *const c_char,
    pub n_threads: i32,
    pub calib_ctx: i32,
    pub max_calib_tokens: i32,
    pub gptq_damp: c_float,
    pub act_order: i32,
    pub progress: infer_progress_fn,
    pub note: infer_note_fn,
    pub user_data: *mut c_void,
    pub output_type: *const c_char,
    pub token_embedding_type: *const c_char,
}

#[repr(C)]
#[derive(Debug, Copy, Clone)]
pub struct infer_quantize_result {
    pub struct_size: u32,
    pub n_tensors: i64,
    pub n_quantized: i64,
    pub n_fallback: i64,
    pub bytes_in: u64,
    pub bytes_out: u64,
}

#[repr(C)]
#[derive(Debug, Copy, Clone)]
pub struct infer_synth_params {
    pub struct_size: u32,
    pub preset: *const c_char,
    pub type_: *const c_char,
    pub group_size: i32,
    pub seed: u64,
    pub n_threads: i32,
    pub progress: infer_progress_fn,
    pub note: infer_note_fn,
    pub user_data: *mut c_void,
    // 1.1
    pub grow_from: *const c_char,
    pub noise: f32,
}

#[repr(C)]
#[derive(Debug, Copy, Clone)]
pub struct infer_perplexity_result {
    pub struct_size: u32,
    pub perplexity: c_double,
    pub nll: c_double,
    pub n_tokens: i64,
    pub n_chunks: i32,
    pub kl_divergence: c_double,
    pub top1_agreement: c_double,
    pub base_perplexity: c_double,
}

#[repr(C)]
#[derive(Debug, Copy, Clone)]
pub struct infer_perplexity_params {
    pub struct_size: u32,
    pub n_ctx: i32,
    pub n_threads: i32,
    pub base: *const infer_model,
}

#[repr(C)]
#[derive(Debug, Copy, Clone)]
pub struct infer_bench_params {
    pub struct_size: u32,
    pub n_prompt: i32,
    pub n_gen: i32,
    pub n_threads: i32,
    pub repetitions: i32,
    pub batch: i32,
    pub engine: *const infer_engine_params,
}

#[repr(C)]
#[derive(Debug, Copy, Clone)]
pub struct infer_bench_result {
    pub struct_size: u32,
    pub n_prompt: i32,
    pub n_gen: i32,
    pub n_threads: i32,
    pub batch: i32,
    pub prefill_ms: c_double,
    pub decode_ms: c_double,
    pub prefill_tokens_per_s: c_double,
    pub decode_tokens_per_s: c_double,
    // 1.6
    pub decode_steps: i64,
    pub prefill_comm_ms: c_double,
    pub decode_comm_ms: c_double,
    pub decode_comm_bytes: u64,
}

extern "C" {
    pub fn infer_version() -> *const c_char;
    pub fn infer_version_number() -> u32;
    pub fn infer_status_string(status: infer_status) -> *const c_char;
    pub fn infer_last_error() -> *const c_char;
    pub fn infer_set_log_callback(fn_: infer_log_fn, user_data: *mut c_void, min_level: infer_log_level);
    pub fn infer_free(ptr: *mut c_void);

    pub fn infer_model_params_init(params: *mut infer_model_params);
    pub fn infer_model_load(
        path: *const c_char,
        params: *const infer_model_params,
        out: *mut *mut infer_model,
    ) -> infer_status;
    pub fn infer_model_free(model: *mut infer_model);
    pub fn infer_model_info_init(info: *mut infer_model_info);
    pub fn infer_model_get_info(model: *const infer_model, info: *mut infer_model_info) -> infer_status;
    pub fn infer_model_meta(
        model: *const infer_model,
        key: *const c_char,
        buf: *mut c_char,
        buf_size: usize,
        needed: *mut usize,
    ) -> infer_status;
    pub fn infer_model_tensor_count(model: *const infer_model) -> i32;
    pub fn infer_model_tensor(model: *const infer_model, index: i32, info: *mut infer_tensor_info) -> infer_status;

    pub fn infer_tokenize(
        model: *const infer_model,
        text: *const c_char,
        text_len: usize,
        add_bos: i32,
        parse_special: i32,
        tokens: *mut i32,
        capacity: usize,
        n_tokens: *mut usize,
    ) -> infer_status;
    pub fn infer_detokenize(
        model: *const infer_model,
        tokens: *const i32,
        n_tokens: usize,
        render_special: i32,
        buf: *mut c_char,
        buf_size: usize,
        needed: *mut usize,
    ) -> infer_status;
    pub fn infer_token_piece(
        model: *const infer_model,
        token: i32,
        buf: *mut c_char,
        buf_size: usize,
        n_bytes: *mut usize,
    ) -> infer_status;
    pub fn infer_token_is_eog(model: *const infer_model, token: i32) -> i32;

    pub fn infer_engine_params_init(params: *mut infer_engine_params);
    pub fn infer_engine_create(
        model: *const infer_model,
        params: *const infer_engine_params,
        out: *mut *mut infer_engine,
    ) -> infer_status;
    pub fn infer_engine_free(engine: *mut infer_engine);

    pub fn infer_sampling_params_init(params: *mut infer_sampling_params);
    pub fn infer_request_params_init(params: *mut infer_request_params);
    pub fn infer_submit(
        engine: *mut infer_engine,
        params: *const infer_request_params,
        out: *mut *mut infer_request,
    ) -> infer_status;
    pub fn infer_submit_n(
        engine: *mut infer_engine,
        params: *const infer_request_params,
        n: i32,
        out: *mut *mut infer_request,
    ) -> infer_status;
    pub fn infer_engine_step(engine: *mut infer_engine, n_active: *mut i32) -> infer_status;
    pub fn infer_engine_run(engine: *mut infer_engine) -> infer_status;
    pub fn infer_request_cancel(request: *mut infer_request) -> infer_status;
    pub fn infer_request_free(request: *mut infer_request);
    pub fn infer_request_stats_init(stats: *mut infer_request_stats);
    pub fn infer_request_get_stats(request: *const infer_request, stats: *mut infer_request_stats) -> infer_status;
    pub fn infer_request_tokens(request: *const infer_request, tokens: *mut *const i32, n_tokens: *mut usize)
        -> infer_status;
    pub fn infer_request_text(
        request: *const infer_request,
        buf: *mut c_char,
        buf_size: usize,
        needed: *mut usize,
    ) -> infer_status;
    pub fn infer_request_logits(
        request: *const infer_request,
        data: *mut *const c_float,
        n_rows: *mut usize,
        n_vocab: *mut usize,
    ) -> infer_status;
    pub fn infer_request_error(request: *const infer_request) -> *const c_char;

    // 1.1
    pub fn infer_request_logprobs(
        request: *const infer_request,
        index: usize,
        chosen: *mut infer_token_logprob,
        top: *mut infer_token_logprob,
        capacity: usize,
        n_top: *mut usize,
    ) -> infer_status;
    pub fn infer_json_schema_to_grammar(
        json_schema: *const c_char,
        buf: *mut c_char,
        buf_size: usize,
        needed: *mut usize,
    ) -> infer_status;
    pub fn infer_grammar_check(grammar: *const c_char) -> infer_status;
    pub fn infer_model_meta_count(model: *const infer_model) -> i32;
    pub fn infer_model_meta_key(
        model: *const infer_model,
        index: i32,
        buf: *mut c_char,
        buf_size: usize,
        needed: *mut usize,
    ) -> infer_status;

    pub fn infer_engine_stats_init(stats: *mut infer_engine_stats);
    pub fn infer_engine_get_stats(engine: *const infer_engine, stats: *mut infer_engine_stats) -> infer_status;
    pub fn infer_engine_max_concurrency(
        engine: *const infer_engine,
        prompt_len: i32,
        output_len: i32,
        out: *mut i32,
    ) -> infer_status;

    pub fn infer_engine_start(engine: *mut infer_engine) -> infer_status;
    pub fn infer_engine_stop(engine: *mut infer_engine, drain: i32) -> infer_status;
    pub fn infer_engine_wait_idle(engine: *mut infer_engine) -> infer_status;
    pub fn infer_request_next_tokens(
        request: *mut infer_request,
        timeout_ms: i32,
        tokens: *mut i32,
        capacity: usize,
        n_tokens: *mut usize,
        finished: *mut i32,
    ) -> infer_status;
    pub fn infer_request_next_text(
        request: *mut infer_request,
        timeout_ms: i32,
        buf: *mut c_char,
        buf_size: usize,
        n_bytes: *mut usize,
        finished: *mut i32,
    ) -> infer_status;
    /// Since 1.3.
    pub fn infer_request_wait(request: *const infer_request, timeout_ms: i32, finished: *mut i32) -> infer_status;

    pub fn infer_generate(
        model: *const infer_model,
        prompt: *const c_char,
        sampling: *const infer_sampling_params,
        max_tokens: i32,
        out_text: *mut *mut c_char,
    ) -> infer_status;

    // Since 1.6: tensor parallelism.
    pub fn infer_model_tp_rank(model: *const infer_model) -> i32;
    pub fn infer_model_tp_size(model: *const infer_model) -> i32;
    pub fn infer_engine_follow(model: *const infer_model, params: *const infer_engine_params) -> infer_status;

    // Since 1.5: embeddings and reranking.
    pub fn infer_embed_params_init(params: *mut infer_embed_params);
    pub fn infer_embed(model: *const infer_model, texts: *const *const c_char, text_lens: *const usize,
                       n_texts: i32, params: *const infer_embed_params, out: *mut *mut infer_embeddings)
        -> infer_status;
    pub fn infer_embed_tokens(model: *const infer_model, tokens: *const *const i32, n_tokens: *const usize,
                              n_inputs: i32, params: *const infer_embed_params, out: *mut *mut infer_embeddings)
        -> infer_status;
    pub fn infer_rerank(model: *const infer_model, query: *const c_char, documents: *const *const c_char,
                        n_documents: i32, params: *const infer_embed_params, out: *mut *mut infer_embeddings)
        -> infer_status;
    pub fn infer_embed_submit(engine: *mut infer_engine, texts: *const *const c_char, text_lens: *const usize,
                              n_texts: i32, params: *const infer_embed_params, out: *mut *mut infer_embeddings)
        -> infer_status;
    pub fn infer_embed_submit_tokens(engine: *mut infer_engine, tokens: *const *const i32, n_tokens: *const usize,
                                     n_inputs: i32, params: *const infer_embed_params,
                                     out: *mut *mut infer_embeddings) -> infer_status;
    pub fn infer_rerank_submit(engine: *mut infer_engine, query: *const c_char, documents: *const *const c_char,
                               n_documents: i32, params: *const infer_embed_params,
                               out: *mut *mut infer_embeddings) -> infer_status;
    pub fn infer_embeddings_wait(emb: *mut infer_embeddings, timeout_ms: i32, finished: *mut i32) -> infer_status;
    pub fn infer_embeddings_cancel(emb: *mut infer_embeddings) -> infer_status;
    pub fn infer_embeddings_error(emb: *const infer_embeddings) -> *const c_char;
    pub fn infer_embeddings_dim(emb: *const infer_embeddings) -> i32;
    pub fn infer_embeddings_rows(emb: *const infer_embeddings) -> i64;
    pub fn infer_embeddings_input_rows(emb: *const infer_embeddings, index: i32, first_row: *mut i64,
                                       n_rows: *mut i32) -> infer_status;
    pub fn infer_embeddings_pooling(emb: *const infer_embeddings) -> infer_pooling;
    pub fn infer_embeddings_n_tokens(emb: *const infer_embeddings) -> i64;
    pub fn infer_embeddings_data(emb: *const infer_embeddings) -> *const f32;
    pub fn infer_embeddings_copy(emb: *const infer_embeddings, buf: *mut f32, n_floats: usize, needed: *mut usize)
        -> infer_status;
    pub fn infer_embeddings_free(emb: *mut infer_embeddings);

    pub fn infer_chat_template_count() -> i32;
    pub fn infer_chat_template_name(index: i32) -> *const c_char;
    pub fn infer_chat_template_detect(
        model: *const infer_model,
        buf: *mut c_char,
        buf_size: usize,
        needed: *mut usize,
    ) -> infer_status;
    pub fn infer_chat_apply_template(
        model: *const infer_model,
        template_name: *const c_char,
        messages: *const infer_chat_message,
        n_messages: usize,
        add_generation_prompt: i32,
        buf: *mut c_char,
        buf_size: usize,
        needed: *mut usize,
    ) -> infer_status;
    pub fn infer_chat_apply_template_json(
        model: *const infer_model,
        template_name: *const c_char,
        context_json: *const c_char,
        buf: *mut c_char,
        buf_size: usize,
        needed: *mut usize,
    ) -> infer_status;
    pub fn infer_chat_template_stop(template_name: *const c_char, index: i32) -> *const c_char;

    pub fn infer_quantize_params_init(params: *mut infer_quantize_params);
    pub fn infer_quantize(
        in_path: *const c_char,
        out_path: *const c_char,
        params: *const infer_quantize_params,
        result: *mut infer_quantize_result,
    ) -> infer_status;
    pub fn infer_synth_params_init(params: *mut infer_synth_params);
    pub fn infer_synth(out_path: *const c_char, params: *const infer_synth_params, file_bytes: *mut u64)
        -> infer_status;
    pub fn infer_synth_preset_name(index: i32) -> *const c_char;
    pub fn infer_convert_llama2c(
        checkpoint_path: *const c_char,
        tokenizer_path: *const c_char,
        out_path: *const c_char,
    ) -> infer_status;
    /// Since 1.2: a Hugging Face model directory to GGUF (params NULL: keep the types).
    pub fn infer_convert_hf(
        dir: *const c_char,
        out_path: *const c_char,
        params: *const infer_quantize_params,
        result: *mut infer_quantize_result,
    ) -> infer_status;
    pub fn infer_perplexity_params_init(params: *mut infer_perplexity_params);
    pub fn infer_perplexity(
        model: *const infer_model,
        text: *const c_char,
        params: *const infer_perplexity_params,
        result: *mut infer_perplexity_result,
    ) -> infer_status;
    pub fn infer_bench_params_init(params: *mut infer_bench_params);
    pub fn infer_bench(
        model: *const infer_model,
        params: *const infer_bench_params,
        result: *mut infer_bench_result,
    ) -> infer_status;
}

/// Size of struct `T` and the offset of every field, for comparison with
/// the C compiler's layout: (C struct name, sizeof, [(field, offset)]).
pub fn layouts() -> Vec<(&'static str, usize, Vec<(&'static str, usize)>)> {
    macro_rules! layout {
        ($t:ident { $($f:ident $(= $cname:literal)?),* $(,)? }) => {{
            let u = std::mem::MaybeUninit::<$t>::uninit();
            let base = u.as_ptr() as usize;
            #[allow(unused_unsafe)]
            let fields = vec![$((layout!(@name $f $($cname)?),
                unsafe { std::ptr::addr_of!((*u.as_ptr()).$f) } as usize - base)),*];
            (stringify!($t), std::mem::size_of::<$t>(), fields)
        }};
        (@name $f:ident $cname:literal) => { $cname };
        (@name $f:ident) => { stringify!($f) };
    }
    vec![
        layout!(infer_model_params { struct_size, backend, use_mmap, vocab_only, tensor_parallel, mpi_comm }),
        layout!(infer_model_info { struct_size, architecture, name, tokenizer, n_vocab, n_ctx_train, n_embd,
            n_layer, n_head, n_head_kv, n_ff, n_rot, rope_freq_base, rms_norm_eps, n_params, n_bytes,
            n_tensors, bos_token, eos_token, vocab_only }),
        layout!(infer_tensor_info { struct_size, name, type_ = "type", n_dims, dims, n_bytes }),
        layout!(infer_engine_params { struct_size, n_threads, kv_budget_bytes, kv_blocks, kv_block_size,
            kv_type, max_seqs, max_batch_tokens, n_ctx, prefix_caching, host_kv_budget_bytes, policy,
            batch_timeout_ms, step_row_multiple, spec, spec_k, spec_ngram_max, spec_ngram_min, spec_max_batch,
            spec_skip_layers, draft_model, tensor_parallel, tp_timeout_ms }),
        layout!(infer_sampling_params { struct_size, temperature, top_k, top_p, min_p, repeat_penalty,
            frequency_penalty, presence_penalty, penalty_last_n, seed, logit_bias_tokens,
            logit_bias_values, n_logit_bias }),
        layout!(infer_request_params { struct_size, prompt, prompt_len, prompt_tokens, n_prompt_tokens,
            add_bos, parse_special, max_tokens, sampling, stop, n_stop, ignore_eos, on_token, user_data,
            logits, no_prefix_cache, cache_salt, priority, logprobs, grammar, json_schema, spec_max_draft }),
        layout!(infer_request_stats { struct_size, finish_reason, status, n_prompt_tokens, n_cached_tokens,
            n_generated_tokens, queue_ms, ttft_ms, tpot_ms, total_ms, prefill_tokens_per_s,
            decode_tokens_per_s, n_preemptions, draft_tokens, accepted_tokens, acceptance_rate,
            mean_accepted_length, draft_tokens_at, accepted_tokens_at }),
        layout!(infer_engine_stats { struct_size, n_running, n_waiting, kv_blocks_total, kv_blocks_used,
            kv_block_size, kv_bytes_total, kv_bytes_used, n_steps, n_prompt_tokens, n_generated_tokens,
            kv_blocks_free, kv_blocks_cached, host_kv_blocks_total, host_kv_blocks_used,
            prefix_query_tokens, prefix_hit_tokens, n_preemptions, kv_evictions, kv_type, n_finished,
            uptime_s, generated_tokens_per_s, draft_tokens, accepted_tokens, acceptance_rate,
            mean_accepted_length, draft_tokens_at, accepted_tokens_at, tp_comm_calls, tp_comm_bytes,
            tp_comm_seconds }),
        layout!(infer_chat_message { role, content }),
        layout!(infer_embed_params { struct_size, pooling, normalize, dimensions, truncate, n_threads }),
        layout!(infer_quantize_params { struct_size, type_ = "type", group_size, method, calib_text,
            n_threads, calib_ctx, max_calib_tokens, gptq_damp, act_order, progress, note, user_data, output_type,
            token_embedding_type }),
        layout!(infer_quantize_result { struct_size, n_tensors, n_quantized, n_fallback, bytes_in,
            bytes_out }),
        layout!(infer_synth_params { struct_size, preset, type_ = "type", group_size, seed, n_threads,
            progress, note, user_data, grow_from, noise }),
        layout!(infer_perplexity_result { struct_size, perplexity, nll, n_tokens, n_chunks,
            kl_divergence, top1_agreement, base_perplexity }),
        layout!(infer_perplexity_params { struct_size, n_ctx, n_threads, base }),
        layout!(infer_bench_params { struct_size, n_prompt, n_gen, n_threads, repetitions, batch,
            engine }),
        layout!(infer_bench_result { struct_size, n_prompt, n_gen, n_threads, batch, prefill_ms,
            decode_ms, prefill_tokens_per_s, decode_tokens_per_s, decode_steps, prefill_comm_ms, decode_comm_ms,
            decode_comm_bytes }),
    ]
}
