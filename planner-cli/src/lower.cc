#include "gp/planner/lower.h"

#include <algorithm>
#include <chrono>
#include <queue>

#include "gp/cost/cluster.h"
#include "gp/cost/memory_model.h"
#include "gp/plan/plan_util.h"
#include "gp/planner/plan_builder.h"
#include "gp/planner/shard_optimizer.h"
#include "gp/planner/units.h"
#include "gp/sim/simulator.h"

namespace gp::planner {
namespace {

std::string stage_name(size_t s) { return "stages[" + std::to_string(s) + "]"; }

// The first path that leaves stage `s` and comes back into it, as "'a' -> 'b' (stages[1]) ->
// 'c'"; empty when the stage is convex. Breadth-first over the ops outside the stage.
std::string leaving_path(const model::Graph& g, const std::vector<int>& stage_of, int s,
                         const std::vector<int>& ops) {
  constexpr int kUnvisited = -2;
  std::vector<int> parent(g.num_ops(), kUnvisited);
  std::queue<int> frontier;
  for (int a : ops) {
    for (int c : g.op(a).succs) {
      if (stage_of[c] != s && parent[c] == kUnvisited) {
        parent[c] = a;
        frontier.push(c);
      }
    }
  }
  while (!frontier.empty()) {
    const int c = frontier.front();
    frontier.pop();
    for (int d : g.op(c).succs) {
      if (stage_of[d] == s) {
        std::vector<int> path = {d};
        for (int x = c; stage_of[x] != s; x = parent[x]) path.push_back(x);
        path.push_back(parent[path.back()]);
        std::reverse(path.begin(), path.end());
        std::string text;
        for (size_t i = 0; i < path.size(); ++i) {
          if (i > 0) text += " -> ";
          if (i > 2 && i + 2 < path.size()) {  // keep long paths readable
            text += "...";
            i = path.size() - 2;
            text += " -> ";
          }
          text += "'" + g.op(path[i]).id() + "'";
          if (stage_of[path[i]] != s) text += " (" + stage_name(stage_of[path[i]]) + ")";
        }
        return text;
      }
      if (parent[d] == kUnvisited) {
        parent[d] = c;
        frontier.push(d);
      }
    }
  }
  return "";
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

Result<Lowering> parse_lowering(std::string_view name) {
  if (name == "chain") return Lowering::kChain;
  if (name == "dag") return Lowering::kDag;
  if (name == "best") return Lowering::kBest;
  return invalid_argument("--lowering = '" + std::string(name) + "', expected chain, dag or best");
}

Result<std::vector<ExternalStage>> resolve_assignment(
    const graphpipe::v1::StageAssignmentFile& file, const model::Graph& graph, int num_devices,
    int64_t mini_batch) {
  if (file.stages_size() == 0) return invalid_argument("stages: empty, the file names no stage");
  std::vector<int> stage_of(graph.num_ops(), -1);
  std::vector<ExternalStage> out(file.stages_size());
  int64_t replicas_in_all = 0;
  for (int s = 0; s < file.stages_size(); ++s) {
    const auto& st = file.stages(s);
    const std::string field = stage_name(s);
    if (st.ops_size() == 0) return invalid_argument(field + ".ops: empty");
    if (st.replicas() < 0) {
      return invalid_argument(field + ".replicas = " + std::to_string(st.replicas()) +
                              ", must be >= 1 (0 means 1)");
    }
    out[s].replicas = st.replicas() == 0 ? 1 : st.replicas();
    replicas_in_all += out[s].replicas;
    const int64_t mb = st.micro_batch();
    if (mb < 0 || (mb > 0 && mini_batch % mb != 0)) {
      return invalid_argument(field + ".micro_batch = " + std::to_string(mb) +
                              " does not divide the mini-batch " + std::to_string(mini_batch));
    }
    if (mb > 0 && mb < out[s].replicas) {
      return invalid_argument(field + ".micro_batch = " + std::to_string(mb) +
                              " is smaller than its " + std::to_string(out[s].replicas) +
                              " replicas (each needs a sample)");
    }
    out[s].micro_batch = mb;
    for (int i = 0; i < st.ops_size(); ++i) {
      const std::string op_field = field + ".ops[" + std::to_string(i) + "] = '" + st.ops(i) + "'";
      const int op = graph.index_of(st.ops(i));
      if (op < 0) {
        return invalid_argument(op_field + ": model '" + graph.model().name() +
                                "' has no op with this id");
      }
      if (stage_of[op] == s) return invalid_argument(op_field + ": listed twice in " + field);
      if (stage_of[op] >= 0) {
        return invalid_argument(op_field + ": the op is also in " + stage_name(stage_of[op]) +
                                "; every op belongs to exactly one stage");
      }
      stage_of[op] = s;
      out[s].ops.push_back(op);
    }
  }
  if (replicas_in_all > num_devices) {
    return invalid_argument("stages: " + std::to_string(replicas_in_all) +
                            " replicas in all, but the cluster has " + std::to_string(num_devices) +
                            " devices to use");
  }
  std::vector<std::string> missing;
  for (int op : graph.topo_order()) {
    if (stage_of[op] < 0) missing.push_back(graph.op(op).id());
  }
  if (!missing.empty()) {
    std::string more = missing.size() > 1
                           ? " (and " + std::to_string(missing.size() - 1) + " more ops)"
                           : std::string();
    return invalid_argument("stages: op '" + missing[0] + "'" + more +
                            " is in no stage; every op of the model belongs to one stage");
  }
  for (int s = 0; s < file.stages_size(); ++s) {
    const std::string path = leaving_path(graph, stage_of, s, out[s].ops);
    if (!path.empty()) {
      return invalid_argument(stage_name(s) + " is not convex: " + path +
                              " leaves the stage and comes back; a stage must hold every op on "
                              "a path between two of its ops");
    }
  }
  return out;
}

namespace {

// One lower_assignment: the stage graph, the micro-batch sizes to try and the simulator, shared
// by its lowerings.
class AssignmentLowering {
 public:
  AssignmentLowering(const LowerRequest& req, const UnitGraph& stage_graph,
                     std::vector<int64_t> sizes)
      : req_(req),
        g_(*req.graph),
        stage_graph_(stage_graph),
        sizes_(std::move(sizes)),
        datasheet_comm_(req.cluster),
        simulator_(req.device_costs != nullptr
                       ? sim::Simulator(
                             *req.device_costs, req.comm != nullptr ? *req.comm : datasheet_comm_,
                             {req.training.optimizer(), req.training.precision(), req.compute})
                       : sim::Simulator(
                             *req.compute, req.comm != nullptr ? *req.comm : datasheet_comm_,
                             {req.training.optimizer(), req.training.precision(), req.compute})),
        capacity_(req.cluster.device().memory_capacity_bytes()) {}

  // The fastest plan of one lowering over every size and every order of `orders` (the stages
  // placed on consecutive ranks in that order).
  Result<LoweredPlan> lower(const std::string& name, bool chain,
                            const std::vector<std::vector<int>>& orders) const;

 private:
  // Lowers and simulates the stages in `order` with micro-batch `b` where they have none: the
  // candidate of size `b` keeps the fastest order, `lowered` the fastest plan.
  Status try_order(const std::string& name, bool chain, const std::vector<int>& order, int64_t b,
                   CandidateSummary* cand, LoweredPlan* lowered) const;

  const LowerRequest& req_;
  const model::Graph& g_;
  const UnitGraph& stage_graph_;
  const std::vector<int64_t> sizes_;
  const cost::CommModel datasheet_comm_;
  const sim::Simulator simulator_;
  const int64_t capacity_;
};

Result<LoweredPlan> AssignmentLowering::lower(const std::string& name, bool chain,
                                              const std::vector<std::vector<int>>& orders) const {
  const auto start = std::chrono::steady_clock::now();
  LoweredPlan lowered;
  lowered.lowering = name;
  lowered.stage_order = orders[0];
  SearchResult& result = lowered.result;
  result.num_units = g_.num_ops();
  for (int64_t b : sizes_) {
    CandidateSummary cand;
    cand.micro_batch = b > 0 ? b : req_.stages[orders[0][0]].micro_batch;
    for (const auto& order : orders) {
      GP_RETURN_IF_ERROR(try_order(name, chain, order, b, &cand, &lowered));
    }
    result.candidates.push_back(cand);
  }
  result.search_time_s = seconds_since(start);
  if (!result.feasible) {
    result.infeasible_reason = infeasible_summary(result.candidates);
  } else {
    result.plan.mutable_provenance()->set_strategy(graphpipe::v1::STRATEGY_MANUAL);
    result.plan.mutable_provenance()->set_search_time_s(result.search_time_s);
  }
  return lowered;
}

Status AssignmentLowering::try_order(const std::string& name, bool chain,
                                     const std::vector<int>& order, int64_t b,
                                     CandidateSummary* cand, LoweredPlan* lowered) const {
  std::vector<StageAssignment> stages;
  int rank = 0;
  for (int s : order) {
    const ExternalStage& ext = req_.stages[s];
    StageAssignment st;
    st.ops = stage_graph_.unit_ops[s];
    for (int r = 0; r < ext.replicas; ++r) st.ranks.push_back(rank++);
    st.micro_batch = ext.micro_batch > 0 ? ext.micro_batch : b;
    if (st.micro_batch < ext.replicas) {
      if (!cand->feasible && cand->reason.empty()) {
        cand->reason = "micro-batch " + std::to_string(st.micro_batch) + " is smaller than the " +
                       std::to_string(ext.replicas) + " replicas of " + stage_name(s);
      }
      return ok_status();
    }
    stages.push_back(std::move(st));
  }
  PlanInputs in;
  in.graph = &g_;
  in.cluster = req_.cluster;
  in.mini_batch = req_.mini_batch;
  in.training = req_.training;
  in.strategy = graphpipe::v1::STRATEGY_MANUAL;
  in.chain = chain;
  GP_ASSIGN_OR_RETURN(auto plan, build_plan(in, stages));
  GP_ASSIGN_OR_RETURN(auto sim,
                      simulate_choosing_memory(simulator_, req_.recompute, req_.shard_optimizer,
                                               capacity_, g_, &plan));
  if (sim.deadlocked) {
    return internal_error("the " + name + " lowering deadlocks: " + sim.deadlock_report());
  }
  if (!sim.fits_memory()) {
    if (!cand->feasible) {
      cand->reason = "simulated peak memory " + std::to_string(sim.peak_memory_bytes) +
                     " bytes exceeds the device's " + std::to_string(capacity_);
    }
    return ok_status();
  }
  if (!cand->feasible || sim.throughput_samples_per_s > cand->throughput_samples_per_s) {
    cand->feasible = true;
    cand->reason.clear();
    cand->throughput_samples_per_s = sim.throughput_samples_per_s;
    cand->num_stages = plan.stages_size();
  }
  SearchResult& result = lowered->result;
  if (!result.feasible ||
      sim.throughput_samples_per_s > result.simulation.throughput_samples_per_s) {
    sim::fill_predicted_metrics(sim, &plan);
    result.plan = std::move(plan);
    result.simulation = std::move(sim);
    result.feasible = true;
    lowered->stage_order = order;
  }
  return ok_status();
}

// The sizes tried for stages without a micro-batch: {0} when every stage has one.
Result<std::vector<int64_t>> sizes_to_try(const LowerRequest& req) {
  const bool every_stage_fixed =
      std::all_of(req.stages.begin(), req.stages.end(),
                  [](const ExternalStage& st) { return st.micro_batch > 0; });
  std::vector<int64_t> sizes = req.micro_batches;
  if (every_stage_fixed) {
    sizes = {0};  // nothing left to choose
  } else if (sizes.empty()) {
    auto searchable = searchable_micro_batches(req.mini_batch);
    if (!searchable.ok()) {
      return invalid_argument(searchable.status().message() + "; or give stages a micro_batch");
    }
    sizes = std::move(searchable).value();
  }
  for (int64_t b : sizes) {
    if (b < 0 || (b > 0 && req.mini_batch % b != 0)) {
      return invalid_argument("--micro-batches: " + std::to_string(b) +
                              " does not divide the mini-batch " + std::to_string(req.mini_batch));
    }
  }
  return sizes;
}

}  // namespace

Result<std::vector<LoweredPlan>> lower_assignment(const LowerRequest& req) {
  const model::Graph& g = *req.graph;
  const int n = static_cast<int>(req.stages.size());
  if (n == 0) return invalid_argument("stages: empty");
  std::vector<std::vector<int>> groups;
  for (const auto& st : req.stages) groups.push_back(st.ops);
  // The stage graph: edge bytes for placement, and as `topo` the chain order (the file's own
  // order whenever that order is topological).
  const UnitGraph stage_graph = group_units(g, groups);
  const std::vector<int>& chain = stage_graph.topo;
  if (static_cast<int>(chain.size()) < n) {
    std::vector<char> ordered(n, 0);
    for (int s : chain) ordered[s] = 1;
    std::string cyclic;
    for (int s = 0; s < n; ++s) {
      if (!ordered[s]) cyclic += (cyclic.empty() ? "" : ", ") + stage_name(s);
    }
    return invalid_argument(
        "stages: the stage graph has a cycle (tensors go from one stage to "
        "another and back); on it or after it: " +
        cyclic);
  }
  GP_ASSIGN_OR_RETURN(std::vector<int64_t> sizes, sizes_to_try(req));
  const AssignmentLowering lowering(req, stage_graph, std::move(sizes));
  std::vector<LoweredPlan> out;
  if (req.lowering != Lowering::kDag) {
    GP_ASSIGN_OR_RETURN(auto lowered, lowering.lower("chain", true, {chain}));
    out.push_back(std::move(lowered));
  }
  if (req.lowering != Lowering::kChain) {
    // A graph pipeline's stages have no order of their own: every order placement_orders makes
    // from the stage graph and the stages' ops (never from the file's numbering) is tried.
    GP_ASSIGN_OR_RETURN(auto lowered, lowering.lower("dag", false,
                                                     placement_orders(n, stage_graph.edge_bytes,
                                                                      stage_keys(groups))));
    out.push_back(std::move(lowered));
  }
  return out;
}

}  // namespace gp::planner
