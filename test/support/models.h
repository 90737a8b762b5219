// Small models shared by the tests. Each REQUIREs that the model validates.
#pragma once

#include <catch2/catch.hpp>
#include <string>

#include "gp/graph/builder.h"
#include "gp/graph/graph.h"
#include "gp/graph/zoo.h"

namespace gp::testing {

inline graph::Graph build_graph(const graph::ModelGraph& model) {
  auto g = graph::Graph::build(model);
  INFO(g.status().to_string());
  REQUIRE(g.ok());
  return std::move(g).value();
}

// A zoo model by spec, e.g. "tiny-mmt?layers=3".
inline graph::Graph zoo_graph(const std::string& spec) {
  auto m = graph::build_zoo_model(spec);
  INFO(m.status().to_string());
  REQUIRE(m.ok());
  return build_graph(*m);
}

// x -> fc0 -> ... -> fc{n-1} -> mse_loss(t), 8 features wide.
inline graph::Graph chain_graph(int n) {
  graph::GraphBuilder b("chain", "");
  auto x = b.input("x", {8});
  for (int i = 0; i < n; ++i) x = b.linear("fc" + std::to_string(i), x, 8);
  b.add_loss(b.mse_loss("loss", x, b.input("t", {8})));
  return build_graph(b.finish());
}

}  // namespace gp::testing
