#include "launch_placement.h"

#include <algorithm>
#include <filesystem>
#include <iostream>
#include <iterator>
#include <sstream>

#include "gp/model/graph.h"
#include "gp/model/model_io.h"
#include "gp/plan/plan_util.h"
#include "graphpipe/v1/plan.pb.h"
#include "job/run.h"

namespace gp::exec::daemon {

Result<std::vector<PlacedRank>> place_plan(const PlacementInput& input) {
  graphpipe::v1::Plan plan;
  GP_RETURN_IF_ERROR(model::read_message(input.plan, &plan).with_context("--plan"));
  auto built = model::Graph::build(plan.model());
  if (!built.ok()) return built.status().with_context("--plan " + input.plan + ": plan.model");
  auto validated = plan::validate_plan(plan, *built);
  if (!validated.ok()) return validated.status().with_context("--plan " + input.plan);
  const plan::PlanIndex& index = *validated;
  if (index.world_size != plan.programs_size()) {
    // Written by a planner before plans were compacted (or by hand): rank r would get no program.
    std::string idle;
    for (int r = 0; r < index.world_size; ++r) {
      if (index.program_of_rank[static_cast<size_t>(r)] < 0) {
        idle += (idle.empty() ? "" : ",") + std::to_string(r);
      }
    }
    return invalid_argument("--plan " + input.plan + ": ranks " + idle +
                            " run no stage, between ranks that do: list the idle devices in "
                            "cluster.excluded_ranks and number the ranks densely (graphpipe-plan "
                            "search does so)");
  }
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

Result<std::vector<launch::Host>> read_hostfile(const std::string& path) {
  std::string text;
  if (path == "-") {
    text.assign(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
  } else {
    std::error_code ec;
    if (!std::filesystem::exists(path, ec)) {
      return invalid_argument("--hostfile '" + path + "': no such file");
    }
    auto read = model::read_file(path);
    if (!read.ok()) return read.status().with_context("--hostfile");
    text = std::move(*read);
  }
  return launch::parse_hostfile(text, path == "-" ? "(stdin)" : path);
}

Result<ResumeDecision> decide_resume(const std::string& checkpoint_dir, bool if_present) {
  if (holds_checkpoint(checkpoint_dir)) return ResumeDecision{true, ""};
  const std::string none = "no checkpoint in '" + checkpoint_dir +
                           "' (--checkpoint-dir: no LATEST file and no complete iter-N)";
  if (!if_present) {
    return Status(
        StatusCode::kNotFound,
        "--resume: " + none + "; --resume-if-present starts from iteration 0 when there is none");
  }
  return ResumeDecision{false, "--resume-if-present: " + none + "; starting from iteration 0"};
}

}  // namespace gp::exec::daemon
