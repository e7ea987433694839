#include "cpu/encoder.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "core/threadpool.h"
#include "cpu/kernels.h"

namespace infer::cpu {

namespace {
constexpr int64_t kRowsGrain = 16384;  // values per chunk of row ops
constexpr int64_t kElemGrain = 8192;
}  // namespace

// Row by row and element by element through the active ISA's kernels
// (cpu/kernels.h): a value's result does not depend on the split.
void layer_norm(ThreadPool& pool, const float* x, const float* w, const float* b, int64_t m, int64_t n, float eps,
                float* y) {
  const IsaKernels& K = kernels();
  pool.parallel_for(m, std::max<int64_t>(1, kRowsGrain / std::max<int64_t>(1, n)), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) K.layer_norm(x + r * n, w, b, n, eps, y + r * n);
  });
}

void gelu_erf(ThreadPool& pool, float* x, int64_t n) {
  const IsaKernels& K = kernels();
  pool.parallel_for(n, kElemGrain, [&](int64_t b, int64_t e) { K.gelu_erf(x + b, e - b); });
}

void tanh_inplace(ThreadPool& pool, float* x, int64_t n) {
  const IsaKernels& K = kernels();
  pool.parallel_for(n, kElemGrain, [&](int64_t b, int64_t e) { K.tanh_f32(x + b, e - b); });
}

// One job per (sequence, head): the head's keys and values of the sequence
// are gathered into contiguous rows, then scores, softmax and the weighted
// sum go through the ISA kernels of the paged attention.
void attention_dense(ThreadPool& pool, const float* q, const float* k, const float* v, const AttnBatch& b,
                     int n_head, int n_head_kv, int head_dim, float scale, bool causal, float* out) {
  const int64_t n = b.n_tokens;
  if (n <= 0) return;
  if (n_head <= 0 || n_head_kv <= 0 || n_head % n_head_kv != 0)
    raise(Status::Internal, "attention_dense: %d heads over %d kv heads", n_head, n_head_kv);
  // The sequences: runs of equal slot.
  std::vector<int64_t> starts;
  for (int64_t t = 0; t < n; ++t)
    if (t == 0 || b.slot[t] != b.slot[t - 1]) starts.push_back(t);
  starts.push_back(n);
  const int64_t n_seq = static_cast<int64_t>(starts.size()) - 1;
  const int64_t q_dim = static_cast<int64_t>(n_head) * head_dim;
  const int64_t kv_dim = static_cast<int64_t>(n_head_kv) * head_dim;
  const int group = n_head / n_head_kv;
  const IsaKernels& K = kernels();
  pool.parallel_for(n_seq * n_head, 1, [&](int64_t j0, int64_t j1) {
    std::vector<float> kh, vh, s;
    for (int64_t j = j0; j < j1; ++j) {
      const int64_t sq = j / n_head;
      const int h = static_cast<int>(j % n_head), hk = h / group;
      const int64_t t0 = starts[sq], len = starts[sq + 1] - t0;
      kh.resize(static_cast<size_t>(len * head_dim));
      vh.resize(static_cast<size_t>(len * head_dim));
      for (int64_t u = 0; u < len; ++u) {
        std::memcpy(&kh[u * head_dim], k + (t0 + u) * kv_dim + hk * head_dim, sizeof(float) * head_dim);
        std::memcpy(&vh[u * head_dim], v + (t0 + u) * kv_dim + hk * head_dim, sizeof(float) * head_dim);
      }
      s.resize(static_cast<size_t>(len * len));
      K.attn_scores(q + t0 * q_dim + h * head_dim, static_cast<int>(len), q_dim, kh.data(), static_cast<int>(len),
                    head_dim, scale, s.data(), len);
      for (int64_t i = 0; i < len; ++i) {
        float* o = out + (t0 + i) * q_dim + h * head_dim;
        std::memset(o, 0, sizeof(float) * head_dim);
        // Causal: row i sees the tokens at positions <= its own (in order
        // within the sequence: the first i + 1).
        int cnt = static_cast<int>(len);
        if (causal) {
          cnt = 0;
          for (int64_t u = 0; u < len; ++u)
            if (b.pos[t0 + u] <= b.pos[t0 + i]) cnt = static_cast<int>(u + 1);
        }
        float mx;
        const float sum = K.exp_sum(&s[i * len], cnt, &mx);
        const float inv = 1.0f / sum;
        for (int u = 0; u < cnt; ++u) s[i * len + u] *= inv;
        K.attn_accum(&s[i * len], 1, len, vh.data(), cnt, head_dim, o, q_dim);
      }
    }
  });
}

}  // namespace infer::cpu
