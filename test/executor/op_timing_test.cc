// Measured costs and the slowdown test aid (gp/exec/op_timing.h): the windows' medians and
// spreads, --slowdown's validation, and an OpClock that really sleeps the slowdown.
#include "gp/exec/op_timing.h"

#include <catch2/catch.hpp>
#include <chrono>
#include <cmath>
#include <limits>
#include <memory>
#include <vector>

#include "../support/models.h"
#include "gp/exec/stage_layout.h"
#include "gp/exec/stage_runner.h"

namespace gp::exec {
namespace {

using Clock = std::chrono::steady_clock;

double us_since(Clock::time_point t) {
  return std::chrono::duration<double, std::micro>(Clock::now() - t).count();
}

// Keeps the CPU busy for `us` microseconds: compute, not sleep.
void busy(double us) {
  const auto start = Clock::now();
  volatile double x = 0;
  while (us_since(start) < us) x = x + 1;
}

TEST_CASE("a timing window gives the median and the p90 - p10 spread of its samples") {
  TimingWindow w;
  CHECK(w.size() == 0);
  CHECK(w.median() == 0);
  CHECK(w.spread() == 0);
  for (float v : {5.0f, 1.0f, 4.0f, 2.0f, 3.0f}) w.add(v);
  CHECK(w.size() == 5);
  CHECK(w.median() == Approx(3.0));
  // Linear interpolation between order statistics: p10 = 1.4, p90 = 4.6.
  CHECK(w.quantile(0.1) == Approx(1.4));
  CHECK(w.quantile(0.9) == Approx(4.6));
  CHECK(w.spread() == Approx(3.2));
  w.add(6.0f);
  CHECK(w.median() == Approx(3.5));  // even count: between the middle two
}

TEST_CASE("a timing window keeps only its 16 most recent samples, oldest first") {
  TimingWindow w;
  for (int i = 1; i <= 20; ++i) w.add(static_cast<float>(i));
  CHECK(w.size() == TimingWindow::kCapacity);
  std::vector<float> held(TimingWindow::kCapacity);
  REQUIRE(w.copy(held) == TimingWindow::kCapacity);
  CHECK(held.front() == 5.0f);
  CHECK(held.back() == 20.0f);
  CHECK(w.median() == Approx(12.5));  // of 5..20
  // Copying into less room gives the oldest that fit.
  std::vector<float> two(2);
  CHECK(w.copy(two) == 2);
  CHECK(two[1] == 6.0f);
}

TEST_CASE("a slowdown factor must be finite and at least 1, a bad one named with its flag") {
  CHECK(check_slowdown(1.0).ok());
  CHECK(check_slowdown(3.0).ok());
  for (double bad : {0.5, 0.0, -2.0, std::numeric_limits<double>::infinity(),
                     std::numeric_limits<double>::quiet_NaN()}) {
    const Status st = check_slowdown(bad);
    INFO(bad);
    CHECK(st.code() == StatusCode::kInvalidArgument);
    CHECK(st.message().find("--slowdown") != std::string::npos);
  }
  CHECK(check_slowdown(0.5).message().find("0.5") != std::string::npos);
}

TEST_CASE("an op clock with slowdown 3 sleeps twice the compute time and reports three times it") {
  REQUIRE(lower_timer_slack().ok());
  OpClock clock(2, 3.0);
  CHECK(clock.active());
  const double compute_us = 2000;
  double reported_us = 0;
  const auto begin = Clock::now();
  for (int i = 0; i < 5; ++i) {
    const auto start = Clock::now();
    busy(compute_us);
    reported_us += clock.finish(start);
  }
  clock.flush();
  const double elapsed_us = us_since(begin);
  // Five 2 ms computations: 10 ms of compute, 20 ms of sleep (a loaded machine only adds).
  CHECK(elapsed_us >= 0.95 * 3 * 5 * compute_us);
  CHECK(reported_us >= 3 * 5 * compute_us);
  CHECK(reported_us <= 3 * elapsed_us);
}

TEST_CASE("an op clock without slowdown sleeps nothing and records only while recording") {
  OpClock clock(3, 1.0);
  CHECK_FALSE(clock.active());
  clock.record(1, /*backward=*/false, 7.0);
  CHECK(clock.forward(1).size() == 0);  // not recording
  clock.set_recording(true);
  CHECK(clock.active());
  const auto start = Clock::now();
  busy(500);
  const double us = clock.finish(start);
  CHECK(us >= 500);
  CHECK(us < 500 + 5000);  // no stretching (a generous bound for a loaded machine)
  clock.record(1, /*backward=*/false, us);
  clock.record(2, /*backward=*/true, 9.0);
  CHECK(clock.forward(1).size() == 1);
  CHECK(clock.backward(1).size() == 0);
  CHECK(clock.backward(2).median() == Approx(9.0));
}

// One training step of the whole chain model as one stage; its loss and trained parameters.
struct Step {
  double loss = 0;
  std::vector<float> params;
};
Step train_step(const model::Graph& g, OpClock* clock) {
  std::vector<int> ops(static_cast<size_t>(g.num_ops()));
  for (int i = 0; i < g.num_ops(); ++i) ops[static_cast<size_t>(i)] = i;
  auto layout = layout_stage(g, ops);
  REQUIRE(layout.ok());
  auto runner = StageRunner::create(
      g, *layout,
      {.max_batch = 4, .training = testing::training(graphpipe::v1::OPTIMIZER_KIND_SGD)});
  REQUIRE(runner.ok());
  StageRunner& r = **runner;
  r.set_op_clock(clock);
  r.zero_param_grads();
  r.forward(0, 4, 0, 0);
  Step out;
  out.loss = r.loss_sum(0);
  r.begin_backward(0);
  r.backward(0, 0.25f);
  r.optimizer_step(1);
  out.params.assign(r.params().begin(), r.params().end());
  return out;
}

TEST_CASE("a stage runner times each op's forward and backward, and a slowdown changes no value") {
  const model::Graph g = testing::chain_graph(3);  // x, fc0..fc2, t, loss
  const Step plain = train_step(g, nullptr);
  OpClock clock(g.num_ops(), 2.0);
  clock.set_recording(true);
  const Step slowed = train_step(g, &clock);
  CHECK(slowed.loss == plain.loss);
  CHECK(slowed.params == plain.params);
  std::vector<int> order;
  for (int i = 0; i < g.num_ops(); ++i) {
    INFO("op " << g.op(i).id());
    const bool input = g.op(i).info->is_input;
    CHECK(clock.forward(i).size() == (input ? 0 : 1));
    CHECK(clock.backward(i).size() == (input ? 0 : 1));
    if (!input) CHECK(clock.forward(i).median() > 0);
  }
}

}  // namespace
}  // namespace gp::exec
