#include "cli.h"

namespace cli {
namespace {

// ---- info ----

const FlagTable kInfoFlags = kModelFlags + FlagTable{
    {"--all", nullptr, nullptr, "also every metadata key and its value (long arrays shortened)"},
    {"--json", nullptr, nullptr, "one JSON object on stdout"},
};

// Every metadata key with its value as infer_model_meta renders it.
std::vector<std::pair<std::string, std::string>> all_metadata(infer_model* m) {
  std::vector<std::pair<std::string, std::string>> out;
  const int32_t n = infer_model_meta_count(m);
  for (int32_t i = 0; i < n; ++i) {
    size_t need = 0;
    infer_model_meta_key(m, i, nullptr, 0, &need);
    std::string key(need, '\0');
    check(infer_model_meta_key(m, i, key.data(), key.size(), &need), "reading metadata keys");
    key.resize(need ? need - 1 : 0);
    infer_model_meta(m, key.c_str(), nullptr, 0, &need);
    std::string v(need, '\0');
    check(infer_model_meta(m, key.c_str(), v.data(), v.size(), &need), "reading metadata");
    v.resize(need ? need - 1 : 0);
    out.emplace_back(key, v);
  }
  return out;
}

// The architecture's particulars, from the file's metadata and tensor names
// (what the library's architecture files read: lib/model/*.cpp).
struct Particulars {
  std::string rope, window, softcap, extras;
};

Particulars particulars(const std::string& arch, const std::map<std::string, std::string>& meta,
                        const std::map<std::string, int>& tensors) {
  auto get = [&](const std::string& k) -> std::string {
    auto it = meta.find(arch + "." + k);
    return it == meta.end() ? "" : it->second;
  };
  auto has = [&](const std::string& t) { return tensors.count(t) > 0; };
  Particulars p;
  const auto neox_key = meta.find("infer.rope.neox");
  const bool neox = neox_key != meta.end() ? neox_key->second == "true" : !(arch == "llama" || arch == "mistral");
  p.rope = neox ? "rotate-half (neox)" : "interleaved";
  const bool encoder = arch == "bert" || arch == "nomic-bert";
  if (arch == "bert") p.rope = "none (absolute position table)";
  const std::string type = get("rope.scaling.type");
  if (has("rope_freqs.weight")) {
    p.rope += ", llama3 scaling (rope_freqs)";
  } else if (type == "llama3" || type == "linear") {
    p.rope += ", " + type + " scaling x" + get("rope.scaling.factor");
  }
  if (has("rope_factors_long.weight")) {
    p.rope += ", long-rope factors (original context " + get("rope.scaling.original_context_length") + ")";
  }
  const std::string w = get("attention.sliding_window");
  if (arch == "gemma2") {
    p.window = (w.empty() ? std::string("4096") : w) + " on even layers, full attention on odd layers";
  } else {
    p.window = w.empty() ? "none (full attention)" : w + " on every layer";
  }
  const std::string ac = get("attn_logit_softcapping"), fc = get("final_logit_softcapping");
  if (arch == "gemma2") p.softcap = "attention " + (ac.empty() ? "50" : ac) + ", logits " + (fc.empty() ? "30" : fc);
  auto add = [&](const std::string& x) { p.extras += (p.extras.empty() ? "" : ", ") + x; };
  if (has("blk.0.attn_q.bias")) add("q/k/v biases");
  if (has("blk.0.attn_q_norm.weight")) add("q/k per-head rmsnorm");
  if (has("blk.0.attn_qkv.weight")) add("fused qkv");
  if (arch == "phi3" && !has("blk.0.ffn_gate.weight")) add("fused gate+up");
  if (has("blk.0.post_ffw_norm.weight")) add("post-attention and post-ffn norms");
  if (arch == "gemma" || arch == "gemma2") add("gelu-tanh gating, embeddings x sqrt(n_embd)");
  if (!get("expert_count").empty()) add("experts " + get("expert_used_count") + " of " + get("expert_count"));
  if (!has("output.weight") && !encoder) add("tied embeddings");
  if (encoder) add("encoder: both-way attention, post-LN (LayerNorm eps " + get("attention.layer_norm_epsilon") + ")");
  static const char* const kPooling[] = {"none", "mean", "cls", "last", "rank"};
  const std::string pt = get("pooling_type");
  if (pt.size() == 1 && pt[0] >= '0' && pt[0] <= '4') add(std::string("pooling ") + kPooling[pt[0] - '0']);
  if (has("cls.output.weight")) add("reranker head (cls.output)");
  return p;
}

int cmd_info(int argc, char** argv) {
  Args a(argc, argv, 2, kInfoFlags);
  a.no_positionals();
  Model model(model_path(a), backend_flag(a));
  infer_model_info in;
  infer_model_info_init(&in);
  check(infer_model_get_info(model.m, &in), "reading model info");
  std::map<std::string, int> types, names;
  const int32_t nt = infer_model_tensor_count(model.m);
  for (int32_t i = 0; i < nt; ++i) {
    infer_tensor_info ti;
    std::memset(&ti, 0, sizeof ti);
    ti.struct_size = sizeof ti;
    check(infer_model_tensor(model.m, i, &ti), "reading tensor info");
    types[ti.type]++;
    names[ti.name] = 1;
  }
  std::map<std::string, std::string> meta;
  for (auto& [k, v] : all_metadata(model.m))
    if (v.size() < 256) meta[k] = v;
  const Particulars part = particulars(in.architecture, meta, names);
  std::string meta_json;
  if (a.flag("--all") && a.flag("--json")) {
    meta_json = ", \"metadata\": {";
    bool first = true;
    for (const auto& [k, v] : all_metadata(model.m)) {
      meta_json += std::string(first ? "" : ", ") + "\"" + json_escape(k) + "\": \"" + json_escape(v) + "\"";
      first = false;
    }
    meta_json += "}";
  }
  if (a.flag("--json")) {
    std::string t;
    for (auto& [k, v] : types) t += (t.empty() ? "" : ", ") + std::string("\"") + k + "\": " + std::to_string(v);
    std::printf("{\"architecture\": \"%s\", \"name\": \"%s\", \"n_vocab\": %d, \"n_ctx_train\": %d, \"n_embd\": %d, "
                "\"n_layer\": %d, \"n_head\": %d, \"n_head_kv\": %d, \"n_ff\": %d, \"n_rot\": %d, \"rope_freq_base\": %s, "
                "\"rms_norm_eps\": %s, \"n_params\": %llu, \"n_bytes\": %llu, \"n_tensors\": %d, \"tensor_types\": {%s}, "
                "\"tokenizer\": \"%s\", \"bos_token\": %d, \"eos_token\": %d, \"rope\": \"%s\", "
                "\"sliding_window\": \"%s\", \"softcap\": \"%s\", \"particulars\": \"%s\"%s}\n",
                json_escape(in.architecture).c_str(), json_escape(in.name).c_str(), in.n_vocab, in.n_ctx_train,
                in.n_embd, in.n_layer, in.n_head, in.n_head_kv, in.n_ff, in.n_rot, num(in.rope_freq_base).c_str(),
                num(in.rms_norm_eps).c_str(), (unsigned long long)in.n_params, (unsigned long long)in.n_bytes,
                in.n_tensors, t.c_str(), json_escape(in.tokenizer).c_str(), in.bos_token, in.eos_token,
                json_escape(part.rope).c_str(), json_escape(part.window).c_str(), json_escape(part.softcap).c_str(),
                json_escape(part.extras).c_str(), meta_json.c_str());
  } else {
    std::printf("architecture:   %s\nname:           %s\nparameters:     %llu (%.2f MiB in %d tensors)\n",
                in.architecture, in.name, (unsigned long long)in.n_params, in.n_bytes / 1048576.0, in.n_tensors);
    std::printf("shape:          n_embd %d, n_layer %d, n_head %d, n_head_kv %d, n_ff %d, n_rot %d\n", in.n_embd,
                in.n_layer, in.n_head, in.n_head_kv, in.n_ff, in.n_rot);
    std::printf("context length: %d\nrope base:      %g\nrms eps:        %g\n", in.n_ctx_train, in.rope_freq_base,
                in.rms_norm_eps);
    std::printf("rope:           %s\nsliding window: %s\n", part.rope.c_str(), part.window.c_str());
    if (!part.softcap.empty()) std::printf("soft-capping:   %s\n", part.softcap.c_str());
    if (!part.extras.empty()) std::printf("particulars:    %s\n", part.extras.c_str());
    std::printf("tokenizer:      %s, %d tokens, bos %d, eos %d\ntensor types:  ", in.tokenizer, in.n_vocab,
                in.bos_token, in.eos_token);
    for (auto& [k, v] : types) std::printf(" %s x%d", k.c_str(), v);
    std::printf("\n");
    if (a.flag("--all")) {
      std::printf("metadata:\n");
      for (const auto& [k, v] : all_metadata(model.m)) {
        std::string shown = v.size() > 200 ? v.substr(0, 200) + "... (" + std::to_string(v.size()) + " bytes)" : v;
        for (char& c : shown)
          if (c == '\n') c = ' ';
        std::printf("  %-40s %s\n", k.c_str(), shown.c_str());
      }
    }
  }
  return 0;
}


// ---- tokenize ----

const FlagTable kTokenizeFlags = kModelFlags + FlagTable{
    {"-p, --prompt", "TEXT", nullptr, "the text to tokenize"},
    {"-f, --file", "FILE", nullptr, "read the text from FILE"},
    {"--no-bos", nullptr, nullptr, "do not add the BOS token"},
    {"--special", nullptr, nullptr, "parse special-token text such as <s>"},
    {"--show-text", nullptr, nullptr, "one token per line: its id and the text it stands for"},
};

// The bytes of one token, printable: control characters and invalid UTF-8
// escaped.
std::string piece_text(infer_model* m, int32_t id) {
  char buf[256];
  size_t n = 0;
  if (infer_token_piece(m, id, buf, sizeof buf, &n) != INFER_OK) return "?";
  std::string out;
  for (size_t i = 0; i < n; ++i) {
    const unsigned char c = static_cast<unsigned char>(buf[i]);
    if (c == '\n') out += "\\n";
    else if (c == '\t') out += "\\t";
    else if (c == '\\') out += "\\\\";
    else if (c < 0x20 || c == 0x7f) {
      char e[8];
      std::snprintf(e, sizeof e, "\\x%02x", c);
      out += e;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out;
}

int cmd_tokenize(int argc, char** argv) {
  Args a(argc, argv, 2, kTokenizeFlags);
  a.no_positionals();
  const bool has_p = a.has("--prompt"), has_f = a.has("--file");
  if (has_p == has_f) throw UsageError{"give exactly one of -p TEXT and -f FILE"};
  const std::string text = has_f ? read_file(a.get("--file")) : a.get("--prompt");
  Model model(model_path(a), backend_flag(a), /*vocab_only=*/true);
  const int32_t add_bos = a.flag("--no-bos") ? 0 : -1;
  const int32_t special = a.flag("--special") ? 1 : 0;
  size_t n = 0;
  std::vector<int32_t> ids(text.size() + 8);
  infer_status st = infer_tokenize(model.m, text.data(), text.size(), add_bos, special, ids.data(), ids.size(), &n);
  if (st == INFER_ERR_BUFFER_TOO_SMALL) {
    ids.resize(n);
    st = infer_tokenize(model.m, text.data(), text.size(), add_bos, special, ids.data(), ids.size(), &n);
  }
  check(st, "tokenizing");
  if (a.flag("--show-text")) {
    for (size_t i = 0; i < n; ++i) std::printf("%6d  '%s'\n", ids[i], piece_text(model.m, ids[i]).c_str());
    return 0;
  }
  std::string out;
  for (size_t i = 0; i < n; ++i) {
    if (i) out += ' ';
    out += std::to_string(ids[i]);
  }
  std::printf("%s\n", out.c_str());
  return 0;
}

// ---- detokenize ----

const FlagTable kDetokenizeFlags = kModelFlags + FlagTable{
    {"-f, --file", "FILE", nullptr, "read the token ids from FILE"},
    {"--special", nullptr, nullptr, "write control tokens such as <s> too"},
};

int cmd_detokenize(int argc, char** argv) {
  Args a(argc, argv, 2, kDetokenizeFlags);
  std::string words;
  for (const std::string& p : a.positionals()) words += p + " ";
  if (a.has("--file")) words += read_file(a.get("--file"));
  std::vector<int32_t> ids;
  {
    std::istringstream in(words);
    std::string w;
    while (in >> w) {
      // Accept "1 2 3", "1,2,3" and "[1, 2, 3]".
      std::string clean;
      for (char c : w) clean += (c == ',' || c == '[' || c == ']') ? ' ' : c;
      std::istringstream parts(clean);
      std::string p;
      while (parts >> p) {
        char* end = nullptr;
        errno = 0;
        const long v = std::strtol(p.c_str(), &end, 10);
        if (*end || errno || v < INT32_MIN || v > INT32_MAX) throw UsageError{"'" + p + "' is not a token id"};
        ids.push_back(static_cast<int32_t>(v));
      }
    }
  }
  if (ids.empty()) throw UsageError{"give token ids as arguments or with -f FILE"};
  Model model(model_path(a), backend_flag(a), /*vocab_only=*/true);
  size_t need = 0;
  const int32_t special = a.flag("--special") ? 1 : 0;
  infer_status st = infer_detokenize(model.m, ids.data(), ids.size(), special, nullptr, 0, &need);
  if (st != INFER_ERR_BUFFER_TOO_SMALL) check(st, "detokenizing");
  std::string text(need, '\0');
  check(infer_detokenize(model.m, ids.data(), ids.size(), special, text.data(), text.size(), &need), "detokenizing");
  text.resize(need ? need - 1 : 0);
  std::printf("%s\n", text.c_str());
  return 0;
}

const Register kInfo{{"info", "describe a model", "infer info [-m MODEL] [--all] [--json]", &kInfoFlags, nullptr, cmd_info}};
const Register kTokenize{{"tokenize", "text to token ids", "infer tokenize [-m MODEL] (-p TEXT | -f FILE) [options]",
                          &kTokenizeFlags, nullptr, cmd_tokenize}};
const Register kDetokenize{{"detokenize", "token ids to text", "infer detokenize [-m MODEL] (ID... | -f FILE) [--special]",
                            &kDetokenizeFlags, "IDs may be separated by spaces or commas (the output of infer tokenize).",
                            cmd_detokenize}};
}  // namespace
}  // namespace cli
