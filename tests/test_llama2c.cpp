// llama2.c checkpoint import: a synthetic checkpoint with known contents, the
// real stories260K (compared tensor by tensor with llama.cpp's GGUF of the
// same model), stories-xs, and broken inputs.
#include <climits>
#include <cstring>
#include <fstream>

#include "core/error.h"
#include "gguf/gguf.h"
#include "tools/llama2c.h"
#include "test_util.h"

using namespace infer;

namespace {

void write_bytes(const std::string& path, const std::vector<uint8_t>& b) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
  out.close();
  REQUIRE(out.good());
}

template <typename T>
void append(std::vector<uint8_t>& b, T v) {
  const auto* p = reinterpret_cast<const uint8_t*>(&v);
  b.insert(b.end(), p, p + sizeof(T));
}

std::unique_ptr<GgufFile> convert(const std::string& ckpt, const std::string& tok,
                                  std::vector<uint8_t>& storage) {
  storage = llama2c_to_gguf(ckpt, tok).to_bytes();
  return GgufFile::from_memory(storage.data(), storage.size());
}

Status convert_status(const std::string& ckpt, const std::string& tok, std::string* msg = nullptr) {
  try {
    llama2c_to_gguf(ckpt, tok);
  } catch (const Error& e) {
    if (msg) *msg = e.what();
    return e.status();
  }
  return Status::Ok;
}

std::vector<float> floats(const GgufFile& f, const std::string& name) {
  const GgufTensorInfo* t = f.find_tensor(name);
  REQUIRE(t);
  REQUIRE(t->type == DType::F32);
  std::vector<float> v(t->nbytes / 4);
  std::memcpy(v.data(), f.tensor_data(*t), t->nbytes);
  return v;
}

// A tiny checkpoint: dim 4, hidden 6, 2 layers, 2 heads, 1 KV head, vocab 5,
// seq_len 3, separate classifier. Float k of the weights has the value k, so
// every tensor's first value tells where it was taken from.
struct Synthetic {
  std::string ckpt, tok;
};

Synthetic make_synthetic(const std::string& dir) {
  const int32_t dim = 4, hidden = 6, layers = 2, heads = 2, kv_heads = 1, vocab = 5, seq = 3;
  std::vector<uint8_t> c;
  for (int32_t v : {dim, hidden, layers, heads, kv_heads, -vocab, seq}) append(c, v);
  const int kv_dim = dim * kv_heads / heads, head_size = dim / heads;
  const int n = vocab * dim + layers * (2 * dim + 2 * dim * dim + 2 * dim * kv_dim + 3 * dim * hidden) +
                dim + seq * head_size + vocab * dim;
  for (int k = 0; k < n; ++k) append(c, static_cast<float>(k));
  Synthetic s{dir + "/synthetic.bin", dir + "/synthetic-tok.bin"};
  write_bytes(s.ckpt, c);

  std::vector<uint8_t> t;
  append<int32_t>(t, 12);
  const std::pair<const char*, float> tokens[] = {
      {"<unk>", 0.0f}, {"\n<s>\n", 0.0f}, {"\n</s>\n", 0.0f}, {"<0x0A>", 0.0f}, {" hello world", -1.5f}};
  for (const auto& [text, score] : tokens) {
    append(t, score);
    append<int32_t>(t, static_cast<int32_t>(std::strlen(text)));
    t.insert(t.end(), text, text + std::strlen(text));
  }
  write_bytes(s.tok, t);
  return s;
}

}  // namespace

TEST_CASE("llama2c: synthetic checkpoint maps every array to its tensor", "[llama2c]") {
  const Synthetic s = make_synthetic(infer_test::temp_dir());
  std::vector<uint8_t> bytes;
  const auto f = convert(s.ckpt, s.tok, bytes);

  CHECK(f->get_string("general.architecture") == "llama");
  CHECK(f->get_string("general.name") == "synthetic");
  CHECK(f->get_int("llama.context_length") == 3);
  CHECK(f->get_int("llama.embedding_length") == 4);
  CHECK(f->get_int("llama.feed_forward_length") == 6);
  CHECK(f->get_int("llama.block_count") == 2);
  CHECK(f->get_int("llama.attention.head_count") == 2);
  CHECK(f->get_int("llama.attention.head_count_kv") == 1);
  CHECK(f->get_int("llama.rope.dimension_count") == 2);
  CHECK(f->get_float("llama.attention.layer_norm_rms_epsilon") == static_cast<double>(1e-5f));
  CHECK(f->get_float("llama.rope.freq_base") == 10000.0);
  CHECK(f->get_string("tokenizer.ggml.model") == "llama");
  CHECK(f->get_string_array("tokenizer.ggml.tokens") ==
        std::vector<std::string>{"<unk>", "<s>", "</s>", "<0x0A>", "\xE2\x96\x81hello\xE2\x96\x81world"});
  CHECK(f->get_f32_array("tokenizer.ggml.scores") == std::vector<float>{0, 0, 0, 0, -1.5f});
  CHECK(f->get_int_array("tokenizer.ggml.token_type") == std::vector<int64_t>{2, 3, 3, 6, 1});
  CHECK(f->get_int("tokenizer.ggml.bos_token_id") == 1);
  CHECK(f->get_int("tokenizer.ggml.eos_token_id") == 2);
  CHECK(f->get_int("tokenizer.ggml.unknown_token_id") == 0);

  REQUIRE(f->tensors().size() == 3 + 2 * 9);
  // Offsets (in floats) of each array in the file, following llama2.c's order.
  const int emb = 0, rms_att = 20, wq = 28, wk = 60, wv = 76, wo = 92, rms_ffn = 124, w1 = 132,
            w2 = 180, w3 = 228, rms_final = 276, wcls = 276 + 4 + 6;
  struct Expect {
    std::string name;
    std::vector<int64_t> dims;
    int first;
  };
  const Expect expect[] = {
      {"token_embd.weight", {4, 5}, emb},
      {"output_norm.weight", {4}, rms_final},
      {"output.weight", {4, 5}, wcls},
      {"blk.0.attn_norm.weight", {4}, rms_att},
      {"blk.1.attn_norm.weight", {4}, rms_att + 4},
      {"blk.0.attn_q.weight", {4, 4}, wq},
      {"blk.1.attn_q.weight", {4, 4}, wq + 16},
      {"blk.0.attn_k.weight", {4, 2}, wk},
      {"blk.1.attn_k.weight", {4, 2}, wk + 8},
      {"blk.1.attn_v.weight", {4, 2}, wv + 8},
      {"blk.1.attn_output.weight", {4, 4}, wo + 16},
      {"blk.1.ffn_norm.weight", {4}, rms_ffn + 4},
      {"blk.1.ffn_gate.weight", {4, 6}, w1 + 24},
      {"blk.1.ffn_down.weight", {6, 4}, w2 + 24},
      {"blk.1.ffn_up.weight", {4, 6}, w3 + 24},
  };
  for (const Expect& e : expect) {
    INFO(e.name);
    const GgufTensorInfo* t = f->find_tensor(e.name);
    REQUIRE(t);
    CHECK(t->dims == e.dims);
    const auto v = floats(*f, e.name);
    for (size_t k = 0; k < v.size(); ++k) REQUIRE(v[k] == static_cast<float>(e.first + static_cast<int>(k)));
  }

  // The file-writing entry point produces the same bytes.
  const std::string out = infer_test::temp_dir() + "/synthetic.gguf";
  convert_llama2c(s.ckpt, s.tok, out);
  CHECK(infer_test::read_file(out) == bytes);
}

TEST_CASE("llama2c: stories260K converts to exactly llama.cpp's tensors and vocabulary", "[llama2c]") {
  REQUIRE_SHARED(ckpt, "models/stories260K.bin");
  REQUIRE_SHARED(tok, "models/tok512.bin");
  REQUIRE_SHARED(ref_path, "models/stories260K.gguf");
  std::vector<uint8_t> bytes;
  const auto f = convert(ckpt, tok, bytes);
  const auto ref = GgufFile::open(ref_path);

  REQUIRE(f->tensors().size() == ref->tensors().size());
  for (size_t i = 0; i < ref->tensors().size(); ++i) {
    const GgufTensorInfo& r = ref->tensors()[i];
    INFO(r.name);
    CHECK(f->tensors()[i].name == r.name);  // same order as well
    const GgufTensorInfo* t = f->find_tensor(r.name);
    REQUIRE(t);
    CHECK(t->dims == r.dims);
    CHECK(t->type == r.type);
    REQUIRE(t->nbytes == r.nbytes);
    CHECK(std::memcmp(f->tensor_data(*t), ref->tensor_data(r), r.nbytes) == 0);
  }

  for (const char* key : {"llama.embedding_length", "llama.feed_forward_length", "llama.block_count",
                          "llama.attention.head_count", "llama.attention.head_count_kv",
                          "llama.rope.dimension_count", "llama.attention.layer_norm_rms_epsilon",
                          "general.architecture", "tokenizer.ggml.model", "tokenizer.ggml.tokens",
                          "tokenizer.ggml.scores", "tokenizer.ggml.token_type",
                          "tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id",
                          "tokenizer.ggml.unknown_token_id"}) {
    INFO(key);
    REQUIRE(f->find(key));
    REQUIRE(ref->find(key));
    CHECK(*f->find(key) == *ref->find(key));  // exact: types, strings, float bits
  }
  // The checkpoint knows the training context (512); llama.cpp's file says 2048.
  CHECK(f->get_int("llama.context_length") == 512);
}

TEST_CASE("llama2c: stories-xs (shared classifier)", "[llama2c]") {
  REQUIRE_SHARED(ckpt, "models/stories-xs.bin");
  REQUIRE_SHARED(tok, "models/tok512.bin");
  std::vector<uint8_t> bytes;
  const auto f = convert(ckpt, tok, bytes);
  CHECK(f->tensors().size() == 48);
  CHECK(f->get_int("llama.context_length") == 256);
  CHECK(f->get_int("llama.feed_forward_length") == 192);
  CHECK(f->get_int("llama.attention.head_count_kv") == 4);
  CHECK(f->find_tensor("token_embd.weight")->dims == std::vector<int64_t>{64, 512});
  CHECK(f->find_tensor("blk.4.attn_k.weight")->dims == std::vector<int64_t>{64, 32});
  CHECK(f->find_tensor("blk.4.ffn_gate.weight")->dims == std::vector<int64_t>{64, 192});
  CHECK(f->find_tensor("blk.4.ffn_down.weight")->dims == std::vector<int64_t>{192, 64});
  CHECK(floats(*f, "output.weight") == floats(*f, "token_embd.weight"));
}

TEST_CASE("llama2c: broken checkpoints and tokenizers are Format errors", "[llama2c]") {
  const std::string dir = infer_test::temp_dir();
  const Synthetic s = make_synthetic(dir);
  const auto ckpt = infer_test::read_file(s.ckpt);
  const auto tok = infer_test::read_file(s.tok);
  const std::string bad = dir + "/bad.bin";

  auto ckpt_status = [&](const std::vector<uint8_t>& b, std::string* msg = nullptr) {
    write_bytes(bad, b);
    return convert_status(bad, s.tok, msg);
  };
  auto tok_status = [&](const std::vector<uint8_t>& b) {
    write_bytes(bad, b);
    return convert_status(s.ckpt, bad);
  };
  REQUIRE(convert_status(s.ckpt, s.tok) == Status::Ok);

  // Every truncation of the checkpoint, and one byte too many.
  for (size_t len = 0; len < ckpt.size(); ++len) {
    INFO("length " << len);
    REQUIRE(ckpt_status(std::vector<uint8_t>(ckpt.begin(), ckpt.begin() + static_cast<long>(len))) ==
            Status::Format);
  }
  auto longer = ckpt;
  longer.push_back(0);
  std::string msg;
  CHECK(ckpt_status(longer, &msg) == Status::Format);
  CHECK(msg.find("implies") != std::string::npos);

  // Absurd or inconsistent header values, field by field.
  auto with_header = [&](int field, int32_t value) {
    auto b = ckpt;
    std::memcpy(b.data() + 4 * field, &value, 4);
    return ckpt_status(b);
  };
  for (int field = 0; field < 7; ++field) {
    INFO("field " << field);
    CHECK(with_header(field, 0) == Status::Format);
    CHECK(with_header(field, INT32_MAX) == Status::Format);
    CHECK(with_header(field, INT32_MIN) == Status::Format);
    if (field != 5) CHECK(with_header(field, -4) == Status::Format);
  }
  CHECK(with_header(5, 5) == Status::Format);   // shared classifier: 20 floats too many
  CHECK(with_header(3, 3) == Status::Format);   // 4 not divisible into 3 heads
  CHECK(with_header(3, 4) == Status::Format);   // head size 1 is odd
  CHECK(with_header(4, 3) == Status::Format);   // 2 heads, 3 KV heads
  CHECK(with_header(5, -2) == Status::Format);  // vocabulary too small

  // Tokenizer: every truncation, trailing bytes, negative / huge lengths.
  for (size_t len = 0; len < tok.size(); ++len) {
    INFO("length " << len);
    REQUIRE(tok_status(std::vector<uint8_t>(tok.begin(), tok.begin() + static_cast<long>(len))) ==
            Status::Format);
  }
  auto t = tok;
  t.push_back('x');
  CHECK(tok_status(t) == Status::Format);
  for (int32_t len : {-1, INT32_MIN, INT32_MAX, 1000}) {
    t = tok;
    std::memcpy(t.data() + 4 + 4, &len, 4);  // length of token 0
    CHECK(tok_status(t) == Status::Format);
  }

  CHECK(convert_status(dir + "/missing.bin", s.tok) == Status::Io);
  CHECK(convert_status(s.ckpt, dir + "/missing-tok.bin") == Status::Io);
}

TEST_CASE("llama2c: stories260K with a flipped classifier flag is refused", "[llama2c]") {
  REQUIRE_SHARED(ckpt, "models/stories260K.bin");
  REQUIRE_SHARED(tok, "models/tok512.bin");
  auto b = infer_test::read_file(ckpt);
  const int32_t vocab = -512;  // claims a separate classifier the file does not have
  std::memcpy(b.data() + 20, &vocab, 4);
  const std::string bad = infer_test::temp_dir() + "/stories-bad.bin";
  write_bytes(bad, b);
  std::string msg;
  CHECK(convert_status(bad, tok, &msg) == Status::Format);
  CHECK(msg.find("stories-bad.bin") != std::string::npos);
}
