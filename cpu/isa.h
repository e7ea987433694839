// Which instruction set the CPU backend's kernels use. The one place that
// reads cpuid: detected once, capped by the environment variable
// INFER_CPU_ISA (scalar | avx2 | avx512 | amx, read once) and, for tests and
// benchmarks, by set_isa_cap(). Every kernel table follows active_isa()
// (cpu/kernels.h), and so does oneDNN (cpu/onednn_matmul.cpp).
#pragma once

namespace infer::cpu {

enum class Isa : int {
  Scalar = 0,  // portable C++: dequantize, then f32 math
  Avx2 = 1,    // AVX2 + FMA + F16C
  Avx512 = 2,  // AVX-512 F/BW/VL/DQ + VNNI (on top of AVX2)
  Amx = 3,     // AMX-TILE + AMX-INT8 (on top of AVX-512), with the kernel's permission to use the tiles
};

const char* isa_name(Isa isa);
// The best ISA this CPU and this build support.
Isa detected_isa();
// detected_isa(), capped by INFER_CPU_ISA and set_isa_cap().
Isa active_isa();
// The cap alone: INFER_CPU_ISA or the last set_isa_cap() (Isa::Amx: none).
Isa isa_cap();
// Caps the ISA used from now on (tests force the scalar path with it).
// Passing Isa::Amx lifts the cap (detection still applies). Returns the
// previous cap, to restore it.
Isa set_isa_cap(Isa cap);

// Whether the CPU has VNNI int8 dot products (AVX-512-VNNI or AVX-VNNI).
bool has_int8_vnni();

}  // namespace infer::cpu
