// The memory model: weights, gradients and optimizer state per precision and optimizer,
// activations of the in-flight samples, one call's inner gradients and kernel workspace.
#include "gp/cost/memory_model.h"

#include <catch2/catch.hpp>
#include <numeric>
#include <optional>
#include <string_view>
#include <vector>

#include "gp/model/builder.h"
#include "gp/model/graph.h"
#include "gp/model/zoo.h"

using namespace gp::cost;
using gp::model::Graph;
using gp::model::GraphBuilder;

namespace {

constexpr auto kFp32 = graphpipe::v1::PRECISION_FP32;
constexpr auto kBf16 = graphpipe::v1::PRECISION_BF16_FP32_MASTER;

// x[4] -> fc (4 -> 2, with bias: 10 parameters) -> mse loss against t[2].
Graph tiny_linear() {
  GraphBuilder b("tiny", "");
  auto x = b.input("x", {4});
  auto y = b.linear("fc", x, 2);
  b.add_loss(b.mse_loss("loss", y, b.input("t", {2})));
  auto g = Graph::build(b.finish());
  INFO(g.status().to_string());
  REQUIRE(g.ok());
  return std::move(g).value();
}

MemoryOptions opts(graphpipe::v1::OptimizerKind optimizer, graphpipe::v1::Precision precision) {
  MemoryOptions o;
  o.optimizer = optimizer;
  o.precision = precision;
  return o;
}

}  // namespace

TEST_CASE("the tiny linear keeps only its 8-byte output per sample, with no scratch") {
  const Graph g = tiny_linear();
  const auto& fc = g.op(g.index_of("fc"));
  REQUIRE(fc.cost.param_count == 10);
  REQUIRE(fc.cost.activation_bytes == 8);
  REQUIRE(fc.cost.saved_bytes == 0);
  REQUIRE(fc.cost.workspace_bytes == 0);
  REQUIRE(fc.output_bytes == 8);
  const auto& loss = g.op(g.index_of("loss"));
  REQUIRE(loss.cost.activation_bytes == 4);  // one float per sample
}

TEST_CASE("fp32 model state by hand for SGD, momentum and Adam") {
  const Graph g = tiny_linear();
  const std::vector<int> stage{g.index_of("fc")};
  struct Expect {
    graphpipe::v1::OptimizerKind optimizer;
    int64_t optimizer_bytes;
  };
  for (const Expect& e : {Expect{graphpipe::v1::OPTIMIZER_KIND_SGD, 0},
                          Expect{graphpipe::v1::OPTIMIZER_KIND_MOMENTUM, 40},
                          Expect{graphpipe::v1::OPTIMIZER_KIND_ADAM, 80},
                          Expect{graphpipe::v1::OPTIMIZER_KIND_UNSPECIFIED, 80}}) {
    INFO("optimizer " << e.optimizer);
    const MemoryBreakdown m = stage_memory(g, stage, 1, 0, 1, opts(e.optimizer, kFp32));
    CHECK(m.weight_bytes == 40);
    CHECK(m.gradient_bytes == 40);
    CHECK(m.optimizer_bytes == e.optimizer_bytes);
    CHECK(m.activation_bytes == 0);  // no sample in flight
  }
}

// Per sample, stage {fc, loss} (x and t are other stages' inputs): kept are x (16 bytes), t (8),
// fc's output (8) and the loss (4); the gradients of fc's output (8) and of the loss (4) stay
// inside the stage, so they are one call's workspace.
TEST_CASE("bf16 halves weights, gradients and activations and adds an fp32 master copy") {
  const Graph g = tiny_linear();
  const std::vector<int> stage{g.index_of("fc"), g.index_of("loss")};
  const auto adam =
      stage_memory(g, stage, 4, 8, 1, opts(graphpipe::v1::OPTIMIZER_KIND_ADAM, kBf16));
  CHECK(adam.weight_bytes == 20);
  CHECK(adam.gradient_bytes == 20);
  CHECK(adam.optimizer_bytes == 80 + 40);  // two fp32 moments + fp32 master weights
  CHECK(adam.activation_bytes == 8 * 36 / 2);
  CHECK(adam.workspace_bytes == 4 * 12 / 2);
  const auto sgd = stage_memory(g, stage, 4, 8, 1, opts(graphpipe::v1::OPTIMIZER_KIND_SGD, kBf16));
  CHECK(sgd.optimizer_bytes == 40);  // the master copy only
  const auto momentum =
      stage_memory(g, stage, 4, 8, 1, opts(graphpipe::v1::OPTIMIZER_KIND_MOMENTUM, kBf16));
  CHECK(momentum.optimizer_bytes == 80);
}

TEST_CASE("activations scale with the in-flight samples and divide by the data-parallel degree") {
  const Graph g = tiny_linear();
  const std::vector<int> stage{g.index_of("fc"), g.index_of("loss")};
  const auto o = opts(graphpipe::v1::OPTIMIZER_KIND_ADAM, kFp32);
  CHECK(stage_memory(g, stage, 8, 8, 1, o).activation_bytes == 8 * 36);
  CHECK(stage_memory(g, stage, 8, 16, 1, o).activation_bytes == 16 * 36);
  CHECK(stage_memory(g, stage, 8, 16, 2, o).activation_bytes == 8 * 36);
  CHECK(stage_memory(g, stage, 8, 16, 3, o).activation_bytes == 6 * 36);  // ceil(16 / 3)
  // Replicas hold the whole model state each.
  CHECK(stage_memory(g, stage, 8, 16, 4, o).weight_bytes == 40);
  CHECK(stage_memory(g, stage, 8, 16, 4, o).optimizer_bytes == 80);
}

TEST_CASE("gradients crossing the stage's boundary are kept per sample, inner ones once per call") {
  const Graph g = tiny_linear();
  const auto o = opts(graphpipe::v1::OPTIMIZER_KIND_SGD, kFp32);
  // fc alone: its output's gradient comes back from the loss's stage, so it waits per sample.
  const std::vector<int> fc_only{g.index_of("fc")};
  CHECK(stage_memory(g, fc_only, 8, 8, 1, o).activation_bytes == 8 * (16 + 8 + 8));
  CHECK(stage_memory(g, fc_only, 8, 8, 1, o).workspace_bytes == 0);
  const std::vector<int> stage{g.index_of("fc"), g.index_of("loss")};
  CHECK(stage_memory(g, stage, 8, 8, 1, o).workspace_bytes == 8 * 12);
  CHECK(stage_memory(g, stage, 8, 8, 2, o).workspace_bytes == 4 * 12);
  CHECK(stage_memory(g, stage, 8, 8, 3, o).workspace_bytes == 3 * 12);  // ceil(8 / 3)
  // Graph inputs have no gradient.
  const std::vector<int> only_input{g.index_of("x")};
  CHECK(stage_memory(g, only_input, 8, 8, 1, o).activation_bytes == 8 * 16);
  CHECK(stage_memory(g, only_input, 8, 8, 1, o).workspace_bytes == 0);
  CHECK(stage_memory(g, only_input, 8, 8, 1, o).weight_bytes == 0);
}

TEST_CASE("the largest kernel workspace adds to the inner gradients") {
  GraphBuilder b("relu", "");
  auto x = b.input("x", {4});
  auto y = b.linear("fc", x, 3, /*bias=*/true, "relu");  // workspace: 3 floats per sample
  b.add_loss(b.mse_loss("loss", y, b.input("t", {3})));
  auto g = Graph::build(b.finish());
  REQUIRE(g.ok());
  const std::vector<int> stage{g->index_of("fc"), g->index_of("loss")};
  const auto o = opts(graphpipe::v1::OPTIMIZER_KIND_SGD, kFp32);
  CHECK(kernel_workspace_bytes_per_sample(*g, stage, o) == 12);
  // Inner gradients: fc's output (12) and the loss (4); plus the kernel's 12.
  CHECK(stage_memory(*g, stage, 2, 2, 1, o).workspace_bytes == 2 * (12 + 4 + 12));
}

namespace {
// A model that measured fc: 100 bytes kept and 50 of workspace per sample.
class MeasuredFc final : public gp::cost::CostModel {
 public:
  gp::cost::OpTime op_time(const gp::model::OpNode&, int64_t) const override { return {}; }
  std::optional<gp::cost::OpMemory> op_memory(const gp::model::OpNode& op) const override {
    if (op.id() != "fc") return std::nullopt;
    return gp::cost::OpMemory{100, 50};
  }
  std::string_view name() const override { return "measured-fc"; }
};
}  // namespace

TEST_CASE("measured op memory replaces the catalogue's when the options carry it") {
  const Graph g = tiny_linear();
  const std::vector<int> stage{g.index_of("fc"), g.index_of("loss")};
  auto o = opts(graphpipe::v1::OPTIMIZER_KIND_SGD, kFp32);
  const MeasuredFc measured;
  o.measured = &measured;
  // fc's 8 catalogue bytes become 100; the loss keeps its catalogue 4.
  CHECK(stage_memory(g, stage, 1, 1, 1, o).activation_bytes == 16 + 8 + 100 + 4);
  CHECK(stage_memory(g, stage, 1, 1, 1, o).workspace_bytes == 12 + 50);
}

TEST_CASE("total adds every part") {
  const Graph g = tiny_linear();
  const std::vector<int> stage{g.index_of("x"), g.index_of("fc"), g.index_of("loss")};
  const auto m = stage_memory(g, stage, 2, 6, 1, opts(graphpipe::v1::OPTIMIZER_KIND_ADAM, kFp32));
  // Kept per sample: x 16, t 8, fc 8, loss 4; inner gradients per call: fc 8, loss 4.
  CHECK(m.activation_bytes == 6 * 36);
  CHECK(m.workspace_bytes == 2 * 12);
  CHECK(m.total() == m.weight_bytes + m.gradient_bytes + m.optimizer_bytes + m.activation_bytes +
                         m.workspace_bytes);
  CHECK(m.total() == 40 + 40 + 80 + 6 * 36 + 2 * 12);
}

TEST_CASE("stage parameter bytes are the all-reduce volume at the training precision") {
  const Graph g = tiny_linear();
  const std::vector<int> stage{g.index_of("x"), g.index_of("fc")};
  CHECK(stage_param_bytes(g, stage, kFp32) == 40);
  CHECK(stage_param_bytes(g, stage, graphpipe::v1::PRECISION_UNSPECIFIED) == 40);
  CHECK(stage_param_bytes(g, stage, kBf16) == 20);
  CHECK(stage_param_bytes(g, std::vector<int>{}, kFp32) == 0);
}

TEST_CASE("a whole zoo model's state matches its parameter count") {
  auto model = gp::model::build_zoo_model("tiny-mmt");
  REQUIRE(model.ok());
  auto g = Graph::build(*model);
  REQUIRE(g.ok());
  std::vector<int> all(static_cast<size_t>(g->num_ops()));
  std::iota(all.begin(), all.end(), 0);
  const auto o = opts(graphpipe::v1::OPTIMIZER_KIND_ADAM, kFp32);
  const auto m8 = stage_memory(*g, all, 4, 8, 1, o);
  const auto m16 = stage_memory(*g, all, 4, 16, 1, o);
  CHECK(m8.weight_bytes == 4 * g->total_params());
  CHECK(m8.optimizer_bytes == 8 * g->total_params());
  CHECK(m8.activation_bytes > 0);
  CHECK(m16.activation_bytes == 2 * m8.activation_bytes);
  CHECK(m16.workspace_bytes == m8.workspace_bytes);  // same micro-batch
  CHECK(stage_param_bytes(*g, all, kFp32) == 4 * g->total_params());
}

TEST_CASE("recomputing keeps the boundary per in-flight sample and one call of the rest") {
  const Graph g = tiny_linear();
  auto o = opts(graphpipe::v1::OPTIMIZER_KIND_SGD, kFp32);
  // Stage {fc, loss}, x and t from other stages. Per sample: x 16 and t 8 cross the boundary
  // (graph inputs: no gradients); fc's output 8 and the loss 4 stay inside, as do their
  // gradients (8 + 4). 2 samples per call, 6 in flight.
  const std::vector<int> stage{g.index_of("fc"), g.index_of("loss")};
  const MemoryBreakdown kept = stage_memory(g, stage, 2, 6, 1, o);
  CHECK(kept.activation_bytes == 6 * (16 + 8 + 8 + 4));
  CHECK(kept.workspace_bytes == 2 * (8 + 4));
  o.recompute = true;
  const MemoryBreakdown recomputed = stage_memory(g, stage, 2, 6, 1, o);
  CHECK(recomputed.weight_bytes == kept.weight_bytes);
  CHECK(recomputed.gradient_bytes == kept.gradient_bytes);
  CHECK(recomputed.optimizer_bytes == kept.optimizer_bytes);
  CHECK(recomputed.activation_bytes == 6 * (16 + 8));
  CHECK(recomputed.workspace_bytes == 2 * ((8 + 4) + (8 + 4)));  // inner gradients + fc, loss
  CHECK(recomputed.total() == 40 + 40 + 6 * 24 + 2 * 24);
  CHECK(kept.total() - recomputed.total() == (6 - 2) * 12);
  // Stage {x, fc}: fc's output goes to the loss's stage, so its value and gradient (8 + 8) stay
  // per sample; x (16) is recomputed, its samples generated again.
  const std::vector<int> first{g.index_of("x"), g.index_of("fc")};
  const MemoryBreakdown first_recomputed = stage_memory(g, first, 2, 6, 1, o);
  CHECK(first_recomputed.activation_bytes == 6 * (8 + 8));
  CHECK(first_recomputed.workspace_bytes == 2 * 16);
  // bf16 halves both parts.
  o.precision = kBf16;
  const MemoryBreakdown half = stage_memory(g, stage, 2, 6, 1, o);
  CHECK(half.activation_bytes == 6 * 24 / 2);
  CHECK(half.workspace_bytes == 2 * 24 / 2);
}

TEST_CASE("sharding the optimizer keeps a rounded-up 1/r of the state and master weights") {
  const Graph g = tiny_linear();
  const std::vector<int> stage{g.index_of("fc")};  // 10 parameters
  auto o = opts(graphpipe::v1::OPTIMIZER_KIND_ADAM, kFp32);
  o.shard_optimizer = true;
  // 3 replicas: ceil(10 / 3) = 4 parameters' two fp32 moments per replica.
  const MemoryBreakdown three = stage_memory(g, stage, 3, 6, 3, o);
  CHECK(three.weight_bytes == 40);
  CHECK(three.gradient_bytes == 40);
  CHECK(three.optimizer_bytes == 4 * 2 * 4);
  // 2 replicas: 5 each; one replica has nothing to shard over.
  CHECK(stage_memory(g, stage, 2, 4, 2, o).optimizer_bytes == 5 * 2 * 4);
  CHECK(stage_memory(g, stage, 1, 2, 1, o).optimizer_bytes == 80);
  // More replicas than parameters: one each (the executor's slice of 1, some unused).
  CHECK(stage_memory(g, stage, 16, 16, 16, o).optimizer_bytes == 1 * 2 * 4);
  // Only the optimizer state changes.
  o.shard_optimizer = false;
  const MemoryBreakdown whole = stage_memory(g, stage, 3, 6, 3, o);
  CHECK(whole.optimizer_bytes == 80);
  CHECK(whole.total() - three.total() == 80 - 32);
  // bf16: the fp32 master weights are sharded with the moments, ceil(10 / 4) = 3 parameters.
  o = opts(graphpipe::v1::OPTIMIZER_KIND_MOMENTUM, kBf16);
  o.shard_optimizer = true;
  const MemoryBreakdown bf16 = stage_memory(g, stage, 4, 4, 4, o);
  CHECK(bf16.weight_bytes == 20);
  CHECK(bf16.optimizer_bytes == 3 * 4 * (1 + 1));
  // A replica's step streams its slice: ceil(40 / 4) weight and gradient bytes.
  const MemoryBreakdown step = optimizer_step_state(bf16, 4, true);
  CHECK(step.weight_bytes == 5);
  CHECK(step.gradient_bytes == 5);
  CHECK(step.optimizer_bytes == bf16.optimizer_bytes);
  CHECK(optimizer_step_state(bf16, 4, false).weight_bytes == 20);
  CHECK(optimizer_step_state(bf16, 1, true).weight_bytes == 20);
}
