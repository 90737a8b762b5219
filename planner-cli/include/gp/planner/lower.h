// Lowering of an external stage assignment (graphpipe-plan lower): stages named by op ids, with
// replicas and optional micro-batches, from PipeDream, Piper, Megatron or hand tuning. They are
// placed, scheduled, lowered, verified and simulated exactly like the planner's own partitions
// (search.h), so every partitioner can be judged on one simulator.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "gp/common/status.h"
#include "gp/cost/comm_model.h"
#include "gp/cost/cost_model.h"
#include "gp/model/graph.h"
#include "gp/planner/search.h"
#include "graphpipe/v1/assignment.pb.h"
#include "graphpipe/v1/plan.pb.h"

namespace gp::planner {

// chain: a sequential pipeline (tensors relayed along the chain, as PipeDream and Piper run);
// dag: a graph pipeline (each tensor goes straight to its consumer's stage); best: both, and the
// faster simulated plan is kept.
enum class Lowering { kChain, kDag, kBest };
Result<Lowering> parse_lowering(std::string_view name);

struct ExternalStage {
  std::vector<int> ops;     // graph op indices
  int replicas = 1;         // data-parallel degree
  int64_t micro_batch = 0;  // 0: every candidate size is tried
};

// Resolves op ids and checks the assignment against the model and the devices: every op in
// exactly one stage, every stage convex (no path leaves it and comes back into it), replicas
// >= 1 and at most `num_devices` in all, micro-batches dividing the mini-batch and divisible by
// the stage's replicas. Errors name the field: stages[2].ops[5] = 'x': no op of the model ...
Result<std::vector<ExternalStage>> resolve_assignment(
    const graphpipe::v1::StageAssignmentFile& file, const model::Graph& graph, int num_devices,
    int64_t mini_batch);

struct LowerRequest {
  const model::Graph* graph = nullptr;
  graphpipe::v1::Cluster cluster;  // already reduced to the devices to use
  int64_t mini_batch = 0;
  graphpipe::v1::TrainingConfig training;
  const cost::CostModel* compute = nullptr;
  const cost::CommModel* comm = nullptr;  // nullptr: the cluster's datasheet links
  // Per-device compute for mixed clusters (search.h); nullptr: `compute` for every device. The
  // assignment's ranks are kept: each rank is simulated with its own device's model.
  const cost::DeviceCostModels* device_costs = nullptr;
  std::vector<ExternalStage> stages;  // from resolve_assignment
  Lowering lowering = Lowering::kBest;
  // Sizes tried for stages without a micro-batch; empty: every power of two dividing the
  // mini-batch.
  std::vector<int64_t> micro_batches;
  // Which stages recompute their activations (recompute.h) and which replicated stages shard
  // their optimizer state (shard_optimizer.h), as in the search.
  RecomputeMode recompute = RecomputeMode::kAuto;
  ShardMode shard_optimizer = ShardMode::kAuto;
};

struct LoweredPlan {
  std::string lowering;  // "chain" or "dag"
  SearchResult result;   // the best feasible micro-batch of this lowering, or why none fits
  // The request's stage of each plan stage: plan stage i is request.stages[stage_order[i]], on
  // the ranks after those of plan stages 0..i-1.
  std::vector<int> stage_order;
};

// One entry per lowering tried (chain first). A chain lowering of a stage graph that is not a
// chain relays tensors through the stages in between. A DAG lowering does not depend on the
// order of request.stages: it tries every order of placement_orders (search.h), made from the
// stage graph and the stages' ops, and keeps the fastest, so any permutation of the same stages
// gives the same plan (stage_order says which order it used).
Result<std::vector<LoweredPlan>> lower_assignment(const LowerRequest& request);

}  // namespace gp::planner
