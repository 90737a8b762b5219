// Lowering external stage assignments: a searched partition handed back as an assignment
// reproduces the searched plan, chain and DAG lowerings of one partition, and bad assignments
// refused naming the field.
#include "gp/planner/lower.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <random>
#include <string>
#include <vector>

#include "../support/models.h"
#include "gp/cost/cluster.h"
#include "gp/cost/cost_model.h"
#include "gp/plan/plan_util.h"
#include "gp/planner/search.h"
#include "gp/planner/verify.h"

using namespace gp;

namespace {

struct Setup {
  explicit Setup(const std::string& spec, int devices = 4)
      : g(testing::zoo_graph(spec)),
        cluster(*cost::select_devices(*cost::load_cluster("summit-v100"), devices)),
        compute(cluster.device(), graphpipe::v1::PRECISION_FP32) {
    training.set_optimizer(graphpipe::v1::OPTIMIZER_KIND_ADAM);
    training.set_learning_rate(1e-3);
  }

  planner::SearchResult search(graphpipe::v1::Strategy strategy) const {
    planner::SearchRequest req;
    req.graph = &g;
    req.cluster = cluster;
    req.mini_batch = 32;
    req.strategy = strategy;
    req.training = training;
    req.compute = &compute;
    auto result = planner::search_plan(req);
    REQUIRE(result.ok());
    REQUIRE(result->feasible);
    return std::move(result).value();
  }

  Result<std::vector<planner::LoweredPlan>> lower(const graphpipe::v1::StageAssignmentFile& file,
                                                  planner::Lowering lowering) const {
    auto stages = planner::resolve_assignment(file, g, cost::num_devices(cluster), 32);
    if (!stages.ok()) return stages.status();
    planner::LowerRequest req;
    req.graph = &g;
    req.cluster = cluster;
    req.mini_batch = 32;
    req.training = training;
    req.compute = &compute;
    req.stages = std::move(stages).value();
    req.lowering = lowering;
    return planner::lower_assignment(req);
  }

  model::Graph g;
  graphpipe::v1::Cluster cluster;
  cost::AnalyticCostModel compute;
  graphpipe::v1::TrainingConfig training;
};

// A plan's stages as an assignment file: op ids, replicas and micro-batch per stage.
graphpipe::v1::StageAssignmentFile assignment_of(const graphpipe::v1::Plan& plan) {
  graphpipe::v1::StageAssignmentFile file;
  for (const auto& stage : plan.stages()) {
    auto* st = file.add_stages();
    for (const auto& op : stage.op_ids()) st->add_ops(op);
    st->set_replicas(stage.device_ranks_size());
    st->set_micro_batch(stage.micro_batch());
  }
  return file;
}

graphpipe::v1::StageAssignmentFile one_stage(const model::Graph& g) {
  graphpipe::v1::StageAssignmentFile file;
  auto* st = file.add_stages();
  for (const auto& node : g.ops()) st->add_ops(node.id());
  return file;
}

// The topological order cut in two: both halves are convex (no path returns to the first half).
graphpipe::v1::StageAssignmentFile two_halves(const model::Graph& g) {
  graphpipe::v1::StageAssignmentFile file;
  auto* first = file.add_stages();
  auto* second = file.add_stages();
  const auto& topo = g.topo_order();
  for (size_t i = 0; i < topo.size(); ++i) {
    (2 * i < topo.size() ? first : second)->add_ops(g.op(topo[i]).id());
  }
  return file;
}

std::string error_of(const Result<std::vector<planner::LoweredPlan>>& r) {
  return r.ok() ? std::string("(no error)") : r.status().message();
}

}  // namespace

TEST_CASE("a searched chain partition lowered as a chain reproduces the searched plan") {
  Setup s("tiny-dlrm");  // PipeDream's own DP makes tiny-candle-uno one data-parallel stage
  const auto searched = s.search(graphpipe::v1::STRATEGY_SEQUENTIAL);
  REQUIRE(searched.plan.stages_size() >= 2);
  auto lowered = s.lower(assignment_of(searched.plan), planner::Lowering::kChain);
  REQUIRE(lowered.ok());
  REQUIRE(lowered->size() == 1);
  const auto& result = (*lowered)[0].result;
  REQUIRE(result.feasible);
  CHECK((*lowered)[0].lowering == "chain");
  CHECK(result.plan.stages_size() == searched.plan.stages_size());
  CHECK(result.plan.programs_size() == searched.plan.programs_size());
  CHECK(result.plan.predicted().throughput_samples_per_s() ==
        Approx(searched.plan.predicted().throughput_samples_per_s()).epsilon(1e-9));
  CHECK(result.plan.provenance().strategy() == graphpipe::v1::STRATEGY_MANUAL);
  auto report = planner::verify_plan(result.plan, s.compute);
  REQUIRE(report.ok());
  CHECK(report->ok());
}

TEST_CASE("a searched graph partition lowered as a DAG keeps its stage graph and speed") {
  Setup s("tiny-mmt");
  const auto searched = s.search(graphpipe::v1::STRATEGY_GRAPHPIPE);
  REQUIRE(planner::pipeline_depth(searched.plan) < searched.plan.stages_size());  // a DAG
  auto lowered = s.lower(assignment_of(searched.plan), planner::Lowering::kBest);
  REQUIRE(lowered.ok());
  REQUIRE(lowered->size() == 2);
  CHECK((*lowered)[0].lowering == "chain");
  CHECK((*lowered)[1].lowering == "dag");
  const auto& dag = (*lowered)[1].result;
  REQUIRE(dag.feasible);
  CHECK(dag.plan.stages_size() == searched.plan.stages_size());
  CHECK(dag.plan.edges_size() == searched.plan.edges_size());
  CHECK(planner::pipeline_depth(dag.plan) == planner::pipeline_depth(searched.plan));
  CHECK(dag.plan.predicted().throughput_samples_per_s() ==
        Approx(searched.plan.predicted().throughput_samples_per_s()).epsilon(1e-6));
  auto report = planner::verify_plan(dag.plan, s.compute);
  REQUIRE(report.ok());
  CHECK(report->ok());
  // The chain lowering of the same stages relays tensors: consecutive stages only.
  const auto& chain = (*lowered)[0].result;
  REQUIRE(chain.feasible);
  for (const auto& e : chain.plan.edges()) CHECK(e.dst_stage() == e.src_stage() + 1);
}

TEST_CASE("stages without a micro-batch get the fastest size that fits") {
  Setup s("tiny-candle-uno");
  auto lowered = s.lower(one_stage(s.g), planner::Lowering::kDag);
  REQUIRE(lowered.ok());
  const auto& result = (*lowered)[0].result;
  REQUIRE(result.feasible);
  CHECK(result.candidates.size() == 6);  // 1, 2, 4, 8, 16, 32
  double best = 0;
  for (const auto& c : result.candidates) best = std::max(best, c.throughput_samples_per_s);
  CHECK(result.plan.predicted().throughput_samples_per_s() == Approx(best));
  CHECK(result.plan.programs_size() == 1);
}

TEST_CASE("a replicated stage skips the micro-batch sizes smaller than its replicas") {
  Setup s("tiny-candle-uno");
  auto file = one_stage(s.g);
  file.mutable_stages(0)->set_replicas(4);
  auto lowered = s.lower(file, planner::Lowering::kDag);
  REQUIRE(lowered.ok());
  const auto& result = (*lowered)[0].result;
  REQUIRE(result.feasible);
  CHECK(result.plan.programs_size() == 4);
  CHECK(result.plan.stages(0).micro_batch() % 4 == 0);
  CHECK_THAT(result.candidates[0].reason,
             Catch::Contains("micro-batch 1 is smaller than the 4 replicas"));
}

TEST_CASE("three replicas split each micro-batch unevenly and the plan verifies") {
  Setup s("tiny-candle-uno");
  auto file = one_stage(s.g);
  file.mutable_stages(0)->set_replicas(3);
  file.mutable_stages(0)->set_micro_batch(8);
  auto lowered = s.lower(file, planner::Lowering::kDag);
  REQUIRE(lowered.ok());
  const auto& result = (*lowered)[0].result;
  INFO(result.infeasible_reason);
  REQUIRE(result.feasible);
  CHECK(result.plan.programs_size() == 3);
  REQUIRE(result.plan.stages(0).micro_batch() == 8);
  // Slices of 2, 3 and 3 samples cover each micro-batch once.
  for (int j = 0; j < 3; ++j) {
    const auto r = plan::replica_samples(result.plan.stages(0), j, 1);
    CHECK(r.begin == 8 + j * 8 / 3);
    CHECK(r.end == 8 + (j + 1) * 8 / 3);
  }
  auto g = model::Graph::build(result.plan.model());
  REQUIRE(g.ok());
  CHECK(plan::validate_plan(result.plan, *g).ok());
}

TEST_CASE("bad assignments are refused naming the stage and the op") {
  Setup s("tiny-candle-uno");
  const auto good = two_halves(s.g);
  REQUIRE(s.lower(good, planner::Lowering::kBest).ok());

  SECTION("an unknown op") {
    auto file = good;
    file.mutable_stages(1)->set_ops(0, "no.such.op");
    CHECK_THAT(error_of(s.lower(file, planner::Lowering::kBest)),
               Catch::Contains("stages[1].ops[0] = 'no.such.op'") &&
                   Catch::Contains("has no op with this id"));
  }
  SECTION("an op in two stages") {
    auto file = good;
    file.mutable_stages(1)->add_ops(file.stages(0).ops(0));
    CHECK_THAT(error_of(s.lower(file, planner::Lowering::kBest)),
               Catch::Contains("is also in stages[0]"));
  }
  SECTION("an op in no stage") {
    auto file = good;
    file.mutable_stages(0)->mutable_ops()->RemoveLast();
    CHECK_THAT(error_of(s.lower(file, planner::Lowering::kBest)),
               Catch::Contains("is in no stage"));
  }
  SECTION("too many devices") {
    auto file = good;
    file.mutable_stages(0)->set_replicas(64);
    CHECK_THAT(error_of(s.lower(file, planner::Lowering::kBest)),
               Catch::Contains("replicas in all, but the cluster has 4 devices"));
  }
  SECTION("a micro-batch that does not divide the mini-batch") {
    auto file = good;
    file.mutable_stages(0)->set_micro_batch(3);
    CHECK_THAT(error_of(s.lower(file, planner::Lowering::kBest)),
               Catch::Contains("stages[0].micro_batch = 3 does not divide the mini-batch 32"));
  }
  SECTION("no stage at all") {
    CHECK_THAT(error_of(s.lower({}, planner::Lowering::kBest)), Catch::Contains("stages: empty"));
  }
}

TEST_CASE("a stage that a path leaves and re-enters is refused as not convex") {
  Setup s("tiny-candle-uno");
  // The first and the last op of the topological order together, the rest in a second stage:
  // every path from the first to the last leaves the stage and comes back.
  const auto& topo = s.g.topo_order();
  graphpipe::v1::StageAssignmentFile file;
  auto* ends = file.add_stages();
  auto* middle = file.add_stages();
  for (size_t i = 0; i < topo.size(); ++i) {
    const bool end = i == 0 || i + 1 == topo.size();
    (end ? ends : middle)->add_ops(s.g.op(topo[i]).id());
  }
  REQUIRE(s.g.reaches(topo.front(), topo.back()));
  const std::string error = error_of(s.lower(file, planner::Lowering::kBest));
  CHECK_THAT(error, Catch::Contains("stages[0] is not convex") &&
                        Catch::Contains("'" + s.g.op(topo.front()).id() + "' -> ") &&
                        Catch::Contains("(stages[1])"));
}

TEST_CASE("convex stages that feed each other are refused as a cycle, naming them") {
  Setup s("tiny-candle-uno");
  // Each stage holds the start of one branch and the end of the other: both are convex, but a
  // tensor goes from stages[0] to stages[1] and another comes back.
  graphpipe::v1::StageAssignmentFile file;
  auto* a = file.add_stages();
  auto* b = file.add_stages();
  auto* rest = file.add_stages();
  for (const char* op : {"feature0.input", "feature0.fc0", "feature1.fc1"}) a->add_ops(op);
  for (const char* op : {"feature1.input", "feature1.fc0", "feature0.fc1"}) b->add_ops(op);
  for (const auto& node : s.g.ops()) {
    const std::string& id = node.id();
    if (id.rfind("feature0.", 0) != 0 && id.rfind("feature1.", 0) != 0) rest->add_ops(id);
  }
  CHECK_THAT(error_of(s.lower(file, planner::Lowering::kBest)),
             Catch::Contains("stages: the stage graph has a cycle") &&
                 Catch::Contains("on it or after it: stages[0], stages[1], stages[2]"));
}

TEST_CASE("a DAG lowering does not depend on the order the file lists its stages in") {
  struct Case {
    std::string model;
    std::string cluster;
    int devices;
    int64_t batch;
  };
  // Every zoo model; dlrm on 8 H100s is the (44,952 vs 44,376 samples/s reversed).
  const std::vector<Case> cases = {{"tiny-mmt", "summit-v100", 4, 32},
                                   {"tiny-dlrm", "summit-v100", 4, 32},
                                   {"tiny-candle-uno", "summit-v100", 4, 32},
                                   {"tiny-transformer", "summit-v100", 4, 32},
                                   {"nbranch?branches=4", "summit-v100", 8, 64},
                                   {"mmt", "summit-v100", 8, 64},
                                   {"dlrm", "dgx-h100", 8, 64},
                                   {"candle-uno", "summit-v100", 8, 64},
                                   {"transformer", "summit-v100", 8, 64}};
  for (const Case& c : cases) {
    INFO(c.model << " on " << c.devices << " x " << c.cluster);
    const model::Graph g = testing::zoo_graph(c.model);
    const auto cluster = cost::select_devices(*cost::load_cluster(c.cluster), c.devices);
    REQUIRE(cluster.ok());
    const cost::AnalyticCostModel compute(cluster->device(), graphpipe::v1::PRECISION_FP32);
    graphpipe::v1::TrainingConfig training;
    training.set_optimizer(graphpipe::v1::OPTIMIZER_KIND_ADAM);
    training.set_learning_rate(1e-3);
    planner::SearchRequest sreq;
    sreq.graph = &g;
    sreq.cluster = *cluster;
    sreq.mini_batch = c.batch;
    sreq.training = training;
    sreq.compute = &compute;
    sreq.per_stage_microbatch = true;  // mixed sizes too
    auto searched = planner::search_plan(sreq);
    REQUIRE(searched.ok());
    REQUIRE(searched->feasible);
    // The searched stages with their sizes, and without (every size tried).
    for (const bool sizes : {true, false}) {
      auto file = assignment_of(searched->plan);
      if (!sizes) {
        for (auto& st : *file.mutable_stages()) st.clear_micro_batch();
      }
      auto lower = [&](const graphpipe::v1::StageAssignmentFile& f) {
        auto stages = planner::resolve_assignment(f, g, c.devices, c.batch);
        REQUIRE(stages.ok());
        planner::LowerRequest req;
        req.graph = &g;
        req.cluster = *cluster;
        req.mini_batch = c.batch;
        req.training = training;
        req.compute = &compute;
        req.stages = std::move(stages).value();
        req.lowering = planner::Lowering::kDag;
        auto lowered = planner::lower_assignment(req);
        REQUIRE(lowered.ok());
        REQUIRE((*lowered)[0].result.feasible);
        return std::move((*lowered)[0]);
      };
      const planner::LoweredPlan first = lower(file);
      std::vector<int> perm(file.stages_size());
      for (size_t i = 0; i < perm.size(); ++i) perm[i] = static_cast<int>(i);
      std::mt19937 rng(7);
      for (int trial = 0; trial < 4; ++trial) {
        if (trial == 0) {
          std::reverse(perm.begin(), perm.end());
        } else {
          std::shuffle(perm.begin(), perm.end(), rng);
        }
        graphpipe::v1::StageAssignmentFile permuted;
        for (int s : perm) *permuted.add_stages() = file.stages(s);
        const planner::LoweredPlan again = lower(permuted);
        INFO("with sizes: " << sizes << ", permutation " << trial);
        CHECK(again.result.plan.predicted().throughput_samples_per_s() ==
              first.result.plan.predicted().throughput_samples_per_s());
        // The same plan: stages (ops, ranks, sizes) in the same order.
        REQUIRE(again.result.plan.stages_size() == first.result.plan.stages_size());
        for (int s = 0; s < first.result.plan.stages_size(); ++s) {
          CHECK(again.result.plan.stages(s).SerializeAsString() ==
                first.result.plan.stages(s).SerializeAsString());
        }
        // stage_order names the file's stages: the permuted file's order maps back to the first.
        REQUIRE(again.stage_order.size() == first.stage_order.size());
        for (size_t i = 0; i < first.stage_order.size(); ++i) {
          CHECK(perm[again.stage_order[i]] == first.stage_order[i]);
        }
      }
    }
  }
}
