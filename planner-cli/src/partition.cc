#include "gp/planner/partition.h"

#include <string>

namespace gp::planner {

void set_cluster_levels(const graphpipe::v1::Cluster& cluster, const cost::CommModel& comm,
                        PartitionContext* ctx) {
  const int per_node = cluster.devices_per_node();
  if (cluster.num_nodes() == 1) {
    ctx->devices_per_node = ctx->num_devices;
  } else if (cluster.excluded_ranks_size() == 0) {
    ctx->devices_per_node = per_node;
  }
  constexpr int64_t kSmall = int64_t{1} << 20, kLarge = int64_t{1} << 30;
  auto bandwidth = [&](int peer) {
    const double t1 = comm.p2p_time_us(0, peer, kSmall), t2 = comm.p2p_time_us(0, peer, kLarge);
    return t2 > t1 ? static_cast<double>(kLarge - kSmall) / (t2 - t1) * 1e6 : 0.0;
  };
  if (per_node > 1) ctx->intra_node_bandwidth_bytes_per_s = bandwidth(1);
  if (cluster.num_nodes() > 1) ctx->inter_node_bandwidth_bytes_per_s = bandwidth(per_node);
}

std::vector<int64_t> chain_cut_bytes(const UnitGraph& units, const std::vector<int>& order) {
  const int n = static_cast<int>(order.size());
  std::vector<int> pos(units.num_units(), -1);
  for (int i = 0; i < n; ++i) pos[order[i]] = i;
  std::vector<int64_t> cut(n + 1, 0);
  for (const auto& [edge, bytes] : units.edge_bytes) {
    for (int c = pos[edge.first] + 1; c <= pos[edge.second]; ++c) cut[c] += bytes;
  }
  return cut;
}

Status validate_partition_context(const PartitionContext& ctx, int64_t b) {
  if (ctx.graph == nullptr || ctx.units == nullptr || ctx.costs == nullptr) {
    return invalid_argument("partition context: graph, units and costs must all be set");
  }
  if (ctx.num_devices < 1) {
    return invalid_argument("num_devices = " + std::to_string(ctx.num_devices) + ", must be >= 1");
  }
  if (b < 1 || (b & (b - 1)) != 0) {
    return invalid_argument("micro_batch = " + std::to_string(b) + ", must be a power of two");
  }
  const int n = ctx.units->num_units();
  if (n == 0) return invalid_argument("the unit graph has no units");
  if (static_cast<int>(ctx.units->topo.size()) != n) {
    return invalid_argument("the unit graph's topological order covers " +
                            std::to_string(ctx.units->topo.size()) + " of " + std::to_string(n) +
                            " units");
  }
  const size_t levels = static_cast<size_t>(ctx.costs->unit(0).levels);
  if (static_cast<size_t>(log2_exact(b)) >= levels) {
    return invalid_argument("micro_batch = " + std::to_string(b) +
                            " exceeds the stage cost tables (at most " +
                            std::to_string(int64_t{1} << (levels - 1)) + " samples)");
  }
  return ok_status();
}

}  // namespace gp::planner
