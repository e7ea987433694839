#include "cuda/cublas_loader.h"

#include <dlfcn.h>

#include <mutex>

#include "core/error.h"

#include <cublas_v2.h>

namespace infer::cuda {

const char* const kCublasName = "libcublas.so.13";
const char* const kCublasLtName = "libcublasLt.so.13";

namespace {

void* open_lib(const char* name, std::string* err) {
  void* h = dlopen(name, RTLD_NOW | RTLD_LOCAL);
  if (!h && err) {
    const char* why = dlerror();
    *err = std::string("cannot load ") + name + ": " + (why ? why : "unknown reason") +
           " (the CUDA libraries are needed for GEMM on the GPU: install the CUDA 13 toolkit or its cuBLAS package)";
  }
  return h;
}

}  // namespace

bool load_cublas(const char* blas_name, const char* lt_name, CublasApi* out, std::string* err) {
  CublasApi api;
  api.blas = open_lib(blas_name, err);
  if (!api.blas) return false;
  api.lt = open_lib(lt_name, err);
  if (!api.lt) {
    dlclose(api.blas);
    return false;
  }
  struct Sym {
    void** slot;
    void* lib;
    const char* lib_name;
    const char* name;
  };
  const Sym syms[] = {
      {&api.create, api.blas, blas_name, "cublasCreate_v2"},
      {&api.destroy, api.blas, blas_name, "cublasDestroy_v2"},
      {&api.set_stream, api.blas, blas_name, "cublasSetStream_v2"},
      {&api.gemm_ex, api.blas, blas_name, "cublasGemmEx"},
      {&api.get_property, api.blas, blas_name, "cublasGetProperty"},
      {&api.lt_create, api.lt, lt_name, "cublasLtCreate"},
      {&api.lt_destroy, api.lt, lt_name, "cublasLtDestroy"},
      {&api.lt_matmul, api.lt, lt_name, "cublasLtMatmul"},
      {&api.lt_get_version, api.lt, lt_name, "cublasLtGetVersion"},
  };
  for (const Sym& s : syms) {
    *s.slot = dlsym(s.lib, s.name);
    if (!*s.slot) {
      if (err) *err = std::string(s.lib_name) + " has no symbol " + s.name + " (a cuBLAS older than 13?)";
      unload_cublas(&api);
      return false;
    }
  }
  *out = api;
  return true;
}

void unload_cublas(CublasApi* api) {
  if (api->lt) dlclose(api->lt);
  if (api->blas) dlclose(api->blas);
  *api = CublasApi{};
}

const CublasApi* cublas(std::string* err) {
  static std::once_flag once;
  static CublasApi api;
  static bool ok = false;
  static std::string why;
  std::call_once(once, [] { ok = load_cublas(kCublasName, kCublasLtName, &api, &why); });
  if (!ok && err) *err = why;
  return ok ? &api : nullptr;
}

int cublas_version(const CublasApi& api) {
  using GetProperty = cublasStatus_t (*)(libraryPropertyType, int*);
  auto get = reinterpret_cast<GetProperty>(api.get_property);
  int major = 0, minor = 0, patch = 0;
  if (!get || get(MAJOR_VERSION, &major) != CUBLAS_STATUS_SUCCESS || get(MINOR_VERSION, &minor) != CUBLAS_STATUS_SUCCESS ||
      get(PATCH_LEVEL, &patch) != CUBLAS_STATUS_SUCCESS)
    return -1;
  return major * 10000 + minor * 100 + patch;
}

Cublas::Cublas() {
  std::string err;
  api_ = cublas(&err);
  if (!api_) raise(Status::Backend, "%s", err.c_str());
  using Create = cublasStatus_t (*)(cublasHandle_t*);
  cublasHandle_t h = nullptr;
  const cublasStatus_t st = reinterpret_cast<Create>(api_->create)(&h);
  if (st != CUBLAS_STATUS_SUCCESS) raise(Status::Backend, "cublasCreate failed (status %d)", static_cast<int>(st));
  handle_ = h;
}

Cublas::~Cublas() {
  using Destroy = cublasStatus_t (*)(cublasHandle_t);
  if (handle_) reinterpret_cast<Destroy>(api_->destroy)(static_cast<cublasHandle_t>(handle_));
}

void Cublas::gemm_f16(const uint16_t* w, int64_t n_out, int64_t n_in, const uint16_t* x, int64_t m, float* y,
                      void* stream) {
  using SetStream = cublasStatus_t (*)(cublasHandle_t, cudaStream_t);
  using GemmEx = cublasStatus_t (*)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const void*,
                                    const void*, cudaDataType, int, const void*, cudaDataType, int, const void*, void*,
                                    cudaDataType, int, cublasComputeType_t, cublasGemmAlgo_t);
  auto h = static_cast<cublasHandle_t>(handle_);
  reinterpret_cast<SetStream>(api_->set_stream)(h, static_cast<cudaStream_t>(stream));
  // Column-major, as cuBLAS sees row-major arrays: W is an n_in x n_out
  // matrix (Wᵀ), x an n_in x m one (xᵀ), y an n_out x m one (yᵀ), and
  // yᵀ = W xᵀ = (Wᵀ)ᵀ xᵀ: op(A) = transpose.
  const float alpha = 1.0f, beta = 0.0f;
  const cublasStatus_t st = reinterpret_cast<GemmEx>(api_->gemm_ex)(
      h, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(n_out), static_cast<int>(m), static_cast<int>(n_in), &alpha, w,
      CUDA_R_16F, static_cast<int>(n_in), x, CUDA_R_16F, static_cast<int>(n_in), &beta, y, CUDA_R_32F,
      static_cast<int>(n_out), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
  if (st != CUBLAS_STATUS_SUCCESS) raise(Status::Backend, "cublasGemmEx failed (status %d)", static_cast<int>(st));
}

}  // namespace infer::cuda
