// Adaptive re-planning (graphpipe-plan adapt): what a running job measured, turned into a cluster
// the planner can search, and the decision whether switching to the new plan pays.
//
// A running job's ranks time their ops (graphpipe-executor run --measure-every); rank 0 writes
// them as a ProfileDB whose device kinds are "<kind>/rank<R>". Each rank's measured time over the
// time its own device kind's cost model gives for the same ops is its slowdown factor; a rank
// clearly slower than the fastest (relative slowdown >= a threshold) becomes a device of its own
// kind, "<kind>/rank<R>", whose costs are its kind's scaled by that slowdown. Measured times enter
// as per-device speed ratios, not as per-op replacements: under a loaded multi-rank job the
// per-op numbers mix in contention the planner's own model already prices, while the ratio
// between devices running the same kind of work is what tells a slow device from a healthy one.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "gp/common/status.h"
#include "gp/cost/cost_model.h"
#include "gp/model/graph.h"
#include "graphpipe/v1/cluster.pb.h"
#include "graphpipe/v1/plan.pb.h"
#include "graphpipe/v1/profile.pb.h"

namespace gp::planner {

// A device kind's costs stretched by a factor: a device measured `factor` times slower than its
// kind's model says.
class ScaledCostModel final : public cost::CostModel {
 public:
  ScaledCostModel(std::shared_ptr<const cost::CostModel> base, double factor);
  cost::OpTime op_time(const model::OpNode& op, int64_t samples) const override;
  std::optional<cost::OpMemory> op_memory(const model::OpNode& op) const override {
    return base_->op_memory(op);
  }
  // The step stretched alike (a slow device is slow in every kernel). `device` is the measured
  // kind (cluster_with_measured_speeds: its bandwidth and launch stretched already), which an
  // analytic base would otherwise stretch twice.
  cost::OptimizerStepCost optimizer_step_cost(const graphpipe::v1::DeviceKind& device,
                                              graphpipe::v1::OptimizerKind kind) const override;
  std::string_view name() const override { return "measured-speed"; }
  double factor() const { return factor_; }

 private:
  std::shared_ptr<const cost::CostModel> base_;
  double factor_;
};

// The device kind a measured rank gets: "<kind>/rank<R>".
std::string measured_kind_name(std::string_view kind, int rank);
// Parses "<kind>/rank<R>" (the executor's measured profiles); false for any other name.
bool parse_measured_kind(std::string_view name, std::string* kind, int* rank);

// One rank's measured speed.
struct RankSpeed {
  int rank = 0;
  int stage = -1;
  int ops = 0;             // op signatures of its stage found in the measured profile
  double measured_us = 0;  // forward + backward per micro-batch, summed over those ops
  double modelled_us = 0;  // the same ops on its device kind's model
  double factor = 0;       // measured / modelled
  double relative = 1;     // factor / the least factor of any rank: 1 = as fast as the fastest
};

// Each rank of `plan` with measurements of its stage's ops in `measured`, in rank order. The
// model of rank r's own device kind is `model_of_rank(r)`. Errors: a measured profile for another
// cluster (a kind that is not "<this plan's kind>/rank<R>" or a rank the plan does not have), or
// one with no measurement of any rank's ops.
Result<std::vector<RankSpeed>> measured_rank_speeds(
    const graphpipe::v1::Plan& plan, const model::Graph& graph,
    const graphpipe::v1::ProfileDB& measured,
    const std::function<const cost::CostModel&(int rank)>& model_of_rank);

// `cluster` without earlier adaptations' measured kinds ("<kind>/rank<R>"): each such device back
// in the group of the kind it was measured against (or the cluster's own device).
graphpipe::v1::Cluster without_measured_kinds(const graphpipe::v1::Cluster& cluster);

// `cluster` as measured: without_measured_kinds(cluster), then
// one group per rank whose relative slowdown is >= `threshold`: its own kind's numbers with peaks
// and bandwidth divided by the slowdown and launch overhead multiplied by it, named
// measured_kind_name. Ranks are the plan's (dense) ranks of `cluster`.
graphpipe::v1::Cluster cluster_with_measured_speeds(const graphpipe::v1::Cluster& cluster,
                                                    const std::vector<RankSpeed>& speeds,
                                                    double threshold);

// Whether to stop, checkpoint and resume under a new plan.
struct SwitchInputs {
  double current_iteration_s = 0;    // the running plan, simulated under the measured speeds
  double candidate_iteration_s = 0;  // the new plan, the same way
  double measured_iteration_s = 0;   // what the job measured per iteration (0: unknown)
  int64_t iterations_left = 0;       // of the job
  double switch_cost_s = 0;          // a checkpoint plus a restart, as measured
  double min_gain = 0.10;            // the least predicted speed-up worth a switch (0.10: 10%)
  double margin = 2.0;               // the time saved must exceed the switch cost this many times
};
struct SwitchDecision {
  bool do_switch = false;
  double predicted_gain = 0;  // current / candidate - 1
  double saved_s = 0;         // over the rest of the job, at the measured pace
  std::string reason;         // one line: why, with the numbers
};
SwitchDecision decide_switch(const SwitchInputs& in);

}  // namespace gp::planner
