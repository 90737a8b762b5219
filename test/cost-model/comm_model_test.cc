// The communication model: alpha-beta p2p per link class, ring and hierarchical all-reduce,
// profiled fits.
#include "gp/cost/comm_model.h"

#include <catch2/catch.hpp>
#include <numeric>
#include <vector>

#include "gp/cost/cluster.h"

using namespace gp::cost;
using graphpipe::v1::ProfileDB;

namespace {

// 2 nodes x 4 devices; intra 100 GB/s, 2 us; inter 10 GB/s, 10 us.
Cluster two_nodes(int nodes = 2) {
  Cluster c;
  c.set_name("hand");
  c.set_num_nodes(nodes);
  c.set_devices_per_node(4);
  auto* d = c.mutable_device();
  d->set_name("dev");
  d->set_type(graphpipe::v1::DEVICE_TYPE_CUDA);
  d->set_peak_fp32_flops(1e12);
  d->set_memory_bandwidth_bytes_per_s(1e12);
  d->set_memory_capacity_bytes(1LL << 30);
  c.mutable_intra_node()->set_bandwidth_bytes_per_s(100e9);
  c.mutable_intra_node()->set_latency_us(2);
  c.mutable_inter_node()->set_bandwidth_bytes_per_s(10e9);
  c.mutable_inter_node()->set_latency_us(10);
  REQUIRE(validate_cluster(c).ok());
  return c;
}

std::vector<int> range(int from, int to) {
  std::vector<int> v(static_cast<size_t>(to - from));
  std::iota(v.begin(), v.end(), from);
  return v;
}

void add_fit(ProfileDB& db, graphpipe::v1::LinkClass cls, graphpipe::v1::CollectiveKind kind,
             int ranks, double alpha, double beta) {
  auto* f = db.add_comm();
  f->set_link_class(cls);
  f->set_kind(kind);
  f->set_ranks(ranks);
  f->set_alpha_us(alpha);
  f->set_beta_bytes_per_s(beta);
}

}  // namespace

TEST_CASE("p2p is latency plus bytes over bandwidth, on the link between the ranks") {
  CommModel m(two_nodes());
  // Same node: 2 us + 1e6 B / 100 GB/s = 2 + 10 us.
  CHECK(m.p2p_time_us(0, 3, 1'000'000) == Approx(12));
  CHECK(m.p2p_time_us(5, 4, 1'000'000) == Approx(12));
  // Across nodes: 10 us + 1e6 B / 10 GB/s = 10 + 100 us.
  CHECK(m.p2p_time_us(3, 4, 1'000'000) == Approx(110));
  CHECK(m.p2p_time_us(7, 0, 1'000'000) == Approx(110));
  // A 1-byte message costs its latency.
  CHECK(m.p2p_time_us(0, 1, 1) == Approx(2).epsilon(1e-4));
}

TEST_CASE("p2p with nothing to send or to itself is free") {
  CommModel m(two_nodes());
  CHECK(m.p2p_time_us(2, 2, 1 << 20) == 0);
  CHECK(m.p2p_time_us(0, 5, 0) == 0);
}

TEST_CASE("p2p on summit uses NVLink inside a node and InfiniBand across") {
  auto c = load_cluster("summit-v100");
  REQUIRE(c.ok());
  CommModel m(*c);
  const int64_t bytes = 64 << 20;
  CHECK(
      m.p2p_time_us(0, 1, bytes) ==
      Approx(c->intra_node().latency_us() + bytes / c->intra_node().bandwidth_bytes_per_s() * 1e6));
  CHECK(
      m.p2p_time_us(0, 4, bytes) ==
      Approx(c->inter_node().latency_us() + bytes / c->inter_node().bandwidth_bytes_per_s() * 1e6));
  CHECK(m.p2p_time_us(0, 4, bytes) > 5 * m.p2p_time_us(0, 1, bytes));
}

TEST_CASE("an all-reduce of one rank or of no bytes is free") {
  CommModel m(two_nodes());
  const std::vector<int> one{3};
  CHECK(m.allreduce_time_us(one, 1 << 30) == 0);
  CHECK(m.allreduce_time_us(std::vector<int>{}, 1 << 30) == 0);
  CHECK(m.allreduce_time_us(range(0, 4), 0) == 0);
}

TEST_CASE("an all-reduce inside a node is a ring: 2(n-1) latencies and 2(n-1)/n of the bytes") {
  CommModel m(two_nodes());
  const int64_t bytes = 100'000'000;
  // n = 4: 2*3*2 us + 2*3/4 * 1e8 B / 100 GB/s = 12 + 1500 us.
  CHECK(m.allreduce_time_us(range(0, 4), bytes) == Approx(1512));
  // n = 2 on the second node: 2*1*2 + 1 * 1e8 / 1e11 s = 4 + 1000 us.
  CHECK(m.allreduce_time_us(std::vector<int>{5, 7}, bytes) == Approx(1004));
}

TEST_CASE("an all-reduce across nodes is hierarchical and slower than inside one node") {
  CommModel m(two_nodes());
  const int64_t bytes = 100'000'000;
  // g = 4 ranks per node, N = 2 nodes.
  // reduce-scatter: 3 * (2 us + 2.5e7 B / 100 GB/s) = 3 * 252 = 756 us; all-gather the same.
  // inter all-reduce of 2.5e7 B over 2 nodes: 2*1*10 + 2*1/2 * 2.5e7 / 10 GB/s = 20 + 2500 us.
  const double hier = m.allreduce_time_us(range(0, 8), bytes);
  CHECK(hier == Approx(756 + 2520 + 756));
  // Never faster than a ring of the same size on the intra-node link alone.
  const double pure_intra = 2 * 7 * 2 + 2.0 * 7 / 8 * bytes / 100e9 * 1e6;
  CHECK(hier >= pure_intra);
  CHECK(hier >= m.allreduce_time_us(range(0, 4), bytes));
}

TEST_CASE("an all-reduce of one rank per node is a ring on the inter-node link") {
  CommModel m(two_nodes(4));
  const int64_t bytes = 40'000'000;
  // 4 nodes, g = 1: 2*3*10 us + 2*3/4 * 4e7 B / 10 GB/s = 60 + 6000 us.
  CHECK(m.allreduce_time_us(std::vector<int>{0, 4, 8, 12}, bytes) == Approx(6060));
}

TEST_CASE("an uneven group uses the fullest node's rank count") {
  CommModel m(two_nodes());
  const int64_t bytes = 100'000'000;
  // Ranks 0,1,2 on node 0 and 4 on node 1: g = 3, N = 2.
  const double rs = 2 * (2 + bytes / 3.0 / 100e9 * 1e6);
  const double inter = 2 * 10 + (bytes / 3.0) / 10e9 * 1e6;
  CHECK(m.allreduce_time_us(std::vector<int>{0, 1, 2, 4}, bytes) == Approx(rs + inter + rs));
}

TEST_CASE("profiled p2p fits replace the datasheet latency and bandwidth") {
  ProfileDB db;
  add_fit(db, graphpipe::v1::LINK_CLASS_INTRA_NODE, graphpipe::v1::COLLECTIVE_KIND_P2P, 2, 5, 50e9);
  add_fit(db, graphpipe::v1::LINK_CLASS_INTER_NODE, graphpipe::v1::COLLECTIVE_KIND_P2P, 2, 20, 5e9);
  CommModel m(two_nodes(), db);
  CHECK(m.p2p_time_us(0, 1, 1'000'000) == Approx(5 + 20));
  CHECK(m.p2p_time_us(0, 4, 1'000'000) == Approx(20 + 200));
  // The ring all-reduce inside a node runs on the fitted link too: 2*3*5 + 1.5 * 1e8/50e9.
  CHECK(m.allreduce_time_us(range(0, 4), 100'000'000) == Approx(30 + 3000));
}

TEST_CASE("profiled all-reduce fits apply to groups of their size on their link class only") {
  ProfileDB db;
  add_fit(db, graphpipe::v1::LINK_CLASS_INTRA_NODE, graphpipe::v1::COLLECTIVE_KIND_ALL_REDUCE, 4,
          40, 40e9);
  add_fit(db, graphpipe::v1::LINK_CLASS_INTER_NODE, graphpipe::v1::COLLECTIVE_KIND_ALL_REDUCE, 2,
          30, 4e9);
  CommModel m(two_nodes(), db);
  CommModel plain(two_nodes());
  const int64_t bytes = 100'000'000;
  CHECK(m.allreduce_time_us(range(0, 4), bytes) == Approx(40 + 2500));
  CHECK(m.allreduce_time_us(std::vector<int>{0, 4}, bytes) == Approx(30 + 25000));
  // Other sizes and mixed groups keep the formula.
  CHECK(m.allreduce_time_us(range(0, 2), bytes) ==
        Approx(plain.allreduce_time_us(range(0, 2), bytes)));
  CHECK(m.allreduce_time_us(range(0, 8), bytes) ==
        Approx(plain.allreduce_time_us(range(0, 8), bytes)));
  // p2p is untouched by all-reduce fits.
  CHECK(m.p2p_time_us(0, 1, 1000) == plain.p2p_time_us(0, 1, 1000));
}

TEST_CASE("unusable fits are skipped") {
  ProfileDB db;
  add_fit(db, graphpipe::v1::LINK_CLASS_INTRA_NODE, graphpipe::v1::COLLECTIVE_KIND_P2P, 2, 1, 0);
  add_fit(db, graphpipe::v1::LINK_CLASS_UNSPECIFIED, graphpipe::v1::COLLECTIVE_KIND_P2P, 2, 1, 1e9);
  CommModel m(two_nodes(), db);
  CHECK(m.p2p_time_us(0, 1, 1'000'000) == Approx(12));
  CHECK(m.p2p_time_us(0, 4, 1'000'000) == Approx(110));
}
