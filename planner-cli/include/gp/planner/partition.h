// What every partitioning strategy returns for one micro-batch size: stages as sets of planning
// units with a data-parallel degree each. Placement on physical ranks, lowering to instruction
// streams and simulation happen afterwards, identically for every strategy (search.h).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "gp/common/status.h"
#include "gp/graph/graph.h"
#include "gp/planner/stage_cost.h"
#include "gp/planner/units.h"

namespace gp::planner {

struct PartitionStage {
  std::vector<int> units;  // planning units (UnitGraph indices)
  int devices = 1;         // data-parallel degree; divides the micro-batch
};

struct Partition {
  std::vector<PartitionStage> stages;  // chain strategies: in chain order (first stage first)
  bool chain = false;                  // sequential pipeline: tensors are relayed along the chain
  int64_t micro_batch = 0;
  double bottleneck_tps_s = 0;  // the strategy's own estimate (StageCostModel)
  int sp_edges_added = 0;       // GraphPipe: dependency edges added to make the graph SP
};

struct PartitionOutcome {
  std::optional<Partition> partition;  // empty when infeasible
  std::string infeasible_reason;       // e.g. "infeasible: too many downsets (40001 > 40000)"
  // Runners-up the strategy also found (sequential: the other chain order), for searches that
  // let the simulator choose among candidates.
  std::vector<Partition> alternatives;
};

struct PartitionContext {
  const graph::Graph* graph = nullptr;
  const UnitGraph* units = nullptr;
  const StageCostModel* costs = nullptr;
  int num_devices = 0;
  int64_t mini_batch = 0;
  int piper_downset_limit = 40000;       // Piper's IDEALS_LIMIT
  double tps_relative_tolerance = 1e-3;  // binary-search stopping rule
  double tps_upper_hint_s = 0;           // GraphPipe: a bottleneck likely feasible (0: none)
};

// Checks what every partitioner relies on: the context is complete, b is a power of two within
// the stage cost tables, the unit graph is non-empty with a full topological order.
Status validate_partition_context(const PartitionContext& ctx, int64_t micro_batch);

// GraphPipe (docs/planner.md): SP decomposition, binary search on the bottleneck TPS, DP over
// (SP sub-tree, devices, successor in-flight samples) minimising the source stage's in-flight.
Result<PartitionOutcome> partition_graphpipe(const PartitionContext& ctx, int64_t micro_batch);
// PipeDream: units linearised in topological order, DP over contiguous ranges with replication.
Result<PartitionOutcome> partition_sequential(const PartitionContext& ctx, int64_t micro_batch);
// Piper: DP over downsets of the unit graph (stages are differences of nested downsets).
Result<PartitionOutcome> partition_piper(const PartitionContext& ctx, int64_t micro_batch);

}  // namespace gp::planner
