// What every partitioning strategy returns for one micro-batch size: stages as sets of planning
// units with a data-parallel degree each. Placement on physical ranks, lowering to instruction
// streams and simulation happen afterwards, identically for every strategy (search.h).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "gp/common/status.h"
#include "gp/cost/comm_model.h"
#include "gp/model/graph.h"
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
  std::string origin;           // which algorithm found it, for reports ("chain DP, ...")
};

struct PartitionOutcome {
  std::optional<Partition> partition;  // empty when infeasible
  std::string infeasible_reason;       // e.g. "infeasible: too many downsets (40001 > 40000)"
  // Runners-up the strategy also found (sequential: the other chain order), for searches that
  // let the simulator choose among candidates.
  std::vector<Partition> alternatives;
};

struct PartitionContext {
  const model::Graph* graph = nullptr;
  const UnitGraph* units = nullptr;
  const StageCostModel* costs = nullptr;
  int num_devices = 0;
  int64_t mini_batch = 0;
  int piper_downset_limit = 40000;       // Piper's IDEALS_LIMIT
  double tps_relative_tolerance = 1e-3;  // binary-search stopping rule
  double tps_upper_hint_s = 0;           // GraphPipe: a bottleneck likely feasible (0: none)
  // GraphPipe: a plan whose bottleneck exceeds this cannot beat the plans already found, so no
  // shallower alternative slower than it is worth offering (0: no limit).
  double tps_useful_limit_s = 0;
  // The cluster's two levels, for PipeDream's hierarchical DP: devices per node (0 when the
  // devices do not form whole, equal nodes, e.g. with excluded ranks) and each level's
  // point-to-point bandwidth.
  int devices_per_node = 0;
  double intra_node_bandwidth_bytes_per_s = 0;
  double inter_node_bandwidth_bytes_per_s = 0;
};

// Fills the context's cluster levels: whole nodes as PipeDream's servers (unless ranks are
// excluded) and each level's point-to-point bandwidth as `comm` (a profile's fit, else the
// datasheet) prices a large transfer.
void set_cluster_levels(const graphpipe::v1::Cluster& cluster, const cost::CommModel& comm,
                        PartitionContext* ctx);

// For a chain cut along `order` (every unit once): the activation bytes per sample live across
// the cut before each position c in [0, n], skip edges counted at every cut they cross (a chain
// pipeline relays them).
std::vector<int64_t> chain_cut_bytes(const UnitGraph& units, const std::vector<int>& order);

// Checks what every partitioner relies on: the context is complete, b is a power of two within
// the stage cost tables, the unit graph is non-empty with a full topological order.
Status validate_partition_context(const PartitionContext& ctx, int64_t micro_batch);

// GraphPipe (docs/planner.md): SP decomposition, binary search on the bottleneck TPS, DP over
// (SP sub-tree, devices, successor in-flight samples) minimising the source stage's in-flight.
Result<PartitionOutcome> partition_graphpipe(const PartitionContext& ctx, int64_t micro_batch);
// PipeDream: units linearised in topological order, DP over contiguous ranges with replication.
Result<PartitionOutcome> partition_sequential(const PartitionContext& ctx, int64_t micro_batch);
// PipeDream's own optimizer (optimizer_graph_hierarchical.py) over the prefixes of `order`: one
// DP per cluster level, every device used, PipeDream's cost and memory formulas. nullopt (with
// `why`) when it finds nothing or its replication does not divide the micro-batch.
Result<std::optional<Partition>> partition_pipedream_hierarchical(const PartitionContext& ctx,
                                                                  const std::vector<int>& order,
                                                                  int64_t micro_batch,
                                                                  std::string* why);
// Piper: DP over downsets of the unit graph (stages are differences of nested downsets).
Result<PartitionOutcome> partition_piper(const PartitionContext& ctx, int64_t micro_batch);

}  // namespace gp::planner
