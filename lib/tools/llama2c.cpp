// llama2.c checkpoint + tokenizer.bin -> GGUF.
//
// Checkpoint (legacy format): 7 x i32 header
//   dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, seq_len
// (vocab_size < 0 means the classifier is stored separately), then f32 arrays:
//   token_embedding_table [vocab][dim]
//   rms_att_weight [layers][dim]
//   wq [layers][dim][dim]          wk [layers][kv_dim][dim]
//   wv [layers][kv_dim][dim]       wo [layers][dim][dim]
//   rms_ffn_weight [layers][dim]
//   w1 [layers][hidden][dim]       w2 [layers][dim][hidden]    w3 [layers][hidden][dim]
//   rms_final_weight [dim]
//   freq_cis_real [seq_len][head_size/2], freq_cis_imag [same]   (unused: RoPE is recomputed)
//   wcls [vocab][dim]              (only when vocab_size < 0)
// with kv_dim = dim * n_kv_heads / n_heads. Matrices are row-major [out][in],
// which is GGUF's dims {in, out}: the bytes are copied unchanged. The Q/K rows
// are already in the interleaved-pair RoPE order of GGUF's `llama` tensors.
//
// tokenizer.bin: i32 max_token_length, then per token: f32 score, i32 length,
// bytes. llama2.c's exporter writes SentencePiece's space marker U+2581 as a
// plain space and decorates BOS/EOS as "\n<s>\n" / "\n</s>\n"; both are undone
// here so the vocabulary is the SentencePiece one again.
#include "tools/llama2c.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "core/error.h"
#include "core/mmap.h"

namespace infer {

namespace {

// Special token ids: llama2.c hard-codes them (SentencePiece defaults).
constexpr int32_t kUnkId = 0, kBosId = 1, kEosId = 2;

// GGUF token types (tokenizer.ggml.token_type).
constexpr int32_t kTypeNormal = 1, kTypeUnknown = 2, kTypeControl = 3, kTypeByte = 6;

struct Config {
  int32_t dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, seq_len;
  bool shared_classifier;
  int64_t kv_dim, head_size;
};

int32_t read_i32(const uint8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

// a * b, or Error(Format) when it overflows (header values are untrusted).
uint64_t mul(uint64_t a, uint64_t b, const std::string& path) {
  uint64_t r;
  if (__builtin_mul_overflow(a, b, &r)) raise(Status::Format, "%s: header sizes overflow", path.c_str());
  return r;
}

Config read_config(const MappedFile& f) {
  const std::string& path = f.path();
  if (f.size() < 7 * 4) {
    raise(Status::Format, "%s: file of %zu bytes is too small for a llama2.c checkpoint header",
          path.c_str(), f.size());
  }
  Config c{};
  c.dim = read_i32(f.data());
  c.hidden_dim = read_i32(f.data() + 4);
  c.n_layers = read_i32(f.data() + 8);
  c.n_heads = read_i32(f.data() + 12);
  c.n_kv_heads = read_i32(f.data() + 16);
  c.vocab_size = read_i32(f.data() + 20);
  c.seq_len = read_i32(f.data() + 24);
  if (c.dim <= 0 || c.hidden_dim <= 0 || c.n_layers <= 0 || c.n_heads <= 0 || c.n_kv_heads <= 0 ||
      c.seq_len <= 0 || c.vocab_size == 0 || c.vocab_size == std::numeric_limits<int32_t>::min()) {
    raise(Status::Format,
          "%s: not a llama2.c checkpoint (header dim=%d hidden_dim=%d n_layers=%d n_heads=%d "
          "n_kv_heads=%d vocab_size=%d seq_len=%d)",
          path.c_str(), c.dim, c.hidden_dim, c.n_layers, c.n_heads, c.n_kv_heads, c.vocab_size,
          c.seq_len);
  }
  c.shared_classifier = c.vocab_size > 0;
  if (c.vocab_size < 0) c.vocab_size = -c.vocab_size;
  if (c.dim % c.n_heads != 0 || c.n_heads % c.n_kv_heads != 0 || (c.dim / c.n_heads) % 2 != 0) {
    raise(Status::Format,
          "%s: inconsistent header: dim %d, %d heads, %d KV heads (dim must split into heads of "
          "even size, heads into KV groups)",
          path.c_str(), c.dim, c.n_heads, c.n_kv_heads);
  }
  if (c.vocab_size < 3) {
    raise(Status::Format, "%s: vocab_size %d cannot hold <unk>, <s> and </s>", path.c_str(),
          c.vocab_size);
  }
  c.head_size = c.dim / c.n_heads;
  c.kv_dim = static_cast<int64_t>(c.head_size) * c.n_kv_heads;
  return c;
}

// Number of f32 values the header implies, all arrays together.
uint64_t expected_floats(const Config& c, const std::string& path) {
  const uint64_t dim = static_cast<uint64_t>(c.dim), hidden = static_cast<uint64_t>(c.hidden_dim);
  const uint64_t layers = static_cast<uint64_t>(c.n_layers), vocab = static_cast<uint64_t>(c.vocab_size);
  const uint64_t kv = static_cast<uint64_t>(c.kv_dim);
  const uint64_t per_layer_terms[] = {
      dim,                       // rms_att_weight
      mul(dim, dim, path),       // wq
      mul(dim, kv, path),        // wk
      mul(dim, kv, path),        // wv
      mul(dim, dim, path),       // wo
      dim,                       // rms_ffn_weight
      mul(hidden, dim, path),    // w1
      mul(hidden, dim, path),    // w2
      mul(hidden, dim, path),    // w3
  };
  uint64_t per_layer = 0;
  for (uint64_t t : per_layer_terms) {
    if (__builtin_add_overflow(per_layer, t, &per_layer)) raise(Status::Format, "%s: header sizes overflow", path.c_str());
  }
  const uint64_t terms[] = {
      mul(vocab, dim, path),                                              // token embedding
      mul(per_layer, layers, path),                                       // all layers
      dim,                                                                // rms_final_weight
      mul(static_cast<uint64_t>(c.seq_len), static_cast<uint64_t>(c.head_size), path),  // freq_cis
      c.shared_classifier ? 0 : mul(vocab, dim, path),                    // wcls
  };
  uint64_t total = 0;
  for (uint64_t t : terms) {
    if (__builtin_add_overflow(total, t, &total)) raise(Status::Format, "%s: header sizes overflow", path.c_str());
  }
  return total;
}

// The pieces of tokenizer.bin, converted back to SentencePiece form.
struct Vocabulary {
  std::vector<std::string> tokens;
  std::vector<float> scores;
  std::vector<int32_t> types;
};

bool is_byte_token(const std::string& s) {
  auto hex = [](char ch) { return (ch >= '0' && ch <= '9') || (ch >= 'A' && ch <= 'F'); };
  return s.size() == 6 && s.compare(0, 3, "<0x") == 0 && hex(s[3]) && hex(s[4]) && s[5] == '>';
}

Vocabulary read_tokenizer(const std::string& path, int32_t vocab_size) {
  const auto f = MappedFile::open(path);
  const uint8_t* p = f->data();
  const size_t size = f->size();
  size_t pos = 4;  // skip max_token_length: lengths are checked against the file instead
  if (size < pos) raise(Status::Format, "%s: too small for a llama2.c tokenizer", path.c_str());

  Vocabulary v;
  v.tokens.reserve(static_cast<size_t>(vocab_size));
  for (int32_t id = 0; id < vocab_size; ++id) {
    if (size - pos < 8) {
      raise(Status::Format, "%s: truncated at token %d of %d (offset %zu)", path.c_str(), id,
            vocab_size, pos);
    }
    float score;
    std::memcpy(&score, p + pos, 4);
    if (!std::isfinite(score))  // the GGUF loader would reject the converted file
      raise(Status::Format, "%s: token %d has a non-finite score (offset %zu)", path.c_str(), id, pos);
    const int32_t len = read_i32(p + pos + 4);
    pos += 8;
    if (len < 0 || static_cast<size_t>(len) > size - pos) {
      raise(Status::Format, "%s: token %d has length %d at offset %zu, past the end of the file",
            path.c_str(), id, len, pos - 4);
    }
    std::string text(reinterpret_cast<const char*>(p + pos), static_cast<size_t>(len));
    pos += static_cast<size_t>(len);

    if (text == "\n<s>\n" || text == "\n</s>\n") text = text.substr(1, text.size() - 2);
    std::string piece;
    for (char ch : text) {
      if (ch == ' ') {
        piece += "\xE2\x96\x81";  // U+2581 LOWER ONE EIGHTH BLOCK, SentencePiece's space
      } else {
        piece += ch;
      }
    }
    int32_t type = kTypeNormal;
    if (id == kUnkId) {
      type = kTypeUnknown;
    } else if (id == kBosId || id == kEosId) {
      type = kTypeControl;
    } else if (is_byte_token(piece)) {
      type = kTypeByte;
    }
    v.tokens.push_back(std::move(piece));
    v.scores.push_back(score);
    v.types.push_back(type);
  }
  if (pos != size) {
    raise(Status::Format, "%s: %zu bytes left after %d tokens (tokenizer and checkpoint vocabulary "
          "sizes differ?)", path.c_str(), size - pos, vocab_size);
  }
  return v;
}

// File name without directory and extension: "out/stories260K.bin" -> "stories260K".
std::string model_name(const std::string& path) {
  std::string name = path.substr(path.find_last_of('/') + 1);
  const size_t dot = name.find_last_of('.');
  if (dot != std::string::npos && dot > 0) name.resize(dot);
  return name;
}

}  // namespace

GgufWriter llama2c_to_gguf(const std::string& checkpoint, const std::string& tokenizer_bin) {
  const auto file = MappedFile::open(checkpoint);
  const Config c = read_config(*file);
  const uint64_t n_floats = expected_floats(c, checkpoint);
  const uint64_t weight_bytes = file->size() - 28;
  if (n_floats > weight_bytes / 4 || n_floats * 4 != weight_bytes) {
    raise(Status::Format,
          "%s: file has %zu bytes but its header (dim %d, hidden %d, %d layers, %d heads, %d KV "
          "heads, vocab %d%s, seq_len %d) implies %.0f",
          checkpoint.c_str(), file->size(), c.dim, c.hidden_dim, c.n_layers, c.n_heads,
          c.n_kv_heads, c.vocab_size, c.shared_classifier ? "" : " + classifier", c.seq_len,
          28.0 + 4.0 * static_cast<double>(n_floats));
  }
  const Vocabulary vocab = read_tokenizer(tokenizer_bin, c.vocab_size);

  GgufWriter w;
  w.set("general.architecture", GgufValue::make_string("llama"));
  w.set("general.name", GgufValue::make_string(model_name(checkpoint)));
  w.set("general.file_type", GgufValue::make_u32(0));  // all tensors F32
  w.set("llama.context_length", GgufValue::make_u32(static_cast<uint32_t>(c.seq_len)));
  w.set("llama.embedding_length", GgufValue::make_u32(static_cast<uint32_t>(c.dim)));
  w.set("llama.feed_forward_length", GgufValue::make_u32(static_cast<uint32_t>(c.hidden_dim)));
  w.set("llama.block_count", GgufValue::make_u32(static_cast<uint32_t>(c.n_layers)));
  w.set("llama.attention.head_count", GgufValue::make_u32(static_cast<uint32_t>(c.n_heads)));
  w.set("llama.attention.head_count_kv", GgufValue::make_u32(static_cast<uint32_t>(c.n_kv_heads)));
  w.set("llama.rope.dimension_count", GgufValue::make_u32(static_cast<uint32_t>(c.head_size)));
  w.set("llama.attention.layer_norm_rms_epsilon", GgufValue::make_f32(1e-5f));
  w.set("llama.rope.freq_base", GgufValue::make_f32(10000.0f));
  w.set("tokenizer.ggml.model", GgufValue::make_string("llama"));
  w.set("tokenizer.ggml.tokens", GgufValue::make_string_array(vocab.tokens));
  w.set("tokenizer.ggml.scores", GgufValue::make_f32_array(vocab.scores));
  w.set("tokenizer.ggml.token_type", GgufValue::make_i32_array(vocab.types));
  w.set("tokenizer.ggml.bos_token_id", GgufValue::make_u32(kBosId));
  w.set("tokenizer.ggml.eos_token_id", GgufValue::make_u32(kEosId));
  w.set("tokenizer.ggml.unknown_token_id", GgufValue::make_u32(kUnkId));

  // Walk the weights in file order, remembering where each array starts.
  const int64_t dim = c.dim, hidden = c.hidden_dim, kv = c.kv_dim, layers = c.n_layers;
  const uint8_t* p = file->data() + 28;
  auto take = [&p](int64_t count) {
    const uint8_t* at = p;
    p += count * 4;
    return at;
  };
  const uint8_t* tok_embd = take(c.vocab_size * dim);
  const uint8_t* rms_att = take(layers * dim);
  const uint8_t* wq = take(layers * dim * dim);
  const uint8_t* wk = take(layers * kv * dim);
  const uint8_t* wv = take(layers * kv * dim);
  const uint8_t* wo = take(layers * dim * dim);
  const uint8_t* rms_ffn = take(layers * dim);
  const uint8_t* w1 = take(layers * hidden * dim);
  const uint8_t* w2 = take(layers * dim * hidden);
  const uint8_t* w3 = take(layers * hidden * dim);
  const uint8_t* rms_final = take(dim);
  take(static_cast<int64_t>(c.seq_len) * c.head_size);  // freq_cis_real + freq_cis_imag
  const uint8_t* wcls = c.shared_classifier ? tok_embd : take(c.vocab_size * dim);

  // Adds an F32 tensor with GGUF dims {in, out} (or {n} for a vector).
  auto add = [&w](const std::string& name, std::vector<int64_t> dims, const uint8_t* data) {
    int64_t n = 1;
    for (int64_t d : dims) n *= d;
    w.add_tensor(name, dims, DType::F32, data, static_cast<size_t>(n) * 4);
  };
  // Tensor order as in llama.cpp's conversion of the same models.
  add("token_embd.weight", {dim, c.vocab_size}, tok_embd);
  add("output_norm.weight", {dim}, rms_final);
  add("output.weight", {dim, c.vocab_size}, wcls);
  for (int64_t l = 0; l < layers; ++l) {
    const std::string blk = "blk." + std::to_string(l) + ".";
    add(blk + "attn_q.weight", {dim, dim}, wq + l * dim * dim * 4);
    add(blk + "attn_k.weight", {dim, kv}, wk + l * kv * dim * 4);
    add(blk + "attn_v.weight", {dim, kv}, wv + l * kv * dim * 4);
    add(blk + "attn_output.weight", {dim, dim}, wo + l * dim * dim * 4);
    add(blk + "attn_norm.weight", {dim}, rms_att + l * dim * 4);
    add(blk + "ffn_gate.weight", {dim, hidden}, w1 + l * hidden * dim * 4);
    add(blk + "ffn_down.weight", {hidden, dim}, w2 + l * dim * hidden * 4);
    add(blk + "ffn_up.weight", {dim, hidden}, w3 + l * hidden * dim * 4);
    add(blk + "ffn_norm.weight", {dim}, rms_ffn + l * dim * 4);
  }
  return w;
}

void convert_llama2c(const std::string& checkpoint, const std::string& tokenizer_bin,
                     const std::string& out_gguf) {
  llama2c_to_gguf(checkpoint, tokenizer_bin).write(out_gguf);
}

}  // namespace infer
