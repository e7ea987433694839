// The state-space ops of the backend (core/backend.h: ssm_conv, ssm_scan,
// rms_norm_groups) against a reference written here in double precision,
// one token at a time, from the formulas of the contract: several sequences
// of different lengths in one batch, starting at position 0 or later (a
// prefix read from blocks another sequence wrote), runs crossing block
// boundaries; the outputs, and the state snapshots in the blocks (every full
// block holds the state after its last position, the block of the last row
// the running state). A sequence fed in one run, in chunks, or token by
// token gives bitwise the same outputs and states with the recurrence;
// Mamba-2's SSD form (cpu/ssm.h) is held to 2e-5 of the reference instead.
// Every ISA this machine runs (scalar, AVX2, AVX-512).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "core/backend.h"
#include "core/error.h"
#include "core/threadpool.h"
#include "cpu/cpu_backend.h"
#include "cpu/isa.h"
#include "cpu/ssm.h"
#include "kv/kv_format.h"
#include "test_util.h"

using namespace infer;

namespace {

struct IsaCap {
  explicit IsaCap(cpu::Isa isa) : saved(cpu::set_isa_cap(isa)) {}
  ~IsaCap() { cpu::set_isa_cap(saved); }
  cpu::Isa saved;
};

// The ISAs this machine runs, scalar first.
std::vector<cpu::Isa> isas() {
  std::vector<cpu::Isa> v{cpu::Isa::Scalar};
  if (cpu::detected_isa() >= cpu::Isa::Avx2) v.push_back(cpu::Isa::Avx2);
  if (cpu::detected_isa() >= cpu::Isa::Avx512) v.push_back(cpu::Isa::Avx512);
  return v;
}

// Sets the SSD threshold of Mamba-2 scans (cpu/ssm.h) for a scope.
struct SsdMin {
  explicit SsdMin(int64_t rows) : saved(cpu::set_ssd_min_rows(rows)) {}
  ~SsdMin() { cpu::set_ssd_min_rows(saved); }
  int64_t saved;
};

std::vector<float> randoms(size_t n, float lo, float hi, std::mt19937& rng) {
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

double ref_softplus(double v) { return v > 20.0 ? v : std::log1p(std::exp(v)); }
double ref_silu(double v) { return v / (1.0 + std::exp(-v)); }

// The shape of one SSM layer under test.
struct Shape {
  const char* name;
  int64_t channels;  // conv channels
  int d_conv;
  int64_t H, P, N, G;
  bool a_per_state, z, D, dt_bias, conv_bias;
};

// The weights of the layer.
struct Weights {
  std::vector<float> conv_w, conv_b, A, D, dt_bias;
};

Weights make_weights(const Shape& s, std::mt19937& rng) {
  Weights w;
  w.conv_w = randoms(static_cast<size_t>(s.channels * s.d_conv), -0.8f, 0.8f, rng);
  w.conv_b = randoms(static_cast<size_t>(s.channels), -0.3f, 0.3f, rng);
  // A = -exp(A_log): decays between 0.37 and 0.99 of a step of dt 0.05 .. 2.
  std::vector<float> alog = randoms(static_cast<size_t>(s.a_per_state ? s.H * s.N : s.H), -1.5f, 1.2f, rng);
  for (float v : alog) w.A.push_back(-std::exp(v));
  w.D = randoms(static_cast<size_t>(s.H), -1.0f, 1.0f, rng);
  w.dt_bias = randoms(static_cast<size_t>(s.H), -2.0f, 0.5f, rng);
  return w;
}

// The inputs of one token of a sequence, as a model's row would hold them:
// [conv input (channels) | x (H*P) | z (H*P) | B (G*N) | C (G*N) | dt (H) | 3 spare].
struct RowLayout {
  int64_t conv, x, z, B, C, dt, width;
  explicit RowLayout(const Shape& s) {
    conv = 0;
    x = conv + s.channels;
    z = x + s.H * s.P;
    B = z + s.H * s.P;
    C = B + s.G * s.N;
    dt = C + s.G * s.N;
    width = dt + s.H + 3;
  }
};

// The reference: a sequence's tokens one by one from the zero state, the
// outputs of every token and the state after every position.
struct RefSeq {
  std::vector<std::vector<double>> conv_out, y;       // [pos][...]
  std::vector<std::vector<double>> conv_st, scan_st;  // state after pos
};

RefSeq reference(const Shape& s, const Weights& w, const std::vector<std::vector<float>>& rows) {
  RefSeq r;
  const int k1 = s.d_conv - 1;
  const RowLayout L(s);
  std::vector<double> conv(static_cast<size_t>(k1 * s.channels), 0.0);  // [k][c], oldest first
  std::vector<double> h(static_cast<size_t>(s.H * s.P * s.N), 0.0);
  for (const std::vector<float>& row : rows) {
    std::vector<double> co(static_cast<size_t>(s.channels));
    for (int64_t c = 0; c < s.channels; ++c) {
      double acc = s.conv_bias ? w.conv_b[c] : 0.0;
      for (int k = 0; k < s.d_conv; ++k) {
        const double in = k < k1 ? conv[static_cast<size_t>(k * s.channels + c)] : row[L.conv + c];
        acc += static_cast<double>(w.conv_w[c * s.d_conv + k]) * in;
      }
      co[c] = ref_silu(acc);
    }
    // shift the window
    for (int k = 0; k + 1 < k1; ++k)
      for (int64_t c = 0; c < s.channels; ++c)
        conv[static_cast<size_t>(k * s.channels + c)] = conv[static_cast<size_t>((k + 1) * s.channels + c)];
    if (k1 > 0)
      for (int64_t c = 0; c < s.channels; ++c) conv[static_cast<size_t>((k1 - 1) * s.channels + c)] = row[L.conv + c];
    std::vector<double> y(static_cast<size_t>(s.H * s.P));
    for (int64_t hh = 0; hh < s.H; ++hh) {
      const int64_t g = hh / (s.H / s.G);
      const double dt = ref_softplus(static_cast<double>(row[L.dt + hh]) + (s.dt_bias ? w.dt_bias[hh] : 0.0));
      for (int64_t p = 0; p < s.P; ++p) {
        const double xv = row[L.x + hh * s.P + p];
        double acc = 0.0;
        for (int64_t n = 0; n < s.N; ++n) {
          const double a = s.a_per_state ? w.A[hh * s.N + n] : w.A[hh];
          double& st = h[static_cast<size_t>((hh * s.P + p) * s.N + n)];
          st = st * std::exp(dt * a) + dt * xv * row[L.B + g * s.N + n];
          acc += st * row[L.C + g * s.N + n];
        }
        if (s.D) acc += w.D[hh] * xv;
        if (s.z) acc *= ref_silu(row[L.z + hh * s.P + p]);
        y[static_cast<size_t>(hh * s.P + p)] = acc;
      }
    }
    r.conv_out.push_back(co);
    r.y.push_back(y);
    r.conv_st.push_back(conv);
    r.scan_st.push_back(h);
  }
  return r;
}

// The largest error seen by close() of the y outputs and scan states since
// it was last reset (relative to the larger of |want| and 1).
double g_max_err = 0.0;

// got within tolerance of want: 1e-4 relative to the larger of |want| and 1.
bool close(float got, double want, double tol = 1e-4) {
  const double err = std::abs(static_cast<double>(got) - want) / std::max(1.0, std::abs(want));
  g_max_err = std::max(g_max_err, err);
  return err <= tol;
}

// One sequence of the test: its rows, its block table, the rows the kernels
// have computed so far and what they produced.
struct Seq {
  std::vector<std::vector<float>> rows;  // every position's inputs
  std::vector<int32_t> table;
  int64_t done = 0;  // positions computed
  int64_t start = 0;    // first position this sequence computes (a prefix before it is in shared blocks)
  int64_t checked = 0;  // outputs checked against the reference
  std::vector<std::vector<float>> conv_out, y;  // per computed position
  RefSeq ref;
};

// Runs one batch: each (sequence, n) of `step` advances that sequence by n
// rows, in the order given. Both layers' ops run on SSM layer `layer`.
void run_step(Backend& be, HostKvMemory& kv, int layer, const Shape& s, const Weights& w, std::vector<Seq>& seqs,
              const std::vector<std::pair<int, int>>& step) {
  const RowLayout L(s);
  std::vector<int32_t> row0, n_rows, pos0;
  std::vector<const int32_t*> tables;
  std::vector<float> in;
  int32_t m = 0;
  for (auto [i, n] : step) {
    Seq& q = seqs[i];
    row0.push_back(m);
    n_rows.push_back(n);
    pos0.push_back(static_cast<int32_t>(q.done));
    tables.push_back(q.table.data());
    for (int t = 0; t < n; ++t) in.insert(in.end(), q.rows[q.done + t].begin(), q.rows[q.done + t].end());
    m += n;
  }
  SsmBatch b;
  b.n_seqs = static_cast<int32_t>(step.size());
  b.row0 = row0.data();
  b.n_rows = n_rows.data();
  b.pos0 = pos0.data();
  b.table = tables.data();
  std::vector<float> conv_out(static_cast<size_t>(m * s.channels), -7.0f);
  be.ssm_conv(kv, layer, b, in.data() + L.conv, L.width, s.channels, s.d_conv, w.conv_w.data(),
              s.conv_bias ? w.conv_b.data() : nullptr, conv_out.data());
  std::vector<float> y(static_cast<size_t>(m * s.H * s.P), -7.0f);
  SsmScanParams p;
  p.n_head = s.H;
  p.head_dim = s.P;
  p.d_state = s.N;
  p.n_group = s.G;
  p.x = in.data() + L.x;
  p.x_stride = L.width;
  p.dt = in.data() + L.dt;
  p.dt_stride = L.width;
  p.B = in.data() + L.B;
  p.b_stride = L.width;
  p.C = in.data() + L.C;
  p.c_stride = L.width;
  if (s.z) {
    p.z = in.data() + L.z;
    p.z_stride = L.width;
  }
  p.y = y.data();
  p.dt_bias = s.dt_bias ? w.dt_bias.data() : nullptr;
  p.A = w.A.data();
  p.a_per_state = s.a_per_state;
  p.D = s.D ? w.D.data() : nullptr;
  be.ssm_scan(kv, layer, b, p);
  for (size_t k = 0; k < step.size(); ++k) {
    Seq& q = seqs[step[k].first];
    for (int t = 0; t < step[k].second; ++t) {
      const int64_t r = row0[k] + t;
      q.conv_out.emplace_back(conv_out.begin() + r * s.channels, conv_out.begin() + (r + 1) * s.channels);
      q.y.emplace_back(y.begin() + r * s.H * s.P, y.begin() + (r + 1) * s.H * s.P);
    }
    q.done += step[k].second;
  }
}

// The outputs of every sequence not checked yet, and its snapshots, against
// the reference: every full block the sequence computed, and its running
// block. (Counts mismatches, then one REQUIRE: Catch per element is slow.)
void check_against_reference(const HostKvMemory& kv, int layer, const Shape& s, std::vector<Seq>& seqs, int bs,
                             double tol = 1e-4) {
  const int64_t conv_elems = (s.d_conv - 1) * s.channels, scan_elems = s.H * s.P * s.N;
  for (size_t i = 0; i < seqs.size(); ++i) {
    Seq& q = seqs[i];
    std::string first;
    int64_t bad = 0;
    auto note = [&](const char* what, int64_t pos, int64_t e, float got, double want) {
      if (bad++ == 0)
        first = std::string(what) + " pos " + std::to_string(pos) + " elem " + std::to_string(e) + ": got " +
                std::to_string(got) + " want " + std::to_string(want);
    };
    for (int64_t t = q.checked; t < static_cast<int64_t>(q.conv_out.size()); ++t) {
      const int64_t pos = q.start + t;
      for (int64_t c = 0; c < s.channels; ++c)
        if (!close(q.conv_out[t][c], q.ref.conv_out[pos][c])) note("conv out", pos, c, q.conv_out[t][c], q.ref.conv_out[pos][c]);
      for (int64_t j = 0; j < s.H * s.P; ++j)
        if (!close(q.y[t][j], q.ref.y[pos][j], tol)) note("y", pos, j, q.y[t][j], q.ref.y[pos][j]);
    }
    q.checked = static_cast<int64_t>(q.conv_out.size());
    if (q.done > 0) {
      std::vector<int64_t> snaps;
      for (int64_t p = bs - 1; p < q.done; p += bs)
        if (p >= q.start) snaps.push_back(p);
      if (q.done % bs != 0) snaps.push_back(q.done - 1);
      for (int64_t p : snaps) {
        const float* st = kv.ssm_state(layer, q.table[p / bs]);
        for (int64_t e = 0; e < conv_elems; ++e)
          if (!close(st[e], q.ref.conv_st[p][e])) note("conv state after", p, e, st[e], q.ref.conv_st[p][e]);
        for (int64_t e = 0; e < scan_elems; ++e)
          if (!close(st[conv_elems + e], q.ref.scan_st[p][e], tol))
            note("scan state after", p, e, st[conv_elems + e], q.ref.scan_st[p][e]);
      }
    }
    INFO("sequence " << i << " at " << q.done << ": " << bad << " mismatches, the first " << first);
    REQUIRE(bad == 0);
  }
}

KvLayout ssm_layout(const Shape& s, int bs, int n_blocks) {
  KvLayout l;
  l.n_layers = 0;
  l.block_size = bs;
  l.n_blocks = n_blocks;
  l.n_ssm_layers = 2;
  l.ssm_conv_elems = (s.d_conv - 1) * s.channels;
  l.ssm_state_elems = s.H * s.P * s.N;
  return l;
}

const Shape kShapes[] = {
    // Mamba-1: head_dim 1, A per state, one group, conv over x only.
    {"mamba1", 40, 4, 40, 1, 16, 1, true, true, true, true, true},
    {"mamba1 no z/D/biases, d_state 5", 12, 4, 12, 1, 5, 1, true, false, false, false, false},
    // Mamba-2: scalar A, head_dim 16..64, conv over x, B and C.
    {"mamba2 1 group", 4 * 16 + 2 * 32, 4, 4, 16, 32, 1, false, true, true, true, true},
    {"mamba2 2 groups, head_dim 64, d_state 128", 2 * 64 + 2 * 2 * 128, 4, 2, 64, 128, 2, false, false, true,
     true, true},
    {"mamba2 2 groups, d_state 20, d_conv 2", 4 * 24 + 2 * 2 * 20, 2, 4, 24, 20, 2, false, true, false, false,
     false},
};

// Builds the sequences (lengths `lens`, blocks from a shuffled pool), their
// inputs and reference.
std::vector<Seq> make_seqs(const Shape& s, const Weights& w, const std::vector<int>& lens, int bs, int n_blocks,
                           unsigned seed) {
  std::mt19937 rng(seed);
  const RowLayout L(s);
  std::vector<int32_t> ids(static_cast<size_t>(n_blocks));
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), rng);
  size_t next = 0;
  std::vector<Seq> seqs(lens.size());
  for (size_t i = 0; i < lens.size(); ++i) {
    Seq& q = seqs[i];
    for (int p = 0; p < lens[i]; ++p) {
      std::vector<float> row = randoms(static_cast<size_t>(L.width), -1.0f, 1.0f, rng);
      for (int64_t h = 0; h < s.H; ++h) row[L.dt + h] = std::uniform_real_distribution<float>(-3.0f, 1.5f)(rng);
      q.rows.push_back(row);
    }
    for (int k = 0; k < (lens[i] + bs - 1) / bs; ++k) q.table.push_back(ids.at(next++));
    q.ref = reference(s, w, q.rows);
  }
  return seqs;
}

// A schedule: the batches, each a list of (sequence, rows).
using Schedule = std::vector<std::vector<std::pair<int, int>>>;

Schedule one_run(const std::vector<int>& lens) {
  Schedule sc(1);
  for (size_t i = 0; i < lens.size(); ++i) sc[0].push_back({static_cast<int>(i), lens[i]});
  std::reverse(sc[0].begin(), sc[0].end());  // rows need not follow the sequences' order
  return sc;
}

Schedule token_by_token(const std::vector<int>& lens) {
  Schedule sc;
  for (int t = 0;; ++t) {
    std::vector<std::pair<int, int>> step;
    for (size_t i = 0; i < lens.size(); ++i)
      if (t < lens[i]) step.push_back({static_cast<int>(i), 1});
    if (step.empty()) break;
    sc.push_back(step);
  }
  return sc;
}

// Chunks of pseudo-random sizes 1..max_chunk, a random subset of the
// unfinished sequences in each batch, in a random order: prefill chunks and
// single decode rows mixed.
Schedule chunked(const std::vector<int>& lens, int max_chunk, unsigned seed) {
  std::mt19937 rng(seed);
  std::vector<int> left(lens);
  Schedule sc;
  for (;;) {
    std::vector<std::pair<int, int>> step;
    for (size_t i = 0; i < lens.size(); ++i) {
      if (left[i] == 0 || rng() % 3 == 0) continue;
      const int n = std::min<int>(left[i], 1 + static_cast<int>(rng() % max_chunk));
      step.push_back({static_cast<int>(i), n});
      left[i] -= n;
    }
    if (step.empty()) {
      if (std::all_of(left.begin(), left.end(), [](int v) { return v == 0; })) break;
      continue;
    }
    std::shuffle(step.begin(), step.end(), rng);
    sc.push_back(step);
  }
  return sc;
}

struct Outcome {
  std::vector<std::vector<std::vector<float>>> conv_out, y;  // [seq][pos]
  std::vector<std::vector<float>> states;                    // [seq] the running state's block
};

Outcome run_schedule(Backend& be, const Shape& s, const Weights& w, const std::vector<int>& lens, int bs,
                     const Schedule& sc, unsigned seed, double tol = 1e-4) {
  const int n_blocks = 200;
  HostKvMemory kv(ssm_layout(s, bs, n_blocks), n_blocks);
  // Garbage in every block: nothing may read a state that was not written.
  for (int blk = 0; blk < n_blocks; ++blk)
    for (int l = 0; l < 2; ++l) {
      float* st = kv.ssm_state(l, blk);
      for (size_t e = 0; e < kv.layout().ssm_layer_floats(); ++e) st[e] = 1e3f + static_cast<float>(e % 7);
    }
  std::vector<Seq> seqs = make_seqs(s, w, lens, bs, n_blocks, seed);
  for (const auto& step : sc) {
    run_step(be, kv, 1, s, w, seqs, step);
    check_against_reference(kv, 1, s, seqs, bs, tol);
  }
  Outcome o;
  for (const Seq& q : seqs) {
    REQUIRE(q.done == static_cast<int64_t>(q.rows.size()));
    o.conv_out.push_back(q.conv_out);
    o.y.push_back(q.y);
    const float* st = kv.ssm_state(1, q.table[(q.done - 1) / bs]);
    o.states.emplace_back(st, st + kv.layout().ssm_layer_floats());
  }
  // Layer 0 was never named: its state is untouched.
  for (int blk = 0; blk < n_blocks; ++blk) REQUIRE(kv.ssm_state(0, blk)[3] == 1e3f + 3.0f);
  return o;
}

bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

void require_same(const Outcome& a, const Outcome& b) {
  REQUIRE(a.y.size() == b.y.size());
  for (size_t i = 0; i < a.y.size(); ++i) {
    INFO("sequence " << i);
    REQUIRE(a.y[i].size() == b.y[i].size());
    for (size_t t = 0; t < a.y[i].size(); ++t) {
      INFO("position " << t);
      REQUIRE(bitwise_equal(a.conv_out[i][t], b.conv_out[i][t]));
      REQUIRE(bitwise_equal(a.y[i][t], b.y[i][t]));
    }
    REQUIRE(bitwise_equal(a.states[i], b.states[i]));
  }
}

}  // namespace

TEST_CASE("ssm ops: conv and scan match the reference, one run, chunks and token by token agree bitwise",
          "[ssm_ops]") {
  ThreadPool pool(2);
  std::unique_ptr<Backend> be = make_cpu_backend(pool);
  SsdMin recurrence(INT64_MAX);  // the recurrence only: SSD sums in another order
  const std::vector<int> lens{37, 5, 16, 1, 23, 9};
  for (cpu::Isa isa : isas()) {
    IsaCap cap(isa);
    for (const Shape& s : kShapes) {
      for (int bs : {4, 16}) {
        INFO("isa " << cpu::isa_name(isa) << ", " << s.name << ", block size " << bs);
        std::mt19937 rng(1234 + bs);
        const Weights w = make_weights(s, rng);
        const Outcome whole = run_schedule(*be, s, w, lens, bs, one_run(lens), 99);
        const Outcome tokens = run_schedule(*be, s, w, lens, bs, token_by_token(lens), 99);
        const Outcome chunks = run_schedule(*be, s, w, lens, bs, chunked(lens, 2 * bs + 3, 7 + bs), 99);
        require_same(whole, tokens);
        require_same(whole, chunks);
      }
    }
  }
}

// The SSD form of Mamba-2 scans (every run of 2 rows or more within a block;
// single rows take the recurrence): outputs and every snapshot against the
// double reference at 2e-5, one run, chunks, token by token, and one run
// against the recurrence. Block sizes 4 .. 200 (runs within a block, across
// blocks, SSD chunks of 64 that do not divide the run, runs of 150 rows).
// Prints the largest relative error seen.
TEST_CASE("ssm ops: Mamba-2 SSD form matches the reference and the recurrence to rounding", "[ssm_ops]") {
  ThreadPool pool(2);
  std::unique_ptr<Backend> be = make_cpu_backend(pool);
  const std::vector<int> lens{150, 5, 16, 1, 71, 9};
  const double tol = 2e-5;
  for (cpu::Isa isa : isas()) {
    IsaCap cap(isa);
    for (const Shape& s : kShapes) {
      if (s.a_per_state) continue;
      for (int bs : {4, 16, 200}) {
        INFO("isa " << cpu::isa_name(isa) << ", " << s.name << ", block size " << bs);
        std::mt19937 rng(77 + bs);
        const Weights w = make_weights(s, rng);
        Outcome rec;
        {
          SsdMin off(INT64_MAX);
          rec = run_schedule(*be, s, w, lens, bs, one_run(lens), 5);
        }
        SsdMin on(2);
        g_max_err = 0.0;
        const Outcome whole = run_schedule(*be, s, w, lens, bs, one_run(lens), 5, tol);
        run_schedule(*be, s, w, lens, bs, token_by_token(lens), 5, tol);
        run_schedule(*be, s, w, lens, bs, chunked(lens, 2 * bs + 3, 11 + bs), 5, tol);
        WARN("SSD " << cpu::isa_name(isa) << ", " << s.name << ", block size " << bs
                    << ": largest relative error against the double reference " << g_max_err);
        // Not bitwise the recurrence (the test would be vacuous if SSD did
        // not run), but within rounding of it.
        bool differs = false;
        double worst = 0.0;
        for (size_t i = 0; i < whole.y.size(); ++i)
          for (size_t t = 0; t < whole.y[i].size(); ++t)
            for (size_t k = 0; k < whole.y[i][t].size(); ++k) {
              const double a = whole.y[i][t][k], b = rec.y[i][t][k];
              differs |= a != b;
              worst = std::max(worst, std::abs(a - b) / std::max(1.0, std::abs(b)));
            }
        REQUIRE(differs);
        REQUIRE(worst <= tol);
      }
    }
  }
}

TEST_CASE("ssm ops: a sequence continues from a prefix another sequence computed (shared full blocks)",
          "[ssm_ops]") {
  ThreadPool pool(2);
  std::unique_ptr<Backend> be = make_cpu_backend(pool);
  for (cpu::Isa isa : isas()) {
    IsaCap cap(isa);
    for (const Shape& s : {kShapes[0], kShapes[2]}) {
      const int bs = 4, n_blocks = 64;
      INFO("isa " << cpu::isa_name(isa) << ", " << s.name);
      std::mt19937 rng(5);
      const Weights w = make_weights(s, rng);
      HostKvMemory kv(ssm_layout(s, bs, n_blocks), n_blocks);
      std::vector<Seq> seqs = make_seqs(s, w, {19, 19}, bs, n_blocks, 17);
      // Sequence 1 shares sequence 0's first 3 blocks (12 positions, the
      // same inputs) and computes from position 12 on, reading the snapshot
      // of block 2.
      for (int p = 0; p < 12; ++p) seqs[1].rows[p] = seqs[0].rows[p];
      seqs[1].ref = reference(s, w, seqs[1].rows);
      for (int k = 0; k < 3; ++k) seqs[1].table[k] = seqs[0].table[k];
      seqs[1].done = seqs[1].start = 12;
      run_step(*be, kv, 0, s, w, seqs, {{0, 13}});  // 0 writes blocks 0..3 (3 full)
      check_against_reference(kv, 0, s, seqs, bs);
      run_step(*be, kv, 0, s, w, seqs, {{1, 2}, {0, 2}});  // both continue; 1 does not touch the shared blocks
      check_against_reference(kv, 0, s, seqs, bs);
      run_step(*be, kv, 0, s, w, seqs, {{1, 5}, {0, 4}});
      check_against_reference(kv, 0, s, seqs, bs);
      // The shared blocks still hold sequence 0's snapshots.
      const int64_t ce = kv.layout().ssm_conv_elems;
      for (int k = 0; k < 3; ++k) {
        const float* st = kv.ssm_state(0, seqs[0].table[k]);
        const int64_t p = (k + 1) * bs - 1;
        REQUIRE(close(st[ce], seqs[0].ref.scan_st[p][0]));
      }
    }
  }
}

TEST_CASE("ssm ops: rms_norm_groups follows its formula, strided and in place", "[ssm_ops]") {
  ThreadPool pool(2);
  std::unique_ptr<Backend> be = make_cpu_backend(pool);
  std::mt19937 rng(3);
  for (cpu::Isa isa : isas()) {
    IsaCap cap(isa);
    for (auto [m, G, gs, stride] : std::vector<std::tuple<int64_t, int64_t, int64_t, int64_t>>{
             {5, 1, 48, 60}, {3, 4, 96, 384}, {7, 8, 13, 120}, {1, 1, 16, 16}}) {
      INFO("isa " << cpu::isa_name(isa) << " m " << m << " groups " << G << " x " << gs);
      std::vector<float> x = randoms(static_cast<size_t>(m * stride), -2.0f, 2.0f, rng);
      const std::vector<float> wt = randoms(static_cast<size_t>(G * gs), 0.5f, 1.5f, rng);
      std::vector<float> y(static_cast<size_t>(m * G * gs), -9.0f);
      be->rms_norm_groups(x.data(), stride, wt.data(), m, G, gs, 1e-5f, y.data());
      for (int64_t r = 0; r < m; ++r)
        for (int64_t g = 0; g < G; ++g) {
          double ss = 0;
          for (int64_t i = 0; i < gs; ++i) ss += static_cast<double>(x[r * stride + g * gs + i]) * x[r * stride + g * gs + i];
          const double inv = 1.0 / std::sqrt(ss / static_cast<double>(gs) + 1e-5);
          for (int64_t i = 0; i < gs; ++i)
            REQUIRE(close(y[r * G * gs + g * gs + i], x[r * stride + g * gs + i] * inv * wt[g * gs + i], 1e-5));
        }
      if (stride == G * gs) {  // in place
        be->rms_norm_groups(x.data(), stride, wt.data(), m, G, gs, 1e-5f, x.data());
        REQUIRE(bitwise_equal(x, y));
      }
    }
  }
}

TEST_CASE("ssm ops: bad layers, sizes and released blocks are errors", "[ssm_ops]") {
  ThreadPool pool(2);
  std::unique_ptr<Backend> be = make_cpu_backend(pool);
  const Shape& s = kShapes[0];
  std::mt19937 rng(11);
  const Weights w = make_weights(s, rng);
  HostKvMemory kv(ssm_layout(s, 4, 8), 8);
  const RowLayout L(s);
  std::vector<float> in = randoms(static_cast<size_t>(3 * L.width), -1, 1, rng), out(3 * 64 * 64);
  const int32_t row0 = 0, n3 = 3, pos0 = 0, pos5 = 5;
  const int32_t table[] = {0, 1};
  const int32_t released[] = {-1, 1};
  const int32_t* tab = table;
  const int32_t* rel = released;
  SsmBatch b{1, &row0, &n3, &pos0, &tab};
  SsmScanParams p;
  p.n_head = s.H;
  p.head_dim = 1;
  p.d_state = s.N;
  p.x = p.dt = p.B = p.C = in.data();
  p.x_stride = p.dt_stride = p.b_stride = p.c_stride = L.width;
  p.y = out.data();
  p.A = w.A.data();
  auto conv = [&](int layer, const SsmBatch& bb, int64_t ch, int dc) {
    be->ssm_conv(kv, layer, bb, in.data(), L.width, ch, dc, w.conv_w.data(), nullptr, out.data());
  };
  REQUIRE_NOTHROW(conv(0, b, s.channels, s.d_conv));
  REQUIRE_NOTHROW(be->ssm_scan(kv, 1, b, p));
  REQUIRE_THROWS_AS(conv(2, b, s.channels, s.d_conv), Error);
  REQUIRE_THROWS_AS(conv(-1, b, s.channels, s.d_conv), Error);
  REQUIRE_THROWS_AS(conv(0, b, s.channels - 1, s.d_conv), Error);
  REQUIRE_THROWS_AS(conv(0, b, s.channels, s.d_conv + 1), Error);
  REQUIRE_THROWS_AS(conv(0, b, s.channels, 0), Error);
  SsmScanParams bad = p;
  bad.d_state = s.N + 1;
  REQUIRE_THROWS_AS(be->ssm_scan(kv, 0, b, bad), Error);
  bad = p;
  bad.n_group = 3;  // 40 heads do not split into 3 groups
  REQUIRE_THROWS_AS(be->ssm_scan(kv, 0, b, bad), Error);
  bad = p;
  bad.n_head = 0;
  REQUIRE_THROWS_AS(be->ssm_scan(kv, 0, b, bad), Error);
  // Positions 5..7 read the state of position 4 from block 1 and write block
  // 1: a released block 0 is not touched. Positions 0..2 write into the
  // released block: an error.
  const SsmBatch later{1, &row0, &n3, &pos5, &rel};
  REQUIRE_NOTHROW(conv(0, later, s.channels, s.d_conv));
  REQUIRE_NOTHROW(be->ssm_scan(kv, 0, later, p));
  const SsmBatch from_released{1, &row0, &n3, &pos0, &rel};
  REQUIRE_THROWS_AS(conv(0, from_released, s.channels, s.d_conv), Error);
  REQUIRE_THROWS_AS(be->ssm_scan(kv, 0, from_released, p), Error);
  const int32_t n0 = 0;
  const SsmBatch empty{1, &row0, &n0, &pos0, &tab};
  REQUIRE_THROWS_AS(conv(0, empty, s.channels, s.d_conv), Error);
}
