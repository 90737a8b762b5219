#include "launch_placement.h"

#include <algorithm>
#include <sstream>

#include "gp/model/graph.h"
#include "gp/model/model_io.h"
#include "gp/plan/plan_util.h"
#include "graphpipe/v1/plan.pb.h"

namespace gp::exec::daemon {

Result<std::vector<PlacedRank>> place_plan(const PlacementInput& input) {
  graphpipe::v1::Plan plan;
  GP_RETURN_IF_ERROR(model::read_message(input.plan, &plan).with_context("--plan"));
  auto built = model::Graph::build(plan.model());
  if (!built.ok()) return built.status().with_context("--plan " + input.plan + ": plan.model");
  GP_RETURN_IF_ERROR(
      plan::validate_plan(plan, *built).status().with_context("--plan " + input.plan));
  launch::PlacementRequest request;
  request.plan_path = input.plan;
  request.nprocs = input.nprocs;
  request.device = input.device;
  request.hostfile = input.hostfile;
  request.hosts = input.hosts;
  if (!input.cuda_visible_devices.empty()) {
    request.visible_gpus = 0;
    std::istringstream list(input.cuda_visible_devices);
    std::string id;
    while (std::getline(list, id, ',')) ++request.visible_gpus;
  }
  std::vector<int> excluded(plan.cluster().excluded_ranks().begin(),
                            plan.cluster().excluded_ranks().end());
  const launch::PlanShape shape{plan.programs_size(), plan.cluster().num_nodes(),
                                plan.cluster().devices_per_node(), excluded};
  GP_ASSIGN_OR_RETURN(const auto ranks, launch::place_ranks(shape, request));
  std::sort(excluded.begin(), excluded.end());
  std::vector<PlacedRank> out;
  for (const auto& r : ranks) {
    int physical = r.rank;
    for (int e : excluded) physical += e <= physical ? 1 : 0;
    out.push_back({r.host, r.local_rank, r.device, physical});
  }
  return out;
}

}  // namespace gp::exec::daemon
