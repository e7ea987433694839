// The encoder operations of the backend contract (lib/core/backend.h:
// layer_norm, gelu, tanh, attention_dense) on the CPU backend, each against
// its formula in double precision: embedding models (issue #30).
#include <cmath>
#include <memory>
#include <random>
#include <vector>

#include "core/backend.h"
#include "core/threadpool.h"
#include "cpu/cpu_backend.h"
#include "test_util.h"

using namespace infer;

namespace {

std::vector<float> rnd(size_t n, float scale, unsigned seed) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = d(g);
  return v;
}

// Attention of every token over the tokens of its own sequence (slot),
// causal or not, with grouped heads: the definition, in double.
std::vector<float> naive_attention(const std::vector<float>& q, const std::vector<float>& k, const std::vector<float>& v,
                                   const std::vector<int32_t>& pos, const std::vector<int32_t>& slot, int n_head,
                                   int n_kv, int hd, float scale, bool causal) {
  const size_t n = pos.size();
  std::vector<float> out(n * n_head * hd, 0.0f);
  for (size_t t = 0; t < n; ++t)
    for (int h = 0; h < n_head; ++h) {
      const int hk = h / (n_head / n_kv);
      std::vector<double> s;
      std::vector<size_t> idx;
      for (size_t u = 0; u < n; ++u) {
        if (slot[u] != slot[t] || (causal && pos[u] > pos[t])) continue;
        double dot = 0;
        for (int d = 0; d < hd; ++d) dot += double(q[(t * n_head + h) * hd + d]) * k[(u * n_kv + hk) * hd + d];
        s.push_back(dot * scale);
        idx.push_back(u);
      }
      double mx = -1e300, sum = 0;
      for (double x : s) mx = std::max(mx, x);
      for (double& x : s) sum += (x = std::exp(x - mx));
      for (int d = 0; d < hd; ++d) {
        double acc = 0;
        for (size_t j = 0; j < s.size(); ++j) acc += s[j] / sum * v[(idx[j] * n_kv + hk) * hd + d];
        out[(t * n_head + h) * hd + d] = float(acc);
      }
    }
  return out;
}

}  // namespace

TEST_CASE("layer_norm matches its formula, with and without a bias", "[encoder][ops]") {
  ThreadPool pool(2);
  std::unique_ptr<Backend> be = make_cpu_backend(pool);
  const int64_t m = 7, n = 96;
  std::vector<float> x = rnd(m * n, 3.0f, 1), w = rnd(n, 1.0f, 2), b = rnd(n, 1.0f, 3);
  for (int64_t i = 0; i < n; ++i) x[i] += 1000.0f;  // a large mean: a one-pass float variance would lose it
  for (bool with_bias : {true, false}) {
    std::vector<float> y(m * n);
    be->layer_norm(x.data(), w.data(), with_bias ? b.data() : nullptr, m, n, 1e-12f, y.data());
    for (int64_t r = 0; r < m; ++r) {
      double mean = 0, var = 0;
      for (int64_t i = 0; i < n; ++i) mean += x[r * n + i];
      mean /= n;
      for (int64_t i = 0; i < n; ++i) var += (x[r * n + i] - mean) * (x[r * n + i] - mean);
      var /= n;
      for (int64_t i = 0; i < n; ++i) {
        const double want = (x[r * n + i] - mean) / std::sqrt(var + 1e-12) * w[i] + (with_bias ? b[i] : 0.0);
        REQUIRE(std::fabs(y[r * n + i] - want) < 2e-4 * (1 + std::fabs(want)));
      }
    }
  }
  // In place.
  std::vector<float> y = x;
  be->layer_norm(y.data(), w.data(), b.data(), m, n, 1e-12f, y.data());
  std::vector<float> z(m * n);
  be->layer_norm(x.data(), w.data(), b.data(), m, n, 1e-12f, z.data());
  REQUIRE(y == z);
}

TEST_CASE("gelu is the erf form and tanh is tanh", "[encoder][ops]") {
  ThreadPool pool(2);
  std::unique_ptr<Backend> be = make_cpu_backend(pool);
  std::vector<float> x = rnd(40000, 2.5f, 4), g = x, t = x;
  be->gelu(g.data(), static_cast<int64_t>(g.size()));
  be->tanh(t.data(), static_cast<int64_t>(t.size()));
  for (size_t i = 0; i < x.size(); ++i) {
    const double v = x[i];
    REQUIRE(std::fabs(g[i] - 0.5 * v * (1 + std::erf(v / std::sqrt(2.0)))) < 1e-5);
    REQUIRE(std::fabs(t[i] - std::tanh(v)) < 1e-6);
  }
  // The tanh approximation differs from the erf form by far more than the
  // tolerance above on these values: the check would catch the wrong one.
  double worst = 0;
  for (float xv : x) {
    const double v = xv;
    worst = std::max(worst, std::fabs(0.5 * v * (1 + std::erf(v / std::sqrt(2.0))) -
                                      0.5 * v * (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v)))));
  }
  REQUIRE(worst > 1e-4);
}

TEST_CASE("attention_dense: within each sequence, both ways or causal, grouped heads", "[encoder][ops]") {
  ThreadPool pool(2);
  std::unique_ptr<Backend> be = make_cpu_backend(pool);
  const int n_head = 4, n_kv = 2, hd = 16;
  // Three sequences of 5, 1 and 9 tokens.
  std::vector<int32_t> pos, slot;
  for (int s = 0, lens[3] = {5, 1, 9}; s < 3; ++s)
    for (int p = 0; p < lens[s]; ++p) {
      pos.push_back(p);
      slot.push_back(s);
    }
  const size_t n = pos.size();
  std::vector<float> q = rnd(n * n_head * hd, 1.0f, 5), k = rnd(n * n_kv * hd, 1.0f, 6), v = rnd(n * n_kv * hd, 1.0f, 7);
  AttnBatch ab{static_cast<int64_t>(n), pos.data(), slot.data(), 0, nullptr, 0.0f};
  for (bool causal : {false, true}) {
    std::vector<float> out(n * n_head * hd);
    be->attention_dense(q.data(), k.data(), v.data(), ab, n_head, n_kv, hd, 0.25f, causal, out.data());
    const std::vector<float> want = naive_attention(q, k, v, pos, slot, n_head, n_kv, hd, 0.25f, causal);
    for (size_t i = 0; i < out.size(); ++i) REQUIRE(std::fabs(out[i] - want[i]) < 1e-5);
  }
  // A sequence's output does not depend on another sequence's keys.
  std::vector<float> a(n * n_head * hd), b(n * n_head * hd), k2 = k;
  for (size_t i = 0; i < 5 * n_kv * hd; ++i) k2[i] += 3.0f;  // sequence 0's keys
  be->attention_dense(q.data(), k.data(), v.data(), ab, n_head, n_kv, hd, 0.25f, false, a.data());
  be->attention_dense(q.data(), k2.data(), v.data(), ab, n_head, n_kv, hd, 0.25f, false, b.data());
  for (size_t i = 6 * n_head * hd; i < n * n_head * hd; ++i) REQUIRE(a[i] == b[i]);
  bool changed = false;
  for (size_t i = 0; i < 5 * n_head * hd; ++i) changed |= a[i] != b[i];
  REQUIRE(changed);
}
