// What the launcher decides from files before any rank starts (`graphpipe-executor launch`, and
// the `launcher` subcommands that print each decision): the hosts of a hostfile, where a plan's
// ranks run (launch::place_ranks; the plan read and checked as every rank would check it, so a
// plan no rank could run is refused before any starts), and whether to resume.
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

// --hostfile PATH's hosts, or with "-" the hosts on stdin; a FIFO or a device is refused, naming
// it ("-" is the way to give a stream).
Result<std::vector<launch::Host>> read_hostfile(const std::string& path);

// --resume (or, with `if_present`, --resume-if-present) from `checkpoint_dir`: decided once, not
// by every rank. Without a checkpoint there --resume is refused (NOT_FOUND naming the directory)
// and --resume-if-present starts from iteration 0, `warning` saying so.
struct ResumeDecision {
  bool resume = false;
  std::string warning;
};
Result<ResumeDecision> decide_resume(const std::string& checkpoint_dir, bool if_present);

}  // namespace gp::exec::daemon
