// Opening files to read without ever blocking on what is not a file. open() of a FIFO waits for a
// writer and a device may never end (/dev/zero), so every file the tools read goes through here:
// the path is opened with O_NONBLOCK (a FIFO's open returns at once), fstat-ed, and anything but a
// regular file is refused naming the path and what it is ("'x' is a FIFO, not a regular file").
// Standard input ("-") is read only where a flag documents it, by that caller.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>

#include "gp/common/status.h"

namespace gp {

inline constexpr uint64_t kNoSizeLimit = UINT64_MAX;

struct FileReadOptions {
  // Larger files are refused naming their size (a token file, a PEM file, LATEST).
  uint64_t max_bytes = kNoSizeLimit;
  // A symbolic link as the last component is refused (checkpoint files, which must lie inside
  // their directory).
  bool no_follow = false;
};

// "a FIFO", "a directory", "a character device", ... for an st_mode; "a regular file" for one.
std::string_view file_kind(mode_t mode);

// An open, read-only regular file; closed when destroyed. The descriptor is blocking again
// (O_NONBLOCK is only for the open) and close-on-exec.
class RegularFile {
 public:
  // NotFound "cannot open 'x': <reason>" when it cannot be opened; InvalidArgument naming the
  // path and its kind when it is not a regular file, or its size when it is over max_bytes.
  static Result<RegularFile> open(const std::string& path, const FileReadOptions& options = {});

  RegularFile(RegularFile&& other) noexcept;
  RegularFile& operator=(RegularFile&& other) noexcept;
  RegularFile(const RegularFile&) = delete;
  RegularFile& operator=(const RegularFile&) = delete;
  ~RegularFile();

  int fd() const { return fd_; }
  // The size when opened.
  uint64_t size() const { return size_; }
  const std::string& path() const { return path_; }

  // Up to `n` bytes from `offset` (fewer only at the end of the file); DataLoss on a read error.
  Result<std::string> read_at(uint64_t offset, size_t n) const;
  // The whole file, still within max_bytes should it have grown since it was opened.
  Result<std::string> read_all() const;

 private:
  RegularFile(int fd, uint64_t size, uint64_t max_bytes, std::string path)
      : fd_(fd), size_(size), max_bytes_(max_bytes), path_(std::move(path)) {}
  // Up to `n` bytes at `offset` into `out`: how many (fewer only at the end).
  Result<size_t> read_into(char* out, size_t n, uint64_t offset) const;

  int fd_ = -1;
  uint64_t size_ = 0;
  uint64_t max_bytes_ = kNoSizeLimit;
  std::string path_;
};

// The whole of a regular file (RegularFile::open, then read_all).
Result<std::string> read_regular_file(const std::string& path, const FileReadOptions& options = {});

}  // namespace gp
