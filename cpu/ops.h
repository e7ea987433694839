// The op kernels as cpu/cpu_backend.cpp and cpu/attention.cpp name them: the
// IsaKernels table of the active ISA (cpu/kernels.h, where the kernels and
// their contracts are). New code calls kernels() directly.
#pragma once

#include "cpu/kernels.h"

namespace infer::cpu {

using OpKernels = IsaKernels;

// kernels(): the active ISA's table at the time of the call (a CpuBackend
// keeps the one of its construction).
inline const OpKernels& op_kernels() { return kernels(); }

}  // namespace infer::cpu
