#pragma once
// A scratch folder for one test process (named after the process), removed with everything in it
// when the process exits, so that repeated test runs leave nothing behind in the temp folder.
#include <unistd.h>

#include <filesystem>
#include <string>
#include <system_error>

namespace gp::testing {

class ScratchDir {
 public:
  explicit ScratchDir(const std::string& prefix)
      : path_(std::filesystem::temp_directory_path() /
              (prefix + "-" + std::to_string(::getpid()))) {}
  ~ScratchDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;

  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

}  // namespace gp::testing
