// Finding and checking the checkpoint to resume from (layout in gp/exec/checkpoint.h). Only the
// graph library below it: this is what reads files a job may not have written itself.
#pragma once

#include <string>
#include <vector>

#include "gp/common/status.h"
#include "graphpipe/v1/checkpoint.pb.h"

namespace gp::exec {

// The newest complete checkpoint in `dir` whose files all check out (read in full): the one
// LATEST names, else the newest valid one before it, with a line in `warnings` for each one
// skipped and why. NOT_FOUND when there is none; DATA_LOSS naming each problem when every
// checkpoint is damaged. Every rank that calls it on the same files picks the same checkpoint.
Result<graphpipe::v1::CheckpointManifest> latest_checkpoint(
    const std::string& dir, std::vector<std::string>* warnings = nullptr);

// A manifest or an operator's file of a checkpoint, read whole: a regular file and not a
// symbolic link (which could lead out of the checkpoint), else refused naming it. Never blocks on
// a FIFO or a device.
Result<std::string> read_checkpoint_file(const std::string& path);

// Removes what an interrupted checkpoint leaves behind: iter-<k> directories without a manifest
// and *.tmp files. Returns the paths removed. Only while no rank of the job writes checkpoints.
Result<std::vector<std::string>> clean_torn_checkpoints(const std::string& dir);

}  // namespace gp::exec
