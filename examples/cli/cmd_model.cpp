#include "cli.h"

namespace cli {
namespace {

// ---- info ----

int cmd_info(int argc, char** argv) {
  Args a(argc, argv, 2, {"-m", "--model", "--backend"}, {"--json"});
  if (!a.positionals().empty()) throw UsageError{"unexpected argument '" + a.positionals()[0] + "'"};
  infer_model_params mp;
  infer_model_params_init(&mp);
  Model model(model_path(a), backend_flag(a));
  infer_model_info in;
  infer_model_info_init(&in);
  check(infer_model_get_info(model.m, &in), "reading model info");
  std::map<std::string, int> types;
  const int32_t nt = infer_model_tensor_count(model.m);
  for (int32_t i = 0; i < nt; ++i) {
    infer_tensor_info ti;
    std::memset(&ti, 0, sizeof ti);
    ti.struct_size = sizeof ti;
    check(infer_model_tensor(model.m, i, &ti), "reading tensor info");
    types[ti.type]++;
  }
  if (a.flag("--json")) {
    std::string t;
    for (auto& [k, v] : types) t += (t.empty() ? "" : ", ") + std::string("\"") + k + "\": " + std::to_string(v);
    std::printf("{\"architecture\": \"%s\", \"name\": \"%s\", \"n_vocab\": %d, \"n_ctx_train\": %d, \"n_embd\": %d, "
                "\"n_layer\": %d, \"n_head\": %d, \"n_head_kv\": %d, \"n_ff\": %d, \"n_rot\": %d, \"rope_freq_base\": %s, "
                "\"rms_norm_eps\": %s, \"n_params\": %llu, \"n_bytes\": %llu, \"n_tensors\": %d, \"tensor_types\": {%s}, "
                "\"tokenizer\": \"%s\", \"bos_token\": %d, \"eos_token\": %d}\n",
                json_escape(in.architecture).c_str(), json_escape(in.name).c_str(), in.n_vocab, in.n_ctx_train,
                in.n_embd, in.n_layer, in.n_head, in.n_head_kv, in.n_ff, in.n_rot, num(in.rope_freq_base).c_str(),
                num(in.rms_norm_eps).c_str(), (unsigned long long)in.n_params, (unsigned long long)in.n_bytes,
                in.n_tensors, t.c_str(), json_escape(in.tokenizer).c_str(), in.bos_token, in.eos_token);
  } else {
    std::printf("architecture:   %s\nname:           %s\nparameters:     %llu (%.2f MiB in %d tensors)\n",
                in.architecture, in.name, (unsigned long long)in.n_params, in.n_bytes / 1048576.0, in.n_tensors);
    std::printf("shape:          n_embd %d, n_layer %d, n_head %d, n_head_kv %d, n_ff %d, n_rot %d\n", in.n_embd,
                in.n_layer, in.n_head, in.n_head_kv, in.n_ff, in.n_rot);
    std::printf("context length: %d\nrope base:      %g\nrms eps:        %g\n", in.n_ctx_train, in.rope_freq_base,
                in.rms_norm_eps);
    std::printf("tokenizer:      %s, %d tokens, bos %d, eos %d\ntensor types:  ", in.tokenizer, in.n_vocab,
                in.bos_token, in.eos_token);
    for (auto& [k, v] : types) std::printf(" %s x%d", k.c_str(), v);
    std::printf("\n");
  }
  return 0;
}


// ---- tokenize ----

int cmd_tokenize(int argc, char** argv) {
  Args a(argc, argv, 2, {"-m", "--model", "--backend", "-p", "--prompt", "-f", "--file"}, {"--no-bos", "--special"});
  if (!a.positionals().empty()) throw UsageError{"unexpected argument '" + a.positionals()[0] + "'"};
  const bool has_p = a.has("-p") || a.has("--prompt"), has_f = a.has("-f") || a.has("--file");
  if (has_p == has_f) throw UsageError{"give exactly one of -p TEXT and -f FILE"};
  const std::string text = has_f ? read_file(a.get2("-f", "--file")) : a.get2("-p", "--prompt");
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
  std::string out;
  for (size_t i = 0; i < n; ++i) {
    if (i) out += ' ';
    out += std::to_string(ids[i]);
  }
  std::printf("%s\n", out.c_str());
  return 0;
}

const Register kInfo{{"info", "describe a model: -m MODEL [--json]", cmd_info}};
const Register kTokenize{{"tokenize", "print token ids: -m MODEL (-p TEXT | -f FILE) [--no-bos] [--special]", cmd_tokenize}};
}  // namespace
}  // namespace cli
