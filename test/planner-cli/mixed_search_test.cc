// The search on mixed clusters (Cluster.device_groups): heavier stages on faster devices, plans
// that beat treating every device as the slow kind, the slowest devices dropped first.
#include <catch2/catch.hpp>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "../support/fakes.h"
#include "../support/models.h"
#include "gp/cost/cluster.h"
#include "gp/cost/cost_model.h"
#include "gp/cost/device_costs.h"
#include "gp/plan/plan_util.h"
#include "gp/planner/search.h"
#include "gp/planner/verify.h"
#include "gp/sim/simulator.h"

using namespace gp;

namespace {

graphpipe::v1::TrainingConfig adam() {
  graphpipe::v1::TrainingConfig t;
  t.set_optimizer(graphpipe::v1::OPTIMIZER_KIND_ADAM);
  t.set_learning_rate(1e-3);
  return t;
}

// An analytic model per kind of `cluster`.
cost::DeviceCostModels analytic_models(const graphpipe::v1::Cluster& cluster) {
  std::map<std::string, std::shared_ptr<const cost::CostModel>> by_kind;
  for (const auto& kind : cost::device_kind_names(cluster)) {
    by_kind[kind] = std::make_shared<cost::AnalyticCostModel>(
        *cost::find_device_kind(cluster, kind), graphpipe::v1::PRECISION_FP32);
  }
  auto models = cost::DeviceCostModels::create(cluster, by_kind);
  REQUIRE(models.ok());
  return std::move(models).value();
}

planner::SearchResult search(const model::Graph& graph, const graphpipe::v1::Cluster& cluster,
                             const cost::DeviceCostModels& models, int64_t batch) {
  planner::SearchRequest req;
  req.graph = &graph;
  req.cluster = cluster;
  req.mini_batch = batch;
  req.training = adam();
  req.compute = &models.reference();
  req.device_costs = &models;
  req.per_stage_microbatch = true;
  auto result = planner::search_plan(req);
  INFO(result.status().to_string());
  REQUIRE(result.ok());
  REQUIRE(result->feasible);
  return std::move(result).value();
}

sim::SimResult simulate(const graphpipe::v1::Plan& plan, const model::Graph& graph,
                        const cost::DeviceCostModels& models) {
  const cost::CommModel comm(plan.cluster());
  const sim::Simulator simulator(
      models, comm, {plan.training().optimizer(), plan.training().precision(), nullptr});
  auto r = simulator.run(plan, graph);
  INFO(r.status().to_string());
  REQUIRE(r.ok());
  REQUIRE_FALSE(r->deadlocked);
  return std::move(r).value();
}

// `mixed` with every device of `kind` (its group's links where it has a group).
graphpipe::v1::Cluster all_of_kind(const graphpipe::v1::Cluster& mixed, const std::string& kind) {
  graphpipe::v1::Cluster c = mixed;
  c.clear_device_groups();
  for (const auto& g : mixed.device_groups()) {
    if (g.device().name() != kind) continue;
    *c.mutable_device() = g.device();
    if (g.has_intra_node()) *c.mutable_intra_node() = g.intra_node();
    if (g.has_inter_node()) *c.mutable_inter_node() = g.inter_node();
  }
  REQUIRE(c.device().name() == kind);
  return c;
}

bool all_of_kind_on(const graphpipe::v1::Plan& plan, const graphpipe::v1::Stage& st,
                    const std::string& kind) {
  for (int r : st.device_ranks()) {
    if (cost::device_of_rank(plan.cluster(), r).name() != kind) return false;
  }
  return true;
}

}  // namespace

TEST_CASE("on mixed-v100-a100 mmt's heavy stages run on the A100s and beat an all-V100 plan") {
  // The preset with 2 devices per node: nodes 0-1 V100 (ranks 0-3), nodes 2-3 A100 (ranks 4-7).
  auto mixed = *cost::load_cluster("mixed-v100-a100");
  mixed.set_devices_per_node(2);
  REQUIRE(cost::validate_cluster(mixed).ok());
  const model::Graph g = testing::zoo_graph("mmt");
  const auto models = analytic_models(mixed);
  const auto found = search(g, mixed, models, 256);
  const auto& plan = found.plan;
  CHECK_FALSE(found.reference_kind.empty());

  // Heavier stages on faster devices: every stage with a V100 replica computes less per
  // iteration than every stage entirely on A100s, and the heaviest is on A100s.
  double lightest_fast = 1e300, heaviest_slow = 0, heaviest = 0;
  bool heaviest_on_fast = false;
  for (int s = 0; s < plan.stages_size(); ++s) {
    const double busy = found.simulation.stages[static_cast<size_t>(s)].busy_us;
    const bool fast = all_of_kind_on(plan, plan.stages(s), "A100-SXM4-80GB");
    if (fast) lightest_fast = std::min(lightest_fast, busy);
    if (!fast) heaviest_slow = std::max(heaviest_slow, busy);
    if (busy > heaviest) {
      heaviest = busy;
      heaviest_on_fast = fast;
    }
  }
  CHECK(heaviest_on_fast);
  CHECK(heaviest_slow < lightest_fast);
  // Each V100 holds what it was given (16 GB against 80).
  CHECK(found.simulation.fits_memory());
  const auto verified = planner::verify_plan(plan, models);
  REQUIRE(verified.ok());
  CHECK(verified->ok());

  // The best plan searched treating every device as the slow kind, simulated on the V100s it
  // was searched for and on the mixed cluster (the same ranks): the mixed plan beats both.
  const auto slow_cluster = all_of_kind(mixed, "V100-SXM2-16GB");
  const auto slow_models = analytic_models(slow_cluster);
  const auto slow = search(g, slow_cluster, slow_models, 256);
  const double on_slow = simulate(slow.plan, g, slow_models).iteration_time_us;
  auto slow_on_mixed = slow.plan;
  *slow_on_mixed.mutable_cluster() = mixed;
  const double on_mixed = simulate(slow_on_mixed, g, models).iteration_time_us;
  const double mixed_plan = found.simulation.iteration_time_us;
  INFO("mixed plan " << mixed_plan << " us; all-V100 plan on V100s " << on_slow
                     << " us, on the mixed cluster " << on_mixed << " us");
  CHECK(mixed_plan < on_slow);
  CHECK(mixed_plan < on_mixed);
  CHECK(simulate(plan, g, models).iteration_time_us == Approx(mixed_plan));
}

TEST_CASE("four CPU ranks with rank 1 three times slower: the slow rank gets the least work") {
  auto base = *cost::load_cluster("cpu-local");
  base.set_devices_per_node(4);
  auto slowed = base;
  auto* group = slowed.add_device_groups();
  *group->mutable_device() = base.device();
  group->mutable_device()->set_name(base.device().name() + "/rank1");
  group->mutable_device()->set_peak_fp32_flops(base.device().peak_fp32_flops() / 3);
  group->mutable_device()->set_memory_bandwidth_bytes_per_s(
      base.device().memory_bandwidth_bytes_per_s() / 3);
  group->add_devices(1);
  REQUIRE(cost::validate_cluster(slowed).ok());
  // A data-parallel plan (tiny-mmt's is one stage on 4 replicas) and a pipeline of branches
  // (candle-uno's is 4 stages).
  for (const char* name : {"tiny-mmt", "candle-uno"}) {
    INFO(name);
    const model::Graph g = testing::zoo_graph(name);
    const auto models = analytic_models(slowed);
    const auto adapted = search(g, slowed, models, 64);

    // The plan searched for four equal ranks, run with rank 1 slowed.
    const auto uniform_models = analytic_models(base);
    const auto static_plan = search(g, base, uniform_models, 64);
    auto static_slowed = static_plan.plan;
    *static_slowed.mutable_cluster() = slowed;
    const double static_time = simulate(static_slowed, g, models).iteration_time_us;
    INFO("adapted " << adapted.simulation.iteration_time_us << " us, static plan slowed "
                    << static_time << " us, unslowed " << static_plan.simulation.iteration_time_us);
    CHECK(adapted.simulation.iteration_time_us < static_time);
    // Rank 1 is idle or holds the stage with the least compute per replica.
    const auto& plan = adapted.plan;
    double least = 1e300, on_rank1 = -1;
    for (int s = 0; s < plan.stages_size(); ++s) {
      const auto& st = plan.stages(s);
      // Compute at the reference speed: what the stage asks of its devices.
      double us = 0;
      for (const auto& id : st.op_ids()) {
        const auto t = models.reference().op_time(g.op(g.index_of(id)), st.micro_batch());
        us += t.forward_us + t.backward_us;
      }
      us /= st.device_ranks_size();
      least = std::min(least, us);
      // (Ranks are dense over the devices the plan uses: rank r runs on physical device
      // physical_device(r), which an idle device in between shifts.)
      for (int r : st.device_ranks()) {
        if (cost::physical_device(plan.cluster(), r) == 1) on_rank1 = us;
      }
    }
    CHECK(on_rank1 <= least * (1 + 1e-9));
    // Every rank has a program, as a launch needs, and it is still this cluster's plan.
    const auto index = plan::validate_plan(plan, g);
    REQUIRE(index.ok());
    CHECK(index->world_size == plan.programs_size());
    planner::VerifyOptions expect;
    expect.expected_cluster = &slowed;
    const auto verified = planner::verify_plan(plan, models, expect);
    REQUIRE(verified.ok());
    INFO((verified->problems.empty() ? "" : verified->problems[0]));
    CHECK(verified->ok());
    expect.expected_cluster = &base;  // another cluster: refused
    CHECK_FALSE(planner::verify_plan(plan, models, expect)->ok());
  }
}

TEST_CASE("assign_devices gives the heaviest stages the fastest devices that hold them") {
  auto c = testing::ideal_cluster(4);
  c.mutable_device()->set_memory_capacity_bytes(1000);  // ranks 2 and 3: fast, small
  auto* g = c.add_device_groups();
  *g->mutable_device() = c.device();
  g->mutable_device()->set_name("slow");
  g->mutable_device()->set_peak_fp32_flops(c.device().peak_fp32_flops() / 2);
  g->mutable_device()->set_memory_capacity_bytes(int64_t{1} << 40);
  g->add_devices(0);
  g->add_devices(1);
  const model::Graph graph = testing::chain_graph(6);
  const testing::FakeCostModel compute(10, 20);  // every op alike: weight = ops per replica
  std::vector<planner::StageAssignment> stages(3);
  stages[0].ops = {graph.index_of("fc0"), graph.index_of("fc1"), graph.index_of("fc2")};
  stages[0].ranks = {0};
  stages[1].ops = {graph.index_of("fc3"), graph.index_of("fc4")};
  stages[1].ranks = {1};
  stages[2].ops = {graph.index_of("fc5")};
  stages[2].ranks = {2, 3};
  for (auto& st : stages) st.micro_batch = 4;

  const auto placed = planner::assign_devices(graph, compute, c, 16, stages);
  CHECK(placed[0].ranks == std::vector<int>{2});
  CHECK(placed[1].ranks == std::vector<int>{3});
  CHECK(placed[2].ranks == std::vector<int>{0, 1});
  CHECK(placed[0].ops == stages[0].ops);
  // Stage 0 needs more than a fast device holds: the fastest device that holds it is slow.
  const auto roomy = planner::assign_devices(graph, compute, c, 16, stages, {2000, 0, 0});
  CHECK(roomy[0].ranks == std::vector<int>{0});
  CHECK(roomy[1].ranks == std::vector<int>{2});
  CHECK(roomy[2].ranks == std::vector<int>{1, 3});
}
