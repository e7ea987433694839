// The narrow interface a model calls to compute. The CPU backend (cpu/) is
// the reference; every other backend is tested against it.
//
// Conventions: activations are f32 row-major [m rows][n]. A weight is a
// matrix stored as the file has it: n_out rows of n_in values each, in its
// own element format (f32, f16, q4_0, ...). matmul computes y = x · Wᵀ.
//
// THE MEMORY CONTRACT (who owns what, when copies happen):
//  - Activations live in backend memory. A model gets every buffer of its
//    forward pass (hidden states, q/k/v, attention output, FFN
//    intermediates, MoE scratch, logits) from a BackendWorkspace the backend
//    made (Backend::make_workspace). Every `float*` activation argument of an
//    op below is such backend memory; model code never reads or writes it on
//    the host. A device backend therefore keeps activations resident from the
//    embedding to the logits, with no copy between ops.
//  - Model memory is host memory, read-only, alive as long as the model:
//    weights (WeightView), norm weights and biases (`const float*` weight
//    vectors), rope frequencies, act-order permutations. A backend makes its
//    own copies of them once (prepare_weight at load, WeightCache, or its own
//    cache keyed by address) and never per step.
//  - Batch metadata is host memory, read by the backend where it needs it:
//    token ids (get_rows: the tokens come in there), positions and block
//    tables (AttnBatch, rope's pos: a device backend copies them once per
//    forward pass, in upload_batch), row index lists (gather_rows,
//    scatter_add_rows) and their weights.
//  - Host copies of activations happen only at the edges, explicitly, through
//    the workspace: BackendWorkspace::output / download for results the host
//    reads (the logits; Mixtral's router logits, routed on the host). On the
//    CPU those are pointer hand-offs: the op writes straight into the host
//    buffer and download is a no-op, so the CPU pays no copy and, once the
//    workspace is grown, no allocation per step.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "core/dtype.h"

namespace infer {

class KvMemory;
struct KvLayout;
enum class KvTier : int;
class ThreadPool;

// Copies of one weight that backends make for themselves (e.g. the CPU
// backend's interleaved row tiles), at load (Backend::prepare_weight), owned by the model next to
// the weight so they live exactly as long as it. Thread-safe: engines on
// many threads may share a model. The mmapped file itself is never written.
class WeightCache {
 public:
  // The copy stored under `key` (one tag per backend / layout), built by
  // make() the first time it is asked for. make returns shared_ptr<T>.
  template <typename T, typename Make>
  const T* get(const void* key, Make&& make) {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& e : entries_)
      if (e.first == key) return static_cast<const T*>(e.second.get());
    std::shared_ptr<T> made = make();
    const T* p = made.get();
    entries_.emplace_back(key, std::shared_ptr<const void>(std::move(made)));
    return p;
  }
  // Whether a copy is stored under `key`.
  bool contains(const void* key) const {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& e : entries_)
      if (e.first == key) return true;
    return false;
  }
  // Copies held (tests: was the weight prepared?).
  size_t size() const {
    std::lock_guard<std::mutex> lock(mu_);
    return entries_.size();
  }

 private:
  mutable std::mutex mu_;
  std::vector<std::pair<const void*, std::shared_ptr<const void>>> entries_;
};

struct WeightView {
  DType type = DType::F32;
  int64_t n_in = 0;   // values per row (the reduction dimension)
  int64_t n_out = 0;  // rows
  const uint8_t* data = nullptr;
  size_t row_bytes = 0;
  // W8A8: the per-row scales (n_out floats) that go with the int8 rows.
  const float* scale = nullptr;
  // Act-order GPTQ (lib/hf/hf_quant.cpp): column j of the rows multiplies
  // input perm[j] (n_in values, a permutation; nullptr: inputs in order).
  // matmul does not read it: the model passes it x[perm] (gathered by
  // permute_cols in Transformer::linear), so for matmul this is an ordinary
  // matrix.
  const int32_t* perm = nullptr;
  // Where backends keep repacked copies; nullptr: repack on every call or
  // not at all (tests and benchmarks that bind raw buffers).
  WeightCache* cache = nullptr;
  const uint8_t* row(int64_t r) const { return data + static_cast<size_t>(r) * row_bytes; }
};

// Tokens of a batch as attention sees them: token t belongs to KV sequence
// slot[t], sits at position pos[t] of that sequence, and finds position p's
// block at table[t][p / block_size] (the sequence's block table, kept by
// lib/kv's book-keeper; -1 marks a block released by the sliding window).
// Tokens of one sequence share one table pointer.
struct AttnBatch {
  int64_t n_tokens = 0;
  const int32_t* pos = nullptr;
  const int32_t* slot = nullptr;
  int32_t window = 0;  // sliding window: attend to positions > pos - window (0: all)
  const int32_t* const* table = nullptr;
  // Logit soft-capping (Gemma 2): each scaled score s becomes
  // softcap * tanh(s / softcap) before the softmax (0: none).
  float softcap = 0.0f;
};

// Rotary embedding: dims [0, n_rot) of each head are rotated by
// pos * inv_freq[i] (i = pair index). `neox` pairs dim i with i + n_rot/2;
// otherwise pairs are adjacent (2i, 2i+1), the layout of GGUF `llama` files.
struct RopeParams {
  int n_rot = 0;
  bool neox = false;
  const float* inv_freq = nullptr;  // n_rot / 2 values
  float pos_scale = 1.0f;           // linear position scaling (1 = none)
  float mscale = 1.0f;              // cos and sin multiplied by this (Phi-3 long-rope attention factor)
};

// The sequences of a batch as the state-space layers see them (model/mamba.h,
// kv/kv_format.h: the recurrent state lives in the KV blocks). Sequence i
// owns the batch rows [row0[i], row0[i] + n_rows[i]), at positions pos0[i],
// pos0[i] + 1, ... of the sequence whose block table is table[i]. Its state
// before row0[i] is read from block table[i][(pos0[i] - 1) / block_size]
// (zeros when pos0[i] == 0), and the state after position p is written into
// block table[i][p / block_size] for every p that is the last position of a
// block and for the last row (the running state). Sequences are independent:
// a batch names each at most once. Host memory.
struct SsmBatch {
  int32_t n_seqs = 0;
  const int32_t* row0 = nullptr;
  const int32_t* n_rows = nullptr;
  const int32_t* pos0 = nullptr;
  const int32_t* const* table = nullptr;
};

// One selective scan over a batch (Mamba-1 and Mamba-2 alike). The state of a
// sequence is h[n_head][head_dim][d_state]; for each of its rows, in order:
//   dt_h   = softplus(dt[h] + dt_bias[h])   (softplus(v) = v above 20, else log(1 + e^v))
//   dA     = exp(dt_h * A[h][s])   (a_per_state; else exp(dt_h * A[h]) for every s)
//   h[h][p][s] = h[h][p][s] * dA + dt_h * x[h][p] * B[g][s]   (g = h / (n_head / n_group))
//   y[h][p]    = sum_s h[h][p][s] * C[g][s] + D[h] * x[h][p]
//   y         *= silu(z)   (when z is given)
// Mamba-1 is n_head = d_inner channels of head_dim 1 with A per state and one
// group; Mamba-2 has scalar A per head, head_dim = d_inner / n_head, and
// n_group groups of B and C. Activations (backend memory) are rows of the
// batch at the given strides (in floats); weights are model memory.
struct SsmScanParams {
  int64_t n_head = 0, head_dim = 1, d_state = 0, n_group = 1;
  const float* x = nullptr;   int64_t x_stride = 0;   // [m][n_head * head_dim]
  const float* dt = nullptr;  int64_t dt_stride = 0;  // [m][n_head], before the bias and softplus
  const float* B = nullptr;   int64_t b_stride = 0;   // [m][n_group][d_state]
  const float* C = nullptr;   int64_t c_stride = 0;   // [m][n_group][d_state]
  const float* z = nullptr;   int64_t z_stride = 0;   // [m][n_head * head_dim] gate; nullptr: none
  float* y = nullptr;                                 // [m][n_head * head_dim], contiguous
  const float* dt_bias = nullptr;                     // [n_head]; nullptr: none
  const float* A = nullptr;                           // [n_head][d_state] or [n_head]
  bool a_per_state = true;
  const float* D = nullptr;                           // [n_head]; nullptr: none
};

// The activation buffers of one forward pass at a time, in one backend's
// memory (see THE MEMORY CONTRACT above). Made by Backend::make_workspace,
// used with that backend only; not thread-safe (one engine, one pass).
class BackendWorkspace {
 public:
  virtual ~BackendWorkspace() = default;
  // Buffer `slot` (a small index the model chooses) with room for at least
  // `bytes` bytes, in backend memory. Grown when smaller (its contents are
  // then not kept), never shrunk: a warmed-up workspace does not allocate.
  virtual void* buffer(int slot, size_t bytes) = 0;
  template <typename T>
  T* get(int slot, int64_t n) { return static_cast<T*>(buffer(slot, static_cast<size_t>(n) * sizeof(T))); }
  // The edge out, in two halves. output(): where an op should write a result
  // of `bytes` bytes that the host will read at `host` (the CPU: `host`
  // itself; a device: buffer `slot`). download(): makes host[0, bytes) equal
  // to that result (a no-op when `result == host`, as on the CPU).
  virtual void* output(int slot, void* host, size_t bytes) = 0;
  virtual void download(void* host, const void* result, size_t bytes) = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual const char* name() const = 0;

  // The workspace a model's forward pass takes its activations from.
  virtual std::unique_ptr<BackendWorkspace> make_workspace() = 0;
  // The edge in for the batch description: a device backend copies the
  // positions and block tables of `b` (host memory) to its memory now, once
  // per forward pass; its rope / kv_write / attention calls of this pass
  // with the same host arrays read that copy. The CPU reads the host arrays.
  virtual void upload_batch(const AttnBatch& b) {}

  // y[m][w.n_out] = x[m][w.n_in] · Wᵀ.
  virtual void matmul(const WeightView& w, const float* x, int64_t m, float* y) = 0;
  // out[i] = row ids[i] of w, as f32 (embedding lookup): the edge where
  // the tokens come in. ids: host memory, validated.
  virtual void get_rows(const WeightView& w, const int32_t* ids, int64_t m, float* out) = 0;
  // y = x / rms(x) * weight, row by row (n values per row).
  virtual void rms_norm(const float* x, const float* weight, int64_t m, int64_t n, float eps, float* y) = 0;
  // Rotates n_heads heads of head_dim values in each of m rows, in place.
  virtual void rope(float* x, int64_t m, int n_heads, int head_dim, const int32_t* pos, const RopeParams& p) = 0;
  // out = silu(gate) * up, elementwise.
  virtual void swiglu(const float* gate, const float* up, float* out, int64_t n) = 0;
  // x += y, elementwise.
  virtual void add(float* x, const float* y, int64_t n) = 0;
  // out = gelu(gate) * up with GELU's tanh approximation,
  // gelu(g) = 0.5 g (1 + tanh(sqrt(2/pi) (g + 0.044715 g^3))) (Gemma).
  virtual void geglu(const float* gate, const float* up, float* out, int64_t n) = 0;
  // x[r][i] += bias[i] for m rows of n values (projection biases).
  virtual void add_bias(float* x, const float* bias, int64_t m, int64_t n) = 0;
  // x *= s, elementwise.
  virtual void scale(float* x, int64_t n, float s) = 0;
  // x = cap * tanh(x / cap), elementwise (logit soft-capping).
  virtual void softcap(float* x, int64_t n, float cap) = 0;
  // out[r][j] = x[r][perm[j]] for m rows of n values (act-order weights'
  // inputs, WeightView::perm: model memory, a permutation of 0..n-1).
  virtual void permute_cols(const float* x, int64_t m, int64_t n, const int32_t* perm, float* out) = 0;
  // out[j] = x[rows[j]] for n_rows rows of n values (rows: host memory).
  virtual void gather_rows(const float* x, const int32_t* rows, int64_t n_rows, int64_t n, float* out) = 0;
  // acc[rows[j]][c] += w[j] * y[j][c], for j in order (rows, w: host
  // memory; a row index may repeat: the sums run in j order).
  virtual void scatter_add_rows(float* acc, const int32_t* rows, const float* w, const float* y, int64_t n_rows,
                                int64_t n) = 0;
  // dst = src (n floats), within backend memory.
  virtual void copy(float* dst, const float* src, int64_t n) = 0;
  // x = 0 (n floats).
  virtual void zero(float* x, int64_t n) = 0;
  // A pool of KV blocks in this backend's memory (kv/kv_format.h: the
  // layout and element formats every backend implements). The KV cache's
  // book-keeper calls it for its primary pool and its host tier.
  virtual std::unique_ptr<KvMemory> make_kv_memory(const KvLayout& layout, int n_blocks, KvTier tier) = 0;
  // Stores the K and V rows ([n_tokens][kv_dim]) of a layer into the pool
  // (made by make_kv_memory), at the blocks the batch's tables name.
  virtual void kv_write(KvMemory& kv, int layer, const float* k, const float* v, const AttnBatch& b) = 0;
  // Causal attention of each token over positions [0, pos] of its sequence
  // (the last `window` of them for sliding-window models), read through the
  // block tables in the pool's element type. q, out: [n_tokens][n_head * head_dim].
  virtual void attention(const float* q, const KvMemory& kv, int layer, const AttnBatch& b, int n_head,
                         float scale, float* out) = 0;

  // ---- encoders and embedding models (no KV cache: engine/embed.h) ----
  // A backend without them refuses encoder models with Error(Unsupported).
  // y = (x - mean(x)) / sqrt(var(x) + eps) * weight + bias, row by row (n
  // values per row; bias may be nullptr). y may be x.
  virtual void layer_norm(const float* x, const float* weight, const float* bias, int64_t m, int64_t n, float eps,
                          float* y);
  // x = gelu(x) = 0.5 x (1 + erf(x / sqrt 2)) (BERT's exact form), elementwise.
  virtual void gelu(float* x, int64_t n);
  // x = tanh(x), elementwise (the reranker's pooler).
  virtual void tanh(float* x, int64_t n);
  // Attention within the batch, with no KV cache: token t attends to the
  // tokens u with slot[u] == slot[t] (and pos[u] <= pos[t] when `causal`).
  // The tokens of one sequence are contiguous in the batch. q, out:
  // [n_tokens][n_head * head_dim]; k, v: [n_tokens][n_head_kv * head_dim]
  // (grouped heads). b.table and b.window are not read.
  virtual void attention_dense(const float* q, const float* k, const float* v, const AttnBatch& b, int n_head,
                               int n_head_kv, int head_dim, float scale, bool causal, float* out);

  // ---- state-space layers (model/mamba.h) ----
  // A backend without them refuses state-space models with
  // Error(Unsupported). The state lives in the KV pool's blocks
  // (KvLayout::n_ssm_layers; SsmBatch says which block each sequence reads
  // and writes).
  // Causal depthwise convolution of each sequence's rows, continuing from
  // its convolution state (the last d_conv - 1 inputs before its first row):
  //   out[r][c] = silu(bias[c] + sum_{k < d_conv} w[c][k] * in[r - (d_conv - 1) + k][c])
  // where inputs before the sequence's first row come from the state, and the
  // state is updated to the last d_conv - 1 inputs (written as SsmBatch says).
  // x: m rows of `channels` values at stride x_stride floats; out: [m]
  // [channels], contiguous; w: [channels][d_conv], bias: [channels] (model memory).
  virtual void ssm_conv(KvMemory& kv, int ssm_layer, const SsmBatch& b, const float* x, int64_t x_stride,
                        int64_t channels, int d_conv, const float* w, const float* bias, float* out);
  // The selective scan (SsmScanParams), reading and writing the scan state
  // of layer ssm_layer as SsmBatch says.
  virtual void ssm_scan(KvMemory& kv, int ssm_layer, const SsmBatch& b, const SsmScanParams& p);
  // RMSNorm of each group of gs values: y[r][g][i] = x[r][g][i] /
  // sqrt(mean_i(x[r][g][i]^2) + eps) * weight[g * gs + i], for m rows of
  // n_group * gs values read at stride x_stride floats (>= n_group * gs); y
  // is [m][n_group * gs], contiguous (y may not overlap x unless x_stride
  // == n_group * gs). Mamba-2's grouped norm; n_group = 1 is a strided RMSNorm
  // (Jamba's dt, B and C norms).
  virtual void rms_norm_groups(const float* x, int64_t x_stride, const float* weight, int64_t m, int64_t n_group,
                               int64_t gs, float eps, float* y);

  // ---- what the engine must know of the backend ----
  // Builds, now, every copy of w in the layouts this backend's kernels want
  // (into w.cache), so that no request pays for it later. Called for every
  // weight when a model is loaded (backends/backends.h: prepare_weights).
  virtual void prepare_weight(const WeightView& w) {}
  // Rows per step that cost about as much as one row more or less (a tile of
  // the matmul kernels): the scheduler ends continuous-batching steps on a
  // multiple of it when it can (1: no preference).
  virtual int32_t preferred_row_multiple() const { return 1; }
};

// Which backend runs a model (the values of infer_backend).
enum class BackendKind : int { Auto = 0, Cpu = 1, Cuda = 2 };
// The backends themselves are made by the factory (backends/backends.h).

}  // namespace infer
