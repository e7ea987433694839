// A loaded model: the GGUF file (mmapped, read-only), its hyperparameters,
// its tokenizer, and the architecture that knows how to run a forward pass.
//
// THE forward contract (DESIGN.md): a Batch is a flat list of tokens from any
// number of sequences, each with its position and KV sequence slot, plus the
// rows whose logits are wanted. Prefill, decode, chunked prefill and
// speculative verification are all just batches.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/backend.h"
#include "model/tp.h"
#include "gguf/gguf.h"
#include "kv/kv_cache.h"
#include "model/moe.h"
#include "tokenizer/tokenizer.h"

namespace infer {

struct Batch {
  std::vector<int32_t> tokens;
  std::vector<int32_t> pos;
  std::vector<int32_t> slot;        // KV sequence slot of each token
  std::vector<int32_t> logit_rows;  // indices into tokens whose logits are wanted
  // Token types (BERT's segment ids: 0 for the first text, 1 for the second
  // of a pair) for Model::encode; empty: all 0.
  std::vector<int32_t> types;
  size_t size() const { return tokens.size(); }
  void clear() {
    types.clear();
    tokens.clear();
    pos.clear();
    slot.clear();
    logit_rows.clear();
  }
  void add(int32_t token, int32_t position, int32_t seq_slot, bool want_logits) {
    if (want_logits) logit_rows.push_back(static_cast<int32_t>(tokens.size()));
    tokens.push_back(token);
    pos.push_back(position);
    slot.push_back(seq_slot);
  }
};

struct ModelConfig {
  std::string arch;
  std::string name;
  int32_t n_vocab = 0;
  int32_t n_ctx_train = 0;
  int32_t n_embd = 0;
  int32_t n_layer = 0;
  int32_t n_head = 0;
  int32_t n_head_kv = 0;
  int32_t head_dim = 0;
  int32_t n_ff = 0;
  int32_t n_rot = 0;
  float rope_freq_base = 10000.0f;
  float rope_pos_scale = 1.0f;  // linear rope scaling: positions are multiplied by this
  bool rope_neox = false;
  float rms_eps = 1e-5f;
  // Every layer attends to the last N positions only (0: all); the engine
  // releases KV blocks that fall out of it. Models whose layers differ
  // (Gemma 2 alternates windowed and global layers) leave it 0 and say so in
  // layer_window.
  int32_t sliding_window = 0;
  // ---- the particulars of an architecture ----
  std::string rope_scaling = "none";  // none, linear, llama3, longrope
  float rope_mscale = 1.0f;           // longrope attention factor (cos and sin scaled)
  bool tied_embeddings = false;       // no output.weight: the embedding is the output head
  bool attn_bias = false;             // Q/K/V projection biases (Qwen2)
  bool qk_norm = false;               // per-head RMSNorm of Q and K before RoPE (Qwen3)
  bool post_norms = false;            // RMSNorm after attention and after the FFN (Gemma 2)
  std::string ffn_act = "silu";       // gating activation: silu (SwiGLU) or gelu (GELU tanh, Gemma)
  float embed_scale = 1.0f;           // embeddings multiplied by this (Gemma: sqrt(n_embd))
  float attn_scale = 0.0f;            // query scale of the scores (1/sqrt(head_dim) unless the architecture says)
  float attn_softcap = 0.0f;          // attention scores soft-capped at this (0: none)
  float final_softcap = 0.0f;         // logits soft-capped at this (0: none)
  std::vector<int32_t> layer_window;  // each layer's window (0: all positions); n_layer values
  int32_t n_expert = 0;               // mixture-of-experts FFN (Mixtral, model/moe.h): experts per layer (0: dense)
  int32_t n_expert_used = 0;          // experts each token is routed to
  // ---- embedding models (engine/embed.h) ----
  bool causal = true;                 // decoders; false: bidirectional attention (encoders, *.attention.causal = false)
  bool encoder_only = false;          // no language-model head: embeddings only (bert, nomic-bert)
  int32_t pooling = -1;               // the file's *.pooling_type (0 none, 1 mean, 2 cls, 3 last, 4 rank); -1: not said
  int32_t n_cls_out = 0;              // reranker: outputs of the classifier head (cls.output.weight rows); 0: no head
  int32_t n_token_types = 0;          // token type (segment) embeddings (BERT: 2); 0: none
  float norm_eps = 1e-12f;            // LayerNorm epsilon (encoders: *.attention.layer_norm_epsilon)
  // ---- state-space layers (model/mamba.h: mamba, mamba2, jamba) ----
  // layer_ssm[l] != 0: layer l is a Mamba layer (its recurrent state lives in
  // the KV blocks, kv/kv_format.h) instead of attention; empty: none is.
  std::vector<uint8_t> layer_ssm;
  int32_t ssm_d_conv = 0;    // convolution taps
  int32_t ssm_d_inner = 0;   // inner width
  int32_t ssm_d_state = 0;   // state per channel (Mamba-1) or head (Mamba-2)
  int32_t ssm_dt_rank = 0;   // Mamba-1: rank of the dt projection; Mamba-2: heads
  int32_t ssm_n_group = 0;   // Mamba-2: groups of B and C (Mamba-1: 1)
  int32_t ssm_n_head = 0;    // scan heads: d_inner (Mamba-1) or dt_rank (Mamba-2)
  int32_t ssm_conv_channels = 0;  // convolved channels: d_inner (Mamba-1), d_inner + 2 n_group d_state (Mamba-2)
  // Layers with recurrent state, and whether there is no attention at all
  // (then a sequence needs only the block of its last computed position).
  int32_t n_ssm_layers() const {
    int32_t n = 0;
    for (uint8_t f : layer_ssm) n += f != 0;
    return n;
  }
  bool recurrent() const { return n_ssm_layers() > 0; }
  bool attention_free() const { return recurrent() && n_ssm_layers() == n_layer; }
  // ---- tensor parallelism (model/tp.h) ----
  // The shapes above are the whole model's; a rank of tp_size runs
  // n_head / tp_size heads, n_head_kv / tp_size KV heads (its kv_layout())
  // and n_ff / tp_size FFN units.
  int32_t tp_size = 1, tp_rank = 0;
};

struct LoadOptions {
  bool use_mmap = true;
  bool vocab_only = false;
  // Tensor parallelism (model/tp.h): with a communicator of size N > 1 this
  // process loads, prepares and runs only its rank's 1/N of the weights
  // (Error(Unsupported) for a shape that cannot be split N ways). null or
  // size 1: the whole model.
  std::shared_ptr<Communicator> comm;
};

// What a forward pass reuses from one step to the next (grown, never shrunk,
// so the hot path does not allocate once warmed up): the activation buffers,
// in the backend's memory (core/backend.h: the memory contract), and the
// host side of the pass (batch metadata, the MoE routing's edge copies).
struct Workspace {
  // The activations, made by the backend of the pass (on first use, and
  // again if another backend runs the next pass).
  BackendWorkspace& on(Backend& be) {
    if (!dev || owner != &be) {
      dev = be.make_workspace();
      owner = &be;
    }
    return *dev;
  }
  std::unique_ptr<BackendWorkspace> dev;
  const Backend* owner = nullptr;
  // Host memory.
  std::vector<const int32_t*> tables;  // each token's block table (AttnBatch::table)
  std::vector<int32_t> ids;            // encoders: token types / positions handed to get_rows
  MoeHostScratch moe;                  // routing of the mixture-of-experts block (model/moe.h)
  std::vector<float> gathered;         // tensor parallelism: every rank's logits before reordering
};

class Model {
 public:
  // Loads a GGUF model. Error(Io/Format/Unsupported) with a clear message.
  static std::unique_ptr<Model> load(const std::string& path, const LoadOptions& opts = {});
  virtual ~Model() = default;

  const ModelConfig& config() const { return config_; }
  const GgufFile& gguf() const { return *gguf_; }
  const Tokenizer& tokenizer() const { return *tokenizer_; }
  bool vocab_only() const { return vocab_only_; }
  uint64_t n_params() const { return n_params_; }
  uint64_t n_bytes() const { return n_bytes_; }

  // Shape of the KV cache this model needs (block size and count filled by the caller).
  KvLayout kv_layout() const;

  // Runs the batch. Token ids, positions and slots must be valid and the KV
  // sequences must have room for every position (the engine guarantees it).
  // logits (host memory) receives logit_rows.size() rows of n_vocab floats:
  // the pass's edge out (BackendWorkspace::output / download).
  // skip: nullptr, or one flag per layer; flagged layers are left out (the
  // residual stream passes them unchanged and their KV is not written):
  // the self-speculative draft model.
  virtual void forward(const Batch& batch, KvCache& kv, Backend& backend, Workspace& ws, float* logits,
                       const uint8_t* skip = nullptr) const = 0;

  // Embedding models (engine/embed.h): runs a batch of whole sequences with
  // no KV cache (token t is at position pos[t] of sequence slot[t]; the
  // tokens of a sequence are contiguous and every sequence attends within
  // itself only, causally or both ways as config().causal says) and writes,
  // for each of batch.logit_rows in order, the final hidden state (n_embd
  // floats, after the final norm) into `out` (host memory), or with `rank`
  // the classifier head's n_cls_out scores of that row (config().n_cls_out
  // > 0). Error(Unsupported) for a model that cannot.
  virtual void encode(const Batch& batch, Backend& backend, Workspace& ws, float* out, bool rank) const;

  // Every matrix weight of the model (for load-time preparation by a backend).
  virtual void for_each_weight(const std::function<void(const WeightView&)>& fn) const = 0;
  // After a backend prepared the weights: the bytes of every weight `held`
  // says the backend no longer reads leave memory (file pages are given
  // back, copies made at load freed). Such a weight must then run on that
  // backend only (Model::backend()).
  virtual void release_prepared(const std::function<bool(const WeightView&)>& held) {}
  // Sizes (and so commits the pages of) the workspace of backend `be` for
  // batches of up to `rows` tokens, so the first request does not pay the
  // page faults (or a device backend its allocations).
  virtual void reserve_workspace(Workspace& ws, Backend& be, int64_t rows) const {}
  // The tensor-parallel group this rank belongs to; null for a whole model.
  TpGroup* tp() const { return tp_.get(); }
  // Identifies the model's bytes as loaded (metadata, tensor table and a
  // sample of every tensor's data, plus the split): what ranks compare at
  // start-up so a mismatched file or split fails clearly.
  uint64_t fingerprint() const { return fingerprint_; }
  // The backend the model was prepared for at load (engines create it).
  BackendKind backend() const { return backend_; }
  void set_backend(BackendKind k) { backend_ = k; }

 protected:
  Model() = default;
  // What fingerprint() returns, computed from the file at load.
  static uint64_t file_fingerprint(const GgufFile& gguf, int32_t tp_size);
  // The architecture's factory (load() after the file is open and checked).
  static std::unique_ptr<Model> create(std::unique_ptr<GgufFile> gguf, std::unique_ptr<Tokenizer> tok,
                                       const std::string& arch, bool vocab_only, std::shared_ptr<TpGroup> tp);
  std::unique_ptr<GgufFile> gguf_;
  std::unique_ptr<Tokenizer> tokenizer_;
  ModelConfig config_;
  bool vocab_only_ = false;
  BackendKind backend_ = BackendKind::Cpu;
  uint64_t n_params_ = 0, n_bytes_ = 0;
  std::shared_ptr<TpGroup> tp_;
  uint64_t fingerprint_ = 0;
};

// Architecture factories (one file each, over lib/model/transformer.h).
// tp: the tensor-parallel group whose share this rank loads (null: all).
std::unique_ptr<Model> create_llama_model(std::unique_ptr<GgufFile> gguf, std::unique_ptr<Tokenizer> tok,
                                          bool vocab_only, std::shared_ptr<TpGroup> tp = nullptr);
std::unique_ptr<Model> create_qwen2_model(std::unique_ptr<GgufFile> gguf, std::unique_ptr<Tokenizer> tok,
                                          std::shared_ptr<TpGroup> tp = nullptr);
std::unique_ptr<Model> create_qwen3_model(std::unique_ptr<GgufFile> gguf, std::unique_ptr<Tokenizer> tok,
                                          std::shared_ptr<TpGroup> tp = nullptr);
std::unique_ptr<Model> create_phi3_model(std::unique_ptr<GgufFile> gguf, std::unique_ptr<Tokenizer> tok,
                                         std::shared_ptr<TpGroup> tp = nullptr);
std::unique_ptr<Model> create_gemma_model(std::unique_ptr<GgufFile> gguf, std::unique_ptr<Tokenizer> tok,
                                          std::shared_ptr<TpGroup> tp = nullptr);
std::unique_ptr<Model> create_bert_model(std::unique_ptr<GgufFile> gguf, std::unique_ptr<Tokenizer> tok,
                                         std::shared_ptr<TpGroup> tp = nullptr);
std::unique_ptr<Model> create_gemma2_model(std::unique_ptr<GgufFile> gguf, std::unique_ptr<Tokenizer> tok,
                                           std::shared_ptr<TpGroup> tp = nullptr);
// The architectures this build runs (general.architecture values).
const std::vector<std::string>& supported_architectures();

}  // namespace infer
