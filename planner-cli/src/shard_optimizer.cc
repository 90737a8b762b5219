#include "gp/planner/shard_optimizer.h"

#include <algorithm>
#include <vector>

#include "gp/cost/memory_model.h"
#include "gp/planner/report.h"

namespace gp::planner {

Result<ShardMode> parse_shard_mode(std::string_view name) {
  if (name == "auto") return ShardMode::kAuto;
  if (name == "never") return ShardMode::kNever;
  if (name == "always") return ShardMode::kAlways;
  return invalid_argument("--shard-optimizer = '" + std::string(name) +
                          "': expected auto, never or always");
}

std::string_view shard_mode_name(ShardMode mode) {
  switch (mode) {
    case ShardMode::kNever:
      return "never";
    case ShardMode::kAlways:
      return "always";
    default:
      return "auto";
  }
}

Result<sim::SimResult> simulate_choosing_memory(const sim::Simulator& simulator,
                                                RecomputeMode recompute, ShardMode shard,
                                                int64_t capacity, const model::Graph& graph,
                                                graphpipe::v1::Plan* plan) {
  for (auto& st : *plan->mutable_stages()) {
    st.set_shard_optimizer(shard == ShardMode::kAlways && st.device_ranks_size() > 1);
  }
  GP_ASSIGN_OR_RETURN(sim::SimResult sim,
                      simulate_choosing_recompute(simulator, recompute, capacity, graph, plan));
  if (shard != ShardMode::kAuto || sim.deadlocked || sim.peak_memory_bytes <= capacity) {
    return sim;
  }
  // Recomputation went first: it costs compute only, where the gather costs a collective on the
  // links every replica shares; a stage still over the device's memory shards as well.
  bool any = false;
  for (const auto& st : sim.stages) {
    auto* stage = plan->mutable_stages(st.stage);
    if (st.peak_memory_bytes <= capacity || stage->device_ranks_size() < 2) continue;
    stage->set_shard_optimizer(true);
    any = true;
  }
  if (!any) return sim;
  GP_ASSIGN_OR_RETURN(sim, simulator.run(*plan, graph));
  if (recompute != RecomputeMode::kAuto || sim.deadlocked) return sim;
  // A stage that recomputed before it sharded may fit by sharding alone (its memory was the
  // optimizer state's, not its activations'): it stops paying the second forward where the plan
  // still fits without, and recomputes again where it does not.
  std::vector<int> both;
  for (auto& st : *plan->mutable_stages()) {
    if (!st.recompute() || !st.shard_optimizer()) continue;
    st.set_recompute(false);
    both.push_back(st.id());
  }
  if (both.empty()) return sim;
  GP_ASSIGN_OR_RETURN(sim::SimResult lean, simulator.run(*plan, graph));
  if (lean.deadlocked) return lean;
  bool again = false;
  for (int s : both) {
    if (lean.stages[static_cast<size_t>(s)].peak_memory_bytes <= capacity) continue;
    plan->mutable_stages(s)->set_recompute(true);
    again = true;
  }
  if (!again) return lean;
  return simulator.run(*plan, graph);
}

std::string sharding_stages(const graphpipe::v1::Plan& plan) {
  std::string out;
  for (const auto& st : plan.stages()) {
    if (st.shard_optimizer()) out += (out.empty() ? "" : ", ") + std::to_string(st.id());
  }
  return out;
}

std::string shard_summary(const graphpipe::v1::Plan& plan) {
  if (sharding_stages(plan).empty()) return "";
  auto built = model::Graph::build(plan.model());
  if (!built.ok()) return "";
  const model::Graph& g = *built;
  cost::MemoryOptions options{plan.training().optimizer(), plan.training().precision()};
  const double capacity = static_cast<double>(plan.cluster().device().memory_capacity_bytes());
  std::string out;
  for (const auto& st : plan.stages()) {
    if (!st.shard_optimizer()) continue;
    std::vector<int> ops;
    for (const auto& id : st.op_ids()) {
      if (const int i = g.index_of(id); i >= 0) ops.push_back(i);
    }
    const int d = std::max(st.device_ranks_size(), 1);
    options.recompute = st.recompute();
    auto bytes = [&](bool shard) {
      options.shard_optimizer = shard;
      return static_cast<double>(
          cost::stage_memory(g, ops, st.micro_batch(), st.in_flight_samples(), d, options).total());
    };
    const double without = bytes(false);
    out += "  stage " + std::to_string(st.id()) + " shards its optimizer state over " +
           std::to_string(d) + " replicas: " + human_bytes(without) + " per device without, " +
           human_bytes(bytes(true)) + " with (device " + human_bytes(capacity) +
           (without > capacity ? ", over it" : "") + ")\n";
  }
  return out;
}

}  // namespace gp::planner
