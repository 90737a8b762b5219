#include "memory_rows.h"

#include <algorithm>
#include <cstdio>
#include <iterator>
#include <string>
#include <vector>

#include "gp/cost/cluster.h"
#include "gp/planner/search.h"
#include "reference_plans.h"

namespace gp::bench {
namespace {

struct MemoryRow {
  const char* model;
  const char* cluster;
  int devices;
  int64_t mini_batch;
};

// Long sequences (activations) and 20M-row embedding tables (Adam state) on 16 GB V100s; the last
// two with small mini-batches, where a deep pipeline's bubbles cost more than recomputing does.
constexpr MemoryRow kRows[] = {
    {"zoo:transformer?seq=4096", "summit-v100", 32, 256},
    {"zoo:transformer?seq=2048", "summit-v100", 16, 128},
    {"zoo:mmt?seq=2048", "summit-v100", 16, 128},
    {"zoo:dlrm?rows=20000000&dense_branches=2&sparse_branches=2", "summit-v100", 16, 256},
    {"zoo:transformer?seq=4096&layers=12", "summit-v100", 16, 16},
    {"zoo:transformer?seq=2048", "summit-v100", 32, 32},
};

struct Outcome {
  bool feasible = false;
  double throughput = 0;
  int64_t micro_batch = 0;
  std::string recomputing, sharding, reason;
  double search_s = 0;
};

Result<Outcome> search(const PlanningInputs& in, int64_t mini_batch, bool allowed) {
  planner::SearchRequest req;
  req.graph = in.graph.get();
  req.cluster = in.cluster;
  req.mini_batch = mini_batch;
  req.training = in.training;
  req.compute = in.compute.get();
  req.recompute = allowed ? planner::RecomputeMode::kAuto : planner::RecomputeMode::kNever;
  req.shard_optimizer = allowed ? planner::ShardMode::kAuto : planner::ShardMode::kNever;
  GP_ASSIGN_OR_RETURN(auto result, planner::search_plan(req));
  Outcome o;
  o.feasible = result.feasible;
  o.search_s = result.search_time_s;
  if (!o.feasible) {
    o.reason = result.infeasible_reason.substr(0, 40);
    return o;
  }
  o.throughput = result.plan.predicted().throughput_samples_per_s();
  for (const auto& st : result.plan.stages())
    o.micro_batch = std::max(o.micro_batch, st.micro_batch());
  int recomputing = 0, sharding = 0;
  for (const auto& st : result.plan.stages()) {
    recomputing += st.recompute() ? 1 : 0;
    sharding += st.shard_optimizer() ? 1 : 0;
  }
  const std::string of = " of " + std::to_string(result.plan.stages_size());
  o.recomputing = std::to_string(recomputing) + of;
  o.sharding = std::to_string(sharding) + of;
  return o;
}

std::string cell(const Outcome& o) {
  char buf[64];
  if (!o.feasible) return "infeasible";
  std::snprintf(buf, sizeof buf, "%.1f (mb %lld)", o.throughput,
                static_cast<long long>(o.micro_batch));
  return buf;
}

}  // namespace

bool run_memory_rows() {
  std::printf(
      "\nMemory binds: GraphPipe without recomputation and optimizer sharding (never) and with "
      "them\n(auto: only where a plan would not fit otherwise); samples/s (largest micro-batch), "
      "how many\nstages recompute and shard, search s\n\n");
  std::printf("%-58s %4s | %-22s | %-22s %-14s %-10s %8s\n", "model", "devs", "never", "auto",
              "recompute", "shard", "search s");
  bool met = true;
  int faster = 0, enabled = 0;
  for (const auto& r : kRows) {
    auto cluster = cost::load_cluster(r.cluster);
    if (!cluster.ok()) return false;
    auto in = planning_inputs(r.model, *cluster, r.devices, graphpipe::v1::PRECISION_FP32);
    if (!in.ok()) return false;
    auto never = search(*in, r.mini_batch, false);
    auto with = search(*in, r.mini_batch, true);
    if (!never.ok() || !with.ok()) return false;
    std::printf("%-58s %4d | %-22s | %-22s %-14s %-10s %8.2f\n", r.model, r.devices,
                cell(*never).c_str(), cell(*with).c_str(), with->recomputing.c_str(),
                with->sharding.c_str(), with->search_s);
    if (!never->feasible && with->feasible) ++enabled;
    if (never->feasible && with->feasible && with->throughput > never->throughput * 1.0001) {
      ++faster;
    }
    // Never worse: infeasible only where never is, and never slower.
    if ((never->feasible && !with->feasible) ||
        (never->feasible && with->throughput < never->throughput * 0.9999)) {
      met = false;
    }
  }
  std::printf(
      "\n(9) recomputation and sharding: auto finds a plan where none fits without (%d of %zu "
      "rows), and is never slower where one does: %s; faster than the best plan without them: "
      "%d of %zu rows\n",
      enabled, std::size(kRows), met ? "MET" : "NOT MET", faster, std::size(kRows));
  return met;
}

}  // namespace gp::bench
