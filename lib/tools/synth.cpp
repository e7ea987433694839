#include "tools/synth.h"
#include "tokenizer/wordpiece.h"

#include <cctype>
#include <cmath>
#include <cstdio>
#include <sys/stat.h>

#include "core/error.h"
#include "core/threadpool.h"
#include "gguf/gguf.h"
#include "gguf/gguf_stream.h"
#include "quant/formats.h"
#include "tools/quantize.h"
#include "tokenizer/unicode.h"
#include "quant/dequant.h"

#include <functional>
#include <memory>
#include <set>

namespace infer {

const std::vector<SynthPreset>& synth_presets() {
  static const std::vector<SynthPreset> kPresets = [] {
    std::vector<SynthPreset> v = {
        {"tinyllama-1.1b", "llama", 2048, 22, 32, 4, 5632, 32000, 2048, 10000.0f, 1e-5f},
        {"llama-2-7b", "llama", 4096, 32, 32, 32, 11008, 32000, 4096, 10000.0f, 1e-5f},
        {"llama-3-8b", "llama", 4096, 32, 32, 8, 14336, 128256, 8192, 500000.0f, 1e-5f},
        {"tiny", "llama", 64, 2, 4, 2, 160, 512, 256, 10000.0f, 1e-5f},
    };
    auto add = [&](SynthPreset p, auto&& edit) {
      edit(p);
      v.push_back(p);
    };
    // Real shapes (the published config.json of each).
    add({"llama-3.2-1b", "llama", 2048, 16, 32, 8, 8192, 128256, 131072, 500000.0f, 1e-5f}, [](SynthPreset& p) {
      p.tied = true;
      p.rope_scaling = "llama3";
      p.rope_factor = 32.0f;
      p.rope_orig_ctx = 8192;
    });
    add({"mistral-7b", "llama", 4096, 32, 32, 8, 14336, 32000, 32768, 10000.0f, 1e-5f},
        [](SynthPreset& p) { p.sliding_window = 4096; });
    add({"qwen2.5-0.5b", "qwen2", 896, 24, 14, 2, 4864, 151936, 32768, 1000000.0f, 1e-6f},
        [](SynthPreset& p) { p.tied = true; });
    add({"qwen3-0.6b", "qwen3", 1024, 28, 16, 8, 3072, 151936, 40960, 1000000.0f, 1e-6f}, [](SynthPreset& p) {
      p.head_dim = 128;
      p.tied = true;
    });
    add({"phi3-mini", "phi3", 3072, 32, 32, 32, 8192, 32064, 4096, 10000.0f, 1e-5f}, [](SynthPreset&) {});
    add({"gemma-2b", "gemma", 2048, 18, 8, 1, 16384, 256000, 8192, 10000.0f, 1e-6f}, [](SynthPreset& p) {
      p.head_dim = 256;
      p.tied = true;
    });
    add({"gemma2-2b", "gemma2", 2304, 26, 8, 4, 9216, 256000, 8192, 10000.0f, 1e-6f}, [](SynthPreset& p) {
      p.head_dim = 256;
      p.tied = true;
      p.sliding_window = 4096;
      p.attn_softcap = 50.0f;
      p.final_softcap = 30.0f;
    });
    // Mixtral's proportions (8 experts of 3.5 x dim, top-2, rope base 1e6) at a size
    // this machine holds, and a dense model with as many parameters, all read per token.
    add({"mixtral-mini", "llama", 1024, 8, 16, 4, 3584, 32000, 4096, 1000000.0f, 1e-5f}, [](SynthPreset& p) {
      p.n_expert = 8;
      p.n_expert_used = 2;
    });
    add({"mixtral-mini-dense", "llama", 1024, 8, 16, 4, 8 * 3584, 32000, 4096, 1000000.0f, 1e-5f},
        [](SynthPreset&) {});
    // Test shapes: every particular of each architecture switched on.
    auto tiny = [](const char* name, const char* arch) {
      SynthPreset p{name, arch, 64, 2, 4, 2, 160, 512, 256, 10000.0f, 1e-5f};
      p.weight_std = 0.15f;
      p.random_norms = true;
      return p;
    };
    add(tiny("tiny-llama3", "llama"), [](SynthPreset& p) {
      p.tied = true;
      p.rope_base = 500000.0f;
      p.rope_scaling = "llama3";
      p.rope_factor = 8.0f;
      p.rope_orig_ctx = 64;
    });
    add(tiny("tiny-mistral", "llama"), [](SynthPreset& p) {
      p.sliding_window = 20;
      p.n_layer = 3;
    });
    add(tiny("tiny-qwen2", "qwen2"), [](SynthPreset& p) {
      p.rope_base = 1000000.0f;
      p.rms_eps = 1e-6f;
    });
    add(tiny("tiny-qwen3", "qwen3"), [](SynthPreset& p) {
      p.head_dim = 32;
      p.tied = true;
      p.rms_eps = 1e-6f;
    });
    add(tiny("tiny-phi3", "phi3"), [](SynthPreset& p) {
      p.n_head_kv = 4;
      p.rope_scaling = "longrope";
      p.n_ctx = 512;
      p.rope_orig_ctx = 64;
    });
    add(tiny("tiny-gemma", "gemma"), [](SynthPreset& p) {
      p.head_dim = 32;
      p.n_head_kv = 1;
      p.tied = true;
      p.rms_eps = 1e-6f;
    });
    add(tiny("tiny-gemma2", "gemma2"), [](SynthPreset& p) {
      p.head_dim = 32;
      p.n_layer = 3;
      p.tied = true;
      p.rms_eps = 1e-6f;
      p.sliding_window = 20;
      p.attn_softcap = 4.0f;
      p.final_softcap = 6.0f;
    });
    add(tiny("tiny-chat", "qwen2"), [](SynthPreset& p) {
      p.rope_base = 1000000.0f;
      p.rms_eps = 1e-6f;
      p.n_vocab = 1024;
      p.n_ctx = 4096;
      p.tied = true;
      p.chatml_bpe = true;
    });
    add(tiny("mixtral-tiny", "llama"), [](SynthPreset& p) {
      p.n_expert = 4;
      p.n_expert_used = 2;
    });
    // State-space models (synth.h): no attention heads or FFN but jamba's.
    add(tiny("tiny-mamba", "mamba"), [](SynthPreset& p) {
      p.n_layer = 3;
      p.n_head = p.n_head_kv = p.n_ff = 0;
      p.n_ctx = 1024;
      p.ssm_d_inner = 128;
      p.ssm_d_state = 16;
      p.ssm_dt_rank = 4;
    });
    add(tiny("tiny-mamba2", "mamba2"), [](SynthPreset& p) {
      p.n_layer = 3;
      p.n_head = p.n_head_kv = p.n_ff = 0;
      p.n_ctx = 1024;
      p.ssm_d_inner = 128;
      p.ssm_d_state = 16;
      p.ssm_dt_rank = 8;
      p.ssm_n_group = 2;
    });
    add(tiny("tiny-jamba", "jamba"), [](SynthPreset& p) {
      p.n_layer = 5;
      p.n_ctx = 1024;
      p.ssm_d_inner = 128;
      p.ssm_d_state = 16;
      p.ssm_dt_rank = 4;
      p.attn_period = 3;
      p.attn_offset = 1;
      p.n_expert = 4;
      p.n_expert_used = 2;
      p.expert_period = 2;
      p.expert_offset = 1;
    });
    add({"mamba-130m", "mamba", 768, 24, 0, 0, 0, 50280, 16384, 10000.0f, 1e-5f}, [](SynthPreset& p) {
      p.tied = true;
      p.weight_std = 0.05;  // at 0.02 the tied head echoes the last token: greedy text repeats it
      p.ssm_d_inner = 1536;
      p.ssm_d_state = 16;
      p.ssm_dt_rank = 48;
    });
    add({"mamba2-130m", "mamba2", 768, 24, 0, 0, 0, 50280, 16384, 10000.0f, 1e-5f}, [](SynthPreset& p) {
      p.tied = true;
      p.weight_std = 0.05;  // at 0.02 the tied head echoes the last token: greedy text repeats it
      p.ssm_d_inner = 1536;
      p.ssm_d_state = 128;
      p.ssm_dt_rank = 24;
      p.ssm_n_group = 1;
    });
    // Embedding models (synth.h). Encoders: n_head_kv = n_head, rms_eps is the LayerNorm epsilon.
    auto encoder = [&](const char* name, const char* arch) {
      SynthPreset p = tiny(name, arch);
      p.n_head_kv = 4;
      p.n_ff = 128;
      p.n_vocab = 1000;
      p.n_ctx = 128;
      p.rms_eps = 1e-12f;
      p.pooling = 1;
      return p;
    };
    add(encoder("tiny-bert", "bert"), [](SynthPreset&) {});
    add(encoder("tiny-bert-rerank", "bert"), [](SynthPreset& p) {
      p.pooling = 4;
      p.n_cls_out = 1;
    });
    add(encoder("tiny-nomic-bert", "nomic-bert"), [](SynthPreset& p) { p.rope_base = 1000.0f; });
    add(tiny("tiny-qwen3-embed", "qwen3"), [](SynthPreset& p) {
      p.head_dim = 32;
      p.tied = true;
      p.rms_eps = 1e-6f;
      p.pooling = 3;
    });
    add({"bge-small", "bert", 384, 12, 12, 12, 1536, 30522, 512, 10000.0f, 1e-12f}, [](SynthPreset& p) {
      p.random_norms = true;  // nonzero biases, as a trained model has
      p.pooling = 2;
    });
    return v;
  }();
  return kPresets;
}

const SynthPreset* find_synth_preset(const std::string& name) {
  for (const SynthPreset& p : synth_presets())
    if (name == p.name) return &p;
  return nullptr;
}

namespace {

// splitmix64: a counter-based generator, so rows can be filled in any order
// (and in parallel) with the same result.
uint64_t mix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ULL;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

// Uniform values with standard deviation `std` for one row.
void random_row(uint64_t seed, uint64_t tensor, uint64_t row, float stddev, float* out, int64_t n) {
  const float a = stddev * std::sqrt(3.0f);
  uint64_t s = mix(seed ^ mix(tensor * 0x100000001B3ULL + row));
  for (int64_t i = 0; i < n; ++i) {
    s = mix(s);
    const float u = static_cast<float>(s >> 40) * (1.0f / 16777216.0f);  // [0, 1)
    out[i] = (2.0f * u - 1.0f) * a;
  }
}

// A SentencePiece-style vocabulary: <unk> <s> </s>, byte fallback tokens,
// then "▁" and letter strings (with and without the word-start marker).
void synth_vocab(int n_vocab, std::vector<std::string>& tokens, std::vector<float>& scores, std::vector<int32_t>& types) {
  tokens = {"<unk>", "<s>", "</s>"};
  types = {2, 3, 3};
  for (int b = 0; b < 256; ++b) {
    char buf[8];
    std::snprintf(buf, sizeof buf, "<0x%02X>", b);
    tokens.push_back(buf);
    types.push_back(6);
  }
  const std::string space = "\xE2\x96\x81";  // U+2581
  tokens.push_back(space);
  types.push_back(1);
  std::vector<std::string> prev = {""};
  while (static_cast<int>(tokens.size()) < n_vocab) {
    std::vector<std::string> next;
    for (const std::string& s : prev)
      for (char ch = 'a'; ch <= 'z'; ++ch) next.push_back(s + ch);
    for (const std::string& s : next) {
      for (const std::string& t : {space + s, s}) {
        if (static_cast<int>(tokens.size()) >= n_vocab) break;
        tokens.push_back(t);
        types.push_back(1);
      }
    }
    prev = std::move(next);
  }
  tokens.resize(static_cast<size_t>(n_vocab));
  types.resize(static_cast<size_t>(n_vocab));
  scores.assign(static_cast<size_t>(n_vocab), 0.0f);
  for (int i = 0; i < n_vocab; ++i) scores[i] = types[i] == 1 ? -static_cast<float>(i) : 0.0f;
}

// Words the chatml_bpe vocabulary spells in few tokens, as the qwen2
// pre-tokenizer cuts text: common English words (with their leading space),
// the pieces of chat turns, JSON and tool calls, and runs of spaces.
const char* const kBpeWords[] = {
    " the", " a", " and", " to", " of", " in", " is", " you", " it", " that", " was", " for", " on", " are",
    " with", " as", " be", " at", " have", " this", " from", " or", " one", " had", " by", " but", " not",
    " what", " all", " were", " we", " when", " your", " can", " said", " there", " an", " each", " which",
    " she", " he", " do", " how", " their", " if", " will", " up", " about", " out", " many", " then",
    " them", " so", " some", " her", " would", " make", " like", " him", " into", " time", " has", " look",
    " two", " more", " go", " see", " no", " way", " could", " my", " than", " first", " been", " call",
    " who", " its", " now", " find", " long", " down", " day", " did", " get", " come", " made", " may",
    " help", " tell", " story", " weather", " city", " today", " hello", " world", " I", " Once", " upon",
    "The", "You", "What", "Hello", "Weather", "system", "user", "assistant", "tool", "_call", "_response",
    "{\"", "\":", " \"", "\",", "\"}", "}}", "\"}}", " {\"", " [", "],", "\n", "\n\n", "name", "arguments",
    "get", "_weather", "city", "location", "Paris", "Rome", "Tokyo", "Lima", "unit", "celsius",
    "fahrenheit", "true", "false", "null", "type", "function", "object", "string", "integer", "number",
    "properties", "required", "description", "enum", "tools", "<tools>", "</tools>", "                ",
};

// The SentencePiece-style vocabulary of synth_vocab as the tokenizer.ggml.*
// keys of a llama-model file (BOS 1, EOS 2, UNK 0).
void set_spm_vocab(GgufStreamWriter& w, int n_vocab) {
  std::vector<std::string> tokens;
  std::vector<float> scores;
  std::vector<int32_t> types;
  synth_vocab(n_vocab, tokens, scores, types);
  w.set("tokenizer.ggml.model", GgufValue::make_string("llama"));
  w.set("tokenizer.ggml.tokens", GgufValue::make_string_array(tokens));
  w.set("tokenizer.ggml.scores", GgufValue::make_f32_array(scores));
  w.set("tokenizer.ggml.token_type", GgufValue::make_i32_array(types));
  w.set("tokenizer.ggml.bos_token_id", GgufValue::make_u32(1));
  w.set("tokenizer.ggml.eos_token_id", GgufValue::make_u32(2));
  w.set("tokenizer.ggml.unknown_token_id", GgufValue::make_u32(0));
}

}  // namespace

SynthBpeVocab synth_chatml_bpe_vocab(int n_vocab) {
  static const char* const kSpecial[] = {"<|endoftext|>", "<|im_start|>", "<|im_end|>", "<tool_call>", "</tool_call>"};
  constexpr int kNumSpecial = 5;
  if (n_vocab < 256 + kNumSpecial) raise(Status::InvalidArgument, "synth: a byte-level BPE vocabulary needs at least %d tokens", 256 + kNumSpecial);
  SynthBpeVocab v;
  std::set<std::string> have;
  for (int b = 0; b < 256; ++b) {
    v.tokens.emplace_back(byte_to_unicode(static_cast<uint8_t>(b)));
    have.insert(v.tokens.back());
  }
  const size_t room = static_cast<size_t>(n_vocab - kNumSpecial);
  // One merge per new token: the token so far plus the next byte.
  auto add_word = [&](const std::string& word) {
    std::string sofar(byte_to_unicode(static_cast<uint8_t>(word[0])));
    for (size_t i = 1; i < word.size() && v.tokens.size() < room; ++i) {
      const std::string next(byte_to_unicode(static_cast<uint8_t>(word[i])));
      const std::string joined = sofar + next;
      if (have.insert(joined).second) {
        v.merges.push_back(sofar + " " + next);
        v.tokens.push_back(joined);
      }
      sofar = joined;
    }
  };
  for (const char* w : kBpeWords) add_word(w);
  for (const char* lead : {"", " "})
    for (char a = 'a'; a <= 'z'; ++a)
      for (char b = 'a'; b <= 'z'; ++b) add_word(std::string(lead) + a + b);
  if (v.tokens.size() < room) raise(Status::InvalidArgument, "synth: a byte-level BPE vocabulary of at most %zu tokens can be built", v.tokens.size() + kNumSpecial);
  v.types.assign(v.tokens.size(), 1);
  for (int i = 0; i < kNumSpecial; ++i) {
    v.tokens.push_back(kSpecial[i]);
    v.types.push_back(i < 3 ? 3 : 4);  // control; <tool_call> </tool_call> are user-defined (plain text)
  }
  return v;
}

namespace {

// Words the WordPiece vocabulary holds whole, then continuation suffixes.
const char* const kWpWords[] = {
    "the", "of", "and", "to", "in", "a", "is", "that", "for", "it", "as", "was", "with", "be", "by", "on", "not",
    "he", "i", "this", "are", "or", "his", "from", "at", "which", "but", "have", "an", "had", "they", "you", "were",
    "their", "one", "all", "we", "can", "her", "has", "there", "been", "if", "more", "when", "will", "would", "who",
    "so", "no", "she", "other", "its", "may", "these", "what", "them", "than", "some", "him", "time", "into",
    "only", "do", "could", "new", "about", "two", "first", "then", "also", "any", "like", "my", "now", "over",
    "such", "our", "man", "me", "even", "most", "made", "after", "well", "many", "before", "must", "through",
    "back", "years", "where", "much", "your", "way", "down", "should", "because", "each", "just", "those",
    "people", "how", "too", "little", "state", "good", "very", "make", "world", "still", "own", "see", "men",
    "work", "long", "get", "here", "between", "both", "life", "being", "under", "never", "day", "same",
    "another", "know", "while", "last", "might", "us", "great", "old", "year", "off", "come", "since", "against",
    "go", "came", "right", "used", "take", "three", "hello", "world", "search", "query", "document", "answer",
    "question", "embedding", "model", "text", "vector", "cat", "dog", "sat", "mat", "paris", "france", "capital",
    "city", "river", "water", "fire", "music", "book", "house", "car", "computer", "language", "machine",
    "learning", "data", "science", "weather", "today", "tomorrow", "sun", "moon", "star", "tree", "food",
    "play", "run", "walk", "read", "write", "speak", "think", "love", "happy", "sad", "big", "small", "fast",
    "slow", "red", "green", "blue", "black", "white", "school", "teacher", "student", "doctor", "health",
    "money", "bank", "market", "price", "game", "team", "sport", "ball", "ocean", "mountain", "forest", "animal",
};
const char* const kWpSuffixes[] = {
    "##s", "##es", "##ed", "##ing", "##er", "##ers", "##est", "##ly", "##y", "##al", "##ic", "##ous", "##ive",
    "##ize", "##ful", "##less", "##ness", "##ment", "##able", "##tion", "##sion", "##ity", "##en", "##ism",
    "##ist", "##ian", "##ory", "##ure", "##age", "##ant", "##ent", "##ance", "##ence", "##ial", "##ical",
};

}  // namespace

SynthWordPieceVocab synth_wordpiece_vocab(int n_vocab) {
  if (n_vocab < 300) raise(Status::InvalidArgument, "synth: a WordPiece vocabulary needs at least 300 tokens");
  SynthWordPieceVocab v;
  std::set<std::string> seen;
  auto add = [&](const std::string& t, int32_t type) {
    if (static_cast<int>(v.tokens.size()) >= n_vocab || !seen.insert(t).second) return;
    v.tokens.push_back(t);
    v.types.push_back(type);
  };
  for (const char* t : {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"}) add(t, 3);
  std::vector<std::string> singles;
  for (char c = 33; c < 127; ++c)
    if (!std::isalnum(static_cast<unsigned char>(c)) && !(c >= 'A' && c <= 'Z')) singles.push_back(std::string(1, c));
  for (char c = 'a'; c <= 'z'; ++c) singles.push_back(std::string(1, c));
  for (char c = '0'; c <= '9'; ++c) singles.push_back(std::string(1, c));
  for (const std::string& t : singles) add(t, 1);
  for (const std::string& t : singles) add("##" + t, 1);
  for (const char* w : kWpWords) add(w, 1);
  for (const char* w : kWpSuffixes) add(w, 1);
  // Then letter strings of 2, 3, ... letters, each whole and as a continuation.
  std::vector<std::string> prev = {""};
  while (static_cast<int>(v.tokens.size()) < n_vocab) {
    std::vector<std::string> next;
    for (const std::string& s : prev)
      for (char ch = 'a'; ch <= 'z'; ++ch) next.push_back(s + ch);
    for (const std::string& s : next) {
      if (s.size() < 2) continue;
      add(s, 1);
      add("##" + s, 1);
    }
    prev = std::move(next);
  }
  return v;
}

// ChatML (<|im_start|>ROLE\nTEXT<|im_end|>\n) with tools: their JSON
// signatures go in the system turn, calls are {"name": ..., "arguments": ...}
// between <tool_call> tags, tool results come back in a user turn between
// <tool_response> tags.
const char* synth_chatml_template() {
  return "{%- if tools %}\n"
         "{{- '<|im_start|>system\\n' }}\n"
         "{%- if messages[0].role == 'system' %}{{- messages[0].content + '\\n\\n' }}{%- endif %}\n"
         "{{- '# Tools\\n\\nThese functions can be called; their signatures, one per line:\\n<tools>' }}\n"
         "{%- for tool in tools %}{{- '\\n' + (tool | tojson) }}{%- endfor %}\n"
         "{{- '\\n</tools>\\n\\nTo call one, write its name and arguments as a JSON object between the tags "
         "<tool_call> and </tool_call>:\\n<tool_call>\\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\\n"
         "</tool_call><|im_end|>\\n' }}\n"
         "{%- elif messages[0].role == 'system' %}\n"
         "{{- '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' }}\n"
         "{%- endif %}\n"
         "{%- for message in messages %}\n"
         "{%- if message.role == 'system' %}\n"
         "{%- if not loop.first %}{{- '<|im_start|>system\\n' + message.content + '<|im_end|>\\n' }}{%- endif %}\n"
         "{%- elif message.role == 'assistant' %}\n"
         "{{- '<|im_start|>assistant' }}\n"
         "{%- if message.content %}{{- '\\n' + message.content }}{%- endif %}\n"
         "{%- if message.tool_calls %}{%- for tc in message.tool_calls %}\n"
         "{%- if tc.function is defined %}{%- set tc = tc.function %}{%- endif %}\n"
         "{{- '\\n<tool_call>\\n{\"name\": ' + (tc.name | tojson) + ', \"arguments\": ' + (tc.arguments | tojson) + '}\\n</tool_call>' }}\n"
         "{%- endfor %}{%- endif %}\n"
         "{{- '<|im_end|>\\n' }}\n"
         "{%- elif message.role == 'tool' %}\n"
         "{%- if loop.first or messages[loop.index0 - 1].role != 'tool' %}{{- '<|im_start|>user' }}{%- endif %}\n"
         "{{- '\\n<tool_response>\\n' + message.content + '\\n</tool_response>' }}\n"
         "{%- if loop.last or messages[loop.index0 + 1].role != 'tool' %}{{- '<|im_end|>\\n' }}{%- endif %}\n"
         "{%- else %}\n"
         "{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}\n"
         "{%- endif %}\n"
         "{%- endfor %}\n"
         "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}\n";
}

namespace {

struct Tensor {
  std::string name;
  std::vector<int64_t> dims;
  float stddev;  // 0: every value `base` (norms: 1)
  DType type;
  float base = 0.0f;         // added to every value (norms: 1)
  std::vector<float> fixed;  // the values themselves (rope factors)
};

}  // namespace

// Llama 3.x per-frequency divisors (what GGUF converters store as
// rope_freqs.weight): 1 for high frequencies, `factor` for low ones, a
// smooth blend between (low_freq_factor 1, high_freq_factor 4).
static std::vector<float> llama3_rope_factors(int n_rot, float base, float factor, int orig_ctx) {
  const double low = 1.0, high = 4.0, orig = orig_ctx;
  std::vector<float> f(static_cast<size_t>(n_rot / 2));
  for (int i = 0; i < n_rot / 2; ++i) {
    const double inv = 1.0 / std::pow(static_cast<double>(base), 2.0 * i / n_rot);
    const double wavelen = 2.0 * M_PI / inv;
    if (wavelen < orig / high) {
      f[i] = 1.0f;
    } else if (wavelen > orig / low) {
      f[i] = factor;
    } else {
      const double smooth = (orig / wavelen - low) / (high - low);
      f[i] = static_cast<float>(1.0 / ((1.0 - smooth) / factor + smooth));
    }
  }
  return f;
}

// Declares the tensors (matrices in the weight type, as quantize would),
// then streams their rows. Returns the file size.
static uint64_t write_tensors(GgufStreamWriter& w, std::vector<Tensor>& ts, const SynthOptions& o,
                              const std::string& path) {
  // Rows of a tensor: the product of its dims after the first.
  auto n_rows = [](const Tensor& t) {
    int64_t r = 1;
    for (size_t i = 1; i < t.dims.size(); ++i) r *= t.dims[i];
    return r;
  };
  bool noted = false;
  for (Tensor& t : ts) {
    // Experts are matrices stacked along a third dim; the router stays F32.
    const bool experts = t.dims.size() == 3;
    const bool router = t.name.find("ffn_gate_inp") != std::string::npos;
    if (experts || (!router && is_quantizable(t.name, t.dims))) {
      bool fb = false;
      t.type = tensor_type(o.type, t.dims[0], &fb);
      if (fb && o.note && !noted) {
        o.note(strformat("%s: rows of %lld values do not fit %s blocks: written as %s (and likewise for others)",
                         t.name.c_str(), (long long)t.dims[0], dtype_name(o.type), dtype_name(t.type)));
        noted = true;
      }
    }
    declare_tensor(w, t.name, t.dims, t.type);
  }
  w.begin();

  ThreadPool pool(o.n_threads);
  uint64_t total = 0, done = 0;
  for (const Tensor& t : ts) total += static_cast<uint64_t>(t.dims[0]) * n_rows(t);
  std::vector<float> buf, scales;
  for (size_t ti = 0; ti < ts.size(); ++ti) {
    const Tensor& t = ts[ti];
    const int64_t n = t.dims[0], rows = n_rows(t);
    if (o.progress) o.progress(static_cast<double>(done) / static_cast<double>(total), t.name);
    const int64_t chunk = std::max<int64_t>(1, std::min<int64_t>(rows, (int64_t(32) << 20) / (4 * n)));
    if (t.type == DType::W8A8) scales.resize(static_cast<size_t>(rows));
    for (int64_t r0 = 0; r0 < rows; r0 += chunk) {
      const int64_t r1 = std::min(rows, r0 + chunk);
      buf.resize(static_cast<size_t>((r1 - r0) * n));
      pool.run([&](int tid, int nth) {
        for (int64_t r = r0 + (r1 - r0) * tid / nth; r < r0 + (r1 - r0) * (tid + 1) / nth; ++r) {
          float* row = buf.data() + (r - r0) * n;
          if (!t.fixed.empty()) {
            std::copy(t.fixed.begin(), t.fixed.end(), row);
          } else if (t.stddev == 0) {
            std::fill(row, row + n, t.base);
          } else {
            random_row(o.seed, ti, static_cast<uint64_t>(r), t.stddev, row, n);
            for (int64_t i = 0; i < n; ++i) row[i] += t.base;
          }
        }
      });
      write_rows(w, t.type, buf.data(), r1 - r0, n, t.type == DType::W8A8 ? scales.data() + r0 : nullptr, &pool);
    }
    if (t.type == DType::W8A8) w.write(scales.data(), scales.size() * 4);
    done += static_cast<uint64_t>(n) * rows;
  }
  w.finish();
  if (o.progress) o.progress(1.0, "done");
  struct stat sb;
  return ::stat(path.c_str(), &sb) == 0 ? static_cast<uint64_t>(sb.st_size) : 0;
}

static bool is_encoder_arch(const std::string& a) { return a == "bert" || a == "nomic-bert"; }

// bert and nomic-bert (synth.h): converted files' keys and tensors, a WordPiece vocabulary.
static uint64_t write_synth_encoder(const SynthPreset& p, const std::string& path, const SynthOptions& o) {
  const std::string a = p.arch;
  const bool nomic = a == "nomic-bert";
  if (p.n_head_kv != p.n_head || p.n_embd % p.n_head != 0)
    raise(Status::InvalidArgument, "synth: %s needs as many KV heads as heads and a dim they divide", a.c_str());
  if (p.n_cls_out > 0 && nomic) raise(Status::InvalidArgument, "synth: a classifier head is written for bert only");
  GgufStreamWriter w(path);
  w.set("general.architecture", GgufValue::make_string(a));
  w.set("general.name", GgufValue::make_string(std::string("synthetic ") + p.name));
  w.set(a + ".context_length", GgufValue::make_u32(static_cast<uint32_t>(p.n_ctx)));
  w.set(a + ".embedding_length", GgufValue::make_u32(static_cast<uint32_t>(p.n_embd)));
  w.set(a + ".feed_forward_length", GgufValue::make_u32(static_cast<uint32_t>(p.n_ff)));
  w.set(a + ".block_count", GgufValue::make_u32(static_cast<uint32_t>(p.n_layer)));
  w.set(a + ".attention.head_count", GgufValue::make_u32(static_cast<uint32_t>(p.n_head)));
  w.set(a + ".attention.layer_norm_epsilon", GgufValue::make_f32(p.rms_eps));
  w.set(a + ".attention.causal", GgufValue::make_bool(false));
  if (p.pooling >= 0) w.set(a + ".pooling_type", GgufValue::make_u32(static_cast<uint32_t>(p.pooling)));
  if (nomic) w.set(a + ".rope.freq_base", GgufValue::make_f32(p.rope_base));
  const SynthWordPieceVocab v = synth_wordpiece_vocab(p.n_vocab);
  w.set("tokenizer.ggml.model", GgufValue::make_string("bert"));
  // In the GGUF spelling ("▁word", bare continuations), as converted files
  // are: other GGUF readers (the peer's llama-embedding) then tokenize texts
  // as we do.
  w.set("tokenizer.ggml.tokens", GgufValue::make_string_array(wordpiece_to_gguf_spelling(v.tokens, v.types)));
  w.set("tokenizer.ggml.token_type", GgufValue::make_i32_array(v.types));
  w.set("tokenizer.ggml.token_type_count", GgufValue::make_u32(2));
  // [PAD] [UNK] [CLS] [SEP] [MASK] are ids 0-4; BOS is [CLS], EOS [SEP].
  w.set("tokenizer.ggml.padding_token_id", GgufValue::make_u32(0));
  w.set("tokenizer.ggml.unknown_token_id", GgufValue::make_u32(1));
  w.set("tokenizer.ggml.cls_token_id", GgufValue::make_u32(2));
  w.set("tokenizer.ggml.seperator_token_id", GgufValue::make_u32(3));  // sic: the ecosystem's key
  w.set("tokenizer.ggml.mask_token_id", GgufValue::make_u32(4));
  w.set("tokenizer.ggml.bos_token_id", GgufValue::make_u32(2));
  w.set("tokenizer.ggml.eos_token_id", GgufValue::make_u32(3));
  w.set("tokenizer.ggml.add_bos_token", GgufValue::make_bool(true));
  w.set("tokenizer.ggml.add_eos_token", GgufValue::make_bool(true));
  write_quant_metadata(w, o.type, QuantMethod::Rtn);

  const float s_in = p.weight_std, s_out = p.weight_std / std::sqrt(2.0f * static_cast<float>(p.n_layer));
  const float s_norm = p.random_norms ? 0.2f / std::sqrt(3.0f) : 0.0f;  // 1 + U(-0.2, 0.2)
  const float s_bias = p.random_norms ? 0.1f : 0.0f;
  const int64_t d = p.n_embd, ff = p.n_ff;
  std::vector<Tensor> ts;
  auto matrix = [&](const std::string& n, int64_t in, int64_t out, float sd) { ts.push_back({n, {in, out}, sd, DType::F32}); };
  auto bias = [&](const std::string& n, int64_t len) { ts.push_back({n, {len}, s_bias, DType::F32}); };
  auto layer_norm = [&](const std::string& n) {
    ts.push_back({n + ".weight", {d}, s_norm, DType::F32, 1.0f});
    bias(n + ".bias", d);
  };
  matrix("token_embd.weight", d, p.n_vocab, s_in);
  matrix("token_types.weight", d, 2, s_in);
  if (!nomic) matrix("position_embd.weight", d, p.n_ctx, s_in);
  layer_norm("token_embd_norm");
  for (int l = 0; l < p.n_layer; ++l) {
    const std::string b = "blk." + std::to_string(l) + ".";
    if (nomic) {
      matrix(b + "attn_qkv.weight", d, 3 * d, s_in);  // rows: all Q, all K, all V
      matrix(b + "attn_output.weight", d, d, s_out);
    } else {
      for (const char* m : {"attn_q", "attn_k", "attn_v"}) {
        matrix(b + m + ".weight", d, d, s_in);
        bias(b + m + ".bias", d);
      }
      matrix(b + "attn_output.weight", d, d, s_out);
      bias(b + "attn_output.bias", d);
    }
    layer_norm(b + "attn_output_norm");
    matrix(b + "ffn_up.weight", d, ff, s_in);
    if (nomic) {
      matrix(b + "ffn_gate.weight", d, ff, s_in);
    } else {
      bias(b + "ffn_up.bias", ff);
    }
    matrix(b + "ffn_down.weight", ff, d, s_out);
    if (!nomic) bias(b + "ffn_down.bias", d);
    layer_norm(b + "layer_output_norm");
  }
  if (p.n_cls_out > 0) {  // the reranker's pooler (dense + tanh) and classifier
    matrix("cls.weight", d, d, s_in);
    bias("cls.bias", d);
    matrix("cls.output.weight", d, p.n_cls_out, s_in);
    bias("cls.output.bias", p.n_cls_out);
  }
  return write_tensors(w, ts, o, path);
}

static bool is_ssm_arch(const std::string& a) { return a == "mamba" || a == "mamba2" || a == "jamba"; }

// dt_bias of `n` channels or heads: softplus^-1 of a dt log-spaced over [1e-3, 1e-1]
// (what Mamba's initialization draws at random), so that softplus(dt_bias) is that dt.
static std::vector<float> ssm_dt_bias(int64_t n) {
  std::vector<float> b(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const double f = n > 1 ? static_cast<double>(i) / static_cast<double>(n - 1) : 0.5;
    const double dt = std::exp(std::log(1e-3) + f * (std::log(1e-1) - std::log(1e-3)));
    b[static_cast<size_t>(i)] = static_cast<float>(dt + std::log(-std::expm1(-dt)));
  }
  return b;
}

// mamba, mamba2 and jamba (synth.h): the keys and tensors GGUF converters write.
static uint64_t write_synth_ssm(const SynthPreset& p, const std::string& path, const SynthOptions& o) {
  const std::string a = p.arch;
  const bool v2 = a == "mamba2", hybrid = a == "jamba";
  const int64_t d = p.n_embd, di = p.ssm_d_inner, N = p.ssm_d_state, R = p.ssm_dt_rank, K = p.ssm_d_conv;
  const int64_t G = p.ssm_n_group, H = v2 ? R : di;
  if (di <= 0 || N <= 0 || R <= 0 || K <= 0 || G <= 0 || (v2 && (di % H != 0 || H % G != 0)))
    raise(Status::InvalidArgument, "synth: preset %s has an inconsistent state-space shape", p.name);
  auto attends = [&](int l) { return hybrid && l >= p.attn_offset && (l - p.attn_offset) % p.attn_period == 0; };
  auto experts = [&](int l) {
    return hybrid && p.n_expert > 0 && l >= p.expert_offset && (l - p.expert_offset) % p.expert_period == 0;
  };
  GgufStreamWriter w(path);
  w.set("general.architecture", GgufValue::make_string(a));
  w.set("general.name", GgufValue::make_string(std::string("synthetic ") + p.name));
  w.set(a + ".context_length", GgufValue::make_u32(static_cast<uint32_t>(p.n_ctx)));
  w.set(a + ".embedding_length", GgufValue::make_u32(static_cast<uint32_t>(d)));
  w.set(a + ".block_count", GgufValue::make_u32(static_cast<uint32_t>(p.n_layer)));
  w.set(a + ".feed_forward_length", GgufValue::make_u32(static_cast<uint32_t>(hybrid ? p.n_ff : 0)));
  w.set(a + ".attention.head_count", GgufValue::make_u32(static_cast<uint32_t>(hybrid ? p.n_head : 0)));
  if (hybrid) {
    std::vector<int32_t> kv(static_cast<size_t>(p.n_layer), 0);
    for (int l = 0; l < p.n_layer; ++l)
      if (attends(l)) kv[static_cast<size_t>(l)] = p.n_head_kv;
    w.set(a + ".attention.head_count_kv", GgufValue::make_i32_array(kv));
    if (p.n_expert > 0) {
      w.set(a + ".expert_count", GgufValue::make_u32(static_cast<uint32_t>(p.n_expert)));
      w.set(a + ".expert_used_count", GgufValue::make_u32(static_cast<uint32_t>(p.n_expert_used)));
    }
  }
  w.set(a + ".ssm.conv_kernel", GgufValue::make_u32(static_cast<uint32_t>(K)));
  w.set(a + ".ssm.inner_size", GgufValue::make_u32(static_cast<uint32_t>(di)));
  w.set(a + ".ssm.state_size", GgufValue::make_u32(static_cast<uint32_t>(N)));
  w.set(a + ".ssm.time_step_rank", GgufValue::make_u32(static_cast<uint32_t>(R)));
  if (v2) w.set(a + ".ssm.group_count", GgufValue::make_u32(static_cast<uint32_t>(G)));
  w.set(a + ".attention.layer_norm_rms_epsilon", GgufValue::make_f32(p.rms_eps));
  set_spm_vocab(w, p.n_vocab);
  write_quant_metadata(w, o.type, QuantMethod::Rtn);

  const float s_in = p.weight_std, s_out = p.weight_std / std::sqrt(2.0f * static_cast<float>(p.n_layer));
  const float s_norm = p.random_norms ? 0.2f / std::sqrt(3.0f) : 0.0f;  // 1 + U(-0.2, 0.2)
  std::vector<Tensor> ts;
  auto matrix = [&](const std::string& n, int64_t in, int64_t out, float sd) { ts.push_back({n, {in, out}, sd, DType::F32}); };
  auto norm = [&](const std::string& n, std::vector<int64_t> dims) { ts.push_back({n, std::move(dims), s_norm, DType::F32, 1.0f}); };
  auto fixed = [&](const std::string& n, std::vector<int64_t> dims, std::vector<float> row) {
    Tensor t{n, std::move(dims), 0, DType::F32};
    t.fixed = std::move(row);
    ts.push_back(t);
  };
  matrix("token_embd.weight", d, p.n_vocab, s_in);
  norm("output_norm.weight", {d});
  if (!p.tied) matrix("output.weight", d, p.n_vocab, s_in);
  const int64_t hd = hybrid ? d / p.n_head : 0;
  for (int l = 0; l < p.n_layer; ++l) {
    const std::string b = "blk." + std::to_string(l) + ".";
    norm(b + "attn_norm.weight", {d});
    if (attends(l)) {
      matrix(b + "attn_q.weight", d, p.n_head * hd, s_in);
      matrix(b + "attn_k.weight", d, p.n_head_kv * hd, s_in);
      matrix(b + "attn_v.weight", d, p.n_head_kv * hd, s_in);
      matrix(b + "attn_output.weight", p.n_head * hd, d, s_out);
    } else if (!v2) {
      matrix(b + "ssm_in.weight", d, 2 * di, s_in);
      ts.push_back({b + "ssm_conv1d.weight", {K, di}, 0.3f, DType::F32});
      ts.push_back({b + "ssm_conv1d.bias", {di}, 0.1f, DType::F32});
      matrix(b + "ssm_x.weight", di, R + 2 * N, s_in);
      if (hybrid) {
        norm(b + "ssm_dt_norm.weight", {R});
        norm(b + "ssm_b_norm.weight", {N});
        norm(b + "ssm_c_norm.weight", {N});
      }
      matrix(b + "ssm_dt.weight", R, di, 0.5f / std::sqrt(static_cast<float>(R)));
      fixed(b + "ssm_dt.bias", {di}, ssm_dt_bias(di));
      std::vector<float> A(static_cast<size_t>(N));
      for (int64_t s = 0; s < N; ++s) A[static_cast<size_t>(s)] = -static_cast<float>(s + 1);  // -exp(log(s + 1))
      fixed(b + "ssm_a", {N, di}, A);
      ts.push_back({b + "ssm_d", {di}, 0, DType::F32, 1.0f});
      matrix(b + "ssm_out.weight", di, d, s_out);
    } else {
      const int64_t ch = di + 2 * G * N;
      matrix(b + "ssm_in.weight", d, di + ch + H, s_in);
      ts.push_back({b + "ssm_conv1d.weight", {K, ch}, 0.3f, DType::F32});
      ts.push_back({b + "ssm_conv1d.bias", {ch}, 0.1f, DType::F32});
      fixed(b + "ssm_dt.bias", {H}, ssm_dt_bias(H));
      std::vector<float> A(static_cast<size_t>(H));
      for (int64_t h = 0; h < H; ++h)
        A[static_cast<size_t>(h)] = -(1.0f + 15.0f * static_cast<float>(h) / static_cast<float>(std::max<int64_t>(1, H - 1)));
      fixed(b + "ssm_a", {1, H}, A);
      ts.push_back({b + "ssm_d", {1, H}, 0, DType::F32, 1.0f});
      norm(b + "ssm_norm.weight", {di / G, G});
      matrix(b + "ssm_out.weight", di, d, s_out);
    }
    if (!hybrid) continue;
    norm(b + "ffn_norm.weight", {d});
    if (experts(l)) {
      const int64_t E = p.n_expert;
      matrix(b + "ffn_gate_inp.weight", d, E, s_in);
      ts.push_back({b + "ffn_gate_exps.weight", {d, p.n_ff, E}, s_in, DType::F32});
      ts.push_back({b + "ffn_up_exps.weight", {d, p.n_ff, E}, s_in, DType::F32});
      ts.push_back({b + "ffn_down_exps.weight", {p.n_ff, d, E}, s_out, DType::F32});
    } else {
      matrix(b + "ffn_gate.weight", d, p.n_ff, s_in);
      matrix(b + "ffn_up.weight", d, p.n_ff, s_in);
      matrix(b + "ffn_down.weight", p.n_ff, d, s_out);
    }
  }
  return write_tensors(w, ts, o, path);
}

uint64_t write_synth_model(const SynthPreset& p, const std::string& path, const SynthOptions& o) {
  if (is_ssm_arch(p.arch)) {
    if (o.type != DType::W8A8 && !can_quantize(o.type))
      raise(Status::InvalidArgument, "synth: cannot write weights as %s", dtype_name(o.type));
    return write_synth_ssm(p, path, o);
  }
  if (is_encoder_arch(p.arch)) {
    if (o.type != DType::W8A8 && !can_quantize(o.type))
      raise(Status::InvalidArgument, "synth: cannot write weights as %s", dtype_name(o.type));
    return write_synth_encoder(p, path, o);
  }
  if (o.type != DType::W8A8 && !can_quantize(o.type))
    raise(Status::InvalidArgument, "synth: cannot write weights as %s", dtype_name(o.type));
  const std::string a = p.arch;
  const int head_dim = p.head_dim > 0 ? p.head_dim : p.n_embd / p.n_head;
  const int64_t q_dim = static_cast<int64_t>(p.n_head) * head_dim;
  const int64_t kv_dim = static_cast<int64_t>(p.n_head_kv) * head_dim;
  const std::string scaling = p.rope_scaling;
  GgufStreamWriter w(path);
  w.set("general.architecture", GgufValue::make_string(a));
  w.set("general.name", GgufValue::make_string(std::string("synthetic ") + p.name));
  w.set(a + ".context_length", GgufValue::make_u32(static_cast<uint32_t>(p.n_ctx)));
  w.set(a + ".embedding_length", GgufValue::make_u32(static_cast<uint32_t>(p.n_embd)));
  w.set(a + ".feed_forward_length", GgufValue::make_u32(static_cast<uint32_t>(p.n_ff)));
  w.set(a + ".block_count", GgufValue::make_u32(static_cast<uint32_t>(p.n_layer)));
  w.set(a + ".attention.head_count", GgufValue::make_u32(static_cast<uint32_t>(p.n_head)));
  w.set(a + ".attention.head_count_kv", GgufValue::make_u32(static_cast<uint32_t>(p.n_head_kv)));
  if (p.head_dim > 0) {
    w.set(a + ".attention.key_length", GgufValue::make_u32(static_cast<uint32_t>(head_dim)));
    w.set(a + ".attention.value_length", GgufValue::make_u32(static_cast<uint32_t>(head_dim)));
  }
  w.set(a + ".rope.dimension_count", GgufValue::make_u32(static_cast<uint32_t>(head_dim)));
  w.set(a + ".attention.layer_norm_rms_epsilon", GgufValue::make_f32(p.rms_eps));
  w.set(a + ".rope.freq_base", GgufValue::make_f32(p.rope_base));
  if (p.sliding_window > 0)
    w.set(a + ".attention.sliding_window", GgufValue::make_u32(static_cast<uint32_t>(p.sliding_window)));
  if (p.attn_softcap > 0) w.set(a + ".attn_logit_softcapping", GgufValue::make_f32(p.attn_softcap));
  if (p.final_softcap > 0) w.set(a + ".final_logit_softcapping", GgufValue::make_f32(p.final_softcap));
  if (scaling == "linear" || scaling == "llama3") {
    w.set(a + ".rope.scaling.type", GgufValue::make_string(scaling));
    w.set(a + ".rope.scaling.factor", GgufValue::make_f32(p.rope_factor));
  }
  if (scaling == "llama3") {
    w.set(a + ".rope.scaling.low_freq_factor", GgufValue::make_f32(1.0f));
    w.set(a + ".rope.scaling.high_freq_factor", GgufValue::make_f32(4.0f));
  }
  if (scaling == "llama3" || scaling == "longrope")
    w.set(a + ".rope.scaling.original_context_length", GgufValue::make_u32(static_cast<uint32_t>(p.rope_orig_ctx)));
  if (p.pooling >= 0) w.set(a + ".pooling_type", GgufValue::make_u32(static_cast<uint32_t>(p.pooling)));
  if (p.n_expert > 0) {
    w.set(a + ".expert_count", GgufValue::make_u32(static_cast<uint32_t>(p.n_expert)));
    w.set(a + ".expert_used_count", GgufValue::make_u32(static_cast<uint32_t>(p.n_expert_used)));
  }
  if (p.chatml_bpe) {
    // Qwen2.5's layout: no BOS added, <|endoftext|> pads, <|im_end|> ends a turn.
    const SynthBpeVocab v = synth_chatml_bpe_vocab(p.n_vocab);
    const uint32_t endoftext = static_cast<uint32_t>(p.n_vocab - 5), im_end = endoftext + 2;
    w.set("tokenizer.ggml.model", GgufValue::make_string("gpt2"));
    // Qwen2's pre-tokenizer split without its NFC normalization ("stablelm2"
    // names that), so that any text decodes back byte for byte.
    w.set("tokenizer.ggml.pre", GgufValue::make_string("stablelm2"));
    w.set("tokenizer.ggml.tokens", GgufValue::make_string_array(v.tokens));
    w.set("tokenizer.ggml.token_type", GgufValue::make_i32_array(v.types));
    w.set("tokenizer.ggml.merges", GgufValue::make_string_array(v.merges));
    w.set("tokenizer.ggml.bos_token_id", GgufValue::make_u32(endoftext));
    w.set("tokenizer.ggml.eos_token_id", GgufValue::make_u32(im_end));
    w.set("tokenizer.ggml.padding_token_id", GgufValue::make_u32(endoftext));
    w.set("tokenizer.ggml.add_bos_token", GgufValue::make_bool(false));
    w.set("tokenizer.chat_template", GgufValue::make_string(synth_chatml_template()));
  } else {
    set_spm_vocab(w, p.n_vocab);
  }
  write_quant_metadata(w, o.type, QuantMethod::Rtn);

  const float s_in = p.weight_std, s_out = p.weight_std / std::sqrt(2.0f * static_cast<float>(p.n_layer));
  const float s_norm = p.random_norms ? 0.2f / std::sqrt(3.0f) : 0.0f;  // 1 + U(-0.2, 0.2)
  const float s_bias = p.random_norms ? 0.1f : 0.0f;
  std::vector<Tensor> ts;
  auto matrix = [&](const std::string& n, int64_t in, int64_t out, float sd) { ts.push_back({n, {in, out}, sd, DType::F32}); };
  auto norm = [&](const std::string& n, int64_t len) { ts.push_back({n, {len}, s_norm, DType::F32, 1.0f}); };
  matrix("token_embd.weight", p.n_embd, p.n_vocab, s_in);
  norm("output_norm.weight", p.n_embd);
  if (!p.tied) matrix("output.weight", p.n_embd, p.n_vocab, s_in);
  if (scaling == "llama3") {
    Tensor t{"rope_freqs.weight", {head_dim / 2}, 0, DType::F32};
    t.fixed = llama3_rope_factors(head_dim, p.rope_base, p.rope_factor, p.rope_orig_ctx);
    ts.push_back(t);
  }
  if (scaling == "longrope") {  // factors in [1, 1.5] (short) and [1, 8] (long), rising with the wavelength
    for (const char* which : {"rope_factors_long.weight", "rope_factors_short.weight"}) {
      Tensor t{which, {head_dim / 2}, 0, DType::F32};
      const float top = which[13] == 'l' ? 8.0f : 1.5f;
      for (int i = 0; i < head_dim / 2; ++i) t.fixed.push_back(1.0f + (top - 1.0f) * i / std::max(1, head_dim / 2 - 1));
      ts.push_back(t);
    }
  }
  const bool fused = a == "phi3", bias = a == "qwen2", qk_norm = a == "qwen3", post = a == "gemma2";
  for (int l = 0; l < p.n_layer; ++l) {
    const std::string b = "blk." + std::to_string(l) + ".";
    norm(b + "attn_norm.weight", p.n_embd);
    if (fused) {
      matrix(b + "attn_qkv.weight", p.n_embd, q_dim + 2 * kv_dim, s_in);
    } else {
      matrix(b + "attn_q.weight", p.n_embd, q_dim, s_in);
      matrix(b + "attn_k.weight", p.n_embd, kv_dim, s_in);
      matrix(b + "attn_v.weight", p.n_embd, kv_dim, s_in);
    }
    if (bias) {
      ts.push_back({b + "attn_q.bias", {q_dim}, s_bias, DType::F32});
      ts.push_back({b + "attn_k.bias", {kv_dim}, s_bias, DType::F32});
      ts.push_back({b + "attn_v.bias", {kv_dim}, s_bias, DType::F32});
    }
    if (qk_norm) {
      norm(b + "attn_q_norm.weight", head_dim);
      norm(b + "attn_k_norm.weight", head_dim);
    }
    matrix(b + "attn_output.weight", q_dim, p.n_embd, s_out);
    if (post) norm(b + "post_attention_norm.weight", p.n_embd);
    norm(b + "ffn_norm.weight", p.n_embd);
    if (p.n_expert > 0) {
      // Mixtral's layout (synth.h); expert e is rows [e * n_ff, (e + 1) * n_ff).
      const int64_t E = p.n_expert;
      matrix(b + "ffn_gate_inp.weight", p.n_embd, E, s_in);
      ts.push_back({b + "ffn_gate_exps.weight", {p.n_embd, p.n_ff, E}, s_in, DType::F32});
      ts.push_back({b + "ffn_up_exps.weight", {p.n_embd, p.n_ff, E}, s_in, DType::F32});
      ts.push_back({b + "ffn_down_exps.weight", {p.n_ff, p.n_embd, E}, s_out, DType::F32});
      continue;
    }
    if (fused) {
      matrix(b + "ffn_up.weight", p.n_embd, 2 * static_cast<int64_t>(p.n_ff), s_in);
    } else {
      matrix(b + "ffn_gate.weight", p.n_embd, p.n_ff, s_in);
      matrix(b + "ffn_up.weight", p.n_embd, p.n_ff, s_in);
    }
    matrix(b + "ffn_down.weight", p.n_ff, p.n_embd, s_out);
    if (post) norm(b + "post_ffw_norm.weight", p.n_embd);
  }
  return write_tensors(w, ts, o, path);
}

}  // namespace infer

// ---- growing a small model into a large shape ----

namespace infer {

namespace {

// Gaussian noise for one row (Box-Muller over the counter-based generator).
void gaussian_row(uint64_t seed, uint64_t tensor, uint64_t row, float stddev, float* out, int64_t n) {
  uint64_t s = mix(seed ^ mix((tensor + 7919) * 0x100000001B3ULL + row));
  for (int64_t i = 0; i < n; i += 2) {
    s = mix(s);
    const double u1 = (static_cast<double>(s >> 11) + 0.5) * (1.0 / 9007199254740992.0);
    s = mix(s);
    const double u2 = static_cast<double>(s >> 11) * (1.0 / 9007199254740992.0);
    const double r = std::sqrt(-2.0 * std::log(u1)) * stddev;
    out[i] += static_cast<float>(r * std::cos(6.283185307179586 * u2));
    if (i + 1 < n) out[i + 1] += static_cast<float>(r * std::sin(6.283185307179586 * u2));
  }
}

struct Small {
  std::unique_ptr<GgufFile> f;
  int64_t d = 0, L = 0, H = 0, Hkv = 0, ff = 0, V = 0;
  float eps = 1e-5f, base = 10000.0f;
  // A tensor as f32 rows ([rows][n_in]), read once.
  std::vector<float> rows(const std::string& name, int64_t* n_in) const {
    const GgufTensorInfo* t = f->find_tensor(name);
    if (!t) raise(Status::Format, "grow: the small model has no tensor %s", name.c_str());
    const int64_t n = t->dims[0], r = t->n_rows();
    std::vector<float> out(static_cast<size_t>(n * r));
    const uint8_t* src = f->tensor_data(*t);
    const size_t rb = dtype_row_bytes(t->type, n);
    for (int64_t i = 0; i < r; ++i) dequantize_row(t->type, src + i * rb, out.data() + i * n, n);
    *n_in = n;
    return out;
  }
};

}  // namespace

uint64_t write_grown_model(const std::string& small_path, const SynthPreset& p, float noise, const std::string& path,
                           const SynthOptions& o) {
  if (o.type != DType::W8A8 && !can_quantize(o.type))
    raise(Status::InvalidArgument, "grow: cannot write weights as %s", dtype_name(o.type));
  if (!(noise >= 0) || noise > 1) raise(Status::InvalidArgument, "grow: the noise std must be in [0, 1]");
  Small s;
  s.f = GgufFile::open(small_path);
  const std::string sa = s.f->get_string("general.architecture").value_or("");
  if (sa != "llama") raise(Status::Unsupported, "grow: the small model must be a llama model (it is '%s')", sa.c_str());
  auto need = [&](const char* key) {
    const auto v = s.f->get_int(sa + "." + key);
    if (!v) raise(Status::Format, "grow: the small model lacks %s.%s", sa.c_str(), key);
    return *v;
  };
  s.d = need("embedding_length");
  s.L = need("block_count");
  s.H = need("attention.head_count");
  s.Hkv = s.f->get_int(sa + ".attention.head_count_kv").value_or(s.H);
  s.ff = need("feed_forward_length");
  s.eps = static_cast<float>(s.f->get_float(sa + ".attention.layer_norm_rms_epsilon").value_or(1e-5));
  s.base = static_cast<float>(s.f->get_float(sa + ".rope.freq_base").value_or(10000.0));
  const std::vector<std::string> vocab = s.f->get_string_array("tokenizer.ggml.tokens");
  s.V = static_cast<int64_t>(vocab.size());
  const int64_t D = p.n_embd, LL = p.n_layer, HH = p.n_head, HKV = p.n_head_kv, FF = p.n_ff;
  const int64_t hd = s.d / s.H, HD = D / HH, g = s.H / s.Hkv, G = HH / HKV;
  if (s.d > D || s.L > LL || s.ff > FF || s.Hkv > HKV || g > G || HD % hd != 0 || s.H % s.Hkv != 0)
    raise(Status::InvalidArgument,
          "grow: %s (dim %d, %d layers, %d heads, %d kv heads, ffn %d) does not hold the small model (dim %lld, "
          "%lld layers, %lld heads, %lld kv heads, ffn %lld)",
          p.name, p.n_embd, p.n_layer, p.n_head, p.n_head_kv, p.n_ff, (long long)s.d, (long long)s.L, (long long)s.H,
          (long long)s.Hkv, (long long)s.ff);
  const int64_t stretch = HD / hd;
  // Big index of small head h's dim j (rotary pair j/2 at pair (j/2) * stretch).
  auto qdim = [&](int64_t h, int64_t j) { return ((h / g) * G + h % g) * HD + (j / 2) * stretch * 2 + j % 2; };
  auto kdim = [&](int64_t k, int64_t j) { return k * HD + (j / 2) * stretch * 2 + j % 2; };
  const float qscale = std::sqrt(static_cast<float>(HD) / static_cast<float>(hd));
  const float nscale = std::sqrt(static_cast<float>(s.d) / static_cast<float>(D));

  const std::string a = "llama";
  GgufStreamWriter w(path);
  w.set("general.architecture", GgufValue::make_string(a));
  w.set("general.name", GgufValue::make_string(strformat("%s grown to %s, noise %g",
                                                         s.f->get_string("general.name").value_or("model").c_str(),
                                                         p.name, noise)));
  w.set(a + ".context_length",
        GgufValue::make_u32(static_cast<uint32_t>(s.f->get_int(sa + ".context_length").value_or(p.n_ctx))));
  w.set(a + ".embedding_length", GgufValue::make_u32(static_cast<uint32_t>(D)));
  w.set(a + ".feed_forward_length", GgufValue::make_u32(static_cast<uint32_t>(FF)));
  w.set(a + ".block_count", GgufValue::make_u32(static_cast<uint32_t>(LL)));
  w.set(a + ".attention.head_count", GgufValue::make_u32(static_cast<uint32_t>(HH)));
  w.set(a + ".attention.head_count_kv", GgufValue::make_u32(static_cast<uint32_t>(HKV)));
  w.set(a + ".rope.dimension_count", GgufValue::make_u32(static_cast<uint32_t>(HD)));
  w.set(a + ".attention.layer_norm_rms_epsilon", GgufValue::make_f32(s.eps * static_cast<float>(s.d) / D));
  w.set(a + ".rope.freq_base", GgufValue::make_f32(s.base));
  for (const auto& kv : s.f->metadata())
    if (kv.first.rfind("tokenizer.", 0) == 0) w.set(kv.first, kv.second);
  write_quant_metadata(w, o.type, QuantMethod::Rtn);

  // Each big tensor: its shape and how to fill a row.
  struct Big {
    std::string name;
    std::vector<int64_t> dims;
    DType type = DType::F32;
    bool matrix = true;
    std::function<void(int64_t row, float* out)> fill;  // out is zeroed
  };
  std::vector<Big> ts;
  int64_t n_in = 0;
  auto pad_rows = [&](const std::string& name, int64_t small_rows_in) {
    return [src = std::make_shared<std::vector<float>>(s.rows(name, &n_in)), small_rows_in](int64_t r, float* out) {
      const int64_t rows = static_cast<int64_t>(src->size()) / small_rows_in;
      if (r < rows) std::copy(src->begin() + r * small_rows_in, src->begin() + (r + 1) * small_rows_in, out);
    };
  };
  auto norm = [&](const std::string& name) {
    auto src = std::make_shared<std::vector<float>>(s.rows(name, &n_in));
    return [src, nscale, D](int64_t, float* out) {
      std::fill(out, out + D, 1.0f);
      for (size_t i = 0; i < src->size(); ++i) out[i] = (*src)[i] * nscale;
    };
  };
  ts.push_back({"token_embd.weight", {D, s.V}, DType::F32, true, pad_rows("token_embd.weight", s.d)});
  ts.push_back({"output_norm.weight", {D}, DType::F32, false, norm("output_norm.weight")});
  ts.push_back({"output.weight", {D, s.V}, DType::F32, true,
                s.f->find_tensor("output.weight") ? pad_rows("output.weight", s.d) : pad_rows("token_embd.weight", s.d)});
  for (int64_t l = 0; l < LL; ++l) {
    const std::string b = "blk." + std::to_string(l) + ".";
    const bool real = l < s.L;
    auto none = [](int64_t, float*) {};
    auto ones = [D](int64_t, float* out) { std::fill(out, out + D, 1.0f); };
    // Rows of the small matrix `name` ([rows][n_in]) scattered: big row
    // rowmap(r) gets small row r at columns colmap(c), times `scale`.
    auto scatter = [&](const std::string& name, std::function<int64_t(int64_t)> rowmap,
                       std::function<int64_t(int64_t)> colmap, float scale, int64_t big_rows) {
      int64_t n = 0;
      auto src = std::make_shared<std::vector<float>>(s.rows(name, &n));
      const int64_t rows = static_cast<int64_t>(src->size()) / n;
      auto inv = std::make_shared<std::vector<int64_t>>(static_cast<size_t>(big_rows), -1);
      for (int64_t r = 0; r < rows; ++r) (*inv)[static_cast<size_t>(rowmap(r))] = r;
      return [src, inv, n, colmap, scale](int64_t r, float* out) {
        const int64_t sr = (*inv)[static_cast<size_t>(r)];
        if (sr < 0) return;
        for (int64_t c = 0; c < n; ++c) out[colmap(c)] = (*src)[static_cast<size_t>(sr * n + c)] * scale;
      };
    };
    auto id = [](int64_t x) { return x; };
    auto q_of = [&](int64_t r) { return qdim(r / hd, r % hd); };
    auto k_of = [&](int64_t r) { return kdim(r / hd, r % hd); };
    if (real) {
      ts.push_back({b + "attn_norm.weight", {D}, DType::F32, false, norm(b + "attn_norm.weight")});
      ts.push_back({b + "attn_q.weight", {D, HH * HD}, DType::F32, true, scatter(b + "attn_q.weight", q_of, id, qscale, HH * HD)});
      ts.push_back({b + "attn_k.weight", {D, HKV * HD}, DType::F32, true, scatter(b + "attn_k.weight", k_of, id, 1.0f, HKV * HD)});
      ts.push_back({b + "attn_v.weight", {D, HKV * HD}, DType::F32, true, scatter(b + "attn_v.weight", k_of, id, 1.0f, HKV * HD)});
      ts.push_back({b + "attn_output.weight", {HH * HD, D}, DType::F32, true, scatter(b + "attn_output.weight", id, q_of, 1.0f, D)});
      ts.push_back({b + "ffn_norm.weight", {D}, DType::F32, false, norm(b + "ffn_norm.weight")});
      ts.push_back({b + "ffn_gate.weight", {D, FF}, DType::F32, true, scatter(b + "ffn_gate.weight", id, id, 1.0f, FF)});
      ts.push_back({b + "ffn_up.weight", {D, FF}, DType::F32, true, scatter(b + "ffn_up.weight", id, id, 1.0f, FF)});
      ts.push_back({b + "ffn_down.weight", {FF, D}, DType::F32, true, scatter(b + "ffn_down.weight", id, id, 1.0f, D)});
    } else {
      ts.push_back({b + "attn_norm.weight", {D}, DType::F32, false, ones});
      ts.push_back({b + "attn_q.weight", {D, HH * HD}, DType::F32, true, none});
      ts.push_back({b + "attn_k.weight", {D, HKV * HD}, DType::F32, true, none});
      ts.push_back({b + "attn_v.weight", {D, HKV * HD}, DType::F32, true, none});
      ts.push_back({b + "attn_output.weight", {HH * HD, D}, DType::F32, true, none});
      ts.push_back({b + "ffn_norm.weight", {D}, DType::F32, false, ones});
      ts.push_back({b + "ffn_gate.weight", {D, FF}, DType::F32, true, none});
      ts.push_back({b + "ffn_up.weight", {D, FF}, DType::F32, true, none});
      ts.push_back({b + "ffn_down.weight", {FF, D}, DType::F32, true, none});
    }
  }
  for (Big& t : ts) {
    if (t.matrix && is_quantizable(t.name, t.dims)) t.type = tensor_type(o.type, t.dims[0], nullptr);
    declare_tensor(w, t.name, t.dims, t.type);
  }
  w.begin();
  ThreadPool pool(o.n_threads);
  std::vector<float> buf, scales;
  for (size_t ti = 0; ti < ts.size(); ++ti) {
    const Big& t = ts[ti];
    const int64_t n = t.dims[0], rows = t.dims.size() > 1 ? t.dims[1] : 1;
    if (o.progress) o.progress(static_cast<double>(ti) / static_cast<double>(ts.size()), t.name);
    const int64_t chunk = std::max<int64_t>(1, std::min<int64_t>(rows, (int64_t(32) << 20) / (4 * n)));
    if (t.type == DType::W8A8) scales.resize(static_cast<size_t>(rows));
    for (int64_t r0 = 0; r0 < rows; r0 += chunk) {
      const int64_t r1 = std::min(rows, r0 + chunk);
      buf.assign(static_cast<size_t>((r1 - r0) * n), 0.0f);
      pool.run([&](int tid, int nth) {
        for (int64_t r = r0 + (r1 - r0) * tid / nth; r < r0 + (r1 - r0) * (tid + 1) / nth; ++r) {
          float* row = buf.data() + (r - r0) * n;
          t.fill(r, row);
          if (t.matrix && noise > 0) gaussian_row(o.seed, ti, static_cast<uint64_t>(r), noise, row, n);
        }
      });
      write_rows(w, t.type, buf.data(), r1 - r0, n, t.type == DType::W8A8 ? scales.data() + r0 : nullptr, &pool);
    }
    if (t.type == DType::W8A8) w.write(scales.data(), scales.size() * 4);
  }
  w.finish();
  if (o.progress) o.progress(1.0, "done");
  struct stat sb;
  return ::stat(path.c_str(), &sb) == 0 ? static_cast<uint64_t>(sb.st_size) : 0;
}

}  // namespace infer
