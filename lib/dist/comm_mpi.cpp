// The MPI communicator (built when INFER_HAVE_MPI is defined: cmake -DINFER_MPI=ON, or AUTO
// with the MPI development files present).
//
// - make_mpi_comm(host_comm): over the host's MPI_Comm or MPI_COMM_WORLD. MPI is initialized
//   here (MPI_Init_thread, MPI_THREAD_SERIALIZED: the engine's thread, which need not be the
//   main thread, makes the calls) when the host has not, and then finalized once at process
//   exit (std::atexit), however many communicators were made. A host that initialized MPI
//   finalizes it itself.
// - The given communicator is duplicated (MPI_Comm_dup): our collectives never match the
//   host's. The duplicate returns errors (MPI_ERRORS_RETURN) instead of aborting the job.
// - Every collective is non-blocking (MPI_Iallreduce, MPI_Iallgather, MPI_Ibcast,
//   MPI_Ibarrier) and then polled with MPI_Test until it completes or timeout_ms() passes:
//   first a short spin (the lowest latency when the peers are running), then sched_yield
//   for 200 ms (on an oversubscribed core the peer that has to arrive gets the CPU), then
//   sleeps of 100 us and, after a second, 2 ms (an idle follower waiting for hours costs
//   next to nothing).
//   Open MPI progresses a non-blocking collective only inside MPI_Test, so the sleeps stay
//   short while the wait is young. A timeout breaks the communicator: the request cannot be
//   cancelled and the group is out of step, so every later call fails at once.
// - bf16 all-reduce: an MPI user operation that adds two bf16 vectors in f32 and rounds the
//   sum to nearest even. It moves 2 bytes per value, half of converting to f32 and reducing
//   that (tensor parallelism is bound by the bytes it moves); the price is one rounding per
//   partial sum (N-1 for N ranks) instead of one. Every rank gets the same bits (MPI's
//   all-reduce algorithms reduce each element once and distribute it).
#include "dist/comm.h"

#include <chrono>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <thread>

#ifdef INFER_HAVE_MPI
#include <mpi.h>
#include <sched.h>

#include <mutex>
#endif

namespace infer {

// Launchers and the variables they set in every rank's environment:
//   Open MPI's mpirun/mpiexec: OMPI_COMM_WORLD_SIZE;
//   MPICH's and Intel MPI's Hydra, Slurm's --mpi=pmi2: PMI_SIZE (PMI_RANK);
//   a PMIx server (Open MPI 5's prterun, srun --mpi=pmix): PMIX_RANK;
//   Slurm's srun without an MPI plugin: SLURM_PROCID with SLURM_STEP_NUM_TASKS. The step's
//   variable, not SLURM_NTASKS: a batch script (sbatch) has SLURM_PROCID and SLURM_NTASKS
//   too but is not an MPI launch; only srun sets the step's variables.
bool launched_by_mpi() {
  if (std::getenv("OMPI_COMM_WORLD_SIZE") || std::getenv("PMI_SIZE") || std::getenv("PMIX_RANK")) return true;
  return std::getenv("SLURM_PROCID") && std::getenv("SLURM_STEP_NUM_TASKS");
}

#ifndef INFER_HAVE_MPI

bool mpi_built() { return false; }
std::unique_ptr<Communicator> make_mpi_comm(void*) {
  raise(Status::Unsupported,
        "this build has no MPI: tensor parallelism across processes needs libinfer configured with "
        "-DINFER_MPI=ON (or AUTO) and the MPI development files (Debian: libopenmpi-dev)");
}

#else  // INFER_HAVE_MPI

namespace {

using Clock = std::chrono::steady_clock;

std::once_flag g_init_once;
bool g_we_initialized = false;
MPI_Op g_bf16_sum = MPI_OP_NULL;

std::string mpi_error_text(int code) {
  char buf[MPI_MAX_ERROR_STRING + 1] = {};
  int len = 0;
  if (MPI_Error_string(code, buf, &len) != MPI_SUCCESS) return "MPI error " + std::to_string(code);
  return std::string(buf, static_cast<size_t>(len));
}

float bf16_to_f32(uint16_t h) {
  uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

uint16_t f32_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu)) return static_cast<uint16_t>((u >> 16) | 0x40);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest, ties to even
  return static_cast<uint16_t>(u >> 16);
}

// MPI_User_function: inout[i] = in[i] + inout[i] in f32, rounded to bf16.
void bf16_sum(void* in, void* inout, int* len, MPI_Datatype*) {
  const uint16_t* a = static_cast<const uint16_t*>(in);
  uint16_t* b = static_cast<uint16_t*>(inout);
  for (int i = 0; i < *len; ++i) b[i] = f32_to_bf16(bf16_to_f32(a[i]) + bf16_to_f32(b[i]));
}

// At exit, when MPI was started here: the user operation freed, MPI finalized (once).
void finalize_at_exit() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  if (g_bf16_sum != MPI_OP_NULL) MPI_Op_free(&g_bf16_sum);
  MPI_Finalize();
}

// MPI started (by the host or here) and the bf16 operation made. Throws Error(Backend).
void ensure_mpi() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) raise(Status::Backend, "MPI was already finalized in this process: no communicator can be made");
  std::string err;
  std::call_once(g_init_once, [&] {
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (!initialized) {
      int provided = 0;
      int rc = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided);
      if (rc != MPI_SUCCESS) {
        err = "MPI_Init_thread failed: " + mpi_error_text(rc);
        return;
      }
      g_we_initialized = true;
      std::atexit(finalize_at_exit);
    }
    int rc = MPI_Op_create(&bf16_sum, /*commute=*/1, &g_bf16_sum);
    if (rc != MPI_SUCCESS) err = "MPI_Op_create failed: " + mpi_error_text(rc);
  });
  if (!err.empty()) raise(Status::Backend, "%s", err.c_str());
  if (g_bf16_sum == MPI_OP_NULL) raise(Status::Backend, "MPI could not be started in this process (an earlier attempt failed)");
}

class MpiComm final : public Communicator {
 public:
  explicit MpiComm(MPI_Comm base) {
    int rc = MPI_Comm_dup(base, &comm_);
    if (rc != MPI_SUCCESS) raise(Status::Backend, "MPI_Comm_dup failed: %s", mpi_error_text(rc).c_str());
    MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
  }
  ~MpiComm() override {
    int finalized = 0;
    MPI_Finalized(&finalized);
    // A broken communicator has a request that never completed: it is left to MPI_Finalize.
    if (!finalized && !broken_ && comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
  }

  const char* name() const override { return "mpi"; }
  int rank() const override { return rank_; }
  int size() const override { return size_; }

  Status all_reduce_sum_f32(float* data, size_t n) override {
    return reduce(data, n, sizeof(float), MPI_FLOAT, MPI_SUM);
  }
  Status all_reduce_sum_bf16(uint16_t* data, size_t n) override {
    return reduce(data, n, sizeof(uint16_t), MPI_UINT16_T, g_bf16_sum);
  }

  Status all_gather(const void* send, size_t bytes, void* recv) override {
    const auto t0 = Clock::now();
    if (Status s = usable(); s != Status::Ok) return s;
    if (bytes > static_cast<size_t>(INT_MAX)) return invalid("all-gather of " + std::to_string(bytes) + " bytes per rank (more than 2 GiB)");
    // MPI_IN_PLACE when the caller already put its part at its place in recv.
    const void* src = send == static_cast<const char*>(recv) + static_cast<size_t>(rank_) * bytes ? MPI_IN_PLACE : send;
    MPI_Request req;
    int rc = MPI_Iallgather(src, static_cast<int>(bytes), MPI_BYTE, recv, static_cast<int>(bytes), MPI_BYTE, comm_, &req);
    Status s = rc == MPI_SUCCESS ? wait(&req, "all-gather", bytes) : mpi_failed(rc, "all-gather", bytes);
    count(bytes, t0);
    return s;
  }

  Status broadcast(void* data, size_t bytes, int root) override {
    const auto t0 = Clock::now();
    if (Status s = usable(); s != Status::Ok) return s;
    if (root < 0 || root >= size_) {
      return invalid("broadcast from rank " + std::to_string(root) + " in a group of " + std::to_string(size_));
    }
    Status s = Status::Ok;
    char* p = static_cast<char*>(data);
    size_t left = bytes;
    do {  // at least one call, also for 0 bytes: every rank takes part
      const size_t chunk = std::min(left, kMaxChunk);
      MPI_Request req;
      int rc = MPI_Ibcast(p, static_cast<int>(chunk), MPI_BYTE, root, comm_, &req);
      s = rc == MPI_SUCCESS ? wait(&req, "broadcast", bytes) : mpi_failed(rc, "broadcast", bytes);
      p += chunk;
      left -= chunk;
    } while (s == Status::Ok && left > 0);
    count(bytes, t0);
    return s;
  }

  Status barrier() override {
    const auto t0 = Clock::now();
    if (Status s = usable(); s != Status::Ok) return s;
    MPI_Request req;
    int rc = MPI_Ibarrier(comm_, &req);
    Status s = rc == MPI_SUCCESS ? wait(&req, "barrier", 0) : mpi_failed(rc, "barrier", 0);
    count(0, t0);
    return s;
  }

  void abort(int code) override { MPI_Abort(comm_, code); }

 private:
  // MPI counts are ints: larger buffers go in pieces of 1 GiB.
  static constexpr size_t kMaxChunk = size_t{1} << 30;

  Status reduce(void* data, size_t n, size_t elem, MPI_Datatype type, MPI_Op op) {
    const auto t0 = Clock::now();
    if (Status s = usable(); s != Status::Ok) return s;
    const size_t bytes = n * elem;
    Status s = Status::Ok;
    char* p = static_cast<char*>(data);
    size_t left = n;
    do {
      const size_t chunk = std::min(left, kMaxChunk / elem);
      MPI_Request req;
      int rc = MPI_Iallreduce(MPI_IN_PLACE, p, static_cast<int>(chunk), type, op, comm_, &req);
      s = rc == MPI_SUCCESS ? wait(&req, "all-reduce", bytes, t0) : mpi_failed(rc, "all-reduce", bytes);
      p += chunk * elem;
      left -= chunk;
    } while (s == Status::Ok && left > 0);
    count(bytes, t0);
    return s;
  }

  void count(size_t bytes, Clock::time_point t0) {
    stats_.calls += 1;
    stats_.bytes += bytes;
    stats_.seconds += std::chrono::duration<double>(Clock::now() - t0).count();
  }

  Status usable() {
    if (broken_) {
      last_error_ = broken_message_;
      return Status::Backend;
    }
    return Status::Ok;
  }

  Status invalid(std::string what) {
    last_error_ = "tensor parallel: " + what;
    return Status::InvalidArgument;
  }

  static std::string what(const char* op, size_t bytes) {
    std::string s = op;
    if (std::strcmp(op, "barrier") != 0) s += " of " + std::to_string(bytes) + " bytes";
    return s;
  }

  Status break_with(std::string message) {
    broken_ = true;
    broken_message_ = std::move(message);
    last_error_ = broken_message_;
    return Status::Backend;
  }

  Status mpi_failed(int rc, const char* op, size_t bytes) {
    return break_with("tensor parallel: " + what(op, bytes) + " on rank " + std::to_string(rank_) +
                      " failed: " + mpi_error_text(rc));
  }

  // Polls the request until it completes, fails or times out (see the top of the file).
  // The deadline counts from t0 (the start of the whole operation, which may be several
  // requests).
  Status wait(MPI_Request* req, const char* op, size_t bytes, Clock::time_point t0 = Clock::now()) {
    using std::chrono::microseconds;
    const auto limit = std::chrono::milliseconds(timeout_ms_);
    for (;;) {
      int done = 0;
      int rc = MPI_Test(req, &done, MPI_STATUS_IGNORE);
      if (rc != MPI_SUCCESS) return mpi_failed(rc, op, bytes);
      if (done) return Status::Ok;
      const auto waited = Clock::now() - t0;
      if (timeout_ms_ > 0 && waited >= limit) {
        return break_with("tensor parallel: " + what(op, bytes) + " on rank " + std::to_string(rank_) +
                          " timed out after " + std::to_string(timeout_ms_) +
                          " ms (a rank died, hung or is out of step)");
      }
      if (waited < microseconds(kSpinUs)) continue;
      if (waited < std::chrono::milliseconds(kYieldMs)) {
        sched_yield();
      } else if (waited < std::chrono::seconds(1)) {
        std::this_thread::sleep_for(microseconds(100));
      } else {
        std::this_thread::sleep_for(microseconds(2000));
      }
    }
  }

  // Measured (RESULTS): a 16 MB all-reduce takes tens of ms here and progresses only in
  // MPI_Test, so sleeping starts late; a yield costs no CPU when nothing else runs.
  static constexpr int kSpinUs = 50;
  static constexpr int kYieldMs = 200;

  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0;
  int size_ = 1;
  bool broken_ = false;
  std::string broken_message_;
};

}  // namespace

bool mpi_built() { return true; }

std::unique_ptr<Communicator> make_mpi_comm(void* host_comm) {
  ensure_mpi();
  MPI_Comm base = host_comm ? *static_cast<MPI_Comm*>(host_comm) : MPI_COMM_WORLD;
  if (base == MPI_COMM_NULL) raise(Status::InvalidArgument, "make_mpi_comm: the host's communicator is MPI_COMM_NULL");
  return std::make_unique<MpiComm>(base);
}

#endif  // INFER_HAVE_MPI

}  // namespace infer
