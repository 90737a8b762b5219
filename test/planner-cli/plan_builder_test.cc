// Lowering stage assignments to plans: stage edges, in-flight samples, matched transfers.
#include "gp/planner/plan_builder.h"

#include <catch2/catch.hpp>
#include <map>
#include <tuple>

#include "../support/fakes.h"
#include "gp/cost/cluster.h"
#include "gp/model/builder.h"
#include "gp/model/model_io.h"
#include "gp/model/zoo.h"
#include "gp/plan/plan_util.h"

using namespace gp;
using model::GraphBuilder;
using planner::StageAssignment;

namespace {

model::Graph build(model::ModelGraph m) {
  auto g = model::Graph::build(m);
  REQUIRE(g.ok());
  return std::move(g).value();
}

model::Graph chain3() {
  GraphBuilder b("chain", "");
  auto x = b.input("x", {8});
  for (int i = 0; i < 3; ++i) x = b.linear("fc" + std::to_string(i), x, 8);
  b.add_loss(b.mse_loss("loss", x, b.input("t", {8})));
  return build(b.finish());
}

std::vector<StageAssignment> chain3_stages(const model::Graph& g, std::vector<int64_t> b) {
  std::vector<StageAssignment> st(3);
  st[0].ops = {g.index_of("x"), g.index_of("fc0")};
  st[1].ops = {g.index_of("fc1")};
  st[2].ops = {g.index_of("fc2"), g.index_of("loss"), g.index_of("t")};
  for (int i = 0; i < 3; ++i) st[i].ranks = {i}, st[i].micro_batch = b[i];
  return st;
}

graphpipe::v1::Plan plan_for(const model::Graph& g, const std::vector<StageAssignment>& st,
                             int64_t mini_batch, int devices) {
  planner::PlanInputs in;
  in.graph = &g;
  in.cluster = testing::ideal_cluster(devices);
  in.mini_batch = mini_batch;
  auto plan = planner::build_plan(in, st);
  INFO(plan.status().to_string());
  REQUIRE(plan.ok());
  return std::move(plan).value();
}

}  // namespace

TEST_CASE("in-flight samples follow k_sink = b, k_s = max(k_n + max(b_s, b_n)) (paper Fig. 5)") {
  auto g = chain3();
  auto uniform = chain3_stages(g, {4, 4, 4});
  auto edges = planner::stage_edges(g, uniform);
  REQUIRE(edges.ok());
  CHECK(planner::in_flight_samples(uniform, *edges) == std::vector<int64_t>{12, 8, 4});
  auto per_stage = chain3_stages(g, {1, 2, 4});
  CHECK(planner::in_flight_samples(per_stage, *edges) == std::vector<int64_t>{10, 8, 4});
}

TEST_CASE("stage edges carry the tensors that cross stages, with bytes per sample") {
  auto g = chain3();
  auto edges = planner::stage_edges(g, chain3_stages(g, {1, 1, 1}));
  REQUIRE(edges.ok());
  REQUIRE(edges->size() == 2);
  CHECK((*edges)[0].src_stage() == 0);
  CHECK((*edges)[0].dst_stage() == 1);
  CHECK((*edges)[0].tensors(0).op() == "fc0");
  CHECK((*edges)[0].bytes_per_sample() == 8 * 4);
}

TEST_CASE("bad assignments are rejected: an op twice, an op missing, a cyclic stage graph") {
  auto g = chain3();
  auto twice = chain3_stages(g, {1, 1, 1});
  twice[1].ops.push_back(g.index_of("fc0"));
  auto r1 = planner::stage_edges(g, twice);
  REQUIRE_FALSE(r1.ok());
  CHECK_THAT(r1.status().message(), Catch::Contains("'fc0' is also in stages[0]"));

  auto missing = chain3_stages(g, {1, 1, 1});
  missing[1].ops.clear();
  auto r2 = planner::stage_edges(g, missing);
  REQUIRE_FALSE(r2.ok());
  CHECK_THAT(r2.status().message(), Catch::Contains("'fc1' is in no stage"));

  // fc0 and fc2 together, fc1 alone: stage 0 -> 1 -> 0.
  auto cyclic = chain3_stages(g, {1, 1, 1});
  cyclic[0].ops.push_back(g.index_of("fc2"));
  cyclic[2].ops = {g.index_of("loss"), g.index_of("t")};
  auto r3 = planner::stage_edges(g, cyclic);
  REQUIRE_FALSE(r3.ok());
  CHECK_THAT(r3.status().message(), Catch::Contains("cycle"));
}

TEST_CASE("build_plan rejects micro-batches that do not divide the batch or starve a replica") {
  auto g = chain3();
  planner::PlanInputs in;
  in.graph = &g;
  in.cluster = testing::ideal_cluster(4);
  in.mini_batch = 12;
  auto st = chain3_stages(g, {8, 4, 4});
  auto r = planner::build_plan(in, st);
  REQUIRE_FALSE(r.ok());
  CHECK_THAT(r.status().message(), Catch::Contains("stages[0].micro_batch = 8 does not divide"));
  st = chain3_stages(g, {1, 4, 4});
  st[0].ranks = {0, 3};
  r = planner::build_plan(in, st);
  REQUIRE_FALSE(r.ok());
  CHECK_THAT(r.status().message(),
             Catch::Contains("stages[0].micro_batch = 1 is smaller than its 2 data-parallel "
                             "devices (each needs a sample)"));
  // Two replicas of a micro-batch of 3 take 1 and 2 samples.
  st = chain3_stages(g, {3, 4, 4});
  st[0].ranks = {0, 3};
  r = planner::build_plan(in, st);
  REQUIRE(r.ok());
  CHECK(plan::replica_samples(r->stages(0), 0, 1).begin == 3);
  CHECK(plan::replica_samples(r->stages(0), 0, 1).end == 4);
  CHECK(plan::replica_samples(r->stages(0), 1, 1).end == 6);
}

TEST_CASE("every send has exactly one matching receive, across replicas and micro-batch sizes") {
  auto g = build(*model::build_zoo_model("tiny-mmt"));
  // Branch 0 on rank 0 (b = 2), branch 1 on ranks 1-2 (b = 4, 2 replicas), head on ranks 3-4.
  std::vector<StageAssignment> st(3);
  for (const auto& node : g.ops()) {
    const std::string& id = node.id();
    const int s = id.rfind("b0.", 0) == 0 ? 0 : id.rfind("b1.", 0) == 0 ? 1 : 2;
    st[s].ops.push_back(node.index);
  }
  st[0].ranks = {0};
  st[0].micro_batch = 2;
  st[1].ranks = {1, 2};
  st[1].micro_batch = 4;
  st[2].ranks = {3, 4};
  st[2].micro_batch = 8;
  auto plan = plan_for(g, st, 16, 5);
  REQUIRE(plan::validate_plan_structure(plan, g).ok());
  // Per message: how often it is sent and received, each end checked against the table.
  std::vector<int> sends(plan.messages_size(), 0), recvs(plan.messages_size(), 0);
  int64_t forward_samples[5] = {};
  for (const auto& prog : plan.programs()) {
    for (const auto& in : prog.instructions()) {
      using K = graphpipe::v1::InstructionKind;
      // Unset (0) outside sends and receives; every plan here has messages.
      REQUIRE(in.message() < plan.messages_size());
      const auto& m = plan.messages(in.message());
      switch (in.kind()) {
        case K::INSTRUCTION_KIND_SEND_ACTIVATION:
        case K::INSTRUCTION_KIND_SEND_GRADIENT:
          CHECK(m.src_rank() == prog.rank());
          CHECK(m.gradient() == (in.kind() == K::INSTRUCTION_KIND_SEND_GRADIENT));
          ++sends[in.message()];
          break;
        case K::INSTRUCTION_KIND_RECV_ACTIVATION:
        case K::INSTRUCTION_KIND_RECV_GRADIENT:
          CHECK(m.dst_rank() == prog.rank());
          CHECK(m.gradient() == (in.kind() == K::INSTRUCTION_KIND_RECV_GRADIENT));
          ++recvs[in.message()];
          break;
        case K::INSTRUCTION_KIND_FORWARD: {
          const auto& s = plan.stages(prog.stage());
          forward_samples[prog.rank()] += s.micro_batch() / s.device_ranks_size();
          break;
        }
        default:
          break;
      }
    }
  }
  CHECK_FALSE(sends.empty());
  CHECK(sends == std::vector<int>(plan.messages_size(), 1));
  CHECK(recvs == sends);
  CHECK(plan::plan_schedule_problems(plan, g, *plan::validate_plan_structure(plan, g)).empty());
  // Each stage's replicas together see the whole mini-batch once.
  CHECK(forward_samples[0] == 16);
  CHECK(forward_samples[1] + forward_samples[2] == 16);
  CHECK(forward_samples[3] + forward_samples[4] == 16);
  // Replicated stages all-reduce; single-device stages do not.
  auto count_kind = [&](int rank, graphpipe::v1::InstructionKind kind) {
    int n = 0;
    for (const auto& prog : plan.programs()) {
      if (prog.rank() != rank) continue;
      for (const auto& in : prog.instructions()) n += in.kind() == kind ? 1 : 0;
    }
    return n;
  };
  CHECK(count_kind(0, graphpipe::v1::INSTRUCTION_KIND_ALLREDUCE_GRADS) == 0);
  CHECK(count_kind(1, graphpipe::v1::INSTRUCTION_KIND_ALLREDUCE_GRADS) == 1);
  CHECK(count_kind(3, graphpipe::v1::INSTRUCTION_KIND_OPTIMIZER_STEP) == 1);
}

TEST_CASE("the plan embeds the model with its hash and passes structural validation") {
  auto g = chain3();
  auto plan = plan_for(g, chain3_stages(g, {2, 2, 2}), 8, 3);
  CHECK(plan.format_version() == plan::kPlanFormatVersion);
  CHECK(plan.model_hash().size() == 16);
  CHECK(plan.stages(0).warmup_forwards() == 3);
  CHECK(plan.stages(2).warmup_forwards() == 1);
  auto index = plan::validate_plan_structure(plan, g);
  REQUIRE(index.ok());
  CHECK(index->world_size == 3);

  auto tampered = plan;
  tampered.mutable_stages(1)->set_device_ranks(0, 0);
  auto bad = plan::validate_plan_structure(tampered, g);
  REQUIRE_FALSE(bad.ok());
  CHECK_THAT(bad.status().message(),
             Catch::Contains("stages[1].device_ranks[0] = 0 is also used by stages[0]"));
}

TEST_CASE("a chain plan relays tensors that skip stages through every stage in between") {
  GraphBuilder b("two", "");
  auto x0 = b.linear("a", b.input("x0", {8}), 8);
  auto x1 = b.linear("c", b.input("x1", {4}), 4);
  auto cat = b.concat("cat", {x0, x1});
  b.add_loss(b.mse_loss("loss", cat, b.input("t", {12})));
  auto g = build(b.finish());
  std::vector<StageAssignment> st(3);
  st[0].ops = {g.index_of("x0"), g.index_of("a")};
  st[1].ops = {g.index_of("x1"), g.index_of("c")};
  st[2].ops = {g.index_of("cat"), g.index_of("loss"), g.index_of("t")};
  auto graph_edges = planner::stage_edges(g, st, /*chain=*/false);
  REQUIRE(graph_edges.ok());
  CHECK(graph_edges->size() == 2);  // 0 -> 2 and 1 -> 2: the branches are independent
  auto chain_edges = planner::stage_edges(g, st, /*chain=*/true);
  REQUIRE(chain_edges.ok());
  REQUIRE(chain_edges->size() == 2);  // 0 -> 1 -> 2
  CHECK((*chain_edges)[0].dst_stage() == 1);
  CHECK((*chain_edges)[0].bytes_per_sample() == 8 * 4);          // a, relayed through 1
  CHECK((*chain_edges)[1].bytes_per_sample() == 8 * 4 + 4 * 4);  // a and c
  for (int i = 0; i < 3; ++i) st[i].ranks = {i}, st[i].micro_batch = 1;
  CHECK(planner::in_flight_samples(st, *graph_edges) == std::vector<int64_t>{2, 2, 1});
  CHECK(planner::in_flight_samples(st, *chain_edges) == std::vector<int64_t>{3, 2, 1});

  std::swap(st[0], st[2]);  // the consumer first: not a chain in topological order
  auto bad = planner::stage_edges(g, st, /*chain=*/true);
  REQUIRE_FALSE(bad.ok());
  CHECK_THAT(bad.status().message(), Catch::Contains("a chain needs stages in topological order"));
}

TEST_CASE("a plan with a device idle between used ones is renumbered densely, the idle excluded") {
  const auto g = chain3();
  auto st = chain3_stages(g, {4, 4, 4});
  st[0].ranks = {0};
  st[1].ranks = {2, 3};  // device 1 idle, device 4 (the last) idle too
  st[2].ranks = {5};
  auto plan = plan_for(g, st, 8, 6);
  plan.mutable_training()->set_optimizer(graphpipe::v1::OPTIMIZER_KIND_SGD);
  plan.mutable_training()->set_learning_rate(0.01);
  auto before = plan::validate_plan(plan, g);
  INFO(before.status().to_string());
  REQUIRE(before.ok());
  CHECK(before->world_size == 6);  // more ranks than the 4 programs: no launch could start it
  CHECK(plan.programs_size() == 4);

  auto compacted = planner::compact_idle_ranks(plan);
  INFO(compacted.status().to_string());
  REQUIRE(compacted.ok());
  const auto& c = *compacted;
  auto after = plan::validate_plan(c, g);
  INFO(after.status().to_string());
  REQUIRE(after.ok());
  CHECK(after->world_size == 4);
  REQUIRE(c.cluster().excluded_ranks_size() == 2);
  CHECK(c.cluster().excluded_ranks(0) == 1);
  CHECK(c.cluster().excluded_ranks(1) == 4);
  CHECK(c.cluster_hash() == model::message_hash(c.cluster()));
  // Each rank keeps its device: dense rank -> physical device.
  const std::vector<int> device_of_rank = {0, 2, 3, 5};
  for (int r = 0; r < 4; ++r) CHECK(cost::physical_device(c.cluster(), r) == device_of_rank[r]);
  CHECK(c.stages(1).device_ranks(0) == 1);
  CHECK(c.stages(1).device_ranks(1) == 2);
  CHECK(c.stages(2).device_ranks(0) == 3);
  for (int p = 0; p < c.programs_size(); ++p) CHECK(c.programs(p).rank() == p);
  // Messages follow their ranks: every one is between ranks the new numbering has.
  REQUIRE(c.messages_size() == plan.messages_size());
  for (int m = 0; m < c.messages_size(); ++m) {
    CHECK(cost::physical_device(c.cluster(), c.messages(m).src_rank()) ==
          plan.messages(m).src_rank());
    CHECK(cost::physical_device(c.cluster(), c.messages(m).dst_rank()) ==
          plan.messages(m).dst_rank());
  }
  // A plan on the first devices, the others idle after them, is left as it is.
  const auto dense = plan_for(g, chain3_stages(g, {4, 4, 4}), 8, 6);
  auto same = planner::compact_idle_ranks(dense);
  REQUIRE(same.ok());
  CHECK(model::message_hash(*same) == model::message_hash(dense));
}
