// Quantization of f32 values into the block formats: round-to-nearest (RTN)
// for every GGUF type we write (q8_0, q4_0, q4_1, q5_0, q5_1, q4_k, q5_k,
// q6_k, f16, bf16) and for libinfer's own formats (w8a8, int4_g32/64/128;
// their layouts are documented in core/dtype.h).
//
// Every format here is affine within a sub-block: value = a * q + b with an
// integer q in [qmin, qmax] (Q4_0: a = d, b = -8d; Q4_1: a = d, b = m; INT4:
// a = d, b = -z d; ...). GPTQ and AWQ work on that form (Grid): they choose
// a grid per block, round values onto it their own way, then encode.
//
// Metadata keys written into files that use our own formats:
//   infer.quant.version     u32   1
//   infer.quant.type        str   "w8a8" | "int4"
//   infer.quant.method      str   "rtn" | "gptq" | "awq"
//   infer.quant.group_size  u32   INT4 group size (32, 64 or 128)
// Standard-type files get general.file_type (llama.cpp's numbering) and
// infer.quant.method when the method is not RTN.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "core/dtype.h"

namespace infer {

// Quantizes n values of src into dst in format t (n a multiple of the block
// size). F32, F16, BF16 and every type listed above; Error(Unsupported)
// otherwise, Error(InvalidArgument) for a bad n. W8A8 is not a row format
// on its own: use quantize_row_w8a8.
void quantize_row(DType t, const float* src, void* dst, int64_t n);
bool can_quantize(DType t);

// W8A8 row: q = round(x / scale) with scale = max|x| / 127.
void quantize_row_w8a8(const float* src, int8_t* q, float* scale, int64_t n);

// Dequantization of libinfer's block formats (INT4_G*), one block at a time;
// nullptr for other types. Used by dequantize_row.
using DequantBlockFn = void (*)(const uint8_t* block, float* out);
DequantBlockFn infer_own_dequant_block(DType t);

// ---- the affine view used by GPTQ / AWQ ------------------------------------------

struct Grid {
  float a = 0, b = 0;   // value = a * q + b
  int qmin = 0, qmax = 0;
  int quantize(float x) const;  // nearest q in [qmin, qmax]
  float value(int q) const { return a * static_cast<float>(q) + b; }
};

// Formats with one grid per block whose grid can be chosen freely (the
// 32-value formats and INT4): q8_0, q4_0, q4_1, q5_0, q5_1, int4_g*.
bool grid_supported(DType t);
// The RTN grid of one block of values (block size of t), with the range
// shrunk by `clip` (1 = none) for AWQ's clipping search. Scales are rounded
// to what the format stores, so value() is exactly what dequantization gives.
Grid grid_for_block(DType t, const float* x, float clip = 1.0f);
// Writes one block of t from its grid and integer values.
void encode_block(DType t, const Grid& g, const int* q, uint8_t* out);

// The type a tensor falls back to when its row length n is not a multiple of
// t's block (K formats -> 32-value formats of similar size, int4 -> smaller
// groups, then f16). Returns t itself when it fits.
DType fallback_type(DType t, int64_t n);

// "q4_0" -> Q4_0, "int4" -> INT4_G<group>, "w8a8" -> W8A8, ...; false when unknown.
bool parse_quant_type(const std::string& name, int group, DType* out);
// llama.cpp's general.file_type for a file mostly of type t (-1 when none).
int llama_file_type(DType t);

}  // namespace infer
