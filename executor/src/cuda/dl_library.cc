#include "cuda/dl_library.h"

#include <dlfcn.h>

namespace gp::exec::cuda {

Result<DlLibrary> DlLibrary::open(std::initializer_list<std::string> files, const char* probe) {
  DlLibrary library;
  if (dlsym(RTLD_DEFAULT, probe) != nullptr) return library;
  std::string why;
  for (const std::string& file : files) {
    library.handle_ = dlopen(file.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (library.handle_ != nullptr) return library;
    if (why.empty()) {
      const char* error = dlerror();
      why = error != nullptr ? error : "not found";
    }
  }
  return unavailable("cannot load " + *files.begin() + ": " + why +
                     "; add the CUDA toolkit's lib64 to LD_LIBRARY_PATH");
}

void* DlLibrary::find(const char* symbol) const {
  void* p = dlsym(RTLD_DEFAULT, symbol);
  if (p == nullptr && handle_ != nullptr) p = dlsym(handle_, symbol);
  return p;
}

}  // namespace gp::exec::cuda
