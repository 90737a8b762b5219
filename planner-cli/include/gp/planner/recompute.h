// Activation recomputation as a planner choice (Stage.recompute): which stages of a plan keep
// only their boundary tensors per in-flight micro-batch and run their forward again before each
// backward. Memory per device falls to one micro-batch's activations plus the boundary of every
// in-flight one (gp::cost::stage_memory), at the price of a second forward per micro-batch.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "gp/common/status.h"
#include "gp/cost/memory_model.h"
#include "gp/model/graph.h"
#include "gp/sim/simulator.h"
#include "graphpipe/v1/plan.pb.h"

namespace gp::planner {

// `search --recompute`. kAuto: a stage recomputes only where the plan does not fit without;
// kNever: none does; kAlways: every stage does.
enum class RecomputeMode { kAuto, kNever, kAlways };

// "auto", "never" or "always"; InvalidArgument naming --recompute and the value otherwise.
Result<RecomputeMode> parse_recompute_mode(std::string_view name);
std::string_view recompute_mode_name(RecomputeMode mode);

// Simulates `plan` with Stage.recompute set by `mode` (any flags it had are replaced): kNever
// none, kAlways every stage; kAuto first none, and when the simulated peak memory exceeds
// `capacity`, every stage with a replica over it recomputes and the plan is simulated again
// (monotone: a stage that fits never pays the second forward). A deadlock is a result.
Result<sim::SimResult> simulate_choosing_recompute(const sim::Simulator& simulator,
                                                   RecomputeMode mode, int64_t capacity,
                                                   const model::Graph& graph,
                                                   graphpipe::v1::Plan* plan);

// Per stage of `plan`, why it recomputes (empty where it does not): its simulated peak memory
// per device without recomputation against the device's `capacity`, and with it (`with`: the
// plan's simulation). One more simulation, only when some stage recomputes.
Result<std::vector<std::string>> recompute_reasons(const sim::Simulator& simulator,
                                                   RecomputeMode mode, int64_t capacity,
                                                   const model::Graph& graph,
                                                   const graphpipe::v1::Plan& plan,
                                                   const sim::SimResult& with);

// The stages of `plan` that recompute, as "1, 3" ("" when none does).
std::string recomputing_stages(const graphpipe::v1::Plan& plan);

// For `inspect`: one line per recomputing stage with its memory per device by the catalogue's
// memory model (gp::cost::stage_memory) without and with recomputation, against the device's
// capacity: why it recomputes. Empty when no stage does (or the plan's model does not build).
std::string recompute_summary(const graphpipe::v1::Plan& plan);

// For inspect: one line per stage of `plan` that `chosen` marks, `line(stage, without, with,
// capacity)` given its memory per device by the catalogue's memory model with the choice
// (`toggle` sets it in the options) off and on; the stage's other choices stay as the plan has
// them. Empty when no stage is marked (or the plan's model does not build).
std::string memory_choice_summary(
    const graphpipe::v1::Plan& plan, const std::function<bool(const graphpipe::v1::Stage&)>& chosen,
    const std::function<void(cost::MemoryOptions&, bool)>& toggle,
    const std::function<std::string(const graphpipe::v1::Stage&, double, double, double)>& line);

}  // namespace gp::planner
