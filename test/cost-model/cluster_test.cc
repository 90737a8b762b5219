// Cluster presets, loading from files, validation (errors name the field) and device selection.
#include "gp/cost/cluster.h"

#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "gp/model/model_io.h"

using namespace gp::cost;
namespace fs = std::filesystem;

namespace {

Cluster preset(const std::string& name) {
  auto c = load_cluster(name);
  INFO(name << ": " << c.status().to_string());
  REQUIRE(c.ok());
  return *c;
}

// A fresh directory under the system temp dir, removed at scope exit.
struct TempDir {
  fs::path path;
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "gp_cluster_test_XXXXXX").string();
    REQUIRE(mkdtemp(tmpl.data()) != nullptr);
    path = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

// Sets an environment variable for the scope, restoring the old value afterwards.
struct ScopedEnv {
  std::string name;
  std::string old;
  bool had;
  ScopedEnv(std::string n, const std::string& value) : name(std::move(n)) {
    const char* v = getenv(name.c_str());
    had = v != nullptr;
    if (had) old = v;
    setenv(name.c_str(), value.c_str(), 1);
  }
  ~ScopedEnv() {
    if (had) {
      setenv(name.c_str(), old.c_str(), 1);
    } else {
      unsetenv(name.c_str());
    }
  }
};

std::string validation_error(const Cluster& c) {
  auto s = validate_cluster(c);
  REQUIRE_FALSE(s.ok());
  CHECK(s.code() == gp::StatusCode::kInvalidArgument);
  return s.message();
}

std::vector<int> excluded(const Cluster& c) {
  return {c.excluded_ranks().begin(), c.excluded_ranks().end()};
}

}  // namespace

TEST_CASE("the seven shipped presets are listed in sorted order") {
  CHECK(cluster_preset_names() == std::vector<std::string>{"cpu-local", "dgx-a100", "dgx-h100",
                                                           "h200", "mixed-a100-h100",
                                                           "mixed-v100-a100", "summit-v100"});
}

TEST_CASE("every preset loads, validates and carries its own name") {
  for (const auto& name : cluster_preset_names()) {
    INFO(name);
    Cluster c = preset(name);
    CHECK(validate_cluster(c).ok());
    CHECK(c.name() == name);
    CHECK_FALSE(c.device().name().empty());
    CHECK_FALSE(c.description().empty());
    CHECK(num_devices(c) == c.num_nodes() * c.devices_per_node());
    // Inside a node is never slower than between nodes.
    CHECK(c.intra_node().bandwidth_bytes_per_s() >= c.inter_node().bandwidth_bytes_per_s());
  }
}

TEST_CASE("summit-v100 is the paper's testbed: 32 V100s, 4 per node, about 16 GB each") {
  Cluster c = preset("summit-v100");
  CHECK(num_devices(c) == 32);
  CHECK(c.num_nodes() == 8);
  CHECK(c.devices_per_node() == 4);
  CHECK(c.device().type() == graphpipe::v1::DEVICE_TYPE_CUDA);
  CHECK(c.device().memory_capacity_bytes() > 15'000'000'000);
  CHECK(c.device().memory_capacity_bytes() <= 16LL << 30);
  CHECK(c.device().peak_fp32_flops() == Approx(15.7e12));
  CHECK(c.device().peak_tf32_flops() == 0);  // Volta has no TF32
  CHECK(c.device().memory_bandwidth_bytes_per_s() == Approx(900e9));
  CHECK(c.intra_node().bandwidth_bytes_per_s() > 5 * c.inter_node().bandwidth_bytes_per_s());
}

TEST_CASE("the GPU presets have 8 devices per node, bf16 above fp32 and their datasheet memory") {
  struct Expect {
    const char* name;
    double capacity_gib_min, capacity_gib_max, bandwidth;
  };
  for (const Expect& e : {Expect{"dgx-a100", 79, 80, 2039e9}, Expect{"dgx-h100", 78, 80, 3.35e12},
                          Expect{"h200", 130, 141, 4.8e12}}) {
    INFO(e.name);
    Cluster c = preset(e.name);
    CHECK(c.devices_per_node() == 8);
    CHECK(c.device().type() == graphpipe::v1::DEVICE_TYPE_CUDA);
    CHECK(c.device().peak_bf16_flops() > c.device().peak_tf32_flops());
    CHECK(c.device().peak_tf32_flops() > c.device().peak_fp32_flops());
    const double gib = static_cast<double>(c.device().memory_capacity_bytes()) / (1LL << 30);
    CHECK(gib >= e.capacity_gib_min);
    CHECK(gib <= e.capacity_gib_max);
    CHECK(c.device().memory_bandwidth_bytes_per_s() == Approx(e.bandwidth));
  }
}

TEST_CASE("cpu-local is one host of 8 CPU ranks with modest peaks") {
  Cluster c = preset("cpu-local");
  CHECK(c.num_nodes() == 1);
  CHECK(num_devices(c) == 8);
  CHECK(c.device().type() == graphpipe::v1::DEVICE_TYPE_CPU);
  CHECK(c.device().peak_fp32_flops() < 1e12);
  CHECK(c.device().memory_capacity_bytes() == 4LL << 30);
  CHECK(c.device().kernel_launch_overhead_us() <
        preset("dgx-h100").device().kernel_launch_overhead_us());
}

TEST_CASE("an unknown preset is rejected listing the presets") {
  auto c = load_cluster("summit-a100");
  REQUIRE_FALSE(c.ok());
  CHECK(c.status().code() == gp::StatusCode::kInvalidArgument);
  CHECK_THAT(c.status().message(), Catch::Contains("unknown cluster preset 'summit-a100'"));
  CHECK_THAT(c.status().message(), Catch::Contains("summit-v100"));
  CHECK_THAT(c.status().message(), Catch::Contains("cpu-local"));
}

TEST_CASE("a cluster file given by path loads as text and as JSON") {
  TempDir dir;
  Cluster c = preset("dgx-h100");
  c.set_name("my-cluster");
  c.set_num_nodes(2);
  for (const char* ext : {".pbtxt", ".json"}) {
    INFO(ext);
    const std::string path = (dir.path / (std::string("mine") + ext)).string();
    REQUIRE(gp::model::write_message(path, c).ok());
    auto loaded = load_cluster(path);
    INFO(loaded.status().to_string());
    REQUIRE(loaded.ok());
    CHECK(loaded->name() == "my-cluster");
    CHECK(num_devices(*loaded) == 16);
  }
}

TEST_CASE("a cluster file with a bad field is rejected naming the file and the field") {
  TempDir dir;
  Cluster c = preset("summit-v100");
  c.mutable_device()->set_memory_capacity_bytes(0);
  const std::string path = (dir.path / "bad.pbtxt").string();
  REQUIRE(gp::model::write_message(path, c).ok());
  auto loaded = load_cluster(path);
  REQUIRE_FALSE(loaded.ok());
  CHECK(gp::exit_code_for(loaded.status()) == 2);
  CHECK_THAT(loaded.status().message(), Catch::Contains(path));
  CHECK_THAT(
      loaded.status().message(),
      Catch::Contains("cluster 'summit-v100': device.memory_capacity_bytes = 0, must be > 0"));
}

TEST_CASE("a missing cluster file is an error naming the path") {
  auto loaded = load_cluster("/nonexistent/dir/cluster.pbtxt");
  REQUIRE_FALSE(loaded.ok());
  CHECK_THAT(loaded.status().message(), Catch::Contains("/nonexistent/dir/cluster.pbtxt"));
}

TEST_CASE("GP_CONFIG_DIR redirects the preset directory") {
  TempDir dir;
  fs::create_directories(dir.path / "clusters");
  Cluster c = preset("cpu-local");
  c.set_name("two-ranks");
  c.set_devices_per_node(2);
  REQUIRE(gp::model::write_message((dir.path / "clusters" / "two-ranks.pbtxt").string(), c).ok());
  ScopedEnv env("GP_CONFIG_DIR", dir.path.string());
  CHECK(cluster_config_dir() == (dir.path / "clusters").string());
  CHECK(cluster_preset_names() == std::vector<std::string>{"two-ranks"});
  auto loaded = load_cluster("two-ranks");
  REQUIRE(loaded.ok());
  CHECK(num_devices(*loaded) == 2);
  CHECK_FALSE(load_cluster("summit-v100").ok());
}

TEST_CASE("validation names each bad field and its value") {
  const Cluster good = preset("summit-v100");
  struct Case {
    std::function<void(Cluster&)> mutate;
    std::string expected;
  };
  const std::vector<Case> cases = {
      {[](Cluster& c) { c.set_num_nodes(0); }, "cluster 'summit-v100': num_nodes = 0, must be > 0"},
      {[](Cluster& c) { c.set_devices_per_node(-1); }, "devices_per_node = -1, must be > 0"},
      {[](Cluster& c) { c.mutable_device()->clear_name(); }, "device.name is empty"},
      {[](Cluster& c) { c.mutable_device()->clear_type(); },
       "device.type = DEVICE_TYPE_UNSPECIFIED, expected DEVICE_TYPE_CPU or DEVICE_TYPE_CUDA"},
      {[](Cluster& c) { c.mutable_device()->set_peak_fp32_flops(0); },
       "device.peak_fp32_flops = 0, must be > 0"},
      {[](Cluster& c) { c.mutable_device()->set_peak_tf32_flops(-1); },
       "device.peak_tf32_flops = -1, must be >= 0"},
      {[](Cluster& c) { c.mutable_device()->set_peak_bf16_flops(-5); },
       "device.peak_bf16_flops = -5, must be >= 0"},
      {[](Cluster& c) { c.mutable_device()->set_memory_bandwidth_bytes_per_s(0); },
       "device.memory_bandwidth_bytes_per_s = 0, must be > 0"},
      {[](Cluster& c) { c.mutable_device()->set_memory_capacity_bytes(-3); },
       "device.memory_capacity_bytes = -3, must be > 0"},
      {[](Cluster& c) { c.mutable_device()->set_kernel_launch_overhead_us(-1); },
       "device.kernel_launch_overhead_us = -1, must be >= 0"},
      {[](Cluster& c) { c.mutable_intra_node()->set_bandwidth_bytes_per_s(0); },
       "intra_node.bandwidth_bytes_per_s = 0, must be > 0"},
      {[](Cluster& c) { c.mutable_intra_node()->set_latency_us(-0.5); },
       "intra_node.latency_us = -0.5, must be >= 0"},
      {[](Cluster& c) { c.mutable_inter_node()->set_bandwidth_bytes_per_s(-1); },
       "inter_node.bandwidth_bytes_per_s = -1, must be > 0"},
      {[](Cluster& c) { c.mutable_inter_node()->set_latency_us(-2); },
       "inter_node.latency_us = -2, must be >= 0"},
      {[](Cluster& c) { c.mutable_inter_node()->set_latency_us(INFINITY); },
       "inter_node.latency_us = inf, must be >= 0 and finite"},
      {[](Cluster& c) { c.mutable_device()->set_kernel_launch_overhead_us(INFINITY); },
       "device.kernel_launch_overhead_us = inf, must be >= 0 and finite"},
      {[](Cluster& c) { c.mutable_device()->set_peak_fp32_flops(INFINITY); },
       "device.peak_fp32_flops = inf, must be > 0 and finite"},
      {[](Cluster& c) { c.add_excluded_ranks(32); },
       "excluded_ranks[0] = 32, out of range [0, 32)"},
      {[](Cluster& c) { c.add_excluded_ranks(-1); }, "excluded_ranks[0] = -1, out of range"},
      {[](Cluster& c) {
         c.add_excluded_ranks(5);
         c.add_excluded_ranks(7);
         c.add_excluded_ranks(5);
       },
       "excluded_ranks[2] = 5 repeats excluded_ranks[0]"},
      {[](Cluster& c) {
         c.set_num_nodes(1);
         c.set_devices_per_node(2);
         c.add_excluded_ranks(0);
         c.add_excluded_ranks(1);
       },
       "every one of the 2 devices is excluded"},
  };
  REQUIRE(validate_cluster(good).ok());
  for (const auto& tc : cases) {
    INFO(tc.expected);
    Cluster c = good;
    tc.mutate(c);
    CHECK_THAT(validation_error(c), Catch::Contains(tc.expected));
  }
}

TEST_CASE("numbers no device or link has are refused naming the field and its range") {
  const Cluster good = preset("summit-v100");
  struct Case {
    std::function<void(Cluster&)> mutate;
    std::string expected;
  };
  const std::vector<Case> cases = {
      {[](Cluster& c) { c.mutable_device()->set_kernel_launch_overhead_us(1e300); },
       "device.kernel_launch_overhead_us = 1e+300, must be in [0, 1e+06] microseconds: at most "
       "1 s"},
      {[](Cluster& c) { c.mutable_device()->set_peak_fp32_flops(1e-300); },
       "device.peak_fp32_flops = 1e-300, must be in [1e+06, 1e+18] FLOP/s"},
      {[](Cluster& c) { c.mutable_device()->set_peak_bf16_flops(1e19); },
       "device.peak_bf16_flops = 1e+19, must be in [1e+06, 1e+18]"},
      {[](Cluster& c) { c.mutable_device()->set_memory_bandwidth_bytes_per_s(1e16); },
       "device.memory_bandwidth_bytes_per_s = 1e+16, must be in [1000, 1e+15] bytes/s"},
      {[](Cluster& c) { c.mutable_device()->set_memory_capacity_bytes(int64_t{1} << 60); },
       "device.memory_capacity_bytes = 1.15292e+18, must be in [1, "},
      {[](Cluster& c) { c.mutable_intra_node()->set_bandwidth_bytes_per_s(1e300); },
       "intra_node.bandwidth_bytes_per_s = 1e+300, must be in [1000, 1e+15]"},
      {[](Cluster& c) { c.mutable_inter_node()->set_bandwidth_bytes_per_s(0.5); },
       "inter_node.bandwidth_bytes_per_s = 0.5, must be in [1000, 1e+15]"},
      {[](Cluster& c) { c.mutable_inter_node()->set_latency_us(2e6); },
       "inter_node.latency_us = 2e+06, must be in [0, 1e+06]"},
  };
  for (const auto& tc : cases) {
    INFO(tc.expected);
    Cluster c = good;
    tc.mutate(c);
    CHECK_THAT(validation_error(c), Catch::Contains(tc.expected));
  }
  Cluster unsupported = good;  // 0: no TF32 or BF16 units, as the CPU preset says
  unsupported.mutable_device()->set_peak_tf32_flops(0);
  unsupported.mutable_device()->set_peak_bf16_flops(0);
  CHECK(validate_cluster(unsupported).ok());
}

TEST_CASE("ranks are node-major") {
  Cluster c = preset("summit-v100");
  CHECK(node_of(c, 0) == 0);
  CHECK(node_of(c, 3) == 0);
  CHECK(node_of(c, 4) == 1);
  CHECK(node_of(c, 31) == 7);
  CHECK(same_node(c, 4, 7));
  CHECK_FALSE(same_node(c, 3, 4));
}

TEST_CASE("selecting 4 devices of summit gives one node of 4") {
  auto s = select_devices(preset("summit-v100"), 4);
  REQUIRE(s.ok());
  CHECK(s->num_nodes() == 1);
  CHECK(s->devices_per_node() == 4);
  CHECK(s->excluded_ranks_size() == 0);
  CHECK(num_devices(*s) == 4);
  CHECK(s->device().name() == "V100-SXM2-16GB");
}

TEST_CASE("selecting fewer devices than a node holds gives one smaller node") {
  auto s = select_devices(preset("dgx-h100"), 3);
  REQUIRE(s.ok());
  CHECK(s->num_nodes() == 1);
  CHECK(s->devices_per_node() == 3);
  CHECK(num_devices(*s) == 3);
}

TEST_CASE("selecting 8 devices of summit gives two whole nodes") {
  auto s = select_devices(preset("summit-v100"), 8);
  REQUIRE(s.ok());
  CHECK(s->num_nodes() == 2);
  CHECK(s->devices_per_node() == 4);
  CHECK(s->excluded_ranks_size() == 0);
  CHECK(num_devices(*s) == 8);
  CHECK_FALSE(same_node(*s, 3, 4));
}

TEST_CASE("selecting 6 devices of summit keeps one whole node and half of the next") {
  auto s = select_devices(preset("summit-v100"), 6);
  REQUIRE(s.ok());
  CHECK(validate_cluster(*s).ok());
  CHECK(num_devices(*s) == 6);
  CHECK(s->devices_per_node() == 4);
  CHECK(s->num_nodes() == 2);
  CHECK(excluded(*s) == std::vector<int>{6, 7});
  CHECK(same_node(*s, 0, 3));
  CHECK(same_node(*s, 4, 5));
  CHECK_FALSE(same_node(*s, 3, 4));
}

TEST_CASE("selecting all devices returns the cluster unchanged") {
  Cluster c = preset("summit-v100");
  auto s = select_devices(c, 32);
  REQUIRE(s.ok());
  CHECK(s->num_nodes() == 8);
  CHECK(num_devices(*s) == 32);
}

TEST_CASE("selecting more devices than the cluster has is an error naming both counts") {
  auto s = select_devices(preset("summit-v100"), 33);
  REQUIRE_FALSE(s.ok());
  CHECK(s.status().code() == gp::StatusCode::kInvalidArgument);
  CHECK_THAT(s.status().message(), Catch::Contains("devices = 33"));
  CHECK_THAT(s.status().message(), Catch::Contains("has 32 usable devices"));
  CHECK_THAT(s.status().message(), Catch::Contains("8 nodes x 4"));

  auto zero = select_devices(preset("summit-v100"), 0);
  REQUIRE_FALSE(zero.ok());
  CHECK_THAT(zero.status().message(), Catch::Contains("devices = 0"));
}

TEST_CASE("selection skips excluded devices and prefers whole nodes") {
  Cluster c = preset("summit-v100");
  c.add_excluded_ranks(1);  // node 0 has 3 usable devices
  REQUIRE(num_devices(c) == 31);

  // 4 devices: node 1 is whole, so the group fits on one node.
  auto four = select_devices(c, 4);
  REQUIRE(four.ok());
  CHECK(four->num_nodes() == 1);
  CHECK(four->devices_per_node() == 4);

  // 6 devices: whole node 1, then two devices of node 2; node 0 is not used.
  auto six = select_devices(c, 6);
  REQUIRE(six.ok());
  CHECK(num_devices(*six) == 6);
  CHECK(six->num_nodes() == 3);
  CHECK(excluded(*six) == std::vector<int>{0, 1, 2, 3, 10, 11});

  // 31 devices: every usable one; the failed rank stays excluded.
  auto all = select_devices(c, 31);
  REQUIRE(all.ok());
  CHECK(all->num_nodes() == 8);
  CHECK(excluded(*all) == std::vector<int>{1});

  auto too_many = select_devices(c, 32);
  REQUIRE_FALSE(too_many.ok());
  CHECK_THAT(too_many.status().message(), Catch::Contains("has 31 usable devices"));
  CHECK_THAT(too_many.status().message(), Catch::Contains("1 excluded"));
}

TEST_CASE("ranks are dense over the usable devices and node_of maps them through the holes") {
  Cluster c = preset("summit-v100");  // 8 nodes x 4
  c.add_excluded_ranks(5);
  c.add_excluded_ranks(1);
  CHECK(physical_device(c, 0) == 0);
  CHECK(physical_device(c, 1) == 2);  // skips 1
  CHECK(physical_device(c, 3) == 4);
  CHECK(physical_device(c, 4) == 6);  // skips 1 and 5
  CHECK(node_of(c, 2) == 0);          // physical 3
  CHECK(node_of(c, 3) == 1);          // physical 4
  CHECK_FALSE(same_node(c, 2, 3));
  // A selection with a partly used node keeps its holes; plan ranks 0..n-1 still address it.
  auto eleven = select_devices(c, 11);
  REQUIRE(eleven.ok());
  CHECK(num_devices(*eleven) == 11);
  for (int r = 0; r < 11; ++r) {
    const int p = physical_device(*eleven, r);
    CHECK(std::count(eleven->excluded_ranks().begin(), eleven->excluded_ranks().end(), p) == 0);
  }
}

TEST_CASE("selecting from an invalid cluster reports the validation error") {
  Cluster c = preset("summit-v100");
  c.set_devices_per_node(0);
  auto s = select_devices(c, 4);
  REQUIRE_FALSE(s.ok());
  CHECK_THAT(s.status().message(), Catch::Contains("devices_per_node = 0"));
}
