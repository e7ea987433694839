// The kernel tables of every ISA and the choice among them. Compiled for the
// baseline ISA: the tables hold only function addresses (constant
// initialization), so nothing of an ISA runs unless active_isa() allows it.
#include "cpu/kernels.h"

#include "cpu/isa_kernels.h"

namespace infer::cpu {

namespace {

// FIELDS(ns): the vector, op and quantizer kernels of namespace ns, in the
// order of IsaKernels.
#define INFER_CPU_TABLE(ns_vec, ns_attn)                                                                  \
  ns_vec::dot_f32, ns_vec::axpy_f32, ns_vec::f16_to_f32, ns_vec::f32_to_f16, ns_attn::attn_scores,      \
      ns_attn::attn_accum, ns_vec::exp_sum, ns_vec::i8_rows_to_f32, ns_vec::rms_norm, ns_vec::swiglu,   \
      ns_vec::add, ns_vec::rope, ns_vec::geglu, ns_vec::softcap, ns_vec::gelu_erf, ns_vec::tanh_f32,     \
      ns_vec::layer_norm

constexpr IsaKernels kScalar{"scalar", INFER_CPU_TABLE(scalar, scalar), scalar::ssm_scan, scalar::ssm_conv_row,
                             scalar::ssd_gemm, INT64_MAX, scalar::quantize_acts, scalar::format_kernel, nullptr};
constexpr IsaKernels kAvx2{"avx2", INFER_CPU_TABLE(avx2, avx2), avx2::ssm_scan, avx2::ssm_conv_row,
                           avx2::ssd_gemm, INT64_MAX, avx2::quantize_acts, avx2::format_kernel, &kScalar};
// AVX-512: its own attention, scan and matmul panels, AVX2's other kernels.
constexpr IsaKernels kAvx512{"avx512", INFER_CPU_TABLE(avx2, avx512), avx512::ssm_scan, avx2::ssm_conv_row,
                             avx2::ssd_gemm, INT64_MAX, avx2::quantize_acts, avx512::format_kernel, &kAvx2};
// AMX: its tile matmuls (m >= kAmxMinRows), AVX-512's everything else.
constexpr IsaKernels kAmx{"amx", INFER_CPU_TABLE(avx2, avx512), avx512::ssm_scan, avx2::ssm_conv_row,
                          avx2::ssd_gemm, INT64_MAX, avx2::quantize_acts, amx::format_kernel, &kAvx512};

#undef INFER_CPU_TABLE

constexpr const IsaKernels* kTables[] = {&kScalar, &kAvx2, &kAvx512, &kAmx};

}  // namespace

const IsaKernels& kernels() { return *kTables[static_cast<int>(active_isa())]; }

const IsaKernels& kernels_for(Isa isa) {
  const Isa d = detected_isa();
  return *kTables[static_cast<int>(isa < d ? isa : d)];
}

}  // namespace infer::cpu
