// The planner's memory model (gp::cost::stage_memory) against what a StageRunner allocates: the
// bytes a plan predicts for a stage are the bytes the executor holds for it.
#include <algorithm>
#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "gp/cost/memory_model.h"
#include "gp/exec/op_kernel.h"
#include "gp/exec/stage_runner.h"
#include "gp/model/graph.h"
#include "gp/model/onnx_import.h"
#include "gp/model/zoo.h"

namespace {

using gp::model::Graph;

// A zoo model, or (NAME.onnx) a torch export of test/data/onnx/torch2.
Graph zoo_graph(const std::string& name) {
  auto model = name.ends_with(".onnx")
                   ? gp::model::import_onnx(std::string(GP_TEST_DATA_DIR) + "/onnx/torch2/" + name)
                   : gp::model::build_zoo_model(name);
  INFO(model.status().to_string());
  REQUIRE(model.ok());
  auto g = Graph::build(*model);
  INFO(g.status().to_string());
  REQUIRE(g.ok());
  return std::move(g).value();
}

// Outputs of `ops` read by ops outside them: what the stage sends on.
std::vector<graphpipe::v1::TensorRef> exports_of(const Graph& g, const std::vector<int>& ops) {
  std::vector<char> in(static_cast<size_t>(g.num_ops()), 0);
  for (int op : ops) in[static_cast<size_t>(op)] = 1;
  std::vector<graphpipe::v1::TensorRef> out;
  for (const auto& node : g.ops()) {
    if (in[static_cast<size_t>(node.index)]) continue;
    for (const auto& ref : node.proto->inputs()) {
      const int producer = g.index_of(ref.op());
      if (!in[static_cast<size_t>(producer)]) continue;
      bool seen = false;
      for (const auto& e : out) seen |= e.op() == ref.op() && e.output() == ref.output();
      if (!seen) out.push_back(ref);
    }
  }
  return out;
}

}  // namespace

TEST_CASE("a stage runner allocates exactly the memory the planner's model predicts") {
  graphpipe::v1::TrainingConfig training;
  training.set_optimizer(graphpipe::v1::OPTIMIZER_KIND_ADAM);
  training.set_learning_rate(1e-3);
  gp::cost::MemoryOptions options;
  options.optimizer = graphpipe::v1::OPTIMIZER_KIND_ADAM;
  options.precision = graphpipe::v1::PRECISION_FP32;
  constexpr int64_t kMicroBatch = 3;
  constexpr int kSlots = 2;
  // Recomputing (Stage.recompute), a runner keeps only its boundary tensors per slot and one
  // micro-batch of the rest: the model predicts that split too.
  for (const bool recompute : {false, true}) {
    options.recompute = recompute;
    // The torch exports reshape inside stages (a reshape's output is then its input's memory)
    // and across their boundaries (then it is not).
    for (const std::string name :
         {"tiny-mmt", "tiny-dlrm", "tiny-candle-uno", "tiny-transformer", "tiny-nbranch",
          "timm_qkv_legacy.onnx", "window_fold_legacy.onnx", "static_reshape_dynamo.onnx"}) {
      const Graph g = zoo_graph(name);
      // Three stages of the topological order: each a prefix-closed cut, so convex.
      const auto& topo = g.topo_order();
      const size_t n = topo.size();
      const std::vector<size_t> cuts = {0, n / 3, 2 * n / 3, n};
      for (size_t s = 0; s + 1 < cuts.size(); ++s) {
        const std::vector<int> ops(topo.begin() + static_cast<std::ptrdiff_t>(cuts[s]),
                                   topo.begin() + static_cast<std::ptrdiff_t>(cuts[s + 1]));
        INFO(name << " stage " << s << " (" << ops.size() << " ops)"
                  << (recompute ? ", recomputing" : ""));
        auto layout = gp::exec::layout_stage(g, ops, exports_of(g, ops));
        INFO(layout.status().to_string());
        REQUIRE(layout.ok());
        auto runner = gp::exec::StageRunner::create(g, *layout,
                                                    {.max_batch = kMicroBatch,
                                                     .slots = kSlots,
                                                     .training = training,
                                                     .recompute = recompute});
        INFO(runner.status().to_string());
        REQUIRE(runner.ok());
        const gp::exec::StageMemory& held = (*runner)->memory();
        const gp::cost::MemoryBreakdown predicted =
            gp::cost::stage_memory(g, ops, kMicroBatch, kSlots * kMicroBatch, 1, options);
        CHECK(held.weight_bytes == predicted.weight_bytes);
        CHECK(held.gradient_bytes == predicted.gradient_bytes);
        CHECK(held.optimizer_bytes == predicted.optimizer_bytes);
        CHECK(held.activation_bytes == predicted.activation_bytes);
        // The catalogue's kernel workspace is the most any backend asks for (CUDA's attention keeps
        // every head's probability gradients, the CPU's one head's at a time): the runner holds
        // that much less on the CPU, and not a byte more.
        int64_t cpu_workspace_floats = 0;
        for (int op : ops) {
          auto kernel = gp::exec::make_cpu_kernel(g.op(op));
          REQUIRE(kernel.ok());
          cpu_workspace_floats =
              std::max(cpu_workspace_floats, (*kernel)->workspace_floats_per_sample());
        }
        const int64_t slack = (gp::cost::kernel_workspace_bytes_per_sample(g, ops, options) -
                               4 * cpu_workspace_floats) *
                              kMicroBatch;
        CHECK(slack >= 0);
        CHECK(held.workspace_bytes + slack == predicted.workspace_bytes);
        CHECK(held.total() + slack == predicted.total());
        CHECK(held.activation_bytes > 0);
        if (recompute) {
          options.recompute = false;
          const auto kept =
              gp::cost::stage_memory(g, ops, kMicroBatch, kSlots * kMicroBatch, 1, options);
          options.recompute = true;
          // Per slot only the boundary: less than every activation, whatever one micro-batch adds.
          CHECK(predicted.activation_bytes < kept.activation_bytes);
          CHECK(predicted.workspace_bytes > kept.workspace_bytes);
        }
      }
    }
  }
}

TEST_CASE("a reshape inside a stage holds no activation memory of its own") {
  // timm's qkv: reshape, the permute's windows (q, k, v), the heads' reshape back. One stage of
  // the whole graph: every reshape reads a tensor of the stage; those of trained tensors are
  // views.
  const Graph g = zoo_graph("timm_qkv_legacy.onnx");
  const auto& topo = g.topo_order();
  const std::vector<int> ops(topo.begin(), topo.end());
  graphpipe::v1::TrainingConfig training;
  training.set_optimizer(graphpipe::v1::OPTIMIZER_KIND_SGD);
  training.set_learning_rate(0.1);
  constexpr int64_t kMicroBatch = 2;
  auto layout = gp::exec::layout_stage(g, ops, {});
  REQUIRE(layout.ok());
  auto runner = gp::exec::StageRunner::create(
      g, *layout, {.max_batch = kMicroBatch, .slots = 1, .training = training});
  REQUIRE(runner.ok());
  double every_op = 0, views = 0;
  int reshapes = 0;
  for (int op : ops) {
    const auto& node = g.op(op);
    every_op += node.cost.activation_bytes;
    if (!node.is_view()) continue;
    ++reshapes;
    const int producer = g.index_of(node.proto->inputs(0).op());
    if (g.op(producer).info->is_input) continue;  // a graph input has no gradient: not a view
    views += node.cost.activation_bytes;
  }
  CHECK(reshapes >= 2);
  CHECK(views > 0);
  // Values kept per sample: every op's outputs less the views'.
  CHECK((*runner)->memory().activation_bytes ==
        static_cast<int64_t>(every_op - views) * kMicroBatch);
}

TEST_CASE("a sharded stage runner allocates the optimizer state the memory model predicts") {
  constexpr int64_t kPerReplica = 2;
  constexpr int kSlots = 2;
  for (const auto kind :
       {graphpipe::v1::OPTIMIZER_KIND_ADAM, graphpipe::v1::OPTIMIZER_KIND_MOMENTUM}) {
    graphpipe::v1::TrainingConfig training;
    training.set_optimizer(kind);
    training.set_learning_rate(1e-3);
    gp::cost::MemoryOptions options;
    options.optimizer = kind;
    options.shard_optimizer = true;
    for (const std::string name : {"tiny-mmt", "tiny-transformer"}) {
      const Graph g = zoo_graph(name);
      const auto& topo = g.topo_order();
      const std::vector<int> ops(topo.begin(), topo.end());
      auto layout = gp::exec::layout_stage(g, ops, exports_of(g, ops));
      REQUIRE(layout.ok());
      // 3 and 7 replicas: neither divides the parameter count, so slices are rounded up.
      for (const int replicas : {1, 3, 7}) {
        const gp::cost::MemoryBreakdown predicted = gp::cost::stage_memory(
            g, ops, kPerReplica * replicas, kSlots * kPerReplica * replicas, replicas, options);
        int64_t covered = 0, params = 0;
        for (int index = 0; index < replicas; ++index) {
          INFO(name << ", " << graphpipe::v1::OptimizerKind_Name(kind) << ", replica " << index
                    << " of " << replicas);
          auto runner = gp::exec::StageRunner::create(g, *layout,
                                                      {.max_batch = kPerReplica,
                                                       .slots = kSlots,
                                                       .training = training,
                                                       .shard_index = index,
                                                       .shard_count = replicas});
          INFO(runner.status().to_string());
          REQUIRE(runner.ok());
          const gp::exec::StageMemory& held = (*runner)->memory();
          CHECK(held.weight_bytes == predicted.weight_bytes);
          CHECK(held.gradient_bytes == predicted.gradient_bytes);
          CHECK(held.optimizer_bytes == predicted.optimizer_bytes);
          CHECK(held.activation_bytes == predicted.activation_bytes);
          CHECK((*runner)->sharded() == (replicas > 1));
          CHECK((*runner)->shard_begin() == covered);
          covered = (*runner)->shard_end();
          params = (*runner)->param_count();
        }
        CHECK(covered == params);  // the slices tile the parameters
        const int64_t words = kind == graphpipe::v1::OPTIMIZER_KIND_ADAM ? 2 : 1;
        CHECK(predicted.optimizer_bytes == (params + replicas - 1) / replicas * 4 * words);
      }
    }
  }
  graphpipe::v1::TrainingConfig training;
  training.set_learning_rate(1e-3);
  const Graph g = zoo_graph("tiny-mmt");
  const std::vector<int> ops(g.topo_order().begin(), g.topo_order().end());
  auto layout = gp::exec::layout_stage(g, ops, exports_of(g, ops));
  REQUIRE(layout.ok());
  auto bad = gp::exec::StageRunner::create(
      g, *layout, {.max_batch = 1, .training = training, .shard_index = 2, .shard_count = 2});
  CHECK(bad.status().code() == gp::StatusCode::kInvalidArgument);
  CHECK(bad.status().message().find("shard_index = 2") != std::string::npos);
}
