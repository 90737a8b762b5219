// The model zoo: every model validates and has the published structure.
#include "gp/model/zoo.h"

#include <catch2/catch.hpp>

#include "gp/model/graph.h"
#include "gp/model/summary.h"

using namespace gp::model;

namespace {

Graph build(const std::string& spec) {
  auto m = build_zoo_model(spec);
  INFO(spec << ": " << m.status().to_string());
  REQUIRE(m.ok());
  auto g = Graph::build(*m);
  INFO(g.status().to_string());
  REQUIRE(g.ok());
  return std::move(g).value();
}

int count_type(const Graph& g, std::string_view type) {
  int n = 0;
  for (const auto& node : g.ops()) n += node.type() == type ? 1 : 0;
  return n;
}

}  // namespace

TEST_CASE("every zoo model builds and validates with its defaults") {
  for (const auto& entry : zoo_entries()) {
    INFO(entry.name);
    Graph g = build(std::string(entry.name));
    CHECK(g.model().name() == entry.name);
    CHECK(g.model().source() == "zoo:" + std::string(entry.name));
    CHECK(g.loss_ops().size() == 1);
  }
}

TEST_CASE("mmt has 4 branches of 8 transformer layers and about 0.4 billion parameters") {
  Graph g = build("zoo:mmt");
  const auto s = summarize(g);
  CHECK(s.num_branches == 4);
  CHECK(count_type(g, "multi_head_attention") == 32);
  CHECK(count_type(g, "layer_norm") == 64);
  CHECK(count_type(g, "concat") == 1);
  // 32 layers x (12 h^2 + 13 h) + head (4h x h + h), h = 1024.
  CHECK(s.num_params == 32 * 12596224LL + 4096 * 1024 + 1024);
  CHECK(s.num_params > 400'000'000);
  CHECK(s.num_params < 420'000'000);
}

TEST_CASE("zoo parameters override the defaults") {
  Graph g = build("zoo:mmt?branches=2&layers=3");
  CHECK(summarize(g).num_branches == 2);
  CHECK(count_type(g, "multi_head_attention") == 6);
}

TEST_CASE("dlrm has 7 dense and 7 sparse branches over 1M-row tables") {
  Graph g = build("zoo:dlrm");
  CHECK(summarize(g).num_branches == 14);
  CHECK(count_type(g, "embedding_bag") == 7);
  // 7 dense branches x 4 layers + 2 top layers + output.
  CHECK(count_type(g, "linear") == 7 * 4 + 2 + 1);
  const auto& emb = g.op(g.index_of("sparse0.embedding"));
  CHECK(emb.cost.param_count == 1000000LL * 64);
}

TEST_CASE("candle-uno has 7 feature branches of 4 layers and two dose inputs") {
  Graph g = build("zoo:candle-uno");
  CHECK(summarize(g).num_branches == 7);
  CHECK(count_type(g, "linear") == 7 * 4 + 2 + 1);
  // 7 features + 2 doses + label.
  CHECK(count_type(g, "input") == 10);
  const auto& concat = g.op(g.index_of("concat"));
  CHECK(concat.proto->outputs(0).shape(0) == 7 * 4096 + 2);
}

TEST_CASE("transformer is a single chain with the mmt layer configuration") {
  Graph g = build("zoo:transformer");
  CHECK(summarize(g).num_branches == 1);
  CHECK(count_type(g, "multi_head_attention") == 32);
  CHECK(count_type(g, "concat") == 0);
}

TEST_CASE("nbranch sweeps the branch count") {
  for (int n : {1, 2, 8, 16}) {
    Graph g = build("zoo:nbranch?branches=" + std::to_string(n));
    CHECK(summarize(g).num_branches == n);
    CHECK(count_type(g, "multi_head_attention") == 4 * n);
  }
}

TEST_CASE("tiny models are small enough to train on a CPU") {
  for (const char* name :
       {"tiny-mmt", "tiny-dlrm", "tiny-candle-uno", "tiny-transformer", "tiny-nbranch"}) {
    INFO(name);
    Graph g = build(name);
    CHECK(g.total_params() < 100'000);
    CHECK(summarize(g).num_branches >= 1);
  }
  CHECK(summarize(build("tiny-mmt")).num_branches == 2);
  CHECK(summarize(build("tiny-dlrm")).num_branches == 4);
  CHECK(summarize(build("tiny-candle-uno")).num_branches == 3);
}

TEST_CASE("bad zoo specs are clear errors") {
  auto unknown = build_zoo_model("zoo:resnet");
  REQUIRE_FALSE(unknown.ok());
  CHECK_THAT(unknown.status().message(), Catch::Contains("unknown zoo model 'resnet'"));
  CHECK_THAT(unknown.status().message(), Catch::Contains("mmt"));

  auto bad_key = build_zoo_model("mmt?layerz=2");
  REQUIRE_FALSE(bad_key.ok());
  CHECK_THAT(bad_key.status().message(), Catch::Contains("no parameter 'layerz'"));

  for (const char* spec : {"mmt?layers=0", "mmt?layers=-1", "mmt?layers=two", "mmt?layers="}) {
    INFO(spec);
    auto bad = build_zoo_model(spec);
    REQUIRE_FALSE(bad.ok());
    CHECK(bad.status().code() == gp::StatusCode::kInvalidArgument);
  }
  auto bad_heads = build_zoo_model("mmt?heads=3");
  REQUIRE_FALSE(bad_heads.ok());
  CHECK_THAT(bad_heads.status().message(), Catch::Contains("heads = 3 must divide hidden = 1024"));
}

TEST_CASE("branches times layers beyond 16384 are refused before the model is built") {
  const auto huge = build_zoo_model("zoo:mmt?layers=1000000000");
  REQUIRE_FALSE(huge.ok());
  CHECK_THAT(huge.status().message(),
             Catch::Contains("branches 4 x layers 1000000000 exceeds 16384"));
  CHECK_FALSE(build_zoo_model("zoo:dlrm?dense_branches=200&sparse_branches=200").ok());
  CHECK(build_zoo_model("zoo:mmt?branches=4&layers=4096").ok());
}

TEST_CASE("a model with more operators than Graph::kMaxOps is refused naming the count") {
  ModelGraph m;
  for (int i = 0; i <= Graph::kMaxOps; ++i) {
    auto* op = m.add_ops();
    op->set_id("x" + std::to_string(i));
    op->set_type("input");
  }
  const auto g = Graph::build(m);
  REQUIRE_FALSE(g.ok());
  CHECK_THAT(g.status().message(), Catch::Contains("100001 operators, more than the 100000"));
}
