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
#include "quant/dequant.h"

#include <functional>
#include <memory>

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

// ---- growing a small model into a large shape ----

namespace infer {

namespace {

// Gaussian noise for one row (Box-Muller over the counter-based generator).
void gaussian_row(uint64_t seed, uint64_t tensor, uint64_t row, float stddev, float* out, int64_t n) {
  uint64_t s = mix(seed ^ mix((tensor + 7919) * 0x100000001B3ULL + row));
  for (int64_t i = 0; i < n; i += 2) {
    s = mix(s);
    const double u1 = (static_cast<double>(s >> 11) + 0.5) * (1.0 / 9007199254740992.0);
    s = mix(s);
    const double u2 = static_cast<double>(s >> 11) * (1.0 / 9007199254740992.0);
    const double r = std::sqrt(-2.0 * std::log(u1)) * stddev;
    out[i] += static_cast<float>(r * std::cos(6.283185307179586 * u2));
    if (i + 1 < n) out[i + 1] += static_cast<float>(r * std::sin(6.283185307179586 * u2));
  }
}

struct Small {
  std::unique_ptr<GgufFile> f;
  int64_t d = 0, L = 0, H = 0, Hkv = 0, ff = 0, V = 0;
  float eps = 1e-5f, base = 10000.0f;
  // A tensor as f32 rows ([rows][n_in]), read once.
  std::vector<float> rows(const std::string& name, int64_t* n_in) const {
    const GgufTensorInfo* t = f->find_tensor(name);
    if (!t) raise(Status::Format, "grow: the small model has no tensor %s", name.c_str());
    const int64_t n = t->dims[0], r = t->n_rows();
    std::vector<float> out(static_cast<size_t>(n * r));
    const uint8_t* src = f->tensor_data(*t);
    const size_t rb = dtype_row_bytes(t->type, n);
    for (int64_t i = 0; i < r; ++i) dequantize_row(t->type, src + i * rb, out.data() + i * n, n);
    *n_in = n;
    return out;
  }
};

}  // namespace

uint64_t write_grown_model(const std::string& small_path, const SynthPreset& p, float noise, const std::string& path,
                           const SynthOptions& o) {
  if (o.type != DType::W8A8 && !can_quantize(o.type))
    raise(Status::InvalidArgument, "grow: cannot write weights as %s", dtype_name(o.type));
  if (!(noise >= 0) || noise > 1) raise(Status::InvalidArgument, "grow: the noise std must be in [0, 1]");
  Small s;
  s.f = GgufFile::open(small_path);
  const std::string sa = s.f->get_string("general.architecture").value_or("");
  if (sa != "llama") raise(Status::Unsupported, "grow: the small model must be a llama model (it is '%s')", sa.c_str());
  auto need = [&](const char* key) {
    const auto v = s.f->get_int(sa + "." + key);
    if (!v) raise(Status::Format, "grow: the small model lacks %s.%s", sa.c_str(), key);
    return *v;
  };
  s.d = need("embedding_length");
  s.L = need("block_count");
  s.H = need("attention.head_count");
  s.Hkv = s.f->get_int(sa + ".attention.head_count_kv").value_or(s.H);
  s.ff = need("feed_forward_length");
  s.eps = static_cast<float>(s.f->get_float(sa + ".attention.layer_norm_rms_epsilon").value_or(1e-5));
  s.base = static_cast<float>(s.f->get_float(sa + ".rope.freq_base").value_or(10000.0));
  const std::vector<std::string> vocab = s.f->get_string_array("tokenizer.ggml.tokens");
  s.V = static_cast<int64_t>(vocab.size());
  const int64_t D = p.n_embd, LL = p.n_layer, HH = p.n_head, HKV = p.n_head_kv, FF = p.n_ff;
  const int64_t hd = s.d / s.H, HD = D / HH, g = s.H / s.Hkv, G = HH / HKV;
  if (s.d > D || s.L > LL || s.ff > FF || s.Hkv > HKV || g > G || HD % hd != 0 || s.H % s.Hkv != 0)
    raise(Status::InvalidArgument,
          "grow: %s (dim %d, %d layers, %d heads, %d kv heads, ffn %d) does not hold the small model (dim %lld, "
          "%lld layers, %lld heads, %lld kv heads, ffn %lld)",
          p.name, p.n_embd, p.n_layer, p.n_head, p.n_head_kv, p.n_ff, (long long)s.d, (long long)s.L, (long long)s.H,
          (long long)s.Hkv, (long long)s.ff);
  const int64_t stretch = HD / hd;
  // Big index of small head h's dim j (rotary pair j/2 at pair (j/2) * stretch).
  auto qdim = [&](int64_t h, int64_t j) { return ((h / g) * G + h % g) * HD + (j / 2) * stretch * 2 + j % 2; };
  auto kdim = [&](int64_t k, int64_t j) { return k * HD + (j / 2) * stretch * 2 + j % 2; };
  const float qscale = std::sqrt(static_cast<float>(HD) / static_cast<float>(hd));
  const float nscale = std::sqrt(static_cast<float>(s.d) / static_cast<float>(D));

  const std::string a = "llama";
  GgufStreamWriter w(path);
  w.set("general.architecture", GgufValue::make_string(a));
  w.set("general.name", GgufValue::make_string(strformat("%s grown to %s, noise %g",
                                                         s.f->get_string("general.name").value_or("model").c_str(),
                                                         p.name, noise)));
  w.set(a + ".context_length",
        GgufValue::make_u32(static_cast<uint32_t>(s.f->get_int(sa + ".context_length").value_or(p.n_ctx))));
  w.set(a + ".embedding_length", GgufValue::make_u32(static_cast<uint32_t>(D)));
  w.set(a + ".feed_forward_length", GgufValue::make_u32(static_cast<uint32_t>(FF)));
  w.set(a + ".block_count", GgufValue::make_u32(static_cast<uint32_t>(LL)));
  w.set(a + ".attention.head_count", GgufValue::make_u32(static_cast<uint32_t>(HH)));
  w.set(a + ".attention.head_count_kv", GgufValue::make_u32(static_cast<uint32_t>(HKV)));
  w.set(a + ".rope.dimension_count", GgufValue::make_u32(static_cast<uint32_t>(HD)));
  w.set(a + ".attention.layer_norm_rms_epsilon", GgufValue::make_f32(s.eps * static_cast<float>(s.d) / D));
  w.set(a + ".rope.freq_base", GgufValue::make_f32(s.base));
  for (const auto& kv : s.f->metadata())
    if (kv.first.rfind("tokenizer.", 0) == 0) w.set(kv.first, kv.second);
  write_quant_metadata(w, o.type, QuantMethod::Rtn);

  // Each big tensor: its shape and how to fill a row.
  struct Big {
    std::string name;
    std::vector<int64_t> dims;
    DType type = DType::F32;
    bool matrix = true;
    std::function<void(int64_t row, float* out)> fill;  // out is zeroed
  };
  std::vector<Big> ts;
  int64_t n_in = 0;
  auto pad_rows = [&](const std::string& name, int64_t small_rows_in) {
    return [src = std::make_shared<std::vector<float>>(s.rows(name, &n_in)), small_rows_in](int64_t r, float* out) {
      const int64_t rows = static_cast<int64_t>(src->size()) / small_rows_in;
      if (r < rows) std::copy(src->begin() + r * small_rows_in, src->begin() + (r + 1) * small_rows_in, out);
    };
  };
  auto norm = [&](const std::string& name) {
    auto src = std::make_shared<std::vector<float>>(s.rows(name, &n_in));
    return [src, nscale, D](int64_t, float* out) {
      std::fill(out, out + D, 1.0f);
      for (size_t i = 0; i < src->size(); ++i) out[i] = (*src)[i] * nscale;
    };
  };
  ts.push_back({"token_embd.weight", {D, s.V}, DType::F32, true, pad_rows("token_embd.weight", s.d)});
  ts.push_back({"output_norm.weight", {D}, DType::F32, false, norm("output_norm.weight")});
  ts.push_back({"output.weight", {D, s.V}, DType::F32, true,
                s.f->find_tensor("output.weight") ? pad_rows("output.weight", s.d) : pad_rows("token_embd.weight", s.d)});
  for (int64_t l = 0; l < LL; ++l) {
    const std::string b = "blk." + std::to_string(l) + ".";
    const bool real = l < s.L;
    auto none = [](int64_t, float*) {};
    auto ones = [D](int64_t, float* out) { std::fill(out, out + D, 1.0f); };
    // Rows of the small matrix `name` ([rows][n_in]) scattered: big row
    // rowmap(r) gets small row r at columns colmap(c), times `scale`.
    auto scatter = [&](const std::string& name, std::function<int64_t(int64_t)> rowmap,
                       std::function<int64_t(int64_t)> colmap, float scale, int64_t big_rows) {
      int64_t n = 0;
      auto src = std::make_shared<std::vector<float>>(s.rows(name, &n));
      const int64_t rows = static_cast<int64_t>(src->size()) / n;
      auto inv = std::make_shared<std::vector<int64_t>>(static_cast<size_t>(big_rows), -1);
      for (int64_t r = 0; r < rows; ++r) (*inv)[static_cast<size_t>(rowmap(r))] = r;
      return [src, inv, n, colmap, scale](int64_t r, float* out) {
        const int64_t sr = (*inv)[static_cast<size_t>(r)];
        if (sr < 0) return;
        for (int64_t c = 0; c < n; ++c) out[colmap(c)] = (*src)[static_cast<size_t>(sr * n + c)] * scale;
      };
    };
    auto id = [](int64_t x) { return x; };
    auto q_of = [&](int64_t r) { return qdim(r / hd, r % hd); };
    auto k_of = [&](int64_t r) { return kdim(r / hd, r % hd); };
    if (real) {
      ts.push_back({b + "attn_norm.weight", {D}, DType::F32, false, norm(b + "attn_norm.weight")});
      ts.push_back({b + "attn_q.weight", {D, HH * HD}, DType::F32, true, scatter(b + "attn_q.weight", q_of, id, qscale, HH * HD)});
      ts.push_back({b + "attn_k.weight", {D, HKV * HD}, DType::F32, true, scatter(b + "attn_k.weight", k_of, id, 1.0f, HKV * HD)});
      ts.push_back({b + "attn_v.weight", {D, HKV * HD}, DType::F32, true, scatter(b + "attn_v.weight", k_of, id, 1.0f, HKV * HD)});
      ts.push_back({b + "attn_output.weight", {HH * HD, D}, DType::F32, true, scatter(b + "attn_output.weight", id, q_of, 1.0f, D)});
      ts.push_back({b + "ffn_norm.weight", {D}, DType::F32, false, norm(b + "ffn_norm.weight")});
      ts.push_back({b + "ffn_gate.weight", {D, FF}, DType::F32, true, scatter(b + "ffn_gate.weight", id, id, 1.0f, FF)});
      ts.push_back({b + "ffn_up.weight", {D, FF}, DType::F32, true, scatter(b + "ffn_up.weight", id, id, 1.0f, FF)});
      ts.push_back({b + "ffn_down.weight", {FF, D}, DType::F32, true, scatter(b + "ffn_down.weight", id, id, 1.0f, D)});
    } else {
      ts.push_back({b + "attn_norm.weight", {D}, DType::F32, false, ones});
      ts.push_back({b + "attn_q.weight", {D, HH * HD}, DType::F32, true, none});
      ts.push_back({b + "attn_k.weight", {D, HKV * HD}, DType::F32, true, none});
      ts.push_back({b + "attn_v.weight", {D, HKV * HD}, DType::F32, true, none});
      ts.push_back({b + "attn_output.weight", {HH * HD, D}, DType::F32, true, none});
      ts.push_back({b + "ffn_norm.weight", {D}, DType::F32, false, ones});
      ts.push_back({b + "ffn_gate.weight", {D, FF}, DType::F32, true, none});
      ts.push_back({b + "ffn_up.weight", {D, FF}, DType::F32, true, none});
      ts.push_back({b + "ffn_down.weight", {FF, D}, DType::F32, true, none});
    }
  }
  for (Big& t : ts) {
    if (t.matrix && is_quantizable(t.name, t.dims)) t.type = tensor_type(o.type, t.dims[0], nullptr);
    declare_tensor(w, t.name, t.dims, t.type);
  }
  w.begin();
  ThreadPool pool(o.n_threads);
  std::vector<float> buf, scales;
  for (size_t ti = 0; ti < ts.size(); ++ti) {
    const Big& t = ts[ti];
    const int64_t n = t.dims[0], rows = t.dims.size() > 1 ? t.dims[1] : 1;
    if (o.progress) o.progress(static_cast<double>(ti) / static_cast<double>(ts.size()), t.name);
    const int64_t chunk = std::max<int64_t>(1, std::min<int64_t>(rows, (int64_t(32) << 20) / (4 * n)));
    if (t.type == DType::W8A8) scales.resize(static_cast<size_t>(rows));
    for (int64_t r0 = 0; r0 < rows; r0 += chunk) {
      const int64_t r1 = std::min(rows, r0 + chunk);
      buf.assign(static_cast<size_t>((r1 - r0) * n), 0.0f);
      pool.run([&](int tid, int nth) {
        for (int64_t r = r0 + (r1 - r0) * tid / nth; r < r0 + (r1 - r0) * (tid + 1) / nth; ++r) {
          float* row = buf.data() + (r - r0) * n;
          t.fill(r, row);
          if (t.matrix && noise > 0) gaussian_row(o.seed, ti, static_cast<uint64_t>(r), noise, row, n);
        }
      });
      write_rows(w, t.type, buf.data(), r1 - r0, n, t.type == DType::W8A8 ? scales.data() + r0 : nullptr, &pool);
    }
    if (t.type == DType::W8A8) w.write(scales.data(), scales.size() * 4);
  }
  w.finish();
  if (o.progress) o.progress(1.0, "done");
  struct stat sb;
  return ::stat(path.c_str(), &sb) == 0 ? static_cast<uint64_t>(sb.st_size) : 0;
}

}  // namespace infer
