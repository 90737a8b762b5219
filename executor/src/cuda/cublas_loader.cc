#include "cuda/cublas_loader.h"

#include <dlfcn.h>

#include <mutex>
#include <string>

namespace gp::exec::cuda {
namespace {

// The library of the toolkit this was compiled with, then any.
std::string library_name() { return "libcublas.so." + std::to_string(CUBLAS_VER_MAJOR); }

template <typename Fn>
bool resolve(void* library, const char* symbol, Fn* out, std::string* missing) {
  void* p = dlsym(RTLD_DEFAULT, symbol);
  if (p == nullptr && library != nullptr) p = dlsym(library, symbol);
  if (p == nullptr) {
    *missing += std::string(missing->empty() ? "" : ", ") + symbol;
    return false;
  }
  *out = reinterpret_cast<Fn>(p);
  return true;
}

Result<const CublasApi*> load_once() {
  static CublasApi api;
  void* library = nullptr;
  if (dlsym(RTLD_DEFAULT, "cublasGemmEx") == nullptr) {
    library = dlopen(library_name().c_str(), RTLD_NOW | RTLD_LOCAL);
    if (library == nullptr) library = dlopen("libcublas.so", RTLD_NOW | RTLD_LOCAL);
    if (library == nullptr) {
      const char* why = dlerror();
      return unavailable("cannot load cuBLAS (" + library_name() +
                         "): " + (why != nullptr ? why : "not found") +
                         "; add the CUDA toolkit's lib64 to LD_LIBRARY_PATH");
    }
  }
  std::string missing;
  bool ok = resolve(library, "cublasCreate_v2", &api.create, &missing);
  ok = resolve(library, "cublasSetStream_v2", &api.set_stream, &missing) && ok;
  ok = resolve(library, "cublasGemmEx", &api.gemm_ex, &missing) && ok;
  ok = resolve(library, "cublasGemmStridedBatchedEx", &api.gemm_strided_batched_ex, &missing) && ok;
  ok = resolve(library, "cublasGetStatusName", &api.status_name, &missing) && ok;
  ok = resolve(library, "cublasGetStatusString", &api.status_string, &missing) && ok;
  if (!ok) return unavailable("cuBLAS (" + library_name() + ") lacks " + missing);
  return &api;
}

}  // namespace

Result<const CublasApi*> load_cublas() {
  static const Result<const CublasApi*> loaded = load_once();
  return loaded;
}

}  // namespace gp::exec::cuda
