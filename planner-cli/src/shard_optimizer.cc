#include "gp/planner/shard_optimizer.h"

#include <algorithm>
#include <vector>

#include "gp/cost/memory_model.h"
#include "gp/planner/recompute.h"
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
  if (shard != ShardMode::kAuto || sim.deadlocked || sim.fits_memory()) return sim;
  // A stage's own device memory (mixed clusters: its smallest replica's).
  const auto capacity_of = [capacity](const sim::StageStats& st) {
    return st.capacity_bytes > 0 ? st.capacity_bytes : capacity;
  };
  // Recomputation went first: it costs compute only, where the gather costs a collective on the
  // links every replica shares; a stage still over the device's memory shards as well.
  bool any = false;
  for (const auto& st : sim.stages) {
    auto* stage = plan->mutable_stages(st.stage);
    if (st.peak_memory_bytes <= capacity_of(st) || stage->device_ranks_size() < 2) continue;
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
    const auto& st = lean.stages[static_cast<size_t>(s)];
    if (st.peak_memory_bytes <= capacity_of(st)) continue;
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
  return memory_choice_summary(
      plan, [](const graphpipe::v1::Stage& st) { return st.shard_optimizer(); },
      [](cost::MemoryOptions& o, bool on) { o.shard_optimizer = on; },
      [](const graphpipe::v1::Stage& st, double without, double with, double capacity) {
        return "  stage " + std::to_string(st.id()) + " shards its optimizer state over " +
               std::to_string(std::max(st.device_ranks_size(), 1)) +
               " replicas: " + human_bytes(without) + " per device without, " + human_bytes(with) +
               " with (device " + human_bytes(capacity) + (without > capacity ? ", over it" : "") +
               ")\n";
      });
}

}  // namespace gp::planner
