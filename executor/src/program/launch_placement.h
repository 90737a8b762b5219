// Where a plan's ranks run (launch::place_ranks) for a plan file: the plan read and checked as
// every rank would check it, so a plan no rank could run is refused before any starts.
#pragma once

#include <string>
#include <vector>

#include "gp/common/status.h"
#include "launch/launch.h"

namespace gp::exec::daemon {

struct PlacedRank {
  int host = 0;        // index into the hosts (0 for local ranks)
  int local_rank = 0;  // LOCAL_RANK
  std::string device;  // cpu or cuda:LOCAL_RANK
  // The cluster's device it stands for (node * devices_per_node + local): rank R is the R-th
  // device the plan does not exclude, so a device keeps its number across re-plans.
  int physical = 0;
};

struct PlacementInput {
  std::string plan;
  int nprocs = 0;  // 0: the plan's
  std::string device = "cpu";
  std::vector<launch::Host> hosts;   // empty: local ranks
  std::string hostfile;              // for messages
  std::string cuda_visible_devices;  // local ranks' CUDA_VISIBLE_DEVICES ("" when unset)
};

// Every rank's place, in rank order.
Result<std::vector<PlacedRank>> place_plan(const PlacementInput& input);

}  // namespace gp::exec::daemon
