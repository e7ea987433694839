// The building blocks every decoder-only architecture here is made of, and
// the weight binding they share. Each architecture (llama.cpp, qwen2.cpp,
// qwen3.cpp, phi3.cpp, gemma.cpp, gemma2.cpp) is a subclass (or a
// DenseTransformer with its own configure function) that reads its
// particulars from the GGUF metadata, binds its tensors into the structs
// below and writes its forward pass as a short loop over these blocks:
//
//   embed      x = embedding rows (times embed_scale)
//   norm       RMSNorm row by row (Gemma files store 1 + w already: see gemma.cpp)
//   attention  Q, K, V projections (+ biases), per-head Q/K RMSNorm, RoPE
//              (interleaved or rotate-half pairs; linear, llama3 or longrope
//              scaling), KV write, causal attention over the paged cache
//              (sliding window, soft-capping), output projection
//   gated_ffn  down(act(gate(x)) * up(x)) with act = SiLU or GELU (tanh)
//   output     final norm of the wanted rows, output head, logit soft-capping
//
// GGUF keys are read as "<arch>.<suffix>" (e.g. qwen2.attention.head_count).
#pragma once

#include <deque>
#include <functional>
#include <string>
#include <vector>

#include "model/model.h"

namespace infer {

struct AttnWeights {
  WeightView wq, wk, wv, wo;
  std::vector<float> bq, bk, bv;      // projection biases (empty: none)
  std::vector<float> q_norm, k_norm;  // per-head RMSNorm weights, head_dim values (empty: none)
  int32_t window = 0;                 // this layer's sliding window (0: all positions)
};

struct FfnWeights {
  WeightView gate, up, down;
};

struct LayerWeights {
  std::vector<float> attn_norm, ffn_norm;
  std::vector<float> post_attn_norm, post_ffn_norm;  // Gemma 2 (empty: none)
  AttnWeights attn;
  FfnWeights ffn;
};

// The backend workspace's slots a forward pass uses (core/backend.h).
enum WorkspaceSlot : int {
  kSlotX = 0, kSlotXb, kSlotQ, kSlotK, kSlotV, kSlotAtt, kSlotGate, kSlotUp, kSlotRows,
  kSlotXperm,                 // 3 slots: inputs gathered for permuted weights (WeightView::perm)
  kSlotLogits = kSlotXperm + 3,
  kSlotMoe,                   // kMoeSlots slots: the mixture-of-experts block (model/moe.h)
  kSlotSsm = kSlotMoe + kMoeSlots,  // kSsmSlots slots: the state-space layers (model/mamba.h)
};

// One forward pass in flight: the batch, its activation buffers ([m][...]
// rows, backend memory from the workspace) and what every layer shares.
struct Pass {
  const Batch& batch;
  KvCache* kv;            // nullptr: an encode pass (attention within the batch, no KV)
  Backend& be;
  Workspace& ws;          // host side
  BackendWorkspace& dws;  // the activations
  int64_t m = 0;
  float *x = nullptr, *xb = nullptr, *q = nullptr, *k = nullptr, *v = nullptr, *att = nullptr;
  float *gate = nullptr, *up = nullptr;
  AttnBatch ab;
  RopeParams rp;
};

// How a matrix is divided between the ranks of a tensor-parallel group
// (model/tp.h): Out gives each rank a contiguous run of n_out / N rows
// (column-parallel: Q/K/V by heads, FFN gate/up by units), In a run of
// n_in / N input columns of every row (row-parallel: the attention output
// and FFN down projections, whose partial products the group sums).
enum class Split { None, Out, In };

class Transformer : public Model {
 public:
  // The pre-norm residual stack every architecture here runs:
  //   x += [post_attn_norm](attention(attn_norm(x)))
  //   x += [post_ffn_norm](ffn(ffn_norm(x)))
  // (the post norms where a layer has them: Gemma 2), then the output head.
  void forward(const Batch& batch, KvCache& kv, Backend& be, Workspace& ws, float* logits,
               const uint8_t* skip) const override;
  void for_each_weight(const std::function<void(const WeightView&)>& fn) const override;
  void release_prepared(const std::function<bool(const WeightView&)>& held) override;
  void reserve_workspace(Workspace& ws, Backend& be, int64_t rows) const override;
  // Decoders as embedding models: the same stack with attention inside the
  // batch (causal unless the file says *.attention.causal = false), the
  // final norm of the wanted rows, and no output head.
  void encode(const Batch& batch, Backend& be, Workspace& ws, float* out, bool rank) const override;

 protected:
  // tp: the tensor-parallel group this rank loads its share for (null: the whole model).
  Transformer(std::unique_ptr<GgufFile> gguf, std::unique_ptr<Tokenizer> tok, bool vocab_only,
              std::shared_ptr<TpGroup> tp = nullptr);

  // ---- configuration ----
  std::string key(const char* suffix) const { return config_.arch + "." + suffix; }
  int32_t get_dim(const char* suffix, int64_t fallback) const;
  float get_float(const char* suffix, double fallback) const;
  // The shape every architecture has (embedding, layers, heads, head size,
  // FFN, context, epsilon, rope base, sliding window).
  void read_shape();
  // Rotary frequencies with the file's scaling; `neox` is the
  // architecture's pair layout (the metadata bool infer.rope.neox overrides
  // it: HF-layout llama Q/K).
  void setup_rope(bool neox);
  // Checks and the per-layer windows (every layer: sliding_window, unless
  // the architecture filled layer_window itself).
  void finish_config();

  // ---- weights ----
  // A matrix of n_out rows of n_in values (GGUF dims [n_in, n_out]), with
  // its input permutation when the file has "<name>.perm" (act-order GPTQ:
  // I32, n_in values, a permutation; Error(Format) otherwise).
  // `split`: this rank's share under tensor parallelism (Split::None, or a
  // single process: the whole matrix). Error(Unsupported) naming the tensor
  // when the share would cut a quantized block or the act-order
  // permutation of an input split.
  WeightView weight(const std::string& name, int64_t n_in, int64_t n_out, bool required = true,
                    Split split = Split::None) const;
  // This rank's share of a matrix bound whole (a part of a fused tensor):
  // Out: rows [r n_out / N, (r + 1) n_out / N) of w; In: those input columns
  // of every row, copied out of the file. w itself when not split.
  WeightView share(const WeightView& w, Split split, const std::string& name) const;
  // This rank's part of a vector laid out like an Out-split matrix's rows
  // (projection biases): elements [r n / N, (r + 1) n / N).
  std::vector<float> share(const std::vector<float>& v) const;
  // This rank's KV heads of a K or V projection (rows) or its bias: its
  // share, or with fewer KV heads than ranks the one its query heads read.
  WeightView kv_share(const WeightView& w) const;
  std::vector<float> kv_share(const std::vector<float>& v) const;
  // Sums a row-parallel block's partial results over the group (in place,
  // n floats of backend memory); nothing in a single process.
  void reduce(Pass& p, float* x, int64_t n) const;
  // Rows [first, first + n) of a matrix, as a matrix of its own (fused
  // tensors: Phi-3's attn_qkv and gate+up).
  WeightView rows(const WeightView& w, int64_t first, int64_t n) const;
  // A 1-D tensor as f32 (norms, biases: converted once at load). Empty when
  // absent and not required.
  std::vector<float> vector_f32(const std::string& name, int64_t n, bool required = true) const;
  // token_embd, output_norm and output (the embedding when output.weight is
  // absent: tied embeddings).
  void bind_embeddings();
  // attn_q/k/v/output of "blk.N." (+ .bias when `biases`, + attn_q_norm /
  // attn_k_norm when `qk_norm`).
  void bind_attention(const std::string& prefix, AttnWeights& a, bool biases, bool qk_norm);
  // ffn_gate, ffn_up, ffn_down of "blk.N.".
  void bind_ffn(const std::string& prefix, FfnWeights& f);
  // Every layer "blk.N.": its norms (the post norms too when
  // config.post_norms), then bind(prefix, layer) for its attention and FFN,
  // then its window.
  void bind_each_layer(const std::function<void(const std::string& prefix, LayerWeights& L)>& bind);
  // Every layer with separate Q/K/V and gate/up tensors: its norms (the post
  // norms too when config.post_norms), attention, window and FFN.
  void bind_layers(bool biases, bool qk_norm);

  // ---- forward building blocks ----
  // Validates the batch, sizes the buffers and embeds the tokens into p.x.
  // kv nullptr: an encode pass (no KV room to check, no block tables).
  Pass begin(const Batch& batch, KvCache* kv, Backend& be, Workspace& ws) const;
  // The residual stack of forward() over p (layers flagged in skip left out).
  void run_layers(Pass& p, const uint8_t* skip) const;
  // out = RMSNorm(in) * w, row by row over the pass's m rows of n_embd.
  void norm(Pass& p, const std::vector<float>& w, const float* in, float* out) const {
    p.be.rms_norm(in, w.data(), p.m, config_.n_embd, config_.rms_eps, out);
  }
  // out[m][n_embd] = self-attention of layer `layer` over in[m][n_embd]
  // (in may be out: it is read before out is written).
  void attention(Pass& p, int layer, const AttnWeights& a, const float* in, float* out) const;
  // out[m][n_embd] = down(act(gate(in)) * up(in)), act from config.ffn_act.
  void gated_ffn(Pass& p, const FfnWeights& f, const float* in, float* out) const;
  // Layer `layer`'s feed-forward block in forward(): the gated FFN unless
  // the architecture has another (Mixtral's experts).
  virtual void ffn(Pass& p, int layer, const float* in, float* out) const { gated_ffn(p, layers_[layer].ffn, in, out); }
  // x[perm] for a weight with an input permutation: the m rows of `in`
  // (w.n_in values each) gathered by the backend into the workspace's
  // buffer kSlotXperm + slot; `in` itself for any other weight.
  const float* permuted(Pass& p, const WeightView& w, const float* in, int64_t m, int slot) const;
  // out[m][w.n_out] = in · Wᵀ, through the input permutation when w has one.
  void linear(Pass& p, const WeightView& w, const float* in, int64_t m, float* out, int slot = 0) const {
    p.be.matmul(w, permuted(p, w, in, m, slot), m, out);
  }
  // Logits of the batch's logit_rows, into host memory (the edge out).
  void output(Pass& p, float* logits) const;
  // Tensor parallelism: the head over this rank's vocabulary rows for the
  // final-normed `rows`, all-gathered into logits.
  void output_shared(Pass& p, const float* rows, int64_t nr, float* logits) const;
  // The final-normed hidden states of the batch's logit_rows, into `out`
  // (host memory, n_embd floats per row).
  void output_hidden(Pass& p, float* out) const;

  // ---- this rank's share (tensor parallelism; the whole model otherwise) ----
  // Set by finish_config(): heads, KV heads and FFN units of this rank, and
  // its rows of the output head: [vocab_first_, vocab_first_ + vocab_n_),
  // vocab_chunk_ per rank (the last rank's may be shorter).
  int tp_size() const { return tp_ ? tp_->size() : 1; }
  int tp_rank() const { return tp_ ? tp_->rank() : 0; }
  int32_t lh_ = 0, lkv_ = 0, lff_ = 0;
  int32_t kv_first_ = 0;  // this rank's first KV head
  int64_t vocab_first_ = 0, vocab_n_ = 0, vocab_chunk_ = 0;
  // Input-column shares copied out of the file, in pages of their own so
  // that freeing one (release_prepared) gives its memory back to the system
  // (a heap block of that size may stay with the allocator).
  struct OwnedBytes {
    explicit OwnedBytes(size_t n);
    ~OwnedBytes() { free(); }
    OwnedBytes(const OwnedBytes&) = delete;
    OwnedBytes& operator=(const OwnedBytes&) = delete;
    void free();
    uint8_t* data = nullptr;
    size_t size = 0;
  };
  mutable std::deque<OwnedBytes> owned_;

  std::vector<LayerWeights> layers_;
  mutable std::deque<WeightCache> caches_;  // one per bound matrix (stable addresses)
  // Input permutations of act-order weights (WeightView::perm points here);
  // equal ones are stored once, so weights sharing an input (q/k/v,
  // gate/up) share one gathered copy of it.
  mutable std::deque<std::vector<int32_t>> perms_;
  WeightView tok_embd_, output_;
  std::vector<float> output_norm_;
  std::vector<float> inv_freq_;  // rope: n_rot / 2 inverse frequencies
  float attn_scale_ = 1.0f;      // resolved query scale
};

// The architectures made of the common layer alone (qwen2, qwen3, gemma,
// gemma2): read_shape, then `configure` sets the architecture's
// particulars, then rotate-half RoPE, the checks, the embeddings and
// bind_layers(biases, qk_norm).
class DenseTransformer final : public Transformer {
 public:
  using Configure = void (*)(DenseTransformer&);
  DenseTransformer(std::unique_ptr<GgufFile> gguf, std::unique_ptr<Tokenizer> tok, bool biases, bool qk_norm,
                   Configure configure, std::shared_ptr<TpGroup> tp);
  // For `configure`: the config being built and the metadata readers.
  ModelConfig& cfg() { return config_; }
  const GgufFile& file() const { return *gguf_; }
  using Transformer::get_float;
  using Transformer::key;
};

}  // namespace infer
