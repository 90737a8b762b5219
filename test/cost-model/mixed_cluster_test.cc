// Mixed clusters (Cluster.device_groups): validation naming the group field, the per-device view
// (kinds, links, memory), selection of the fastest devices, per-device communication times and
// per-kind compute models.
#include <catch2/catch.hpp>
#include <memory>
#include <string>
#include <vector>

#include "../support/fakes.h"
#include "gp/cost/cluster.h"
#include "gp/cost/comm_model.h"
#include "gp/cost/device_costs.h"

using namespace gp::cost;

namespace {

Cluster preset(const std::string& name) {
  auto c = load_cluster(name);
  INFO(c.status().to_string());
  REQUIRE(c.ok());
  return std::move(c).value();
}

// 2 nodes x 4 A100s with node 1 a V100 node: the group under test is device_groups[1].
Cluster two_kinds() {
  Cluster c = preset("dgx-a100");
  c.set_num_nodes(2);
  c.set_devices_per_node(4);
  const Cluster v100 = preset("summit-v100");
  auto* g = c.add_device_groups();
  *g->mutable_device() = v100.device();
  g->add_nodes(1);
  return c;
}

std::string error_of(const Cluster& c) {
  const gp::Status st = validate_cluster(c);
  REQUIRE_FALSE(st.ok());
  return st.message();
}

}  // namespace

TEST_CASE("the mixed presets validate and hold two kinds, the fastest listed first") {
  const Cluster va = preset("mixed-v100-a100");
  CHECK(validate_cluster(va).ok());
  CHECK(is_mixed(va));
  CHECK(num_devices(va) == 32);
  CHECK(device_kind_names(va) == std::vector<std::string>{"A100-SXM4-80GB", "V100-SXM2-16GB"});
  CHECK(device_of_rank(va, 0).name() == "V100-SXM2-16GB");
  CHECK(device_of_rank(va, 15).name() == "V100-SXM2-16GB");
  CHECK(device_of_rank(va, 16).name() == "A100-SXM4-80GB");
  // Memory is per device: the V100s hold 16 GB, the A100s 80.
  CHECK(device_of_rank(va, 0).memory_capacity_bytes() <
        device_of_rank(va, 31).memory_capacity_bytes());
  // The kinds are the single-kind presets' own, so their profiles apply.
  CHECK(device_of_rank(va, 0).SerializeAsString() ==
        preset("summit-v100").device().SerializeAsString());
  const Cluster ah = preset("mixed-a100-h100");
  CHECK(device_kind_names(ah) == std::vector<std::string>{"H100-SXM5-80GB", "A100-SXM4-80GB"});
  CHECK_FALSE(is_mixed(preset("dgx-a100")));
  CHECK(device_kind_names(preset("dgx-a100")) == std::vector<std::string>{"A100-SXM4-80GB"});
}

TEST_CASE("a device group's bad fields are refused naming the group and the field") {
  Cluster c = two_kinds();
  // A second group so that the one under test is device_groups[1].
  auto* g0 = c.add_device_groups();
  *g0 = c.device_groups(0);
  g0->clear_nodes();
  g0->add_devices(0);
  c.mutable_device_groups()->SwapElements(0, 1);
  REQUIRE(validate_cluster(c).ok());

  SECTION("a device index past the cluster") {
    c.mutable_device_groups(1)->add_devices(9);
    CHECK_THAT(error_of(c),
               Catch::Contains("device_groups[1].devices[0] = 9, out of range [0, 8)"));
  }
  SECTION("a node index past the cluster") {
    c.mutable_device_groups(1)->set_nodes(0, 2);
    CHECK_THAT(error_of(c), Catch::Contains("device_groups[1].nodes[0] = 2, out of range [0, 2)"));
  }
  SECTION("a device in two groups") {
    c.mutable_device_groups(1)->add_devices(0);  // also device_groups[0].devices[0]
    CHECK_THAT(error_of(c), Catch::Contains("device_groups[1].devices[0] = 0: device 0 is "
                                            "already in device_groups[0].devices[0] = 0"));
  }
  SECTION("a device listed by its node and by itself") {
    c.mutable_device_groups(1)->add_devices(5);  // node 1 holds devices 4..7
    CHECK_THAT(error_of(c), Catch::Contains("device 5 is already in device_groups[1].nodes[0]"));
  }
  SECTION("a group kind checked as the cluster's device") {
    c.mutable_device_groups(1)->mutable_device()->set_peak_fp32_flops(0);
    CHECK_THAT(error_of(c), Catch::Contains("device_groups[1].device.peak_fp32_flops = 0"));
    c.mutable_device_groups(1)->mutable_device()->set_peak_fp32_flops(1e25);
    CHECK_THAT(error_of(c), Catch::Contains("device_groups[1].device.peak_fp32_flops = 1e+25"));
  }
  SECTION("a group link checked as the cluster's links") {
    c.mutable_device_groups(1)->mutable_inter_node()->set_bandwidth_bytes_per_s(-1);
    CHECK_THAT(error_of(c),
               Catch::Contains("device_groups[1].inter_node.bandwidth_bytes_per_s = -1"));
  }
  SECTION("two kinds of one name that differ") {
    c.mutable_device_groups(1)->mutable_device()->set_name(c.device().name());
    CHECK_THAT(error_of(c), Catch::Contains("device_groups[1].device.name = 'A100-SXM4-80GB' "
                                            "names a kind that device defines differently"));
  }
  SECTION("an empty group") {
    c.mutable_device_groups(1)->clear_nodes();
    CHECK_THAT(error_of(c), Catch::Contains("device_groups[1] lists no nodes and no devices"));
  }
}

TEST_CASE("asked for fewer devices, a mixed cluster gives its fastest, groups following them") {
  const Cluster c = preset("mixed-v100-a100");  // nodes 0, 1 V100; nodes 2, 3 A100
  std::vector<int> chosen;
  auto sixteen = select_devices(c, 16, &chosen);
  REQUIRE(sixteen.ok());
  CHECK_FALSE(is_mixed(*sixteen));
  CHECK(device_kind_names(*sixteen) == std::vector<std::string>{"A100-SXM4-80GB"});
  REQUIRE(chosen.size() == 16);
  CHECK(chosen.front() == 16);
  CHECK(chosen.back() == 31);

  auto twenty = select_devices(c, 20, &chosen);
  REQUIRE(twenty.ok());
  CHECK(validate_cluster(*twenty).ok());
  CHECK(num_devices(*twenty) == 20);
  int v100 = 0;
  for (int r = 0; r < 20; ++r) v100 += device_of_rank(*twenty, r).name() == "V100-SXM2-16GB";
  CHECK(v100 == 4);
  // The chosen V100s keep their node's links: V100 to V100 on one node is NVLink 2.
  for (int r = 0; r < 20; ++r) {
    if (device_of_rank(*twenty, r).name() == "V100-SXM2-16GB") {
      CHECK(inter_link_of_rank(*twenty, r).bandwidth_bytes_per_s() == Approx(6.25e9));
      CHECK(chosen[static_cast<size_t>(r)] < 16);
    } else {
      CHECK(inter_link_of_rank(*twenty, r).bandwidth_bytes_per_s() == Approx(25e9));
      CHECK(chosen[static_cast<size_t>(r)] >= 16);
    }
  }
  // All of them: the cluster as it is.
  auto all = select_devices(c, 32);
  REQUIRE(all.ok());
  CHECK(device_of_rank(*all, 0).name() == "V100-SXM2-16GB");
  // A homogeneous cluster still gives its first devices.
  auto first = select_devices(preset("dgx-a100"), 8, &chosen);
  REQUIRE(first.ok());
  CHECK(chosen == std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7});
}

TEST_CASE("a slow single device is dropped first, even in the middle of a node") {
  Cluster c = preset("cpu-local");
  c.set_devices_per_node(4);
  auto* g = c.add_device_groups();
  *g->mutable_device() = c.device();
  g->mutable_device()->set_name("cpu-process/rank1");
  g->mutable_device()->set_peak_fp32_flops(c.device().peak_fp32_flops() / 3);
  g->add_devices(1);
  REQUIRE(validate_cluster(c).ok());
  CHECK(device_kind_names(c) == std::vector<std::string>{"cpu-process", "cpu-process/rank1"});
  std::vector<int> chosen;
  auto three = select_devices(c, 3, &chosen);
  REQUIRE(three.ok());
  CHECK(chosen == std::vector<int>{0, 2, 3});
  CHECK_FALSE(is_mixed(*three));
}

TEST_CASE("transfers between kinds take the slower device's link, all-reduces the slowest") {
  const Cluster c = preset("mixed-v100-a100");
  const CommModel comm(c);
  const int64_t bytes = 1 << 26;
  const double b = static_cast<double>(bytes);
  // Inside a V100 node: NVLink 2 (50 GB/s); inside an A100 node: NVSwitch (300 GB/s).
  CHECK(comm.p2p_time_us(0, 1, bytes) == Approx(3 + b / 50e9 * 1e6));
  CHECK(comm.p2p_time_us(16, 17, bytes) == Approx(3 + b / 300e9 * 1e6));
  // Across nodes: A100 to A100 at 25 GB/s, anything with a V100 at its 6.25 GB/s.
  CHECK(comm.p2p_time_us(16, 24, bytes) == Approx(5 + b / 25e9 * 1e6));
  CHECK(comm.p2p_time_us(0, 24, bytes) == Approx(5 + b / 6.25e9 * 1e6));
  CHECK(comm.p2p_time_us(24, 0, bytes) == comm.p2p_time_us(0, 24, bytes));
  // A ring of one rank per node: the V100's link paces it.
  const std::vector<int> mixed_ring{0, 24}, fast_ring{16, 24};
  CHECK(comm.allreduce_time_us(mixed_ring, bytes) == Approx(2 * 5 + b / 6.25e9 * 1e6));
  CHECK(comm.allreduce_time_us(fast_ring, bytes) == Approx(2 * 5 + b / 25e9 * 1e6));
  // A homogeneous preset keeps its numbers.
  const CommModel a100(preset("dgx-a100"));
  CHECK(a100.p2p_time_us(0, 8, bytes) == comm.p2p_time_us(16, 24, bytes));
}

TEST_CASE("per-kind compute models: one per kind, each rank priced by its own") {
  const Cluster c = preset("mixed-v100-a100");
  auto fast = std::make_shared<gp::testing::FakeCostModel>(10, 20);
  auto slow = std::make_shared<gp::testing::FakeCostModel>(20, 40);
  auto missing = DeviceCostModels::create(c, {{"A100-SXM4-80GB", fast}});
  REQUIRE_FALSE(missing.ok());
  CHECK_THAT(missing.status().message(),
             Catch::Contains("no model for device kind 'V100-SXM2-16GB'"));
  auto models = DeviceCostModels::create(c, {{"A100-SXM4-80GB", fast}, {"V100-SXM2-16GB", slow}});
  REQUIRE(models.ok());
  CHECK_FALSE(models->uniform());
  CHECK(&models->for_rank(0) == slow.get());
  CHECK(&models->for_rank(31) == fast.get());
  CHECK(&models->reference() == fast.get());  // the fastest kind's
  CHECK(models->covers(c).ok());
  Cluster other = c;
  other.mutable_device_groups(0)->mutable_device()->set_name("P100");
  CHECK_THAT(models->covers(other).message(),
             Catch::Contains("device kind 'P100' has no cost model"));
  const DeviceCostModels uniform(fast);
  CHECK(uniform.uniform());
  CHECK(&uniform.for_rank(c, 0) == fast.get());
  CHECK(uniform.covers(other).ok());
}
