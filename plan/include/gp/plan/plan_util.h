// Plan helpers shared by the planner, the simulator and the executor: structural validation,
// lookups and human-readable instructions. Nothing here estimates costs.
#pragma once

#include <string>
#include <vector>

#include "gp/common/status.h"
#include "gp/model/graph.h"
#include "graphpipe/v1/plan.pb.h"

namespace gp::plan {

// Indices resolved once from a plan whose structure has been validated.
struct PlanIndex {
  std::vector<std::vector<int>> stage_ops;  // graph op indices per stage
  std::vector<int> stage_of_op;             // per graph op
  std::vector<int> stage_of_rank;           // per rank; -1 for unused ranks
  std::vector<int> replica_of_rank;         // per rank: its index in the stage's device_ranks
  std::vector<int> program_of_rank;         // index into plan.programs(); -1 if none
  int world_size = 0;                       // max rank + 1 over stages
};

// The plan format this build writes and reads (plan.proto's Plan.format_version).
inline constexpr int kPlanFormatVersion = 2;

// The kinds of SEND_* and RECV_* instructions, and of those that move gradients.
inline bool is_send(graphpipe::v1::InstructionKind kind) {
  return kind == graphpipe::v1::INSTRUCTION_KIND_SEND_ACTIVATION ||
         kind == graphpipe::v1::INSTRUCTION_KIND_SEND_GRADIENT;
}
inline bool is_recv(graphpipe::v1::InstructionKind kind) {
  return kind == graphpipe::v1::INSTRUCTION_KIND_RECV_ACTIVATION ||
         kind == graphpipe::v1::INSTRUCTION_KIND_RECV_GRADIENT;
}
inline bool is_gradient_transfer(graphpipe::v1::InstructionKind kind) {
  return kind == graphpipe::v1::INSTRUCTION_KIND_SEND_GRADIENT ||
         kind == graphpipe::v1::INSTRUCTION_KIND_RECV_GRADIENT;
}

// The ranks whose programs step an optimizer (a stage without parameters has no step),
// ascending: under gradient clipping, the ranks the norm is summed over (the executor's program
// and the NCCL layout's communicator for it).
std::vector<int> ranks_stepping_optimizer(const graphpipe::v1::Plan& plan);

// Samples [begin, end) of the mini-batch.
struct SampleRange {
  int64_t begin = 0;
  int64_t end = 0;
  bool contains(int64_t b, int64_t e) const { return begin <= b && e <= end; }
};

// The samples replica `replica` of `stage` computes in micro-batch `micro_batch`:
// [m·b + floor(j·b/p), m·b + floor((j+1)·b/p)) for micro-batch size b and p replicas (slices
// differ by at most one sample when p does not divide b). The one definition the planner's
// lowering, the verifier, the simulator, the coordinator and the executor's lowering share.
SampleRange replica_samples(const graphpipe::v1::Stage& stage, int replica, int64_t micro_batch);

// Samples per optimizer step that plans, searches and runs accept: far above any real job, low
// enough that sample counts, offsets and message tags never overflow.
inline constexpr int64_t kMaxMiniBatch = int64_t{1} << 24;

// Checks a training configuration as the executor's optimizer reads it: a known optimizer
// (unspecified means SGD) and precision, a finite learning rate > 0, momentum and Adam betas in
// [0, 1), a finite epsilon > 0 (all-zero Adam settings mean the defaults). Errors name the field:
// "training.learning_rate = inf, must be finite and > 0". A plan may leave the learning rate
// unset (0) for the run to supply; `allow_unset_learning_rate` accepts that.
Status validate_training(const graphpipe::v1::TrainingConfig& training,
                         bool allow_unset_learning_rate = false);

// The plan's integrity: its model and its cluster are the ones it was made for, i.e. they hash
// to plan.model_hash and plan.cluster_hash. A plan edited after planning (a device's memory or a
// link changed by hand, an op's attributes) is refused: its stages, schedule and predictions no
// longer follow from what it embeds. Every reader of a plan file checks this (validate_plan,
// `graphpipe-plan verify` and `replan`). Errors name the field and both digests:
// "plan.cluster_hash = '1f..' does not match the embedded cluster (9a..): ...".
Status check_plan_hashes(const graphpipe::v1::Plan& plan);

// Checks what every consumer relies on before touching a plan: format version, model hash,
// every op in exactly one stage, ranks unique across stages, micro-batches dividing the
// mini-batch (at most kMaxMiniBatch) and at least the replica count, the training config, edges
// and instruction fields in range, one program per used rank, every message between replicas of
// its edge's two stages (gradients only on edges that carry some) and every SEND/RECV naming a
// message of its own rank whose samples lie in the instruction's micro-batch slice on both ends.
// Errors name the field: "stages[2].device_ranks[1] = 7 is also used by stages[0]".
Result<PlanIndex> validate_plan_structure(const graphpipe::v1::Plan& plan,
                                          const model::Graph& graph);

// The schedule checks that need no cost model, on a plan that passed validate_plan_structure:
// the stage graph is acyclic and carries every cross-stage tensor along its edges; each program
// forwards, then backwards, every micro-batch once, has one gradient all-reduce when its stage
// is replicated and has parameters, and one optimizer step when it has parameters; every send
// (activation or gradient) is matched by exactly one receive and every receive by a send, and on
// every channel (sender, receiver) both ends issue their messages in the order Plan.messages
// lists them (what NCCL needs: a plan that passes never fails the executor's channel layout). One
// line per problem, each naming the rank, edge and samples; empty when the plan is sound.
std::vector<std::string> plan_schedule_problems(const graphpipe::v1::Plan& plan,
                                                const model::Graph& graph, const PlanIndex& index);

// The fields a run reads, or a tool prints, beyond the structure, on a plan that passed
// validate_plan_structure: a training configuration a run accepts (an optimizer kind named, a
// learning rate set: finite and > 0), every stage's in_flight_samples in [micro_batch,
// stages x mini_batch] and warmup_forwards in [1, its micro-batches] (what the planner writes),
// and the predicted metrics finite and >= 0 (fractions at most 1, per-stage metrics of stages
// of the plan, each once). One line per problem, naming the field and the value; empty when
// sound. `graphpipe-plan verify` lists them; validate_plan refuses the first.
std::vector<std::string> plan_field_problems(const graphpipe::v1::Plan& plan);

// What a runtime (and every tool reading a plan file) checks before using it:
// validate_plan_structure, the cluster's hash (check_plan_hashes), plan_field_problems, then
// plan_schedule_problems. The error names the first problem (and how many others there are).
// Deadlock freedom and memory are left to `graphpipe-plan verify`, which simulates.
Result<PlanIndex> validate_plan(const graphpipe::v1::Plan& plan, const model::Graph& graph);

// True when the tensor carries a gradient back (a floating-point output of a non-input op).
bool carries_gradient(const model::Graph& graph, const graphpipe::v1::TensorRef& tensor);

// Bytes per sample of the edge's tensors that carry gradients.
int64_t gradient_bytes_per_sample(const model::Graph& graph, const graphpipe::v1::StageEdge& edge);

// "gradient message 12 (edge 3, rank 2 -> rank 0, samples [16, 24))", for a message index of a
// structurally valid plan.
std::string describe_message(const graphpipe::v1::Plan& plan, int message);

// "FORWARD stage 2 mb 7", "RECV act[stage 1 -> 2, mb 3] samples [16, 24) from rank 1".
std::string describe_instruction(const graphpipe::v1::Plan& plan,
                                 const graphpipe::v1::Instruction& instr);

std::string_view strategy_name(graphpipe::v1::Strategy strategy);

}  // namespace gp::plan
