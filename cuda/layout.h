// The index math of the CUDA kernels, as plain functions shared by the kernels
// (compiled by nvcc as __host__ __device__) and by the CPU tests (plain
// inline C++): the tensor-core fragment maps, the W4A16 weight layout, the
// paged-KV addresses and the split-softmax (flash-decoding) merge. A kernel
// computes every index through these functions, so a CPU test of a function
// is a test of the kernel's addressing (tests/test_cuda_layout.cpp).
//
// No CUDA headers and no project headers: usable anywhere.
#pragma once

#include <math.h>
#include <stdint.h>

#if defined(__CUDACC__)
#define INFER_HD __host__ __device__ __forceinline__
#else
#define INFER_HD inline
#endif

namespace infer::cuda::layout {

// ---- mma.sync.m16n8k16 fragments (f16 inputs, f32 accumulators) ---------------------
// From the PTX ISA ("Matrix Fragments for mma.m16n8k16 with floating point
// type"): a warp's lane = 4 g + t, g = lane / 4 (the "groupID", 0..7) and
// t = lane % 4. Each fragment register holds two f16 halves h = 0 (low 16
// bits) and h = 1.
//
// A (16 x 16, row-major), registers r = 0..3: row g + 8 (r & 1), column
// 2 t + h + 8 (r >> 1).
INFER_HD int mma_a_row(int lane, int r) { return (lane >> 2) + 8 * (r & 1); }
INFER_HD int mma_a_col(int lane, int r, int h) { return 2 * (lane & 3) + h + 8 * (r >> 1); }
// The inverse: which lane, register and half hold A[row][col].
INFER_HD void mma_a_slot(int row, int col, int* lane, int* r, int* h) {
  *lane = 4 * (row & 7) + ((col & 7) >> 1);
  *r = (row >> 3) + 2 * (col >> 3);
  *h = col & 1;
}
// B (16 x 8, "col"), registers r = 0..1: row (k) 2 t + h + 8 r, column (n) g.
INFER_HD int mma_b_row(int lane, int r, int h) { return 2 * (lane & 3) + h + 8 * r; }
INFER_HD int mma_b_col(int lane) { return lane >> 2; }
// C / D (16 x 8, f32), elements i = 0..3: row g + 8 (i >> 1), column 2 t + (i & 1).
INFER_HD int mma_c_row(int lane, int i) { return (lane >> 2) + 8 * (i >> 1); }
INFER_HD int mma_c_col(int lane, int i) { return 2 * (lane & 3) + (i & 1); }

// ---- W4A16: 4-bit weights laid out as mma A fragments ---------------------------------
// The small-M GEMM computes yᵀ = W xᵀ with W (n_out x n_in) as the A operand:
// a tile is 16 output rows x 16 inputs, the 8 columns of B are up to 8
// tokens. A lane's A fragment of a tile is 8 weights = 8 nibbles = one
// 32-bit word, so one load of a word feeds one mma. Words are stored
//
//   q[n_tile][k_tile / 2][lane][k_tile % 2]     (uint32)
//
// so a warp walking the inputs of its 16 rows reads 256 contiguous bytes per
// 32 inputs, each lane one 8-byte load for two mmas. Inside a word, the
// nibble of register r, half h sits at bit 4 (r + 4 h): (word >> 4 r) &
// 0x000f000f puts both halves of register r into the low nibbles of the two
// 16-bit halves, which an OR with 0x6400 turns into the f16 1024 + q.
//
// Scales (f16) and zero points (u8, the code of 0.0) are per (group of
// `group` inputs, output row), stored [group][n_out_pad] so that the 8 rows
// of a lane group read adjacent values. The weight is w = (q - z) * d, as
// INT4_G* and Q4_0 (z = 8) define it. Rows past n_out (padding to 16) hold
// code 0, zero 0, scale 0.
struct W4Layout {
  int64_t n_out = 0;
  int64_t n_in = 0;   // a multiple of 32 (two k tiles)
  int32_t group = 0;  // inputs per scale: 32, 64 or 128

  INFER_HD int64_t n_tiles() const { return (n_out + 15) / 16; }
  INFER_HD int64_t k_tiles() const { return n_in / 16; }
  INFER_HD int64_t n_out_pad() const { return n_tiles() * 16; }
  INFER_HD int64_t n_groups() const { return n_in / group; }
  INFER_HD int64_t n_words() const { return n_tiles() * k_tiles() * 32; }
};

// Index of the word lane `lane` loads for tile (n_tile, k_tile).
INFER_HD int64_t w4_word(const W4Layout& L, int64_t n_tile, int64_t k_tile, int lane) {
  return ((n_tile * (L.k_tiles() / 2) + k_tile / 2) * 32 + lane) * 2 + (k_tile & 1);
}
// Bit position of register r, half h inside a word.
INFER_HD int w4_shift(int r, int h) { return 4 * (r + 4 * h); }
// Both halves of register r of a word: the code of half 0 in bits 0..3, of
// half 1 in bits 16..19. OR-ed with 0x64006400 it is the f16 pair
// (1024 + q0, 1024 + q1): the kernel's dequantization starts here.
INFER_HD uint32_t w4_pair_bits(uint32_t word, int r) { return (word >> (4 * r)) & 0x000f000fu; }
// The 4-bit code of weight (row n, input k).
INFER_HD int w4_code(const uint32_t* q, const W4Layout& L, int64_t n, int64_t k) {
  int lane = 0, r = 0, h = 0;
  mma_a_slot(static_cast<int>(n & 15), static_cast<int>(k & 15), &lane, &r, &h);
  return static_cast<int>((q[w4_word(L, n >> 4, k >> 4, lane)] >> w4_shift(r, h)) & 15u);
}
// Index of the scale and zero point of weight (row n, input k).
INFER_HD int64_t w4_group_index(const W4Layout& L, int64_t n, int64_t k) { return (k / L.group) * L.n_out_pad() + n; }

// ---- the paged KV pool ----------------------------------------------------------------
// The device pool has exactly the layout of lib/kv/kv_format.h's
// HostKvMemory, so blocks move between host and device as plain copies:
// elements [layer][block][K, V][kv_head][token][head_dim]; int8 scale slots
// [layer][block][K, V][kv_head][token]; int8 K offsets [layer][block][kv_head]
// (a head_dim row of int8 and one f32 scale each).
struct KvAddr {
  int32_t n_blocks = 0;  // blocks in the pool
  int32_t n_kv_heads = 0;
  int32_t head_dim = 0;
  int32_t block_size = 0;

  INFER_HD int64_t block_elems() const { return static_cast<int64_t>(block_size) * n_kv_heads * head_dim; }
  INFER_HD int64_t block_scales() const { return static_cast<int64_t>(block_size) * n_kv_heads; }
};

// Element offset of (layer, block, K or V, kv head, token of the block, dim).
INFER_HD int64_t kv_elem(const KvAddr& a, int layer, int block, int is_v, int head, int tok, int d) {
  return ((static_cast<int64_t>(layer) * a.n_blocks + block) * 2 + is_v) * a.block_elems() +
         (static_cast<int64_t>(head) * a.block_size + tok) * a.head_dim + d;
}
// Scale slot of (layer, block, K or V, kv head, token of the block): int8 only.
INFER_HD int64_t kv_scale(const KvAddr& a, int layer, int block, int is_v, int head, int tok) {
  return ((static_cast<int64_t>(layer) * a.n_blocks + block) * 2 + is_v) * a.block_scales() +
         static_cast<int64_t>(head) * a.block_size + tok;
}
// Index of the K offset row of (layer, block, kv head): its int8 values start
// at this index times head_dim, its f32 scale is at this index. int8 only.
INFER_HD int64_t kv_offset_row(const KvAddr& a, int layer, int block, int head) {
  return (static_cast<int64_t>(layer) * a.n_blocks + block) * a.n_kv_heads + head;
}
// The block holding position pos of a sequence with block table `table`
// (-1: released by a sliding window), and the token's row inside it.
INFER_HD int kv_block(const int32_t* table, int pos, int block_size) { return table[pos / block_size]; }
INFER_HD int kv_row(int pos, int block_size) { return pos % block_size; }

// ---- flash-decoding: softmax over splits of the positions ----------------------------
// A split of the positions keeps a partial result: m (the largest score
// seen, -inf when none), l (the sum of exp(s - m)) and, per value dim, o (the
// sum of exp(s - m) v, not yet divided by l). Adding a score or merging two
// partials rescales what is held by a and the newcomer by b:
//   o <- a o + b x.
// A score of -inf (masked) and an empty partial (l = 0) change nothing,
// whatever the order, so empty splits merge away and no NaN arises.
struct Rescale {
  float a = 1.0f;  // factor of what the partial held
  float b = 0.0f;  // factor of the new value row / the merged partial's o
};

// Adds score s to partial (m, l); the returned factors update o with v.
INFER_HD Rescale softmax_push(float* m, float* l, float s) {
  Rescale r;
  if (s == -INFINITY) return r;  // masked: a = 1, b = 0
  const float m_new = fmaxf(*m, s);
  r.a = *m == -INFINITY ? 0.0f : expf(*m - m_new);
  r.b = expf(s - m_new);
  *l = *l * r.a + r.b;
  *m = m_new;
  return r;
}
// Merges partial (m2, l2) into (m, l); the factors update o with o2.
INFER_HD Rescale softmax_merge(float* m, float* l, float m2, float l2) {
  Rescale r;
  if (l2 == 0.0f) return r;  // nothing to merge
  if (*l == 0.0f) {          // nothing held: take the other as it is
    *m = m2;
    *l = l2;
    r.a = 0.0f;
    r.b = 1.0f;
    return r;
  }
  const float m_new = fmaxf(*m, m2);
  r.a = expf(*m - m_new);
  r.b = expf(m2 - m_new);
  *l = *l * r.a + l2 * r.b;
  *m = m_new;
  return r;
}
// The final output of a merged partial: o / l (0 when nothing was attended).
INFER_HD float softmax_out(float o, float l) { return l > 0.0f ? o / l : 0.0f; }

// How a token's positions [lo, hi] are split across thread blocks: into
// n_splits ranges of whole KV blocks (so a thread block never reads half a
// KV block), at most max_splits, each at least min_blocks KV blocks.
INFER_HD int split_count(int lo, int hi, int block_size, int max_splits, int min_blocks) {
  if (hi < lo) return 1;
  const int n_kv_blocks = hi / block_size - lo / block_size + 1;
  int n = (n_kv_blocks + min_blocks - 1) / min_blocks;
  if (n > max_splits) n = max_splits;
  return n < 1 ? 1 : n;
}
// Positions [*first, *last] of split s of n (first > last: an empty split).
INFER_HD void split_range(int lo, int hi, int block_size, int n_splits, int s, int* first, int* last) {
  const int b0 = lo / block_size;
  const int n_kv_blocks = hi < lo ? 0 : hi / block_size - b0 + 1;
  const int per = (n_kv_blocks + n_splits - 1) / n_splits;
  const int sb = b0 + s * per, se = sb + per;  // KV blocks [sb, se)
  int f = sb * block_size, e = se * block_size - 1;
  if (f < lo) f = lo;
  if (e > hi) e = hi;
  *first = f;
  *last = e;
}

}  // namespace infer::cuda::layout
