// Placement of a plan's ranks by the launcher: a plan whose stages leave a device idle between
// used ones is refused by name; compacted (what graphpipe-plan search writes), each rank keeps
// its device.
#include "program/launch_placement.h"

#include <catch2/catch.hpp>
#include <filesystem>
#include <string>
#include <vector>

#include "gp/cost/cluster.h"
#include "gp/model/builder.h"
#include "gp/model/model_io.h"
#include "gp/planner/plan_builder.h"

using namespace gp;

namespace {

graphpipe::v1::Plan plan_on_ranks(const model::Graph& g, const std::vector<int>& ranks) {
  auto cluster = cost::load_cluster("cpu-local");
  REQUIRE(cluster.ok());
  cluster->set_devices_per_node(4);
  planner::PlanInputs in;
  in.graph = &g;
  in.cluster = *cluster;
  in.mini_batch = 8;
  in.training.set_optimizer(graphpipe::v1::OPTIMIZER_KIND_SGD);
  in.training.set_learning_rate(0.01);
  std::vector<planner::StageAssignment> stages(3);
  stages[0].ops = {g.index_of("x"), g.index_of("fc0")};
  stages[1].ops = {g.index_of("fc1")};
  stages[2].ops = {g.index_of("fc2"), g.index_of("loss"), g.index_of("t")};
  for (int s = 0; s < 3; ++s) stages[s].ranks = {ranks[s]}, stages[s].micro_batch = 4;
  auto plan = planner::build_plan(in, stages);
  INFO(plan.status().to_string());
  REQUIRE(plan.ok());
  return std::move(plan).value();
}

std::string write_temp(const graphpipe::v1::Plan& plan, const std::string& name) {
  const auto path = std::filesystem::temp_directory_path() / ("gp_launch_placement_" + name);
  REQUIRE(model::write_message(path.string(), plan).ok());
  return path.string();
}

}  // namespace

TEST_CASE("a plan with an idle device between used ones is refused, compacted it keeps devices") {
  model::GraphBuilder b("chain", "");
  auto x = b.input("x", {8});
  for (int i = 0; i < 3; ++i) x = b.linear("fc" + std::to_string(i), x, 8);
  b.add_loss(b.mse_loss("loss", x, b.input("t", {8})));
  auto g = model::Graph::build(b.finish());
  REQUIRE(g.ok());
  const auto gap = plan_on_ranks(*g, {0, 2, 3});

  exec::daemon::PlacementInput input;
  const std::string gap_path = write_temp(gap, "gap.pb");
  input.plan = gap_path;
  auto refused = exec::daemon::place_plan(input);
  REQUIRE_FALSE(refused.ok());
  CHECK_THAT(refused.status().message(), Catch::Contains("ranks 1 run no stage"));
  CHECK_THAT(refused.status().message(), Catch::Contains("excluded_ranks"));

  auto compacted = planner::compact_idle_ranks(gap);
  REQUIRE(compacted.ok());
  input.plan = write_temp(*compacted, "compacted.pb");
  auto placed = exec::daemon::place_plan(input);
  INFO(placed.status().to_string());
  REQUIRE(placed.ok());
  REQUIRE(placed->size() == 3);
  CHECK((*placed)[0].physical == 0);
  CHECK((*placed)[1].physical == 2);
  CHECK((*placed)[2].physical == 3);
  std::filesystem::remove(gap_path);
  std::filesystem::remove(input.plan);
}
