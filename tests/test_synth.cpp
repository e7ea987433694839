// Synthetic models, checked by what the written files do: they load with the
// preset's configuration, every weight format runs with finite logits, the
// weights have the documented statistics, any text tokenizes and comes back,
// and the output depends on the seed alone.
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "engine/engine.h"
#include "gguf/gguf.h"
#include "model/model.h"
#include "tokenizer/chat.h"
#include "tokenizer/jinja.h"
#include "tools/synth.h"
#include "test_util.h"

using namespace infer;

namespace {

// Greedy generation after a fixed prompt, with its prompt logits.
struct Run {
  std::vector<int32_t> tokens;
  std::vector<float> logits;
};

Run run_model(const Model& m, int max_tokens = 6) {
  EngineParams ep;
  ep.n_threads = 2;
  ep.n_ctx = 64;
  Engine e(m, ep);
  RequestParams rp;
  rp.prompt = m.tokenizer().encode("hello synthetic world", true);
  rp.max_tokens = max_tokens;
  rp.logits = kLogitsPrompt;
  rp.sampling.temperature = 0;
  auto r = e.submit(rp);
  e.run();
  REQUIRE(r->finish_reason() != FinishReason::Error);
  return {r->tokens(), r->logits()};
}

bool all_finite(const std::vector<float>& v) {
  for (float x : v)
    if (!std::isfinite(x)) return false;
  return !v.empty();
}

// Tensor rows as f32 (the F32 files of these tests only).
std::vector<float> f32_tensor(const Model& m, const std::string& name) {
  const GgufTensorInfo* t = m.gguf().find_tensor(name);
  REQUIRE(t);
  REQUIRE(t->type == DType::F32);
  std::vector<float> out(static_cast<size_t>(t->n_elements()));
  std::memcpy(out.data(), m.gguf().tensor_data(*t), out.size() * sizeof(float));
  return out;
}

}  // namespace

TEST_CASE("synth: the tiny preset loads with the preset's configuration", "[synth]") {
  const SynthPreset* p = find_synth_preset("tiny");
  REQUIRE(p);
  CHECK(find_synth_preset("no-such-preset") == nullptr);
  const std::string path = infer_test::temp_dir() + "/tiny-config.gguf";
  SynthOptions o;
  o.type = DType::F32;
  o.n_threads = 2;
  const uint64_t bytes = write_synth_model(*p, path, o);
  std::unique_ptr<Model> m = Model::load(path);
  const ModelConfig& c = m->config();
  CHECK(c.arch == p->arch);
  CHECK(c.n_embd == p->n_embd);
  CHECK(c.n_layer == p->n_layer);
  CHECK(c.n_head == p->n_head);
  CHECK(c.n_head_kv == p->n_head_kv);
  CHECK(c.n_ff == p->n_ff);
  CHECK(c.n_vocab == p->n_vocab);
  CHECK(c.n_ctx_train == p->n_ctx);
  CHECK(c.rope_freq_base == p->rope_base);
  CHECK(c.rms_eps == p->rms_eps);
  // Every parameter of a llama model, counted from the preset: embeddings,
  // output and final norm, then per layer q, k, v, o, three FFN matrices and
  // two norms. All F32 here, so the file holds 4 bytes of each.
  const uint64_t d = p->n_embd, kv = static_cast<uint64_t>(p->n_head_kv) * (p->n_embd / p->n_head);
  const uint64_t per_layer = d * d * 2 + d * kv * 2 + 3 * d * p->n_ff + 2 * d;
  const uint64_t n_params = 2 * d * p->n_vocab + d + per_layer * p->n_layer;
  CHECK(m->n_params() == n_params);
  CHECK(bytes > n_params * 4);
  CHECK(bytes < n_params * 4 + (1u << 20));  // plus metadata and padding
}

TEST_CASE("synth: every preset's architecture and head grouping loads and runs", "[synth]") {
  // The full presets are gigabytes; a copy of each with its architecture, its
  // query heads per KV head, its rope base and epsilon but tiny dimensions
  // must load in this build and give finite logits. (A preset of an
  // architecture this build cannot run fails here.)
  const std::string dir = infer_test::temp_dir();
  REQUIRE(!synth_presets().empty());
  for (const SynthPreset& full : synth_presets()) {
    INFO(full.name);
    REQUIRE(full.n_head % full.n_head_kv == 0);
    SynthPreset p = full;
    p.n_head_kv = 1;
    p.n_head = full.n_head / full.n_head_kv;
    p.n_embd = 8 * p.n_head;
    if (p.head_dim > 0) p.head_dim = 16;  // architectures with their own head size keep one
    if (p.sliding_window > 0) p.sliding_window = 4;
    p.rope_orig_ctx = std::min(p.rope_orig_ctx, 32);
    p.n_layer = 2;  // Gemma 2 alternates windowed and global layers
    p.n_ff = 24;
    p.n_vocab = 300;
    p.n_ctx = 64;
    SynthOptions o;
    o.type = DType::F32;
    o.n_threads = 1;
    const std::string path = dir + "/small-" + full.name + ".gguf";
    write_synth_model(p, path, o);
    std::unique_ptr<Model> m = Model::load(path);
    CHECK(m->config().arch == full.arch);
    CHECK(m->config().n_head / m->config().n_head_kv == full.n_head / full.n_head_kv);
    CHECK(m->config().rope_freq_base == full.rope_base);
    CHECK(all_finite(run_model(*m, 2).logits));
  }
}

TEST_CASE("synth: every weight format loads and runs with finite logits", "[synth]") {
  const std::string dir = infer_test::temp_dir();
  for (DType t : {DType::F32, DType::F16, DType::BF16, DType::Q8_0, DType::Q4_0, DType::Q4_1, DType::Q5_0,
                  DType::Q5_1, DType::Q4_K, DType::Q6_K, DType::W8A8, DType::INT4_G32, DType::INT4_G64}) {
    INFO(dtype_name(t));
    SynthOptions o;
    o.type = t;
    o.n_threads = 2;
    const std::string path = dir + "/tiny-" + dtype_name(t) + ".gguf";
    write_synth_model(*find_synth_preset("tiny"), path, o);
    std::unique_ptr<Model> m = Model::load(path);
    const GgufTensorInfo* q = m->gguf().find_tensor("blk.1.attn_q.weight");
    REQUIRE(q);
    // 64-value rows do not fit the 256-value k-quant blocks: those fall back.
    CHECK(q->type == (t == DType::Q4_K ? DType::Q5_0 : t == DType::Q6_K ? DType::Q8_0 : t));
    CHECK(all_finite(run_model(*m).logits));
  }
}

TEST_CASE("synth: weights have the documented statistics", "[synth]") {
  // Uniform with standard deviation 0.02; projections into the residual
  // stream 0.02 / sqrt(2 * layers); norms exactly 1.
  const SynthPreset* p = find_synth_preset("tiny");
  const std::string path = infer_test::temp_dir() + "/tiny-stats.gguf";
  SynthOptions o;
  o.type = DType::F32;
  write_synth_model(*p, path, o);
  std::unique_ptr<Model> m = Model::load(path);
  auto stats = [](const std::vector<float>& v, double* mean, double* sd, float* maxabs) {
    double s = 0, s2 = 0;
    *maxabs = 0;
    for (float x : v) {
      s += x;
      s2 += static_cast<double>(x) * x;
      *maxabs = std::max(*maxabs, std::fabs(x));
    }
    *mean = s / v.size();
    *sd = std::sqrt(s2 / v.size() - *mean * *mean);
  };
  double mean = 0, sd = 0;
  float maxabs = 0;
  stats(f32_tensor(*m, "token_embd.weight"), &mean, &sd, &maxabs);
  CHECK(std::fabs(mean) < 0.002);
  CHECK(sd == Approx(0.02).epsilon(0.05));
  CHECK(maxabs <= 0.02f * std::sqrt(3.0f) * 1.0001f);  // uniform: bounded by sqrt(3) sd
  const double s_out = 0.02 / std::sqrt(2.0 * p->n_layer);
  stats(f32_tensor(*m, "blk.0.ffn_down.weight"), &mean, &sd, &maxabs);
  CHECK(sd == Approx(s_out).epsilon(0.05));
  stats(f32_tensor(*m, "blk.1.attn_output.weight"), &mean, &sd, &maxabs);
  CHECK(sd == Approx(s_out).epsilon(0.05));
  for (const char* norm : {"output_norm.weight", "blk.0.attn_norm.weight", "blk.1.ffn_norm.weight"})
    for (float x : f32_tensor(*m, norm)) REQUIRE(x == 1.0f);
}

TEST_CASE("synth: any text tokenizes and decodes back", "[synth]") {
  const std::string path = infer_test::temp_dir() + "/tiny-vocab.gguf";
  SynthOptions o;
  o.type = DType::Q8_0;
  write_synth_model(*find_synth_preset("tiny"), path, o);
  std::unique_ptr<Model> m = Model::load(path);
  const Tokenizer& tok = m->tokenizer();
  CHECK(tok.vocab().bos == 1);
  CHECK(tok.vocab().eos == 2);
  for (const std::string s : {"hello synthetic world", "zz top 123", "caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80",
                              "tabs\tand\nnewlines"}) {
    INFO(s);
    const std::vector<int32_t> ids = tok.encode(s, false);
    REQUIRE(!ids.empty());
    for (int32_t id : ids) CHECK((id >= 0 && id < m->config().n_vocab));
    CHECK(tok.decode(ids, false) == s);
  }
}

TEST_CASE("synth: the output depends on the seed alone", "[synth]") {
  const std::string dir = infer_test::temp_dir();
  const SynthPreset* p = find_synth_preset("tiny");
  SynthOptions o;
  o.type = DType::Q4_0;
  o.n_threads = 3;
  write_synth_model(*p, dir + "/a.gguf", o);
  o.n_threads = 1;  // rows are generated in parallel: the thread count must not matter
  write_synth_model(*p, dir + "/b.gguf", o);
  o.seed = 2;
  write_synth_model(*p, dir + "/c.gguf", o);
  CHECK(infer_test::read_file(dir + "/a.gguf") == infer_test::read_file(dir + "/b.gguf"));
  CHECK(infer_test::read_file(dir + "/a.gguf") != infer_test::read_file(dir + "/c.gguf"));
  std::unique_ptr<Model> a = Model::load(dir + "/a.gguf"), c = Model::load(dir + "/c.gguf");
  const Run ra = run_model(*a), ra2 = run_model(*a), rc = run_model(*c);
  CHECK(ra.tokens == ra2.tokens);  // greedy generation repeats
  CHECK(ra.logits == ra2.logits);
  CHECK(ra.logits != rc.logits);   // another seed, another model
}

TEST_CASE("synth: tiny-chat carries a byte-level BPE vocabulary and a ChatML template with tools", "[synth]") {
  const SynthPreset* p = find_synth_preset("tiny-chat");
  REQUIRE(p);
  const std::string path = infer_test::temp_dir() + "/tiny-chat.gguf";
  SynthOptions o;
  o.type = DType::F32;
  write_synth_model(*p, path, o);
  std::unique_ptr<Model> m = Model::load(path);
  CHECK(m->config().arch == "qwen2");
  CHECK(m->config().n_ctx_train == 4096);
  CHECK(m->config().n_vocab == 1024);
  const Tokenizer& tok = m->tokenizer();
  const Vocab& v = tok.vocab();
  CHECK(v.model == "gpt2");
  CHECK(v.pre == "stablelm2");  // Qwen2's split, without its NFC normalization
  CHECK_FALSE(v.add_bos);
  REQUIRE(v.eos >= 0);
  CHECK(v.tokens[static_cast<size_t>(v.eos)] == "<|im_end|>");
  CHECK(tok.is_eog(v.eos));

  // Any UTF-8 text (and any bytes) comes back from encode + decode.
  static constexpr char kBadBytes[] = "\x00\x01\xff\xfe bad \xC3";  // a NUL, invalid UTF-8, a cut sequence
  std::vector<std::string> texts = {"hello synthetic world", "  leading and trailing  ", "caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80 \xE4\xB8\xAD\xE6\x96\x87",
                                    "tabs\tand\nnewlines\r\n\n\n", "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}",
                                    std::string(kBadBytes, sizeof kBadBytes - 1)};
  std::mt19937 rng(7);
  for (int i = 0; i < 200; ++i) {  // random code points of every UTF-8 length
    std::string t;
    const int n = 1 + static_cast<int>(rng() % 12);
    for (int k = 0; k < n; ++k) {
      uint32_t cp = 0;
      switch (rng() % 4) {
        case 0: cp = 0x20 + rng() % 0x5F; break;
        case 1: cp = 0x80 + rng() % 0x780; break;
        case 2: cp = 0x800 + rng() % 0xF800; break;
        default: cp = 0x10000 + rng() % 0x100000; break;
      }
      if (cp >= 0xD800 && cp <= 0xDFFF) cp = ' ';
      if (cp < 0x80) {
        t += static_cast<char>(cp);
      } else if (cp < 0x800) {
        t += static_cast<char>(0xC0 | (cp >> 6));
        t += static_cast<char>(0x80 | (cp & 0x3F));
      } else if (cp < 0x10000) {
        t += static_cast<char>(0xE0 | (cp >> 12));
        t += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
        t += static_cast<char>(0x80 | (cp & 0x3F));
      } else {
        t += static_cast<char>(0xF0 | (cp >> 18));
        t += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
        t += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
        t += static_cast<char>(0x80 | (cp & 0x3F));
      }
    }
    texts.push_back(t);
  }
  for (const std::string& s : texts) {
    INFO(s);
    const std::vector<int32_t> ids = tok.encode(s, false);
    for (int32_t id : ids) CHECK((id >= 0 && id < m->config().n_vocab));
    CHECK(tok.decode(ids, false) == s);
  }
  // The merges make chat and tool-call text short (under half a token per byte).
  const std::string call = "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}";
  CHECK(tok.encode(call, false).size() * 2 < call.size());
  CHECK(tok.encode(" the weather in the city", false).size() <= 5);
  // The special tokens are single tokens when parsed as such, and control
  // tokens do not render as text.
  const std::vector<int32_t> turn = tok.encode("<|im_start|>user\nhi<|im_end|>", false, true);
  REQUIRE(turn.size() >= 3);
  CHECK(v.tokens[static_cast<size_t>(turn.front())] == "<|im_start|>");
  CHECK(turn.back() == v.eos);
  CHECK(tok.decode(turn, false) == "user\nhi");
  CHECK(tok.encode("<tool_call>", false, true).size() == 1);

  // The chat template: ChatML, with tools in the system turn and calls and
  // results rendered back.
  REQUIRE(!v.chat_template.empty());
  CHECK(chat_template_detect(v.chat_template).name == "chatml");
  const ChatSpecials sp{"<|endoftext|>", "<|im_end|>"};
  CHECK(chat_render_jinja(v.chat_template, {{"system", "Be brief."}, {"user", "hi"}}, true, sp) ==
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n");
  const jinja::Value ctx = jinja::Value::from_json(R"({"add_generation_prompt": true,
    "tools": [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
      "properties": {"city": {"type": "string"}}, "required": ["city"]}}}],
    "messages": [{"role": "user", "content": "Weather in Paris?"},
      {"role": "assistant", "content": null, "tool_calls": [{"type": "function", "function": {"name": "get_weather",
        "arguments": {"city": "Paris"}}}]},
      {"role": "tool", "content": "{\"temp\": 22}"}]})");
  const std::string r = chat_render_jinja(v.chat_template, ctx, sp);
  INFO(r);
  CHECK(r.rfind("<|im_start|>system\n", 0) == 0);
  CHECK(r.find("<tools>\n{\"type\": \"function\", \"function\": {\"name\": \"get_weather\"") != std::string::npos);
  CHECK(r.find("<|im_start|>user\nWeather in Paris?<|im_end|>\n") != std::string::npos);
  CHECK(r.find("<|im_start|>assistant\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call><|im_end|>\n") !=
        std::string::npos);
  CHECK(r.find("<|im_start|>user\n<tool_response>\n{\"temp\": 22}\n</tool_response><|im_end|>\n<|im_start|>assistant\n") !=
        std::string::npos);
}
