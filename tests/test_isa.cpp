// The one ISA dispatch of the CPU backend (cpu/isa.h, cpu/kernels.h): every
// kernel table, the matmul kernel choice and the oneDNN paths follow the
// active ISA, whether capped by INFER_CPU_ISA (read once, at start-up) or by
// set_isa_cap(). CTest also runs these tests and the kernel tests ([matmul],
// [ops]) once per INFER_CPU_ISA level (tests/CMakeLists.txt, isa_cap_*), so
// a table that ignores the cap fails there.
#include <cstdlib>
#include <cstring>
#include <string>

#include "core/backend.h"
#include "cpu/isa.h"
#include "cpu/kernels.h"
#include "cpu/matmul.h"
#include "cpu/onednn_matmul.h"
#include "cpu/ops.h"
#include "test_util.h"

using namespace infer;

namespace {

struct IsaGuard {
  cpu::Isa saved;
  explicit IsaGuard(cpu::Isa isa) : saved(cpu::set_isa_cap(isa)) {}
  ~IsaGuard() { cpu::set_isa_cap(saved); }
};

struct OnednnPolicy {
  explicit OnednnPolicy(int p) { cpu::set_onednn_policy(p); }
  ~OnednnPolicy() { cpu::set_onednn_policy(-1); }
};

std::string s(const char* p) { return p ? p : "(null)"; }

// What every dispatch point must say when `isa` is active.
void check_dispatch(cpu::Isa isa) {
  const std::string name = cpu::isa_name(isa);
  INFO("active ISA " << name);
  REQUIRE(cpu::active_isa() == isa);
  CHECK(s(cpu::kernels().isa) == name);
  CHECK(&cpu::kernels() == &cpu::kernels_for(isa));
  CHECK(&cpu::op_kernels() == &cpu::kernels());
  // Each table's fallback chain goes down one ISA at a time to scalar.
  int levels = 0;
  for (const cpu::IsaKernels* k = &cpu::kernels(); k; k = k->fallback) ++levels;
  CHECK(levels == static_cast<int>(isa) + 1);

  // The matmul kernel comes from the active ISA's table (or, for a format
  // it lacks, from one below it), never from above.
  {
    OnednnPolicy no_onednn(0);
    // Q4_0 decode: every ISA but AMX (no kernel below 16 rows) has one.
    const std::string decode = cpu::matmul_kernel_isa(DType::Q4_0, 1, 2048, 2048);
    CHECK(decode == (isa == cpu::Isa::Amx ? "avx512" : name));
    // Q4_0 prefill: every ISA has one.
    CHECK(s(cpu::matmul_kernel_isa(DType::Q4_0, 64, 2048, 2048)) == name);
    // Q2_K: only the portable kernel.
    CHECK(s(cpu::matmul_kernel_isa(DType::Q2_K, 64, 2048, 2048)) == "scalar");
    // Q5_0 and Q6_K: AVX2 and AVX-512 have them, AMX (no tile kernel) takes AVX-512's.
    for (DType t : {DType::Q5_0, DType::Q6_K})
      CHECK(s(cpu::matmul_kernel_isa(t, 64, 2048, 2048)) == (isa == cpu::Isa::Amx ? "avx512" : name));
  }
  // oneDNN is SIMD code: never below AVX2, even forced on.
  {
    OnednnPolicy forced(1);
    const std::string f32 = cpu::matmul_kernel_isa(DType::F32, 64, 2048, 2048);
    CHECK(f32 == (isa == cpu::Isa::Scalar ? "scalar" : "onednn"));
  }
}

}  // namespace

TEST_CASE("isa: INFER_CPU_ISA caps every kernel table", "[isa]") {
  const char* env = std::getenv("INFER_CPU_ISA");
  const cpu::Isa detected = cpu::detected_isa();
  cpu::Isa want = detected;
  if (env && *env) {
    const std::string e = env;
    cpu::Isa asked = cpu::Isa::Amx;
    if (e == "scalar") asked = cpu::Isa::Scalar;
    else if (e == "avx2") asked = cpu::Isa::Avx2;
    else if (e == "avx512") asked = cpu::Isa::Avx512;
    else if (e != "amx") FAIL("unknown INFER_CPU_ISA=" << e);
    if (asked > detected) {
      WARN("SKIPPED: INFER_CPU_ISA=" << e << " but this CPU and build run at most " << cpu::isa_name(detected));
      return;
    }
    want = asked;
  }
  CHECK(cpu::isa_cap() >= want);
  check_dispatch(want);
}

TEST_CASE("isa: set_isa_cap moves every kernel table, down and back up", "[isa]") {
  const cpu::Isa start = cpu::active_isa();
  for (int i = static_cast<int>(start); i >= 0; --i) {
    IsaGuard g(static_cast<cpu::Isa>(i));
    check_dispatch(static_cast<cpu::Isa>(i));
  }
  CHECK(cpu::active_isa() == start);
  check_dispatch(start);
  // A cap above what the CPU runs is no cap.
  IsaGuard g(cpu::Isa::Amx);
  CHECK(cpu::active_isa() == cpu::detected_isa());
  // kernels_for never hands out a table this CPU cannot run.
  CHECK(s(cpu::kernels_for(cpu::Isa::Amx).isa) == cpu::isa_name(cpu::detected_isa()));
}
