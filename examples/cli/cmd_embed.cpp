// infer embed: embeddings and reranking scores from the command line, over
// the C API's synchronous calls (infer_embed, infer_embed_tokens,
// infer_rerank).
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "cli.h"

namespace cli {
namespace {

const FlagTable kEmbedFlags = kModelFlags + FlagTable{
    {"-p, --prompt", "TEXT", nullptr, "a text to embed (repeatable)"},
    {"-f, --file", "FILE", nullptr, "texts to embed, one per line (empty lines skipped)"},
    {"--tokens", "ID,ID,...", nullptr, "an input given as token ids, taken as they are (repeatable; not with texts)"},
    {"--rerank", "QUERY", nullptr, "score each text as a document against QUERY (a reranker model): one score row per text"},
    {"--pooling", "none|mean|cls|last|rank", "the model's own", "how token vectors become one row (none: a row per token)"},
    {"--normalize", "2|0", "2", "2: L2-normalize each row; 0: raw (scores are never normalized)"},
    {"--dimensions", "N", "0 (all)", "keep the first N values of each row (Matryoshka), then normalize"},
    {"--truncate", nullptr, nullptr, "cut inputs longer than the model's context (else they are an error)"},
    {"--json", nullptr, nullptr, "one OpenAI embeddings-shaped JSON object on stdout"},
    {"--out", "FILE", nullptr, "write the rows as raw little-endian float32 (rows x dim) to FILE; nothing on stdout"},
} + kThreadFlags;

infer_pooling pooling_flag(const std::string& s) {
  if (s == "none") return INFER_POOLING_NONE;
  if (s == "mean") return INFER_POOLING_MEAN;
  if (s == "cls") return INFER_POOLING_CLS;
  if (s == "last") return INFER_POOLING_LAST;
  if (s == "rank") return INFER_POOLING_RANK;
  throw UsageError{"--pooling must be none, mean, cls, last or rank, not '" + s + "'"};
}

std::vector<int32_t> parse_ids(const std::string& s) {
  std::vector<int32_t> out;
  size_t from = 0;
  for (;;) {
    const size_t comma = s.find(',', from);
    std::string t = s.substr(from, comma == std::string::npos ? std::string::npos : comma - from);
    while (!t.empty() && t.front() == ' ') t.erase(t.begin());
    while (!t.empty() && t.back() == ' ') t.pop_back();
    char* end = nullptr;
    errno = 0;
    const long long v = std::strtoll(t.c_str(), &end, 10);
    if (t.empty() || *end || errno || v < 0 || v > INT32_MAX)
      throw UsageError{"--tokens takes comma-separated token ids (non-negative integers), got '" + s + "'"};
    out.push_back(static_cast<int32_t>(v));
    if (comma == std::string::npos) break;
    from = comma + 1;
  }
  return out;
}

struct Embeddings {
  infer_embeddings* e = nullptr;
  ~Embeddings() { infer_embeddings_free(e); }
};

int embed_main(const Args& a) {
  a.no_positionals();
  std::vector<std::string> texts = a.get_all("--prompt");
  if (a.has("--file")) {
    const std::string body = read_file(a.get("--file"));
    size_t from = 0;
    while (from < body.size()) {
      size_t nl = body.find('\n', from);
      if (nl == std::string::npos) nl = body.size();
      std::string line = body.substr(from, nl - from);
      if (!line.empty() && line.back() == '\r') line.pop_back();
      if (!line.empty()) texts.push_back(std::move(line));
      from = nl + 1;
    }
    if (texts.empty() && !a.has("--tokens"))
      throw UsageError{"the file '" + a.get("--file") + "' has no text (one text per non-empty line)"};
  }
  std::vector<std::vector<int32_t>> tokens;
  for (const std::string& t : a.get_all("--tokens")) tokens.push_back(parse_ids(t));
  if (texts.empty() && tokens.empty()) throw UsageError{"nothing to embed: give -p TEXT, -f FILE or --tokens IDS"};
  if (!texts.empty() && !tokens.empty()) throw UsageError{"give texts (-p, -f) or --tokens, not both"};
  const bool rerank = a.has("--rerank");
  if (rerank && !tokens.empty()) throw UsageError{"--rerank scores texts (-p, -f), not --tokens"};
  if (texts.size() > 1000000 || tokens.size() > 1000000) throw UsageError{"at most 1,000,000 inputs"};

  infer_embed_params ep;
  infer_embed_params_init(&ep);
  if (a.has("--pooling")) ep.pooling = pooling_flag(a.get("--pooling"));
  if (rerank && ep.pooling != INFER_POOLING_DEFAULT && ep.pooling != INFER_POOLING_RANK)
    throw UsageError{"--rerank needs --pooling rank (or none given)"};
  const std::string norm = a.get("--normalize", "2");
  if (norm != "2" && norm != "0") throw UsageError{"--normalize must be 2 or 0, not '" + norm + "'"};
  ep.normalize = norm == "2" ? 2 : 0;
  ep.dimensions = static_cast<int32_t>(a.get_int("--dimensions", 0, 0, INT32_MAX));
  ep.truncate = a.flag("--truncate") ? 1 : 0;
  ep.n_threads = static_cast<int32_t>(a.get_int("--threads", 0, 0, 1024));
  if (a.flag("--json") && a.has("--out")) throw UsageError{"give --json or --out, not both"};

  const std::string path = model_path(a);
  Model model(path, backend_flag(a));
  if (ep.dimensions > 0) {
    infer_model_info info;
    infer_model_info_init(&info);
    check(infer_model_get_info(model.m, &info), "reading model info");
    if (ep.pooling != INFER_POOLING_RANK && !rerank && ep.dimensions > info.n_embd)
      throw UsageError{"--dimensions " + std::to_string(ep.dimensions) + " is more than the model's " +
                       std::to_string(info.n_embd) + " dimensions"};
  }

  Embeddings out;
  const int32_t n_inputs = static_cast<int32_t>(tokens.empty() ? texts.size() : tokens.size());
  if (rerank) {
    std::vector<const char*> docs;
    for (const std::string& t : texts) docs.push_back(t.c_str());
    const std::string q = a.get("--rerank");
    check(infer_rerank(model.m, q.c_str(), docs.data(), n_inputs, &ep, &out.e), "reranking");
  } else if (!tokens.empty()) {
    std::vector<const int32_t*> ptrs;
    std::vector<size_t> lens;
    for (const auto& t : tokens) {
      ptrs.push_back(t.data());
      lens.push_back(t.size());
    }
    check(infer_embed_tokens(model.m, ptrs.data(), lens.data(), n_inputs, &ep, &out.e), "embedding");
  } else {
    std::vector<const char*> ptrs;
    std::vector<size_t> lens;
    for (const std::string& t : texts) {
      ptrs.push_back(t.data());
      lens.push_back(t.size());
    }
    check(infer_embed(model.m, ptrs.data(), lens.data(), n_inputs, &ep, &out.e), "embedding");
  }
  const int64_t rows = infer_embeddings_rows(out.e);
  const int32_t dim = infer_embeddings_dim(out.e);
  const float* data = infer_embeddings_data(out.e);
  if (!data && rows * dim > 0) throw ApiError{"embedding: no result"};

  if (a.has("--out")) {
    const std::string file = a.get("--out");
    std::FILE* f = std::fopen(file.c_str(), "wb");
    if (!f) throw UsageError{"cannot write '" + file + "': " + std::strerror(errno)};
    // Little-endian float32: the host's floats on every platform libinfer builds for.
    const size_t n = static_cast<size_t>(rows) * static_cast<size_t>(dim);
    const bool ok = std::fwrite(data, sizeof(float), n, f) == n;
    if (std::fclose(f) != 0 || !ok) throw ApiError{"writing '" + file + "' failed"};
    return 0;
  }
  char buf[32];
  if (a.flag("--json")) {
    const size_t slash = path.rfind('/');
    const std::string name = slash == std::string::npos ? path : path.substr(slash + 1);
    std::string o = "{\"object\":\"list\",\"data\":[";
    for (int64_t r = 0; r < rows; ++r) {
      if (r) o += ',';
      o += "{\"object\":\"embedding\",\"index\":" + std::to_string(r) + ",\"embedding\":[";
      for (int32_t j = 0; j < dim; ++j) {
        if (j) o += ',';
        const float v = data[r * dim + j];
        if (std::isfinite(v)) {
          std::snprintf(buf, sizeof buf, "%.9g", static_cast<double>(v));
          o += buf;
        } else {
          o += "null";
        }
      }
      o += "]}";
      if (o.size() > (1 << 20)) {
        std::fwrite(o.data(), 1, o.size(), stdout);
        o.clear();
      }
    }
    const std::string n = std::to_string(infer_embeddings_n_tokens(out.e));
    o += "],\"model\":\"" + json_escape(name) + "\",\"usage\":{\"prompt_tokens\":" + n + ",\"total_tokens\":" + n + "}}\n";
    std::fwrite(o.data(), 1, o.size(), stdout);
    return 0;
  }
  std::string line;
  for (int64_t r = 0; r < rows; ++r) {
    line.clear();
    for (int32_t j = 0; j < dim; ++j) {
      std::snprintf(buf, sizeof buf, "%s%.9g", j ? " " : "", static_cast<double>(data[r * dim + j]));
      line += buf;
    }
    line += '\n';
    std::fwrite(line.data(), 1, line.size(), stdout);
  }
  return 0;
}

// An unknown flag is a usage error (exit 2, as for every command); bad input
// (no input, a bad pooling name, --dimensions too big, an unreadable file) and
// the library's refusals exit 1 with the message on stderr.
int cmd_embed(int argc, char** argv) {
  Args a(argc, argv, 2, kEmbedFlags);
  try {
    return embed_main(a);
  } catch (const UsageError& e) {
    std::fprintf(stderr, "infer embed: %s\n", e.msg.c_str());
    return 1;
  }
}

const Register kEmbed{{"embed", "embeddings of texts (or reranking scores of documents against a query)",
                       "infer embed -m MODEL [-p TEXT]... [-f FILE] [--tokens 1,2,3]... [--rerank QUERY] [options]",
                       &kEmbedFlags,
                       "Output: one row per line, values space-separated (%.9g); with --pooling none a row per token,\n"
                       "inputs in order; with --rerank one score row per document (higher is more relevant).\n"
                       "--out FILE: the rows as raw little-endian float32; --json: an OpenAI embeddings-shaped object.\n"
                       "Embedding models: BERT-family encoders (bert, nomic-bert) and decoders with a pooling type;\n"
                       "rerankers: encoders with a classifier head.",
                       cmd_embed}};

}  // namespace
}  // namespace cli
