// How far the f16 and int8 KV element types move a model's outputs from f32
// KV (bench/RESULTS.md, "KV element types"). Not a test: it prints numbers.
//
//   infer_kv_quality kl TEXT MODEL.gguf...
//       per model: perplexity of TEXT (in 255-token windows after BOS) with
//       f32 KV and with f16 / int8 KV, mean KL from f32 and top-1 agreement.
//   infer_kv_quality probe MODEL.gguf TOKENS [PROMPT]
//       int8 against f32 on one reference continuation (TOKENS: the prompt
//       and its continuation as whitespace-separated ids; PROMPT: its text,
//       "" or absent for BOS alone): how many greedy tokens agree, and
//       teacher-forced over TOKENS the mean |dlogit|, mean KL, top-1
//       agreement and the smallest f32 top-two margin with its change.
//
// (A stories-xs checkpoint is a llama2.c .bin: `infer convert llama2c` first.)
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "engine/engine.h"
#include "model/model.h"

using namespace infer;

namespace {

std::vector<std::shared_ptr<Request>> prompt_logprobs(const Model& m, const std::vector<int32_t>& ids, KvType t) {
  EngineParams ep;
  ep.kv_type = t;
  ep.n_ctx = 256;
  Engine engine(m, ep);
  std::vector<std::shared_ptr<Request>> rs;
  for (size_t s = 0; s < ids.size(); s += 255) {
    RequestParams rp;
    rp.prompt.push_back(1);
    rp.prompt.insert(rp.prompt.end(), ids.begin() + s, ids.begin() + std::min(ids.size(), s + 255));
    rp.max_tokens = 0;
    rp.logits = kLogitsPrompt | kLogitsLogprobs;
    rs.push_back(engine.submit(rp));
  }
  engine.run();
  return rs;
}

int kl_table(const std::string& text_path, const std::vector<std::string>& models) {
  std::ifstream f(text_path);
  std::stringstream ss;
  ss << f.rdbuf();
  if (!f) raise(Status::Io, "cannot read %s", text_path.c_str());
  const std::string text = ss.str();
  for (const std::string& path : models) {
    auto m = Model::load(path);
    const int V = m->config().n_vocab;
    const std::vector<int32_t> ids = m->tokenizer().encode(text, false);
    auto base = prompt_logprobs(*m, ids, KvType::F32);
    for (KvType t : {KvType::F16, KvType::I8}) {
      auto other = prompt_logprobs(*m, ids, t);
      double kl = 0, nll_base = 0, nll = 0;
      int64_t n = 0, agree = 0;
      for (size_t w = 0; w < base.size(); ++w) {
        const auto& prompt = base[w]->params().prompt;
        const float* a = base[w]->logits().data();
        const float* b = other[w]->logits().data();
        for (size_t i = 0; i + 1 < prompt.size(); ++i, ++n) {
          const float* ra = a + i * V;
          const float* rb = b + i * V;
          for (int j = 0; j < V; ++j) kl += std::exp(ra[j]) * (ra[j] - rb[j]);
          agree += std::max_element(ra, ra + V) - ra == std::max_element(rb, rb + V) - rb;
          nll_base -= ra[prompt[i + 1]];
          nll -= rb[prompt[i + 1]];
        }
      }
      std::printf("%s kv %s: tokens %lld, ppl f32 %.4f, ppl %.4f, mean KL %.3e, top-1 agreement %.4f\n",
                  path.c_str(), kv_type_name(t), static_cast<long long>(n), std::exp(nll_base / n),
                  std::exp(nll / n), kl / n, static_cast<double>(agree) / n);
    }
  }
  return 0;
}

std::vector<int32_t> greedy(const Model& m, const std::vector<int32_t>& prompt, KvType t, int n) {
  EngineParams ep;
  ep.kv_type = t;
  Engine engine(m, ep);
  RequestParams rp;
  rp.prompt = prompt;
  rp.max_tokens = n;
  rp.sampling.temperature = 0;
  rp.ignore_eos = true;
  auto r = engine.submit(rp);
  engine.run();
  return std::vector<int32_t>(r->generated(), r->generated() + r->n_generated());
}

std::vector<float> forced_logits(const Model& m, const std::vector<int32_t>& tokens, KvType t) {
  EngineParams ep;
  ep.kv_type = t;
  Engine engine(m, ep);
  RequestParams rp;
  rp.prompt = tokens;
  rp.max_tokens = 0;
  rp.logits = kLogitsPrompt;
  auto r = engine.submit(rp);
  engine.run();
  return r->logits();
}

int probe(const std::string& model_path, const std::string& tokens_path, const std::string& prompt_text) {
  auto m = Model::load(model_path);
  std::ifstream f(tokens_path);
  std::vector<int32_t> ref;
  for (int32_t x; f >> x;) ref.push_back(x);
  const std::vector<int32_t> prompt =
      prompt_text.empty() ? std::vector<int32_t>{1} : m->tokenizer().encode(prompt_text, true);
  if (ref.size() <= prompt.size() || !std::equal(prompt.begin(), prompt.end(), ref.begin()))
    raise(Status::InvalidArgument, "%s does not start with the prompt", tokens_path.c_str());
  const int n_gen = static_cast<int>(ref.size() - prompt.size());
  const std::vector<int32_t> a32 = greedy(*m, prompt, KvType::F32, n_gen), a8 = greedy(*m, prompt, KvType::I8, n_gen);
  int diverge = 0;
  while (diverge < static_cast<int>(std::min(a32.size(), a8.size())) && a32[diverge] == a8[diverge]) ++diverge;
  const int V = m->config().n_vocab;
  const std::vector<float> a = forced_logits(*m, ref, KvType::F32), b = forced_logits(*m, ref, KvType::I8);
  double abs_err = 0, kl = 0, min_margin = 1e9, err_at_min = 0;
  int agree = 0, n = 0, min_at = -1;
  auto runner_up = [V](const float* r, int top) {
    float s = -1e30f;
    for (int j = 0; j < V; ++j)
      if (j != top) s = std::max(s, r[j]);
    return s;
  };
  for (size_t i = 0; i + 1 < ref.size(); ++i, ++n) {
    const float* ra = a.data() + i * V;
    const float* rb = b.data() + i * V;
    const double la = *std::max_element(ra, ra + V), lb = *std::max_element(rb, rb + V);
    double sa = 0, sb = 0;
    for (int j = 0; j < V; ++j) sa += std::exp(ra[j] - la), sb += std::exp(rb[j] - lb);
    const double za = la + std::log(sa), zb = lb + std::log(sb);
    for (int j = 0; j < V; ++j) {
      abs_err += std::fabs(ra[j] - rb[j]);
      kl += std::exp(ra[j] - za) * ((ra[j] - za) - (rb[j] - zb));
    }
    const int ta = static_cast<int>(std::max_element(ra, ra + V) - ra);
    agree += ta == static_cast<int>(std::max_element(rb, rb + V) - rb);
    if (i + 1 >= prompt.size()) {  // a generated position: the top-two margin
      const double margin = ra[ta] - runner_up(ra, ta);
      if (margin < min_margin) {
        min_margin = margin;
        min_at = static_cast<int>(i + 1 - prompt.size());
        err_at_min = (rb[ta] - runner_up(rb, ta)) - margin;  // change of the margin under int8
      }
    }
  }
  std::printf("%s: greedy agreement %3d/%d, forced: mean |dlogit| %.5f, mean KL %.3e, top-1 %.4f, "
              "smallest f32 margin %.4f at gen token %d (int8 changes it by %+.4f)\n",
              tokens_path.c_str(), diverge, n_gen, abs_err / (static_cast<double>(n) * V), kl / n,
              static_cast<double>(agree) / n, min_margin, min_at, err_at_min);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    if (argc >= 4 && !std::strcmp(argv[1], "kl")) return kl_table(argv[2], std::vector<std::string>(argv + 3, argv + argc));
    if ((argc == 4 || argc == 5) && !std::strcmp(argv[1], "probe")) return probe(argv[2], argv[3], argc == 5 ? argv[4] : "");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "infer_kv_quality: %s\n", e.what());
    return 1;
  }
  std::fprintf(stderr,
               "usage: infer_kv_quality kl TEXT MODEL.gguf...\n"
               "       infer_kv_quality probe MODEL.gguf TOKENS [PROMPT]\n");
  return 2;
}
