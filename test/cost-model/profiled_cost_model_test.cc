// The profiled cost model: op signatures, exact and interpolated times, extrapolation, fallback.
#include <catch2/catch.hpp>
#include <cmath>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "gp/cost/cluster.h"
#include "gp/cost/cost_model.h"
#include "gp/cost/memory_model.h"
#include "gp/model/builder.h"
#include "gp/model/graph.h"

using namespace gp::cost;
using gp::model::Graph;
using gp::model::GraphBuilder;
using gp::model::OpNode;
using graphpipe::v1::ProfileDB;

namespace {

constexpr const char* kKind = "V100-SXM2-16GB";

// A fallback that answers a recognisable constant, and counts nothing itself.
class ConstantModel final : public CostModel {
 public:
  OpTime op_time(const OpNode&, int64_t samples) const override {
    return {1000.0 * static_cast<double>(samples), 2000.0 * static_cast<double>(samples)};
  }
  std::string_view name() const override { return "constant"; }
};

Graph small_graph() {
  GraphBuilder b("m", "");
  auto x = b.input("x", {256});
  auto h = b.linear("fc1", x, 512, true, "relu");
  auto y = b.linear("fc2", h, 8);
  auto z = b.gelu("act", y);
  b.add_loss(b.mse_loss("loss", z, b.input("t", {8})));
  auto g = Graph::build(b.finish());
  INFO(g.status().to_string());
  REQUIRE(g.ok());
  return std::move(g).value();
}

const OpNode& op(const Graph& g, const std::string& id) {
  const int i = g.index_of(id);
  REQUIRE(i >= 0);
  return g.op(i);
}

void add(ProfileDB& db, const std::string& sig, int64_t b, double fwd, double bwd,
         const std::string& kind = kKind) {
  auto* m = db.add_ops();
  m->set_signature(sig);
  m->set_device_kind(kind);
  m->set_micro_batch(b);
  m->set_forward_time_us(fwd);
  m->set_backward_time_us(bwd);
}

std::unique_ptr<ProfiledCostModel> make(
    const ProfileDB& db,
    std::shared_ptr<const CostModel> fallback = std::make_shared<ConstantModel>()) {
  auto m = ProfiledCostModel::create(db, kKind, std::move(fallback));
  INFO(m.status().to_string());
  REQUIRE(m.ok());
  return std::move(m).value();
}

}  // namespace

TEST_CASE("an op signature lists the type, sorted attributes and input specs") {
  const Graph g = small_graph();
  CHECK(op_signature(op(g, "fc1")) == "linear|activation=relu,out_features=512|[256] float32");
  CHECK(op_signature(op(g, "fc2")) == "linear|out_features=8|[512] float32");
  CHECK(op_signature(op(g, "act")) == "gelu||[8] float32");
  CHECK(op_signature(op(g, "loss")) == "mse_loss||[8] float32;[8] float32");
}

TEST_CASE("an op signature prints floats with %g and int lists with colons") {
  graphpipe::v1::Operator proto;
  proto.set_id("custom");
  proto.set_type("layer_norm");
  gp::model::set_attr(proto, "epsilon", 1e-5);
  gp::model::set_attr(proto, "axes", std::vector<int64_t>{0, 2, 5});
  gp::model::set_attr(proto, "mode", std::string_view("fast"));
  gp::model::set_attr(proto, "bias", int64_t{1});
  OpNode node;
  node.proto = &proto;
  node.info = gp::model::find_op_type("layer_norm");
  REQUIRE(node.info != nullptr);
  node.input_specs = {gp::model::make_spec({4, 16}),
                      gp::model::make_spec({3}, graphpipe::v1::DATA_TYPE_INT64)};
  CHECK(op_signature(node) ==
        "layer_norm|axes=0:2:5,bias=1,epsilon=1e-05,mode=fast|[4, 16] float32;[3] int64");
}

TEST_CASE("measured micro-batch sizes give the measured times exactly") {
  const Graph g = small_graph();
  const std::string sig = op_signature(op(g, "fc1"));
  ProfileDB db;
  add(db, sig, 16, 800, 1700);
  add(db, sig, 1, 100, 210);  // out of order on purpose
  add(db, sig, 4, 200, 430);
  auto m = make(db);
  CHECK(m->name() == "profiled");
  for (auto [b, f, bw] : {std::tuple{1, 100.0, 210.0}, {4, 200.0, 430.0}, {16, 800.0, 1700.0}}) {
    INFO(b);
    const OpTime t = m->op_time(op(g, "fc1"), b);
    CHECK(t.forward_us == f);
    CHECK(t.backward_us == bw);
  }
  CHECK(m->fallback_count() == 0);
}

TEST_CASE("between measured sizes the time is interpolated log-log") {
  const Graph g = small_graph();
  const std::string sig = op_signature(op(g, "fc1"));
  ProfileDB db;
  add(db, sig, 1, 100, 100);
  add(db, sig, 4, 200, 1600);
  add(db, sig, 16, 800, 1600);
  auto m = make(db);
  // Forward between 1 and 4: slope log(200/100)/log(4) = 0.5, so t(2) = 100 * 2^0.5.
  CHECK(m->op_time(op(g, "fc1"), 2).forward_us == Approx(100 * std::sqrt(2.0)));
  // Backward between 1 and 4: slope 2, so t(2) = 400; between 4 and 16: flat.
  CHECK(m->op_time(op(g, "fc1"), 2).backward_us == Approx(400));
  CHECK(m->op_time(op(g, "fc1"), 8).backward_us == Approx(1600));
  // Forward between 4 and 16: slope 1, t(8) = 400; t(10) = 200 * 2.5.
  CHECK(m->op_time(op(g, "fc1"), 8).forward_us == Approx(400));
  CHECK(m->op_time(op(g, "fc1"), 10).forward_us == Approx(500));
}

TEST_CASE("beyond the measured sizes the time extrapolates from the nearest two points") {
  const Graph g = small_graph();
  const std::string sig = op_signature(op(g, "fc1"));
  ProfileDB db;
  add(db, sig, 2, 100, 50);
  add(db, sig, 4, 1000, 60);
  add(db, sig, 8, 1500, 60);
  add(db, sig, 16, 3000, 40);
  auto m = make(db);
  // Above: slope between 8 and 16 is 1 (forward): t(64) = 3000 * 4.
  CHECK(m->op_time(op(g, "fc1"), 64).forward_us == Approx(12000));
  // Backward falls between 8 and 16: the slope is clamped to 0, the time stays at 40.
  CHECK(m->op_time(op(g, "fc1"), 64).backward_us == Approx(40));
  // Below: slope between 2 and 4 is log2(10) = 3.3, clamped to 1.5: t(1) = 100 * 0.5^1.5.
  CHECK(m->op_time(op(g, "fc1"), 1).forward_us == Approx(100 * std::pow(0.5, 1.5)));
  // Backward slope between 2 and 4 is log2(1.2) = 0.263: t(1) = 50 * 0.5^0.263.
  CHECK(m->op_time(op(g, "fc1"), 1).backward_us == Approx(50 * std::pow(0.5, std::log2(1.2))));
}

TEST_CASE("a single measured size scales linearly") {
  const Graph g = small_graph();
  ProfileDB db;
  add(db, op_signature(op(g, "fc2")), 8, 80, 160);
  auto m = make(db);
  CHECK(m->op_time(op(g, "fc2"), 8).forward_us == 80);
  CHECK(m->op_time(op(g, "fc2"), 2).forward_us == Approx(20));
  CHECK(m->op_time(op(g, "fc2"), 32).backward_us == Approx(640));
}

TEST_CASE("zero times interpolate linearly instead of in log space") {
  const Graph g = small_graph();
  ProfileDB db;
  add(db, op_signature(op(g, "fc2")), 2, 0, 10);
  add(db, op_signature(op(g, "fc2")), 6, 40, 10);
  auto m = make(db);
  CHECK(m->op_time(op(g, "fc2"), 4).forward_us == Approx(20));
  CHECK(std::isfinite(m->op_time(op(g, "fc2"), 1).forward_us));
  CHECK(m->op_time(op(g, "fc2"), 1).forward_us == 0);
}

TEST_CASE("a later measurement of the same size replaces the earlier one") {
  const Graph g = small_graph();
  ProfileDB db;
  add(db, op_signature(op(g, "fc2")), 4, 10, 20);
  add(db, op_signature(op(g, "fc2")), 4, 12, 22);
  auto m = make(db);
  CHECK(m->op_time(op(g, "fc2"), 4).forward_us == 12);
}

TEST_CASE("measurements of other device kinds are ignored") {
  const Graph g = small_graph();
  ProfileDB db;
  add(db, op_signature(op(g, "fc2")), 4, 10, 20, "H100-SXM5-80GB");
  auto m = make(db);
  CHECK(m->op_time(op(g, "fc2"), 4).forward_us == 4000);  // the fallback's answer
  CHECK(m->fallback_count() == 1);
}

TEST_CASE("ops missing from the profile use the fallback, counted once per signature") {
  const Graph g = small_graph();
  ProfileDB db;
  add(db, op_signature(op(g, "fc1")), 4, 10, 20);
  auto m = make(db);
  CHECK(m->op_time(op(g, "fc2"), 3).forward_us == 3000);
  CHECK(m->op_time(op(g, "fc2"), 3).backward_us == 6000);
  CHECK(m->fallback_count() == 1);
  m->op_time(op(g, "fc2"), 7);  // same signature again
  CHECK(m->fallback_count() == 1);
  m->op_time(op(g, "act"), 1);
  m->op_time(op(g, "loss"), 1);
  CHECK(m->fallback_count() == 3);
  // Input ops are free and never need the fallback.
  CHECK(m->op_time(op(g, "x"), 4).forward_us == 0);
  CHECK(m->fallback_count() == 3);
}

TEST_CASE("the analytic model is a working fallback and concurrent lookups are safe") {
  const Graph g = small_graph();
  auto cluster = load_cluster("summit-v100");
  REQUIRE(cluster.ok());
  auto analytic =
      std::make_shared<AnalyticCostModel>(cluster->device(), graphpipe::v1::PRECISION_FP32);
  auto m = make(ProfileDB{}, analytic);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int b = 1; b <= 64; ++b) {
        for (const auto& node : g.ops()) m->op_time(node, b);
      }
    });
  }
  for (auto& t : threads) t.join();
  CHECK(m->fallback_count() == 4);  // fc1, fc2, act, loss
  const OpTime expected = analytic->op_time(op(g, "fc1"), 16);
  CHECK(m->op_time(op(g, "fc1"), 16).forward_us == expected.forward_us);
}

TEST_CASE("create rejects a null fallback and bad measurements naming the record") {
  ProfileDB db;
  auto null_fallback = ProfiledCostModel::create(db, kKind, nullptr);
  REQUIRE_FALSE(null_fallback.ok());
  CHECK(null_fallback.status().code() == gp::StatusCode::kInvalidArgument);
  CHECK_THAT(null_fallback.status().message(), Catch::Contains("fallback"));

  auto fallback = std::make_shared<ConstantModel>();
  add(db, "relu||[8] float32", 2, 1, 1);
  add(db, "relu||[8] float32", 0, 1, 1);
  auto zero_batch = ProfiledCostModel::create(db, kKind, fallback);
  REQUIRE_FALSE(zero_batch.ok());
  CHECK(gp::exit_code_for(zero_batch.status()) == 2);
  CHECK_THAT(zero_batch.status().message(), Catch::Contains("ops[1]"));
  CHECK_THAT(zero_batch.status().message(), Catch::Contains("micro_batch = 0, must be > 0"));

  db.mutable_ops(1)->set_micro_batch(4);
  db.mutable_ops(1)->set_backward_time_us(-3);
  auto negative = ProfiledCostModel::create(db, kKind, fallback);
  REQUIRE_FALSE(negative.ok());
  CHECK_THAT(negative.status().message(), Catch::Contains("ops[1]"));
  CHECK_THAT(negative.status().message(), Catch::Contains("backward_time_us = -3, must be >= 0"));

  db.mutable_ops(1)->set_backward_time_us(3);
  // An activation size near INT64_MAX would overflow the memory model into a small one.
  db.mutable_ops(1)->set_activation_bytes(INT64_MAX);
  auto huge = ProfiledCostModel::create(db, kKind, fallback);
  REQUIRE_FALSE(huge.ok());
  CHECK_THAT(huge.status().message(), Catch::Contains("activation_bytes = 9223372036854775807") &&
                                          Catch::Contains("must be in [0, 2^50]"));
  db.mutable_ops(1)->set_activation_bytes(0);
  db.mutable_ops(0)->set_forward_time_us(-1);
  auto negative_fwd = ProfiledCostModel::create(db, kKind, fallback);
  REQUIRE_FALSE(negative_fwd.ok());
  CHECK_THAT(negative_fwd.status().message(), Catch::Contains("ops[0]"));
  CHECK_THAT(negative_fwd.status().message(), Catch::Contains("forward_time_us = -1"));
}

TEST_CASE("measured memory is the most bytes per sample over the sizes, absent when unmeasured") {
  const Graph g = small_graph();
  const std::string sig = op_signature(op(g, "fc1"));
  ProfileDB db;
  add(db, sig, 2, 10, 20);
  db.mutable_ops(0)->set_activation_bytes(2 * 2048);
  db.mutable_ops(0)->set_workspace_bytes(2 * 1024);
  add(db, sig, 8, 40, 80);
  db.mutable_ops(1)->set_activation_bytes(8 * 3000);  // more per sample at 8
  db.mutable_ops(1)->set_workspace_bytes(8 * 512);
  add(db, op_signature(op(g, "fc2")), 4, 5, 5);  // a profile written before memory was measured
  auto m = make(db);
  const auto fc1 = m->op_memory(op(g, "fc1"));
  REQUIRE(fc1.has_value());
  CHECK(fc1->activation_bytes == 3000);
  CHECK(fc1->workspace_bytes == 1024);
  CHECK_FALSE(m->op_memory(op(g, "fc2")).has_value());  // no memory in the record
  CHECK_FALSE(m->op_memory(op(g, "act")).has_value());  // not in the profile
  CHECK_FALSE(m->op_memory(op(g, "x")).has_value());    // graph inputs run no kernel
}

TEST_CASE(
    "a measured optimizer step prices each tensor and byte, and other kinds use the fallback") {
  ProfileDB db;
  auto* f = db.add_optimizer_steps();
  f->set_device_kind(kKind);
  f->set_optimizer(graphpipe::v1::OPTIMIZER_KIND_ADAM);
  f->set_alpha_us(3);
  f->set_beta_bytes_per_s(2e9);
  auto* other = db.add_optimizer_steps();
  *other = *f;
  other->set_device_kind("A100-SXM4-80GB");  // another device kind's: ignored
  other->set_alpha_us(1000);
  auto cluster = load_cluster("summit-v100");
  REQUIRE(cluster.ok());
  const auto& device = cluster->device();
  auto m = make(db);
  const OptimizerStepCost adam = m->optimizer_step_cost(device, graphpipe::v1::OPTIMIZER_KIND_ADAM);
  CHECK(adam.fixed_us == 0);
  CHECK(adam.per_tensor_us == 3);
  CHECK(adam.bytes_per_s == 2e9);
  // UNSPECIFIED reads as Adam, as in the memory model.
  CHECK(m->optimizer_step_cost(device, graphpipe::v1::OPTIMIZER_KIND_UNSPECIFIED).per_tensor_us ==
        3);
  // SGD was not measured: the fallback's (the analytic step, launch and memory bandwidth).
  const OptimizerStepCost sgd = m->optimizer_step_cost(device, graphpipe::v1::OPTIMIZER_KIND_SGD);
  CHECK(sgd.per_tensor_us == 0);
  CHECK(sgd.fixed_us == device.kernel_launch_overhead_us());
  CHECK(sgd.bytes_per_s == device.memory_bandwidth_bytes_per_s());

  // 1000 fp32 Adam parameters in 4 tensors stream 2 x (4000 + 8000) + 4000 = 28000 bytes.
  MemoryBreakdown state;
  state.weight_bytes = 4000;
  state.gradient_bytes = 4000;
  state.optimizer_bytes = 8000;
  CHECK(optimizer_step_bytes(state) == 28000);
  CHECK(optimizer_step_us(adam, state, 4) == Approx(4 * 3 + 28000 / 2e9 * 1e6));
  state.weight_bytes = 0;  // nothing to step
  CHECK(optimizer_step_us(adam, state, 4) == 0);
}

TEST_CASE("a measured step streams at the bandwidth measured at its whole state's size") {
  ProfileDB db;
  auto* f = db.add_optimizer_steps();
  f->set_device_kind(kKind);
  f->set_optimizer(graphpipe::v1::OPTIMIZER_KIND_SGD);
  f->set_alpha_us(1);
  f->set_beta_bytes_per_s(20e9);
  // 1 MB in 21 us (50 GB/s once the 1 us latency is off), 100 MB in 10 001 us (10 GB/s).
  for (const auto& [bytes, us] : {std::pair{1e8, 10001.0}, std::pair{1e6, 21.0}}) {
    auto* p = f->add_points();
    p->set_bytes(static_cast<int64_t>(bytes));
    p->set_time_us(us);
  }
  auto cluster = load_cluster("summit-v100");
  REQUIRE(cluster.ok());
  const OptimizerStepCost sgd =
      make(db)->optimizer_step_cost(cluster->device(), graphpipe::v1::OPTIMIZER_KIND_SGD);
  REQUIRE(sgd.points == 2);  // sorted by size
  CHECK(sgd.bandwidth(1e6) == Approx(50e9));
  CHECK(sgd.bandwidth(1e8) == Approx(10e9));
  CHECK(sgd.bandwidth(1e7) == Approx(50e9 * std::sqrt(0.2)));  // log-log halfway
  CHECK(sgd.bandwidth(1e3) == Approx(50e9));                   // the ends held
  CHECK(sgd.bandwidth(1e12) == Approx(10e9));
  // 12 MB of SGD state (1e6 parameters) in 10 tensors.
  MemoryBreakdown state;
  state.weight_bytes = state.gradient_bytes = 4000000;
  const double bytes = optimizer_step_bytes(state);
  CHECK(optimizer_step_us(sgd, state, 10) == Approx(10 + bytes / sgd.bandwidth(bytes) * 1e6));
}
