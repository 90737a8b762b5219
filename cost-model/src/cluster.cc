// Cluster presets, loading, validation and device selection.
#include "gp/cost/cluster.h"

#include <google/protobuf/util/message_differencer.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include "gp/model/model_io.h"

#ifndef GP_SOURCE_CONFIG_DIR
#define GP_SOURCE_CONFIG_DIR ""
#endif

namespace gp::cost {
namespace fs = std::filesystem;

namespace {

std::string prefix_of(const Cluster& c) {
  return c.name().empty() ? std::string("cluster") : "cluster '" + c.name() + "'";
}

std::string num(double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%g", v);
  return buf;
}

// "cluster 'x': FIELD = VALUE, must be > 0 and finite" unless 0 < value < inf (NaN fails too:
// an infinite bandwidth or latency makes every time 0 or inf, and plans meaningless).
Status require_positive(const Cluster& c, std::string_view field, double value) {
  if (value > 0 && std::isfinite(value)) return ok_status();
  return invalid_argument(prefix_of(c) + ": " + std::string(field) + " = " + num(value) +
                          ", must be > 0 and finite");
}

Status require_non_negative(const Cluster& c, std::string_view field, double value) {
  if (value >= 0 && std::isfinite(value)) return ok_status();
  return invalid_argument(prefix_of(c) + ": " + std::string(field) + " = " + num(value) +
                          ", must be >= 0 and finite");
}

// Bounds no real device or link reaches: a larger number is a typo or a unit slip (and a tiny
// rate or huge time makes every predicted time infinite). A rate of 0 means "unsupported" only
// where require_rate says so.
struct Range {
  double lo, hi;
  const char* why;
};
constexpr Range kFlops{1e6, 1e18, "FLOP/s: no device computes beyond 1e18 or below 1e6"};
constexpr Range kBandwidth{1e3, 1e15, "bytes/s: no memory or link moves beyond 1e15 or below 1e3"};
constexpr Range kTimeUs{0, 1e6, "microseconds: at most 1 s"};
constexpr Range kCapacity{1, 1125899906842624.0, "bytes: at most 1 PiB"};

Status require_range(const Cluster& c, std::string_view field, double value, const Range& r) {
  if (value >= r.lo && value <= r.hi) return ok_status();
  return invalid_argument(prefix_of(c) + ": " + std::string(field) + " = " + num(value) +
                          ", must be in [" + num(r.lo) + ", " + num(r.hi) + "] " + r.why);
}

// > 0 and finite (the long-standing message), then within `r`; 0 passes when `zero_ok`.
Status require_rate(const Cluster& c, std::string_view field, double value, const Range& r,
                    bool zero_ok = false) {
  if (zero_ok && value == 0) return ok_status();
  GP_RETURN_IF_ERROR(zero_ok ? require_non_negative(c, field, value)
                             : require_positive(c, field, value));
  return require_range(c, field, value, r);
}

Status require_time_us(const Cluster& c, std::string_view field, double value) {
  GP_RETURN_IF_ERROR(require_non_negative(c, field, value));
  return require_range(c, field, value, kTimeUs);
}

std::string join(const std::vector<std::string>& items, std::string_view sep) {
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) {
    if (i > 0) out += sep;
    out += items[i];
  }
  return out;
}

// A preset name has no directory part and no extension: "summit-v100", not "x.pbtxt".
bool is_preset_name(std::string_view s) {
  if (s.empty() || s.find('/') != std::string_view::npos) return false;
  return fs::path(std::string(s)).extension().empty();
}

}  // namespace

std::string cluster_config_dir() {
  if (const char* env = std::getenv("GP_CONFIG_DIR"); env != nullptr && *env != '\0') {
    return (fs::path(env) / "clusters").string();
  }
  std::error_code ec;
  // Installed layout first (<prefix>/bin/<exe>, <prefix>/share/graphpipe/clusters): an installed
  // binary reads the presets installed with it, even while its source tree still exists.
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    const fs::path installed =
        (exe.parent_path() / ".." / "share" / "graphpipe" / "clusters").lexically_normal();
    if (fs::is_directory(installed, ec)) return installed.string();
  }
  return (fs::path(GP_SOURCE_CONFIG_DIR) / "clusters").string();
}

std::vector<std::string> cluster_preset_names() {
  std::vector<std::string> names;
  std::error_code ec;
  for (fs::directory_iterator it(cluster_config_dir(), ec), end; !ec && it != end;
       it.increment(ec)) {
    const fs::path& p = it->path();
    if (p.extension() == ".pbtxt" && it->is_regular_file(ec)) names.push_back(p.stem().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

Result<Cluster> load_cluster(std::string_view preset_or_path) {
  Cluster cluster;
  std::string path(preset_or_path);
  const bool preset = is_preset_name(preset_or_path);
  if (preset) {
    path = (fs::path(cluster_config_dir()) / (path + ".pbtxt")).string();
    std::error_code ec;
    if (!fs::is_regular_file(path, ec)) {
      const auto names = cluster_preset_names();
      return invalid_argument("unknown cluster preset '" + std::string(preset_or_path) +
                              "' (presets: " + (names.empty() ? "none found" : join(names, ", ")) +
                              " in " + cluster_config_dir() +
                              "; or give a path to a .pbtxt, .json or .pb Cluster file)");
    }
  }
  GP_RETURN_IF_ERROR(model::read_message(path, &cluster));
  if (cluster.name().empty()) cluster.set_name(fs::path(path).stem().string());
  GP_RETURN_IF_ERROR(validate_cluster(cluster).with_context(path));
  return cluster;
}

namespace {

// A device kind's fields, named under `field` ("device", "device_groups[1].device").
Status validate_kind(const Cluster& c, const std::string& field, const DeviceKind& d) {
  if (d.name().empty()) {
    return invalid_argument(prefix_of(c) + ": " + field +
                            ".name is empty; name the device kind, e.g. \"H100-SXM5-80GB\""
                            " (profile DBs are keyed by it)");
  }
  if (d.type() != graphpipe::v1::DEVICE_TYPE_CPU && d.type() != graphpipe::v1::DEVICE_TYPE_CUDA) {
    return invalid_argument(prefix_of(c) + ": " + field +
                            ".type = " + graphpipe::v1::DeviceType_Name(d.type()) +
                            ", expected DEVICE_TYPE_CPU or DEVICE_TYPE_CUDA");
  }
  GP_RETURN_IF_ERROR(require_rate(c, field + ".peak_fp32_flops", d.peak_fp32_flops(), kFlops));
  GP_RETURN_IF_ERROR(
      require_rate(c, field + ".peak_tf32_flops", d.peak_tf32_flops(), kFlops, true));
  GP_RETURN_IF_ERROR(
      require_rate(c, field + ".peak_bf16_flops", d.peak_bf16_flops(), kFlops, true));
  GP_RETURN_IF_ERROR(require_rate(c, field + ".memory_bandwidth_bytes_per_s",
                                  d.memory_bandwidth_bytes_per_s(), kBandwidth));
  GP_RETURN_IF_ERROR(require_rate(c, field + ".memory_capacity_bytes",
                                  static_cast<double>(d.memory_capacity_bytes()), kCapacity));
  return require_time_us(c, field + ".kernel_launch_overhead_us", d.kernel_launch_overhead_us());
}

Status validate_link(const Cluster& c, const std::string& field, const LinkSpec& link) {
  GP_RETURN_IF_ERROR(
      require_rate(c, field + ".bandwidth_bytes_per_s", link.bandwidth_bytes_per_s(), kBandwidth));
  return require_time_us(c, field + ".latency_us", link.latency_us());
}

// Device groups: kinds and links as the cluster's own, indices in range, each device in at most
// one group, and one definition per kind name.
Status validate_groups(const Cluster& c, int64_t total) {
  std::map<std::string, std::pair<const DeviceKind*, std::string>> kinds;  // name -> first, field
  kinds[c.device().name()] = {&c.device(), "device"};
  std::vector<std::string> claimed(static_cast<size_t>(total));  // the field that took a device
  for (int g = 0; g < c.device_groups_size(); ++g) {
    const auto& group = c.device_groups(g);
    const std::string at = "device_groups[" + std::to_string(g) + "]";
    GP_RETURN_IF_ERROR(validate_kind(c, at + ".device", group.device()));
    if (group.has_intra_node()) {
      GP_RETURN_IF_ERROR(validate_link(c, at + ".intra_node", group.intra_node()));
    }
    if (group.has_inter_node()) {
      GP_RETURN_IF_ERROR(validate_link(c, at + ".inter_node", group.inter_node()));
    }
    if (group.nodes_size() == 0 && group.devices_size() == 0) {
      return invalid_argument(prefix_of(c) + ": " + at +
                              " lists no nodes and no devices; give the nodes or the devices "
                              "(node * devices_per_node + local) of this kind");
    }
    auto claim = [&](int64_t physical, const std::string& field) -> Status {
      std::string& first = claimed[static_cast<size_t>(physical)];
      if (!first.empty()) {
        return invalid_argument(prefix_of(c) + ": " + field + ": device " +
                                std::to_string(physical) + " is already in " + first +
                                "; a device belongs to one group at most");
      }
      first = field;
      return ok_status();
    };
    for (int i = 0; i < group.nodes_size(); ++i) {
      const int node = group.nodes(i);
      const std::string field = at + ".nodes[" + std::to_string(i) + "] = " + std::to_string(node);
      if (node < 0 || node >= c.num_nodes()) {
        return invalid_argument(prefix_of(c) + ": " + field + ", out of range [0, " +
                                std::to_string(c.num_nodes()) + ") (num_nodes)");
      }
      for (int local = 0; local < c.devices_per_node(); ++local) {
        GP_RETURN_IF_ERROR(claim(static_cast<int64_t>(node) * c.devices_per_node() + local, field));
      }
    }
    for (int i = 0; i < group.devices_size(); ++i) {
      const int dev = group.devices(i);
      const std::string field = at + ".devices[" + std::to_string(i) + "] = " + std::to_string(dev);
      if (dev < 0 || dev >= total) {
        return invalid_argument(prefix_of(c) + ": " + field + ", out of range [0, " +
                                std::to_string(total) + ") (num_nodes * devices_per_node)");
      }
      GP_RETURN_IF_ERROR(claim(dev, field));
    }
    const auto [it, added] =
        kinds.try_emplace(group.device().name(), &group.device(), at + ".device");
    if (!added &&
        !google::protobuf::util::MessageDifferencer::Equals(*it->second.first, group.device())) {
      return invalid_argument(prefix_of(c) + ": " + at + ".device.name = '" +
                              group.device().name() + "' names a kind that " + it->second.second +
                              " defines differently; kinds of one name must be identical "
                              "(profiles and cost models are keyed by the name)");
    }
  }
  return ok_status();
}

// The group holding a physical device (-1: none, the cluster's `device`).
int group_of_physical(const Cluster& c, int physical) {
  const int node = physical / c.devices_per_node();
  for (int g = 0; g < c.device_groups_size(); ++g) {
    const auto& group = c.device_groups(g);
    if (std::find(group.devices().begin(), group.devices().end(), physical) !=
            group.devices().end() ||
        std::find(group.nodes().begin(), group.nodes().end(), node) != group.nodes().end()) {
      return g;
    }
  }
  return -1;
}

}  // namespace

Status validate_cluster(const Cluster& c) {
  GP_RETURN_IF_ERROR(require_positive(c, "num_nodes", c.num_nodes()));
  GP_RETURN_IF_ERROR(require_positive(c, "devices_per_node", c.devices_per_node()));
  GP_RETURN_IF_ERROR(validate_kind(c, "device", c.device()));
  GP_RETURN_IF_ERROR(validate_link(c, "intra_node", c.intra_node()));
  GP_RETURN_IF_ERROR(validate_link(c, "inter_node", c.inter_node()));

  const int64_t total = static_cast<int64_t>(c.num_nodes()) * c.devices_per_node();
  // Bounds what validation itself allocates (one entry per device) and every rank count after it.
  constexpr int64_t kMaxDevices = int64_t{1} << 20;
  if (total > kMaxDevices) {
    return invalid_argument(
        prefix_of(c) + ": num_nodes * devices_per_node = " + std::to_string(total) +
        " devices, more than the " + std::to_string(kMaxDevices) + " supported");
  }
  std::vector<int> first_at(static_cast<size_t>(total), -1);
  for (int i = 0; i < c.excluded_ranks_size(); ++i) {
    const int r = c.excluded_ranks(i);
    const std::string field = "excluded_ranks[" + std::to_string(i) + "] = " + std::to_string(r);
    if (r < 0 || r >= total) {
      return invalid_argument(prefix_of(c) + ": " + field + ", out of range [0, " +
                              std::to_string(total) + ")");
    }
    if (first_at[static_cast<size_t>(r)] >= 0) {
      return invalid_argument(prefix_of(c) + ": " + field + " repeats excluded_ranks[" +
                              std::to_string(first_at[static_cast<size_t>(r)]) + "]");
    }
    first_at[static_cast<size_t>(r)] = i;
  }
  if (c.excluded_ranks_size() >= total) {
    return invalid_argument(prefix_of(c) + ": every one of the " + std::to_string(total) +
                            " devices is excluded");
  }
  return validate_groups(c, total);
}

const DeviceKind& device_of_physical(const Cluster& c, int physical) {
  const int g = group_of_physical(c, physical);
  return g < 0 ? c.device() : c.device_groups(g).device();
}

const DeviceKind& device_of_rank(const Cluster& c, int rank) {
  if (c.device_groups_size() == 0) return c.device();
  return device_of_physical(c, physical_device(c, rank));
}

const LinkSpec& intra_link_of_rank(const Cluster& c, int rank) {
  if (c.device_groups_size() == 0) return c.intra_node();
  const int g = group_of_physical(c, physical_device(c, rank));
  return g >= 0 && c.device_groups(g).has_intra_node() ? c.device_groups(g).intra_node()
                                                       : c.intra_node();
}

const LinkSpec& inter_link_of_rank(const Cluster& c, int rank) {
  if (c.device_groups_size() == 0) return c.inter_node();
  const int g = group_of_physical(c, physical_device(c, rank));
  return g >= 0 && c.device_groups(g).has_inter_node() ? c.device_groups(g).inter_node()
                                                       : c.inter_node();
}

double device_speed(const DeviceKind& kind) {
  // Memory bandwidth breaks ties only: scaled far below any FLOP/s difference of real kinds.
  return kind.peak_fp32_flops() + kind.memory_bandwidth_bytes_per_s() * 1e-9;
}

std::vector<std::string> device_kind_names(const Cluster& c) {
  std::map<std::string, double> speed;
  if (c.device_groups_size() == 0) return {c.device().name()};
  const std::set<int> excluded(c.excluded_ranks().begin(), c.excluded_ranks().end());
  const int total = c.num_nodes() * c.devices_per_node();
  for (int p = 0; p < total; ++p) {
    if (excluded.count(p)) continue;
    const DeviceKind& d = device_of_physical(c, p);
    speed.emplace(d.name(), device_speed(d));
  }
  std::vector<std::string> names;
  for (const auto& [name, v] : speed) names.push_back(name);
  std::stable_sort(names.begin(), names.end(),
                   [&](const std::string& a, const std::string& b) { return speed[a] > speed[b]; });
  return names;
}

const DeviceKind* find_device_kind(const Cluster& c, std::string_view name) {
  if (c.device().name() == name) return &c.device();
  for (const auto& g : c.device_groups()) {
    if (g.device().name() == name) return &g.device();
  }
  return nullptr;
}

bool is_mixed(const Cluster& c) {
  return c.device_groups_size() > 0 && device_kind_names(c).size() > 1;
}

int num_devices(const Cluster& c) {
  return c.num_nodes() * c.devices_per_node() - c.excluded_ranks_size();
}

int physical_device(const Cluster& c, int rank) {
  // Excluded ranks in ascending order; each one at or below the running position shifts it.
  std::vector<int> excluded(c.excluded_ranks().begin(), c.excluded_ranks().end());
  std::sort(excluded.begin(), excluded.end());
  int physical = rank;
  for (int e : excluded) {
    if (e <= physical) ++physical;
  }
  return physical;
}

int node_of(const Cluster& c, int rank) { return physical_device(c, rank) / c.devices_per_node(); }

bool same_node(const Cluster& c, int rank_a, int rank_b) {
  return node_of(c, rank_a) == node_of(c, rank_b);
}

// Choice of devices: whole nodes first. Nodes are visited by usable-device count (most first,
// ties by node index) and each gives its lowest usable local devices until `n` are taken, so
// the selection spans as few nodes as possible.
//
// Representation of the result, as faithful to the topology as the nodes x devices_per_node
// format allows:
//   * the chosen devices sit on one node        -> 1 node of n devices, ranks 0..n-1;
//   * they fill n / devices_per_node whole nodes -> that many nodes, ranks 0..n-1;
//   * otherwise (a partly used node, or exclusions in the chosen nodes) the physical ranks are
//     kept: devices_per_node stays, num_nodes shrinks to the last node used, and every device
//     not chosen is listed in excluded_ranks. Ranks are then not dense; iterate over the ranks
//     that are not excluded.
// Plans number the selected devices densely either way: plan rank k is the k-th usable device
// (physical_device), and node_of maps it to its node.
Result<Cluster> select_devices(const Cluster& cluster, int n, std::vector<int>* chosen_ranks) {
  GP_RETURN_IF_ERROR(validate_cluster(cluster));
  const int available = num_devices(cluster);
  if (n < 1 || n > available) {
    return invalid_argument("devices = " + std::to_string(n) + ": " + prefix_of(cluster) + " has " +
                            std::to_string(available) + " usable devices (" +
                            std::to_string(cluster.num_nodes()) + " nodes x " +
                            std::to_string(cluster.devices_per_node()) + ", " +
                            std::to_string(cluster.excluded_ranks_size()) +
                            " excluded); ask for 1 to " + std::to_string(available));
  }
  const int dpn = cluster.devices_per_node();
  const std::set<int> excluded(cluster.excluded_ranks().begin(), cluster.excluded_ranks().end());
  std::vector<int> usable(static_cast<size_t>(cluster.num_nodes()), 0);
  for (int node = 0; node < cluster.num_nodes(); ++node) {
    for (int local = 0; local < dpn; ++local) {
      usable[static_cast<size_t>(node)] += excluded.count(node * dpn + local) ? 0 : 1;
    }
  }
  std::vector<int> order(usable.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int>(i);
  // Mixed clusters asked for fewer devices than they have: the fastest first (the planner drops
  // the slowest devices first), nodes by their fastest usable device, devices in a node fastest
  // first. Homogeneous clusters keep the physical order.
  const bool fastest_first = n < available && is_mixed(cluster);
  std::vector<double> node_speed(usable.size(), 0);
  if (fastest_first) {
    for (int node = 0; node < cluster.num_nodes(); ++node) {
      for (int local = 0; local < dpn; ++local) {
        const int p = node * dpn + local;
        if (excluded.count(p)) continue;
        node_speed[static_cast<size_t>(node)] = std::max(
            node_speed[static_cast<size_t>(node)], device_speed(device_of_physical(cluster, p)));
      }
    }
  }
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    const auto ua = static_cast<size_t>(a), ub = static_cast<size_t>(b);
    if (node_speed[ua] != node_speed[ub]) return node_speed[ua] > node_speed[ub];
    return usable[ua] > usable[ub];
  });

  std::set<int> chosen;             // physical ranks
  std::vector<int> taken_per_node;  // devices taken from each node used, in visiting order
  int last_node = 0;
  for (int node : order) {
    if (static_cast<int>(chosen.size()) == n) break;
    int taken = 0;
    std::vector<int> locals(static_cast<size_t>(dpn));
    for (int local = 0; local < dpn; ++local) locals[static_cast<size_t>(local)] = local;
    if (fastest_first) {
      std::stable_sort(locals.begin(), locals.end(), [&](int a, int b) {
        return device_speed(device_of_physical(cluster, node * dpn + a)) >
               device_speed(device_of_physical(cluster, node * dpn + b));
      });
    }
    for (int local : locals) {
      if (static_cast<int>(chosen.size()) >= n) break;
      const int rank = node * dpn + local;
      if (excluded.count(rank)) continue;
      chosen.insert(rank);
      ++taken;
    }
    if (taken > 0) {
      taken_per_node.push_back(taken);
      last_node = std::max(last_node, node);
    }
  }

  Cluster out = cluster;
  out.clear_excluded_ranks();
  bool physical_kept = false;  // the result keeps the physical indices (else dense 0..n-1)
  if (taken_per_node.size() == 1) {
    out.set_num_nodes(1);
    out.set_devices_per_node(n);
  } else if (std::all_of(taken_per_node.begin(), taken_per_node.end(),
                         [&](int t) { return t == dpn; })) {
    out.set_num_nodes(static_cast<int>(taken_per_node.size()));
  } else {
    physical_kept = true;
    out.set_num_nodes(last_node + 1);
    for (int rank = 0; rank < (last_node + 1) * dpn; ++rank) {
      if (!chosen.count(rank)) out.add_excluded_ranks(rank);
    }
  }
  // The result's dense rank k is the k-th chosen device in physical order.
  if (chosen_ranks != nullptr) {
    chosen_ranks->clear();
    for (int p : chosen) {
      const auto below = std::distance(excluded.begin(), excluded.lower_bound(p));
      chosen_ranks->push_back(p - static_cast<int>(below));
    }
  }
  // Groups follow their devices, listed by their new physical index.
  out.clear_device_groups();
  for (int g = 0; g < cluster.device_groups_size(); ++g) {
    graphpipe::v1::DeviceGroup group = cluster.device_groups(g);
    group.clear_nodes();
    group.clear_devices();
    int k = 0;
    for (int p : chosen) {
      if (group_of_physical(cluster, p) == g) group.add_devices(physical_kept ? p : k);
      ++k;
    }
    if (group.devices_size() > 0) *out.add_device_groups() = std::move(group);
  }
  return out;
}

}  // namespace gp::cost
