#include "cpu/isa.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

#include <atomic>
#include <cstdlib>
#include <cstring>

namespace infer::cpu {

namespace {

Isa env_cap() {
  const char* s = std::getenv("INFER_CPU_ISA");
  if (!s || !*s) return Isa::Avx512;
  if (!std::strcmp(s, "scalar")) return Isa::Scalar;
  if (!std::strcmp(s, "avx2")) return Isa::Avx2;
  return Isa::Avx512;
}

std::atomic<int>& cap() {
  static std::atomic<int> c{static_cast<int>(env_cap())};
  return c;
}

}  // namespace

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::Scalar: return "scalar";
    case Isa::Avx2: return "avx2";
    case Isa::Avx512: return "avx512";
  }
  return "?";
}

Isa detected_isa() {
#if defined(__x86_64__) || defined(__i386__)
  static const Isa isa = [] {
    __builtin_cpu_init();
    // F16C is CPUID.1:ECX bit 29 (clang has no name for it in __builtin_cpu_supports).
    unsigned a = 0, b = 0, c = 0, d = 0;
    const bool f16c = __get_cpuid(1, &a, &b, &c, &d) && (c & (1u << 29)) != 0;
    const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && f16c;
    if (!avx2) return Isa::Scalar;
    const bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
                        __builtin_cpu_supports("avx512vnni");
    return avx512 ? Isa::Avx512 : Isa::Avx2;
  }();
  return isa;
#else
  return Isa::Scalar;
#endif
}

Isa active_isa() {
  const int c = cap().load(std::memory_order_relaxed);
  const int d = static_cast<int>(detected_isa());
  return static_cast<Isa>(c < d ? c : d);
}

Isa set_isa_cap(Isa c) { return static_cast<Isa>(cap().exchange(static_cast<int>(c), std::memory_order_relaxed)); }

bool has_int8_vnni() {
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

}  // namespace infer::cpu
