// The NCCL communicator: collectives between GPUs, one rank per device (built with the CUDA
// backend when the toolkit has nccl.h: INFER_HAVE_NCCL, cmake/InferMpi.cmake).
//
// - NCCL is opened at run time (dlopen of libnccl.so.2, as cuBLAS is: cuda/cublas_loader.cpp),
//   so that libinfer.so has no load-time CUDA dependency and loads on machines without it;
//   only nccl.h is used at build time. The CUDA runtime is the static one libinfer links.
// - make_nccl_comm(bootstrap, device): rank 0 makes the unique id (ncclGetUniqueId), the
//   bootstrap communicator (MPI, the same ranks) broadcasts it, every rank calls
//   ncclCommInitRank on its device. A stream of its own carries the collectives.
// - Buffers are device memory. Each collective is queued on the stream and then waited for
//   with a deadline (timeout_ms()): cudaStreamQuery polled, ncclCommGetAsyncError checked
//   (a peer that failed); on timeout or error the NCCL communicator is aborted
//   (ncclCommAbort, which also frees the stream's stuck kernel) and every later call fails
//   at once with the same message.
// - barrier: an all-reduce of one float in device memory.
#include "dist/comm.h"

#ifdef INFER_HAVE_NCCL
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <nccl.h>
#include <sched.h>

#include <chrono>
#include <cstring>
#include <mutex>
#include <thread>
#endif

namespace infer {

#ifndef INFER_HAVE_NCCL

bool nccl_built() { return false; }
std::unique_ptr<Communicator> make_nccl_comm(Communicator&, int) {
  raise(Status::Unsupported, "this build has no NCCL (it comes with the CUDA backend: configure with -DINFER_CUDA=ON "
                             "and a CUDA toolkit that has nccl.h)");
}

#else  // INFER_HAVE_NCCL

namespace {

using Clock = std::chrono::steady_clock;

const char* const kNcclName = "libnccl.so.2";

// The NCCL entry points libinfer uses, from dlsym.
struct NcclApi {
  ncclResult_t (*get_unique_id)(ncclUniqueId*) = nullptr;
  ncclResult_t (*comm_init_rank)(ncclComm_t*, int, ncclUniqueId, int) = nullptr;
  ncclResult_t (*comm_destroy)(ncclComm_t) = nullptr;
  ncclResult_t (*comm_abort)(ncclComm_t) = nullptr;
  ncclResult_t (*comm_get_async_error)(ncclComm_t, ncclResult_t*) = nullptr;
  const char* (*get_error_string)(ncclResult_t) = nullptr;
  ncclResult_t (*all_reduce)(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t,
                             cudaStream_t) = nullptr;
  ncclResult_t (*all_gather)(const void*, void*, size_t, ncclDataType_t, ncclComm_t, cudaStream_t) = nullptr;
  ncclResult_t (*broadcast)(const void*, void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t) = nullptr;
};

// Opened once per process; the library stays loaded until exit.
const NcclApi& nccl_api() {
  static NcclApi api;
  static std::string error;
  static std::once_flag once;
  std::call_once(once, [] {
    void* h = dlopen(kNcclName, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
      const char* why = dlerror();
      error = std::string("cannot load ") + kNcclName + ": " + (why ? why : "unknown reason") +
              " (tensor parallelism on GPUs needs NCCL: the CUDA toolkit's libnccl or the libnccl2 package)";
      return;
    }
    struct Sym {
      void** slot;
      const char* name;
    };
    const Sym syms[] = {
        {reinterpret_cast<void**>(&api.get_unique_id), "ncclGetUniqueId"},
        {reinterpret_cast<void**>(&api.comm_init_rank), "ncclCommInitRank"},
        {reinterpret_cast<void**>(&api.comm_destroy), "ncclCommDestroy"},
        {reinterpret_cast<void**>(&api.comm_abort), "ncclCommAbort"},
        {reinterpret_cast<void**>(&api.comm_get_async_error), "ncclCommGetAsyncError"},
        {reinterpret_cast<void**>(&api.get_error_string), "ncclGetErrorString"},
        {reinterpret_cast<void**>(&api.all_reduce), "ncclAllReduce"},
        {reinterpret_cast<void**>(&api.all_gather), "ncclAllGather"},
        {reinterpret_cast<void**>(&api.broadcast), "ncclBroadcast"},
    };
    for (const Sym& s : syms) {
      *s.slot = dlsym(h, s.name);
      if (!*s.slot) {
        error = std::string(kNcclName) + " has no symbol " + s.name + " (an NCCL older than 2.10?)";
        api = NcclApi{};
        return;
      }
    }
  });
  if (!error.empty()) raise(Status::Unsupported, "%s", error.c_str());
  return api;
}

class NcclComm final : public Communicator {
 public:
  NcclComm(Communicator& bootstrap, int device)
      : api_(nccl_api()), rank_(bootstrap.rank()), size_(bootstrap.size()), device_(device) {
    cuda_check(cudaSetDevice(device), "cudaSetDevice");
    ncclUniqueId id;
    std::memset(&id, 0, sizeof(id));
    if (rank_ == 0) nccl_check(api_.get_unique_id(&id), "ncclGetUniqueId");
    bootstrap.check(bootstrap.broadcast(&id, sizeof(id), 0));
    nccl_check(api_.comm_init_rank(&comm_, size_, id, rank_), "ncclCommInitRank");
    cuda_check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
    cuda_check(cudaMalloc(&scratch_, sizeof(float)), "cudaMalloc");
  }
  ~NcclComm() override {
    if (comm_) (broken_ ? api_.comm_abort : api_.comm_destroy)(comm_);
    if (stream_) cudaStreamDestroy(stream_);
    if (scratch_) cudaFree(scratch_);
  }

  const char* name() const override { return "nccl"; }
  int rank() const override { return rank_; }
  int size() const override { return size_; }

  Status all_reduce_sum_f32(float* data, size_t n) override {
    return run("all-reduce", n * sizeof(float), [&] {
      return api_.all_reduce(data, data, n, ncclFloat32, ncclSum, comm_, stream_);
    });
  }
  Status all_reduce_sum_bf16(uint16_t* data, size_t n) override {
    return run("all-reduce", n * sizeof(uint16_t), [&] {
      return api_.all_reduce(data, data, n, ncclBfloat16, ncclSum, comm_, stream_);
    });
  }
  Status all_gather(const void* send, size_t bytes, void* recv) override {
    return run("all-gather", bytes, [&] { return api_.all_gather(send, recv, bytes, ncclUint8, comm_, stream_); });
  }
  Status broadcast(void* data, size_t bytes, int root) override {
    if (root < 0 || root >= size_) {
      last_error_ = "tensor parallel: broadcast from rank " + std::to_string(root) + " in a group of " +
                    std::to_string(size_);
      return Status::InvalidArgument;
    }
    return run("broadcast", bytes, [&] { return api_.broadcast(data, data, bytes, ncclUint8, root, comm_, stream_); });
  }
  Status barrier() override {
    return run("barrier", 0, [&] {
      return api_.all_reduce(scratch_, scratch_, 1, ncclFloat32, ncclSum, comm_, stream_);
    });
  }

 private:
  template <class F>
  Status run(const char* op, size_t bytes, F&& enqueue) {
    const auto t0 = Clock::now();
    if (broken_) {
      last_error_ = broken_message_;
      return Status::Backend;
    }
    Status s = Status::Ok;
    ncclResult_t r = enqueue();
    if (r != ncclSuccess) {
      s = fail(std::string(op) + what(op, bytes) + " on rank " + std::to_string(rank_) + " failed: " +
               api_.get_error_string(r));
    } else {
      s = wait(op, bytes);
    }
    stats_.calls += 1;
    stats_.bytes += bytes;
    stats_.seconds += std::chrono::duration<double>(Clock::now() - t0).count();
    return s;
  }

  static std::string what(const char* op, size_t bytes) {
    return std::strcmp(op, "barrier") == 0 ? std::string() : " of " + std::to_string(bytes) + " bytes";
  }

  Status wait(const char* op, size_t bytes) {
    const auto t0 = Clock::now();
    const auto limit = std::chrono::milliseconds(timeout_ms_);
    for (;;) {
      cudaError_t e = cudaStreamQuery(stream_);
      if (e == cudaSuccess) return Status::Ok;
      if (e != cudaErrorNotReady) {
        return fail(std::string(op) + what(op, bytes) + " on rank " + std::to_string(rank_) +
                    " failed: " + cudaGetErrorString(e));
      }
      ncclResult_t async = ncclSuccess;
      api_.comm_get_async_error(comm_, &async);
      if (async != ncclSuccess) {
        return fail(std::string(op) + what(op, bytes) + " on rank " + std::to_string(rank_) +
                    " failed: " + api_.get_error_string(async));
      }
      const auto waited = Clock::now() - t0;
      if (timeout_ms_ > 0 && waited >= limit) {
        return fail(std::string(op) + what(op, bytes) + " on rank " + std::to_string(rank_) + " timed out after " +
                    std::to_string(timeout_ms_) + " ms (a rank died, hung or is out of step)");
      }
      if (waited < std::chrono::microseconds(50)) continue;
      if (waited < std::chrono::milliseconds(5)) {
        sched_yield();
      } else {
        std::this_thread::sleep_for(std::chrono::microseconds(waited < std::chrono::seconds(1) ? 50 : 2000));
      }
    }
  }

  // The communicator is aborted (its kernels stop) and broken.
  Status fail(std::string what) {
    broken_ = true;
    broken_message_ = "tensor parallel: " + what;
    last_error_ = broken_message_;
    if (comm_) {
      api_.comm_abort(comm_);
      comm_ = nullptr;
    }
    return Status::Backend;
  }

  void cuda_check(cudaError_t e, const char* what) {
    if (e != cudaSuccess) {
      raise(Status::Backend, "NCCL communicator: %s on device %d failed: %s", what, device_, cudaGetErrorString(e));
    }
  }
  void nccl_check(ncclResult_t r, const char* what) {
    if (r != ncclSuccess) {
      raise(Status::Backend, "NCCL communicator: %s on rank %d failed: %s", what, rank_, api_.get_error_string(r));
    }
  }

  const NcclApi& api_;
  int rank_ = 0;
  int size_ = 1;
  int device_ = 0;
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
  float* scratch_ = nullptr;
  bool broken_ = false;
  std::string broken_message_;
};

}  // namespace

bool nccl_built() { return true; }

std::unique_ptr<Communicator> make_nccl_comm(Communicator& bootstrap, int device) {
  return std::make_unique<NcclComm>(bootstrap, device);
}

#endif  // INFER_HAVE_NCCL

}  // namespace infer
