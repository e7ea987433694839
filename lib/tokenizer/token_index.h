// Lookup structures shared by the tokenizers (internal to lib/tokenizer):
// exact token text -> id, and leftmost-longest matching of token texts.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace infer {

// Token text -> id: open addressing over a flat array of (hash tag, id)
// slots, so the lookups that dominate BPE touch one or two cache lines
// instead of walking a node-based hash map. Keeps a reference to the texts.
class PieceTable {
 public:
  explicit PieceTable(const std::vector<std::string>& tokens) : tokens_(tokens) {
    size_t cap = 16;
    while (cap < tokens.size() * 2) cap *= 2;
    slots_.assign(cap, 0);
    mask_ = cap - 1;
    for (size_t i = 0; i < tokens.size(); ++i) {
      const std::string_view t = tokens[i];
      if (find(t) >= 0) continue;  // first id wins for duplicate texts
      const uint64_t h = hash(t);
      size_t k = h & mask_;
      while (slots_[k] != 0) k = (k + 1) & mask_;
      slots_[k] = (h & 0xFFFFFFFF00000000ull) | (static_cast<uint64_t>(i) + 1);
    }
  }

  // The id of the token with this exact text, or -1.
  int32_t find(std::string_view s) const {
    const uint64_t h = hash(s);
    const uint64_t tag = h & 0xFFFFFFFF00000000ull;
    for (size_t k = h & mask_;; k = (k + 1) & mask_) {
      const uint64_t slot = slots_[k];
      if (slot == 0) return -1;
      if ((slot & 0xFFFFFFFF00000000ull) == tag) {
        const size_t id = static_cast<size_t>(slot & 0xFFFFFFFFu) - 1;
        if (tokens_[id] == s) return static_cast<int32_t>(id);
      }
    }
  }

 private:
  // FNV-1a, then a multiplicative mix so both halves are usable.
  static uint64_t hash(std::string_view s) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ull;
    h ^= h >> 29;
    h *= 0xbf58476d1ce4e5b9ull;
    h ^= h >> 32;
    return h;  // low bits pick the slot, high 32 bits are the tag
  }

  const std::vector<std::string>& tokens_;
  std::vector<uint64_t> slots_;
  size_t mask_ = 0;
};

// A byte trie over token texts for leftmost-longest matching.
class TokenTrie {
 public:
  TokenTrie() : nodes_(1) {}
  bool empty() const { return nodes_.size() == 1; }

  void insert(std::string_view text, int32_t id) {
    int32_t n = 0;
    for (unsigned char c : text) {
      int32_t k = child(n, c);
      if (k < 0) {
        k = static_cast<int32_t>(nodes_.size());
        auto& kids = nodes_[n].kids;
        kids.insert(std::lower_bound(kids.begin(), kids.end(), std::make_pair(c, int32_t{0})),
                    {c, k});
        nodes_.emplace_back();
      }
      n = k;
    }
    if (nodes_[n].id < 0) nodes_[n].id = id;  // first token with this text wins
  }

  // Length of the longest token that is a prefix of s (0 when none).
  size_t match(std::string_view s, int32_t* id) const {
    return match(s, id, [](int32_t) { return true; });
  }

  // The same, considering only tokens for which accept(id) is true.
  template <typename Accept>
  size_t match(std::string_view s, int32_t* id, Accept&& accept) const {
    size_t best = 0;
    int32_t n = 0;
    for (size_t i = 0; i < s.size(); ++i) {
      n = child(n, static_cast<unsigned char>(s[i]));
      if (n < 0) break;
      const int32_t t = nodes_[n].id;
      if (t >= 0 && accept(t)) {
        best = i + 1;
        *id = t;
      }
    }
    return best;
  }

  // Whether byte c starts any token (a cheap filter before match()).
  bool starts(unsigned char c) const { return child(0, c) >= 0; }

 private:
  struct Node {
    int32_t id = -1;
    std::vector<std::pair<unsigned char, int32_t>> kids;  // sorted by byte
  };
  int32_t child(int32_t n, unsigned char c) const {
    const auto& kids = nodes_[n].kids;
    auto it = std::lower_bound(kids.begin(), kids.end(), std::make_pair(c, int32_t{0}));
    return it != kids.end() && it->first == c ? it->second : -1;
  }
  std::vector<Node> nodes_;
};

}  // namespace infer
