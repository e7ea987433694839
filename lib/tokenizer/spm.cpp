// SentencePiece BPE ("llama" vocabularies in GGUF).
//
// Encoding follows SentencePiece's BPE model, which is also what llama.cpp's
// SPM tokenizer implements:
//
//   1. Normalize (SentencePiece "identity" rule): every byte that is not part
//      of well-formed UTF-8 becomes U+FFFD, each ' ' becomes U+2581 "▁", and
//      a "▁" is prepended (the dummy prefix, add_space_prefix) to non-empty
//      text. With remove_extra_whitespaces, leading/trailing spaces are
//      dropped and runs of spaces collapse to one first.
//   2. Split into symbols: one per code point, except that user-defined
//      tokens are matched first (leftmost-longest) and stay frozen.
//   3. Merge: repeatedly join the adjacent pair whose concatenation is a
//      vocabulary piece with the highest score (ties: leftmost pair). Pairs
//      live in a max-heap; a symbol list is a doubly linked list, so a merge
//      costs O(log n) and stale heap entries are skipped when popped.
//   4. Emit: a symbol that is a piece gives its id. A piece of type Unused
//      may be merged into but is never emitted: it is split back into the two
//      symbols it was made from (SentencePiece's resegmentation). A symbol
//      that is not a piece (only single code points can be: merges always
//      produce pieces) falls back to one <0xXX> token per byte, or to the
//      unknown token when the vocabulary has no byte tokens.
//
// SentencePiece only merges into pieces of type Normal, UserDefined and
// Unused; Control, Unknown and Byte pieces are reserved. We do the same (and
// treat Undefined as Normal).
#include "tokenizer/spm.h"

#include <algorithm>
#include <array>
#include <climits>
#include <cstdio>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/error.h"
#include "tokenizer/token_index.h"

namespace infer {

namespace {

constexpr std::string_view kSpaceMark = "\xE2\x96\x81";  // U+2581 "▁"

// Whether position pos of s starts a run of "▁": a "▁" not preceded by one.
inline bool word_start(std::string_view s, size_t pos) {
  return s.compare(pos, kSpaceMark.size(), kSpaceMark) == 0 &&
         (pos < kSpaceMark.size() ||
          s.compare(pos - kSpaceMark.size(), kSpaceMark.size(), kSpaceMark) != 0);
}

// "<0xAB>" -> 0xAB; -1 when the text is not a byte token name.
int parse_byte_token(std::string_view t) {
  if (t.size() != 6 || t.substr(0, 3) != "<0x" || t[5] != '>') return -1;
  auto hex = [](char ch) -> int {
    if (ch >= '0' && ch <= '9') return ch - '0';
    if (ch >= 'A' && ch <= 'F') return ch - 'A' + 10;
    if (ch >= 'a' && ch <= 'f') return ch - 'a' + 10;
    return -1;
  };
  const int h = hex(t[3]), l = hex(t[4]);
  if (h < 0 || l < 0) return -1;
  return h * 16 + l;
}

class SpmTokenizer final : public Tokenizer {
 public:
  explicit SpmTokenizer(Vocab v);

  std::vector<int32_t> encode(std::string_view text, bool add_bos,
                              bool parse_special) const override;
  std::string token_to_piece(int32_t id, bool render_special) const override;

 private:
  // Normalizes one text fragment and appends its tokens to out.
  void encode_fragment(std::string_view text, bool dummy_prefix, std::vector<int32_t>& out) const;
  void normalize(std::string_view text, bool dummy_prefix, std::string& out) const;
  // BPE over normalized text.
  void bpe(std::string_view s, std::vector<int32_t>& out) const;

  bool mergeable(int32_t id) const {
    const TokenType t = vocab_.types[id];
    return t == TokenType::Normal || t == TokenType::UserDefined || t == TokenType::Unused ||
           t == TokenType::Undefined;
  }

  PieceTable piece_id_;  // refers to vocab_.tokens
  std::array<int32_t, 256> byte_id_;
  bool byte_fallback_ = false;
  // No mergeable piece has a "▁" right after another character, so text can
  // be merged word by word (true for SentencePiece's whitespace-split models).
  bool split_at_space_ = false;
  bool has_unused_ = false;                   // some piece has type Unused
  static constexpr size_t kCacheFrom = 4096;  // texts this long cache words
  TokenTrie special_;  // control and unknown tokens, matched when parse_special
  TokenTrie user_;     // user-defined tokens, always atomic
};

SpmTokenizer::SpmTokenizer(Vocab v) : Tokenizer(std::move(v)), piece_id_(vocab_.tokens) {
  const auto& toks = vocab_.tokens;
  byte_id_.fill(-1);
  for (size_t i = 0; i < toks.size(); ++i) {
    const int32_t id = static_cast<int32_t>(i);
    const std::string& t = toks[i];
    const TokenType type = vocab_.types[i];
    if (type == TokenType::Byte) {
      const int b = parse_byte_token(t);
      if (b < 0)
        raise(Status::Format, "token %d has type byte but its text is not <0xXX>", id);
      if (byte_id_[b] < 0) byte_id_[b] = id;
    }
    if (t.empty()) continue;
    if (type == TokenType::Control || type == TokenType::Unknown) special_.insert(t, id);
    if (type == TokenType::UserDefined) user_.insert(t, id);
  }
  // Vocabularies built without token types: byte tokens by their names.
  for (int b = 0; b < 256; ++b) {
    if (byte_id_[b] >= 0) continue;
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    byte_id_[b] = piece_id_.find(name);
  }
  for (int b = 0; b < 256; ++b) byte_fallback_ = byte_fallback_ || byte_id_[b] >= 0;

  has_unused_ = std::find(vocab_.types.begin(), vocab_.types.end(), TokenType::Unused) != vocab_.types.end();
  split_at_space_ = true;
  for (size_t i = 0; i < toks.size() && split_at_space_; ++i) {
    if (!mergeable(static_cast<int32_t>(i))) continue;
    const std::string_view t = toks[i];
    for (size_t p = t.find(kSpaceMark, 1); p != std::string_view::npos; p = t.find(kSpaceMark, p + 1)) {
      if (!word_start(t, p)) continue;
      split_at_space_ = false;
      break;
    }
  }
}

std::vector<int32_t> SpmTokenizer::encode(std::string_view text, bool add_bos,
                                          bool parse_special) const {
  // Normalization can triple the size (' ' -> "▁", bad byte -> U+FFFD); symbol
  // offsets are 32-bit.
  if (text.size() > static_cast<size_t>(INT32_MAX) / 4)
    raise(Status::InvalidArgument, "text of %zu bytes is too long to tokenize", text.size());
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 8);
  if (add_bos && vocab_.bos >= 0) out.push_back(vocab_.bos);
  if (!parse_special || special_.empty()) {
    encode_fragment(text, vocab_.add_space_prefix, out);
    return out;
  }
  // Split at control tokens (leftmost-longest). As llama.cpp does (and as
  // Llama-2's reference chat code, which encodes each segment separately),
  // the text at the start and the text right after a control token get the
  // dummy prefix: "<s>[INST]" -> <s> "▁[" ...
  // Tokens with lstrip/rstrip (see Tokenizer::strip_flags) also swallow the
  // ASCII whitespace before/after them.
  const bool prefix = vocab_.add_space_prefix;
  auto space = [](char c) { return c == ' ' || (c >= '\t' && c <= '\r'); };
  size_t start = 0;
  for (size_t i = 0; i < text.size();) {
    int32_t id = -1;
    const size_t n = special_.starts(static_cast<unsigned char>(text[i]))
                         ? special_.match(text.substr(i), &id)
                         : 0;
    if (n == 0) {
      ++i;
      continue;
    }
    size_t left_end = i;
    if (strip_flags(id) & kLStrip)
      while (left_end > start && space(text[left_end - 1])) --left_end;
    if (left_end > start) encode_fragment(text.substr(start, left_end - start), prefix, out);
    out.push_back(id);
    i += n;
    if (strip_flags(id) & kRStrip)
      while (i < text.size() && space(text[i])) ++i;
    start = i;
  }
  if (start < text.size()) encode_fragment(text.substr(start), prefix, out);
  return out;
}

void SpmTokenizer::encode_fragment(std::string_view text, bool dummy_prefix,
                                   std::vector<int32_t>& out) const {
  std::string normalized;
  normalize(text, dummy_prefix, normalized);
  if (!normalized.empty()) bpe(normalized, out);
}

void SpmTokenizer::normalize(std::string_view text, bool dummy_prefix, std::string& out) const {
  const bool squeeze = vocab_.remove_extra_whitespaces;
  size_t pos = 0;
  if (squeeze)
    while (pos < text.size() && text[pos] == ' ') ++pos;
  if (pos == text.size()) return;  // empty (or only spaces when squeezing): no tokens
  out.reserve(out.size() + (text.size() - pos) + (text.size() - pos) / 4 + 8);
  const size_t base = out.size();
  if (dummy_prefix) out += kSpaceMark;
  bool prev_space = squeeze;
  while (pos < text.size()) {
    const char c = text[pos];
    if (c == ' ') {
      if (!(squeeze && prev_space)) out += kSpaceMark;
      prev_space = squeeze;
      ++pos;
      continue;
    }
    prev_space = false;
    if (static_cast<unsigned char>(c) < 0x80) {
      out += c;
      ++pos;
      continue;
    }
    size_t len = 0;
    if (utf8_next(text, pos, &len) == Utf8Status::Valid) {
      out.append(text.data() + pos, len);
      pos += len;
    } else {
      out += kUtf8Replacement;  // one U+FFFD per bad byte, as SentencePiece does
      ++pos;
    }
  }
  if (squeeze)
    while (out.size() >= base + kSpaceMark.size() &&
           std::string_view(out).substr(out.size() - kSpaceMark.size()) == kSpaceMark)
      out.resize(out.size() - kSpaceMark.size());
}

void SpmTokenizer::bpe(std::string_view s, std::vector<int32_t>& out) const {
  struct Symbol {
    uint32_t start, len;
    int32_t prev, next;
    bool frozen;  // user-defined token: never merged
  };
  std::vector<Symbol> sym;
  sym.reserve(s.size());
  for (size_t pos = 0; pos < s.size();) {
    size_t n = 0;
    bool frozen = false;
    if (!user_.empty()) {
      int32_t id;
      n = user_.match(s.substr(pos), &id);
      frozen = n > 0;
    }
    if (n == 0) n = std::min(utf8_len_from_lead(static_cast<unsigned char>(s[pos])), s.size() - pos);
    const int32_t i = static_cast<int32_t>(sym.size());
    sym.push_back({static_cast<uint32_t>(pos), static_cast<uint32_t>(n), i - 1, i + 1, frozen});
    pos += n;
  }
  sym.back().next = -1;

  // Candidate merges. A candidate is stale once either side has changed
  // length (merged into something else), which the length check detects.
  struct Pair {
    float score;
    int32_t left, right;
    uint32_t len;
  };
  auto lower = [](const Pair& a, const Pair& b) {
    return a.score < b.score || (a.score == b.score && a.left > b.left);
  };
  std::vector<Pair> heap;
  heap.reserve(sym.size());
  // Pieces of type Unused that were merged into: text -> the two halves
  // (keyed by text like SentencePiece; needed only when such pieces exist).
  std::unordered_map<std::string_view, std::pair<std::string_view, std::string_view>> unmerge;

  auto view = [&](const Symbol& x) { return s.substr(x.start, x.len); };
  auto try_pair = [&](int32_t l, int32_t r) {
    if (l < 0 || r < 0 || sym[l].frozen || sym[r].frozen) return;
    const uint32_t len = sym[l].len + sym[r].len;
    const std::string_view piece = s.substr(sym[l].start, len);
    const int32_t id = piece_id_.find(piece);
    if (id < 0 || !mergeable(id)) return;
    heap.push_back({vocab_.scores[id], l, r, len});
    std::push_heap(heap.begin(), heap.end(), lower);
    if (vocab_.types[id] == TokenType::Unused)
      unmerge[piece] = {view(sym[l]), view(sym[r])};
  };

  // Emit, splitting merged Unused pieces back and falling back to bytes.
  auto emit = [&](auto&& self, std::string_view piece) -> void {
    const int32_t id = piece_id_.find(piece);
    if (id >= 0) {
      const TokenType t = vocab_.types[id];
      if (t == TokenType::Unused) {
        const auto u = unmerge.find(piece);
        if (u != unmerge.end()) {
          self(self, u->second.first);
          self(self, u->second.second);
          return;
        }
      }
      if (t != TokenType::Unknown) {
        out.push_back(id);
        return;
      }
    }
    if (byte_fallback_) {
      for (unsigned char c : piece) {
        const int32_t b = byte_id_[c] >= 0 ? byte_id_[c] : vocab_.unk;
        if (b >= 0) out.push_back(b);
      }
    } else if (vocab_.unk >= 0) {
      out.push_back(vocab_.unk);
    }
  };

  // When no piece can span the start of a run of "▁" (split_at_space_), the
  // merges on either side of such a point never interact, so each word is
  // merged on its own: the same result as one pass over the whole text, with
  // small heaps. Pairs across a segment start are still tried but never found.
  // Long texts also reuse the tokens of words seen before in this call (not
  // with Unused pieces, whose resegmentation is keyed by text across the
  // whole input, as in SentencePiece).
  const size_t n = sym.size();
  const bool cache = split_at_space_ && !has_unused_ && s.size() >= kCacheFrom;
  std::unordered_map<std::string_view, std::pair<size_t, size_t>> seen;
  size_t seg_begin = 0;
  while (seg_begin < n) {
    size_t seg_end = n;
    if (split_at_space_) {
      seg_end = seg_begin + 1;
      while (seg_end < n && !word_start(s, sym[seg_end].start)) ++seg_end;
    }
    std::string_view word;
    if (cache) {
      const size_t b = sym[seg_begin].start, e = seg_end < n ? sym[seg_end].start : s.size();
      word = s.substr(b, e - b);
      const auto it = seen.find(word);
      if (it != seen.end()) {
        for (size_t i = 0; i < it->second.second; ++i) {
          const int32_t id = out[it->second.first + i];
          out.push_back(id);
        }
        seg_begin = seg_end;
        continue;
      }
    }
    for (size_t i = seg_begin + 1; i < seg_end; ++i)
      try_pair(static_cast<int32_t>(i) - 1, static_cast<int32_t>(i));

    while (!heap.empty()) {
      std::pop_heap(heap.begin(), heap.end(), lower);
      const Pair p = heap.back();
      heap.pop_back();
      Symbol& l = sym[p.left];
      Symbol& r = sym[p.right];
      if (l.len == 0 || r.len == 0 || l.len + r.len != p.len || l.next != p.right) continue;
      l.len += r.len;
      r.len = 0;
      l.next = r.next;
      if (r.next >= 0) sym[r.next].prev = p.left;
      try_pair(l.prev, p.left);
      try_pair(p.left, l.next);
    }
    if (cache) {
      // The segment's first symbol survives its merges; its chain ends at
      // the next segment's first symbol.
      const size_t before = out.size();
      for (int32_t i = static_cast<int32_t>(seg_begin); i >= 0 && static_cast<size_t>(i) < seg_end;
           i = sym[i].next)
        emit(emit, view(sym[i]));
      seen.emplace(word, std::make_pair(before, out.size() - before));
    }
    seg_begin = seg_end;
  }
  if (cache) return;

  for (int32_t i = 0; i >= 0; i = sym[i].next) emit(emit, view(sym[i]));
}

std::string SpmTokenizer::token_to_piece(int32_t id, bool render_special) const {
  if (id < 0 || id >= n_vocab())
    raise(Status::InvalidArgument, "token id %d is out of range (vocabulary of %d tokens)", id,
          n_vocab());
  const std::string& text = vocab_.tokens[static_cast<size_t>(id)];
  switch (vocab_.types[static_cast<size_t>(id)]) {
    case TokenType::Normal:
    case TokenType::Undefined: {
      std::string out;
      out.reserve(text.size());
      for (size_t i = 0; i < text.size();) {
        if (text.compare(i, kSpaceMark.size(), kSpaceMark) == 0) {
          out += ' ';
          i += kSpaceMark.size();
        } else {
          out += text[i++];
        }
      }
      return out;
    }
    case TokenType::Byte:
      return std::string(1, static_cast<char>(parse_byte_token(text)));
    case TokenType::UserDefined:
      return text;
    case TokenType::Control:
    case TokenType::Unknown:
    case TokenType::Unused:
      return render_special ? text : std::string();
  }
  return std::string();
}

}  // namespace

std::unique_ptr<Tokenizer> make_spm_tokenizer(Vocab vocab) {
  return std::make_unique<SpmTokenizer>(std::move(vocab));
}

}  // namespace infer
