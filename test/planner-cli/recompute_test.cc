// Activation recomputation as a planner choice (--recompute): a model no plan fits on its
// cluster without it gets a feasible plan with it; a plan that fits never recomputes under auto;
// always recomputes everywhere; the report says which stages recompute and why.
#include "gp/planner/recompute.h"

#include <google/protobuf/util/message_differencer.h>

#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "../support/models.h"
#include "gp/cost/cluster.h"
#include "gp/cost/cost_model.h"
#include "gp/planner/report.h"
#include "gp/planner/search.h"
#include "gp/planner/stage_cost.h"
#include "gp/planner/verify.h"

using namespace gp;
using planner::RecomputeMode;

namespace {

graphpipe::v1::TrainingConfig adam() {
  graphpipe::v1::TrainingConfig t;
  t.set_optimizer(graphpipe::v1::OPTIMIZER_KIND_ADAM);
  t.set_learning_rate(1e-3);
  return t;
}

planner::SearchResult search(const model::Graph& graph, const graphpipe::v1::Cluster& cluster,
                             int64_t batch, std::vector<int64_t> micro_batches, RecomputeMode mode,
                             planner::ShardMode shard = planner::ShardMode::kAuto) {
  const cost::AnalyticCostModel compute(cluster.device(), graphpipe::v1::PRECISION_FP32);
  planner::SearchRequest req;
  req.graph = &graph;
  req.cluster = cluster;
  req.mini_batch = batch;
  req.training = adam();
  req.compute = &compute;
  req.micro_batches = std::move(micro_batches);
  req.recompute = mode;
  req.shard_optimizer = shard;
  auto result = planner::search_plan(req);
  INFO(result.status().to_string());
  REQUIRE(result.ok());
  return std::move(result).value();
}

int recomputing(const graphpipe::v1::Plan& plan) {
  int n = 0;
  for (const auto& st : plan.stages()) n += st.recompute() ? 1 : 0;
  return n;
}

}  // namespace

TEST_CASE("the recompute mode is auto, never or always, and anything else is refused by name") {
  CHECK(*planner::parse_recompute_mode("auto") == RecomputeMode::kAuto);
  CHECK(*planner::parse_recompute_mode("never") == RecomputeMode::kNever);
  CHECK(*planner::parse_recompute_mode("always") == RecomputeMode::kAlways);
  const auto bad = planner::parse_recompute_mode("sometimes");
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.status().message().find("--recompute = 'sometimes'") != std::string::npos);
  CHECK(planner::SearchRequest{}.recompute == RecomputeMode::kAuto);
}

TEST_CASE("a long-sequence transformer fits 32 V100s only recomputing, and that plan verifies") {
  // seq 4096: no partition's activations fit in 16 GB at any micro-batch without recomputation.
  const auto g = testing::zoo_graph("transformer?seq=4096");
  const auto cluster = *cost::select_devices(*cost::load_cluster("summit-v100"), 32);
  const auto never = search(g, cluster, 256, {2, 4}, RecomputeMode::kNever);
  CHECK_FALSE(never.feasible);
  CHECK(never.infeasible_reason.find("fits in device memory") != std::string::npos);
  const auto plan_auto = search(g, cluster, 256, {2, 4}, RecomputeMode::kAuto);
  REQUIRE(plan_auto.feasible);
  const auto& plan = plan_auto.plan;
  const int n = recomputing(plan);
  CHECK(n > 0);
  // Only the stages that do not fit without: the last stages hold few micro-batches.
  CHECK(n < plan.stages_size());
  const int64_t capacity = cluster.device().memory_capacity_bytes();
  CHECK(plan.predicted().peak_memory_bytes() <= capacity);
  const cost::AnalyticCostModel compute(cluster.device(), graphpipe::v1::PRECISION_FP32);
  auto verified = planner::verify_plan(plan, compute);
  REQUIRE(verified.ok());
  INFO((verified->problems.empty() ? std::string() : verified->problems[0]));
  CHECK(verified->ok());
  // Why: each recomputing stage's peak without recomputation is over the device's memory.
  REQUIRE(plan_auto.recompute_reasons.size() == static_cast<size_t>(plan.stages_size()));
  for (int s = 0; s < plan.stages_size(); ++s) {
    INFO("stage " << s);
    const std::string& why = plan_auto.recompute_reasons[static_cast<size_t>(s)];
    CHECK(why.empty() == !plan.stages(s).recompute());
    if (plan.stages(s).recompute()) CHECK(why.find(", over the device's") != std::string::npos);
  }
  planner::ReportContext ctx;
  ctx.feasible = true;
  ctx.recompute_reasons = &plan_auto.recompute_reasons;
  const std::string json = planner::plan_report_json(ctx, &plan);
  CHECK(json.find("\"recompute\": true") != std::string::npos);
  CHECK(json.find("\"recompute\": false") != std::string::npos);
  CHECK(json.find("\"recompute_reason\": \"without recomputation") != std::string::npos);
  const std::string text = planner::inspect_text(plan);
  CHECK(text.find("recomputes\n") != std::string::npos);
  CHECK(text.find("stage 0 recomputes its forward before each backward") != std::string::npos);
}

TEST_CASE("auto leaves a plan that fits alone, and always recomputes every stage") {
  const auto g = testing::zoo_graph("tiny-transformer");
  const auto cluster = *cost::select_devices(*cost::load_cluster("cpu-local"), 4);
  const auto never = search(g, cluster, 16, {2, 4}, RecomputeMode::kNever);
  const auto plan_auto = search(g, cluster, 16, {2, 4}, RecomputeMode::kAuto);
  const auto always = search(g, cluster, 16, {2, 4}, RecomputeMode::kAlways);
  REQUIRE(never.feasible);
  REQUIRE(plan_auto.feasible);
  REQUIRE(always.feasible);
  CHECK(recomputing(plan_auto.plan) == 0);
  // The same plan, but for how long it was searched (maps compared as maps).
  auto untimed = [](graphpipe::v1::Plan plan) {
    plan.mutable_provenance()->clear_search_time_s();
    plan.mutable_provenance()->clear_created();
    return plan;
  };
  CHECK(google::protobuf::util::MessageDifferencer::Equals(untimed(plan_auto.plan),
                                                           untimed(never.plan)));
  CHECK(recomputing(always.plan) == always.plan.stages_size());
  for (const auto& why : always.recompute_reasons) {
    CHECK(why.find("--recompute always; without recomputation") == 0);
  }
  const std::string text = planner::inspect_text(never.plan);
  CHECK(text.find("recomput") == std::string::npos);
}

TEST_CASE("never also tries a leaner partition where the partitioners' estimate fits none") {
  // At micro-batch 16 the partitioners' per-unit memory (which overestimates a stage's) fits no
  // two-stage partition; priced recomputing, one is found, and simulated it fits as it is.
  const auto g = testing::zoo_graph("transformer?seq=4096&layers=12");
  const auto cluster = *cost::select_devices(*cost::load_cluster("summit-v100"), 32);
  // Recomputation alone (sharding, which fits it too, never).
  const auto never =
      search(g, cluster, 16, {16}, RecomputeMode::kNever, planner::ShardMode::kNever);
  REQUIRE(never.feasible);
  CHECK(recomputing(never.plan) == 0);
  CHECK(never.plan.predicted().peak_memory_bytes() <= cluster.device().memory_capacity_bytes());
  const auto plan_auto =
      search(g, cluster, 16, {16}, RecomputeMode::kAuto, planner::ShardMode::kNever);
  REQUIRE(plan_auto.feasible);
  CHECK(recomputing(plan_auto.plan) == 0);
  CHECK(plan_auto.plan.predicted().throughput_samples_per_s() ==
        Approx(never.plan.predicted().throughput_samples_per_s()));
}

TEST_CASE("at a small mini-batch recomputation buys a shallower pipeline, faster than never's") {
  // 16 samples on 16 V100s: without recomputation stage 0 of a two-stage split is over 16 GB,
  // so the best plan is a deeper pipeline whose bubbles cost more than a second forward.
  const auto g = testing::zoo_graph("transformer?seq=4096&layers=12");
  const auto cluster = *cost::select_devices(*cost::load_cluster("summit-v100"), 16);
  // Recomputation alone (sharding stage 0's Adam state fits a two-stage split as well).
  const auto never = search(g, cluster, 16, {}, RecomputeMode::kNever, planner::ShardMode::kNever);
  const auto plan_auto =
      search(g, cluster, 16, {}, RecomputeMode::kAuto, planner::ShardMode::kNever);
  REQUIRE(never.feasible);
  REQUIRE(plan_auto.feasible);
  CHECK(recomputing(plan_auto.plan) > 0);
  CHECK(plan_auto.plan.stages_size() < never.plan.stages_size());
  CHECK(plan_auto.plan.predicted().throughput_samples_per_s() >
        1.1 * never.plan.predicted().throughput_samples_per_s());
}

TEST_CASE("stage costs priced recomputing add a forward and keep only the boundary per sample") {
  const auto g = testing::zoo_graph("tiny-transformer");
  const auto cluster = *cost::select_devices(*cost::load_cluster("cpu-local"), 2);
  const cost::AnalyticCostModel compute(cluster.device(), graphpipe::v1::PRECISION_FP32);
  const cost::CommModel comm(cluster);
  const auto units = planner::build_units(g, {});
  cost::MemoryOptions memory{graphpipe::v1::OPTIMIZER_KIND_ADAM, graphpipe::v1::PRECISION_FP32};
  const planner::StageCostModel plain(g, units, compute, comm, memory, 16, 4);
  memory.recompute = true;
  const planner::StageCostModel recomputing_costs(g, units, compute, comm, memory, 16, 4);
  std::vector<int> all(static_cast<size_t>(units.num_units()));
  for (int u = 0; u < units.num_units(); ++u) all[static_cast<size_t>(u)] = u;
  const auto a = plain.aggregate(all);
  const auto r = recomputing_costs.aggregate(all);
  double forward = 0;
  for (const auto& op : g.ops()) forward += compute.op_time(op, 4).forward_us;
  CHECK(r.compute_us[2] == Approx(a.compute_us[2] + forward));
  CHECK(r.activation_bytes_per_sample < a.activation_bytes_per_sample);
  CHECK(r.workspace_bytes_per_sample > a.workspace_bytes_per_sample);
  CHECK(r.static_bytes == a.static_bytes);
}
