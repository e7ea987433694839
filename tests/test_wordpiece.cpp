// BERT's WordPiece tokenizer (lib/tokenizer/wordpiece.*, issue #30): the
// peer's test vectors of ../shared/embedding/ggml-vocab-bert-bge.gguf, and
// the normalizer's rules on a vocabulary of our own in both spellings.
#include <cstdlib>
#include <string>
#include <vector>

#include "core/error.h"
#include "gguf/gguf.h"
#include "test_util.h"
#include "tokenizer/tokenizer.h"

using namespace infer;

namespace {

using Ids = std::vector<int32_t>;

// A vocabulary in the Hugging Face spelling ("##" continuations) or the
// GGUF one ("▁" word starts, bare continuations).
std::unique_ptr<Tokenizer> small_vocab(bool gguf_form) {
  Vocab v;
  v.model = "bert";
  const char* specials[] = {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"};
  for (const char* s : specials) {
    v.tokens.push_back(s);
    v.types.push_back(TokenType::Control);
  }
  const char* words[] = {"hello", "world", "un", "##want", "##ed", "run", "##ning", ",", "!", "a", "##b", "cafe",
                         "\xe4\xb8\xad", "\xe6\x96\x87", "$", "x", "##x"};
  for (const char* w : words) {
    std::string s = w;
    if (gguf_form) s = s.rfind("##", 0) == 0 ? s.substr(2) : "\xE2\x96\x81" + s;
    v.tokens.push_back(s);
    v.types.push_back(TokenType::Normal);
  }
  v.unk = 1;
  v.bos = 2;
  v.eos = 3;
  v.add_space_prefix = true;
  return Tokenizer::create(v);
}

}  // namespace

TEST_CASE("wordpiece: the peer's test vectors of ggml-vocab-bert-bge", "[tokenizer][wordpiece]") {
  const std::string path = infer_test::shared_file("embedding/ggml-vocab-bert-bge.gguf");
  if (path.empty()) {
    WARN("SKIPPED: ../shared/embedding/ggml-vocab-bert-bge.gguf not found");
    return;
  }
  std::unique_ptr<Tokenizer> tok = Tokenizer::create(*GgufFile::open(path));
  std::vector<std::string> in;
  std::vector<Ids> want;
  infer_test::read_vocab_vectors(path, in, want);
  REQUIRE(in.size() == want.size());
  REQUIRE(in.size() > 10);
  size_t failures = 0;
  for (size_t i = 0; i < in.size(); ++i) {
    INFO("test " << i << ": '" << in[i] << "'");
    const Ids got = tok->encode(in[i], false);
    CHECK(got == want[i]);
    failures += got != want[i];
  }
  CHECK(failures == 0);
  // With special tokens: [CLS] ... [SEP].
  const Ids cs = tok->encode("Hello world", true);
  REQUIRE(cs == Ids{101, 7592, 2088, 102});
  REQUIRE(tok->decode(cs) == "hello world");
}

TEST_CASE("wordpiece: normalization, greedy pieces and [UNK], in both spellings", "[tokenizer][wordpiece]") {
  for (bool gguf_form : {false, true}) {
    INFO("gguf spelling " << gguf_form);
    std::unique_ptr<Tokenizer> t = small_vocab(gguf_form);
    auto enc = [&](const std::string& s) { return t->encode(s, false); };
    // Greedy longest match with continuations; case and accents folded.
    REQUIRE(enc("Unwanted running") == Ids{7, 8, 9, 10, 11});
    REQUIRE(enc("HELLO,World!") == Ids{5, 12, 6, 13});
    REQUIRE(enc("Caf\xC3\xA9") == Ids{16});          // é (precomposed) stripped to e
    REQUIRE(enc("cafe\xCC\x81") == Ids{16});         // e + combining acute
    REQUIRE(enc("  \t\nhello\xC2\xA0world  ") == Ids{5, 6});  // NBSP is whitespace
    // CJK ideographs are words of their own; ASCII symbols are punctuation.
    REQUIRE(enc("\xe4\xb8\xad\xe6\x96\x87") == Ids{17, 18});
    REQUIRE(enc("a$x") == Ids{14, 19, 20});
    // No complete match: the whole word is [UNK], not a partial match.
    REQUIRE(enc("hellq") == Ids{1});
    REQUIRE(enc("ab abb abc xxx") == Ids{14, 15, 14, 15, 15, 1, 20, 21, 21});
    // Control characters and invalid UTF-8 are dropped, never fatal.
    REQUIRE(enc(std::string("hel\x01lo \xff\xfe world", 15)) == Ids{5, 6});
    REQUIRE(enc("").empty());
    // A word longer than 100 characters is [UNK] (and fast).
    REQUIRE(enc(std::string(101, 'x')) == Ids{1});
    const Ids long_word = enc(std::string(100, 'x'));
    REQUIRE(long_word.size() == 100);
    REQUIRE(long_word[0] == 20);
    REQUIRE(long_word[99] == 21);
    const Ids huge = enc(std::string(200000, 'x') + " hello");
    REQUIRE(huge == Ids{1, 5});
    // Specials and decoding.
    REQUIRE(t->encode("hello", true) == Ids{2, 5, 3});
    REQUIRE(t->encode("[CLS] hello [SEP]", false, /*parse_special=*/true) == Ids{2, 5, 3});
    REQUIRE(t->decode(enc("unwanted, running!")) == "unwanted , running !");
  }
}
