// Lowering: a plan and a rank to the rank's program, the straight list of steps its step loop
// runs (slots, message layouts, tags, sample ranges, staging regions) and the layout of its stage
// (stage_layout.h), every message piece resolved against it. A pure function of the plan: no
// device, no communicator, no allocation beyond the result, so it is tested against golden files
// and the step loop only allocates what it describes (RankRunner::create) and runs it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "gp/common/status.h"
#include "gp/exec/stage_layout.h"
#include "gp/model/graph.h"
#include "gp/plan/plan_util.h"
#include "graphpipe/v1/plan.pb.h"

namespace gp::exec {

enum class StepOp {
  kBeginBackward,
  kForward,
  kBackward,
  kSend,
  kRecv,
  kTieReduce,  // sum the copies of tied parameters (before the all-reduce and the optimizer)
  kAllReduce,
  kOptimizer
};

// A tie (model.param_ties) with a copy in this rank's stage: the copies' gradients are summed
// over `group`, every rank holding one (each replica of each stage with a member). Only the
// stage's first replica keeps the sum (`leader`); the others zero theirs, so that the stage's
// data-parallel all-reduce that follows counts it once.
struct TieProgram {
  std::vector<int> group;                      // ascending
  std::vector<model::Graph::ParamAt> members;  // this stage's copies
  bool leader = true;
  int64_t elements = 0;  // per copy
  // Members here other than the tie's first: a gradient norm counts the tensor once, so these
  // copies' squares are taken out of it.
  int duplicates = 0;
};

// One tensor's samples inside a message.
struct MessagePiece {
  graphpipe::v1::TensorRef tensor;
  bool exported = false;         // produced by this stage (else received or relayed)
  int64_t bytes_per_sample = 0;  // ids travel as int64, values and gradients as fp32
  // Into the stage layout's `exported` (the runner's exports()) when exported, else into its
  // `external` (external_inputs()).
  int index = -1;
};

struct ProgramStep {
  StepOp op = StepOp::kForward;
  int instruction = 0;  // index in the plan's program
  int micro_batch = 0;
  int slot = 0;
  int64_t first_sample = 0;  // forward: mini-batch index of the replica's first sample
  int peer = -1;
  // Send/recv: the message's index in Plan.messages, shared by the matching send and receive;
  // the step loop flips the top bit on odd iterations.
  uint64_t tag = 0;
  bool gradient = false;
  int64_t sample_offset = 0;  // within the slot
  int64_t samples = 0;
  int64_t bytes = 0;
  size_t staging_offset = 0;  // send/recv: its region of a device staging buffer
  std::vector<MessagePiece> pieces;
};

struct RankProgram {
  int rank = 0;
  int stage = 0;
  int64_t per_replica = 0;  // samples of a micro-batch this replica computes
  int64_t mini_batch = 0;
  int slots = 1;           // micro-batches held at once (from first to last instruction)
  bool recompute = false;  // Stage.recompute: each backward re-runs its micro-batch's forward
  // Stage.shard_optimizer with several replicas (ZeRO-1): this rank's slice of the optimizer
  // state is shard_index of shard_count (its position in `group`); 1: not sharded.
  int shard_index = 0;
  int shard_count = 1;
  std::vector<int> group;  // the stage's replicas, ascending
  // training.clip_grad_norm: the ranks that step the optimizer (empty without clipping), and
  // whether this rank adds its stage's part of the norm (the stage's first replica).
  std::vector<int> world;
  bool counts_norm = false;
  // The stage's ops and tensors; its exports are produced here and read by other stages, its
  // relays produced elsewhere and passed on from here.
  StageLayout layout;
  std::vector<TieProgram> ties;
  std::vector<ProgramStep> steps;
  size_t max_message_bytes = 0;
  size_t max_piece_bytes = 0;
  size_t device_staging_bytes = 0;  // every send and receive's region, 256-byte aligned
};

// `graph` must be built from plan.model() and `index` from plan::validate_plan (or
// validate_plan_structure). Errors name the rank and the instruction.
Result<RankProgram> lower_rank_program(const graphpipe::v1::Plan& plan, const model::Graph& graph,
                                       const plan::PlanIndex& index, int rank);

// One line per step, for golden tests and for reading: "12 send mb=1 slot=0 peer=3 ...".
std::string describe(const RankProgram& program);

}  // namespace gp::exec
