#include "gp/exec/nccl_layout.h"

#include <algorithm>
#include <map>

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
  // Gradient-norm clipping sums one float over every rank that steps an optimizer
  // (rank_program.cc's norm world); a replica group of exactly those ranks serves it already.
  if (plan.training().clip_grad_norm() > 0) {
    std::vector<int> world;
    for (const auto& program : plan.programs()) {
      const auto& steps = program.instructions();
      if (std::any_of(steps.begin(), steps.end(), [](const graphpipe::v1::Instruction& in) {
            return in.kind() == graphpipe::v1::INSTRUCTION_KIND_OPTIMIZER_STEP;
          })) {
        world.push_back(program.rank());
      }
    }
    std::sort(world.begin(), world.end());
    world.erase(std::unique(world.begin(), world.end()), world.end());
    if (world.size() > 1 &&
        std::find(layout.groups.begin(), layout.groups.end(), world) == layout.groups.end()) {
      layout.groups.push_back(std::move(world));
    }
  }
  std::sort(layout.groups.begin(), layout.groups.end());
  return layout;
}

}  // namespace gp::exec
