// Graph::build validation (each error names the op and the field) and graph utilities.
#include "gp/model/graph.h"

#include <catch2/catch.hpp>

#include "gp/model/builder.h"
#include "gp/model/summary.h"

using namespace gp::model;

namespace {

// input -> fc -> loss(target): a valid base that each case breaks in one way.
GraphBuilder valid_base() {
  GraphBuilder b("m", "");
  auto x = b.input("x", {4});
  auto y = b.linear("fc", x, 2);
  b.add_loss(b.mse_loss("loss", y, b.input("t", {2})));
  return b;
}

std::string build_error(const ModelGraph& m) {
  auto r = Graph::build(m);
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().code() == gp::StatusCode::kInvalidArgument);
  return r.status().message();
}

Operator* find(ModelGraph& m, const std::string& id) {
  for (auto& op : *m.mutable_ops()) {
    if (op.id() == id) return &op;
  }
  FAIL("no op " << id);
  return nullptr;
}

}  // namespace

TEST_CASE("a valid model builds and fills in outputs and params") {
  auto b = valid_base();
  auto g = Graph::build(b.finish());
  REQUIRE(g.ok());
  CHECK(g->num_ops() == 4);
  const auto& fc = g->op(g->index_of("fc"));
  CHECK(fc.proto->outputs(0).shape(0) == 2);
  CHECK(fc.proto->params_size() == 2);
  CHECK(g->loss_ops() == std::vector<int>{g->index_of("loss")});
}

TEST_CASE("an unknown op type is rejected naming the op and the type") {
  auto b = valid_base();
  find(b.model(), "fc")->set_type("conv9d");
  const auto msg = build_error(b.finish());
  CHECK_THAT(msg, Catch::Contains("ops[1] 'fc'"));
  CHECK_THAT(msg, Catch::Contains("unknown op type 'conv9d'"));
}

TEST_CASE("a dangling tensor reference is rejected naming the input") {
  auto b = valid_base();
  find(b.model(), "fc")->mutable_inputs(0)->set_op("nowhere");
  const auto msg = build_error(b.finish());
  CHECK_THAT(msg, Catch::Contains("'fc'"));
  CHECK_THAT(msg, Catch::Contains("inputs[0]: dangling tensor reference 'nowhere':0"));
}

TEST_CASE("a reference to a missing output index is rejected") {
  auto b = valid_base();
  find(b.model(), "fc")->mutable_inputs(0)->set_output(3);
  const auto msg = build_error(b.finish());
  CHECK_THAT(msg, Catch::Contains("dangling tensor reference 'x':3"));
  CHECK_THAT(msg, Catch::Contains("has 1 output(s)"));
}

TEST_CASE("a duplicate id is rejected naming both positions") {
  auto b = valid_base();
  b.input("fc", {4});
  const auto msg = build_error(b.finish());
  CHECK_THAT(msg, Catch::Contains("duplicate id 'fc'"));
  CHECK_THAT(msg, Catch::Contains("also ops[1]"));
}

TEST_CASE("a cycle is rejected naming the ops on it") {
  GraphBuilder b("m", "");
  auto x = b.input("x", {4});
  b.add("a", {x, ref("c")});
  b.relu("b", ref("a"));
  b.relu("c", ref("b"));
  b.add_loss(b.mse_loss("loss", ref("c"), b.input("t", {4})));
  const auto msg = build_error(b.finish());
  CHECK_THAT(msg, Catch::Contains("cycle"));
  CHECK_THAT(msg, Catch::Contains("'a'"));
  CHECK_THAT(msg, Catch::Contains("'b'"));
  CHECK_THAT(msg, Catch::Contains("'c'"));
}

TEST_CASE("a self-loop is rejected as a cycle") {
  auto b = valid_base();
  find(b.model(), "fc")->mutable_inputs(0)->set_op("fc");
  CHECK_THAT(build_error(b.finish()), Catch::Contains("consumes its own output (cycle)"));
}

TEST_CASE("a shape mismatch found by shape inference names both shapes") {
  GraphBuilder b("m", "");
  auto x = b.input("x", {4});
  auto y = b.input("y", {5});
  auto s = b.add("sum", {x, y});
  b.add_loss(b.mse_loss("loss", s, b.input("t", {4})));
  const auto msg = build_error(b.finish());
  CHECK_THAT(msg, Catch::Contains("ops[2] 'sum' (add)"));
  CHECK_THAT(msg,
             Catch::Contains("inputs[1]: shape [5] float32 differs from inputs[0] [4] float32"));
}

TEST_CASE("a declared output that disagrees with shape inference is a shape mismatch") {
  auto b = valid_base();
  *find(b.model(), "fc")->add_outputs() = make_spec({3});
  const auto msg = build_error(b.finish());
  CHECK_THAT(msg, Catch::Contains("outputs[0]: shape mismatch: declared [3] float32, shape "
                                  "inference gives [2] float32"));
}

TEST_CASE("a non-positive dimension is rejected naming the field") {
  auto b = valid_base();
  find(b.model(), "x")->mutable_outputs(0)->set_shape(0, 0);
  const auto msg = build_error(b.finish());
  CHECK_THAT(msg, Catch::Contains("ops[0] 'x' (input): outputs[0].shape[0] = 0"));
}

TEST_CASE("a non-positive attribute is rejected naming the attribute and value") {
  auto b = valid_base();
  set_attr(*find(b.model(), "fc"), "out_features", int64_t{-3});
  const auto msg = build_error(b.finish());
  CHECK_THAT(msg, Catch::Contains("'fc' (linear): attrs.out_features = -3, must be > 0"));
}

TEST_CASE("a missing required attribute is rejected") {
  auto b = valid_base();
  find(b.model(), "fc")->mutable_attrs()->erase("out_features");
  CHECK_THAT(build_error(b.finish()),
             Catch::Contains("attrs.out_features: required attribute is missing"));
}

TEST_CASE("a missing loss is rejected") {
  auto b = valid_base();
  b.model().clear_losses();
  CHECK_THAT(build_error(b.finish()), Catch::Contains("losses: missing loss"));
}

TEST_CASE("a loss that names a non-loss op is rejected") {
  auto b = valid_base();
  b.model().mutable_losses(0)->set_op("fc");
  CHECK_THAT(build_error(b.finish()),
             Catch::Contains("losses[0]: 'fc' is a linear op, not a loss"));
}

TEST_CASE("a wrong number of inputs is rejected") {
  auto b = valid_base();
  *find(b.model(), "fc")->add_inputs() = ref("x");
  CHECK_THAT(build_error(b.finish()), Catch::Contains("'fc' (linear): inputs: expected 1, got 2"));
}

TEST_CASE("an input op without a declared shape is rejected") {
  auto b = valid_base();
  find(b.model(), "x")->clear_outputs();
  CHECK_THAT(build_error(b.finish()), Catch::Contains("declares exactly one output"));
}

TEST_CASE("an empty model is rejected") {
  CHECK_THAT(build_error(ModelGraph()), Catch::Contains("no operators"));
}

TEST_CASE("topological order puts producers first, and sources and sinks are found") {
  GraphBuilder b("m", "");
  // Declared out of order on purpose: the loss first.
  b.add_loss(b.mse_loss("loss", ref("merge"), ref("t")));
  b.add("merge", {ref("left"), ref("right")});
  b.relu("left", ref("x"));
  b.gelu("right", ref("x"));
  b.input("x", {4});
  b.input("t", {4});
  auto g = Graph::build(b.finish());
  REQUIRE(g.ok());
  std::vector<int> position(g->num_ops());
  for (int k = 0; k < g->num_ops(); ++k) position[g->topo_order()[k]] = k;
  for (const auto& node : g->ops()) {
    for (int p : node.preds) CHECK(position[p] < position[node.index]);
  }
  CHECK(g->sources() == std::vector<int>{g->index_of("x"), g->index_of("t")});
  CHECK(g->sinks() == std::vector<int>{g->index_of("loss")});
  CHECK(g->reaches(g->index_of("x"), g->index_of("loss")));
  CHECK(g->reaches(g->index_of("left"), g->index_of("merge")));
  CHECK_FALSE(g->reaches(g->index_of("left"), g->index_of("right")));
  CHECK_FALSE(g->reaches(g->index_of("loss"), g->index_of("x")));
  CHECK(g->max_parallel_branches() == 2);
}

TEST_CASE("branch count is the widest set of independent compute ops") {
  GraphBuilder b("m", "");
  std::vector<TensorRef> outs;
  for (int i = 0; i < 5; ++i) {
    auto x = b.input("x" + std::to_string(i), {4});
    outs.push_back(b.relu("r" + std::to_string(i) + "b", b.relu("r" + std::to_string(i), x)));
  }
  auto cat = b.concat("cat", outs);
  b.add_loss(b.mse_loss("loss", cat, b.input("t", {20})));
  auto g = Graph::build(b.finish());
  REQUIRE(g.ok());
  CHECK(g->max_parallel_branches() == 5);
}

TEST_CASE(
    "constants, and what is computed from them alone, are sources like inputs, not branches") {
  // A causal mask per layer, as an imported GPT holds: each constant reads only the batch size.
  GraphBuilder b("m", "");
  auto x = b.input("x", {4});
  auto h = x;
  for (int layer = 0; layer < 3; ++layer) {
    const std::string l = std::to_string(layer);
    // Computed from constants alone (a where of constant masks, as a legacy GPT export has).
    auto mask = b.where("mask" + l, b.constant("cond" + l, x, {4}, {1, 1, 0, 0}),
                        b.constant("one" + l, x, {4}, {1, 1, 1, 1}),
                        b.constant("zero" + l, x, {4}, {0, 0, 0, 0}));
    h = b.binary("masked" + l, b.relu("r" + l, h), mask, "mul");
  }
  b.add_loss(b.mse_loss("loss", h, b.input("t", {4})));
  auto g = Graph::build(b.finish());
  INFO(g.status().to_string());
  REQUIRE(g.ok());
  CHECK(g->max_parallel_branches() == 1);
}

namespace {

// x -> a (linear 4->4) -> b (linear 4->4) -> loss, with `members` (op, param) tied (none: no tie).
ModelGraph with_tie(const std::vector<std::pair<std::string, std::string>>& members) {
  GraphBuilder b("m", "");
  auto y = b.linear("b", b.linear("a", b.input("x", {4}), 4), 4);
  b.add_loss(b.mse_loss("loss", b.linear("c", y, 2), b.input("t", {2})));
  ModelGraph m = b.finish();
  if (members.empty()) return m;
  auto* tie = m.add_param_ties();
  for (const auto& [op, param] : members) {
    auto* r = tie->add_members();
    r->set_op(op);
    r->set_param(param);
  }
  return m;
}

}  // namespace

TEST_CASE("a tie of parameters of one shape resolves to their indices, the first one the source") {
  auto g = Graph::build(with_tie({{"a", "weight"}, {"b", "weight"}}));
  INFO(g.status().to_string());
  REQUIRE(g.ok());
  REQUIRE(g->ties().size() == 1);
  const auto& tie = g->ties()[0];
  REQUIRE(tie.size() == 2);
  CHECK(g->op(tie[0].op).id() == "a");
  CHECK(g->op(tie[1].op).id() == "b");
  CHECK(tie[1].param == 0);
  const auto* source = g->tie_source(tie[1].op, 0);
  REQUIRE(source != nullptr);
  CHECK(source->op == tie[0].op);
  CHECK(g->tie_source(tie[0].op, 0) == nullptr);
  CHECK(g->tie_source(tie[1].op, 1) == nullptr);  // b's bias is not tied
  // The tied weight counts once: a (4x4 + 4), b's bias (its weight is a's), c (2x4 + 2).
  CHECK(g->total_params() == (16 + 4) + 4 + (8 + 2));
}

TEST_CASE("the model summary counts a tied weight once, in parameters and in bytes") {
  auto g = Graph::build(with_tie({{"a", "weight"}, {"b", "weight"}}));
  REQUIRE(g.ok());
  const ModelSummary s = summarize(*g);
  CHECK(s.num_params == (16 + 4) + 4 + (8 + 2));
  CHECK(s.param_bytes == 4 * s.num_params);  // float32
  auto untied = Graph::build(with_tie({}));
  REQUIRE(untied.ok());
  CHECK(summarize(*untied).num_params == s.num_params + 16);
}

TEST_CASE("bad ties are rejected naming the tie, the member and what is wrong") {
  CHECK_THAT(build_error(with_tie({{"a", "weight"}})),
             Catch::Contains("param_ties[0]: 1 member(s)"));
  CHECK_THAT(build_error(with_tie({{"a", "weight"}, {"nope", "weight"}})),
             Catch::Contains("param_ties[0].members[1]: op 'nope' is not in the model"));
  CHECK_THAT(build_error(with_tie({{"a", "weight"}, {"b", "gamma"}})),
             Catch::Contains("param_ties[0].members[1]: op 'b' (linear) has no parameter 'gamma'"));
  CHECK_THAT(build_error(with_tie({{"a", "weight"}, {"c", "weight"}})),
             Catch::Contains("c.weight has shape [2, 4], the tie's first member [4, 4]"));
  CHECK_THAT(build_error(with_tie({{"a", "weight"}, {"a", "weight"}})),
             Catch::Contains("a.weight is tied more than once"));
}
