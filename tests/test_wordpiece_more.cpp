// More WordPiece (BERT) checks, beside test_wordpiece.cpp: the bge vectors
// with [CLS]/[SEP] and through the C API's vocabulary-only load, the
// normalizer's less common characters, and hostile input (long words, many
// written specials, invalid UTF-8) staying linear and crash-free.
#include <cstdlib>
#include <string>
#include <vector>

#include "core/error.h"
#include "gguf/gguf.h"
#include "infer/infer.h"
#include "test_util.h"
#include "tokenizer/tokenizer.h"

using namespace infer;

namespace {

using Ids = std::vector<int32_t>;

std::string ids_str(const Ids& ids) {
  std::string s;
  for (int32_t id : ids) s += " " + std::to_string(id);
  return s;
}

// A tiny uncased vocabulary in the Hugging Face spelling.
enum : int32_t { kPad, kUnk, kCls, kSep, kMask, kHello, kWorld, kUn, kAff, kAble, kA, kContA, kCafe,
                 kComma, kBang, kWo, kXiang, kDot, kE, kContS, kI, kCount };

const Tokenizer& tiny() {
  static const std::unique_ptr<Tokenizer> t = [] {
    Vocab v;
    v.model = "bert";
    v.tokens = {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "hello", "world", "un", "##aff", "##able",
                "a", "##a", "cafe", ",", "!", "\xE6\x88\x91" /* 我 */, "\xE6\x83\xB3" /* 想 */, ".", "e",
                "##s", "i"};
    v.types.assign(v.tokens.size(), TokenType::Normal);
    for (int32_t id : {kPad, kUnk, kCls, kSep, kMask}) v.types[static_cast<size_t>(id)] = TokenType::Control;
    v.unk = kUnk;
    v.bos = kCls;
    v.eos = kSep;
    v.pad = kPad;
    v.add_space_prefix = true;
    return Tokenizer::create(v);
  }();
  return *t;
}

}  // namespace

TEST_CASE("wordpiece: bge vectors with [CLS]/[SEP], and through the C API", "[tokenizer][wordpiece][c_api]") {
  REQUIRE_SHARED(path, "embedding/ggml-vocab-bert-bge.gguf");
  const std::unique_ptr<Tokenizer> tok = Tokenizer::create(*GgufFile::open(path));
  std::vector<std::string> inputs;
  std::vector<Ids> expected;
  infer_test::read_vocab_vectors(path, inputs, expected);
  REQUIRE(inputs.size() == expected.size());
  REQUIRE(!inputs.empty());
  CHECK(tok->vocab().bos == 101);  // [CLS]
  CHECK(tok->vocab().eos == 102);  // [SEP]
  CHECK(tok->vocab().unk == 100);  // [UNK]
  CHECK(tok->vocab().add_bos);

  infer_model_params mp;
  infer_model_params_init(&mp);
  mp.vocab_only = 1;
  infer_model* model = nullptr;
  REQUIRE(infer_model_load(path.c_str(), &mp, &model) == INFER_OK);
  size_t exact = 0;
  for (size_t i = 0; i < inputs.size(); ++i) {
    INFO("test " << i << ": '" << inputs[i] << "'");
    bool all = true;
    for (int32_t add : {0, 1}) {
      Ids want = expected[i];
      if (add) {
        want.insert(want.begin(), 101);
        want.push_back(102);
      }
      const Ids got = tok->encode(inputs[i], add != 0);
      CHECK(ids_str(got) == ids_str(want));
      all = all && got == want;
      size_t n = 0;
      const infer_status st = infer_tokenize(model, inputs[i].data(), inputs[i].size(), add, 0, nullptr, 0, &n);
      REQUIRE((st == INFER_OK || st == INFER_ERR_BUFFER_TOO_SMALL));
      Ids ids(n);
      REQUIRE(infer_tokenize(model, inputs[i].data(), inputs[i].size(), add, 0, ids.data(), ids.size(), &n) ==
              INFER_OK);
      CHECK(ids_str(ids) == ids_str(want));
      all = all && ids == want;
    }
    exact += all;
  }
  infer_model_free(model);
  WARN("wordpiece: " << exact << "/" << inputs.size() << " bge vectors exact (with and without specials, C++ and C API)");
  CHECK(exact == inputs.size());
  // Written specials with parse_special.
  CHECK(tok->encode("hello [SEP] world", false, true) == Ids{7592, 102, 2088});
}

TEST_CASE("wordpiece: the normalizer's less common characters", "[tokenizer][wordpiece]") {
  const Tokenizer& t = tiny();
  CHECK(t.encode("\xC3\x89", false) == Ids{kE});                // É: NFD, mark dropped, lowercase
  CHECK(t.encode("\xC4\xB0", false) == Ids{kI});                // İ: I + U+0307, mark dropped
  CHECK(t.encode("a\xE6\x88\x91" "a", false) == Ids{kA, kWo, kA});  // CJK inside a word splits it
  CHECK(t.encode("hello$", false) == Ids{kHello, kUnk});         // ASCII symbol = punctuation
  CHECK(t.encode("hello\xE3\x80\x82", false) == Ids{kHello, kUnk});  // 。 (Po)
  CHECK(t.encode("hello\xEF\xBD\x9E", false) == Ids{kUnk});      // ～ (Sm) is not punctuation
  // Dropped: controls, format characters (ZWJ), U+FFFD, private use,
  // unassigned code points; the rest of the word joins up.
  CHECK(t.encode("hel\x01lo", false) == Ids{kHello});
  CHECK(t.encode("hel\xE2\x80\x8Dlo", false) == Ids{kHello});
  CHECK(t.encode("hel\xEF\xBF\xBDlo", false) == Ids{kHello});
  CHECK(t.encode("hel\xEE\x80\x80lo", false) == Ids{kHello});    // U+E000
  CHECK(t.encode("hel\xF3\xB0\x80\x80lo", false) == Ids{kHello});  // U+F0000 (plane 15 private use)
  CHECK(t.encode("hel\xCD\xB8lo", false) == Ids{kHello});        // U+0378 (unassigned)
  // White_Space splits: NBSP, ideographic space, line/paragraph separators.
  CHECK(t.encode("hello\xC2\xA0world\xE3\x80\x80hello", false) == Ids{kHello, kWorld, kHello});
  CHECK(t.encode("hello\xE2\x80\xA8world\xE2\x80\xA9hello", false) == Ids{kHello, kWorld, kHello});
  // Continuations and [UNK].
  CHECK(t.encode("unaffable cafes aaa", false) == Ids{kUn, kAff, kAble, kCafe, kContS, kA, kContA, kContA});
  CHECK(t.encode("unaffablex", false) == Ids{kUnk});
  CHECK(t.encode("s", false) == Ids{kUnk});  // "##s" does not start a word
  std::string accents;  // 100 characters, 200 bytes: still a word
  for (int i = 0; i < 100; ++i) accents += "\xC3\xA9";
  CHECK(t.encode("a" + accents.substr(2), false).size() == 1);  // "a" + 99 é: [UNK] (no "##e")
  CHECK(t.encode(std::string(100, 'a'), false).size() == 100);
  CHECK(t.encode(std::string(101, 'a'), false) == Ids{kUnk});
}

TEST_CASE("wordpiece: special tokens written in the text", "[tokenizer][wordpiece]") {
  const Tokenizer& t = tiny();
  CHECK(t.encode("", true) == Ids{kCls, kSep});
  CHECK(t.encode(" \t\n", true) == Ids{kCls, kSep});
  CHECK(t.encode("hello [SEP] world", false) == Ids{kHello, kUnk, kUnk, kUnk, kWorld});
  CHECK(t.encode("hello [SEP] world", false, true) == Ids{kHello, kSep, kWorld});
  CHECK(t.encode("[CLS]hello[SEP]world[SEP]", false, true) == Ids{kCls, kHello, kSep, kWorld, kSep});
  CHECK(t.encode("[SEP", false, true) == Ids{kUnk, kUnk});
  // Many written specials (one pass through a trie; the result is checked,
  // not the time: tests assert no timings).
  std::string many;
  for (int i = 0; i < 20000; ++i) many += "[SEP]a";
  const Ids ids = t.encode(many, false, true);
  CHECK(ids.size() == 40000);
}

TEST_CASE("wordpiece: hostile input stays linear and never crashes", "[tokenizer][wordpiece]") {
  const Tokenizer& t = tiny();
  CHECK(t.encode("hel\xFFlo", false) == Ids{kHello});  // invalid byte dropped like U+FFFD
  CHECK(t.encode("\xC3", false).empty());
  CHECK(t.encode("\xE6\x88", true) == Ids{kCls, kSep});
  std::string junk;
  for (int i = 0; i < 4096; ++i) junk += static_cast<char>((i * 7919) & 0xFF);
  CHECK_NOTHROW(t.encode(junk, true, true));
  for (int32_t id : t.encode(junk, true, true)) CHECK_NOTHROW(t.token_to_piece(id, true));
  CHECK(t.encode(std::string(100000, 'a'), false) == Ids{kUnk});
  std::string words;
  for (int i = 0; i < 1000; ++i) words += std::string(100, 'a') + " ";
  CHECK(t.encode(words, false).size() == 100000);
  std::string cjk;
  for (int i = 0; i < 30000; ++i) cjk += "\xE6\x88\x91";
  CHECK(t.encode(cjk, false).size() == 30000);
}
