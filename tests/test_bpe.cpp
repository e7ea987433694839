// Byte-level BPE tests: llama.cpp's test vectors for every vocabulary in
// ../shared/vocab (whatever is there), and synthetic vocabularies built in
// code for merges, ignore_merges, added tokens and invalid input.
#include <dirent.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "model/gguf.h"
#include "test_util.h"
#include "tokenizer/pretokenizer.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"

using namespace infer;

namespace {

using Ids = std::vector<int32_t>;

std::string hex(std::string_view s) {
  std::string out;
  char buf[4];
  for (unsigned char c : s) {
    std::snprintf(buf, sizeof buf, "%02x", c);
    out += buf;
  }
  return out;
}

std::string ids_str(const Ids& ids) {
  std::string s;
  for (int32_t id : ids) s += " " + std::to_string(id);
  return s;
}

Status status_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.status();
  }
  return Status::Ok;
}

std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return std::string();
}

// llama.cpp's tokenizer test vectors: strings separated by
// "\n__ggml_vocab_test__\n" (also after the last), one line of ids per string.
struct Vectors {
  std::vector<std::string> inputs;
  std::vector<Ids> expected;
};

Vectors read_vectors(const std::string& inp_path, const std::string& out_path) {
  Vectors v;
  const std::string inp = infer_test::read_text(inp_path);
  const std::string sep = "\n__ggml_vocab_test__\n";
  size_t pos = 0;
  for (;;) {
    const size_t next = inp.find(sep, pos);
    if (next == std::string::npos) break;
    v.inputs.push_back(inp.substr(pos, next - pos));
    pos = next + sep.size();
  }
  const std::string out = infer_test::read_text(out_path);
  size_t line_start = 0;
  while (line_start < out.size()) {
    size_t nl = out.find('\n', line_start);
    if (nl == std::string::npos) nl = out.size();
    Ids ids;
    const std::string line = out.substr(line_start, nl - line_start);
    const char* p = line.c_str();
    char* end = nullptr;
    for (long x = std::strtol(p, &end, 10); end != p; x = std::strtol(p, &end, 10)) {
      ids.push_back(static_cast<int32_t>(x));
      p = end;
    }
    v.expected.push_back(ids);
    line_start = nl + 1;
  }
  return v;
}

// Every X.gguf in ../shared/vocab that has X.gguf.inp and X.gguf.out.
std::vector<std::string> vocab_files_with_vectors() {
  std::vector<std::string> out;
  const std::string dir = infer_test::shared_dir();
  if (dir.empty()) return out;
  DIR* d = opendir((dir + "/vocab").c_str());
  if (!d) return out;
  while (dirent* e = readdir(d)) {
    const std::string name = e->d_name;
    if (name.size() < 5 || name.compare(name.size() - 5, 5, ".gguf") != 0) continue;
    const std::string base = "vocab/" + name;
    if (!infer_test::shared_file(base + ".inp").empty() && !infer_test::shared_file(base + ".out").empty())
      out.push_back(base);
  }
  closedir(d);
  std::sort(out.begin(), out.end());
  return out;
}

const Tokenizer& shared_tokenizer(const std::string& path) {
  static std::map<std::string, std::unique_ptr<Tokenizer>> cache;
  auto& t = cache[path];
  if (!t) t = Tokenizer::create(*GgufFile::open(path));
  return *t;
}

}  // namespace

// ---- llama.cpp's vectors, for every vocabulary in ../shared/vocab ---------------

TEST_CASE("bpe: test vectors of every vocabulary in ../shared/vocab", "[tokenizer][bpe]") {
  const std::vector<std::string> files = vocab_files_with_vectors();
  if (files.empty()) {
    WARN("SKIPPED: no vocab/*.gguf with .inp/.out in the shared directory");
    return;
  }
  for (const std::string& rel : files) {
    const std::string path = infer_test::shared_file(rel);
    INFO("vocabulary " << rel);
    const Tokenizer& tok = shared_tokenizer(path);
    const Vectors v = read_vectors(path + ".inp", path + ".out");
    REQUIRE(v.inputs.size() == v.expected.size());
    REQUIRE(!v.inputs.empty());
    PreTokenizerInfo info;
    const bool bpe = tok.vocab().model == "gpt2";
    if (bpe) REQUIRE(PreTokenizer::lookup(tok.vocab().pre, &info));
    size_t failures = 0;
    for (size_t i = 0; i < v.inputs.size(); ++i) {
      const std::string& text = v.inputs[i];
      INFO("test " << i << ": '" << text << "' (" << hex(text) << ")");
      const Ids got = tok.encode(text, false);
      CHECK(ids_str(got) == ids_str(v.expected[i]));
      if (got != v.expected[i]) ++failures;
      // Round trip wherever the reference tokenizer round-trips: byte-level
      // BPE is lossless unless the vocabulary normalizes (and the text is
      // not already normal); SentencePiece's decoder removes exactly the
      // dummy prefix it added unless whitespace is squeezed.
      const bool round_trips = bpe ? normalize(text, info.normalization) == text
                                   : !tok.vocab().remove_extra_whitespaces;
      if (round_trips) {
        CHECK(tok.decode(got) == text);
        StreamDecoder sd(tok);
        std::string streamed;
        for (int32_t id : got) streamed += sd.push(id);
        streamed += sd.flush();
        CHECK(streamed == text);
      }
    }
    CHECK(failures == 0);
  }
}
