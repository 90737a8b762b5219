#include "gp/planner/search.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <limits>
#include <map>
#include <mutex>
#include <optional>
#include <thread>
#include <tuple>

#include "gp/cost/cluster.h"
#include "gp/cost/memory_model.h"
#include "gp/model/model_io.h"
#include "gp/plan/plan_util.h"
#include "gp/planner/iteration_bound.h"
#include "gp/planner/plan_builder.h"
#include "gp/planner/progress.h"
#include "gp/planner/stage_cost.h"
#include "gp/planner/units.h"

namespace gp::planner {
namespace {

// Downsets beyond which GraphPipe's search skips its Piper-over-branches candidate (a few
// milliseconds of DP below it; Piper's own limit is 40000).
constexpr int kPiperCandidateDownsets = 2000;
// Plans simulated while giving idle devices to stages.
constexpr int kMaxIdleTrials = 64;
// The runner-up plan is refined too when it simulates within this share of the best.
constexpr double kRunnerUpShare = 0.95;
// The search plans for fewer devices (search_fewer_devices) while units x devices is at most
// this: beyond the chain limit below, one search per power of two down to it, then every count
// below it, which every zoo model up to 256 devices (mmt: 98 units, the transformer 97) can
// afford and a 1,016-operator mmt on 256 devices (434 units; 7.9 s without) cannot.
constexpr int64_t kFewerDevicesMaxWork = 32768;
// Below this many units x devices^2 the search plans for every device count below its own (each
// of those searches costs about units x devices): the zoo's ~100-unit models up to 64 devices.
constexpr int64_t kFewerDevicesChainWork = 409600;
// The iteration bound (iteration_bound.h) prunes those counts while ops x the largest micro-batch
// is at most this (its op times are read once per op and kernel size).
constexpr int64_t kIterationBoundMaxWork = 4 << 20;
// Worker threads of those searches (at most one per hardware thread).
constexpr int kFewerDevicesMaxThreads = 8;
// Largest micro-batch whose kernel bound (kernel_batch_bound) is computed before its search: the
// bound costs one op time per op and kernel size, and prunes small micro-batches, not large ones.
constexpr int64_t kKernelBoundMaxMicroBatch = 64;

// A plan the search found: its stages, lowering and simulation.
struct PlanFound {
  double throughput = -1;  // simulated samples/s
  std::vector<StageAssignment> stages;
  bool chain = false;
  double tps = 0;  // the partitioner's bottleneck estimate
  graphpipe::v1::Plan plan;
  sim::SimResult simulation;
  int idle_device_gains = 0;
  std::string idle_devices_reason;  // for the devices it was searched for
  int searched_devices = 0;         // the device count of the search that found it
};

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

std::string format_candidate(const CandidateSummary& c) {
  char buf[256];
  if (!c.feasible) {
    std::snprintf(buf, sizeof(buf), "micro-batch %lld: %s", static_cast<long long>(c.micro_batch),
                  c.reason.c_str());
  } else {
    std::snprintf(buf, sizeof(buf), "micro-batch %lld: %d stages, %.1f samples/s simulated (%s)",
                  static_cast<long long>(c.micro_batch), c.num_stages, c.throughput_samples_per_s,
                  c.source.c_str());
  }
  return buf;
}

}  // namespace

double partition_throughput_bound(const Partition& part, const UnitGraph& units,
                                  const StageCostModel& costs) {
  const size_t n = part.stages.size();
  std::vector<int> stage_of(units.num_units(), -1);
  for (size_t s = 0; s < n; ++s) {
    for (int u : part.stages[s].units) stage_of[u] = static_cast<int>(s);
  }
  std::vector<double> micro_batch_us(n, 0);  // one micro-batch's forward and backward
  double busiest_tps_s = 0;
  for (size_t s = 0; s < n; ++s) {
    const PartitionStage& st = part.stages[s];
    const StageAggregate agg = costs.aggregate(st.units);
    busiest_tps_s = std::max(busiest_tps_s, costs.tps_s(agg, part.micro_batch, st.devices, 0));
    const int level = log2_exact(part.micro_batch / std::max(st.devices, 1));
    if (level < agg.levels) micro_batch_us[s] = agg.compute_us[level];
  }
  // Costliest path into each stage, over units in topological order (stages are convex).
  std::vector<double> upstream_us(n, 0);
  for (int u : units.topo) {
    const int s = stage_of[u];
    if (s < 0) continue;
    for (int v : units.preds[u]) {
      const int t = stage_of[v];
      if (t >= 0 && t != s) {
        upstream_us[s] = std::max(upstream_us[s], upstream_us[t] + micro_batch_us[t]);
      }
    }
  }
  const double mini_batch = static_cast<double>(costs.mini_batch());
  const double micro_batches = mini_batch / static_cast<double>(part.micro_batch);
  double iteration_s = busiest_tps_s * mini_batch;
  for (size_t s = 0; s < n; ++s) {
    iteration_s =
        std::max(iteration_s, (upstream_us[s] + micro_batches * micro_batch_us[s]) * 1e-6);
  }
  // A hair above: the simulator sums the same times in another order, and rounding must not
  // put a plan that reaches the bound above it.
  return iteration_s > 0 ? mini_batch / iteration_s * (1 + 1e-9) : INFINITY;
}

double kernel_batch_bound(const model::Graph& graph, const cost::CostModel& compute,
                          int64_t micro_batch, int devices) {
  double per_sample_s = 0;  // every op at its cheapest time per sample over kernels of 1..b
  for (const auto& op : graph.ops()) {
    double cheapest_s = INFINITY;
    for (int64_t k = 1; k <= micro_batch; ++k) {
      const cost::OpTime t = compute.op_time(op, k);
      cheapest_s = std::min(cheapest_s, (t.forward_us + t.backward_us) * 1e-6 / k);
    }
    per_sample_s += cheapest_s;
  }
  return per_sample_s > 0 ? devices / per_sample_s : INFINITY;
}

std::optional<int64_t> refined_micro_batch(int64_t micro_batch, bool grow, int replicas,
                                           int64_t mini_batch,
                                           const std::vector<int64_t>& allowed) {
  const int64_t b = grow ? micro_batch * 2 : micro_batch / 2;
  if (b < 1 || mini_batch % b != 0 || b < replicas) return std::nullopt;
  if (!allowed.empty() && std::find(allowed.begin(), allowed.end(), b) == allowed.end()) {
    return std::nullopt;
  }
  return b;
}

std::vector<int64_t> power_of_two_divisors(int64_t mini_batch) {
  std::vector<int64_t> out;
  for (int64_t b = 1; b <= mini_batch; b *= 2) {
    if (mini_batch % b == 0) out.push_back(b);
  }
  return out;
}

Result<std::vector<int64_t>> searchable_micro_batches(int64_t mini_batch) {
  const std::vector<int64_t> divisors = power_of_two_divisors(mini_batch);
  std::vector<int64_t> out;
  for (int64_t b : divisors) {
    if (mini_batch / b <= kMaxMicroBatchesPerIteration) out.push_back(b);
  }
  if (out.empty()) {
    return invalid_argument(
        "--batch = " + std::to_string(mini_batch) + ": its largest power-of-two divisor, " +
        std::to_string(divisors.back()) + ", leaves " +
        std::to_string(mini_batch / divisors.back()) + " micro-batches per iteration, more than " +
        std::to_string(kMaxMicroBatchesPerIteration) + " (a batch with a larger power of two)");
  }
  return out;
}

std::string infeasible_summary(const std::vector<CandidateSummary>& candidates) {
  std::string why;
  for (const auto& c : candidates) {
    if (why.find(c.reason) == std::string::npos) why += (why.empty() ? "" : "; ") + c.reason;
  }
  return why.empty() ? "no feasible plan" : why;
}

Result<graphpipe::v1::Strategy> parse_strategy(std::string_view name) {
  if (name == "graphpipe") return graphpipe::v1::STRATEGY_GRAPHPIPE;
  if (name == "sequential") return graphpipe::v1::STRATEGY_SEQUENTIAL;
  if (name == "piper") return graphpipe::v1::STRATEGY_PIPER;
  return invalid_argument("--strategy = '" + std::string(name) +
                          "', expected graphpipe, sequential or piper");
}

std::vector<int> stage_depths(const graphpipe::v1::Plan& plan) {
  std::vector<int> depth(plan.stages_size(), 1);
  for (bool changed = true; changed;) {  // edges are few and form a DAG
    changed = false;
    for (const auto& e : plan.edges()) {
      if (depth[e.dst_stage()] < depth[e.src_stage()] + 1) {
        depth[e.dst_stage()] = depth[e.src_stage()] + 1;
        changed = true;
      }
    }
  }
  return depth;
}

int pipeline_depth(const graphpipe::v1::Plan& plan) {
  const auto depth = stage_depths(plan);
  return depth.empty() ? 0 : *std::max_element(depth.begin(), depth.end());
}

namespace {

// A depth-first walk of the stage DAG that follows the heaviest edge first. Forward: from the
// sources along out-edges, a stage taken once all its predecessors are. Backward: from the sinks
// along in-edges, a stage taken once all its successors are, the walk reversed at the end. Both
// give a topological order. Ties go to the smaller key (the larger with !small_keys_first), never
// to the smaller stage number.
std::vector<int> walk_order(int num_stages,
                            const std::map<std::pair<int, int>, int64_t>& edge_bytes,
                            const std::vector<int>& keys, bool forward, bool small_keys_first) {
  // Stages first by this rank, the smallest first.
  auto rank = [&](int s) { return small_keys_first ? keys[s] : -keys[s]; };
  std::vector<std::vector<std::pair<int64_t, int>>> next_of(num_stages);  // (bytes, stage)
  std::vector<int> remaining(num_stages, 0);  // edges into a stage, in the walk's direction
  for (const auto& [edge, bytes] : edge_bytes) {
    const auto [from, to] = forward ? edge : std::pair{edge.second, edge.first};
    next_of[from].emplace_back(bytes, to);
    ++remaining[to];
  }
  std::vector<int> stack;
  for (int s = 0; s < num_stages; ++s) {
    if (remaining[s] == 0) stack.push_back(s);
  }
  // The first to take last on the stack.
  std::sort(stack.begin(), stack.end(), [&](int a, int b) { return rank(a) > rank(b); });
  std::vector<char> taken(num_stages, 0);
  std::vector<int> order;
  while (!stack.empty()) {
    const int s = stack.back();
    stack.pop_back();
    if (taken[s]) continue;
    taken[s] = 1;
    order.push_back(s);
    std::vector<std::tuple<int64_t, int, int>> next;  // (bytes, -rank, stage)
    for (const auto& [bytes, t] : next_of[s]) {
      if (--remaining[t] == 0) next.emplace_back(bytes, -rank(t), t);
    }
    // Lightest first: the heaviest (and among equals the first by rank) is taken next.
    std::sort(next.begin(), next.end());
    for (const auto& [bytes, neg_rank, t] : next) stack.push_back(t);
  }
  if (!forward) std::reverse(order.begin(), order.end());
  return order;
}

}  // namespace

std::vector<int> placement_order(int num_stages,
                                 const std::map<std::pair<int, int>, int64_t>& edge_bytes,
                                 const std::vector<int>& keys) {
  return walk_order(num_stages, edge_bytes, keys, /*forward=*/true, /*small_keys_first=*/true);
}

std::vector<std::vector<int>> placement_orders(
    int num_stages, const std::map<std::pair<int, int>, int64_t>& edge_bytes,
    const std::vector<int>& keys) {
  std::vector<std::vector<int>> orders;
  for (const bool forward : {true, false}) {
    for (const bool small_keys_first : {true, false}) {
      auto order = walk_order(num_stages, edge_bytes, keys, forward, small_keys_first);
      if (std::find(orders.begin(), orders.end(), order) == orders.end()) {
        orders.push_back(std::move(order));
      }
    }
  }
  return orders;
}

std::vector<StageAssignment> placed_in_order(const std::vector<StageAssignment>& stages,
                                             const std::vector<int>& order) {
  std::vector<StageAssignment> out;
  out.reserve(order.size());
  int rank = 0;
  for (int s : order) {
    StageAssignment st = stages[s];
    for (int& r : st.ranks) r = rank++;
    out.push_back(std::move(st));
  }
  return out;
}

std::vector<int> stage_keys(const std::vector<std::vector<int>>& stage_ops) {
  std::vector<int> keys;
  keys.reserve(stage_ops.size());
  for (const auto& ops : stage_ops) {
    keys.push_back(ops.empty() ? std::numeric_limits<int>::max()
                               : *std::min_element(ops.begin(), ops.end()));
  }
  return keys;
}

std::vector<StageAssignment> place_stages(const Partition& partition, const UnitGraph& units) {
  const int n = static_cast<int>(partition.stages.size());
  std::vector<int> stage_of_unit(units.num_units(), -1);
  for (int s = 0; s < n; ++s) {
    for (int u : partition.stages[s].units) stage_of_unit[u] = s;
  }
  for (int u = 0; u < units.num_units(); ++u) {
    GP_CHECK(stage_of_unit[u] >= 0, "a partition must assign every planning unit to a stage");
  }
  std::vector<StageAssignment> out(n);
  for (int s = 0; s < n; ++s) {
    for (int u : partition.stages[s].units) {
      out[s].ops.insert(out[s].ops.end(), units.unit_ops[u].begin(), units.unit_ops[u].end());
    }
    out[s].micro_batch = partition.micro_batch;
  }
  std::vector<int> order;
  if (partition.chain) {
    for (int s = 0; s < n; ++s) order.push_back(s);
  } else {
    std::map<std::pair<int, int>, int64_t> weight;  // stage graph with bytes per edge
    for (const auto& [edge, bytes] : units.edge_bytes) {
      const int a = stage_of_unit[edge.first], b = stage_of_unit[edge.second];
      if (a != b) weight[{a, b}] += bytes;
    }
    std::vector<std::vector<int>> stage_ops(n);
    for (int s = 0; s < n; ++s) stage_ops[s] = out[s].ops;
    order = placement_order(n, weight, stage_keys(stage_ops));
  }
  int rank = 0;
  for (int s : order) {
    for (int r = 0; r < partition.stages[s].devices; ++r) out[s].ranks.push_back(rank++);
  }
  // Chain partitions keep their order; DAG partitions are renumbered in placement order so that
  // stage ids follow the pipeline (and not the partitioner's numbering).
  if (!partition.chain) {
    std::vector<StageAssignment> ordered;
    for (int s : order) ordered.push_back(std::move(out[s]));
    return ordered;
  }
  return out;
}

std::vector<StageAssignment> assign_devices(const model::Graph& graph,
                                            const cost::CostModel& compute,
                                            const graphpipe::v1::Cluster& cluster,
                                            int64_t mini_batch, std::vector<StageAssignment> stages,
                                            const std::vector<int64_t>& memory_bytes) {
  const int n = cost::num_devices(cluster);
  std::vector<double> speed(static_cast<size_t>(n));
  std::vector<int64_t> capacity(static_cast<size_t>(n));
  std::vector<std::string> kind(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) {
    const auto& d = cost::device_of_rank(cluster, r);
    speed[static_cast<size_t>(r)] = cost::device_speed(d);
    capacity[static_cast<size_t>(r)] = d.memory_capacity_bytes();
    kind[static_cast<size_t>(r)] = d.name();
  }
  std::vector<int> devices(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) devices[static_cast<size_t>(r)] = r;
  std::stable_sort(devices.begin(), devices.end(), [&](int a, int b) {
    return speed[static_cast<size_t>(a)] > speed[static_cast<size_t>(b)];
  });
  // Compute per replica over the iteration: what a stage's device must do.
  const size_t num_stages = stages.size();
  std::vector<double> weight(num_stages, 0);
  std::vector<int> first_rank(num_stages, std::numeric_limits<int>::max());
  for (size_t s = 0; s < num_stages; ++s) {
    const StageAssignment& st = stages[s];
    const int64_t d = std::max<int64_t>(1, static_cast<int64_t>(st.ranks.size()));
    const int64_t b = std::max<int64_t>(1, st.micro_batch);
    const int64_t slice = (b + d - 1) / d;
    double us = 0;
    for (int op : st.ops) {
      const cost::OpTime t = compute.op_time(graph.op(op), slice);
      us += t.forward_us + t.backward_us;
    }
    weight[s] = us * static_cast<double>((mini_batch + b - 1) / b);
    for (int r : st.ranks) first_rank[s] = std::min(first_rank[s], r);
  }
  std::vector<size_t> order(num_stages);
  for (size_t s = 0; s < num_stages; ++s) order[s] = s;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    if (weight[a] != weight[b]) return weight[a] > weight[b];
    return first_rank[a] < first_rank[b];
  });
  std::vector<char> used(static_cast<size_t>(n), 0);
  for (size_t s : order) {
    const size_t need = stages[s].ranks.size();
    const int64_t memory = s < memory_bytes.size() ? memory_bytes[s] : 0;
    std::vector<int> got;
    for (const bool fits_only : {true, false}) {
      for (int r : devices) {
        if (got.size() >= need) break;
        if (used[static_cast<size_t>(r)]) continue;
        if (fits_only && capacity[static_cast<size_t>(r)] < memory) continue;
        used[static_cast<size_t>(r)] = 1;
        got.push_back(r);
      }
    }
    if (got.size() < need) return stages;  // more replicas than devices: left as they were
    std::sort(got.begin(), got.end());
    stages[s].ranks = std::move(got);
  }
  // Inside one kind the stages keep their placement order (placement_order puts heavily
  // connected stages next to each other, on one node): each kind's devices, in rank order, go
  // to its stages in their old order.
  std::map<std::string, std::vector<size_t>> stages_of_kind;
  std::map<std::string, std::vector<int>> devices_of_kind;
  for (size_t s = 0; s < num_stages; ++s) {
    const auto& ranks = stages[s].ranks;
    if (ranks.empty()) continue;
    const std::string& k = kind[static_cast<size_t>(ranks.front())];
    if (!std::all_of(ranks.begin(), ranks.end(),
                     [&](int r) { return kind[static_cast<size_t>(r)] == k; })) {
      continue;
    }
    stages_of_kind[k].push_back(s);
    auto& pool = devices_of_kind[k];
    pool.insert(pool.end(), ranks.begin(), ranks.end());
  }
  for (auto& [k, list] : stages_of_kind) {
    std::stable_sort(list.begin(), list.end(),
                     [&](size_t a, size_t b) { return first_rank[a] < first_rank[b]; });
    auto& pool = devices_of_kind[k];
    std::sort(pool.begin(), pool.end());
    size_t next = 0;
    for (size_t s : list) {
      for (int& r : stages[s].ranks) r = pool[next++];
    }
  }
  return stages;
}

namespace {

// The micro-batch sizes to search: the request's, checked, or every searchable one.
Result<std::vector<int64_t>> micro_batches_to_search(const SearchRequest& req) {
  if (req.mini_batch <= 0 || req.mini_batch > plan::kMaxMiniBatch) {
    return invalid_argument("--batch = " + std::to_string(req.mini_batch) + ", must be in [1, " +
                            std::to_string(plan::kMaxMiniBatch) + "]");
  }
  std::vector<int64_t> micro_batches = req.micro_batches;
  if (micro_batches.empty()) {
    GP_ASSIGN_OR_RETURN(micro_batches, searchable_micro_batches(req.mini_batch));
  }
  for (int64_t b : micro_batches) {
    if (b <= 0 || (b & (b - 1)) != 0 || req.mini_batch % b != 0) {
      return invalid_argument("--micro-batches: " + std::to_string(b) +
                              " must be a power of two dividing the mini-batch " +
                              std::to_string(req.mini_batch));
    }
    if (req.mini_batch / b > kMaxMicroBatchesPerIteration) {
      return invalid_argument("--micro-batches: " + std::to_string(b) + " gives " +
                              std::to_string(req.mini_batch / b) +
                              " micro-batches per iteration, more than " +
                              std::to_string(kMaxMicroBatchesPerIteration));
    }
  }
  return micro_batches;
}

// The search's memory model: every stage priced recomputing with --recompute always.
cost::MemoryOptions search_memory_options(const SearchRequest& req) {
  cost::MemoryOptions m{req.training.optimizer(), req.training.precision(), req.compute};
  m.recompute = req.recompute == RecomputeMode::kAlways;
  m.shard_optimizer = req.shard_optimizer == ShardMode::kAlways;
  return m;
}

// The kind whose costs the partitioners use: on a mixed cluster the kind whose model is the
// request's `compute` (search_mixed sets it per kind), else the cluster's own device.
const graphpipe::v1::DeviceKind& reference_device(const SearchRequest& req) {
  if (req.device_costs != nullptr) {
    for (const auto& kind : cost::device_kind_names(req.cluster)) {
      if (&req.device_costs->for_kind(kind) == req.compute) {
        return *cost::find_device_kind(req.cluster, kind);
      }
    }
  }
  return req.cluster.device();
}

// The simulator of a search: each device's own model where the request has per-device ones.
sim::Simulator make_simulator(const SearchRequest& req, const cost::CommModel& comm,
                              const cost::MemoryOptions& memory) {
  if (req.device_costs != nullptr) return sim::Simulator(*req.device_costs, comm, memory);
  return sim::Simulator(*req.compute, comm, memory);
}

// One run of search_plan: the models built from the request, the plans found so far and the
// result being filled. Sweeps the micro-batch sizes (search_micro_batch), partitioning with the
// strategy and lowering and simulating each partition (evaluate); then refines the best plan and
// a close runner-up (refine) and reports the better.
class Search {
 public:
  Search(const SearchRequest& req, std::vector<int64_t> micro_batches);
  Search(const Search&) = delete;
  Search& operator=(const Search&) = delete;

  Result<SearchResult> run(std::chrono::steady_clock::time_point start);

 private:
  // The whole search, without the result's summary: leaves the plan found in best_.
  Status find();
  // A partition to evaluate besides the strategy's own, with the units and costs it was made for.
  struct OtherPartition {
    const Partition* partition;
    const UnitGraph* units;
    const StageCostModel* costs;
    std::string name;
  };

  PlanInputs make_inputs(bool chain) const;
  // Mixed clusters: `stages` on the devices assign_devices chooses, with each stage's memory
  // estimated (where the kinds' capacities differ); otherwise `stages` as they are.
  std::vector<StageAssignment> assigned(std::vector<StageAssignment> stages, bool chain) const;

  // What a micro-batch is partitioned with: the search's own costs, or (--recompute auto, where
  // those fit no plan) costs pricing every stage recomputing, without GraphPipe's Piper
  // candidate (branch_ctx nullptr).
  struct Pricing {
    const PartitionContext* ctx;
    const PartitionContext* branch_ctx;
  };
  // One micro-batch size: partitions, lowers and simulates its candidates.
  Status search_micro_batch(int64_t b);
  Status search_partitions(int64_t b, const Pricing& pricing, CandidateSummary* cand);
  // True (the candidate reported as not searched) when no plan of micro-batch `b` can come close
  // to the best plan so far.
  bool skip_by_kernel_bound(int64_t b, CandidateSummary* cand);
  // The strategy's partition of micro-batch `b`; GraphPipe's is seeded by the chain DP's.
  Result<PartitionOutcome> partition(int64_t b,
                                     const std::optional<PartitionOutcome>& chain_outcome,
                                     const PartitionContext& ctx) const;
  Status evaluate_outcome(const PartitionOutcome& outcome, const StageCostModel& costs,
                          CandidateSummary* cand);
  // GraphPipe: the chain DP's partitions and Piper's over compressed branches, each lowered as a
  // chain and as a DAG.
  Status evaluate_other_partitions(int64_t b, const PartitionOutcome& chain_outcome,
                                   const Pricing& pricing, CandidateSummary* cand);
  // Lowers and simulates one partition; keeps it when it beats the best plan so far. Returns
  // false (with the reason in `cand`) when it does not fit in memory.
  Result<bool> evaluate(const Partition& part, const UnitGraph& part_units,
                        const StageCostModel& part_costs, bool chain, const std::string& source,
                        CandidateSummary* cand);
  // True (counted as pruned) when partition_throughput_bound says `part` cannot beat the best.
  bool pruned_by_bound(const Partition& part, const UnitGraph& part_units,
                       const StageCostModel& part_costs, CandidateSummary* cand);
  // Ranks a simulated plan against the best plan and the runner-up.
  void keep(PlanFound found);
  void report_candidate(const CandidateSummary& cand);

  // Refinements of a plan's stages: a trial replaces the plan when it runs, fits and simulates
  // more than 0.2 % faster. Sets the plan's idle-device gains and reason. Never ends below the
  // plan without per-stage sizes (the idle devices given), nor below its own stages with any
  // one micro-batch for all.
  Status refine(PlanFound& f) const;
  Status refine_micro_batches(PlanFound& f) const;
  Status give_idle_devices(PlanFound& f) const;
  // Splits a stage in series or into its branches, the new stage on idle devices, while that
  // simulates faster: where more replicas do not pay, a shallower stage per device shortens the
  // pipeline's fill and drain. Returns the trials simulated.
  Result<int> split_onto_idle_devices(PlanFound& f) const;
  // The plan's stages in each of placement_orders (DAG plans): the fastest replaces the plan when
  // it is faster at all.
  Status choose_placement(PlanFound& f) const;
  // The plan's stages and ranks with one micro-batch size for all, every size allowed in turn:
  // the fastest replaces the plan when it is faster at all.
  Status try_uniform_micro_batches(PlanFound& f) const;
  // A trial's plan and simulation; its throughput is -1 when it deadlocks or does not fit.
  Result<PlanFound> simulate_trial(bool chain, std::vector<StageAssignment> trial) const;
  // The same without a progress line (the improvement search reports its own).
  Result<PlanFound> simulate_stages(bool chain, std::vector<StageAssignment> trial) const;
  // A move's plan (improve.h), simulated: throughput -1 also when no lowering accepts its stages
  // (a chain a tensor would flow back along), which a move may make; other errors stay errors.
  Result<PlanFound> simulate_move(const StagePlan& move) const;
  // `t` replaces `f` when it simulates more than `factor` times faster.
  static bool keep_if_faster(PlanFound t, PlanFound& f, double factor = 1.002);
  // The better of the refined best plan and runner-up, into best_.
  Status choose_best();
  // GraphPipe: the fastest of the plain searches' plans on the first M of these devices, for every
  // M below devices_ (search.h), into fewer_ (on this cluster, re-simulated); throughput -1 when
  // none is found or none can beat the best found for all (fewer_devices_bound).
  Status search_fewer_devices();
  // Samples/s no plan on `devices` devices passes, at any micro-batch the search or its
  // refinement may use: kernel_batch_bound of the largest, computed once for the whole ladder.
  double fewer_devices_bound(int devices);
  // search_plan's plan for the first `fewer` devices, on this cluster (the other devices idle)
  // and simulated on it; throughput -1 when none fits.
  // With `ladder` false that search does not plan for fewer devices itself.
  Result<PlanFound> plan_on_fewer_devices(int fewer, bool ladder) const;
  // The most devices for which every count below is searched (kFewerDevicesChainWork).
  int fewer_devices_chain_limit() const;
  // Beyond that limit: search_plan's plan (which plans for fewer devices in turn) for the larger
  // of the limit and the largest power of two below devices_, into fewer_.
  Status search_fewer_devices_ladder();
  // Takes fewer_ when it is faster than every plan found for all the devices.
  void adopt_fewer_devices();
  // "graphpipe on 32 devices", or "graphpipe on 29 of 32 devices" in a search for fewer devices.
  std::string log_prefix() const;
  // The improvement search (improve.h) from `f`, which takes its best plan.
  Status improve(PlanFound& f);
  MoveSpace move_space() const;
  // Why the chosen plan leaves devices idle; empty when it uses them all.
  std::string idle_devices_reason() const;
  void finish(std::chrono::steady_clock::time_point start);

  const SearchRequest& req_;
  const model::Graph& graph_;
  const std::vector<int64_t> micro_batches_;
  const int devices_;
  const UnitGraph units_;
  const cost::CommModel datasheet_comm_;
  const cost::CommModel& comm_;
  const cost::MemoryOptions memory_;
  const StageCostModel costs_;
  PartitionContext ctx_;
  // GraphPipe's Piper candidate: branches compressed, and only while the downsets stay few
  // enough for Piper's quadratic DP to be cheap.
  const bool piper_candidate_;
  const UnitGraph branch_units_;
  std::optional<StageCostModel> branch_costs_;
  PartitionContext branch_ctx_;
  // --recompute auto: every stage priced recomputing, for micro-batches nothing fits at without.
  std::optional<StageCostModel> recompute_costs_;
  PartitionContext recompute_ctx_;
  // --shard-optimizer auto: replicated stages priced sharded (and recomputing unless --recompute
  // never), for micro-batches nothing fits at otherwise.
  std::optional<StageCostModel> shard_costs_;
  PartitionContext shard_ctx_;
  const sim::Simulator simulator_;
  const int64_t capacity_;
  // A mixed cluster with per-device models: plans go through assigned() and every bound is
  // taken with the fastest kind's model (bound_compute_); partition bounds, priced with the
  // reference kind, hold only when that is the fastest (partition_bound_holds_).
  const bool mixed_;
  const cost::CostModel& bound_compute_;
  const bool partition_bound_holds_;
  bool capacities_differ_ = false;

  SearchResult result_;
  // The best plan so far, and the best with other stages: both are refined at the end, since a
  // greedy refinement of the second may end above the first's.
  PlanFound best_, runner_up_;
  // The plan for fewer devices, and the best for all of them before it was compared.
  PlanFound fewer_;
  double all_devices_throughput_ = -1;
  double time_per_sample_s_ = -1;                       // of fewer_devices_bound; -1 until computed
  std::optional<IterationBoundModel> iteration_bound_;  // of fewer_devices_bound, when affordable
  bool plan_fewer_devices_ = true;
  int parent_devices_ = 0;  // in a search for fewer devices: the devices of the one that runs it //
                            // false in the searches search_fewer_devices runs
  int done_ = 0;            // micro-batch sizes searched or skipped
};

Search::Search(const SearchRequest& req, std::vector<int64_t> micro_batches)
    : req_(req),
      graph_(*req.graph),
      micro_batches_(std::move(micro_batches)),
      devices_(req.cluster.num_nodes() * req.cluster.devices_per_node() -
               req.cluster.excluded_ranks_size()),
      units_(req.strategy == graphpipe::v1::STRATEGY_PIPER && req.piper_compress_branches
                 ? compress_branches(graph_, build_units(graph_, req.units))
                 : build_units(graph_, req.units)),
      datasheet_comm_(req.cluster),
      comm_(req.comm != nullptr ? *req.comm : datasheet_comm_),
      memory_(search_memory_options(req)),
      costs_(graph_, units_, *req.compute, comm_, memory_, req.mini_batch,
             *std::max_element(micro_batches_.begin(), micro_batches_.end()),
             &reference_device(req)),
      piper_candidate_(req.strategy == graphpipe::v1::STRATEGY_GRAPHPIPE),
      branch_units_(piper_candidate_ ? compress_branches(graph_, units_) : UnitGraph{}),
      simulator_(make_simulator(req, comm_, memory_)),
      capacity_(req.cluster.device().memory_capacity_bytes()),
      mixed_(req.device_costs != nullptr && cost::is_mixed(req.cluster)),
      bound_compute_(mixed_ ? req.device_costs->reference() : *req.compute),
      partition_bound_holds_(!mixed_ || req.compute == &req.device_costs->reference()) {
  if (mixed_) {
    for (int r = 0; r < devices_; ++r) {
      capacities_differ_ =
          capacities_differ_ ||
          cost::device_of_rank(req.cluster, r).memory_capacity_bytes() != capacity_;
    }
  }
  ctx_.graph = &graph_;
  ctx_.units = &units_;
  ctx_.costs = &costs_;
  ctx_.num_devices = devices_;
  ctx_.mini_batch = req.mini_batch;
  ctx_.piper_downset_limit = req.piper_downset_limit;
  set_cluster_levels(req.cluster, comm_, &ctx_);
  branch_ctx_ = ctx_;
  if (piper_candidate_) {
    const int64_t max_b = *std::max_element(micro_batches_.begin(), micro_batches_.end());
    branch_costs_.emplace(graph_, branch_units_, *req.compute, comm_, memory_, req.mini_batch,
                          max_b, &reference_device(req));
    branch_ctx_.units = &branch_units_;
    branch_ctx_.costs = &*branch_costs_;
    branch_ctx_.piper_downset_limit = kPiperCandidateDownsets;
  }
  // Under never too: the partitioners' per-unit memory overestimates a stage's, so a partition
  // priced recomputing can fit where theirs did not, recomputing nothing once simulated.
  if (req.recompute != RecomputeMode::kAlways) {
    cost::MemoryOptions recomputing = memory_;
    recomputing.recompute = true;
    recompute_costs_.emplace(graph_, units_, *req.compute, comm_, recomputing, req.mini_batch,
                             *std::max_element(micro_batches_.begin(), micro_batches_.end()),
                             &reference_device(req));
    recompute_ctx_ = ctx_;
    recompute_ctx_.costs = &*recompute_costs_;
  }
  if (req.shard_optimizer == ShardMode::kAuto) {
    cost::MemoryOptions sharding = memory_;
    sharding.shard_optimizer = true;
    sharding.recompute = req.recompute != RecomputeMode::kNever;
    shard_costs_.emplace(graph_, units_, *req.compute, comm_, sharding, req.mini_batch,
                         *std::max_element(micro_batches_.begin(), micro_batches_.end()),
                         &reference_device(req));
    shard_ctx_ = ctx_;
    shard_ctx_.costs = &*shard_costs_;
  }
  result_.num_units = units_.num_units();
}

Result<SearchResult> Search::run(std::chrono::steady_clock::time_point start) {
  GP_RETURN_IF_ERROR(find());
  finish(start);
  if (result_.feasible) {
    GP_ASSIGN_OR_RETURN(result_.recompute_reasons,
                        recompute_reasons(simulator_, req_.recompute, capacity_, graph_,
                                          result_.plan, result_.simulation));
  }
  return std::move(result_);
}

Status Search::find() {
  // Largest micro-batches first: on large clusters they give the best plans, and the bound in
  // `evaluate` then spares the simulation of most small ones. Reported in ascending order.
  std::vector<int64_t> order = micro_batches_;
  std::sort(order.begin(), order.end(), std::greater<>());
  for (int64_t b : order) GP_RETURN_IF_ERROR(search_micro_batch(b));
  std::stable_sort(result_.candidates.begin(), result_.candidates.end(),
                   [](const CandidateSummary& x, const CandidateSummary& y) {
                     return x.micro_batch < y.micro_batch;
                   });
  if (result_.feasible) GP_RETURN_IF_ERROR(choose_best());
  GP_RETURN_IF_ERROR(search_fewer_devices());
  adopt_fewer_devices();
  // Mixed: a plan for the fastest devices leaves the slowest idle; they may still take a split
  // or a replica of a light stage (the stages go through assign_devices again).
  if (mixed_ && result_.feasible && best_.plan.programs_size() < devices_) {
    GP_RETURN_IF_ERROR(give_idle_devices(best_));
  }
  if (result_.feasible && req_.improve.enabled()) GP_RETURN_IF_ERROR(improve(best_));
  return ok_status();
}

std::vector<StageAssignment> Search::assigned(std::vector<StageAssignment> stages,
                                              bool chain) const {
  if (!mixed_) return stages;
  std::vector<int64_t> memory;
  if (capacities_differ_) {
    // Memory per device as the memory model has it for the schedule's in-flight samples (the
    // ranks do not change them); a plan that still overflows is refused by its simulation.
    if (auto edges = stage_edges(graph_, stages, chain); edges.ok()) {
      const std::vector<int64_t> in_flight = in_flight_samples(stages, *edges);
      for (size_t s = 0; s < stages.size(); ++s) {
        const int d = std::max(1, static_cast<int>(stages[s].ranks.size()));
        memory.push_back(cost::stage_memory(graph_, stages[s].ops, stages[s].micro_batch,
                                            in_flight[s], d, memory_)
                             .total());
      }
    }
  }
  return assign_devices(graph_, *req_.compute, req_.cluster, req_.mini_batch, std::move(stages),
                        memory);
}

PlanInputs Search::make_inputs(bool chain) const {
  PlanInputs in;
  in.graph = &graph_;
  in.cluster = req_.cluster;
  in.mini_batch = req_.mini_batch;
  in.training = req_.training;
  in.strategy = req_.strategy;
  in.chain = chain;
  return in;
}

Status Search::search_micro_batch(int64_t b) {
  CandidateSummary cand;
  cand.micro_batch = b;
  if (skip_by_kernel_bound(b, &cand)) return ok_status();
  log_progress(log_prefix() + ": partitioning " + std::to_string(units_.num_units()) +
               " units at micro-batch " + std::to_string(b));
  GP_RETURN_IF_ERROR(search_partitions(b, {&ctx_, &branch_ctx_}, &cand));
  if (!cand.feasible && recompute_costs_) {
    // Monotone: only where no plan fits without does recomputation get priced in. Its partition
    // is simulated as the request says: under never it must fit without recomputing anything.
    log_progress(log_prefix() + ": partitioning again at micro-batch " + std::to_string(b) +
                 " with stages recomputing");
    CandidateSummary again;
    again.micro_batch = b;
    GP_RETURN_IF_ERROR(search_partitions(b, {&recompute_ctx_, nullptr}, &again));
    if (again.feasible) {
      cand = std::move(again);
    } else if (!again.reason.empty() && again.reason != cand.reason) {
      cand.reason += "; recomputing: " + again.reason;
    }
  }
  if (!cand.feasible && shard_costs_) {
    // After recomputation: only where nothing fits otherwise are replicated stages sharded.
    log_progress(log_prefix() + ": partitioning again at micro-batch " + std::to_string(b) +
                 " with replicated stages sharding their optimizer state");
    CandidateSummary again;
    again.micro_batch = b;
    GP_RETURN_IF_ERROR(search_partitions(b, {&shard_ctx_, nullptr}, &again));
    if (again.feasible) {
      cand = std::move(again);
    } else if (!again.reason.empty() && again.reason != cand.reason) {
      cand.reason += "; sharding the optimizer state: " + again.reason;
    }
  }
  report_candidate(cand);
  return ok_status();
}

Status Search::search_partitions(int64_t b, const Pricing& pricing, CandidateSummary* cand) {
  // GraphPipe: the chain DP's partition competes below, and its bottleneck seeds the search.
  std::optional<PartitionOutcome> chain_outcome;
  if (req_.strategy == graphpipe::v1::STRATEGY_GRAPHPIPE) {
    GP_ASSIGN_OR_RETURN(chain_outcome, partition_sequential(*pricing.ctx, b));
  }
  GP_ASSIGN_OR_RETURN(const PartitionOutcome outcome, partition(b, chain_outcome, *pricing.ctx));
  GP_RETURN_IF_ERROR(evaluate_outcome(outcome, *pricing.ctx->costs, cand));
  if (req_.strategy == graphpipe::v1::STRATEGY_GRAPHPIPE) {
    GP_RETURN_IF_ERROR(evaluate_other_partitions(b, *chain_outcome, pricing, cand));
  }
  return ok_status();
}

bool Search::skip_by_kernel_bound(int64_t b, CandidateSummary* cand) {
  // Every micro-batch's kernel bound below this share of the best plan: such a candidate can be
  // neither the best nor a runner-up worth refining, so skipping it changes no plan.
  constexpr double kKernelBoundShare = kRunnerUpShare;
  if (best_.throughput > 0 && b <= kKernelBoundMaxMicroBatch) {
    const double bound = kernel_batch_bound(graph_, bound_compute_, b, devices_);
    if (bound < kKernelBoundShare * best_.throughput) {
      ++result_.candidates_pruned;
      cand->reason = "not searched: with kernels of at most " + std::to_string(b) +
                     " samples no plan on these devices passes " +
                     std::to_string(static_cast<int64_t>(bound)) +
                     " samples/s, below the best plan found";
      report_candidate(*cand);
      return true;
    }
  }
  return false;
}

Result<PartitionOutcome> Search::partition(int64_t b,
                                           const std::optional<PartitionOutcome>& chain_outcome,
                                           const PartitionContext& ctx) const {
  switch (req_.strategy) {
    case graphpipe::v1::STRATEGY_GRAPHPIPE: {
      PartitionContext seeded = ctx;
      if (chain_outcome->partition) {
        seeded.tps_upper_hint_s = chain_outcome->partition->bottleneck_tps_s;
      }
      if (best_.throughput > 0) {  // evaluate() would not simulate slower partitions
        seeded.tps_useful_limit_s = 1.0 / best_.throughput;
      }
      return partition_graphpipe(seeded, b);
    }
    case graphpipe::v1::STRATEGY_SEQUENTIAL:
      return partition_sequential(ctx, b);
    case graphpipe::v1::STRATEGY_PIPER:
      return partition_piper(ctx, b);
    default:
      return invalid_argument("--strategy: unspecified");
  }
}

Status Search::evaluate_outcome(const PartitionOutcome& outcome, const StageCostModel& costs,
                                CandidateSummary* cand) {
  if (!outcome.partition) {
    cand->reason = outcome.infeasible_reason;
    return ok_status();
  }
  const Partition& part = *outcome.partition;
  GP_RETURN_IF_ERROR(
      evaluate(part, units_, costs, part.chain,
               part.origin.empty() ? (part.chain ? "chain" : "graph partition") : part.origin, cand)
          .status());
  // Sequential: the other order's optimum and PipeDream's own DP; GraphPipe: shallower
  // partitions with a slower bottleneck. The simulator picks among them.
  for (const Partition& alt : outcome.alternatives) {
    GP_RETURN_IF_ERROR(evaluate(alt, units_, costs, alt.chain, alt.origin, cand).status());
  }
  return ok_status();
}

Status Search::evaluate_other_partitions(int64_t b, const PartitionOutcome& chain_outcome,
                                         const Pricing& pricing, CandidateSummary* cand) {
  // Graph pipelines contain chains: the chain DP's partition and Piper's over compressed
  // branches compete too, each lowered as a chain and as a DAG, and the simulator (which
  // sees bubbles the DPs cannot) picks.
  const StageCostModel& costs = *pricing.ctx->costs;
  PartitionOutcome branch_outcome;
  if (pricing.branch_ctx != nullptr) {
    GP_ASSIGN_OR_RETURN(branch_outcome, partition_piper(*pricing.branch_ctx, b));
  }
  std::vector<OtherPartition> others;
  if (chain_outcome.partition) {
    others.push_back({&*chain_outcome.partition, &units_, &costs, chain_outcome.partition->origin});
  }
  for (const Partition& alt : chain_outcome.alternatives) {
    others.push_back({&alt, &units_, &costs, alt.origin});
  }
  if (branch_outcome.partition) {
    others.push_back({&*branch_outcome.partition, &branch_units_, &*branch_costs_,
                      "Piper, compressed branches"});
  }
  for (const OtherPartition& o : others) {
    for (const bool chain : {true, false}) {
      GP_RETURN_IF_ERROR(evaluate(*o.partition, *o.units, *o.costs, chain,
                                  o.name + (chain ? "" : ", DAG lowering"), cand)
                             .status());
    }
  }
  return ok_status();
}

Result<bool> Search::evaluate(const Partition& part, const UnitGraph& part_units,
                              const StageCostModel& part_costs, bool chain,
                              const std::string& source, CandidateSummary* cand) {
  if (pruned_by_bound(part, part_units, part_costs, cand)) return false;
  Partition lowered = part;
  lowered.chain = chain;
  auto stages = assigned(place_stages(lowered, part_units), chain);
  GP_ASSIGN_OR_RETURN(auto plan, build_plan(make_inputs(chain), stages));
  GP_ASSIGN_OR_RETURN(auto sim,
                      simulate_choosing_memory(simulator_, req_.recompute, req_.shard_optimizer,
                                               capacity_, graph_, &plan));
  if (sim.deadlocked) {
    return internal_error("the lowered plan deadlocks: " + sim.deadlock_report());
  }
  if (!sim.fits_memory()) {
    if (!cand->feasible) {
      cand->reason = "simulated peak memory " + std::to_string(sim.peak_memory_bytes) +
                     " bytes exceeds the device's " + std::to_string(capacity_);
      if (mixed_) cand->reason = "simulated peak memory exceeds a device's capacity";
    }
    return false;
  }
  if (!cand->feasible || sim.throughput_samples_per_s > cand->throughput_samples_per_s) {
    cand->feasible = true;
    cand->reason.clear();
    cand->bottleneck_tps_s = part.bottleneck_tps_s;
    cand->throughput_samples_per_s = sim.throughput_samples_per_s;
    cand->num_stages = plan.stages_size();
    cand->source = source;
    if (const std::string r = recomputing_stages(plan); !r.empty()) {
      cand->source += ", recomputing stages " + r;
    }
    if (const std::string r = sharding_stages(plan); !r.empty()) {
      cand->source += ", sharding the optimizer state of stages " + r;
    }
  }
  if (sim.throughput_samples_per_s > runner_up_.throughput) {
    PlanFound found;
    found.throughput = sim.throughput_samples_per_s;
    plan.mutable_provenance()->set_sp_edges_added(part.sp_edges_added);
    sim::fill_predicted_metrics(sim, &plan);
    plan.mutable_predicted()->set_bottleneck_tps_s(part.bottleneck_tps_s);
    found.plan = std::move(plan);
    found.simulation = std::move(sim);
    found.stages = std::move(stages);
    found.chain = chain;
    found.tps = part.bottleneck_tps_s;
    found.searched_devices = devices_;
    keep(std::move(found));
  }
  return true;
}

bool Search::pruned_by_bound(const Partition& part, const UnitGraph& part_units,
                             const StageCostModel& part_costs, CandidateSummary* cand) {
  // No plan of this partition can beat partition_throughput_bound (the busiest replica's
  // compute and all-reduce, and fill and drain): skip lowering and simulating it when that is
  // already below the best plan, as it is for most small micro-batches on large clusters.
  if (best_.throughput > 0 && partition_bound_holds_) {
    const double bound = partition_throughput_bound(part, part_units, part_costs);
    if (bound < best_.throughput) {
      ++result_.candidates_pruned;
      if (!cand->feasible && cand->reason.empty()) {
        cand->reason = "not simulated: its stages' compute allows at most " +
                       std::to_string(static_cast<int64_t>(bound)) +
                       " samples/s, below the best plan found";
      }
      return true;
    }
  }
  return false;
}

void Search::keep(PlanFound found) {
  result_.feasible = true;
  if (found.stages == best_.stages) {
    if (found.throughput > best_.throughput) best_ = std::move(found);
  } else if (found.throughput > best_.throughput) {
    runner_up_ = std::move(best_);
    best_ = std::move(found);
  } else {
    runner_up_ = std::move(found);
  }
}

void Search::report_candidate(const CandidateSummary& cand) {
  result_.candidates.push_back(cand);
  ++done_;
  if (req_.progress) {
    req_.progress(done_, static_cast<int>(micro_batches_.size()), format_candidate(cand));
  }
}

Status Search::refine(PlanFound& f) const {
  if (!req_.per_stage_microbatch) return give_idle_devices(f);
  // Greedy steps can end lower from one start than from another: the per-stage sizes, once the
  // idle devices are given, may end below the start with the idle devices given (what
  // --uniform-microbatch returns), or below their own stages with one size for all (dlrm on 16
  // and 32 V100s, by 3.6 and 1.5 %). So both ends are finished, each also tried at every one
  // size for all, and the faster is kept: the refinement never ends below its start.
  PlanFound start = f;
  GP_RETURN_IF_ERROR(refine_micro_batches(f));
  const bool sizes_changed = f.stages != start.stages;
  GP_RETURN_IF_ERROR(give_idle_devices(f));
  GP_RETURN_IF_ERROR(try_uniform_micro_batches(f));
  if (sizes_changed) {
    GP_RETURN_IF_ERROR(give_idle_devices(start));
    GP_RETURN_IF_ERROR(try_uniform_micro_batches(start));
    if (start.throughput > f.throughput) f = std::move(start);
  }
  return ok_status();
}

Result<PlanFound> Search::simulate_trial(bool chain, std::vector<StageAssignment> trial) const {
  log_progress(log_prefix() + ": simulating a refinement of the best plan (" +
               std::to_string(trial.size()) + " stages)");
  return simulate_stages(chain, std::move(trial));
}

Result<PlanFound> Search::simulate_stages(bool chain, std::vector<StageAssignment> trial) const {
  PlanFound t;
  trial = assigned(std::move(trial), chain);
  GP_ASSIGN_OR_RETURN(t.plan, build_plan(make_inputs(chain), trial));
  GP_ASSIGN_OR_RETURN(t.simulation,
                      simulate_choosing_memory(simulator_, req_.recompute, req_.shard_optimizer,
                                               capacity_, graph_, &t.plan));
  const bool runs = !t.simulation.deadlocked && t.simulation.fits_memory();
  t.throughput = runs ? t.simulation.throughput_samples_per_s : -1;
  t.stages = std::move(trial);
  return t;
}

Result<PlanFound> Search::simulate_move(const StagePlan& move) const {
  auto t = simulate_stages(move.chain, move.stages);
  if (!t.ok() && t.status().code() == StatusCode::kInvalidArgument) return PlanFound{};
  return t;
}

bool Search::keep_if_faster(PlanFound t, PlanFound& f, double factor) {
  if (t.throughput <= f.throughput * factor) return false;
  t.plan.mutable_provenance()->set_sp_edges_added(f.plan.provenance().sp_edges_added());
  sim::fill_predicted_metrics(t.simulation, &t.plan);
  t.plan.mutable_predicted()->set_bottleneck_tps_s(f.tps);
  f.throughput = t.throughput;
  f.stages = std::move(t.stages);
  f.plan = std::move(t.plan);
  f.simulation = std::move(t.simulation);
  return true;
}

Status Search::refine_micro_batches(PlanFound& f) const {
  // Greedy refinement: one stage's micro-batch doubled or halved at a time, kept when the
  // simulated throughput improves by more than 0.2% and the plan still fits and runs. Each
  // trial is a simulation, whose cost grows with stages and micro-batches, so the refinement
  // stops once its trials have simulated kRefineEvents events: a budget on the work that keeps
  // the search fast on deep pipelines and, unlike a time limit, gives the same plan anywhere.
  constexpr int64_t kRefineEvents = 250000;
  int64_t simulated_events = 0;  // by this plan's trials so far
  auto budget_left = [&] { return simulated_events < kRefineEvents; };
  for (int pass = 0; pass < 4 && budget_left(); ++pass) {
    bool improved = false;
    for (size_t s = 0; s < f.stages.size() && budget_left(); ++s) {
      for (const bool grow : {true, false}) {
        // Sizes the user restricted the search to (--micro-batches) bound the refinement too.
        const std::optional<int64_t> b = refined_micro_batch(
            f.stages[s].micro_batch, grow, static_cast<int>(f.stages[s].ranks.size()),
            req_.mini_batch, req_.micro_batches);
        if (!b) continue;
        auto trial = f.stages;
        trial[s].micro_batch = *b;
        GP_ASSIGN_OR_RETURN(PlanFound t, simulate_trial(f.chain, std::move(trial)));
        simulated_events += t.simulation.events_processed;
        improved = keep_if_faster(std::move(t), f) || improved;
      }
    }
    if (req_.progress) {
      char line[128];
      std::snprintf(line, sizeof(line),
                    "per-stage micro-batches, pass %d: %.1f samples/s simulated", pass + 1,
                    f.throughput);
      req_.progress(pass + 1, 4, line);
    }
    if (!improved) break;
  }
  return ok_status();
}

Status Search::give_idle_devices(PlanFound& f) const {
  // Devices left idle: give one stage more replicas from the idle devices (twice its count,
  // or every idle device; replicas split a micro-batch unevenly when their count does not
  // divide it). Each round tries every stage and keeps the fastest trial, while it improves
  // the simulated throughput by more than 0.2 % and fits; taking the first gain instead would
  // hand the idle devices to whichever stage comes first. The DPs stop replicating where
  // their estimate stops improving; the simulator, which sees bubbles, may disagree.
  int trials = 0, gains = 0;
  for (bool improved = true; improved && trials < kMaxIdleTrials;) {
    improved = false;
    std::vector<char> used(devices_, 0);
    for (const auto& st : f.stages) {
      for (int r : st.ranks) used[r] = 1;
    }
    std::vector<int> idle;
    for (int r = 0; r < devices_; ++r) {
      if (!used[r]) idle.push_back(r);
    }
    PlanFound fastest;
    for (size_t s = 0; s < f.stages.size() && trials < kMaxIdleTrials; ++s) {
      const size_t d = f.stages[s].ranks.size();
      // More replicas than samples would leave some without work.
      const size_t most = std::min(d + idle.size(), static_cast<size_t>(f.stages[s].micro_batch));
      const size_t sizes[] = {2 * d, most};
      for (size_t i = 0; i < 2 && trials < kMaxIdleTrials; ++i) {
        const size_t grown = sizes[i];
        if (grown <= d || grown > most || (i == 1 && grown == sizes[0])) continue;
        ++trials;
        auto trial = f.stages;
        trial[s].ranks.insert(trial[s].ranks.end(), idle.begin(),
                              idle.begin() + static_cast<std::ptrdiff_t>(grown - d));
        GP_ASSIGN_OR_RETURN(PlanFound t, simulate_trial(f.chain, std::move(trial)));
        if (t.throughput > fastest.throughput) fastest = std::move(t);
      }
    }
    if (keep_if_faster(std::move(fastest), f)) {
      improved = true;
      ++gains;
    }
  }
  GP_ASSIGN_OR_RETURN(const int split_trials, split_onto_idle_devices(f));
  trials += split_trials;
  const int used_devices = f.plan.programs_size();
  if (used_devices < devices_) {
    f.idle_devices_reason =
        trials == 0 ? "no stage can take more replicas (each already has one per sample of "
                      "its micro-batch)"
                    : "giving any stage more replicas from the idle devices, or splitting one "
                      "onto them, did not raise the simulated throughput (" +
                          std::to_string(trials) + " tried)";
  }
  f.idle_device_gains += gains;
  return ok_status();
}

Result<int> Search::split_onto_idle_devices(PlanFound& f) const {
  int trials = 0;
  if (!req_.split_onto_idle_devices) return trials;
  const MoveSpace space = move_space();
  while (trials < kMaxIdleTrials && f.plan.programs_size() < devices_) {
    const Neighbourhood moves(space, StagePlan{f.stages, f.chain});
    PlanFound fastest;
    for (size_t i = 0; i < moves.size() && trials < kMaxIdleTrials; ++i) {
      if (!moves.splits_onto_idle_devices(i)) continue;
      std::optional<Neighbour> n = moves.get(i);
      if (!n) continue;
      ++trials;
      GP_ASSIGN_OR_RETURN(PlanFound t, simulate_move(n->plan));
      if (t.throughput > fastest.throughput) fastest = std::move(t);
    }
    const bool chain = f.chain;
    if (!keep_if_faster(std::move(fastest), f)) break;
    f.chain = chain;
    ++f.idle_device_gains;
  }
  return trials;
}

Status Search::try_uniform_micro_batches(PlanFound& f) const {
  size_t most_replicas = 0;
  for (const auto& st : f.stages) most_replicas = std::max(most_replicas, st.ranks.size());
  const int used = f.plan.programs_size();
  PlanFound fastest;
  for (int64_t b : micro_batches_) {
    if (b < static_cast<int64_t>(most_replicas)) continue;  // a replica would get no sample
    if (std::all_of(f.stages.begin(), f.stages.end(),
                    [&](const StageAssignment& st) { return st.micro_batch == b; })) {
      continue;  // the plan itself
    }
    // No plan whose kernels run at most b samples on these devices passes this (cheap for
    // small b, where it prunes).
    if (b <= kKernelBoundMaxMicroBatch &&
        kernel_batch_bound(graph_, bound_compute_, b, used) <= f.throughput) {
      continue;
    }
    auto trial = f.stages;
    for (auto& st : trial) st.micro_batch = b;
    GP_ASSIGN_OR_RETURN(PlanFound t, simulate_trial(f.chain, std::move(trial)));
    if (t.throughput > fastest.throughput) fastest = std::move(t);
  }
  keep_if_faster(std::move(fastest), f, 1.0);
  return ok_status();
}

Status Search::choose_placement(PlanFound& f) const {
  if (f.chain || f.stages.size() < 2) return ok_status();
  std::vector<std::vector<int>> groups;
  for (const auto& st : f.stages) groups.push_back(st.ops);
  const UnitGraph stage_graph = group_units(graph_, groups);
  PlanFound fastest;
  for (const auto& order : placement_orders(static_cast<int>(groups.size()), stage_graph.edge_bytes,
                                            stage_keys(groups))) {
    auto trial = placed_in_order(f.stages, order);
    if (trial == f.stages) continue;  // the plan itself
    GP_ASSIGN_OR_RETURN(PlanFound t, simulate_trial(false, std::move(trial)));
    if (t.throughput > fastest.throughput) fastest = std::move(t);
  }
  keep_if_faster(std::move(fastest), f, 1.0);
  return ok_status();
}

Status Search::choose_best() {
  const double first = best_.throughput;
  // Every candidate was placed in placement_order; the two refined also try the other orders.
  GP_RETURN_IF_ERROR(choose_placement(best_));
  GP_RETURN_IF_ERROR(refine(best_));
  // The runner-up only when close: its refinement costs as much again.
  if (runner_up_.throughput >= kRunnerUpShare * first) {
    GP_RETURN_IF_ERROR(choose_placement(runner_up_));
    GP_RETURN_IF_ERROR(refine(runner_up_));
    if (runner_up_.throughput > best_.throughput) best_ = std::move(runner_up_);
  }
  return ok_status();
}

double Search::fewer_devices_bound(int devices) {
  const int64_t largest = *std::max_element(micro_batches_.begin(), micro_batches_.end());
  if (time_per_sample_s_ < 0) {
    time_per_sample_s_ = 1.0 / kernel_batch_bound(graph_, bound_compute_, largest, 1);
  }
  double bound = devices / time_per_sample_s_;
  // Tighter where the optimizer steps and all-reduces weigh: iteration_bound.h, over the kernel
  // sizes this search may run (up to its largest micro-batch), affordable on most graphs.
  // Not on mixed clusters: it prices every device and link as the cluster's own.
  if (!mixed_ && !iteration_bound_ && graph_.num_ops() * largest <= kIterationBoundMaxWork) {
    iteration_bound_.emplace(graph_, *req_.compute, req_.cluster, req_.training, req_.mini_batch,
                             largest, /*count_allreduce=*/req_.comm == nullptr);
  }
  if (iteration_bound_) {
    const double it = iteration_bound_->at(devices).samples_per_s;
    if (it > 0) bound = std::min(bound, it);
  }
  return bound;
}

Status Search::search_fewer_devices() {
  if (!plan_fewer_devices_ || !req_.plan_for_fewer_devices ||
      req_.strategy != graphpipe::v1::STRATEGY_GRAPHPIPE || devices_ < 2) {
    return ok_status();
  }
  const int total = static_cast<int>(micro_batches_.size());
  // Monotone in the devices: where this search cannot afford the ladder, no larger one can.
  if (static_cast<int64_t>(units_.num_units()) * devices_ > kFewerDevicesMaxWork) {
    if (req_.progress) {
      req_.progress(0, total,
                    "fewer devices: not searched (" + std::to_string(units_.num_units()) +
                        " units x " + std::to_string(devices_) + " devices is more than " +
                        std::to_string(kFewerDevicesMaxWork) + ")");
    }
    return ok_status();
  }
  if (devices_ > fewer_devices_chain_limit()) return search_fewer_devices_ladder();
  // Every count below, largest first, until even the compute bound of the count (which no plan
  // on it or on fewer devices passes) does not beat the best plan found: skipping those changes
  // nothing. A hair above the bound, as the simulator may sum the same times in another order.
  // The searches are independent, so they run on worker threads; the plan kept is the fastest,
  // ties to the larger count, which is the same whichever thread finds what first.
  fewer_devices_bound(1);  // computes time_per_sample_s_ before the workers read it
  std::mutex mutex;
  int next = devices_ - 1;
  int searched = 0;
  int lowest = devices_;
  Status failed = ok_status();
  const double all_devices = result_.feasible ? best_.throughput : -1.0;
  auto work = [&] {
    std::unique_lock lock(mutex);
    while (next >= 1 && failed.ok()) {
      const int fewer = next--;
      const double best = std::max(all_devices, fewer_.throughput);
      if (best > 0 && fewer_devices_bound(fewer) * (1 + 1e-9) <= best) {
        next = 0;
        break;
      }
      lock.unlock();
      Result<PlanFound> found = plan_on_fewer_devices(fewer, /*ladder=*/false);
      lock.lock();
      if (!found.ok()) {
        failed = found.status();
        break;
      }
      ++searched;
      lowest = std::min(lowest, fewer);
      if (found->throughput > fewer_.throughput ||
          (found->throughput == fewer_.throughput && found->throughput > 0 &&
           found->searched_devices > fewer_.searched_devices)) {
        fewer_ = *std::move(found);
      }
      log_progress(log_prefix() + ": fewer devices, " + std::to_string(searched) +
                   " counts searched, down to " + std::to_string(lowest));
    }
  };
  const int threads = std::clamp(static_cast<int>(std::thread::hardware_concurrency()), 1,
                                 std::min(kFewerDevicesMaxThreads, devices_ - 1));
  std::vector<std::thread> workers;
  for (int t = 1; t < threads; ++t) workers.emplace_back(work);
  work();
  for (std::thread& w : workers) w.join();
  GP_RETURN_IF_ERROR(failed);
  if (req_.progress) {
    char line[200];
    if (fewer_.throughput > 0) {
      std::snprintf(line, sizeof(line),
                    "fewer devices: %.1f samples/s simulated on %d devices (searched for %d; "
                    "%d counts searched, %d to %d)",
                    fewer_.throughput, fewer_.plan.programs_size(), fewer_.searched_devices,
                    searched, devices_ - 1, lowest);
    } else {
      std::snprintf(line, sizeof(line),
                    "fewer devices: no plan on %d or fewer devices can pass the best plan found "
                    "(%d counts searched)",
                    devices_ - 1, searched);
    }
    req_.progress(0, total, line);
  }
  return ok_status();
}

std::string Search::log_prefix() const {
  std::string prefix =
      std::string(plan::strategy_name(req_.strategy)) + " on " + std::to_string(devices_);
  if (parent_devices_ > 0) prefix += " of " + std::to_string(parent_devices_);
  return prefix + " devices";
}

int Search::fewer_devices_chain_limit() const {
  return static_cast<int>(
      std::sqrt(static_cast<double>(kFewerDevicesChainWork) / std::max(1, units_.num_units())));
}

Status Search::search_fewer_devices_ladder() {
  int power = 1;
  while (power * 2 < devices_) power *= 2;
  const int fewer = std::max(fewer_devices_chain_limit(), power);
  const int total = static_cast<int>(micro_batches_.size());
  // The plan for fewer devices cannot win when even its compute bound does not (the plans of
  // that search, and of the searches below it, all stay under it): skipping it changes nothing.
  const double bound = fewer_devices_bound(fewer);
  if (result_.feasible && bound * (1 + 1e-9) <= best_.throughput) {
    if (req_.progress) {
      req_.progress(0, total,
                    "fewer devices: not searched (no plan on " + std::to_string(fewer) +
                        " devices passes " + std::to_string(static_cast<int64_t>(bound)) +
                        " samples/s)");
    }
    return ok_status();
  }
  GP_ASSIGN_OR_RETURN(fewer_, plan_on_fewer_devices(fewer, /*ladder=*/true));
  if (req_.progress && fewer_.throughput > 0) {
    char line[160];
    std::snprintf(line, sizeof(line),
                  "fewer devices: %.1f samples/s simulated on %d devices (searched for %d)",
                  fewer_.throughput, fewer_.plan.programs_size(), fewer_.searched_devices);
    req_.progress(0, total, line);
  }
  return ok_status();
}

Result<PlanFound> Search::plan_on_fewer_devices(int fewer, bool ladder) const {
  // Exactly search_plan's search for the first `fewer` devices (select_devices takes whole
  // nodes first, as the CLI does). req_.comm times the links between those ranks too.
  SearchRequest sub = req_;
  GP_ASSIGN_OR_RETURN(sub.cluster, cost::select_devices(req_.cluster, fewer));
  // Mixed: select_devices took the fastest; where they are of one kind, that kind prices them.
  if (mixed_ && !cost::is_mixed(sub.cluster)) {
    sub.compute = &req_.device_costs->for_kind(cost::device_kind_names(sub.cluster).front());
  }
  sub.progress = nullptr;
  sub.improve = {};  // once, for the plan finally chosen
  Search search(sub, micro_batches_);
  search.plan_fewer_devices_ = ladder;
  search.parent_devices_ = parent_devices_ > 0 ? parent_devices_ : devices_;
  search.time_per_sample_s_ = time_per_sample_s_;  // the same graph and costs: reused
  GP_RETURN_IF_ERROR(search.find());
  if (!search.result_.feasible) return PlanFound{};
  PlanFound f = std::move(search.best_);
  if (mixed_) {
    // Its ranks are the selected cluster's: the stages go on this cluster's fastest devices.
    GP_ASSIGN_OR_RETURN(PlanFound t, simulate_stages(f.chain, f.stages));
    if (t.throughput < 0) return PlanFound{};
    t.chain = f.chain;
    t.tps = f.tps;
    t.idle_device_gains = f.idle_device_gains;
    t.idle_devices_reason = f.idle_devices_reason;
    t.searched_devices = f.searched_devices;
    t.plan.mutable_provenance()->set_sp_edges_added(f.plan.provenance().sp_edges_added());
    sim::fill_predicted_metrics(t.simulation, &t.plan);
    t.plan.mutable_predicted()->set_bottleneck_tps_s(f.plan.predicted().bottleneck_tps_s());
    return t;
  }
  // The same ranks of this cluster, the others idle: simulated on this cluster's links.
  *f.plan.mutable_cluster() = req_.cluster;
  f.plan.set_cluster_hash(model::message_hash(req_.cluster));
  GP_ASSIGN_OR_RETURN(f.simulation, simulator_.run(f.plan, graph_));
  if (f.simulation.deadlocked || !f.simulation.fits_memory()) return PlanFound{};
  f.throughput = f.simulation.throughput_samples_per_s;
  const double bottleneck_tps_s = f.plan.predicted().bottleneck_tps_s();
  sim::fill_predicted_metrics(f.simulation, &f.plan);
  f.plan.mutable_predicted()->set_bottleneck_tps_s(bottleneck_tps_s);
  return f;
}

void Search::adopt_fewer_devices() {
  all_devices_throughput_ = result_.feasible ? best_.throughput : -1;
  if (fewer_.throughput <= all_devices_throughput_) return;
  best_ = std::move(fewer_);
  result_.feasible = true;
}

MoveSpace Search::move_space() const {
  MoveSpace space;
  space.graph = &graph_;
  space.units = &units_;
  space.devices = devices_;
  space.mini_batch = req_.mini_batch;
  space.micro_batches = micro_batches_;
  const int64_t largest = *std::max_element(micro_batches_.begin(), micro_batches_.end());
  space.op_weight.reserve(static_cast<size_t>(graph_.num_ops()));
  for (int op = 0; op < graph_.num_ops(); ++op) {
    const cost::OpTime t = req_.compute->op_time(graph_.op(op), largest);
    space.op_weight.push_back(t.forward_us + t.backward_us);
  }
  return space;
}

Status Search::improve(PlanFound& f) {
  const TrialFn trial = [this](const StagePlan& p) -> Result<TrialOutcome> {
    GP_ASSIGN_OR_RETURN(const PlanFound t, simulate_move(p));
    return TrialOutcome{t.throughput, t.simulation.events_processed};
  };
  const ImproveProgress progress = [this](const std::string& line) {
    if (req_.progress) req_.progress(0, 0, line);
  };
  StagePlan plan{f.stages, f.chain};
  GP_ASSIGN_OR_RETURN(result_.improvement, improve_stages(move_space(), req_.improve, trial,
                                                          progress, f.throughput, plan));
  if (result_.improvement.end_samples_per_s <= f.throughput) return ok_status();
  GP_ASSIGN_OR_RETURN(PlanFound t, simulate_stages(plan.chain, std::move(plan.stages)));
  if (!keep_if_faster(std::move(t), f, 1.0)) return ok_status();
  f.chain = plan.chain;
  f.searched_devices = devices_;
  f.idle_devices_reason.clear();
  if (f.plan.programs_size() < devices_) {
    f.idle_devices_reason = "the improvement search's best plan simulates faster with them idle";
  }
  return ok_status();
}

std::string Search::idle_devices_reason() const {
  if (best_.searched_devices >= devices_) return best_.idle_devices_reason;
  const int fewer = best_.searched_devices;
  const char* noun = fewer == 1 ? "device" : "devices";
  char why[256];
  if (all_devices_throughput_ > 0) {
    std::snprintf(why, sizeof(why),
                  "a plan searched for %d %s simulates faster (%.1f samples/s) than the best "
                  "found for all %d (%.1f)",
                  fewer, noun, best_.throughput, devices_, all_devices_throughput_);
  } else {
    std::snprintf(why, sizeof(why), "a plan searched for %d %s fits, none found for all %d", fewer,
                  noun, devices_);
  }
  if (best_.idle_devices_reason.empty()) return why;
  return std::string(why) + "; on those " + std::to_string(best_.searched_devices) + ": " +
         best_.idle_devices_reason;
}

void Search::finish(std::chrono::steady_clock::time_point start) {
  result_.search_time_s = seconds_since(start);
  if (!result_.feasible) {
    result_.infeasible_reason = infeasible_summary(result_.candidates);
    return;
  }
  result_.idle_devices_reason = idle_devices_reason();
  result_.searched_devices = best_.searched_devices;
  result_.chain = best_.chain;
  result_.idle_device_gains = best_.idle_device_gains;
  result_.plan = std::move(best_.plan);
  result_.simulation = std::move(best_.simulation);
  auto* prov = result_.plan.mutable_provenance();
  prov->set_search_time_s(result_.search_time_s);
  prov->set_strategy(req_.strategy);
}

}  // namespace

namespace {

// A mixed cluster: the search once per device kind as the partitioners' reference (the fastest
// kind first), every plan simulated on the mixed cluster; the fastest is kept, ties to the
// faster reference. The improvement search (--effort) runs once, in the search of the reference
// that won, so its budget is spent once.
Result<SearchResult> search_mixed(const SearchRequest& req,
                                  const std::vector<int64_t>& micro_batches,
                                  std::chrono::steady_clock::time_point start) {
  const std::vector<std::string> kinds = cost::device_kind_names(req.cluster);
  SearchResult best;
  std::string best_kind;
  bool have = false;
  for (const std::string& kind : kinds) {
    SearchRequest sub = req;
    sub.compute = &req.device_costs->for_kind(kind);
    sub.improve = {};
    if (req.progress) {
      sub.progress = [&req, kind](int done, int total, const std::string& line) {
        req.progress(done, total, kind + " as reference: " + line);
      };
    }
    Search search(sub, micro_batches);
    GP_ASSIGN_OR_RETURN(SearchResult r, search.run(start));
    const bool better =
        !have || (r.feasible && (!best.feasible || r.simulation.throughput_samples_per_s >
                                                       best.simulation.throughput_samples_per_s));
    if (better) {
      best = std::move(r);
      best_kind = kind;
      have = true;
    }
  }
  if (best.feasible && req.improve.enabled()) {
    SearchRequest sub = req;
    sub.compute = &req.device_costs->for_kind(best_kind);
    Search search(sub, micro_batches);
    GP_ASSIGN_OR_RETURN(SearchResult r, search.run(start));
    if (r.feasible &&
        r.simulation.throughput_samples_per_s >= best.simulation.throughput_samples_per_s) {
      best = std::move(r);
    }
  }
  if (best.feasible) best.reference_kind = best_kind;
  best.search_time_s = seconds_since(start);
  if (best.feasible) best.plan.mutable_provenance()->set_search_time_s(best.search_time_s);
  return best;
}

}  // namespace

Result<SearchResult> search_plan(const SearchRequest& req) {
  const auto start = std::chrono::steady_clock::now();
  GP_ASSIGN_OR_RETURN(std::vector<int64_t> micro_batches, micro_batches_to_search(req));
  if (req.device_costs != nullptr) GP_RETURN_IF_ERROR(req.device_costs->covers(req.cluster));
  SearchResult result;
  if (req.device_costs != nullptr && cost::is_mixed(req.cluster)) {
    GP_ASSIGN_OR_RETURN(result, search_mixed(req, micro_batches, start));
  } else {
    Search search(req, std::move(micro_batches));
    GP_ASSIGN_OR_RETURN(result, search.run(start));
  }
  // (Simulated before: the ranks keep their devices, so the simulation holds for it.)
  if (result.feasible) {
    GP_ASSIGN_OR_RETURN(result.plan, compact_idle_ranks(std::move(result.plan)));
  }
  return result;
}

}  // namespace gp::planner
