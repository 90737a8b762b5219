#include "gp/common/file_read.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

namespace gp {
namespace {

Status not_regular(const std::string& path, mode_t mode) {
  return invalid_argument("'" + path + "' is " + std::string(file_kind(mode)) +
                          ", not a regular file");
}

Status too_large(const std::string& path, uint64_t size, uint64_t max_bytes) {
  return invalid_argument("'" + path + "' is " + std::to_string(size) + " bytes, more than the " +
                          std::to_string(max_bytes) + " allowed");
}

Status cannot_open(const std::string& path, int error) {
  return not_found("cannot open '" + path + "': " + std::strerror(error));
}

}  // namespace

std::string_view file_kind(mode_t mode) {
  if (S_ISREG(mode)) return "a regular file";
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISLNK(mode)) return "a symbolic link";
  return "an unknown kind of file";
}

Result<RegularFile> RegularFile::open(const std::string& path, const FileReadOptions& options) {
  // Checked before opening too, so that a device is never opened (opening one can act: a tape
  // rewinds, a terminal becomes the controlling one); the fstat below closes the race.
  struct stat st {};
  const auto look = [&] {
    return options.no_follow ? ::lstat(path.c_str(), &st) : ::stat(path.c_str(), &st);
  };
  if (look() != 0) return cannot_open(path, errno);
  if (!S_ISREG(st.st_mode)) return not_regular(path, st.st_mode);
  // O_NONBLOCK: should the path have become a FIFO since, open returns at once instead of
  // waiting for a writer.
  const int flags =
      O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY | (options.no_follow ? O_NOFOLLOW : 0);
  const int fd = ::open(path.c_str(), flags);
  if (fd < 0) {
    const int error = errno;
    // A socket (ENXIO) or a link under no_follow (ELOOP) swapped in since the check.
    if (look() == 0 && !S_ISREG(st.st_mode)) return not_regular(path, st.st_mode);
    return cannot_open(path, error);
  }
  if (::fstat(fd, &st) != 0) {
    const int error = errno;
    ::close(fd);
    return cannot_open(path, error);
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return not_regular(path, st.st_mode);
  }
  const int fl = ::fcntl(fd, F_GETFL);
  if (fl < 0 || ::fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) != 0) {
    const int error = errno;
    ::close(fd);
    return cannot_open(path, error);
  }
  const auto size = static_cast<uint64_t>(st.st_size);
  if (size > options.max_bytes) {
    ::close(fd);
    return too_large(path, size, options.max_bytes);
  }
  return RegularFile(fd, size, options.max_bytes, path);
}

RegularFile::RegularFile(RegularFile&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)),
      size_(other.size_),
      max_bytes_(other.max_bytes_),
      path_(std::move(other.path_)) {}

RegularFile& RegularFile::operator=(RegularFile&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = std::exchange(other.fd_, -1);
    size_ = other.size_;
    max_bytes_ = other.max_bytes_;
    path_ = std::move(other.path_);
  }
  return *this;
}

RegularFile::~RegularFile() {
  if (fd_ >= 0) ::close(fd_);
}

Result<size_t> RegularFile::read_into(char* out, size_t n, uint64_t offset) const {
  size_t got = 0;
  while (got < n) {
    const ssize_t r = ::pread(fd_, out + got, n - got, static_cast<off_t>(offset + got));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      return Status(StatusCode::kDataLoss,
                    "error reading '" + path_ + "': " + std::strerror(errno));
    }
    if (r == 0) break;
    got += static_cast<size_t>(r);
  }
  return got;
}

Result<std::string> RegularFile::read_at(uint64_t offset, size_t n) const {
  std::string out(n, '\0');
  GP_ASSIGN_OR_RETURN(const size_t got, read_into(out.data(), n, offset));
  out.resize(got);
  return out;
}

Result<std::string> RegularFile::read_all() const {
  // One byte past the cap tells a file that grew over it from one that reached it exactly; a
  // file that grew is read on in chunks.
  const uint64_t cap = max_bytes_ == kNoSizeLimit ? kNoSizeLimit : max_bytes_ + 1;
  std::string out;
  size_t have = 0;
  size_t want = static_cast<size_t>(std::min<uint64_t>(size_ + 1, cap));
  while (true) {
    out.resize(want);
    GP_ASSIGN_OR_RETURN(const size_t got, read_into(out.data() + have, want - have, have));
    have += got;
    if (have < want || have >= cap) break;
    want = static_cast<size_t>(std::min<uint64_t>(have + (size_t{1} << 20), cap));
  }
  out.resize(have);
  if (have > max_bytes_) return too_large(path_, have, max_bytes_);
  return out;
}

Result<std::string> read_regular_file(const std::string& path, const FileReadOptions& options) {
  GP_ASSIGN_OR_RETURN(RegularFile file, RegularFile::open(path, options));
  return file.read_all();
}

}  // namespace gp
