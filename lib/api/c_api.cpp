// The C API: handles, parameter translation and error translation, plus the
// glue only the C boundary needs (callbacks disarmed when their handle goes,
// grammars bound to the vocabulary, text handed out in whole UTF-8
// characters, the memory check before an engine is made). Generation itself
// is the C++ core's; every exception becomes an infer_status plus a
// thread-local message.
#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <cstring>
#ifdef __GLIBC__
#include <malloc.h>
#endif
#include <atomic>
#include <memory>
#include <mutex>
#include <new>
#include <shared_mutex>
#include <string>
#include <thread>
#include <vector>

#include "api/api_util.h"
#include "core/error.h"
#include "core/log.h"
#include "core/sysmem.h"
#include "dist/comm.h"
#include "model/tp.h"
#include "engine/backends.h"
#include "engine/embed.h"
#include "engine/engine.h"
#include "engine/engine_thread.h"
#include "engine/kv_budget.h"
#include "engine/metrics.h"
#include "engine/prompt.h"
#include "infer/infer.h"
#include "model/model.h"
#include "sampling/grammar.h"

static_assert(static_cast<int>(infer::Status::BufferTooSmall) == INFER_ERR_BUFFER_TOO_SMALL);
static_assert(static_cast<int>(infer::Status::Busy) == INFER_ERR_BUSY);
static_assert(static_cast<int>(infer::FinishReason::Error) == INFER_FINISH_ERROR);
static_assert(infer::kLogitsLogprobs == INFER_LOGITS_LOGPROBS);
static_assert(static_cast<int>(infer::KvType::I8) == INFER_KV_INT8 && static_cast<int>(infer::KvType::F16) == INFER_KV_F16);

struct infer_model {
  std::unique_ptr<infer::Model> model;
  std::string arch, name, tokenizer;
};

struct infer_engine {
  const infer_model* model;
  std::unique_ptr<infer::Engine> engine;
  std::mutex thread_mu;                         // guards starting / stopping `thread`
  std::unique_ptr<infer::EngineThread> thread;  // background stepping, when started
  std::atomic<bool> threaded{false};
  // infer_engine_stop(drain=1) closes submissions while it drains (else
  // threads that keep submitting keep it from ever finishing): submits hold
  // submit_mu shared, the drain sets `draining` holding it exclusively.
  std::shared_mutex submit_mu;
  bool draining = false;  // guarded by submit_mu
  ~infer_engine() { thread.reset(); }           // stop (cancel) before the engine goes
};

// What the token callback needs; shared with the engine's closure so a freed
// handle is never called back. The engine thread runs the callback holding
// `mu`, and infer_request_free clears `alive` under it: once free has
// returned, no callback is running with the handle nor will one start (a
// callback that frees its own request is recognised by `caller` and does not
// wait for itself).
struct CallbackState {
  infer_request* handle = nullptr;
  infer_token_fn fn = nullptr;
  void* user = nullptr;
  std::mutex mu;
  bool alive = true;                           // guarded by mu
  std::atomic<std::thread::id> caller{};       // the thread running fn, if any
};

namespace {

// The engine-side closure for a caller's on_token.
infer::TokenCallback token_callback(const std::shared_ptr<CallbackState>& cb) {
  return [cb](int32_t token, std::string_view text) {
    std::lock_guard<std::mutex> lock(cb->mu);
    if (!cb->alive || !cb->fn) return true;
    cb->caller.store(std::this_thread::get_id());
    const int32_t r = cb->fn(cb->handle, token, text.data(), text.size(), cb->user);
    cb->caller.store(std::thread::id());
    return r == 0;
  };
}

// Disarms the callback; waits for one that is running on another thread.
void disarm_callback(CallbackState& cb) {
  if (cb.caller.load() == std::this_thread::get_id()) {
    cb.alive = false;  // freed from inside its own callback: we hold mu already
    return;
  }
  std::lock_guard<std::mutex> lock(cb.mu);
  cb.alive = false;
}

}  // namespace

struct infer_request {
  std::shared_ptr<infer::Request> req;
  std::shared_ptr<CallbackState> cb;
  infer_engine* engine = nullptr;
  size_t tokens_read = 0;  // infer_request_next_tokens position
  size_t text_read = 0;    // infer_request_next_text position
};

namespace {

// This thread's last error. A fixed buffer, not a std::string: a thread_local
// with a destructor makes the C++ runtime register that destructor (which
// allocates) the first time a thread touches it, and when that allocation
// fails the runtime aborts ("failed to register TLS destructor").
constexpr size_t kLastErrorCap = 4096;
thread_local char t_last_error[kLastErrorCap];

using infer::api::copy_out;
using infer::api::fail;
using infer::api::guarded;
using infer::api::read_params;
using infer::api::size_ok;
using infer::api::write_out;

// The communicator of a model loaded with tensor_parallel N > 1: the host's
// MPI communicator or MPI_COMM_WORLD, which must have N ranks. Throws
// infer::Error: Unsupported on the CUDA backend or in a build without MPI,
// InvalidArgument for a group of another size.
std::shared_ptr<infer::Communicator> tp_comm(int32_t n, void* host_comm, infer::BackendKind kind) {
  if (kind == infer::BackendKind::Cuda)
    infer::raise(infer::Status::Unsupported,
                 "tensor_parallel is %d but the backend is CUDA: tensor parallelism runs on the CPU backend only "
                 "(backend cpu)", static_cast<int>(n));
  // Without a launcher, MPI would start this process as a group of its own
  // (size 1): say what to do instead of starting MPI for nothing.
  if (!host_comm && infer::mpi_built() && !infer::launched_by_mpi())
    infer::raise(infer::Status::InvalidArgument,
                 "tensor_parallel is %d but this process was not started by an MPI launcher: launch with mpirun -np %d "
                 "(or srun -n %d)", static_cast<int>(n), static_cast<int>(n), static_cast<int>(n));
  std::shared_ptr<infer::Communicator> comm = infer::make_mpi_comm(host_comm);  // Unsupported without MPI
  if (comm->size() != n)
    infer::raise(infer::Status::InvalidArgument,
                 "tensor_parallel is %d but the MPI job has %d rank(s): launch with mpirun -np %d",
                 static_cast<int>(n), comm->size(), static_cast<int>(n));
  return comm;
}

// A model's tensor-parallel group size and rank (1 and 0 for a whole model).
int32_t tp_size_of(const infer::Model& m) { return m.tp() ? m.tp()->size() : 1; }
int32_t tp_rank_of(const infer::Model& m) { return m.tp() ? m.tp()->rank() : 0; }

// The engine parameters' tensor_parallel against the model's group.
void check_tp_params(const infer::Model& m, const infer::EngineParams& ep, const char* fn) {
  const int32_t n = tp_size_of(m);
  if (ep.tensor_parallel != 0 && ep.tensor_parallel != n)
    infer::raise(infer::Status::InvalidArgument,
                 "%s: tensor_parallel is %d but the model was loaded %s (give 0 or %d)", fn,
                 static_cast<int>(ep.tensor_parallel),
                 n > 1 ? infer::strformat("with tensor_parallel %d", static_cast<int>(n)).c_str() : "whole",
                 static_cast<int>(n));
}

}  // namespace

// For the C API's other translation units (c_api_chat.cpp): the same error
// reporting, and the core model behind a handle.
namespace infer::api {
infer_status fail(infer_status s, const char* msg) noexcept {
  // Allocates nothing: argument errors are reported even when memory is exhausted.
  const size_t n = std::min(std::strlen(msg), kLastErrorCap - 1);
  std::memcpy(t_last_error, msg, n);
  t_last_error[n] = '\0';
  infer::log(infer::LogLevel::Debug, "api error: %s", t_last_error);
  return s;
}
infer_status fail(infer_status s, const std::string& msg) noexcept { return fail(s, msg.c_str()); }
void clear_error() noexcept { t_last_error[0] = '\0'; }
const infer::Model& model_of(const infer_model* m) { return *m->model; }
}  // namespace infer::api

extern "C" {

const char* infer_version(void) { return INFER_VERSION_STRING; }
uint32_t infer_version_number(void) { return INFER_VERSION_NUMBER; }

const char* infer_status_string(infer_status status) {
  switch (infer::api::enum_value(status)) {
    case INFER_OK: return "ok";
    case INFER_ERR_IO: return "I/O error";
    case INFER_ERR_FORMAT: return "malformed input";
    case INFER_ERR_UNSUPPORTED: return "unsupported";
    case INFER_ERR_OUT_OF_MEMORY: return "out of memory";
    case INFER_ERR_INVALID_ARGUMENT: return "invalid argument";
    case INFER_ERR_CANCELLED: return "cancelled";
    case INFER_ERR_BACKEND: return "backend error";
    case INFER_ERR_INTERNAL: return "internal error";
    case INFER_ERR_BUFFER_TOO_SMALL: return "buffer too small";
    case INFER_ERR_NOT_FOUND: return "not found";
    case INFER_ERR_BUSY: return "busy";
  }
  return "unknown status";
}

const char* infer_last_error(void) { return t_last_error; }

void infer_set_log_callback(infer_log_fn fn, void* user_data, infer_log_level min_level) {
  // LogLevel has a fixed underlying type: any int converts; levels above
  // ERROR let nothing through.
  const int64_t level = infer::api::enum_value(min_level);
  infer::set_log_callback(reinterpret_cast<infer::LogFn>(fn), user_data,
                          static_cast<infer::LogLevel>(std::clamp<int64_t>(level, INT32_MIN, INT32_MAX)));
}

void infer_free(void* ptr) { std::free(ptr); }

/* ---- models ---- */

void infer_model_params_init(infer_model_params* p) {
  if (!p) return;
  std::memset(p, 0, sizeof *p);
  p->struct_size = sizeof *p;
  p->backend = INFER_BACKEND_AUTO;
  p->use_mmap = 1;
  p->vocab_only = 0;
}

infer_status infer_model_load(const char* path, const infer_model_params* params, infer_model** out) {
  if (out) *out = nullptr;
  INFER_CHECK_ARG(path && out, "infer_model_load: path and out must not be NULL");
  INFER_CHECK_ARG(!params || size_ok(params), "infer_model_load: params->struct_size is wrong (call infer_model_params_init)");
  return guarded([&] {
    const infer_model_params p = read_params(params, infer_model_params_init);
    const int64_t backend = infer::api::enum_value(p.backend);
    if (backend != INFER_BACKEND_AUTO && backend != INFER_BACKEND_CPU && backend != INFER_BACKEND_CUDA)
      return fail(INFER_ERR_INVALID_ARGUMENT, infer::strformat("unknown backend %lld", static_cast<long long>(backend)));
    // Tensor parallelism runs on the CPU backend (AUTO picks it then): an
    // explicit CUDA is refused before the backend is looked for, alike in
    // builds with and without CUDA, on machines with and without a GPU.
    if (p.tensor_parallel > 1 && backend == INFER_BACKEND_CUDA)
      return fail(INFER_ERR_UNSUPPORTED,
                  infer::strformat("tensor_parallel is %d but the backend is CUDA: tensor parallelism runs on the CPU "
                                   "backend only (backend cpu)", static_cast<int>(p.tensor_parallel)));
    // Before reading the file: a backend that cannot run here fails at once.
    const bool tp_auto_cpu = p.tensor_parallel > 1 && backend == INFER_BACKEND_AUTO;
    const infer::BackendKind kind =
        infer::resolve_backend(tp_auto_cpu ? infer::BackendKind::Cpu : static_cast<infer::BackendKind>(backend));
    infer::LoadOptions opts;
    opts.use_mmap = p.use_mmap != 0;
    opts.vocab_only = p.vocab_only != 0;
    // Since 1.6 (an older caller's shorter struct leaves 0 and NULL: whole).
    if (p.tensor_parallel < 0)
      return fail(INFER_ERR_INVALID_ARGUMENT,
                  infer::strformat("tensor_parallel must be >= 0 (got %d)", static_cast<int>(p.tensor_parallel)));
    if (p.tensor_parallel > 1) opts.comm = tp_comm(p.tensor_parallel, p.mpi_comm, kind);
    auto m = std::make_unique<infer_model>();
    m->model = infer::Model::load(path, opts);
    // Weights are repacked for the backend now, not by the first request.
    infer::prepare_model(*m->model, kind, 0);
    m->arch = m->model->config().arch;
    m->name = m->model->config().name;
    m->tokenizer = m->model->tokenizer().vocab().model;
    *out = m.release();
    return INFER_OK;
  });
}

void infer_model_free(infer_model* model) {
  infer::api::guarded_void([&] { delete model; });
}

void infer_model_info_init(infer_model_info* info) {
  if (!info) return;
  std::memset(info, 0, sizeof *info);
  info->struct_size = sizeof *info;
}

infer_status infer_model_get_info(const infer_model* model, infer_model_info* info) {
  INFER_CHECK_ARG(model && info, "infer_model_get_info: model and info must not be NULL");
  INFER_CHECK_ARG(size_ok(info), "infer_model_get_info: info->struct_size is wrong (call infer_model_info_init)");
  const infer::ModelConfig& c = model->model->config();
  infer_model_info o;
  infer_model_info_init(&o);
  o.architecture = model->arch.c_str();
  o.name = model->name.c_str();
  o.tokenizer = model->tokenizer.c_str();
  o.n_vocab = c.n_vocab;
  o.n_ctx_train = c.n_ctx_train;
  o.n_embd = c.n_embd;
  o.n_layer = c.n_layer;
  o.n_head = c.n_head;
  o.n_head_kv = c.n_head_kv;
  o.n_ff = c.n_ff;
  o.n_rot = c.n_rot;
  o.rope_freq_base = c.rope_freq_base;
  o.rms_norm_eps = c.rms_eps;
  o.n_params = model->model->n_params();
  o.n_bytes = model->model->n_bytes();
  o.n_tensors = static_cast<int32_t>(model->model->gguf().tensors().size());
  o.bos_token = model->model->tokenizer().vocab().bos;
  o.eos_token = model->model->tokenizer().vocab().eos;
  o.vocab_only = model->model->vocab_only() ? 1 : 0;
  return write_out(info, o);
}

infer_status infer_model_meta(const infer_model* model, const char* key, char* buf, size_t buf_size, size_t* needed) {
  INFER_CHECK_ARG(model && key, "infer_model_meta: model and key must not be NULL");
  return guarded([&] {
    const infer::GgufValue* v = model->model->gguf().find(key);
    if (!v) return fail(INFER_ERR_NOT_FOUND, infer::strformat("no metadata key '%s'", key));
    return copy_out(infer::gguf_value_text(*v), buf, buf_size, needed);
  });
}

int32_t infer_model_meta_count(const infer_model* model) {
  return model ? static_cast<int32_t>(model->model->gguf().metadata().size()) : 0;
}

infer_status infer_model_meta_key(const infer_model* model, int32_t index, char* buf, size_t buf_size, size_t* needed) {
  INFER_CHECK_ARG(model, "infer_model_meta_key: model must not be NULL");
  return guarded([&] {
    const auto& md = model->model->gguf().metadata();
    if (index < 0 || static_cast<size_t>(index) >= md.size())
      return fail(INFER_ERR_NOT_FOUND, infer::strformat("no metadata key at index %d (%zu keys)", index, md.size()));
    return copy_out(md[static_cast<size_t>(index)].first, buf, buf_size, needed);
  });
}

int32_t infer_model_tensor_count(const infer_model* model) {
  return model ? static_cast<int32_t>(model->model->gguf().tensors().size()) : 0;
}

infer_status infer_model_tensor(const infer_model* model, int32_t index, infer_tensor_info* info) {
  INFER_CHECK_ARG(model && info && size_ok(info), "infer_model_tensor: NULL argument or wrong struct_size");
  const auto& ts = model->model->gguf().tensors();
  INFER_CHECK_ARG(index >= 0 && index < static_cast<int32_t>(ts.size()), "infer_model_tensor: index out of range");
  const infer::GgufTensorInfo& t = ts[index];
  infer_tensor_info o;
  std::memset(&o, 0, sizeof o);
  o.struct_size = sizeof o;
  o.name = t.name.c_str();
  o.type = infer::dtype_name(t.type);
  o.n_dims = static_cast<int32_t>(t.dims.size());
  for (size_t i = 0; i < t.dims.size() && i < 4; ++i) o.dims[i] = t.dims[i];
  o.n_bytes = t.nbytes;
  return write_out(info, o);
}

/* ---- tokens ---- */

infer_status infer_tokenize(const infer_model* model, const char* text, size_t text_len, int32_t add_bos,
                            int32_t parse_special, int32_t* tokens, size_t capacity, size_t* n_tokens) {
  if (n_tokens) *n_tokens = 0;
  INFER_CHECK_ARG(model && (text || text_len == 0), "infer_tokenize: model and text must not be NULL");
  INFER_CHECK_ARG(tokens || capacity == 0, "infer_tokenize: tokens is NULL but capacity is not 0");
  INFER_CHECK_ARG(add_bos >= -1 && add_bos <= 1, "infer_tokenize: add_bos must be -1, 0 or 1");
  return guarded([&] {
    const std::vector<int32_t> ids = infer::tokenize_text(model->model->tokenizer(),
                                                          std::string_view(text ? text : "", text_len), add_bos,
                                                          parse_special != 0);
    if (n_tokens) *n_tokens = ids.size();
    if (ids.size() > capacity)
      return fail(INFER_ERR_BUFFER_TOO_SMALL,
                  infer::strformat("%zu tokens do not fit in a buffer of %zu", ids.size(), capacity));
    if (!ids.empty()) std::memcpy(tokens, ids.data(), ids.size() * sizeof(int32_t));
    return INFER_OK;
  });
}

infer_status infer_detokenize(const infer_model* model, const int32_t* tokens, size_t n_tokens, int32_t render_special,
                              char* buf, size_t buf_size, size_t* needed) {
  if (needed) *needed = 0;
  INFER_CHECK_ARG(model && (tokens || n_tokens == 0), "infer_detokenize: model and tokens must not be NULL");
  return guarded([&] {
    std::vector<int32_t> ids(tokens, tokens + n_tokens);
    return copy_out(model->model->tokenizer().decode(ids, render_special != 0), buf, buf_size, needed);
  });
}

infer_status infer_token_piece(const infer_model* model, int32_t token, char* buf, size_t buf_size, size_t* n_bytes) {
  if (n_bytes) *n_bytes = 0;
  INFER_CHECK_ARG(model, "infer_token_piece: model must not be NULL");
  return guarded([&] {
    const std::string piece = model->model->tokenizer().token_to_piece(token, true);
    if (n_bytes) *n_bytes = piece.size();
    if (!buf || buf_size < piece.size())
      return fail(INFER_ERR_BUFFER_TOO_SMALL, infer::strformat("%zu bytes needed", piece.size()));
    std::memcpy(buf, piece.data(), piece.size());
    return INFER_OK;
  });
}

int32_t infer_token_is_eog(const infer_model* model, int32_t token) {
  if (!model || token < 0 || token >= model->model->config().n_vocab) return 0;
  return model->model->tokenizer().is_eog(token) ? 1 : 0;
}

/* ---- engines ---- */

}  // extern "C"

namespace infer::api {

infer::EngineParams to_engine_params(const infer_engine_params* params) {
  const infer_engine_params p = read_params(params, infer_engine_params_init);
  // Enum fields are checked as the integers the caller stored (enum_value).
  const int64_t kv_type = infer::api::enum_value(p.kv_type), policy = infer::api::enum_value(p.policy);
  if (kv_type != INFER_KV_F32 && kv_type != INFER_KV_F16 && kv_type != INFER_KV_INT8)
    infer::raise(infer::Status::InvalidArgument, "unknown kv_type %lld", static_cast<long long>(kv_type));
  if (policy != INFER_POLICY_CONTINUOUS && policy != INFER_POLICY_STATIC && policy != INFER_POLICY_DYNAMIC)
    infer::raise(infer::Status::InvalidArgument, "unknown policy %lld", static_cast<long long>(policy));
  infer::EngineParams ep;
  ep.n_threads = p.n_threads;
  ep.kv_budget_bytes = p.kv_budget_bytes;
  ep.kv_blocks = p.kv_blocks;
  ep.block_size = p.kv_block_size;
  ep.kv_type = static_cast<infer::KvType>(kv_type);
  ep.host_kv_budget_bytes = p.host_kv_budget_bytes;
  ep.max_seqs = p.max_seqs;
  ep.max_batch_tokens = p.max_batch_tokens;
  ep.n_ctx = p.n_ctx;
  ep.prefix_caching = p.prefix_caching != 0;
  ep.policy = static_cast<infer::SchedPolicy>(policy);
  ep.batch_timeout_ms = p.batch_timeout_ms;
  if (p.step_row_multiple != 0) ep.step_row_multiple = p.step_row_multiple;
  const int64_t spec = infer::api::enum_value(p.spec);
  if (spec != INFER_SPEC_NONE && spec != INFER_SPEC_NGRAM && spec != INFER_SPEC_LAYERSKIP && spec != INFER_SPEC_DRAFT)
    infer::raise(infer::Status::InvalidArgument, "unknown speculative method %lld", static_cast<long long>(spec));
  ep.spec = static_cast<infer::SpecMethod>(spec);
  ep.spec_k = p.spec_k;
  ep.spec_ngram_max = p.spec_ngram_max;
  ep.spec_ngram_min = p.spec_ngram_min;
  ep.spec_max_batch = p.spec_max_batch;
  if (p.spec_skip_layers) ep.spec_skip_layers = p.spec_skip_layers;
  if (p.draft_model) ep.draft_model = p.draft_model->model.get();
  // Since 1.6 (0 in an older caller's shorter struct: the model's group, 60 s).
  if (p.tensor_parallel < 0)
    infer::raise(infer::Status::InvalidArgument, "tensor_parallel must be >= 0 (got %d)", p.tensor_parallel);
  if (p.tp_timeout_ms < 0)
    infer::raise(infer::Status::InvalidArgument, "tp_timeout_ms must be >= 0 (got %d; 0: 60000)", p.tp_timeout_ms);
  ep.tensor_parallel = p.tensor_parallel;
  ep.tp_timeout_ms = p.tp_timeout_ms;
  return ep;
}

}  // namespace infer::api

extern "C" {

void infer_engine_params_init(infer_engine_params* p) {
  if (!p) return;
  std::memset(p, 0, sizeof *p);
  p->struct_size = sizeof *p;
  p->kv_block_size = 16;
  p->kv_type = INFER_KV_F32;
  p->max_seqs = 16;
  p->max_batch_tokens = 512;
  p->prefix_caching = 1;
  p->policy = INFER_POLICY_CONTINUOUS;
  p->batch_timeout_ms = 50;
  const infer::EngineParams d;
  p->spec = INFER_SPEC_NONE;
  p->spec_k = d.spec_k;
  p->spec_ngram_max = d.spec_ngram_max;
  p->spec_ngram_min = d.spec_ngram_min;
  p->spec_max_batch = d.spec_max_batch;
  p->spec_skip_layers = nullptr;
}

infer_status infer_engine_create(const infer_model* model, const infer_engine_params* params, infer_engine** out) {
  if (out) *out = nullptr;
  INFER_CHECK_ARG(model && out, "infer_engine_create: model and out must not be NULL");
  INFER_CHECK_ARG(!params || size_ok(params), "infer_engine_create: params->struct_size is wrong");
  return guarded([&] {
    const infer::EngineParams ep = infer::api::to_engine_params(params);
    check_tp_params(*model->model, ep, "infer_engine_create");
    if (tp_rank_of(*model->model) != 0)
      return fail(INFER_ERR_INVALID_ARGUMENT,
                  infer::strformat("infer_engine_create: rank %d of a tensor-parallel model follows rank 0's engine: "
                                   "call infer_engine_follow", static_cast<int>(tp_rank_of(*model->model))));
    // The KV pool must fit what the process can still commit, asked before
    // allocating it and checked again on the pool the engine made.
    const uint64_t avail = infer::available_memory_bytes();
    infer::check_kv_request(*model->model, ep, avail);
    auto e = std::make_unique<infer_engine>();
    e->model = model;
    e->engine = std::make_unique<infer::Engine>(*model->model, ep);
    infer::check_kv_pool(*e->engine, avail);
    *out = e.release();
    return INFER_OK;
  });
}

int32_t infer_model_tp_rank(const infer_model* model) { return model ? tp_rank_of(*model->model) : -1; }
int32_t infer_model_tp_size(const infer_model* model) { return model ? tp_size_of(*model->model) : -1; }

infer_status infer_engine_follow(const infer_model* model, const infer_engine_params* params) {
  INFER_CHECK_ARG(model, "infer_engine_follow: model must not be NULL");
  INFER_CHECK_ARG(!params || size_ok(params), "infer_engine_follow: params->struct_size is wrong");
  return guarded([&] {
    const infer::Model& m = *model->model;
    if (tp_size_of(m) <= 1)
      return fail(INFER_ERR_INVALID_ARGUMENT,
                  "infer_engine_follow: the model is whole (loaded without tensor_parallel > 1): create an engine "
                  "with infer_engine_create");
    if (tp_rank_of(m) == 0)
      return fail(INFER_ERR_INVALID_ARGUMENT,
                  "infer_engine_follow: this is rank 0 of the tensor-parallel group, which runs the engine: call "
                  "infer_engine_create");
    const infer::EngineParams ep = infer::api::to_engine_params(params);
    check_tp_params(m, ep, "infer_engine_follow");
    // This rank's share of the KV pool must fit here too (nodes differ).
    infer::check_kv_request(m, ep, infer::available_memory_bytes());
    infer::follow_engine(m, ep);
    return INFER_OK;
  });
}

void infer_engine_free(infer_engine* engine) {
  infer::api::guarded_void([&] {
    delete engine;
#ifdef __GLIBC__
    // The engine's step buffers are large and freed together: give the
    // heap's free memory back now, so that creating and freeing engines in a
    // loop does not grow the resident size (glibc keeps freed heap memory).
    malloc_trim(0);
#endif
  });
}

void infer_sampling_params_init(infer_sampling_params* p) {
  if (!p) return;
  std::memset(p, 0, sizeof *p);
  p->struct_size = sizeof *p;
  const infer::SamplingParams d;
  p->temperature = d.temperature;
  p->top_k = d.top_k;
  p->top_p = d.top_p;
  p->min_p = d.min_p;
  p->repeat_penalty = d.repeat_penalty;
  p->frequency_penalty = d.frequency_penalty;
  p->presence_penalty = d.presence_penalty;
  p->penalty_last_n = d.penalty_last_n;
  p->seed = d.seed;
}

void infer_request_params_init(infer_request_params* p) {
  if (!p) return;
  std::memset(p, 0, sizeof *p);
  p->struct_size = sizeof *p;
  p->add_bos = -1;
  p->max_tokens = 256;
  p->logprobs = -1;
  p->spec_max_draft = -1;
}

namespace {

infer::SamplingParams to_sampling(const infer_sampling_params* sp) {
  const infer_sampling_params s = read_params(sp, infer_sampling_params_init);
  infer::SamplingParams o;
  o.temperature = s.temperature;
  o.top_k = s.top_k;
  o.top_p = s.top_p;
  o.min_p = s.min_p;
  o.repeat_penalty = s.repeat_penalty;
  o.frequency_penalty = s.frequency_penalty;
  o.presence_penalty = s.presence_penalty;
  o.penalty_last_n = s.penalty_last_n;
  o.seed = s.seed;
  if (s.n_logit_bias > 0) {
    if (!s.logit_bias_tokens || !s.logit_bias_values)
      infer::raise(infer::Status::InvalidArgument, "n_logit_bias is %zu but the bias arrays are NULL", s.n_logit_bias);
    for (size_t i = 0; i < s.n_logit_bias; ++i) o.logit_bias.emplace_back(s.logit_bias_tokens[i], s.logit_bias_values[i]);
  }
  return o;
}

}  // namespace

namespace {

// A grammar bound to the model's vocabulary: every token's bytes (control
// tokens have none, so they are never allowed) and which tokens end the text.
std::shared_ptr<const infer::TokenGrammar> token_grammar(const infer::Tokenizer& tok, const std::string& gbnf) {
  auto tg = std::make_shared<infer::TokenGrammar>();
  tg->grammar = infer::Grammar::parse(gbnf);
  const int32_t n = tok.n_vocab();
  tg->pieces.resize(static_cast<size_t>(n));
  tg->is_eog.resize(static_cast<size_t>(n));
  for (int32_t i = 0; i < n; ++i) {
    tg->is_eog[static_cast<size_t>(i)] = tok.is_eog(i) ? 1 : 0;
    if (!tok.is_control(i)) tg->pieces[static_cast<size_t>(i)] = tok.token_to_piece(i, false);
  }
  return tg;
}

// Translates and checks caller parameters; the callback closure refers to the
// handle through a shared state that infer_request_free disarms.
infer::RequestParams to_request_params(infer_engine* engine, const infer_request_params& p,
                                       const std::shared_ptr<CallbackState>& cb) {
  infer::RequestParams rp;
  if (p.prompt) {
    const size_t len = p.prompt_len ? p.prompt_len : std::strlen(p.prompt);
    rp.prompt = infer::tokenize_prompt(engine->model->model->tokenizer(), std::string_view(p.prompt, len), p.add_bos,
                                       p.parse_special != 0);
  } else {
    rp.prompt.assign(p.prompt_tokens, p.prompt_tokens + p.n_prompt_tokens);
  }
  rp.sampling = to_sampling(p.sampling);
  rp.max_tokens = p.max_tokens;
  for (size_t i = 0; i < p.n_stop; ++i) {
    if (!p.stop[i]) infer::raise(infer::Status::InvalidArgument, "infer_submit: stop string %zu is NULL", i);
    rp.stop.emplace_back(p.stop[i]);
  }
  rp.ignore_eos = p.ignore_eos != 0;
  rp.logits = p.logits;
  rp.prefix_cache = p.no_prefix_cache == 0;
  rp.priority = p.priority;
  rp.cache_salt = p.cache_salt;
  rp.spec_max_draft = p.spec_max_draft;
  if (p.on_token) rp.on_token = token_callback(cb);
  if (p.logprobs < -1 || p.logprobs > 100)
    infer::raise(infer::Status::InvalidArgument, "infer_submit: logprobs must be -1 (off) or in [0, 100] (got %d)", p.logprobs);
  rp.sampling.logprobs = p.logprobs < 0 ? -1 : p.logprobs;
  if (p.grammar && p.json_schema)
    infer::raise(infer::Status::InvalidArgument, "infer_submit: give a grammar or a json_schema, not both");
  if (p.grammar || p.json_schema)
    rp.sampling.grammar = token_grammar(engine->model->model->tokenizer(),
                                        p.grammar ? std::string(p.grammar) : infer::json_schema_to_gbnf(p.json_schema));
  return rp;
}

void notify(infer_engine* engine) {
  std::lock_guard<std::mutex> lock(engine->thread_mu);
  if (engine->thread) engine->thread->notify();
}

std::unique_ptr<infer_request> new_handle(const infer_request_params& p) {
  auto h = std::make_unique<infer_request>();
  h->cb = std::make_shared<CallbackState>();
  h->cb->handle = h.get();
  h->cb->fn = p.on_token;
  h->cb->user = p.user_data;
  return h;
}

}  // namespace

infer_status infer_submit(infer_engine* engine, const infer_request_params* params, infer_request** out) {
  if (out) *out = nullptr;
  INFER_CHECK_ARG(engine && params && out, "infer_submit: engine, params and out must not be NULL");
  INFER_CHECK_ARG(size_ok(params), "infer_submit: params->struct_size is wrong (call infer_request_params_init)");
  const infer_request_params p = read_params(params, infer_request_params_init);
  INFER_CHECK_ARG(!p.sampling || size_ok(p.sampling), "infer_submit: sampling->struct_size is wrong");
  INFER_CHECK_ARG((p.prompt != nullptr) != (p.prompt_tokens != nullptr),
            "infer_submit: give exactly one of prompt and prompt_tokens");
  INFER_CHECK_ARG(!p.prompt_tokens || p.n_prompt_tokens > 0, "infer_submit: n_prompt_tokens is 0");
  INFER_CHECK_ARG(p.add_bos >= -1 && p.add_bos <= 1, "infer_submit: add_bos must be -1, 0 or 1");
  INFER_CHECK_ARG(p.n_stop == 0 || p.stop, "infer_submit: n_stop > 0 but stop is NULL");
  return guarded([&] {
    std::shared_lock<std::shared_mutex> gate(engine->submit_mu);
    if (engine->draining) return fail(INFER_ERR_BUSY, "infer_submit: infer_engine_stop is draining the engine");
    auto h = new_handle(p);
    h->engine = engine;
    h->req = engine->engine->submit(to_request_params(engine, p, h->cb));
    *out = h.release();
    notify(engine);
    return INFER_OK;
  });
}

infer_status infer_submit_n(infer_engine* engine, const infer_request_params* params, int32_t n, infer_request** out) {
  INFER_CHECK_ARG(engine && params && out, "infer_submit_n: engine, params and out must not be NULL");
  INFER_CHECK_ARG(n >= 1, "infer_submit_n: n must be at least 1");
  for (int32_t i = 0; i < n; ++i) out[i] = nullptr;
  INFER_CHECK_ARG(size_ok(params), "infer_submit_n: params->struct_size is wrong (call infer_request_params_init)");
  const infer_request_params p = read_params(params, infer_request_params_init);
  INFER_CHECK_ARG(!p.sampling || size_ok(p.sampling), "infer_submit_n: sampling->struct_size is wrong");
  INFER_CHECK_ARG((p.prompt != nullptr) != (p.prompt_tokens != nullptr),
            "infer_submit_n: give exactly one of prompt and prompt_tokens");
  INFER_CHECK_ARG(!p.prompt_tokens || p.n_prompt_tokens > 0, "infer_submit_n: n_prompt_tokens is 0");
  INFER_CHECK_ARG(p.add_bos >= -1 && p.add_bos <= 1, "infer_submit_n: add_bos must be -1, 0 or 1");
  INFER_CHECK_ARG(p.n_stop == 0 || p.stop, "infer_submit_n: n_stop > 0 but stop is NULL");
  return guarded([&] {
    std::shared_lock<std::shared_mutex> gate(engine->submit_mu);
    if (engine->draining) return fail(INFER_ERR_BUSY, "infer_submit_n: infer_engine_stop is draining the engine");
    std::vector<std::unique_ptr<infer_request>> handles;
    for (int32_t i = 0; i < n; ++i) handles.push_back(new_handle(p));
    // Each sample gets its own callback closure bound to its own handle.
    infer::RequestParams rp = to_request_params(engine, p, handles[0]->cb);
    // The callbacks are in place before the engine can see the requests.
    std::vector<infer::TokenCallback> callbacks;
    if (p.on_token)
      for (int32_t i = 0; i < n; ++i) callbacks.push_back(token_callback(handles[i]->cb));
    std::vector<std::shared_ptr<infer::Request>> family = engine->engine->submit_n(rp, n, std::move(callbacks));
    for (int32_t i = 0; i < n; ++i) {
      handles[i]->req = family[i];
      handles[i]->engine = engine;
      out[i] = handles[i].release();
    }
    notify(engine);
    return INFER_OK;
  });
}

infer_status infer_engine_step(infer_engine* engine, int32_t* n_active) {
  if (n_active) *n_active = 0;
  INFER_CHECK_ARG(engine, "infer_engine_step: engine must not be NULL");
  if (engine->threaded) return fail(INFER_ERR_BUSY, "infer_engine_step: the engine's background thread is running");
  return guarded([&] {
    const int n = engine->engine->step();
    if (n_active) *n_active = n;
    return INFER_OK;
  });
}

infer_status infer_engine_run(infer_engine* engine) {
  INFER_CHECK_ARG(engine, "infer_engine_run: engine must not be NULL");
  if (engine->threaded) return fail(INFER_ERR_BUSY, "infer_engine_run: the engine's background thread is running");
  return guarded([&] {
    engine->engine->run();
    return INFER_OK;
  });
}

infer_status infer_request_cancel(infer_request* request) {
  INFER_CHECK_ARG(request, "infer_request_cancel: request must not be NULL");
  return guarded([&] {
    request->req->request_cancel();
    return INFER_OK;
  });
}

void infer_request_free(infer_request* request) {
  if (!request) return;
  infer::api::guarded_void([&] {
    disarm_callback(*request->cb);  // after this no callback sees the handle
    request->req->request_cancel();
  });
  delete request;
}

void infer_request_stats_init(infer_request_stats* s) {
  if (!s) return;
  std::memset(s, 0, sizeof *s);
  s->struct_size = sizeof *s;
}

infer_status infer_request_get_stats(const infer_request* request, infer_request_stats* stats) {
  INFER_CHECK_ARG(request && stats && size_ok(stats), "infer_request_get_stats: NULL argument or wrong struct_size");
  return guarded([&] {
    const infer::Request& r = *request->req;
    std::lock_guard<std::mutex> lock(r.mutex());
    const infer::RequestMetrics m = infer::request_metrics(r);
    infer_request_stats o;
    infer_request_stats_init(&o);
    o.finish_reason = static_cast<infer_finish_reason>(m.finish);
    o.status = static_cast<infer_status>(m.status);
    o.n_prompt_tokens = m.n_prompt;
    o.n_cached_tokens = m.n_cached;
    o.n_preemptions = m.n_preemptions;
    o.n_generated_tokens = m.n_generated;
    o.queue_ms = m.queue_ms;
    o.ttft_ms = m.ttft_ms;
    o.prefill_tokens_per_s = m.prefill_tokens_per_s;
    o.tpot_ms = m.tpot_ms;
    o.decode_tokens_per_s = m.decode_tokens_per_s;
    o.total_ms = m.total_ms;
    o.draft_tokens = m.spec.drafted;
    o.accepted_tokens = m.spec.accepted;
    o.acceptance_rate = m.spec.acceptance_rate();
    o.mean_accepted_length = m.spec.mean_accepted_length();
    for (int i = 0; i < 16; ++i) {
      o.draft_tokens_at[i] = m.spec.drafted_at[i];
      o.accepted_tokens_at[i] = m.spec.accepted_at[i];
    }
    return write_out(stats, o);
  });
}

infer_status infer_request_tokens(const infer_request* request, const int32_t** tokens, size_t* n_tokens) {
  INFER_CHECK_ARG(request && tokens && n_tokens, "infer_request_tokens: NULL argument");
  *tokens = request->req->generated();
  *n_tokens = static_cast<size_t>(request->req->n_generated());
  return INFER_OK;
}

infer_status infer_request_text(const infer_request* request, char* buf, size_t buf_size, size_t* needed) {
  if (needed) *needed = 0;
  INFER_CHECK_ARG(request, "infer_request_text: request must not be NULL");
  return guarded([&] {
    std::string text;  // a copy: the engine may append while we write out
    {
      std::lock_guard<std::mutex> lock(request->req->mutex());
      text = request->req->text();
    }
    return copy_out(text, buf, buf_size, needed);
  });
}

infer_status infer_request_logits(const infer_request* request, const float** data, size_t* n_rows, size_t* n_vocab) {
  INFER_CHECK_ARG(request && data && n_rows && n_vocab, "infer_request_logits: NULL argument");
  const infer::Request& r = *request->req;
  if (r.params().logits == 0)
    return fail(INFER_ERR_INVALID_ARGUMENT, "the request was submitted without INFER_LOGITS_* flags");
  *data = r.logits().empty() ? nullptr : r.logits().data();
  *n_rows = static_cast<size_t>(r.n_logit_rows());
  *n_vocab = r.n_logit_rows() ? r.logits().size() / static_cast<size_t>(r.n_logit_rows()) : 0;
  return INFER_OK;
}

infer_status infer_request_logprobs(const infer_request* request, size_t index, infer_token_logprob* chosen,
                                    infer_token_logprob* top, size_t capacity, size_t* n_top) {
  if (n_top) *n_top = 0;
  INFER_CHECK_ARG(request && (top || capacity == 0), "infer_request_logprobs: request must not be NULL (and top with a capacity)");
  return guarded([&] {
    const int32_t k = request->req->params().sampling.logprobs;
    if (k < 0) return fail(INFER_ERR_INVALID_ARGUMENT, "infer_request_logprobs: the request was submitted without logprobs");
    std::lock_guard<std::mutex> lock(request->req->mutex());
    const auto& all = request->req->logprobs();
    if (index >= all.size())
      return fail(INFER_ERR_NOT_FOUND, infer::strformat("infer_request_logprobs: token %zu not generated (%zu so far)", index, all.size()));
    const infer::TokenLogprobs& lp = all[index];
    if (chosen) *chosen = {lp.chosen.token, lp.chosen.logprob};
    for (size_t i = 0; i < capacity && i < lp.top.size(); ++i) top[i] = {lp.top[i].token, lp.top[i].logprob};
    if (n_top) *n_top = lp.top.size();
    return INFER_OK;
  });
}

infer_status infer_json_schema_to_grammar(const char* json_schema, char* buf, size_t buf_size, size_t* needed) {
  INFER_CHECK_ARG(json_schema, "infer_json_schema_to_grammar: json_schema must not be NULL");
  return guarded([&] { return copy_out(infer::json_schema_to_gbnf(json_schema), buf, buf_size, needed); });
}

infer_status infer_grammar_check(const char* grammar) {
  INFER_CHECK_ARG(grammar, "infer_grammar_check: grammar must not be NULL");
  return guarded([&] {
    infer::Grammar::parse(grammar);
    return INFER_OK;
  });
}

const char* infer_request_error(const infer_request* request) {
  if (!request) return "";
  return infer::api::guarded_value<const char*>("", [&] {
    std::lock_guard<std::mutex> lock(request->req->mutex());
    return request->req->error().c_str();  // set once, when the request finishes
  });
}

infer_status infer_request_next_tokens(infer_request* request, int32_t timeout_ms, int32_t* tokens, size_t capacity,
                                       size_t* n_tokens, int32_t* finished) {
  if (n_tokens) *n_tokens = 0;
  if (finished) *finished = 0;
  INFER_CHECK_ARG(request && n_tokens && finished && (tokens || capacity == 0),
            "infer_request_next_tokens: NULL argument");
  return guarded([&] {
    const infer::Request& r = *request->req;
    r.wait_for(request->tokens_read, timeout_ms);
    std::lock_guard<std::mutex> lock(r.mutex());
    const size_t avail = static_cast<size_t>(r.n_generated()) - request->tokens_read;
    const size_t n = std::min(avail, capacity);
    if (n) std::memcpy(tokens, r.generated() + request->tokens_read, n * sizeof(int32_t));
    request->tokens_read += n;
    *n_tokens = n;
    *finished = r.finished() && n == avail ? 1 : 0;
    return INFER_OK;
  });
}

infer_status infer_request_next_text(infer_request* request, int32_t timeout_ms, char* buf, size_t buf_size,
                                     size_t* n_bytes, int32_t* finished) {
  if (n_bytes) *n_bytes = 0;
  if (finished) *finished = 0;
  INFER_CHECK_ARG(request && n_bytes && finished && buf && buf_size > 0, "infer_request_next_text: NULL argument or empty buffer");
  buf[0] = '\0';
  return guarded([&] {
    const infer::Request& r = *request->req;
    {
      // Wait for text: new tokens may release no text (held back), so wait on
      // tokens past those already reflected in what was read.
      std::unique_lock<std::mutex> lock(r.mutex());
      const bool have = r.text().size() > request->text_read || r.finished();
      // The token count is read under the lock: the engine thread appends.
      const size_t seen = static_cast<size_t>(r.n_generated());
      lock.unlock();
      if (!have) r.wait_for(seen, timeout_ms);
    }
    std::lock_guard<std::mutex> lock(r.mutex());
    const std::string& text = r.text();
    const size_t avail = text.size() - request->text_read;
    size_t n = std::min(avail, buf_size - 1);
    // Do not split a UTF-8 sequence: back off over continuation bytes.
    if (n < avail)
      while (n > 0 && (static_cast<unsigned char>(text[request->text_read + n]) & 0xC0) == 0x80) --n;
    if (n == 0 && avail > 0) {
      // Not even the next character fits: say how big the buffer must be
      // (OK with 0 bytes would have the caller poll forever).
      size_t need = 1;
      while (need < avail && (static_cast<unsigned char>(text[request->text_read + need]) & 0xC0) == 0x80) ++need;
      *n_bytes = need + 1;
      return fail(INFER_ERR_BUFFER_TOO_SMALL,
                  infer::strformat("infer_request_next_text: the next character needs a buffer of %zu bytes, "
                                   "buf_size is %zu", need + 1, buf_size));
    }
    std::memcpy(buf, text.data() + request->text_read, n);
    buf[n] = '\0';
    request->text_read += n;
    *n_bytes = n;
    *finished = r.finished() && request->text_read == text.size() ? 1 : 0;
    return INFER_OK;
  });
}

infer_status infer_request_wait(const infer_request* request, int32_t timeout_ms, int32_t* finished) {
  if (finished) *finished = 0;
  INFER_CHECK_ARG(request && finished, "infer_request_wait: NULL argument");
  return guarded([&] {
    *finished = request->req->wait_finished(timeout_ms) ? 1 : 0;
    return INFER_OK;
  });
}

void infer_engine_stats_init(infer_engine_stats* s) {
  if (!s) return;
  std::memset(s, 0, sizeof *s);
  s->struct_size = sizeof *s;
}

infer_status infer_engine_get_stats(const infer_engine* engine, infer_engine_stats* stats) {
  INFER_CHECK_ARG(engine && stats && size_ok(stats), "infer_engine_get_stats: NULL argument or wrong struct_size");
  return guarded([&] {
    const infer::Engine& e = *engine->engine;
    const infer::EngineStats s = e.stats();
    infer_engine_stats o;
    infer_engine_stats_init(&o);
    o.n_running = s.n_running;
    o.n_waiting = s.n_waiting;
    const infer::KvPlan& kv = e.kv_plan();  // immutable
    o.kv_blocks_total = s.kv.blocks_total;
    o.kv_blocks_used = s.kv.blocks_used;
    o.kv_block_size = kv.layout.block_size;
    o.kv_bytes_total = kv.bytes(s.kv.blocks_total);
    o.kv_bytes_used = kv.bytes(s.kv.blocks_used);
    o.n_steps = s.n_steps;
    o.n_prompt_tokens = s.n_prompt_tokens;
    o.n_generated_tokens = s.n_generated_tokens;
    o.kv_blocks_free = s.kv.blocks_free;
    o.kv_blocks_cached = s.kv.blocks_cached;
    o.host_kv_blocks_total = s.kv.host_blocks_total;
    o.host_kv_blocks_used = s.kv.host_blocks_used;
    o.prefix_query_tokens = s.kv.prefix_query_tokens;
    o.prefix_hit_tokens = s.kv.prefix_hit_tokens;
    o.n_preemptions = s.n_preemptions;
    o.kv_evictions = s.kv.evictions;
    o.kv_type = static_cast<infer_kv_type>(e.params().kv_type);
    o.n_finished = s.n_finished;
    o.uptime_s = s.uptime_s;
    o.generated_tokens_per_s = s.uptime_s > 0 ? s.n_generated_tokens / s.uptime_s : 0;
    o.draft_tokens = s.spec.drafted;
    o.accepted_tokens = s.spec.accepted;
    o.acceptance_rate = s.spec.acceptance_rate();
    o.mean_accepted_length = s.spec.mean_accepted_length();
    for (int i = 0; i < 16; ++i) {
      o.draft_tokens_at[i] = s.spec.drafted_at[i];
      o.accepted_tokens_at[i] = s.spec.accepted_at[i];
    }
    o.tp_comm_calls = s.tp_comm_calls;
    o.tp_comm_bytes = s.tp_comm_bytes;
    o.tp_comm_seconds = s.tp_comm_seconds;
    return write_out(stats, o);
  });
}

infer_status infer_engine_max_concurrency(const infer_engine* engine, int32_t prompt_len, int32_t output_len,
                                          int32_t* out) {
  if (out) *out = 0;
  INFER_CHECK_ARG(engine && out, "infer_engine_max_concurrency: NULL argument");
  INFER_CHECK_ARG(prompt_len >= 1 && output_len >= 0,
                  "infer_engine_max_concurrency: prompt_len must be >= 1 and output_len >= 0");
  return guarded([&] {
    *out = engine->engine->max_concurrency(prompt_len, output_len);  // clamped to the context there
    return INFER_OK;
  });
}

infer_status infer_engine_start(infer_engine* engine) {
  INFER_CHECK_ARG(engine, "infer_engine_start: engine must not be NULL");
  return guarded([&] {
    std::lock_guard<std::mutex> lock(engine->thread_mu);
    if (!engine->thread) {
      engine->threaded = true;
      engine->thread = std::make_unique<infer::EngineThread>(*engine->engine);
      engine->thread->notify();  // requests submitted before the start
    }
    return INFER_OK;
  });
}

infer_status infer_engine_stop(infer_engine* engine, int32_t drain) {
  INFER_CHECK_ARG(engine, "infer_engine_stop: engine must not be NULL");
  return guarded([&] {
    std::unique_ptr<infer::EngineThread> t;
    {
      std::lock_guard<std::mutex> lock(engine->thread_mu);
      t = std::move(engine->thread);
    }
    if (t && drain) {
      {
        std::unique_lock<std::shared_mutex> gate(engine->submit_mu);  // waits for submits under way
        engine->draining = true;
      }
      struct Reopen {
        infer_engine* e;
        ~Reopen() {
          std::unique_lock<std::shared_mutex> gate(e->submit_mu);
          e->draining = false;
        }
      } reopen{engine};
      t->stop(true);
    } else if (t) {
      t->stop(false);
    }
    engine->threaded = false;
    return INFER_OK;
  });
}

infer_status infer_engine_wait_idle(infer_engine* engine) {
  INFER_CHECK_ARG(engine, "infer_engine_wait_idle: engine must not be NULL");
  return guarded([&] {
    std::unique_lock<std::mutex> lock(engine->thread_mu);
    if (engine->thread) {
      infer::EngineThread* t = engine->thread.get();
      lock.unlock();
      t->wait_idle();
    } else {
      lock.unlock();
      engine->engine->run();
    }
    return INFER_OK;
  });
}

/* ---- convenience ---- */

infer_status infer_generate(const infer_model* model, const char* prompt, const infer_sampling_params* sampling,
                            int32_t max_tokens, char** out_text) {
  if (out_text) *out_text = nullptr;
  INFER_CHECK_ARG(model && prompt && out_text, "infer_generate: model, prompt and out_text must not be NULL");
  infer_engine_params ep;
  infer_engine_params_init(&ep);
  ep.max_seqs = 1;
  infer_engine* engine = nullptr;
  infer_status st = infer_engine_create(model, &ep, &engine);
  if (st != INFER_OK) return st;
  infer_request_params rp;
  infer_request_params_init(&rp);
  rp.prompt = prompt;
  rp.max_tokens = max_tokens;
  rp.sampling = sampling;
  infer_request* req = nullptr;
  st = infer_submit(engine, &rp, &req);
  if (st == INFER_OK) st = infer_engine_run(engine);
  if (st == INFER_OK && req->req->finish_reason() == infer::FinishReason::Error)
    st = fail(static_cast<infer_status>(req->req->status()), req->req->error());
  if (st == INFER_OK) {
    const std::string& text = req->req->text();
    char* s = static_cast<char*>(std::malloc(text.size() + 1));
    if (!s) {
      st = fail(INFER_ERR_OUT_OF_MEMORY, "out of memory");
    } else {
      std::memcpy(s, text.c_str(), text.size() + 1);
      *out_text = s;
    }
  }
  infer_request_free(req);
  infer_engine_free(engine);
  return st;
}

}  // extern "C"

// For c_api_embed.cpp: the engine's model, and embedding jobs submitted under
// the same gate as requests.
namespace infer::api {
const infer::Model& engine_model(const infer_engine* e) { return *e->model->model; }

std::shared_ptr<infer::EmbedJob> submit_embed(infer_engine* e, std::vector<infer::EmbedInput> inputs,
                                              const infer::EmbedOptions& o) {
  std::shared_lock<std::shared_mutex> gate(e->submit_mu);
  if (e->draining) infer::raise(infer::Status::Busy, "infer_engine_stop is draining the engine");
  std::shared_ptr<infer::EmbedJob> job = e->engine->submit_embed(std::move(inputs), o);
  notify(e);
  return job;
}
}  // namespace infer::api
