// The ISA-neutral half of the matmul kernels: the loops that walk a thread's
// output columns and the rows of x, hand fixed-size tiles to an ISA's
// micro-kernels and store their results, written once as templates over the
// micro-kernel types. Included by the kernel file of each ISA (cpu/avx2/,
// cpu/avx512/, cpu/amx/) and instantiated there, with that file's flags.
//
// Everything here is in an anonymous namespace on purpose: each ISA's
// translation unit gets its own copy, compiled with its own flags. Shared
// (external) inline functions would be merged by the linker, which could
// hand AVX-512 code to the AVX2 path.
//
// A micro-kernel type K provides (see each driver for the exact call):
//   K::kCols  output columns one call computes,
//   K::kRows  most rows of x one call takes (the drivers hand it 1 .. kRows,
//             as a template argument NX),
//   K::template run<NX>(...) the micro-kernel itself.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>
#include <type_traits>

#include "core/tls.h"
#include "cpu/qmatmul.h"

namespace infer::cpu {
namespace {

// Prefetches, `dist` bytes ahead, every cache line of [from, to): kernels call
// it once per block of their stream, so that blocks whose size is not a
// multiple of 64 bytes (a Q4_1 block of a panel is 320) still get every line
// prefetched, not only the lines their 64-byte loads start in.
// Locality 3 fetches into L1; the AMX kernels ask for 2 (L2): their tile
// stores need L1 for themselves.
// Always inlined: GCC takes an out-of-line copy with internal linkage for a
// function without side effects (a prefetch is not one to it) and deletes
// the calls, which silently cost the decode kernels their prefetching.
template <int Locality = 3>
__attribute__((always_inline)) inline void prefetch_span(const uint8_t* from, const uint8_t* to, int dist) {
  if (!dist) return;
  const uintptr_t e = reinterpret_cast<uintptr_t>(to) + static_cast<uintptr_t>(dist);
  for (uintptr_t a = (reinterpret_cast<uintptr_t>(from) + static_cast<uintptr_t>(dist)) & ~uintptr_t(63); a < e; a += 64)
    __builtin_prefetch(reinterpret_cast<const void*>(a), 0, Locality);
}

// Calls f(std::integral_constant<int, n>{}) for 1 <= n <= N (n < 1 as 1): a
// run-time row count turned into the template argument of a micro-kernel.
template <int N, class F>
inline void with_rows(int n, F&& f) {
  if constexpr (N <= 1) {
    f(std::integral_constant<int, 1>{});
  } else {
    if (n >= N) return f(std::integral_constant<int, N>{});
    with_rows<N - 1>(n, f);
  }
}

// rows y[r][0 .. nc) = out[r * ld_out ..] for r < n.
inline void copy_rows(const float* out, int ld_out, int n, int nc, float* y, int64_t ldy) {
  for (int r = 0; r < n; ++r) std::memcpy(y + r * ldy, out + r * ld_out, sizeof(float) * nc);
}

// A 64-byte aligned buffer of at least n floats, the calling thread's own
// (one per ISA translation unit), for weights converted before multiplying.
inline float* thread_scratch(size_t n) {
  struct Buf {
    float* p = nullptr;
    size_t n = 0;
    ~Buf() { std::free(p); }
  };
  static thread_local Buf* slot = nullptr;
  Buf& buf = tls_object(slot);
  if (buf.n < n) {
    std::free(buf.p);
    buf.p = static_cast<float*>(std::aligned_alloc(64, (n * 4 + 63) / 64 * 64));
    buf.n = buf.p ? n : 0;
    if (!buf.p) throw std::bad_alloc();
  }
  return buf.p;
}

// ---- int8 panels (K4, K8; cpu/qmatmul.h) -----------------------------------------------
//
// K::kCols divides kPanelRows: a call computes columns [kCols * part, + kCols)
// of one panel;
// K::template run<NX>(const Panels&, const uint8_t* panel, int part, const QActs&,
//                     int64_t i0, float* out /*[NX][kCols]*/)
//   for rows i0 .. i0 + NX of x;
// K::store(const float* out, int nx, int nc, float* y, int64_t ldy) writes
//   nc <= kCols columns of nx rows.
// Panels of rows [r0, r1) against all rows of x: each panel part is walked
// by every tile of x while it is hot in cache.
template <class K>
void panel_tiles(const MatmulArgs& a, int64_t r0, int64_t r1) {
  static_assert(kPanelRows % K::kCols == 0);
  const Panels& P = *a.panels;
  const int64_t n_out = a.w->n_out;
  alignas(64) float out[K::kRows * K::kCols];
  for (int64_t p = r0 / kPanelRows; p * kPanelRows < r1; ++p) {
    const uint8_t* panel = P.panel(p);
    for (int part = 0; part < kPanelRows / K::kCols; ++part) {
      const int64_t c0 = p * kPanelRows + K::kCols * part;
      if (c0 >= r1) break;
      const int nc = static_cast<int>(std::min<int64_t>(K::kCols, r1 - c0));
      for (int64_t i = 0; i < a.m; i += K::kRows) {
        const int nx = static_cast<int>(std::min<int64_t>(K::kRows, a.m - i));
        with_rows<K::kRows>(nx, [&](auto NX) { K::template run<decltype(NX)::value>(P, panel, part, *a.qa, i, out); });
        K::store(out, nx, nc, a.y + i * n_out + c0, n_out);
      }
    }
  }
}

// The same for m <= K::kRows (decode): all rows of x are one tile, whose
// first row is the constant 0 (folded into the kernel's addressing, which
// spares registers in its inner loop).
template <class K>
void panel_one_tile(const MatmulArgs& a, int64_t r0, int64_t r1) {
  static_assert(kPanelRows % K::kCols == 0);
  const Panels& P = *a.panels;
  const int64_t n_out = a.w->n_out;
  const int nx = static_cast<int>(a.m);
  alignas(64) float out[K::kRows * K::kCols];
  for (int64_t p = r0 / kPanelRows; p * kPanelRows < r1; ++p) {
    const uint8_t* panel = P.panel(p);
    for (int part = 0; part < kPanelRows / K::kCols; ++part) {
      const int64_t c0 = p * kPanelRows + K::kCols * part;
      if (c0 >= r1) break;
      const int nc = static_cast<int>(std::min<int64_t>(K::kCols, r1 - c0));
      with_rows<K::kRows>(nx, [&](auto NX) { K::template run<decltype(NX)::value>(P, panel, part, *a.qa, 0, out); });
      K::store(out, nx, nc, a.y + c0, n_out);
    }
  }
}

// a without its first i0 rows of x (and of y and the int8 activations):
// for a kernel that hands the rows it does not take to another one.
inline MatmulArgs rows_from(const MatmulArgs& a, int64_t i0, QActs& qa) {
  MatmulArgs b = a;
  b.m = a.m - i0;
  b.x = a.x + i0 * a.w->n_in;
  b.y = a.y + i0 * a.w->n_out;
  if (a.qa) {
    qa = *a.qa;
    qa.m = a.qa->m - i0;
    qa.q += i0 * qa.n_pad;
    if (qa.u) qa.u += i0 * qa.n_pad;
    qa.d += i0 * qa.nb;
    qa.xs += i0 * qa.nb;
    if (qa.sum) qa.sum += i0 * qa.nb;
    if (qa.hsum) qa.hsum += i0 * qa.nb;
    b.qa = &qa;
  }
  return b;
}

// ---- weights in their file layout, one row at a time -----------------------------------


// ---- FP panels (F16, BF16; kFpPanelRows rows of W transposed) --------------------------

// One FP panel (or the f32 copy of one) against m rows of x:
// K::template run<NX>(const uint8_t* panel, int part, int64_t K, const float* x,
//                     int64_t ldx, float* out /*[NX][kCols]*/, int prefetch)
//   columns [kCols * part, + kCols) of the panel; prefetching (when pf > 0) is
//   asked of the first part only: it streams the whole panel.
template <class K>
void fp_panel_rows(const uint8_t* panel, int64_t n_in, const float* x, int64_t m, int64_t ldx, float* y, int64_t ldy,
                   int nc, int pf) {
  static_assert(kFpPanelRows % K::kCols == 0);
  alignas(64) float out[K::kRows * K::kCols];
  for (int part = 0; part < kFpPanelRows / K::kCols && K::kCols * part < nc; ++part) {
    const int hc = std::min(K::kCols, nc - K::kCols * part);
    const int p = part == 0 ? pf : 0;
    for (int64_t i = 0; i < m; i += K::kRows) {
      const int nx = static_cast<int>(std::min<int64_t>(K::kRows, m - i));
      const float* xi = x + i * ldx;
      with_rows<K::kRows>(nx, [&](auto NX) { K::template run<decltype(NX)::value>(panel, part, n_in, xi, ldx, out, p); });
      copy_rows(out, K::kCols, nx, hc, y + i * ldy + K::kCols * part, ldy);
    }
  }
}

// m at and above which an FP panel is converted to f32 once (then each tile
// of x only loads); below, every tile reads it in its own type.
constexpr int64_t kFpConvertMinRows = 12;

// The FP driver for element type L of ISA traits T:
// T::template widen<L>(const uint8_t* panel, int64_t count, float* dst): count
//   elements to f32;
// T::template Tiles<L>: the micro-kernel of fp_panel_rows for the panel's own
//   type (Tiles<F32> for the converted copy);
// T::template Decode<L>: the one for m <= 2 when T::kDecode (one pass over
//   the panel).
template <class T, class L>
void tile_fp(const MatmulArgs& a, int64_t r0, int64_t r1) {
  const Panels& P = *a.panels;
  const int64_t K = P.n_in, n_out = a.w->n_out;
  const bool convert = a.m >= kFpConvertMinRows;
  const int pf = a.m <= 2 ? prefetch_distance() : 0;
  float* buf = convert ? thread_scratch(static_cast<size_t>(K) * kFpPanelRows) : nullptr;
  for (int64_t p = r0 / kFpPanelRows; p * kFpPanelRows < r1; ++p) {
    const int64_t c0 = p * kFpPanelRows;
    const int nc = static_cast<int>(std::min<int64_t>(kFpPanelRows, r1 - c0));
    const uint8_t* panel = P.panel(p);
    if constexpr (std::is_same_v<L, typename T::F32>) {
      // Already f32: the converted path's kernel on the panel itself (the
      // same kernel, so the same sums as with a copy).
      if (convert) {
        fp_panel_rows<typename T::template Tiles<L>>(panel, K, a.x, a.m, K, a.y + c0, n_out, nc, 0);
        continue;
      }
    }
    if (convert) {
      T::template widen<L>(panel, K * kFpPanelRows, buf);
      fp_panel_rows<typename T::template Tiles<typename T::F32>>(reinterpret_cast<const uint8_t*>(buf), K, a.x, a.m,
                                                                 K, a.y + c0, n_out, nc, 0);
      continue;
    }
    if constexpr (T::kDecode) {
      if (a.m <= 2) {
        fp_panel_rows<typename T::template Decode<L>>(panel, K, a.x, a.m, K, a.y + c0, n_out, nc, pf);
        continue;
      }
    }
    fp_panel_rows<typename T::template Tiles<L>>(panel, K, a.x, a.m, K, a.y + c0, n_out, nc, pf);
  }
}

}  // namespace
}  // namespace infer::cpu
