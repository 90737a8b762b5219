// Plans trained by RankRunner over the Gloo data plane (ranks as threads of this process, each
// with its own Gloo communicator on 127.0.0.1) reproduce the single-process reference.
#include <unistd.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <filesystem>
#include <optional>
#include <thread>

#include "../support/models.h"
#include "gp/cost/cluster.h"
#include "gp/exec/gloo_communicator.h"
#include "gp/exec/rank_runner.h"
#include "gp/exec/rank_session.h"
#include "gp/exec/reference_trainer.h"
#include "gp/plan/plan_util.h"
#include "gp/planner/plan_builder.h"

using namespace gp;

namespace {

constexpr int kIterations = 4;
constexpr auto kTimeout = std::chrono::milliseconds(20000);

struct StoreDir {
  std::filesystem::path path;
  StoreDir() {
    static std::atomic<int> counter{0};
    path = std::filesystem::temp_directory_path() /
           ("gp-gloo-e2e-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
    std::filesystem::remove_all(path);
    std::filesystem::create_directories(path);
  }
  ~StoreDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
};

using testing::training;

std::vector<double> reference_losses(const model::Graph& g, int64_t batch,
                                     const graphpipe::v1::TrainingConfig& t) {
  auto trainer = exec::ReferenceTrainer::create(g, batch, 0, t);
  REQUIRE(trainer.ok());
  std::vector<double> losses;
  for (int i = 0; i < kIterations; ++i) {
    const auto m = (*trainer)->run_iteration(i);
    REQUIRE(m.ok());
    losses.push_back(m->loss);
  }
  return losses;
}

// tiny-mmt split by branch: b0 ops, b1 ops, the rest (head).
std::vector<planner::StageAssignment> by_branch(const model::Graph& g, int stages) {
  std::vector<planner::StageAssignment> st(stages);
  for (const auto& node : g.ops()) {
    const std::string& id = node.id();
    const int s = id.rfind("b0.", 0) == 0 ? 0 : id.rfind("b1.", 0) == 0 ? 1 : 2;
    st[std::min(s, stages - 1)].ops.push_back(node.index);
  }
  return st;
}

graphpipe::v1::Plan make_plan(const model::Graph& g, std::vector<planner::StageAssignment> st,
                              int world, int64_t batch, const graphpipe::v1::TrainingConfig& t) {
  planner::PlanInputs in;
  in.graph = &g;
  in.cluster = *cost::select_devices(*cost::load_cluster("cpu-local"), world);
  in.mini_batch = batch;
  in.training = t;
  auto plan = planner::build_plan(in, st);
  INFO(plan.status().to_string());
  REQUIRE(plan.ok());
  return *plan;
}

// Every rank of `plan` on a thread with its own Gloo communicator; the first failure aborts the
// failing rank's communicator (which closes its connections, so its peers fail fast too).
Result<std::vector<double>> run_over_gloo(const graphpipe::v1::Plan& plan,
                                          std::chrono::milliseconds timeout = kTimeout,
                                          std::vector<Status>* rank_errors = nullptr) {
  auto built = model::Graph::build(plan.model());
  if (!built.ok()) return built.status();
  const model::Graph& graph = *built;
  GP_ASSIGN_OR_RETURN(plan::PlanIndex index, plan::validate_plan_structure(plan, graph));
  std::vector<std::unique_ptr<exec::RankRunner>> runners;
  for (int r = 0; r < index.world_size; ++r) {
    if (index.program_of_rank[r] < 0) continue;
    GP_ASSIGN_OR_RETURN(auto runner, exec::RankRunner::create(plan, graph, index, r));
    runners.push_back(std::move(runner));
  }
  StoreDir dir;
  const size_t n = runners.size();
  std::vector<std::optional<Result<std::unique_ptr<exec::Communicator>>>> comms(n);
  std::vector<std::vector<double>> loss_sums(n, std::vector<double>(kIterations, 0));
  std::vector<Status> errors(n);
  std::vector<std::thread> threads;
  for (size_t i = 0; i < n; ++i) {
    threads.emplace_back([&, i] {
      exec::GlooOptions o;
      o.rank = runners[i]->rank();
      o.world_size = index.world_size;
      o.store_dir = dir.path.string();
      o.prefix = "e2e";
      o.timeout = timeout;
      comms[i].emplace(exec::make_gloo_communicator(o));
      if (!comms[i]->ok()) {
        errors[i] = comms[i]->status();
        return;
      }
      exec::Communicator& comm = *comms[i]->value();
      if (Status bound = runners[i]->bind(comm); !bound.ok()) {
        errors[i] = bound;
        return;
      }
      for (int it = 0; it < kIterations; ++it) {
        auto loss = runners[i]->run_iteration(it);
        if (!loss.ok()) {
          errors[i] = loss.status();
          comm.abort("rank " + std::to_string(runners[i]->rank()) + " failed");
          return;
        }
        loss_sums[i][it] = *loss;
      }
    });
  }
  for (auto& t : threads) t.join();
  // Communicators are destroyed here, after every rank has finished (destruction closes pairs).
  if (rank_errors != nullptr) *rank_errors = errors;
  for (const Status& st : errors) {
    if (!st.ok()) return st;
  }
  std::vector<double> losses;
  for (int it = 0; it < kIterations; ++it) {
    double sum = 0;
    for (const auto& per_rank : loss_sums) sum += per_rank[it];
    losses.push_back(sum / static_cast<double>(plan.mini_batch()));
  }
  return losses;
}

void check_losses(const graphpipe::v1::Plan& plan, const std::vector<double>& reference) {
  auto gloo = run_over_gloo(plan);
  INFO(gloo.status().to_string());
  REQUIRE(gloo.ok());
  for (int i = 0; i < kIterations; ++i) {
    INFO("iteration " << i);
    CHECK((*gloo)[i] == Approx(reference[i]).epsilon(1e-5));
  }
}

}  // namespace

TEST_CASE("a two-stage pipeline over Gloo trains like the reference and the in-process plane") {
  auto g = testing::zoo_graph("tiny-mmt");
  const auto t = training(graphpipe::v1::OPTIMIZER_KIND_SGD);
  auto st = by_branch(g, 2);  // b0 on rank 0; b1 and the head on rank 1
  st[0].ranks = {0};
  st[0].micro_batch = 4;
  st[1].ranks = {1};
  st[1].micro_batch = 4;
  const auto plan = make_plan(g, st, 2, 16, t);
  const auto reference = reference_losses(g, 16, t);
  check_losses(plan, reference);
  // Point-to-point transfers move bytes: without replicas, the losses are those of the
  // in-process data plane bit for bit.
  auto gloo = run_over_gloo(plan);
  auto local = exec::run_plan_locally(plan, kIterations, kTimeout);
  REQUIRE(gloo.ok());
  REQUIRE(local.ok());
  CHECK(*gloo == local->losses);
}

TEST_CASE("two data-parallel replicas all-reduce their gradients over Gloo (Adam)") {
  auto g = testing::zoo_graph("tiny-mmt");
  const auto t = training(graphpipe::v1::OPTIMIZER_KIND_ADAM);
  auto st = by_branch(g, 1);
  st[0].ranks = {0, 1};
  st[0].micro_batch = 4;
  check_losses(make_plan(g, st, 2, 16, t), reference_losses(g, 16, t));
}

TEST_CASE("replicated stages feeding a pipeline: subgroup all-reduce with an idle rank") {
  auto g = testing::zoo_graph("tiny-mmt");
  const auto t = training(graphpipe::v1::OPTIMIZER_KIND_MOMENTUM);
  // Branch 0 on rank 0 (b = 2), branch 1 on ranks 1-2 (b = 4, replicas), head on rank 3.
  auto st = by_branch(g, 3);
  st[0].ranks = {0};
  st[0].micro_batch = 2;
  st[1].ranks = {1, 2};
  st[1].micro_batch = 4;
  st[2].ranks = {3};
  st[2].micro_batch = 8;
  check_losses(make_plan(g, st, 4, 16, t), reference_losses(g, 16, t));
}

TEST_CASE("a rank that cannot receive fails with a deadline naming the peer, its peer is freed") {
  auto g = testing::zoo_graph("tiny-mmt");
  const auto t = training(graphpipe::v1::OPTIMIZER_KIND_SGD);
  auto st = by_branch(g, 2);
  st[0].ranks = {0};
  st[0].micro_batch = 4;
  st[1].ranks = {1};
  st[1].micro_batch = 4;
  auto plan = make_plan(g, st, 2, 8, t);
  // Drop rank 0's first activation send: rank 1 waits for it until the timeout, then aborts,
  // which closes its connections and frees rank 0 (waiting for gradients) at once.
  for (auto& prog : *plan.mutable_programs()) {
    if (prog.rank() != 0) continue;
    auto* instrs = prog.mutable_instructions();
    for (int k = 0; k < instrs->size(); ++k) {
      if (instrs->Get(k).kind() == graphpipe::v1::INSTRUCTION_KIND_SEND_ACTIVATION) {
        instrs->erase(instrs->begin() + k);
        break;
      }
    }
  }
  std::vector<Status> errors;
  const auto start = std::chrono::steady_clock::now();
  auto run = run_over_gloo(plan, std::chrono::milliseconds(300), &errors);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  REQUIRE_FALSE(run.ok());
  REQUIRE(errors.size() == 2);
  INFO(errors[0].to_string() << " / " << errors[1].to_string());
  // Both ranks wait with the same timeout (rank 1 for the dropped activation, rank 0 for a
  // gradient that therefore never comes); whichever deadline fires first closes the connections
  // and the other rank then fails with UNAVAILABLE. Which one fires first is a race, so check
  // the pair: one deadline naming its peer, and both ranks failed.
  const bool rank1_timed_out = errors[1].code() == StatusCode::kDeadlineExceeded;
  const bool rank0_timed_out = errors[0].code() == StatusCode::kDeadlineExceeded;
  REQUIRE((rank1_timed_out || rank0_timed_out));
  if (rank1_timed_out) {
    CHECK_THAT(errors[1].message(), Catch::Contains("rank 1") && Catch::Contains("from rank 0"));
  } else {
    CHECK_THAT(errors[0].message(), Catch::Contains("rank 0") && Catch::Contains("from rank 1"));
  }
  CHECK_FALSE(errors[0].ok());
  CHECK_FALSE(errors[1].ok());
  CHECK(seconds < 5.0);
}

TEST_CASE("sharded optimizer state over Gloo trains bit for bit like the unsharded plan") {
  auto g = testing::zoo_graph("tiny-mmt");
  const auto t = training(graphpipe::v1::OPTIMIZER_KIND_ADAM);
  // Branch 0 on rank 0, branch 1 on ranks 1-3 (three slices of a count 3 does not divide), head
  // on ranks 4-5; each replicated stage gathers its parameters after the step.
  auto st = by_branch(g, 3);
  st[0].ranks = {0};
  st[0].micro_batch = 2;
  st[1].ranks = {1, 2, 3};
  st[1].micro_batch = 6;
  st[2].ranks = {4, 5};
  st[2].micro_batch = 8;
  const auto plain = make_plan(g, st, 6, 24, t);
  auto sharded = plain;
  for (auto& stage : *sharded.mutable_stages()) stage.set_shard_optimizer(true);
  auto a = run_over_gloo(plain);
  auto b = run_over_gloo(sharded);
  INFO(a.status().to_string() << " / " << b.status().to_string());
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  CHECK(*a == *b);
  const auto reference = reference_losses(g, 24, t);
  for (int i = 0; i < kIterations; ++i) {
    INFO("iteration " << i);
    CHECK((*b)[i] == Approx(reference[i]).epsilon(1e-5));
  }
}
