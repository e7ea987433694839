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

// The 6-bit (scale, min) pair j of a Q4_K super-block (as quant/dequant.cpp).
void scale_min_k4(int j, const uint8_t* q, int* sc, int* mn) {
  if (j < 4) {
    *sc = q[j] & 63;
    *mn = q[j + 4] & 63;
  } else {
    *sc = (q[j + 4] & 0x0F) | ((q[j - 4] >> 6) << 4);
    *mn = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

void pack_k4(const WeightView& w, Panels& p, ThreadPool* pool) {
  const DTypeInfo* info = dtype_info(w.type);
  const int FG = static_cast<int>(info->block), block_bytes = static_cast<int>(info->bytes);  // file blocks
  p.kind = Panels::Kind::K4;
  using Sc = Panels::Scales;
  switch (w.type) {
    case DType::Q4_0: p.scales = Sc::Q4_0; break;
    case DType::Q4_1: p.scales = Sc::Q4_1; break;
    case DType::Q4_K: p.scales = Sc::Q4_K; break;
    case DType::Q5_0: p.scales = Sc::Q5_0; break;
    case DType::Q5_1: p.scales = Sc::Q5_1; break;
    case DType::Q5_K: p.scales = Sc::Q5_K; break;
    case DType::Q6_K: p.scales = Sc::Q6_K; break;
    default: p.scales = Sc::Int4; break;
  }
  p.has_z = p.scales == Sc::Int4;
  // Q4_0 / Q4_1 / Q5_0 / Q5_1: four file blocks per panel group when the row allows.
  const bool per_block = p.scales == Sc::Q4_0 || p.scales == Sc::Q4_1 || p.scales == Sc::Q5_0 || p.scales == Sc::Q5_1;
  const int G = per_block && w.n_in % 128 == 0 ? 128 : FG;
  const int fpg = G / FG;  // file blocks per group
  const int hbits = k4_high_bits(p.scales);
  const size_t block_bytes_p = k4_block_bytes(p.scales);  // a panel block: nibbles and high bits
  p.group = G;
  p.n_pad = w.n_in;
  const int64_t n_groups = w.n_in / G;
  const size_t nib = static_cast<size_t>(G / 32) * block_bytes_p;
  const size_t group_bytes = nib + k4_scale_bytes(p.scales, G / 32);
  p.panel_bytes = static_cast<size_t>(n_groups) * group_bytes;
  p.data = {alloc_aligned(p.panel_bytes * p.n_panels), std::free};
  for_panels(p, pool, [&](int64_t pi) {
    uint8_t* dst = p.data.get() + pi * p.panel_bytes;
    for (int64_t g = 0; g < n_groups; ++g) {
      uint8_t* gd = dst + g * group_bytes;
      uint8_t* sd = gd + nib;  // the group's scales
      for (int r = 0; r < kPanelRows; ++r) {
        const int64_t row = pi * kPanelRows + r;
        if (row >= w.n_out) continue;  // zero rows: zero scales
        const uint8_t* blk = w.row(row) + g * fpg * block_bytes;
        uint8_t q[256];
        switch (p.scales) {
          case Panels::Scales::Q4_0:
            for (int j = 0; j < fpg; ++j) {
              const uint8_t* bj = blk + j * block_bytes;
              for (int k = 0; k < 32; ++k) q[32 * j + k] = static_cast<uint8_t>(nibble(bj + 2, 16, k));
              std::memcpy(sd + 32 * j + 2 * r, bj, 2);  // d
            }
            break;
          case Panels::Scales::Q4_1:
            for (int j = 0; j < fpg; ++j) {
              const uint8_t* bj = blk + j * block_bytes;
              for (int k = 0; k < 32; ++k) q[32 * j + k] = static_cast<uint8_t>(nibble(bj + 4, 16, k));
              std::memcpy(sd + 64 * j + 2 * r, bj, 2);           // d
              std::memcpy(sd + 64 * j + 32 + 2 * r, bj + 2, 2);  // m
            }
            break;
          case Panels::Scales::Int4:
            for (int k = 0; k < G; ++k) q[k] = static_cast<uint8_t>(nibble(blk + 4, G / 2, k));
            std::memcpy(sd + 2 * r, blk, 2);  // d
            sd[32 + r] = blk[2];              // z
            break;
          case Panels::Scales::Q4_K: {
            // 64-value chunk c: 32 bytes, low nibbles first, then high nibbles.
            for (int c = 0; c < 4; ++c)
              for (int l = 0; l < 32; ++l) {
                q[64 * c + l] = blk[16 + 32 * c + l] & 0x0F;
                q[64 * c + 32 + l] = blk[16 + 32 * c + l] >> 4;
              }
            for (int j = 0; j < 8; ++j) {
              int sc, mn;
              scale_min_k4(j, blk + 4, &sc, &mn);
              sd[16 * j + r] = static_cast<uint8_t>(sc);
              sd[128 + 16 * j + r] = static_cast<uint8_t>(mn);
            }
            std::memcpy(sd + 256 + 2 * r, blk, 2);      // d
            std::memcpy(sd + 288 + 2 * r, blk + 2, 2);  // dmin
            break;
          }
          case Panels::Scales::Q5_0:
          case Panels::Scales::Q5_1: {
            const bool one = p.scales == Panels::Scales::Q5_1;  // Q5_1: f16 d, f16 m, u32 qh, qs
            for (int j = 0; j < fpg; ++j) {
              const uint8_t* bj = blk + j * block_bytes;
              uint32_t qh;
              std::memcpy(&qh, bj + (one ? 4 : 2), 4);
              for (int k = 0; k < 32; ++k)
                q[32 * j + k] = static_cast<uint8_t>(nibble(bj + (one ? 8 : 6), 16, k) | (((qh >> k) & 1u) << 4));
              if (one) {
                std::memcpy(sd + 64 * j + 2 * r, bj, 2);           // d
                std::memcpy(sd + 64 * j + 32 + 2 * r, bj + 2, 2);  // m
              } else {
                std::memcpy(sd + 32 * j + 2 * r, bj, 2);  // d
              }
            }
            break;
          }
          case Panels::Scales::Q5_K: {
            // Q5_K: f16 d | f16 dmin | scales[12] | qh[32] | qs[128]; chunk c as Q4_K,
            // 5th bits: bit 2c (first 32 values) and 2c + 1 (next 32) of qh[l].
            const uint8_t* qh = blk + 16;
            for (int c = 0; c < 4; ++c)
              for (int l = 0; l < 32; ++l) {
                q[64 * c + l] = static_cast<uint8_t>((blk[48 + 32 * c + l] & 0x0F) | (((qh[l] >> (2 * c)) & 1) << 4));
                q[64 * c + 32 + l] = static_cast<uint8_t>((blk[48 + 32 * c + l] >> 4) | (((qh[l] >> (2 * c + 1)) & 1) << 4));
              }
            for (int j = 0; j < 8; ++j) {
              int sc, mn;
              scale_min_k4(j, blk + 4, &sc, &mn);
              sd[16 * j + r] = static_cast<uint8_t>(sc);
              sd[128 + 16 * j + r] = static_cast<uint8_t>(mn);
            }
            std::memcpy(sd + 256 + 2 * r, blk, 2);      // d
            std::memcpy(sd + 288 + 2 * r, blk + 2, 2);  // dmin
            break;
          }
          case Panels::Scales::Q6_K: {
            // Q6_K: ql[128] | qh[64] | i8 scales[16] | f16 d (quant/dequant.cpp).
            for (int h = 0; h < 2; ++h)
              for (int l = 0; l < 32; ++l) {
                const uint8_t* ql = blk + 64 * h;
                const int hb = blk[128 + 32 * h + l];
                q[128 * h + l] = static_cast<uint8_t>((ql[l] & 0x0F) | ((hb & 3) << 4));
                q[128 * h + l + 32] = static_cast<uint8_t>((ql[l + 32] & 0x0F) | (((hb >> 2) & 3) << 4));
                q[128 * h + l + 64] = static_cast<uint8_t>((ql[l] >> 4) | (((hb >> 4) & 3) << 4));
                q[128 * h + l + 96] = static_cast<uint8_t>((ql[l + 32] >> 4) | (((hb >> 6) & 3) << 4));
              }
            for (int i = 0; i < 16; ++i) sd[32 * (i / 2) + 2 * r + (i % 2)] = blk[192 + i];  // sub-block i: values 16i ..
            std::memcpy(sd + 256 + 2 * r, blk + 208, 2);  // d
            break;
          }
        }
        for (int b = 0; b < G / 32; ++b) {
          uint8_t* bd = gd + b * block_bytes_p;
          for (int s = 0; s < 4; ++s) {
            uint8_t* step = bd + s * 64 + 4 * r;
            const uint8_t* v = q + 32 * b + 8 * s;
            for (int t = 0; t < 4; ++t) step[t] = static_cast<uint8_t>((v[t] & 0x0F) | ((v[t + 4] & 0x0F) << 4));
            // High-bit plane (cpu/qmatmul.h): byte 4r + t after the nibbles.
            for (int j = 0; j < 2 && hbits; ++j)
              for (int t = 0; t < 4; ++t) {
                const int hv = v[4 * j + t] >> 4;
                if (hbits == 1) {
                  bd[256 + 4 * r + t] |= static_cast<uint8_t>(hv << (2 * s + j));
                } else {
                  bd[256 + 64 * (s / 2) + 4 * r + t] |= static_cast<uint8_t>(hv << (2 * (2 * (s % 2) + j)));
                }
              }
          }
        }
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

// 32 rows of W transposed, elements (2 bytes: F16, BF16; 4: F32) copied as
// they are.
void pack_fp(const WeightView& w, Panels& p, ThreadPool* pool) {
  const size_t es = w.type == DType::F32 ? 4 : 2;
  p.kind = Panels::Kind::FP;
  p.rows = kFpPanelRows;
  p.n_pad = w.n_in;
  p.panel_bytes = static_cast<size_t>(w.n_in) * kFpPanelRows * es;
  p.data = {alloc_aligned(p.panel_bytes * p.n_panels), std::free};
  for_panels(p, pool, [&](int64_t pi) {
    uint8_t* dst = p.data.get() + pi * p.panel_bytes;
    for (int r = 0; r < kFpPanelRows; ++r) {
      const int64_t row = pi * kFpPanelRows + r;
      if (row >= w.n_out) continue;
      const uint8_t* src = w.row(row);
      for (int64_t k = 0; k < w.n_in; ++k) std::memcpy(dst + (k * kFpPanelRows + r) * es, src + es * k, es);
    }
  });
}

}  // namespace

std::shared_ptr<Panels> pack_panels(const WeightView& w, ThreadPool* pool) {
  auto p = std::make_shared<Panels>();
  p->n_in = w.n_in;
  p->n_out = w.n_out;
  const int rows = w.type == DType::F16 || w.type == DType::BF16 || w.type == DType::F32 ? kFpPanelRows : kPanelRows;
  p->n_panels = (w.n_out + rows - 1) / rows;
  switch (w.type) {
    case DType::Q4_0: case DType::Q4_1: case DType::Q4_K:
    case DType::Q5_0: case DType::Q5_1: case DType::Q5_K: case DType::Q6_K:
    case DType::INT4_G32: case DType::INT4_G64: case DType::INT4_G128:
      pack_k4(w, *p, pool);
      break;
    case DType::F16: case DType::BF16: case DType::F32:
      pack_fp(w, *p, pool);
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
