// The improvement search of `graphpipe-plan search --effort SECONDS`: after the fast search,
// local moves on the plan's stages, each judged by the simulator (docs/planner.md, §3).
//
// A move changes one thing: a planning unit crosses a stage boundary, two stages merge (adjacent
// ones, or independent branches paired on the same devices), a stage splits in series or into
// its independent branches, a replica moves between stages or to or from the idle devices, a
// stage's micro-batch doubles or halves, every stage takes one micro-batch size, two stages swap
// places on the devices, or a chain plan is lowered as a graph pipeline. The search climbs:
// moves are tried in an order drawn from a seeded generator and the first that simulates faster
// is taken; at a local optimum it kicks the best plan with two random moves and climbs again.
// The best plan seen is kept, so the result is never slower than the start.
//
// Deterministic: the trials follow from the start plan and the seed alone. A time budget only
// cuts the sequence short; the trial count the summary reports (--effort-trials) replays it
// exactly on any machine.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "gp/common/status.h"
#include "gp/model/graph.h"
#include "gp/planner/plan_builder.h"
#include "gp/planner/units.h"

namespace gp::planner {

struct ImproveOptions {
  double effort_s = 0;     // wall-clock budget in seconds; 0: no time limit
  int64_t max_trials = 0;  // plans simulated at most; 0: no limit
  // Simulator events at most, over all trials; 0: no limit. A budget on the work that, unlike
  // a time limit, gives the same plan on any machine (the default search's short improvement).
  int64_t max_events = 0;
  uint64_t seed = 1;
  // Off unless a budget is given: an unbounded search would never stop.
  bool enabled() const { return effort_s > 0 || max_trials > 0 || max_events > 0; }
};

// One step on the way from the start plan to the best: a move that paid, or a kick (a random
// move from a local optimum, which may be slower on its own).
struct ImproveMove {
  std::string description;
  double before_samples_per_s = 0;
  double after_samples_per_s = 0;
  bool kick = false;
};

struct ImproveSummary {
  bool ran = false;
  double start_samples_per_s = 0;
  double end_samples_per_s = 0;
  int64_t trials = 0;  // plans simulated (a plan seen before is not simulated again)
  int64_t events = 0;  // simulator events of those trials
  int64_t local_optima = 0;
  double time_s = 0;
  std::string stopped_by;  // "time budget", "trial budget", "event budget" or "no move left"
  std::vector<ImproveMove> moves;  // the best plan's path from the start
};

// A plan's stages and how they are lowered.
struct StagePlan {
  std::vector<StageAssignment> stages;
  bool chain = false;
};

// Where the moves may go.
struct MoveSpace {
  const model::Graph* graph = nullptr;
  const UnitGraph* units = nullptr;  // the planning units; a move carries whole units
  int devices = 0;                   // ranks 0 .. devices-1
  int64_t mini_batch = 0;
  std::vector<int64_t> micro_batches;  // the sizes a stage may take
  std::vector<double> op_weight;       // per op: its compute, for balanced splits
};

// A plan's simulation: samples/s, -1 when it does not run (memory, deadlock, or no valid
// lowering), and the simulator events it took.
struct TrialOutcome {
  double samples_per_s = -1;
  int64_t events = 0;
};
using TrialFn = std::function<Result<TrialOutcome>(const StagePlan&)>;
// A progress line (about once a second, and at each new best).
using ImproveProgress = std::function<void(const std::string&)>;

// Improves `plan` (simulating at `start_samples_per_s`) in place.
Result<ImproveSummary> improve_stages(const MoveSpace& space, const ImproveOptions& options,
                                      const TrialFn& trial, const ImproveProgress& progress,
                                      double start_samples_per_s, StagePlan& plan);

// A plan one move away, with the move's description.
struct Neighbour {
  StagePlan plan;
  std::string description;
};

// The moves from one plan, made one at a time: a large plan has tens of thousands.
class Neighbourhood {
 public:
  Neighbourhood(const MoveSpace& space, const StagePlan& plan);
  ~Neighbourhood();
  Neighbourhood(const Neighbourhood&) = delete;
  Neighbourhood& operator=(const Neighbourhood&) = delete;

  size_t size() const;
  // The i-th move's plan; nullopt when the move would make the stage graph cyclic.
  std::optional<Neighbour> get(size_t i) const;
  // Whether the i-th move splits a stage (in series or into branches) and gives the new stage
  // idle devices, the others keeping theirs: what the fast search's idle-device pass tries.
  bool splits_onto_idle_devices(size_t i) const;

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

// Every neighbour of `plan`. Moves that would make the stage graph cyclic, give a replica no
// sample or leave a stage empty are not listed.
std::vector<Neighbour> neighbours(const MoveSpace& space, const StagePlan& plan);

}  // namespace gp::planner
