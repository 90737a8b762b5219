// Hand-partitioned plans shared by the end-to-end and lowering tests: each exercises one thing
// the executor's messages must get right (replicas, relays, gradient fan-in).
#pragma once

#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "gp/cost/cluster.h"
#include "gp/model/builder.h"
#include "gp/model/graph.h"
#include "gp/planner/plan_builder.h"
#include "graphpipe/v1/plan.pb.h"
#include "models.h"

namespace gp::testing {

// The plan build_plan makes of hand-assigned stages on as many cpu-local devices as they use.
inline graphpipe::v1::Plan built_plan(const model::Graph& g, const graphpipe::v1::TrainingConfig& t,
                                      const std::vector<planner::StageAssignment>& stages,
                                      int64_t mini_batch, bool chain = false) {
  int devices = 0;
  for (const auto& st : stages) devices += static_cast<int>(st.ranks.size());
  planner::PlanInputs in;
  in.graph = &g;
  in.cluster = *cost::select_devices(*cost::load_cluster("cpu-local"), devices);
  in.mini_batch = mini_batch;
  in.training = t;
  in.chain = chain;
  auto plan = planner::build_plan(in, stages);
  INFO(plan.status().to_string());
  REQUIRE(plan.ok());
  return *plan;
}

// tiny-mmt: branch 0 on rank 0 (b = 2), branch 1 on the next `branch_replicas` ranks (b = 4),
// the head on the `head_replicas` after them (b = 8); mini-batch 16. By default ranks 1-2 and
// 3-4.
inline graphpipe::v1::Plan replicated_plan(const model::Graph& g,
                                           const graphpipe::v1::TrainingConfig& t,
                                           int branch_replicas = 2, int head_replicas = 2) {
  std::vector<planner::StageAssignment> st(3);
  for (const auto& node : g.ops()) {
    const std::string& id = node.id();
    st[id.rfind("b0.", 0) == 0 ? 0 : id.rfind("b1.", 0) == 0 ? 1 : 2].ops.push_back(node.index);
  }
  int rank = 0;
  for (int s = 0; s < 3; ++s) {
    const int replicas = s == 0 ? 1 : s == 1 ? branch_replicas : head_replicas;
    for (int k = 0; k < replicas; ++k) st[s].ranks.push_back(rank++);
    st[s].micro_batch = int64_t{2} << s;
  }
  return built_plan(g, t, st, 16);
}

// tiny-candle-uno as a chain of three stages in topological order: feature branches 0, 1, then 2
// with the head. Branch 0's output skips stage 1 and is relayed through it. Mini-batch 8.
inline graphpipe::v1::Plan relay_plan(const model::Graph& g,
                                      const graphpipe::v1::TrainingConfig& t) {
  std::vector<planner::StageAssignment> st(3);
  for (const auto& node : g.ops()) {
    const std::string& id = node.id();
    st[id.rfind("feature0.", 0) == 0   ? 0
       : id.rfind("feature1.", 0) == 0 ? 1
                                       : 2]
        .ops.push_back(node.index);
  }
  for (int s = 0; s < 3; ++s) st[s].ranks = {s}, st[s].micro_batch = 2;
  return built_plan(g, t, st, 8, /*chain=*/true);
}

// x -> trunk (stage 0) -> left (stage 1) and right (stage 2) -> add, loss (stage 3): the trunk's
// output goes to two stages, so its gradient arrives in two messages that add up. Mini-batch 8.
inline graphpipe::v1::Plan fan_in_plan(const model::Graph& g,
                                       const graphpipe::v1::TrainingConfig& t) {
  std::vector<planner::StageAssignment> st(4);
  for (const auto& node : g.ops()) {
    const std::string& id = node.id();
    st[id == "x" || id == "trunk" ? 0
       : id == "left"             ? 1
       : id == "right"            ? 2
                                  : 3]
        .ops.push_back(node.index);
  }
  for (int s = 0; s < 4; ++s) st[s].ranks = {s}, st[s].micro_batch = 4;
  return built_plan(g, t, st, 8);
}

inline model::Graph fan_in_graph() {
  model::GraphBuilder b("fan-in", "");
  auto trunk = b.linear("trunk", b.input("x", {8}), 8);
  auto sum = b.add("sum", {b.linear("left", trunk, 8), b.linear("right", trunk, 8)});
  b.add_loss(b.mse_loss("loss", sum, b.input("t", {8})));
  return build_graph(b.finish());
}

// tied_lm_model (models.h) with the embedding on stage 0 (ranks 0 and 1: replicas), "mid" and "act"
// on stage 1 and the head and loss on stage 2: the tied copies live on three ranks. Mini-batch 8.
inline graphpipe::v1::Plan tied_plan(const model::Graph& g,
                                     const graphpipe::v1::TrainingConfig& t) {
  std::vector<planner::StageAssignment> st(3);
  for (const auto& node : g.ops()) {
    const std::string& id = node.id();
    st[id == "ids" || id == "emb"   ? 0
       : id == "mid" || id == "act" ? 1
                                    : 2]
        .ops.push_back(node.index);
  }
  st[0].ranks = {0, 1};
  st[1].ranks = {2};
  st[2].ranks = {3};
  for (auto& s : st) s.micro_batch = 4;
  return built_plan(g, t, st, 8);
}

}  // namespace gp::testing
