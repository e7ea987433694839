// Pre-tokenizer families and the PCRE2 machinery that runs them.
#include "tokenizer/pretokenizer.h"
#include "core/tls.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <cstring>
#include <new>

#include "core/error.h"
#include "core/log.h"

namespace infer {

namespace {

// ---- the published patterns ----------------------------------------------------
//
// Written with `\s`/`\S`; compile() spells those out as White_Space.

// GPT-2's byte-level regex (HF ByteLevel(use_regex = true)).
constexpr const char* kGpt2 =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

// cl100k-style (Llama 3, DBRX, Smaug, GLM-4): case-insensitive contractions,
// one optional non-letter before a word, numbers in groups of up to three.
constexpr const char* kLlama3 =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// Qwen2: as Llama 3 but every digit on its own.
constexpr const char* kQwen2 =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// Tekken (Mistral NeMo): words split at case changes, single digits, '/'
// may follow punctuation runs.
constexpr const char* kTekken =
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// o200k (GPT-4o, Llama 4): Tekken's word rule with contractions attached and
// numbers in groups of up to three.
constexpr const char* kGpt4o =
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// BLOOM, Poro, GPT-3-Finnish, Viking: a word is anything up to whitespace
// or one of ( | . , ! ? … 。 ， 、 । ۔ ، ).
constexpr const char* kBloom =
    R"( ?[^(\s|.,!?\x{2026}\x{3002}\x{FF0C}\x{3001}\x{964}\x{6D4}\x{60C})]+)";

// DeepSeek LLM: newlines alone, cased letters (the published class of
// Lu/Ll/Lt ranges), ASCII and full-width punctuation, trailing whitespace,
// CJK/Hangul runs, digit runs.
constexpr const char* kDeepseekLetters =
    R"(\s?[A-Za-z\x{B5}\x{C0}-\x{D6}\x{D8}-\x{F6}\x{F8}-\x{1BA}\x{1BC}-\x{1BF}\x{1C4}-\x{293}\x{295}-\x{2AF}\x{370}-\x{373}\x{376}\x{377}\x{37B}-\x{37D}\x{37F}\x{386}\x{388}-\x{38A}\x{38C}\x{38E}-\x{3A1}\x{3A3}-\x{3F5}\x{3F7}-\x{481}\x{48A}-\x{52F}\x{531}-\x{556}\x{10A0}-\x{10C5}\x{13A0}-\x{13F5}\x{13F8}-\x{13FD}\x{1C90}-\x{1CBA}\x{1CBD}-\x{1CBF}\x{1D00}-\x{1D2B}\x{1D6B}-\x{1D77}\x{1D79}-\x{1D9A}\x{1E00}-\x{1F15}\x{1F18}-\x{1F1D}\x{1F20}-\x{1F45}\x{1F48}-\x{1F4D}\x{1F50}-\x{1F57}\x{1F59}\x{1F5B}\x{1F5D}\x{1F5F}-\x{1F7D}\x{1F80}-\x{1FB4}\x{1FB6}-\x{1FBC}\x{1FBE}\x{1FC2}-\x{1FC4}\x{1FC6}-\x{1FCC}\x{1FD0}-\x{1FD3}\x{1FD6}-\x{1FDB}\x{1FE0}-\x{1FEC}\x{1FF2}-\x{1FF4}\x{1FF6}-\x{1FFC}\x{2102}\x{2107}\x{210A}-\x{2113}\x{2115}\x{2119}-\x{211D}\x{2124}\x{2126}\x{2128}\x{212A}-\x{212D}\x{212F}-\x{2134}\x{2139}\x{213C}-\x{213F}\x{2145}-\x{2149}\x{214E}\x{2183}\x{2184}\x{2C00}-\x{2C7B}\x{2C7E}-\x{2CE4}\x{2CEB}-\x{2CEE}\x{2CF2}\x{2CF3}\x{A640}-\x{A66D}\x{A680}-\x{A69B}\x{A722}-\x{A76F}\x{A771}-\x{A787}\x{A78B}-\x{A78E}\x{AB70}-\x{ABBF}\x{FB00}-\x{FB06}\x{FB13}-\x{FB17}\x{FF21}-\x{FF3A}\x{FF41}-\x{FF5A}\x{10400}-\x{1044F}\x{104B0}-\x{104D3}\x{104D8}-\x{104FB}\x{10C80}-\x{10CB2}\x{10CC0}-\x{10CF2}\x{118A0}-\x{118DF}\x{1E900}-\x{1E943}]+)";
constexpr const char* kDeepseekPunct =
    R"(\s?[!-/:-~\x{FF01}-\x{FF0F}\x{FF1A}-\x{FF5E}\x{2018}-\x{201F}\x{3000}-\x{3002}]+)";
constexpr const char* kDeepseekCjk = R"([\x{4E00}-\x{9FA5}\x{800}-\x{4E00}\x{AC00}-\x{D7FF}]+)";

// DeepSeek V3: CJK + kana runs, then words that may start with one ASCII
// punctuation character, punctuation/symbol runs, whitespace.
constexpr const char* kDeepseek3Cjk = R"([\x{4E00}-\x{9FA5}\x{3040}-\x{309F}\x{30A0}-\x{30FF}]+)";
constexpr const char* kDeepseek3Main =
    R"([!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

struct Family {
  PreTokenizerInfo info;
  std::vector<const char*> names;
  std::vector<const char*> patterns;
};

const std::vector<Family>& families() {
  using N = Normalization;
  static const std::vector<Family> all = {
      // llama.cpp's generic BPE split (punctuation runs, GPT-2, digit runs,
      // then groups of three ASCII digits).
      {{"default", N::None, false, false},
       {"default"},
       {R"([\p{P}\$\+<=>\^~\|]+)", kGpt2, R"(\p{N}+)", "[0-9][0-9][0-9]"}},
      {{"llama3", N::None, true, true},
       {"llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0", "lfm2"},
       {kLlama3}},
      {{"dbrx", N::None, false, false}, {"dbrx"}, {kLlama3}},
      {{"smaug", N::None, false, false}, {"smaug-bpe", "smaug"}, {kLlama3}},
      {{"chatglm4", N::None, false, false}, {"chatglm-bpe", "glm4", "chatglm4"}, {kLlama3}},
      {{"qwen2", N::NFC, false, false}, {"qwen2", "deepseek-r1-qwen"}, {kQwen2}},
      {{"stablelm2", N::None, false, false}, {"stablelm2", "megrez"}, {kQwen2}},
      {{"gpt-2", N::None, false, false},
       {"gpt-2", "phi-2", "jina-es", "jina-de", "gigachat", "jina-v1-en", "jina-v2-es", "jina-v2-de",
        "jina-v2-code", "roberta-bpe", "a.x-4.0", "mellum", "exaone4", "modern-bert"},
       {kGpt2}},
      // GPT-NeoX's tokenizer (MPT, OLMo) normalizes to NFC first.
      {{"mpt", N::NFC, false, false}, {"mpt"}, {kGpt2}},
      {{"olmo", N::NFC, false, false}, {"olmo"}, {kGpt2}},
      {{"jais", N::None, false, false}, {"jais"}, {kGpt2}},
      // Falcon: punctuation runs (Unicode P plus the ASCII symbols), then
      // GPT-2, then groups of three ASCII digits.
      {{"falcon", N::None, false, false},
       {"falcon"},
       {R"([\p{P}\$\+<=>\^~\|`]+)", kGpt2, "[0-9][0-9][0-9]"}},
      // Individual digits, then GPT-2 (StarCoder2 and the models built on
      // its tokenizer design). Command-R's tokenizer normalizes to NFC.
      {{"starcoder", N::None, false, false}, {"starcoder"}, {R"(\p{N})", kGpt2}},
      {{"refact", N::None, false, false}, {"refact"}, {R"(\p{N})", kGpt2}},
      {{"command-r", N::NFC, false, false}, {"command-r"}, {R"(\p{N})", kGpt2}},
      {{"smollm", N::None, false, false}, {"smollm"}, {R"(\p{N})", kGpt2}},
      {{"codeshell", N::None, false, false}, {"codeshell"}, {R"(\p{N})", kGpt2}},
      {{"exaone", N::None, false, false}, {"exaone"}, {R"(\p{N})", kGpt2}},
      {{"minerva", N::None, false, false}, {"minerva-7b", "minerva"}, {R"(\p{N})", kGpt2}},
      {{"deepseek-llm", N::None, false, false},
       {"deepseek-llm"},
       {R"([\r\n])", kDeepseekLetters, kDeepseekPunct, R"(\s+$)", kDeepseekCjk, R"(\p{N}+)"}},
      {{"deepseek-coder", N::None, false, false},
       {"deepseek-coder"},
       {R"([\r\n])", R"(\s?\p{L}+)", R"(\s?\p{P}+)", kDeepseekCjk, R"(\p{N})"}},
      {{"deepseek-v3", N::None, false, false},
       {"deepseek-v3"},
       {R"(\p{N}{1,3})", kDeepseek3Cjk, kDeepseek3Main}},
      {{"poro", N::None, false, false}, {"poro-chat", "poro"}, {kBloom}},
      {{"bloom", N::None, false, false}, {"bloom"}, {kBloom}},
      {{"gpt3-finnish", N::None, false, false}, {"gpt3-finnish"}, {kBloom}},
      {{"viking", N::None, false, false}, {"viking"}, {kBloom, R"(\p{N})"}},
      {{"tekken", N::None, true, true}, {"tekken"}, {kTekken}},
      // Chameleon: sentinel and image tokens, tabs/newlines and runs of two
      // or four spaces, single digits, single punctuation, then GPT-2.
      {{"chameleon", N::None, false, true},
       {"chameleon"},
       {"<sentinel:[0-9]+>", "(IMGIMG)((A|B|C|D|E|F|G|H|I){1,4})Z", "([\\t\\n]|    |  )", R"(\p{N})",
        R"([\p{P}!-/:-@\[-`{-~])", kGpt2}},
      {{"gpt-4o", N::None, false, false}, {"gpt-4o", "llama4"}, {kGpt4o}},
  };
  return all;
}

const Family* find_family(std::string_view pre) {
  if (pre.empty()) pre = "default";
  for (const Family& f : families())
    for (const char* n : f.names)
      if (pre == n) return &f;
  return nullptr;
}

// The Unicode White_Space code points, as the inside of a character class.
constexpr const char* kWhiteSpace =
    R"(\x{9}-\x{D}\x{20}\x{85}\x{A0}\x{1680}\x{2000}-\x{200A}\x{2028}\x{2029}\x{202F}\x{205F}\x{3000})";

// Rewrites \s and \S as explicit White_Space classes.
std::string expand_whitespace(std::string_view p) {
  std::string out;
  bool in_class = false;
  for (size_t i = 0; i < p.size(); ++i) {
    const char c = p[i];
    if (c == '\\' && i + 1 < p.size()) {
      const char e = p[i + 1];
      if (e == 's') {
        out += in_class ? std::string(kWhiteSpace) : "[" + std::string(kWhiteSpace) + "]";
      } else if (e == 'S') {
        if (in_class) raise(Status::Internal, "\\S inside a character class is not supported");
        out += "[^" + std::string(kWhiteSpace) + "]";
      } else {
        out += c;
        out += e;
      }
      ++i;
      continue;
    }
    if (c == '[' && !in_class) {
      in_class = true;
      out += c;
      // A ']' right after '[' or '[^' would be literal; none of ours has one.
      continue;
    }
    if (c == ']' && in_class) in_class = false;
    out += c;
  }
  return out;
}

// Per-thread matching state: match data and a JIT stack big enough for long
// runs of one character class.
struct MatchState {
  pcre2_match_data* md = nullptr;
  pcre2_match_context* mctx = nullptr;
  pcre2_jit_stack* stack = nullptr;
  MatchState() {
    md = pcre2_match_data_create(1, nullptr);
    mctx = pcre2_match_context_create(nullptr);
    stack = pcre2_jit_stack_create(64 * 1024, 16 * 1024 * 1024, nullptr);
    if (!md || !mctx || !stack) {
      release();
      throw std::bad_alloc();
    }
    pcre2_jit_stack_assign(mctx, nullptr, stack);
  }
  ~MatchState() { release(); }
  void release() {
    pcre2_match_data_free(md);
    pcre2_match_context_free(mctx);
    pcre2_jit_stack_free(stack);
    md = nullptr;
    mctx = nullptr;
    stack = nullptr;
  }
};

MatchState& match_state() {
  static thread_local MatchState* slot = nullptr;
  return tls_object(slot);
}

std::string pcre2_message(int code) {
  PCRE2_UCHAR buf[256];
  if (pcre2_get_error_message(code, buf, sizeof buf) < 0) return "unknown PCRE2 error";
  return reinterpret_cast<const char*>(buf);
}

}  // namespace

struct PreTokenizer::Regex {
  pcre2_code* code = nullptr;
  bool jit = false;
  // Cheap filters from PCRE2's pattern analysis: a piece shorter than
  // min_length code points, or with no byte that can start a match, is
  // left whole without calling the matcher (most pieces, for the later
  // regexes of multi-regex families).
  uint32_t min_length = 0;
  bool has_first = false;
  uint8_t first[32] = {};  // bitmap of bytes a match can start with
  ~Regex() { pcre2_code_free(code); }

  void analyse() {
    pcre2_pattern_info(code, PCRE2_INFO_MINLENGTH, &min_length);
    uint32_t first_type = 0;
    pcre2_pattern_info(code, PCRE2_INFO_FIRSTCODETYPE, &first_type);
    if (first_type == 1) {
      uint32_t unit = 0;
      pcre2_pattern_info(code, PCRE2_INFO_FIRSTCODEUNIT, &unit);
      // Only an ASCII non-letter: a caseless letter could start with its
      // other case.
      const bool letter = (unit | 0x20) >= 'a' && (unit | 0x20) <= 'z';
      if (unit < 0x80 && !letter) {
        first[unit >> 3] = static_cast<uint8_t>(1u << (unit & 7));
        has_first = true;
      }
    } else if (first_type == 0) {
      const uint8_t* bitmap = nullptr;
      if (pcre2_pattern_info(code, PCRE2_INFO_FIRSTBITMAP, &bitmap) == 0 && bitmap) {
        std::memcpy(first, bitmap, sizeof first);
        has_first = true;
      }
    }
  }

  // Whether no match can lie in piece p.
  bool cannot_match(const unsigned char* p, size_t len) const {
    if (len < min_length) return true;
    if (!has_first) return false;
    for (size_t i = 0; i < len; ++i)
      if (first[p[i] >> 3] & (1u << (p[i] & 7))) return false;
    return true;
  }
};

PreTokenizer::~PreTokenizer() = default;

bool PreTokenizer::lookup(std::string_view pre, PreTokenizerInfo* info) {
  const Family* f = find_family(pre);
  if (!f) return false;
  if (info) *info = f->info;
  return true;
}

std::vector<std::string> PreTokenizer::names() {
  std::vector<std::string> out;
  for (const Family& f : families())
    for (const char* n : f.names) out.emplace_back(n);
  return out;
}

std::vector<std::string> PreTokenizer::patterns(std::string_view pre) {
  std::vector<std::string> out;
  if (const Family* f = find_family(pre))
    for (const char* p : f->patterns) out.emplace_back(p);
  return out;
}

std::unique_ptr<PreTokenizer> PreTokenizer::create(std::string_view pre, bool use_jit) {
  const Family* f = find_family(pre);
  if (!f)
    raise(Status::Unsupported, "pre-tokenizer '%.*s' (tokenizer.ggml.pre) is not supported",
          static_cast<int>(pre.size()), pre.data());
  if (pre.empty())
    log(LogLevel::Warn, "no tokenizer.ggml.pre in a byte-level BPE vocabulary: using 'default'");
  std::unique_ptr<PreTokenizer> p(new PreTokenizer());
  p->info_ = f->info;
  for (const char* pattern : f->patterns) {
    const std::string expanded = expand_whitespace(pattern);
    auto re = std::make_unique<Regex>();
    int err = 0;
    PCRE2_SIZE err_offset = 0;
    const uint32_t options = PCRE2_UTF | PCRE2_UCP | PCRE2_NO_AUTO_CAPTURE;
    re->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(expanded.data()), expanded.size(), options,
                             &err, &err_offset, nullptr);
    if (!re->code)
      raise(Status::Internal, "pre-tokenizer '%s': regex error at %zu: %s", f->info.family.c_str(),
            static_cast<size_t>(err_offset), pcre2_message(err).c_str());
    re->jit = use_jit && pcre2_jit_compile(re->code, PCRE2_JIT_COMPLETE) == 0;
    re->analyse();
    if (use_jit && !re->jit)
      log(LogLevel::Debug, "pre-tokenizer '%s': PCRE2 JIT unavailable, interpreting",
          f->info.family.c_str());
    p->regexes_.push_back(std::move(re));
  }
  return p;
}

void PreTokenizer::split(std::string_view text, std::vector<Span>& out) const {
  out.clear();
  if (text.empty()) return;
  if (text.size() > UINT32_MAX)
    raise(Status::InvalidArgument, "text of %zu bytes is too long to pre-tokenize", text.size());
  MatchState& st = match_state();
  // Pieces in text order; `raw` pieces are ill-formed UTF-8, which no regex
  // sees: every subject the matcher gets is valid UTF-8, so no match call
  // needs to check it (an unchecked call on invalid UTF-8 is undefined, and
  // a checked one rescans the rest of the subject every time).
  struct Piece {
    uint32_t off, len;
    bool raw;
  };
  std::vector<Piece> cur, next;
  if (utf8_valid(text)) {
    cur.push_back({0, static_cast<uint32_t>(text.size()), false});
  } else {
    size_t run = 0, pos = 0;
    while (pos < text.size()) {
      size_t len = 1;
      if (static_cast<unsigned char>(text[pos]) < 0x80 || utf8_next(text, pos, &len) == Utf8Status::Valid) {
        pos += len;
        continue;
      }
      if (pos > run) cur.push_back({static_cast<uint32_t>(run), static_cast<uint32_t>(pos - run), false});
      size_t end = pos + len;  // extend over adjacent ill-formed bytes
      while (end < text.size()) {
        size_t l = 1;
        if (static_cast<unsigned char>(text[end]) < 0x80 || utf8_next(text, end, &l) == Utf8Status::Valid) break;
        end += l;
      }
      cur.push_back({static_cast<uint32_t>(pos), static_cast<uint32_t>(end - pos), true});
      pos = run = end;
    }
    if (run < text.size()) cur.push_back({static_cast<uint32_t>(run), static_cast<uint32_t>(text.size() - run), false});
  }
  for (const auto& re : regexes_) {
    next.clear();
    next.reserve(cur.size() * 2 + 8);
    for (const Piece& piece : cur) {
      // The piece is the whole subject: anchors and lookarounds see only it.
      const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data() + piece.off);
      const PCRE2_SIZE len = piece.len;
      if (piece.raw || re->cannot_match(subject, len)) {
        next.push_back(piece);
        continue;
      }
      PCRE2_SIZE pos = 0, last = 0;
      while (pos < len) {
        const int rc =
            re->jit ? pcre2_jit_match(re->code, subject, len, pos, PCRE2_NO_UTF_CHECK, st.md, st.mctx)
                    : pcre2_match(re->code, subject, len, pos, PCRE2_NO_UTF_CHECK, st.md, st.mctx);
        if (rc == PCRE2_ERROR_NOMATCH) break;
        if (rc < 0)
          raise(Status::Internal, "pre-tokenizer '%s': regex match failed: %s", info_.family.c_str(),
                pcre2_message(rc).c_str());
        const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(st.md);
        const PCRE2_SIZE ms = ov[0], me = ov[1];
        if (me == ms) {
          // An empty match splits nothing; look again one code point on.
          if (ms >= len) break;
          pos = ms + utf8_len_from_lead(subject[ms]);
          continue;
        }
        if (ms > last)
          next.push_back({piece.off + static_cast<uint32_t>(last), static_cast<uint32_t>(ms - last), false});
        next.push_back({piece.off + static_cast<uint32_t>(ms), static_cast<uint32_t>(me - ms), false});
        last = pos = me;
      }
      if (last < len)
        next.push_back({piece.off + static_cast<uint32_t>(last), static_cast<uint32_t>(len - last), false});
    }
    cur.swap(next);
  }
  out.reserve(cur.size());
  for (const Piece& p : cur) out.emplace_back(p.off, p.len);
}

}  // namespace infer
