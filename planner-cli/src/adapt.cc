#include "gp/planner/adapt.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>
#include <utility>

#include "gp/cost/cluster.h"
#include "gp/plan/plan_util.h"

namespace gp::planner {

ScaledCostModel::ScaledCostModel(std::shared_ptr<const cost::CostModel> base, double factor)
    : base_(std::move(base)), factor_(factor) {}

cost::OpTime ScaledCostModel::op_time(const model::OpNode& op, int64_t samples) const {
  cost::OpTime t = base_->op_time(op, samples);
  t.forward_us *= factor_;
  t.backward_us *= factor_;
  return t;
}

cost::OptimizerStepCost ScaledCostModel::optimizer_step_cost(
    const graphpipe::v1::DeviceKind& device, graphpipe::v1::OptimizerKind kind) const {
  // `device` is the measured kind, whose bandwidth and launch are already stretched
  // (cluster_with_measured_speeds): the base prices its own kind, stretched here once.
  graphpipe::v1::DeviceKind own = device;
  own.set_memory_bandwidth_bytes_per_s(device.memory_bandwidth_bytes_per_s() * factor_);
  own.set_kernel_launch_overhead_us(device.kernel_launch_overhead_us() / factor_);
  cost::OptimizerStepCost step = base_->optimizer_step_cost(own, kind);
  step.fixed_us *= factor_;
  step.per_tensor_us *= factor_;
  step.bytes_per_s /= factor_;
  for (int i = 0; i < step.points; ++i) step.point_bytes_per_s[i] /= factor_;
  return step;
}

namespace {
constexpr std::string_view kRankSuffix = "/rank";

std::string fixed(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.*f", digits, v);
  return buf;
}
}  // namespace

std::string measured_kind_name(std::string_view kind, int rank) {
  return std::string(kind) + std::string(kRankSuffix) + std::to_string(rank);
}

bool parse_measured_kind(std::string_view name, std::string* kind, int* rank) {
  const size_t at = name.rfind(kRankSuffix);
  if (at == std::string_view::npos || at == 0) return false;
  const std::string_view digits = name.substr(at + kRankSuffix.size());
  int value = -1;
  const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
  if (digits.empty() || ec != std::errc() || end != digits.data() + digits.size() || value < 0) {
    return false;
  }
  *kind = std::string(name.substr(0, at));
  *rank = value;
  return true;
}

Result<std::vector<RankSpeed>> measured_rank_speeds(
    const graphpipe::v1::Plan& plan, const model::Graph& graph,
    const graphpipe::v1::ProfileDB& measured,
    const std::function<const cost::CostModel&(int rank)>& model_of_rank) {
  GP_ASSIGN_OR_RETURN(const plan::PlanIndex index, plan::validate_plan(plan, graph));
  const auto& cluster = plan.cluster();
  std::set<std::string> kinds = {cluster.device().name()};
  for (const auto& g : cluster.device_groups()) {
    std::string base;
    int r = 0;
    kinds.insert(parse_measured_kind(g.device().name(), &base, &r) ? base : g.device().name());
  }
  // (signature, rank) -> the record.
  std::map<std::pair<std::string, int>, const graphpipe::v1::OpMeasurement*> records;
  for (int i = 0; i < measured.ops_size(); ++i) {
    const auto& m = measured.ops(i);
    std::string kind;
    int rank = -1;
    const std::string where =
        "measured profile: ops[" + std::to_string(i) + "].device_kind = '" + m.device_kind() + "'";
    if (!parse_measured_kind(m.device_kind(), &kind, &rank)) {
      return invalid_argument(where + ": not a running job's measurement (\"<kind>/rank<R>\")");
    }
    if (!kinds.count(kind)) {
      return invalid_argument(where + ": the plan's cluster '" + cluster.name() +
                              "' has no device kind '" + kind + "' (a profile of another job?)");
    }
    if (rank >= index.world_size) {
      return invalid_argument(where + ": the plan has only " + std::to_string(index.world_size) +
                              " ranks");
    }
    records[{m.signature(), rank}] = &m;
  }
  std::vector<RankSpeed> speeds;
  for (int r = 0; r < index.world_size; ++r) {
    const int stage = index.stage_of_rank[r];
    if (stage < 0) continue;
    RankSpeed s;
    s.rank = r;
    s.stage = stage;
    const cost::CostModel& model = model_of_rank(r);
    for (int op : index.stage_ops[stage]) {
      const auto& node = graph.op(op);
      auto it = records.find({cost::op_signature(node), r});
      if (it == records.end()) continue;
      const auto& m = *it->second;
      const cost::OpTime t = model.op_time(node, std::max<int64_t>(1, m.micro_batch()));
      s.measured_us += m.forward_time_us() + m.backward_time_us();
      s.modelled_us += t.forward_us + t.backward_us;
      ++s.ops;
    }
    if (s.ops == 0 || s.modelled_us <= 0 || s.measured_us <= 0) continue;
    s.factor = s.measured_us / s.modelled_us;
    speeds.push_back(s);
  }
  if (speeds.empty()) {
    return invalid_argument("measured profile: no measurement of any rank's stage ops (" +
                            std::to_string(measured.ops_size()) +
                            " records; was it written by a run of this plan?)");
  }
  double fastest = speeds.front().factor;
  for (const auto& s : speeds) fastest = std::min(fastest, s.factor);
  for (auto& s : speeds) s.relative = s.factor / fastest;
  return speeds;
}

graphpipe::v1::Cluster without_measured_kinds(const graphpipe::v1::Cluster& cluster) {
  graphpipe::v1::Cluster out = cluster;
  out.clear_device_groups();
  std::vector<std::pair<std::string, std::vector<int>>> returning;
  for (const auto& g : cluster.device_groups()) {
    std::string base;
    int rank = 0;
    if (!parse_measured_kind(g.device().name(), &base, &rank)) {
      *out.add_device_groups() = g;
      continue;
    }
    returning.emplace_back(base, std::vector<int>(g.devices().begin(), g.devices().end()));
  }
  for (const auto& [base, devices] : returning) {
    if (base == out.device().name()) continue;
    for (auto& g : *out.mutable_device_groups()) {
      if (g.device().name() != base) continue;
      for (int d : devices) g.add_devices(d);
      break;
    }
  }
  return out;
}

graphpipe::v1::Cluster cluster_with_measured_speeds(const graphpipe::v1::Cluster& cluster,
                                                    const std::vector<RankSpeed>& speeds,
                                                    double threshold) {
  graphpipe::v1::Cluster out = without_measured_kinds(cluster);
  for (const auto& s : speeds) {
    if (s.relative < threshold) continue;
    // The rank's own kind: the group that holds its device, else the cluster's.
    const int physical = cost::physical_device(out, s.rank);
    const int node = physical / std::max(1, out.devices_per_node());
    graphpipe::v1::DeviceKind kind = out.device();
    for (const auto& g : out.device_groups()) {
      const bool holds = std::count(g.devices().begin(), g.devices().end(), physical) > 0 ||
                         std::count(g.nodes().begin(), g.nodes().end(), node) > 0;
      if (holds) kind = g.device();
    }
    // Its device leaves whichever group held it: a device is in one group at most.
    for (auto& g : *out.mutable_device_groups()) {
      auto* devices = g.mutable_devices();
      devices->erase(std::remove(devices->begin(), devices->end(), physical), devices->end());
      if (std::count(g.nodes().begin(), g.nodes().end(), node) > 0) {
        // The node's other devices stay in the group, one by one.
        auto* nodes = g.mutable_nodes();
        nodes->erase(std::remove(nodes->begin(), nodes->end(), node), nodes->end());
        for (int local = 0; local < out.devices_per_node(); ++local) {
          const int d = node * out.devices_per_node() + local;
          if (d != physical) g.add_devices(d);
        }
      }
    }
    const double f = s.relative;
    auto* group = out.add_device_groups();
    group->add_devices(physical);
    graphpipe::v1::DeviceKind* k = group->mutable_device();
    *k = kind;
    k->set_name(measured_kind_name(kind.name(), s.rank));
    k->set_peak_fp32_flops(kind.peak_fp32_flops() / f);
    k->set_peak_tf32_flops(kind.peak_tf32_flops() / f);
    k->set_peak_bf16_flops(kind.peak_bf16_flops() / f);
    k->set_memory_bandwidth_bytes_per_s(kind.memory_bandwidth_bytes_per_s() / f);
    k->set_kernel_launch_overhead_us(kind.kernel_launch_overhead_us() * f);
  }
  // Groups emptied by the moves above are dropped.
  auto* groups = out.mutable_device_groups();
  for (int i = groups->size() - 1; i >= 0; --i) {
    if (groups->Get(i).devices_size() == 0 && groups->Get(i).nodes_size() == 0) {
      groups->DeleteSubrange(i, 1);
    }
  }
  return out;
}

SwitchDecision decide_switch(const SwitchInputs& in) {
  SwitchDecision d;
  if (!(in.current_iteration_s > 0) || !(in.candidate_iteration_s > 0)) {
    d.reason = "stay: no prediction to compare";
    return d;
  }
  d.predicted_gain = in.current_iteration_s / in.candidate_iteration_s - 1;
  // The measured pace, else the prediction, prices the rest of the job.
  const double pace_s =
      in.measured_iteration_s > 0 ? in.measured_iteration_s : in.current_iteration_s;
  const double saved_fraction = 1 - in.candidate_iteration_s / in.current_iteration_s;
  d.saved_s = std::max(0.0, saved_fraction * pace_s * static_cast<double>(in.iterations_left));
  const std::string numbers =
      "predicted gain " + fixed(100 * d.predicted_gain, 1) + "%, saves " + fixed(d.saved_s, 1) +
      " s over " + std::to_string(in.iterations_left) + " iterations left, switching costs " +
      fixed(in.switch_cost_s, 1) + " s";
  if (d.predicted_gain < in.min_gain) {
    d.reason = "stay: " + numbers + " (gain below --min-gain " + fixed(100 * in.min_gain, 0) + "%)";
    return d;
  }
  if (d.saved_s < in.margin * in.switch_cost_s) {
    d.reason = "stay: " + numbers + " (less than " + fixed(in.margin, 1) + "x the switch cost)";
    return d;
  }
  d.do_switch = true;
  d.reason = "switch: " + numbers;
  return d;
}

}  // namespace gp::planner
