// cuBLAS and cuBLASLt opened at run time (dlopen), so that libinfer.so has no
// load-time dependency on them: one binary runs on machines with and without
// the CUDA libraries. Only the entry points the backend calls are resolved.
// Plain C++ (no CUDA headers): the core and the tests include it.
#pragma once

#include <cstdint>
#include <string>

namespace infer::cuda {

// The resolved entry points, as untyped addresses; cublas_loader.cpp casts
// them to cuBLAS's own prototypes (cublas_v2.h, cublasLt.h) where they are
// called. A null member means the library lacked that symbol (load fails).
struct CublasApi {
  void* blas = nullptr;  // dlopen handles
  void* lt = nullptr;
  // libcublas
  void* create = nullptr;         // cublasCreate_v2
  void* destroy = nullptr;        // cublasDestroy_v2
  void* set_stream = nullptr;     // cublasSetStream_v2
  void* gemm_ex = nullptr;        // cublasGemmEx
  void* get_property = nullptr;   // cublasGetProperty
  // libcublasLt
  void* lt_create = nullptr;      // cublasLtCreate
  void* lt_destroy = nullptr;     // cublasLtDestroy
  void* lt_matmul = nullptr;      // cublasLtMatmul
  void* lt_get_version = nullptr; // cublasLtGetVersion
};

// The default sonames: the major version of the toolkit we compile against.
extern const char* const kCublasName;    // "libcublas.so.13"
extern const char* const kCublasLtName;  // "libcublasLt.so.13"

// Opens the two libraries by name (a soname searched the usual way, or a
// path) and resolves every entry point above. Returns false with a message
// naming the library and the loader's reason when either cannot be opened
// or lacks a symbol; nothing stays open then.
bool load_cublas(const char* blas_name, const char* lt_name, CublasApi* out, std::string* err);
// Closes what load_cublas opened and clears *api.
void unload_cublas(CublasApi* api);

// The process-wide copy, loaded on first use from the default names (thread
// safe). nullptr when the libraries are absent; *err says why.
const CublasApi* cublas(std::string* err);

// The cuBLAS version of a loaded API as major * 10000 + minor * 100 + patch
// (read with cublasGetProperty, which needs no device); -1 on failure.
int cublas_version(const CublasApi& api);

// A cuBLAS handle on the run-time loaded library. Error(Backend) naming the
// reason when cuBLAS is absent or cannot start (no device).
class Cublas {
 public:
  Cublas();
  ~Cublas();
  Cublas(const Cublas&) = delete;
  Cublas& operator=(const Cublas&) = delete;
  // y[m][n_out] (f32) = x[m][n_in] · Wᵀ with W f16 [n_out][n_in] row-major
  // and x f16 (device pointers), f32 accumulation (cublasGemmEx), on `stream`
  // (a cudaStream_t; nullptr: the default stream).
  void gemm_f16(const uint16_t* w, int64_t n_out, int64_t n_in, const uint16_t* x, int64_t m, float* y, void* stream);

 private:
  const CublasApi* api_ = nullptr;
  void* handle_ = nullptr;
};

}  // namespace infer::cuda
