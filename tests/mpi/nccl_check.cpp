// The NCCL communicator (lib/dist/comm_nccl.cpp) on two GPUs, one rank each:
//   mpirun -np 2 infer_nccl_check
// (bench/gpu-check.sh runs it when nvidia-smi lists two GPUs or more). Checks all-reduce f32
// and bf16 (exact sums), all-gather, broadcast from every root and barrier on device
// buffers, then times a 16 MB all-reduce. Prints "nccl_check: PASS" on rank 0; a failure
// prints what and ends the job (MPI_Abort). Exit 77 when this process sees fewer GPUs
// than there are ranks.
#include <cuda_runtime.h>
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <vector>

#include "dist/comm.h"

using namespace infer;

namespace {

int g_rank = 0;

#define EXPECT(cond, ...)                                                                  \
  do {                                                                                     \
    if (!(cond)) {                                                                         \
      std::fprintf(stderr, "nccl_check: rank %d: FAIL line %d: %s: ", g_rank, __LINE__, #cond); \
      std::fprintf(stderr, __VA_ARGS__);                                                   \
      std::fprintf(stderr, "\n");                                                          \
      MPI_Abort(MPI_COMM_WORLD, 1);                                                        \
    }                                                                                      \
  } while (0)
#define CUDA(x) EXPECT((x) == cudaSuccess, "%s", cudaGetErrorString(cudaGetLastError()))
#define OK(c, x) EXPECT((x) == Status::Ok, "%s", (c).last_error().c_str())

uint16_t bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return static_cast<uint16_t>(u >> 16);
}

}  // namespace

int main() {
  std::unique_ptr<Communicator> mpi;
  try {
    mpi = make_mpi_comm();
  } catch (const Error& e) {
    std::fprintf(stderr, "nccl_check: %s\n", e.what());
    return 1;
  }
  g_rank = mpi->rank();
  const int n = mpi->size(), me = mpi->rank();
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices < n) {
    if (me == 0) std::printf("SKIPPED: %d ranks but %d GPUs visible\n", n, devices);
    return 77;
  }
  std::unique_ptr<Communicator> c;
  try {
    c = make_nccl_comm(*mpi, me);
  } catch (const Error& e) {
    std::fprintf(stderr, "nccl_check: rank %d: %s\n", me, e.what());
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  c->set_timeout_ms(30000);
  EXPECT(std::string(c->name()) == "nccl" && c->rank() == me && c->size() == n, "identity");

  const size_t count = 1 << 20;
  const float tri = n * (n + 1) / 2.0f;
  std::vector<float> h(count);
  for (size_t i = 0; i < count; ++i) h[i] = (me + 1) * static_cast<float>(i % 100);
  float* d = nullptr;
  CUDA(cudaMalloc(&d, count * sizeof(float)));
  CUDA(cudaMemcpy(d, h.data(), count * sizeof(float), cudaMemcpyHostToDevice));
  OK(*c, c->all_reduce_sum_f32(d, count));
  CUDA(cudaMemcpy(h.data(), d, count * sizeof(float), cudaMemcpyDeviceToHost));
  for (size_t i = 0; i < count; ++i) EXPECT(h[i] == (i % 100) * tri, "f32 [%zu] = %g", i, h[i]);

  std::vector<uint16_t> hb(count);
  for (size_t i = 0; i < count; ++i) hb[i] = bf16(static_cast<float>((me + 1) * (i % 8)));
  CUDA(cudaMemcpy(d, hb.data(), count * 2, cudaMemcpyHostToDevice));
  OK(*c, c->all_reduce_sum_bf16(reinterpret_cast<uint16_t*>(d), count));
  CUDA(cudaMemcpy(hb.data(), d, count * 2, cudaMemcpyDeviceToHost));
  for (size_t i = 0; i < count; ++i) EXPECT(hb[i] == bf16((i % 8) * tri), "bf16 [%zu] = 0x%04x", i, hb[i]);

  const size_t part = 4096;
  std::vector<unsigned char> send(part, static_cast<unsigned char>(me + 1)), recv(part * n);
  unsigned char *ds = nullptr, *dr = nullptr;
  CUDA(cudaMalloc(&ds, part));
  CUDA(cudaMalloc(&dr, part * n));
  CUDA(cudaMemcpy(ds, send.data(), part, cudaMemcpyHostToDevice));
  OK(*c, c->all_gather(ds, part, dr));
  CUDA(cudaMemcpy(recv.data(), dr, part * n, cudaMemcpyDeviceToHost));
  for (int r = 0; r < n; ++r) EXPECT(recv[r * part] == r + 1 && recv[r * part + part - 1] == r + 1, "all-gather part %d", r);

  for (int root = 0; root < n; ++root) {
    std::vector<int> b(1000, me == root ? root * 11 : -1);
    CUDA(cudaMemcpy(d, b.data(), b.size() * sizeof(int), cudaMemcpyHostToDevice));
    OK(*c, c->broadcast(d, b.size() * sizeof(int), root));
    CUDA(cudaMemcpy(b.data(), d, b.size() * sizeof(int), cudaMemcpyDeviceToHost));
    EXPECT(b[0] == root * 11 && b[999] == root * 11, "broadcast from %d: %d", root, b[0]);
  }
  OK(*c, c->barrier());
  EXPECT(c->broadcast(d, 4, n) == Status::InvalidArgument, "broadcast from rank %d", n);

  // 16 MB f32 all-reduce, median of 20.
  const size_t big = 4u << 20;
  float* db = nullptr;
  CUDA(cudaMalloc(&db, big * sizeof(float)));
  CUDA(cudaMemset(db, 0, big * sizeof(float)));
  std::vector<double> t;
  for (int k = 0; k < 25; ++k) {
    OK(*mpi, mpi->barrier());
    auto t0 = std::chrono::steady_clock::now();
    OK(*c, c->all_reduce_sum_f32(db, big));
    if (k >= 5) t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(t.begin(), t.end());
  if (me == 0) {
    const double s = t[t.size() / 2];
    std::printf("nccl_check: 16 MB f32 all-reduce, %d GPUs: %.1f us, bus bandwidth %.1f GB/s\n", n, s * 1e6,
                2.0 * (n - 1) / n * big * 4 / s / 1e9);
    std::printf("nccl_check: PASS (%llu collectives)\n", static_cast<unsigned long long>(c->stats().calls));
  }
  cudaFree(d), cudaFree(ds), cudaFree(dr), cudaFree(db);
  c.reset();
  return 0;
}
