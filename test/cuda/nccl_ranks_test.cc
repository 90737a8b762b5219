// Ranks as threads of one process, each on its own GPU (rank r on cuda:r), training plans over
// the NCCL data plane against the CPU. They need a GPU per rank, so they are hidden: run them with
// "[multi-gpu]" (scripts/gpu-check.sh does on a machine with 4 GPUs or more, and
// scripts/cuda-emu-test.sh --nccl runs them on the CPU against emulated GPUs and NCCL).
#include <catch2/catch.hpp>
#include <chrono>
#include <cmath>
#include <mutex>
#include <thread>

#include "../support/models.h"
#include "device_api/nccl.h"
#include "gp/cost/cluster.h"
#include "gp/cost/cost_model.h"
#include "gp/exec/rank_runner.h"
#include "gp/exec/rank_session.h"
#include "gp/plan/plan_util.h"
#include "gp/planner/plan_builder.h"
#include "gp/planner/search.h"

using namespace gp;
using Clock = std::chrono::steady_clock;

namespace {

constexpr int kRanks = 4;

graphpipe::v1::Plan graph_pipeline(const model::Graph& g) {
  const auto cluster = *cost::select_devices(*cost::load_cluster("cpu-local"), kRanks);
  cost::AnalyticCostModel model(cluster.device(), graphpipe::v1::PRECISION_FP32);
  planner::SearchRequest req;
  req.graph = &g;
  req.cluster = cluster;
  req.mini_batch = 16;
  req.strategy = graphpipe::v1::STRATEGY_GRAPHPIPE;
  req.training = testing::training(graphpipe::v1::OPTIMIZER_KIND_ADAM);
  req.compute = &model;
  req.micro_batches = {4};
  auto r = planner::search_plan(req);
  REQUIRE(r.ok());
  REQUIRE(r->feasible);
  return r->plan;
}

// tiny-candle-uno: the feature branches on ranks {0, 1}, the rest on ranks {2, 3}: two all-reduce
// groups, and each replica's activations go to the replica that holds their samples.
graphpipe::v1::Plan replicated(const model::Graph& g) {
  std::vector<planner::StageAssignment> st(2);
  for (const auto& node : g.ops()) {
    st[node.id().rfind("feature", 0) == 0 ? 0 : 1].ops.push_back(node.index);
  }
  st[0].ranks = {0, 1};
  st[0].micro_batch = 4;
  st[1].ranks = {2, 3};
  st[1].micro_batch = 8;
  planner::PlanInputs in;
  in.graph = &g;
  in.cluster = *cost::select_devices(*cost::load_cluster("cpu-local"), kRanks);
  in.mini_batch = 16;
  in.training = testing::training(graphpipe::v1::OPTIMIZER_KIND_MOMENTUM);
  auto plan = planner::build_plan(in, st);
  REQUIRE(plan.ok());
  return *plan;
}

struct RankResult {
  Status status;
  std::vector<double> loss_sums;
  double seconds = 0;  // until it finished or failed
};

struct NcclRun {
  std::vector<RankResult> ranks;
  std::vector<std::unique_ptr<exec::RankRunner>> runners;
};

// silent_rank connects and then never trains; abort_after > 0 aborts rank 0's data plane from
// another thread after that long.
NcclRun run_over_nccl(const graphpipe::v1::Plan& plan, int iterations,
                      std::chrono::milliseconds timeout, int silent_rank = -1,
                      std::chrono::milliseconds abort_after = std::chrono::milliseconds(0)) {
  auto g = model::Graph::build(plan.model());
  REQUIRE(g.ok());
  auto index = plan::validate_plan_structure(plan, *g);
  REQUIRE(index.ok());
  // The search may leave devices idle (a graph pipeline of tiny-candle-uno takes 3 of 4).
  const int ranks = index->world_size;
  REQUIRE(ranks <= kRanks);
  REQUIRE(plan::validate_plan(plan, *g).ok());
  const auto layout = exec::nccl_layout(plan);
  auto ids = exec::make_nccl_unique_ids(layout.communicators());
  REQUIRE(ids.ok());
  NcclRun run;
  run.ranks.resize(ranks);
  for (int r = 0; r < ranks; ++r) {
    auto device = exec::find_device("cuda:" + std::to_string(r));
    INFO(device.status().to_string());
    REQUIRE(device.ok());
    auto runner = exec::RankRunner::create(plan, *g, *index, r, **device);
    INFO(runner.status().to_string());
    REQUIRE(runner.ok());
    run.runners.push_back(std::move(*runner));
  }
  std::vector<std::unique_ptr<exec::Communicator>> comms(ranks);
  std::mutex mu;
  std::atomic<bool> finished{false};
  const auto start = Clock::now();
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks; ++r) {
    threads.emplace_back([&, r] {
      RankResult& out = run.ranks[r];
      exec::NcclOptions o;
      o.device = &run.runners[r]->stage_runner().device();
      o.rank = r;
      o.layout = layout;
      o.unique_ids = *ids;
      o.timeout = timeout;
      auto comm = exec::make_nccl_communicator(o);
      if (!comm.ok()) {
        out.status = comm.status();
        return;
      }
      {
        std::lock_guard<std::mutex> lock(mu);
        comms[r] = std::move(*comm);
      }
      if (r == silent_rank) {  // alive, connected, and never sends or receives
        while (!finished) std::this_thread::sleep_for(std::chrono::milliseconds(10));
        return;
      }
      if (Status bound = run.runners[r]->bind(*comms[r]); !bound.ok()) {
        out.status = bound;
        return;
      }
      for (int it = 0; it < iterations; ++it) {
        auto loss = run.runners[r]->run_iteration(it);
        if (!loss.ok()) {
          out.status = loss.status();
          break;
        }
        out.loss_sums.push_back(*loss);
      }
      out.seconds = std::chrono::duration<double>(Clock::now() - start).count();
    });
  }
  if (abort_after.count() > 0) {
    std::this_thread::sleep_for(abort_after);
    std::lock_guard<std::mutex> lock(mu);
    if (comms[0]) comms[0]->abort("the coordinator aborted the job");
  }
  for (int r = 0; r < ranks; ++r) {
    if (r == silent_rank) continue;
    threads[r].join();
  }
  finished = true;
  if (silent_rank >= 0) threads[silent_rank].join();
  comms.clear();  // before the runners' device memory
  return run;
}

std::vector<double> mean_losses(const NcclRun& run, int64_t mini_batch) {
  std::vector<double> losses(run.ranks[0].loss_sums.size(), 0.0);
  for (const auto& r : run.ranks) {
    for (size_t i = 0; i < r.loss_sums.size() && i < losses.size(); ++i)
      losses[i] += r.loss_sums[i];
  }
  for (double& l : losses) l /= static_cast<double>(mini_batch);
  return losses;
}

void check_like_cpu(const graphpipe::v1::Plan& plan) {
  constexpr int kIterations = 3;
  std::vector<std::unique_ptr<exec::RankSession>> cpu_sessions;
  auto cpu = exec::run_plan_locally(plan, kIterations, std::chrono::seconds(60), &cpu_sessions);
  REQUIRE(cpu.ok());
  // A generous stall timeout: emulated GPUs compute slowly, and this case is about numerics.
  NcclRun run = run_over_nccl(plan, kIterations, std::chrono::seconds(600));
  std::string statuses;
  for (int r = 0; r < static_cast<int>(run.ranks.size()); ++r) {
    statuses += "rank " + std::to_string(r) + ": " + run.ranks[r].status.to_string() + "\n";
  }
  INFO(statuses);
  for (int r = 0; r < static_cast<int>(run.ranks.size()); ++r) REQUIRE(run.ranks[r].status.ok());
  const auto losses = mean_losses(run, plan.mini_batch());
  REQUIRE(losses.size() == cpu->losses.size());
  for (size_t i = 0; i < losses.size(); ++i) {
    INFO("iteration " << i << ": " << losses[i] << " on the GPUs, " << cpu->losses[i] << " on CPU");
    CHECK(std::abs(losses[i] - cpu->losses[i]) <= 1e-4 * std::abs(cpu->losses[i]));
  }
  for (int r = 0; r < static_cast<int>(run.ranks.size()); ++r) {
    const auto& a = cpu_sessions[r]->runner().stage_runner();
    const auto& b = run.runners[r]->stage_runner();
    std::vector<float> got(static_cast<size_t>(b.param_count()));
    REQUIRE(b.download_params(got).ok());
    double err = 0, norm = 0;
    for (size_t k = 0; k < got.size(); ++k) {
      err += std::pow(got[k] - a.params()[k], 2);
      norm += std::pow(a.params()[k], 2);
    }
    INFO("rank " << r);
    CHECK(std::sqrt(err) <= 1e-4 * std::sqrt(norm) + 1e-7);
  }
}

}  // namespace

TEST_CASE("a graph pipeline trains over NCCL as on the CPU", "[.][multi-gpu]") {
  check_like_cpu(graph_pipeline(testing::zoo_graph("tiny-candle-uno")));
}

TEST_CASE("replicated stages all-reduce over NCCL and train as on the CPU", "[.][multi-gpu]") {
  check_like_cpu(replicated(testing::zoo_graph("tiny-candle-uno")));
}

TEST_CASE("a silent rank makes its peers fail within the timeout naming it, and nobody hangs",
          "[.][multi-gpu]") {
  const auto plan = replicated(testing::zoo_graph("tiny-candle-uno"));
  // Longer than a live peer's longest step (seconds when GPUs are emulated): only the silent
  // rank may be taken for dead.
  const auto timeout = std::chrono::milliseconds(15000);
  NcclRun run = run_over_nccl(plan, 3, timeout, /*silent_rank=*/2);
  std::string statuses;
  for (int r = 0; r < static_cast<int>(run.ranks.size()); ++r) {
    statuses += "rank " + std::to_string(r) + ": " + run.ranks[r].status.to_string() + "\n";
  }
  INFO(statuses);
  bool named = false;
  for (int r = 0; r < static_cast<int>(run.ranks.size()); ++r) {
    if (r == 2) continue;
    const Status& st = run.ranks[r].status;
    INFO("rank " << r << ": " << st.to_string());
    CHECK_FALSE(st.ok());
    // A few timeouts and the iteration's compute (slow when emulated) at most: never a hang.
    CHECK(run.ranks[r].seconds < 120);
    if (st.code() == StatusCode::kDeadlineExceeded &&
        (st.message().find("from rank 2") != std::string::npos ||
         st.message().find("ranks {2,3}") != std::string::npos)) {
      named = true;
    }
  }
  // The first to time out names what it waits for: a message from rank 2, or the all-reduce
  // with it; the others may fail first on their peers' aborts.
  CHECK(named);
}

TEST_CASE("aborting a rank's NCCL data plane ends every rank's training", "[.][multi-gpu]") {
  const auto plan = graph_pipeline(testing::zoo_graph("tiny-candle-uno"));
  NcclRun run =
      run_over_nccl(plan, 1000000, std::chrono::seconds(5), -1, std::chrono::milliseconds(1500));
  const Status& first = run.ranks[0].status;
  INFO(first.to_string());
  CHECK(first.code() == StatusCode::kAborted);
  CHECK(first.message().find("the coordinator aborted the job") != std::string::npos);
  for (int r = 1; r < static_cast<int>(run.ranks.size()); ++r) {
    INFO("rank " << r << ": " << run.ranks[r].status.to_string());
    CHECK_FALSE(run.ranks[r].status.ok());
    CHECK(run.ranks[r].seconds < 30);
  }
}

// ZeRO-1 (each replica steps its slice, the parameters gathered by an all-reduce of device
// memory) and gradient clipping (the norm's float summed over every rank with parameters, a
// communicator of its own) on the NCCL data plane.
TEST_CASE("sharded optimizer state and gradient clipping train over NCCL as on the CPU",
          "[.][multi-gpu]") {
  auto plan = replicated(testing::zoo_graph("tiny-candle-uno"));
  for (auto& st : *plan.mutable_stages()) st.set_shard_optimizer(true);
  plan.mutable_training()->set_clip_grad_norm(0.01);
  check_like_cpu(plan);
}
