// A library of the CUDA toolkit opened at run time instead of linked: linked, cuBLAS, cuBLASLt
// and cuDNN would load hundreds of MB into every process at start, CPU-only runs included.
// Symbols already in the process (linked in, or the CUDA emulator's) win over the library's.
#pragma once

#include <initializer_list>
#include <string>

#include "gp/common/status.h"

namespace gp::exec::cuda {

class DlLibrary {
 public:
  // Opens the first of `files` that loads, unless `probe` is already a symbol of the process.
  // Unavailable naming the first file and the loader's reason.
  static Result<DlLibrary> open(std::initializer_list<std::string> files, const char* probe);

  // Looks `symbol` up into `*fn`; a missing one is remembered for missing().
  template <typename Fn>
  bool resolve(const char* symbol, Fn* fn) {
    void* p = find(symbol);
    if (p == nullptr) {
      missing_ += std::string(missing_.empty() ? "" : ", ") + symbol;
      return false;
    }
    *fn = reinterpret_cast<Fn>(p);
    return true;
  }

  // The symbols resolve() did not find, comma-separated; empty when all were found.
  const std::string& missing() const { return missing_; }

 private:
  void* find(const char* symbol) const;

  void* handle_ = nullptr;  // never closed: the functions stay in use until the process exits
  std::string missing_;
};

}  // namespace gp::exec::cuda
