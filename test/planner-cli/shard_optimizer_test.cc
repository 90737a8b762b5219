// ZeRO-1 as a planner choice (--shard-optimizer): auto shards exactly the replicated stages that
// do not fit without (after recomputation), never none, always every replicated stage; the stage
// cost model prices the slice's memory and the parameter gather; the report and inspect show it.
#include "gp/planner/shard_optimizer.h"

#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "../support/example_plans.h"
#include "../support/models.h"
#include "gp/cost/cluster.h"
#include "gp/cost/cost_model.h"
#include "gp/planner/report.h"
#include "gp/planner/search.h"
#include "gp/planner/stage_cost.h"
#include "gp/planner/verify.h"

using namespace gp;
using planner::RecomputeMode;
using planner::ShardMode;

namespace {

int sharding(const graphpipe::v1::Plan& plan) {
  int n = 0;
  for (const auto& st : plan.stages()) n += st.shard_optimizer() ? 1 : 0;
  return n;
}

struct Simulated {
  graphpipe::v1::Plan plan;
  sim::SimResult sim;
};

// `plan` simulated with the modes on a device of `capacity` bytes.
Simulated choose(graphpipe::v1::Plan plan, const model::Graph& g, RecomputeMode recompute,
                 ShardMode shard, int64_t capacity) {
  plan.mutable_cluster()->mutable_device()->set_memory_capacity_bytes(capacity);
  const cost::AnalyticCostModel compute(plan.cluster().device(), graphpipe::v1::PRECISION_FP32);
  const cost::CommModel comm(plan.cluster());
  const sim::Simulator simulator(compute, comm,
                                 {plan.training().optimizer(), plan.training().precision()});
  auto sim = planner::simulate_choosing_memory(simulator, recompute, shard, capacity, g, &plan);
  INFO(sim.status().to_string());
  REQUIRE(sim.ok());
  REQUIRE_FALSE(sim->deadlocked);
  return {std::move(plan), std::move(sim).value()};
}

}  // namespace

TEST_CASE("shard modes are auto, never or always, and anything else is refused by its flag") {
  CHECK(*planner::parse_shard_mode("auto") == ShardMode::kAuto);
  CHECK(*planner::parse_shard_mode("never") == ShardMode::kNever);
  CHECK(*planner::parse_shard_mode("always") == ShardMode::kAlways);
  const auto bad = planner::parse_shard_mode("zero3");
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.status().code() == StatusCode::kInvalidArgument);
  CHECK(bad.status().message().find("--shard-optimizer = 'zero3'") != std::string::npos);
  CHECK(planner::SearchRequest{}.shard_optimizer == ShardMode::kAuto);
  CHECK(planner::shard_mode_name(ShardMode::kAlways) == "always");
}

TEST_CASE("auto shards only the replicated stages over the device's memory") {
  // tiny-mmt with Adam: branch 0, branch 1 and the head, each stage on two replicas; and the
  // same with branch 0 on one rank.
  const auto g = testing::zoo_graph("tiny-mmt");
  graphpipe::v1::TrainingConfig adam;
  adam.set_optimizer(graphpipe::v1::OPTIMIZER_KIND_ADAM);
  adam.set_learning_rate(1e-3);
  std::vector<planner::StageAssignment> st(3);
  for (const auto& node : g.ops()) {
    const std::string& id = node.id();
    st[id.rfind("b0.", 0) == 0 ? 0 : id.rfind("b1.", 0) == 0 ? 1 : 2].ops.push_back(node.index);
  }
  for (int s = 0; s < 3; ++s) st[s].ranks = {2 * s, 2 * s + 1}, st[s].micro_batch = 4;
  const auto base = testing::built_plan(g, adam, st, 16);
  const int64_t roomy = int64_t{1} << 40;
  const Simulated never = choose(base, g, RecomputeMode::kNever, ShardMode::kNever, roomy);
  const Simulated always = choose(base, g, RecomputeMode::kNever, ShardMode::kAlways, roomy);
  CHECK(sharding(never.plan) == 0);
  CHECK(sharding(always.plan) == 3);
  CHECK(planner::sharding_stages(always.plan) == "0, 1, 2");
  for (int s = 0; s < 3; ++s) {
    CHECK(always.sim.stages[s].peak_memory_bytes < never.sim.stages[s].peak_memory_bytes);
  }
  // The gathers: every rank of a sharded stage finishes later.
  for (int r = 0; r < 6; ++r) CHECK(always.sim.ranks[r].finish_us > never.sim.ranks[r].finish_us);
  // Everything fits: auto changes nothing.
  const Simulated fits = choose(base, g, RecomputeMode::kNever, ShardMode::kAuto, roomy);
  CHECK(sharding(fits.plan) == 0);
  CHECK(fits.sim.iteration_time_us == never.sim.iteration_time_us);
  // A device that holds every stage sharded but not the largest unsharded: exactly the stages
  // over it shard, and the plan fits.
  int64_t capacity = 0, largest = 0;
  for (int s = 0; s < 3; ++s) {
    capacity = std::max(capacity, always.sim.stages[s].peak_memory_bytes);
    largest = std::max(largest, never.sim.stages[s].peak_memory_bytes);
  }
  REQUIRE(capacity < largest);
  const Simulated tight = choose(base, g, RecomputeMode::kNever, ShardMode::kAuto, capacity);
  for (int s = 0; s < 3; ++s) {
    INFO("stage " << s);
    CHECK(tight.plan.stages(s).shard_optimizer() ==
          (never.sim.stages[s].peak_memory_bytes > capacity));
  }
  CHECK(sharding(tight.plan) >= 1);
  CHECK(tight.sim.peak_memory_bytes <= capacity);
  // never leaves it over the device's memory.
  const Simulated refused = choose(base, g, RecomputeMode::kNever, ShardMode::kNever, capacity);
  CHECK(refused.sim.peak_memory_bytes > capacity);
  // A single-replica stage over the device never shards (nothing to shard over).
  auto single = st;
  single[0].ranks = {0};
  for (int s = 1; s < 3; ++s) single[s].ranks = {2 * s - 1, 2 * s};
  const auto lone = testing::built_plan(g, adam, single, 16);
  const Simulated lone_sim = choose(lone, g, RecomputeMode::kNever, ShardMode::kAuto, 1);
  CHECK_FALSE(lone_sim.plan.stages(0).shard_optimizer());
  CHECK(lone_sim.plan.stages(1).shard_optimizer());
  // Recomputation goes first: with it the stages' activations shrink, so a device that holds
  // the plan recomputing needs no sharding.
  const Simulated recomputed = choose(base, g, RecomputeMode::kAlways, ShardMode::kNever, roomy);
  const int64_t fits_recomputing = recomputed.sim.peak_memory_bytes;
  REQUIRE(fits_recomputing < largest);
  const Simulated both = choose(base, g, RecomputeMode::kAuto, ShardMode::kAuto, fits_recomputing);
  CHECK(planner::recomputing_stages(both.plan) != "");
  CHECK(sharding(both.plan) == 0);
  CHECK(both.sim.peak_memory_bytes <= fits_recomputing);
  // The report and inspect say which stages shard, and what they hold without and with.
  planner::ReportContext ctx;
  ctx.feasible = true;
  const std::string json = planner::plan_report_json(ctx, &always.plan);
  CHECK(json.find("\"shard_optimizer\": true") != std::string::npos);
  CHECK(planner::plan_report_json(ctx, &never.plan).find("\"shard_optimizer\": false") !=
        std::string::npos);
  const std::string text = planner::inspect_text(always.plan);
  CHECK(text.find("shards optimizer") != std::string::npos);
  CHECK(text.find("stage 1 shards its optimizer state over 2 replicas") != std::string::npos);
  CHECK(planner::inspect_text(never.plan).find("shard") == std::string::npos);
}

TEST_CASE("stage costs priced sharded hold 1/d of the optimizer state and pay a second reduce") {
  const auto g = testing::zoo_graph("tiny-transformer");
  const auto cluster = *cost::select_devices(*cost::load_cluster("cpu-local"), 4);
  const cost::AnalyticCostModel compute(cluster.device(), graphpipe::v1::PRECISION_FP32);
  const cost::CommModel comm(cluster);
  const auto units = planner::build_units(g, {});
  cost::MemoryOptions memory{graphpipe::v1::OPTIMIZER_KIND_ADAM, graphpipe::v1::PRECISION_FP32};
  const planner::StageCostModel plain(g, units, compute, comm, memory, 16, 4);
  memory.shard_optimizer = true;
  const planner::StageCostModel sharded(g, units, compute, comm, memory, 16, 4);
  std::vector<int> all(static_cast<size_t>(units.num_units()));
  for (int u = 0; u < units.num_units(); ++u) all[static_cast<size_t>(u)] = u;
  const auto a = plain.aggregate(all);
  const auto s = sharded.aggregate(all);
  const int64_t params = g.total_params();
  REQUIRE(a.optimizer_bytes == 8 * params);
  // One replica: nothing changes.
  CHECK(sharded.memory_bytes(s, 4, 1, 8) == plain.memory_bytes(a, 4, 1, 8));
  CHECK(sharded.allreduce_us(s, 1) == plain.allreduce_us(a, 1));
  CHECK(sharded.optimizer_us(s, 1) == plain.optimizer_us(a, 1));
  // Four replicas: ceil(params / 4) parameters' moments, the gather priced as an all-reduce, and
  // a quarter of the step's stream.
  CHECK(plain.memory_bytes(a, 4, 4, 8) - sharded.memory_bytes(s, 4, 4, 8) ==
        8 * params - (params + 3) / 4 * 8);
  CHECK(sharded.allreduce_us(s, 4) == Approx(2 * plain.allreduce_us(a, 4)));
  CHECK(sharded.optimizer_us(s, 4) < plain.optimizer_us(a, 4));
  CHECK(sharded.in_flight_limit(s, 4, 4) >= plain.in_flight_limit(a, 4, 4));
}

TEST_CASE("a DLRM whose embedding state fits no V100 gets a verified plan only by sharding") {
  // 20M-row tables: 1.28 G parameters, 20 GB with Adam on a 16 GB device, and one op each.
  const auto g = testing::zoo_graph("dlrm?rows=20000000&dense_branches=2&sparse_branches=2");
  const auto cluster = *cost::select_devices(*cost::load_cluster("summit-v100"), 16);
  const cost::AnalyticCostModel compute(cluster.device(), graphpipe::v1::PRECISION_FP32);
  auto search = [&](ShardMode mode) {
    planner::SearchRequest req;
    req.graph = &g;
    req.cluster = cluster;
    req.mini_batch = 256;
    req.training.set_optimizer(graphpipe::v1::OPTIMIZER_KIND_ADAM);
    req.training.set_learning_rate(1e-3);
    req.compute = &compute;
    req.micro_batches = {32, 64};
    req.shard_optimizer = mode;
    auto result = planner::search_plan(req);
    INFO(result.status().to_string());
    REQUIRE(result.ok());
    return std::move(result).value();
  };
  const auto never = search(ShardMode::kNever);
  CHECK_FALSE(never.feasible);
  const auto automatic = search(ShardMode::kAuto);
  REQUIRE(automatic.feasible);
  const auto& plan = automatic.plan;
  const int64_t capacity = cluster.device().memory_capacity_bytes();
  CHECK(plan.predicted().peak_memory_bytes() <= capacity);
  CHECK(sharding(plan) >= 1);
  auto built = model::Graph::build(plan.model());
  REQUIRE(built.ok());
  for (const auto& st : plan.stages()) {
    if (!st.shard_optimizer()) continue;
    INFO("stage " << st.id());
    CHECK(st.device_ranks_size() > 1);
    // Only where it binds: unsharded, the stage would not fit.
    std::vector<int> ops;
    for (const auto& id : st.op_ids()) ops.push_back(built->index_of(id));
    cost::MemoryOptions options{graphpipe::v1::OPTIMIZER_KIND_ADAM, graphpipe::v1::PRECISION_FP32};
    options.recompute = st.recompute();
    const auto whole = cost::stage_memory(*built, ops, st.micro_batch(), st.in_flight_samples(),
                                          st.device_ranks_size(), options);
    CHECK(whole.total() > capacity);
    // The embedding's memory is its state, not activations: sharding alone is enough.
    CHECK_FALSE(st.recompute());
  }
  auto verified = planner::verify_plan(plan, compute);
  REQUIRE(verified.ok());
  INFO((verified->problems.empty() ? std::string() : verified->problems[0]));
  CHECK(verified->ok());
}
