// Alpha-beta communication times: point-to-point on the link class between two ranks, ring
// all-reduce inside a node, hierarchical all-reduce across nodes.
#include "gp/cost/comm_model.h"

#include <algorithm>
#include <map>

#include "gp/common/logging.h"

namespace gp::cost {
namespace {

// latency + bytes / bandwidth, in microseconds.
double alpha_beta_us(const LinkSpec& link, double bytes) {
  return link.latency_us() + bytes / link.bandwidth_bytes_per_s() * 1e6;
}

// Ring all-reduce of `bytes` over n ranks on one link: 2 (n-1) steps (reduce-scatter then
// all-gather), each sending bytes / n to the next rank.
double ring_allreduce_us(const LinkSpec& link, int n, double bytes) {
  if (n <= 1) return 0;
  const double steps = 2.0 * (n - 1);
  return steps * link.latency_us() + steps / n * bytes / link.bandwidth_bytes_per_s() * 1e6;
}

bool usable_fit(const graphpipe::v1::CommFit& fit) {
  return fit.alpha_us() >= 0 && fit.beta_bytes_per_s() > 0;
}

}  // namespace

CommModel::CommModel(const Cluster& cluster)
    : cluster_(cluster), intra_p2p_(cluster.intra_node()), inter_p2p_(cluster.inter_node()) {
  GP_CHECK(cluster_.devices_per_node() > 0, "cluster must be validated (devices_per_node > 0)");
  GP_CHECK(intra_p2p_.bandwidth_bytes_per_s() > 0 && inter_p2p_.bandwidth_bytes_per_s() > 0,
           "cluster must be validated (link bandwidths > 0)");
  if (cluster_.device_groups_size() == 0) return;
  const int n = num_devices(cluster_);
  for (int r = 0; r < n; ++r) {
    node_of_rank_.push_back(node_of(cluster_, r));
    const int p = physical_device(cluster_, r);
    std::optional<LinkSpec> intra, inter;
    for (const auto& g : cluster_.device_groups()) {
      const bool in = std::find(g.devices().begin(), g.devices().end(), p) != g.devices().end() ||
                      std::find(g.nodes().begin(), g.nodes().end(),
                                p / cluster_.devices_per_node()) != g.nodes().end();
      if (!in) continue;
      if (g.has_intra_node()) intra = g.intra_node();
      if (g.has_inter_node()) inter = g.inter_node();
      break;
    }
    own_intra_.push_back(intra);
    own_inter_.push_back(inter);
  }
}

LinkSpec CommModel::slower_link(std::span<const int> ranks, bool intra) const {
  LinkSpec link = intra ? intra_p2p_ : inter_p2p_;
  if (node_of_rank_.empty()) return link;
  bool first = true;
  for (int r : ranks) {
    const auto& own =
        intra ? own_intra_[static_cast<size_t>(r)] : own_inter_[static_cast<size_t>(r)];
    const LinkSpec& l = own ? *own : (intra ? intra_p2p_ : inter_p2p_);
    if (first) {
      link = l;
      first = false;
      continue;
    }
    link.set_latency_us(std::max(link.latency_us(), l.latency_us()));
    link.set_bandwidth_bytes_per_s(
        std::min(link.bandwidth_bytes_per_s(), l.bandwidth_bytes_per_s()));
  }
  return link;
}

// Fits from a profile replace the datasheet link numbers: a P2P fit of a link class replaces
// that class's latency (alpha) and bandwidth (beta) for p2p and for the steps of the ring and
// hierarchical all-reduce formulas; ALL_REDUCE fits replace the whole formula for groups of
// exactly fit.ranks ranks on one link class. Later fits of the same kind override earlier ones;
// fits with a negative alpha or a non-positive beta are skipped with a warning.
CommModel::CommModel(const Cluster& cluster, const graphpipe::v1::ProfileDB& db)
    : CommModel(cluster) {
  auto log = gp::log::get("cost");
  for (int i = 0; i < db.comm_size(); ++i) {
    const auto& fit = db.comm(i);
    if (!usable_fit(fit)) {
      log->warn("profile comm[{}]: alpha_us = {}, beta_bytes_per_s = {}: unusable fit, skipped", i,
                fit.alpha_us(), fit.beta_bytes_per_s());
      continue;
    }
    if (fit.link_class() != graphpipe::v1::LINK_CLASS_INTRA_NODE &&
        fit.link_class() != graphpipe::v1::LINK_CLASS_INTER_NODE) {
      log->warn("profile comm[{}]: link class unspecified, skipped", i);
      continue;
    }
    const bool intra = fit.link_class() == graphpipe::v1::LINK_CLASS_INTRA_NODE;
    if (fit.kind() == graphpipe::v1::COLLECTIVE_KIND_P2P) {
      LinkSpec& link = intra ? intra_p2p_ : inter_p2p_;
      link.set_latency_us(fit.alpha_us());
      link.set_bandwidth_bytes_per_s(fit.beta_bytes_per_s());
    } else if (fit.kind() == graphpipe::v1::COLLECTIVE_KIND_ALL_REDUCE && fit.ranks() >= 2) {
      std::erase_if(allreduce_fits_, [&](const graphpipe::v1::CommFit& f) {
        return f.link_class() == fit.link_class() && f.ranks() == fit.ranks();
      });
      allreduce_fits_.push_back(fit);
    }
  }
}

double CommModel::p2p_time_us(int src_rank, int dst_rank, int64_t bytes) const {
  if (src_rank == dst_rank || bytes <= 0) return 0;  // nothing crosses a link
  if (!node_of_rank_.empty()) {
    const int pair[] = {src_rank, dst_rank};
    const bool intra = node_of_rank_[static_cast<size_t>(src_rank)] ==
                       node_of_rank_[static_cast<size_t>(dst_rank)];
    return alpha_beta_us(slower_link(pair, intra), static_cast<double>(bytes));
  }
  const LinkSpec& link = same_node(cluster_, src_rank, dst_rank) ? intra_p2p_ : inter_p2p_;
  return alpha_beta_us(link, static_cast<double>(bytes));
}

double CommModel::allreduce_time_us(std::span<const int> ranks, int64_t bytes) const {
  const int n = static_cast<int>(ranks.size());
  if (n <= 1 || bytes <= 0) return 0;
  std::map<int, int> per_node;  // node -> ranks of the group on it
  for (int r : ranks) {
    ++per_node[node_of_rank_.empty() ? node_of(cluster_, r)
                                     : node_of_rank_[static_cast<size_t>(r)]];
  }
  const int nodes = static_cast<int>(per_node.size());
  int g = 0;  // ranks per node: the most any node holds (the slowest node decides)
  for (const auto& [node, count] : per_node) g = std::max(g, count);
  const double b = static_cast<double>(bytes);

  // A measured all-reduce of this group size on this link class replaces the formula.
  const auto cls = nodes == 1 ? graphpipe::v1::LINK_CLASS_INTRA_NODE
                   : g == 1   ? graphpipe::v1::LINK_CLASS_INTER_NODE
                              : graphpipe::v1::LINK_CLASS_UNSPECIFIED;
  for (const auto& fit : allreduce_fits_) {
    if (fit.link_class() == cls && fit.ranks() == n) {
      return fit.alpha_us() + b / fit.beta_bytes_per_s() * 1e6;
    }
  }

  const LinkSpec intra = slower_link(ranks, true);
  if (nodes == 1) return ring_allreduce_us(intra, n, b);
  // Hierarchical: reduce-scatter inside each node ((g-1) steps of bytes/g on the intra link),
  // ring all-reduce of each device's bytes/g shard across the nodes (each of the g devices
  // drives its own shard over its own inter-node link, so the per-device bandwidth applies),
  // then all-gather inside each node (same cost as the reduce-scatter).
  const double intra_phase = (g - 1) * alpha_beta_us(intra, b / g);
  return intra_phase + ring_allreduce_us(slower_link(ranks, false), nodes, b / g) + intra_phase;
}

}  // namespace gp::cost
