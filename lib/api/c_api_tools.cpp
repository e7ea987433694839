// The C API of the offline tools (infer.h's OFFLINE TOOLS section):
// quantization, synthetic models, the llama2.c converter, perplexity and the
// benchmark. Argument checks and error translation around lib/tools/.
#include <algorithm>
#include <cstring>
#include <new>
#include <string>

#include "api/api_util.h"
#include "core/error.h"
#include "core/threadpool.h"
#include "infer/infer.h"
#include "model/model.h"
#include "tools/convert_hf.h"
#include "tools/evaluate.h"
#include "tools/llama2c.h"
#include "quant/formats.h"
#include "tools/quantize.h"
#include "tools/synth.h"

namespace {

using infer::api::fail;
using infer::api::guarded;
using infer::api::read_params;
using infer::api::size_ok;
using infer::api::to_engine_params;
using infer::api::write_out;

infer::DType parse_type(const char* name, int32_t group) {
  infer::DType t;
  if (!name || !infer::parse_quant_type(name, group, &t))
    infer::raise(infer::Status::InvalidArgument,
                 "unknown weight format '%s' (q8_0 q4_0 q4_1 q5_0 q5_1 q4_k q5_k q6_k f16 bf16 f32 w8a8 int4 (int4_g32, "
                 "int4_g64, int4_g128; w4a16 = int4), as infer quantize --help lists them)",
                 name ? name : "(null)");
  return t;
}

// The params' progress and note callbacks on a tool's options (p outlives
// them: the call's own copy of the params).
template <typename Options, typename Params>
void set_callbacks(Options& o, const Params& p) {
  if (p.progress) o.progress = [&p](double f, const std::string& w) { p.progress(f, w.c_str(), p.user_data); };
  if (p.note) o.note = [&p](const std::string& m) { p.note(m.c_str(), p.user_data); };
}

// The stats into the caller's result, when given.
void report(const infer::QuantizeStats& st, infer_quantize_result* result) {
  if (!result) return;
  infer_quantize_result r;
  std::memset(&r, 0, sizeof r);
  r.struct_size = sizeof r;
  r.n_tensors = st.n_tensors;
  r.n_quantized = st.n_quantized;
  r.n_fallback = st.n_fallback;
  r.bytes_in = st.bytes_in;
  r.bytes_out = st.bytes_out;
  write_out(result, r);
}

}  // namespace

extern "C" {

void infer_quantize_params_init(infer_quantize_params* p) {
  if (!p) return;
  std::memset(p, 0, sizeof *p);
  p->struct_size = sizeof *p;
  p->type = "q4_0";
  p->group_size = 128;
  p->method = INFER_QUANT_RTN;
  p->calib_ctx = 256;
  p->max_calib_tokens = 8192;
  p->gptq_damp = 0.01f;
}

infer_status infer_quantize(const char* in_path, const char* out_path, const infer_quantize_params* params,
                            infer_quantize_result* result) {
  if (!in_path || !out_path) return fail(INFER_ERR_INVALID_ARGUMENT, "infer_quantize: paths must not be NULL");
  if (params && !size_ok(params)) return fail(INFER_ERR_INVALID_ARGUMENT, "infer_quantize: params->struct_size is wrong");
  if (result && !size_ok(result)) return fail(INFER_ERR_INVALID_ARGUMENT, "infer_quantize: result->struct_size is wrong");
  const infer_quantize_params p = read_params(params, infer_quantize_params_init);
  return guarded([&] {
    infer::QuantizeOptions o;
    o.type = parse_type(p.type, p.group_size);
    if (p.output_type) o.output_type = parse_type(p.output_type, p.group_size);
    if (p.token_embedding_type) o.embd_type = parse_type(p.token_embedding_type, p.group_size);
    const int64_t method = infer::api::enum_value(p.method);  // the caller's integer, not loaded as the enum
    if (method < INFER_QUANT_RTN || method > INFER_QUANT_AWQ)
      infer::raise(infer::Status::InvalidArgument, "unknown quantization method %lld", static_cast<long long>(method));
    o.method = static_cast<infer::QuantMethod>(method);
    if (p.calib_text) o.calib_text = p.calib_text;
    if (p.n_threads < 0 || p.n_threads > infer::ThreadPool::kMaxThreads || p.calib_ctx < 2 || p.max_calib_tokens < 2 || !(p.gptq_damp >= 0))
      infer::raise(infer::Status::InvalidArgument, "infer_quantize: n_threads, calib_ctx, max_calib_tokens or "
                                                   "gptq_damp out of range");
    o.n_threads = p.n_threads;
    o.calib_ctx = p.calib_ctx;
    o.max_calib_tokens = p.max_calib_tokens;
    o.gptq_damp = p.gptq_damp;
    o.act_order = p.act_order != 0;
    set_callbacks(o, p);
    report(infer::quantize_model(in_path, out_path, o), result);
    return INFER_OK;
  });
}

infer_status infer_convert_hf(const char* dir, const char* out_path, const infer_quantize_params* params,
                              infer_quantize_result* result) {
  if (!dir || !out_path) return fail(INFER_ERR_INVALID_ARGUMENT, "infer_convert_hf: paths must not be NULL");
  if (params && !size_ok(params)) return fail(INFER_ERR_INVALID_ARGUMENT, "infer_convert_hf: params->struct_size is wrong");
  if (result && !size_ok(result)) return fail(INFER_ERR_INVALID_ARGUMENT, "infer_convert_hf: result->struct_size is wrong");
  infer_quantize_params p = read_params(params, infer_quantize_params_init);
  if (!params) p.type = nullptr;
  return guarded([&] {
    infer::ConvertHfOptions o;
    o.keep_types = p.type == nullptr;
    if (p.type) o.type = parse_type(p.type, p.group_size);
    if (infer::api::enum_value(p.method) != INFER_QUANT_RTN)
      infer::raise(infer::Status::InvalidArgument, "infer_convert_hf: only round to nearest (INFER_QUANT_RTN); run "
                                                   "infer_quantize with GPTQ or AWQ on the converted file");
    if (p.n_threads < 0 || p.n_threads > infer::ThreadPool::kMaxThreads)
      infer::raise(infer::Status::InvalidArgument, "infer_convert_hf: n_threads %d is out of range", p.n_threads);
    o.n_threads = p.n_threads;
    set_callbacks(o, p);
    report(infer::convert_hf(dir, out_path, o), result);
    return INFER_OK;
  });
}

void infer_synth_params_init(infer_synth_params* p) {
  if (!p) return;
  std::memset(p, 0, sizeof *p);
  p->struct_size = sizeof *p;
  p->preset = "tinyllama-1.1b";
  p->type = "f16";
  p->group_size = 128;
  p->seed = 1;
}

infer_status infer_synth(const char* out_path, const infer_synth_params* params, uint64_t* file_bytes) {
  if (!out_path) return fail(INFER_ERR_INVALID_ARGUMENT, "infer_synth: out_path must not be NULL");
  if (params && !size_ok(params)) return fail(INFER_ERR_INVALID_ARGUMENT, "infer_synth: params->struct_size is wrong");
  const infer_synth_params p = read_params(params, infer_synth_params_init);
  return guarded([&] {
    const infer::SynthPreset* preset = p.preset ? infer::find_synth_preset(p.preset) : nullptr;
    if (!preset) {
      std::string names;
      for (const auto& s : infer::synth_presets()) names += std::string(names.empty() ? "" : ", ") + s.name;
      infer::raise(infer::Status::InvalidArgument, "unknown synth preset '%s' (%s)", p.preset ? p.preset : "(null)",
                   names.c_str());
    }
    infer::SynthOptions o;
    o.type = parse_type(p.type, p.group_size);
    o.seed = p.seed;
    if (p.n_threads < 0 || p.n_threads > infer::ThreadPool::kMaxThreads)
      infer::raise(infer::Status::InvalidArgument, "infer_synth: n_threads %d is out of range [0, %d]", p.n_threads,
                   infer::ThreadPool::kMaxThreads);
    o.n_threads = p.n_threads;
    set_callbacks(o, p);
    const uint64_t n = p.grow_from ? infer::write_grown_model(p.grow_from, *preset, p.noise, out_path, o)
                                   : infer::write_synth_model(*preset, out_path, o);
    if (file_bytes) *file_bytes = n;
    return INFER_OK;
  });
}

const char* infer_synth_preset_name(int32_t index) {
  return infer::api::guarded_value<const char*>(nullptr, [&]() -> const char* {
    const auto& all = infer::synth_presets();
    return index >= 0 && static_cast<size_t>(index) < all.size() ? all[static_cast<size_t>(index)].name : nullptr;
  });
}

void infer_perplexity_params_init(infer_perplexity_params* p) {
  if (!p) return;
  std::memset(p, 0, sizeof *p);
  p->struct_size = sizeof *p;
}

infer_status infer_convert_llama2c(const char* checkpoint_path, const char* tokenizer_path, const char* out_path) {
  INFER_CHECK_ARG(checkpoint_path && tokenizer_path && out_path, "infer_convert_llama2c: paths must not be NULL");
  return guarded([&] {
    infer::convert_llama2c(checkpoint_path, tokenizer_path, out_path);
    return INFER_OK;
  });
}

infer_status infer_perplexity(const infer_model* model, const char* text, const infer_perplexity_params* params,
                              infer_perplexity_result* result) {
  INFER_CHECK_ARG(model && text && result && size_ok(result),
                  "infer_perplexity: NULL argument or wrong result struct_size");
  INFER_CHECK_ARG(!params || size_ok(params), "infer_perplexity: params->struct_size is wrong");
  const infer_perplexity_params p = read_params(params, infer_perplexity_params_init);
  return guarded([&] {
    const infer::Model* base = p.base ? &infer::api::model_of(p.base) : nullptr;
    const infer::PerplexityResult r =
        infer::perplexity(infer::api::model_of(model), text, p.n_ctx, p.n_threads, base);
    infer_perplexity_result o;
    std::memset(&o, 0, sizeof o);
    o.struct_size = sizeof o;
    o.perplexity = r.perplexity;
    o.nll = r.nll;
    o.n_tokens = r.n_tokens;
    o.n_chunks = r.n_chunks;
    o.kl_divergence = r.kl_divergence;
    o.top1_agreement = r.top1_agreement;
    o.base_perplexity = r.base_perplexity;
    return write_out(result, o);
  });
}

void infer_bench_params_init(infer_bench_params* p) {
  if (!p) return;
  std::memset(p, 0, sizeof *p);
  p->struct_size = sizeof *p;
  p->n_prompt = 64;
  p->n_gen = 32;
  p->repetitions = 3;
  p->batch = 1;
}

infer_status infer_bench(const infer_model* model, const infer_bench_params* params, infer_bench_result* result) {
  INFER_CHECK_ARG(model && result && size_ok(result), "infer_bench: NULL argument or wrong struct_size");
  INFER_CHECK_ARG(!params || size_ok(params), "infer_bench: params->struct_size is wrong");
  const infer_bench_params p = read_params(params, infer_bench_params_init);
  INFER_CHECK_ARG(!p.engine || size_ok(p.engine), "infer_bench: engine->struct_size is wrong");
  return guarded([&] {
    infer::EngineParams ep = to_engine_params(p.engine);
    ep.n_threads = p.n_threads;
    const infer::BenchResult r = infer::bench(infer::api::model_of(model), p.n_prompt, p.n_gen, p.batch, p.repetitions, ep);
    infer_bench_result o;
    std::memset(&o, 0, sizeof o);
    o.struct_size = sizeof o;
    o.n_prompt = r.n_prompt;
    o.n_gen = r.n_gen;
    o.n_threads = r.n_threads;
    o.batch = r.batch;
    o.prefill_ms = r.prefill_ms;
    o.decode_ms = r.decode_ms;
    o.prefill_tokens_per_s = r.prefill_tokens_per_s;
    o.decode_tokens_per_s = r.decode_tokens_per_s;
    o.decode_steps = r.decode_steps;
    o.prefill_comm_ms = r.prefill_comm_ms;
    o.decode_comm_ms = r.decode_comm_ms;
    o.decode_comm_bytes = r.decode_comm_bytes;
    return write_out(result, o);
  });
}

}  // extern "C"
