#include "cpu/isa.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif
#if defined(__linux__) && defined(__x86_64__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

#include <atomic>
#include <cstdlib>
#include <cstring>

#include "core/log.h"

namespace infer::cpu {

namespace {

Isa env_cap() {
  const char* s = std::getenv("INFER_CPU_ISA");
  if (!s || !*s) return Isa::Amx;
  if (!std::strcmp(s, "scalar")) return Isa::Scalar;
  if (!std::strcmp(s, "avx2")) return Isa::Avx2;
  if (!std::strcmp(s, "avx512")) return Isa::Avx512;
  if (std::strcmp(s, "amx") != 0)
    log(LogLevel::Warn, "INFER_CPU_ISA=%s is not one of scalar, avx2, avx512, amx: ignored", s);
  return Isa::Amx;
}

std::atomic<int>& cap() {
  static std::atomic<int> c{static_cast<int>(env_cap())};
  return c;
}

// Whether AMX-TILE and AMX-INT8 can be used: the CPU has them (CPUID.(7,0):EDX
// bits 24 and 25), the OS saves their state (XCR0 bits 17 and 18), the
// kernels were compiled (INFER_HAVE_AMX) and Linux grants this process the
// tile data state (arch_prctl ARCH_REQ_XCOMP_PERM for XTILEDATA, feature 18;
// granted once for the whole process, every thread).
bool amx_usable() {
#if defined(__linux__) && defined(__x86_64__) && defined(INFER_HAVE_AMX)
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d) || !(d & (1u << 24)) || !(d & (1u << 25))) return false;
  if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & (1u << 27))) return false;  // OSXSAVE: xgetbv is allowed
  unsigned lo = 0, hi = 0;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  if ((lo & (3u << 17)) != (3u << 17)) return false;
  constexpr long kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
  return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
#else
  return false;
#endif
}

}  // namespace

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::Scalar: return "scalar";
    case Isa::Avx2: return "avx2";
    case Isa::Avx512: return "avx512";
    case Isa::Amx: return "amx";
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
    if (!avx512) return Isa::Avx2;
    return amx_usable() ? Isa::Amx : Isa::Avx512;
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

Isa isa_cap() { return static_cast<Isa>(cap().load(std::memory_order_relaxed)); }

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
