# Communicators between the ranks of a tensor-parallel group (lib/dist/comm.h).
#
# MPI: INFER_MPI = ON, OFF or AUTO (the default: on when find_package(MPI
# COMPONENTS CXX) finds the development files; Debian: libopenmpi-dev). Sets
# INFER_HAVE_MPI; lib/dist/comm_mpi.cpp is compiled against MPI when it is on,
# and libinfer (shared and static) links MPI::MPI_CXX. Only MPI's C interface
# is used (the deprecated C++ bindings are skipped: MPI_CXX_SKIP_MPICXX).
#
# NCCL: built with the CUDA backend when the toolkit has nccl.h (the CUDA
# toolkit at /usr/local/cuda brings it). Sets INFER_HAVE_NCCL. Only the header
# is used at build time: libnccl.so.2 is opened at run time (dlopen), like
# cuBLAS, so that libinfer.so keeps no load-time CUDA dependency
# (tests/cuda_needed_test.sh).
set(INFER_MPI "AUTO" CACHE STRING "Build the MPI communicator (tensor parallelism across processes): ON, OFF or AUTO")
set_property(CACHE INFER_MPI PROPERTY STRINGS ON OFF AUTO)
set(INFER_HAVE_MPI OFF)
if(NOT INFER_MPI STREQUAL "OFF")
  set(MPI_CXX_SKIP_MPICXX ON CACHE BOOL "Skip MPI's deprecated C++ bindings")
  if(INFER_MPI STREQUAL "ON")
    find_package(MPI REQUIRED COMPONENTS CXX)
  else()
    find_package(MPI QUIET COMPONENTS CXX)
  endif()
  if(MPI_CXX_FOUND)
    set(INFER_HAVE_MPI ON)
    message(STATUS "infer: MPI communicator enabled (MPI ${MPI_CXX_VERSION}, ${MPI_CXX_LIBRARIES})")
  else()
    message(STATUS "infer: no MPI development files found, MPI communicator disabled (tensor parallelism needs -DINFER_MPI=ON and libopenmpi-dev)")
  endif()
else()
  message(STATUS "infer: MPI communicator disabled (INFER_MPI=OFF)")
endif()

set(INFER_HAVE_NCCL OFF)
if(INFER_HAVE_CUDA)
  find_path(INFER_NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS} ${CUDAToolkit_LIBRARY_ROOT}/include)
  if(INFER_NCCL_INCLUDE_DIR)
    set(INFER_HAVE_NCCL ON)
    message(STATUS "infer: NCCL communicator enabled (${INFER_NCCL_INCLUDE_DIR}/nccl.h; libnccl.so.2 opened at run time)")
  else()
    message(STATUS "infer: no nccl.h in the CUDA toolkit, NCCL communicator disabled")
  endif()
endif()
