// The cost models graphpipe-plan adapt prices plans with: each rank's own device kind (the
// cluster's kinds, without earlier adaptations' measured kinds), and the cluster as measured,
// where a slow rank's kind is its own kind's model scaled by its measured slowdown.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "commands.h"
#include "gp/cost/comm_model.h"
#include "gp/cost/cost_model.h"
#include "gp/cost/device_costs.h"
#include "gp/planner/adapt.h"
#include "gp/sim/simulator.h"
#include "graphpipe/v1/plan.pb.h"

namespace gp::plan_cli {

struct AdaptModels {
  graphpipe::v1::Cluster cluster;
  std::shared_ptr<const cost::DeviceCostModels> compute;
  std::shared_ptr<const cost::CommModel> comm;
  std::string profile_hash;
  const cost::CostModel& for_rank(int rank) const { return compute->for_rank(rank); }
};

// `cluster` with adapt's measured kinds ("<kind>/rank<R>") folded back into their own kinds, and
// its kinds' models (analytic, or from `profile_path` with an analytic fallback).
Result<AdaptModels> own_kind_models(const graphpipe::v1::Cluster& cluster,
                                    graphpipe::v1::Precision precision,
                                    const std::string& profile_path);

// `measured` (cluster_with_measured_speeds) with the own kinds' models and, for each measured
// kind, its own kind's model scaled by the rank's slowdown; the own links.
Result<AdaptModels> measured_models(const graphpipe::v1::Cluster& measured, const AdaptModels& own,
                                    const std::vector<planner::RankSpeed>& speeds);

// The links as the running job measured them: the fits of `profile_path` (if any) with
// `measured`'s p2p fits (a running job's, per link class) taking their place; without measured
// fits, the cluster's links or the profile's fits as before.
Result<std::shared_ptr<const cost::CommModel>> with_measured_links(
    const graphpipe::v1::Cluster& cluster, const std::string& profile_path,
    const graphpipe::v1::ProfileDB& measured);

// `plan` (whose cluster is models.cluster) simulated with the models.
Result<sim::SimResult> simulate_with(const graphpipe::v1::Plan& plan, const model::Graph& graph,
                                     const AdaptModels& models);

// The planner's search for `plan`'s model, mini-batch, training and strategy on models.cluster
// with the models, verified: the plan the job would switch to, of the running plan's micro-batch
// size where the search can keep it (search_again), else of any. A plan on fewer devices keeps
// the cluster's numbering, the devices it leaves out excluded.
Result<graphpipe::v1::Plan> search_with(const graphpipe::v1::Plan& plan, const model::Graph& graph,
                                        const AdaptModels& models, const std::string& command_line);

}  // namespace gp::plan_cli
