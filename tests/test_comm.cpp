// The communicators of lib/dist/comm.h that a single process can check: the single-process
// one's semantics, which implementations this build has, their errors where it has none,
// and how an MPI launch is recognized. The MPI communicator itself is tested across
// processes by tests/mpi/comm_mpi_test.cpp (under mpirun).
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "dist/comm.h"
#include "test_util.h"

using namespace infer;

namespace {

// Sets (or unsets, for nullopt) an environment variable for one scope.
class EnvVar {
 public:
  EnvVar(const char* name, std::optional<std::string> value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value) {
      setenv(name, value->c_str(), 1);
    } else {
      unsetenv(name);
    }
  }
  ~EnvVar() {
    if (old_) {
      setenv(name_, old_->c_str(), 1);
    } else {
      unsetenv(name_);
    }
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

}  // namespace

TEST_CASE("single communicator: a group of one, collectives leave the data as it is", "[comm]") {
  auto comm = make_single_comm();
  CHECK(std::string(comm->name()) == "single");
  CHECK(comm->rank() == 0);
  CHECK(comm->size() == 1);

  std::vector<float> f = {1.5f, -2.0f, 3.25f};
  REQUIRE(comm->all_reduce_sum_f32(f.data(), f.size()) == Status::Ok);
  CHECK(f == std::vector<float>{1.5f, -2.0f, 3.25f});
  std::vector<uint16_t> h = {0x3f80, 0xc000};  // bf16 1.0, -2.0
  REQUIRE(comm->all_reduce_sum_bf16(h.data(), h.size()) == Status::Ok);
  CHECK(h == std::vector<uint16_t>{0x3f80, 0xc000});

  const char send[] = "abcdef";
  char recv[7] = {};
  REQUIRE(comm->all_gather(send, 6, recv) == Status::Ok);
  CHECK(std::string(recv) == "abcdef");
  // In place: the rank's part already sits at its offset.
  char inplace[4] = "xyz";
  REQUIRE(comm->all_gather(inplace, 3, inplace) == Status::Ok);
  CHECK(std::string(inplace) == "xyz");

  int v = 42;
  REQUIRE(comm->broadcast(&v, sizeof v, 0) == Status::Ok);
  CHECK(v == 42);
  CHECK(comm->broadcast(&v, sizeof v, 1) == Status::InvalidArgument);
  CHECK(comm->last_error().find("rank 1") != std::string::npos);
  CHECK_THROWS_AS(comm->check(comm->broadcast(&v, sizeof v, 1)), Error);
  CHECK_NOTHROW(comm->check(Status::Ok));
  REQUIRE(comm->barrier() == Status::Ok);
  comm->abort(3);  // returns: nothing to end in a group of one

  CHECK(comm->timeout_ms() == 60000);
  comm->set_timeout_ms(250);
  CHECK(comm->timeout_ms() == 250);
}

TEST_CASE("mpi_built() and make_mpi_comm follow the build", "[comm]") {
#ifdef INFER_HAVE_MPI
  CHECK(mpi_built());
  // make_mpi_comm itself (MPI_Init, singleton or launched) is exercised by the
  // comm_mpi_* tests under mpirun: starting MPI in this test binary would tie
  // every later test case to it.
#else
  CHECK_FALSE(mpi_built());
  try {
    make_mpi_comm(nullptr);
    FAIL("make_mpi_comm succeeded in a build without MPI");
  } catch (const Error& e) {
    CHECK(e.status() == Status::Unsupported);
    const std::string msg = e.what();
    CHECK(msg.find("no MPI") != std::string::npos);
    CHECK(msg.find("-DINFER_MPI=ON") != std::string::npos);
  }
#endif
}

TEST_CASE("nccl_built() and make_nccl_comm follow the build", "[comm]") {
#ifdef INFER_HAVE_NCCL
  CHECK(nccl_built());
#else
  CHECK_FALSE(nccl_built());
  auto boot = make_single_comm();
  try {
    make_nccl_comm(*boot, 0);
    FAIL("make_nccl_comm succeeded in a build without NCCL");
  } catch (const Error& e) {
    CHECK(e.status() == Status::Unsupported);
    CHECK(std::string(e.what()).find("no NCCL") != std::string::npos);
  }
#endif
}

TEST_CASE("launched_by_mpi: the launchers' environment variables", "[comm]") {
  EnvVar a("OMPI_COMM_WORLD_SIZE", std::nullopt), b("PMI_SIZE", std::nullopt), c("PMIX_RANK", std::nullopt),
      d("SLURM_PROCID", std::nullopt), e("SLURM_STEP_NUM_TASKS", std::nullopt), f("SLURM_NTASKS", std::nullopt);
  CHECK_FALSE(launched_by_mpi());
  {
    EnvVar v("OMPI_COMM_WORLD_SIZE", "2");  // Open MPI's mpirun
    CHECK(launched_by_mpi());
  }
  {
    EnvVar v("PMI_SIZE", "2");  // Hydra (MPICH, Intel MPI), srun --mpi=pmi2
    CHECK(launched_by_mpi());
  }
  {
    EnvVar v("PMIX_RANK", "0");  // a PMIx launcher
    CHECK(launched_by_mpi());
  }
  {
    // An sbatch script: the job's variables, not a step's: not a launch.
    EnvVar p("SLURM_PROCID", "0"), n("SLURM_NTASKS", "4");
    CHECK_FALSE(launched_by_mpi());
    EnvVar s("SLURM_STEP_NUM_TASKS", "4");  // srun's step
    CHECK(launched_by_mpi());
  }
  CHECK_FALSE(launched_by_mpi());
}
