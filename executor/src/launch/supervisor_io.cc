#include "supervisor_io.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>

namespace gp::exec::launch {

Console::Console(int fd) : fd_(fd) {
  struct stat st {};
  if (::fstat(fd, &st) != 0 || S_ISREG(st.st_mode)) return;
  // A description of our own: O_NONBLOCK on the inherited one would reach the launcher's shell
  // and everything else that shares it.
  const std::string self = "/proc/self/fd/" + std::to_string(fd);
  const int own = ::open(self.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
  if (own >= 0) {
    fd_ = own;
    own_ = true;
  }
}

Console::~Console() {
  if (own_) ::close(fd_);
}

bool Console::write_all(const char* data, size_t size) {
  while (size > 0) {
    const ssize_t n = ::write(fd_, data, size);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) {
      pollfd p{fd_, POLLOUT, 0};
      if (::poll(&p, 1, kStallMs) == 1 && (p.revents & POLLOUT) != 0) continue;
      dropped_ += static_cast<int64_t>(size);
      return false;
    }
    if (n <= 0) return true;  // a console gone away: nothing to tell it
    data += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

void Console::write(const std::string& text) {
  if (dropped_ > 0) {
    const std::string note = "graphpipe-launch: the console stalled; " + std::to_string(dropped_) +
                             " bytes of the ranks' output are only in their logs\n";
    const int64_t before = dropped_;
    dropped_ = 0;
    if (!write_all(note.data(), note.size())) {
      dropped_ = before + static_cast<int64_t>(text.size());
      return;
    }
  }
  write_all(text.data(), text.size());
}

bool write_atomically(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  // A fresh file: whatever was left at the temporary name (a FIFO, a link) is not written into.
  ::unlink(tmp.c_str());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0644);
  if (fd < 0) return false;
  bool ok = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  ok = ::close(fd) == 0 && ok;
  return ok && ::rename(tmp.c_str(), path.c_str()) == 0;
}

BeaconWriter::BeaconWriter(std::string path) : path_(std::move(path)) {
  if (path_.empty()) return;
  ok_ = beat();
  thread_ = std::thread([this] {
    std::unique_lock lock(mu_);
    auto next = std::chrono::steady_clock::now();
    for (;;) {
      next += std::chrono::seconds(1);  // a steady cadence, whatever a write took
      if (stop_cv_.wait_until(lock, next, [this] { return stop_; })) return;
      beat();
    }
  });
}

BeaconWriter::~BeaconWriter() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  stop_cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void BeaconWriter::set_stop(int sig) {
  if (path_.empty()) return;
  std::lock_guard lock(mu_);
  stop_signal_ = sig;
  beat();
}

bool BeaconWriter::beat() {
  const std::string stop = stop_signal_ != 0 ? " stop " + std::to_string(stop_signal_) : "";
  return write_atomically(path_, std::to_string(++beats_) + stop + "\n");
}

}  // namespace gp::exec::launch
