// Tokenizer throughput: MB/s of encode (SPM and byte-level BPE), of the BPE
// pre-tokenizer (PCRE2 JIT regexes) alone, and of decode, on ~4 MiB of
// mixed text: English prose, multilingual text with emoji, whitespace runs
// and numbers, and C++ source code, shuffled deterministically.
//
// Vocabularies come from ../shared/vocab (INFER_SHARED_DIR overrides); a
// benchmark whose file is missing reports an error and is skipped.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "gguf/gguf.h"
#include "tokenizer/pretokenizer.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"

using namespace infer;

namespace {

std::string shared_dir() {
  if (const char* env = std::getenv("INFER_SHARED_DIR"); env && *env) return env;
  std::string src = __FILE__;  // <checkout>/bench/bench_tokenizer.cpp
  src = src.substr(0, src.find_last_of('/'));
  src = src.substr(0, src.find_last_of('/'));
  return src + "/../shared";
}

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// ~4 MiB of paragraphs drawn from the sources below, with random numbers
// mixed in so the text does not repeat exactly.
const std::string& mixed_text() {
  static const std::string text = [] {
    std::vector<std::string> paras;
    auto add_paragraphs = [&](const std::string& s, const std::string& sep) {
      size_t pos = 0;
      while (pos < s.size()) {
        size_t next = s.find(sep, pos);
        if (next == std::string::npos) next = s.size();
        if (next > pos) paras.push_back(s.substr(pos, next - pos));
        pos = next + sep.size();
      }
    };
    const std::string dir = shared_dir();
    add_paragraphs(read_file(dir + "/text/stories-eval.txt"), "\n\n");
    add_paragraphs(read_file(dir + "/text/stories-calib.txt"), "\n\n");
    add_paragraphs(read_file(dir + "/vocab/ggml-vocab-llama-spm.gguf.inp"), "\n__ggml_vocab_test__\n");
    add_paragraphs(read_file(__FILE__), "\n\n");  // code
    if (paras.empty()) paras.push_back("The quick brown fox jumps over the lazy dog.");
    std::mt19937 rng(1234);
    std::string out;
    while (out.size() < (4u << 20)) {
      out += paras[rng() % paras.size()];
      out += rng() % 4 == 0 ? "\n\n" : "\n";
      if (rng() % 3 == 0) out += std::to_string(rng() % 100000) + " ";
    }
    return out;
  }();
  return text;
}

const Tokenizer* tokenizer(const std::string& vocab) {
  static std::map<std::string, std::unique_ptr<Tokenizer>> cache;
  auto& t = cache[vocab];
  if (!t) {
    const std::string path = shared_dir() + "/vocab/" + vocab;
    if (!std::ifstream(path)) return nullptr;
    t = Tokenizer::create(*GgufFile::open(path));
  }
  return t.get();
}

void BM_Encode(benchmark::State& state, const char* vocab) {
  const Tokenizer* tok = tokenizer(vocab);
  if (!tok) {
    state.SkipWithError("vocabulary not found in the shared directory");
    return;
  }
  const std::string& text = mixed_text();
  size_t n_tokens = 0;
  for (auto _ : state) {
    std::vector<int32_t> ids = tok->encode(text, false);
    n_tokens = ids.size();
    benchmark::DoNotOptimize(ids.data());
  }
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(text.size()));
  state.counters["tokens"] = static_cast<double>(n_tokens);
  state.counters["bytes/token"] = static_cast<double>(text.size()) / static_cast<double>(n_tokens);
}
BENCHMARK_CAPTURE(BM_Encode, spm_llama, "ggml-vocab-llama-spm.gguf")->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Encode, bpe_gpt2, "ggml-vocab-gpt-2.gguf")->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Encode, bpe_falcon, "ggml-vocab-falcon.gguf")->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Encode, bpe_deepseek_llm, "ggml-vocab-deepseek-llm.gguf")->Unit(benchmark::kMillisecond);

// The same text as prompt-sized calls (about 2 KiB each, cut at newlines):
// no word cache (it starts at 4 KiB), so this is the per-word cost. The mixed
// text repeats its paragraphs, which flatters the cache of BM_Encode.
void BM_EncodePrompts(benchmark::State& state, const char* vocab) {
  const Tokenizer* tok = tokenizer(vocab);
  if (!tok) {
    state.SkipWithError("vocabulary not found in the shared directory");
    return;
  }
  const std::string& text = mixed_text();
  std::vector<std::string_view> prompts;
  for (size_t pos = 0; pos < text.size();) {
    size_t end = text.find('\n', std::min(text.size(), pos + 2048));
    end = end == std::string::npos ? text.size() : std::min(end + 1, pos + 4000);
    prompts.push_back(std::string_view(text).substr(pos, end - pos));
    pos = end;
  }
  for (auto _ : state) {
    for (std::string_view p : prompts) {
      std::vector<int32_t> ids = tok->encode(p, false);
      benchmark::DoNotOptimize(ids.data());
    }
  }
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(text.size()));
  state.counters["calls"] = static_cast<double>(prompts.size());
}
BENCHMARK_CAPTURE(BM_EncodePrompts, spm_llama, "ggml-vocab-llama-spm.gguf")->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_EncodePrompts, bpe_gpt2, "ggml-vocab-gpt-2.gguf")->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_EncodePrompts, bpe_falcon, "ggml-vocab-falcon.gguf")->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_EncodePrompts, bpe_deepseek_llm, "ggml-vocab-deepseek-llm.gguf")->Unit(benchmark::kMillisecond);

// The pre-tokenizer alone: the share of BPE time spent in PCRE2.
void BM_PreTokenize(benchmark::State& state, const char* pre, bool jit) {
  const auto p = PreTokenizer::create(pre, jit);
  const std::string& text = mixed_text();
  std::vector<PreTokenizer::Span> spans;
  for (auto _ : state) {
    p->split(text, spans);
    benchmark::DoNotOptimize(spans.data());
  }
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(text.size()));
  state.counters["pieces"] = static_cast<double>(spans.size());
}
BENCHMARK_CAPTURE(BM_PreTokenize, gpt2, "gpt-2", true)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_PreTokenize, llama3, "llama-bpe", true)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_PreTokenize, qwen2, "qwen2", true)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_PreTokenize, falcon, "falcon", true)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_PreTokenize, deepseek_llm, "deepseek-llm", true)->Unit(benchmark::kMillisecond);
// The same without PCRE2's JIT (interpreted matching).
BENCHMARK_CAPTURE(BM_PreTokenize, gpt2_nojit, "gpt-2", false)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_PreTokenize, llama3_nojit, "llama-bpe", false)->Unit(benchmark::kMillisecond);

// NFC normalization (Qwen2, GPT-NeoX and Command-R vocabularies) through
// utf8proc; ASCII and text below U+0300 take the fast path.
void BM_NormalizeNFC(benchmark::State& state) {
  const std::string& text = mixed_text();
  for (auto _ : state) {
    std::string s = normalize(text, Normalization::NFC);
    benchmark::DoNotOptimize(s.data());
  }
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(text.size()));
}
BENCHMARK(BM_NormalizeNFC)->Unit(benchmark::kMillisecond);

void BM_Decode(benchmark::State& state, const char* vocab) {
  const Tokenizer* tok = tokenizer(vocab);
  if (!tok) {
    state.SkipWithError("vocabulary not found in the shared directory");
    return;
  }
  const std::string& text = mixed_text();
  const std::vector<int32_t> ids = tok->encode(text, false);
  for (auto _ : state) {
    std::string s = tok->decode(ids);
    benchmark::DoNotOptimize(s.data());
  }
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(text.size()));
}
BENCHMARK_CAPTURE(BM_Decode, spm_llama, "ggml-vocab-llama-spm.gguf")->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Decode, bpe_gpt2, "ggml-vocab-gpt-2.gguf")->Unit(benchmark::kMillisecond);

}  // namespace
