// The MPI communicator (lib/dist/comm_mpi.cpp) across real processes. Run by CTest as
//   mpirun --allow-run-as-root --oversubscribe -np 3 comm_mpi_test            (shared memory)
//   mpirun ... --mca btl tcp,self -np 3 comm_mpi_test                         (TCP, two nodes' stand-in)
//   comm_mpi_test                                                              (a singleton, no mpirun)
//   mpirun ... -np 2 comm_mpi_test --host-init                                 (the host starts MPI)
// It checks, on every rank: all-reduce f32 and bf16 (exact sums, bf16 rounded to nearest
// even, the same bits on every rank), all-gather (also in place), broadcast from each root,
// barrier, 16 MB buffers, the statistics, a host communicator (MPI_Comm_split's halves
// handed in), and the timeout (one rank skips a collective: the others fail within
// [timeout, timeout + 2 s] with the message, and later calls fail at once).
// A failed check prints "comm_mpi_test: rank R: FAIL ..." and ends the job (MPI_Abort).
//
//   comm_mpi_test --bench [--reps N]: all-reduce latency and bandwidth, 4 KB .. 16 MB f32
//   (the communicator's non-blocking path against a plain blocking MPI_Allreduce), printed
//   by rank 0.
#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "dist/comm.h"

using namespace infer;
using Clock = std::chrono::steady_clock;

namespace {

int g_rank = 0;
int g_checks = 0;

#define EXPECT(cond, ...)                                                              \
  do {                                                                                 \
    ++g_checks;                                                                        \
    if (!(cond)) {                                                                     \
      std::fprintf(stderr, "comm_mpi_test: rank %d: FAIL %s:%d: %s: ", g_rank, __FILE__, __LINE__, #cond); \
      std::fprintf(stderr, __VA_ARGS__);                                               \
      std::fprintf(stderr, "\n");                                                      \
      std::fflush(stderr);                                                             \
      MPI_Abort(MPI_COMM_WORLD, 1);                                                    \
    }                                                                                  \
  } while (0)

#define EXPECT_OK(comm, expr)                                                                       \
  do {                                                                                              \
    Status s_ = (expr);                                                                             \
    EXPECT(s_ == Status::Ok, "%s returned %d: %s", #expr, static_cast<int>(s_), (comm).last_error().c_str()); \
  } while (0)

double ms_since(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

uint16_t bf16(float f) {  // exact for the values used here
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return static_cast<uint16_t>(u >> 16);
}

// Every rank holds the same bytes (an all-gather of them compared).
void expect_same_everywhere(Communicator& c, const void* data, size_t bytes, const char* what) {
  std::vector<char> all(bytes * c.size());
  EXPECT_OK(c, c.all_gather(data, bytes, all.data()));
  for (int r = 1; r < c.size(); ++r) {
    EXPECT(std::memcmp(all.data(), all.data() + r * bytes, bytes) == 0, "%s differs between rank 0 and rank %d", what, r);
  }
}

void test_collectives(Communicator& c, const char* label) {
  const int n = c.size(), me = c.rank();
  const CommStats before = c.stats();
  uint64_t calls = 0, bytes = 0;

  // f32 sum: (r + 1) * (i % 1000) / 2 summed over ranks is exact.
  std::vector<float> f(10000);
  for (size_t i = 0; i < f.size(); ++i) f[i] = (me + 1) * static_cast<float>(i % 1000) * 0.5f;
  EXPECT_OK(c, c.all_reduce_sum_f32(f.data(), f.size()));
  calls += 1, bytes += f.size() * 4;
  const float tri = n * (n + 1) / 2.0f;
  for (size_t i = 0; i < f.size(); ++i) {
    const float want = static_cast<float>(i % 1000) * 0.5f * tri;
    EXPECT(f[i] == want, "%s: f32 sum [%zu] = %g, want %g", label, i, f[i], want);
  }

  // bf16 sum: small integers are exact.
  std::vector<uint16_t> h(4096);
  for (size_t i = 0; i < h.size(); ++i) h[i] = bf16(static_cast<float>((me + 1) * (i % 16)));
  EXPECT_OK(c, c.all_reduce_sum_bf16(h.data(), h.size()));
  calls += 1, bytes += h.size() * 2;
  for (size_t i = 0; i < h.size(); ++i) {
    const uint16_t want = bf16(static_cast<float>((i % 16) * tri));
    EXPECT(h[i] == want, "%s: bf16 sum [%zu] = 0x%04x, want 0x%04x", label, i, h[i], want);
  }
  // Rounding to nearest even: 1.0078125 (0x3f81, odd) + 2^-8 lies halfway between 0x3f81
  // and 0x3f82: even is 0x3f82 (truncating gives 0x3f81). 1.0 + 2^-8: halfway, 0x3f80 is
  // even. Ranks past the second add zeros (exact).
  if (n >= 2) {
    uint16_t r[2] = {0, 0};
    if (me == 0) r[0] = 0x3f81, r[1] = 0x3f80;
    if (me == 1) r[0] = 0x3b80, r[1] = 0x3b80;  // 2^-8
    EXPECT_OK(c, c.all_reduce_sum_bf16(r, 2));
    calls += 1, bytes += 4;
    EXPECT(r[0] == 0x3f82, "%s: bf16 tie 0x3f81 + 2^-8 = 0x%04x, want 0x3f82 (nearest even)", label, r[0]);
    EXPECT(r[1] == 0x3f80, "%s: bf16 tie 0x3f80 + 2^-8 = 0x%04x, want 0x3f80 (nearest even)", label, r[1]);
  }
  // Rounded partial sums: whatever they are, every rank has the same bits.
  std::vector<uint16_t> frac(2048);
  for (size_t i = 0; i < frac.size(); ++i) frac[i] = bf16(1.0f / static_cast<float>(i + 1 + me));
  EXPECT_OK(c, c.all_reduce_sum_bf16(frac.data(), frac.size()));
  calls += 1, bytes += frac.size() * 2;
  expect_same_everywhere(c, frac.data(), frac.size() * 2, "the bf16 sum");
  calls += 1, bytes += frac.size() * 2;

  // all-gather: rank r's 1000 bytes are r + 1; in place too.
  std::vector<unsigned char> send(1000, static_cast<unsigned char>(me + 1)), recv(1000 * n, 0);
  EXPECT_OK(c, c.all_gather(send.data(), send.size(), recv.data()));
  calls += 1, bytes += 1000;
  for (int r = 0; r < n; ++r) {
    for (size_t i = 0; i < 1000; ++i) {
      EXPECT(recv[r * 1000 + i] == r + 1, "%s: all-gather part %d byte %zu = %d", label, r, i, recv[r * 1000 + i]);
    }
  }
  std::vector<unsigned char> inplace(1000 * n, 0);
  std::fill(inplace.begin() + me * 1000, inplace.begin() + (me + 1) * 1000, static_cast<unsigned char>(100 + me));
  EXPECT_OK(c, c.all_gather(inplace.data() + me * 1000, 1000, inplace.data()));
  calls += 1, bytes += 1000;
  for (int r = 0; r < n; ++r) EXPECT(inplace[r * 1000 + 999] == 100 + r, "%s: in-place all-gather part %d", label, r);

  // broadcast from every root.
  for (int root = 0; root < n; ++root) {
    std::vector<int> b(777, -1);
    if (me == root) {
      for (size_t i = 0; i < b.size(); ++i) b[i] = root * 7 + static_cast<int>(i);
    }
    EXPECT_OK(c, c.broadcast(b.data(), b.size() * sizeof(int), root));
    calls += 1, bytes += b.size() * sizeof(int);
    for (size_t i = 0; i < b.size(); ++i) {
      EXPECT(b[i] == root * 7 + static_cast<int>(i), "%s: broadcast from %d [%zu] = %d", label, root, i, b[i]);
    }
  }
  // A root outside the group: an argument error, and the communicator stays usable.
  int dummy = 0;
  EXPECT(c.broadcast(&dummy, sizeof dummy, n) == Status::InvalidArgument, "%s: broadcast from rank %d", label, n);
  EXPECT(c.last_error().find("broadcast from rank") != std::string::npos, "%s: message %s", label, c.last_error().c_str());
  EXPECT_OK(c, c.barrier());
  calls += 1;

  // 16 MB: f32 (exact sums of small integers), bf16 and an all-gather of 16 MB in all.
  std::vector<float> big(4u << 20);
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<float>((i + me) % 64);
  EXPECT_OK(c, c.all_reduce_sum_f32(big.data(), big.size()));
  calls += 1, bytes += big.size() * 4;
  for (size_t i = 0; i < big.size(); i += 4099) {
    float want = 0;
    for (int r = 0; r < n; ++r) want += static_cast<float>((i + r) % 64);
    EXPECT(big[i] == want, "%s: 16 MB f32 sum [%zu] = %g, want %g", label, i, big[i], want);
  }
  EXPECT(big.back() == [&] { float w = 0; for (int r = 0; r < n; ++r) w += static_cast<float>((big.size() - 1 + r) % 64); return w; }(),
         "%s: 16 MB f32 sum, last value %g", label, big.back());
  std::vector<uint16_t> bigh(8u << 20);
  for (size_t i = 0; i < bigh.size(); ++i) bigh[i] = bf16(static_cast<float>(i % 8));
  EXPECT_OK(c, c.all_reduce_sum_bf16(bigh.data(), bigh.size()));
  calls += 1, bytes += bigh.size() * 2;
  for (size_t i = 0; i < bigh.size(); i += 4097) {
    EXPECT(bigh[i] == bf16(static_cast<float>((i % 8) * n)), "%s: 16 MB bf16 sum [%zu] = 0x%04x", label, i, bigh[i]);
  }
  const size_t part = (16u << 20) / n;
  std::vector<unsigned char> gsend(part, static_cast<unsigned char>(0xa0 + me)), grecv(part * n);
  EXPECT_OK(c, c.all_gather(gsend.data(), part, grecv.data()));
  calls += 1, bytes += part;
  for (int r = 0; r < n; ++r) EXPECT(grecv[r * part + part / 2] == 0xa0 + r, "%s: 16 MB all-gather part %d", label, r);

  // Statistics: every collective counted with its payload; the argument error is not.
  const CommStats& after = c.stats();
  EXPECT(after.calls - before.calls == calls, "%s: stats counted %llu calls, want %llu", label,
         static_cast<unsigned long long>(after.calls - before.calls), static_cast<unsigned long long>(calls));
  EXPECT(after.bytes - before.bytes == bytes, "%s: stats counted %llu bytes, want %llu", label,
         static_cast<unsigned long long>(after.bytes - before.bytes), static_cast<unsigned long long>(bytes));
  EXPECT(after.seconds > before.seconds, "%s: stats counted no time", label);
}

// One rank skips an all-reduce and sleeps: the others fail within [timeout, timeout + 2 s].
void test_timeout(Communicator& c) {
  const int n = c.size(), me = c.rank();
  const int skipper = n - 1;
  const int64_t timeout = 1000;
  EXPECT_OK(c, c.barrier());  // with the long timeout: a loaded machine may start ranks late
  c.set_timeout_ms(timeout);
  std::vector<float> v(256, 1.0f);
  if (me == skipper) {
    std::this_thread::sleep_for(std::chrono::milliseconds(timeout + 1500));
  } else {
    auto t0 = Clock::now();
    Status s = c.all_reduce_sum_f32(v.data(), v.size());
    const double took = ms_since(t0);
    EXPECT(s == Status::Backend, "a skipped all-reduce returned %d", static_cast<int>(s));
    EXPECT(took >= timeout && took <= timeout + 2000, "the timeout came after %.0f ms (timeout %lld ms)", took,
           static_cast<long long>(timeout));
    const std::string want = "tensor parallel: all-reduce of 1024 bytes on rank " + std::to_string(me) +
                             " timed out after 1000 ms (a rank died, hung or is out of step)";
    EXPECT(c.last_error() == want, "message \"%s\", want \"%s\"", c.last_error().c_str(), want.c_str());
    // Broken: every later call fails at once, with the same message.
    for (int k = 0; k < 4; ++k) {
      t0 = Clock::now();
      Status s2 = k == 0 ? c.all_reduce_sum_f32(v.data(), v.size())
                : k == 1 ? c.barrier()
                : k == 2 ? c.broadcast(v.data(), 16, 0)
                         : c.all_gather(v.data(), 4, v.data());
      EXPECT(s2 == Status::Backend, "call %d after the timeout returned %d", k, static_cast<int>(s2));
      EXPECT(ms_since(t0) < 50, "call %d after the timeout took %.1f ms", k, ms_since(t0));
      EXPECT(c.last_error() == want, "call %d after the timeout: \"%s\"", k, c.last_error().c_str());
    }
    std::printf("comm_mpi_test: rank %d: timeout after %.0f ms: %s\n", me, took, c.last_error().c_str());
  }
  if (me == skipper) {
    // Late: it completes the others' abandoned all-reduce (they progress it in the
    // barrier below), so that the job ends cleanly.
    c.set_timeout_ms(20000);
    EXPECT_OK(c, c.all_reduce_sum_f32(v.data(), v.size()));
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

void bench(int reps_arg) {
  auto comm = make_mpi_comm();
  comm->set_timeout_ms(60000);
  const int me = comm->rank();
  MPI_Comm raw;
  MPI_Comm_dup(MPI_COMM_WORLD, &raw);
  if (me == 0) {
    std::printf("all-reduce f32, %d ranks (median of reps; bus bandwidth = 2(N-1)/N * bytes / time)\n", comm->size());
    std::printf("%10s %6s %14s %14s %12s %12s\n", "bytes", "reps", "comm us", "MPI_Allreduce", "comm GB/s", "busbw GB/s");
  }
  // 8 KB: one TinyLlama token's all-reduce (n_embd 2048 x 4 bytes); 256 KB: 32 of them.
  for (size_t bytes : {size_t{4} << 10, size_t{8} << 10, size_t{16} << 10, size_t{64} << 10, size_t{256} << 10,
                       size_t{1} << 20, size_t{4} << 20, size_t{16} << 20}) {
    const size_t n = bytes / 4;
    std::vector<float> buf(n, 1.0f);
    int reps = reps_arg > 0 ? reps_arg : static_cast<int>(std::clamp<size_t>((64u << 20) / bytes, 20, 2000));
    std::vector<double> t_comm, t_raw;
    for (int k = 0; k < 5; ++k) {  // warm-up
      comm->all_reduce_sum_f32(buf.data(), n);
      MPI_Allreduce(MPI_IN_PLACE, buf.data(), static_cast<int>(n), MPI_FLOAT, MPI_SUM, raw);
    }
    for (int k = 0; k < reps; ++k) {  // interleaved
      std::fill(buf.begin(), buf.end(), 1.0f);
      MPI_Barrier(raw);
      auto t0 = Clock::now();
      Status s = comm->all_reduce_sum_f32(buf.data(), n);
      t_comm.push_back(ms_since(t0) * 1000);
      if (s != Status::Ok) {
        std::fprintf(stderr, "bench: %s\n", comm->last_error().c_str());
        MPI_Abort(MPI_COMM_WORLD, 1);
      }
      MPI_Barrier(raw);
      t0 = Clock::now();
      MPI_Allreduce(MPI_IN_PLACE, buf.data(), static_cast<int>(n), MPI_FLOAT, MPI_SUM, raw);
      t_raw.push_back(ms_since(t0) * 1000);
    }
    std::sort(t_comm.begin(), t_comm.end());
    std::sort(t_raw.begin(), t_raw.end());
    const double mc = t_comm[t_comm.size() / 2], mr = t_raw[t_raw.size() / 2];
    const int N = comm->size();
    if (me == 0) {
      std::printf("%10zu %6d %14.1f %14.1f %12.3f %12.3f\n", bytes, reps, mc, mr, bytes / mc / 1e3,
                  2.0 * (N - 1) / N * bytes / mc / 1e3);
    }
  }
  MPI_Comm_free(&raw);
}

}  // namespace

int main(int argc, char** argv) {
  bool host_init = false, do_bench = false;
  int reps = 0;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--host-init") host_init = true;
    else if (a == "--bench") do_bench = true;
    else if (a == "--reps" && i + 1 < argc) reps = std::atoi(argv[++i]);
    else {
      std::fprintf(stderr, "usage: %s [--host-init] [--bench [--reps N]]\n", argv[0]);
      return 2;
    }
  }
  if (!mpi_built()) {
    std::printf("SKIPPED: this build has no MPI\n");
    return 77;
  }
  if (host_init) {
    // The host starts MPI (and finalizes it): the library must neither start nor end it.
    int provided = 0;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED, &provided);
  }
  if (do_bench) {
    bench(reps);
    return 0;
  }
  std::unique_ptr<Communicator> world;
  try {
    world = make_mpi_comm();
  } catch (const Error& e) {
    std::fprintf(stderr, "comm_mpi_test: make_mpi_comm: %s\n", e.what());
    return 1;
  }
  MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
  int world_size = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &world_size);
  EXPECT(std::string(world->name()) == "mpi", "name %s", world->name());
  EXPECT(world->rank() == g_rank && world->size() == world_size, "rank %d size %d", world->rank(), world->size());
  world->set_timeout_ms(30000);
  test_collectives(*world, "world");

  // A second communicator over the same processes: its own traffic.
  auto again = make_mpi_comm();
  again->set_timeout_ms(30000);
  test_collectives(*again, "world, second");

  // The host's communicator: MPI_Comm_split's halves (even and odd ranks).
  MPI_Comm half;
  MPI_Comm_split(MPI_COMM_WORLD, g_rank % 2, g_rank, &half);
  {
    auto hc = make_mpi_comm(&half);
    hc->set_timeout_ms(30000);
    int hr = 0, hs = 0;
    MPI_Comm_rank(half, &hr);
    MPI_Comm_size(half, &hs);
    EXPECT(hc->rank() == hr && hc->size() == hs, "host comm: rank %d size %d, want %d %d", hc->rank(), hc->size(), hr, hs);
    float x = static_cast<float>(g_rank);
    EXPECT_OK(*hc, hc->all_reduce_sum_f32(&x, 1));
    float want = 0;
    for (int r = g_rank % 2; r < world_size; r += 2) want += static_cast<float>(r);
    EXPECT(x == want, "host comm sum %g, want %g", x, want);
    test_collectives(*hc, "host half");
    // The host's own communicator still works beside ours (ours is a duplicate).
    int one = 1, total = 0;
    EXPECT(MPI_Allreduce(&one, &total, 1, MPI_INT, MPI_SUM, half) == MPI_SUCCESS, "host allreduce");
    EXPECT(total == hs, "host allreduce %d, want %d", total, hs);
  }
  MPI_Comm_free(&half);

  if (world_size >= 2) {
    test_timeout(*again);
  } else {
    std::printf("comm_mpi_test: one rank: the timeout test needs two\n");
  }

  // The first communicator still works after the second broke.
  EXPECT_OK(*world, world->barrier());
  std::printf("comm_mpi_test: rank %d of %d: %d checks passed (%s)\n", g_rank, world_size, g_checks,
              host_init ? "MPI started by the host" : "MPI started by libinfer");
  world.reset();
  again.reset();
  if (host_init) {
    int finalized = 0;
    MPI_Finalized(&finalized);
    EXPECT(!finalized, "the library finalized the host's MPI");
    MPI_Finalize();
  }
  return 0;
}
