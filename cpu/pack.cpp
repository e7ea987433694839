// Repacking of weight rows into interleaved panels (layouts in cpu/qmatmul.h).
// Portable code: it runs once per weight, at its first use.
#include <cstdlib>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "core/fp16.h"
#include "core/threadpool.h"
#include "cpu/qmatmul.h"

namespace infer::cpu {

namespace {

// Unsigned 4-bit value k (0 .. block-1) of a Q4_0 / INT4 block whose nibbles
// start at qs; half = block / 2 (byte j: value j low, value j + half high).
inline int nibble(const uint8_t* qs, int half, int k) { return k < half ? (qs[k] & 0x0F) : (qs[k - half] >> 4); }

// Runs fn(panel) for every panel, spread over the pool when there is one.
template <typename F>
void for_panels(const Panels& p, ThreadPool* pool, F&& fn) {
  if (!pool || p.n_panels < 8) {
    for (int64_t i = 0; i < p.n_panels; ++i) fn(i);
    return;
  }
  pool->run([&](int tid, int nth) {
    for (int64_t i = p.n_panels * tid / nth; i < p.n_panels * (tid + 1) / nth; ++i) fn(i);
  });
}

uint8_t* alloc_aligned(size_t bytes) {
  const size_t n = (bytes + 63) / 64 * 64;
  void* p = std::aligned_alloc(64, n ? n : 64);
  if (!p) raise(Status::OutOfMemory, "cannot allocate %zu bytes for repacked weights", n);
  std::memset(p, 0, n);
  return static_cast<uint8_t*>(p);
}

void pack_k4(const WeightView& w, Panels& p, ThreadPool* pool) {
  const bool q40 = w.type == DType::Q4_0;
  const int G = static_cast<int>(dtype_info(w.type)->block);
  const int block_bytes = static_cast<int>(dtype_info(w.type)->bytes);
  const int qs_off = q40 ? 2 : 4;
  p.kind = Panels::Kind::K4;
  p.group = G;
  p.has_z = !q40;
  p.n_pad = w.n_in;
  const int64_t n_groups = w.n_in / G;
  const size_t group_bytes = static_cast<size_t>(G / 32) * 256 + 32 + (p.has_z ? 16 : 0);
  p.panel_bytes = static_cast<size_t>(n_groups) * group_bytes;
  p.data = {alloc_aligned(p.panel_bytes * p.n_panels), std::free};
  for_panels(p, pool, [&](int64_t pi) {
    uint8_t* dst = p.data.get() + pi * p.panel_bytes;
    for (int64_t g = 0; g < n_groups; ++g) {
      uint8_t* gd = dst + g * group_bytes;
      for (int r = 0; r < kPanelRows; ++r) {
        const int64_t row = pi * kPanelRows + r;
        if (row >= w.n_out) continue;  // zero rows: d = 0
        const uint8_t* blk = w.row(row) + g * block_bytes;
        const uint8_t* qs = blk + qs_off;
        uint8_t q[128];
        for (int k = 0; k < G; ++k) q[k] = static_cast<uint8_t>(nibble(qs, G / 2, k));
        for (int b = 0; b < G / 32; ++b) {
          for (int s = 0; s < 4; ++s) {
            uint8_t* step = gd + b * 256 + s * 64 + 4 * r;
            const uint8_t* v = q + 32 * b + 8 * s;
            for (int t = 0; t < 4; ++t) step[t] = static_cast<uint8_t>(v[t] | (v[t + 4] << 4));
          }
        }
        std::memcpy(gd + (G / 32) * 256 + 2 * r, blk, 2);  // f16 d
        if (p.has_z) gd[(G / 32) * 256 + 32 + r] = blk[2];
      }
    }
  });
}

void pack_k8(const WeightView& w, Panels& p, ThreadPool* pool) {
  const bool q80 = w.type == DType::Q8_0;
  p.kind = Panels::Kind::K8;
  p.group = q80 ? 32 : 0;
  p.n_pad = (w.n_in + 31) / 32 * 32;
  const int64_t nb = p.n_pad / 32;
  const size_t head = q80 ? 0 : 128;  // W8A8: 16 f32 scales + 16 i32 row sums
  const size_t block_bytes = 512 + (q80 ? 32 : 0);
  p.panel_bytes = head + static_cast<size_t>(nb) * block_bytes;
  p.data = {alloc_aligned(p.panel_bytes * p.n_panels), std::free};
  for_panels(p, pool, [&](int64_t pi) {
    uint8_t* dst = p.data.get() + pi * p.panel_bytes;
    for (int r = 0; r < kPanelRows; ++r) {
      const int64_t row = pi * kPanelRows + r;
      if (row >= w.n_out) continue;
      const uint8_t* src = w.row(row);
      int32_t sum = 0;
      for (int64_t b = 0; b < nb; ++b) {
        uint8_t* bd = dst + head + b * block_bytes;
        for (int s = 0; s < 8; ++s) {
          for (int t = 0; t < 4; ++t) {
            const int64_t k = 32 * b + 4 * s + t;
            int8_t v = 0;
            if (q80) {
              v = static_cast<int8_t>(src[b * 34 + 2 + 4 * s + t]);
            } else if (k < w.n_in) {
              v = static_cast<int8_t>(src[k]);
            }
            sum += v;
            bd[64 * s + 4 * r + t] = static_cast<uint8_t>(v);
          }
        }
        if (q80) std::memcpy(bd + 512 + 2 * r, src + b * 34, 2);
      }
      if (!q80) {
        std::memcpy(dst + 4 * r, &w.scale[row], 4);
        std::memcpy(dst + 64 + 4 * r, &sum, 4);
      }
    }
  });
}

}  // namespace

std::shared_ptr<Panels> pack_panels(const WeightView& w, ThreadPool* pool) {
  auto p = std::make_shared<Panels>();
  p->n_in = w.n_in;
  p->n_out = w.n_out;
  p->n_panels = (w.n_out + kPanelRows - 1) / kPanelRows;
  switch (w.type) {
    case DType::Q4_0: case DType::INT4_G32: case DType::INT4_G64: case DType::INT4_G128:
      pack_k4(w, *p, pool);
      break;
    case DType::Q8_0: case DType::W8A8:
      if (w.type == DType::W8A8 && !w.scale) raise(Status::InvalidArgument, "w8a8 weight without scales");
      pack_k8(w, *p, pool);
      break;
    default:
      raise(Status::Internal, "no panel layout for %s", dtype_name(w.type));
  }
  return p;
}

}  // namespace infer::cpu
