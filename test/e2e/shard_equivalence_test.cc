// ZeRO-1 (Stage.shard_optimizer) changes where the optimizer state lives, never what the step
// computes: every replica sees the same summed gradient and the updates are element-wise, so a
// plan with sharded stages trains bit for bit like the same plan without (on the CPU and on the
// host-staged path CUDA takes) and like the single-process reference; its checkpoints keep the
// unsharded layout, so each kind of plan resumes from the other's.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "../support/example_plans.h"
#include "../support/local_training.h"
#include "../support/models.h"
#include "../support/staging_device.h"
#include "checkpoint/checkpoint_files.h"
#include "gp/cost/cluster.h"
#include "gp/cost/cost_model.h"
#include "gp/exec/rank_program.h"
#include "gp/exec/rank_session.h"
#include "gp/exec/reference_trainer.h"
#include "gp/planner/search.h"

using namespace gp;

namespace {

constexpr int kIterations = 4;
constexpr auto kTimeout = std::chrono::milliseconds(20000);

using testing::check_bit_identical;
using Trained = testing::LocalTraining;

// Checks that every session's runner took the plan's choice.
Trained train(const graphpipe::v1::Plan& plan, const exec::Device& device = exec::cpu_device()) {
  return testing::train_locally(plan, kIterations, kTimeout, device,
                                [&](const exec::RankSession& s) {
                                  const auto& stage = plan.stages(s.runner().stage());
                                  CHECK(s.runner().stage_runner().sharded() ==
                                        (stage.shard_optimizer() && stage.device_ranks_size() > 1));
                                });
}

graphpipe::v1::Plan sharded(graphpipe::v1::Plan plan) {
  for (auto& st : *plan.mutable_stages()) st.set_shard_optimizer(true);
  return plan;
}

// Every rank of the sessions runs iterations [first, last) over one loopback hub; the mean loss
// per iteration. With `checkpoint_dir`, every rank writes its part after iteration
// `checkpoint_at` (a sharded stage's replicas gather their state there) and the checkpoint is
// committed once all parts are on disk.
std::vector<double> run_sessions(std::vector<std::unique_ptr<exec::RankSession>>& sessions,
                                 int first, int last, const std::string& checkpoint_dir = "",
                                 int checkpoint_at = -1) {
  const auto& plan = sessions.front()->plan();
  exec::LoopbackHub hub(sessions.front()->loaded().world_size(), kTimeout);
  std::vector<std::vector<double>> sums(sessions.size(), std::vector<double>(last - first, 0));
  std::vector<Status> results(sessions.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < sessions.size(); ++i) {
    threads.emplace_back([&, i] {
      auto comm = hub.communicator(sessions[i]->rank());
      results[i] = sessions[i]->bind(*comm);
      for (int it = first; it < last && results[i].ok(); ++it) {
        auto loss = sessions[i]->run_iteration(it);
        if (!loss.ok()) {
          results[i] = loss.status();
          comm->abort(loss.status().message());
          break;
        }
        sums[i][it - first] = *loss;
        if (it == checkpoint_at) {
          results[i] = sessions[i]->write_checkpoint_part(checkpoint_dir, it, "job");
          if (!results[i].ok()) comm->abort(results[i].message());
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  for (const auto& r : results) {
    INFO(r.to_string());
    REQUIRE(r.ok());
  }
  if (checkpoint_at >= 0) {
    REQUIRE(sessions.front()->commit_checkpoint(checkpoint_dir, checkpoint_at, "job").ok());
  }
  std::vector<double> losses(last - first, 0);
  for (const auto& per_rank : sums) {
    for (size_t k = 0; k < losses.size(); ++k) losses[k] += per_rank[k];
  }
  for (auto& l : losses) l /= static_cast<double>(plan.mini_batch());
  return losses;
}

std::vector<std::unique_ptr<exec::RankSession>> open_all(const graphpipe::v1::Plan& plan) {
  auto loaded = plan::LoadedPlan::from(plan);
  INFO(loaded.status().to_string());
  REQUIRE(loaded.ok());
  std::vector<std::unique_ptr<exec::RankSession>> sessions;
  for (int r = 0; r < (*loaded)->world_size(); ++r) {
    exec::SessionOptions o;
    o.rank = r;
    auto s = exec::RankSession::open(*loaded, o);
    INFO(s.status().to_string());
    REQUIRE(s.ok());
    sessions.push_back(std::move(s).value());
  }
  return sessions;
}

}  // namespace

TEST_CASE("sharded optimizer state trains bit for bit like the unsharded plan and the reference") {
  const auto g = testing::zoo_graph("tiny-mmt");
  for (const auto kind :
       {graphpipe::v1::OPTIMIZER_KIND_ADAM, graphpipe::v1::OPTIMIZER_KIND_MOMENTUM,
        graphpipe::v1::OPTIMIZER_KIND_SGD}) {
    // 3 replicas: the stages' parameter counts do not divide by 3, so the last slice is short.
    for (const int replicas : {2, 3}) {
      INFO("optimizer " << graphpipe::v1::OptimizerKind_Name(kind) << ", " << replicas
                        << " replicas");
      const auto plan = testing::replicated_plan(g, testing::training(kind), replicas, replicas);
      const Trained plain = train(plan);
      const Trained zero1 = train(sharded(plan));
      check_bit_identical(plain, zero1);
      auto ref = exec::ReferenceTrainer::create(g, 16, 0, plan.training());
      REQUIRE(ref.ok());
      for (int i = 0; i < kIterations; ++i) {
        const auto m = (*ref)->run_iteration(i);
        REQUIRE(m.ok());
        INFO("iteration " << i);
        CHECK(zero1.losses[static_cast<size_t>(i)] == Approx(m->loss).epsilon(1e-5));
      }
    }
  }
}

TEST_CASE("sharded optimizer state trains on a device without host memory exactly as on the CPU") {
  const auto g = testing::zoo_graph("tiny-mmt");
  const auto plan = sharded(
      testing::replicated_plan(g, testing::training(graphpipe::v1::OPTIMIZER_KIND_ADAM), 3, 2));
  testing::StagingDevice dev;
  check_bit_identical(train(plan), train(plan, dev));
  INFO(dev.first_violation());
  CHECK(dev.violations() == 0);
}

TEST_CASE("a sharded rank keeps one slice of the optimizer state and its program says so") {
  const auto g = testing::zoo_graph("tiny-mmt");
  const auto base =
      testing::replicated_plan(g, testing::training(graphpipe::v1::OPTIMIZER_KIND_ADAM), 3, 2);
  std::vector<std::unique_ptr<exec::RankSession>> plain_sessions, shard_sessions;
  REQUIRE(exec::run_plan_locally(base, 1, kTimeout, &plain_sessions).ok());
  REQUIRE(exec::run_plan_locally(sharded(base), 1, kTimeout, &shard_sessions).ok());
  REQUIRE(plain_sessions.size() == shard_sessions.size());
  for (size_t i = 0; i < plain_sessions.size(); ++i) {
    const auto& a = plain_sessions[i]->runner();
    const auto& b = shard_sessions[i]->runner();
    const int replicas = static_cast<int>(b.program().group.size());
    INFO("rank " << b.rank() << ", " << replicas << " replicas");
    const auto& ma = a.stage_runner().memory();
    const auto& mb = b.stage_runner().memory();
    CHECK(mb.weight_bytes == ma.weight_bytes);
    CHECK(mb.gradient_bytes == ma.gradient_bytes);
    if (replicas == 1) {  // a single replica has nothing to shard over
      CHECK(b.program().shard_count == 1);
      CHECK(mb.optimizer_bytes == ma.optimizer_bytes);
      continue;
    }
    CHECK(b.program().shard_count == replicas);
    CHECK(exec::describe(b.program())
              .find(" shard " + std::to_string(b.program().shard_index) + "/" +
                    std::to_string(replicas)) != std::string::npos);
    const int64_t params = b.stage_runner().param_count();
    CHECK(mb.optimizer_bytes == (params + replicas - 1) / replicas * 2 * 4);
    CHECK(mb.optimizer_bytes < ma.optimizer_bytes);
    // The slices tile the parameters: consecutive ranks' slices meet.
    const auto& r = b.stage_runner();
    CHECK(r.shard_begin() ==
          std::min(params, (params + replicas - 1) / replicas * b.program().shard_index));
  }
}

TEST_CASE("a sharded checkpoint resumes an unsharded plan and the reverse, same trajectory") {
  const auto g = testing::zoo_graph("tiny-mmt");
  const auto plain =
      testing::replicated_plan(g, testing::training(graphpipe::v1::OPTIMIZER_KIND_ADAM), 3, 2);
  const auto zero1 = sharded(plain);
  auto straight = open_all(plain);
  const std::vector<double> uninterrupted = run_sessions(straight, 0, 4);

  for (const bool write_sharded : {true, false}) {
    INFO((write_sharded ? "sharded writes, unsharded resumes"
                        : "unsharded writes, sharded resumes"));
    const auto dir =
        std::filesystem::temp_directory_path() /
        ("gp_shard_ckpt_" + std::to_string(::getpid()) + (write_sharded ? "_s" : "_u"));
    std::filesystem::remove_all(dir);
    auto first = open_all(write_sharded ? zero1 : plain);
    const auto before = run_sessions(first, 0, 2, dir.string(), 1);
    auto manifest = exec::latest_checkpoint(dir.string());
    INFO(manifest.status().to_string());
    REQUIRE(manifest.ok());
    auto resumed = open_all(write_sharded ? plain : zero1);
    for (auto& s : resumed) {
      const Status st = s->resume(dir.string(), *manifest);
      INFO(st.to_string());
      REQUIRE(st.ok());
    }
    const auto after = run_sessions(resumed, 2, 4);
    for (size_t k = 0; k < 2; ++k) CHECK(before[k] == uninterrupted[k]);
    for (size_t k = 0; k < 2; ++k) {
      INFO("iteration " << k + 2);
      // Adam's moments come back whole: the same trajectory bit for bit, not a restart.
      CHECK(after[k] == uninterrupted[k + 2]);
    }
    std::filesystem::remove_all(dir);
  }
  // A run that does not resume leaves the trajectory (the checks above can fail).
  auto fresh = open_all(zero1);
  const auto restarted = run_sessions(fresh, 2, 3);
  CHECK(restarted[0] != uninterrupted[2]);
}

// The case scaled down: a DLRM whose embedding tables' Adam state fits no device gets a
// plan only by sharding, and that plan trains on CPU ranks like the reference.
TEST_CASE("a searched plan that fits only sharded trains like the reference on CPU ranks") {
  // Two 20000 x 16 tables: 320 k parameters each, 5.12 MB with Adam; the device holds 4.5 MB.
  const auto g = testing::zoo_graph(
      "dlrm?rows=20000&dense_branches=1&sparse_branches=2&dense_in=64&width=64&dim=16&bag=4&"
      "dense_layers=1&top_layers=1");
  auto cluster = *cost::select_devices(*cost::load_cluster("cpu-local"), 8);
  cluster.mutable_device()->set_memory_capacity_bytes(4'500'000);
  const cost::AnalyticCostModel compute(cluster.device(), graphpipe::v1::PRECISION_FP32);
  auto search = [&](planner::ShardMode mode) {
    planner::SearchRequest req;
    req.graph = &g;
    req.cluster = cluster;
    req.mini_batch = 32;
    req.training = testing::training(graphpipe::v1::OPTIMIZER_KIND_ADAM);
    req.compute = &compute;
    req.micro_batches = {4, 8};
    req.shard_optimizer = mode;
    auto result = planner::search_plan(req);
    INFO(result.status().to_string());
    REQUIRE(result.ok());
    return std::move(result).value();
  };
  CHECK_FALSE(search(planner::ShardMode::kNever).feasible);
  const auto found = search(planner::ShardMode::kAuto);
  REQUIRE(found.feasible);
  const auto& plan = found.plan;
  int sharding = 0;
  for (const auto& st : plan.stages()) {
    if (!st.shard_optimizer()) continue;
    ++sharding;
    CHECK(st.device_ranks_size() > 1);
  }
  REQUIRE(sharding >= 1);
  const Trained zero1 = train(plan);
  auto plain = plan;
  for (auto& st : *plain.mutable_stages()) st.set_shard_optimizer(false);
  check_bit_identical(zero1, train(plain));
  auto ref = exec::ReferenceTrainer::create(g, plan.mini_batch(), 0, plan.training());
  REQUIRE(ref.ok());
  for (int i = 0; i < kIterations; ++i) {
    const auto m = (*ref)->run_iteration(i);
    REQUIRE(m.ok());
    INFO("iteration " << i);
    CHECK(zero1.losses[static_cast<size_t>(i)] == Approx(m->loss).epsilon(1e-5));
  }
}
