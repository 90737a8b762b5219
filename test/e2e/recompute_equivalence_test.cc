// Activation recomputation (Stage.recompute) changes what a stage keeps, never what it computes:
// a plan with some or all stages recomputing trains bit for bit like the same plan without, on
// the CPU and on the host-staged path CUDA takes, and like the single-process reference.
#include <catch2/catch.hpp>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "../support/example_plans.h"
#include "../support/local_training.h"
#include "../support/models.h"
#include "../support/staging_device.h"
#include "gp/cost/cluster.h"
#include "gp/exec/rank_program.h"
#include "gp/exec/rank_session.h"
#include "gp/exec/reference_trainer.h"
#include "gp/planner/search.h"

using namespace gp;

namespace {

constexpr int kIterations = 4;
constexpr auto kTimeout = std::chrono::milliseconds(20000);

using testing::check_bit_identical;
using Trained = testing::LocalTraining;

// Checks that every session's runner took the plan's choice.
Trained train(const graphpipe::v1::Plan& plan, const exec::Device& device = exec::cpu_device()) {
  return testing::train_locally(
      plan, kIterations, kTimeout, device, [&](const exec::RankSession& s) {
        CHECK(s.runner().stage_runner().recompute() == plan.stages(s.runner().stage()).recompute());
      });
}

// `plan` with Stage.recompute set where `which(stage)` says.
template <typename Which>
graphpipe::v1::Plan recomputing(graphpipe::v1::Plan plan, Which which) {
  for (int s = 0; s < plan.stages_size(); ++s) plan.mutable_stages(s)->set_recompute(which(s));
  return plan;
}

graphpipe::v1::Plan searched_graphpipe(const model::Graph& g,
                                       const graphpipe::v1::TrainingConfig& t) {
  const auto cluster = *cost::select_devices(*cost::load_cluster("cpu-local"), 4);
  cost::AnalyticCostModel model(cluster.device(), graphpipe::v1::PRECISION_FP32);
  planner::SearchRequest req;
  req.graph = &g;
  req.cluster = cluster;
  req.mini_batch = 16;
  req.training = t;
  req.compute = &model;
  req.micro_batches = {2, 4};
  auto r = planner::search_plan(req);
  REQUIRE(r.ok());
  REQUIRE(r->feasible);
  return r->plan;
}

struct Case {
  std::string name;
  std::function<model::Graph()> graph;
  std::function<graphpipe::v1::Plan(const model::Graph&)> plan;
  int64_t batch;
};

std::vector<Case> cases() {
  const auto adam = testing::training(graphpipe::v1::OPTIMIZER_KIND_ADAM);
  const auto momentum = testing::training(graphpipe::v1::OPTIMIZER_KIND_MOMENTUM);
  auto zoo = [](const char* name) { return [name] { return testing::zoo_graph(name); }; };
  std::vector<Case> out;
  out.push_back({"replicated stages, uneven slices", zoo("tiny-mmt"),
                 [=](const model::Graph& g) { return testing::replicated_plan(g, adam, 3, 3); },
                 16});
  out.push_back({"relayed tensors", zoo("tiny-candle-uno"),
                 [=](const model::Graph& g) { return testing::relay_plan(g, momentum); }, 8});
  out.push_back({"gradient fan-in", testing::fan_in_graph,
                 [=](const model::Graph& g) { return testing::fan_in_plan(g, momentum); }, 8});
  out.push_back({"graph pipeline", zoo("tiny-candle-uno"),
                 [=](const model::Graph& g) { return searched_graphpipe(g, adam); }, 16});
  out.push_back({"transformer graph pipeline", zoo("tiny-transformer"),
                 [=](const model::Graph& g) { return searched_graphpipe(g, adam); }, 16});
  return out;
}

}  // namespace

TEST_CASE("recomputing stages train bit for bit like the plan without, and like the reference") {
  for (const Case& c : cases()) {
    INFO(c.name);
    const model::Graph g = c.graph();
    const graphpipe::v1::Plan plan = c.plan(g);
    REQUIRE(plan.stages_size() >= 2);
    const Trained plain = train(plan);
    const Trained all = train(recomputing(plan, [](int) { return true; }));
    const Trained some = train(recomputing(plan, [](int s) { return s % 2 == 1; }));
    check_bit_identical(plain, all);
    check_bit_identical(plain, some);
    auto ref = exec::ReferenceTrainer::create(g, c.batch, 0, plan.training());
    REQUIRE(ref.ok());
    for (int i = 0; i < kIterations; ++i) {
      const auto m = (*ref)->run_iteration(i);
      REQUIRE(m.ok());
      INFO("iteration " << i);
      CHECK(all.losses[static_cast<size_t>(i)] == Approx(m->loss).epsilon(1e-5));
    }
  }
}

// The host-staged path of devices without host memory (CUDA's): the recomputation's input
// copies and shared buffers behave as on the CPU.
TEST_CASE("recomputing stages train on a device without host memory exactly as on the CPU") {
  auto g = testing::zoo_graph("tiny-candle-uno");
  const auto plan =
      recomputing(testing::relay_plan(g, testing::training(graphpipe::v1::OPTIMIZER_KIND_MOMENTUM)),
                  [](int) { return true; });
  testing::StagingDevice dev;
  check_bit_identical(train(plan), train(plan, dev));
  INFO(dev.first_violation());
  CHECK(dev.violations() == 0);
}

TEST_CASE("a recomputing stage's lowered program says so and holds fewer activation bytes") {
  auto g = testing::zoo_graph("tiny-mmt");
  const auto base =
      testing::replicated_plan(g, testing::training(graphpipe::v1::OPTIMIZER_KIND_SGD));
  const auto plan = recomputing(base, [](int) { return true; });
  std::vector<std::unique_ptr<exec::RankSession>> plain_sessions, recompute_sessions;
  REQUIRE(exec::run_plan_locally(base, 1, kTimeout, &plain_sessions).ok());
  REQUIRE(exec::run_plan_locally(plan, 1, kTimeout, &recompute_sessions).ok());
  REQUIRE(plain_sessions.size() == recompute_sessions.size());
  for (size_t i = 0; i < plain_sessions.size(); ++i) {
    const auto& a = plain_sessions[i]->runner();
    const auto& b = recompute_sessions[i]->runner();
    INFO("rank " << b.rank() << ", " << b.program().slots << " slots");
    CHECK_FALSE(a.program().recompute);
    CHECK(b.program().recompute);
    CHECK(exec::describe(b.program()).find(" recompute\n") != std::string::npos);
    CHECK(exec::describe(a.program()).find("recompute") == std::string::npos);
    const auto& ma = a.stage_runner().memory();
    const auto& mb = b.stage_runner().memory();
    CHECK(mb.weight_bytes == ma.weight_bytes);
    CHECK(mb.activation_bytes < ma.activation_bytes);
    if (b.program().slots > 1) CHECK(mb.total() < ma.total());
  }
}
