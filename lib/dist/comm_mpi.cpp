// MPI communicator: placeholder until the implementation lands (helper).
#include "dist/comm.h"

#include <cstdlib>

namespace infer {

bool mpi_built() { return false; }
std::unique_ptr<Communicator> make_mpi_comm(void*) {
  raise(Status::Unsupported, "this build has no MPI (configure with -DINFER_MPI=ON and the MPI development files)");
}
bool launched_by_mpi() {
  return std::getenv("OMPI_COMM_WORLD_SIZE") || std::getenv("PMI_SIZE") || std::getenv("PMIX_RANK");
}
bool nccl_built() { return false; }
std::unique_ptr<Communicator> make_nccl_comm(Communicator&, int) {
  raise(Status::Unsupported, "this build has no NCCL (it comes with the CUDA backend)");
}

}  // namespace infer
