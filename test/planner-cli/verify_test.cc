// The verifier rejects broken plans with reasons and plans made for another model or cluster.
#include "gp/planner/verify.h"

#include <catch2/catch.hpp>

#include "gp/cost/cluster.h"
#include "gp/graph/model_io.h"
#include "gp/graph/plan_util.h"
#include "gp/graph/zoo.h"
#include "gp/planner/search.h"

using namespace gp;

namespace {

struct Searched {
  graphpipe::v1::Cluster cluster;
  std::unique_ptr<cost::AnalyticCostModel> model;
  graphpipe::v1::Plan plan;
};

Searched searched_plan(const char* spec) {
  Searched s;
  s.cluster = *cost::select_devices(*cost::load_cluster("cpu-local"), 4);
  s.model =
      std::make_unique<cost::AnalyticCostModel>(s.cluster.device(), graphpipe::v1::PRECISION_FP32);
  auto m = graph::build_zoo_model(spec);
  REQUIRE(m.ok());
  auto g = graph::Graph::build(*m);
  REQUIRE(g.ok());
  planner::SearchRequest req;
  req.graph = &*g;
  req.cluster = s.cluster;
  req.mini_batch = 8;
  req.compute = s.model.get();
  auto r = planner::search_plan(req);
  REQUIRE(r.ok());
  REQUIRE(r->feasible);
  REQUIRE(r->plan.stages_size() >= 2);
  s.plan = r->plan;
  return s;
}

std::string problems(const planner::VerifyReport& r) {
  std::string all;
  for (const auto& p : r.problems) all += p + "\n";
  return all;
}

}  // namespace

TEST_CASE("a searched plan verifies, also against its own model and cluster") {
  auto s = searched_plan("tiny-mmt");
  auto model = graph::build_zoo_model("tiny-mmt");
  planner::VerifyOptions opts;
  opts.expected_model = &*model;
  opts.expected_cluster = &s.cluster;
  auto r = planner::verify_plan(s.plan, *s.model, opts);
  REQUIRE(r.ok());
  CHECK(problems(*r) == "");
  CHECK(r->simulated);
}

TEST_CASE("a plan for another model or another cluster is rejected by hash") {
  auto s = searched_plan("tiny-mmt");
  auto other_model = graph::build_zoo_model("tiny-mmt?layers=3");
  auto other_cluster = *cost::select_devices(*cost::load_cluster("cpu-local"), 8);
  planner::VerifyOptions opts;
  opts.expected_model = &*other_model;
  opts.expected_cluster = &other_cluster;
  auto r = planner::verify_plan(s.plan, *s.model, opts);
  REQUIRE(r.ok());
  CHECK_THAT(problems(*r), Catch::Contains("the plan is for model 'tiny-mmt'"));
  CHECK_THAT(problems(*r), Catch::Contains("the plan is for cluster"));
}

TEST_CASE("a missing receive is reported as an unmatched send") {
  auto s = searched_plan("tiny-mmt");
  auto* prog = s.plan.mutable_programs(s.plan.programs_size() - 1);
  auto* instrs = prog->mutable_instructions();
  for (int k = 0; k < instrs->size(); ++k) {
    if (instrs->Get(k).kind() == graphpipe::v1::INSTRUCTION_KIND_RECV_ACTIVATION) {
      instrs->erase(instrs->begin() + k);
      break;
    }
  }
  auto r = planner::verify_plan(s.plan, *s.model);
  REQUIRE(r.ok());
  CHECK_THAT(problems(*r), Catch::Contains("0 matching receive(s) for 1 send(s)"));
}

TEST_CASE("a plan that needs more memory than the device has is rejected") {
  auto s = searched_plan("tiny-mmt");
  s.plan.mutable_cluster()->mutable_device()->set_memory_capacity_bytes(1024);
  s.plan.set_cluster_hash(graph::message_hash(s.plan.cluster()));
  auto r = planner::verify_plan(s.plan, *s.model);
  REQUIRE(r.ok());
  CHECK_THAT(problems(*r), Catch::Contains("exceeds the device capacity 1024"));
}

TEST_CASE("a tampered model is caught by the plan's own hash") {
  auto s = searched_plan("tiny-mmt");
  s.plan.mutable_model()->set_description("edited");
  auto r = planner::verify_plan(s.plan, *s.model);
  REQUIRE(r.ok());
  CHECK_THAT(problems(*r), Catch::Contains("model_hash"));
}

TEST_CASE("a duplicated forward is reported per rank and micro-batch") {
  auto s = searched_plan("tiny-mmt");
  auto* prog = s.plan.mutable_programs(0);
  for (const auto& in : prog->instructions()) {
    if (in.kind() == graphpipe::v1::INSTRUCTION_KIND_FORWARD) {
      *prog->add_instructions() = in;
      break;
    }
  }
  auto r = planner::verify_plan(s.plan, *s.model);
  REQUIRE(r.ok());
  CHECK_THAT(problems(*r), Catch::Contains("has 2 forward(s)"));
}

TEST_CASE("validate_plan (the executor's check) and verify refuse a missing gradient receive") {
  auto s = searched_plan("tiny-mmt");
  auto g = graph::Graph::build(s.plan.model());
  REQUIRE(g.ok());
  REQUIRE(graph::validate_plan(s.plan, *g).ok());
  bool dropped = false;
  for (auto& prog : *s.plan.mutable_programs()) {
    auto* instrs = prog.mutable_instructions();
    for (int k = 0; k < instrs->size() && !dropped; ++k) {
      if (instrs->Get(k).kind() == graphpipe::v1::INSTRUCTION_KIND_RECV_GRADIENT) {
        instrs->erase(instrs->begin() + k);
        dropped = true;
      }
    }
  }
  REQUIRE(dropped);
  // The structure alone is still sound: only the schedule check sees the unmatched send.
  REQUIRE(graph::validate_plan_structure(s.plan, *g).ok());
  auto checked = graph::validate_plan(s.plan, *g);
  REQUIRE_FALSE(checked.ok());
  CHECK(checked.status().code() == StatusCode::kInvalidArgument);
  CHECK_THAT(checked.status().message(),
             Catch::Contains("send of the gradient from rank") &&
                 Catch::Contains("0 matching receive(s) for 1 send(s)"));
  auto r = planner::verify_plan(s.plan, *s.model);
  REQUIRE(r.ok());
  CHECK_THAT(problems(*r), Catch::Contains("send of the gradient from rank"));
}

TEST_CASE("a program too short for its micro-batches is refused without counting them") {
  auto s = searched_plan("tiny-mmt");
  auto g = graph::Graph::build(s.plan.model());
  REQUIRE(g.ok());
  s.plan.mutable_programs(0)->mutable_instructions()->DeleteSubrange(
      1, s.plan.programs(0).instructions_size() - 1);
  auto checked = graph::validate_plan(s.plan, *g);
  REQUIRE_FALSE(checked.ok());
  CHECK_THAT(checked.status().message(),
             Catch::Contains("1 instructions cannot forward and backward its"));
}
