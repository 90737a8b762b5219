// Cluster specs: presets shipped in configs/clusters/*.pbtxt, loading, validation and device
// selection. Ranks are node-major: rank = node * devices_per_node + local index.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "gp/common/status.h"
#include "graphpipe/v1/cluster.pb.h"

namespace gp::cost {

using ::graphpipe::v1::Cluster;
using ::graphpipe::v1::DeviceKind;
using ::graphpipe::v1::LinkSpec;

// Names of the shipped presets: summit-v100, dgx-a100, dgx-h100, h200, cpu-local.
std::vector<std::string> cluster_preset_names();

// A preset name (looked up in the configs/clusters directory, see cluster_config_dir()) or a
// path to a .pbtxt/.json/.pb Cluster file. Validated before returning.
Result<Cluster> load_cluster(std::string_view preset_or_path);

// Directory holding the preset files: $GP_CONFIG_DIR/clusters if set, else the source tree's
// configs/clusters (compiled in), else <executable dir>/../share/graphpipe/clusters.
std::string cluster_config_dir();

// Errors name the field: "cluster.devices_per_node = 0, must be > 0". Numbers no real device or
// link has are refused with their range: FLOP/s in [1e6, 1e18] (tf32 and bf16 may be 0:
// unsupported), memory and link bandwidths in [1e3, 1e15] bytes/s, capacity at most 1 PiB,
// kernel_launch_overhead_us and latencies in [0, 1e6] (1 s).
Status validate_cluster(const Cluster& cluster);

// The first `num_devices` usable devices (whole nodes first, excluded ranks skipped), renumbered
// densely. Error when the cluster has fewer usable devices than asked.
Result<Cluster> select_devices(const Cluster& cluster, int num_devices);

int num_devices(const Cluster& cluster);  // num_nodes * devices_per_node - excluded
// Ranks (in plans, and in the cost models) are dense: rank k is the k-th device that is not
// excluded, in physical order (node * devices_per_node + local).
int physical_device(const Cluster& cluster, int rank);
int node_of(const Cluster& cluster, int rank);
bool same_node(const Cluster& cluster, int rank_a, int rank_b);

}  // namespace gp::cost
