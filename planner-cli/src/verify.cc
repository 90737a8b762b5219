#include "gp/planner/verify.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>

#include "gp/cost/comm_model.h"
#include "gp/model/model_io.h"
#include "gp/plan/plan_util.h"

namespace gp::planner {

using graphpipe::v1::Plan;

Status check_prediction(double iteration_time_s, double throughput_samples_per_s) {
  const auto sound = [](double v) { return std::isfinite(v) && v > 0; };
  if (sound(iteration_time_s) && sound(throughput_samples_per_s)) return ok_status();
  char figures[128];
  std::snprintf(figures, sizeof(figures), "predicted iteration %g s, %g samples/s",
                iteration_time_s, throughput_samples_per_s);
  return failed_precondition(std::string(figures) +
                             ": not finite and > 0; a cost the plan was priced with is absurd "
                             "(see the cluster's device peaks, memory and link bandwidths, "
                             "latencies and kernel_launch_overhead_us, and --profile's times)");
}

namespace {

// A plan that leaves devices idle between used ones lists them after the cluster's own excluded
// ranks (compact_idle_ranks): it is still `expected`'s plan.
bool with_idle_devices_listed(const graphpipe::v1::Plan& plan,
                              const graphpipe::v1::Cluster& expected) {
  const auto& expected_excluded = expected.excluded_ranks();
  graphpipe::v1::Cluster without_idle = plan.cluster();
  if (without_idle.excluded_ranks_size() <= expected_excluded.size() ||
      !std::equal(expected_excluded.begin(), expected_excluded.end(),
                  without_idle.excluded_ranks().begin())) {
    return false;
  }
  without_idle.mutable_excluded_ranks()->Truncate(expected_excluded.size());
  return model::message_hash(without_idle) == model::message_hash(expected) &&
         plan.cluster_hash() == model::message_hash(plan.cluster());
}

}  // namespace

Result<VerifyReport> verify_plan(const Plan& plan, const cost::CostModel& compute,
                                 const VerifyOptions& options) {
  // Not owned: `compute` outlives the call.
  return verify_plan(plan,
                     cost::DeviceCostModels(std::shared_ptr<const cost::CostModel>(
                         &compute, [](const cost::CostModel*) {})),
                     options);
}

Result<VerifyReport> verify_plan(const Plan& plan, const cost::DeviceCostModels& compute,
                                 const VerifyOptions& options) {
  VerifyReport report;
  auto& problems = report.problems;
  auto built = model::Graph::build(plan.model());
  if (!built.ok()) {
    problems.push_back("plan.model: " + built.status().message());
    return report;
  }
  const model::Graph& g = *built;
  if (options.expected_model != nullptr) {
    auto expected = model::Graph::build(*options.expected_model);
    if (!expected.ok()) return expected.status().with_context("--model");
    const std::string hash = model::model_hash(expected->model());
    if (hash != plan.model_hash()) {
      problems.push_back("the plan is for model '" + plan.model().name() + "' (hash " +
                         plan.model_hash() + "), not for '" + options.expected_model->name() +
                         "' (hash " + hash + ")");
    }
  }
  if (options.expected_cluster != nullptr) {
    const std::string hash = model::message_hash(*options.expected_cluster);
    const bool same_cluster =
        hash == plan.cluster_hash() || with_idle_devices_listed(plan, *options.expected_cluster);
    if (!same_cluster) {
      problems.push_back("the plan is for cluster '" + plan.cluster().name() + "' (hash " +
                         plan.cluster_hash() + "), not for '" + options.expected_cluster->name() +
                         "' with these devices (hash " + hash + ")");
    }
  }
  // An edited plan: nothing else it says can be trusted (the executor refuses it the same way).
  if (Status hashes = plan::check_plan_hashes(plan); !hashes.ok()) {
    problems.push_back(hashes.message());
    return report;
  }
  auto index = plan::validate_plan_structure(plan, g);
  if (!index.ok()) {
    problems.push_back(index.status().message());
    return report;
  }
  for (auto& p : plan::plan_field_problems(plan)) problems.push_back(std::move(p));
  for (auto& p : plan::plan_schedule_problems(plan, g, *index)) problems.push_back(std::move(p));
  if (!problems.empty()) return report;  // do not simulate a broken plan

  const cost::CommModel datasheet_comm(plan.cluster());
  const cost::CommModel& comm = options.comm != nullptr ? *options.comm : datasheet_comm;
  const sim::Simulator simulator(
      compute, comm,
      {plan.training().optimizer(), plan.training().precision(), &compute.reference()});
  GP_ASSIGN_OR_RETURN(report.simulation, simulator.run(plan, g));
  report.simulated = true;
  if (report.simulation.deadlocked) {
    problems.push_back("deadlock: " + report.simulation.deadlock_report());
    return report;
  }
  if (Status st = check_prediction(report.simulation.iteration_time_us * 1e-6,
                                   report.simulation.throughput_samples_per_s);
      !st.ok()) {
    problems.push_back(st.message());
  }
  for (const auto& rs : report.simulation.ranks) {
    const int64_t capacity = rs.capacity_bytes;  // its own device's (mixed clusters differ)
    if (rs.stage >= 0 && rs.peak_memory_bytes > capacity) {
      problems.push_back("rank " + std::to_string(rs.rank) + " (stage " + std::to_string(rs.stage) +
                         "): peak memory " + std::to_string(rs.peak_memory_bytes) +
                         " bytes exceeds the device capacity " + std::to_string(capacity));
    }
  }
  return report;
}

}  // namespace gp::planner
