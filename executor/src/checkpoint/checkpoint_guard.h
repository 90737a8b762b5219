// Guards on a checkpoint directory: one job writes into it at a time (an exclusive lock), and a
// resume continues the seed and data stream the checkpoint was trained on.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "gp/common/status.h"
#include "graphpipe/v1/checkpoint.pb.h"

namespace gp::exec {

// An exclusive flock(2) on D/.lock, held by the process that commits a job's checkpoints (rank 0)
// for as long as the object lives. The file names the holder (host, pid, start time, then the job
// id once known), so that a second job is refused naming it. The kernel drops the lock when the
// process dies (kill -9 included): a stale file never blocks the next job. A holder that ends
// normally removes the file.
class CheckpointDirLock {
 public:
  // FAILED_PRECONDITION naming the holder when another open file description (another job, or
  // another rank group) holds it; `flag` names the option in messages.
  static Result<std::unique_ptr<CheckpointDirLock>> acquire(const std::string& dir,
                                                            const std::string& flag);
  ~CheckpointDirLock();
  CheckpointDirLock(const CheckpointDirLock&) = delete;
  CheckpointDirLock& operator=(const CheckpointDirLock&) = delete;

  // Adds the job id to the holder lines, for the job's other ranks to check (check_lock_holder).
  Status record_job(const std::string& job_id);
  const std::string& path() const { return path_; }

 private:
  CheckpointDirLock(int fd, std::string path, std::string holder)
      : fd_(fd), path_(std::move(path)), holder_(std::move(holder)) {}
  Status write_holder(const std::string& text);

  int fd_ = -1;
  std::string path_;
  std::string holder_;  // host, pid and start lines
};

// For a job's ranks that write parts of its checkpoints but do not hold the lock: the lock file
// of `dir` must name `job_id` (written by the job's rank 0), else another job owns the directory
// and FAILED_PRECONDITION names it.
Status check_lock_holder(const std::string& dir, const std::string& job_id,
                         const std::string& flag);

// The stream a job trains on: `seed` (plan.training.seed), `data_dir` (--data; empty for
// synthetic data, fingerprinted from its .npy files' names, sizes and headers), shuffling and the
// mini-batch. samples_consumed is left 0 (commit_checkpoint sets it).
Result<graphpipe::v1::CheckpointDataStream> data_stream(uint64_t seed, const std::string& data_dir,
                                                        bool shuffle, int64_t mini_batch);

// Whether resuming `m` with `now` (starting at iteration m.iteration() + 1) continues the
// checkpoint's stream. Another seed, data, shuffling or sample position is FAILED_PRECONDITION
// naming both values and --allow-new-seed; with `allow_new_seed` a line in `warnings` instead.
// A manifest without a recorded stream (older executors) resumes with a warning.
Status check_resume_stream(const graphpipe::v1::CheckpointManifest& m,
                           const graphpipe::v1::CheckpointDataStream& now, bool allow_new_seed,
                           std::vector<std::string>* warnings);

}  // namespace gp::exec
