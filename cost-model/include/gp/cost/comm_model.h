// Communication times on a cluster, alpha-beta per link class: t = latency + bytes / bandwidth.
// Point-to-point uses the intra-node link between ranks of one node, else the inter-node link.
// All-reduce is a ring (2 (n-1)/n of the bytes through the slowest link, 2 (n-1) latencies);
// a group spanning nodes is hierarchical: reduce-scatter inside each node, all-reduce across
// nodes on the per-node shards, all-gather inside each node.
// Mixed clusters (device groups with their own links): p2p inside a node takes the slower of the
// two devices' intra-node links, across nodes the slower of their inter-node links; an
// all-reduce runs at the pace of the slowest link of its group, in each phase.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "gp/cost/cluster.h"
#include "graphpipe/v1/profile.pb.h"

namespace gp::cost {

class CommModel {
 public:
  explicit CommModel(const Cluster& cluster);
  // Uses fitted alpha/beta from `db` for the link classes it covers (p2p fits for p2p;
  // all-reduce fits are used for all-reduce groups of the fitted size on one link class).
  CommModel(const Cluster& cluster, const graphpipe::v1::ProfileDB& db);

  double p2p_time_us(int src_rank, int dst_rank, int64_t bytes) const;
  // Zero for a group of one rank. `ranks` are distinct global ranks.
  double allreduce_time_us(std::span<const int> ranks, int64_t bytes) const;

  const Cluster& cluster() const { return cluster_; }

 private:
  Cluster cluster_;
  // The slower of the two ranks' links of a class (latency and bandwidth each the worse).
  LinkSpec slower_link(std::span<const int> ranks, bool intra) const;

  LinkSpec intra_p2p_, inter_p2p_;
  // Mixed clusters: per dense rank, its node and its own links where its group sets them (empty
  // optional: the cluster's, possibly replaced by a profile fit). Empty for homogeneous ones.
  std::vector<int> node_of_rank_;
  std::vector<std::optional<LinkSpec>> own_intra_, own_inter_;
  // All-reduce fits from the profile DB; used for groups of exactly fit.ranks() ranks that lie
  // on one link class (all in one node: intra; one rank per node: inter).
  std::vector<graphpipe::v1::CommFit> allreduce_fits_;
};

}  // namespace gp::cost
