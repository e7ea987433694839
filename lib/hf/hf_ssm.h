// Hugging Face state-space checkpoints as GGUF-shaped views: MambaForCausalLM
// (model_type "mamba"), Mamba2ForCausalLM ("mamba2") and JambaForCausalLM
// ("jamba"), onto the GGUF architectures "mamba", "mamba2" and "jamba" as the
// GGUF converters write them (keys <arch>.ssm.*, tensors blk.N.ssm_*).
//
// What changes on the way (hf_model.cpp applies it at load):
//  - A_log becomes A = -exp(A_log) (blk.N.ssm_a, F32, owned by the view).
//  - conv1d.weight [channels, 1, d_conv] is read as {d_conv, channels} (the
//    same bytes); Mamba-2's A and D [n_head] as {1, n_head} and its gated
//    norm [d_inner] as {d_inner / n_group, n_group}.
//  - The small SSM vectors (conv weights and bias, dt bias, A, D, the SSM
//    norms) are F32 in the view whatever the checkpoint stores.
//  - Jamba: attn_layer_period/offset (or a layers_block_type list) become the
//    per-layer array <arch>.attention.head_count_kv (0 on Mamba layers);
//    expert_layer_period/offset say which layers are mixtures (router and
//    stacked ffn_*_exps), the others a dense SwiGLU (an "experts.0" of a dense
//    layer, as some checkpoints store it, is that dense FFN).
// Every tensor the layout needs is checked for presence and shape against
// config.json before anything is mapped, and every tensor present must belong
// to the layout: a d_inner (expand) that does not match in_proj, a layer
// pattern that does not match the tensors, a missing A_log or conv1d are
// Error(Format) naming the tensor and the config keys.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "core/json.h"
#include "gguf/gguf.h"

namespace infer {
namespace hf {

// model_type "mamba", "mamba2" or "jamba".
bool is_ssm(const std::string& model_type);

// The shape config.json describes, checked for consistency.
struct SsmLayout {
  std::string model_type, arch;  // HF model_type, general.architecture
  int64_t n_embd = 0, n_layer = 0, n_ctx = 0;
  int64_t d_inner = 0, d_state = 0, d_conv = 0, dt_rank = 0;
  int64_t n_head_ssm = 0, head_dim_ssm = 0, n_group = 1;  // Mamba-2
  int64_t n_head = 0, n_head_kv = 0, n_ff = 0;            // Jamba attention / FFN
  int64_t n_expert = 0, n_expert_used = 0;                // Jamba (n_expert > 1: MoE layers exist)
  double eps = 1e-5;
  std::vector<uint8_t> attn;  // per layer: 1 attention, 0 Mamba
  std::vector<uint8_t> moe;   // per layer: 1 mixture of experts (Jamba)
  bool conv_bias = true;

  int64_t conv_channels() const { return model_type == "mamba2" ? d_inner + 2 * n_group * d_state : d_inner; }
  int64_t in_proj_rows() const {
    return model_type == "mamba2" ? 2 * d_inner + 2 * n_group * d_state + n_head_ssm : 2 * d_inner;
  }
};

// config.json -> the layout. Error(Format) for missing or inconsistent
// values, Error(Unsupported) for variants the GGUF architectures do not run
// (biased in/out projections, no conv bias, un-normed Mamba-2).
SsmLayout ssm_layout(const Json& cfg, const std::string& model_type);

// The layout's GGUF metadata (general.architecture and <arch>.*).
std::vector<std::pair<std::string, GgufValue>> ssm_config_metadata(const Json& cfg, const std::string& model_type);

// An HF tensor name in the form the checks and the mapping use: "model."
// before "backbone." dropped, Mini-Jamba's ".moe." and B_/C_layernorm
// spellings, a dense Jamba layer's "experts.0." dropped (needs the layout;
// nullptr: left as is).
std::string ssm_canonical_name(const std::string& hf_name, const SsmLayout* layout);

// A canonical HF name -> its GGUF name ("" for tensors that are not part of
// the model; "<stacked name>#E" for expert E of a Jamba mixture, stacked by
// the caller). Error(Unsupported) naming the tensor when it is not known.
std::string ssm_tensor_name(const std::string& model_type, const std::string& hf_name);

// Checks every tensor against the layout (canonical HF names -> shapes as
// stored, slowest first): each one the layout needs is present with its
// shape, and none is there that the layout has no place for.
// Error(Format) otherwise. n_vocab_rows: the embedding's rows (out).
void ssm_check_tensors(const SsmLayout& L, const std::map<std::string, std::vector<int64_t>>& shapes,
                       int64_t* n_vocab_rows);

// How a mapped tensor appears in the view: its GGUF dims (innermost first)
// and whether it is stored as F32 (converted when the checkpoint's dtype
// differs) and as -exp(x) (A_log).
struct SsmView {
  std::vector<int64_t> dims;
  bool to_f32 = false;
  bool neg_exp = false;
};
SsmView ssm_view(const SsmLayout& L, const std::string& gguf_name, const std::string& hf_name,
                 const std::vector<int64_t>& hf_shape);

}  // namespace hf
}  // namespace infer
