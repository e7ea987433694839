// Model quantization: reads a GGUF model, writes it with its weight matrices
// in another format. Methods:
//  - RTN: each block rounded to its nearest grid (quant/formats.h).
//  - GPTQ: calibration text runs through the model layer by layer (each
//    layer sees the outputs of the already-quantized layers before it); each
//    linear layer's input Hessian H = 2/N Σ x xᵀ is collected, damped, and
//    its inverse's Cholesky factor drives column-by-column quantization with
//    error feedback (lazy batch updates, optional act-order with static
//    groups); tools/calibrated.cpp.
//  - AWQ: per-input-channel scales s = mean|x|^α (α searched on a grid to
//    minimise the layer's output error), folded into the preceding RMSNorm
//    (q/k/v, gate/up) or linear layer (v -> o when heads are not grouped
//    differently, up -> down), then a per-group clipping search; tools/calibrated.cpp.
// GPTQ and AWQ need a grid format (q8_0, q4_0, q4_1, q5_0, q5_1, int4_g*).
//
// Tensors quantized: the 2-D weights (token_embd, output, attention and
// feed-forward matrices; the first two may get their own formats); norms and
// other tensors are copied. A tensor whose
// row length the format's block does not divide falls back to a type that
// fits (quant/formats.h: fallback_type) and a note says so. Big models stream:
// at most one tensor (GPTQ/AWQ: one layer) is held in memory at a time.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace infer {

class ThreadPool;
class GgufStreamWriter;
class GgufFile;

enum class QuantMethod { Rtn = 0, Gptq = 1, Awq = 2 };
const char* quant_method_name(QuantMethod m);

struct QuantizeOptions {
  DType type = DType::Q4_0;
  // Other formats for the output head and the token embedding (llama.cpp's
  // llama-quantize --output-tensor-type / --token-embedding-type): unset,
  // they get `type`. With tied embeddings (no output.weight) token_embd is
  // the output head too and takes output_type when that is set.
  std::optional<DType> output_type, embd_type;
  QuantMethod method = QuantMethod::Rtn;
  std::string calib_text;       // GPTQ / AWQ calibration text
  int n_threads = 0;            // 0: all cores
  int calib_ctx = 256;          // tokens per calibration window (BOS + text)
  int max_calib_tokens = 8192;  // cap on calibration tokens
  float gptq_damp = 0.01f;      // fraction of mean(diag H) added to the diagonal
  int gptq_block = 128;         // lazy-batch width
  bool act_order = false;       // quantize columns by decreasing H diagonal
  int awq_grid = 20;            // α steps in [0, 1)
  // Progress in [0, 1] with a short description; notes (fallbacks, ...).
  std::function<void(double, const std::string&)> progress;
  std::function<void(const std::string&)> note;
};

struct QuantizeStats {
  int64_t n_tensors = 0, n_quantized = 0, n_fallback = 0;
  uint64_t bytes_in = 0, bytes_out = 0;
};

QuantizeStats quantize_model(const std::string& in_path, const std::string& out_path, const QuantizeOptions& o);

// ---- pieces shared with the synthetic-model writer (tools/synth.cpp) -------------

// Whether a tensor of this name and shape gets quantized.
bool is_quantizable(const std::string& name, const std::vector<int64_t>& dims);
// The type a quantizable tensor gets for a requested type (fallback applied);
// *fell_back tells whether it differs.
DType tensor_type(DType want, int64_t n_in, bool* fell_back);
// The type asked for the quantizable tensor `name` of a model that has (or
// has not) an output.weight: o.output_type, o.embd_type or o.type.
DType requested_type(const QuantizeOptions& o, const std::string& name, bool has_output);
// Declares the tensor (and, for W8A8, its "<name>.scale" companion).
void declare_tensor(GgufStreamWriter& w, const std::string& name, const std::vector<int64_t>& dims, DType t);
// Encodes rows [n_rows][n_in] of f32 into t (rows spread over the pool) and
// writes them; for W8A8 the caller writes the scales (collected into
// scales[n_rows]) after all rows of the tensor.
void write_rows(GgufStreamWriter& w, DType t, const float* src, int64_t n_rows, int64_t n_in, float* scales,
                ThreadPool* pool);
// Metadata keys describing the quantization (quant/formats.h).
void write_quant_metadata(GgufStreamWriter& w, DType want, QuantMethod method);

}  // namespace infer
