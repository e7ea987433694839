// The real models of ../shared as tests load them (nullptr when absent).
#pragma once

#include <memory>
#include <vector>

#include "engine/engine.h"
#include "model/model.h"
#include "tools/llama2c.h"
#include "test_util.h"

namespace infer_test {

inline std::unique_ptr<infer::Model> stories260k() {
  const std::string path = shared_file("models/stories260K.gguf");
  return path.empty() ? nullptr : infer::Model::load(path);
}

// stories-xs.bin converted from llama2.c's format into a scratch GGUF.
inline std::unique_ptr<infer::Model> stories_xs() {
  const std::string ckpt = shared_file("models/stories-xs.bin");
  const std::string tok = shared_file("models/tok512.bin");
  if (ckpt.empty() || tok.empty()) return nullptr;
  const std::string out = temp_dir() + "/stories-xs.gguf";
  infer::convert_llama2c(ckpt, tok, out);
  return infer::Model::load(out);
}

// The first n greedy tokens after `prompt` in an engine of its own with KV
// element type t (end of sequence ignored). Fewer when the request fails.
inline std::vector<int32_t> greedy_tokens(const infer::Model& m, const std::vector<int32_t>& prompt, infer::KvType t,
                                          int n) {
  infer::EngineParams ep;
  ep.kv_type = t;
  infer::Engine engine(m, ep);
  infer::RequestParams rp;
  rp.prompt = prompt;
  rp.max_tokens = n;
  rp.sampling.temperature = 0;
  rp.ignore_eos = true;
  auto r = engine.submit(rp);
  engine.run();
  return std::vector<int32_t>(r->generated(), r->generated() + r->n_generated());
}

}  // namespace infer_test

// Declares `m` = stories260K, or skips the test case with a message.
#define NEED_MODEL(m)                                   \
  auto m = infer_test::stories260k();                   \
  if (!m) {                                             \
    WARN("SKIPPED: models/stories260K.gguf not found"); \
    return;                                             \
  }
