// The simulator on mixed clusters: each rank's compute priced with its own device's model, its
// memory checked against its own device's capacity.
#include <catch2/catch.hpp>
#include <memory>

#include "../support/fakes.h"
#include "../support/models.h"
#include "gp/cost/cluster.h"
#include "gp/cost/device_costs.h"
#include "gp/planner/plan_builder.h"
#include "gp/sim/simulator.h"

using namespace gp;
using planner::StageAssignment;

namespace {

// `devices` ranks on one node; ranks in `slow` are of kind "slow". Links and memory bandwidth
// as fast as validation allows, so compute alone sets the times.
graphpipe::v1::Cluster cluster_with_slow(int devices, std::initializer_list<int> slow,
                                         int64_t slow_capacity = int64_t{1} << 40) {
  auto c = testing::ideal_cluster(devices);
  c.mutable_device()->set_memory_bandwidth_bytes_per_s(1e15);
  for (auto* link : {c.mutable_intra_node(), c.mutable_inter_node()}) {
    link->set_bandwidth_bytes_per_s(1e15);
  }
  if (slow.size() == 0) return c;
  auto* g = c.add_device_groups();
  *g->mutable_device() = c.device();
  g->mutable_device()->set_name("slow");
  g->mutable_device()->set_peak_fp32_flops(c.device().peak_fp32_flops() / 2);
  g->mutable_device()->set_memory_capacity_bytes(slow_capacity);
  for (int r : slow) g->add_devices(r);
  REQUIRE(cost::validate_cluster(c).ok());
  return c;
}

graphpipe::v1::Plan make_plan(const model::Graph& g, const std::vector<StageAssignment>& st,
                              const graphpipe::v1::Cluster& cluster) {
  planner::PlanInputs in;
  in.graph = &g;
  in.cluster = cluster;
  in.mini_batch = 16;
  in.training.set_optimizer(graphpipe::v1::OPTIMIZER_KIND_SGD);
  auto plan = planner::build_plan(in, st);
  INFO(plan.status().to_string());
  REQUIRE(plan.ok());
  return std::move(plan).value();
}

sim::SimResult simulate(const graphpipe::v1::Plan& plan, const model::Graph& g) {
  auto fast = std::make_shared<testing::FakeCostModel>(10, 20);
  auto slow = std::make_shared<testing::FakeCostModel>(20, 40);  // 2x slower
  auto models =
      plan.cluster().device_groups_size() > 0
          ? cost::DeviceCostModels::create(plan.cluster(), {{"ideal-device", fast}, {"slow", slow}})
          : Result<cost::DeviceCostModels>(cost::DeviceCostModels(fast));
  REQUIRE(models.ok());
  const cost::CommModel comm(plan.cluster());
  const sim::Simulator simulator(
      *models, comm, {graphpipe::v1::OPTIMIZER_KIND_SGD, graphpipe::v1::PRECISION_FP32});
  auto r = simulator.run(plan, g);
  INFO(r.status().to_string());
  REQUIRE(r.ok());
  REQUIRE_FALSE(r->deadlocked);
  return std::move(r).value();
}

// fc0 (with x) on one stage; fc1, the loss and its target on the other.
std::vector<StageAssignment> two_stages(const model::Graph& g) {
  std::vector<StageAssignment> st(2);
  st[0].ops = {g.index_of("x"), g.index_of("fc0")};
  st[0].ranks = {0};
  st[1].ops = {g.index_of("fc1"), g.index_of("loss"), g.index_of("t")};
  st[1].ranks = {1};
  for (auto& s : st) s.micro_batch = 4;
  return st;
}

}  // namespace

TEST_CASE("a stage on a 2x slower kind takes twice the compute and the plan takes longer") {
  const auto g = testing::chain_graph(2);
  const auto uniform = simulate(make_plan(g, two_stages(g), cluster_with_slow(2, {})), g);
  const auto mixed = simulate(make_plan(g, two_stages(g), cluster_with_slow(2, {1})), g);
  CHECK(mixed.stages[0].forward_us == Approx(uniform.stages[0].forward_us));
  CHECK(mixed.stages[1].forward_us == Approx(2 * uniform.stages[1].forward_us));
  CHECK(mixed.stages[1].backward_us == Approx(2 * uniform.stages[1].backward_us));
  CHECK(mixed.ranks[1].busy_us == Approx(2 * uniform.ranks[1].busy_us));
  CHECK(mixed.iteration_time_us > 1.5 * uniform.iteration_time_us);
  // The slow stage on the fast device and the other way round is faster: placement matters.
  auto swapped = two_stages(g);
  swapped[0].ranks = {1};
  swapped[1].ranks = {0};
  const auto better = simulate(make_plan(g, swapped, cluster_with_slow(2, {1})), g);
  CHECK(better.iteration_time_us < mixed.iteration_time_us);
}

TEST_CASE("replicas on different kinds compute at their own pace and all-reduce at the slowest") {
  const auto g = testing::chain_graph(2);
  StageAssignment all;
  for (int i = 0; i < g.num_ops(); ++i) all.ops.push_back(i);
  all.ranks = {0, 1};
  all.micro_batch = 4;
  const auto mixed = simulate(make_plan(g, {all}, cluster_with_slow(2, {1})), g);
  const auto fast = simulate(make_plan(g, {all}, cluster_with_slow(2, {})), g);
  const auto slow = simulate(make_plan(g, {all}, cluster_with_slow(2, {0, 1})), g);
  CHECK(mixed.ranks[1].busy_us == Approx(2 * mixed.ranks[0].busy_us));
  CHECK(mixed.stages[0].forward_us == Approx(slow.stages[0].forward_us));  // the slowest replica
  CHECK(mixed.iteration_time_us == Approx(slow.iteration_time_us));
  CHECK(mixed.iteration_time_us > fast.iteration_time_us);
}

TEST_CASE("each rank's peak memory is checked against its own device's capacity") {
  const auto g = testing::chain_graph(2);
  const auto roomy = simulate(make_plan(g, two_stages(g), cluster_with_slow(2, {1})), g);
  CHECK(roomy.fits_memory());
  const int64_t small = roomy.ranks[1].peak_memory_bytes - 1;
  const auto tight = simulate(make_plan(g, two_stages(g), cluster_with_slow(2, {1}, small)), g);
  CHECK(tight.ranks[1].capacity_bytes == small);
  CHECK(tight.ranks[0].capacity_bytes == int64_t{1} << 40);
  CHECK(tight.stages[1].capacity_bytes == small);
  CHECK_FALSE(tight.fits_memory());
  // With room for rank 1's peak exactly, it fits again.
  const auto exact = simulate(
      make_plan(g, two_stages(g), cluster_with_slow(2, {1}, roomy.ranks[1].peak_memory_bytes)), g);
  CHECK(exact.fits_memory());
}
