// In-process groups (comm.h: make_local_group). Every collective is two
// meetings of all ranks: at the first each rank posts its buffers, between
// the two each reads the others' and computes its result privately, and
// after the second it writes that result (in-place sums must not change a
// buffer another rank is still reading).
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <mutex>

#include "core/fp16.h"
#include "dist/comm.h"

namespace infer {
namespace {

using Clock = std::chrono::steady_clock;

struct Shared {
  explicit Shared(int n) : n(n), posts(static_cast<size_t>(n)) {}
  struct Post {
    const void* data = nullptr;
    size_t bytes = 0;
    int op = 0;
  };
  const int n;
  std::mutex mu;
  std::condition_variable cv;
  int arrived = 0;
  uint64_t gen = 0;
  bool broken = false;
  std::string why;
  std::vector<Post> posts;
};

class LocalComm final : public Communicator {
 public:
  LocalComm(std::shared_ptr<Shared> g, int rank) : g_(std::move(g)), rank_(rank) {}
  const char* name() const override { return "local"; }
  int rank() const override { return rank_; }
  int size() const override { return g_->n; }

  Status all_reduce_sum_f32(float* data, size_t n) override {
    return run(1, data, n * sizeof(float), "all-reduce", [&] {
      tmp_.assign(n, 0.0f);
      for (int r = 0; r < g_->n; ++r) {
        const float* x = static_cast<const float*>(g_->posts[static_cast<size_t>(r)].data);
        for (size_t i = 0; i < n; ++i) tmp_[i] += x[i];
      }
    }, [&] { std::memcpy(data, tmp_.data(), n * sizeof(float)); });
  }
  Status all_reduce_sum_bf16(uint16_t* data, size_t n) override {
    return run(2, data, n * 2, "all-reduce", [&] {
      tmp_.assign(n, 0.0f);
      for (int r = 0; r < g_->n; ++r) {
        const uint16_t* x = static_cast<const uint16_t*>(g_->posts[static_cast<size_t>(r)].data);
        for (size_t i = 0; i < n; ++i) tmp_[i] += bf16_to_f32(x[i]);
      }
    }, [&] {
      for (size_t i = 0; i < n; ++i) data[i] = f32_to_bf16(tmp_[i]);
    });
  }
  Status all_gather(const void* send, size_t bytes, void* recv) override {
    bytes_.resize(bytes * static_cast<size_t>(g_->n));
    return run(3, send, bytes, "all-gather", [&] {
      for (int r = 0; r < g_->n; ++r)
        std::memcpy(bytes_.data() + bytes * static_cast<size_t>(r), g_->posts[static_cast<size_t>(r)].data, bytes);
    }, [&] { std::memcpy(recv, bytes_.data(), bytes_.size()); });
  }
  Status broadcast(void* data, size_t bytes, int root) override {
    if (root < 0 || root >= g_->n) {
      last_error_ = "broadcast from rank " + std::to_string(root) + " of " + std::to_string(g_->n);
      return Status::InvalidArgument;
    }
    bytes_.resize(bytes);
    return run(4 + root, data, bytes, "broadcast", [&] {
      std::memcpy(bytes_.data(), g_->posts[static_cast<size_t>(root)].data, bytes);
    }, [&] {
      if (rank_ != root) std::memcpy(data, bytes_.data(), bytes);
    });
  }
  Status barrier() override {
    return run(0, nullptr, 0, "barrier", [] {}, [] {});
  }

 private:
  // Posts this rank's buffer, meets, computes, meets, writes.
  template <typename Compute, typename Write>
  Status run(int op, const void* data, size_t bytes, const char* what, Compute compute, Write write) {
    const Clock::time_point t0 = Clock::now();
    Status s = meet(op, data, bytes, what);
    if (s == Status::Ok) {
      compute();
      s = meet(-1, nullptr, 0, what);
      if (s == Status::Ok) write();
    }
    stats_.calls++;
    stats_.bytes += bytes;
    stats_.seconds += std::chrono::duration<double>(Clock::now() - t0).count();
    return s;
  }

  Status meet(int op, const void* data, size_t bytes, const char* what) {
    std::unique_lock<std::mutex> lk(g_->mu);
    if (g_->broken) return fail(g_->why);
    if (op >= 0) g_->posts[static_cast<size_t>(rank_)] = {data, bytes, op};
    const uint64_t gen = g_->gen;
    if (++g_->arrived == g_->n) {
      g_->arrived = 0;
      // Every rank must be in the same collective with the same size.
      if (op >= 0)
        for (const Shared::Post& p : g_->posts)
          if (p.op != op || p.bytes != bytes) {
            g_->broken = true;
            g_->why = std::string("tensor parallel: ranks are out of step (different collectives) in a ") + what;
            g_->cv.notify_all();
            return fail(g_->why);
          }
      ++g_->gen;
      g_->cv.notify_all();
      return Status::Ok;
    }
    const auto done = [&] { return g_->gen != gen || g_->broken; };
    if (timeout_ms_ > 0) {
      if (!g_->cv.wait_until(lk, Clock::now() + std::chrono::milliseconds(timeout_ms_), done)) {
        g_->broken = true;
        g_->why = "tensor parallel: " + std::string(what) + " of " + std::to_string(bytes) + " bytes on rank " +
                  std::to_string(rank_) + " timed out after " + std::to_string(timeout_ms_) +
                  " ms (a rank died, hung or is out of step)";
        g_->cv.notify_all();
        return fail(g_->why);
      }
    } else {
      g_->cv.wait(lk, done);
    }
    if (g_->gen == gen) return fail(g_->why);  // broken while waiting
    return Status::Ok;
  }

  Status fail(const std::string& why) {
    last_error_ = why;
    return Status::Backend;
  }

  std::shared_ptr<Shared> g_;
  int rank_;
  std::vector<float> tmp_;
  std::vector<uint8_t> bytes_;
};

}  // namespace

std::vector<std::shared_ptr<Communicator>> make_local_group(int n) {
  if (n < 1 || n > 1024) raise(Status::InvalidArgument, "a local group of %d ranks", n);
  auto g = std::make_shared<Shared>(n);
  std::vector<std::shared_ptr<Communicator>> out;
  for (int r = 0; r < n; ++r) out.push_back(std::make_shared<LocalComm>(g, r));
  return out;
}

}  // namespace infer
