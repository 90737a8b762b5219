#include "gp/planner/recompute.h"

#include <algorithm>

#include "gp/cost/memory_model.h"
#include "gp/planner/report.h"

namespace gp::planner {
namespace {

void set_all(graphpipe::v1::Plan* plan, bool recompute) {
  for (auto& st : *plan->mutable_stages()) st.set_recompute(recompute);
}

// A stage's device memory: the simulation's, its smallest replica's (mixed clusters differ).
int64_t capacity_of(const sim::StageStats& st, int64_t capacity) {
  return st.capacity_bytes > 0 ? st.capacity_bytes : capacity;
}

}  // namespace

Result<RecomputeMode> parse_recompute_mode(std::string_view name) {
  if (name == "auto") return RecomputeMode::kAuto;
  if (name == "never") return RecomputeMode::kNever;
  if (name == "always") return RecomputeMode::kAlways;
  return invalid_argument("--recompute = '" + std::string(name) +
                          "': expected auto, never or always");
}

std::string_view recompute_mode_name(RecomputeMode mode) {
  switch (mode) {
    case RecomputeMode::kNever:
      return "never";
    case RecomputeMode::kAlways:
      return "always";
    default:
      return "auto";
  }
}

Result<sim::SimResult> simulate_choosing_recompute(const sim::Simulator& simulator,
                                                   RecomputeMode mode, int64_t capacity,
                                                   const model::Graph& graph,
                                                   graphpipe::v1::Plan* plan) {
  set_all(plan, mode == RecomputeMode::kAlways);
  GP_ASSIGN_OR_RETURN(sim::SimResult sim, simulator.run(*plan, graph));
  if (mode != RecomputeMode::kAuto || sim.deadlocked || sim.fits_memory()) return sim;
  bool any = false;
  for (const auto& st : sim.stages) {
    if (st.peak_memory_bytes <= capacity_of(st, capacity)) continue;
    plan->mutable_stages(st.stage)->set_recompute(true);
    any = true;
  }
  if (!any) return sim;
  return simulator.run(*plan, graph);
}

Result<std::vector<std::string>> recompute_reasons(const sim::Simulator& simulator,
                                                   RecomputeMode mode, int64_t capacity,
                                                   const model::Graph& graph,
                                                   const graphpipe::v1::Plan& plan,
                                                   const sim::SimResult& with) {
  std::vector<std::string> reasons(static_cast<size_t>(plan.stages_size()));
  if (recomputing_stages(plan).empty()) return reasons;
  graphpipe::v1::Plan plain = plan;
  set_all(&plain, false);
  GP_ASSIGN_OR_RETURN(const sim::SimResult without, simulator.run(plain, graph));
  for (int s = 0; s < plan.stages_size(); ++s) {
    if (!plan.stages(s).recompute()) continue;
    const auto at = [s](const sim::SimResult& r) {
      return s < static_cast<int>(r.stages.size()) ? r.stages[s].peak_memory_bytes : 0;
    };
    const int64_t before = at(without);
    if (s < static_cast<int>(with.stages.size())) capacity = capacity_of(with.stages[s], capacity);
    std::string& why = reasons[static_cast<size_t>(s)];
    why = mode == RecomputeMode::kAlways ? "--recompute always; w" : "w";
    why += "ithout recomputation its peak memory per device would be " +
           human_bytes(static_cast<double>(before)) + ", " +
           (before > capacity ? "over" : "within") + " the device's " +
           human_bytes(static_cast<double>(capacity)) + "; recomputing it is " +
           human_bytes(static_cast<double>(at(with)));
  }
  return reasons;
}

std::string memory_choice_summary(
    const graphpipe::v1::Plan& plan, const std::function<bool(const graphpipe::v1::Stage&)>& chosen,
    const std::function<void(cost::MemoryOptions&, bool)>& toggle,
    const std::function<std::string(const graphpipe::v1::Stage&, double, double, double)>& line) {
  if (std::none_of(plan.stages().begin(), plan.stages().end(), chosen)) return "";
  auto built = model::Graph::build(plan.model());
  if (!built.ok()) return "";
  const model::Graph& g = *built;
  const double capacity = static_cast<double>(plan.cluster().device().memory_capacity_bytes());
  std::string out;
  for (const auto& st : plan.stages()) {
    if (!chosen(st)) continue;
    std::vector<int> ops;
    for (const auto& id : st.op_ids()) {
      if (const int i = g.index_of(id); i >= 0) ops.push_back(i);
    }
    const int d = std::max(st.device_ranks_size(), 1);
    cost::MemoryOptions options{plan.training().optimizer(), plan.training().precision()};
    options.recompute = st.recompute();
    options.shard_optimizer = st.shard_optimizer();
    auto bytes = [&](bool on) {
      toggle(options, on);
      return static_cast<double>(
          cost::stage_memory(g, ops, st.micro_batch(), st.in_flight_samples(), d, options).total());
    };
    const double without = bytes(false);
    out += line(st, without, bytes(true), capacity);
  }
  return out;
}

std::string recompute_summary(const graphpipe::v1::Plan& plan) {
  return memory_choice_summary(
      plan, [](const graphpipe::v1::Stage& st) { return st.recompute(); },
      [](cost::MemoryOptions& o, bool on) { o.recompute = on; },
      [](const graphpipe::v1::Stage& st, double without, double with, double capacity) {
        return "  stage " + std::to_string(st.id()) +
               " recomputes its forward before each backward: " + human_bytes(without) +
               " per device without, " + human_bytes(with) + " with (device " +
               human_bytes(capacity) + (without > capacity ? ", over it" : "") + ")\n";
      });
}

std::string recomputing_stages(const graphpipe::v1::Plan& plan) {
  std::string out;
  for (const auto& st : plan.stages()) {
    if (st.recompute()) out += (out.empty() ? "" : ", ") + std::to_string(st.id());
  }
  return out;
}

}  // namespace gp::planner
