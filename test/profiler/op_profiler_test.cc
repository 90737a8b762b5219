#include "gp/profile/op_profiler.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <limits>
#include <set>

#include "../support/models.h"
#include "gp/cost/cost_model.h"

namespace gp::profile {
namespace {

// Every timed call takes 7 us: the measured numbers are then known exactly.
class ConstantTimer final : public Timer {
 public:
  void start() override {}
  double stop_us() override { return 7; }
};

OpProfileOptions fast_options(ConstantTimer* timer) {
  OpProfileOptions o;
  o.micro_batches = {1, 2, 4};
  o.measure.warmup = 0;
  o.measure.min_repetitions = 2;
  o.measure.max_repetitions = 2;
  o.measure.min_total_us = 0;
  o.device_kind = "cpu-process";
  o.provenance.set_date("2026-11-29T00:00:00Z");
  o.provenance.set_backend("cpu");
  o.timer = timer;
  return o;
}

// A device whose kernels are the CPU reference's with a defect applied to the first output.
class DefectiveDevice final : public exec::Device {
 public:
  enum class Defect { kOffByOnePercent, kNaN };
  explicit DefectiveDevice(Defect defect) : defect_(defect) {}
  std::string_view name() const override { return "defective"; }
  Result<std::unique_ptr<exec::OpKernel>> make_kernel(const graph::OpNode& op) const override {
    GP_ASSIGN_OR_RETURN(auto inner, exec::make_cpu_kernel(op));
    return std::unique_ptr<exec::OpKernel>(new Kernel(std::move(inner), defect_));
  }

 private:
  class Kernel final : public exec::OpKernel {
   public:
    Kernel(std::unique_ptr<exec::OpKernel> inner, Defect d) : inner_(std::move(inner)), d_(d) {}
    int64_t saved_floats_per_sample() const override { return inner_->saved_floats_per_sample(); }
    void forward(const exec::OpArgs& a) const override {
      inner_->forward(a);
      float* y = a.outputs[0].f();
      y[0] = d_ == Defect::kNaN ? std::numeric_limits<float>::quiet_NaN() : y[0] * 1.01f + 0.01f;
    }
    void backward(const exec::OpArgs& a) const override { inner_->backward(a); }

   private:
    std::unique_ptr<exec::OpKernel> inner_;
    Defect d_;
  };
  Defect defect_;
};

// A device that runs the CPU reference kernels but is not the CPU device itself, so the profiler
// checks it against the reference (as it will a CUDA device).
class ReferenceCopyDevice final : public exec::Device {
 public:
  std::string_view name() const override { return "copy"; }
  Result<std::unique_ptr<exec::OpKernel>> make_kernel(const graph::OpNode& op) const override {
    return exec::make_cpu_kernel(op);
  }
};

TEST_CASE("a profile of a tiny model on the CPU has every operator at every micro-batch size") {
  for (const char* spec : {"tiny-mmt", "tiny-dlrm", "tiny-candle-uno"}) {
    INFO(spec);
    const auto g = testing::zoo_graph(spec);
    ConstantTimer timer;
    auto r = profile_ops(g, exec::cpu_device(), fast_options(&timer));
    REQUIRE(r.ok());
    CHECK(r->rejected.empty());
    std::set<std::string> wanted;
    for (const auto& op : g.ops()) {
      if (!op.info->is_input) wanted.insert(cost::op_signature(op));
    }
    CHECK(r->signatures == static_cast<int>(wanted.size()));
    REQUIRE(r->measurements.size() == wanted.size() * 3);
    std::set<std::string> got;
    for (const auto& m : r->measurements) {
      got.insert(m.signature());
      CHECK(m.device_kind() == "cpu-process");
      CHECK(m.forward_time_us() == Approx(7));
      CHECK(m.backward_time_us() == Approx(7));
      CHECK(m.repetitions() == 2);
      CHECK(m.provenance().date() == "2026-11-29T00:00:00Z");
    }
    CHECK(got == wanted);
  }
}

TEST_CASE("kept bytes are the op's outputs plus its saved scratch, per sample times the batch") {
  const auto g = testing::zoo_graph("tiny-mmt");
  ConstantTimer timer;
  auto r = profile_ops(g, exec::cpu_device(), fast_options(&timer));
  REQUIRE(r.ok());
  for (const auto& [sig, index] : distinct_signatures(g)) {
    const auto& op = g.op(index);
    auto kernel = exec::make_cpu_kernel(op);
    REQUIRE(kernel.ok());
    int64_t per_sample = (*kernel)->saved_floats_per_sample() * 4;
    for (const auto& out : op.proto->outputs()) per_sample += graph::size_bytes(out);
    for (const auto& m : r->measurements) {
      if (m.signature() == sig) CHECK(m.activation_bytes() == per_sample * m.micro_batch());
    }
    if (op.type() == "multi_head_attention") CHECK((*kernel)->saved_floats_per_sample() > 0);
  }
}

TEST_CASE("real timings are positive and grow with the micro-batch for a GEMM") {
  graph::GraphBuilder b("wide", "");
  auto x = b.input("x", {64});
  x = b.linear("fc", x, 256);
  b.add_loss(b.mse_loss("loss", x, b.input("t", {256})));
  const auto g = testing::build_graph(b.finish());
  OpProfileOptions o;
  o.micro_batches = {1, 64};
  o.device_kind = "cpu-process";
  o.provenance.set_date("now");
  auto r = profile_ops(g, exec::cpu_device(), o);
  REQUIRE(r.ok());
  double t1 = 0, t64 = 0;
  for (const auto& m : r->measurements) {
    CHECK(m.forward_time_us() > 0);
    CHECK(m.backward_time_us() > 0);
    CHECK(m.repetitions() >= o.measure.min_repetitions);
    if (m.signature().starts_with("linear") && m.micro_batch() == 1) t1 = m.forward_time_us();
    if (m.signature().starts_with("linear") && m.micro_batch() == 64) t64 = m.forward_time_us();
  }
  CHECK(t64 > t1);
}

TEST_CASE("a kernel that disagrees with the CPU reference is reported and not recorded") {
  const auto g = testing::chain_graph(2);
  ConstantTimer timer;
  const DefectiveDevice device(DefectiveDevice::Defect::kOffByOnePercent);
  auto r = profile_ops(g, device, fast_options(&timer));
  REQUIRE(r.ok());
  // Every op's first output is perturbed: nothing is recorded, every (op, size) is reported.
  CHECK(r->measurements.empty());
  REQUIRE(r->rejected.size() == static_cast<size_t>(r->signatures) * 3);
  CHECK_THAT(r->rejected[0].reason, Catch::Contains("CPU reference"));
  CHECK_THAT(r->rejected[0].reason, Catch::Contains("output 0"));
}

TEST_CASE("a kernel with non-finite output is reported and not recorded") {
  const auto g = testing::chain_graph(1);
  ConstantTimer timer;
  const DefectiveDevice device(DefectiveDevice::Defect::kNaN);
  auto r = profile_ops(g, device, fast_options(&timer));
  REQUIRE(r.ok());
  CHECK(r->measurements.empty());
  REQUIRE_FALSE(r->rejected.empty());
  CHECK_THAT(r->rejected[0].reason, Catch::Contains("nan"));
}

TEST_CASE("a device running the reference kernels passes the check and is recorded") {
  const auto g = testing::zoo_graph("tiny-mmt");
  ConstantTimer timer;
  const ReferenceCopyDevice device;
  auto r = profile_ops(g, device, fast_options(&timer));
  REQUIRE(r.ok());
  for (const auto& rej : r->rejected)
    FAIL_CHECK(rej.signature << " b=" << rej.micro_batch << ": " << rej.reason);
  CHECK(r->measurements.size() == static_cast<size_t>(r->signatures) * 3);
}

TEST_CASE("bad profiling options are rejected naming the option") {
  const auto g = testing::chain_graph(1);
  ConstantTimer timer;
  auto o = fast_options(&timer);
  o.micro_batches = {2, 0};
  auto r = profile_ops(g, exec::cpu_device(), o);
  REQUIRE_FALSE(r.ok());
  CHECK_THAT(r.status().message(), Catch::Contains("--micro-batches"));
  o = fast_options(&timer);
  o.micro_batches.clear();
  CHECK_FALSE(profile_ops(g, exec::cpu_device(), o).ok());
  o = fast_options(&timer);
  o.device_kind.clear();
  CHECK_FALSE(profile_ops(g, exec::cpu_device(), o).ok());
  o = fast_options(&timer);
  o.cache_flush_bytes = -1;
  CHECK_FALSE(profile_ops(g, exec::cpu_device(), o).ok());
}

// The first `slow_calls` timed calls take 50 us (interference), the rest 7 us.
class BurstTimer final : public Timer {
 public:
  explicit BurstTimer(int slow_calls) : slow_(slow_calls) {}
  void start() override {}
  double stop_us() override { return calls_++ < slow_ ? 50 : 7; }
  int calls() const { return calls_; }

 private:
  int slow_;
  int calls_ = 0;
};

TEST_CASE("with several passes every measurement keeps its fastest pass") {
  const auto g = testing::chain_graph(1);
  auto o = fast_options(nullptr);
  o.micro_batches = {1, 2};
  // A burst of interference covering the whole first pass.
  BurstTimer one_pass(1 << 20);
  o.timer = &one_pass;
  auto single = profile_ops(g, exec::cpu_device(), o);
  REQUIRE(single.ok());
  const int calls_per_pass = one_pass.calls();
  BurstTimer burst(calls_per_pass);
  o.timer = &burst;
  o.passes = 3;
  int last_done = 0, total = 0;
  auto r = profile_ops(g, exec::cpu_device(), o, [&](const OpProfileProgress& p) {
    last_done = p.done;
    total = p.total;
  });
  REQUIRE(r.ok());
  CHECK(burst.calls() == 3 * calls_per_pass);
  CHECK(r->measurements.size() == single->measurements.size());  // one record per (op, size)
  for (const auto& m : single->measurements) CHECK(m.forward_time_us() == 50);
  for (const auto& m : r->measurements) {
    CHECK(m.forward_time_us() == 7);
    CHECK(m.backward_time_us() == 7);
  }
  CHECK(last_done == total);
  o.passes = 0;
  CHECK_THAT(profile_ops(g, exec::cpu_device(), o).status().message(), Catch::Contains("--passes"));
}

TEST_CASE("distinct signatures skip graph inputs and repeated layers") {
  const auto g = testing::chain_graph(3);  // three identical 8->8 linears
  const auto sigs = distinct_signatures(g);
  REQUIRE(sigs.size() == 2);  // linear, mse_loss
  CHECK(sigs[0].first.starts_with("linear|"));
  CHECK(g.op(sigs[0].second).id() == "fc0");
  CHECK(sigs[1].first.starts_with("mse_loss|"));
}

}  // namespace
}  // namespace gp::profile
