// GPTQ and AWQ (tools/quantize.h describes both): calibration text through
// the model layer by layer, with a plain f32 forward of our own (Eigen).
#pragma once

#include <string>

#include "tools/quantize.h"

namespace infer {

class GgufFile;
struct GgufTensorInfo;

QuantizeStats quantize_calibrated(const std::string& in_path, const std::string& out_path, const QuantizeOptions& o,
                                  ThreadPool& pool);

// Rows [r0, r1) of a tensor as f32 (any type dequantize_row knows, and W8A8).
void source_rows_f32(const GgufFile& in, const GgufTensorInfo& t, int64_t r0, int64_t r1, float* dst);

}  // namespace infer
