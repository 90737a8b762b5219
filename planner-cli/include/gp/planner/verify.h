// The plan verifier: everything a runtime relies on, checked before a plan is written or run.
// Structure (every op in exactly one stage, every device used once, fields in range), the fields
// a run reads or a tool prints (plan::plan_field_problems), hashes (the plan's own, and
// optionally the model and cluster it is checked against), the stage graph
// (acyclic; every cross-stage tensor delivered along stage edges), the instruction streams (each
// micro-batch forwarded then backwarded once per replica, sends matched one-to-one with
// receives, gradient all-reduce and optimizer step), and — by simulation — deadlock freedom and
// peak memory within each device's capacity and a finite, positive predicted iteration.
#pragma once

#include <string>
#include <vector>

#include "gp/common/status.h"
#include "gp/cost/comm_model.h"
#include "gp/cost/cost_model.h"
#include "gp/cost/device_costs.h"
#include "gp/sim/simulator.h"
#include "graphpipe/v1/plan.pb.h"

namespace gp::planner {

struct VerifyOptions {
  const graphpipe::v1::ModelGraph* expected_model = nullptr;  // reject a plan for another model
  const graphpipe::v1::Cluster* expected_cluster = nullptr;   // reject a plan for another cluster
  // Communication times for the simulation; nullptr: the plan cluster's datasheet links.
  const cost::CommModel* comm = nullptr;
};

struct VerifyReport {
  std::vector<std::string> problems;
  bool simulated = false;
  sim::SimResult simulation;
  bool ok() const { return problems.empty(); }
};

// The planner's last guard before it writes or reports a plan: the predicted iteration time
// and throughput are finite and > 0. Anything else comes from a cost no device has (an absurd
// cluster or profile number that their validation let through); FailedPrecondition says so.
Status check_prediction(double iteration_time_s, double throughput_samples_per_s);

// Problems are reported, not returned as errors; the Status is for internal failures only.
Result<VerifyReport> verify_plan(const graphpipe::v1::Plan& plan, const cost::CostModel& compute,
                                 const VerifyOptions& options = {});
// The same with per-device models (mixed clusters): each rank simulated with its own device's.
Result<VerifyReport> verify_plan(const graphpipe::v1::Plan& plan,
                                 const cost::DeviceCostModels& compute,
                                 const VerifyOptions& options = {});

}  // namespace gp::planner
