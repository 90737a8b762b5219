// Small models shared by the tests. Each REQUIREs that the model validates.
#pragma once

#include <catch2/catch.hpp>
#include <string>

#include "gp/model/builder.h"
#include "gp/model/graph.h"
#include "gp/model/zoo.h"
#include "graphpipe/v1/plan.pb.h"

namespace gp::testing {

inline model::Graph build_graph(const model::ModelGraph& model) {
  auto g = model::Graph::build(model);
  INFO(g.status().to_string());
  REQUIRE(g.ok());
  return std::move(g).value();
}

// A zoo model by spec, e.g. "tiny-mmt?layers=3".
inline model::Graph zoo_graph(const std::string& spec) {
  auto m = model::build_zoo_model(spec);
  INFO(m.status().to_string());
  REQUIRE(m.ok());
  return build_graph(*m);
}

// x -> fc0 -> ... -> fc{n-1} -> mse_loss(t), 8 features wide.
inline model::Graph chain_graph(int n) {
  model::GraphBuilder b("chain", "");
  auto x = b.input("x", {8});
  for (int i = 0; i < n; ++i) x = b.linear("fc" + std::to_string(i), x, 8);
  b.add_loss(b.mse_loss("loss", x, b.input("t", {8})));
  return build_graph(b.finish());
}

// The e2e tests' training: SGD at 0.05 or Adam at 0.01 (momentum 0.9, betas 0.9 and 0.999,
// epsilon 1e-8), seed 11.
inline graphpipe::v1::TrainingConfig training(graphpipe::v1::OptimizerKind kind) {
  graphpipe::v1::TrainingConfig t;
  t.set_optimizer(kind);
  t.set_learning_rate(kind == graphpipe::v1::OPTIMIZER_KIND_ADAM ? 0.01 : 0.05);
  t.set_momentum(0.9);
  t.set_adam_beta1(0.9);
  t.set_adam_beta2(0.999);
  t.set_adam_epsilon(1e-8);
  t.set_seed(11);
  return t;
}

// A small CNN of the vision and layout ops on [3, 8, 8] inputs: conv (stride 2, padding 1) to
// `channels` maps of 4x4, batch norm, relu, max and average pooling, then the channels' Gram
// matrix scaled by `gram_scale`, flattened into a linear of `outputs` and an mse loss.
inline model::Graph small_cnn(int64_t channels, int64_t outputs, double gram_scale) {
  model::GraphBuilder b("cnn", "");
  auto x = b.input("x", {3, 8, 8});
  auto conv = b.conv2d("conv", x, channels, {3, 3}, {2, 2}, {1, 1});  // [channels, 4, 4]
  auto act = b.relu("relu", b.batch_norm("bn", conv));
  auto mp = b.max_pool2d("mp", act, {3, 3}, {1, 1}, {1, 1});
  auto ap = b.avg_pool2d("ap", mp, {2, 2}, {}, {1, 1}, false);  // [channels, 3, 3]
  auto rows = b.reshape("rows", ap, {channels, 9});
  auto gram = b.matmul("gram", rows, b.transpose("cols", rows, {1, 0}));
  auto flat = b.reshape("flat", b.scale("scale", gram, gram_scale), {channels * channels});
  b.add_loss(b.mse_loss("loss", b.linear("fc", flat, outputs), b.input("t", {outputs})));
  return build_graph(b.finish());
}

// A language model whose output head reads the embedding table (weight tying): ids [4] ->
// embedding "emb" [10, 6] -> linear "mid" -> relu -> linear "head" (no bias, weight [10, 6] tied to
// emb.weight) -> mse_loss against t [4, 10]. Without `tied` the same graph with two parameters
// (the head's initial weight then still equals the embedding's: both come from param_values).
inline model::ModelGraph tied_lm_model(bool tied = true) {
  model::GraphBuilder b("tied-lm", "");
  auto e = b.embedding("emb", b.input("ids", {4}, graphpipe::v1::DATA_TYPE_INT64), 10, 6);
  auto h = b.relu("act", b.linear("mid", e, 6));
  b.add_loss(b.mse_loss("loss", b.linear("head", h, 10, /*bias=*/false), b.input("t", {4, 10})));
  std::vector<float> table(60);
  for (size_t k = 0; k < table.size(); ++k)
    table[k] = 0.03f * static_cast<float>((k * 7) % 11) - 0.15f;
  const std::string bytes(reinterpret_cast<const char*>(table.data()), table.size() * 4);
  model::ModelGraph m = b.finish();
  for (auto& op : *m.mutable_ops()) {
    if (op.id() == "emb") (*op.mutable_param_values())["weight"] = bytes;
    if (op.id() == "head" && !tied) (*op.mutable_param_values())["weight"] = bytes;
  }
  if (tied) {
    auto* tie = m.add_param_ties();
    auto* a = tie->add_members();
    a->set_op("emb");
    a->set_param("weight");
    auto* c = tie->add_members();
    c->set_op("head");
    c->set_param("weight");
  }
  return m;
}

}  // namespace gp::testing
