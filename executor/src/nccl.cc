#include "gp/exec/nccl.h"

#if GP_HAVE_CUDA
#include "cuda/nccl_entry.h"
#endif

namespace gp::exec {

#if GP_HAVE_CUDA

Result<std::string> nccl_version() { return cuda::nccl_version_text(); }

Result<std::vector<std::string>> make_nccl_unique_ids(int count) {
  return cuda::make_unique_ids(count);
}

Result<std::unique_ptr<Communicator>> make_nccl_communicator(const NcclOptions& options) {
  return cuda::make_nccl_communicator(options);
}

#else

namespace {
Status no_cuda() {
  return unimplemented(
      "the NCCL data plane needs a build with the CUDA backend (configure with -DGP_CUDA=ON on a "
      "machine with the CUDA toolkit and NCCL)");
}
}  // namespace

Result<std::string> nccl_version() { return no_cuda(); }
Result<std::vector<std::string>> make_nccl_unique_ids(int) { return no_cuda(); }
Result<std::unique_ptr<Communicator>> make_nccl_communicator(const NcclOptions&) {
  return no_cuda();
}

#endif

}  // namespace gp::exec
