// Event-driven pipeline simulator: replays a plan's per-rank instruction streams against a cost
// model and a communication model, and is the single judge of predicted iteration time, bubbles
// and peak memory.
//
// Semantics (the executor's, see docs/simulator.md):
// - each rank runs its instructions in order on one compute stream;
// - SEND is asynchronous: it queues a transfer that starts when the sender's egress and the
//   receiver's ingress are free, and the sender continues;
// - RECV blocks until the matching transfer (same edge, peers and samples) has arrived;
// - ALLREDUCE_GRADS starts when every replica of the stage has reached it and blocks them all;
// - the iteration ends when the last rank finishes (synchronous: one optimizer step);
// - a recomputing stage (Stage.recompute) runs its forward again right before each backward
//   (traced as a second forward), holds only its boundary tensors per in-flight sample and one
//   micro-batch's other activations throughout (gp::cost::stage_memory).
// When no rank can make progress the result reports a deadlock with each rank's instruction.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "gp/common/chrome_trace.h"
#include "gp/common/status.h"
#include "gp/cost/comm_model.h"
#include "gp/cost/cost_model.h"
#include "gp/cost/device_costs.h"
#include "gp/cost/memory_model.h"
#include "gp/model/graph.h"
#include "graphpipe/v1/plan.pb.h"

namespace gp::sim {

struct SimOptions {
  bool record_events = false;  // keep every compute and transfer interval (for traces)
};

// Predicted intervals are the trace writer's spans (common/chrome_trace.h), which the executor's
// measured traces share.
using EventKind = trace::SpanKind;
using SimEvent = trace::Span;

struct MemorySample {
  double time_us;
  int64_t bytes;
};

struct RankStats {
  int rank = 0;
  int stage = 0;
  double busy_us = 0;  // forward + backward + optimizer compute
  double finish_us = 0;
  int64_t peak_memory_bytes = 0;
  cost::MemoryBreakdown static_memory;  // everything but the in-flight activations
  int64_t capacity_bytes = 0;           // its device's memory (0 for a rank without a stage)
  std::vector<MemorySample> memory;     // when record_events
};

struct StageStats {
  int stage = 0;
  double busy_us = 0;             // on one replica
  double bubble_fraction = 0;     // 1 - busy / iteration time
  int64_t peak_memory_bytes = 0;  // per device
  double forward_us = 0;          // one micro-batch on one replica
  double backward_us = 0;
  double recompute_us = 0;       // Stage.recompute: the second forward (0 without)
  int64_t capacity_bytes = 0;    // the smallest memory of its devices (mixed clusters differ)
  int64_t max_live_samples = 0;  // activations held at once, samples per replica
};

struct BlockedRank {
  int rank;
  int instruction_index;
  std::string instruction;
};

struct SimResult {
  bool deadlocked = false;
  std::vector<BlockedRank> blocked;  // when deadlocked
  double iteration_time_us = 0;
  double throughput_samples_per_s = 0;
  double bubble_fraction = 0;     // averaged over ranks
  int64_t peak_memory_bytes = 0;  // max over ranks
  int64_t events_processed = 0;
  std::vector<StageStats> stages;
  std::vector<RankStats> ranks;  // indexed by rank
  std::vector<SimEvent> events;  // when record_events

  // "rank 3 waits on RECV act[...] from rank 1; rank 1 waits on ..."
  std::string deadlock_report() const;
  // Every rank's peak within its own device's memory (mixed clusters: capacities differ).
  bool fits_memory() const;
};

// Compute per device: each rank's forward, backward, recompute and optimizer step are priced with
// its own device's model (DeviceCostModels::for_rank on plan.cluster()) and kind, so replicas of
// one stage may take different times (the all-reduce waits for the slowest); StageStats' times
// are the slowest replica's. A rank's peak memory is checked against its own device's capacity
// (fits_memory).
class Simulator {
 public:
  // Every device priced with `compute`, which must outlive the simulator.
  Simulator(const cost::CostModel& compute, const cost::CommModel& comm,
            cost::MemoryOptions memory);
  // Per-device models; run() refuses a plan whose cluster has a kind without a model.
  Simulator(cost::DeviceCostModels compute, const cost::CommModel& comm,
            cost::MemoryOptions memory);

  // `graph` must be built from plan.model(). Errors for structurally invalid plans; a deadlock
  // is a result (deadlocked = true), not an error.
  Result<SimResult> run(const graphpipe::v1::Plan& plan, const model::Graph& graph,
                        const SimOptions& options = {}) const;

 private:
  cost::DeviceCostModels compute_;
  const cost::CommModel& comm_;
  cost::MemoryOptions memory_;
};

// Chrome trace (Perfetto-loadable JSON): a track per device for compute, a track per link for
// transfers, flow arrows from each send to its receive, a memory counter per device.
std::string chrome_trace_json(const graphpipe::v1::Plan& plan, const SimResult& result);

// Fills plan.predicted from a simulation.
void fill_predicted_metrics(const SimResult& result, graphpipe::v1::Plan* plan);

}  // namespace gp::sim
