// Plan search: for one strategy, sweep the micro-batch sizes, partition, place the stages on
// physical devices, lower to instruction streams, simulate, and keep the plan with the best
// simulated throughput that fits in memory and cannot deadlock. Every strategy goes through the
// same placement, lowering and simulator, so their results are comparable.
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "gp/common/status.h"
#include "gp/cost/comm_model.h"
#include "gp/cost/cost_model.h"
#include "gp/cost/device_costs.h"
#include "gp/model/graph.h"
#include "gp/planner/improve.h"
#include "gp/planner/partition.h"
#include "gp/planner/plan_builder.h"
#include "gp/planner/recompute.h"
#include "gp/planner/shard_optimizer.h"
#include "gp/sim/simulator.h"
#include "graphpipe/v1/plan.pb.h"

namespace gp::planner {

struct SearchRequest {
  const model::Graph* graph = nullptr;
  graphpipe::v1::Cluster cluster;  // already reduced to the devices to use
  int64_t mini_batch = 0;
  graphpipe::v1::Strategy strategy = graphpipe::v1::STRATEGY_GRAPHPIPE;
  graphpipe::v1::TrainingConfig training;
  const cost::CostModel* compute = nullptr;
  // Per-device compute for mixed clusters (cost/device_costs.h); nullptr: `compute` prices every
  // device. On a mixed cluster (cost::is_mixed) the search runs once per device kind as the
  // reference the partitioners price stages with (`compute` is then ignored), places the stages
  // with the most compute per device on the fastest devices that hold them (assign_devices),
  // simulates every plan with each rank's own model, links and memory, and keeps the fastest;
  // its search for fewer devices drops the slowest devices first (select_devices).
  const cost::DeviceCostModels* device_costs = nullptr;
  // Communication times; nullptr: the cluster's datasheet links (CommModel(cluster)). Must be
  // built for `cluster`.
  const cost::CommModel* comm = nullptr;
  std::vector<int64_t> micro_batches;  // empty: every power of two dividing the mini-batch
  int piper_downset_limit = 40000;
  // Piper plans over compress_branches(units): each branch one unit (units.h).
  bool piper_compress_branches = false;
  // How ops group into planning units; by default graphs beyond 512 units are coarsened.
  UnitOptions units;
  // Refine the best plan with per-stage micro-batch sizes: greedily double or halve one stage's
  // micro-batch while the simulated throughput improves (the lowering handles mixed sizes).
  bool per_stage_microbatch = false;
  // The idle-device pass also splits stages (in series or into branches) onto idle devices;
  // false only to measure what that pass gains.
  bool split_onto_idle_devices = true;
  // GraphPipe also plans for fewer devices (below); false only to measure a step of the search
  // on its own.
  bool plan_for_fewer_devices = true;
  // Then the improvement search (improve.h) from the plan found, within its budget; off by
  // default.
  ImproveOptions improve;
  // Activation recomputation (recompute.h). kAuto: a micro-batch size no partition fits at
  // without it is partitioned again with every stage priced recomputing, and every plan the
  // search simulates recomputes exactly at the stages that do not fit without. kNever
  // partitions such a micro-batch again the same way, and keeps that partition only where,
  // simulated without recomputing, it fits (the partitioners' memory estimate overestimates).
  RecomputeMode recompute = RecomputeMode::kAuto;
  // ZeRO-1 sharding of replicated stages' optimizer state (shard_optimizer.h). kAuto: a
  // micro-batch size no partition fits at without it (nor with recomputation alone) is
  // partitioned again with replicated stages priced sharded (and recomputing unless --recompute
  // never), and every plan the search simulates shards exactly the replicated stages that still
  // do not fit after recomputation.
  ShardMode shard_optimizer = ShardMode::kAuto;
  // Called after each micro-batch candidate: (done, total, one-line summary).
  std::function<void(int, int, const std::string&)> progress;
};

// GraphPipe's search also plans for fewer devices, so that more devices never give a slower plan:
// after its own search on N devices it runs the same search (without this step) on the first M
// devices for every M below N, largest first, and keeps the fastest of those plans, its extra
// devices idle, when it simulates faster than every plan found for all N. So the plan for N is
// the fastest of the plain searches on 1..N devices, and the plan for N + k is never slower. The
// counts are searched down to the first whose compute bound does not beat the best plan found (no
// plan on it or fewer devices can), and not at all where units x N > kFewerDevicesMaxWork.

struct CandidateSummary {
  int64_t micro_batch = 0;
  bool feasible = false;
  std::string reason;                   // why not, when infeasible
  double bottleneck_tps_s = 0;          // the partitioner's estimate
  double throughput_samples_per_s = 0;  // simulated
  int num_stages = 0;
  // Which partitioner's candidate won at this size: "graph partition", "chain DP, <order>",
  // "PipeDream hierarchical DP, <order>", "Piper, compressed branches", "chain" (Piper's own);
  // GraphPipe's candidates from other partitioners may add ", DAG lowering".
  std::string source;
};

struct SearchResult {
  bool feasible = false;
  std::string infeasible_reason;
  graphpipe::v1::Plan plan;  // with predicted metrics and provenance filled in
  sim::SimResult simulation;
  double search_time_s = 0;
  int num_units = 0;
  std::vector<CandidateSummary> candidates;
  // Partitions not simulated, and micro-batches not searched: their bound was already beaten.
  int candidates_pruned = 0;
  int idle_device_gains = 0;  // stages given more replicas from idle devices, each a gain
  // Why the plan leaves devices idle; empty when it uses them all.
  std::string idle_devices_reason;
  // The device count the plan was searched for: below the cluster's when a plan for fewer devices
  // simulated faster than any found for all of them (fewer_devices).
  int searched_devices = 0;
  // The plan is lowered as a chain (tensors relayed through the stages in between; stage order
  // is the chain's), not as a graph pipeline.
  bool chain = false;
  // The improvement search, when the request asked for one (ran).
  ImproveSummary improvement;
  // Per stage of the plan, why it recomputes its activations (empty where it does not).
  std::vector<std::string> recompute_reasons;
  // Mixed clusters: the device kind whose costs partitioned the plan found (empty otherwise).
  std::string reference_kind;
};

Result<SearchResult> search_plan(const SearchRequest& request);

// The micro-batch sizes tried when none are given: every power of two dividing the mini-batch.
std::vector<int64_t> power_of_two_divisors(int64_t mini_batch);

// The most micro-batches per iteration a searched or lowered plan may have: plans (their
// instructions) and the search's time grow with them, and no pipeline needs more.
inline constexpr int64_t kMaxMicroBatchesPerIteration = 4096;
// The micro-batch sizes tried when none are given: the power-of-two divisors of the mini-batch
// leaving at most kMaxMicroBatchesPerIteration micro-batches; an error naming the batch when
// none does (a prime batch).
Result<std::vector<int64_t>> searchable_micro_batches(int64_t mini_batch);

// Samples/s that no plan of micro-batch `micro_batch` on `devices` devices can pass: the
// simulator runs every replica's share of a micro-batch as kernels of at most `micro_batch`
// samples, so each op costs at least its cheapest time per sample over kernels of 1 to
// `micro_batch` samples (the minimum, not the last, as measured profiles need not get cheaper
// per sample), spread perfectly over every device with no transfer, all-reduce or bubble.
double kernel_batch_bound(const model::Graph& graph, const cost::CostModel& compute,
                          int64_t micro_batch, int devices);

// Samples/s that no lowering of `part` can pass in the simulator, from compute alone. Two
// bounds on the iteration, the larger kept:
//  * the busiest replica's compute and all-reduce (its TPS);
//  * fill and drain: a stage's first forward pass waits for the forward passes along a path of
//    its predecessors, and the backward pass of its last micro-batch must still travel back
//    along that path, while the stage itself computes every micro-batch in between. So the
//    iteration takes at least a stage's own compute of all micro-batches plus the compute of one
//    micro-batch on the costliest path into it. A chain lowering only adds dependencies.
// The search skips lowering and simulating partitions whose bound is below its best plan.
double partition_throughput_bound(const Partition& part, const UnitGraph& units,
                                  const StageCostModel& costs);

// The per-stage refinement's next micro-batch for a stage now at `micro_batch` on `replicas`
// devices: doubled (`grow`) or halved, when the result divides the mini-batch, is one of
// `allowed` (empty: any) and gives every replica a sample. Replicas need not divide it: they
// take uneven slices, as the idle-device step gives them. nullopt when the step is not allowed.
std::optional<int64_t> refined_micro_batch(int64_t micro_batch, bool grow, int replicas,
                                           int64_t mini_batch, const std::vector<int64_t>& allowed);

// Why no candidate fits: their distinct reasons joined with "; " ("no feasible plan" if none).
std::string infeasible_summary(const std::vector<CandidateSummary>& candidates);

// Physical placement: stages in the order of a depth-first walk of the stage graph that follows
// the heaviest edge first (chain order for chain partitions), each on consecutive ranks, so
// that heavily connected stages share a node. Replicas of one stage are consecutive too. DAG
// partitions come out renumbered in that order, which does not depend on how the partition
// numbers its stages (placement_order, keyed by stage_keys).
std::vector<StageAssignment> place_stages(const Partition& partition, const UnitGraph& units);
// That order for any stage DAG given its edges' bytes per sample (src stage, dst stage): a
// topological order in which each stage's heaviest successor follows it where it can. Ties
// (sources, successors over edges of equal bytes) go to the smaller key, so with keys that
// belong to the stages' contents (stage_keys) the order is the same however the stages are
// numbered: renumbering the stages only renumbers the order.
std::vector<int> placement_order(int num_stages,
                                 const std::map<std::pair<int, int>, int64_t>& edge_bytes,
                                 const std::vector<int>& keys);
// The candidate orders for placing a stage DAG, all keyed as placement_order and distinct:
// placement_order first, then its ties to the larger key, then the same two walks backward from
// the sinks along the heaviest in-edges (which keep a join next to its heaviest inputs).
// Placement changes transfer times by a few percent (dlrm), so the search's final plans and
// `lower` simulate each and keep the fastest.
std::vector<std::vector<int>> placement_orders(
    int num_stages, const std::map<std::pair<int, int>, int64_t>& edge_bytes,
    const std::vector<int>& keys);
// `stages` renumbered in `order` (new stage i is stages[order[i]]), each on consecutive ranks
// from 0 in that order, with as many replicas as it had ranks.
std::vector<StageAssignment> placed_in_order(const std::vector<StageAssignment>& stages,
                                             const std::vector<int>& order);
// A key for each stage given its op indices: its smallest op index, distinct for disjoint
// stages and independent of the stages' numbering.
std::vector<int> stage_keys(const std::vector<std::vector<int>>& stage_ops);

// Mixed clusters: the stages' devices chosen again so that the stage with the most compute per
// replica (its ops' forward and backward at its replica's slice, times its micro-batches, by
// `compute`) gets the fastest devices (cost::device_speed), then the next, each taking the
// fastest free devices whose memory holds its estimated peak (`memory_bytes[s]`, per device; 0
// or absent: anything fits) and, when too few do, the fastest free ones. Stages that end on one
// kind keep their order of placement among that kind's devices (neighbours stay on one node).
// Stages, ops and micro-batches are unchanged; only ranks move. `cluster` has the `devices` ranks.
std::vector<StageAssignment> assign_devices(const model::Graph& graph,
                                            const cost::CostModel& compute,
                                            const graphpipe::v1::Cluster& cluster,
                                            int64_t mini_batch, std::vector<StageAssignment> stages,
                                            const std::vector<int64_t>& memory_bytes = {});

Result<graphpipe::v1::Strategy> parse_strategy(std::string_view name);

// Depth of every stage in the stage graph: 1 for sources, else 1 + the deepest predecessor.
std::vector<int> stage_depths(const graphpipe::v1::Plan& plan);
// Longest path of the stage graph, counted in stages (the pipeline depth).
int pipeline_depth(const graphpipe::v1::Plan& plan);

}  // namespace gp::planner
