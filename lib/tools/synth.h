// Synthetic models: random-weight GGUF files with the exact shapes of real
// ones, so speed can be measured without downloading weights.
//
// Presets (shapes from the published configs); every one is an architecture
// this build runs, so each written file loads (a preset for a new
// architecture comes with that architecture):
//   tinyllama-1.1b  llama  dim 2048, 22 layers, 32 heads, 4 kv heads, ffn 5632, vocab 32000
//   llama-2-7b      llama  dim 4096, 32 layers, 32 heads, 32 kv heads, ffn 11008, vocab 32000
//   llama-3-8b      llama  dim 4096, 32 layers, 32 heads, 8 kv heads, ffn 14336, vocab 128256, rope base 500000
//   tiny            llama  dim 64, 2 layers, 4 heads, 2 kv heads, ffn 160, vocab 512 (tests)
//
// Weights are uniform random with std 0.02 (projections into the residual
// stream scaled by 1/sqrt(2 * layers), norms 1), so activations stay finite
// through every layer. The vocabulary is SentencePiece-style with byte
// fallback (<unk>, <s>, </s>, the 256 byte tokens, then letter strings), so
// any text tokenizes. Generation streams tensor by tensor (a few rows at a
// time), so a 7B/8B file never needs its size in memory.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace infer {

struct SynthPreset {
  const char* name;
  const char* arch;
  int n_embd, n_layer, n_head, n_head_kv, n_ff, n_vocab, n_ctx;
  float rope_base, rms_eps;
};

const std::vector<SynthPreset>& synth_presets();
const SynthPreset* find_synth_preset(const std::string& name);

struct SynthOptions {
  DType type = DType::F16;  // weight matrices (fallbacks as for quantize)
  uint64_t seed = 1;
  int n_threads = 0;
  std::function<void(double, const std::string&)> progress;
  std::function<void(const std::string&)> note;
};

// Writes the preset's model to path. Returns the file size in bytes.
uint64_t write_synth_model(const SynthPreset& p, const std::string& path, const SynthOptions& o);

}  // namespace infer

namespace infer {

// A large model that computes what a small trained one computes, plus noise:
// the target of speculative decoding benchmarks (stories260K grown into
// TinyLlama's shape costs TinyLlama's time per token while agreeing with
// stories260K as often as the noise allows). The small model (GGUF, llama)
// is embedded by zero padding: dims [0, d) of the residual stream; query head
// h at the big head of the same GQA group ((h / g) * G + h % g, g and G the
// group sizes); rotary pair p of a head at pair p * HD / hd (the same
// frequency); Q scaled by sqrt(HD / hd) for the softmax scale; RMSNorm
// weights scaled by sqrt(d / D) with epsilon scaled by d / D (exact for the
// zero-padded stream); the small layers first, then layers whose output
// projections are zero. Then Gaussian noise of std `noise` is added to every
// element of every matrix (not the norms), seeded by o.seed. Needs the big
// shape to hold the small one: d <= D, L <= L', ff <= FF, n_head_kv <=
// n_head_kv', g <= G and hd dividing HD; the vocabulary (and its size) is
// the small model's, whatever the preset says. Returns the file size.
uint64_t write_grown_model(const std::string& small_path, const SynthPreset& shape, float noise,
                           const std::string& path, const SynthOptions& o);

}  // namespace infer
