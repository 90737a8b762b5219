#include "gp/exec/nccl_layout.h"

#include <algorithm>
#include <map>
#include <tuple>

namespace gp::exec {
namespace {

using K = graphpipe::v1::InstructionKind;

struct Message {
  int edge;
  bool gradient;
  int64_t sample_begin, sample_end;
  bool operator==(const Message&) const = default;
};

std::string describe(const Message& m) {
  return std::string(m.gradient ? "gradient" : "activation") + " of edge " +
         std::to_string(m.edge) + ", samples [" + std::to_string(m.sample_begin) + ", " +
         std::to_string(m.sample_end) + ")";
}

}  // namespace

Result<NcclLayout> nccl_layout(const graphpipe::v1::Plan& plan, const graph::PlanIndex& index) {
  // (src, dst) -> the messages in the sender's order, and in the receiver's.
  std::map<std::pair<int, int>, std::vector<Message>> sent, received;
  for (int r = 0; r < index.world_size; ++r) {
    if (index.program_of_rank[r] < 0) continue;
    for (const auto& in : plan.programs(index.program_of_rank[r]).instructions()) {
      const bool send = in.kind() == K::INSTRUCTION_KIND_SEND_ACTIVATION ||
                        in.kind() == K::INSTRUCTION_KIND_SEND_GRADIENT;
      const bool recv = in.kind() == K::INSTRUCTION_KIND_RECV_ACTIVATION ||
                        in.kind() == K::INSTRUCTION_KIND_RECV_GRADIENT;
      if (!send && !recv) continue;
      const Message m{in.edge(),
                      in.kind() == K::INSTRUCTION_KIND_SEND_GRADIENT ||
                          in.kind() == K::INSTRUCTION_KIND_RECV_GRADIENT,
                      in.sample_begin(), in.sample_end()};
      if (send) {
        sent[{r, in.peer_rank()}].push_back(m);
      } else {
        received[{in.peer_rank(), r}].push_back(m);
      }
    }
  }
  NcclLayout layout;
  for (const auto& [pair, messages] : sent) {
    const auto& [src, dst] = pair;
    const std::string name = "channel " + std::to_string(src) + "->" + std::to_string(dst);
    auto it = received.find(pair);
    const std::vector<Message> none;
    const auto& got = it == received.end() ? none : it->second;
    for (size_t i = 0; i < std::max(messages.size(), got.size()); ++i) {
      if (i < messages.size() && i < got.size() && messages[i] == got[i]) continue;
      const std::string s = i < messages.size() ? describe(messages[i]) : "nothing";
      const std::string g = i < got.size() ? describe(got[i]) : "nothing";
      return failed_precondition("plan: " + name + ": message " + std::to_string(i) + " is " + s +
                                 " at rank " + std::to_string(src) + " but rank " +
                                 std::to_string(dst) + " receives " + g +
                                 " there (NCCL matches messages by order)");
    }
    layout.channels.push_back({src, dst, static_cast<int>(messages.size())});
  }
  for (const auto& [pair, messages] : received) {
    if (!sent.contains(pair)) {
      return failed_precondition("plan: rank " + std::to_string(pair.second) + " receives " +
                                 describe(messages[0]) + " from rank " +
                                 std::to_string(pair.first) + ", which sends it nothing");
    }
  }
  for (const auto& st : plan.stages()) {
    if (st.device_ranks_size() < 2) continue;
    std::vector<int> g(st.device_ranks().begin(), st.device_ranks().end());
    std::sort(g.begin(), g.end());
    layout.groups.push_back(std::move(g));
  }
  std::sort(layout.groups.begin(), layout.groups.end());
  return layout;
}

}  // namespace gp::exec
