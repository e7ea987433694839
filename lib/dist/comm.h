// Collective communication between the processes (ranks) that run one model
// together (tensor parallelism, lib/dist/tp.h). libinfer does not bring a
// transport of its own: it sits on MPI between CPU processes (one machine
// or many, whatever launched them: mpirun, Slurm's srun) and on NCCL
// between GPUs.
//
// Three implementations:
//  - single process: size 1, every collective a no-op (make_single_comm);
//  - MPI (comm_mpi.cpp, built with -DINFER_MPI=ON; AUTO builds it when the
//    MPI development files are found): make_mpi_comm, over MPI_COMM_WORLD or
//    a communicator the host hands in;
//  - NCCL (comm_nccl.cpp, built with the CUDA backend): buffers in device
//    memory. Compiled and, until a GPU machine is lent, tested only to
//    compile.
//
// Errors are statuses, never aborts or hangs: every collective returns
// Status::Ok or a failure with last_error() saying what happened. A
// collective that does not complete within timeout_ms (a rank died, hung or
// is running another collective) returns Status::Backend with a message
// naming the operation and the wait; the communicator is then broken and
// every later call fails at once. MPI errors come back through an error
// handler that returns them (MPI_ERRORS_RETURN), not MPI's default abort.
//
// Threads: a communicator is used by one thread at a time (the engine's);
// calls are serialized by the caller.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/error.h"

namespace infer {

// Time and traffic spent in collectives, since creation (infer bench's
// communication time per step).
struct CommStats {
  uint64_t calls = 0;
  uint64_t bytes = 0;        // payload bytes this rank contributed
  double seconds = 0.0;      // wall time inside collectives (waiting included)
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual const char* name() const = 0;  // "single", "mpi", "nccl"
  virtual int rank() const = 0;
  virtual int size() const = 0;

  // In place: data[i] = sum over ranks of data[i]. n values.
  virtual Status all_reduce_sum_f32(float* data, size_t n) = 0;
  // The same on bfloat16 values (summed in f32, rounded to nearest even).
  virtual Status all_reduce_sum_bf16(uint16_t* data, size_t n) = 0;
  // recv[r * bytes, (r + 1) * bytes) = rank r's send (bytes per rank, the
  // same on every rank). recv holds size() * bytes.
  virtual Status all_gather(const void* send, size_t bytes, void* recv) = 0;
  // data (bytes, the same count on every rank) = root's data.
  virtual Status broadcast(void* data, size_t bytes, int root) = 0;
  virtual Status barrier() = 0;
  // Ends every rank of the job (a failure the group cannot recover from:
  // a rank that is out of step). Single process: returns.
  virtual void abort(int code) {}

  // The wait after which a collective fails (milliseconds; 0: wait forever).
  void set_timeout_ms(int64_t ms) { timeout_ms_ = ms; }
  int64_t timeout_ms() const { return timeout_ms_; }
  const std::string& last_error() const { return last_error_; }
  const CommStats& stats() const { return stats_; }
  // Status::Ok or Error(status, last_error()).
  void check(Status s) const {
    if (s != Status::Ok) throw Error(s, last_error_);
  }

 protected:
  int64_t timeout_ms_ = 60000;
  std::string last_error_;
  CommStats stats_;
};

// Size 1, rank 0.
std::unique_ptr<Communicator> make_single_comm();

// A group of n ranks inside one process, one communicator per rank, each
// used by its own thread (tests: tensor parallelism without an MPI
// launcher, under the sanitizers too). Sums run in rank order, so every
// rank gets the same bits.
std::vector<std::shared_ptr<Communicator>> make_local_group(int n);

// Whether this build has MPI.
bool mpi_built();
// MPI: over `host_comm` (a pointer to the host's MPI_Comm, which must stay
// valid and is not freed) or, when null, MPI_COMM_WORLD, initializing MPI
// first when the host has not (MPI_THREAD_SERIALIZED; finalized at exit).
// Error(Unsupported) in a build without MPI, Error(Backend) when MPI cannot
// start.
std::unique_ptr<Communicator> make_mpi_comm(void* host_comm = nullptr);
// Whether this process was started by an MPI launcher (mpirun / mpiexec /
// srun set the rank in the environment): the CLI's --tp needs one.
bool launched_by_mpi();

// NCCL over the GPUs of a CUDA build: one rank per device, the unique id
// exchanged through `bootstrap` (an MPI communicator of the same ranks).
// Error(Unsupported) without CUDA and NCCL.
bool nccl_built();
std::unique_ptr<Communicator> make_nccl_comm(Communicator& bootstrap, int device);

}  // namespace infer
