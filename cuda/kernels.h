// The CUDA kernels' launchers, as plain C++ declarations (no CUDA headers):
// every pointer is device memory, `stream` is a cudaStream_t (nullptr: the
// default stream). Launchers check their arguments (Error(InvalidArgument))
// and the launch (Error(Backend)); they do not wait for the kernel.
//
// Activations are f32 as in core/backend.h; each kernel computes what the
// CPU backend's op of the same name computes (tests/test_cuda.cpp compares
// them on a GPU). The index math is cuda/layout.h's.
#pragma once

#include <cstddef>
#include <cstdint>

#include "cuda/layout.h"

namespace infer::cuda {

// y = x / rms(x) * w, m rows of n values.
void launch_rms_norm(const float* x, const float* w, int64_t m, int64_t n, float eps, float* y, void* stream);
// RoPE in place on m rows of n_heads heads: dims [0, n_rot) of each head,
// pairs (2i, 2i+1) or, neox, (i, i + n_rot / 2), angle pos * pos_scale *
// inv_freq[i], cos and sin times mscale. pos: m positions, inv_freq: n_rot/2.
void launch_rope(float* x, int64_t m, int n_heads, int head_dim, const int32_t* pos, int n_rot, bool neox,
                 const float* inv_freq, float pos_scale, float mscale, void* stream);
// out = silu(gate) * up.
void launch_swiglu(const float* gate, const float* up, float* out, int64_t n, void* stream);
// x += y.
void launch_add(float* x, const float* y, int64_t n, void* stream);
// out = gelu(gate) * up, GELU's tanh form as the CPU backend writes it:
// g / (1 + exp(-2 sqrt(2/pi) (g + 0.044715 g^3))) * up.
void launch_geglu(const float* gate, const float* up, float* out, int64_t n, void* stream);
// x[r][i] += bias[i], m rows of n values.
void launch_add_bias(float* x, const float* bias, int64_t m, int64_t n, void* stream);
// x *= s.
void launch_scale(float* x, int64_t n, float s, void* stream);
// x = cap * tanh(x / cap).
void launch_softcap(float* x, int64_t n, float cap, void* stream);
// out[r][j] = x[r][perm[j]], m rows of n values.
void launch_permute_cols(const float* x, int64_t m, int64_t n, const int32_t* perm, float* out, void* stream);
// out[j] = x[rows[j]], n_rows rows of n values.
void launch_gather_rows(const float* x, const int32_t* rows, int64_t n_rows, int64_t n, float* out, void* stream);
// acc[rows[j]][c] += w[j] * y[j][c] for j in order (no fused multiply-add:
// the CPU backend's rounding).
void launch_scatter_add_rows(float* acc, const int32_t* rows, const float* w, const float* y, int64_t n_rows,
                             int64_t n, void* stream);
// dst = src rounded to f16 (round to nearest even), n values.
void launch_f32_to_f16(const float* src, uint16_t* dst, int64_t n, void* stream);
// Reads n float4 values once and writes one sum per thread block into
// sink[blockIdx] (gridDim.x <= 4096): the device's read-bandwidth probe.
void launch_read_probe(const void* src, int64_t n_float4, float* sink, void* stream);
// out[r] = the index of the largest of row r's n values (the first of equal ones).
void launch_argmax(const float* x, int64_t m, int64_t n, int32_t* out, void* stream);

// W4A16, m = 1..8 rows: y[m][n_out] = x[m][n_in] · Wᵀ with W repacked as
// cuda/repack.h's W4Weights (q, scale, zero: its three arrays on the device).
// Tensor cores (mma.m16n8k16, f16 inputs, f32 sums): x is rounded to f16 and
// each weight to f16 as (q - z) * d.
void launch_w4a16_gemm(const uint32_t* q, const uint16_t* scale, const uint8_t* zero, const layout::W4Layout& L,
                       const float* x, int m, float* y, void* stream);
// Q8_0, m = 1..8 rows: y[m][n_out] = x · Wᵀ with W as Q8Weights (codes, f16 scales).
void launch_q8_0_matvec(const int8_t* q, const uint16_t* d, int64_t n_out, int64_t n_in, const float* x, int m,
                        float* y, void* stream);

// Flash-decoding attention over a paged f16 or f32 KV pool laid out as
// HostKvMemory (layout::KvAddr; `pool` is its element array). Token t (of
// n_tokens) attends, with query head h, to positions
// [max(0, pos[t] - window + 1) (0 without a window), pos[t]] of KV head
// h / (n_head / n_kv_heads), found through its block table row
// tables[t * table_stride ...] (-1: released). Scores are scale * q·k, then
// softcap * tanh(s / softcap) when softcap > 0. The positions are split into
// n_splits ranges of whole blocks computed by separate thread blocks, whose
// partial softmax results `work` holds (paged_attention_work_floats) until
// a second kernel merges them. q, out: [n_tokens][n_head * head_dim].
struct PagedAttention {
  const float* q = nullptr;
  const void* pool = nullptr;  // f16 elements (f32: f32 ones)
  bool f32 = false;
  layout::KvAddr addr;
  int layer = 0;
  int n_tokens = 0;
  int n_head = 0;
  const int32_t* pos = nullptr;
  const int32_t* tables = nullptr;
  int table_stride = 0;
  int window = 0;
  float scale = 1.0f;
  float softcap = 0.0f;
  int n_splits = 1;
  float* work = nullptr;
  float* out = nullptr;
};
// Writes the K and V rows (f32, [n_tokens][n_kv_heads * head_dim]) of
// n_tokens tokens of layer `layer` into the paged pool, as f16 (round to
// nearest even) or, f32, as they are: token t at position pos[t] of its
// table row tables[t * table_stride ...]: the bytes kv/kv_format.h's
// write_token gives.
void launch_kv_write(void* pool, bool f32, const layout::KvAddr& addr, int layer, const float* k, const float* v,
                     int n_tokens, const int32_t* pos, const int32_t* tables, int table_stride, void* stream);

size_t paged_attention_work_floats(int n_tokens, int n_head, int head_dim, int n_splits);
// The split count for a longest context of max_pos + 1 positions.
int paged_attention_splits(int max_pos, int block_size);
void launch_paged_attention(const PagedAttention& a, void* stream);

}  // namespace infer::cuda
