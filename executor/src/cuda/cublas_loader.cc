#include "cuda/cublas_loader.h"

#include <string>

#include "cuda/dl_library.h"

namespace gp::exec::cuda {
namespace {

// The library of the toolkit this was compiled with, then any.
std::string library_name() { return "libcublas.so." + std::to_string(CUBLAS_VER_MAJOR); }

Result<const CublasApi*> load_once() {
  static CublasApi api;
  GP_ASSIGN_OR_RETURN(DlLibrary library,
                      DlLibrary::open({library_name(), "libcublas.so"}, "cublasGemmEx"));
  bool ok = library.resolve("cublasCreate_v2", &api.create);
  ok = library.resolve("cublasSetStream_v2", &api.set_stream) && ok;
  ok = library.resolve("cublasGemmEx", &api.gemm_ex) && ok;
  ok = library.resolve("cublasGemmStridedBatchedEx", &api.gemm_strided_batched_ex) && ok;
  ok = library.resolve("cublasGetStatusName", &api.status_name) && ok;
  ok = library.resolve("cublasGetStatusString", &api.status_string) && ok;
  if (!ok) return unavailable("cuBLAS (" + library_name() + ") lacks " + library.missing());
  return &api;
}

}  // namespace

Result<const CublasApi*> load_cublas() {
  static const Result<const CublasApi*> loaded = load_once();
  return loaded;
}

}  // namespace gp::exec::cuda
