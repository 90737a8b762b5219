// Simulator benchmark: a 4-stage chain plan vs a 4-stage two-branch plan of the same model on
// summit-v100 (same stage contents, same devices, same micro-batch), and the simulator's speed
// on a 32-device plan with 64 micro-batches.
#include <chrono>
#include <cstdio>
#include <string>

#include "gp/cost/cluster.h"
#include "gp/cost/comm_model.h"
#include "gp/cost/cost_model.h"
#include "gp/model/zoo.h"
#include "gp/planner/plan_builder.h"
#include "gp/planner/search.h"
#include "gp/sim/simulator.h"

using namespace gp;

namespace {

[[noreturn]] void die(const Status& st) {
  std::fprintf(stderr, "sim_bench: %s\n", st.to_string().c_str());
  std::exit(1);
}

template <typename T>
T check(Result<T> r) {
  if (!r.ok()) die(r.status());
  return std::move(r).value();
}

bool starts_with(const std::string& s, const std::string& prefix) {
  return s.rfind(prefix, 0) == 0;
}

}  // namespace

int main() {
  const auto summit = check(cost::load_cluster("summit-v100"));
  const auto cluster4 = check(cost::select_devices(summit, 4));
  const auto model = check(model::build_zoo_model("zoo:nbranch?branches=2"));
  const auto g = check(model::Graph::build(model));
  cost::AnalyticCostModel compute(cluster4.device(), graphpipe::v1::PRECISION_FP32);
  cost::CommModel comm(cluster4);
  sim::Simulator simulator(compute, comm, {});

  // Stages: b0 layers 0-1 | b0 layers 2-3 | b1 layers 0-1 | b1 layers 2-3 + concat, head, loss.
  std::vector<planner::StageAssignment> stages(4);
  for (const auto& node : g.ops()) {
    const std::string& id = node.id();
    const bool first_half = id.find(".l0.") != std::string::npos ||
                            id.find(".l1.") != std::string::npos || id.ends_with(".input");
    int s = 3;
    if (starts_with(id, "b0.")) s = first_half ? 0 : 1;
    if (starts_with(id, "b1.")) s = first_half ? 2 : 3;
    stages[s].ops.push_back(node.index);
  }
  for (int s = 0; s < 4; ++s) stages[s].ranks = {s}, stages[s].micro_batch = 4;

  std::printf(
      "Simulated iteration of zoo:nbranch?branches=2 (%lld params) on 4 x %s, mini-batch 64, "
      "micro-batch 4\n\n",
      static_cast<long long>(g.total_params()), cluster4.device().name().c_str());
  std::printf("%-22s %6s %14s %16s %9s %14s %16s\n", "plan", "depth", "iteration ms", "samples/s",
              "bubble", "peak mem GiB", "stage-0 in-flight");
  double times[2] = {};
  for (int variant = 0; variant < 2; ++variant) {
    planner::PlanInputs in;
    in.graph = &g;
    in.cluster = cluster4;
    in.mini_batch = 64;
    in.training.set_optimizer(graphpipe::v1::OPTIMIZER_KIND_ADAM);
    in.chain = variant == 0;
    const auto plan = check(planner::build_plan(in, stages));
    const auto r = check(simulator.run(plan, g));
    if (r.deadlocked) die(internal_error("deadlock: " + r.deadlock_report()));
    times[variant] = r.iteration_time_us;
    std::printf("%-22s %6d %14.2f %16.1f %8.1f%% %14.2f %16lld\n",
                variant == 0 ? "4-stage chain" : "4-stage two-branch",
                planner::pipeline_depth(plan), r.iteration_time_us / 1e3,
                r.throughput_samples_per_s, 100 * r.bubble_fraction,
                static_cast<double>(r.peak_memory_bytes) / (1 << 30),
                static_cast<long long>(plan.stages(0).in_flight_samples()));
  }
  std::printf("\ntwo-branch speedup over chain: %.3fx\n\n", times[0] / times[1]);

  // Simulator speed: mmt on 32 devices, one transformer layer per stage, 64 micro-batches.
  const auto cluster32 = check(cost::select_devices(summit, 32));
  const auto mmt = check(model::Graph::build(check(model::build_zoo_model("zoo:mmt"))));
  std::vector<planner::StageAssignment> mmt_stages(32);
  for (const auto& node : mmt.ops()) {
    const std::string& id = node.id();
    int s = 31;  // concat, head, target and loss join the last layer of the last branch
    if (id.size() > 3 && id[0] == 'b' && id[2] == '.') {
      const int branch = id[1] - '0';
      int layer = 0;
      if (id.compare(3, 1, "l") == 0) layer = std::stoi(id.substr(4, id.find('.', 4) - 4));
      s = branch * 8 + layer;
    }
    mmt_stages[s].ops.push_back(node.index);
  }
  for (int s = 0; s < 32; ++s) mmt_stages[s].ranks = {s}, mmt_stages[s].micro_batch = 1;
  cost::AnalyticCostModel compute32(cluster32.device(), graphpipe::v1::PRECISION_FP32);
  cost::CommModel comm32(cluster32);
  sim::Simulator simulator32(compute32, comm32, {});
  planner::PlanInputs in;
  in.graph = &mmt;
  in.cluster = cluster32;
  in.mini_batch = 64;
  const auto plan32 = check(planner::build_plan(in, mmt_stages));
  int runs = 0;
  int64_t events = 0;
  const auto start = std::chrono::steady_clock::now();
  double elapsed = 0;
  sim::SimResult last;
  while (elapsed < 1.0 || runs < 3) {
    last = check(simulator32.run(plan32, mmt));
    events += last.events_processed;
    ++runs;
    elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }
  std::printf("Simulator speed: zoo:mmt, 32 stages on 32 x %s, 64 micro-batches\n",
              cluster32.device().name().c_str());
  std::printf("%-28s %12s\n", "instructions per iteration",
              std::to_string(last.events_processed).c_str());
  std::printf("%-28s %12.3f\n", "ms per simulation", 1e3 * elapsed / runs);
  std::printf("%-28s %12.3g\n", "events per second", static_cast<double>(events) / elapsed);
  std::printf("%-28s %12.2f\n", "predicted iteration ms", last.iteration_time_us / 1e3);
  return 0;
}
