// Checkpoints per operator: parameters and optimizer state, so that any plan of the same model
// (other stages, other ranks, fewer devices) can resume from them.
//
// Layout of a checkpoint directory D:
//   D/iter-<k>/op-<index>.bin   one per operator with parameters: header, parameters, state
//   D/iter-<k>/MANIFEST.pbtxt   written last (CheckpointManifest): the checkpoint is complete
//   D/LATEST                    "iter-<k>", replaced atomically after the manifest
// Every file is written to a temporary name, flushed to disk and renamed, so a crash leaves the
// previous checkpoint intact; a file that is torn anyway (wrong size, bad checksum, header that
// does not match the manifest: another operator, iteration or run) is refused with an error
// naming it, and resuming falls back to the previous checkpoint, which commit keeps.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "checkpoint/checkpoint_files.h"
#include "gp/common/status.h"
#include "gp/exec/stage_runner.h"
#include "gp/model/graph.h"
#include "graphpipe/v1/checkpoint.pb.h"

namespace gp::exec {

// Writes the tensors of the runner's operators that have parameters into D/iter-<iteration>/.
// `run_id` names the job (every rank passes the same); commit_checkpoint must get it too.
// `state`, when given, is the runner's whole optimizer state in the unsharded layout
// (StageRunner::gather_state: a sharded runner's), written instead of the runner's own.
Status write_stage_checkpoint(const std::string& dir, int64_t iteration, const model::Graph& graph,
                              StageRunner& runner, const std::string& run_id,
                              const std::vector<float>* state = nullptr);

// Once every rank has written its part: checks that every operator of the model with parameters
// has its file, writes the manifest, then points LATEST at it and removes checkpoints older
// than the previous one. `stream` (checkpoint_guard.h: data_stream), when given, is recorded with
// samples_consumed = (iteration + 1) * its mini-batch, for a resume to check.
Status commit_checkpoint(const std::string& dir, int64_t iteration, const model::Graph& graph,
                         const std::string& plan_hash,
                         const graphpipe::v1::TrainingConfig& training, const std::string& run_id,
                         const graphpipe::v1::CheckpointDataStream* stream = nullptr);

// Loads the runner's operators from the checkpoint. The model must be the one checkpointed and
// the optimizer the same kind (the state layout); every file is checked.
Status load_stage_checkpoint(const std::string& dir,
                             const graphpipe::v1::CheckpointManifest& manifest,
                             const model::Graph& graph,
                             const graphpipe::v1::TrainingConfig& training, StageRunner& runner);

}  // namespace gp::exec
