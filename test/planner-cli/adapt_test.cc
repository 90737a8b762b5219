// Adaptive re-planning's pieces (gp/planner/adapt.h): each rank's speed from a running job's
// measured profile, the cluster that says which devices are slow, and when a switch pays.
#include "gp/planner/adapt.h"

#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "../support/models.h"
#include "gp/cost/cluster.h"
#include "gp/cost/cost_model.h"
#include "gp/cost/memory_model.h"
#include "gp/plan/plan_util.h"
#include "gp/planner/search.h"

using namespace gp;

namespace {

graphpipe::v1::Cluster cpu_cluster(int devices) {
  auto c = cost::load_cluster("cpu-local");
  REQUIRE(c.ok());
  graphpipe::v1::Cluster cluster = *c;
  cluster.set_num_nodes(1);
  cluster.set_devices_per_node(devices);
  return cluster;
}

graphpipe::v1::Plan search(const model::Graph& graph, const graphpipe::v1::Cluster& cluster,
                           const cost::CostModel& compute) {
  planner::SearchRequest req;
  req.graph = &graph;
  req.cluster = cluster;
  req.mini_batch = 64;
  req.training = testing::training(graphpipe::v1::OPTIMIZER_KIND_ADAM);
  req.compute = &compute;
  auto result = planner::search_plan(req);
  INFO(result.status().to_string());
  REQUIRE(result.ok());
  REQUIRE(result->feasible);
  return result->plan;
}

// What a job running `plan` would measure if rank r ran `slowdown[r]` times slower than `model`:
// one record per (op signature, rank), as the executor writes them.
graphpipe::v1::ProfileDB measured_profile(const graphpipe::v1::Plan& plan,
                                          const model::Graph& graph, const cost::CostModel& model,
                                          const std::vector<double>& slowdown) {
  auto index = plan::validate_plan(plan, graph);
  REQUIRE(index.ok());
  graphpipe::v1::ProfileDB db;
  db.set_format_version(1);
  for (int r = 0; r < index->world_size; ++r) {
    const int stage = index->stage_of_rank[r];
    if (stage < 0) continue;
    const auto& st = plan.stages(stage);
    const int64_t samples =
        (st.micro_batch() + st.device_ranks_size() - 1) / st.device_ranks_size();
    for (int op : index->stage_ops[stage]) {
      const auto t = model.op_time(graph.op(op), samples);
      auto* m = db.add_ops();
      m->set_signature(cost::op_signature(graph.op(op)));
      m->set_device_kind(planner::measured_kind_name(plan.cluster().device().name(), r));
      m->set_micro_batch(samples);
      m->set_forward_time_us(t.forward_us * slowdown[static_cast<size_t>(r)]);
      m->set_backward_time_us(t.backward_us * slowdown[static_cast<size_t>(r)]);
      m->set_repetitions(4);
    }
  }
  return db;
}

}  // namespace

TEST_CASE("a measured kind name is the device kind and the rank, and parses back") {
  CHECK(planner::measured_kind_name("cpu", 3) == "cpu/rank3");
  std::string kind;
  int rank = -1;
  REQUIRE(planner::parse_measured_kind("NVIDIA H200/rank12", &kind, &rank));
  CHECK(kind == "NVIDIA H200");
  CHECK(rank == 12);
  CHECK_FALSE(planner::parse_measured_kind("cpu", &kind, &rank));
  CHECK_FALSE(planner::parse_measured_kind("cpu/rank", &kind, &rank));
  CHECK_FALSE(planner::parse_measured_kind("cpu/rank-1", &kind, &rank));
  CHECK_FALSE(planner::parse_measured_kind("cpu/rank1x", &kind, &rank));
  CHECK_FALSE(planner::parse_measured_kind("/rank1", &kind, &rank));
}

TEST_CASE("a scaled cost model stretches forward, backward and the optimizer step by its factor") {
  const auto graph = testing::chain_graph(2);
  const auto cluster = cpu_cluster(2);
  auto base =
      std::make_shared<cost::AnalyticCostModel>(cluster.device(), graphpipe::v1::PRECISION_FP32);
  const planner::ScaledCostModel scaled(base, 2.5);
  for (int op = 0; op < graph.num_ops(); ++op) {
    const auto a = base->op_time(graph.op(op), 8);
    const auto b = scaled.op_time(graph.op(op), 8);
    CHECK(b.forward_us == Approx(2.5 * a.forward_us));
    CHECK(b.backward_us == Approx(2.5 * a.backward_us));
  }
  cost::MemoryBreakdown state;
  state.weight_bytes = state.gradient_bytes = 1 << 20;
  const auto kind = graphpipe::v1::OPTIMIZER_KIND_SGD;
  // The measured kind the simulator hands it is stretched already (cluster_with_measured_speeds).
  graphpipe::v1::DeviceKind measured = cluster.device();
  measured.set_memory_bandwidth_bytes_per_s(measured.memory_bandwidth_bytes_per_s() / 2.5);
  measured.set_kernel_launch_overhead_us(measured.kernel_launch_overhead_us() * 2.5);
  CHECK(cost::optimizer_step_us(scaled.optimizer_step_cost(measured, kind), state, 3) ==
        Approx(2.5 * cost::optimizer_step_us(base->optimizer_step_cost(cluster.device(), kind),
                                             state, 3)));
}

TEST_CASE("a rank measured three times slower than the others has slowdown three") {
  const auto graph = testing::zoo_graph("candle-uno?branches=4&layers=2&width=128");
  const auto cluster = cpu_cluster(4);
  const cost::AnalyticCostModel model(cluster.device(), graphpipe::v1::PRECISION_FP32);
  const auto plan = search(graph, cluster, model);
  const auto index = plan::validate_plan(plan, graph);
  REQUIRE(index.ok());
  REQUIRE(plan.programs_size() == 4);  // a stage per rank: each rank's speed is its own
  // The whole job runs 1.7x slower than the model (contention, a model that is off) and rank 1
  // another 3x: only rank 1 is slow.
  std::vector<double> slowdown(static_cast<size_t>(index->world_size), 1.7);
  slowdown[1] = 5.1;
  const auto db = measured_profile(plan, graph, model, slowdown);
  auto speeds = planner::measured_rank_speeds(
      plan, graph, db, [&model](int) -> const cost::CostModel& { return model; });
  INFO(speeds.status().to_string());
  REQUIRE(speeds.ok());
  REQUIRE(speeds->size() == static_cast<size_t>(plan.programs_size()));
  for (const auto& s : *speeds) {
    INFO("rank " << s.rank);
    CHECK(s.ops > 0);
    CHECK(s.factor == Approx(slowdown[static_cast<size_t>(s.rank)]).epsilon(1e-6));
    CHECK(s.relative == Approx(s.rank == 1 ? 3.0 : 1.0).epsilon(1e-6));
  }

  SECTION("the measured cluster gives rank 1 a kind of its own, three times slower") {
    const auto measured = planner::cluster_with_measured_speeds(plan.cluster(), *speeds, 1.5);
    REQUIRE(cost::validate_cluster(measured).ok());
    REQUIRE(measured.device_groups_size() == 1);
    const auto& g = measured.device_groups(0);
    CHECK(g.device().name() == planner::measured_kind_name(cluster.device().name(), 1));
    REQUIRE(g.devices_size() == 1);
    CHECK(g.devices(0) == cost::physical_device(plan.cluster(), 1));
    CHECK(g.device().peak_fp32_flops() == Approx(cluster.device().peak_fp32_flops() / 3));
    CHECK(g.device().memory_capacity_bytes() == cluster.device().memory_capacity_bytes());
    // Measured again (e.g. after a switch): the earlier measured kind is replaced, not stacked.
    const auto again = planner::cluster_with_measured_speeds(measured, *speeds, 1.5);
    CHECK(again.device_groups_size() == 1);
    // A threshold above the slowdown: every device is its own kind again.
    CHECK(planner::cluster_with_measured_speeds(measured, *speeds, 3.5).device_groups_size() == 0);
  }
}

TEST_CASE("a measured profile of another job or cluster is refused by name") {
  const auto graph = testing::zoo_graph("candle-uno?branches=4&layers=2&width=128");
  const auto cluster = cpu_cluster(4);
  const cost::AnalyticCostModel model(cluster.device(), graphpipe::v1::PRECISION_FP32);
  const auto plan = search(graph, cluster, model);
  auto db = measured_profile(plan, graph, model,
                             std::vector<double>(static_cast<size_t>(plan.programs_size()), 1.0));
  auto of = [&](const graphpipe::v1::ProfileDB& d) {
    return planner::measured_rank_speeds(plan, graph, d,
                                         [&model](int) -> const cost::CostModel& { return model; });
  };
  REQUIRE(of(db).ok());
  SECTION("a kind of another cluster") {
    db.mutable_ops(0)->set_device_kind("V100-SXM2-16GB/rank0");
    const auto r = of(db);
    REQUIRE_FALSE(r.ok());
    CHECK_THAT(r.status().message(),
               Catch::Contains("ops[0].device_kind") && Catch::Contains("V100-SXM2-16GB"));
  }
  SECTION("a rank the plan does not have") {
    db.mutable_ops(0)->set_device_kind(
        planner::measured_kind_name(cluster.device().name(), plan.programs_size() + 3));
    const auto r = of(db);
    REQUIRE_FALSE(r.ok());
    CHECK_THAT(r.status().message(), Catch::Contains("ranks"));
  }
  SECTION("a profile from graphpipe-profile, not from a running job") {
    db.mutable_ops(0)->set_device_kind(cluster.device().name());
    const auto r = of(db);
    REQUIRE_FALSE(r.ok());
    CHECK_THAT(r.status().message(), Catch::Contains("<kind>/rank<R>"));
  }
  SECTION("no record of any rank's ops") {
    for (auto& m : *db.mutable_ops()) m.set_signature("linear|nothing|[1] float32");
    const auto r = of(db);
    REQUIRE_FALSE(r.ok());
    CHECK_THAT(r.status().message(), Catch::Contains("no measurement"));
  }
}

TEST_CASE("a switch is taken only when its gain and the time it saves both pay for it") {
  planner::SwitchInputs in;
  in.current_iteration_s = 0.30;
  in.candidate_iteration_s = 0.10;
  in.measured_iteration_s = 0.60;
  in.iterations_left = 1000;
  in.switch_cost_s = 5;
  auto d = planner::decide_switch(in);
  CHECK(d.do_switch);
  CHECK(d.predicted_gain == Approx(2.0));
  CHECK(d.saved_s == Approx(400.0));  // 2/3 of 0.6 s, 1000 times
  CHECK_THAT(d.reason, Catch::StartsWith("switch:"));

  SECTION("too small a gain") {
    in.candidate_iteration_s = 0.29;
    d = planner::decide_switch(in);
    CHECK_FALSE(d.do_switch);
    CHECK_THAT(d.reason, Catch::Contains("--min-gain"));
  }
  SECTION("too few iterations left to win back the switch") {
    in.iterations_left = 20;  // saves 8 s, less than twice the 5 s a switch costs
    d = planner::decide_switch(in);
    CHECK_FALSE(d.do_switch);
    CHECK_THAT(d.reason, Catch::Contains("switch cost"));
  }
  SECTION("no prediction") {
    in.candidate_iteration_s = 0;
    CHECK_FALSE(planner::decide_switch(in).do_switch);
  }
}
