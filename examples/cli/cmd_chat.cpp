#include <unistd.h>

#include <algorithm>
#include <iostream>

#include "cli.h"

namespace cli {
namespace {

// ---- chat ----
//
// An interactive multi-turn chat: user lines come from stdin (a terminal or
// a pipe), replies stream to stdout. Every turn renders the whole
// conversation with the model's chat template and submits it to the same
// engine, so the prefix cache serves the part of the prompt that earlier
// turns already computed. Ends at EOF or "/exit".

// tmpl NULL: the model's own template (with the variations its text selects).
std::string render(infer_model* m, const char* tmpl, const std::vector<std::pair<std::string, std::string>>& msgs) {
  std::vector<infer_chat_message> cm;
  for (const auto& [role, content] : msgs) cm.push_back({role.c_str(), content.c_str()});
  size_t need = 0;
  infer_status st = infer_chat_apply_template(m, tmpl, cm.data(), cm.size(), 1, nullptr, 0, &need);
  if (st != INFER_ERR_BUFFER_TOO_SMALL) check(st, "applying the chat template");
  std::string out(need, '\0');
  check(infer_chat_apply_template(m, tmpl, cm.data(), cm.size(), 1, out.data(), out.size(), &need),
        "applying the chat template");
  out.resize(need - 1);
  return out;
}

size_t count_tokens(infer_model* m, const std::string& text) {
  size_t n = 0;
  const infer_status st = infer_tokenize(m, text.data(), text.size(), 0, 1, nullptr, 0, &n);
  if (st != INFER_ERR_BUFFER_TOO_SMALL) check(st, "tokenizing");
  return n;
}

const FlagTable kChatFlags = kModelFlags + FlagTable{
    {"--template", "NAME", "the model's own, else chatml",
     "chat template: a built-in name (see the list below), or jinja for the model's own without the built-in fallback"},
    {"--chat-template-file", "FILE", nullptr, "a Jinja chat template to use instead of the model's (as serve's)"},
    {"--system", "TEXT", nullptr, "system prompt"},
    {"-n, --n-predict", "N", "256", "most tokens per reply"},
} + kSamplingFlags + kCtxFlags + kThreadFlags + kKvFlags + kSpecFlags + kTpFlags + FlagTable{
    {"--show-prompt", nullptr, nullptr, "print each rendered prompt to stderr"},
    {"--stats", nullptr, nullptr, "print each turn's token counts and speed to stderr"},
    {"--quiet", nullptr, nullptr, "do not print the replies"},
};

std::string template_names() {
  std::string out;
  for (int32_t i = 0; i < infer_chat_template_count(); ++i) out += std::string(i ? ", " : "") + infer_chat_template_name(i);
  return out;
}

bool known_template(const std::string& name) {
  if (name == "jinja") return true;  // the model's own template, rendered by the interpreter
  for (int32_t i = 0; i < infer_chat_template_count(); ++i)
    if (name == infer_chat_template_name(i)) return true;
  return false;
}

int cmd_chat(int argc, char** argv) {
  Args a(argc, argv, 2, kChatFlags);
  a.no_positionals();
  std::string tmpl = a.get("--template");
  if (a.has("--template") && !known_template(tmpl))
    throw UsageError{"unknown chat template '" + tmpl + "'; the templates are: " + template_names()};
  std::string jinja_file_text;
  if (a.has("--chat-template-file")) {
    if (a.has("--template")) throw UsageError{"give either --template or --chat-template-file, not both"};
    jinja_file_text = read_file(a.get("--chat-template-file"));
    if (jinja_file_text.find("{{") == std::string::npos && jinja_file_text.find("{%") == std::string::npos)
      throw UsageError{"--chat-template-file " + a.get("--chat-template-file") + " is not a Jinja template (no {{ or {%)"};
  }
  infer_sampling_params sp = sampling_flags(a);
  const int32_t n_predict = static_cast<int32_t>(a.get_int("-n", "--n-predict", 256, 1, 1 << 24));
  infer_engine_params ep;
  infer_engine_params_init(&ep);
  ep.n_threads = static_cast<int32_t>(a.get_int("--threads", 0, 0, 1024));
  ep.max_seqs = 1;
  ep.n_ctx = static_cast<int32_t>(a.get_int("--ctx-size", 0, 0, 1 << 24));
  apply_kv_flags(a, ep);
  std::string spec_layers;
  DraftModel draft;
  apply_spec_flags(a, ep, spec_layers);
  const int32_t tp = apply_tp_flags(a, ep);
  Model model(model_path(a), backend_flag(a), false, tp);
  if (tp_follow(model.m, ep)) return 0;  // ranks 1..N-1 of --tp
  load_draft(a, ep, draft);              // rank 0 alone runs a draft model

  // The template: a Jinja file, else given by name, else the model's own,
  // else chatml (with a notice).
  std::vector<std::string> stops;
  if (!jinja_file_text.empty()) {
    tmpl = jinja_file_text;
    // A template that cannot render a plain exchange is refused now, not at
    // the first turn.
    std::vector<std::pair<std::string, std::string>> trial = {{"system", "s"}, {"user", "u"}, {"assistant", "a"},
                                                              {"user", "u"}};
    try {
      (void)render(model.m, tmpl.c_str(), trial);
    } catch (const ApiError& e) {
      throw UsageError{"--chat-template-file " + a.get("--chat-template-file") + " does not render: " + e.msg};
    }
    // Its stop texts: those of the built-in templates that it writes.
    for (int32_t t = 0; t < infer_chat_template_count(); ++t)
      for (int32_t i = 0; const char* st = infer_chat_template_stop(infer_chat_template_name(t), i); ++i)
        if (tmpl.find(st) != std::string::npos && std::find(stops.begin(), stops.end(), st) == stops.end())
          stops.emplace_back(st);
  }
  bool own_template = tmpl.empty();
  if (own_template) {
    size_t need = 0;
    infer_status st = infer_chat_template_detect(model.m, nullptr, 0, &need);
    if (st == INFER_ERR_NOT_FOUND || st == INFER_ERR_UNSUPPORTED) {
      std::fprintf(stderr, "note: %s; using the chatml template (choose another with --template NAME: %s)\n",
                   st == INFER_ERR_NOT_FOUND ? "the model has no chat template" : "the model's chat template is not one libinfer knows",
                   template_names().c_str());
      tmpl = "chatml";
      own_template = false;
    } else {
      if (st != INFER_ERR_BUFFER_TOO_SMALL) check(st, "detecting the chat template");
      tmpl.assign(need, '\0');
      check(infer_chat_template_detect(model.m, tmpl.data(), tmpl.size(), &need), "detecting the chat template");
      tmpl.resize(need - 1);
    }
  }
  if (jinja_file_text.empty())
    for (int32_t i = 0; const char* s = infer_chat_template_stop(tmpl.c_str(), i); ++i) stops.emplace_back(s);
  std::vector<const char*> stop_ptrs;
  for (const auto& s : stops) stop_ptrs.push_back(s.c_str());

  // One engine for the whole conversation.
  Engine engine(model.m, ep);
  infer_model_info info;
  infer_model_info_init(&info);
  check(infer_model_get_info(model.m, &info), "reading model info");
  const size_t n_ctx = static_cast<size_t>(ep.n_ctx > 0 ? ep.n_ctx : info.n_ctx_train);
  warn_context_over_trained("chat", ep.n_ctx, info);

  const bool interactive = isatty(STDIN_FILENO) != 0;
  const bool quiet = a.flag("--quiet");
  std::fprintf(stderr, "chat template: %s%s\n", jinja_file_text.empty() ? tmpl.c_str() : a.get("--chat-template-file").c_str(),
               interactive ? " (type /exit or Ctrl-D to quit)" : "");

  std::vector<std::pair<std::string, std::string>> msgs;
  if (a.has("--system")) msgs.emplace_back("system", a.get("--system"));
  std::string line;
  for (int turn = 1;; ++turn) {
    if (interactive) {
      std::fputs("> ", stderr);
      std::fflush(stderr);
    }
    if (!std::getline(std::cin, line)) break;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line == "/exit" || line == "/quit") break;
    if (line.empty()) {
      --turn;
      continue;
    }
    msgs.emplace_back("user", line);

    // Drop the oldest exchanges while the prompt and the reply would not fit.
    const char* tmpl_arg = own_template ? nullptr : tmpl.c_str();
    std::string prompt = render(model.m, tmpl_arg, msgs);
    const size_t first = msgs.front().first == "system" ? 1 : 0;
    while (count_tokens(model.m, prompt) + static_cast<size_t>(n_predict) > n_ctx && msgs.size() - first > 1) {
      msgs.erase(msgs.begin() + static_cast<long>(first));
      if (msgs.size() - first > 1 && msgs[first].first == "assistant") msgs.erase(msgs.begin() + static_cast<long>(first));
      prompt = render(model.m, tmpl_arg, msgs);
    }
    if (a.flag("--show-prompt")) std::fprintf(stderr, "[prompt]\n%s\n[/prompt]\n", prompt.c_str());

    infer_request_params rp;
    infer_request_params_init(&rp);
    rp.prompt = prompt.c_str();
    rp.prompt_len = prompt.size();
    rp.add_bos = 0;        // the template writes BOS where the model wants it
    rp.parse_special = 1;  // its markers are special tokens
    rp.max_tokens = n_predict;
    rp.sampling = &sp;
    rp.stop = stop_ptrs.empty() ? nullptr : stop_ptrs.data();
    rp.n_stop = stop_ptrs.size();
    rp.on_token = print_token;
    rp.user_data = const_cast<bool*>(&quiet);
    infer_request* req = nullptr;
    check(infer_submit(engine.e, &rp, &req), "submitting the turn");
    const infer_status st = infer_engine_run(engine.e);
    if (st != INFER_OK) {
      infer_request_free(req);
      check(st, "generating");
    }
    infer_request_stats s;
    infer_request_stats_init(&s);
    infer_request_get_stats(req, &s);
    if (s.finish_reason == INFER_FINISH_ERROR) {
      const std::string msg = infer_request_error(req);
      infer_request_free(req);
      throw ApiError{"generation failed: " + msg};
    }
    size_t need = 0;
    infer_request_text(req, nullptr, 0, &need);
    std::string reply(need, '\0');
    check(infer_request_text(req, reply.data(), reply.size(), &need), "reading the reply");
    reply.resize(need ? need - 1 : 0);
    infer_request_free(req);
    if (!quiet) {
      std::fputc('\n', stdout);
      std::fflush(stdout);
    }
    if (a.flag("--stats"))
      std::fprintf(stderr, "[turn %d: %d prompt tokens, %d from the prefix cache, %d generated, %.1f tok/s]\n", turn,
                   s.n_prompt_tokens, s.n_cached_tokens, s.n_generated_tokens, s.decode_tokens_per_s);
    msgs.emplace_back("assistant", reply);
  }
  return 0;
}

const Register kChat{{"chat", "chat with a model, one user line at a time from stdin",
                      "infer chat [-m MODEL] [--template NAME] [--system TEXT] [-n N] [sampling] [options]",
                      &kChatFlags,
                      "Reads user lines from stdin (a terminal or a pipe) until EOF or /exit; replies stream to stdout.\n"
                      "The oldest turns are dropped when the conversation outgrows the context.\n"
                      "Templates: llama2 llama3 llama3.1 chatml mistral-v0 mistral-v1 mistral-v3 mistral-v3-tekken\n"
                      "mistral-v7 phi3 gemma zephyr deepseek deepseek2 deepseek3",
                      cmd_chat}};
}  // namespace
}  // namespace cli
