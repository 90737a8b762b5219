#include "cuda/cublaslt_loader.h"

#include <string>

#include "cuda/dl_library.h"

namespace gp::exec::cuda {
namespace {

std::string library_name() { return "libcublasLt.so." + std::to_string(CUBLAS_VER_MAJOR); }

Result<const CublasLtApi*> load_once() {
  static CublasLtApi api;
  GP_ASSIGN_OR_RETURN(DlLibrary library,
                      DlLibrary::open({library_name(), "libcublasLt.so"}, "cublasLtMatmul"));
  bool ok = library.resolve("cublasLtCreate", &api.create);
  ok = library.resolve("cublasLtMatmulDescCreate", &api.desc_create) && ok;
  ok = library.resolve("cublasLtMatmulDescDestroy", &api.desc_destroy) && ok;
  ok = library.resolve("cublasLtMatmulDescSetAttribute", &api.desc_set) && ok;
  ok = library.resolve("cublasLtMatrixLayoutCreate", &api.layout_create) && ok;
  ok = library.resolve("cublasLtMatrixLayoutDestroy", &api.layout_destroy) && ok;
  ok = library.resolve("cublasLtMatmulPreferenceCreate", &api.preference_create) && ok;
  ok = library.resolve("cublasLtMatmulPreferenceDestroy", &api.preference_destroy) && ok;
  ok = library.resolve("cublasLtMatmulPreferenceSetAttribute", &api.preference_set) && ok;
  ok = library.resolve("cublasLtMatmulAlgoGetHeuristic", &api.heuristic) && ok;
  ok = library.resolve("cublasLtMatmul", &api.matmul) && ok;
  ok = library.resolve("cublasLtGetStatusName", &api.status_name) && ok;
  if (!ok) return unavailable("cuBLASLt (" + library_name() + ") lacks " + library.missing());
  return &api;
}

}  // namespace

Result<const CublasLtApi*> load_cublaslt() {
  static const Result<const CublasLtApi*> loaded = load_once();
  return loaded;
}

}  // namespace gp::exec::cuda
