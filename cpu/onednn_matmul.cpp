#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif
#include "cpu/onednn_matmul.h"

#include <dlfcn.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <oneapi/dnnl/dnnl.hpp>
#include <vector>

#include "core/error.h"
#include "core/log.h"

namespace infer::cpu {

namespace {

dnnl::engine& cpu_engine() {
  static dnnl::engine e(dnnl::engine::kind::cpu, 0);
  return e;
}

bool has_vnni() {
#if defined(__x86_64__) || defined(__i386__)
  // AVX-VNNI is CPUID.(EAX=7,ECX=1):EAX bit 4 (clang has no name for it in __builtin_cpu_supports).
  static const bool v = [] {
    unsigned a = 0, b = 0, c = 0, d = 0;
    const bool avx_vnni = __get_cpuid_count(7, 1, &a, &b, &c, &d) && (a & (1u << 4)) != 0;
    return __builtin_cpu_supports("avx512vnni") || avx_vnni;
  }();
  return v;
#else
  return false;
#endif
}

// oneDNN's OpenMP team size for calls from this thread (libgomp is loaded by
// libdnnl; looked up at run time so we need not link OpenMP ourselves).
void set_omp_threads(int n) {
  using Fn = void (*)(int);
  static const Fn fn = reinterpret_cast<Fn>(dlsym(RTLD_DEFAULT, "omp_set_num_threads"));
  thread_local int current = -1;
  if (fn && n > 0 && n != current) {
    fn(n);
    current = n;
  }
}

// A weight in oneDNN's layout with its primitive (M is a run-time dimension).
struct OnednnWeight {
  dnnl::matmul::primitive_desc pd;
  dnnl::matmul prim;
  dnnl::memory wei;
  bool int8 = false, u7 = false;
  int32_t zero_point = 0;
};

std::shared_ptr<OnednnWeight> prepare(const WeightView& w) {
  using dt = dnnl::memory::data_type;
  using tag = dnnl::memory::format_tag;
  auto ow = std::make_shared<OnednnWeight>();
  const dnnl::memory::dim K = w.n_in, N = w.n_out, RT = DNNL_RUNTIME_DIM_VAL;
  ow->int8 = w.type == DType::W8A8;
  ow->u7 = ow->int8 && !has_vnni();
  ow->zero_point = ow->u7 ? 64 : 128;
  const dt wt = ow->int8 ? dt::s8 : dt::f32;
  const dnnl::memory::desc src_md({RT, K}, ow->int8 ? dt::u8 : dt::f32, tag::ab);
  const dnnl::memory::desc wei_md({K, N}, wt, tag::any);
  const dnnl::memory::desc dst_md({RT, N}, ow->int8 ? dt::s32 : dt::f32, tag::ab);
  dnnl::primitive_attr attr;
  if (ow->int8) attr.set_zero_points(DNNL_ARG_SRC, 0, {ow->zero_point});
  const dnnl::matmul::desc d(src_md, wei_md, dst_md);
  ow->pd = dnnl::matmul::primitive_desc(d, attr, cpu_engine());
  ow->prim = dnnl::matmul(ow->pd);
  // The file's rows are W's rows, i.e. the K x N weights in "ba" order.
  const dnnl::memory::desc user_md({K, N}, wt, tag::ba);
  dnnl::memory user(user_md, cpu_engine(), const_cast<uint8_t*>(w.data));
  ow->wei = dnnl::memory(ow->pd.weights_desc(), cpu_engine());
  dnnl::stream s(cpu_engine());
  dnnl::reorder(user, ow->wei).execute(s, user, ow->wei);
  s.wait();
  return ow;
}

const char kOnednnKey = 0;

}  // namespace

std::atomic<int>& onednn_policy() {
  static std::atomic<int> p{[] {
    const char* s = std::getenv("INFER_ONEDNN");
    return s && *s ? (std::atoi(s) > 0 ? 1 : 0) : -1;
  }()};
  return p;
}

void set_onednn_policy(int policy) { onednn_policy().store(policy < 0 ? -1 : (policy > 0 ? 1 : 0)); }

bool onednn_preferred(DType t, int64_t m, int64_t n_in, int64_t n_out) {
  if (t != DType::W8A8 && t != DType::F32) return false;
  const int force = onednn_policy().load(std::memory_order_relaxed);
  if (force >= 0) return force > 0;
  // Measured (bench/RESULTS.md, BM_Gemm with INFER_ONEDNN=0/1): oneDNN wins
  // for prefill-sized m; our kernels for decode and small batches.
  return m >= (t == DType::W8A8 ? 16 : 32) && n_in >= 256 && n_out >= 256;
}

bool onednn_matmul(const WeightView& w, const float* x, int64_t m, float* y, int n_threads) {
  if ((w.type != DType::W8A8 && w.type != DType::F32) || (w.type == DType::W8A8 && !w.scale)) return false;
  try {
    std::shared_ptr<OnednnWeight> temp;
    const OnednnWeight* ow;
    if (w.cache) {
      ow = w.cache->get<OnednnWeight>(&kOnednnKey, [&] { return prepare(w); });
    } else {
      temp = prepare(w);
      ow = temp.get();
    }
    set_omp_threads(n_threads);
    using dt = dnnl::memory::data_type;
    using tag = dnnl::memory::format_tag;
    const int64_t K = w.n_in, N = w.n_out;
    thread_local dnnl::stream stream(cpu_engine());
    if (!ow->int8) {
      dnnl::memory src({{m, K}, dt::f32, tag::ab}, cpu_engine(), const_cast<float*>(x));
      dnnl::memory dst({{m, N}, dt::f32, tag::ab}, cpu_engine(), y);
      ow->prim.execute(stream, {{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, ow->wei}, {DNNL_ARG_DST, dst}});
      stream.wait();
      return true;
    }
    // Per-token activation quantization: u = round(x / d) + zero point.
    thread_local std::vector<uint8_t> qx;
    thread_local std::vector<int32_t> acc;
    thread_local std::vector<float> dx;
    qx.resize(static_cast<size_t>(m * K));
    acc.resize(static_cast<size_t>(m * N));
    dx.resize(static_cast<size_t>(m));
    const float levels = ow->u7 ? 63.0f : 127.0f;
    for (int64_t i = 0; i < m; ++i) {
      const float* xi = x + i * K;
      float amax = 0;
      for (int64_t k = 0; k < K; ++k) amax = std::max(amax, std::fabs(xi[k]));
      const float id = amax > 0 ? levels / amax : 0.0f;
      dx[i] = amax / levels;
      uint8_t* q = qx.data() + i * K;
      for (int64_t k = 0; k < K; ++k) q[k] = static_cast<uint8_t>(static_cast<int>(std::nearbyint(xi[k] * id)) + ow->zero_point);
    }
    dnnl::memory src({{m, K}, dt::u8, tag::ab}, cpu_engine(), qx.data());
    dnnl::memory dst({{m, N}, dt::s32, tag::ab}, cpu_engine(), acc.data());
    ow->prim.execute(stream, {{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, ow->wei}, {DNNL_ARG_DST, dst}});
    stream.wait();
    for (int64_t i = 0; i < m; ++i) {
      const int32_t* a = acc.data() + i * N;
      float* yi = y + i * N;
      const float di = dx[i];
      for (int64_t r = 0; r < N; ++r) yi[r] = static_cast<float>(a[r]) * (di * w.scale[r]);
    }
    return true;
  } catch (const dnnl::error& e) {
    log(LogLevel::Debug, "oneDNN matmul unavailable (%s): using our own kernels", e.what());
    return false;
  }
}

}  // namespace infer::cpu
