#include "cpu/attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/fp16.h"
#include "core/threadpool.h"
#include "cpu/kernels.h"
#include "kv/kv_cache.h"

namespace infer::cpu {

namespace {

// In-place orthonormal Walsh-Hadamard transform of n values (n a power of
// two). H is symmetric and H·H = I, so (Hq)·(Hk) = q·k and a weighted sum of
// Hv rows transformed back with H is the weighted sum of v. int8 KV stores
// Hk and Hv: the transform spreads a few large components over all of them,
// so the per-(token, head) scale (set by the largest) loses less precision.
void hadamard(float* x, int n) {
  for (int len = 1; len < n; len <<= 1)
    for (int i = 0; i < n; i += len << 1)
      for (int j = i; j < i + len; ++j) {
        const float a = x[j], b = x[j + len];
        x[j] = a + b;
        x[j + len] = a - b;
      }
  const float norm = 1.0f / std::sqrt(static_cast<float>(n));
  for (int i = 0; i < n; ++i) x[i] *= norm;
}

bool is_pow2(int n) { return n > 0 && (n & (n - 1)) == 0; }

// Stores one head's row of hd values at `dst` (element index) of a block in
// the cache's element type. int8: symmetric, scale = max|x| / 127.
void store_row(KvType type, void* base, float* scales, size_t dst, size_t scale_idx, const float* x, int hd) {
  switch (type) {
    case KvType::F32:
      std::memcpy(static_cast<float*>(base) + dst, x, sizeof(float) * hd);
      break;
    case KvType::F16: {
      uint16_t* o = static_cast<uint16_t*>(base) + dst;
      for (int d = 0; d < hd; ++d) o[d] = f32_to_fp16(x[d]);
      break;
    }
    case KvType::I8: {
      float rot[1024];
      if (is_pow2(hd) && hd <= 1024) {
        std::memcpy(rot, x, sizeof(float) * hd);
        hadamard(rot, hd);
        x = rot;
      }
      float amax = 0.0f;
      for (int d = 0; d < hd; ++d) amax = std::max(amax, std::fabs(x[d]));
      const float s = amax / 127.0f;
      const float inv = s > 0.0f ? 1.0f / s : 0.0f;
      int8_t* o = static_cast<int8_t*>(base) + dst;
      for (int d = 0; d < hd; ++d) o[d] = static_cast<int8_t>(std::lrintf(x[d] * inv));
      scales[scale_idx] = s;
      break;
    }
  }
}

// One head's K/V rows of one block as f32: a pointer into the cache for f32,
// otherwise `n` rows converted into buf (scales applied).
const float* load_rows(KvType type, const void* base, const float* scales, size_t first, size_t scale_first, int n,
                       int hd, float* buf) {
  switch (type) {
    case KvType::F32:
      return static_cast<const float*>(base) + first;
    case KvType::F16:
      kernels().f16_to_f32(static_cast<const uint16_t*>(base) + first, buf, static_cast<int64_t>(n) * hd);
      return buf;
    case KvType::I8: {
      const int8_t* src = static_cast<const int8_t*>(base) + first;
      for (int j = 0; j < n; ++j) {
        const float s = scales[scale_first + j];
        for (int d = 0; d < hd; ++d) buf[j * hd + d] = s * static_cast<float>(src[j * hd + d]);
      }
      return buf;
    }
  }
  return buf;
}

}  // namespace

void kv_write(KvCache& kv, int layer, const float* k, const float* v, const AttnBatch& b) {
  const KvLayout& L = kv.layout();
  KvStorage& st = kv.storage();
  const int hd = L.head_dim, bs = L.block_size;
  for (int64_t t = 0; t < b.n_tokens; ++t) {
    const auto& table = kv.block_table(b.slot[t]);
    const int p = b.pos[t];
    const int blk = table[p / bs], off = p % bs;
    for (int h = 0; h < L.n_kv_heads; ++h) {
      const size_t dst = (static_cast<size_t>(h) * bs + off) * hd;
      const size_t si = static_cast<size_t>(h) * bs + off;
      store_row(L.type, st.k(layer, blk), L.type == KvType::I8 ? st.k_scale(layer, blk) : nullptr, dst, si,
                k + t * L.kv_dim() + h * hd, hd);
      store_row(L.type, st.v(layer, blk), L.type == KvType::I8 ? st.v_scale(layer, blk) : nullptr, dst, si,
                v + t * L.kv_dim() + h * hd, hd);
    }
  }
}

// One (token, head) pair per work item: scores over the sequence's visible
// positions block by block, a numerically stable softmax, then the
// probability-weighted sum of V. The cache is read in its own element type
// (no dequantized copy of the cache: one block's rows at a time).
void attention(ThreadPool& pool, const float* q, const KvCache& kv, int layer, const AttnBatch& b, int n_head,
               float scale, float* out) {
  const KvLayout& L = kv.layout();
  const KvStorage& st = kv.storage();
  const int hd = L.head_dim, bs = L.block_size;
  const int group = n_head / L.n_kv_heads;
  const int64_t items = b.n_tokens * n_head;
  const Kernels& k = kernels();
  const bool i8 = L.type == KvType::I8;
  pool.run([&](int tid, int nth) {
    thread_local std::vector<float> sc, rows;
    const int64_t i0 = items * tid / nth, i1 = items * (tid + 1) / nth;
    if (static_cast<int>(rows.size()) < bs * hd) rows.resize(static_cast<size_t>(bs) * hd);
    for (int64_t it = i0; it < i1; ++it) {
      const int64_t t = it / n_head;
      const int h = static_cast<int>(it % n_head), kvh = h / group;
      const int n_pos = b.pos[t] + 1;
      const int first = b.window > 0 ? std::max(0, n_pos - b.window) : 0;
      const auto& table = kv.block_table(b.slot[t]);
      const float* qh = q + (t * n_head + h) * hd;
      float qrot[1024];
      const bool rotated = i8 && is_pow2(hd) && hd <= 1024;
      if (rotated) {  // int8 keys are stored rotated (see hadamard)
        std::memcpy(qrot, qh, sizeof(float) * hd);
        hadamard(qrot, hd);
        qh = qrot;
      }
      if (static_cast<int>(sc.size()) < n_pos) sc.resize(static_cast<size_t>(n_pos));
      float mx = -INFINITY;
      for (int p0 = first - first % bs; p0 < n_pos; p0 += bs) {
        const int blk = table[p0 / bs];
        const int j0 = std::max(first - p0, 0), n = std::min(bs, n_pos - p0);
        const size_t base = static_cast<size_t>(kvh) * bs * hd, sbase = static_cast<size_t>(kvh) * bs;
        const float* kr = load_rows(L.type, st.k(layer, blk), i8 ? st.k_scale(layer, blk) : nullptr, base + j0 * hd,
                                    sbase + j0, n - j0, hd, rows.data());
        for (int j = j0; j < n; ++j) {
          const float s = k.dot_f32(qh, kr + (j - j0) * hd, hd) * scale;
          sc[p0 + j] = s;
          mx = std::max(mx, s);
        }
      }
      float sum = 0.0f;
      for (int p = first; p < n_pos; ++p) {
        sc[p] = std::exp(sc[p] - mx);
        sum += sc[p];
      }
      const float inv = 1.0f / sum;
      float* oh = out + (t * n_head + h) * hd;
      std::fill(oh, oh + hd, 0.0f);
      for (int p0 = first - first % bs; p0 < n_pos; p0 += bs) {
        const int blk = table[p0 / bs];
        const int j0 = std::max(first - p0, 0), n = std::min(bs, n_pos - p0);
        const size_t base = static_cast<size_t>(kvh) * bs * hd, sbase = static_cast<size_t>(kvh) * bs;
        const float* vr = load_rows(L.type, st.v(layer, blk), i8 ? st.v_scale(layer, blk) : nullptr, base + j0 * hd,
                                    sbase + j0, n - j0, hd, rows.data());
        for (int j = j0; j < n; ++j) k.axpy_f32(sc[p0 + j] * inv, vr + (j - j0) * hd, oh, hd);
      }
      if (rotated) hadamard(oh, hd);  // back from the rotated V space
    }
  });
}

}  // namespace infer::cpu
