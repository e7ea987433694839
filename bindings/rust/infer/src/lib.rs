//! Safe Rust bindings of libinfer.
//!
//! ```no_run
//! let model = infer::Model::load("stories260K.gguf")?;
//! let engine = infer::Engine::new(&model, &infer::EngineParams::default())?;
//! let params = infer::GenerateParams { max_tokens: 64, temperature: 0.0, ..Default::default() };
//! for piece in engine.stream("Once upon a time", &params)? {
//!     print!("{}", piece?);
//! }
//! # Ok::<(), infer::Error>(())
//! ```
//!
//! Thread safety follows `infer.h`:
//! - [`Model`] is immutable once loaded: `Send + Sync`, and cloning it is an
//!   `Arc` clone. The weights are freed when the last clone and the last
//!   engine built on it are dropped.
//! - [`Engine`] runs libinfer's background thread (`infer_engine_start`), so
//!   submitting, cancelling and reading stats are allowed from any thread:
//!   `Send + Sync`.
//! - [`Request`] and [`Stream`] are `Send + Sync` (the calls they make are the
//!   ones the header allows from any thread for a started engine); reading
//!   the next piece takes `&mut self` because the read position belongs to
//!   the handle. A [`Canceller`] cancels from another thread and keeps the
//!   handle alive until it is dropped too. Dropping a `Stream` cancels its request.
//! - The caller-driven mode (`infer_engine_step`), in which an engine and its
//!   requests may only be used by one thread at a time, is left to `infer-sys`.

use std::ffi::CString;
use std::fmt;
use std::os::raw::c_char;
use std::path::Path;
use std::ptr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

pub use infer_sys as sys;

/// The status codes of `infer_status`.
#[derive(Debug, Copy, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Status {
    Io,
    Format,
    Unsupported,
    OutOfMemory,
    InvalidArgument,
    Cancelled,
    Backend,
    Internal,
    BufferTooSmall,
    NotFound,
    Busy,
    /// A status this binding does not know (a newer library).
    Other(i32),
}

impl Status {
    pub fn from_raw(code: i32) -> Status {
        match code {
            sys::INFER_ERR_IO => Status::Io,
            sys::INFER_ERR_FORMAT => Status::Format,
            sys::INFER_ERR_UNSUPPORTED => Status::Unsupported,
            sys::INFER_ERR_OUT_OF_MEMORY => Status::OutOfMemory,
            sys::INFER_ERR_INVALID_ARGUMENT => Status::InvalidArgument,
            sys::INFER_ERR_CANCELLED => Status::Cancelled,
            sys::INFER_ERR_BACKEND => Status::Backend,
            sys::INFER_ERR_INTERNAL => Status::Internal,
            sys::INFER_ERR_BUFFER_TOO_SMALL => Status::BufferTooSmall,
            sys::INFER_ERR_NOT_FOUND => Status::NotFound,
            sys::INFER_ERR_BUSY => Status::Busy,
            other => Status::Other(other),
        }
    }
}

/// A failed libinfer call: the status and `infer_last_error()`'s message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    pub status: Status,
    pub message: String,
}

impl Error {
    fn last(code: i32) -> Error {
        let msg = unsafe { cstr(sys::infer_last_error()) };
        Error { status: Status::from_raw(code), message: msg }
    }
    fn new(status: Status, message: impl Into<String>) -> Error {
        Error { status, message: message.into() }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}: {}", self.status, self.message)
    }
}

impl std::error::Error for Error {}

pub type Result<T> = std::result::Result<T, Error>;

mod convert;
use convert::{check, cstr, cstring, sized_string, timeout_ms};

/// `infer_version()` of the linked library.
pub fn version() -> String {
    unsafe { cstr(sys::infer_version()) }
}

/// `infer_version_number()` of the linked library.
pub fn version_number() -> u32 {
    unsafe { sys::infer_version_number() }
}

/// Checks that the linked library has the major version these bindings were
/// written for and is not older than them. Model::load calls it.
pub fn check_version() -> Result<()> {
    let v = version_number();
    if v / 10000 != sys::INFER_VERSION_MAJOR || v < sys::INFER_VERSION_NUMBER {
        return Err(Error::new(
            Status::Unsupported,
            format!("libinfer {} is linked; these bindings need {}.x >= {}", version(),
                    sys::INFER_VERSION_MAJOR, sys::INFER_VERSION_NUMBER),
        ));
    }
    Ok(())
}

/// Names of the built-in chat templates.
pub fn chat_templates() -> Vec<String> {
    unsafe { (0..sys::infer_chat_template_count()).map(|i| cstr(sys::infer_chat_template_name(i))).collect() }
}

// ---- models --------------------------------------------------------------------------------

struct ModelHandle(*mut sys::infer_model);

// infer.h: a model is immutable once loaded; every function taking it may be
// called concurrently from many threads.
unsafe impl Send for ModelHandle {}
unsafe impl Sync for ModelHandle {}

impl Drop for ModelHandle {
    fn drop(&mut self) {
        unsafe { sys::infer_model_free(self.0) }
    }
}

/// Model loading options (`infer_model_params`).
#[derive(Debug, Clone)]
pub struct ModelParams {
    pub use_mmap: bool,
    pub vocab_only: bool,
    /// Since 1.6: N > 1 loads this process's 1/N of the weights as one rank of
    /// an MPI job of N ranks (`mpirun -np N`); 0 or 1: the whole model. The
    /// host's own MPI communicator (`mpi_comm`) is not offered here.
    pub tensor_parallel: i32,
}

impl Default for ModelParams {
    fn default() -> Self {
        ModelParams { use_mmap: true, vocab_only: false, tensor_parallel: 0 }
    }
}

/// `infer_model_info`.
#[derive(Debug, Clone)]
pub struct ModelInfo {
    pub architecture: String,
    pub name: String,
    pub tokenizer: String,
    pub n_vocab: i32,
    pub n_ctx_train: i32,
    pub n_embd: i32,
    pub n_layer: i32,
    pub n_head: i32,
    pub n_head_kv: i32,
    pub n_params: u64,
    pub n_bytes: u64,
    pub n_tensors: i32,
    pub bos_token: Option<i32>,
    pub eos_token: Option<i32>,
}

/// A chat message for [`Model::apply_chat_template`].
#[derive(Debug, Clone)]
pub struct ChatMessage<'a> {
    pub role: &'a str,
    pub content: &'a str,
}

/// A loaded GGUF model; cheap to clone and share across threads.
#[derive(Clone)]
pub struct Model {
    inner: Arc<ModelHandle>,
}

impl fmt::Debug for Model {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Model").field("handle", &self.inner.0).finish()
    }
}

impl Model {
    pub fn load(path: impl AsRef<Path>) -> Result<Model> {
        Model::load_with(path, &ModelParams::default())
    }

    pub fn load_with(path: impl AsRef<Path>, params: &ModelParams) -> Result<Model> {
        check_version()?;
        use std::os::unix::ffi::OsStrExt;
        let p = CString::new(path.as_ref().as_os_str().as_bytes())
            .map_err(|_| Error::new(Status::InvalidArgument, "path contains a NUL byte"))?;
        let mut mp = unsafe {
            let mut mp = std::mem::MaybeUninit::<sys::infer_model_params>::uninit();
            sys::infer_model_params_init(mp.as_mut_ptr());
            mp.assume_init()
        };
        mp.use_mmap = params.use_mmap as i32;
        mp.vocab_only = params.vocab_only as i32;
        mp.tensor_parallel = params.tensor_parallel;
        let mut out = ptr::null_mut();
        check(unsafe { sys::infer_model_load(p.as_ptr(), &mp, &mut out) })?;
        Ok(Model { inner: Arc::new(ModelHandle(out)) })
    }

    /// The raw handle (valid while this Model or a clone lives).
    pub fn as_ptr(&self) -> *mut sys::infer_model {
        self.inner.0
    }

    /// This process's rank in the model's tensor-parallel group (0 for a whole model).
    pub fn tp_rank(&self) -> i32 {
        unsafe { sys::infer_model_tp_rank(self.inner.0) }
    }

    /// The model's tensor-parallel group size (1 for a whole model).
    pub fn tp_size(&self) -> i32 {
        unsafe { sys::infer_model_tp_size(self.inner.0) }
    }

    /// On ranks 1..N-1 of a tensor-parallel model: runs rank 0's engine passes
    /// on this rank's weights until rank 0 drops its engine (blocks). `params`
    /// must be rank 0's. An error on rank 0 or for a whole model.
    pub fn follow(&self, params: &EngineParams) -> Result<()> {
        let p = params.raw();
        check(unsafe { sys::infer_engine_follow(self.inner.0, &p) })
    }

    pub fn info(&self) -> ModelInfo {
        unsafe {
            let mut i = std::mem::MaybeUninit::<sys::infer_model_info>::zeroed();
            sys::infer_model_info_init(i.as_mut_ptr());
            let mut i = i.assume_init();
            check(sys::infer_model_get_info(self.inner.0, &mut i)).expect("infer_model_get_info");
            ModelInfo {
                architecture: cstr(i.architecture),
                name: cstr(i.name),
                tokenizer: cstr(i.tokenizer),
                n_vocab: i.n_vocab,
                n_ctx_train: i.n_ctx_train,
                n_embd: i.n_embd,
                n_layer: i.n_layer,
                n_head: i.n_head,
                n_head_kv: i.n_head_kv,
                n_params: i.n_params,
                n_bytes: i.n_bytes,
                n_tensors: i.n_tensors,
                bos_token: if i.bos_token < 0 { None } else { Some(i.bos_token) },
                eos_token: if i.eos_token < 0 { None } else { Some(i.eos_token) },
            }
        }
    }

    /// A metadata value as text; None when the key is absent.
    pub fn meta(&self, key: &str) -> Result<Option<String>> {
        let k = cstring(key, "key")?;
        match sized_string(|b, n, nd| unsafe { sys::infer_model_meta(self.inner.0, k.as_ptr(), b, n, nd) }) {
            Ok(s) => Ok(Some(s)),
            Err(e) if e.status == Status::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Token ids of `text`. add_bos None: as the vocabulary says.
    pub fn tokenize(&self, text: &str, add_bos: Option<bool>, special: bool) -> Result<Vec<i32>> {
        let bos = match add_bos {
            None => -1,
            Some(b) => b as i32,
        };
        let mut cap = text.len() + 8;
        loop {
            let mut v = vec![0i32; cap];
            let mut n = 0usize;
            let st = unsafe {
                sys::infer_tokenize(self.inner.0, text.as_ptr() as *const c_char, text.len(), bos,
                                    special as i32, v.as_mut_ptr(), cap, &mut n)
            };
            if st == sys::INFER_ERR_BUFFER_TOO_SMALL && n > cap {
                cap = n;
                continue;
            }
            check(st)?;
            v.truncate(n);
            return Ok(v);
        }
    }

    pub fn detokenize(&self, tokens: &[i32], render_special: bool) -> Result<String> {
        sized_string(|b, n, nd| unsafe {
            sys::infer_detokenize(self.inner.0, tokens.as_ptr(), tokens.len(), render_special as i32, b, n, nd)
        })
    }

    /// The bytes one token stands for (may be part of a UTF-8 sequence).
    pub fn token_piece(&self, token: i32) -> Result<Vec<u8>> {
        let mut buf = vec![0u8; 64];
        let mut n = 0usize;
        let mut st = unsafe {
            sys::infer_token_piece(self.inner.0, token, buf.as_mut_ptr() as *mut c_char, buf.len(), &mut n)
        };
        if st == sys::INFER_ERR_BUFFER_TOO_SMALL {
            buf.resize(n, 0);
            st = unsafe {
                sys::infer_token_piece(self.inner.0, token, buf.as_mut_ptr() as *mut c_char, buf.len(), &mut n)
            };
        }
        check(st)?;
        buf.truncate(n);
        Ok(buf)
    }

    /// One-call greedy or sampled generation with a private engine
    /// (`infer_generate`): the text after the prompt. Uses max_tokens and the
    /// sampling fields of `params`; stop strings, logit bias and the other
    /// request fields need an [`Engine`].
    pub fn generate(&self, prompt: &str, params: &GenerateParams) -> Result<String> {
        let p = cstring(prompt, "prompt")?;
        let sp = params.sampling();
        let mut out: *mut c_char = ptr::null_mut();
        check(unsafe { sys::infer_generate(self.inner.0, p.as_ptr(), &sp, params.max_tokens, &mut out) })?;
        let s = unsafe { cstr(out) };
        unsafe { sys::infer_free(out as *mut _) };
        Ok(s)
    }

    /// Embeddings of `texts` with the model's pooling, L2-normalized: one
    /// vector per text (`infer_embed`).
    pub fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>> {
        self.embed_with(texts, &EmbedOptions::default())
    }

    /// [`Model::embed`] with options (pooling, normalization, Matryoshka
    /// dimensions, truncation). With `Pooling::None`, one row per token of
    /// every text, in order.
    pub fn embed_with(&self, texts: &[&str], options: &EmbedOptions) -> Result<Vec<Vec<f32>>> {
        let ptrs: Vec<*const c_char> = texts.iter().map(|t| t.as_ptr() as *const c_char).collect();
        let lens: Vec<usize> = texts.iter().map(|t| t.len()).collect();
        let n = i32::try_from(texts.len()).map_err(|_| Error::new(Status::InvalidArgument, "too many texts"))?;
        let p = options.raw();
        let mut out: *mut sys::infer_embeddings = ptr::null_mut();
        check(unsafe { sys::infer_embed(self.inner.0, ptrs.as_ptr(), lens.as_ptr(), n, &p, &mut out) })?;
        embeddings_rows(out)
    }

    /// Relevance scores of `documents` to `query` (a reranker's raw score,
    /// higher is more relevant), one per document (`infer_rerank`). A model
    /// without a classifier head: `Status::InvalidArgument`.
    pub fn rerank(&self, query: &str, documents: &[&str]) -> Result<Vec<f32>> {
        let q = cstring(query, "query")?;
        let docs: Vec<CString> = documents.iter().map(|d| cstring(d, "document")).collect::<Result<_>>()?;
        let ptrs: Vec<*const c_char> = docs.iter().map(|d| d.as_ptr()).collect();
        let n = i32::try_from(docs.len()).map_err(|_| Error::new(Status::InvalidArgument, "too many documents"))?;
        let p = EmbedOptions::default().raw();
        let mut out: *mut sys::infer_embeddings = ptr::null_mut();
        check(unsafe { sys::infer_rerank(self.inner.0, q.as_ptr(), ptrs.as_ptr(), n, &p, &mut out) })?;
        Ok(embeddings_rows(out)?.into_iter().map(|r| r.first().copied().unwrap_or(0.0)).collect())
    }

    /// Renders a conversation with a chat template (None: the model's own).
    pub fn apply_chat_template(&self, messages: &[ChatMessage<'_>], template: Option<&str>,
                               add_generation_prompt: bool) -> Result<String> {
        let owned: Vec<(CString, CString)> = messages
            .iter()
            .enumerate()
            .map(|(i, m)| Ok((cstring(m.role, &format!("messages[{}].role", i))?,
                              cstring(m.content, &format!("messages[{}].content", i))?)))
            .collect::<Result<_>>()?;
        let raw: Vec<sys::infer_chat_message> = owned
            .iter()
            .map(|(r, c)| sys::infer_chat_message { role: r.as_ptr(), content: c.as_ptr() })
            .collect();
        let t = template.map(|t| cstring(t, "template")).transpose()?;
        let tp = t.as_ref().map_or(ptr::null(), |t| t.as_ptr());
        sized_string(|b, n, nd| unsafe {
            sys::infer_chat_apply_template(self.inner.0, tp, raw.as_ptr(), raw.len(),
                                           add_generation_prompt as i32, b, n, nd)
        })
    }
}

// ---- engines -------------------------------------------------------------------------------

/// How token vectors become one embedding (`infer_pooling`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pooling {
    /// The model's own (its GGUF pooling_type; else mean for encoders, last for decoders).
    Default = -1,
    None = 0,
    Mean = 1,
    Cls = 2,
    Last = 3,
    Rank = 4,
}

/// Options of [`Model::embed_with`] (`infer_embed_params`).
#[derive(Debug, Clone)]
pub struct EmbedOptions {
    pub pooling: Pooling,
    /// L2-normalize each vector (default true).
    pub normalize: bool,
    /// Keep the first N values (Matryoshka), 0: all.
    pub dimensions: i32,
    /// Cut inputs longer than the context instead of failing.
    pub truncate: bool,
    /// 0: all cores.
    pub n_threads: i32,
}

impl Default for EmbedOptions {
    fn default() -> Self {
        EmbedOptions { pooling: Pooling::Default, normalize: true, dimensions: 0, truncate: false, n_threads: 0 }
    }
}

impl EmbedOptions {
    fn raw(&self) -> sys::infer_embed_params {
        let mut p = std::mem::MaybeUninit::<sys::infer_embed_params>::uninit();
        let mut p = unsafe {
            sys::infer_embed_params_init(p.as_mut_ptr());
            p.assume_init()
        };
        p.pooling = self.pooling as i32;
        p.normalize = if self.normalize { 2 } else { 0 };
        p.dimensions = self.dimensions;
        p.truncate = self.truncate as i32;
        p.n_threads = self.n_threads;
        p
    }
}

/// The rows of a finished infer_embeddings handle, which is freed.
fn embeddings_rows(h: *mut sys::infer_embeddings) -> Result<Vec<Vec<f32>>> {
    let rows = unsafe { sys::infer_embeddings_rows(h) } as usize;
    let dim = unsafe { sys::infer_embeddings_dim(h) } as usize;
    let mut flat = vec![0f32; rows * dim];
    let st = unsafe { sys::infer_embeddings_copy(h, flat.as_mut_ptr(), flat.len(), ptr::null_mut()) };
    let r = check(st);
    unsafe { sys::infer_embeddings_free(h) };
    r?;
    Ok(if dim == 0 { vec![Vec::new(); rows] } else { flat.chunks(dim).map(|c| c.to_vec()).collect() })
}

/// Engine options (`infer_engine_params`); Default is the library's defaults.
#[derive(Debug, Clone)]
pub struct EngineParams {
    pub n_threads: i32,
    pub kv_budget_bytes: u64,
    pub kv_blocks: i32,
    pub kv_block_size: i32,
    pub max_seqs: i32,
    pub max_batch_tokens: i32,
    pub n_ctx: i32,
    pub prefix_caching: bool,
    /// Since 1.6: 0 (the model's group) or the model's tensor_parallel.
    pub tensor_parallel: i32,
    /// Since 1.6: a tensor-parallel collective waiting longer fails (0: 60000).
    pub tp_timeout_ms: i32,
}

impl Default for EngineParams {
    fn default() -> Self {
        let p = raw_engine_params();
        EngineParams {
            n_threads: p.n_threads,
            kv_budget_bytes: p.kv_budget_bytes,
            kv_blocks: p.kv_blocks,
            kv_block_size: p.kv_block_size,
            max_seqs: p.max_seqs,
            max_batch_tokens: p.max_batch_tokens,
            n_ctx: p.n_ctx,
            prefix_caching: p.prefix_caching != 0,
            tensor_parallel: p.tensor_parallel,
            tp_timeout_ms: p.tp_timeout_ms,
        }
    }
}

impl EngineParams {
    fn raw(&self) -> sys::infer_engine_params {
        let mut p = raw_engine_params();
        p.n_threads = self.n_threads;
        p.kv_budget_bytes = self.kv_budget_bytes;
        p.kv_blocks = self.kv_blocks;
        p.kv_block_size = self.kv_block_size;
        p.max_seqs = self.max_seqs;
        p.max_batch_tokens = self.max_batch_tokens;
        p.n_ctx = self.n_ctx;
        p.prefix_caching = self.prefix_caching as i32;
        p.tensor_parallel = self.tensor_parallel;
        p.tp_timeout_ms = self.tp_timeout_ms;
        p
    }
}

fn raw_engine_params() -> sys::infer_engine_params {
    unsafe {
        let mut p = std::mem::MaybeUninit::<sys::infer_engine_params>::zeroed();
        sys::infer_engine_params_init(p.as_mut_ptr());
        p.assume_init()
    }
}

/// Generation options: sampling (`infer_sampling_params`) and request fields.
#[derive(Debug, Clone)]
pub struct GenerateParams {
    pub max_tokens: i32,
    pub temperature: f32,
    pub top_k: i32,
    pub top_p: f32,
    pub min_p: f32,
    pub repeat_penalty: f32,
    pub seed: u64,
    pub stop: Vec<String>,
    pub ignore_eos: bool,
    /// None: as the vocabulary says.
    pub add_bos: Option<bool>,
    pub parse_special: bool,
    pub priority: i32,
    /// (token, bias) added to the logits; f32::NEG_INFINITY bans a token.
    pub logit_bias: Vec<(i32, f32)>,
}

impl Default for GenerateParams {
    fn default() -> Self {
        let s = raw_sampling();
        GenerateParams {
            max_tokens: 64,
            temperature: s.temperature,
            top_k: s.top_k,
            top_p: s.top_p,
            min_p: s.min_p,
            repeat_penalty: s.repeat_penalty,
            seed: s.seed,
            stop: Vec::new(),
            ignore_eos: false,
            add_bos: None,
            parse_special: false,
            priority: 0,
            logit_bias: Vec::new(),
        }
    }
}

fn raw_sampling() -> sys::infer_sampling_params {
    unsafe {
        let mut p = std::mem::MaybeUninit::<sys::infer_sampling_params>::zeroed();
        sys::infer_sampling_params_init(p.as_mut_ptr());
        p.assume_init()
    }
}

impl GenerateParams {
    fn sampling(&self) -> sys::infer_sampling_params {
        let mut s = raw_sampling();
        s.temperature = self.temperature;
        s.top_k = self.top_k;
        s.top_p = self.top_p;
        s.min_p = self.min_p;
        s.repeat_penalty = self.repeat_penalty;
        s.seed = self.seed;
        s
    }
}

struct EngineHandle {
    raw: *mut sys::infer_engine,
    _model: Model, // the model must outlive the engine
}

// A started engine: submit/cancel/stats/next_* may be called from any thread.
unsafe impl Send for EngineHandle {}
unsafe impl Sync for EngineHandle {}

impl Drop for EngineHandle {
    fn drop(&mut self) {
        unsafe { sys::infer_engine_free(self.raw) }
    }
}

/// KV cache and scheduler, stepped by libinfer's background thread.
/// Dropping it cancels what is still running: requests stay readable, and a
/// live stream or wait_text of one ends with Err(Cancelled).
pub struct Engine {
    inner: EngineHandle,
}

/// Engine counters (`infer_engine_stats`, the commonly used fields).
#[derive(Debug, Clone)]
pub struct EngineStats {
    pub n_running: i32,
    pub n_waiting: i32,
    pub kv_blocks_total: i32,
    pub kv_blocks_used: i32,
    pub n_steps: u64,
    pub n_prompt_tokens: u64,
    pub n_generated_tokens: u64,
    pub n_finished: u64,
    pub prefix_hit_tokens: u64,
    pub uptime_s: f64,
    pub generated_tokens_per_s: f64,
    /// Since 1.6: this rank's tensor-parallel collectives (0 for a whole model).
    pub tp_comm_calls: u64,
    pub tp_comm_bytes: u64,
    pub tp_comm_seconds: f64,
}

impl Engine {
    pub fn new(model: &Model, params: &EngineParams) -> Result<Engine> {
        let p = params.raw();
        let mut raw = ptr::null_mut();
        check(unsafe { sys::infer_engine_create(model.as_ptr(), &p, &mut raw) })?;
        let inner = EngineHandle { raw, _model: model.clone() };
        check(unsafe { sys::infer_engine_start(raw) })?;
        Ok(Engine { inner })
    }

    /// Queues a request and returns at once.
    pub fn submit(&self, prompt: &str, params: &GenerateParams) -> Result<Request> {
        let keep = Keep::new(Prompt::Text(prompt), params)?;
        let rp = keep.raw();
        let mut out = ptr::null_mut();
        check(unsafe { sys::infer_submit(self.inner.raw, &rp, &mut out) })?;
        Ok(Request::from_raw(out, keep, self.inner._model.clone()))
    }

    /// Queues a request from token ids.
    pub fn submit_tokens(&self, tokens: &[i32], params: &GenerateParams) -> Result<Request> {
        let keep = Keep::new(Prompt::Tokens(tokens), params)?;
        let rp = keep.raw();
        let mut out = ptr::null_mut();
        check(unsafe { sys::infer_submit(self.inner.raw, &rp, &mut out) })?;
        Ok(Request::from_raw(out, keep, self.inner._model.clone()))
    }

    /// The text generated after `prompt`.
    pub fn generate(&self, prompt: &str, params: &GenerateParams) -> Result<String> {
        self.submit(prompt, params)?.wait_text()
    }

    /// Many prompts at once (the engine batches them); results in order.
    pub fn generate_batch<S: AsRef<str>>(&self, prompts: &[S], params: &GenerateParams) -> Result<Vec<String>> {
        let reqs: Vec<Request> = prompts.iter().map(|p| self.submit(p.as_ref(), params)).collect::<Result<_>>()?;
        reqs.into_iter().map(|r| r.wait_text()).collect()
    }

    /// An iterator over the generated text pieces (dropping it cancels).
    pub fn stream(&self, prompt: &str, params: &GenerateParams) -> Result<Stream> {
        Ok(self.submit(prompt, params)?.into_stream())
    }

    pub fn wait_idle(&self) -> Result<()> {
        check(unsafe { sys::infer_engine_wait_idle(self.inner.raw) })
    }

    pub fn stats(&self) -> Result<EngineStats> {
        let s = unsafe {
            let mut s = std::mem::MaybeUninit::<sys::infer_engine_stats>::zeroed();
            sys::infer_engine_stats_init(s.as_mut_ptr());
            let mut s = s.assume_init();
            check(sys::infer_engine_get_stats(self.inner.raw, &mut s))?;
            s
        };
        Ok(EngineStats {
            n_running: s.n_running,
            n_waiting: s.n_waiting,
            kv_blocks_total: s.kv_blocks_total,
            kv_blocks_used: s.kv_blocks_used,
            n_steps: s.n_steps,
            n_prompt_tokens: s.n_prompt_tokens,
            n_generated_tokens: s.n_generated_tokens,
            n_finished: s.n_finished,
            prefix_hit_tokens: s.prefix_hit_tokens,
            uptime_s: s.uptime_s,
            generated_tokens_per_s: s.generated_tokens_per_s,
            tp_comm_calls: s.tp_comm_calls,
            tp_comm_bytes: s.tp_comm_bytes,
            tp_comm_seconds: s.tp_comm_seconds,
        })
    }
}

// ---- requests ------------------------------------------------------------------------------

enum Prompt<'a> {
    Text(&'a str),
    Tokens(&'a [i32]),
}

/// Everything the request parameters point to, owned.
struct Keep {
    prompt: Vec<u8>,
    tokens: Vec<i32>,
    is_tokens: bool,
    stops: Vec<CString>,
    stop_ptrs: Vec<*const c_char>,
    sampling: Box<sys::infer_sampling_params>,
    _bias_tokens: Vec<i32>,
    _bias_values: Vec<f32>,
    params: GenerateParams,
}

// Keep holds pointers only into its own heap data.
unsafe impl Send for Keep {}
unsafe impl Sync for Keep {}

impl Keep {
    fn new(prompt: Prompt<'_>, params: &GenerateParams) -> Result<Keep> {
        let stops: Vec<CString> = params.stop.iter().enumerate()
            .map(|(i, s)| cstring(s, &format!("stop[{}]", i))).collect::<Result<_>>()?;
        let stop_ptrs = stops.iter().map(|s| s.as_ptr()).collect();
        let (p, t, is_tokens) = match prompt {
            Prompt::Text(s) => (s.as_bytes().to_vec(), Vec::new(), false),
            Prompt::Tokens(t) => (Vec::new(), t.to_vec(), true),
        };
        let bias_tokens: Vec<i32> = params.logit_bias.iter().map(|b| b.0).collect();
        let bias_values: Vec<f32> = params.logit_bias.iter().map(|b| b.1).collect();
        let mut sampling = Box::new(params.sampling());
        if !bias_tokens.is_empty() {
            sampling.logit_bias_tokens = bias_tokens.as_ptr();
            sampling.logit_bias_values = bias_values.as_ptr();
            sampling.n_logit_bias = bias_tokens.len();
        }
        Ok(Keep { prompt: p, tokens: t, is_tokens, stops, stop_ptrs, sampling, _bias_tokens: bias_tokens, _bias_values: bias_values,
                  params: params.clone() })
    }

    fn raw(&self) -> sys::infer_request_params {
        let mut rp = unsafe {
            let mut rp = std::mem::MaybeUninit::<sys::infer_request_params>::zeroed();
            sys::infer_request_params_init(rp.as_mut_ptr());
            rp.assume_init()
        };
        if self.is_tokens {
            rp.prompt_tokens = self.tokens.as_ptr();
            rp.n_prompt_tokens = self.tokens.len();
        } else {
            // An empty prompt is BOS alone; prompt_len 0 means strlen, so point at "".
            rp.prompt = if self.prompt.is_empty() { b"\0".as_ptr() as *const c_char } else {
                self.prompt.as_ptr() as *const c_char };
            rp.prompt_len = self.prompt.len();
        }
        rp.max_tokens = self.params.max_tokens;
        rp.sampling = &*self.sampling;
        rp.stop = if self.stops.is_empty() { ptr::null() } else { self.stop_ptrs.as_ptr() };
        rp.n_stop = self.stops.len();
        rp.ignore_eos = self.params.ignore_eos as i32;
        rp.add_bos = match self.params.add_bos {
            None => -1,
            Some(b) => b as i32,
        };
        rp.parse_special = self.params.parse_special as i32;
        rp.priority = self.params.priority;
        rp
    }
}

struct RequestHandle {
    raw: *mut sys::infer_request,
    /// cancel() was called on this request (a CANCELLED finish is then the
    /// caller's own, not an engine dropped under it).
    cancel_asked: AtomicBool,
    _keep: Keep,
    _model: Model, // a request outlives its engine (infer.h); keep the model too, to be safe
}

// Requests of a started engine: cancel, stats, text and next_* are allowed
// from any thread; freeing needs exclusive access, which Drop has.
unsafe impl Send for RequestHandle {}
unsafe impl Sync for RequestHandle {}

impl Drop for RequestHandle {
    fn drop(&mut self) {
        unsafe { sys::infer_request_free(self.raw) } // cancels an unfinished request
    }
}

/// How a request ended.
#[derive(Debug, Copy, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum FinishReason {
    None,
    Stop,
    Length,
    Cancelled,
    Error,
    Other(i32),
}

impl FinishReason {
    fn from_raw(v: i32) -> FinishReason {
        match v {
            sys::INFER_FINISH_NONE => FinishReason::None,
            sys::INFER_FINISH_STOP => FinishReason::Stop,
            sys::INFER_FINISH_LENGTH => FinishReason::Length,
            sys::INFER_FINISH_CANCELLED => FinishReason::Cancelled,
            sys::INFER_FINISH_ERROR => FinishReason::Error,
            o => FinishReason::Other(o),
        }
    }
}

/// `infer_request_stats`.
#[derive(Debug, Clone)]
pub struct RequestStats {
    pub finish_reason: FinishReason,
    pub n_prompt_tokens: i32,
    pub n_cached_tokens: i32,
    pub n_generated_tokens: i32,
    pub queue_ms: f64,
    pub ttft_ms: f64,
    pub tpot_ms: f64,
    pub total_ms: f64,
    pub prefill_tokens_per_s: f64,
    pub decode_tokens_per_s: f64,
}

/// One generation.
pub struct Request {
    inner: Arc<RequestHandle>,
    buf: Vec<u8>,
}

/// Cancels a request from any thread; keeps the handle alive while it lives.
#[derive(Clone)]
pub struct Canceller {
    inner: Arc<RequestHandle>,
}

impl Canceller {
    pub fn cancel(&self) {
        self.inner.cancel_asked.store(true, Ordering::SeqCst);
        unsafe { sys::infer_request_cancel(self.inner.raw) };
    }
}

const POLL: Duration = Duration::from_millis(100);

impl Request {
    fn from_raw(raw: *mut sys::infer_request, keep: Keep, model: Model) -> Request {
        Request { inner: Arc::new(RequestHandle { raw, cancel_asked: AtomicBool::new(false), _keep: keep, _model: model }),
                  buf: vec![0u8; 4096] }
    }

    pub fn cancel(&self) {
        self.inner.cancel_asked.store(true, Ordering::SeqCst);
        unsafe { sys::infer_request_cancel(self.inner.raw) };
    }

    pub fn canceller(&self) -> Canceller {
        Canceller { inner: self.inner.clone() }
    }

    pub fn stats(&self) -> Result<RequestStats> {
        let s = unsafe {
            let mut s = std::mem::MaybeUninit::<sys::infer_request_stats>::zeroed();
            sys::infer_request_stats_init(s.as_mut_ptr());
            let mut s = s.assume_init();
            check(sys::infer_request_get_stats(self.inner.raw, &mut s))?;
            s
        };
        Ok(RequestStats {
            finish_reason: FinishReason::from_raw(s.finish_reason),
            n_prompt_tokens: s.n_prompt_tokens,
            n_cached_tokens: s.n_cached_tokens,
            n_generated_tokens: s.n_generated_tokens,
            queue_ms: s.queue_ms,
            ttft_ms: s.ttft_ms,
            tpot_ms: s.tpot_ms,
            total_ms: s.total_ms,
            prefill_tokens_per_s: s.prefill_tokens_per_s,
            decode_tokens_per_s: s.decode_tokens_per_s,
        })
    }

    /// The text generated so far.
    pub fn text(&self) -> Result<String> {
        let raw = self.inner.raw;
        sized_string(|b, n, nd| unsafe { sys::infer_request_text(raw, b, n, nd) })
    }

    /// Waits up to `timeout` (None: no limit) for new text; returns (text,
    /// finished). Never a split UTF-8 sequence; "" on a timeout.
    pub fn next_text(&mut self, timeout: Option<Duration>) -> Result<(String, bool)> {
        let ms = timeout_ms(timeout);
        let mut n = 0usize;
        let mut fin = 0i32;
        check(unsafe {
            sys::infer_request_next_text(self.inner.raw, ms, self.buf.as_mut_ptr() as *mut c_char, self.buf.len(),
                                         &mut n, &mut fin)
        })?;
        let s = std::str::from_utf8(&self.buf[..n])
            .map_err(|e| Error::new(Status::Internal, format!("split UTF-8 from next_text: {}", e)))?
            .to_owned();
        Ok((s, fin != 0))
    }

    fn failure(&self) -> Result<()> {
        let st = unsafe {
            let mut s = std::mem::MaybeUninit::<sys::infer_request_stats>::zeroed();
            sys::infer_request_stats_init(s.as_mut_ptr());
            let mut s = s.assume_init();
            check(sys::infer_request_get_stats(self.inner.raw, &mut s))?;
            s
        };
        if st.finish_reason == sys::INFER_FINISH_ERROR {
            return Err(Error { status: Status::from_raw(st.status),
                               message: unsafe { cstr(sys::infer_request_error(self.inner.raw)) } });
        }
        if st.finish_reason == sys::INFER_FINISH_CANCELLED && !self.inner.cancel_asked.load(Ordering::SeqCst) {
            // Not this request's cancel(): its engine was dropped (or stopped) under it.
            return Err(Error::new(Status::Cancelled, format!(
                "the request was cancelled before it finished: its engine was dropped or stopped; \
                 {} tokens were generated", st.n_generated_tokens)));
        }
        Ok(())
    }

    /// Waits for the end and returns the whole text.
    pub fn wait_text(self) -> Result<String> {
        loop {
            // infer_request_wait: no wake-up per token while the request runs.
            let mut fin = 0i32;
            check(unsafe { sys::infer_request_wait(self.inner.raw, timeout_ms(Some(POLL)), &mut fin) })?;
            if fin != 0 {
                break;
            }
        }
        self.failure()?;
        self.text()
    }

    /// Borrowing iterator over the text pieces still to come.
    pub fn pieces(&mut self) -> Pieces<'_> {
        Pieces { req: self, done: false }
    }

    /// Owning iterator; dropping it cancels the request.
    pub fn into_stream(self) -> Stream {
        Stream { req: self, done: false }
    }
}

fn next_piece(req: &mut Request, done: &mut bool) -> Option<Result<String>> {
    while !*done {
        match req.next_text(Some(POLL)) {
            Err(e) => {
                *done = true;
                return Some(Err(e));
            }
            Ok((piece, finished)) => {
                if finished {
                    *done = true;
                    if let Err(e) = req.failure() {
                        return Some(Err(e));
                    }
                }
                if !piece.is_empty() {
                    return Some(Ok(piece));
                }
            }
        }
    }
    None
}

/// Iterator over a request's text pieces (complete UTF-8).
pub struct Pieces<'a> {
    req: &'a mut Request,
    done: bool,
}

impl Iterator for Pieces<'_> {
    type Item = Result<String>;
    fn next(&mut self) -> Option<Result<String>> {
        next_piece(self.req, &mut self.done)
    }
}

/// Owning iterator over a request's text pieces; dropping it cancels.
pub struct Stream {
    req: Request,
    done: bool,
}

impl Stream {
    pub fn request(&self) -> &Request {
        &self.req
    }
}

impl Iterator for Stream {
    type Item = Result<String>;
    fn next(&mut self) -> Option<Result<String>> {
        next_piece(&mut self.req, &mut self.done)
    }
}

impl Drop for Stream {
    fn drop(&mut self) {
        if !self.done {
            self.req.cancel();
        }
    }
}

#[cfg(test)]
mod static_checks {
    use super::*;
    fn send_sync<T: Send + Sync>() {}
    #[test]
    fn thread_safety_markers() {
        send_sync::<Model>();
        send_sync::<Engine>();
        send_sync::<Request>();
        send_sync::<Stream>();
        send_sync::<Canceller>();
    }
}
