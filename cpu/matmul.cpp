// The CPU matmul driver: y = x · Wᵀ for weights in their file format.
//
// For each call it picks the micro-kernel of the active ISA for the weight
// format (IsaKernels::format_kernel, cpu/kernels.h; an ISA without one for
// the format hands it to the ISA below, down to the portable one), prepares
// what that kernel works on (int8 activation blocks; repacked weight panels,
// made once per weight and kept in its WeightCache), and splits the output
// columns over the pool in chunks of whole 16-row panels that threads claim
// one after another (so a descheduled thread's share is taken by the
// others). Each thread writes only its own columns of y; every weight row is
// read once per call, whatever m is: kernels walk the rows of x inside a
// panel while it is hot in cache.
#include "cpu/matmul.h"
#include "core/tls.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <vector>

#include "core/error.h"
#include "core/threadpool.h"
#include "cpu/kernels.h"
#include "cpu/onednn_matmul.h"
#include "cpu/qmatmul.h"
#include "quant/dequant.h"

namespace infer::cpu {

const float* weight_row_f32(const WeightView& w, int64_t r, float* buf) {
  const uint8_t* src = w.row(r);
  switch (w.type) {
    case DType::F32:
      return reinterpret_cast<const float*>(src);
    case DType::F16:
      kernels().f16_to_f32(reinterpret_cast<const uint16_t*>(src), buf, w.n_in);
      return buf;
    case DType::W8A8: {
      if (!w.scale) raise(Status::InvalidArgument, "w8a8 weight without scales");
      const float s = w.scale[r];
      const int8_t* q = reinterpret_cast<const int8_t*>(src);
      for (int64_t i = 0; i < w.n_in; ++i) buf[i] = static_cast<float>(q[i]) * s;
      return buf;
    }
    default:
      dequantize_row(w.type, src, buf, w.n_in);
      return buf;
  }
}

int prefetch_distance() {
  static const int n = [] {
    const char* s = std::getenv("INFER_PREFETCH");
    return s && *s ? std::max(0, std::atoi(s)) : 8192;
  }();
  return n;
}

namespace {

// The kernel for weights of type t and m rows of x: the table's own, else
// the first ISA below it that has one (scalar has every format); *from: the
// table it came from.
FormatKernel pick_kernel(const IsaKernels& isa, DType t, int64_t m, const IsaKernels** from = nullptr) {
  for (const IsaKernels* k = &isa;; k = k->fallback) {
    const FormatKernel f = k->format_kernel(t, m);
    if (f.tile || !k->fallback) {
      if (from) *from = k;
      return f;
    }
  }
}

// Scratch for int8 activations, reused across calls by the calling thread.
struct ActScratch {
  std::vector<int8_t> q;
  std::vector<uint8_t> u;
  std::vector<float> d, xs;
  std::vector<int32_t> sum, hsum;
};

const char kPanelsKey = 0;  // WeightCache tag of the panels

}  // namespace

const char* matmul_kernel_isa(DType t, int64_t m, int64_t n_in, int64_t n_out) {
  if (onednn_preferred(t, m, n_in, n_out)) return "onednn";
  const IsaKernels* from = nullptr;
  pick_kernel(kernels(), t, m, &from);
  return from->isa;
}

void prepare_weight(ThreadPool& pool, const WeightView& w) {
  if (!w.cache || w.n_out <= 0) return;
  const IsaKernels& isa = kernels();
  // The layouts matmul picks depend on the row count: build each one that
  // some row count would use (decode, small batches, prefill tiles).
  for (const int64_t m : {1, 2, 4, 8, 16, 32, 64, 256, 1024}) {
    if (onednn_preferred(w.type, m, w.n_in, w.n_out)) onednn_prepare(w);
    if (pick_kernel(isa, w.type, m).panels) w.cache->get<Panels>(&kPanelsKey, [&] { return pack_panels(w, &pool); });
  }
}

bool holds_full_copy(const WeightView& w) {
  if (!w.cache || w.n_out <= 0 || !w.cache->contains(&kPanelsKey)) return false;
  const IsaKernels& isa = kernels();
  for (const int64_t m : {1, 2, 4, 8, 16, 32, 64, 256, 1024})
    if (onednn_preferred(w.type, m, w.n_in, w.n_out) || !pick_kernel(isa, w.type, m).panels) return false;
  return true;
}

namespace {

// Splitting a matmul between threads costs a pool job and moves its
// activations and outputs between cores' caches: a few microseconds on a
// 2-core VM. Below about 8 microseconds of one thread's work it is slower
// than running on the caller (infer_bench --benchmark_filter=MatmulSmall;
// a small model such as stories260K issues dozens of 64-wide matmuls a step
// and decoded ~1.6x faster on one thread than on two before this rule). The
// work is weighed as 2 x weight bytes (reading them) + multiply-adds.
constexpr int64_t kMinSplitWork = int64_t(1) << 20;
// int8 activations of at least this many values are quantized in parallel.
constexpr int64_t kMinSplitActs = 32768;

bool worth_splitting(const WeightView& w, int64_t m) {
  const int64_t bytes = static_cast<int64_t>(w.row_bytes) * w.n_out;
  return 2 * bytes + m * w.n_in * w.n_out >= kMinSplitWork;
}

}  // namespace

void matmul(ThreadPool& pool, const WeightView& w, const float* x, int64_t m, float* y) {
  if (m <= 0 || w.n_out <= 0) return;
  const IsaKernels& isa = kernels();
  if (onednn_preferred(w.type, m, w.n_in, w.n_out) && onednn_matmul(pool, w, x, m, y)) return;
  const FormatKernel k = pick_kernel(isa, w.type, m);

  MatmulArgs args;
  args.w = &w;
  args.x = x;
  args.y = y;
  args.m = m;

  // Repacked weights: kept with the weight when it has a cache, else made
  // for this call only.
  std::shared_ptr<Panels> temp_panels;
  if (k.panels) {
    if (w.cache) {
      args.panels = w.cache->get<Panels>(&kPanelsKey, [&] { return pack_panels(w, &pool); });
    } else {
      temp_panels = pack_panels(w, &pool);
      args.panels = temp_panels.get();
    }
  }

  // int8 activations, per 32-value block or per row.
  QActs qa;
  static thread_local ActScratch* scratch_slot = nullptr;
  ActScratch& scratch = tls_object(scratch_slot);  // the caller's (workers below must not see their own)
  if (k.act_block != 0) {
    qa.m = m;
    qa.n_pad = (w.n_in + 31) / 32 * 32;
    qa.block = k.act_block > 0 ? k.act_block : qa.n_pad;
    qa.nb = qa.n_pad / qa.block;
    scratch.q.resize(static_cast<size_t>(m * qa.n_pad));
    scratch.d.resize(static_cast<size_t>(m * qa.nb));
    scratch.xs.resize(static_cast<size_t>(m * qa.nb));
    if (k.act_u8) scratch.u.resize(static_cast<size_t>(m * qa.n_pad));
    qa.q = scratch.q.data();
    qa.u = k.act_u8 ? scratch.u.data() : nullptr;
    qa.d = scratch.d.data();
    qa.xs = scratch.xs.data();
    if (k.act_sums) {
      scratch.sum.resize(static_cast<size_t>(m * qa.nb));
      qa.sum = scratch.sum.data();
    }
    if (k.act_hsums) {
      scratch.hsum.resize(static_cast<size_t>(m * qa.nb));
      qa.hsum = scratch.hsum.data();
    }
    const auto quant = isa.quantize_acts;
    auto rows = [&](int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; ++i) {
        int8_t* q = scratch.q.data() + i * qa.n_pad;
        quant(x + i * w.n_in, w.n_in, qa.n_pad, qa.block, q, k.act_u8 ? scratch.u.data() + i * qa.n_pad : nullptr,
              scratch.d.data() + i * qa.nb, scratch.xs.data() + i * qa.nb);
        if (k.act_sums) {
          int32_t* sum = scratch.sum.data() + i * qa.nb;
          for (int64_t b = 0; b < qa.nb; ++b) {
            int32_t t = 0;
            for (int64_t j = 0; j < qa.block; ++j) t += q[b * qa.block + j];
            sum[b] = t;
          }
        }
        if (k.act_hsums) {
          int32_t* hs = scratch.hsum.data() + i * qa.nb;
          for (int64_t b = 0; b < qa.nb; ++b) {
            int32_t lo = 0, hi = 0;
            for (int j = 0; j < 16; ++j) {
              lo += q[b * 32 + j];
              hi += q[b * 32 + 16 + j];
            }
            hs[b] = static_cast<int32_t>(static_cast<uint32_t>(static_cast<uint16_t>(lo)) |
                                         (static_cast<uint32_t>(static_cast<uint16_t>(hi)) << 16));
          }
        }
      }
    };
    if (m >= 8 && pool.size() > 1 && m * w.n_in >= kMinSplitActs) {
      pool.run([&](int tid, int nth) { rows(m * tid / nth, m * (tid + 1) / nth); });
    } else {
      rows(0, m);
    }
    args.qa = &qa;
  }

  // Output columns in chunks of whole panels, claimed dynamically: about
  // four chunks per thread, so uneven progress evens out.
  const int64_t pr = k.panel_rows;
  const int64_t n_panels = (w.n_out + pr - 1) / pr;
  const int nth = pool.size();
  const int64_t chunk = std::max<int64_t>(1, n_panels / (4 * nth));
  const int64_t n_chunks = (n_panels + chunk - 1) / chunk;
  std::atomic<int64_t> next{0};
  auto work = [&](int, int) {
    for (;;) {
      const int64_t c = next.fetch_add(1, std::memory_order_relaxed);
      if (c >= n_chunks) return;
      const int64_t r0 = c * chunk * pr;
      const int64_t r1 = std::min(w.n_out, (c + 1) * chunk * pr);
      k.tile(args, r0, r1);
    }
  };
  if (n_chunks == 1 || nth == 1 || !worth_splitting(w, m)) {
    work(0, 1);
  } else {
    pool.run(work);
  }
}

}  // namespace infer::cpu
