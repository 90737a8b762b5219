// Lowering of a stage assignment to a complete Plan: the stage DAG and its edges, in-flight
// samples per stage, and per-rank instruction streams (greedy synchronous 1F1B).
//
// In-flight samples propagate from sinks to sources (GraphPipe's scheduler, see docs/planner.md):
//   k_sink = b_sink,   k_s = max over successors n of (k_n + max(b_s, b_n)).
// A stage then issues ceil(k_s / b_s) forwards before its first backward and alternates one
// backward and one forward afterwards; a backward is placed as early as the budget allows.
#pragma once

#include <cstdint>
#include <vector>

#include "gp/common/status.h"
#include "gp/model/graph.h"
#include "graphpipe/v1/cluster.pb.h"
#include "graphpipe/v1/plan.pb.h"

namespace gp::planner {

struct StageAssignment {
  std::vector<int> ops;     // graph op indices
  std::vector<int> ranks;   // data-parallel replicas (global ranks), at most micro_batch
  int64_t micro_batch = 0;  // samples per micro-batch; divides the mini-batch

  bool operator==(const StageAssignment&) const = default;
};

struct PlanInputs {
  const model::Graph* graph = nullptr;
  graphpipe::v1::Cluster cluster;
  int64_t mini_batch = 0;
  graphpipe::v1::TrainingConfig training;
  graphpipe::v1::Strategy strategy = graphpipe::v1::STRATEGY_MANUAL;
  // Sequential pipeline (PipeDream, Piper): stages form a chain in index order; a tensor that
  // skips stages is relayed through every stage in between, as a chain pipeline must.
  bool chain = false;
};

// Stage edges (graph edges between stages, with their tensors) for an assignment. Errors when
// an op is unassigned or assigned twice, or when the stage graph has a cycle. With `chain`,
// edges join consecutive stages only and carry every tensor live across the boundary; an op
// consuming a tensor from a later stage is an error.
Result<std::vector<graphpipe::v1::StageEdge>> stage_edges(
    const model::Graph& graph, const std::vector<StageAssignment>& stages, bool chain = false);

// In-flight samples per stage from the rule above; `edges` must form a DAG.
std::vector<int64_t> in_flight_samples(const std::vector<StageAssignment>& stages,
                                       const std::vector<graphpipe::v1::StageEdge>& edges);

// Builds the whole plan (everything but predicted metrics). Errors name the stage and field.
Result<graphpipe::v1::Plan> build_plan(const PlanInputs& inputs,
                                       const std::vector<StageAssignment>& stages);

// A plan whose stages leave devices idle between the ones they use (a mixed cluster's plan on its
// fastest devices) has more ranks than programs, which no launch can start. Such idle devices
// become the cluster's excluded_ranks and the ranks are renumbered densely (stages, programs,
// messages), so each rank keeps its device and every rank has a program; idle devices after the
// last used one are left as they are (a plan on the first k devices). Other plans are returned
// unchanged. Timing is unchanged: every rank keeps its device, its kind, node and links.
Result<graphpipe::v1::Plan> compact_idle_ranks(graphpipe::v1::Plan plan);

}  // namespace gp::planner
