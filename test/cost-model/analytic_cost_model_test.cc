// The analytic cost model: roofline, efficiency curve, launch overhead, precision.
#include <algorithm>
#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "gp/cost/cluster.h"
#include "gp/cost/cost_model.h"
#include "gp/model/builder.h"
#include "gp/model/graph.h"
#include "gp/model/zoo.h"

using namespace gp::cost;
using gp::model::Graph;
using gp::model::GraphBuilder;
using gp::model::OpNode;

namespace {

constexpr auto kFp32 = graphpipe::v1::PRECISION_FP32;
constexpr auto kBf16 = graphpipe::v1::PRECISION_BF16_FP32_MASTER;

DeviceKind device_of(const std::string& preset) {
  auto c = load_cluster(preset);
  REQUIRE(c.ok());
  return c->device();
}

Graph build(GraphBuilder& b) {
  auto g = Graph::build(b.finish());
  INFO(g.status().to_string());
  REQUIRE(g.ok());
  return std::move(g).value();
}

// x[seq, hidden] -> attention -> linear(ffn) -> relu(big) ... -> loss: one op of each kind.
Graph op_zoo() {
  GraphBuilder b("ops", "");
  auto x = b.input("x", {128, 512});
  auto a = b.attention("attn", x, 8);
  auto f = b.linear("ffn", a, 2048, true, "gelu");
  auto r = b.relu("relu", f);
  auto big = b.input("big", {1 << 20});
  auto rb = b.relu("relu_big", big);
  auto tiny = b.linear("tiny", b.input("t", {4}), 2);
  auto gemm = b.linear("gemm", b.input("g", {4096}), 4096);
  b.add_loss(b.mse_loss("loss", r, b.input("y", {128, 2048})));
  b.add_loss(b.mse_loss("loss_big", rb, b.input("yb", {1 << 20})));
  b.add_loss(b.mse_loss("loss_tiny", tiny, b.input("yt", {2})));
  b.add_loss(b.mse_loss("loss_gemm", gemm, b.input("yg", {4096})));
  return build(b);
}

const OpNode& op(const Graph& g, const std::string& id) {
  const int i = g.index_of(id);
  REQUIRE(i >= 0);
  return g.op(i);
}

}  // namespace

TEST_CASE("efficiency grows with the work size and stays below max_efficiency") {
  AnalyticCostModel m(device_of("dgx-a100"), kFp32);
  const AnalyticCostModel::Params p;
  CHECK(m.efficiency(0) == 0);
  // By default half efficiency is reached by the work the device does at peak in 1 us.
  CHECK(m.efficiency(156e12 * p.half_efficiency_us * 1e-6) == Approx(p.max_efficiency / 2));
  double prev = 0;
  for (double w = 1e3; w <= 1e16; w *= 3) {
    INFO(w);
    const double e = m.efficiency(w);
    CHECK(e > prev);
    CHECK(e < p.max_efficiency);
    prev = e;
  }
  CHECK(prev > 0.99 * p.max_efficiency);
}

TEST_CASE("custom params change the efficiency curve") {
  AnalyticCostModel::Params p;
  p.max_efficiency = 0.5;
  p.half_efficiency_flops = 1e6;
  AnalyticCostModel m(device_of("summit-v100"), kFp32, p);
  CHECK(m.efficiency(1e6) == Approx(0.25));
  CHECK(m.efficiency(3e6) == Approx(0.5 * 3e6 / 4e6));

  AnalyticCostModel::Params slow;
  slow.half_efficiency_us = 10;  // derived: 10 us of peak work on a V100 in fp32
  AnalyticCostModel s(device_of("summit-v100"), kFp32, slow);
  CHECK(s.efficiency(15.7e12 * 10e-6) == Approx(0.75 / 2));
}

TEST_CASE("the default efficiency curve scales with the device's peak") {
  // The same work is relatively smaller for a faster device.
  const AnalyticCostModel v100(device_of("summit-v100"), kFp32);
  const AnalyticCostModel h100(device_of("dgx-h100"), kBf16);
  CHECK(v100.efficiency(15.7e6) == Approx(0.375));
  CHECK(h100.efficiency(989e6) == Approx(0.375));
  CHECK(h100.efficiency(15.7e6) < 0.05);
}

TEST_CASE("FP32 runs at the TF32 peak where the device has one, BF16 at the bf16 peak") {
  CHECK(AnalyticCostModel(device_of("summit-v100"), kFp32).peak_flops() == Approx(15.7e12));
  CHECK(AnalyticCostModel(device_of("summit-v100"), kBf16).peak_flops() == Approx(125e12));
  CHECK(AnalyticCostModel(device_of("dgx-a100"), kFp32).peak_flops() == Approx(156e12));
  CHECK(AnalyticCostModel(device_of("dgx-a100"), kBf16).peak_flops() == Approx(312e12));
  CHECK(
      AnalyticCostModel(device_of("dgx-h100"), graphpipe::v1::PRECISION_UNSPECIFIED).peak_flops() ==
      Approx(495e12));
  // No bf16 units on the CPU preset: bf16 falls back to the fp32 peak.
  CHECK(AnalyticCostModel(device_of("cpu-local"), kBf16).peak_flops() == Approx(50e9));
}

TEST_CASE("time per sample falls as the micro-batch grows for linear and attention ops") {
  const Graph g = op_zoo();
  for (const char* preset : {"summit-v100", "dgx-a100", "h200", "cpu-local"}) {
    for (auto precision : {kFp32, kBf16}) {
      AnalyticCostModel m(device_of(preset), precision);
      for (const char* id : {"attn", "ffn", "tiny", "gemm"}) {
        INFO(preset << " precision " << precision << " op " << id);
        double prev_f = 1e300, prev_b = 1e300;
        for (int64_t b = 1; b <= 64; b *= 2) {
          INFO("micro-batch " << b);
          const OpTime t = m.op_time(op(g, id), b);
          const double f = t.forward_us / static_cast<double>(b);
          const double bw = t.backward_us / static_cast<double>(b);
          CHECK(f < prev_f);
          CHECK(bw < prev_b);
          prev_f = f, prev_b = bw;
        }
        // ... while the time of the whole micro-batch grows.
        CHECK(m.op_time(op(g, id), 64).forward_us > m.op_time(op(g, id), 1).forward_us);
      }
    }
  }
}

TEST_CASE("a memory-bound element-wise op takes its bytes over the bandwidth plus one launch") {
  const Graph g = op_zoo();
  const DeviceKind d = device_of("summit-v100");
  AnalyticCostModel m(d, kFp32);
  const AnalyticCostModel::Params p;
  const OpNode& relu = op(g, "relu_big");
  const double mib4 = 4.0 * (1 << 20);  // one float tensor of 2^20 elements
  REQUIRE(relu.cost.forward_bytes == Approx(2 * mib4));
  const OpTime t = m.op_time(relu, 64);
  const double bw = 900e9 * p.memory_efficiency;
  CHECK(t.forward_us == Approx(5 + 64 * 2 * mib4 / bw * 1e6));   // read x, write y
  CHECK(t.backward_us == Approx(5 + 64 * 3 * mib4 / bw * 1e6));  // read x and dy, write dx
  // It is memory-bound: the FLOP term alone is much shorter.
  const double flops = 64.0 * (1 << 20);
  CHECK(flops / (m.peak_flops() * m.efficiency(flops)) * 1e6 < 0.5 * (t.forward_us - 5));
  // With bf16 the tensors are half as wide, so the streaming time halves.
  AnalyticCostModel half(d, kBf16);
  CHECK(half.op_time(relu, 64).forward_us - 5 == Approx(0.5 * (t.forward_us - 5)));
}

TEST_CASE("a large GEMM is compute-bound and matches the roofline by hand") {
  const Graph g = op_zoo();
  AnalyticCostModel m(device_of("summit-v100"), kFp32);
  const OpNode& gemm = op(g, "gemm");
  const double flops = 64 * gemm.cost.forward_flops;  // one kernel
  const double eff = 0.75 * flops / (flops + 15.7e12 * 1e-6);
  const double compute_us = flops / (15.7e12 * eff) * 1e6;
  const double memory_us =
      (64 * gemm.cost.forward_bytes + gemm.cost.forward_fixed_bytes) / (900e9 * 0.8) * 1e6;
  REQUIRE(compute_us > memory_us);
  CHECK(m.op_time(gemm, 64).forward_us == Approx(5 + compute_us));
}

TEST_CASE("a tiny op costs its kernel launches and little more") {
  const Graph g = op_zoo();
  for (const char* preset : {"summit-v100", "cpu-local"}) {
    INFO(preset);
    const DeviceKind d = device_of(preset);
    AnalyticCostModel m(d, kFp32);
    const OpNode& tiny = op(g, "tiny");
    const OpTime t = m.op_time(tiny, 1);
    // Per kernel: the launch overhead plus the efficiency curve's floor w_half / (peak eff_max)
    // = half_efficiency_us / max_efficiency.
    const double per_kernel = d.kernel_launch_overhead_us() + 1.0 / 0.75;
    CHECK(t.forward_us >= tiny.cost.forward_kernels * d.kernel_launch_overhead_us());
    CHECK(t.forward_us == Approx(tiny.cost.forward_kernels * per_kernel).margin(0.01));
    CHECK(t.backward_us == Approx(tiny.cost.backward_kernels * per_kernel).margin(0.01));
    CHECK(tiny.cost.backward_kernels == 3);  // dX, dW, db
  }
}

TEST_CASE("input ops cost nothing") {
  const Graph g = op_zoo();
  AnalyticCostModel m(device_of("dgx-h100"), kFp32);
  const OpTime t = m.op_time(op(g, "x"), 64);
  CHECK(t.forward_us == 0);
  CHECK(t.backward_us == 0);
}

TEST_CASE("every op of a zoo model has a positive, finite time on every preset") {
  auto model = gp::model::build_zoo_model("tiny-mmt");
  REQUIRE(model.ok());
  auto g = Graph::build(*model);
  REQUIRE(g.ok());
  for (const auto& preset : cluster_preset_names()) {
    AnalyticCostModel m(device_of(preset), kFp32);
    CHECK(m.name() == "analytic");
    for (const auto& node : g->ops()) {
      INFO(preset << " " << node.id());
      const OpTime t = m.op_time(node, 8);
      if (node.info->is_input) continue;
      CHECK(t.forward_us > 0);
      CHECK(t.forward_us < 1e7);
      CHECK(t.backward_us >= 0);
      CHECK(t.backward_us < 1e7);
    }
  }
}

TEST_CASE("a faster device gives a faster op") {
  const Graph g = op_zoo();
  const OpNode& attn = op(g, "attn");
  const double v100 =
      AnalyticCostModel(device_of("summit-v100"), kFp32).op_time(attn, 32).forward_us;
  const double h100 = AnalyticCostModel(device_of("dgx-h100"), kFp32).op_time(attn, 32).forward_us;
  const double cpu = AnalyticCostModel(device_of("cpu-local"), kFp32).op_time(attn, 32).forward_us;
  CHECK(h100 < v100);
  CHECK(v100 < cpu);
}
