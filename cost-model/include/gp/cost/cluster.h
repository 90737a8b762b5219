// Cluster specs: presets shipped in configs/clusters/*.pbtxt, loading, validation and device
// selection. Ranks are node-major: rank = node * devices_per_node + local index.
//
// Mixed clusters (Cluster.device_groups): a device listed in a group (by its node or by its
// physical index) is of the group's kind and uses the group's links where the group sets them;
// every other device is `device` with the cluster's links. Kinds are keyed by name: two kinds of
// one name must be identical (profile DBs and per-kind cost models are looked up by it).
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

// Names of the shipped presets: summit-v100, dgx-a100, dgx-h100, h200, cpu-local,
// mixed-v100-a100, mixed-a100-h100.
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
// kernel_launch_overhead_us and latencies in [0, 1e6] (1 s). Each device group's kind and links
// are checked as `device` and the cluster's links are ("device_groups[1].device.name ..."); its
// node and device indices must be in range, no device may be in two groups (or twice in one),
// and kinds of one name must be identical.
Status validate_cluster(const Cluster& cluster);

// `num_devices` usable devices (whole nodes first, excluded ranks skipped), renumbered densely.
// On a homogeneous cluster the first ones; on a mixed cluster the fastest (device_speed) when
// fewer than all are asked for: nodes by their fastest usable device, then by usable devices,
// and inside a node its fastest devices. The result's device groups list the chosen devices by
// their new physical index. `chosen`, when given, gets for each dense rank of the result the
// dense rank of `cluster` it is. Error when the cluster has fewer usable devices than asked.
Result<Cluster> select_devices(const Cluster& cluster, int num_devices,
                               std::vector<int>* chosen = nullptr);

// Per-device view of a (validated) cluster; `rank` is dense as everywhere else.
const DeviceKind& device_of_rank(const Cluster& cluster, int rank);
const DeviceKind& device_of_physical(const Cluster& cluster, int physical);
// The links a device uses: its group's where the group sets them, else the cluster's.
const LinkSpec& intra_link_of_rank(const Cluster& cluster, int rank);
const LinkSpec& inter_link_of_rank(const Cluster& cluster, int rank);
// What "faster" means when the planner ranks device kinds: peak fp32 FLOP/s, ties broken by
// memory bandwidth. One number per kind, so the ordering is the same for every model.
double device_speed(const DeviceKind& kind);
// The distinct kind names of the usable devices, fastest first (ties by name).
std::vector<std::string> device_kind_names(const Cluster& cluster);
// The usable devices' kind named `name` (nullptr when none is).
const DeviceKind* find_device_kind(const Cluster& cluster, std::string_view name);
// True when the usable devices are of more than one kind.
bool is_mixed(const Cluster& cluster);

int num_devices(const Cluster& cluster);  // num_nodes * devices_per_node - excluded
// Ranks (in plans, and in the cost models) are dense: rank k is the k-th device that is not
// excluded, in physical order (node * devices_per_node + local).
int physical_device(const Cluster& cluster, int rank);
int node_of(const Cluster& cluster, int rank);
bool same_node(const Cluster& cluster, int rank_a, int rank_b);

}  // namespace gp::cost
