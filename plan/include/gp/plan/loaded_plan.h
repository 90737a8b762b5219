// A plan read and checked once: what every reader of a plan file on the runtime side starts
// from (a rank, `local`, the node daemon checking a submitted job).
#pragma once

#include <memory>
#include <string>

#include "gp/common/status.h"
#include "gp/model/graph.h"
#include "gp/plan/plan_util.h"
#include "graphpipe/v1/plan.pb.h"

namespace gp::plan {

// Shared by every session of a process (`local` runs one per rank). Immutable once loaded:
// sessions keep references into it.
class LoadedPlan {
 public:
  // Reads a plan file (binary, text or JSON), resolves its weights file and checks it as every
  // rank does (plan::validate_plan). Errors start with "--plan PATH".
  static Result<std::shared_ptr<const LoadedPlan>> read(const std::string& path);
  // The same for a plan in memory (weights already resolved).
  static Result<std::shared_ptr<const LoadedPlan>> from(graphpipe::v1::Plan plan);

  const graphpipe::v1::Plan& plan() const { return plan_; }
  const model::Graph& graph() const { return *graph_; }
  const PlanIndex& index() const { return index_; }
  int world_size() const { return index_.world_size; }

 private:
  LoadedPlan() = default;
  graphpipe::v1::Plan plan_;
  std::unique_ptr<model::Graph> graph_;
  PlanIndex index_;
};

}  // namespace gp::plan
