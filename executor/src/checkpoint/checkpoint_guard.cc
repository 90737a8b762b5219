// The checkpoint directory's lock and the resume's stream check (checkpoint_guard.h).
#include "checkpoint/checkpoint_guard.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <utility>

#include "checkpoint/checkpoint_format.h"
#include "gp/common/util.h"

namespace gp::exec {
namespace {

namespace fs = std::filesystem;
using graphpipe::v1::CheckpointDataStream;
using graphpipe::v1::CheckpointManifest;

constexpr size_t kMaxLockBytes = 4096;

std::string lock_path(const std::string& dir) { return (fs::path(dir) / ".lock").string(); }

std::string this_host() {
  char name[256] = {};
  if (::gethostname(name, sizeof(name) - 1) != 0) return "?";
  return name;
}

// The holder lines of an open lock file, joined for a message ("host h, pid p, ...").
std::string describe_holder(int fd) {
  std::string text(kMaxLockBytes, '\0');
  const ssize_t n = ::pread(fd, text.data(), text.size(), 0);
  text.resize(n > 0 ? static_cast<size_t>(n) : 0);
  std::string out;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    std::string line = text.substr(start, end - start);
    // Only printable text reaches a message.
    line.erase(
        std::remove_if(line.begin(), line.end(), [](char c) { return c < 0x20 || c == 0x7f; }),
        line.end());
    if (!line.empty()) out += (out.empty() ? "" : ", ") + line.substr(0, 200);
    start = end + 1;
  }
  return out.empty() ? "a holder that has not recorded itself yet" : out;
}

Result<int> open_lock_file(const std::string& path, const std::string& flag, int flags) {
  const int fd = ::open(path.c_str(), flags | O_CLOEXEC | O_NOFOLLOW, 0644);
  if (fd < 0) {
    return Status(StatusCode::kPermissionDenied,
                  flag + " lock file " + path + ": " + std::strerror(errno));
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return Status(StatusCode::kPermissionDenied,
                  flag + " lock file " + path + " is not a regular file");
  }
  return fd;
}

// The value of `key` in lock file text ("key value" lines), or "".
std::string lock_field(const std::string& text, const std::string& key) {
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    if (text.compare(start, key.size() + 1, key + " ") == 0) {
      return text.substr(start + key.size() + 1, end - start - key.size() - 1);
    }
    start = end + 1;
  }
  return "";
}

// FNV-1a 64 of the .npy files of `dir`: names, sizes and the first 4 KiB (the header: dtype and
// shape), sorted by name. Cheap, and other data under the same shape and size is a rare accident.
Result<std::string> data_fingerprint(const std::string& dir) {
  std::error_code ec;
  std::vector<std::pair<std::string, fs::path>> files;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    if (entry.path().extension() != ".npy" || !entry.is_regular_file(ec)) continue;
    files.emplace_back(entry.path().filename().string(), entry.path());
  }
  if (ec) return invalid_argument("--data " + dir + ": " + ec.message());
  std::sort(files.begin(), files.end());
  uint64_t h = checkpoint_format::fnv1a("npy", 3);
  for (const auto& [name, path] : files) {
    const uintmax_t size = fs::file_size(path, ec);
    std::string head(4096, '\0');
    std::ifstream in(path, std::ios::binary);
    in.read(head.data(), static_cast<std::streamsize>(head.size()));
    head.resize(static_cast<size_t>(std::max<std::streamsize>(in.gcount(), 0)));
    const std::string meta = name + '\0' + std::to_string(ec ? 0 : size) + '\0';
    h = checkpoint_format::fnv1a(meta.data(), meta.size(), h);
    h = checkpoint_format::fnv1a(head.data(), head.size(), h);
  }
  char hex[17];
  std::snprintf(hex, sizeof(hex), "%016llx", static_cast<unsigned long long>(h));
  return "npy:" + std::string(hex);
}

std::string describe_data(const CheckpointDataStream& s) {
  if (s.data_fingerprint() == "synthetic") return "synthetic data";
  return "--data " + (s.data_dir().empty() ? std::string("?") : s.data_dir()) + " (" +
         s.data_fingerprint() + ")";
}

}  // namespace

Result<std::unique_ptr<CheckpointDirLock>> CheckpointDirLock::acquire(const std::string& dir,
                                                                      const std::string& flag) {
  const std::string path = lock_path(dir);
  int fd = -1;
  // A holder removes the file when it releases it: a lock won on a file that is no longer the
  // one at `path` guards nothing, so it is taken again on the file there now.
  for (int attempt = 0; fd < 0; ++attempt) {
    GP_ASSIGN_OR_RETURN(fd, open_lock_file(path, flag, O_RDWR | O_CREAT));
    if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
      const int err = errno;
      std::string holder = describe_holder(fd);
      ::close(fd);
      if (err == EWOULDBLOCK) {
        return failed_precondition(
            flag + " " + dir + " is in use by another job (" + holder + "; lock " + path +
            "): two jobs writing one checkpoint directory would resume each other's state; wait "
            "for it to end or use another directory");
      }
      return Status(StatusCode::kPermissionDenied,
                    flag + " lock file " + path + ": flock: " + std::strerror(err));
    }
    struct stat held {
    }, now{};
    if (::fstat(fd, &held) != 0 || ::lstat(path.c_str(), &now) != 0 || held.st_ino != now.st_ino ||
        held.st_dev != now.st_dev) {
      ::close(fd);
      fd = -1;
      if (attempt == 100) {
        return Status(StatusCode::kAborted,
                      flag + " lock file " + path + " keeps being replaced while it is taken");
      }
    }
  }
  std::string holder = "host " + this_host() + "\npid " + std::to_string(::getpid()) +
                       "\nstarted " + utc_now_iso8601() + "\n";
  std::unique_ptr<CheckpointDirLock> lock(new CheckpointDirLock(fd, path, std::move(holder)));
  GP_RETURN_IF_ERROR(lock->write_holder(lock->holder_));
  return lock;
}

CheckpointDirLock::~CheckpointDirLock() {
  // Removed while still held (acquire retries on a file that was removed), then released. A
  // holder that dies leaves the file, unlocked: the next job takes it.
  if (fd_ < 0) return;
  ::unlink(path_.c_str());
  ::close(fd_);
}

Status CheckpointDirLock::write_holder(const std::string& text) {
  if (::ftruncate(fd_, 0) != 0 ||
      ::pwrite(fd_, text.data(), text.size(), 0) != static_cast<ssize_t>(text.size())) {
    return Status(StatusCode::kPermissionDenied,
                  "lock file " + path_ + ": cannot write its holder: " + std::strerror(errno));
  }
  return ok_status();
}

Status CheckpointDirLock::record_job(const std::string& job_id) {
  return write_holder(holder_ + "job " + job_id + "\n");
}

Status check_lock_holder(const std::string& dir, const std::string& job_id,
                         const std::string& flag) {
  const std::string path = lock_path(dir);
  GP_ASSIGN_OR_RETURN(const int fd, open_lock_file(path, flag, O_RDONLY));
  std::string text(kMaxLockBytes, '\0');
  const ssize_t n = ::pread(fd, text.data(), text.size(), 0);
  text.resize(n > 0 ? static_cast<size_t>(n) : 0);
  const std::string holder = describe_holder(fd);
  ::close(fd);
  if (lock_field(text, "job") != job_id) {
    return failed_precondition(flag + " " + dir + " is held by another job (" + holder + "; lock " +
                               path + "), not by this job " + job_id);
  }
  return ok_status();
}

Result<CheckpointDataStream> data_stream(uint64_t seed, const std::string& data_dir, bool shuffle,
                                         int64_t mini_batch) {
  CheckpointDataStream s;
  s.set_seed(seed);
  s.set_mini_batch(mini_batch);
  if (data_dir.empty()) {
    s.set_data_fingerprint("synthetic");
    return s;
  }
  s.set_data_dir(data_dir);
  s.set_shuffle(shuffle);
  GP_ASSIGN_OR_RETURN(std::string fingerprint, data_fingerprint(data_dir));
  s.set_data_fingerprint(std::move(fingerprint));
  return s;
}

Status check_resume_stream(const CheckpointManifest& m, const CheckpointDataStream& now,
                           bool allow_new_seed, std::vector<std::string>* warnings) {
  const std::string in = checkpoint_format::iter_dir("", m.iteration());
  auto warn = [&](const std::string& line) {
    if (warnings != nullptr) warnings->push_back(line);
  };
  if (!m.has_stream()) {
    warn("checkpoint " + in +
         " records no seed or data stream (written by an older executor): "
         "resuming without checking that this run continues it");
    return ok_status();
  }
  const CheckpointDataStream& was = m.stream();
  std::vector<std::string> diffs;
  if (was.seed() != now.seed()) {
    diffs.push_back("seed " + std::to_string(was.seed()) + ", this plan's is " +
                    std::to_string(now.seed()));
  }
  if (was.data_fingerprint() != now.data_fingerprint()) {
    diffs.push_back(describe_data(was) + ", this run reads " + describe_data(now));
  } else if (was.shuffle() != now.shuffle()) {
    diffs.push_back(std::string(was.shuffle() ? "shuffled" : "unshuffled (--no-shuffle)") +
                    " data, this run's is " +
                    (now.shuffle() ? "shuffled" : "unshuffled (--no-shuffle)"));
  }
  const int64_t next = (m.iteration() + 1) * now.mini_batch();
  if (was.samples_consumed() != next) {
    diffs.push_back(std::to_string(was.samples_consumed()) + " samples consumed (mini-batch " +
                    std::to_string(was.mini_batch()) + "), this run would read on from sample " +
                    std::to_string(next) + " (mini-batch " + std::to_string(now.mini_batch()) +
                    ")");
  }
  if (diffs.empty()) return ok_status();
  std::string all;
  for (const auto& d : diffs) all += (all.empty() ? "" : "; ") + d;
  if (!allow_new_seed) {
    return failed_precondition("--resume: the checkpoint of iteration " +
                               std::to_string(m.iteration()) + " was trained with " + all +
                               ": resuming would not continue its stream; --allow-new-seed "
                               "resumes anyway");
  }
  warn("--allow-new-seed: resuming the checkpoint of iteration " + std::to_string(m.iteration()) +
       " on another stream: it was trained with " + all);
  return ok_status();
}

}  // namespace gp::exec
