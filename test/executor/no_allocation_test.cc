// The executor's hot path allocates nothing: after set-up, forward, backward, the optimizer step
// and a rank's whole step loop (with a transport that itself does not allocate) run without a
// single heap allocation. Counted by replacing the global operator new in this binary.
#include <atomic>
#include <catch2/catch.hpp>
#include <cstdlib>
#include <new>

#include "../support/models.h"
#include "gp/cost/cluster.h"
#include "gp/exec/op_timing.h"
#include "gp/exec/rank_runner.h"
#include "gp/exec/stage_runner.h"
#include "gp/planner/plan_builder.h"

namespace {
std::atomic<long> g_allocations{0};
}  // namespace

// Every replaceable form that allocates with malloc, so that news and deletes always pair up
// (sanitizers check that).
void* operator new(std::size_t n) {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(n == 0 ? 1 : n)) return p;
  throw std::bad_alloc();
}
void* operator new[](std::size_t n) { return operator new(n); }
void* operator new(std::size_t n, const std::nothrow_t&) noexcept {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  return std::malloc(n == 0 ? 1 : n);
}
void* operator new[](std::size_t n, const std::nothrow_t& tag) noexcept {
  return operator new(n, tag);
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { std::free(p); }

using namespace gp;

namespace {

graphpipe::v1::TrainingConfig adam() {
  graphpipe::v1::TrainingConfig t;
  t.set_optimizer(graphpipe::v1::OPTIMIZER_KIND_ADAM);
  t.set_learning_rate(0.01);
  t.set_seed(3);
  return t;
}

// A transport that moves nothing: receives leave the buffer as it is. Enough to drive one rank's
// loop alone; it allocates nothing.
class NullCommunicator final : public exec::Communicator {
 public:
  int rank() const override { return 0; }
  Status send(int, uint64_t, std::span<const std::byte>) override { return ok_status(); }
  Status recv(int, uint64_t, std::span<std::byte>) override { return ok_status(); }
  Status allreduce_sum(std::span<const int>, std::span<float>) override { return ok_status(); }
  void abort(const std::string&) override {}
};

// Heap allocations made by three training steps of the whole graph as one stage (two
// micro-batches of 8), after set-up.
long step_allocations(const model::Graph& g, exec::OpClock* clock = nullptr) {
  std::vector<int> ops(g.num_ops());
  for (int i = 0; i < g.num_ops(); ++i) ops[i] = i;
  auto layout = exec::layout_stage(g, ops);
  REQUIRE(layout.ok());
  auto runner =
      exec::StageRunner::create(g, *layout, {.max_batch = 8, .slots = 2, .training = adam()});
  REQUIRE(runner.ok());
  exec::StageRunner& r = **runner;
  r.set_op_clock(clock);
  const long before = g_allocations.load();
  for (int step = 0; step < 3; ++step) {
    r.zero_param_grads();
    for (int slot = 0; slot < 2; ++slot) r.forward(slot, 8, step, 8 * slot);
    for (int slot = 0; slot < 2; ++slot) {
      r.begin_backward(slot);
      r.backward(slot, 1.0f / 16);
    }
    r.optimizer_step(step + 1);
  }
  return g_allocations.load() - before;
}

}  // namespace

TEST_CASE("forward, backward and the optimizer step allocate nothing after set-up") {
  CHECK(step_allocations(testing::zoo_graph("tiny-mmt")) == 0);
}

TEST_CASE("timing every op and sleeping a slowdown allocate nothing after set-up") {
  const model::Graph g = testing::zoo_graph("tiny-mmt");
  exec::OpClock clock(g.num_ops(), 1.5);  // its windows are allocated here
  clock.set_recording(true);
  CHECK(step_allocations(g, &clock) == 0);
  int timed = 0;
  for (int op = 0; op < clock.ops(); ++op) timed += clock.forward(op).size() > 0 ? 1 : 0;
  CHECK(timed > 0);  // it did time the ops
}

TEST_CASE("the vision and layout kernels allocate nothing after set-up") {
  CHECK(step_allocations(testing::small_cnn(4, 3, 0.25)) == 0);
}

TEST_CASE("a rank's step loop allocates nothing, sends, receives and all-reduce included") {
  auto g = testing::zoo_graph("tiny-candle-uno");
  // Stage 0: branch 0 on ranks 0-1 (replicated, all-reduce); stage 1: the rest on rank 2.
  std::vector<planner::StageAssignment> st(2);
  for (const auto& node : g.ops()) {
    st[node.id().rfind("feature0.", 0) == 0 ? 0 : 1].ops.push_back(node.index);
  }
  st[0].ranks = {0, 1};
  st[0].micro_batch = 4;
  st[1].ranks = {2};
  st[1].micro_batch = 4;
  planner::PlanInputs in;
  in.graph = &g;
  in.cluster = *cost::select_devices(*cost::load_cluster("cpu-local"), 3);
  in.mini_batch = 16;
  in.training = adam();
  auto plan = planner::build_plan(in, st);
  REQUIRE(plan.ok());
  auto index = plan::validate_plan_structure(*plan, g);
  REQUIRE(index.ok());
  NullCommunicator comm;
  for (int rank : {0, 2}) {
    INFO("rank " << rank);
    auto runner = exec::RankRunner::create(*plan, g, *index, rank);
    REQUIRE(runner.ok());
    REQUIRE((*runner)->bind(comm).ok());
    REQUIRE((*runner)->run_iteration(0).ok());  // first touch of every buffer
    // No Catch2 assertion inside the counted window: Catch2 allocates for its own bookkeeping.
    const long before = g_allocations.load();
    bool all_ok = true;
    for (int it = 1; it < 4; ++it) all_ok = (*runner)->run_iteration(it).ok() && all_ok;
    const long allocated = g_allocations.load() - before;
    REQUIRE(all_ok);
    CHECK(allocated == 0);
  }
}
