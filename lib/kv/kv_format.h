// What a KV block holds and how its bytes encode K and V: the one
// specification every backend implements, with a scalar reference
// implementation (kv_format.cpp) that tests compare backends against.
//
// A pool of blocks is memory a backend allocates and owns (KvMemory): the
// CPU backend keeps it in host memory with the layout of HostKvMemory below;
// a GPU backend keeps its primary pool in device memory. lib/kv's book-keeper
// (KvCache) never touches the bytes: it asks the memory to copy whole blocks
// (copy-on-write, swapping to and from the host tier).
//
// Inside a block, for each layer, K and V are laid out [kv_head][token]
// [head_dim] elements, so one head's keys of a block are contiguous. Element
// formats:
//  - f32: the value.
//  - f16: IEEE half, rounded to nearest even.
//  - int8: each head's row of head_dim values is first rotated by the
//    orthonormal Walsh-Hadamard transform when head_dim is a power of two
//    (<= 1024; `rotates`), which spreads a few large components over the whole
//    row so the row's scale, set by its largest value, loses less precision.
//    Attention works in the rotated space (q is rotated the same way, and the
//    weighted sum of V rows is rotated back: H is its own inverse).
//    - V: symmetric: v ≈ s * q, s = max|v| / 127 (an f32 per (token, head)).
//    - K: asymmetric against a per-(block, head) offset c: k ≈ c + z + s * q
//      with q in [-128, 127], s and z two f16 in the 4-byte scale slot of the
//      (token, head) (s rounded up so that the range always fits). c is the
//      mean of the previous block's stored keys of the same sequence (0 in a
//      sequence's first block), stored as an int8 row with an f32 scale: keys
//      share a large common part (the slow RoPE pairs) that a per-token scale
//      would otherwise spend its 8 bits on. c depends only on the previous
//      block's stored content, never on how tokens were batched, so a
//      sequence's bytes are the same however its tokens were scheduled.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>

#include "core/fp16.h"

namespace infer {

enum class KvType : int { F32 = 0, F16 = 1, I8 = 2 };
const char* kv_type_name(KvType t);

struct KvLayout {
  int n_layers = 0;
  int n_kv_heads = 0;
  int head_dim = 0;
  int block_size = 16;
  int n_blocks = 0;        // primary blocks
  int n_host_blocks = 0;   // second (host) tier; 0 disables it
  KvType type = KvType::F32;
  // Recurrent state (state-space layers: model/mamba.h). Every block also
  // holds, for each of n_ssm_layers layers, the state after the last position
  // written into it: ssm_conv_elems floats of convolution state ([d_conv - 1]
  // [channels], oldest input first) followed by ssm_state_elems floats of
  // scan state ([n_head][head_dim][d_state]). Always f32, whatever `type`
  // (the element type of the attention layers' K and V). A full block thus
  // keeps a snapshot of the state at its last position (what the prefix cache
  // shares), and a sequence's running state lives in the block of its last
  // computed position. n_layers counts the attention layers only.
  int n_ssm_layers = 0;
  int64_t ssm_conv_elems = 0, ssm_state_elems = 0;

  int kv_dim() const { return n_kv_heads * head_dim; }
  size_t elem_bytes() const { return type == KvType::F32 ? 4 : type == KvType::F16 ? 2 : 1; }
  // Elements of K (or V) for one layer in one block.
  size_t block_elems() const { return static_cast<size_t>(block_size) * kv_dim(); }
  // Scale slots of K (or V) for one layer in one block (int8 only).
  size_t block_scales() const { return type == KvType::I8 ? static_cast<size_t>(block_size) * n_kv_heads : 0; }
  // Bytes of the K offset of one layer in one block (int8 only): an int8 row
  // and an f32 scale per KV head.
  size_t block_offset_bytes() const {
    return type == KvType::I8 ? static_cast<size_t>(n_kv_heads) * (head_dim + sizeof(float)) : 0;
  }
  // Bytes of K and V, all layers, scales and offsets included, for one block.
  // Floats of recurrent state per SSM layer in one block (conv, then scan).
  size_t ssm_layer_floats() const { return static_cast<size_t>(ssm_conv_elems + ssm_state_elems); }
  // Bytes of recurrent state, all SSM layers, in one block.
  size_t state_bytes() const { return static_cast<size_t>(n_ssm_layers) * ssm_layer_floats() * sizeof(float); }
  // Whether the layout holds anything (attention K/V or recurrent state).
  bool empty() const { return (n_layers <= 0 || kv_dim() <= 0) && state_bytes() == 0; }
  // Bytes of K and V, all layers, scales and offsets included, plus the
  // recurrent state, for one block.
  size_t block_bytes() const {
    return static_cast<size_t>(n_layers) *
               (2 * (block_elems() * elem_bytes() + block_scales() * sizeof(float)) + block_offset_bytes()) +
           state_bytes();
  }
  // Bytes of K and V per token, all layers.
  double bytes_per_token() const { return static_cast<double>(block_bytes()) / block_size; }
};

// Which pool a memory serves: the one attention reads (primary), or the host
// tier that keeps swapped-out sequences and evicted prefix blocks.
enum class KvTier : int { Primary = 0, Host = 1 };

// A pool of n_blocks blocks of a layout, allocated and owned by a backend.
class KvMemory {
 public:
  virtual ~KvMemory() = default;
  const KvLayout& layout() const { return layout_; }
  int n_blocks() const { return n_blocks_; }
  // Copies block src_block of `src` (all layers, K and V with their scales
  // and offsets) into dst_block. src is this memory or another pool made by
  // the same backend for the same layout (its host tier).
  virtual void copy_block(int dst_block, const KvMemory& src, int src_block) = 0;

 protected:
  KvMemory(const KvLayout& layout, int n_blocks) : layout_(layout), n_blocks_(n_blocks) {}
  KvLayout layout_;
  int n_blocks_;
};

// Makes a backend's pool of n_blocks blocks for a tier. Error(OutOfMemory)
// when the memory cannot be had.
using KvMemoryFactory = std::function<std::unique_ptr<KvMemory>(const KvLayout&, int n_blocks, KvTier)>;

// A pool in host memory, in the layout above: the CPU backend's storage, the
// host tier of any backend, and what the reference implementation reads and
// writes. Pages are committed lazily as blocks are first written.
class HostKvMemory final : public KvMemory {
 public:
  HostKvMemory(const KvLayout& layout, int n_blocks);
  ~HostKvMemory() override;
  HostKvMemory(const HostKvMemory&) = delete;
  HostKvMemory& operator=(const HostKvMemory&) = delete;

  void* k(int layer, int block) { return base_ + offset(layer, block, 0); }
  void* v(int layer, int block) { return base_ + offset(layer, block, 1); }
  const void* k(int layer, int block) const { return base_ + offset(layer, block, 0); }
  const void* v(int layer, int block) const { return base_ + offset(layer, block, 1); }
  // int8 scale slots, [kv_head][token] per block: V's f32 scale.
  float* k_scale(int layer, int block) { return scales_ + soffset(layer, block, 0); }
  float* v_scale(int layer, int block) { return scales_ + soffset(layer, block, 1); }
  const float* k_scale(int layer, int block) const { return scales_ + soffset(layer, block, 0); }
  const float* v_scale(int layer, int block) const { return scales_ + soffset(layer, block, 1); }
  // int8 K: the scale slots hold (s, z) as two f16, [kv_head][token][2].
  uint16_t* k_scale_zero(int layer, int block) { return reinterpret_cast<uint16_t*>(k_scale(layer, block)); }
  const uint16_t* k_scale_zero(int layer, int block) const {
    return reinterpret_cast<const uint16_t*>(k_scale(layer, block));
  }
  // int8 K offset of a block: [kv_head][head_dim] int8 and [kv_head] f32 scales.
  int8_t* k_offset(int layer, int block) { return offsets_ + ooffset(layer, block) * layout_.head_dim; }
  const int8_t* k_offset(int layer, int block) const { return offsets_ + ooffset(layer, block) * layout_.head_dim; }
  float* k_offset_scale(int layer, int block) { return offset_scales_ + ooffset(layer, block); }
  const float* k_offset_scale(int layer, int block) const { return offset_scales_ + ooffset(layer, block); }

  // The recurrent state of SSM layer `ssm_layer` in `block`: the conv state
  // (layout().ssm_conv_elems floats), then the scan state
  // (layout().ssm_state_elems floats).
  float* ssm_state(int ssm_layer, int block) { return state_ + soff(ssm_layer, block); }
  const float* ssm_state(int ssm_layer, int block) const { return state_ + soff(ssm_layer, block); }

  // src must be a HostKvMemory of the same layout (Error(Internal) otherwise).
  void copy_block(int dst_block, const KvMemory& src, int src_block) override;
  // Writes zeros into blocks [0, n) (all layers): commits their pages now
  // rather than on the first request (a new pool hands out low ids first).
  void touch(int n);

 private:
  size_t offset(int layer, int block, int kv) const {
    return ((static_cast<size_t>(layer) * n_blocks_ + block) * 2 + kv) * block_bytes_;
  }
  size_t soffset(int layer, int block, int kv) const {
    return ((static_cast<size_t>(layer) * n_blocks_ + block) * 2 + kv) * layout_.block_scales();
  }
  size_t ooffset(int layer, int block) const {
    return (static_cast<size_t>(layer) * n_blocks_ + block) * layout_.n_kv_heads;
  }
  size_t soff(int ssm_layer, int block) const {
    return (static_cast<size_t>(block) * layout_.n_ssm_layers + ssm_layer) * layout_.ssm_layer_floats();
  }
  size_t block_bytes_;  // one layer, K or V, elements only
  float* state_ = nullptr;  // recurrent state: [block][ssm_layer][conv, scan] (blocks are contiguous: one copy)
  uint8_t* base_ = nullptr;
  float* scales_ = nullptr;
  int8_t* offsets_ = nullptr;
  float* offset_scales_ = nullptr;
};

// The factory of HostKvMemory pools (both tiers).
std::unique_ptr<KvMemory> make_host_kv_memory(const KvLayout& layout, int n_blocks, KvTier tier);
// m as a HostKvMemory; Error(Internal) when a backend was handed another
// backend's memory.
HostKvMemory& as_host_memory(KvMemory& m);
const HostKvMemory& as_host_memory(const KvMemory& m);

// ---- the reference implementation of the element formats (scalar) ----
namespace kvfmt {

// Whether int8 rows of this head size are stored rotated.
bool rotates(KvType type, int head_dim);
// In-place orthonormal Walsh-Hadamard transform of n values (n a power of
// two): H is symmetric and H·H = I.
void hadamard(float* x, int n);
// The smallest f16 >= x (x >= 0, finite), so that a scale never shrinks.
uint16_t fp16_up(float x);

// Encodes one head's row of hd values (already rotated when the format
// rotates):
// int8 V: symmetric, *scale = max|x| / 127.
void encode_v_i8(const float* x, int hd, int8_t* q, float* scale);
// int8 K against the block's dequantized offset c: asymmetric min-max,
// sz = (s, z) in f16.
void encode_k_i8(const float* x, const float* c, int hd, int8_t* q, uint16_t* sz);
// The inverse: k = c + (z + s * q), the one formula writers and readers use.
inline void decode_k_i8(const int8_t* q, const uint16_t* sz, const float* c, int hd, float* out) {
  const float s = fp16_to_f32(sz[0]), z = fp16_to_f32(sz[1]);
  for (int d = 0; d < hd; ++d) out[d] = c[d] + (z + s * static_cast<float>(q[d]));
}

// The dequantized K offset of KV head h of a block.
void k_offset(const HostKvMemory& m, int layer, int block, int h, float* c);
// Sets the K offset of `block` for every head from its sequence's previous
// block `prev` (-1: the sequence's first block, offset 0). Called when the
// block's first position is written, before any of its K rows.
void set_k_offset(HostKvMemory& m, int layer, int block, int prev);

// Writes the K and V rows (kv_dim values each, unrotated) of the token at
// position pos of a sequence whose block table is `table`, in the memory's
// element type; sets the block's K offset first when pos starts a block.
// Tokens of a sequence must be written in position order.
void write_token(HostKvMemory& m, int layer, const int32_t* table, int pos, const float* k, const float* v);
// Row `off` of KV head h in `block`, decoded (int8: still in the rotated
// space when the format rotates).
void read_row(const HostKvMemory& m, int layer, int block, bool is_v, int h, int off, float* out);

}  // namespace kvfmt
}  // namespace infer
