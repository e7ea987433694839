// tokenizer.json (+ tokenizer_config.json) -> tokenizer.ggml.* metadata.
//
// Two tokenizer.json shapes are understood, the two the supported families publish:
//  - SentencePiece-style BPE (model.type "BPE" with byte_fallback: Llama 1/2,
//    Mistral, Mixtral, Gemma, Phi-3): tokenizer.ggml.model "llama". Our SPM
//    tokenizer merges by piece score; a piece's score is minus the rank of
//    the first merge that produces it, so the highest-scoring merge is the
//    lowest-ranked one, as Hugging Face's BPE applies them. The dummy prefix
//    (add_space_prefix) comes from a Prepend("▁") normalizer or a Metaspace
//    pre-tokenizer whose prepend_scheme is not "never".
//  - Byte-level BPE (a ByteLevel pre-tokenizer or decoder: Llama 3, Qwen 2/3):
//    tokenizer.ggml.model "gpt2" with its merges; the pre-tokenizer steps
//    (Split regexes, ByteLevel's own regex, Digits, Punctuation) are matched
//    against the families lib/tokenizer knows (PreTokenizer::patterns) and
//    the family's name becomes tokenizer.ggml.pre.
// added_tokens become Control (special) or UserDefined tokens at their ids.
#include <algorithm>
#include <cstring>
#include <functional>
#include <map>
#include <unordered_map>

#include "core/error.h"
#include "hf/hf.h"
#include "hf/hf_encoder.h"
#include "core/json.h"
#include "tokenizer/pretokenizer.h"
#include "tokenizer/tokenizer.h"

namespace infer {
namespace hf {

namespace {

using Meta = std::vector<std::pair<std::string, GgufValue>>;

// Non-ASCII code points as \x{HEX} so literal characters and escapes compare equal.
std::string normalize_regex(const std::string& r) {
  std::string out;
  for (size_t i = 0; i < r.size();) {
    const unsigned char c = static_cast<unsigned char>(r[i]);
    if (c < 0x80) {
      out += static_cast<char>(c);
      ++i;
      continue;
    }
    uint32_t cp = 0;
    size_t n = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : 2;
    if (i + n > r.size()) n = r.size() - i;
    cp = c & (n == 4 ? 0x07 : n == 3 ? 0x0F : 0x1F);
    for (size_t k = 1; k < n; ++k) cp = (cp << 6) | (static_cast<unsigned char>(r[i + k]) & 0x3F);
    char buf[16];
    std::snprintf(buf, sizeof buf, "\\x{%X}", cp);
    out += buf;
    i += n;
  }
  // Upper-case hex inside \x{...} written by hand.
  for (size_t i = 0; i + 3 < out.size(); ++i)
    if (out[i] == '\\' && out[i + 1] == 'x' && out[i + 2] == '{')
      for (size_t j = i + 3; j < out.size() && out[j] != '}'; ++j)
        out[j] = static_cast<char>(std::toupper(static_cast<unsigned char>(out[j])));
  return out;
}

// The pre-tokenizer steps as a list of regexes; bytelevel is set when a
// ByteLevel step is present. Unknown step types: Error(Unsupported).
void pre_steps(const Json& p, std::vector<std::string>& out, bool& bytelevel, bool& metaspace) {
  if (p.is_null()) return;
  const Json* type = p.find("type");
  if (!type || !type->is_string()) raise(Status::Format, "tokenizer.json: a pre_tokenizer has no type");
  const std::string& t = type->as_string();
  if (t == "Sequence") {
    const Json* list = p.find("pretokenizers");
    if (!list || !list->is_array()) raise(Status::Format, "tokenizer.json: Sequence pre_tokenizer has no list");
    for (const Json& q : list->items()) pre_steps(q, out, bytelevel, metaspace);
  } else if (t == "ByteLevel") {
    bytelevel = true;
    const Json* ur = p.find("use_regex");
    if (!ur || !ur->is_bool() || ur->as_bool()) out.push_back(PreTokenizer::patterns("gpt-2").at(0));
    const Json* aps = p.find("add_prefix_space");
    if (aps && aps->is_bool() && aps->as_bool())
      raise(Status::Unsupported, "tokenizer.json: ByteLevel with add_prefix_space is not supported");
  } else if (t == "Split") {
    const Json* pat = p.find("pattern");
    const Json* beh = p.find("behavior");
    const Json* inv = p.find("invert");
    if (!pat || !pat->is_object()) raise(Status::Format, "tokenizer.json: Split has no pattern");
    if (beh && beh->is_string() && beh->as_string() != "Isolated")
      raise(Status::Unsupported, "tokenizer.json: Split behavior '%s' is not supported", beh->as_string().c_str());
    if (inv && inv->is_bool() && inv->as_bool()) raise(Status::Unsupported, "tokenizer.json: inverted Split is not supported");
    if (const Json* re = pat->find("Regex"); re && re->is_string()) {
      out.push_back(re->as_string());
    } else if (const Json* s = pat->find("String"); s && s->is_string()) {
      std::string esc;
      for (char c : s->as_string()) {
        if (std::strchr("\\^$.|?*+()[]{}", c)) esc += '\\';
        esc += c;
      }
      out.push_back(esc);
    } else {
      raise(Status::Format, "tokenizer.json: Split pattern is neither Regex nor String");
    }
  } else if (t == "Digits") {
    const Json* ind = p.find("individual_digits");
    out.push_back(ind && ind->is_bool() && ind->as_bool() ? R"(\p{N})" : R"(\p{N}+)");
  } else if (t == "Punctuation") {
    out.push_back(R"(\p{P}+)");
  } else if (t == "Metaspace") {
    metaspace = true;
  } else {
    raise(Status::Unsupported, "tokenizer.json: pre_tokenizer type '%s' is not supported", t.c_str());
  }
}

// The tokenizer.ggml.pre family whose regexes are these.
std::string match_family(const std::vector<std::string>& steps) {
  std::vector<std::string> norm;
  for (const std::string& s : steps) norm.push_back(normalize_regex(s));
  // Structures whose library spelling differs from the tokenizer.json steps.
  const std::string gpt2 = normalize_regex(PreTokenizer::patterns("gpt-2").at(0));
  if (norm == std::vector<std::string>{R"(\p{P}+)", gpt2, R"(\p{N}+)", "[0-9][0-9][0-9]"}) return "falcon";
  // Families in a preferred order first (several share their regexes).
  std::vector<std::string> names = {"gpt-2", "llama3", "qwen2", "starcoder", "deepseek-llm", "deepseek-coder",
                                    "deepseek-v3", "bloom", "tekken", "gpt-4o", "chameleon"};
  for (const std::string& n : PreTokenizer::names()) names.push_back(n);
  for (const std::string& n : names) {
    std::vector<std::string> p = PreTokenizer::patterns(n);
    for (std::string& s : p) s = normalize_regex(s);
    if (p == norm) return n;
  }
  std::string list;
  for (const std::string& s : steps) list += (list.empty() ? "" : ", ") + ("'" + s.substr(0, 80) + "'");
  raise(Status::Unsupported, "tokenizer.json: the pre-tokenizer (regexes %s) matches no known family", list.c_str());
}

// A special-token entry of tokenizer_config.json: a string or {"content": ...}.
std::string token_content(const Json* v) {
  if (!v || v->is_null()) return "";
  if (v->is_string()) return v->as_string();
  if (v->is_object())
    if (const Json* c = v->find("content"); c && c->is_string()) return c->as_string();
  return "";
}

}  // namespace

void read_tokenizer_vocab(const Json& tj, const Json& vocab, int64_t n_vocab_min, bool byte_tokens,
                          std::vector<std::string>& tokens, std::vector<int32_t>& types) {
  int64_t n = 0;
  for (const auto& [tok, id] : vocab.members()) {
    if (!id.is_int() || id.as_int() < 0 || id.as_int() >= (int64_t(1) << 24))
      raise(Status::Format, "tokenizer.json: vocabulary entry '%s' has a bad id", tok.substr(0, 40).c_str());
    n = std::max(n, id.as_int() + 1);
  }
  struct Added {
    std::string content;
    int64_t id;
    bool special;
  };
  std::vector<Added> added;
  if (const Json* at = tj.find("added_tokens"); at && !at->is_null()) {
    if (!at->is_array()) raise(Status::Format, "tokenizer.json: added_tokens is not an array");
    for (const Json& a : at->items()) {
      const Json* id = a.find("id");
      const Json* c = a.find("content");
      const Json* s = a.find("special");
      if (!id || !id->is_int() || id->as_int() < 0 || id->as_int() >= (int64_t(1) << 24) || !c || !c->is_string())
        raise(Status::Format, "tokenizer.json: an added token has no valid id and content");
      added.push_back({c->as_string(), id->as_int(), s && s->is_bool() && s->as_bool()});
      n = std::max(n, id->as_int() + 1);
    }
  }
  if (n_vocab_min > n) n = n_vocab_min;
  if (n == 0) raise(Status::Format, "tokenizer.json: the vocabulary is empty");
  tokens.assign(static_cast<size_t>(n), std::string());
  types.assign(static_cast<size_t>(n), static_cast<int32_t>(TokenType::Undefined));
  std::vector<uint8_t> filled(static_cast<size_t>(n), 0);
  for (const auto& [tok, id] : vocab.members()) {
    const size_t i = static_cast<size_t>(id.as_int());
    if (filled[i]) raise(Status::Format, "tokenizer.json: id %zu is given to two vocabulary entries", i);
    filled[i] = 1;
    tokens[i] = tok;
    types[i] = static_cast<int32_t>(TokenType::Normal);
    if (byte_tokens && tok.size() == 6 && tok.compare(0, 3, "<0x") == 0 && tok[5] == '>')
      types[i] = static_cast<int32_t>(TokenType::Byte);
  }
  for (const Added& a : added) {
    const size_t i = static_cast<size_t>(a.id);
    if (filled[i] && tokens[i] != a.content)
      raise(Status::Format, "tokenizer.json: added token '%s' takes id %zu of '%s'", a.content.substr(0, 40).c_str(), i,
            tokens[i].substr(0, 40).c_str());
    filled[i] = 1;
    tokens[i] = a.content;
    types[i] = static_cast<int32_t>(a.special ? TokenType::Control : TokenType::UserDefined);
  }
  for (size_t i = 0; i < tokens.size(); ++i)
    if (!filled[i]) {
      tokens[i] = "[PAD" + std::to_string(i) + "]";
      types[i] = static_cast<int32_t>(TokenType::Unused);
    }
}

Meta tokenizer_metadata(std::string_view tokenizer_json, std::string_view tokenizer_config_json,
                        std::string_view config_json, int64_t n_vocab_min) {
  const Json tj = Json::parse(tokenizer_json, "tokenizer.json");
  if (!tj.is_object()) raise(Status::Format, "tokenizer.json is not a JSON object");
  Json tc;
  if (!tokenizer_config_json.empty()) {
    tc = Json::parse(tokenizer_config_json, "tokenizer_config.json");
    if (!tc.is_object()) raise(Status::Format, "tokenizer_config.json is not a JSON object");
  }
  Json cfg;
  if (!config_json.empty()) cfg = Json::parse(config_json, "config.json");

  const Json* model = tj.find("model");
  if (!model || !model->is_object()) raise(Status::Format, "tokenizer.json has no model object");
  const Json* mtype = model->find("type");
  const std::string type = mtype && mtype->is_string() ? mtype->as_string() : "BPE";
  if (type == "WordPiece") return wordpiece_metadata(tj, tc, cfg, n_vocab_min);
  if (type != "BPE")
    raise(Status::Unsupported, "tokenizer.json: model type '%s' is not supported (BPE, WordPiece)", type.c_str());
  const Json* vocab = model->find("vocab");
  if (!vocab || !vocab->is_object()) raise(Status::Format, "tokenizer.json: model.vocab is not an object");
  const Json* bf = model->find("byte_fallback");
  const bool byte_fallback = bf && bf->is_bool() && bf->as_bool();

  // Pre-tokenizer and normalizer.
  std::vector<std::string> steps;
  bool bytelevel = false, metaspace = false;
  if (const Json* p = tj.find("pre_tokenizer")) pre_steps(*p, steps, bytelevel, metaspace);
  if (const Json* d = tj.find("decoder"); d && d->is_object())
    if (const Json* t = d->find("type"); t && t->is_string() && t->as_string() == "ByteLevel") bytelevel = true;
  const bool spm = byte_fallback || (!bytelevel && (metaspace || steps.empty()));
  if (spm && bytelevel) raise(Status::Unsupported, "tokenizer.json mixes byte fallback and a ByteLevel pre-tokenizer");
  bool prepend = false, nfc = false;
  std::function<void(const Json&)> walk_norm = [&](const Json& n) {
    if (!n.is_object()) return;
    const Json* t = n.find("type");
    if (!t || !t->is_string()) return;
    if (t->as_string() == "Sequence") {
      if (const Json* l = n.find("normalizers"); l && l->is_array())
        for (const Json& x : l->items()) walk_norm(x);
    } else if (t->as_string() == "Prepend") {
      prepend = true;
    } else if (t->as_string() == "NFC") {
      nfc = true;
    } else if (t->as_string() == "Replace" || t->as_string() == "NFKC" || t->as_string() == "Strip" ||
               t->as_string() == "Lowercase" || t->as_string() == "NFD" || t->as_string() == "NFKD") {
      // Replace(" ", "▁") is the SentencePiece whitespace rule our SPM tokenizer applies.
      if (t->as_string() != "Replace")
        raise(Status::Unsupported, "tokenizer.json: normalizer '%s' is not supported", t->as_string().c_str());
    } else {
      raise(Status::Unsupported, "tokenizer.json: normalizer '%s' is not supported", t->as_string().c_str());
    }
  };
  if (const Json* n = tj.find("normalizer")) walk_norm(*n);
  if (metaspace) {
    std::function<bool(const Json&)> find_meta = [&](const Json& p) -> bool {
      const Json* t = p.find("type");
      if (t && t->is_string() && t->as_string() == "Metaspace") {
        const Json* ps = p.find("prepend_scheme");
        const Json* aps = p.find("add_prefix_space");
        if (ps && ps->is_string()) return ps->as_string() != "never";
        return !aps || !aps->is_bool() || aps->as_bool();
      }
      if (const Json* l = p.find("pretokenizers"); l && l->is_array())
        for (const Json& x : l->items())
          if (find_meta(x)) return true;
      return false;
    };
    prepend = prepend || find_meta(*tj.find("pre_tokenizer"));
  }

  // Tokens: the model's vocabulary, then added tokens at their ids.
  std::vector<std::string> tokens;
  std::vector<int32_t> types;
  read_tokenizer_vocab(tj, *vocab, n_vocab_min, spm, tokens, types);
  std::unordered_map<std::string, int32_t> index;
  index.reserve(tokens.size());
  for (size_t i = 0; i < tokens.size(); ++i) index.emplace(tokens[i], static_cast<int32_t>(i));
  if (const Json* unk = model->find("unk_token"); unk && unk->is_string())
    if (auto it = index.find(unk->as_string()); it != index.end() && types[it->second] == (int32_t)TokenType::Normal)
      types[it->second] = static_cast<int32_t>(TokenType::Unknown);

  // Merges: "a b" strings or [a, b] pairs.
  std::vector<std::string> merges;
  if (const Json* mg = model->find("merges"); mg && !mg->is_null()) {
    if (!mg->is_array()) raise(Status::Format, "tokenizer.json: model.merges is not an array");
    merges.reserve(mg->items().size());
    for (const Json& x : mg->items()) {
      if (x.is_string()) {
        if (x.as_string().find(' ') == std::string::npos)
          raise(Status::Format, "tokenizer.json: merge '%s' is not two tokens", x.as_string().substr(0, 40).c_str());
        merges.push_back(x.as_string());
      } else if (x.is_array() && x.items().size() == 2 && x.items()[0].is_string() && x.items()[1].is_string()) {
        merges.push_back(x.items()[0].as_string() + " " + x.items()[1].as_string());
      } else {
        raise(Status::Format, "tokenizer.json: a merge is neither \"a b\" nor [a, b]");
      }
    }
  }

  Meta m;
  m.emplace_back("tokenizer.ggml.model", GgufValue::make_string(spm ? "llama" : "gpt2"));
  std::string pre;
  if (!spm) {
    pre = match_family(steps);
    PreTokenizerInfo info;
    PreTokenizer::lookup(pre, &info);
    if (nfc != (info.normalization == Normalization::NFC)) {
      // The family decides the normalization; a mismatch means another family.
      if (pre == "gpt-2" && nfc) pre = "mpt";
      else if (pre == "starcoder" && nfc) pre = "command-r";
      else
        raise(Status::Unsupported, "tokenizer.json: pre-tokenizer '%s' %s NFC normalization here; not supported",
              pre.c_str(), nfc ? "with" : "without");
    }
    m.emplace_back("tokenizer.ggml.pre", GgufValue::make_string(pre));
  }
  m.emplace_back("tokenizer.ggml.tokens", GgufValue::make_string_array(tokens));
  m.emplace_back("tokenizer.ggml.token_type", GgufValue::make_i32_array(types));
  if (spm) {
    // Piece scores from merge ranks (see the file comment).
    std::vector<float> scores(tokens.size(), 0.0f);
    std::vector<uint8_t> has(tokens.size(), 0);
    const float floor_score = -static_cast<float>(merges.size()) - 1.0f;
    for (size_t r = 0; r < merges.size(); ++r) {
      const size_t sp = merges[r].find(' ');
      const std::string joined = merges[r].substr(0, sp) + merges[r].substr(sp + 1);
      auto it = index.find(joined);
      if (it == index.end()) continue;
      if (!has[it->second]) {
        has[it->second] = 1;
        scores[it->second] = -static_cast<float>(r);
      }
    }
    for (size_t i = 0; i < tokens.size(); ++i)
      if (!has[i]) scores[i] = types[i] == static_cast<int32_t>(TokenType::Normal) ? floor_score - static_cast<float>(i) : 0.0f;
    m.emplace_back("tokenizer.ggml.scores", GgufValue::make_f32_array(scores));
    m.emplace_back("tokenizer.ggml.add_space_prefix", GgufValue::make_bool(prepend));
  } else {
    m.emplace_back("tokenizer.ggml.merges", GgufValue::make_string_array(merges));
  }

  // Special tokens: tokenizer_config.json names them; config.json has ids.
  auto id_of = [&](const std::string& s) -> int64_t {
    if (s.empty()) return -1;
    auto it = index.find(s);
    return it == index.end() ? -1 : it->second;
  };
  auto cfg_id = [&](const char* key) -> int64_t {
    const Json* v = cfg.find(key);
    if (v && v->is_array() && !v->items().empty()) v = &v->items()[0];
    return v && v->is_int() && v->as_int() >= 0 && v->as_int() < static_cast<int64_t>(tokens.size()) ? v->as_int() : -1;
  };
  auto special = [&](const char* tc_key, const char* cfg_key, const char* gguf_key) {
    int64_t id = id_of(token_content(tc.find(tc_key)));
    if (id < 0 && cfg_key) id = cfg_id(cfg_key);
    if (id >= 0) m.emplace_back(gguf_key, GgufValue::make_u32(static_cast<uint32_t>(id)));
    return id;
  };
  const int64_t bos = special("bos_token", "bos_token_id", "tokenizer.ggml.bos_token_id");
  special("eos_token", "eos_token_id", "tokenizer.ggml.eos_token_id");
  special("unk_token", nullptr, "tokenizer.ggml.unknown_token_id");
  special("pad_token", "pad_token_id", "tokenizer.ggml.padding_token_id");
  // Whether BOS is added: tokenizer_config's add_bos_token, else the post-processor's template.
  bool add_bos = spm;
  bool known = false;
  if (const Json* v = tc.find("add_bos_token"); v && v->is_bool()) {
    add_bos = v->as_bool();
    known = true;
  }
  if (!known) {
    if (const Json* pp = tj.find("post_processor"); pp && pp->is_object()) {
      std::function<const Json*(const Json&)> find_tp = [&](const Json& p) -> const Json* {
        const Json* t = p.find("type");
        if (t && t->is_string() && t->as_string() == "TemplateProcessing") return &p;
        if (const Json* l = p.find("processors"); l && l->is_array())
          for (const Json& x : l->items())
            if (const Json* r = find_tp(x)) return r;
        return nullptr;
      };
      if (const Json* tp = find_tp(*pp)) {
        const Json* single = tp->find("single");
        add_bos = single && single->is_array() && !single->items().empty() && single->items()[0].find("SpecialToken");
      } else {
        add_bos = false;
      }
    }
  }
  m.emplace_back("tokenizer.ggml.add_bos_token", GgufValue::make_bool(add_bos && bos >= 0));
  if (const Json* v = tc.find("add_eos_token"); v && v->is_bool())
    m.emplace_back("tokenizer.ggml.add_eos_token", GgufValue::make_bool(v->as_bool()));
  // The chat template: a string, or a list of {name, template} (the "default" one).
  if (const Json* ct = tc.find("chat_template"); ct) {
    if (ct->is_string()) {
      m.emplace_back("tokenizer.chat_template", GgufValue::make_string(ct->as_string()));
    } else if (ct->is_array()) {
      for (const Json& x : ct->items()) {
        const Json* nm = x.find("name");
        const Json* t = x.find("template");
        if (nm && nm->is_string() && t && t->is_string()) {
          if (nm->as_string() == "default") m.emplace_back("tokenizer.chat_template", GgufValue::make_string(t->as_string()));
          else m.emplace_back("tokenizer.chat_template." + nm->as_string(), GgufValue::make_string(t->as_string()));
        }
      }
    }
  }
  return m;
}

}  // namespace hf
}  // namespace infer
