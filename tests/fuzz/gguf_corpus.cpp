// Writes the libFuzzer seed corpus of fuzz_gguf (the files of tests/fuzz/corpus)
// from code, into the directory given on the command line:
//   build/tests/gguf_fuzz_corpus tests/fuzz/corpus
// Not a test (CTest does not run it); it was the "[.fuzz-corpus]" case of
// infer_tests, which wrote into the source tree.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "gguf_sample.h"

using namespace infer_test;

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s DIR  (writes the GGUF fuzz seed corpus into DIR)\n", argv[0]);
    return 2;
  }
  const std::filesystem::path dir = argv[1];
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) {
    std::fprintf(stderr, "cannot create %s: %s\n", dir.string().c_str(), ec.message().c_str());
    return 1;
  }
  bool ok = true;
  auto save = [&](const std::string& name, const std::vector<uint8_t>& b) {
    std::ofstream out(dir / name, std::ios::binary);
    out.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
    if (!out) {
      std::fprintf(stderr, "cannot write %s\n", (dir / name).string().c_str());
      ok = false;
    }
  };
  save("sample-v3.gguf", sample_writer(3).to_bytes());
  save("sample-v2.gguf", sample_writer(2).to_bytes());
  GgufWriter vocab;
  vocab.set("tokenizer.ggml.model", GgufValue::make_string("llama"));
  vocab.set("tokenizer.ggml.tokens", GgufValue::make_string_array({"<unk>", "<s>", "</s>", "\xE2\x96\x81" "a"}));
  vocab.set("tokenizer.ggml.scores", GgufValue::make_f32_array({0, 0, 0, -1}));
  vocab.set("tokenizer.ggml.token_type", GgufValue::make_i32_array({2, 3, 3, 1}));
  save("vocab-only.gguf", vocab.to_bytes());
  GgufWriter aligned;
  aligned.set("general.alignment", GgufValue::make_u32(64));
  const auto q = pattern_bytes(144 + 176, 5);
  aligned.add_tensor("q4k", {256}, DType::Q4_K, q.data(), 144);
  aligned.add_tensor("q5k", {256}, DType::Q5_K, q.data(), 176);
  save("align64-kquants.gguf", aligned.to_bytes());
  return ok ? 0 : 1;
}
