// Which NCCL communicators a plan needs, worked out identically by every rank from the plan.
//
// Every ordered pair of ranks that exchanges messages gets a channel: a two-rank communicator of
// its own, used only for messages from `src` to `dst`, on its own stream. NCCL matches sends and
// receives of one communicator in issue order and a send waits for its receive, so a single
// communicator (or stream) per rank could deadlock where two ranks send to each other before
// receiving; with one FIFO channel per direction a send waits only for the matching receive,
// which nothing else delays: the pipeline runs as it does with buffered sends. Every stage with
// more than one replica gets a communicator for its gradient all-reduce.
#pragma once

#include <string>
#include <vector>

#include "gp/exec/communicator.h"
#include "graphpipe/v1/plan.pb.h"

namespace gp::exec {

struct NcclChannel {
  int src = 0;
  int dst = 0;
  int messages = 0;  // per iteration
};

// Inline (as channel() and describe() are) so that the CUDA backend's communicator names its
// communicators as the layout does without linking the executor library.
struct NcclLayout {
  std::vector<NcclChannel> channels;  // ascending (src, dst)
  // All-reduce groups (sorted ranks), ascending: each replicated stage's, and under gradient
  // clipping the ranks that step an optimizer (the norm's sum) unless a stage's group is that.
  std::vector<std::vector<int>> groups;
  // Communicator k is channels[k] for k < channels.size(), then groups[k - channels.size()].
  int communicators() const { return static_cast<int>(channels.size() + groups.size()); }
  // Index of the channel src -> dst, -1 if the plan sends nothing that way.
  int channel(int src, int dst) const {
    for (size_t k = 0; k < channels.size(); ++k) {
      if (channels[k].src == src && channels[k].dst == dst) return static_cast<int>(k);
    }
    return -1;
  }
  // "channel 1->2" or "all-reduce group {0,3}".
  std::string describe(int communicator) const {
    if (communicator < 0 || communicator >= communicators()) {
      return "communicator " + std::to_string(communicator);
    }
    if (communicator < static_cast<int>(channels.size())) {
      const NcclChannel& c = channels[communicator];
      return "channel " + std::to_string(c.src) + "->" + std::to_string(c.dst);
    }
    return "all-reduce group {" + rank_list(groups[communicator - channels.size()]) + "}";
  }
};

// The layout of a plan that passed plan::validate_plan, read off Plan.messages. NCCL has no tags:
// it needs both ends of a channel to issue its messages in one order, which validate_plan
// (plan_schedule_problems) has already checked, so a plan that verifies always has a layout.
NcclLayout nccl_layout(const graphpipe::v1::Plan& plan);

}  // namespace gp::exec
