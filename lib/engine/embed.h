// Embeddings and reranking: pooled vectors of whole texts, computed by
// Model::encode with no KV cache.
//
//   tokenize   embed_tokenize / rerank_tokenize: the text as the model was
//              trained to see it (BERT: [CLS] text [SEP], a pair as
//              [CLS] query [SEP] document [SEP] with token types 0 then 1;
//              decoders: BOS when the tokenizer adds one, EOS when it says so)
//   check      check_inputs: empty inputs, token ids out of range, inputs
//              longer than the model's context (cut to it with `truncate`,
//              else Error(InvalidArgument) naming the input)
//   batch      Embedder::run packs whole inputs into passes of at most
//              max_batch_tokens tokens (an input longer than that runs
//              alone): one GEMM per layer over many short texts
//   pool       none (a vector per token), mean, CLS (the first token), last
//              (the last token), or rank (the classifier head's score of the
//              first token: rerankers)
//   normalize  L2 (or none), after the Matryoshka truncation to
//              `dimensions` values
//
// The engine runs embedding jobs between its generation steps
// (Engine::submit_embed), so embeddings batch with each other and share the
// machine with generation; the synchronous form is embed().
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.h"
#include "model/model.h"

namespace infer {

// The values of infer_pooling (and of GGUF *.pooling_type, Default aside).
enum class Pooling : int32_t { Default = -1, None = 0, Mean = 1, Cls = 2, Last = 3, Rank = 4 };
const char* pooling_name(Pooling p);
// "none" "mean" "cls" "last" "rank"; Error(InvalidArgument) otherwise.
Pooling parse_pooling(std::string_view name);

struct EmbedOptions {
  Pooling pooling = Pooling::Default;  // Default: the model's own (resolve_pooling)
  bool normalize = true;               // L2-normalize each vector (not rank scores)
  int32_t dimensions = 0;              // Matryoshka: keep the first N values (before normalizing); 0: all
  bool truncate = false;               // inputs longer than the context are cut to it; false: an error
};

struct EmbedInput {
  std::vector<int32_t> tokens;
  std::vector<int32_t> types;  // token types (empty: all 0)
};

struct EmbedResult {
  Pooling pooling = Pooling::Mean;  // resolved
  int32_t dim = 0;                  // values per row (n_cls_out for rank)
  std::vector<float> data;          // rows x dim, row-major
  // Input i's rows: [first[i], first[i] + rows[i]) (1 each, or its tokens
  // with Pooling::None).
  std::vector<int64_t> first;
  std::vector<int32_t> rows;
  uint64_t n_tokens = 0;            // tokens computed (usage)
  int64_t n_rows() const { return dim ? static_cast<int64_t>(data.size()) / dim : 0; }
  const float* row(int64_t r) const { return data.data() + r * dim; }
};

// The model's pooling when `requested` is Default: the file's
// *.pooling_type, else mean for encoders and last for decoders. Checks that
// the model can do it: rank needs a classifier head (Error(InvalidArgument)
// otherwise), and a model that cannot embed at all is Error(Unsupported).
Pooling resolve_pooling(const Model& model, Pooling requested);

// Tokens of a text to embed, with the model's special tokens.
EmbedInput embed_tokenize(const Model& model, std::string_view text);
// Tokens of a (query, document) pair for a reranker.
EmbedInput rerank_tokenize(const Model& model, std::string_view query, std::string_view document);

// The most tokens one input may have (the model's trained context).
int32_t embed_max_tokens(const Model& model);
// Validates every input; cuts the long ones when o.truncate (keeping the
// last token when it is the model's [SEP]/EOS). Error(InvalidArgument)
// naming the input and the limit.
void check_inputs(const Model& model, std::vector<EmbedInput>& inputs, const EmbedOptions& o);

// Computes embeddings on one backend. Not thread-safe (its workspace is one
// pass at a time); the engine owns one, and embed() makes its own.
class Embedder {
 public:
  Embedder(const Model& model, Backend& backend) : model_(model), be_(backend) {}
  // Inputs must have passed check_inputs. Passes of at most
  // max_batch_tokens tokens (whole inputs; a longer input alone).
  EmbedResult run(const std::vector<EmbedInput>& inputs, const EmbedOptions& o, int32_t max_batch_tokens = 2048);
  // One input of a pass: its tokens, the result its rows go to (sized by
  // prepare, pooling resolved there) as input `index` of it, and its options.
  struct Item {
    const EmbedInput* in;
    EmbedResult* res;
    size_t index;
    const EmbedOptions* o;
  };
  // One pass over items (all rank, or none rank: the head is per pass):
  // the pooled rows into their results. The engine uses it to batch the
  // inputs of many jobs and to interleave passes with generation steps.
  void pass(const std::vector<Item>& items);
  // Sizes res (pooling, dim, first, rows) for these inputs before the passes.
  void prepare(const std::vector<EmbedInput>& inputs, const EmbedOptions& o, Pooling pooling, EmbedResult& res) const;

 private:
  const Model& model_;
  Backend& be_;
  Workspace ws_;
  Batch batch_;
  std::vector<float> hidden_;
  std::vector<double> acc_;
};

// The synchronous form: tokens in, vectors out, on the model's backend with
// n_threads threads (0: all cores). check_inputs is applied.
EmbedResult embed(const Model& model, std::vector<EmbedInput> inputs, const EmbedOptions& o, int32_t n_threads = 0);

// An embedding job queued on an engine (Engine::submit_embed): filled by the
// stepping thread, waited on from any thread.
class EmbedJob {
 public:
  // Blocks until done, at most timeout_ms (< 0: forever). True when done.
  bool wait(int32_t timeout_ms) const;
  bool done() const;
  // After done(): Status::Ok and the result, or the failure.
  Status status() const;
  const std::string& error() const;
  const EmbedResult& result() const { return result_; }
  // Asks the engine to drop the job (it finishes as cancelled).
  void cancel() { cancelled_.store(true); }

  // ---- the engine's side ----
  std::vector<EmbedInput> inputs;
  EmbedOptions options;
  Pooling pooling = Pooling::Mean;
  size_t next = 0;  // inputs computed so far
  bool cancelled() const { return cancelled_.load(); }
  EmbedResult result_;
  void finish(Status s, std::string error);

 private:
  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  bool done_ = false;
  Status status_ = Status::Ok;
  std::string error_;
  std::atomic<bool> cancelled_{false};
};

}  // namespace infer
