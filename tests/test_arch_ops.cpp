// The backend ops the architectures beyond llama need (issue 14): GELU-tanh
// gating (Gemma), bias rows (Qwen2), scaling (Gemma's embeddings), logit
// soft-capping (Gemma 2) and RoPE's attention factor (Phi-3 long-rope), each
// against its formula in double precision, and each output independent of
// how many values share the call (batch invariance).
#include <cmath>
#include <memory>
#include <random>
#include <vector>

#include "core/backend.h"
#include "cpu/cpu_backend.h"
#include "core/threadpool.h"
#include "test_util.h"

using namespace infer;

namespace {

std::vector<float> randoms(size_t n, float scale, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-scale, scale);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

}  // namespace

TEST_CASE("arch ops: geglu, add_bias, scale and softcap follow their formulas", "[ops][arch]") {
  ThreadPool pool(2);
  std::unique_ptr<Backend> be = make_cpu_backend(pool);
  const int64_t n = 70000;  // several pool chunks
  const std::vector<float> g = randoms(n, 6.0f, 1), u = randoms(n, 2.0f, 2);
  std::vector<float> out(n);
  be->geglu(g.data(), u.data(), out.data(), n);
  for (int64_t i = 0; i < n; ++i) {
    const double x = g[i];
    const double want = 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x))) * u[i];
    REQUIRE(out[i] == Approx(want).margin(1e-5).epsilon(1e-5));
  }
  // One value alone gives the same bits as inside the long call.
  float one = 0;
  be->geglu(&g[12345], &u[12345], &one, 1);
  CHECK(one == out[12345]);

  std::vector<float> x = randoms(n, 40.0f, 3);
  std::vector<float> capped = x;
  be->softcap(capped.data(), n, 5.0f);
  for (int64_t i = 0; i < n; ++i) {
    REQUIRE(capped[i] == Approx(5.0 * std::tanh(x[i] / 5.0)).margin(1e-5));
    REQUIRE(std::fabs(capped[i]) <= 5.0f);
  }

  std::vector<float> s = x;
  be->scale(s.data(), n, 0.125f);
  for (int64_t i = 0; i < n; ++i) REQUIRE(s[i] == x[i] * 0.125f);

  const int64_t m = 7, w = 1000;
  std::vector<float> rows = randoms(m * w, 1.0f, 4), bias = randoms(w, 1.0f, 5), r = rows;
  be->add_bias(r.data(), bias.data(), m, w);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < w; ++j) REQUIRE(r[i * w + j] == rows[i * w + j] + bias[j]);
}

// The row moves the model asks of the backend (core/backend.h): act-order
// input permutations, the output head's and the experts' row gathers, the
// experts' weighted sums, and the copies within backend memory.
TEST_CASE("arch ops: permute_cols, gather_rows, scatter_add_rows, copy and zero", "[ops][arch]") {
  ThreadPool pool(2);
  std::unique_ptr<Backend> be = make_cpu_backend(pool);
  const int64_t m = 300, n = 97;  // m * n above one pool chunk
  const std::vector<float> x = randoms(m * n, 3.0f, 21), y = randoms(m * n, 3.0f, 22);
  std::vector<int32_t> perm(n);
  for (int64_t j = 0; j < n; ++j) perm[j] = static_cast<int32_t>((j * 31 + 5) % n);  // 31 is prime to 97
  std::vector<float> out(m * n);
  be->permute_cols(x.data(), m, n, perm.data(), out.data());
  for (int64_t r = 0; r < m; ++r)
    for (int64_t j = 0; j < n; ++j) REQUIRE(out[r * n + j] == x[r * n + perm[j]]);

  const std::vector<int32_t> rows = {5, 0, 299, 5};
  std::vector<float> g(rows.size() * n);
  be->gather_rows(x.data(), rows.data(), 4, n, g.data());
  for (size_t j = 0; j < rows.size(); ++j)
    for (int64_t c = 0; c < n; ++c) REQUIRE(g[j * n + c] == x[rows[j] * n + c]);

  // A repeated row sums in j order: ((acc + w0 y0) + w3 y3).
  const std::vector<float> w = {0.5f, -1.25f, 2.0f, 0.375f};
  std::vector<float> acc = x, want = x;
  be->scatter_add_rows(acc.data(), rows.data(), w.data(), y.data(), 4, n);
  for (size_t j = 0; j < rows.size(); ++j)
    for (int64_t c = 0; c < n; ++c) want[rows[j] * n + c] += w[j] * y[j * n + c];
  REQUIRE(acc == want);

  std::vector<float> c(m * n, 7.0f);
  be->copy(c.data(), x.data(), m * n);
  REQUIRE(c == x);
  be->zero(c.data(), m * n);
  REQUIRE(c == std::vector<float>(m * n, 0.0f));
}

TEST_CASE("arch ops: rope's attention factor scales the rotated dims only", "[ops][arch]") {
  ThreadPool pool(1);
  std::unique_ptr<Backend> be = make_cpu_backend(pool);
  const int hd = 16, n_rot = 12, heads = 3, m = 4;
  std::vector<float> inv(n_rot / 2);
  for (int i = 0; i < n_rot / 2; ++i) inv[i] = std::pow(10000.0f, -2.0f * i / n_rot);
  const std::vector<int32_t> pos = {0, 5, 17, 300};
  for (bool neox : {false, true}) {
    INFO((neox ? "neox" : "interleaved"));
    const std::vector<float> x = randoms(static_cast<size_t>(m) * heads * hd, 1.0f, 6);
    std::vector<float> a = x, b = x;
    be->rope(a.data(), m, heads, hd, pos.data(), RopeParams{n_rot, neox, inv.data(), 1.0f, 1.0f});
    be->rope(b.data(), m, heads, hd, pos.data(), RopeParams{n_rot, neox, inv.data(), 1.0f, 1.25f});
    for (int t = 0; t < m * heads; ++t)
      for (int d = 0; d < hd; ++d) {
        const size_t i = static_cast<size_t>(t) * hd + d;
        if (d < n_rot)
          REQUIRE(b[i] == Approx(1.25 * a[i]).margin(1e-6));
        else
          REQUIRE(b[i] == x[i]);  // beyond n_rot: untouched
      }
  }
}
