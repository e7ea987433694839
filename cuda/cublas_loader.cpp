#include "cuda/cublas_loader.h"

#include <dlfcn.h>

#include <mutex>

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

}  // namespace infer::cuda
