// Synthetic models, checked by what the written files do: they load with the
// preset's configuration, every weight format runs with finite logits, the
// weights have the documented statistics, any text tokenizes and comes back,
// and the output depends on the seed alone.
#include <cmath>
#include <cstring>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "tokenizer/wordpiece.h"
#include "engine/embed.h"
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
    // Encoders do not generate: the embedding presets' test below covers them.
    if (std::string(full.arch) == "bert" || std::string(full.arch) == "nomic-bert") continue;
    if (full.ssm_d_inner > 0) {
      // State-space presets (tests/test_mamba.cpp covers the tiny ones): the
      // benchmark shapes shrunk, their layer pattern and group count kept.
      SynthPreset p = full;
      if (p.n_embd > 64) {
        p.n_embd = 32;
        p.ssm_d_inner = 64;
        p.ssm_d_state = 8;
        p.ssm_dt_rank = std::string(full.arch) == "mamba2" ? 4 * full.ssm_n_group : 2;
        p.n_layer = 2;
      }
      p.n_vocab = 300;
      p.n_ctx = 64;
      SynthOptions o;
      o.type = DType::F32;
      o.n_threads = 1;
      const std::string path = dir + "/small-" + full.name + ".gguf";
      write_synth_model(p, path, o);
      std::unique_ptr<Model> m = Model::load(path);
      CHECK(m->config().arch == full.arch);
      CHECK(m->config().recurrent());
      CHECK(all_finite(run_model(*m, 2).logits));
      continue;
    }
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

TEST_CASE("synth: the WordPiece vocabulary has the specials, single characters and distinct pieces", "[synth]") {
  for (int n : {300, 1000, 30522}) {
    INFO(n);
    const SynthWordPieceVocab v = synth_wordpiece_vocab(n);
    REQUIRE(v.tokens.size() == static_cast<size_t>(n));
    REQUIRE(v.types.size() == static_cast<size_t>(n));
    const std::vector<std::string> specials = {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"};
    for (size_t i = 0; i < v.tokens.size(); ++i) {
      CHECK(v.types[i] == (i < specials.size() ? 3 : 1));
      if (i < specials.size()) CHECK(v.tokens[i] == specials[i]);
    }
    const std::set<std::string> all(v.tokens.begin(), v.tokens.end());
    CHECK(all.size() == v.tokens.size());
    // Any lowercase ASCII word splits into known pieces: every letter, digit
    // and punctuation mark alone and as a continuation.
    for (const char* t : {"a", "z", "0", "9", "!", "~", ",", "##a", "##z", "##0", "##9", "the"}) CHECK(all.count(t) == 1);
    if (n >= 1000)  // then words and continuations
      for (const char* t : {"hello", "paris", "france", "##ing", "##tion", "ab", "##ab"}) CHECK(all.count(t) == 1);
    for (const std::string& t : v.tokens)
      for (char ch : t) CHECK(!(ch >= 'A' && ch <= 'Z' && t.front() != '['));  // uncased
  }
  CHECK_THROWS(synth_wordpiece_vocab(299));
}

TEST_CASE("synth: the embedding presets write converted BERT, nomic-bert and pooled decoder files", "[synth]") {
  const std::string dir = infer_test::temp_dir();
  const SynthPreset* bge = find_synth_preset("bge-small");
  REQUIRE(bge);  // bge-small-en-v1.5's shape
  CHECK(std::string(bge->arch) == "bert");
  CHECK((bge->n_embd == 384 && bge->n_layer == 12 && bge->n_head == 12 && bge->n_ff == 1536 && bge->n_vocab == 30522 &&
         bge->n_ctx == 512 && bge->pooling == 2));
  struct Want {
    const char* preset;
    int pooling;
  };
  for (const Want want : {Want{"tiny-bert", 1}, Want{"tiny-bert-rerank", 4}, Want{"tiny-nomic-bert", 1},
                          Want{"tiny-qwen3-embed", 3}}) {
    INFO(want.preset);
    const SynthPreset* p = find_synth_preset(want.preset);
    REQUIRE(p);
    const std::string a = p->arch, path = dir + "/emb-" + want.preset + ".gguf";
    SynthOptions o;
    o.type = DType::F32;
    o.n_threads = 2;
    write_synth_model(*p, path, o);
    std::unique_ptr<GgufFile> g = GgufFile::open(path);
    CHECK(g->get_int(a + ".pooling_type").value_or(-1) == want.pooling);
    const bool nomic = a == "nomic-bert", rerank = p->n_cls_out > 0;
    std::map<std::string, std::vector<int64_t>> shapes;
    for (const GgufTensorInfo& t : g->tensors()) shapes[t.name] = t.dims;
    if (a == "qwen3") {
      CHECK(shapes.count("output_norm.weight") == 1);
      CHECK(g->get_string("tokenizer.ggml.model").value_or("") == "llama");
      continue;
    }
    const int64_t d = 64, ff = 128;
    CHECK(g->get_int(a + ".embedding_length").value_or(0) == d);
    CHECK(g->get_int(a + ".feed_forward_length").value_or(0) == ff);
    CHECK(g->get_int(a + ".block_count").value_or(0) == 2);
    CHECK(g->get_int(a + ".attention.head_count").value_or(0) == 4);
    CHECK(g->get_int(a + ".context_length").value_or(0) == 128);
    CHECK(g->get_bool(a + ".attention.causal") == std::optional<bool>(false));
    CHECK(g->get_float(a + ".attention.layer_norm_epsilon").value_or(0) == Approx(1e-12));
    if (nomic) CHECK(g->get_float(a + ".rope.freq_base").value_or(0) == 1000.0);
    // Tensors as converted files name and shape them ([n_in, n_out]).
    std::map<std::string, std::vector<int64_t>> want_shapes = {
        {"token_embd.weight", {d, 1000}}, {"token_types.weight", {d, 2}},
        {"token_embd_norm.weight", {d}}, {"token_embd_norm.bias", {d}}};
    if (!nomic) want_shapes["position_embd.weight"] = {d, 128};
    for (int l = 0; l < 2; ++l) {
      const std::string b = "blk." + std::to_string(l) + ".";
      for (const char* n : {"attn_output_norm", "layer_output_norm"}) {
        want_shapes[b + n + ".weight"] = {d};
        want_shapes[b + n + ".bias"] = {d};
      }
      want_shapes[b + "attn_output.weight"] = {d, d};
      want_shapes[b + "ffn_up.weight"] = {d, ff};
      want_shapes[b + "ffn_down.weight"] = {ff, d};
      if (nomic) {
        want_shapes[b + "attn_qkv.weight"] = {d, 3 * d};
        want_shapes[b + "ffn_gate.weight"] = {d, ff};
      } else {
        for (const char* n : {"attn_q", "attn_k", "attn_v"}) {
          want_shapes[b + n + ".weight"] = {d, d};
          want_shapes[b + n + ".bias"] = {d};
        }
        want_shapes[b + "attn_output.bias"] = {d};
        want_shapes[b + "ffn_up.bias"] = {ff};
        want_shapes[b + "ffn_down.bias"] = {d};
      }
    }
    if (rerank) {
      want_shapes["cls.weight"] = {d, d};
      want_shapes["cls.bias"] = {d};
      want_shapes["cls.output.weight"] = {d, 1};
      want_shapes["cls.output.bias"] = {1};
    }
    CHECK(shapes == want_shapes);
    // Biases and LayerNorm weights are random (each matters), not 0 and 1.
    for (const char* n : {"token_embd_norm.weight", "token_embd_norm.bias", "blk.1.layer_output_norm.bias"}) {
      INFO(n);
      const GgufTensorInfo* t = g->find_tensor(n);
      REQUIRE(t);
      const float* v = reinterpret_cast<const float*>(g->tensor_data(*t));
      std::set<float> distinct(v, v + t->n_elements());
      CHECK(distinct.size() > 32);
    }
    // The WordPiece vocabulary and its special ids.
    CHECK(g->get_string("tokenizer.ggml.model").value_or("") == "bert");
    const SynthWordPieceVocab wv = synth_wordpiece_vocab(1000);
    CHECK(g->get_string_array("tokenizer.ggml.tokens") == wordpiece_to_gguf_spelling(wv.tokens, wv.types));
    CHECK(g->get_int("tokenizer.ggml.cls_token_id").value_or(-1) == 2);
    CHECK(g->get_int("tokenizer.ggml.seperator_token_id").value_or(-1) == 3);
    CHECK(g->get_int("tokenizer.ggml.padding_token_id").value_or(-1) == 0);
    CHECK(g->get_int("tokenizer.ggml.unknown_token_id").value_or(-1) == 1);
    CHECK(g->get_int("tokenizer.ggml.mask_token_id").value_or(-1) == 4);
    CHECK(g->get_int("tokenizer.ggml.token_type_count").value_or(-1) == 2);
    g.reset();
    // The file loads as an embedding model and gives finite vectors (the
    // values themselves: tests/ref/embed_ref_test.py). Loading needs the
    // WordPiece tokenizer; a build without it says so.
    std::unique_ptr<Model> m;
    try {
      m = Model::load(path);
    } catch (const Error& e) {
      if (std::string(e.what()).find("tokenizer model 'bert' is not supported") == std::string::npos) throw;
      WARN("no WordPiece tokenizer in this build: " << e.what());
      continue;
    }
    CHECK(m->config().encoder_only);
    CHECK(!m->config().causal);
    CHECK(m->config().pooling == want.pooling);
    CHECK(m->config().n_cls_out == p->n_cls_out);
    EmbedOptions eo;
    std::vector<EmbedInput> in(2);
    in[0].tokens = {2, 40, 41, 42, 3};
    in[1].tokens = {2, 50, 3};
    const EmbedResult r = embed(*m, in, eo, 2);
    CHECK(r.dim == (rerank ? 1 : d));
    REQUIRE(r.n_rows() == 2);
    for (float x : r.data) CHECK(std::isfinite(x));
  }
}
