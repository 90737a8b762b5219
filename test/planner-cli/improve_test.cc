// The improvement search (search --effort): its moves give valid plans, it never returns a plan
// slower than the fast search's, it is deterministic for a seed and a trial budget, and it beats
// the fast search where a hand plan does (candle-uno on 4 and 8 V100s).
#include "gp/planner/improve.h"

#include <catch2/catch.hpp>
#include <set>
#include <string>
#include <vector>

#include "../support/models.h"
#include "gp/cost/cluster.h"
#include "gp/cost/cost_model.h"
#include "gp/planner/plan_builder.h"
#include "gp/planner/search.h"
#include "gp/planner/verify.h"

using namespace gp;

namespace {

struct Config {
  std::string model;
  std::string cluster;
  int devices;
  int64_t batch;
};

// GraphPipe's search as graphpipe-plan search runs it, with `improve` after it.
planner::SearchResult search(const model::Graph& graph, const Config& c,
                             const planner::ImproveOptions& improve, bool split_onto_idle = true,
                             bool fewer_devices = true) {
  const auto cluster = cost::select_devices(*cost::load_cluster(c.cluster), c.devices);
  REQUIRE(cluster.ok());
  const cost::AnalyticCostModel compute(cluster->device(), graphpipe::v1::PRECISION_FP32);
  planner::SearchRequest req;
  req.graph = &graph;
  req.cluster = *cluster;
  req.mini_batch = c.batch;
  req.training.set_optimizer(graphpipe::v1::OPTIMIZER_KIND_ADAM);
  req.training.set_learning_rate(1e-3);
  req.compute = &compute;
  req.per_stage_microbatch = true;
  req.improve = improve;
  req.split_onto_idle_devices = split_onto_idle;
  req.plan_for_fewer_devices = fewer_devices;
  auto result = planner::search_plan(req);
  INFO(c.model << " on " << c.devices << " x " << c.cluster);
  REQUIRE(result.ok());
  REQUIRE(result->feasible);
  auto report = planner::verify_plan(result->plan, compute);
  REQUIRE(report.ok());
  CHECK(report->ok());
  return std::move(result).value();
}

double throughput(const planner::SearchResult& r) {
  return r.plan.predicted().throughput_samples_per_s();
}

std::vector<std::vector<std::string>> stage_ops(const graphpipe::v1::Plan& plan) {
  std::vector<std::vector<std::string>> out;
  for (const auto& st : plan.stages()) out.emplace_back(st.op_ids().begin(), st.op_ids().end());
  return out;
}

planner::ImproveOptions trials(int64_t n, uint64_t seed = 1) {
  planner::ImproveOptions o;
  o.max_trials = n;
  o.seed = seed;
  return o;
}

}  // namespace

TEST_CASE("every neighbour holds each op once, fits the devices and lowers as a DAG") {
  const model::Graph g = testing::zoo_graph("candle-uno");
  const auto cluster = cost::select_devices(*cost::load_cluster("summit-v100"), 8);
  REQUIRE(cluster.ok());
  const planner::UnitGraph units = planner::build_units(g);
  // Two stages of four devices each: the sources' ops on the first, the rest on the second.
  planner::StagePlan start;
  start.stages.resize(2);
  for (int op = 0; op < g.num_ops(); ++op) {
    start.stages[op < g.num_ops() / 2 ? 0 : 1].ops.push_back(op);
  }
  start.stages[0].ranks = {0, 1};
  start.stages[1].ranks = {2, 3, 4};
  start.stages[0].micro_batch = start.stages[1].micro_batch = 16;
  planner::MoveSpace space{&g, &units, 8, 64, {4, 8, 16, 32, 64}, {}};
  space.op_weight.assign(static_cast<size_t>(g.num_ops()), 1.0);

  const auto next = planner::neighbours(space, start);
  REQUIRE(next.size() > 20);
  std::set<std::string> kinds;
  for (const auto& n : next) {
    INFO(n.description);
    kinds.insert(n.description.substr(0, n.description.find(' ')));
    std::vector<int> seen(static_cast<size_t>(g.num_ops()), 0);
    std::set<int> ranks;
    for (const auto& st : n.plan.stages) {
      CHECK_FALSE(st.ops.empty());
      CHECK(static_cast<int64_t>(st.ranks.size()) <= st.micro_batch);
      for (int op : st.ops) ++seen[static_cast<size_t>(op)];
      for (int r : st.ranks) {
        CHECK(r >= 0);
        CHECK(r < 8);
        CHECK(ranks.insert(r).second);
      }
    }
    CHECK(std::all_of(seen.begin(), seen.end(), [](int k) { return k == 1; }));
    planner::PlanInputs in{&g, *cluster, 64, {}, graphpipe::v1::STRATEGY_GRAPHPIPE, false};
    in.training.set_optimizer(graphpipe::v1::OPTIMIZER_KIND_SGD);
    in.training.set_learning_rate(0.01);
    CHECK(planner::build_plan(in, n.plan.stages).ok());
  }
  // Every kind of move is offered from this plan (three idle devices, replicated stages).
  for (const char* kind :
       {"moved", "merged", "split", "gave", "left", "doubled", "halved", "every"}) {
    CHECK(kinds.count(kind) == 1);
  }
}

TEST_CASE("the improvement never returns a plan slower than the fast search") {
  const std::vector<Config> configs = {{"tiny-mmt", "summit-v100", 4, 32},
                                       {"tiny-dlrm", "dgx-h100", 6, 32},
                                       {"tiny-transformer", "dgx-h100", 4, 32},
                                       {"dlrm", "summit-v100", 8, 64}};
  for (const Config& c : configs) {
    const model::Graph g = testing::zoo_graph(c.model);
    const auto fast = search(g, c, {});
    const auto improved = search(g, c, trials(200));
    INFO(c.model << " on " << c.devices << " x " << c.cluster);
    CHECK(improved.improvement.ran);
    CHECK(improved.improvement.start_samples_per_s == Approx(throughput(fast)));
    CHECK(throughput(improved) >= throughput(fast));
    CHECK(improved.improvement.end_samples_per_s == Approx(throughput(improved)));
    CHECK(improved.improvement.trials <= 200);
  }
}

TEST_CASE(
    "one seed and trial budget give one plan, and a time budget's run replays by its trials") {
  const Config c{"candle-uno", "summit-v100", 4, 32};
  const model::Graph g = testing::zoo_graph(c.model);
  const auto a = search(g, c, trials(400, 7));
  const auto b = search(g, c, trials(400, 7));
  CHECK(stage_ops(a.plan) == stage_ops(b.plan));
  CHECK(throughput(a) == throughput(b));
  CHECK(a.improvement.moves.size() == b.improvement.moves.size());

  planner::ImproveOptions timed;
  timed.effort_s = 0.3;
  timed.seed = 3;
  const auto t = search(g, c, timed);
  CHECK(t.improvement.stopped_by == "time budget");
  REQUIRE(t.improvement.trials > 0);
  const auto replay = search(g, c, trials(t.improvement.trials, 3));
  CHECK(replay.improvement.stopped_by == "trial budget");
  CHECK(stage_ops(replay.plan) == stage_ops(t.plan));
  CHECK(throughput(replay) == throughput(t));
}

TEST_CASE("where a hand plan beats the fast search, the improvement passes both (candle-uno)") {
  // configs/assignments: a feature branch per device gives 3,020 samples/s on 4 V100s and 6,631
  // on 8 (docs/planner.md); the fast search finds 2,925 and 6,364.
  const std::vector<std::pair<Config, double>> rows = {
      {{"candle-uno", "summit-v100", 4, 32}, 3020.0},
      {{"candle-uno", "summit-v100", 8, 64}, 6631.1}};
  for (const auto& [c, hand] : rows) {
    const model::Graph g = testing::zoo_graph(c.model);
    const auto fast = search(g, c, {});
    const auto improved = search(g, c, trials(20000));
    INFO(c.devices << " devices: fast " << throughput(fast) << ", improved " << throughput(improved)
                   << " after " << improved.improvement.trials << " trials");
    CHECK(throughput(fast) < hand);
    CHECK(throughput(improved) > throughput(fast));
    CHECK(throughput(improved) > hand);
    CHECK_FALSE(improved.improvement.moves.empty());
  }
}

TEST_CASE("the idle-device pass also splits stages onto idle devices, and it pays on candle-uno") {
  // On 16 V100s the search leaves 4 devices idle, more replicas do not pay, and a stage cut in
  // series onto an idle device does (12,502 -> 12,558 samples/s). The search for fewer devices,
  // which may find as much another way, is left out to see the pass on its own.
  const Config paying{"candle-uno", "summit-v100", 16, 256};
  const model::Graph g = testing::zoo_graph(paying.model);
  const auto without = search(g, paying, {}, /*split_onto_idle=*/false, /*fewer_devices=*/false);
  const auto with = search(g, paying, {}, /*split_onto_idle=*/true, /*fewer_devices=*/false);
  INFO("without " << throughput(without) << ", with " << throughput(with));
  CHECK(throughput(with) > throughput(without) * 1.002);
  // Never slower anywhere: a split is kept only when it simulates faster.
  for (const Config& c : std::vector<Config>{{"tiny-candle-uno", "summit-v100", 12, 64},
                                             {"dlrm", "summit-v100", 16, 128},
                                             {"tiny-mmt", "dgx-h100", 12, 32}}) {
    const model::Graph m = testing::zoo_graph(c.model);
    CHECK(throughput(search(m, c, {})) >= throughput(search(m, c, {}, false)));
  }
}
