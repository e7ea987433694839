// Byte-level BPE ("gpt2" vocabularies in GGUF), as in GPT-2, Llama 3, Qwen2,
// DeepSeek, Falcon, StarCoder and most BPE models since.
//
// Encoding:
//   1. Added tokens first: user-defined tokens written in the text are
//      always taken whole, control (and unknown) tokens only with
//      parse_special; leftmost-longest match, with the lstrip/rstrip rules
//      of Tokenizer::strip_flags. The text between them is encoded below.
//   2. Normalize when the family's tokenizer does (NFC for Qwen2, GPT-NeoX
//      based vocabularies and Command-R).
//   3. Pre-tokenize: the regexes of `tokenizer.ggml.pre` cut the text into
//      words (pretokenizer.h). Merges never cross a word boundary.
//   4. Each word's bytes become symbols, one token per byte (the token whose
//      text is the byte's character in the GPT-2 byte alphabet, unicode.h).
//      With ignore_merges (Llama 3, Tekken) a word whose byte-level spelling
//      is itself a token is emitted whole, as the reference does.
//   5. Merge: repeatedly join the adjacent pair with the lowest rank in
//      tokenizer.ggml.merges (ties: leftmost). Pairs live in a min-heap over a
//      doubly linked list of symbols, so each merge costs O(log n); stale
//      heap entries are recognised when popped. Merges are keyed by the two
//      token ids, so no strings are built while merging.
//
// Decoding maps each normal token's byte-level text back to bytes;
// user-defined tokens are stored as raw text and copied; control tokens are
// empty unless render_special. No "clean up tokenization spaces" is applied,
// so decode(encode(text)) == text byte for byte whenever no normalization
// changed the text (even for invalid UTF-8, which byte-level BPE represents
// exactly).
#include "tokenizer/bpe.h"

#include <algorithm>
#include <array>
#include <climits>
#include <cstdio>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/error.h"
#include "core/log.h"
#include "tokenizer/pretokenizer.h"
#include "tokenizer/token_index.h"
#include "tokenizer/unicode.h"

namespace infer {

namespace {

// (left id, right id) -> (rank, merged id), open addressing.
class MergeTable {
 public:
  struct Entry {
    uint64_t key = kEmpty;
    int32_t rank = 0;
    int32_t result = 0;
  };

  void reserve(size_t n) {
    size_t cap = 16;
    while (cap < n * 2) cap *= 2;
    slots_.assign(cap, Entry{});
    mask_ = cap - 1;
  }

  // Keeps the first (lowest-rank) entry for a pair.
  void insert(int32_t left, int32_t right, int32_t rank, int32_t result) {
    const uint64_t key = make_key(left, right);
    for (size_t k = hash(key) & mask_;; k = (k + 1) & mask_) {
      Entry& e = slots_[k];
      if (e.key == key) return;
      if (e.key == kEmpty) {
        e = {key, rank, result};
        ++size_;
        return;
      }
    }
  }

  const Entry* find(int32_t left, int32_t right) const {
    if (size_ == 0) return nullptr;
    const uint64_t key = make_key(left, right);
    for (size_t k = hash(key) & mask_;; k = (k + 1) & mask_) {
      const Entry& e = slots_[k];
      if (e.key == key) return &e;
      if (e.key == kEmpty) return nullptr;
    }
  }

  size_t size() const { return size_; }

 private:
  static constexpr uint64_t kEmpty = ~0ull;
  static uint64_t make_key(int32_t l, int32_t r) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(l)) << 32) | static_cast<uint32_t>(r);
  }
  static uint64_t hash(uint64_t x) {
    x ^= x >> 31;
    x *= 0x7fb5d329728ea185ull;
    x ^= x >> 27;
    x *= 0x81dadef4bc2dd44dull;
    x ^= x >> 33;
    return x;
  }
  std::vector<Entry> slots_;
  size_t mask_ = 0;
  size_t size_ = 0;
};

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
  return h < 0 || l < 0 ? -1 : h * 16 + l;
}

inline bool ascii_space(char c) { return c == ' ' || (c >= '\t' && c <= '\r'); }

class BpeTokenizer final : public Tokenizer {
 public:
  explicit BpeTokenizer(Vocab v);

  std::vector<int32_t> encode(std::string_view text, bool add_bos,
                              bool parse_special) const override;
  std::string token_to_piece(int32_t id, bool render_special) const override;

 private:
  // Working memory reused across the words of one encode() call.
  struct Symbol {
    int32_t id;  // token id; -1: a byte with no token; -2: merged away
    int32_t prev, next;
  };
  struct Candidate {
    int32_t rank, left, right, left_id, right_id, result;
  };
  struct Scratch {
    std::vector<PreTokenizer::Span> words;
    std::vector<Symbol> sym;
    std::vector<Candidate> heap;
    std::string mapped;
  };

  void encode_text(std::string_view text, std::vector<int32_t>& out, Scratch& s) const;
  void encode_word(std::string_view word, std::vector<int32_t>& out, Scratch& s) const;
  static constexpr int32_t kShortWord = 32;
  static constexpr size_t kCacheFrom = 4096;  // texts this long cache words
  void merge_short(std::string_view word, std::vector<int32_t>& out) const;
  // A symbol's token, or the unknown token for a byte the vocabulary cannot
  // spell (nothing when there is none).
  void emit(int32_t id, std::vector<int32_t>& out) const {
    if (id >= 0)
      out.push_back(id);
    else if (vocab_.unk >= 0)
      out.push_back(vocab_.unk);
  }

  PieceTable piece_id_;  // refers to vocab_.tokens
  std::unique_ptr<PreTokenizer> pre_;
  std::array<int32_t, 256> byte_id_;
  MergeTable merges_;
  TokenTrie added_;                  // control, unknown and user-defined tokens
  std::vector<std::string> pieces_;  // bytes of each normal / byte token
};

BpeTokenizer::BpeTokenizer(Vocab v) : Tokenizer(std::move(v)), piece_id_(vocab_.tokens) {
  pre_ = PreTokenizer::create(vocab_.pre);
  // Byte-level BPE adds no dummy prefix, whatever the metadata says, so
  // decode() must not remove one either.
  vocab_.add_space_prefix = false;
  const auto& toks = vocab_.tokens;
  const size_t n = toks.size();

  for (int b = 0; b < 256; ++b) byte_id_[b] = piece_id_.find(byte_to_unicode(static_cast<uint8_t>(b)));

  if (vocab_.merges.empty()) raise(Status::Format, "byte-level BPE vocabulary has no tokenizer.ggml.merges");
  if (vocab_.merges.size() > static_cast<size_t>(INT32_MAX))
    raise(Status::Format, "tokenizer.ggml.merges has too many entries");
  merges_.reserve(vocab_.merges.size());
  size_t skipped = 0;
  std::string joined;
  for (size_t rank = 0; rank < vocab_.merges.size(); ++rank) {
    const std::string& m = vocab_.merges[rank];
    const size_t sp = m.find(' ', 1);
    if (sp == std::string::npos) {
      ++skipped;
      continue;
    }
    const std::string_view left = std::string_view(m).substr(0, sp);
    const std::string_view right = std::string_view(m).substr(sp + 1);
    const int32_t l = piece_id_.find(left), r = piece_id_.find(right);
    joined.assign(left);
    joined += right;
    const int32_t result = piece_id_.find(joined);
    if (l < 0 || r < 0 || result < 0) {
      ++skipped;
      continue;
    }
    merges_.insert(l, r, static_cast<int32_t>(rank), result);
  }
  if (skipped)
    log(LogLevel::Debug, "byte-level BPE: %zu merges name tokens that are not in the vocabulary", skipped);

  pieces_.resize(n);
  for (size_t i = 0; i < n; ++i) {
    const int32_t id = static_cast<int32_t>(i);
    const TokenType t = vocab_.types[i];
    if (t == TokenType::Normal || t == TokenType::Undefined) {
      unicode_to_bytes(toks[i], pieces_[i]);
    } else if (t == TokenType::Byte) {
      const int b = parse_byte_token(toks[i]);
      if (b >= 0)
        pieces_[i].assign(1, static_cast<char>(b));
      else
        unicode_to_bytes(toks[i], pieces_[i]);
    }
    if (!toks[i].empty() &&
        (t == TokenType::Control || t == TokenType::Unknown || t == TokenType::UserDefined))
      added_.insert(toks[i], id);
  }
}

std::vector<int32_t> BpeTokenizer::encode(std::string_view text, bool add_bos,
                                          bool parse_special) const {
  if (text.size() > static_cast<size_t>(INT32_MAX) / 2)
    raise(Status::InvalidArgument, "text of %zu bytes is too long to tokenize", text.size());
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 8);
  if (add_bos && vocab_.bos >= 0) out.push_back(vocab_.bos);
  Scratch scratch;
  if (added_.empty()) {
    encode_text(text, out, scratch);
    return out;
  }
  auto accept = [&](int32_t id) {
    return parse_special || vocab_.types[static_cast<size_t>(id)] == TokenType::UserDefined;
  };
  size_t start = 0;
  for (size_t i = 0; i < text.size();) {
    int32_t id = -1;
    const size_t n = added_.starts(static_cast<unsigned char>(text[i]))
                         ? added_.match(text.substr(i), &id, accept)
                         : 0;
    if (n == 0) {
      ++i;
      continue;
    }
    size_t left_end = i;
    if (strip_flags(id) & kLStrip)
      while (left_end > start && ascii_space(text[left_end - 1])) --left_end;
    if (left_end > start) encode_text(text.substr(start, left_end - start), out, scratch);
    out.push_back(id);
    i += n;
    if (strip_flags(id) & kRStrip)
      while (i < text.size() && ascii_space(text[i])) ++i;
    start = i;
  }
  if (start < text.size()) encode_text(text.substr(start), out, scratch);
  return out;
}

void BpeTokenizer::encode_text(std::string_view text, std::vector<int32_t>& out, Scratch& s) const {
  if (text.empty()) return;
  std::string normalized;
  if (pre_->info().normalization != Normalization::None) {
    normalized = normalize(text, pre_->info().normalization);
    text = normalized;
  }
  pre_->split(text, s.words);
  if (text.size() < kCacheFrom) {
    for (const auto& w : s.words) encode_word(text.substr(w.first, w.second), out, s);
    return;
  }
  // Long texts repeat their words: remember each word's tokens (as a range
  // of `out`) for the rest of this call.
  std::unordered_map<std::string_view, std::pair<size_t, size_t>> seen;
  seen.reserve(s.words.size() / 8 + 16);
  for (const auto& w : s.words) {
    const std::string_view word = text.substr(w.first, w.second);
    if (word.size() < 2) {
      encode_word(word, out, s);
      continue;
    }
    const auto it = seen.find(word);
    if (it != seen.end()) {
      for (size_t i = 0; i < it->second.second; ++i) {
        const int32_t id = out[it->second.first + i];
        out.push_back(id);
      }
      continue;
    }
    const size_t before = out.size();
    encode_word(word, out, s);
    seen.emplace(word, std::make_pair(before, out.size() - before));
  }
}

void BpeTokenizer::encode_word(std::string_view word, std::vector<int32_t>& out, Scratch& s) const {
  if (word.empty()) return;
  if (pre_->info().ignore_merges) {
    s.mapped.clear();
    bytes_to_unicode(word, s.mapped);
    const int32_t id = piece_id_.find(s.mapped);
    if (id >= 0) {
      out.push_back(id);
      return;
    }
  }
  const int32_t n = static_cast<int32_t>(word.size());
  if (n == 1) {
    emit(byte_id_[static_cast<unsigned char>(word[0])], out);
    return;
  }
  if (n <= kShortWord) {
    merge_short(word, out);
    return;
  }
  auto& sym = s.sym;
  sym.resize(static_cast<size_t>(n));
  for (int32_t i = 0; i < n; ++i)
    sym[i] = {byte_id_[static_cast<unsigned char>(word[i])], i - 1, i + 1 < n ? i + 1 : -1};

  // Min-heap on (rank, left position).
  auto later = [](const Candidate& a, const Candidate& b) {
    return a.rank > b.rank || (a.rank == b.rank && a.left > b.left);
  };
  auto& heap = s.heap;
  heap.clear();
  auto consider = [&](int32_t l, int32_t r) {
    if (l < 0 || r < 0 || sym[l].id < 0 || sym[r].id < 0) return;
    const MergeTable::Entry* e = merges_.find(sym[l].id, sym[r].id);
    if (!e) return;
    heap.push_back({e->rank, l, r, sym[l].id, sym[r].id, e->result});
    std::push_heap(heap.begin(), heap.end(), later);
  };
  for (int32_t i = 0; i + 1 < n; ++i) consider(i, i + 1);

  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), later);
    const Candidate c = heap.back();
    heap.pop_back();
    Symbol& l = sym[c.left];
    // Stale: either side has been merged into something else since.
    if (l.id != c.left_id || l.next != c.right || sym[c.right].id != c.right_id) continue;
    Symbol& r = sym[c.right];
    l.id = c.result;
    r.id = -2;
    l.next = r.next;
    if (r.next >= 0) sym[r.next].prev = c.left;
    consider(l.prev, c.left);
    consider(c.left, l.next);
  }

  for (int32_t i = 0; i >= 0; i = sym[i].next) emit(sym[i].id, out);
}

// Short words (most of them): the same merges with the pair ranks kept in
// small arrays, scanning for the lowest (leftmost on ties) instead of using a
// heap; each merge shifts the arrays and looks up the two new pairs.
void BpeTokenizer::merge_short(std::string_view word, std::vector<int32_t>& out) const {
  constexpr int32_t kNone = INT32_MAX;
  int32_t ids[kShortWord], rank[kShortWord], result[kShortWord];
  int32_t m = static_cast<int32_t>(word.size());
  for (int32_t i = 0; i < m; ++i) ids[i] = byte_id_[static_cast<unsigned char>(word[i])];
  auto pair_rank = [&](int32_t i) {
    const MergeTable::Entry* e = ids[i] >= 0 && ids[i + 1] >= 0 ? merges_.find(ids[i], ids[i + 1]) : nullptr;
    rank[i] = e ? e->rank : kNone;
    result[i] = e ? e->result : -1;
  };
  for (int32_t i = 0; i + 1 < m; ++i) pair_rank(i);
  while (m > 1) {
    int32_t best = 0;
    for (int32_t i = 1; i + 1 < m; ++i)
      if (rank[i] < rank[best]) best = i;
    if (rank[best] == kNone) break;
    ids[best] = result[best];
    // Remove symbol best + 1 and the pair that started at it.
    for (int32_t i = best + 1; i + 1 < m; ++i) {
      ids[i] = ids[i + 1];
      rank[i] = rank[i + 1];
      result[i] = result[i + 1];
    }
    --m;
    if (best > 0) pair_rank(best - 1);
    if (best + 1 < m) pair_rank(best);
  }
  for (int32_t i = 0; i < m; ++i) emit(ids[i], out);
}

std::string BpeTokenizer::token_to_piece(int32_t id, bool render_special) const {
  if (id < 0 || id >= n_vocab())
    raise(Status::InvalidArgument, "token id %d is out of range (vocabulary of %d tokens)", id,
          n_vocab());
  const size_t i = static_cast<size_t>(id);
  switch (vocab_.types[i]) {
    case TokenType::Normal:
    case TokenType::Undefined:
    case TokenType::Byte:
      return pieces_[i];
    case TokenType::UserDefined:
      return vocab_.tokens[i];
    case TokenType::Control:
    case TokenType::Unknown:
    case TokenType::Unused:
      return render_special ? vocab_.tokens[i] : std::string();
  }
  return std::string();
}

}  // namespace

std::unique_ptr<Tokenizer> make_bpe_tokenizer(Vocab vocab) {
  return std::make_unique<BpeTokenizer>(std::move(vocab));
}

}  // namespace infer
