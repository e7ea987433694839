// The CUDA kernels (cuda/kernels.h): small and plain first versions, written
// to be obviously right and compared against the CPU backend on a GPU
// (tests/test_cuda.cpp). Not yet tuned: no asynchronous copy pipelining in
// the W4A16 kernel, one thread block per 16 output rows, no CUDA graphs.
#include "cuda/kernels.h"

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstring>

#include "core/error.h"

namespace infer::cuda {

namespace {

cudaStream_t as_stream(void* s) { return static_cast<cudaStream_t>(s); }

void check_launch(const char* what) {
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) raise(Status::Backend, "CUDA %s: %s", what, cudaGetErrorString(e));
}

__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// Sum over a thread block of up to 1024 threads (every thread gets it).
__device__ float block_sum(float v, float* smem32) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warps = (blockDim.x + 31) >> 5;
  v = warp_sum(v);
  __syncthreads();  // smem32 may still be read by a previous call
  if (lane == 0) smem32[warp] = v;
  __syncthreads();
  float t = lane < n_warps ? smem32[lane] : 0.0f;
  return warp_sum(t);
}

// ---- rows and elementwise ----------------------------------------------------------------

__global__ void rms_norm_kernel(const float* x, const float* w, int64_t n, float eps, float* y) {
  __shared__ float red[32];
  const float* xr = x + blockIdx.x * n;
  float ss = 0.0f;
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) ss += xr[j] * xr[j];
  ss = block_sum(ss, red);
  const float scale = 1.0f / sqrtf(ss / static_cast<float>(n) + eps);
  float* yr = y + blockIdx.x * n;
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) yr[j] = w[j] * (scale * xr[j]);
}

// One thread per (row, head, pair).
__global__ void rope_kernel(float* x, int64_t m, int n_heads, int head_dim, const int32_t* pos, int half, bool neox,
                            const float* inv_freq, float pos_scale, float mscale) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= m * n_heads * half) return;
  const int p = static_cast<int>(i % half);
  const int64_t row_head = i / half;  // row * n_heads + head
  const int64_t t = row_head / n_heads;
  const float theta = static_cast<float>(pos[t]) * pos_scale * inv_freq[p];
  const float c = cosf(theta) * mscale, s = sinf(theta) * mscale;
  float* v = x + row_head * head_dim;
  const int ia = neox ? p : 2 * p, ib = neox ? p + half : 2 * p + 1;
  const float a = v[ia], b = v[ib];
  v[ia] = a * c - b * s;
  v[ib] = a * s + b * c;
}

__global__ void swiglu_kernel(const float* gate, const float* up, float* out, int64_t n) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < n) out[i] = gate[i] / (1.0f + expf(-gate[i])) * up[i];
}

__global__ void add_kernel(float* x, const float* y, int64_t n) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < n) x[i] += y[i];
}

__global__ void geglu_kernel(const float* gate, const float* up, float* out, int64_t n) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  constexpr float kC2 = 2.0f * 0.7978845608028654f;  // 2 sqrt(2 / pi)
  if (i < n) {
    const float g = gate[i];
    out[i] = g / (1.0f + expf(-kC2 * (g + 0.044715f * g * g * g))) * up[i];
  }
}

__global__ void add_bias_kernel(float* x, const float* bias, int64_t total, int64_t n) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < total) x[i] += bias[i % n];
}

__global__ void scale_kernel(float* x, int64_t n, float s) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < n) x[i] *= s;
}

__global__ void softcap_kernel(float* x, int64_t n, float cap) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < n) x[i] = cap * tanhf(x[i] * (1.0f / cap));
}

__global__ void permute_cols_kernel(const float* x, int64_t total, int64_t n, const int32_t* perm, float* out) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < total) out[i] = x[(i / n) * n + perm[i % n]];
}

__global__ void gather_rows_kernel(const float* x, const int32_t* rows, int64_t total, int64_t n, float* out) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < total) out[i] = x[static_cast<int64_t>(rows[i / n]) * n + i % n];
}

// One thread per column: the rows are added in j order, as on the CPU.
__global__ void scatter_add_rows_kernel(float* acc, const int32_t* rows, const float* w, const float* y,
                                        int64_t n_rows, int64_t n) {
  const int64_t c = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (c >= n) return;
  for (int64_t j = 0; j < n_rows; ++j) {
    float* o = acc + static_cast<int64_t>(rows[j]) * n + c;
    *o = __fadd_rn(*o, __fmul_rn(w[j], y[j * n + c]));
  }
}

__global__ void f32_to_f16_kernel(const float* src, uint16_t* dst, int64_t n) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < n) dst[i] = __half_as_ushort(__float2half_rn(src[i]));
}

__global__ void read_probe_kernel(const float4* __restrict__ src, int64_t n, float* sink) {
  __shared__ float red[32];
  float acc = 0.0f;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float4 v = src[i];
    acc += (v.x + v.y) + (v.z + v.w);
  }
  acc = block_sum(acc, red);
  if (threadIdx.x == 0) sink[blockIdx.x] = acc;
}

// One block per row: each thread's best, then a tree over the block; ties
// go to the lower index, as a left-to-right scan would.
__global__ void argmax_kernel(const float* x, int64_t n, int32_t* out) {
  __shared__ float best_v[256];
  __shared__ int32_t best_i[256];
  const float* xr = x + blockIdx.x * n;
  float bv = -INFINITY;
  int32_t bi = n > 0 ? 0 : -1;
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x)
    if (xr[j] > bv) {
      bv = xr[j];
      bi = static_cast<int32_t>(j);
    }
  best_v[threadIdx.x] = bv;
  best_i[threadIdx.x] = bi;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) {
      const float ov = best_v[threadIdx.x + s];
      const int32_t oi = best_i[threadIdx.x + s];
      if (ov > best_v[threadIdx.x] || (ov == best_v[threadIdx.x] && oi >= 0 && oi < best_i[threadIdx.x])) {
        best_v[threadIdx.x] = ov;
        best_i[threadIdx.x] = oi;
      }
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) out[blockIdx.x] = best_i[0];
}

// ---- W4A16 on tensor cores ------------------------------------------------------------------

constexpr int kW4Warps = 4;  // warps of a thread block, splitting the inputs

__device__ __forceinline__ uint32_t pack_half2(float lo, float hi) {
  const __half2 h = __floats2half2_rn(lo, hi);
  uint32_t u;
  memcpy(&u, &h, 4);
  return u;
}

// One thread block per 16 output rows (a tile); its warps take the k-tile
// pairs in turn, each accumulating D = A B + D with A the dequantized
// weights (16 x 16) and B the activations (16 inputs x 8 rows of x), then
// the warps' sums are added through shared memory.
__global__ void w4a16_kernel(const uint32_t* __restrict__ q, const uint16_t* __restrict__ scale,
                             const uint8_t* __restrict__ zero, layout::W4Layout L, const float* __restrict__ x, int m,
                             float* __restrict__ y) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  __shared__ float part[kW4Warps][32][4];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t nt = blockIdx.x;
  const int64_t row_lo = nt * 16 + layout::mma_a_row(lane, 0), row_hi = nt * 16 + layout::mma_a_row(lane, 1);
  const int tok = layout::mma_b_col(lane);  // this lane's column of B: a row of x
  float c[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  for (int64_t kp = warp; kp < L.k_tiles() / 2; kp += kW4Warps) {
    const uint2 words = *reinterpret_cast<const uint2*>(q + layout::w4_word(L, nt, 2 * kp, lane));
    for (int j = 0; j < 2; ++j) {
      const int64_t kt = 2 * kp + j, k0 = kt * 16;
      const uint32_t word = j == 0 ? words.x : words.y;
      const int64_t g_lo = layout::w4_group_index(L, row_lo, k0), g_hi = layout::w4_group_index(L, row_hi, k0);
      // (1024 + q) - (1024 + z) = q - z exactly in f16, then times d.
      __half2 z2[2], d2[2];
      z2[0] = __half2half2(__float2half(1024.0f + zero[g_lo]));
      z2[1] = __half2half2(__float2half(1024.0f + zero[g_hi]));
      d2[0] = __half2half2(__ushort_as_half(scale[g_lo]));
      d2[1] = __half2half2(__ushort_as_half(scale[g_hi]));
      uint32_t a[4];
      for (int r = 0; r < 4; ++r) {
        const uint32_t bits = layout::w4_pair_bits(word, r) | 0x64006400u;
        __half2 hq;
        memcpy(&hq, &bits, 4);
        const __half2 w = __hmul2(__hsub2(hq, z2[r & 1]), d2[r & 1]);
        memcpy(&a[r], &w, 4);
      }
      uint32_t b[2];
      for (int r = 0; r < 2; ++r) {
        float v0 = 0.0f, v1 = 0.0f;
        if (tok < m) {
          v0 = x[tok * L.n_in + k0 + layout::mma_b_row(lane, r, 0)];
          v1 = x[tok * L.n_in + k0 + layout::mma_b_row(lane, r, 1)];
        }
        b[r] = pack_half2(v0, v1);
      }
      asm volatile(
          "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
          "{%0,%1,%2,%3};\n"
          : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
          : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
    }
  }
  for (int i = 0; i < 4; ++i) part[warp][lane][i] = c[i];
  __syncthreads();
  if (warp == 0) {
    for (int i = 0; i < 4; ++i) {
      float s = 0.0f;
      for (int w = 0; w < kW4Warps; ++w) s += part[w][lane][i];
      const int64_t row = nt * 16 + layout::mma_c_row(lane, i);
      const int t = layout::mma_c_col(lane, i);
      if (row < L.n_out && t < m) y[t * L.n_out + row] = s;
    }
  }
#else
  __trap();  // built for sm_80 and newer only (cmake/InferCuda.cmake)
#endif
}

// ---- Q8_0 ---------------------------------------------------------------------------------

// One warp per output row; lanes take 4 inputs at a time (one 32-bit load of
// codes), up to 8 rows of x.
__global__ void q8_0_kernel(const int8_t* __restrict__ q, const uint16_t* __restrict__ d, int64_t n_out, int64_t n_in,
                            const float* __restrict__ x, int m, float* __restrict__ y) {
  const int lane = threadIdx.x & 31;
  const int64_t row = blockIdx.x * static_cast<int64_t>(blockDim.x / 32) + (threadIdx.x >> 5);
  if (row >= n_out) return;
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  const int8_t* qr = q + row * n_in;
  const uint16_t* dr = d + row * (n_in / 32);
  for (int64_t k = 4 * lane; k < n_in; k += 128) {
    const char4 c4 = *reinterpret_cast<const char4*>(qr + k);
    const float s = __half2float(__ushort_as_half(dr[k / 32]));
    const float w0 = s * c4.x, w1 = s * c4.y, w2 = s * c4.z, w3 = s * c4.w;
    for (int t = 0; t < 8; ++t) {
      if (t >= m) break;
      const float* xt = x + t * n_in + k;
      acc[t] += w0 * xt[0] + w1 * xt[1] + w2 * xt[2] + w3 * xt[3];
    }
  }
  for (int t = 0; t < 8; ++t) {
    if (t >= m) break;
    const float s = warp_sum(acc[t]);
    if (lane == 0) y[t * n_out + row] = s;
  }
}

// ---- flash-decoding over the paged pool (f16 or f32) -----------------------------------------------------

constexpr int kMaxHeadDim = 256;  // 8 values a lane

// A KV element as f32: the pool holds f16 (uint16_t) or f32.
__device__ __forceinline__ float kv_load(const uint16_t* p, int64_t i) { return __half2float(__ushort_as_half(p[i])); }
__device__ __forceinline__ float kv_load(const float* p, int64_t i) { return p[i]; }
__device__ __forceinline__ void kv_store(uint16_t* p, int64_t i, float x) { p[i] = __half_as_ushort(__float2half_rn(x)); }
__device__ __forceinline__ void kv_store(float* p, int64_t i, float x) { p[i] = x; }

// Thread block (token t, KV head, split s); warp w is query head
// kv_head * group + w. K/V of one KV block are staged in shared memory once
// for all the group's query heads (GQA), then each warp scores its head
// against them and folds the scores into its partial (layout::softmax_push).
template <typename E>
__global__ void paged_attention_split_kernel(PagedAttention a, int group) {
  const E* pool = static_cast<const E*>(a.pool);
  extern __shared__ float smem[];  // K then V of one KV block: 2 * block_size * head_dim
  const int hd = a.addr.head_dim, bs = a.addr.block_size;
  float* sk = smem;
  float* sv = smem + bs * hd;
  const int t = blockIdx.x, kvh = blockIdx.y, s = blockIdx.z;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int h = kvh * group + warp;
  const int hi = a.pos[t];
  const int lo = a.window > 0 ? max(0, hi - a.window + 1) : 0;
  int first = 0, last = -1;
  layout::split_range(lo, hi, bs, a.n_splits, s, &first, &last);
  const int32_t* table = a.tables + static_cast<int64_t>(t) * a.table_stride;
  const int n_head_dims = a.n_head * hd;
  float qd[kMaxHeadDim / 32], o[kMaxHeadDim / 32];
  for (int j = 0; j < kMaxHeadDim / 32; ++j) {
    const int d = lane + 32 * j;
    qd[j] = d < hd ? a.q[static_cast<int64_t>(t) * n_head_dims + h * hd + d] : 0.0f;
    o[j] = 0.0f;
  }
  float m = -INFINITY, l = 0.0f;
  if (first <= last) {
    for (int bi = first / bs; bi <= last / bs; ++bi) {
      const int blk = layout::kv_block(table, bi * bs, bs);
      if (blk < 0) continue;  // the same for every thread of the block
      __syncthreads();        // the previous block's rows are no longer read
      for (int i = threadIdx.x; i < bs * hd; i += blockDim.x) {
        const int tok = i / hd, d = i % hd;
        sk[i] = kv_load(pool, layout::kv_elem(a.addr, a.layer, blk, 0, kvh, tok, d));
        sv[i] = kv_load(pool, layout::kv_elem(a.addr, a.layer, blk, 1, kvh, tok, d));
      }
      __syncthreads();
      const int p0 = max(first, bi * bs), p1 = min(last, bi * bs + bs - 1);
      for (int p = p0; p <= p1; ++p) {
        const int tok = layout::kv_row(p, bs);
        float dot = 0.0f;
        for (int j = 0; j < kMaxHeadDim / 32; ++j) {
          const int d = lane + 32 * j;
          if (d < hd) dot += qd[j] * sk[tok * hd + d];
        }
        float sc = warp_sum(dot) * a.scale;
        if (a.softcap > 0.0f) sc = a.softcap * tanhf(sc / a.softcap);
        const layout::Rescale r = layout::softmax_push(&m, &l, sc);
        for (int j = 0; j < kMaxHeadDim / 32; ++j) {
          const int d = lane + 32 * j;
          if (d < hd) o[j] = r.a * o[j] + r.b * sv[tok * hd + d];
        }
      }
    }
  }
  // Partial (m, l, o[hd]) of (t, h, s), written even when empty.
  float* part = a.work + ((static_cast<int64_t>(t) * a.n_head + h) * a.n_splits + s) * (hd + 2);
  if (lane == 0) {
    part[0] = m;
    part[1] = l;
  }
  for (int j = 0; j < kMaxHeadDim / 32; ++j) {
    const int d = lane + 32 * j;
    if (d < hd) part[2 + d] = o[j];
  }
}

// One thread block per token; threads over its kv_dim values of K and V.
template <typename E>
__global__ void kv_write_kernel(E* pool, layout::KvAddr a, int layer, const float* k, const float* v,
                                const int32_t* pos, const int32_t* tables, int table_stride) {
  const int t = blockIdx.x, kv_dim = a.n_kv_heads * a.head_dim;
  const int blk = layout::kv_block(tables + static_cast<int64_t>(t) * table_stride, pos[t], a.block_size);
  const int row = layout::kv_row(pos[t], a.block_size);
  for (int i = threadIdx.x; i < kv_dim; i += blockDim.x) {
    const int h = i / a.head_dim, d = i % a.head_dim;
    const int64_t src = static_cast<int64_t>(t) * kv_dim + i;
    kv_store(pool, layout::kv_elem(a, layer, blk, 0, h, row, d), k[src]);
    kv_store(pool, layout::kv_elem(a, layer, blk, 1, h, row, d), v[src]);
  }
}

// One thread block per (token, head), one thread per value dim: the splits'
// partials merged in order (layout::softmax_merge), then divided by l.
__global__ void paged_attention_merge_kernel(PagedAttention a) {
  const int hd = a.addr.head_dim;
  const int64_t th = blockIdx.x;  // t * n_head + h
  const float* parts = a.work + th * a.n_splits * (hd + 2);
  for (int d = threadIdx.x; d < hd; d += blockDim.x) {
    float M = -INFINITY, L = 0.0f, O = 0.0f;
    for (int s = 0; s < a.n_splits; ++s) {
      const float* p = parts + s * (hd + 2);
      const layout::Rescale r = layout::softmax_merge(&M, &L, p[0], p[1]);
      O = r.a * O + r.b * p[2 + d];
    }
    a.out[th * hd + d] = layout::softmax_out(O, L);
  }
}

unsigned blocks_for(int64_t n, int threads) { return static_cast<unsigned>((n + threads - 1) / threads); }

}  // namespace

void launch_rms_norm(const float* x, const float* w, int64_t m, int64_t n, float eps, float* y, void* stream) {
  if (m <= 0) return;
  rms_norm_kernel<<<static_cast<unsigned>(m), 256, 0, as_stream(stream)>>>(x, w, n, eps, y);
  check_launch("rms_norm");
}

void launch_rope(float* x, int64_t m, int n_heads, int head_dim, const int32_t* pos, int n_rot, bool neox,
                 const float* inv_freq, float pos_scale, float mscale, void* stream) {
  if (n_rot % 2 != 0 || n_rot > head_dim) raise(Status::InvalidArgument, "CUDA rope: n_rot %d of head_dim %d", n_rot, head_dim);
  const int half = n_rot / 2;
  const int64_t n = m * n_heads * half;
  if (n <= 0) return;
  rope_kernel<<<blocks_for(n, 256), 256, 0, as_stream(stream)>>>(x, m, n_heads, head_dim, pos, half, neox, inv_freq,
                                                                 pos_scale, mscale);
  check_launch("rope");
}

void launch_swiglu(const float* gate, const float* up, float* out, int64_t n, void* stream) {
  if (n <= 0) return;
  swiglu_kernel<<<blocks_for(n, 256), 256, 0, as_stream(stream)>>>(gate, up, out, n);
  check_launch("swiglu");
}

void launch_add(float* x, const float* y, int64_t n, void* stream) {
  if (n <= 0) return;
  add_kernel<<<blocks_for(n, 256), 256, 0, as_stream(stream)>>>(x, y, n);
  check_launch("add");
}

void launch_geglu(const float* gate, const float* up, float* out, int64_t n, void* stream) {
  if (n <= 0) return;
  geglu_kernel<<<blocks_for(n, 256), 256, 0, as_stream(stream)>>>(gate, up, out, n);
  check_launch("geglu");
}

void launch_add_bias(float* x, const float* bias, int64_t m, int64_t n, void* stream) {
  if (m <= 0 || n <= 0) return;
  add_bias_kernel<<<blocks_for(m * n, 256), 256, 0, as_stream(stream)>>>(x, bias, m * n, n);
  check_launch("add_bias");
}

void launch_scale(float* x, int64_t n, float s, void* stream) {
  if (n <= 0) return;
  scale_kernel<<<blocks_for(n, 256), 256, 0, as_stream(stream)>>>(x, n, s);
  check_launch("scale");
}

void launch_softcap(float* x, int64_t n, float cap, void* stream) {
  if (n <= 0) return;
  if (!(cap > 0)) raise(Status::InvalidArgument, "CUDA softcap: cap %g is not positive", cap);
  softcap_kernel<<<blocks_for(n, 256), 256, 0, as_stream(stream)>>>(x, n, cap);
  check_launch("softcap");
}

void launch_permute_cols(const float* x, int64_t m, int64_t n, const int32_t* perm, float* out, void* stream) {
  if (m <= 0 || n <= 0) return;
  permute_cols_kernel<<<blocks_for(m * n, 256), 256, 0, as_stream(stream)>>>(x, m * n, n, perm, out);
  check_launch("permute_cols");
}

void launch_gather_rows(const float* x, const int32_t* rows, int64_t n_rows, int64_t n, float* out, void* stream) {
  if (n_rows <= 0 || n <= 0) return;
  gather_rows_kernel<<<blocks_for(n_rows * n, 256), 256, 0, as_stream(stream)>>>(x, rows, n_rows * n, n, out);
  check_launch("gather_rows");
}

void launch_scatter_add_rows(float* acc, const int32_t* rows, const float* w, const float* y, int64_t n_rows,
                             int64_t n, void* stream) {
  if (n_rows <= 0 || n <= 0) return;
  scatter_add_rows_kernel<<<blocks_for(n, 256), 256, 0, as_stream(stream)>>>(acc, rows, w, y, n_rows, n);
  check_launch("scatter_add_rows");
}

void launch_f32_to_f16(const float* src, uint16_t* dst, int64_t n, void* stream) {
  if (n <= 0) return;
  f32_to_f16_kernel<<<blocks_for(n, 256), 256, 0, as_stream(stream)>>>(src, dst, n);
  check_launch("f32_to_f16");
}

void launch_read_probe(const void* src, int64_t n_float4, float* sink, void* stream) {
  if (n_float4 <= 0) return;
  read_probe_kernel<<<4096, 512, 0, as_stream(stream)>>>(static_cast<const float4*>(src), n_float4, sink);
  check_launch("read_probe");
}

void launch_argmax(const float* x, int64_t m, int64_t n, int32_t* out, void* stream) {
  if (m <= 0) return;
  argmax_kernel<<<static_cast<unsigned>(m), 256, 0, as_stream(stream)>>>(x, n, out);
  check_launch("argmax");
}

void launch_w4a16_gemm(const uint32_t* q, const uint16_t* scale, const uint8_t* zero, const layout::W4Layout& L,
                       const float* x, int m, float* y, void* stream) {
  if (m < 1 || m > 8) raise(Status::InvalidArgument, "CUDA W4A16: %d rows (1..8)", m);
  if (L.n_in % 32 != 0 || L.n_in % L.group != 0)
    raise(Status::InvalidArgument, "CUDA W4A16: %lld inputs", static_cast<long long>(L.n_in));
  if (L.n_out <= 0) return;
  w4a16_kernel<<<static_cast<unsigned>(L.n_tiles()), 32 * kW4Warps, 0, as_stream(stream)>>>(q, scale, zero, L, x, m, y);
  check_launch("w4a16");
}

void launch_q8_0_matvec(const int8_t* q, const uint16_t* d, int64_t n_out, int64_t n_in, const float* x, int m,
                        float* y, void* stream) {
  if (m < 1 || m > 8) raise(Status::InvalidArgument, "CUDA Q8_0: %d rows (1..8)", m);
  if (n_in % 32 != 0) raise(Status::InvalidArgument, "CUDA Q8_0: %lld inputs", static_cast<long long>(n_in));
  if (n_out <= 0) return;
  constexpr int kWarps = 8;
  q8_0_kernel<<<blocks_for(n_out, kWarps), 32 * kWarps, 0, as_stream(stream)>>>(q, d, n_out, n_in, x, m, y);
  check_launch("q8_0");
}

void launch_kv_write(void* pool, bool f32, const layout::KvAddr& addr, int layer, const float* k, const float* v,
                     int n_tokens, const int32_t* pos, const int32_t* tables, int table_stride, void* stream) {
  if (n_tokens <= 0) return;
  const unsigned n = static_cast<unsigned>(n_tokens);
  if (f32)
    kv_write_kernel<<<n, 128, 0, as_stream(stream)>>>(static_cast<float*>(pool), addr, layer, k, v, pos, tables,
                                                      table_stride);
  else
    kv_write_kernel<<<n, 128, 0, as_stream(stream)>>>(static_cast<uint16_t*>(pool), addr, layer, k, v, pos, tables,
                                                      table_stride);
  check_launch("kv_write");
}

size_t paged_attention_work_floats(int n_tokens, int n_head, int head_dim, int n_splits) {
  return static_cast<size_t>(n_tokens) * n_head * n_splits * (head_dim + 2);
}

int paged_attention_splits(int max_pos, int block_size) {
  // Enough thread blocks to fill a large GPU at batch 1, none shorter than
  // 4 KV blocks (64 positions at the default block size).
  return layout::split_count(0, max_pos, block_size, 32, 4);
}

void launch_paged_attention(const PagedAttention& a, void* stream) {
  const int hd = a.addr.head_dim, n_kv = a.addr.n_kv_heads;
  if (n_kv <= 0 || a.n_head % n_kv != 0) raise(Status::InvalidArgument, "CUDA attention: %d heads over %d KV heads", a.n_head, n_kv);
  const int group = a.n_head / n_kv;
  if (group > 32) raise(Status::Unsupported, "CUDA attention: %d query heads per KV head (at most 32)", group);
  if (hd <= 0 || hd > kMaxHeadDim) raise(Status::Unsupported, "CUDA attention: head_dim %d (at most %d)", hd, kMaxHeadDim);
  const size_t smem = 2 * static_cast<size_t>(a.addr.block_size) * hd * sizeof(float);
  if (smem > 48 * 1024) raise(Status::Unsupported, "CUDA attention: block size %d x head_dim %d", a.addr.block_size, hd);
  if (a.n_splits < 1) raise(Status::InvalidArgument, "CUDA attention: %d splits", a.n_splits);
  if (a.n_tokens <= 0) return;
  const dim3 grid(static_cast<unsigned>(a.n_tokens), static_cast<unsigned>(n_kv), static_cast<unsigned>(a.n_splits));
  if (a.f32)
    paged_attention_split_kernel<float><<<grid, 32 * group, smem, as_stream(stream)>>>(a, group);
  else
    paged_attention_split_kernel<uint16_t><<<grid, 32 * group, smem, as_stream(stream)>>>(a, group);
  check_launch("attention (splits)");
  paged_attention_merge_kernel<<<static_cast<unsigned>(a.n_tokens * a.n_head), 128, 0, as_stream(stream)>>>(a);
  check_launch("attention (merge)");
}

}  // namespace infer::cuda
