// ZeRO-1 as a planner choice (Stage.shard_optimizer): which replicated stages keep only 1/r of
// their optimizer state (and bf16 fp32 master weights) per replica, at the price of an all-gather
// of the parameters after each step (gp::cost::stage_memory, the simulator).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "gp/common/status.h"
#include "gp/model/graph.h"
#include "gp/planner/recompute.h"
#include "gp/sim/simulator.h"
#include "graphpipe/v1/plan.pb.h"

namespace gp::planner {

// `search --shard-optimizer`. kAuto: a replicated stage shards only where the plan does not fit
// without (after recomputation had its chance); kNever: none does; kAlways: every stage with
// more than one replica does.
enum class ShardMode { kAuto, kNever, kAlways };

// "auto", "never" or "always"; InvalidArgument naming --shard-optimizer and the value otherwise.
Result<ShardMode> parse_shard_mode(std::string_view name);
std::string_view shard_mode_name(ShardMode mode);

// Simulates `plan` with Stage.recompute and Stage.shard_optimizer chosen (any flags it had are
// replaced), in this order: sharding as `shard` says for kNever/kAlways (none under kAuto), then
// recomputation as simulate_choosing_recompute does; then, under kAuto, if the simulated peak
// memory still exceeds `capacity`, every stage with more than one replica and a replica over it
// shards too and the plan is simulated again; under RecomputeMode::kAuto a stage that now both
// recomputes and shards stops recomputing where it fits by sharding alone (one or two more
// simulations). Monotone like --recompute auto: a plan that fits without never pays for the
// gather. A deadlock is a result.
Result<sim::SimResult> simulate_choosing_memory(const sim::Simulator& simulator,
                                                RecomputeMode recompute, ShardMode shard,
                                                int64_t capacity, const model::Graph& graph,
                                                graphpipe::v1::Plan* plan);

// The stages of `plan` that shard their optimizer state, as "1, 3" ("" when none does).
std::string sharding_stages(const graphpipe::v1::Plan& plan);

// For `inspect`: one line per sharding stage with its memory per device by the catalogue's memory
// model without and with the sharding, against the device's capacity. Empty when none shards.
std::string shard_summary(const graphpipe::v1::Plan& plan);

}  // namespace gp::planner
