// Tokenizer tests: SentencePiece BPE on vocabularies built in code, llama.cpp's
// test vectors for the Llama SPM vocabulary, the stories260K vocabulary,
// special tokens, detokenization and streaming, and bad input.
#include <chrono>
#include <cmath>
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
#include "test_util.h"
#include "tokenizer/tokenizer.h"

using namespace infer;

namespace {

using Ids = std::vector<int32_t>;

// Tokenizers loaded from ../shared, once per file.
const Tokenizer& shared_tokenizer(const std::string& path) {
  static std::map<std::string, std::unique_ptr<Tokenizer>> cache;
  auto& t = cache[path];
  if (!t) t = Tokenizer::create(*GgufFile::open(path));
  return *t;
}

// A small SPM vocabulary: <unk> <s> </s>, optionally the 256 byte tokens,
// then the given pieces (text, score, type).
struct Piece {
  std::string text;
  float score;
  TokenType type = TokenType::Normal;
};

Vocab make_vocab(const std::vector<Piece>& pieces, bool byte_tokens) {
  Vocab v;
  v.model = "llama";
  auto add = [&](const std::string& t, float s, TokenType ty) {
    v.tokens.push_back(t);
    v.scores.push_back(s);
    v.types.push_back(ty);
  };
  add("<unk>", 0, TokenType::Unknown);
  add("<s>", 0, TokenType::Control);
  add("</s>", 0, TokenType::Control);
  if (byte_tokens) {
    for (int b = 0; b < 256; ++b) {
      char name[8];
      std::snprintf(name, sizeof name, "<0x%02X>", b);
      add(name, 0, TokenType::Byte);
    }
  }
  for (const auto& p : pieces) add(p.text, p.score, p.type);
  v.unk = 0;
  v.bos = 1;
  v.eos = 2;
  return v;
}

int32_t id_of(const Tokenizer& tok, const std::string& text) {
  for (int32_t i = 0; i < tok.n_vocab(); ++i)
    if (tok.vocab().tokens[static_cast<size_t>(i)] == text) return i;
  FAIL("no token " << text);
  return -1;
}

Ids ids_of(const Tokenizer& tok, const std::vector<std::string>& texts) {
  Ids out;
  for (const auto& t : texts) out.push_back(id_of(tok, t));
  return out;
}

std::string hex(std::string_view s) {
  std::string out;
  char buf[4];
  for (unsigned char c : s) {
    std::snprintf(buf, sizeof buf, "%02x", c);
    out += buf;
  }
  return out;
}

// Strict UTF-8 check (no overlongs, surrogates or values above U+10FFFF).
bool well_formed_utf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    const unsigned c = static_cast<unsigned char>(s[i]);
    size_t n;
    unsigned lo = 0x80, hi = 0xBF;
    if (c < 0x80) n = 1;
    else if (c >= 0xC2 && c <= 0xDF) n = 2;
    else if (c >= 0xE0 && c <= 0xEF) n = 3, lo = c == 0xE0 ? 0xA0 : 0x80, hi = c == 0xED ? 0x9F : 0xBF;
    else if (c >= 0xF0 && c <= 0xF4) n = 4, lo = c == 0xF0 ? 0x90 : 0x80, hi = c == 0xF4 ? 0x8F : 0xBF;
    else return false;
    if (i + n > s.size()) return false;
    for (size_t k = 1; k < n; ++k) {
      const unsigned b = static_cast<unsigned char>(s[i + k]);
      if (b < (k == 1 ? lo : 0x80u) || b > (k == 1 ? hi : 0xBFu)) return false;
    }
    i += n;
  }
  return true;
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

}  // namespace

// ---- BPE on vocabularies built in code ----------------------------------------

TEST_CASE("spm: the highest-scoring pair merges first, ties go left", "[tokenizer]") {
  auto build = [](float ab, float bc, bool with_abc) {
    std::vector<Piece> p = {{"a", -10}, {"b", -10}, {"c", -10}, {"ab", ab}, {"bc", bc}};
    if (with_abc) p.push_back({"abc", -5});
    Vocab v = make_vocab(p, false);
    v.add_space_prefix = false;
    return Tokenizer::create(std::move(v));
  };
  {
    auto tok = build(-2, -1, false);
    CHECK(tok->encode("abc", false) == ids_of(*tok, {"a", "bc"}));
  }
  {
    auto tok = build(-1, -2, false);
    CHECK(tok->encode("abc", false) == ids_of(*tok, {"ab", "c"}));
  }
  {
    auto tok = build(-1, -1, false);  // tie: leftmost pair
    CHECK(tok->encode("abc", false) == ids_of(*tok, {"ab", "c"}));
    CHECK(tok->encode("abcabc", false) == ids_of(*tok, {"ab", "c", "ab", "c"}));
  }
  {
    auto tok = build(-2, -1, true);  // bc first, then a+bc = abc
    CHECK(tok->encode("abc", false) == ids_of(*tok, {"abc"}));
    auto tok2 = build(-1, -2, true);  // ab first, then ab+c = abc
    CHECK(tok2->encode("abc", false) == ids_of(*tok2, {"abc"}));
  }
}

TEST_CASE("spm: dummy prefix and spaces", "[tokenizer]") {
  const char* sp = "\xE2\x96\x81";  // ▁
  const std::string S(sp);
  Vocab v = make_vocab({{S, -1}, {"a", -2}, {S + "a", -0.5f}, {S + S, -0.7f}}, false);
  auto tok = Tokenizer::create(v);
  CHECK(tok->encode("", false).empty());
  CHECK(tok->encode("", true) == Ids{1});
  CHECK(tok->encode("a", false) == ids_of(*tok, {S + "a"}));
  CHECK(tok->encode(" a", false) == ids_of(*tok, {S, S + "a"}));
  CHECK(tok->encode("a a", true) == Ids{1, id_of(*tok, S + "a"), id_of(*tok, S + "a")});
  CHECK(tok->encode(" ", false) == ids_of(*tok, {S + S}));
  CHECK(tok->decode(tok->encode(" a", false)) == " a");
  CHECK(tok->decode(tok->encode("a a ", true)) == "a a ");

  v.add_space_prefix = false;
  auto tok2 = Tokenizer::create(v);
  CHECK(tok2->encode("a", false) == ids_of(*tok2, {"a"}));
  CHECK(tok2->encode(" a", false) == ids_of(*tok2, {S + "a"}));
  CHECK(tok2->decode(tok2->encode(" a", false)) == " a");

  // SentencePiece's remove_extra_whitespaces normalizer option.
  v.add_space_prefix = true;
  v.remove_extra_whitespaces = true;
  auto tok3 = Tokenizer::create(v);
  CHECK(tok3->encode("   a    a  ", false) == ids_of(*tok3, {S + "a", S + "a"}));
  CHECK(tok3->encode("   ", false).empty());

  // Decoding at the start of the text: one "▁" is the dummy prefix; with
  // remove_extra_whitespaces every leading one goes (SentencePiece's decoder
  // does the same). Byte tokens are literal.
  CHECK(tok->decode(ids_of(*tok, {S, S + "a"})) == " a");
  CHECK(tok3->decode(ids_of(*tok3, {S, S + "a"})) == "a");
  CHECK(tok3->decode(ids_of(*tok3, {S, S, "a"})) == "a");
}

TEST_CASE("spm: byte fallback and the unknown token", "[tokenizer]") {
  const std::string S = "\xE2\x96\x81";
  const std::string e_acute = "\xC3\xA9";
  {
    auto tok = Tokenizer::create(make_vocab({{S, -1}, {"a", -2}}, true));
    // 'é' is not a piece: its two bytes, as byte tokens (3 + byte value).
    CHECK(tok->encode("a" + e_acute, false) == Ids{id_of(*tok, S), id_of(*tok, "a"), 3 + 0xC3, 3 + 0xA9});
    CHECK(tok->decode(tok->encode("a" + e_acute + "a", false)) == "a" + e_acute + "a");
    CHECK(tok->decode({3 + ' ', id_of(*tok, "a")}) == " a");  // a byte space is literal
  }
  {
    auto tok = Tokenizer::create(make_vocab({{S, -1}, {"a", -2}}, false));
    CHECK(tok->encode("a" + e_acute + e_acute, false) == Ids{id_of(*tok, S), id_of(*tok, "a"), 0, 0});
    // Without an unknown token unknown characters are dropped, never a crash.
    Vocab v = make_vocab({{S, -1}, {"a", -2}}, false);
    v.unk = -1;
    auto tok2 = Tokenizer::create(v);
    CHECK(tok2->encode(e_acute + "a", false) == Ids{id_of(*tok2, S), id_of(*tok2, "a")});
  }
  {
    // Byte tokens recognized by their names when types are absent.
    Vocab v = make_vocab({{"a", -2}}, true);
    v.types.clear();
    v.add_space_prefix = false;
    auto tok = Tokenizer::create(v);
    CHECK(tok->encode("a\xC3\xA9", false) == Ids{id_of(*tok, "a"), 3 + 0xC3, 3 + 0xA9});
  }
}

TEST_CASE("spm: unused pieces are merged through but never emitted", "[tokenizer]") {
  // SentencePiece resegments a symbol whose piece is Unused into the two
  // symbols it was merged from; the merge itself still happens, so a larger
  // normal piece built on top of it is found.
  Vocab v = make_vocab({{"a", -10}, {"b", -10}, {"c", -10}, {"ab", -1, TokenType::Unused},
                        {"abc", -2}},
                       true);
  v.add_space_prefix = false;
  auto tok = Tokenizer::create(v);
  CHECK(tok->encode("ab", false) == ids_of(*tok, {"a", "b"}));
  CHECK(tok->encode("abc", false) == ids_of(*tok, {"abc"}));
  CHECK(tok->encode("abab", false) == ids_of(*tok, {"a", "b", "a", "b"}));
}

TEST_CASE("spm: user-defined tokens are atomic", "[tokenizer]") {
  const std::string S = "\xE2\x96\x81";
  Vocab v = make_vocab({{S, -1},
                        {"a", -2},
                        {"b", -2},
                        {"<x>", 0, TokenType::UserDefined},
                        {"a<", -0.1f},
                        {"<", -3},
                        {"x", -3},
                        {">", -3}},
                       true);
  v.add_space_prefix = false;
  auto tok = Tokenizer::create(v);
  // "a<" is a piece with a high score, but "<x>" is frozen.
  CHECK(tok->encode("a<x>b", false) == ids_of(*tok, {"a", "<x>", "b"}));
  CHECK(tok->encode("a<x>b", false, true) == ids_of(*tok, {"a", "<x>", "b"}));
  CHECK(tok->encode("a<b", false) == ids_of(*tok, {"a<", "b"}));
  CHECK(tok->token_to_piece(id_of(*tok, "<x>")) == "<x>");
  CHECK(tok->decode(tok->encode("a<x>b", false)) == "a<x>b");
}

TEST_CASE("spm: token_to_piece by token type", "[tokenizer]") {
  const std::string S = "\xE2\x96\x81";
  auto tok = Tokenizer::create(make_vocab({{S + "a" + S + "b", -1}}, true));
  CHECK(tok->token_to_piece(id_of(*tok, S + "a" + S + "b")) == " a b");
  CHECK(tok->token_to_piece(3 + 0x41) == "A");
  CHECK(tok->token_to_piece(3 + 0xFF) == "\xFF");
  CHECK(tok->token_to_piece(1).empty());
  CHECK(tok->token_to_piece(1, true) == "<s>");
  CHECK(tok->token_to_piece(0).empty());
  CHECK(tok->token_to_piece(0, true) == "<unk>");
  CHECK(status_of([&] { tok->token_to_piece(-1); }) == Status::InvalidArgument);
  CHECK(status_of([&] { tok->token_to_piece(tok->n_vocab()); }) == Status::InvalidArgument);
  CHECK(status_of([&] { tok->decode({1, 5, 1000000}); }) == Status::InvalidArgument);
  StreamDecoder sd(*tok);
  CHECK(status_of([&] { sd.push(-7); }) == Status::InvalidArgument);
}

TEST_CASE("tokenizer: vocabulary checks", "[tokenizer]") {
  Vocab good = make_vocab({{"a", -1}}, false);
  {
    Vocab v = good;
    v.scores.pop_back();
    CHECK(status_of([&] { Tokenizer::create(v); }) == Status::Format);
  }
  {
    Vocab v = good;
    v.types.push_back(TokenType::Normal);
    CHECK(status_of([&] { Tokenizer::create(v); }) == Status::Format);
  }
  {
    Vocab v = good;
    v.eos = v.size();
    CHECK(status_of([&] { Tokenizer::create(v); }) == Status::Format);
    CHECK(message_of([&] { Tokenizer::create(v); }).find("eos_token_id") != std::string::npos);
  }
  {
    Vocab v = good;
    v.scores[3] = std::nanf("");
    CHECK(status_of([&] { Tokenizer::create(v); }) == Status::Format);
  }
  {
    Vocab v = good;
    v.types[3] = static_cast<TokenType>(42);
    CHECK(status_of([&] { Tokenizer::create(v); }) == Status::Format);
  }
  {
    Vocab v = good;
    v.types[3] = TokenType::Byte;  // "a" is not a byte token name
    CHECK(status_of([&] { Tokenizer::create(v); }) == Status::Format);
  }
  {
    Vocab v;
    v.model = "llama";
    CHECK(status_of([&] { Tokenizer::create(v); }) == Status::Format);
  }
  {
    Vocab v = good;
    v.scores.clear();  // absent: zeros
    v.types.clear();   // absent: normal
    CHECK(status_of([&] { Tokenizer::create(v); }) == Status::Ok);
  }
  {
    Vocab v = good;
    v.model = "rwkv";
    CHECK(status_of([&] { Tokenizer::create(v); }) == Status::Unsupported);
    CHECK(message_of([&] { Tokenizer::create(v); }) ==
          "tokenizer model 'rwkv' is not supported (supported: llama, gpt2, bert)");
    v.model = "gpt2";  // byte-level BPE needs merges
    CHECK(status_of([&] { Tokenizer::create(v); }) == Status::Format);
  }
}

TEST_CASE("tokenizer: Vocab::from_gguf", "[tokenizer]") {
  auto base = [] {
    GgufWriter w;
    w.set("tokenizer.ggml.model", GgufValue::make_string("llama"));
    w.set("tokenizer.ggml.tokens", GgufValue::make_string_array({"<unk>", "<s>", "</s>", "a", "b"}));
    w.set("tokenizer.ggml.scores", GgufValue::make_f32_array({0, 0, 0, -1, -2}));
    w.set("tokenizer.ggml.token_type", GgufValue::make_i32_array({2, 3, 3, 1, 1}));
    w.set("tokenizer.ggml.bos_token_id", GgufValue::make_u32(1));
    w.set("tokenizer.ggml.eos_token_id", GgufValue::make_u32(2));
    w.set("tokenizer.ggml.unknown_token_id", GgufValue::make_u32(0));
    w.set("tokenizer.ggml.padding_token_id", GgufValue::make_u32(0xFFFFFFFFu));
    return w;
  };
  auto load = [](const GgufWriter& w) {
    const std::vector<uint8_t> bytes = w.to_bytes();
    auto g = GgufFile::from_memory(bytes.data(), bytes.size());
    return Vocab::from_gguf(*g);
  };
  auto fails = [&](const GgufWriter& w, const std::string& key) {
    const std::vector<uint8_t> bytes = w.to_bytes();
    auto g = GgufFile::from_memory(bytes.data(), bytes.size());
    try {
      Vocab::from_gguf(*g);
    } catch (const Error& e) {
      CHECK(e.status() == Status::Format);
      CHECK(std::string(e.what()).find(key) != std::string::npos);
      return true;
    }
    return false;
  };

  {
    Vocab v = load(base());
    CHECK(v.model == "llama");
    CHECK(v.pre.empty());
    CHECK(v.size() == 5);
    CHECK(v.scores[4] == -2.0f);
    CHECK(v.types[1] == TokenType::Control);
    CHECK(v.bos == 1);
    CHECK(v.eos == 2);
    CHECK(v.unk == 0);
    CHECK(v.pad == -1);
    CHECK(v.eot == -1);
    CHECK(v.add_bos);
    CHECK(!v.add_eos);
    CHECK(v.add_space_prefix);
    CHECK(!v.remove_extra_whitespaces);
  }
  {
    GgufWriter w = base();
    w.set("tokenizer.ggml.add_bos_token", GgufValue::make_bool(false));
    w.set("tokenizer.ggml.add_space_prefix", GgufValue::make_bool(false));
    w.set("tokenizer.ggml.eot_token_id", GgufValue::make_i32(-1));
    w.set("tokenizer.ggml.pre", GgufValue::make_string("default"));
    Vocab v = load(w);
    CHECK(!v.add_bos);
    CHECK(!v.add_space_prefix);
    CHECK(v.eot == -1);
    CHECK(v.pre == "default");
  }
  {
    GgufWriter w = base();
    w.set("tokenizer.ggml.eos_token_id", GgufValue::make_u32(5));
    CHECK(fails(w, "tokenizer.ggml.eos_token_id"));
    w = base();
    w.set("tokenizer.ggml.eot_token_id", GgufValue::make_u32(0xFFFFFFFEu));
    CHECK(fails(w, "tokenizer.ggml.eot_token_id"));
    w = base();
    w.set("tokenizer.ggml.scores", GgufValue::make_f32_array({0, 0, 0}));
    CHECK(fails(w, "tokenizer.ggml.scores"));
    w = base();
    w.set("tokenizer.ggml.token_type", GgufValue::make_i32_array({2, 3, 3, 1, 1, 1}));
    CHECK(fails(w, "tokenizer.ggml.token_type"));
    w = base();
    w.set("tokenizer.ggml.token_type", GgufValue::make_i32_array({2, 3, 3, 1, 9}));
    CHECK(fails(w, "tokenizer.ggml.token_type"));
    w = base();
    w.set("tokenizer.ggml.bos_token_id", GgufValue::make_string("one"));
    CHECK(fails(w, "tokenizer.ggml.bos_token_id"));
    w = base();
    w.set("tokenizer.ggml.tokens", GgufValue::make_f32_array({1, 2, 3, 4, 5}));
    CHECK(fails(w, "tokenizer.ggml.tokens"));
  }
  {
    GgufWriter w;
    w.set("tokenizer.ggml.model", GgufValue::make_string("llama"));
    CHECK(fails(w, "no tokenizer.ggml.tokens"));
  }
  {
    // Unknown tokenizer models are refused by name; a byte-level BPE
    // vocabulary without merges is malformed.
    GgufWriter w = base();
    w.set("tokenizer.ggml.model", GgufValue::make_string("t5"));
    std::vector<uint8_t> bytes = w.to_bytes();
    auto g = GgufFile::from_memory(bytes.data(), bytes.size());
    CHECK(status_of([&] { Tokenizer::create(*g); }) == Status::Unsupported);
    CHECK(message_of([&] { Tokenizer::create(*g); }).find("'t5'") != std::string::npos);
    w.set("tokenizer.ggml.model", GgufValue::make_string("gpt2"));
    w.set("tokenizer.ggml.pre", GgufValue::make_string("gpt-2"));
    bytes = w.to_bytes();
    g = GgufFile::from_memory(bytes.data(), bytes.size());
    CHECK(status_of([&] { Tokenizer::create(*g); }) == Status::Format);
  }
}

// ---- the Llama SPM vocabulary --------------------------------------------------

TEST_CASE("spm: llama.cpp test vectors for ggml-vocab-llama-spm", "[tokenizer]") {
  REQUIRE_SHARED(path, "vocab/ggml-vocab-llama-spm.gguf");
  REQUIRE_SHARED(inp, "vocab/ggml-vocab-llama-spm.gguf.inp");
  REQUIRE_SHARED(outp, "vocab/ggml-vocab-llama-spm.gguf.out");
  const Tokenizer& tok = shared_tokenizer(path);
  const Vectors v = read_vectors(inp, outp);
  REQUIRE(v.inputs.size() == v.expected.size());
  REQUIRE(v.inputs.size() > 40);
  for (size_t i = 0; i < v.inputs.size(); ++i) {
    INFO("test " << i << ": '" << v.inputs[i] << "' (" << hex(v.inputs[i]) << ")");
    CHECK(tok.encode(v.inputs[i], false) == v.expected[i]);
    // SentencePiece round-trips this vocabulary (identity normalization, no
    // whitespace squeezing): decode removes exactly the one dummy-prefix space
    // that encode added, so leading spaces survive.
    CHECK(tok.decode(tok.encode(v.inputs[i], false)) == v.inputs[i]);
    CHECK(tok.decode(tok.encode(v.inputs[i], true)) == v.inputs[i]);
    // Streaming gives the same text.
    StreamDecoder sd(tok);
    std::string streamed;
    for (int32_t id : tok.encode(v.inputs[i], true)) streamed += sd.push(id);
    streamed += sd.flush();
    CHECK(streamed == v.inputs[i]);
  }
}

TEST_CASE("spm: Llama-2 vocabulary, known ids and special tokens", "[tokenizer]") {
  REQUIRE_SHARED(path, "vocab/ggml-vocab-llama-spm.gguf");
  const Tokenizer& tok = shared_tokenizer(path);
  CHECK(tok.encode("I believe the meaning of life is", true) ==
        Ids{1, 306, 4658, 278, 6593, 310, 2834, 338});
  CHECK(tok.vocab().bos == 1);
  CHECK(tok.vocab().eos == 2);
  CHECK(tok.vocab().add_bos);

  // parse_special: control tokens written in the text become their ids.
  const Ids hello = tok.encode("hello", false);  // "▁hello"
  REQUIRE(hello.size() == 1);
  Ids special = tok.encode("<s>hello</s>", false, true);
  Ids want = {1};
  want.insert(want.end(), hello.begin(), hello.end());
  want.push_back(2);
  CHECK(special == want);
  // ... and the text after a control token starts a new segment with its own
  // dummy prefix, as llama.cpp (and Llama-2's chat code) do.
  CHECK(tok.encode("<s>hello</s>hello", false, true) ==
        Ids{1, hello[0], 2, hello[0]});
  CHECK(tok.encode("x<s>", true, true) == Ids{1, tok.encode("x", false)[0], 1});
  // Without parse_special they are plain text.
  const Ids plain = tok.encode("<s>hello</s>", false);
  for (int32_t id : plain) {
    CHECK(id != 1);
    CHECK(id != 2);
  }
  CHECK(tok.decode(plain) == "<s>hello</s>");
  CHECK(tok.decode(special) == "hello");
  CHECK(tok.decode(special, true) == "<s>hello</s>");
  // <unk> is parsed too (as in llama.cpp).
  CHECK(tok.encode("<unk>", false, true) == Ids{0});

  CHECK(tok.is_eog(2));
  CHECK(!tok.is_eog(1));
  CHECK(!tok.is_eog(306));
  CHECK(!tok.is_eog(-1));
  CHECK(tok.is_control(1));
  CHECK(tok.is_control(2));
  CHECK(!tok.is_control(0));
  CHECK(!tok.is_control(306));
}

TEST_CASE("spm: invalid UTF-8 becomes U+FFFD, as in SentencePiece", "[tokenizer]") {
  REQUIRE_SHARED(path, "vocab/ggml-vocab-llama-spm.gguf");
  const Tokenizer& tok = shared_tokenizer(path);
  // Ids checked against SentencePiece with llama2-tokenizer.model:
  // 29871 "▁", 30140 "�", 26308 "��", 29890 "b", 263 "▁a".
  CHECK(tok.encode("\xFF", false) == Ids{29871, 30140});
  CHECK(tok.encode("a\x80" "b", false) == Ids{263, 30140, 29890});
  CHECK(tok.encode("\xE2\x82", false) == Ids{29871, 26308});  // truncated: one per byte
  CHECK(tok.encode("\xED\xA0\x80", false) == Ids{29871, 26308, 30140});  // surrogate
  CHECK(tok.encode("\xC0\xAF", false) == Ids{29871, 26308});             // overlong
  CHECK(tok.decode(tok.encode("a\xFF", false)) == "a\xEF\xBF\xBD");
}

TEST_CASE("spm: stories260K vocabulary and the reference texts", "[tokenizer]") {
  REQUIRE_SHARED(path, "models/stories260K.gguf");
  const Tokenizer& tok = shared_tokenizer(path);
  CHECK(tok.n_vocab() == 512);
  CHECK(tok.encode("Once upon a time", true) == Ids{1, 403, 407, 261, 378});
  CHECK(tok.decode({1, 403, 407, 261, 378}) == "Once upon a time");
  CHECK(tok.decode({403, 407, 261, 378}) == "Once upon a time");
  StreamDecoder sd(tok);
  std::string s;
  for (int32_t id : {1, 403, 407, 261, 378}) s += sd.push(id);
  CHECK(s == "Once upon a time");

  // The reference implementation's printed text starts with the decode of its
  // input tokens (the text may go one generated token further).
  for (const char* name : {"stories260K-once", "stories260K-tom", "stories260K-bos"}) {
    const std::string toks_path = infer_test::shared_file(std::string("reference/") + name + ".tokens");
    const std::string txt_path = infer_test::shared_file(std::string("reference/") + name + ".txt");
    if (toks_path.empty() || txt_path.empty()) continue;
    Ids ids;
    const std::string toks_text = infer_test::read_text(toks_path);
    for (const char* p = toks_text.c_str();;) {
      char* end = nullptr;
      const long x = std::strtol(p, &end, 10);
      if (end == p) break;
      ids.push_back(static_cast<int32_t>(x));
      p = end;
    }
    REQUIRE(ids.size() > 1);
    const std::string want = infer_test::read_text(txt_path);
    const std::string got = tok.decode(ids);
    INFO(name);
    CHECK(want.compare(0, got.size(), got) == 0);
  }
}

// ---- streaming -------------------------------------------------------------------

TEST_CASE("spm: StreamDecoder holds back split code points", "[tokenizer]") {
  REQUIRE_SHARED(path, "vocab/ggml-vocab-llama-spm.gguf");
  const Tokenizer& tok = shared_tokenizer(path);
  const std::string llama = "\xF0\x9F\xA6\x99";  // U+1F999, byte tokens 3 + byte
  const Ids ids = tok.encode(llama, false);
  REQUIRE(ids == Ids{29871, 3 + 0xF0, 3 + 0x9F, 3 + 0xA6, 3 + 0x99});
  {
    StreamDecoder sd(tok);
    CHECK(sd.push(ids[0]).empty());  // the dummy-prefix space, dropped
    CHECK(sd.push(ids[1]).empty());
    CHECK(sd.push(ids[2]).empty());
    CHECK(sd.push(ids[3]).empty());
    CHECK(sd.push(ids[4]) == llama);
    CHECK(sd.flush().empty());
  }
  {
    // Not at the start of the text: the space is real.
    StreamDecoder sd(tok, false);
    CHECK(sd.push(ids[0]) == " ");
  }
  {
    StreamDecoder sd(tok);
    CHECK(sd.push(3 + 0xF0).empty());
    CHECK(sd.push(3 + 0x9F).empty());
    CHECK(sd.flush() == "\xEF\xBF\xBD");
    CHECK(sd.flush().empty());
  }
  {
    // Bytes that can never form a code point are replaced at once.
    StreamDecoder sd(tok);
    CHECK(sd.push(3 + 0x80) == "\xEF\xBF\xBD");
    CHECK(sd.push(3 + 0xE2).empty());
    CHECK(sd.push(3 + 'x') == "\xEF\xBF\xBD" "x");
    CHECK(sd.push(1).empty());  // control, not rendered
  }
  {
    StreamDecoder sd(tok, true, true);
    CHECK(sd.push(1) == "<s>");
    CHECK(sd.push(tok.encode("hi", false)[0]) == "hi");  // still the start of the text
  }
}

TEST_CASE("spm: arbitrary bytes never break encode, decode or streaming", "[tokenizer]") {
  const std::string S = "\xE2\x96\x81";
  Vocab v = make_vocab({{S, -1},
                        {"a", -2},
                        {S + "a", -1},
                        {"<|x|>", 0, TokenType::UserDefined},
                        {"<|im_end|>", 0, TokenType::Control}},
                       true);
  auto tok = Tokenizer::create(v);
  std::mt19937 rng(7);
  const char alphabet[] = {'a', ' ', '<', '|', 'x', '>', 's', '/', '\x80', '\xC3', '\xE2', '\x96',
                           '\x81', '\xFF', '\0', '\n'};
  for (int i = 0; i < 2000; ++i) {
    std::string text;
    const int len = static_cast<int>(rng() % 24);
    for (int k = 0; k < len; ++k)
      text += rng() % 4 ? alphabet[rng() % sizeof alphabet] : static_cast<char>(rng() & 0xFF);
    for (bool special : {false, true}) {
      const Ids ids = tok->encode(text, true, special);
      bool in_range = true;
      for (int32_t id : ids) in_range = in_range && id >= 0 && id < tok->n_vocab();
      REQUIRE(in_range);
      (void)tok->decode(ids, special);
      StreamDecoder sd(*tok);
      std::string streamed;
      for (int32_t id : ids) streamed += sd.push(id);
      streamed += sd.flush();
      INFO(hex(text));
      REQUIRE(well_formed_utf8(streamed));  // the stream is always well-formed
    }
  }
  // Random byte-token streams: always well-formed, and equal to decode()
  // whenever the bytes themselves are.
  for (int i = 0; i < 2000; ++i) {
    Ids ids;
    const int len = static_cast<int>(rng() % 12);
    for (int k = 0; k < len; ++k)
      ids.push_back(rng() % 3 ? 3 + static_cast<int32_t>(rng() % 256)
                              : static_cast<int32_t>(rng() % static_cast<uint32_t>(tok->n_vocab())));
    StreamDecoder sd(*tok);
    std::string streamed;
    for (int32_t id : ids) streamed += sd.push(id);
    streamed += sd.flush();
    REQUIRE(well_formed_utf8(streamed));
    const std::string whole = tok->decode(ids);
    if (well_formed_utf8(whole)) REQUIRE(streamed == whole);
  }
  CHECK(tok->is_eog(id_of(*tok, "<|im_end|>")));
  CHECK(tok->is_control(id_of(*tok, "<|im_end|>")));
  CHECK(!tok->is_eog(id_of(*tok, "<|x|>")));
  CHECK(tok->encode("a<|im_end|>a", false, true) ==
        Ids{id_of(*tok, S + "a"), id_of(*tok, "<|im_end|>"), id_of(*tok, S + "a")});
  CHECK(tok->encode("a<|x|>a", false, false) ==
        Ids{id_of(*tok, S + "a"), id_of(*tok, "<|x|>"), id_of(*tok, "a")});
}

// ---- speed (not run by default) ----------------------------------------------------

TEST_CASE("spm: encode speed", "[.][tokenizer-speed]") {
  REQUIRE_SHARED(path, "vocab/ggml-vocab-llama-spm.gguf");
  REQUIRE_SHARED(text_path, "text/stories-eval.txt");
  const Tokenizer& tok = shared_tokenizer(path);
  const std::string unit = infer_test::read_text(text_path);
  std::string text;
  while (text.size() < (1u << 20)) text += unit;
  std::string mixed;
  const char* extra = "Ünïcödé текст 中文字符 🦙🚀 ";
  while (mixed.size() < (1u << 20)) mixed += std::string(extra) + unit.substr(0, 200);
  for (const std::string* t : {&text, &mixed}) {
    const auto t0 = std::chrono::steady_clock::now();
    const Ids ids = tok.encode(*t, false);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const auto t1 = std::chrono::steady_clock::now();
    const std::string back = tok.decode(ids);
    const double sd = std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count();
    WARN("encode " << t->size() / 1e6 << " MB -> " << ids.size() << " tokens in " << s << " s: "
                   << t->size() / 1e6 / s << " MB/s; decode " << t->size() / 1e6 / sd << " MB/s");
    CHECK(back == *t);
  }
}
