// oneDNN inside our thread pool: the weight matrix is cut into column
// blocks, each reordered once into oneDNN's preferred layout; a call runs
// single-threaded oneDNN matmuls (OpenMP team of 1 on every pool thread) on
// the blocks the pool's threads claim. So oneDNN never starts threads of its
// own next to ours, and on a busy machine a descheduled thread's blocks are
// taken by the others (an OpenMP barrier would wait for it).
//
// Primitives have fixed M (oneDNN's fast kernels, e.g. AMX int8 on Sapphire
// Rapids, are only chosen for a known M); they are made on first use per
// (weight, M) and cached with the weight.
#include "cpu/onednn_matmul.h"
#include "core/tls.h"

#include <dlfcn.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <oneapi/dnnl/dnnl.hpp>
#include <vector>

#include "core/error.h"
#include "core/log.h"
#include "core/threadpool.h"
#include "cpu/isa.h"
#include "cpu/qmatmul.h"

namespace infer::cpu {

namespace {

constexpr int64_t kBlockN = 256;  // output columns per block

// oneDNN dispatches on the CPU by itself. When INFER_CPU_ISA caps us below
// what the CPU has, oneDNN gets the same cap, at its first use
// (set_max_cpu_isa works once per process, before oneDNN's first primitive;
// a later set_isa_cap() cannot move it, so onednn_preferred also keeps
// oneDNN away below AVX2 and from its AMX kernels under a cap below AMX).
// vnni: whether oneDNN's int8 kernels multiply with VNNI (else vpmaddubsw,
// whose 16-bit pair sums saturate for u8 x s8: see the u7 activations).
struct OnednnIsa {
  bool vnni;
};

const OnednnIsa& onednn_isa() {
  static const OnednnIsa o = [] {
    bool vnni = has_int8_vnni();
    const Isa cap = active_isa();
    if (cap < detected_isa()) {
      const dnnl::cpu_isa isa = cap >= Isa::Avx512 ? dnnl::cpu_isa::avx512_core_vnni : dnnl::cpu_isa::avx2;
      // Fails when ONEDNN_MAX_CPU_ISA already decided: then oneDNN keeps that.
      if (dnnl::set_max_cpu_isa(isa) == dnnl::status::success && cap <= Isa::Avx2) vnni = false;
    }
    return OnednnIsa{vnni};
  }();
  return o;
}

dnnl::engine& cpu_engine() {
  static dnnl::engine e = [] {
    onednn_isa();
    return dnnl::engine(dnnl::engine::kind::cpu, 0);
  }();
  return e;
}


// oneDNN's OpenMP team: one thread for calls from this thread (libgomp is
// loaded by libdnnl; looked up at run time so we need not link OpenMP).
void single_omp_thread() {
  using Fn = void (*)(int);
  static const Fn fn = reinterpret_cast<Fn>(dlsym(RTLD_DEFAULT, "omp_set_num_threads"));
  thread_local bool done = false;
  if (fn && !done) {
    fn(1);
    done = true;
  }
}

using dt = dnnl::memory::data_type;
using tag = dnnl::memory::format_tag;

// One weight in oneDNN's layout: its column blocks, and the primitives made so far.
struct OnednnWeight {
  bool int8 = false, u7 = false;
  int32_t zero_point = 0;
  int64_t K = 0, N = 0;
  std::vector<int32_t> colsum;  // int8: Σ_k w[n][k] of each output column
  dnnl::memory::desc wei_md_full, wei_md_tail;  // layouts chosen for a full / the last block
  std::vector<dnnl::memory> blocks;
  std::mutex mu;
  struct Prims {
    dnnl::matmul full, tail;  // a full-width block, the last block
    size_t scratch = 0;       // scratchpad bytes either needs
  };
  std::map<int64_t, Prims> prims;  // by M
  std::string impl;

  int64_t n_blocks() const { return (N + kBlockN - 1) / kBlockN; }
  int64_t width(int64_t b) const { return std::min(kBlockN, N - b * kBlockN); }

  dnnl::matmul::primitive_desc desc(int64_t M, int64_t nb, const dnnl::memory::desc& wei) const {
    const dnnl::memory::desc src({M, K}, int8 ? dt::u8 : dt::f32, tag::ab);
    // A dense block result (a strided one would keep oneDNN off its brgemm / AMX kernels).
    const dnnl::memory::desc dst({M, nb}, int8 ? dt::s32 : dt::f32, tag::ab);
    // (No zero-point attribute: oneDNN would recompute Σ_k w for it on every
    // call, a pass over the weights; we subtract zero_point * Σ_k w ourselves.)
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);  // ours, reused: no allocation per call
    return dnnl::matmul::primitive_desc(dnnl::matmul::desc(src, wei, dst), attr, cpu_engine());
  }

  // The primitives for M (full-width block, last block).
  const Prims& for_m(int64_t M) {
    std::lock_guard<std::mutex> lock(mu);
    auto it = prims.find(M);
    if (it != prims.end()) return it->second;
    const auto full = desc(M, width(0), wei_md_full);
    const auto tail = desc(M, width(n_blocks() - 1), wei_md_tail);
    if (impl.empty()) impl = full.impl_info_str();
    Prims p{dnnl::matmul(full), dnnl::matmul(tail),
            std::max(full.scratchpad_desc().get_size(), tail.scratchpad_desc().get_size())};
    return prims.emplace(M, std::move(p)).first->second;
  }
};

std::shared_ptr<OnednnWeight> prepare(const WeightView& w) {
  auto ow = std::make_shared<OnednnWeight>();
  ow->int8 = w.type == DType::W8A8;
  ow->u7 = ow->int8 && !onednn_isa().vnni;
  ow->zero_point = ow->u7 ? 64 : 128;
  ow->K = w.n_in;
  ow->N = w.n_out;
  const dt wt = ow->int8 ? dt::s8 : dt::f32;
  // Let oneDNN choose the weight layout for a prefill-sized M; other M use it too.
  auto choose = [&](int64_t nb) {
    const dnnl::memory::desc any({ow->K, nb}, wt, tag::any);
    return ow->desc(64, nb, any).weights_desc();
  };
  ow->wei_md_full = choose(ow->width(0));
  ow->wei_md_tail = choose(ow->width(ow->n_blocks() - 1));
  if (ow->int8) {
    ow->colsum.resize(static_cast<size_t>(ow->N));
    for (int64_t n = 0; n < ow->N; ++n) {
      const int8_t* r = reinterpret_cast<const int8_t*>(w.data) + n * ow->K;
      int32_t sum = 0;
      for (int64_t k = 0; k < ow->K; ++k) sum += r[k];
      ow->colsum[n] = sum;
    }
  }
  single_omp_thread();  // the reorders too: no OpenMP team ever
  dnnl::stream s(cpu_engine());
  const size_t elem = ow->int8 ? 1 : 4;
  for (int64_t b = 0; b < ow->n_blocks(); ++b) {
    const int64_t nb = ow->width(b);
    // Rows n0 .. n0+nb of W are the K x nb block in "ba" order (row stride K).
    const dnnl::memory::desc user_md({ow->K, nb}, wt, tag::ba);
    dnnl::memory user(user_md, cpu_engine(), const_cast<uint8_t*>(w.data + b * kBlockN * ow->K * elem));
    dnnl::memory wm(b + 1 == ow->n_blocks() ? ow->wei_md_tail : ow->wei_md_full, cpu_engine());
    dnnl::reorder(user, wm).execute(s, user, wm);
    ow->blocks.push_back(wm);
  }
  s.wait();
  return ow;
}

const char kOnednnKey = 0;

std::atomic<int>& onednn_policy() {
  static std::atomic<int> p{[] {
    const char* s = std::getenv("INFER_ONEDNN");
    return s && *s ? (std::atoi(s) > 0 ? 1 : 0) : -1;
  }()};
  return p;
}

// Whether oneDNN has AMX int8 kernels on this CPU (decided once, from the
// implementation it picks for a small int8 matmul).
bool onednn_has_amx_int8() {
  static const bool amx = [] {
    try {
      const dnnl::memory::desc src({64, 256}, dt::u8, tag::ab), wei({256, 256}, dt::s8, tag::any),
          dst({64, 256}, dt::s32, tag::ab);
      const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(src, wei, dst), cpu_engine());
      return std::strstr(pd.impl_info_str(), "amx") != nullptr;
    } catch (const dnnl::error&) {
      return false;
    }
  }();
  return amx;
}

}  // namespace

bool onednn_int8_vnni() {
  cpu_engine();
  return onednn_isa().vnni;
}

void set_onednn_policy(int policy) { onednn_policy().store(policy < 0 ? -1 : (policy > 0 ? 1 : 0)); }

bool onednn_preferred(DType t, int64_t m, int64_t n_in, int64_t n_out) {
  if (t != DType::W8A8 && t != DType::F32) return false;
  // oneDNN's kernels are SIMD code: not under INFER_CPU_ISA=scalar, even when forced.
  const Isa isa = active_isa();
  if (isa < Isa::Avx2) return false;
  const int force = onednn_policy().load(std::memory_order_relaxed);
  if (force >= 0) return force > 0;
  if (n_in < 256 || n_out < 256) return false;
  // Measured (bench/RESULTS.md, BM_GemmPolicy, 2048 x 5632): oneDNN's AMX
  // int8 kernels overtake our VNNI panels between m = 4 and 16 (1.2x at 16,
  // 1.9x at 64, 2.9x at 256); without AMX ours are kept. For f32 weights
  // oneDNN's sgemm beats our panels from m = 4 on.
  // Our own AMX kernel (cpu/amx, m >= kAmxMinRows) beats oneDNN's at m =
  // 16, 64 and 256 (0.35 / 1.19 / 3.88 ms vs 0.46 / 1.29 / 4.20 ms, same
  // benchmark); oneDNN keeps the m between 8 and that. Its AMX kernels are
  // AMX: only when the cap allows AMX (INFER_CPU_ISA=avx512 means none).
  if (t == DType::W8A8)
    return m >= 8 && isa_cap() >= Isa::Amx && onednn_has_amx_int8() && !(isa >= Isa::Amx && m >= kAmxMinRows);
  // F32: never by default. oneDNN's sgemm sums in another order than our
  // panels, so a row's logits would change with the batch it shares (the
  // speculative decoder's verification rows would disagree with plain
  // decoding); our f32 panels give every m the same bits. (Only forced, for
  // the benchmarks that compare the two.)
  return false;
}

bool onednn_matmul(ThreadPool& pool, const WeightView& w, const float* x, int64_t m, float* y) {
  if ((w.type != DType::W8A8 && w.type != DType::F32) || (w.type == DType::W8A8 && !w.scale)) return false;
  try {
    std::shared_ptr<OnednnWeight> temp;
    OnednnWeight* ow;
    if (w.cache) {
      ow = const_cast<OnednnWeight*>(w.cache->get<OnednnWeight>(&kOnednnKey, [&] { return prepare(w); }));
    } else {
      temp = prepare(w);
      ow = temp.get();
    }
    const int64_t K = w.n_in, N = w.n_out;
    const auto& prims = ow->for_m(m);
    // int8: activations quantized per token, u = round(x / d) + zero point.
    static thread_local std::vector<uint8_t>* qx = nullptr;
    static thread_local std::vector<float>* dx = nullptr;
    std::vector<uint8_t>& q = tls_object(qx);
    std::vector<float>& d = tls_object(dx);
    if (ow->int8) {
      q.resize(static_cast<size_t>(m * K));
      d.resize(static_cast<size_t>(m));
      const float levels = ow->u7 ? 63.0f : 127.0f;
      for (int64_t i = 0; i < m; ++i) {
        const float* xi = x + i * K;
        float amax = 0;
        for (int64_t k = 0; k < K; ++k) amax = std::max(amax, std::fabs(xi[k]));
        const float id = amax > 0 ? levels / amax : 0.0f;
        d[i] = amax / levels;
        uint8_t* qi = q.data() + i * K;
        for (int64_t k = 0; k < K; ++k)
          qi[k] = static_cast<uint8_t>(static_cast<int>(std::nearbyint(xi[k] * id)) + ow->zero_point);
      }
    }
    const int64_t nblk = ow->n_blocks();
    std::atomic<int64_t> next{0};
    pool.run([&](int, int) {
      single_omp_thread();
      static thread_local dnnl::stream* stream_slot = nullptr;
      static thread_local std::vector<uint8_t>* scratch_slot = nullptr;
      static thread_local std::vector<float>* block_out_slot = nullptr;
      dnnl::stream& stream = tls_object(stream_slot, [] { return new dnnl::stream(cpu_engine()); });
      std::vector<uint8_t>& scratch_buf = tls_object(scratch_slot);
      std::vector<float>& block_out = tls_object(block_out_slot);  // one block's result, dense (s32 or f32)
      if (scratch_buf.size() < prims.scratch) scratch_buf.resize(prims.scratch);
      block_out.resize(static_cast<size_t>(m * kBlockN));
      const dnnl::memory scratch({{static_cast<dnnl::memory::dim>(scratch_buf.size())}, dt::u8, tag::a}, cpu_engine(),
                                 scratch_buf.data());
      for (;;) {
        const int64_t b = next.fetch_add(1, std::memory_order_relaxed);
        if (b >= nblk) return;
        const int64_t n0 = b * kBlockN, nb = ow->width(b);
        const dnnl::matmul& prim = b + 1 == nblk ? prims.tail : prims.full;
        dnnl::memory src({{m, K}, ow->int8 ? dt::u8 : dt::f32, tag::ab}, cpu_engine(),
                         ow->int8 ? static_cast<void*>(q.data()) : const_cast<float*>(x));
        dnnl::memory dst({{m, nb}, ow->int8 ? dt::s32 : dt::f32, tag::ab}, cpu_engine(), block_out.data());
        prim.execute(stream, {{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, ow->blocks[b]}, {DNNL_ARG_DST, dst},
                              {DNNL_ARG_SCRATCHPAD, scratch}});
        stream.wait();
        for (int64_t i = 0; i < m; ++i) {
          float* yi = y + i * N + n0;
          if (ow->int8) {
            const int32_t* ai = reinterpret_cast<const int32_t*>(block_out.data()) + i * nb;
            const int32_t* cs = ow->colsum.data() + n0;
            for (int64_t r = 0; r < nb; ++r)
              yi[r] = static_cast<float>(ai[r] - ow->zero_point * cs[r]) * (d[i] * w.scale[n0 + r]);
          } else {
            std::memcpy(yi, block_out.data() + i * nb, sizeof(float) * nb);
          }
        }
      }
    });
    return true;
  } catch (const dnnl::error& e) {
    log(LogLevel::Debug, "oneDNN matmul unavailable (%s): using our own kernels", e.what());
    return false;
  }
}

void onednn_prepare(const WeightView& w) {
  if (!w.cache || (w.type != DType::W8A8 && w.type != DType::F32) || (w.type == DType::W8A8 && !w.scale)) return;
  try {
    w.cache->get<OnednnWeight>(&kOnednnKey, [&] { return prepare(w); });
  } catch (const dnnl::error& e) {
    // onednn_matmul will find oneDNN unusable again and use our kernels.
    log(LogLevel::Debug, "oneDNN cannot prepare a weight (%s): our own kernels will run it", e.what());
  }
}

}  // namespace infer::cpu
