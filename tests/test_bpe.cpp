// Byte-level BPE tests: llama.cpp's test vectors for every vocabulary in
// ../shared/vocab (whatever is there), and synthetic vocabularies built in
// code for merges, ignore_merges, added tokens and invalid input.
#include <dirent.h>
#include <utf8proc.h>

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
#include "gguf/gguf.h"
#include "infer/infer.h"
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

TEST_CASE("bpe: test vectors through the C API (vocabulary-only loads)", "[tokenizer][bpe][c_api]") {
  const std::vector<std::string> files = vocab_files_with_vectors();
  if (files.empty()) {
    WARN("SKIPPED: no vocab/*.gguf with .inp/.out in the shared directory");
    return;
  }
  for (const std::string& rel : files) {
    const std::string path = infer_test::shared_file(rel);
    INFO("vocabulary " << rel);
    infer_model_params mp;
    infer_model_params_init(&mp);
    mp.vocab_only = 1;
    infer_model* model = nullptr;
    REQUIRE(infer_model_load(path.c_str(), &mp, &model) == INFER_OK);
    const Vectors v = read_vectors(path + ".inp", path + ".out");
    for (size_t i = 0; i < v.inputs.size(); ++i) {
      const std::string& text = v.inputs[i];
      INFO("test " << i << ": '" << text << "'");
      size_t n = 0;
      infer_status st = infer_tokenize(model, text.data(), text.size(), 0, 0, nullptr, 0, &n);
      REQUIRE((st == INFER_OK || st == INFER_ERR_BUFFER_TOO_SMALL));
      Ids ids(n);
      REQUIRE(infer_tokenize(model, text.data(), text.size(), 0, 0, ids.data(), ids.size(), &n) == INFER_OK);
      CHECK(ids_str(ids) == ids_str(v.expected[i]));
      size_t need = 0;
      infer_detokenize(model, ids.data(), ids.size(), 0, nullptr, 0, &need);
      std::string back(need, '\0');
      REQUIRE(infer_detokenize(model, ids.data(), ids.size(), 0, back.data(), back.size(), &need) == INFER_OK);
      back.resize(need - 1);
      // Where the reference round-trips (see the test above); an embedded
      // NUL would end the C string early.
      const Tokenizer& tok = shared_tokenizer(path);
      PreTokenizerInfo info;
      const bool round_trips = tok.vocab().model == "gpt2"
                                   ? PreTokenizer::lookup(tok.vocab().pre, &info) &&
                                         normalize(text, info.normalization) == text
                                   : !tok.vocab().remove_extra_whitespaces;
      if (round_trips && text.find('\0') == std::string::npos) CHECK(back == text);
    }
    infer_model_free(model);
  }
}

// ---- pre-tokenizers ------------------------------------------------------------------

namespace {

std::vector<std::string> pieces(const PreTokenizer& pre, std::string_view text) {
  std::vector<PreTokenizer::Span> spans;
  pre.split(text, spans);
  std::vector<std::string> out;
  for (const auto& s : spans) out.emplace_back(text.substr(s.first, s.second));
  return out;
}

}  // namespace

// Expected pieces: each family's published regexes applied in sequence with
// "isolated" splitting, as computed independently with Perl's regex engine
// (whose \s is Unicode White_Space) and checked by hand.
TEST_CASE("bpe: pre-tokenizer families split tricky text as published", "[tokenizer][bpe]") {
  struct Case {
    const char* pre;
    std::string text;
    std::vector<std::string> want;
  };
  const std::vector<Case> cases = {
      {"gpt-2", "Hello, y'all!  How're\n\n you?",
       {"Hello", ",", " y", "'", "all", "!", " ", " How", "'re", "\n\n", " you", "?"}},
      {"gpt-2", "a  \t b   \nc 1234567 ½",
       {"a", "  \t", " b", "   ", "\n", "c", " 1234567", " ½"}},
      {"llama-bpe", "I'M HE'S it's x'S'",
       {"I", "'M", " HE", "'S", " it", "'s", " x", "'S", "'"}},
      {"llama-bpe", "1234567 a\n\n  b ?!x\r\n",
       {"123", "456", "7", " a", "\n\n", " ", " b", " ?!", "x", "\r\n"}},
      {"llama-bpe", "  leading\tand trailing  ",
       {" ", " leading", "\tand", " trailing", "  "}},
      {"qwen2", "12345 x'RE\n\ny",
       {"1", "2", "3", "4", "5", " x", "'RE", "\n\n", "y"}},
      {"default", "a...b!!! 1234567 ($x+y)",
       {"a", "...", "b", "!!!", " ", "123", "456", "7", " ", "($", "x", "+", "y", ")"}},
      {"falcon", "a...b!!! 1234567 ($x+y)`z`",
       {"a", "...", "b", "!!!", " ", "123", "456", "7", " ", "($", "x", "+", "y", ")`", "z", "`"}},
      {"starcoder", "x12 345 foo(1)",
       {"x", "1", "2", " ", "3", "4", "5", " foo", "(", "1", ")"}},
      {"deepseek-llm", "Hello, 世界! 123 Ωmega  \nend  ",
       {"Hello", ",", " ", "世界", "!", " ", "123", " Ω", "mega", "  ", "\n", "end", "  "}},
      {"deepseek-coder", "def f(x):\n    return x+1  # 世界",
       {"def", " f", "(", "x", "):", "\n", "   ", " return", " x", "+", "1", " ", " #", " ", "世界"}},
      {"deepseek-v3", "12345 こんにちは世界 .Net x+=1; Hello!!\n\n",
       {"123", "45", " ", "こんにちは世界", " .", "Net", " x", "+=", "1", ";", " Hello", "!!\n\n"}},
      {"bloom", "Hello, world. Ok!? a|b (c)",
       {"Hello", ",", " world", ".", " Ok", "!?", " a", "|", "b", " (", "c", ")"}},
      {"viking", "Year 2024, ok.",
       {"Year", " ", "2", "0", "2", "4", ",", " ok", "."}},
      {"tekken", "CamelCaseWORD HTTPServer 123 a/b//\n",
       {"Camel", "Case", "WORD", " HTTPServer", " ", "1", "2", "3", " a", "/b", "//\n"}},
      {"gpt-4o", "CamelCaseWORD it's 12345 HE'LL",
       {"Camel", "Case", "WORD", " it's", " ", "123", "45", " HE'LL"}},
      {"chameleon", "<sentinel:3>IMGIMGABZ 12 a,b  c    d\te",
       {"<", "sentinel", ":", "3", ">", "IMGIMGABZ", " ", "1", "2", " a", ",", "b", "  ", "c", "    ", "d", "\t", "e"}},
  };
  for (const Case& c : cases) {
    INFO(c.pre << ": '" << c.text << "'");
    const auto pre = PreTokenizer::create(c.pre);
    CHECK(pieces(*pre, c.text) == c.want);
  }
}

TEST_CASE("bpe: pre-tokenizer names, aliases and refusals", "[tokenizer][bpe]") {
  // Every name the issue lists resolves (with llama.cpp's spellings too).
  for (const char* name :
       {"default", "llama-bpe", "llama3", "qwen2", "gpt-2", "falcon", "starcoder", "refact", "mpt",
        "deepseek-llm", "deepseek-coder", "command-r", "olmo", "dbrx", "smaug-bpe", "smaug", "poro-chat", "poro",
        "chatglm-bpe", "chatglm4", "viking", "jais", "tekken", "smollm", "codeshell", "bloom", "gpt3-finnish",
        "exaone", "chameleon", "minerva-7b", "minerva", "deepseek-v3", "gpt-4o", "llama4"}) {
    INFO(name);
    CHECK(status_of([&] { PreTokenizer::create(name); }) == Status::Ok);
  }
  for (const std::string& name : PreTokenizer::names()) {
    INFO(name);
    CHECK(PreTokenizer::lookup(name, nullptr));
  }
  // Unknown values are refused by name, never replaced by a default.
  CHECK(status_of([] { PreTokenizer::create("seed-coder"); }) == Status::Unsupported);
  CHECK(message_of([] { PreTokenizer::create("seed-coder"); }).find("'seed-coder'") != std::string::npos);
  // An absent key (files written before it existed) is llama.cpp's "default".
  PreTokenizerInfo info;
  REQUIRE(PreTokenizer::lookup("", &info));
  CHECK(info.family == "default");
  // Family facts.
  REQUIRE(PreTokenizer::lookup("llama-bpe", &info));
  CHECK(info.ignore_merges);
  CHECK(info.add_bos);
  REQUIRE(PreTokenizer::lookup("qwen2", &info));
  CHECK(info.normalization == Normalization::NFC);
  CHECK(!info.ignore_merges);
  REQUIRE(PreTokenizer::lookup("gpt-2", &info));
  CHECK(info.normalization == Normalization::None);
}

TEST_CASE("bpe: pre-tokenizers cover every byte, whatever the input", "[tokenizer][bpe]") {
  std::mt19937 rng(7);
  const std::vector<std::string> alphabet = {"a", "Z", " ", "  ", "\n", "\r\n", "\t", "1", "23", "'s", "'",
                                             "!", "...", "\xC3\xA9", "\xE4\xB8\x96", "\xF0\x9F\xA6\x99",
                                             "\xE2\x80\x83", "\xC2\xA0", "\xFF", "\xC3", "\xED\xA0\x80", "\x80"};
  for (const std::string& name : PreTokenizer::names()) {
    const auto pre = PreTokenizer::create(name);
    for (int iter = 0; iter < 50; ++iter) {
      std::string text;
      const int n = static_cast<int>(rng() % 40);
      for (int i = 0; i < n; ++i) text += alphabet[rng() % alphabet.size()];
      std::vector<PreTokenizer::Span> spans;
      pre->split(text, spans);
      uint32_t pos = 0;
      bool ok = true;
      for (const auto& s : spans) {
        ok = ok && s.first == pos && s.second > 0;
        pos = s.first + s.second;
      }
      INFO(name << ": " << hex(text));
      CHECK(ok);
      CHECK(pos == text.size());
    }
  }
}

// ---- byte-level BPE on vocabularies built in code ---------------------------------------

namespace {

// A byte-level vocabulary: the 256 byte characters, then `extra` tokens
// (each a merge result or an added token), merges in rank order.
struct Built {
  Vocab vocab;
  int32_t id(const std::string& byte_level_text) const {
    for (size_t i = 0; i < vocab.tokens.size(); ++i)
      if (vocab.tokens[i] == byte_level_text) return static_cast<int32_t>(i);
    FAIL("no token " << byte_level_text);
    return -1;
  }
};

std::string bl(std::string_view bytes) {
  std::string out;
  bytes_to_unicode(bytes, out);
  return out;
}

Built make_bpe(const std::string& pre, const std::vector<std::string>& merges,
               const std::vector<std::pair<std::string, TokenType>>& added = {}) {
  Built b;
  Vocab& v = b.vocab;
  v.model = "gpt2";
  v.pre = pre;
  v.add_space_prefix = false;
  for (int c = 0; c < 256; ++c) v.tokens.push_back(std::string(byte_to_unicode(static_cast<uint8_t>(c))));
  for (const std::string& m : merges) {
    const size_t sp = m.find(' ');
    const std::string joined = m.substr(0, sp) + m.substr(sp + 1);
    if (std::find(v.tokens.begin(), v.tokens.end(), joined) == v.tokens.end()) v.tokens.push_back(joined);
    v.merges.push_back(m);
  }
  v.types.assign(v.tokens.size(), TokenType::Normal);
  for (const auto& [text, type] : added) {
    v.tokens.push_back(text);
    v.types.push_back(type);
  }
  return b;
}

}  // namespace

TEST_CASE("bpe: merges apply by rank, ties to the left", "[tokenizer][bpe]") {
  // "a b" (rank 0) before "b c" (rank 1): "abc" -> "ab" "c" -> "abc".
  Built b = make_bpe("gpt-2", {"a b", "b c", "ab c", "Ġ a"});
  auto tok = Tokenizer::create(b.vocab);
  CHECK(tok->encode("abc", false) == Ids{b.id("abc")});
  CHECK(tok->encode("bc", false) == Ids{b.id("bc")});
  // "abab": both "a b" pairs have rank 0; the left one merges first, then
  // the right one: "ab" "ab".
  CHECK(tok->encode("abab", false) == Ids{b.id("ab"), b.id("ab")});
  // "aaa" with only "a a": leftmost pair first -> "aa" "a".
  Built b2 = make_bpe("gpt-2", {"a a"});
  auto tok2 = Tokenizer::create(b2.vocab);
  CHECK(tok2->encode("aaa", false) == Ids{b2.id("aa"), b2.id("a")});
  // Merges never cross pre-tokenizer boundaries: " a" is a word of its own.
  CHECK(tok->encode("bc a", false) == Ids{b.id("bc"), b.id("Ġa")});
  // A lower-rank merge elsewhere wins over a higher-rank one that would
  // consume its symbol: "b c" (1) vs "a b" (0) in "abc" -> "ab" first.
  Built b3 = make_bpe("gpt-2", {"b c", "a b"});
  auto tok3 = Tokenizer::create(b3.vocab);
  CHECK(tok3->encode("abc", false) == Ids{b3.id("a"), b3.id("bc")});
  for (const char* s : {"abc", "abab", "bc a", "", " ", "x y z"}) CHECK(tok->decode(tok->encode(s, false)) == s);
}

TEST_CASE("bpe: ignore_merges emits a word that is a token whole", "[tokenizer][bpe]") {
  // "hello" is a token, but no merge path reaches it.
  const std::vector<std::pair<std::string, TokenType>> added = {{"hello", TokenType::Normal}};
  Built llama = make_bpe("llama-bpe", {"h e", "l l"}, added);
  Built gpt2 = make_bpe("gpt-2", {"h e", "l l"}, added);
  auto t3 = Tokenizer::create(llama.vocab);
  auto t2 = Tokenizer::create(gpt2.vocab);
  CHECK(t3->encode("hello", false) == Ids{llama.id("hello")});
  CHECK(t2->encode("hello", false) == Ids{gpt2.id("he"), gpt2.id("ll"), gpt2.id("o")});
  // Only whole words: "hellos" is merged normally.
  CHECK(t3->encode("hellos", false) == Ids{llama.id("he"), llama.id("ll"), llama.id("o"), llama.id("s")});
}

TEST_CASE("bpe: added tokens, parse_special and strip rules", "[tokenizer][bpe]") {
  Built b = make_bpe("gpt-2", {"a b"},
                     {{"<|im_start|>", TokenType::Control},
                      {"<|im_end|>", TokenType::Control},
                      {"<tool>", TokenType::UserDefined},
                      {"\xE4\xB8\x96\xE7\x95\x8C", TokenType::UserDefined}});  // raw "世界"
  b.vocab.eos = b.id("<|im_end|>");
  auto tok = Tokenizer::create(b.vocab);
  const int32_t start = b.id("<|im_start|>"), end = b.id("<|im_end|>"), tool = b.id("<tool>");
  const int32_t world = b.id("\xE4\xB8\x96\xE7\x95\x8C");
  // User-defined tokens are always whole, control tokens only when asked.
  CHECK(tok->encode("ab<tool>ab", false) == Ids{b.id("ab"), tool, b.id("ab")});
  CHECK(tok->encode("<|im_start|>ab<|im_end|>", false, true) == Ids{start, b.id("ab"), end});
  const Ids plain = tok->encode("<|im_start|>ab", false, false);
  CHECK(std::find(plain.begin(), plain.end(), start) == plain.end());
  CHECK(tok->decode(plain) == "<|im_start|>ab");
  CHECK(tok->encode("x\xE4\xB8\x96\xE7\x95\x8Cy", false) == Ids{b.id("x"), world, b.id("y")});
  // Decoding: control tokens only when rendered, added tokens as raw text.
  CHECK(tok->decode({start, b.id("ab"), end}) == "ab");
  CHECK(tok->decode({start, b.id("ab"), end}, true) == "<|im_start|>ab<|im_end|>");
  CHECK(tok->decode({world, tool}) == "\xE4\xB8\x96\xE7\x95\x8C<tool>");
  CHECK(tok->is_eog(end));
  CHECK(!tok->is_eog(start));

  // Phi-3 vocabularies: special tokens swallow the whitespace after them
  // (rstrip), except <s>, <unk> and <|endoftext|>.
  Built phi = make_bpe("gpt-2", {}, {{"<|user|>", TokenType::Control}, {"<|endoftext|>", TokenType::Control}});
  phi.vocab.merges = {"a b"};
  phi.vocab.tokens.push_back("ab");
  phi.vocab.types.push_back(TokenType::Normal);
  phi.vocab.name = "Phi-3-mini-4k-instruct";
  auto tphi = Tokenizer::create(phi.vocab);
  CHECK(tphi->strip_flags(phi.id("<|user|>")) == Tokenizer::kRStrip);
  CHECK(tphi->strip_flags(phi.id("<|endoftext|>")) == 0);
  CHECK(tphi->encode("<|user|>\n ab", false, true) == Ids{phi.id("<|user|>"), phi.id("ab")});
  CHECK(tphi->encode("<|endoftext|>\nab", false, true) ==
        Ids{phi.id("<|endoftext|>"), phi.id("Ċ"), phi.id("ab")});
  phi.vocab.name = "tinyllama";
  auto tother = Tokenizer::create(phi.vocab);
  CHECK(tother->encode("<|user|>\nab", false, true) == Ids{phi.id("<|user|>"), phi.id("Ċ"), phi.id("ab")});
}

TEST_CASE("bpe: any bytes round-trip, streaming holds back split code points", "[tokenizer][bpe]") {
  Built b = make_bpe("llama-bpe", {"Ġ a", "a b"});
  auto tok = Tokenizer::create(b.vocab);
  std::mt19937 rng(11);
  for (int iter = 0; iter < 300; ++iter) {
    std::string s;
    const int n = static_cast<int>(rng() % 24);
    for (int i = 0; i < n; ++i) s += static_cast<char>(rng() % 4 == 0 ? 'a' + rng() % 3 : rng() % 256);
    INFO(hex(s));
    const Ids ids = tok->encode(s, false);
    CHECK(tok->decode(ids) == s);  // byte-level BPE is lossless, even for invalid UTF-8
    std::string streamed;
    StreamDecoder sd(*tok);
    for (int32_t id : ids) streamed += sd.push(id);
    streamed += sd.flush();
    if (utf8_valid(s)) CHECK(streamed == s);
    CHECK(utf8_valid(streamed));
  }
  // A 4-byte emoji is four byte tokens here: nothing comes out until the
  // last one.
  const Ids llama = tok->encode("\xF0\x9F\xA6\x99", false);
  REQUIRE(llama.size() == 4);
  StreamDecoder sd(*tok);
  CHECK(sd.push(llama[0]).empty());
  CHECK(sd.push(llama[1]).empty());
  CHECK(sd.push(llama[2]).empty());
  CHECK(sd.push(llama[3]) == "\xF0\x9F\xA6\x99");
}

TEST_CASE("bpe: NFC where the vocabulary's tokenizer normalizes", "[tokenizer][bpe]") {
  // "e" + U+0301 COMBINING ACUTE ACCENT is "é" (U+00E9) in NFC.
  const std::string decomposed = "e\xCC\x81", composed = "\xC3\xA9";
  Built q = make_bpe("qwen2", {"Ã ©"});
  Built g = make_bpe("gpt-2", {"Ã ©"});
  auto tq = Tokenizer::create(q.vocab);
  auto tg = Tokenizer::create(g.vocab);
  CHECK(tq->encode(decomposed, false) == Ids{q.id("Ã©")});
  CHECK(tq->encode(decomposed, false) == tq->encode(composed, false));
  CHECK(tg->encode(decomposed, false) != tg->encode(composed, false));
  CHECK(normalize(decomposed, Normalization::NFC) == composed);
  CHECK(normalize("\xEF\xAC\x81", Normalization::NFKC) == "fi");  // U+FB01 LATIN SMALL LIGATURE FI
  // Ill-formed bytes survive normalization in place.
  CHECK(normalize("\xFF" + decomposed + "\xC3", Normalization::NFC) == "\xFF" + composed + "\xC3");
}

TEST_CASE("bpe: vocabulary metadata", "[tokenizer][bpe]") {
  auto load = [](const std::string& pre, bool with_add_bos) {
    GgufWriter w;
    std::vector<std::string> toks;
    for (int c = 0; c < 256; ++c) toks.push_back(std::string(byte_to_unicode(static_cast<uint8_t>(c))));
    toks.push_back("ab");
    toks.push_back("<|begin_of_text|>");
    std::vector<int32_t> types(toks.size(), 1);
    types.back() = 3;
    w.set("general.name", GgufValue::make_string("test"));
    w.set("tokenizer.ggml.model", GgufValue::make_string("gpt2"));
    w.set("tokenizer.ggml.pre", GgufValue::make_string(pre));
    w.set("tokenizer.ggml.tokens", GgufValue::make_string_array(toks));
    w.set("tokenizer.ggml.token_type", GgufValue::make_i32_array(types));
    w.set("tokenizer.ggml.merges", GgufValue::make_string_array({"a b"}));
    w.set("tokenizer.ggml.bos_token_id", GgufValue::make_u32(257));
    w.set("tokenizer.ggml.eot_token_id", GgufValue::make_u32(257));
    w.set("tokenizer.ggml.padding_token_id", GgufValue::make_u32(0));
    if (with_add_bos) w.set("tokenizer.ggml.add_bos_token", GgufValue::make_bool(false));
    const std::vector<uint8_t> bytes = w.to_bytes();
    auto g = GgufFile::from_memory(bytes.data(), bytes.size());
    return Tokenizer::create(*g);
  };
  // Llama 3 vocabularies add BOS unless the file says otherwise; GPT-2 ones do not.
  CHECK(load("llama-bpe", false)->vocab().add_bos);
  CHECK(!load("llama-bpe", true)->vocab().add_bos);
  CHECK(!load("gpt-2", false)->vocab().add_bos);
  auto t = load("llama-bpe", false);
  CHECK(t->vocab().eot == 257);
  CHECK(t->vocab().pad == 0);
  CHECK(t->vocab().name == "test");
  CHECK(t->encode("ab", true) == Ids{257, 256});
  CHECK(t->is_eog(257));
  CHECK(!t->vocab().add_space_prefix);
  // Unknown pre-tokenizers are refused by name.
  CHECK(status_of([&] { load("my-new-pre", false); }) == Status::Unsupported);
  CHECK(message_of([&] { load("my-new-pre", false); }).find("'my-new-pre'") != std::string::npos);
  // Bad ids are refused by token_to_piece.
  CHECK(status_of([&] { t->token_to_piece(100000); }) == Status::InvalidArgument);
  CHECK(status_of([&] { t->token_to_piece(-1); }) == Status::InvalidArgument);
}

TEST_CASE("bpe: pre-tokenizers handle long runs without failing", "[tokenizer][bpe]") {
  // Long runs of one character class stress regex backtracking and the JIT
  // stack; every family must split them completely.
  std::vector<std::string> inputs = {std::string(1 << 16, 'a'), std::string(1 << 16, ' '),
                                     std::string(1 << 16, '7'), std::string(1 << 16, '!'),
                                     std::string(1 << 16, '\n'), std::string(1 << 16, '\xFF')};
  std::string cjk, mix;
  while (cjk.size() < (1 << 16)) cjk += "\xE4\xB8\x96";
  while (mix.size() < (1 << 16)) mix += "  \n\tAb'S 12 ";
  inputs.push_back(cjk);
  inputs.push_back(mix);
  std::vector<std::string> done;
  for (const std::string& name : PreTokenizer::names()) {
    PreTokenizerInfo info;
    REQUIRE(PreTokenizer::lookup(name, &info));
    if (std::find(done.begin(), done.end(), info.family) != done.end()) continue;
    done.push_back(info.family);
    const auto pre = PreTokenizer::create(name);
    for (size_t i = 0; i < inputs.size(); ++i) {
      INFO(name << " input " << i);
      std::vector<PreTokenizer::Span> spans;
      REQUIRE_NOTHROW(pre->split(inputs[i], spans));
      size_t covered = 0;
      for (const auto& s : spans) covered += s.second;
      CHECK(covered == inputs[i].size());
    }
  }
}

TEST_CASE("bpe: piecewise normalization equals whole-text NFC/NFKC", "[tokenizer][bpe]") {
  // normalize() cuts the text into pieces around non-ASCII characters; the
  // result must equal utf8proc on the whole text.
  auto whole = [](const std::string& s, bool compat) {
    utf8proc_uint8_t* dst = nullptr;
    int opt = UTF8PROC_STABLE | UTF8PROC_COMPOSE | (compat ? UTF8PROC_COMPAT : 0);
    const utf8proc_ssize_t n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(s.data()),
                                            static_cast<utf8proc_ssize_t>(s.size()), &dst,
                                            static_cast<utf8proc_option_t>(opt));
    REQUIRE(n >= 0);
    std::string out(reinterpret_cast<const char*>(dst), static_cast<size_t>(n));
    std::free(dst);
    return out;
  };
  // ASCII, combining marks (U+0301, U+0323, U+0308), precomposed letters,
  // Hangul jamo (compose to syllables), compatibility characters (ﬁ, ½,
  // full-width A, no-break space), CJK.
  const std::vector<std::string> alphabet = {
      "a", "e", "o", " ", "\n", "A", "1", "\xCC\x81", "\xCC\xA3", "\xCC\x88", "\xC3\xA9", "\xE1\x84\x80",
      "\xE1\x85\xA1", "\xE1\x86\xA8", "\xEF\xAC\x81", "\xC2\xBD", "\xEF\xBC\xA1", "\xC2\xA0", "\xE4\xB8\x96"};
  std::mt19937 rng(5);
  for (int iter = 0; iter < 2000; ++iter) {
    std::string s;
    const int n = static_cast<int>(rng() % 16);
    for (int i = 0; i < n; ++i) s += alphabet[rng() % alphabet.size()];
    INFO(hex(s));
    CHECK(normalize(s, Normalization::NFC) == whole(s, false));
    CHECK(normalize(s, Normalization::NFKC) == whole(s, true));
  }
}
