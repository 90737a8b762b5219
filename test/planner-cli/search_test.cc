// Properties of the GraphPipe search that hold whatever the costs: more devices never give a
// slower plan (the search also plans for fewer devices), and the per-stage micro-batch
// refinement never ends below where it started (one size for all, the idle devices given).
#include "gp/planner/search.h"

#include <catch2/catch.hpp>
#include <map>
#include <string>
#include <vector>

#include "../support/models.h"
#include "gp/cost/cluster.h"
#include "gp/cost/cost_model.h"
#include "gp/planner/plan_builder.h"
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

// GraphPipe's search of `graph` on the first `devices` devices of `cluster_name`, as
// graphpipe-plan search runs it (per-stage micro-batches unless `uniform`).
planner::SearchResult search(const model::Graph& graph, const std::string& cluster_name,
                             int devices, int64_t batch, bool uniform = false) {
  const auto cluster = cost::select_devices(*cost::load_cluster(cluster_name), devices);
  REQUIRE(cluster.ok());
  const cost::AnalyticCostModel compute(cluster->device(), graphpipe::v1::PRECISION_FP32);
  planner::SearchRequest req;
  req.graph = &graph;
  req.cluster = *cluster;
  req.mini_batch = batch;
  req.training = adam();
  req.compute = &compute;
  req.per_stage_microbatch = !uniform;
  auto result = planner::search_plan(req);
  INFO(graph.model().name() << " on " << devices << " x " << cluster_name);
  REQUIRE(result.ok());
  return std::move(result).value();
}

double throughput(const planner::SearchResult& r) {
  return r.feasible ? r.plan.predicted().throughput_samples_per_s() : 0.0;
}

}  // namespace

TEST_CASE("more devices never give a slower plan: N + k devices against every N") {
  struct Sweep {
    std::string model;
    std::string cluster;
    int most_devices;
    int64_t batch;
  };
  const std::vector<Sweep> sweeps = {
      {"tiny-mmt", "summit-v100", 12, 32},         {"tiny-dlrm", "dgx-h100", 12, 32},
      {"tiny-candle-uno", "summit-v100", 12, 32},  {"tiny-transformer", "dgx-h100", 12, 32},
      {"candle-uno", "dgx-h100", 12, 64},          {"dlrm", "summit-v100", 12, 64},
      {"nbranch?branches=4", "summit-v100", 9, 32}};
  for (const Sweep& sw : sweeps) {
    const model::Graph g = testing::zoo_graph(sw.model);
    std::map<int, planner::SearchResult> by_devices;
    for (int d = 1; d <= sw.most_devices; ++d) by_devices[d] = search(g, sw.cluster, d, sw.batch);
    for (int n = 1; n <= sw.most_devices; ++n) {
      for (int m = n + 1; m <= sw.most_devices; ++m) {
        INFO(sw.model << " on " << sw.cluster << ": " << m << " devices against " << n);
        CHECK(throughput(by_devices[m]) >= throughput(by_devices[n]));
      }
    }
    // A plan that leaves devices idle says why; one searched for fewer devices says so.
    for (const auto& [d, r] : by_devices) {
      if (!r.feasible) continue;
      INFO(sw.model << " on " << d << " devices: " << r.idle_devices_reason);
      CHECK(r.searched_devices <= d);
      CHECK(r.searched_devices >= r.plan.programs_size());
      if (r.plan.programs_size() < d) CHECK_FALSE(r.idle_devices_reason.empty());
      if (r.searched_devices < d) {
        CHECK_THAT(r.idle_devices_reason,
                   Catch::Contains("a plan searched for " + std::to_string(r.searched_devices)));
      }
    }
  }
}

TEST_CASE("the issue's case: candle-uno on 32 H100s is never slower than on 8 and verifies") {
  const model::Graph g = testing::zoo_graph("candle-uno");
  const auto on8 = search(g, "dgx-h100", 8, 256);
  const auto on32 = search(g, "dgx-h100", 32, 256);
  REQUIRE(on8.feasible);
  REQUIRE(on32.feasible);
  CHECK(throughput(on32) >= throughput(on8));
  // Its plan is for the 32-device cluster even when it leaves devices idle.
  const auto cluster = cost::select_devices(*cost::load_cluster("dgx-h100"), 32);
  REQUIRE(cluster.ok());
  CHECK(on32.plan.cluster().SerializeAsString() == cluster->SerializeAsString());
  const cost::AnalyticCostModel compute(cluster->device(), graphpipe::v1::PRECISION_FP32);
  auto report = planner::verify_plan(on32.plan, compute);
  REQUIRE(report.ok());
  CHECK(report->ok());
}

TEST_CASE("per-stage refinement never ends below one size for all (dlrm on 16 and 32 V100s)") {
  const model::Graph g = testing::zoo_graph("dlrm");
  for (const int devices : {16, 32}) {
    const int64_t batch = 8 * devices;
    INFO("dlrm on " << devices << " V100s");
    const auto uniform = search(g, "summit-v100", devices, batch, /*uniform=*/true);
    const auto refined = search(g, "summit-v100", devices, batch);
    REQUIRE(refined.feasible);
    CHECK(throughput(refined) >= throughput(uniform));
    // Nor below its own stages and ranks with one micro-batch for all, at any size.
    const auto cluster = cost::select_devices(*cost::load_cluster("summit-v100"), devices);
    REQUIRE(cluster.ok());
    const cost::AnalyticCostModel compute(cluster->device(), graphpipe::v1::PRECISION_FP32);
    const cost::CommModel comm(*cluster);
    const sim::Simulator simulator(
        compute, comm,
        {graphpipe::v1::OPTIMIZER_KIND_ADAM, graphpipe::v1::PRECISION_FP32, &compute});
    std::vector<planner::StageAssignment> stages;
    size_t most_replicas = 0;
    for (const auto& st : refined.plan.stages()) {
      planner::StageAssignment a;
      for (const auto& id : st.op_ids()) a.ops.push_back(g.index_of(id));
      a.ranks.assign(st.device_ranks().begin(), st.device_ranks().end());
      most_replicas = std::max(most_replicas, a.ranks.size());
      stages.push_back(std::move(a));
    }
    planner::PlanInputs in;
    in.graph = &g;
    in.cluster = *cluster;
    in.mini_batch = batch;
    in.training = adam();
    in.chain = refined.chain;
    int tried = 0;
    for (int64_t b = 1; b <= batch; b *= 2) {
      if (b < static_cast<int64_t>(most_replicas)) continue;
      for (auto& st : stages) st.micro_batch = b;
      auto plan = planner::build_plan(in, stages);
      REQUIRE(plan.ok());
      auto sim = simulator.run(*plan, g);
      REQUIRE(sim.ok());
      if (sim->deadlocked || sim->peak_memory_bytes > cluster->device().memory_capacity_bytes()) {
        continue;
      }
      ++tried;
      INFO("one micro-batch of " << b << " for all stages");
      CHECK(throughput(refined) >= sim->throughput_samples_per_s);
    }
    CHECK(tried > 0);
  }
}
