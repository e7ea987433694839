#include "tools/synth.h"

#include <cmath>
#include <cstdio>
#include <sys/stat.h>

#include "core/error.h"
#include "core/threadpool.h"
#include "gguf/gguf.h"
#include "gguf/gguf_stream.h"
#include "quant/formats.h"
#include "tools/quantize.h"

namespace infer {

const std::vector<SynthPreset>& synth_presets() {
  static const std::vector<SynthPreset> kPresets = {
      {"tinyllama-1.1b", "llama", 2048, 22, 32, 4, 5632, 32000, 2048, 10000.0f, 1e-5f},
      {"llama-2-7b", "llama", 4096, 32, 32, 32, 11008, 32000, 4096, 10000.0f, 1e-5f},
      {"llama-3-8b", "llama", 4096, 32, 32, 8, 14336, 128256, 8192, 500000.0f, 1e-5f},
      {"tiny", "llama", 64, 2, 4, 2, 160, 512, 256, 10000.0f, 1e-5f},
  };
  return kPresets;
}

const SynthPreset* find_synth_preset(const std::string& name) {
  for (const SynthPreset& p : synth_presets())
    if (name == p.name) return &p;
  return nullptr;
}

namespace {

// splitmix64: a counter-based generator, so rows can be filled in any order
// (and in parallel) with the same result.
uint64_t mix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ULL;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

// Uniform values with standard deviation `std` for one row.
void random_row(uint64_t seed, uint64_t tensor, uint64_t row, float stddev, float* out, int64_t n) {
  const float a = stddev * std::sqrt(3.0f);
  uint64_t s = mix(seed ^ mix(tensor * 0x100000001B3ULL + row));
  for (int64_t i = 0; i < n; ++i) {
    s = mix(s);
    const float u = static_cast<float>(s >> 40) * (1.0f / 16777216.0f);  // [0, 1)
    out[i] = (2.0f * u - 1.0f) * a;
  }
}

// A SentencePiece-style vocabulary: <unk> <s> </s>, byte fallback tokens,
// then "▁" and letter strings (with and without the word-start marker).
void synth_vocab(int n_vocab, std::vector<std::string>& tokens, std::vector<float>& scores, std::vector<int32_t>& types) {
  tokens = {"<unk>", "<s>", "</s>"};
  types = {2, 3, 3};
  for (int b = 0; b < 256; ++b) {
    char buf[8];
    std::snprintf(buf, sizeof buf, "<0x%02X>", b);
    tokens.push_back(buf);
    types.push_back(6);
  }
  const std::string space = "\xE2\x96\x81";  // U+2581
  tokens.push_back(space);
  types.push_back(1);
  std::vector<std::string> prev = {""};
  while (static_cast<int>(tokens.size()) < n_vocab) {
    std::vector<std::string> next;
    for (const std::string& s : prev)
      for (char ch = 'a'; ch <= 'z'; ++ch) next.push_back(s + ch);
    for (const std::string& s : next) {
      for (const std::string& t : {space + s, s}) {
        if (static_cast<int>(tokens.size()) >= n_vocab) break;
        tokens.push_back(t);
        types.push_back(1);
      }
    }
    prev = std::move(next);
  }
  tokens.resize(static_cast<size_t>(n_vocab));
  types.resize(static_cast<size_t>(n_vocab));
  scores.assign(static_cast<size_t>(n_vocab), 0.0f);
  for (int i = 0; i < n_vocab; ++i) scores[i] = types[i] == 1 ? -static_cast<float>(i) : 0.0f;
}

struct Tensor {
  std::string name;
  std::vector<int64_t> dims;
  float stddev;  // 0: ones (norms)
  DType type;
};

}  // namespace

uint64_t write_synth_model(const SynthPreset& p, const std::string& path, const SynthOptions& o) {
  if (o.type != DType::W8A8 && !can_quantize(o.type))
    raise(Status::InvalidArgument, "synth: cannot write weights as %s", dtype_name(o.type));
  const std::string a = p.arch;
  const int head_dim = p.n_embd / p.n_head;
  const int64_t kv_dim = static_cast<int64_t>(p.n_head_kv) * head_dim;
  GgufStreamWriter w(path);
  w.set("general.architecture", GgufValue::make_string(a));
  w.set("general.name", GgufValue::make_string(std::string("synthetic ") + p.name));
  w.set(a + ".context_length", GgufValue::make_u32(static_cast<uint32_t>(p.n_ctx)));
  w.set(a + ".embedding_length", GgufValue::make_u32(static_cast<uint32_t>(p.n_embd)));
  w.set(a + ".feed_forward_length", GgufValue::make_u32(static_cast<uint32_t>(p.n_ff)));
  w.set(a + ".block_count", GgufValue::make_u32(static_cast<uint32_t>(p.n_layer)));
  w.set(a + ".attention.head_count", GgufValue::make_u32(static_cast<uint32_t>(p.n_head)));
  w.set(a + ".attention.head_count_kv", GgufValue::make_u32(static_cast<uint32_t>(p.n_head_kv)));
  w.set(a + ".rope.dimension_count", GgufValue::make_u32(static_cast<uint32_t>(head_dim)));
  w.set(a + ".attention.layer_norm_rms_epsilon", GgufValue::make_f32(p.rms_eps));
  w.set(a + ".rope.freq_base", GgufValue::make_f32(p.rope_base));
  std::vector<std::string> tokens;
  std::vector<float> scores;
  std::vector<int32_t> types;
  synth_vocab(p.n_vocab, tokens, scores, types);
  w.set("tokenizer.ggml.model", GgufValue::make_string("llama"));
  w.set("tokenizer.ggml.tokens", GgufValue::make_string_array(tokens));
  w.set("tokenizer.ggml.scores", GgufValue::make_f32_array(scores));
  w.set("tokenizer.ggml.token_type", GgufValue::make_i32_array(types));
  w.set("tokenizer.ggml.bos_token_id", GgufValue::make_u32(1));
  w.set("tokenizer.ggml.eos_token_id", GgufValue::make_u32(2));
  w.set("tokenizer.ggml.unknown_token_id", GgufValue::make_u32(0));
  write_quant_metadata(w, o.type, QuantMethod::Rtn);

  const float s_in = 0.02f, s_out = 0.02f / std::sqrt(2.0f * static_cast<float>(p.n_layer));
  std::vector<Tensor> ts;
  ts.push_back({"token_embd.weight", {p.n_embd, p.n_vocab}, s_in, DType::F32});
  ts.push_back({"output_norm.weight", {p.n_embd}, 0, DType::F32});
  ts.push_back({"output.weight", {p.n_embd, p.n_vocab}, s_in, DType::F32});
  for (int l = 0; l < p.n_layer; ++l) {
    const std::string b = "blk." + std::to_string(l) + ".";
    ts.push_back({b + "attn_norm.weight", {p.n_embd}, 0, DType::F32});
    ts.push_back({b + "attn_q.weight", {p.n_embd, p.n_embd}, s_in, DType::F32});
    ts.push_back({b + "attn_k.weight", {p.n_embd, kv_dim}, s_in, DType::F32});
    ts.push_back({b + "attn_v.weight", {p.n_embd, kv_dim}, s_in, DType::F32});
    ts.push_back({b + "attn_output.weight", {p.n_embd, p.n_embd}, s_out, DType::F32});
    ts.push_back({b + "ffn_norm.weight", {p.n_embd}, 0, DType::F32});
    ts.push_back({b + "ffn_gate.weight", {p.n_embd, p.n_ff}, s_in, DType::F32});
    ts.push_back({b + "ffn_up.weight", {p.n_embd, p.n_ff}, s_in, DType::F32});
    ts.push_back({b + "ffn_down.weight", {p.n_ff, p.n_embd}, s_out, DType::F32});
  }
  bool noted = false;
  for (Tensor& t : ts) {
    if (is_quantizable(t.name, t.dims)) {
      bool fb = false;
      t.type = tensor_type(o.type, t.dims[0], &fb);
      if (fb && o.note && !noted) {
        o.note(strformat("%s: rows of %lld values do not fit %s blocks: written as %s (and likewise for others)",
                         t.name.c_str(), (long long)t.dims[0], dtype_name(o.type), dtype_name(t.type)));
        noted = true;
      }
    }
    declare_tensor(w, t.name, t.dims, t.type);
  }
  w.begin();

  ThreadPool pool(o.n_threads);
  uint64_t total = 0, done = 0;
  for (const Tensor& t : ts) total += static_cast<uint64_t>(t.dims[0]) * (t.dims.size() > 1 ? t.dims[1] : 1);
  std::vector<float> buf, scales;
  for (size_t ti = 0; ti < ts.size(); ++ti) {
    const Tensor& t = ts[ti];
    const int64_t n = t.dims[0], rows = t.dims.size() > 1 ? t.dims[1] : 1;
    if (o.progress) o.progress(static_cast<double>(done) / static_cast<double>(total), t.name);
    const int64_t chunk = std::max<int64_t>(1, std::min<int64_t>(rows, (int64_t(32) << 20) / (4 * n)));
    if (t.type == DType::W8A8) scales.resize(static_cast<size_t>(rows));
    for (int64_t r0 = 0; r0 < rows; r0 += chunk) {
      const int64_t r1 = std::min(rows, r0 + chunk);
      buf.resize(static_cast<size_t>((r1 - r0) * n));
      pool.run([&](int tid, int nth) {
        for (int64_t r = r0 + (r1 - r0) * tid / nth; r < r0 + (r1 - r0) * (tid + 1) / nth; ++r) {
          float* row = buf.data() + (r - r0) * n;
          if (t.stddev == 0) {
            std::fill(row, row + n, 1.0f);
          } else {
            random_row(o.seed, ti, static_cast<uint64_t>(r), t.stddev, row, n);
          }
        }
      });
      write_rows(w, t.type, buf.data(), r1 - r0, n, t.type == DType::W8A8 ? scales.data() + r0 : nullptr, &pool);
    }
    if (t.type == DType::W8A8) w.write(scales.data(), scales.size() * 4);
    done += static_cast<uint64_t>(n) * rows;
  }
  w.finish();
  if (o.progress) o.progress(1.0, "done");
  struct stat sb;
  return ::stat(path.c_str(), &sb) == 0 ? static_cast<uint64_t>(sb.st_size) : 0;
}

}  // namespace infer
