#include "tokenizer/wordpiece.h"

#include <utf8proc.h>

#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/error.h"
#include "tokenizer/unicode.h"

namespace infer {

namespace {

constexpr std::string_view kWordStart = "\xE2\x96\x81";  // U+2581, the GGUF spelling of a word start
constexpr size_t kMaxWordChars = 100;                      // longer words are [UNK] (BERT's max_input_chars_per_word)

bool cp_is_cjk(uint32_t c) {
  return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) || (c >= 0x20000 && c <= 0x2A6DF) ||
         (c >= 0x2A700 && c <= 0x2B73F) || (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B820 && c <= 0x2CEAF) ||
         (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

bool cp_is_space(uint32_t c) {
  if (c == ' ' || c == '\t' || c == '\n' || c == '\r') return true;
  return utf8proc_category(static_cast<utf8proc_int32_t>(c)) == UTF8PROC_CATEGORY_ZS;
}

bool cp_is_control(uint32_t c) {
  const utf8proc_category_t k = utf8proc_category(static_cast<utf8proc_int32_t>(c));
  return k == UTF8PROC_CATEGORY_CC || k == UTF8PROC_CATEGORY_CF;
}

bool cp_is_punct(uint32_t c) {
  if ((c >= 33 && c <= 47) || (c >= 58 && c <= 64) || (c >= 91 && c <= 96) || (c >= 123 && c <= 126)) return true;
  switch (utf8proc_category(static_cast<utf8proc_int32_t>(c))) {
    case UTF8PROC_CATEGORY_PC:
    case UTF8PROC_CATEGORY_PD:
    case UTF8PROC_CATEGORY_PS:
    case UTF8PROC_CATEGORY_PE:
    case UTF8PROC_CATEGORY_PI:
    case UTF8PROC_CATEGORY_PF:
    case UTF8PROC_CATEGORY_PO:
      return true;
    default:
      return false;
  }
}

// The code points of s in NFD (invalid UTF-8: one U+FFFD per maximal
// subpart, dropped later like any U+FFFD).
std::vector<uint32_t> nfd_codepoints(std::string_view s) {
  std::vector<uint32_t> out;
  out.reserve(s.size());
  utf8proc_int32_t buf[32];
  for (size_t pos = 0; pos < s.size();) {
    const Utf8Decoded d = utf8_decode(s, pos);
    pos += d.len;
    if (d.status != Utf8Status::Valid) {
      out.push_back(0xFFFD);
      continue;
    }
    int last = 0;
    const utf8proc_ssize_t n = utf8proc_decompose_char(static_cast<utf8proc_int32_t>(d.cp), buf, 32,
                                                       UTF8PROC_DECOMPOSE, &last);
    if (n < 0 || n > 32) {
      out.push_back(d.cp);
      continue;
    }
    for (utf8proc_ssize_t i = 0; i < n; ++i) out.push_back(static_cast<uint32_t>(buf[i]));
  }
  // Canonical ordering of combining marks does not matter here: every Mn is
  // dropped below.
  return out;
}

class WordPieceTokenizer final : public Tokenizer {
 public:
  explicit WordPieceTokenizer(Vocab v) : Tokenizer(std::move(v)) {
    const int32_t n = vocab_.size();
    bool gguf_form = false;
    for (int32_t i = 0; i < n && !gguf_form; ++i)
      gguf_form = vocab_.tokens[i].compare(0, kWordStart.size(), kWordStart) == 0;
    // One table, in the GGUF spelling: "▁word" for word starts, bare text
    // for continuations (the first id wins for a repeated text).
    for (int32_t i = 0; i < n; ++i) {
      const TokenType t = vocab_.types[i];
      if (t == TokenType::Control || t == TokenType::Unknown || t == TokenType::Unused) continue;
      const std::string& s = vocab_.tokens[i];
      if (s.empty()) continue;
      std::string key;
      if (gguf_form)
        key = s;
      else if (s.size() > 2 && s.compare(0, 2, "##") == 0)
        key = s.substr(2);
      else
        key = std::string(kWordStart) + s;
      max_piece_ = std::max(max_piece_, key.size());
      pieces_.emplace(std::move(key), i);
    }
    unk_ = vocab_.unk;
    if (unk_ < 0)
      for (int32_t i = 0; i < n && unk_ < 0; ++i)
        if (vocab_.tokens[i] == "[UNK]") unk_ = i;
    if (unk_ < 0) raise(Status::Format, "WordPiece vocabulary has no [UNK] token (tokenizer.ggml.unknown_token_id)");
    // Continuations decode without a space: remember which ids they are.
    continuation_.assign(static_cast<size_t>(n), 0);
    for (int32_t i = 0; i < n; ++i) {
      const std::string& s = vocab_.tokens[i];
      const TokenType t = vocab_.types[i];
      if (t == TokenType::Control || t == TokenType::Unknown) continue;
      continuation_[i] = gguf_form ? s.compare(0, kWordStart.size(), kWordStart) != 0
                                   : (s.size() > 2 && s.compare(0, 2, "##") == 0);
    }
    gguf_form_ = gguf_form;
  }

  std::vector<int32_t> encode(std::string_view text, bool add_bos, bool parse_special) const override {
    std::vector<int32_t> out;
    if (add_bos && vocab_.bos >= 0) out.push_back(vocab_.bos);
    if (parse_special) {
      // Control tokens written literally ([CLS], [SEP], [MASK]) become their
      // ids; the text between them is encoded as usual.
      size_t start = 0;
      while (start < text.size()) {
        size_t best = std::string_view::npos, best_len = 0;
        int32_t best_id = -1;
        for (int32_t i = 0; i < vocab_.size(); ++i) {
          if (vocab_.types[i] != TokenType::Control || vocab_.tokens[i].empty()) continue;
          const size_t at = text.find(vocab_.tokens[i], start);
          if (at != std::string_view::npos && (at < best || (at == best && vocab_.tokens[i].size() > best_len))) {
            best = at;
            best_len = vocab_.tokens[i].size();
            best_id = i;
          }
        }
        if (best == std::string_view::npos) break;
        encode_words(text.substr(start, best - start), out);
        out.push_back(best_id);
        start = best + best_len;
      }
      encode_words(text.substr(std::min(start, text.size())), out);
    } else {
      encode_words(text, out);
    }
    if (add_bos && vocab_.eos >= 0) out.push_back(vocab_.eos);
    return out;
  }

  std::string token_to_piece(int32_t id, bool render_special) const override {
    if (id < 0 || id >= vocab_.size()) raise(Status::InvalidArgument, "token id %d is out of range [0, %d)", id, vocab_.size());
    const std::string& s = vocab_.tokens[id];
    const TokenType t = vocab_.types[id];
    if (t == TokenType::Control || t == TokenType::Unknown) return render_special ? s : std::string();
    if (continuation_[id]) return gguf_form_ ? s : s.substr(2);
    if (gguf_form_) return " " + s.substr(kWordStart.size());
    return " " + s;
  }

 private:
  // The words of text (see the header), each matched into pieces.
  void encode_words(std::string_view text, std::vector<int32_t>& out) const {
    std::string word;
    size_t chars = 0;
    auto flush = [&] {
      if (!word.empty()) match_word(word, chars, out);
      word.clear();
      chars = 0;
    };
    for (uint32_t c : nfd_codepoints(text)) {
      if (c == 0 || c == 0xFFFD || (cp_is_control(c) && !cp_is_space(c))) continue;
      if (cp_is_space(c)) {
        flush();
        continue;
      }
      if (utf8proc_category(static_cast<utf8proc_int32_t>(c)) == UTF8PROC_CATEGORY_MN) continue;
      c = static_cast<uint32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(c)));
      if (cp_is_punct(c) || cp_is_cjk(c)) {
        flush();
        utf8_append(word, c);
        chars = 1;
        flush();
        continue;
      }
      utf8_append(word, c);
      ++chars;
    }
    flush();
  }

  // Greedy longest-first pieces of one word, or [UNK].
  void match_word(const std::string& word, size_t chars, std::vector<int32_t>& out) const {
    if (chars > kMaxWordChars) {
      out.push_back(unk_);
      return;
    }
    // Code point boundaries of the word.
    std::vector<size_t> cut;
    for (size_t i = 0; i < word.size(); i += utf8_len_from_lead(static_cast<unsigned char>(word[i]))) cut.push_back(i);
    cut.push_back(word.size());
    const size_t mark = out.size();
    std::string key;
    size_t b = 0;  // index into cut
    while (b + 1 < cut.size()) {
      int32_t id = -1;
      size_t e = cut.size() - 1;
      for (; e > b; --e) {
        const size_t len = cut[e] - cut[b];
        if (len + (b == 0 ? kWordStart.size() : 0) > max_piece_) continue;
        key.clear();
        if (b == 0) key = kWordStart;
        key.append(word, cut[b], len);
        auto it = pieces_.find(key);
        if (it != pieces_.end()) {
          id = it->second;
          break;
        }
      }
      if (id < 0) {
        out.resize(mark);
        out.push_back(unk_);
        return;
      }
      out.push_back(id);
      b = e;
    }
  }

  std::unordered_map<std::string, int32_t> pieces_;
  std::vector<uint8_t> continuation_;
  size_t max_piece_ = 0;
  int32_t unk_ = -1;
  bool gguf_form_ = true;
};

}  // namespace

std::unique_ptr<Tokenizer> make_wordpiece_tokenizer(Vocab vocab) {
  return std::make_unique<WordPieceTokenizer>(std::move(vocab));
}

}  // namespace infer
