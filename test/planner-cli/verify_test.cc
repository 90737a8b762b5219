// The verifier rejects broken plans with reasons and plans made for another model or cluster.
#include "gp/planner/verify.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <functional>
#include <limits>

#include "../support/example_plans.h"
#include "../support/fakes.h"
#include "../support/models.h"
#include "gp/cost/cluster.h"
#include "gp/model/model_io.h"
#include "gp/model/zoo.h"
#include "gp/plan/loaded_plan.h"
#include "gp/plan/plan_util.h"
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
  auto m = model::build_zoo_model(spec);
  REQUIRE(m.ok());
  auto g = model::Graph::build(*m);
  REQUIRE(g.ok());
  planner::SearchRequest req;
  req.graph = &*g;
  req.cluster = s.cluster;
  req.mini_batch = 8;
  req.training = testing::training(graphpipe::v1::OPTIMIZER_KIND_SGD);  // a run needs one
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
  auto model = model::build_zoo_model("tiny-mmt");
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
  auto other_model = model::build_zoo_model("tiny-mmt?layers=3");
  auto other_cluster = *cost::select_devices(*cost::load_cluster("cpu-local"), 8);
  planner::VerifyOptions opts;
  opts.expected_model = &*other_model;
  opts.expected_cluster = &other_cluster;
  auto r = planner::verify_plan(s.plan, *s.model, opts);
  REQUIRE(r.ok());
  CHECK_THAT(problems(*r), Catch::Contains("the plan is for model 'tiny-mmt'"));
  CHECK_THAT(problems(*r), Catch::Contains("the plan is for cluster"));
}

TEST_CASE("a missing receive is reported naming the message nobody receives") {
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
  CHECK_THAT(problems(*r), Catch::Contains("activation message") &&
                               Catch::Contains("sent 1 time(s), received 0 time(s)"));
}

TEST_CASE("a plan that needs more memory than the device has is rejected") {
  auto s = searched_plan("tiny-mmt");
  s.plan.mutable_cluster()->mutable_device()->set_memory_capacity_bytes(1024);
  s.plan.set_cluster_hash(model::message_hash(s.plan.cluster()));
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

TEST_CASE("a plan whose cluster was edited after planning is refused by every reader") {
  auto s = searched_plan("tiny-mmt");
  REQUIRE(plan::check_plan_hashes(s.plan).ok());
  s.plan.mutable_cluster()->mutable_device()->set_memory_capacity_bytes(int64_t{1} << 40);
  const std::string hash = "plan.cluster_hash = '" + s.plan.cluster_hash() + "'";
  CHECK_THAT(plan::check_plan_hashes(s.plan).message(),
             Catch::Contains(hash) && Catch::Contains("does not match the embedded cluster"));
  auto g = model::Graph::build(s.plan.model());
  REQUIRE(g.ok());
  // The structure alone does not look at the cluster's hash (the simulator varies links).
  REQUIRE(plan::validate_plan_structure(s.plan, *g).ok());
  CHECK_THAT(plan::validate_plan(s.plan, *g).status().message(), Catch::Contains(hash));
  auto loaded = plan::LoadedPlan::from(s.plan);  // local, run, serve
  REQUIRE_FALSE(loaded.ok());
  CHECK_THAT(loaded.status().message(), Catch::Contains(hash));
  auto r = planner::verify_plan(s.plan, *s.model);
  REQUIRE(r.ok());
  CHECK_THAT(problems(*r), Catch::Contains(hash));
  s.plan.mutable_model()->set_description("edited");
  CHECK_THAT(plan::check_plan_hashes(s.plan).message(),
             Catch::Contains("does not match the embedded model"));
}

TEST_CASE("verify and validate_plan refuse each field a run reads or a tool prints when absurd") {
  struct Case {
    const char* name;
    std::function<void(graphpipe::v1::Plan&)> mutate;
    std::string expected;
  };
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const std::vector<Case> cases = {
      {"in_flight_samples -1", [](auto& p) { p.mutable_stages(0)->set_in_flight_samples(-1); },
       "stages[0].in_flight_samples = -1, must be in ["},
      {"warmup_forwards 2^31-1",
       [](auto& p) { p.mutable_stages(0)->set_warmup_forwards(2147483647); },
       "stages[0].warmup_forwards = 2147483647, must be in [1, "},
      {"warmup_forwards 0", [](auto& p) { p.mutable_stages(0)->set_warmup_forwards(0); },
       "stages[0].warmup_forwards = 0"},
      {"a NaN prediction", [nan](auto& p) { p.mutable_predicted()->set_iteration_time_s(nan); },
       "predicted.iteration_time_s = nan, must be finite and >= 0"},
      {"an infinite stage busy time",
       [](auto& p) {
         p.mutable_predicted()->mutable_stages(0)->set_busy_time_s(
             std::numeric_limits<double>::infinity());
       },
       "predicted.stages[0].busy_time_s = inf"},
      {"a bubble fraction of 2", [](auto& p) { p.mutable_predicted()->set_bubble_fraction(2); },
       "predicted.bubble_fraction = 2, must be in [0, 1]"},
      {"a negative peak memory", [](auto& p) { p.mutable_predicted()->set_peak_memory_bytes(-5); },
       "predicted.peak_memory_bytes = -5"},
      {"stage metrics of a stage the plan lacks",
       [](auto& p) { p.mutable_predicted()->mutable_stages(0)->set_stage(99); },
       "predicted.stages[0].stage = 99 is not a stage of the plan"},
      {"learning_rate 0", [](auto& p) { p.mutable_training()->set_learning_rate(0); },
       "plan.training.learning_rate = 0, must be finite and > 0"},
      {"OPTIMIZER_KIND_UNSPECIFIED",
       [](auto& p) {
         p.mutable_training()->set_optimizer(graphpipe::v1::OPTIMIZER_KIND_UNSPECIFIED);
       },
       "plan.training.optimizer = OPTIMIZER_KIND_UNSPECIFIED"},
  };
  const auto base = searched_plan("tiny-mmt");
  auto g = model::Graph::build(base.plan.model());
  REQUIRE(g.ok());
  REQUIRE(plan::plan_field_problems(base.plan).empty());
  REQUIRE(plan::validate_plan(base.plan, *g).ok());
  for (const auto& c : cases) {
    DYNAMIC_SECTION(c.name) {
      graphpipe::v1::Plan p = base.plan;
      c.mutate(p);
      auto checked = plan::validate_plan(p, *g);  // what every executor mode runs
      REQUIRE_FALSE(checked.ok());
      CHECK(checked.status().code() == StatusCode::kInvalidArgument);
      CHECK_THAT(checked.status().message(), Catch::Contains(c.expected));
      auto r = planner::verify_plan(p, *base.model);
      REQUIRE(r.ok());
      CHECK_FALSE(r->simulated);
      CHECK_THAT(problems(*r), Catch::Contains(c.expected));
    }
  }
}

TEST_CASE("a simulation that predicts an infinite iteration fails verification naming the cause") {
  auto s = searched_plan("tiny-mmt");
  const testing::FakeCostModel absurd(1e308, 1e308);  // sums overflow to inf
  auto r = planner::verify_plan(s.plan, absurd);
  REQUIRE(r.ok());
  CHECK(r->simulated);
  CHECK_THAT(problems(*r), Catch::Contains("predicted iteration inf s, 0 samples/s: not finite "
                                           "and > 0; a cost the plan was priced with is absurd"));
  const double nan = std::numeric_limits<double>::quiet_NaN();
  for (const auto& [time, throughput] :
       {std::pair{nan, 1.0}, std::pair{1.0, 0.0}, std::pair{-1.0, 1.0}, std::pair{1.0, HUGE_VAL}}) {
    INFO(time << " s, " << throughput << " samples/s");
    CHECK(planner::check_prediction(time, throughput).code() == StatusCode::kFailedPrecondition);
  }
  CHECK(planner::check_prediction(0.5, 16).ok());
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
  auto g = model::Graph::build(s.plan.model());
  REQUIRE(g.ok());
  REQUIRE(plan::validate_plan(s.plan, *g).ok());
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
  REQUIRE(plan::validate_plan_structure(s.plan, *g).ok());
  auto checked = plan::validate_plan(s.plan, *g);
  REQUIRE_FALSE(checked.ok());
  CHECK(checked.status().code() == StatusCode::kInvalidArgument);
  CHECK_THAT(checked.status().message(), Catch::Contains("gradient message") &&
                                             Catch::Contains("sent 1 time(s), received 0 time(s)"));
  auto r = planner::verify_plan(s.plan, *s.model);
  REQUIRE(r.ok());
  CHECK_THAT(problems(*r), Catch::Contains("received 0 time(s)"));
}

TEST_CASE("a program too short for its micro-batches is refused without counting them") {
  auto s = searched_plan("tiny-mmt");
  auto g = model::Graph::build(s.plan.model());
  REQUIRE(g.ok());
  s.plan.mutable_programs(0)->mutable_instructions()->DeleteSubrange(
      1, s.plan.programs(0).instructions_size() - 1);
  auto checked = plan::validate_plan(s.plan, *g);
  REQUIRE_FALSE(checked.ok());
  CHECK_THAT(checked.status().message(),
             Catch::Contains("1 instructions cannot forward and backward its"));
}

namespace {

// The program of `rank` and the indices of its instructions of `kind`.
std::vector<int> instructions_of(const graphpipe::v1::Plan& plan, int rank,
                                 graphpipe::v1::InstructionKind kind) {
  std::vector<int> found;
  for (const auto& prog : plan.programs()) {
    if (prog.rank() != rank) continue;
    for (int k = 0; k < prog.instructions_size(); ++k) {
      if (prog.instructions(k).kind() == kind) found.push_back(k);
    }
  }
  return found;
}

graphpipe::v1::RankProgram& program_of(graphpipe::v1::Plan& plan, int rank) {
  for (auto& prog : *plan.mutable_programs()) {
    if (prog.rank() == rank) return prog;
  }
  FAIL("no program for rank " << rank);
  throw;
}

}  // namespace

TEST_CASE("every send and receive of a searched plan names a message of its own channel") {
  // tiny-mmt: on 4 CPU workers its plan has several stages (tiny-candle-uno's runs on one).
  auto s = searched_plan("tiny-mmt");
  REQUIRE(s.plan.format_version() == plan::kPlanFormatVersion);
  REQUIRE(s.plan.messages_size() > 0);
  std::vector<int> sent(s.plan.messages_size(), 0), received(s.plan.messages_size(), 0);
  for (const auto& prog : s.plan.programs()) {
    for (const auto& in : prog.instructions()) {
      using K = graphpipe::v1::InstructionKind;
      if (in.kind() < K::INSTRUCTION_KIND_SEND_ACTIVATION ||
          in.kind() > K::INSTRUCTION_KIND_RECV_GRADIENT) {
        continue;
      }
      const auto& m = s.plan.messages(in.message());
      const bool send = in.kind() == K::INSTRUCTION_KIND_SEND_ACTIVATION ||
                        in.kind() == K::INSTRUCTION_KIND_SEND_GRADIENT;
      CHECK((send ? m.src_rank() : m.dst_rank()) == prog.rank());
      ++(send ? sent : received)[in.message()];
    }
  }
  for (int m = 0; m < s.plan.messages_size(); ++m) {
    INFO(plan::describe_message(s.plan, m));
    CHECK(sent[m] == 1);
    CHECK(received[m] == 1);
  }
}

TEST_CASE("two ends of a channel that disagree on the message order are refused before a run") {
  // A chain of three ranks, four micro-batches: channel 0->1 carries one message per micro-batch.
  const auto g = testing::zoo_graph("tiny-candle-uno");
  auto plan = testing::relay_plan(g, testing::training(graphpipe::v1::OPTIMIZER_KIND_SGD));
  REQUIRE(plan::validate_plan(plan, g).ok());
  // Rank 0's first two activation sends, swapped: rank 1 receives them in the table's order, so
  // NCCL (which matches by order alone) would pair the wrong buffers.
  const auto sends = instructions_of(plan, 0, graphpipe::v1::INSTRUCTION_KIND_SEND_ACTIVATION);
  REQUIRE(sends.size() >= 2);
  auto& prog = program_of(plan, 0);
  REQUIRE(plan.messages(prog.instructions(sends[1]).message()).dst_rank() == 1);
  prog.mutable_instructions()->SwapElements(sends[0], sends[1]);
  REQUIRE(plan::validate_plan_structure(plan, g).ok());
  auto checked = plan::validate_plan(plan, g);
  REQUIRE_FALSE(checked.ok());
  const std::string why = checked.status().message();
  INFO(why);
  CHECK_THAT(why, Catch::Contains("channel 0->1: rank 0 sends activation message 1") &&
                      Catch::Contains("as the channel's message 0, where plan.messages lists "
                                      "activation message 0") &&
                      Catch::Contains("NCCL matches them by order"));
  cost::AnalyticCostModel model(plan.cluster().device(), graphpipe::v1::PRECISION_FP32);
  auto r = planner::verify_plan(plan, model);
  REQUIRE(r.ok());
  CHECK_THAT(problems(*r), Catch::Contains("NCCL matches them by order"));
}

TEST_CASE("a plan of format 1 is refused saying to make it again") {
  auto s = searched_plan("tiny-mmt");
  auto g = model::Graph::build(s.plan.model());
  REQUIRE(g.ok());
  s.plan.set_format_version(1);
  auto checked = plan::validate_plan_structure(s.plan, *g);
  REQUIRE_FALSE(checked.ok());
  CHECK_THAT(checked.status().message(),
             Catch::Contains("plan.format_version = 1: a plan from an older graphpipe-plan") &&
                 Catch::Contains("make the plan again"));
  s.plan.set_format_version(3);
  CHECK_THAT(plan::validate_plan_structure(s.plan, *g).status().message(),
             Catch::Contains("plan.format_version = 3, this build reads format 2"));
}

TEST_CASE("an instruction naming another rank's message or a missing one is refused by field") {
  auto s = searched_plan("tiny-mmt");
  auto g = model::Graph::build(s.plan.model());
  REQUIRE(g.ok());
  const auto sends = instructions_of(s.plan, 0, graphpipe::v1::INSTRUCTION_KIND_SEND_ACTIVATION);
  const auto recvs = instructions_of(s.plan, 0, graphpipe::v1::INSTRUCTION_KIND_RECV_GRADIENT);
  REQUIRE_FALSE(sends.empty());
  REQUIRE_FALSE(recvs.empty());
  auto& prog = program_of(s.plan, 0);
  SECTION("a send naming a message rank 0 receives") {
    const int theirs = prog.instructions(recvs[0]).message();
    prog.mutable_instructions(sends[0])->set_message(theirs);
    auto checked = plan::validate_plan_structure(s.plan, *g);
    REQUIRE_FALSE(checked.ok());
    CHECK_THAT(checked.status().message(),
               Catch::Contains(".message = " + std::to_string(theirs)) &&
                   Catch::Contains("carries gradients, but the instruction is a "
                                   "INSTRUCTION_KIND_SEND_ACTIVATION"));
  }
  SECTION("a send naming a message another rank sends") {
    int other = -1;
    for (int m = 0; m < s.plan.messages_size() && other < 0; ++m) {
      if (s.plan.messages(m).src_rank() != 0 && !s.plan.messages(m).gradient()) other = m;
    }
    REQUIRE(other >= 0);
    prog.mutable_instructions(sends[0])->set_message(other);
    CHECK_THAT(plan::validate_plan_structure(s.plan, *g).status().message(),
               Catch::Contains(".message = " + std::to_string(other)) &&
                   Catch::Contains("is not sent by this instruction's rank 0"));
  }
  SECTION("a message index past the table") {
    prog.mutable_instructions(sends[0])->set_message(s.plan.messages_size());
    CHECK_THAT(plan::validate_plan_structure(s.plan, *g).status().message(),
               Catch::Contains(".message = " + std::to_string(s.plan.messages_size()) +
                               " is not an index of plan.messages"));
  }
}

TEST_CASE("a message outside its ends' micro-batch slices or between wrong ranks is refused") {
  const auto g = testing::zoo_graph("tiny-candle-uno");
  auto plan = testing::relay_plan(g, testing::training(graphpipe::v1::OPTIMIZER_KIND_SGD));
  const auto sends = instructions_of(plan, 0, graphpipe::v1::INSTRUCTION_KIND_SEND_ACTIVATION);
  REQUIRE_FALSE(sends.empty());
  const int m = program_of(plan, 0).instructions(sends[0]).message();
  auto* msg = plan.mutable_messages(m);
  SECTION("samples of another micro-batch") {
    const int64_t mb = plan.stages(0).micro_batch();
    REQUIRE(plan.mini_batch() >= 2 * mb);
    msg->set_sample_begin(msg->sample_begin() + mb);
    msg->set_sample_end(msg->sample_end() + mb);
    CHECK_THAT(plan::validate_plan_structure(plan, g).status().message(),
               Catch::Contains("are outside rank 0's samples [0, 2) of micro-batch 0"));
  }
  SECTION("samples past the mini-batch") {
    msg->set_sample_end(plan.mini_batch() + 1);
    CHECK_THAT(plan::validate_plan_structure(plan, g).status().message(),
               Catch::Contains("messages[" + std::to_string(m) + "]: samples") &&
                   Catch::Contains("outside the mini-batch"));
  }
  SECTION("a receiver that is not a replica of the edge's destination") {
    msg->set_dst_rank(0);
    CHECK_THAT(
        plan::validate_plan_structure(plan, g).status().message(),
        Catch::Contains("messages[" + std::to_string(m) + "].dst_rank = 0 is not a replica"));
  }
}
