// Executor benchmark: (1) runtime overhead per instruction with near-zero-cost ops, (2) measured
// vs simulated iteration time of a CPU plan on the cpu-local preset. Ranks run as threads of
// this process over the in-process data plane (the multi-process daemon adds its transport).
#include <chrono>
#include <cstdio>
#include <string>

#include "gp/cost/cluster.h"
#include "gp/exec/rank_runner.h"
#include "gp/exec/rank_session.h"
#include "gp/model/builder.h"
#include "gp/model/zoo.h"
#include "gp/planner/search.h"

using namespace gp;

namespace {

[[noreturn]] void die(const Status& st) {
  std::fprintf(stderr, "executor_bench: %s\n", st.to_string().c_str());
  std::exit(1);
}

template <typename T>
T check(Result<T> r) {
  if (!r.ok()) die(r.status());
  return std::move(r).value();
}

graphpipe::v1::Plan plan_for(const model::Graph& g, const graphpipe::v1::Cluster& cluster,
                             const cost::CostModel& model, int64_t batch,
                             std::vector<int64_t> micro_batches, graphpipe::v1::Strategy strategy) {
  planner::SearchRequest req;
  req.graph = &g;
  req.cluster = cluster;
  req.mini_batch = batch;
  req.strategy = strategy;
  req.training.set_optimizer(graphpipe::v1::OPTIMIZER_KIND_SGD);
  req.training.set_learning_rate(0.01);
  req.compute = &model;
  req.micro_batches = std::move(micro_batches);
  auto r = check(planner::search_plan(req));
  if (!r.feasible) die(internal_error("no plan: " + r.infeasible_reason));
  return r.plan;
}

double timed_run(const graphpipe::v1::Plan& plan, int iterations) {
  check(exec::run_plan_locally(plan, 1, std::chrono::seconds(60)));  // warm-up
  const auto start = std::chrono::steady_clock::now();
  check(exec::run_plan_locally(plan, iterations, std::chrono::seconds(60)));
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

int main() {
  const auto cluster2 = check(cost::select_devices(check(cost::load_cluster("cpu-local")), 2));
  cost::AnalyticCostModel model(cluster2.device(), graphpipe::v1::PRECISION_FP32);

  // 1. Overhead: a chain of 1-wide linear layers, micro-batch 1: almost every nanosecond is the
  // step loop, the messages and the thread hand-offs.
  model::GraphBuilder b("overhead", "1-wide chain");
  auto x = b.input("x", {1});
  for (int i = 0; i < 8; ++i) x = b.linear("fc" + std::to_string(i), x, 1);
  b.add_loss(b.mse_loss("loss", x, b.input("t", {1})));
  const auto tiny = check(model::Graph::build(b.finish()));
  const auto overhead_plan =
      plan_for(tiny, cluster2, model, 256, {1}, graphpipe::v1::STRATEGY_SEQUENTIAL);
  int64_t instructions = 0, longest = 0;
  for (const auto& prog : overhead_plan.programs()) {
    instructions += prog.instructions_size();
    longest = std::max<int64_t>(longest, prog.instructions_size());
  }
  const int iterations = 50;
  const double overhead_s = timed_run(overhead_plan, iterations);
  std::printf(
      "Runtime overhead (near-zero-cost ops, %d ranks as threads, %lld instructions per "
      "iteration, %d iterations)\n",
      overhead_plan.programs_size(), static_cast<long long>(instructions), iterations);
  std::printf("  %-44s %10.2f us\n", "per instruction on the busiest rank",
              1e6 * overhead_s / (iterations * static_cast<double>(longest)));
  std::printf("  %-44s %10.2f us\n", "per instruction over all ranks (wall / total)",
              1e6 * overhead_s / (iterations * static_cast<double>(instructions)));
  std::printf("  %-44s %10s\n", "target", "< 20 us");

  // 2. Measured vs simulated on the cpu-local preset.
  const auto mmt = check(model::Graph::build(check(
      model::build_zoo_model("zoo:mmt?branches=2&layers=2&seq=32&hidden=128&heads=4&ffn=512"))));
  const auto plan = plan_for(mmt, cluster2, model, 32, {}, graphpipe::v1::STRATEGY_GRAPHPIPE);
  const int iters = 5;
  const double measured = timed_run(plan, iters) / iters;
  const double predicted = plan.predicted().iteration_time_s();
  std::printf(
      "\nMeasured vs simulated iteration, zoo:mmt (2 branches x 2 layers, hidden 128) on "
      "2 cpu-local ranks, mini-batch 32, %d stages, micro-batch %lld\n",
      plan.stages_size(), static_cast<long long>(plan.stages(0).micro_batch()));
  std::printf("  %-20s %10.4f s\n  %-20s %10.4f s\n  %-20s %10.2f\n", "measured", measured,
              "simulated", predicted, "measured/simulated", measured / predicted);
  std::printf(
      "  (the cpu-local preset's FLOP/s and bandwidth are estimates; graphpipe-profile "
      "measurements close this gap)\n");
  return 0;
}
