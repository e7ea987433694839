# CUDA backend: ON, OFF or AUTO. AUTO builds it when a CUDA compiler is found.
set(INFER_HAVE_CUDA OFF)
if(NOT INFER_CUDA STREQUAL "OFF")
  include(CheckLanguage)
  if(NOT DEFINED CMAKE_CUDA_COMPILER AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
  endif()
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
      # Ampere (A100: 80; A10/RTX 30: 86), Ada (L4/RTX 40: 89) and Hopper with
      # its arch-specific instructions (H100/H200: 90a). Code that needs
      # Hopper-only features is guarded by __CUDA_ARCH__ / feature macros, so
      # every target builds. Override with -DCMAKE_CUDA_ARCHITECTURES=native.
      set(CMAKE_CUDA_ARCHITECTURES 80 86 89 90a)
    endif()
    enable_language(CUDA)
    find_package(CUDAToolkit REQUIRED)
    set(INFER_HAVE_CUDA ON)
    add_subdirectory(${CMAKE_CURRENT_SOURCE_DIR}/cuda ${CMAKE_CURRENT_BINARY_DIR}/cuda)
    message(STATUS "infer: CUDA backend enabled (${CMAKE_CUDA_COMPILER}, archs ${CMAKE_CUDA_ARCHITECTURES})")
  elseif(INFER_CUDA STREQUAL "ON")
    message(FATAL_ERROR "INFER_CUDA=ON but no CUDA compiler was found")
  else()
    message(STATUS "infer: no CUDA compiler found, CUDA backend disabled")
  endif()
endif()
