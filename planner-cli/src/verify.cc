#include "gp/planner/verify.h"

#include <map>
#include <queue>
#include <set>
#include <tuple>

#include "gp/cost/comm_model.h"
#include "gp/graph/model_io.h"
#include "gp/graph/plan_util.h"

namespace gp::planner {
namespace {

using graphpipe::v1::Plan;
using K = graphpipe::v1::InstructionKind;

// Every tensor consumed in another stage must travel along stage edges that carry it.
void check_stage_graph(const Plan& plan, const graph::Graph& g, const graph::PlanIndex& index,
                       std::vector<std::string>* problems) {
  const int n = plan.stages_size();
  std::vector<int> indegree(n, 0);
  for (const auto& e : plan.edges()) ++indegree[e.dst_stage()];
  std::queue<int> ready;
  for (int s = 0; s < n; ++s) {
    if (indegree[s] == 0) ready.push(s);
  }
  int visited = 0;
  while (!ready.empty()) {
    const int s = ready.front();
    ready.pop();
    ++visited;
    for (const auto& e : plan.edges()) {
      if (e.src_stage() == s && --indegree[e.dst_stage()] == 0) ready.push(e.dst_stage());
    }
  }
  if (visited != n) problems->push_back("stage graph: has a cycle (stages are not convex)");

  for (const auto& node : g.ops()) {
    const int t = index.stage_of_op[node.index];
    for (const auto& ref : node.proto->inputs()) {
      const int s = index.stage_of_op[g.index_of(ref.op())];
      if (s == t) continue;
      std::vector<char> seen(n, 0);
      std::queue<int> q;
      q.push(s);
      seen[s] = 1;
      while (!q.empty() && !seen[t]) {
        const int x = q.front();
        q.pop();
        for (const auto& e : plan.edges()) {
          if (e.src_stage() != x || seen[e.dst_stage()]) continue;
          for (const auto& tr : e.tensors()) {
            if (tr.op() == ref.op() && tr.output() == ref.output()) {
              seen[e.dst_stage()] = 1;
              q.push(e.dst_stage());
              break;
            }
          }
        }
      }
      if (!seen[t]) {
        problems->push_back("stage graph: tensor '" + ref.op() +
                            "':" + std::to_string(ref.output()) + " produced in stage " +
                            std::to_string(s) + " never reaches op '" + node.id() + "' in stage " +
                            std::to_string(t));
      }
    }
  }
}

void check_programs(const Plan& plan, const graph::Graph& g, std::vector<std::string>* problems) {
  using Key = std::tuple<bool, int, int, int, int64_t, int64_t>;
  std::map<Key, int> sends, recvs;
  for (const auto& prog : plan.programs()) {
    const auto& st = plan.stages(prog.stage());
    const int num_mb = static_cast<int>(plan.mini_batch() / st.micro_batch());
    std::vector<int> fwd(num_mb, 0), bwd(num_mb, 0);
    int allreduce = 0, optimizer = 0;
    const std::string who =
        "rank " + std::to_string(prog.rank()) + " (stage " + std::to_string(prog.stage()) + ")";
    for (const auto& in : prog.instructions()) {
      switch (in.kind()) {
        case K::INSTRUCTION_KIND_FORWARD:
          ++fwd[in.micro_batch()];
          break;
        case K::INSTRUCTION_KIND_BACKWARD:
          if (fwd[in.micro_batch()] == 0) {
            problems->push_back(who + ": BACKWARD of micro-batch " +
                                std::to_string(in.micro_batch()) + " before its FORWARD");
          }
          ++bwd[in.micro_batch()];
          break;
        case K::INSTRUCTION_KIND_SEND_ACTIVATION:
        case K::INSTRUCTION_KIND_SEND_GRADIENT:
          ++sends[{in.kind() == K::INSTRUCTION_KIND_SEND_GRADIENT, in.edge(), prog.rank(),
                   in.peer_rank(), in.sample_begin(), in.sample_end()}];
          break;
        case K::INSTRUCTION_KIND_RECV_ACTIVATION:
        case K::INSTRUCTION_KIND_RECV_GRADIENT:
          ++recvs[{in.kind() == K::INSTRUCTION_KIND_RECV_GRADIENT, in.edge(), in.peer_rank(),
                   prog.rank(), in.sample_begin(), in.sample_end()}];
          break;
        case K::INSTRUCTION_KIND_ALLREDUCE_GRADS:
          ++allreduce;
          break;
        case K::INSTRUCTION_KIND_OPTIMIZER_STEP:
          ++optimizer;
          break;
        default:
          break;
      }
    }
    for (int m = 0; m < num_mb; ++m) {
      if (fwd[m] != 1 || bwd[m] != 1) {
        problems->push_back(who + ": micro-batch " + std::to_string(m) + " has " +
                            std::to_string(fwd[m]) + " forward(s) and " + std::to_string(bwd[m]) +
                            " backward(s), expected 1 and 1");
        break;
      }
    }
    int64_t params = 0;
    for (const auto& id : st.op_ids()) params += g.op(g.index_of(id)).cost.param_count;
    const int want_allreduce = params > 0 && st.device_ranks_size() > 1 ? 1 : 0;
    if (allreduce != want_allreduce) {
      problems->push_back(who + ": " + std::to_string(allreduce) + " ALLREDUCE_GRADS, expected " +
                          std::to_string(want_allreduce));
    }
    if (optimizer != (params > 0 ? 1 : 0)) {
      problems->push_back(who + ": " + std::to_string(optimizer) + " OPTIMIZER_STEP, expected " +
                          std::to_string(params > 0 ? 1 : 0));
    }
  }
  for (const auto& [key, count] : sends) {
    auto it = recvs.find(key);
    const int matched = it == recvs.end() ? 0 : it->second;
    if (matched != count) {
      problems->push_back("send from rank " + std::to_string(std::get<2>(key)) + " to rank " +
                          std::to_string(std::get<3>(key)) + " on edge " +
                          std::to_string(std::get<1>(key)) + " samples [" +
                          std::to_string(std::get<4>(key)) + ", " +
                          std::to_string(std::get<5>(key)) + ") has " + std::to_string(matched) +
                          " matching receive(s) for " + std::to_string(count) + " send(s)");
    }
  }
  for (const auto& [key, count] : recvs) {
    if (sends.find(key) == sends.end()) {
      problems->push_back("receive on rank " + std::to_string(std::get<3>(key)) + " from rank " +
                          std::to_string(std::get<2>(key)) + " on edge " +
                          std::to_string(std::get<1>(key)) + " has no matching send");
    }
  }
}

}  // namespace

Result<VerifyReport> verify_plan(const Plan& plan, const cost::CostModel& compute,
                                 const VerifyOptions& options) {
  VerifyReport report;
  auto& problems = report.problems;
  auto built = graph::Graph::build(plan.model());
  if (!built.ok()) {
    problems.push_back("plan.model: " + built.status().message());
    return report;
  }
  const graph::Graph& g = *built;
  if (options.expected_model != nullptr) {
    auto expected = graph::Graph::build(*options.expected_model);
    if (!expected.ok()) return expected.status().with_context("--model");
    const std::string hash = graph::model_hash(expected->model());
    if (hash != plan.model_hash()) {
      problems.push_back("the plan is for model '" + plan.model().name() + "' (hash " +
                         plan.model_hash() + "), not for '" + options.expected_model->name() +
                         "' (hash " + hash + ")");
    }
  }
  const std::string cluster_hash = graph::message_hash(plan.cluster());
  if (plan.cluster_hash() != cluster_hash) {
    problems.push_back("plan.cluster_hash = '" + plan.cluster_hash() +
                       "' does not match the embedded cluster (" + cluster_hash + ")");
  }
  if (options.expected_cluster != nullptr) {
    const std::string hash = graph::message_hash(*options.expected_cluster);
    if (hash != plan.cluster_hash()) {
      problems.push_back("the plan is for cluster '" + plan.cluster().name() + "' (hash " +
                         plan.cluster_hash() + "), not for '" + options.expected_cluster->name() +
                         "' with these devices (hash " + hash + ")");
    }
  }
  auto index = graph::validate_plan_structure(plan, g);
  if (!index.ok()) {
    problems.push_back(index.status().message());
    return report;
  }
  check_stage_graph(plan, g, *index, &problems);
  check_programs(plan, g, &problems);
  if (!problems.empty()) return report;  // do not simulate a broken plan

  const cost::CommModel datasheet_comm(plan.cluster());
  const cost::CommModel& comm = options.comm != nullptr ? *options.comm : datasheet_comm;
  const sim::Simulator simulator(compute, comm,
                                 {plan.training().optimizer(), plan.training().precision()});
  GP_ASSIGN_OR_RETURN(report.simulation, simulator.run(plan, g));
  report.simulated = true;
  if (report.simulation.deadlocked) {
    problems.push_back("deadlock: " + report.simulation.deadlock_report());
    return report;
  }
  const int64_t capacity = plan.cluster().device().memory_capacity_bytes();
  for (const auto& rs : report.simulation.ranks) {
    if (rs.stage >= 0 && rs.peak_memory_bytes > capacity) {
      problems.push_back("rank " + std::to_string(rs.rank) + " (stage " + std::to_string(rs.stage) +
                         "): peak memory " + std::to_string(rs.peak_memory_bytes) +
                         " bytes exceeds the device capacity " + std::to_string(capacity));
    }
  }
  return report;
}

}  // namespace gp::planner
