// Chat templates: each family renders a three-turn conversation exactly as
// its published Jinja template does; detection from template texts; the C
// API (buffers, errors, model-based detection).
#include <cstring>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "gguf/gguf.h"
#include "infer/infer.h"
#include "test_util.h"
#include "tokenizer/chat.h"

using namespace infer;

namespace {

// The conversation every family renders: system, user, assistant (with
// spaces around it, which some templates trim), user.
const std::vector<ChatMessage> kConversation = {
    {"system", "You are a helpful assistant"},
    {"user", "Hello"},
    {"assistant", " Hi there "},
    {"user", "Who are you?"},
};

std::vector<ChatMessage> without_system() {
  return std::vector<ChatMessage>(kConversation.begin() + 1, kConversation.end());
}

const std::string kDsBegin = "<\xEF\xBD\x9C" "begin\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>";
const std::string kDsEnd = "<\xEF\xBD\x9C" "end\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>";
const std::string kDsUser = "<\xEF\xBD\x9CUser\xEF\xBD\x9C>";
const std::string kDsAssistant = "<\xEF\xBD\x9C" "Assistant\xEF\xBD\x9C>";

std::string render(const std::string& name, const std::vector<ChatMessage>& msgs, bool gen = true,
                   ChatSpecials sp = {"", ""}) {
  if (sp.bos.empty() && sp.eos.empty()) sp = chat_template_default_specials(name);
  return chat_render(chat_template_by_name(name), msgs, gen, sp);
}

Status status_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.status();
  }
  return Status::Ok;
}

std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return std::string();
}

}  // namespace

// Expected strings: what each family's published template (Hugging Face
// tokenizer_config.json chat_template, rendered by Jinja with trim_blocks and
// lstrip_blocks) produces for kConversation with add_generation_prompt.
TEST_CASE("chat: each family renders its published format", "[chat]") {
  SECTION("llama2") {
    // Meta's Llama-2-chat: system folded into the first user turn, every
    // turn stripped, BOS before each [INST] and EOS after each answer.
    CHECK(render("llama2", kConversation) ==
          "<s>[INST] <<SYS>>\nYou are a helpful assistant\n<</SYS>>\n\nHello [/INST] Hi there </s>"
          "<s>[INST] Who are you? [/INST]");
    CHECK(render("llama2", without_system()) ==
          "<s>[INST] Hello [/INST] Hi there </s><s>[INST] Who are you? [/INST]");
  }
  SECTION("llama3") {
    CHECK(render("llama3", kConversation) ==
          "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nYou are a helpful assistant<|eot_id|>"
          "<|start_header_id|>user<|end_header_id|>\n\nHello<|eot_id|>"
          "<|start_header_id|>assistant<|end_header_id|>\n\nHi there<|eot_id|>"
          "<|start_header_id|>user<|end_header_id|>\n\nWho are you?<|eot_id|>"
          "<|start_header_id|>assistant<|end_header_id|>\n\n");
    CHECK(render("llama3", kConversation, false).size() + std::strlen("<|start_header_id|>assistant<|end_header_id|>\n\n") ==
          render("llama3", kConversation).size());
  }
  SECTION("llama3.1") {
    CHECK(render("llama3.1", kConversation) ==
          "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n"
          "Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n"
          "You are a helpful assistant<|eot_id|>"
          "<|start_header_id|>user<|end_header_id|>\n\nHello<|eot_id|>"
          "<|start_header_id|>assistant<|end_header_id|>\n\nHi there<|eot_id|>"
          "<|start_header_id|>user<|end_header_id|>\n\nWho are you?<|eot_id|>"
          "<|start_header_id|>assistant<|end_header_id|>\n\n");
    // Without a system message the header is still there, empty.
    CHECK(render("llama3.1", {{"user", "Hi"}}) ==
          "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n"
          "Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n<|eot_id|>"
          "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
          "<|start_header_id|>assistant<|end_header_id|>\n\n");
  }
  SECTION("chatml / Qwen") {
    CHECK(render("chatml", kConversation) ==
          "<|im_start|>system\nYou are a helpful assistant<|im_end|>\n"
          "<|im_start|>user\nHello<|im_end|>\n"
          "<|im_start|>assistant\n Hi there <|im_end|>\n"
          "<|im_start|>user\nWho are you?<|im_end|>\n"
          "<|im_start|>assistant\n");
    // Qwen2's template opens with its default system prompt when there is
    // none; detection picks it out of the template text.
    const ChatTemplate qwen = chat_template_detect(
        "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
        "{{ '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}{% endif %}"
        "{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}"
        "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}");
    CHECK(qwen.name == "chatml");
    CHECK(qwen.default_system == "You are a helpful assistant.");
    CHECK(chat_render(qwen, without_system(), true, {}) ==
          "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
          "<|im_start|>user\nHello<|im_end|>\n"
          "<|im_start|>assistant\n Hi there <|im_end|>\n"
          "<|im_start|>user\nWho are you?<|im_end|>\n"
          "<|im_start|>assistant\n");
    CHECK(chat_render(qwen, kConversation, true, {}) == render("chatml", kConversation));
  }
  SECTION("mistral") {
    // v1 (Mistral 7B v0.1/v0.2 official): spaces around [INST], system in
    // the first user message, answers unmodified after a space.
    CHECK(render("mistral-v1", kConversation) ==
          "<s> [INST] You are a helpful assistant\n\nHello [/INST]  Hi there </s> [INST] Who are you? [/INST]");
    // v3 (7B v0.3, Mixtral, Large 2407): system prompt in the LAST user
    // message, answers trimmed.
    CHECK(render("mistral-v3", kConversation) ==
          "<s>[INST] Hello[/INST] Hi there</s>[INST] You are a helpful assistant\n\nWho are you?[/INST]");
    // v3-tekken (NeMo): no spaces, answers as they are.
    CHECK(render("mistral-v3-tekken", kConversation) ==
          "<s>[INST]Hello[/INST] Hi there </s>[INST]You are a helpful assistant\n\nWho are you?[/INST]");
    // v7 (Large 2411): a system prompt block of its own.
    CHECK(render("mistral-v7", kConversation) ==
          "<s>[SYSTEM_PROMPT] You are a helpful assistant[/SYSTEM_PROMPT][INST] Hello[/INST]  Hi there </s>"
          "[INST] Who are you?[/INST]");
    // The original v0.2 template: no system role.
    CHECK(render("mistral-v0", without_system()) ==
          "<s>[INST] Hello [/INST] Hi there </s>[INST] Who are you? [/INST]");
    CHECK(status_of([] { render("mistral-v0", kConversation); }) == Status::InvalidArgument);
  }
  SECTION("phi3") {
    CHECK(render("phi3", kConversation) ==
          "<s><|system|>\nYou are a helpful assistant<|end|>\n<|user|>\nHello<|end|>\n"
          "<|assistant|>\n Hi there <|end|>\n<|user|>\nWho are you?<|end|>\n<|assistant|>\n");
    // Phi-3.5: no BOS in the template, EOS when no reply is asked for.
    ChatTemplate phi35 = chat_template_detect(
        "{% for message in messages %}{% if message['role'] == 'system' and message['content'] %}"
        "{{'<|system|>\\n' + message['content'] + '<|end|>\\n'}}{% elif message['role'] == 'user' %}"
        "{{'<|user|>\\n' + message['content'] + '<|end|>\\n'}}{% elif message['role'] == 'assistant' %}"
        "{{'<|assistant|>\\n' + message['content'] + '<|end|>\\n'}}{% endif %}{% endfor %}"
        "{% if add_generation_prompt %}{{ '<|assistant|>\\n' }}{% else %}{{ eos_token }}{% endif %}");
    CHECK(phi35.name == "phi3");
    CHECK(!phi35.emit_bos);
    CHECK(chat_render(phi35, {{"user", "Hi"}}, false, {"<s>", "<|endoftext|>"}) ==
          "<|user|>\nHi<|end|>\n<|endoftext|>");
  }
  SECTION("gemma") {
    // Gemma 1/2 (no system role) and Gemma 3 agree without a system message.
    CHECK(render("gemma", without_system()) ==
          "<bos><start_of_turn>user\nHello<end_of_turn>\n<start_of_turn>model\nHi there<end_of_turn>\n"
          "<start_of_turn>user\nWho are you?<end_of_turn>\n<start_of_turn>model\n");
    // Gemma 3 puts the system message before the first user message.
    CHECK(render("gemma", kConversation) ==
          "<bos><start_of_turn>user\nYou are a helpful assistant\n\nHello<end_of_turn>\n"
          "<start_of_turn>model\nHi there<end_of_turn>\n"
          "<start_of_turn>user\nWho are you?<end_of_turn>\n<start_of_turn>model\n");
  }
  SECTION("zephyr") {
    CHECK(render("zephyr", kConversation) ==
          "<|system|>\nYou are a helpful assistant</s>\n<|user|>\nHello</s>\n"
          "<|assistant|>\n Hi there </s>\n<|user|>\nWho are you?</s>\n<|assistant|>\n");
  }
  SECTION("deepseek") {
    // DeepSeek Coder instruct: the system text runs straight into the first
    // instruction; without one, the built-in system prompt is used.
    CHECK(render("deepseek", kConversation) ==
          kDsBegin + "You are a helpful assistant### Instruction:\nHello\n### Response:\n Hi there \n<|EOT|>\n"
                     "### Instruction:\nWho are you?\n### Response:\n");
    CHECK(render("deepseek", {{"user", "Hi"}}) ==
          kDsBegin +
              "You are an AI programming assistant, utilizing the Deepseek Coder model, developed by Deepseek "
              "Company, and you only answer questions related to computer science. For politically sensitive "
              "questions, security and privacy issues, and other non-computer science questions, you will "
              "refuse to answer\n### Instruction:\nHi\n### Response:\n");
    // DeepSeek LLM chat / V2.
    CHECK(render("deepseek2", kConversation) ==
          kDsBegin + "You are a helpful assistant\n\nUser: Hello\n\nAssistant:  Hi there " + kDsEnd +
              "User: Who are you?\n\nAssistant:");
    // DeepSeek V3.
    CHECK(render("deepseek3", kConversation) ==
          kDsBegin + "You are a helpful assistant" + kDsUser + "Hello" + kDsAssistant + " Hi there " + kDsEnd +
              kDsUser + "Who are you?" + kDsAssistant);
  }
}

TEST_CASE("chat: roles the published templates refuse", "[chat]") {
  const std::vector<ChatMessage> two_users = {{"user", "a"}, {"user", "b"}};
  for (const char* name : {"llama2", "mistral-v1", "mistral-v3", "mistral-v3-tekken", "gemma", "mistral-v0"}) {
    INFO(name);
    CHECK(status_of([&] { render(name, two_users); }) == Status::InvalidArgument);
    CHECK(message_of([&] { render(name, two_users); }).find("alternate") != std::string::npos);
  }
  // Templates without that rule render it.
  CHECK(status_of([&] { render("chatml", two_users); }) == Status::Ok);
  // Unknown roles are refused everywhere.
  for (const std::string& name : chat_template_names()) {
    INFO(name);
    CHECK(status_of([&] { render(name, {{"tool", "x"}}); }) == Status::InvalidArgument);
  }
  // The v1 template refuses a system message that is not the first one.
  CHECK(status_of([&] {
          render("mistral-v1", {{"user", "a"}, {"system", "s"}});
        }) == Status::InvalidArgument);
  // Empty conversations render the bare preamble.
  CHECK(render("chatml", {}) == "<|im_start|>assistant\n");
  CHECK(render("llama2", {}).empty());
}

TEST_CASE("chat: templates are recognised by their markers", "[chat]") {
  struct Case {
    const char* jinja;
    const char* name;
  };
  // Abbreviated template texts that carry each family's markers.
  const Case cases[] = {
      {"{% for m in messages %}{{'<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>\\n'}}{% endfor %}",
       "chatml"},
      {"{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }} {% set content = '<<SYS>>\\n' + system_message %}",
       "llama2"},
      {"{%- if loop.first and system_message is defined %}{{- ' [INST] ' + system_message + '\\n\\n' + "
       "message['content'] + ' [/INST]' }}",
       "mistral-v1"},
      {"{{- \"[AVAILABLE_TOOLS] [\" }}{{- \"[INST] \" + message[\"content\"] + \"[/INST]\" }}", "mistral-v3"},
      {"{{- \"[AVAILABLE_TOOLS][\" }}{{- \"[INST]\" + message[\"content\"] + \"[/INST]\" }}", "mistral-v3-tekken"},
      {"{{ '[SYSTEM_PROMPT] ' + m['content'] + '[/SYSTEM_PROMPT]' }}{{ '[INST] ' + c + '[/INST]' }}", "mistral-v7"},
      {"{{ bos_token }}{% for m in messages %}{{ '[INST] ' + m['content'] + ' [/INST]' }}{% endfor %}", "mistral-v0"},
      {"{{ '<|start_header_id|>' + m['role'] + '<|end_header_id|>\\n\\n' + m['content'] | trim + '<|eot_id|>' }}",
       "llama3"},
      {"{{- \"Cutting Knowledge Date: December 2023\\n\" }}{{ '<|start_header_id|>' + r + '<|end_header_id|>' }}",
       "llama3.1"},
      {"{{'<|user|>' + '\\n' + m['content'] + '<|end|>' + '\\n' + '<|assistant|>' + '\\n'}}", "phi3"},
      {"{{ '<start_of_turn>' + role + '\\n' + m['content'] | trim + '<end_of_turn>\\n' }}", "gemma"},
      {"{{ '<|user|>\\n' + m['content'] + eos_token }}{{ '<|assistant|>' }}", "zephyr"},
      {"{{'### Instruction:\\n' + m['content'] + '\\n'}}{{'### Response:\\n' + c + '\\n<|EOT|>\\n'}}", "deepseek"},
      {"{{ 'User: ' + message['content'] + '\\n\\n' }}{{ 'Assistant: ' + message['content'] + eos_token }}",
       "deepseek2"},
      {"{{'<\xEF\xBD\x9CUser\xEF\xBD\x9C>' + c}}{{'<\xEF\xBD\x9C" "Assistant\xEF\xBD\x9C>' + c}}", "deepseek3"},
  };
  for (const Case& c : cases) {
    INFO(c.jinja);
    CHECK(chat_template_detect(c.jinja).name == c.name);
  }
  // Names select themselves; unknown names and texts are Unsupported.
  for (const std::string& name : chat_template_names()) CHECK(chat_template_detect(name).name == name);
  CHECK(status_of([] { chat_template_detect("vicuna"); }) == Status::Unsupported);
  CHECK(message_of([] { chat_template_detect("vicuna"); }).find("'vicuna'") != std::string::npos);
  CHECK(status_of([] { chat_template_detect("{% for m in messages %}USER: {{ m }}{% endfor %}"); }) ==
        Status::Unsupported);
  // A template that writes no bos_token gets none.
  CHECK(!chat_template_detect("{{ '<start_of_turn>' + r }}").emit_bos);
  CHECK(chat_template_detect("{{ bos_token }}{{ '<start_of_turn>' + r }}").emit_bos);
}

// ---- the C API ---------------------------------------------------------------------

namespace {

// A vocabulary-only GGUF with a chat template, loaded through the C API.
struct TempModel {
  infer_model* m = nullptr;
  explicit TempModel(const std::string& chat_template) {
    GgufWriter w;
    w.set("general.architecture", GgufValue::make_string("llama"));
    w.set("tokenizer.ggml.model", GgufValue::make_string("llama"));
    w.set("tokenizer.ggml.tokens", GgufValue::make_string_array({"<unk>", "<s>", "</s>", "a", "b"}));
    w.set("tokenizer.ggml.scores", GgufValue::make_f32_array({0, 0, 0, -1, -2}));
    w.set("tokenizer.ggml.token_type", GgufValue::make_i32_array({2, 3, 3, 1, 1}));
    w.set("tokenizer.ggml.bos_token_id", GgufValue::make_u32(1));
    w.set("tokenizer.ggml.eos_token_id", GgufValue::make_u32(2));
    if (!chat_template.empty()) w.set("tokenizer.chat_template", GgufValue::make_string(chat_template));
    const std::string path = infer_test::temp_dir() + "/chat_vocab.gguf";
    w.write(path);
    infer_model_params p;
    infer_model_params_init(&p);
    p.vocab_only = 1;
    REQUIRE(infer_model_load(path.c_str(), &p, &m) == INFER_OK);
  }
  ~TempModel() { infer_model_free(m); }
};

std::string read_fixture(const std::string& name) {
  std::ifstream f(std::string(INFER_SOURCE_DIR) + "/tests/data/chat_templates/" + name, std::ios::binary);
  REQUIRE(f);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::string apply(const infer_model* m, const char* name, const std::vector<infer_chat_message>& msgs,
                  infer_status* status = nullptr) {
  size_t need = 0;
  infer_status st = infer_chat_apply_template(m, name, msgs.data(), msgs.size(), 1, nullptr, 0, &need);
  if (st == INFER_ERR_BUFFER_TOO_SMALL) {
    std::string out(need, '\0');
    st = infer_chat_apply_template(m, name, msgs.data(), msgs.size(), 1, out.data(), out.size(), &need);
    if (status) *status = st;
    if (st == INFER_OK) out.resize(need - 1);
    return st == INFER_OK ? out : std::string();
  }
  if (status) *status = st;
  return std::string();
}

}  // namespace

TEST_CASE("chat: C API", "[chat]") {
  // Listing.
  const int32_t n = infer_chat_template_count();
  REQUIRE(n == static_cast<int32_t>(chat_template_names().size()));
  for (int32_t i = 0; i < n; ++i) CHECK(infer_chat_template_name(i) == chat_template_names()[i]);
  CHECK(infer_chat_template_name(-1) == nullptr);
  CHECK(infer_chat_template_name(n) == nullptr);
  CHECK(std::string(infer_chat_template_stop("chatml", 0)) == "<|im_end|>");
  CHECK(infer_chat_template_stop("chatml", 99) == nullptr);
  CHECK(infer_chat_template_stop("nope", 0) == nullptr);
  CHECK(infer_chat_template_stop(nullptr, 0) == nullptr);

  const std::vector<infer_chat_message> msgs = {
      {"system", "S"}, {"user", "U"}, {"assistant", "A"}, {"user", "V"}};

  // Without a model: the family's usual BOS/EOS.
  infer_status st = INFER_OK;
  CHECK(apply(nullptr, "llama2", msgs, &st) == "<s>[INST] <<SYS>>\nS\n<</SYS>>\n\nU [/INST] A </s><s>[INST] V [/INST]");
  CHECK(st == INFER_OK);
  apply(nullptr, "vicuna", msgs, &st);
  CHECK(st == INFER_ERR_UNSUPPORTED);
  CHECK(std::string(infer_last_error()).find("vicuna") != std::string::npos);
  apply(nullptr, nullptr, msgs, &st);
  CHECK(st == INFER_ERR_INVALID_ARGUMENT);

  // Bad messages.
  std::vector<infer_chat_message> bad = {{"user", nullptr}};
  apply(nullptr, "chatml", bad, &st);
  CHECK(st == INFER_ERR_INVALID_ARGUMENT);
  bad = {{"robot", "x"}};
  apply(nullptr, "chatml", bad, &st);
  CHECK(st == INFER_ERR_INVALID_ARGUMENT);
  size_t need = 7;
  CHECK(infer_chat_apply_template(nullptr, "chatml", nullptr, 1, 1, nullptr, 0, &need) == INFER_ERR_INVALID_ARGUMENT);
  CHECK(need == 0);

  // Buffer protocol: size query, too small, exact.
  need = 0;
  CHECK(infer_chat_apply_template(nullptr, "chatml", msgs.data(), msgs.size(), 1, nullptr, 0, &need) ==
        INFER_ERR_BUFFER_TOO_SMALL);
  const std::string want = render("chatml", {{"system", "S"}, {"user", "U"}, {"assistant", "A"}, {"user", "V"}});
  CHECK(need == want.size() + 1);
  std::vector<char> buf(need);
  CHECK(infer_chat_apply_template(nullptr, "chatml", msgs.data(), msgs.size(), 1, buf.data(), need - 1, &need) ==
        INFER_ERR_BUFFER_TOO_SMALL);
  CHECK(infer_chat_apply_template(nullptr, "chatml", msgs.data(), msgs.size(), 1, buf.data(), buf.size(), &need) ==
        INFER_OK);
  CHECK(std::string(buf.data()) == want);

  SECTION("a model's own template and special tokens") {
    // The real Llama-2-chat template, rendered by the interpreter with the
    // model's BOS/EOS texts.
    const std::string llama2 = read_fixture("llama2-7b-chat.jinja");
    TempModel model(llama2);
    char name[32];
    CHECK(infer_chat_template_detect(model.m, name, sizeof name, &need) == INFER_OK);
    CHECK(std::string(name) == "llama2");
    CHECK(need == 7);
    CHECK(apply(model.m, nullptr, msgs, &st) == "<s>[INST] <<SYS>>\nS\n<</SYS>>\n\nU [/INST] A </s><s>[INST] V [/INST]");
    CHECK(apply(model.m, "jinja", msgs, &st) == "<s>[INST] <<SYS>>\nS\n<</SYS>>\n\nU [/INST] A </s><s>[INST] V [/INST]");
    // An explicit name overrides the model's template.
    CHECK(apply(model.m, "zephyr", msgs, &st) ==
          "<|system|>\nS</s>\n<|user|>\nU</s>\n<|assistant|>\nA</s>\n<|user|>\nV</s>\n<|assistant|>\n");
    // The template refuses roles that do not alternate: its own message.
    apply(model.m, nullptr, {{"user", "a"}, {"user", "b"}}, &st);
    CHECK(st == INFER_ERR_INVALID_ARGUMENT);
    CHECK(std::string(infer_last_error()) == "Conversation roles must alternate user/assistant/user/assistant/...");
    // A Jinja text given as the template renders with the interpreter.
    CHECK(apply(nullptr, llama2.c_str(), msgs, &st) == "<s>[INST] <<SYS>>\nS\n<</SYS>>\n\nU [/INST] A </s><s>[INST] V [/INST]");
    // Roles other than system/user/assistant reach the template.
    TempModel qwen(read_fixture("qwen2.5-7b-instruct.jinja"));
    CHECK(apply(qwen.m, nullptr, {{"user", "u"}, {"tool", "42"}}, &st) ==
          "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n"
          "<|im_start|>user\nu<|im_end|>\n<|im_start|>user\n<tool_response>\n42\n</tool_response><|im_end|>\n"
          "<|im_start|>assistant\n");
  }
  SECTION("a template beyond the interpreter: the built-in template of its family, unless asked for explicitly") {
    // A real template with a construct the interpreter lacks ({% filter %}).
    const std::string text = "{% filter upper %}{% endfilter %}" + read_fixture("llama2-7b-chat.jinja");
    TempModel model(text);
    std::string logged;
    infer_set_log_callback(
        [](infer_log_level, const char* message, void* user) { *static_cast<std::string*>(user) += message; }, &logged,
        INFER_LOG_WARN);
    CHECK(apply(model.m, nullptr, msgs, &st) == "<s>[INST] <<SYS>>\nS\n<</SYS>>\n\nU [/INST] A </s><s>[INST] V [/INST]");
    infer_set_log_callback(nullptr, nullptr, INFER_LOG_WARN);
    CHECK(st == INFER_OK);
    // The fallback is announced: what the interpreter lacks, and the built-in used.
    CHECK(logged.find("{% filter %}") != std::string::npos);
    CHECK(logged.find("'llama2'") != std::string::npos);
    apply(model.m, "jinja", msgs, &st);
    CHECK(st == INFER_ERR_UNSUPPORTED);
    CHECK(std::string(infer_last_error()).find("{% filter %}") != std::string::npos);
    apply(nullptr, text.c_str(), msgs, &st);
    CHECK(st == INFER_ERR_UNSUPPORTED);
    CHECK(std::string(infer_last_error()).find("line 1") != std::string::npos);
  }
  SECTION("a model without a template, or with an unknown one") {
    TempModel none("");
    CHECK(infer_chat_template_detect(none.m, nullptr, 0, &need) == INFER_ERR_NOT_FOUND);
    apply(none.m, nullptr, msgs, &st);
    CHECK(st == INFER_ERR_NOT_FOUND);
    apply(none.m, "jinja", msgs, &st);
    CHECK(st == INFER_ERR_NOT_FOUND);
    CHECK(apply(none.m, "chatml", msgs, &st) == want);
    // Not a family libinfer knows, but the interpreter renders it.
    TempModel odd("{% for m in messages %}<<{{ m['role'] }}>>{% endfor %}");
    char name[16];
    CHECK(infer_chat_template_detect(odd.m, name, sizeof name, &need) == INFER_OK);
    CHECK(std::string(name) == "jinja");
    CHECK(infer_chat_template_stop(name, 0) == nullptr);
    CHECK(apply(odd.m, nullptr, msgs, &st) == "<<system>><<user>><<assistant>><<user>>");
    // Neither known nor readable.
    TempModel worse("{% for m in messages %}<<{{ m['role'] | wordcount }}>>{% endfor %}");
    CHECK(infer_chat_template_detect(worse.m, nullptr, 0, &need) == INFER_ERR_UNSUPPORTED);
    CHECK(std::string(infer_last_error()).find("<<{{ m['role'] | wordcount }}>>") != std::string::npos);
    CHECK(std::string(infer_last_error()).find("filter 'wordcount'") != std::string::npos);
    apply(worse.m, nullptr, msgs, &st);
    CHECK(st == INFER_ERR_UNSUPPORTED);
    CHECK(std::string(infer_last_error()).find("filter 'wordcount'") != std::string::npos);
  }
}

TEST_CASE("chat: C API with the conversation as JSON (tools, tool calls)", "[chat]") {
  const char* ctx =
      R"({"messages": [{"role": "user", "content": "Weather in Paris?"},)"
      R"( {"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},)"
      R"( {"role": "tool", "content": "22C"}],)"
      R"( "tools": [{"type": "function", "function": {"name": "get_weather", "description": "Weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}],)"
      R"( "add_generation_prompt": true})";
  auto apply_json = [](const infer_model* m, const char* name, const char* json, infer_status* st) {
    size_t need = 0;
    *st = infer_chat_apply_template_json(m, name, json, nullptr, 0, &need);
    if (*st != INFER_ERR_BUFFER_TOO_SMALL) return std::string();
    std::string out(need, '\0');
    *st = infer_chat_apply_template_json(m, name, json, out.data(), out.size(), &need);
    out.resize(need ? need - 1 : 0);
    return out;
  };
  // Rendered by Python's jinja2 from the same template and context.
  const std::string want =
      "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.\n\n# Tools\n\n"
      "You may call one or more functions to assist with the user query.\n\n"
      "You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n"
      "{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description\": \"Weather\", \"parameters\": "
      "{\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\"}}}}}\n</tools>\n\n"
      "For each function call, return a json object with function name and arguments within <tool_call></tool_call> XML "
      "tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n"
      "<|im_start|>user\nWeather in Paris?<|im_end|>\n<|im_start|>assistant\n<tool_call>\n"
      "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call><|im_end|>\n"
      "<|im_start|>user\n<tool_response>\n22C\n</tool_response><|im_end|>\n<|im_start|>assistant\n";
  infer_status st = INFER_OK;
  TempModel qwen(read_fixture("qwen2.5-7b-instruct.jinja"));
  CHECK(apply_json(qwen.m, nullptr, ctx, &st) == want);
  CHECK(st == INFER_OK);
  const std::string text = read_fixture("qwen2.5-7b-instruct.jinja");
  CHECK(apply_json(nullptr, text.c_str(), ctx, &st) == want);

  // A built-in template reads role and content.
  const char* plain = R"({"messages": [{"role": "user", "content": "U"}], "add_generation_prompt": true})";
  CHECK(apply_json(nullptr, "chatml", plain, &st) == "<|im_start|>user\nU<|im_end|>\n<|im_start|>assistant\n");
  apply_json(nullptr, "chatml", ctx, &st);  // the "tool" role is not one a built-in template takes
  CHECK(st == INFER_ERR_INVALID_ARGUMENT);

  // Refusals.
  size_t need = 5;
  CHECK(infer_chat_apply_template_json(nullptr, "chatml", nullptr, nullptr, 0, &need) == INFER_ERR_INVALID_ARGUMENT);
  CHECK(need == 0);
  CHECK(infer_chat_apply_template_json(nullptr, nullptr, plain, nullptr, 0, &need) == INFER_ERR_INVALID_ARGUMENT);
  apply_json(nullptr, "chatml", R"({"messages": [)", &st);
  CHECK(st == INFER_ERR_INVALID_ARGUMENT);
  CHECK(std::string(infer_last_error()).find("byte") != std::string::npos);
  apply_json(nullptr, "chatml", "[]", &st);
  CHECK(st == INFER_ERR_INVALID_ARGUMENT);
  apply_json(nullptr, "chatml", R"({"messages": {"role": "user"}})", &st);
  CHECK(st == INFER_ERR_INVALID_ARGUMENT);
  apply_json(nullptr, "chatml", R"({"messages": [1]})", &st);
  CHECK(st == INFER_ERR_INVALID_ARGUMENT);
  apply_json(nullptr, "chatml", R"({"messages": [{"role": "user", "content": null}]})", &st);
  CHECK(st == INFER_ERR_INVALID_ARGUMENT);
}

// Issue 27: a model file carrying a hostile chat template (a namespace stored
// in itself, ../shared/repro/untrusted/selfref_template.jinja; a budget bomb)
// loads with a warning, and chat with the model's own template falls back to
// a built-in one; rendering the text explicitly is a clear error. Before the
// fix the first render of the self-reference killed the process (SIGSEGV).
namespace {
std::vector<std::string>* g_warnings = nullptr;
void collect_warning(infer_log_level level, const char* message, void*) {
  if (g_warnings && level >= INFER_LOG_WARN) g_warnings->push_back(message);
}
}  // namespace

TEST_CASE("chat: a model whose template fails its trial render loads with a warning and falls back", "[chat][untrusted]") {
  std::vector<std::string> warnings;
  g_warnings = &warnings;
  infer_set_log_callback(collect_warning, nullptr, INFER_LOG_WARN);
  auto any_warning = [&](const char* what) {
    for (const std::string& w : warnings)
      if (w.find(what) != std::string::npos) return true;
    return false;
  };
  const std::vector<infer_chat_message> msgs = {{"user", "U"}, {"assistant", "A"}, {"user", "V"}};
  const std::string chatml = "<|im_start|>user\nU<|im_end|>\n<|im_start|>assistant\nA<|im_end|>\n"
                             "<|im_start|>user\nV<|im_end|>\n<|im_start|>assistant\n";
  const char* const kSelfRef =
      "{% set ns = namespace(a=1) %}{% set ns.a = ns %}{{ ns }}{% for m in messages %}{{ m.content }}{% endfor %}";
  {
    TempModel model(kSelfRef);
    CHECK(any_warning("trial render"));
    CHECK(any_warning("contains itself"));
    warnings.clear();
    infer_status st = INFER_OK;
    CHECK(apply(model.m, nullptr, msgs, &st) == chatml);  // no family: chatml, as for a model without a template
    CHECK(st == INFER_OK);
    CHECK(any_warning("chatml"));
    // The model's own text on request, or the text itself: a clear error, the host stays up.
    apply(model.m, "jinja", msgs, &st);
    CHECK(st == INFER_ERR_INVALID_ARGUMENT);
    CHECK(std::string(infer_last_error()).find("contains itself") != std::string::npos);
    apply(nullptr, kSelfRef, msgs, &st);
    CHECK(st == INFER_ERR_INVALID_ARGUMENT);
    size_t need = 0;
    st = infer_chat_apply_template_json(nullptr, kSelfRef, R"({"messages": [{"role": "user", "content": "hi"}]})",
                                        nullptr, 0, &need);
    CHECK(st == INFER_ERR_INVALID_ARGUMENT);
    CHECK(std::string(infer_last_error()).find("contains itself") != std::string::npos);
  }
  {
    // A ChatML template (recognised family) that also runs a budget bomb: the built-in chatml.
    const std::string bomb = "{% for i in range(1000000000) %}{% endfor %}"
                             "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
                             "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}";
    warnings.clear();
    TempModel model(bomb);
    CHECK(any_warning("budget"));
    infer_status st = INFER_OK;
    CHECK(apply(model.m, nullptr, msgs, &st) == chatml);
    CHECK(st == INFER_OK);
    apply(model.m, "jinja", msgs, &st);
    CHECK(st == INFER_ERR_INVALID_ARGUMENT);
    CHECK(std::string(infer_last_error()).find("working-memory budget") != std::string::npos);
  }
  {
    // A template that renders loads without a warning.
    warnings.clear();
    TempModel model("{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
                    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}");
    CHECK_FALSE(any_warning("trial render"));
  }
  infer_set_log_callback(nullptr, nullptr, INFER_LOG_WARN);
  g_warnings = nullptr;
}
