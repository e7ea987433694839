// Internals of the CPU matmul: what the driver (cpu/matmul.cpp) hands the
// per-ISA kernels (cpu/avx2/, cpu/avx512/, cpu/amx/, found through
// IsaKernels::format_kernel, cpu/kernels.h), the int8 activation blocks and
// the repacked weight panels. The loops around the micro-kernels are in
// cpu/gemm_driver.h.
//
// Kernels compute y[i][r] = x[i] · w[r] for every activation row i and the
// weight rows [r0, r1) the driver gives them (whole 16-row panels except at
// the end of the matrix); each thread owns its range of output columns.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "core/backend.h"
#include "cpu/isa.h"

namespace infer {
class ThreadPool;
}

namespace infer::cpu {

// Rows interleaved in one panel of the repacked integer layouts (K4, K8).
constexpr int kPanelRows = 16;
// Rows of W in one panel of the float layout (FP).
constexpr int kFpPanelRows = 32;

// Activations quantized to int8 for the integer kernels. Row i holds n_pad
// values (zero-padded) in blocks of `block` values (32, or the whole padded
// row for per-token scales); block b of row i has scale d[i*nb + b] and
// xs[i*nb + b] = d * Σq (the sum of the block's dequantized values).
struct QActs {
  int64_t m = 0, n_pad = 0, block = 32, nb = 0;
  const int8_t* q = nullptr;
  const uint8_t* u = nullptr;  // q + 128 as unsigned (for u8 x s8 instructions), when asked for
  const float* d = nullptr;
  const float* xs = nullptr;
  const int32_t* sum = nullptr;  // Σq of each block (like d and xs), when asked for
  // Per 32-value block, the Σq of its two 16-value halves as the low and high
  // i16 of one int32 (|Σ| <= 16 * 127), when asked for (Q6_K's 16-value scales).
  const int32_t* hsum = nullptr;
  const int8_t* row(int64_t i) const { return q + i * n_pad; }
  const uint8_t* urow(int64_t i) const { return u + i * n_pad; }
};

// Weight rows repacked into panels of kPanelRows interleaved rows (made once
// per weight and kept in its WeightCache). Rows past n_out are zero.
//
// K4 (Q4_0, Q4_1, Q4_K, INT4_G*; the 5- and 6-bit formats below): for each
//   group of `group` values (Q4_0 and Q4_1: 128 when n_in allows, else 32;
//   256 for Q4_K; G for INT4): group/32
//   blocks of 4 steps of 64 bytes; in step s of block b (k0 = first value of
//   the block + 8s), byte 4r + t holds value k0+t of row r in its low nibble
//   and value k0+4+t in its high nibble (unsigned q, 0..15). After the
//   blocks, the group's scales, one per row (w = a * q + b for each block):
//     Q4_0: per block, 16 f16 d            a = d, b = -8d
//     Q4_1: per block, 16 f16 d, 16 f16 m  a = d, b = m
//   (grouping four Q4_0 blocks makes a group 1152 bytes, 18 whole cache
//   lines: the stream's loads never straddle a line, and its scales come
//   once per 1 KiB of nibbles instead of every 256 bytes)
//     INT4: 16 f16 d, 16 u8 z              a = d, b = -z d
//     Q4_K: 8 x 16 u8 sc, 8 x 16 u8 mn (per block), 16 f16 d, 16 f16 dmin
//                                          a = d sc, b = -dmin mn
//   (the bytes per value stay those of the file format).
// K4 with high bits (Q5_0, Q5_1, Q5_K: 1 bit; Q6_K: 2 bits): values of 5 or
//   6 bits are split into the nibbles above and a high-bit plane right after
//   each block's 256 nibble bytes (a block is 256 + 64 * bits bytes), laid
//   out like one 64-byte step (byte 4r + t for row r):
//     1 bit:  64 bytes; bit 2s + j of byte 4r + t is the 5th bit of value
//             k0 + 4j + t of row r (k0 = first value of the block + 8s)
//     2 bits: 2 x 64 bytes; in the v-th 64 bytes (steps 2v, 2v + 1), bits
//             2p, 2p + 1 (p = 2 (s - 2v) + j) of byte 4r + t are bits 4, 5
//             of value k0 + 4j + t of row r
//   Groups: Q5_0 and Q5_1 as Q4_0 and Q4_1 (128 values when n_in allows),
//   Q5_K and Q6_K 256 values; the group's scales after its blocks:
//     Q5_0: per block, 16 f16 d            a = d, b = -16d
//     Q5_1: as Q4_1                        a = d, b = m
//     Q5_K: as Q4_K                        a = d sc, b = -dmin mn
//     Q6_K: 8 x 32 i8 sc (byte 2r + j: the scale of values 16j .. 16j + 15
//           of the block), 16 f16 d        w = d sc (q - 32)
// K8 (Q8_0, W8A8): for each block of 32 values, 8 steps of 64 bytes; in step
//   s, byte 4r + t is int8 value 32b + 4s + t of row r. Q8_0 (group 32): each
//   block is followed by 16 f16 scales. W8A8 (group 0): the panel starts with
//   16 f32 row scales and 16 i32 row sums (Σq, for u8 x s8 instructions);
//   n_pad rounds n_in up to 32 with zeros.
// FP (F16, BF16): panels of 32 rows of W, transposed: element k * 32 + j is
//   value k of row j, in the file's element type (2 bytes): a broadcast
//   activation multiplies 32 output columns at once; no scales.
struct Panels {
  enum class Kind { K4, K8, FP } kind = Kind::K4;
  enum class Scales { Q4_0, Q4_1, Int4, Q4_K, Q5_0, Q5_1, Q5_K, Q6_K } scales = Scales::Q4_0;  // K4 only
  int64_t n_in = 0, n_out = 0, n_pad = 0, n_panels = 0;
  int rows = kPanelRows;  // rows of W per panel
  int group = 32;
  bool has_z = false;
  size_t panel_bytes = 0;
  std::unique_ptr<uint8_t, void (*)(void*)> data{nullptr, nullptr};
  const uint8_t* panel(int64_t p) const { return data.get() + static_cast<size_t>(p) * panel_bytes; }
};

// Bytes of scales after each K4 group of `blocks` blocks of 32.
inline size_t k4_scale_bytes(Panels::Scales s, int blocks) {
  switch (s) {
    case Panels::Scales::Q4_0: return 32 * static_cast<size_t>(blocks);
    case Panels::Scales::Q4_1: return 64 * static_cast<size_t>(blocks);
    case Panels::Scales::Int4: return 48;
    case Panels::Scales::Q4_K: return 320;
    case Panels::Scales::Q5_0: return 32 * static_cast<size_t>(blocks);
    case Panels::Scales::Q5_1: return 64 * static_cast<size_t>(blocks);
    case Panels::Scales::Q5_K: return 320;
    case Panels::Scales::Q6_K: return 288;
  }
  return 0;
}

// High bits per value of a K4 layout (0: plain nibbles).
constexpr int k4_high_bits(Panels::Scales s) {
  return s == Panels::Scales::Q6_K                                                             ? 2
         : s == Panels::Scales::Q5_0 || s == Panels::Scales::Q5_1 || s == Panels::Scales::Q5_K ? 1
                                                                                               : 0;
}
// Bytes of one 32-value block of a K4 panel: nibbles, then the high-bit plane.
constexpr size_t k4_block_bytes(Panels::Scales s) { return 256 + 64 * static_cast<size_t>(k4_high_bits(s)); }

// Makes the panels of w (Q4_0, Q4_1, Q4_K, Q5_0, Q5_1, Q5_K, Q6_K, INT4_G*, Q8_0, W8A8, F16, BF16), on the pool's threads
// when one is given.
std::shared_ptr<Panels> pack_panels(const WeightView& w, ThreadPool* pool);

struct MatmulArgs {
  const WeightView* w = nullptr;
  const Panels* panels = nullptr;  // repacked weights, when the kernel asked for them
  const float* x = nullptr;        // [m][n_in]
  const QActs* qa = nullptr;       // int8 activations, when the kernel asked for them
  float* y = nullptr;              // [m][n_out]
  int64_t m = 0;
};

// Computes y[i][r] for all i < m and r in [r0, r1).
using TileFn = void (*)(const MatmulArgs& a, int64_t r0, int64_t r1);

struct FormatKernel {
  TileFn tile = nullptr;  // nullptr: this ISA has no kernel for the format
  int act_block = 0;      // 0: f32 activations; 32: int8 per 32 values; -1: int8 per row
  bool act_u8 = false;    // also wants QActs::u
  bool act_sums = false;  // also wants QActs::sum
  bool act_hsums = false;  // also wants QActs::hsum (32-value blocks only)
  bool panels = false;    // works on pack_panels() output
  int panel_rows = kPanelRows;  // the driver hands out output rows in multiples of this
};

// Bytes of weights the GEMV kernels prefetch ahead of the ones they multiply:
// one core alone cannot keep enough cache-line fills in flight to reach DRAM
// bandwidth, and a thread's panels are one linear stream. INFER_PREFETCH
// (bytes, 0 = off) overrides it, for tuning.
int prefetch_distance();

// Rows of x from which the AMX tile kernels (cpu/amx/) take over from the
// AVX-512 ones: below it they have no kernel.
constexpr int64_t kAmxMinRows = 16;

}  // namespace infer::cpu
