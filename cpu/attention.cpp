#include "cpu/attention.h"
#include "core/tls.h"

#include <algorithm>
#include <atomic>
#include <climits>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/fp16.h"
#include "core/threadpool.h"
#include "cpu/kernels.h"
#include "cpu/ops.h"
#include "kv/kv_format.h"

namespace infer::cpu {

namespace {

using kvfmt::hadamard;
using kvfmt::rotates;

// One head's row of hd values into the pool at element `row * hd` of a block
// (f32 and f16; f16 converted with the ISA's kernel, which rounds exactly as
// the reference does: tests/test_kv_format.cpp).
inline void store_row_fp(const OpKernels& ok, KvType type, void* base, size_t row, const float* x, int hd) {
  if (type == KvType::F32)
    std::memcpy(static_cast<float*>(base) + row * hd, x, sizeof(float) * hd);
  else
    ok.f32_to_f16(x, static_cast<uint16_t*>(base) + row * hd, hd);
}

// ---- attention ----
//
// Each query (token t, head h) attends to its visible positions [lo, hi)
// with hi = pos + 1 and lo = hi - window (or 0). Positions are cut into
// chunks of kChunk aligned to absolute positions. For every chunk the query
// sees, a partial result is computed: m = the chunk's largest score,
// l = sum of exp(score - m), o = sum of exp(score - m) * v. The partials are
// merged in chunk order (the online softmax of flash attention):
//   M' = max(M, m), L' = L e^(M-M') + l e^(m-M'), O' = O e^(M-M') + o e^(m-M')
// and the output is O / L. A task needs scratch for one chunk, not for the
// context (split items keep one (m, l, o) per chunk until they are merged).
//
// Every step depends only on the query and its positions, never on which
// other queries share a task or on how a long context is split between
// threads (a split item stores its chunk partials and they are merged in the
// same order afterwards), so results are identical alone or batched, with
// any number of threads.
//
// Work is organised per KV head: the `group` query heads that share a KV
// head (GQA) are processed together, so each K/V row is loaded (and, for f16
// and int8, converted) once per group; in prefill, up to kTile consecutive
// tokens of one sequence also share the loaded rows.
constexpr int kChunk = 128;
constexpr int kTile = 4;
// Below this many multiply-adds (visible positions x heads x head_dim, about
// 30 microseconds) attention runs on the calling thread. Alone, a split pays
// from ~8 microseconds (BM_AttnDecode); inside a step it costs more: small
// matmuls stay on the caller (cpu/matmul.cpp), so an idle worker has gone
// from spinning to yielding between the layers' attention jobs, and the
// queries and outputs cross cores. At 16384, stories260K serving 8 streams
// (~32k here) made 40k tok/s on 2 threads against 45k with this threshold
// (bench-serve in process, 5 alternating rounds).
constexpr int64_t kMinParallelWork = 65536;

struct Task {
  int32_t t0, t1;  // tokens [t0, t1), consecutive in the batch, one sequence
  int32_t g;       // KV head
  int32_t c0, c1;  // chunks [c0, c1) to process
  int32_t part;    // -1: the task covers the whole item and writes the output;
                   // otherwise the item's first partial slot in the scratch
  int32_t item_c0, item_c1;  // the split item's chunks (partial slot numbering)
};

// A split item: its chunk partials are merged after all tasks ran.
struct Split {
  int32_t t, g, c0, c1, part;
};

struct Ctx {
  const OpKernels* ok;
  const float* q;
  float* out;
  const HostKvMemory* kv;
  const AttnBatch* b;
  int layer, n_head, group, hd, bs;
  float scale;
  KvType type;
  bool rotated;
  float* partials;  // per slot: m, l, o[hd]
};

inline void visible(const AttnBatch& b, int64_t t, int& lo, int& hi) {
  hi = b.pos[t] + 1;
  lo = b.window > 0 ? std::max(0, hi - b.window) : 0;
}

// Merges partial (m, l, o) into the running (M, L, O); the first partial
// initialises it. The one merge both paths (whole and split items) use.
inline void merge(float& M, float& L, float* O, float m, float l, const float* o, int hd, bool first) {
  if (first) {
    M = m;
    L = l;
    std::memcpy(O, o, sizeof(float) * hd);
    return;
  }
  const float mn = std::max(M, m);
  const float a = std::exp(M - mn), c = std::exp(m - mn);
  L = L * a + l * c;
  for (int d = 0; d < hd; ++d) O[d] = O[d] * a + o[d] * c;
  M = mn;
}

inline void finish(const float* O, float L, float* out, int hd, bool rotated) {
  const float inv = 1.0f / L;
  for (int d = 0; d < hd; ++d) out[d] = O[d] * inv;
  if (rotated) hadamard(out, hd);  // back from the rotated V space
}

// K or V rows [off, off + n) of KV head g in block `blk`, as f32: a pointer
// into the cache for f32, otherwise the rows converted into buf.
inline const float* rows_f32(const Ctx& c, bool is_v, int blk, int g, int off, int n, float* buf) {
  const HostKvMemory& st = *c.kv;
  const void* base = is_v ? st.v(c.layer, blk) : st.k(c.layer, blk);
  const size_t first = (static_cast<size_t>(g) * c.bs + off) * c.hd;
  switch (c.type) {
    case KvType::F32:
      return static_cast<const float*>(base) + first;
    case KvType::F16:
      kernels().f16_to_f32(static_cast<const uint16_t*>(base) + first, buf, static_cast<int64_t>(n) * c.hd);
      return buf;
    case KvType::I8: {
      const int8_t* q = static_cast<const int8_t*>(base) + first;
      if (is_v) {
        c.ok->i8_rows_to_f32(q, st.v_scale(c.layer, blk) + static_cast<size_t>(g) * c.bs + off, n, c.hd, buf);
        return buf;
      }
      float cv[1024];
      kvfmt::k_offset(st, c.layer, blk, g, cv);
      const uint16_t* sz = st.k_scale_zero(c.layer, blk) + (static_cast<size_t>(g) * c.bs + off) * 2;
      for (int r = 0; r < n; ++r)
        kvfmt::decode_k_i8(q + static_cast<size_t>(r) * c.hd, sz + 2 * r, cv, c.hd, buf + static_cast<size_t>(r) * c.hd);
      return buf;
    }
  }
  return buf;
}

// Asks for rows [off, off + n) of KV head g in block `blk` (and their int8
// scales) to be brought into the cache: blocks lie anywhere in the pool, so
// the hardware prefetcher cannot guess the next one.
inline void prefetch_rows(const Ctx& c, bool is_v, int blk, int g, int off, int n) {
  const HostKvMemory& st = *c.kv;
  const size_t elem = c.type == KvType::F32 ? 4 : c.type == KvType::F16 ? 2 : 1;
  const char* base = static_cast<const char*>(is_v ? st.v(c.layer, blk) : st.k(c.layer, blk)) +
                     (static_cast<size_t>(g) * c.bs + off) * c.hd * elem;
  const size_t bytes = static_cast<size_t>(n) * c.hd * elem;
  for (size_t i = 0; i < bytes; i += 64) __builtin_prefetch(base + i);
  if (c.type == KvType::I8)
    __builtin_prefetch((is_v ? st.v_scale(c.layer, blk) : st.k_scale(c.layer, blk)) + static_cast<size_t>(g) * c.bs + off);
}

struct Scratch {
  std::vector<float> qrot, sc, oc, O, kbuf, vbuf, M, L, mc, lc;
  std::vector<uint8_t> started;
};

// Runs one task: the chunks [c0, c1) of the queries of tokens [t0, t1) and
// the query heads of KV head g.
void run_task(const Ctx& c, const Task& task, Scratch& s) {
  const AttnBatch& b = *c.b;
  const OpKernels& ok = *c.ok;
  const int hd = c.hd, G = c.group, bs = c.bs;
  const int nt = task.t1 - task.t0, nq = nt * G;
  auto grow = [](std::vector<float>& v, size_t n) {
    if (v.size() < n) v.resize(n);
    return v.data();
  };
  float* sc = grow(s.sc, static_cast<size_t>(nq) * kChunk);
  float* oc = grow(s.oc, static_cast<size_t>(nq) * hd);
  float* O = grow(s.O, static_cast<size_t>(nq) * hd);
  float* M = grow(s.M, nq);
  float* L = grow(s.L, nq);
  float* mc = grow(s.mc, nq);
  float* lc = grow(s.lc, nq);
  float* kbuf = grow(s.kbuf, static_cast<size_t>(bs) * hd);
  float* vbuf = grow(s.vbuf, static_cast<size_t>(bs) * hd);
  if (s.started.size() < static_cast<size_t>(nq)) s.started.resize(nq);
  std::fill(s.started.begin(), s.started.begin() + nq, 0);

  // The group's query rows of each token (contiguous, stride hd).
  const float* qp[kTile];
  int lo[kTile], hi[kTile];
  float* qrot = c.rotated ? grow(s.qrot, static_cast<size_t>(nq) * hd) : nullptr;
  for (int ti = 0; ti < nt; ++ti) {
    const int64_t t = task.t0 + ti;
    visible(b, t, lo[ti], hi[ti]);
    const float* src = c.q + (t * c.n_head + static_cast<int64_t>(task.g) * G) * hd;
    if (c.rotated) {  // int8 keys are stored rotated (see hadamard)
      float* dst = qrot + static_cast<size_t>(ti) * G * hd;
      std::memcpy(dst, src, sizeof(float) * G * hd);
      for (int i = 0; i < G; ++i) hadamard(dst + i * hd, hd);
      src = dst;
    }
    qp[ti] = src;
  }
  const int32_t* table = b.table[task.t0];

  for (int ch = task.c0; ch < task.c1; ++ch) {
    const int p0 = ch * kChunk, p1 = p0 + kChunk;
    int a[kTile], e[kTile];
    int ua = p1, ub = p0;
    for (int ti = 0; ti < nt; ++ti) {
      a[ti] = std::max(p0, lo[ti]);
      e[ti] = std::min(p1, hi[ti]);
      if (a[ti] < e[ti]) {
        ua = std::min(ua, a[ti]);
        ub = std::max(ub, e[ti]);
      }
    }
    if (ua >= ub) continue;
    // Scores, block by block: each K row is converted once for all queries.
    for (int p = ua; p < ub;) {
      const int bi = p / bs, off = p - bi * bs, pe = std::min(ub, (bi + 1) * bs);
      if (pe < ub) {  // the next block's keys
        const int nb = std::min(ub, pe + bs) - pe;
        prefetch_rows(c, false, table[bi + 1], task.g, 0, nb);
      } else {  // the first values of this chunk
        const int bv = ua / bs;
        prefetch_rows(c, true, table[bv], task.g, ua - bv * bs, std::min(ub, (bv + 1) * bs) - ua);
      }
      const float* kr = rows_f32(c, false, table[bi], task.g, off, pe - p, kbuf);
      for (int ti = 0; ti < nt; ++ti) {
        const int x = std::max(p, a[ti]), y = std::min(pe, e[ti]);
        if (x < y)
          ok.attn_scores(qp[ti], G, hd, kr + static_cast<size_t>(x - p) * hd, y - x, hd, c.scale,
                         sc + static_cast<size_t>(ti) * G * kChunk + (x - p0), kChunk);
      }
      p = pe;
    }
    // The chunk's softmax numerators.
    for (int ti = 0; ti < nt; ++ti) {
      if (a[ti] >= e[ti]) continue;
      for (int i = 0; i < G; ++i) {
        const int qi = ti * G + i;
        float* sp = sc + static_cast<size_t>(qi) * kChunk + (a[ti] - p0);
        if (b.softcap > 0.0f) {  // Gemma 2: cap * tanh(s / cap)
          ok.softcap(sp, e[ti] - a[ti], b.softcap);
        }
        lc[qi] = ok.exp_sum(sp, e[ti] - a[ti], &mc[qi]);
        std::fill(oc + static_cast<size_t>(qi) * hd, oc + static_cast<size_t>(qi + 1) * hd, 0.0f);
      }
    }
    // Weighted V rows.
    for (int p = ua; p < ub;) {
      const int bi = p / bs, off = p - bi * bs, pe = std::min(ub, (bi + 1) * bs);
      if (pe < ub) prefetch_rows(c, true, table[bi + 1], task.g, 0, std::min(ub, pe + bs) - pe);
      const float* vr = rows_f32(c, true, table[bi], task.g, off, pe - p, vbuf);
      for (int ti = 0; ti < nt; ++ti) {
        const int x = std::max(p, a[ti]), y = std::min(pe, e[ti]);
        if (x < y)
          ok.attn_accum(sc + static_cast<size_t>(ti) * G * kChunk + (x - p0), G, kChunk,
                        vr + static_cast<size_t>(x - p) * hd, y - x, hd, oc + static_cast<size_t>(ti) * G * hd, hd);
      }
      p = pe;
    }
    // Merge into the running result, or keep the partial for later.
    for (int ti = 0; ti < nt; ++ti) {
      if (a[ti] >= e[ti]) continue;
      for (int i = 0; i < G; ++i) {
        const int qi = ti * G + i;
        const float* o = oc + static_cast<size_t>(qi) * hd;
        if (task.part >= 0) {
          const int nc = task.item_c1 - task.item_c0;
          float* P = c.partials + (static_cast<size_t>(task.part) + static_cast<size_t>(i) * nc + (ch - task.item_c0)) *
                                      (hd + 2);
          P[0] = mc[qi];
          P[1] = lc[qi];
          std::memcpy(P + 2, o, sizeof(float) * hd);
        } else {
          merge(M[qi], L[qi], O + static_cast<size_t>(qi) * hd, mc[qi], lc[qi], o, hd, !s.started[qi]);
          s.started[qi] = 1;
        }
      }
    }
  }
  if (task.part >= 0) return;
  for (int ti = 0; ti < nt; ++ti)
    for (int i = 0; i < G; ++i) {
      const int qi = ti * G + i;
      const int64_t t = task.t0 + ti;
      finish(O + static_cast<size_t>(qi) * hd, L[qi], c.out + (t * c.n_head + static_cast<int64_t>(task.g) * G + i) * hd,
             hd, c.rotated);
    }
}

Scratch& scratch() {
  static thread_local Scratch* slot = nullptr;
  return tls_object(slot);
}

std::atomic<int> g_split_pieces{0};  // tests: force splitting items into this many pieces

}  // namespace

void set_attention_split_for_testing(int pieces) { g_split_pieces.store(pieces); }

void kv_write(ThreadPool& pool, KvMemory& mem, int layer, const float* k, const float* v, const AttnBatch& b) {
  HostKvMemory& st = as_host_memory(mem);
  const KvLayout& L = st.layout();
  const OpKernels& ok = op_kernels();
  const int hd = L.head_dim, bs = L.block_size;
  const bool i8 = L.type == KvType::I8;
  const bool rot = rotates(L.type, hd);
  // Tokens write distinct rows: big (prefill) batches are split between
  // threads; int8 rows are rotated and quantized, which costs more.
  const int64_t per_token = static_cast<int64_t>(L.kv_dim()) * (i8 ? 8 : 1);
  const int64_t grain = std::max<int64_t>(1, 32768 / std::max<int64_t>(1, per_token));
  auto row_of = [&](int64_t t, int& blk, int& off) {
    const int p = b.pos[t];
    blk = b.table[t][p / bs];
    off = p % bs;
  };
  if (!i8) {
    pool.parallel_for(b.n_tokens, grain, [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t) {
        int blk, off;
        row_of(t, blk, off);
        for (int h = 0; h < L.n_kv_heads; ++h) {
          const size_t row = static_cast<size_t>(h) * bs + off;
          store_row_fp(ok, L.type, st.k(layer, blk), row, k + t * L.kv_dim() + h * hd, hd);
          store_row_fp(ok, L.type, st.v(layer, blk), row, v + t * L.kv_dim() + h * hd, hd);
        }
      }
    });
    return;
  }
  // int8. V rows are independent of each other.
  pool.parallel_for(b.n_tokens, grain, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      int blk, off;
      row_of(t, blk, off);
      for (int h = 0; h < L.n_kv_heads; ++h) {
        const size_t row = static_cast<size_t>(h) * bs + off;
        const float* x = v + t * L.kv_dim() + h * hd;
        float rx[1024];
        if (rot) {
          std::memcpy(rx, x, sizeof(float) * hd);
          hadamard(rx, hd);
          x = rx;
        }
        kvfmt::encode_v_i8(x, hd, static_cast<int8_t*>(st.v(layer, blk)) + row * hd, st.v_scale(layer, blk) + row);
      }
    }
  });
  // K rows are coded against their block's offset, which is computed from
  // the previous block's stored keys when the block's first position is
  // written: a sequence's blocks are written in order, in rounds (round r:
  // the r-th block a sequence touches in this batch), the offsets of a round
  // set before its rows.
  static thread_local std::vector<int32_t>*first_block_slot = nullptr, *order_slot = nullptr, *round_of_slot = nullptr;
  std::vector<int32_t>& first_block = tls_object(first_block_slot);
  std::vector<int32_t>& order = tls_object(order_slot);
  std::vector<int32_t>& round_of = tls_object(round_of_slot);
  int max_slot = 0;
  for (int64_t t = 0; t < b.n_tokens; ++t) max_slot = std::max(max_slot, b.slot[t]);
  first_block.assign(static_cast<size_t>(max_slot) + 1, INT32_MAX);
  for (int64_t t = 0; t < b.n_tokens; ++t)
    first_block[b.slot[t]] = std::min(first_block[b.slot[t]], b.pos[t] / bs);
  round_of.resize(b.n_tokens);
  int n_rounds = 0;
  for (int64_t t = 0; t < b.n_tokens; ++t) {
    round_of[t] = b.pos[t] / bs - first_block[b.slot[t]];
    n_rounds = std::max(n_rounds, round_of[t] + 1);
  }
  order.resize(b.n_tokens);
  int64_t n_done = 0;
  for (int r = 0; r < n_rounds; ++r) {
    const int64_t begin = n_done;
    for (int64_t t = 0; t < b.n_tokens; ++t)
      if (round_of[t] == r) order[n_done++] = static_cast<int32_t>(t);
    for (int64_t i = begin; i < n_done; ++i) {
      const int64_t t = order[i];
      const int p = b.pos[t];
      if (p % bs) continue;
      const int32_t* table = b.table[t];
      kvfmt::set_k_offset(st, layer, table[p / bs], p >= bs ? table[p / bs - 1] : -1);
    }
    const int32_t* ord = order.data() + begin;
    pool.parallel_for(n_done - begin, grain, [&](int64_t i0, int64_t i1) {
      float c[1024], rx[1024];
      for (int64_t i = i0; i < i1; ++i) {
        const int64_t t = ord[i];
        int blk, off;
        row_of(t, blk, off);
        for (int h = 0; h < L.n_kv_heads; ++h) {
          const size_t row = static_cast<size_t>(h) * bs + off;
          const float* x = k + t * L.kv_dim() + h * hd;
          if (rot) {
            std::memcpy(rx, x, sizeof(float) * hd);
            hadamard(rx, hd);
            x = rx;
          }
          kvfmt::k_offset(st, layer, blk, h, c);
          kvfmt::encode_k_i8(x, c, hd, static_cast<int8_t*>(st.k(layer, blk)) + row * hd, st.k_scale_zero(layer, blk) + 2 * row);
        }
      }
    });
  }
}

void attention(ThreadPool& pool, const float* q, const KvMemory& mem, int layer, const AttnBatch& b, int n_head,
               float scale, float* out) {
  if (b.n_tokens <= 0) return;
  const HostKvMemory& kv = as_host_memory(mem);
  const KvLayout& Lay = kv.layout();
  Ctx c;
  c.ok = &op_kernels();
  c.q = q;
  c.out = out;
  c.kv = &kv;
  c.b = &b;
  c.layer = layer;
  c.n_head = n_head;
  c.group = n_head / Lay.n_kv_heads;
  c.hd = Lay.head_dim;
  c.bs = Lay.block_size;
  c.scale = scale;
  c.type = Lay.type;
  c.rotated = rotates(Lay.type, Lay.head_dim);
  c.partials = nullptr;

  const int nth = pool.size();
  const int n_kv = Lay.n_kv_heads;
  static thread_local std::vector<Task>* tasks_slot = nullptr;
  static thread_local std::vector<Split>* splits_slot = nullptr;
  static thread_local std::vector<float>* partials_slot = nullptr;
  std::vector<Task>& tasks = tls_object(tasks_slot);
  std::vector<Split>& splits = tls_object(splits_slot);
  std::vector<float>& partials = tls_object(partials_slot);
  tasks.clear();
  splits.clear();

  // Tiles of consecutive tokens of one sequence; several tokens per tile
  // only when there are plenty of tiles for the threads anyway.
  const int tile = b.n_tokens * n_kv >= 8 * nth ? kTile : 1;
  int64_t total = 0;  // visible positions over all tokens: the work measure
  for (int64_t t = 0; t < b.n_tokens; ++t) {
    int lo, hi;
    visible(b, t, lo, hi);
    total += hi - lo;
  }
  total *= n_kv;
  const int forced = g_split_pieces.load(std::memory_order_relaxed);
  const int64_t target = std::max<int64_t>(total / (4 * nth), 4 * kChunk);
  int32_t n_slots = 0;
  for (int64_t t0 = 0; t0 < b.n_tokens;) {
    int64_t t1 = t0 + 1;
    while (t1 < b.n_tokens && t1 - t0 < tile && b.slot[t1] == b.slot[t0]) ++t1;
    int c0 = INT32_MAX, c1 = 0;
    for (int64_t t = t0; t < t1; ++t) {
      int lo, hi;
      visible(b, t, lo, hi);
      c0 = std::min(c0, lo / kChunk);
      c1 = std::max(c1, (hi - 1) / kChunk + 1);
    }
    const int nc = c1 - c0;
    for (int g = 0; g < n_kv; ++g) {
      int pieces = 1;
      if (t1 - t0 == 1) {
        int lo, hi;
        visible(b, t0, lo, hi);
        if (forced > 0) {
          pieces = std::min(forced, nc);
        } else if (nth > 1 && hi - lo > 2 * target) {
          pieces = static_cast<int>(std::min<int64_t>(nc, (hi - lo + target - 1) / target));
        }
      }
      if (pieces <= 1) {
        tasks.push_back(Task{static_cast<int32_t>(t0), static_cast<int32_t>(t1), g, c0, c1, -1, c0, c1});
        continue;
      }
      splits.push_back(Split{static_cast<int32_t>(t0), g, c0, c1, n_slots});
      for (int k = 0; k < pieces; ++k) {
        const int a = c0 + nc * k / pieces, z = c0 + nc * (k + 1) / pieces;
        if (a < z) tasks.push_back(Task{static_cast<int32_t>(t0), static_cast<int32_t>(t0 + 1), g, a, z, n_slots, c0, c1});
      }
      n_slots += c.group * nc;
    }
    t0 = t1;
  }
  if (n_slots > 0) {
    const size_t need = static_cast<size_t>(n_slots) * (c.hd + 2);
    if (partials.size() < need) partials.resize(need);
    c.partials = partials.data();
  }

  // Tasks are handed out one at a time, last first (in prefill the later
  // tokens see more positions: the big tasks start early).
  // Small batches (a few microseconds of work) stay on the calling thread.
  const int n_tasks = static_cast<int>(tasks.size());
  const Task* tp = tasks.data();
  if (nth == 1 || n_tasks == 1 || (n_slots == 0 && total * c.group * c.hd < kMinParallelWork)) {
    Scratch& s = scratch();
    for (int i = n_tasks - 1; i >= 0; --i) run_task(c, tp[i], s);
  } else {
    std::atomic<int> next{0};
    pool.run([&](int, int) {
      Scratch& s = scratch();
      for (int i; (i = next.fetch_add(1, std::memory_order_relaxed)) < n_tasks;) run_task(c, tp[n_tasks - 1 - i], s);
    });
  }
  if (splits.empty()) return;

  // Split items: merge their chunk partials in chunk order.
  const Split* sp = splits.data();
  const int G = c.group, hd = c.hd;
  pool.parallel_for(static_cast<int64_t>(splits.size()) * G, 1, [&](int64_t begin, int64_t end) {
    static thread_local std::vector<float>* O_slot = nullptr;
    std::vector<float>& O = tls_object(O_slot);
    if (O.size() < static_cast<size_t>(hd)) O.resize(hd);
    for (int64_t w = begin; w < end; ++w) {
      const Split& s = sp[w / G];
      const int i = static_cast<int>(w % G);
      const int nc = s.c1 - s.c0;
      float M = 0, L = 0;
      for (int k = 0; k < nc; ++k) {
        const float* P = c.partials + (static_cast<size_t>(s.part) + static_cast<size_t>(i) * nc + k) * (hd + 2);
        merge(M, L, O.data(), P[0], P[1], P + 2, hd, k == 0);
      }
      finish(O.data(), L, out + (static_cast<int64_t>(s.t) * n_head + static_cast<int64_t>(s.g) * G + i) * hd, hd,
             c.rotated);
    }
  });
}

}  // namespace infer::cpu
