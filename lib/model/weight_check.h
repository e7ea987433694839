// Load-time check that a model's weights are finite: a NaN or Inf weight
// otherwise surfaces only at generation time, as every request failing with
// "logits contain NaN" (INTERNAL), far from its cause.
#pragma once

namespace infer {

class GgufFile;

// Throws Error(Format) naming the first tensor with a NaN or Inf value. F32,
// F16 and BF16 tensors are scanned whole; block-quantized tensors have their
// block scales (and minimums) scanned, not their integer quants, which cannot
// be non-finite. One pass over the float data: memory bandwidth, not compute.
void check_finite_weights(const GgufFile& gguf);

}  // namespace infer
