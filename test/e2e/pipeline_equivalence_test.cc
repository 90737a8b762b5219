// The correctness contract: training with the same seed and mini-batch gives the same losses and
// the same final parameters whatever the plan — one process, a sequential pipeline, a graph
// pipeline, data-parallel replicas, mixed micro-batch sizes. Ranks run as threads over the
// in-process data plane.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <functional>
#include <mutex>
#include <thread>

#include "../support/device_loopback.h"
#include "../support/example_plans.h"
#include "../support/models.h"
#include "../support/staging_device.h"
#include "gp/cost/cluster.h"
#include "gp/exec/nccl_layout.h"
#include "gp/exec/rank_runner.h"
#include "gp/exec/rank_session.h"
#include "gp/exec/reference_trainer.h"
#include "gp/exec/stage_runner.h"
#include "gp/model/onnx_import.h"
#include "gp/plan/plan_util.h"
#include "gp/planner/plan_builder.h"
#include "gp/planner/search.h"
#include "gp/planner/verify.h"

using namespace gp;

namespace {

constexpr int kIterations = 5;
constexpr auto kTimeout = std::chrono::milliseconds(20000);

using testing::fan_in_graph;
using testing::fan_in_plan;
using testing::relay_plan;
using testing::replicated_plan;
using testing::training;

struct Reference {
  std::vector<double> losses;
  std::unique_ptr<exec::ReferenceTrainer> trainer;
};

Reference reference(const model::Graph& g, int64_t batch, const graphpipe::v1::TrainingConfig& t) {
  Reference ref;
  auto trainer = exec::ReferenceTrainer::create(g, batch, 0, t);
  REQUIRE(trainer.ok());
  for (int i = 0; i < kIterations; ++i) {
    const auto m = (*trainer)->run_iteration(i);
    REQUIRE(m.ok());
    ref.losses.push_back(m->loss);
  }
  ref.trainer = std::move(trainer).value();
  return ref;
}

graphpipe::v1::Plan searched(const model::Graph& g, graphpipe::v1::Strategy strategy, int devices,
                             int64_t batch, const graphpipe::v1::TrainingConfig& t) {
  const auto cluster = *cost::select_devices(*cost::load_cluster("cpu-local"), devices);
  cost::AnalyticCostModel model(cluster.device(), graphpipe::v1::PRECISION_FP32);
  planner::SearchRequest req;
  req.graph = &g;
  req.cluster = cluster;
  req.mini_batch = batch;
  req.strategy = strategy;
  req.training = t;
  req.compute = &model;
  req.micro_batches = {2, 4};  // several micro-batches per iteration: real pipelining
  auto r = planner::search_plan(req);
  REQUIRE(r.ok());
  REQUIRE(r->feasible);
  return r->plan;
}

void check_same_training(const model::Graph& g, const graphpipe::v1::Plan& plan,
                         const Reference& ref) {
  // Adam divides by sqrt(v): gradients that are float noise around zero (different summation
  // orders across replicas) move a weight by up to the learning rate either way, so its final
  // parameters agree to a looser tolerance than SGD's.
  const bool adam = plan.training().optimizer() == graphpipe::v1::OPTIMIZER_KIND_ADAM;
  const double param_tolerance = adam ? 2e-3 : 1e-5;
  std::vector<std::unique_ptr<exec::RankSession>> sessions;
  auto run = exec::run_plan_locally(plan, kIterations, kTimeout, &sessions);
  INFO(run.status().to_string());
  REQUIRE(run.ok());
  for (int i = 0; i < kIterations; ++i) {
    INFO("iteration " << i);
    CHECK(run->losses[i] == Approx(ref.losses[i]).epsilon(1e-5));
  }
  // Final parameters of every op with parameters match the reference's.
  for (const auto& node : g.ops()) {
    if (node.cost.param_count == 0) continue;
    const auto expected = ref.trainer->runner().op_params(node.index);
    for (const auto& session : sessions) {
      const auto got = session->runner().stage_runner().op_params(node.index);
      if (got.empty()) continue;
      REQUIRE(got.size() == expected.size());
      double max_err = 0, max_abs = 1e-6;
      for (size_t k = 0; k < got.size(); ++k) {
        max_err = std::max(max_err, static_cast<double>(std::abs(got[k] - expected[k])));
        max_abs = std::max(max_abs, static_cast<double>(std::abs(expected[k])));
      }
      INFO(node.id() << " on rank " << session->rank());
      CHECK(max_err / max_abs < param_tolerance);
    }
  }
}

struct NamedPlan {
  std::string name;
  graphpipe::v1::Plan plan;
};

// What the non-host paths must carry: an all-reduce, relays, a graph pipeline and a fan-in.
graphpipe::v1::Plan all_sharded(graphpipe::v1::Plan plan) {
  for (auto& st : *plan.mutable_stages()) st.set_shard_optimizer(true);
  return plan;
}

std::vector<NamedPlan> device_path_cases() {
  auto mmt = testing::zoo_graph("tiny-mmt");
  auto uno = testing::zoo_graph("tiny-candle-uno");
  auto fan_in = fan_in_graph();
  const auto adam = training(graphpipe::v1::OPTIMIZER_KIND_ADAM);
  const auto momentum = training(graphpipe::v1::OPTIMIZER_KIND_MOMENTUM);
  std::vector<NamedPlan> cases;
  cases.push_back({"replicated stages (all-reduce)", replicated_plan(mmt, adam)});
  cases.push_back({"relayed tensors", relay_plan(uno, momentum)});
  cases.push_back(
      {"graph pipeline", searched(uno, graphpipe::v1::STRATEGY_GRAPHPIPE, 4, 16, adam)});
  cases.push_back({"gradient fan-in", fan_in_plan(fan_in, momentum)});
  // A small bound, so that every step clips: the norm's sum crosses the data plane each time.
  auto clipped = adam;
  clipped.set_clip_grad_norm(0.01);
  cases.push_back(
      {"gradient-norm clipping", searched(uno, graphpipe::v1::STRATEGY_GRAPHPIPE, 4, 16, clipped)});
  cases.push_back({"sharded optimizer state (ZeRO-1)", all_sharded(replicated_plan(mmt, adam))});
  return cases;
}

}  // namespace

TEST_CASE("sequential and graph pipelines train exactly like the single-process reference") {
  for (const char* spec : {"tiny-mmt", "tiny-dlrm", "tiny-candle-uno"}) {
    for (auto strategy : {graphpipe::v1::STRATEGY_SEQUENTIAL, graphpipe::v1::STRATEGY_GRAPHPIPE}) {
      for (int devices : {2, 4}) {
        INFO(spec << ", strategy " << strategy << ", " << devices << " devices");
        auto g = testing::zoo_graph(spec);
        const auto t = training(graphpipe::v1::OPTIMIZER_KIND_SGD);
        const auto ref = reference(g, 16, t);
        const auto plan = searched(g, strategy, devices, 16, t);
        check_same_training(g, plan, ref);
      }
    }
  }
}

TEST_CASE("imported ONNX models plan, verify and train exactly like the single-process reference") {
  for (const char* file : {"two_tower.onnx", "dlrm_like.onnx", "mlp_gelu_ln.onnx",
                           "attention_block.onnx", "transformer_block.onnx"}) {
    INFO(file);
    auto model = model::import_onnx(std::string(GP_TEST_DATA_DIR) + "/onnx/" + file);
    INFO(model.status().to_string());
    REQUIRE(model.ok());
    auto g = testing::build_graph(*model);
    const auto t = training(graphpipe::v1::OPTIMIZER_KIND_SGD);
    // Training starts from the imported weights, not from the seeded initialisation.
    auto layout = exec::layout_stage(g, g.topo_order());
    REQUIRE(layout.ok());
    auto fresh = exec::StageRunner::create(g, *layout, {.max_batch = 1, .slots = 1, .training = t});
    REQUIRE(fresh.ok());
    int with_values = 0;
    for (const auto& op : g.ops()) {
      for (const auto& p : op.proto->params()) {
        auto it = op.proto->param_values().find(p.name());
        if (it == op.proto->param_values().end() || p.name() != op.proto->params(0).name())
          continue;
        const auto got = (*fresh)->op_params(op.index);
        REQUIRE(got.size_bytes() >= it->second.size());
        CHECK(std::memcmp(got.data(), it->second.data(), it->second.size()) == 0);
        ++with_values;
      }
    }
    CHECK(with_values > 0);
    const auto ref = reference(g, 16, t);
    const auto plan = searched(g, graphpipe::v1::STRATEGY_GRAPHPIPE, 2, 16, t);
    cost::AnalyticCostModel compute(plan.cluster().device(), graphpipe::v1::PRECISION_FP32);
    auto verified = planner::verify_plan(plan, compute);
    REQUIRE(verified.ok());
    CHECK(verified->ok());
    check_same_training(g, plan, ref);
  }
}

TEST_CASE("data-parallel replicas and mixed micro-batch sizes keep the numerics (Adam)") {
  auto g = testing::zoo_graph("tiny-mmt");
  const auto t = training(graphpipe::v1::OPTIMIZER_KIND_ADAM);
  const auto ref = reference(g, 16, t);
  check_same_training(g, replicated_plan(g, t), ref);
}

TEST_CASE("replicas that split micro-batches unevenly train like the reference") {
  auto g = testing::zoo_graph("tiny-mmt");
  const auto t = training(graphpipe::v1::OPTIMIZER_KIND_ADAM);
  const auto ref = reference(g, 16, t);
  // Branch 1 on three replicas of micro-batch 4 (slices of 1, 1 and 2 samples), the head on
  // three of micro-batch 8 (2, 3 and 3): messages cross uneven slice boundaries both ways.
  check_same_training(g, replicated_plan(g, t, 3, 3), ref);
}

TEST_CASE("gradient-norm clipping over every stage and replica trains like the reference") {
  auto g = testing::zoo_graph("tiny-mmt");
  auto t = training(graphpipe::v1::OPTIMIZER_KIND_MOMENTUM);
  const auto unclipped = reference(g, 16, t);
  t.set_clip_grad_norm(0.05);
  const auto ref = reference(g, 16, t);
  // The bound is below the gradients' norm: clipping changes the training.
  CHECK(std::abs(ref.losses[2] - unclipped.losses[2]) > 1e-4 * std::abs(unclipped.losses[2]));
  check_same_training(g, replicated_plan(g, t), ref);
}

TEST_CASE("tied parameters on different stages and replicas train like the reference") {
  const auto g = testing::build_graph(testing::tied_lm_model());
  for (const auto kind : {graphpipe::v1::OPTIMIZER_KIND_SGD, graphpipe::v1::OPTIMIZER_KIND_ADAM}) {
    DYNAMIC_SECTION("optimizer " << kind) {
      const auto t = training(kind);
      check_same_training(g, testing::tied_plan(g, t), reference(g, 8, t));
    }
  }
  SECTION("with gradient-norm clipping, which counts the tied tensor once") {
    auto t = training(graphpipe::v1::OPTIMIZER_KIND_MOMENTUM);
    t.set_clip_grad_norm(0.01);
    check_same_training(g, testing::tied_plan(g, t), reference(g, 8, t));
  }
}

TEST_CASE("a chain plan relays tensors through intermediate stages with the same numerics") {
  auto g = testing::zoo_graph("tiny-candle-uno");
  const auto t = training(graphpipe::v1::OPTIMIZER_KIND_MOMENTUM);
  const auto ref = reference(g, 8, t);
  check_same_training(g, relay_plan(g, t), ref);
}

// The path CUDA takes (messages, gradient fan-in and the all-reduce staged through host
// buffers), on a device without host memory emulated on the host: bit for bit the CPU's.
TEST_CASE("plans train on a device without host memory exactly as on the CPU") {
  for (const auto& c : device_path_cases()) {
    INFO(c.name);
    std::vector<std::unique_ptr<exec::RankSession>> cpu_runners, staged_runners;
    testing::StagingDevice dev;
    auto cpu = exec::run_plan_locally(c.plan, 3, kTimeout, &cpu_runners);
    auto staged = exec::run_plan_locally(c.plan, 3, kTimeout, &staged_runners, 0, dev);
    INFO(staged.status().to_string());
    REQUIRE(cpu.ok());
    REQUIRE(staged.ok());
    CHECK(staged->losses == cpu->losses);
    REQUIRE(staged_runners.size() == cpu_runners.size());
    for (size_t i = 0; i < cpu_runners.size(); ++i) {
      const exec::StageRunner& a = cpu_runners[i]->runner().stage_runner();
      const exec::StageRunner& b = staged_runners[i]->runner().stage_runner();
      std::vector<float> got(static_cast<size_t>(b.param_count()));
      REQUIRE(b.download_params(got).ok());
      INFO("rank " << cpu_runners[i]->rank());
      REQUIRE(got.size() == a.params().size());
      CHECK(std::memcmp(got.data(), a.params().data(), a.params().size_bytes()) == 0);
    }
    staged_runners.clear();  // before the device
    INFO(dev.first_violation());
    CHECK(dev.violations() == 0);
  }
}

namespace {

// Every rank of `plan` as a thread on `device`, over DeviceLoopback communicators (the data plane
// takes device memory, as NCCL does). Returns the per-iteration mean losses.
struct DeviceMemoryRun {
  Result<std::vector<double>> losses = std::vector<double>{};
  std::vector<std::unique_ptr<exec::RankRunner>> runners;
  int waits = 0, allreduces = 0;
};

// Per iteration, the ranks' loss sums over the mini-batch.
std::vector<double> mean_losses(const std::vector<std::vector<double>>& sums, int64_t mini_batch) {
  std::vector<double> losses(sums.empty() ? 0 : sums.front().size(), 0.0);
  for (size_t it = 0; it < losses.size(); ++it) {
    for (const auto& per_rank : sums) losses[it] += per_rank[it];
    losses[it] /= static_cast<double>(mini_batch);
  }
  return losses;
}

// What each rank's thread does after its iterations, while the data plane is still up.
using AfterTraining = std::function<void(size_t rank, exec::RankRunner& runner)>;

DeviceMemoryRun run_on_device_memory(const graphpipe::v1::Plan& plan, int iterations,
                                     const exec::Device& device, int fail_wait_of_rank = -1,
                                     const AfterTraining& after = nullptr) {
  DeviceMemoryRun run;
  auto g = model::Graph::build(plan.model());
  REQUIRE(g.ok());
  auto index = plan::validate_plan_structure(plan, *g);
  REQUIRE(index.ok());
  for (int r = 0; r < index->world_size; ++r) {
    auto runner = exec::RankRunner::create(plan, *g, *index, r, device);
    REQUIRE(runner.ok());
    run.runners.push_back(std::move(*runner));
  }
  exec::LoopbackHub hub(index->world_size, kTimeout);
  std::vector<std::unique_ptr<testing::DeviceLoopback>> comms;
  for (int r = 0; r < index->world_size; ++r) {
    comms.push_back(std::make_unique<testing::DeviceLoopback>(hub.communicator(r), device));
  }
  if (fail_wait_of_rank >= 0) comms[fail_wait_of_rank]->fail_next_wait();
  std::vector<std::vector<double>> sums(run.runners.size(), std::vector<double>(iterations, 0));
  std::mutex mu;
  Status first_error;  // the cause; the others fail because it aborts them
  std::vector<std::thread> threads;
  for (size_t i = 0; i < run.runners.size(); ++i) {
    threads.emplace_back([&, i] {
      const Status bound = run.runners[i]->bind(*comms[i]);
      for (int it = 0; it < iterations; ++it) {
        auto loss = bound.ok() ? run.runners[i]->run_iteration(it) : Result<double>(bound);
        if (!loss.ok()) {
          std::lock_guard<std::mutex> lock(mu);
          if (first_error.ok()) first_error = loss.status();
          for (auto& c : comms) c->abort("rank " + std::to_string(i) + " failed");
          return;
        }
        sums[i][it] = *loss;
      }
      if (after) after(i, *run.runners[i]);
    });
  }
  for (auto& t : threads) t.join();
  for (const auto& c : comms) {
    run.waits += c->waits();
    run.allreduces += c->allreduces();
  }
  if (!first_error.ok()) {
    run.losses = first_error;
    return run;
  }
  run.losses = mean_losses(sums, plan.mini_batch());
  return run;
}

}  // namespace

// The NCCL path of the runner: messages packed and unpacked on the device, received gradients
// accumulated there and the all-reduce on device memory, never through the host.
TEST_CASE("plans train over a device-memory data plane exactly as on the CPU") {
  constexpr int kIters = 3;
  for (const auto& c : device_path_cases()) {
    INFO(c.name);
    std::vector<std::unique_ptr<exec::RankSession>> cpu_runners;
    auto cpu = exec::run_plan_locally(c.plan, kIters, kTimeout, &cpu_runners);
    REQUIRE(cpu.ok());
    testing::StagingDevice dev;
    DeviceMemoryRun run = run_on_device_memory(c.plan, kIters, dev);
    INFO(run.losses.status().to_string());
    REQUIRE(run.losses.ok());
    CHECK(*run.losses == cpu->losses);
    CHECK(run.waits == kIters * static_cast<int>(run.runners.size()));
    if (c.name == "replicated stages (all-reduce)") CHECK(run.allreduces == kIters * 4);
    if (c.name == "gradient fan-in") CHECK(dev.accumulations() > 0);
    for (size_t i = 0; i < cpu_runners.size(); ++i) {
      const exec::StageRunner& a = cpu_runners[i]->runner().stage_runner();
      const exec::StageRunner& b = run.runners[i]->stage_runner();
      std::vector<float> got(static_cast<size_t>(b.param_count()));
      REQUIRE(b.download_params(got).ok());
      INFO("rank " << i);
      REQUIRE(got.size() == a.params().size());
      CHECK(std::memcmp(got.data(), a.params().data(), a.params().size_bytes()) == 0);
    }
    run.runners.clear();  // before the device
    INFO(dev.first_violation());
    CHECK(dev.violations() == 0);
  }
}

TEST_CASE("a device-memory data plane's failed wait fails the iteration, naming the rank") {
  auto uno = testing::zoo_graph("tiny-candle-uno");
  const auto plan = relay_plan(uno, training(graphpipe::v1::OPTIMIZER_KIND_SGD));
  testing::StagingDevice dev;
  DeviceMemoryRun run = run_on_device_memory(plan, 2, dev, /*fail_wait_of_rank=*/1);
  REQUIRE_FALSE(run.losses.ok());
  const std::string why = run.losses.status().message();
  CHECK(why.find("injected wait_all failure") != std::string::npos);
  CHECK(why.find("rank 1, iteration 0") != std::string::npos);
  run.runners.clear();
}

TEST_CASE("NCCL channels of searched plans are read off their message tables") {
  auto uno = testing::zoo_graph("tiny-candle-uno");
  auto mmt = testing::zoo_graph("tiny-mmt");
  const auto adam = training(graphpipe::v1::OPTIMIZER_KIND_ADAM);
  for (auto strategy : {graphpipe::v1::STRATEGY_GRAPHPIPE, graphpipe::v1::STRATEGY_SEQUENTIAL,
                        graphpipe::v1::STRATEGY_PIPER}) {
    INFO(plan::strategy_name(strategy));
    const auto plan = searched(uno, strategy, 4, 16, adam);
    auto g = model::Graph::build(plan.model());
    REQUIRE(g.ok());
    // validate_plan checks both ends' order per channel: what NCCL needs of the layout.
    auto index = plan::validate_plan(plan, *g);
    INFO(index.status().to_string());
    REQUIRE(index.ok());
    const auto layout = exec::nccl_layout(plan);
    REQUIRE_FALSE(layout.channels.empty());
    // Every send of the plan is on the channel of its message, and counted there.
    int sends = 0;
    for (const auto& program : plan.programs()) {
      for (const auto& in : program.instructions()) {
        if (in.kind() != graphpipe::v1::INSTRUCTION_KIND_SEND_ACTIVATION &&
            in.kind() != graphpipe::v1::INSTRUCTION_KIND_SEND_GRADIENT) {
          continue;
        }
        ++sends;
        CHECK(layout.channel(program.rank(), plan.messages(in.message()).dst_rank()) >= 0);
      }
    }
    int counted = 0;
    for (const auto& ch : layout.channels) counted += ch.messages;
    CHECK(counted == sends);
    CHECK(counted == plan.messages_size());
  }
  const auto replicated = replicated_plan(mmt, adam);
  const auto layout = exec::nccl_layout(replicated);
  CHECK(layout.groups == std::vector<std::vector<int>>{{1, 2}, {3, 4}});
  const int first_group = static_cast<int>(layout.channels.size());
  CHECK(layout.describe(first_group) == "all-reduce group {1,2}");
  CHECK(layout.communicators() == first_group + 2);
}

TEST_CASE(
    "under gradient clipping the NCCL layout adds a group of the ranks that step an optimizer") {
  auto uno = testing::zoo_graph("tiny-candle-uno");
  auto t = training(graphpipe::v1::OPTIMIZER_KIND_SGD);
  const auto plain = searched(uno, graphpipe::v1::STRATEGY_GRAPHPIPE, 4, 16, t);
  t.set_clip_grad_norm(1.0);
  const auto clipped = searched(uno, graphpipe::v1::STRATEGY_GRAPHPIPE, 4, 16, t);
  // The ranks whose programs step an optimizer, read off the plan.
  std::vector<int> stepping;
  for (const auto& program : clipped.programs()) {
    for (const auto& in : program.instructions()) {
      if (in.kind() == graphpipe::v1::INSTRUCTION_KIND_OPTIMIZER_STEP) {
        stepping.push_back(program.rank());
        break;
      }
    }
  }
  std::sort(stepping.begin(), stepping.end());
  INFO("ranks stepping an optimizer: " << stepping.size());
  REQUIRE(stepping.size() >= 2);
  const auto without = exec::nccl_layout(plain).groups;
  const auto with = exec::nccl_layout(clipped).groups;
  CHECK(std::find(without.begin(), without.end(), stepping) == without.end());
  CHECK(std::find(with.begin(), with.end(), stepping) != with.end());
  CHECK(with.size() == without.size() + 1);
}

// What a checkpoint of a sharded stage needs of a data plane that sums device memory (NCCL): every
// replica gathers the whole optimizer state, through device memory, equal to the unsharded run's.
TEST_CASE("sharded stages gather their optimizer state over a device-memory data plane") {
  constexpr int kIters = 3;
  auto mmt = testing::zoo_graph("tiny-mmt");
  const auto plain = replicated_plan(mmt, training(graphpipe::v1::OPTIMIZER_KIND_ADAM));
  std::vector<std::unique_ptr<exec::RankSession>> cpu_runners;
  REQUIRE(exec::run_plan_locally(plain, kIters, kTimeout, &cpu_runners).ok());
  testing::StagingDevice dev;
  std::vector<std::vector<float>> gathered(cpu_runners.size());
  std::vector<Status> statuses(cpu_runners.size());
  DeviceMemoryRun run = run_on_device_memory(
      all_sharded(plain), kIters, dev, -1, [&](size_t rank, exec::RankRunner& runner) {
        statuses[rank] = runner.stage_runner().gather_state(gathered[rank]);
      });
  INFO(run.losses.status().to_string());
  REQUIRE(run.losses.ok());
  int sharded = 0;
  for (size_t i = 0; i < cpu_runners.size(); ++i) {
    INFO("rank " << i << ": " << statuses[i].to_string());
    REQUIRE(statuses[i].ok());
    sharded += run.runners[i]->stage_runner().sharded() ? 1 : 0;
    std::vector<float> want;
    REQUIRE(cpu_runners[i]->runner().stage_runner().gather_state(want).ok());
    REQUIRE(gathered[i].size() == want.size());
    CHECK(std::memcmp(gathered[i].data(), want.data(), want.size() * sizeof(float)) == 0);
  }
  CHECK(sharded >= 2);  // the replicated stages' ranks
  run.runners.clear();  // before the device
  INFO(dev.first_violation());
  CHECK(dev.violations() == 0);
}

TEST_CASE("an error of a device's queued work fails the iteration, naming the rank") {
  auto g = testing::zoo_graph("tiny-candle-uno");
  const auto plan = relay_plan(g, training(graphpipe::v1::OPTIMIZER_KIND_SGD));
  testing::StagingDevice dev;
  dev.inject_kernel_failure(10);  // a kernel early in the first iteration
  auto failed = exec::run_plan_locally(plan, 2, kTimeout, nullptr, 0, dev);
  REQUIRE_FALSE(failed.ok());
  CHECK(failed.status().message().find("injected failure of") != std::string::npos);
  CHECK(failed.status().message().find("iteration 0") != std::string::npos);
}

// Rank 0 of a two-stage plan without its first activation send: rank 1 would wait for it.
graphpipe::v1::Plan plan_without_first_send(const model::Graph& g) {
  auto plan = searched(g, graphpipe::v1::STRATEGY_SEQUENTIAL, 2, 8,
                       training(graphpipe::v1::OPTIMIZER_KIND_SGD));
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
  return plan;
}

TEST_CASE("run_plan_locally refuses a receive without a send before any rank runs") {
  auto g = testing::zoo_graph("tiny-mmt");
  const auto plan = plan_without_first_send(g);
  auto run = exec::run_plan_locally(plan, 1, std::chrono::seconds(30));
  REQUIRE_FALSE(run.ok());
  CHECK(run.status().code() == StatusCode::kInvalidArgument);
  CHECK_THAT(run.status().message(),
             Catch::Contains("activation message 0 (edge 0, rank 0 -> rank 1") &&
                 Catch::Contains("sent 0 time(s), received 1 time(s)"));
}

TEST_CASE("a rank that cannot receive fails with a deadline naming the peer, nobody hangs") {
  // The runtime's guard for what no plan check sees (a peer that froze or died): ranks built
  // past validate_plan run the broken schedule, and the receiver gives up after the timeout.
  auto g = testing::zoo_graph("tiny-mmt");
  const auto plan = plan_without_first_send(g);
  auto index = plan::validate_plan_structure(plan, g);
  REQUIRE(index.ok());
  exec::LoopbackHub hub(index->world_size, std::chrono::milliseconds(300));
  std::vector<Status> results(2);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < 2; ++rank) {
    auto runner = exec::RankRunner::create(plan, g, *index, rank);
    REQUIRE(runner.ok());
    threads.emplace_back([&, rank, r = std::move(runner).value()]() mutable {
      auto comm = hub.communicator(rank);
      results[rank] = r->bind(*comm);
      if (results[rank].ok()) results[rank] = r->run_iteration(0).status();
    });
  }
  for (auto& t : threads) t.join();
  REQUIRE_FALSE(results[1].ok());
  CHECK(results[1].code() == StatusCode::kDeadlineExceeded);
  CHECK_THAT(results[1].message(), Catch::Contains("no message from rank 0"));
}
