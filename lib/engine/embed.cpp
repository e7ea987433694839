#include "engine/embed.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>

#include "engine/backends.h"

namespace infer {

const char* pooling_name(Pooling p) {
  switch (p) {
    case Pooling::Default: return "default";
    case Pooling::None: return "none";
    case Pooling::Mean: return "mean";
    case Pooling::Cls: return "cls";
    case Pooling::Last: return "last";
    case Pooling::Rank: return "rank";
  }
  return "?";
}

Pooling parse_pooling(std::string_view name) {
  for (Pooling p : {Pooling::None, Pooling::Mean, Pooling::Cls, Pooling::Last, Pooling::Rank})
    if (name == pooling_name(p)) return p;
  raise(Status::InvalidArgument, "unknown pooling '%.*s' (none, mean, cls, last, rank)", static_cast<int>(name.size()),
        name.data());
}

Pooling resolve_pooling(const Model& model, Pooling requested) {
  const ModelConfig& c = model.config();
  if (model.vocab_only()) raise(Status::InvalidArgument, "model was loaded with vocab_only: it cannot run");
  if (c.recurrent())
    raise(Status::Unsupported, "embeddings from a state-space (%s) model are not supported", c.arch.c_str());
  Pooling p = requested;
  if (p == Pooling::Default) {
    if (c.pooling >= 0)
      p = static_cast<Pooling>(c.pooling);
    else
      p = c.encoder_only ? Pooling::Mean : Pooling::Last;
  }
  const int32_t v = static_cast<int32_t>(p);
  if (v < 0 || v > 4) raise(Status::InvalidArgument, "pooling %d is not one of none, mean, cls, last, rank", v);
  if (p == Pooling::Rank && c.n_cls_out <= 0)
    raise(Status::InvalidArgument, "this %s model has no classifier head: it cannot rerank (rank pooling)", c.arch.c_str());
  return p;
}

namespace {

// The [CLS] and [SEP] of a BERT vocabulary (the ecosystem's keys, then BOS
// and EOS), -1 when absent.
int32_t vocab_id(const Model& m, const char* key, int32_t fallback) {
  const std::optional<int64_t> v = m.gguf().get_int(key);
  if (v && *v >= 0 && *v < m.config().n_vocab) return static_cast<int32_t>(*v);
  return fallback;
}
bool wordpiece(const Model& m) { return m.tokenizer().vocab().model == "bert"; }
int32_t cls_id(const Model& m) { return vocab_id(m, "tokenizer.ggml.cls_token_id", m.tokenizer().vocab().bos); }
int32_t sep_id(const Model& m) { return vocab_id(m, "tokenizer.ggml.seperator_token_id", m.tokenizer().vocab().eos); }

std::vector<int32_t> plain_tokens(const Model& m, std::string_view text) {
  std::vector<int32_t> t = m.tokenizer().encode(text, /*add_bos=*/false);
  // A tokenizer that adds [CLS]/[SEP] itself: strip them, they are added below.
  if (wordpiece(m)) {
    if (!t.empty() && t.front() == cls_id(m)) t.erase(t.begin());
    if (!t.empty() && t.back() == sep_id(m)) t.pop_back();
  }
  return t;
}

}  // namespace

EmbedInput embed_tokenize(const Model& model, std::string_view text) {
  EmbedInput in;
  const Vocab& v = model.tokenizer().vocab();
  if (text.empty()) return in;  // refused by check_inputs, named
  if (wordpiece(model)) {
    const int32_t cls = cls_id(model), sep = sep_id(model);
    if (cls >= 0) in.tokens.push_back(cls);
    std::vector<int32_t> t = plain_tokens(model, text);
    in.tokens.insert(in.tokens.end(), t.begin(), t.end());
    if (sep >= 0) in.tokens.push_back(sep);
  } else {
    in.tokens = model.tokenizer().encode(text, v.add_bos);
    if (v.add_eos && v.eos >= 0) in.tokens.push_back(v.eos);
  }
  return in;
}

EmbedInput rerank_tokenize(const Model& model, std::string_view query, std::string_view document) {
  if (!wordpiece(model))
    raise(Status::Unsupported, "reranking needs a BERT-style model with a classifier head (this is '%s')",
          model.config().arch.c_str());
  const int32_t cls = cls_id(model), sep = sep_id(model);
  if (cls < 0 || sep < 0) raise(Status::Format, "the vocabulary has no [CLS] or [SEP] token: it cannot pair texts");
  EmbedInput in;
  in.tokens.push_back(cls);
  std::vector<int32_t> q = plain_tokens(model, query), d = plain_tokens(model, document);
  in.tokens.insert(in.tokens.end(), q.begin(), q.end());
  in.tokens.push_back(sep);
  in.types.assign(in.tokens.size(), 0);
  in.tokens.insert(in.tokens.end(), d.begin(), d.end());
  in.tokens.push_back(sep);
  in.types.resize(in.tokens.size(), 1);
  return in;
}

int32_t embed_max_tokens(const Model& model) { return std::max<int32_t>(1, model.config().n_ctx_train); }

void check_inputs(const Model& model, std::vector<EmbedInput>& inputs, const EmbedOptions& o) {
  const ModelConfig& c = model.config();
  if (inputs.empty()) raise(Status::InvalidArgument, "no inputs to embed");
  const size_t limit = static_cast<size_t>(embed_max_tokens(model));
  if (o.dimensions < 0 || o.dimensions > c.n_embd)
    raise(Status::InvalidArgument, "dimensions %d is out of range [0, %d] (0: all)", o.dimensions, c.n_embd);
  const int32_t sep = wordpiece(model) ? sep_id(model) : model.tokenizer().vocab().eos;
  for (size_t i = 0; i < inputs.size(); ++i) {
    EmbedInput& in = inputs[i];
    if (in.tokens.empty()) raise(Status::InvalidArgument, "input %zu is empty", i);
    if (!in.types.empty() && in.types.size() != in.tokens.size())
      raise(Status::InvalidArgument, "input %zu has %zu token types for %zu tokens", i, in.types.size(), in.tokens.size());
    for (int32_t t : in.tokens)
      if (t < 0 || t >= c.n_vocab)
        raise(Status::InvalidArgument, "input %zu: token id %d is out of range [0, %d)", i, t, c.n_vocab);
    for (int32_t t : in.types)
      if (t < 0 || t >= std::max<int32_t>(1, c.n_token_types))
        raise(Status::InvalidArgument, "input %zu: token type %d is out of range [0, %d)", i, t,
              std::max<int32_t>(1, c.n_token_types));
    if (in.tokens.size() > limit) {
      if (!o.truncate)
        raise(Status::InvalidArgument,
              "input %zu has %zu tokens, more than the model's context of %zu (truncate cuts it to fit)", i,
              in.tokens.size(), limit);
      // Cut to the limit, keeping a final [SEP]/EOS where the input ends with one.
      const int32_t last = in.tokens.back();
      in.tokens.resize(limit);
      if (!in.types.empty()) in.types.resize(limit);
      if (sep >= 0 && last == sep) in.tokens.back() = sep;
    }
  }
}

void Embedder::prepare(const std::vector<EmbedInput>& inputs, const EmbedOptions& o, Pooling pooling,
                       EmbedResult& res) const {
  const ModelConfig& c = model_.config();
  res.pooling = pooling;
  if (pooling == Pooling::Rank)
    res.dim = c.n_cls_out;
  else
    res.dim = o.dimensions > 0 ? std::min(o.dimensions, c.n_embd) : c.n_embd;
  res.first.resize(inputs.size());
  res.rows.resize(inputs.size());
  int64_t row = 0;
  for (size_t i = 0; i < inputs.size(); ++i) {
    res.first[i] = row;
    res.rows[i] = pooling == Pooling::None ? static_cast<int32_t>(inputs[i].tokens.size()) : 1;
    row += res.rows[i];
  }
  res.data.assign(static_cast<size_t>(row) * static_cast<size_t>(res.dim), 0.0f);
  res.n_tokens = 0;
}

void Embedder::pass(const std::vector<Item>& items) {
  if (items.empty()) return;
  const ModelConfig& c = model_.config();
  const bool rank = items.front().res->pooling == Pooling::Rank;
  batch_.clear();
  bool any_types = false;
  for (const Item& it : items) {
    any_types |= !it.in->types.empty();
    if ((it.res->pooling == Pooling::Rank) != rank) raise(Status::Internal, "an embedding pass mixes rank and vectors");
  }
  for (size_t k = 0; k < items.size(); ++k) {
    const EmbedInput& in = *items[k].in;
    const Pooling pooling = items[k].res->pooling;
    const int32_t n = static_cast<int32_t>(in.tokens.size());
    for (int32_t t = 0; t < n; ++t) {
      bool want = false;
      switch (pooling) {
        case Pooling::None:
        case Pooling::Mean: want = true; break;
        case Pooling::Cls:
        case Pooling::Rank: want = t == 0; break;
        case Pooling::Last: want = t == n - 1; break;
        default: break;
      }
      batch_.add(in.tokens[t], t, static_cast<int32_t>(k), want);
      if (any_types) batch_.types.push_back(in.types.empty() ? 0 : in.types[t]);
    }
  }
  const size_t width = static_cast<size_t>(rank ? c.n_cls_out : c.n_embd);
  hidden_.resize(batch_.logit_rows.size() * width);
  model_.encode(batch_, be_, ws_, hidden_.data(), rank);
  // Pool, cut to `dimensions`, normalize.
  size_t r = 0;  // row of hidden_
  for (const Item& it : items) {
    EmbedResult& res = *it.res;
    const int64_t dim = res.dim;
    const int32_t n = static_cast<int32_t>(it.in->tokens.size());
    res.n_tokens += static_cast<uint64_t>(n);
    const int32_t n_out = res.rows[it.index];
    for (int32_t j = 0; j < n_out; ++j) {
      float* dst = res.data.data() + (res.first[it.index] + j) * dim;
      if (res.pooling == Pooling::Mean) {
        acc_.assign(static_cast<size_t>(dim), 0.0);
        for (int32_t t = 0; t < n; ++t) {
          const float* h = hidden_.data() + (r + static_cast<size_t>(t)) * width;
          for (int64_t k = 0; k < dim; ++k) acc_[static_cast<size_t>(k)] += h[k];
        }
        for (int64_t k = 0; k < dim; ++k) dst[k] = static_cast<float>(acc_[static_cast<size_t>(k)] / n);
      } else {
        const float* h = hidden_.data() + (r + static_cast<size_t>(j)) * width;
        std::memcpy(dst, h, sizeof(float) * static_cast<size_t>(dim));
      }
      if (it.o->normalize && !rank) {
        double ss = 0;
        for (int64_t k = 0; k < dim; ++k) ss += static_cast<double>(dst[k]) * dst[k];
        if (ss > 0) {
          const float inv = static_cast<float>(1.0 / std::sqrt(ss));
          for (int64_t k = 0; k < dim; ++k) dst[k] *= inv;
        }
      }
    }
    r += res.pooling == Pooling::Mean ? static_cast<size_t>(n) : static_cast<size_t>(n_out);
  }
}

EmbedResult Embedder::run(const std::vector<EmbedInput>& inputs, const EmbedOptions& o, int32_t max_batch_tokens) {
  const Pooling pooling = resolve_pooling(model_, o.pooling);
  EmbedResult res;
  prepare(inputs, o, pooling, res);
  std::vector<Item> items;
  size_t tokens = 0;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!items.empty() && tokens + inputs[i].tokens.size() > static_cast<size_t>(max_batch_tokens)) {
      pass(items);
      items.clear();
      tokens = 0;
    }
    items.push_back(Item{&inputs[i], &res, i, &o});
    tokens += inputs[i].tokens.size();
  }
  pass(items);
  return res;
}

EmbedResult embed(const Model& model, std::vector<EmbedInput> inputs, const EmbedOptions& o, int32_t n_threads) {
  resolve_pooling(model, o.pooling);  // a model that cannot: before any work
  check_inputs(model, inputs, o);
  ThreadPool pool(n_threads);
  std::unique_ptr<Backend> be = make_backend(model.backend(), pool);
  Embedder e(model, *be);
  return e.run(inputs, o);
}

bool EmbedJob::wait(int32_t timeout_ms) const {
  std::unique_lock<std::mutex> lock(mu_);
  if (timeout_ms < 0) {
    cv_.wait(lock, [&] { return done_; });
    return true;
  }
  return cv_.wait_for(lock, std::chrono::milliseconds(timeout_ms), [&] { return done_; });
}

bool EmbedJob::done() const {
  std::lock_guard<std::mutex> lock(mu_);
  return done_;
}

Status EmbedJob::status() const {
  std::lock_guard<std::mutex> lock(mu_);
  return status_;
}

const std::string& EmbedJob::error() const {
  std::lock_guard<std::mutex> lock(mu_);
  return error_;
}

void EmbedJob::finish(Status s, std::string error) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (done_) return;
    status_ = s;
    error_ = std::move(error);
    if (s != Status::Ok) result_ = EmbedResult{};
    done_ = true;
  }
  cv_.notify_all();
}

}  // namespace infer
