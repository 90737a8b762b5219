#include "gp/exec/nccl_layout.h"

#include <algorithm>
#include <map>

#include "gp/plan/plan_util.h"

namespace gp::exec {

NcclLayout nccl_layout(const graphpipe::v1::Plan& plan) {
  // Messages per channel, in the table's order: verify checked that both ends issue them so.
  std::map<std::pair<int, int>, int> messages;
  for (const auto& m : plan.messages()) ++messages[{m.src_rank(), m.dst_rank()}];
  NcclLayout layout;
  for (const auto& [pair, count] : messages)
    layout.channels.push_back({pair.first, pair.second, count});
  for (const auto& st : plan.stages()) {
    if (st.device_ranks_size() < 2) continue;
    std::vector<int> g(st.device_ranks().begin(), st.device_ranks().end());
    std::sort(g.begin(), g.end());
    layout.groups.push_back(std::move(g));
  }
  // Gradient-norm clipping sums one float over every rank that steps an optimizer; a replica
  // group of exactly those ranks serves it already.
  if (plan.training().clip_grad_norm() > 0) {
    std::vector<int> world = plan::ranks_stepping_optimizer(plan);
    if (world.size() > 1 &&
        std::find(layout.groups.begin(), layout.groups.end(), world) == layout.groups.end()) {
      layout.groups.push_back(std::move(world));
    }
  }
  std::sort(layout.groups.begin(), layout.groups.end());
  return layout;
}

}  // namespace gp::exec
