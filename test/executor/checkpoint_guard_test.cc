// The checkpoint directory's lock (one job at a time, the holder named, free again when the
// holder dies) and the seed and data stream a resume must continue.
#include "checkpoint/checkpoint_guard.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>

#include "runtime/checkpoint.h"

namespace gp {
namespace {

namespace fs = std::filesystem;
using graphpipe::v1::CheckpointDataStream;
using graphpipe::v1::CheckpointManifest;

struct TempDir {
  std::string path;
  TempDir() {
    static int counter = 0;
    path = (fs::temp_directory_path() /
            ("gp_guard_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter++)))
               .string();
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
};

CheckpointDataStream stream(uint64_t seed, int64_t mini_batch = 4) {
  auto s = exec::data_stream(seed, "", true, mini_batch);
  REQUIRE(s.ok());
  return *s;
}

// The manifest of iteration `it` as commit_checkpoint records `s`.
CheckpointManifest manifest_of(const CheckpointDataStream& s, int64_t it) {
  CheckpointManifest m;
  m.set_iteration(it);
  *m.mutable_stream() = s;
  m.mutable_stream()->set_samples_consumed((it + 1) * s.mini_batch());
  return m;
}

TEST_CASE("a second holder of a checkpoint directory is refused naming the first") {
  TempDir dir;
  auto first = exec::CheckpointDirLock::acquire(dir.path, "--checkpoint-dir");
  REQUIRE(first.ok());
  REQUIRE((*first)->record_job("job-one").ok());
  auto second = exec::CheckpointDirLock::acquire(dir.path, "--checkpoint-dir");
  REQUIRE_FALSE(second.ok());
  const std::string msg = second.status().message();
  CHECK(second.status().code() == StatusCode::kFailedPrecondition);
  CHECK_THAT(msg, Catch::Contains("--checkpoint-dir " + dir.path + " is in use by another job"));
  CHECK_THAT(msg, Catch::Contains("pid " + std::to_string(::getpid())));
  CHECK_THAT(msg, Catch::Contains("job job-one"));
  // Released with its holder: the next job gets it.
  first->reset();
  CHECK_FALSE(fs::exists(fs::path(dir.path) / ".lock"));
  CHECK(exec::CheckpointDirLock::acquire(dir.path, "--checkpoint-dir").ok());
}

TEST_CASE("a checkpoint directory lock held by a process killed with SIGKILL blocks no one") {
  TempDir dir;
  int ready[2];
  REQUIRE(::pipe(ready) == 0);
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    auto lock = exec::CheckpointDirLock::acquire(dir.path, "--checkpoint-dir");
    const char c = lock.ok() ? 'y' : 'n';
    (void)!::write(ready[1], &c, 1);
    for (;;) ::pause();
  }
  ::close(ready[1]);
  char c = 0;
  REQUIRE(::read(ready[0], &c, 1) == 1);
  ::close(ready[0]);
  REQUIRE(c == 'y');
  auto while_alive = exec::CheckpointDirLock::acquire(dir.path, "--checkpoint-dir");
  CHECK_FALSE(while_alive.ok());
  CHECK_THAT(while_alive.status().message(), Catch::Contains("pid " + std::to_string(child)));
  ::kill(child, SIGKILL);
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  // The file still names the dead holder; the lock is gone with it.
  CHECK(fs::exists(fs::path(dir.path) / ".lock"));
  auto after = exec::CheckpointDirLock::acquire(dir.path, "--checkpoint-dir");
  INFO(after.status().to_string());
  CHECK(after.ok());
}

TEST_CASE("a rank that writes checkpoint parts refuses a directory locked by another job") {
  TempDir dir;
  auto lock = exec::CheckpointDirLock::acquire(dir.path, "--checkpoint-dir");
  REQUIRE(lock.ok());
  REQUIRE((*lock)->record_job("job-a").ok());
  CHECK(exec::check_lock_holder(dir.path, "job-a", "--checkpoint-dir").ok());
  const Status other = exec::check_lock_holder(dir.path, "job-b", "--checkpoint-dir");
  REQUIRE_FALSE(other.ok());
  CHECK_THAT(other.message(), Catch::Contains("held by another job"));
  CHECK_THAT(other.message(), Catch::Contains("job job-a"));
  CHECK_THAT(other.message(), Catch::Contains("not by this job job-b"));
}

TEST_CASE("a resume with another seed is refused naming both unless allowed") {
  const CheckpointManifest m = manifest_of(stream(1), 3);
  std::vector<std::string> warnings;
  CHECK(exec::check_resume_stream(m, stream(1), false, &warnings).ok());
  CHECK(warnings.empty());
  const Status refused = exec::check_resume_stream(m, stream(7), false, &warnings);
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.code() == StatusCode::kFailedPrecondition);
  CHECK_THAT(refused.message(), Catch::Contains("seed 1, this plan's is 7"));
  CHECK_THAT(refused.message(), Catch::Contains("--allow-new-seed"));
  CHECK(warnings.empty());
  CHECK(exec::check_resume_stream(m, stream(7), true, &warnings).ok());
  REQUIRE(warnings.size() == 1);
  CHECK_THAT(warnings[0], Catch::Contains("--allow-new-seed"));
  CHECK_THAT(warnings[0], Catch::Contains("seed 1, this plan's is 7"));
}

TEST_CASE("a resume on other data or at another sample position is refused") {
  TempDir data;
  std::ofstream(fs::path(data.path) / "x.npy") << "\x93NUMPY first";
  auto npy = exec::data_stream(1, data.path, true, 4);
  REQUIRE(npy.ok());
  CHECK(npy->data_fingerprint().rfind("npy:", 0) == 0);
  const CheckpointManifest m = manifest_of(*npy, 2);
  CHECK(exec::check_resume_stream(m, *npy, false, nullptr).ok());
  // Synthetic data instead of the files.
  const Status synthetic = exec::check_resume_stream(m, stream(1), false, nullptr);
  REQUIRE_FALSE(synthetic.ok());
  CHECK_THAT(synthetic.message(), Catch::Contains("this run reads synthetic data"));
  // The files changed.
  std::ofstream(fs::path(data.path) / "x.npy") << "\x93NUMPY other, longer";
  auto changed = exec::data_stream(1, data.path, true, 4);
  REQUIRE(changed.ok());
  CHECK(changed->data_fingerprint() != npy->data_fingerprint());
  CHECK_FALSE(exec::check_resume_stream(m, *changed, false, nullptr).ok());
  // Unshuffled.
  auto unshuffled = exec::data_stream(1, data.path, false, 4);
  REQUIRE(unshuffled.ok());
  const CheckpointManifest m2 = manifest_of(*unshuffled, 2);
  const Status shuffle = exec::check_resume_stream(m2, *changed, false, nullptr);
  CHECK_FALSE(shuffle.ok());
  // Another mini-batch reads on from another sample.
  const Status position =
      exec::check_resume_stream(manifest_of(stream(1, 4), 2), stream(1, 8), false, nullptr);
  REQUIRE_FALSE(position.ok());
  CHECK_THAT(position.message(), Catch::Contains("12 samples consumed"));
  CHECK_THAT(position.message(), Catch::Contains("from sample 24"));
}

TEST_CASE("a manifest without a recorded stream resumes with a warning") {
  CheckpointManifest old;
  old.set_iteration(5);
  std::vector<std::string> warnings;
  CHECK(exec::check_resume_stream(old, stream(9), false, &warnings).ok());
  REQUIRE(warnings.size() == 1);
  CHECK_THAT(warnings[0], Catch::Contains("records no seed or data stream"));
}

}  // namespace
}  // namespace gp
