// KV pools and the paged-attention reference shared by the KV and CUDA tests:
// layouts, and the CPU backend's attention over a scattered f16 pool
// (test_cuda_layout.cpp runs the CUDA kernels' algorithm on the host against
// it, test_cuda.cpp the kernels themselves on a GPU).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <random>
#include <vector>

#include "core/backend.h"
#include "cuda/layout.h"
#include "kv/kv_format.h"

namespace infer_test {

inline std::vector<float> cuda_gauss(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = nd(rng);
  return v;
}

inline infer::KvLayout kv_layout(infer::KvType type, int n_layers, int n_kv, int hd, int bs, int n_blocks) {
  infer::KvLayout L;
  L.n_layers = n_layers;
  L.n_kv_heads = n_kv;
  L.head_dim = hd;
  L.block_size = bs;
  L.n_blocks = n_blocks;
  L.type = type;
  return L;
}

inline infer::cuda::layout::KvAddr kv_addr(const infer::KvLayout& L) {
  return {L.n_blocks, L.n_kv_heads, L.head_dim, L.block_size};
}

struct AttnCase {
  int n_head, n_kv, hd, bs, window;
  float softcap;
};

// Sequences of the given lengths written into a CPU-backend f16 pool (layer
// 1 of 2) over shuffled blocks, and the batch of each sequence's last token
// (with a window, the blocks wholly before it released as -1, as the
// book-keeper does), with the CPU backend's attention output for random q.
struct AttnFixture {
  infer::KvLayout L;
  std::unique_ptr<infer::KvMemory> mem;
  std::vector<std::vector<int32_t>> tables;
  std::vector<std::vector<float>> k, v;  // each sequence's K and V rows, as written
  std::vector<int32_t> pos, slot;
  std::vector<const int32_t*> table_ptrs;
  infer::AttnBatch batch;
  int layer = 1;
  float scale = 1.0f;
  std::vector<float> q, want;

  AttnFixture(infer::Backend& cpu, const AttnCase& c, const std::vector<int>& lens, int n_blocks)
      : L(kv_layout(infer::KvType::F16, 2, c.n_kv, c.hd, c.bs, n_blocks)) {
    using namespace infer;
    mem = cpu.make_kv_memory(L, L.n_blocks, KvTier::Primary);
    std::vector<int32_t> ids(L.n_blocks);
    for (int i = 0; i < L.n_blocks; ++i) ids[i] = i;
    std::shuffle(ids.begin(), ids.end(), std::mt19937(9));
    const int kv_dim = c.n_kv * c.hd;
    int next = 0;
    for (size_t s = 0; s < lens.size(); ++s) {
      const int nb = (lens[s] + c.bs - 1) / c.bs;
      tables.emplace_back(ids.begin() + next, ids.begin() + next + nb);
      next += nb;
      std::vector<int32_t> p(lens[s]), sl(lens[s], static_cast<int32_t>(s));
      for (int i = 0; i < lens[s]; ++i) p[i] = i;
      std::vector<const int32_t*> tp(lens[s], tables[s].data());
      AttnBatch b;
      b.n_tokens = lens[s];
      b.pos = p.data();
      b.slot = sl.data();
      b.table = tp.data();
      k.push_back(cuda_gauss(lens[s] * kv_dim, 20 + s));
      v.push_back(cuda_gauss(lens[s] * kv_dim, 30 + s));
      for (int l = 0; l < L.n_layers; ++l) cpu.kv_write(*mem, l, k[s].data(), v[s].data(), b);
    }
    const int n_tok = static_cast<int>(lens.size());
    pos.resize(n_tok);
    slot.resize(n_tok);
    table_ptrs.resize(n_tok);
    for (int t = 0; t < n_tok; ++t) {
      pos[t] = lens[t] - 1;
      slot[t] = t;
      if (c.window > 0)
        for (int bi = 0; (bi + 1) * c.bs <= pos[t] - c.window + 1; ++bi) tables[t][bi] = -1;
      table_ptrs[t] = tables[t].data();
    }
    batch.n_tokens = n_tok;
    batch.pos = pos.data();
    batch.slot = slot.data();
    batch.table = table_ptrs.data();
    batch.window = c.window;
    batch.softcap = c.softcap;
    scale = 1.0f / std::sqrt(static_cast<float>(c.hd));
    q = cuda_gauss(static_cast<size_t>(n_tok) * c.n_head * c.hd, 40);
    want.resize(q.size());
    cpu.attention(q.data(), *mem, layer, batch, c.n_head, scale, want.data());
  }
  // The pool's f16 elements (HostKvMemory's layout, all layers).
  const uint16_t* pool() const { return static_cast<const uint16_t*>(infer::as_host_memory(*mem).k(0, 0)); }
  size_t pool_elems() const {
    return static_cast<size_t>(infer::cuda::layout::kv_elem(kv_addr(L), L.n_layers, 0, 0, 0, 0, 0));
  }
};

}  // namespace infer_test
