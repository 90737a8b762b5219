// Ops on tensors without the batch axis (model/src/onnx/unbatched_ops.cc): a constant table
// through a trained linear layer, then moved and picked as ONNX has it, the whole shape per
// sample. Numerics against torch: the torch2 pattern position_bias_mlp (Swin V2's continuous
// position bias) in test/e2e/onnx_torch_test.cc.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <string>
#include <vector>

#include "../support/models.h"
#include "../support/onnx_builder.h"
#include "gp/model/onnx_import.h"

namespace gp::model {
namespace {

constexpr int kInt64 = testing::kOnnxInt64;
using Onnx = testing::OnnxBuilder;

const graphpipe::v1::Operator& op(const Graph& g, const std::string& id) {
  return testing::imported_op(g, id);
}
std::vector<int64_t> ints(const graphpipe::v1::Operator& o, const std::string& attr) {
  const auto& list = o.attrs().at(attr).ints().values();
  return {list.begin(), list.end()};
}

// x [batch, 4, 3] + f(table), f: a linear layer over a constant [1, 3, 3, 2] table, Squeeze,
// GatherND of (row, column) pairs, Transpose, Gather of rows, Transpose: [4, 3].
Onnx table_bias() {
  Onnx b;
  b.input("x", {4, 3});
  std::vector<double> table;
  for (int k = 0; k < 18; ++k) table.push_back(0.1 * k - 0.8);
  b.constant("table", {1, 3, 3, 2}, table);
  b.weight("w", {2, 5});
  b.node("MatMul", {"table", "w"}, {"mlp"}, "mlp");
  b.init("axis0", {1}, {0}, kInt64);
  b.node("Squeeze", {"mlp", "axis0"}, {"grid"}, "grid");  // [3, 3, 5]
  b.init("pairs", {4, 2}, {0, 1, 2, 2, 1, 0, 0, 0}, kInt64);
  b.node("GatherND", {"grid", "pairs"}, {"picked"}, "picked");  // [4, 5]
  Onnx::attr(b.node("Transpose", {"picked"}, {"by_unit"}, "by_unit"), "perm",
             std::vector<int64_t>{1, 0});  // [5, 4]
  b.init("units", {3}, {2, 3, -1}, kInt64);
  b.node("Gather", {"by_unit", "units"}, {"units_picked"}, "units_picked");  // [3, 4]
  Onnx::attr(b.node("Transpose", {"units_picked"}, {"bias"}, "bias"), "perm",
             std::vector<int64_t>{1, 0});  // [4, 3]
  b.node("Add", {"x", "bias"}, {"y"}, "add");
  b.output("y", {4, 3});
  return b;
}

TEST_CASE("a constant table through a trained linear layer has the table's whole shape") {
  const auto g = testing::build_graph(table_bias().imported());
  CHECK(op(g, "mlp.table").type() == "constant");
  CHECK(shape_string(op(g, "mlp.table").outputs(0)) == "[1, 3, 3, 2] float32");
  CHECK(op(g, "mlp").type() == "linear");
  CHECK(shape_string(op(g, "mlp").outputs(0)) == "[1, 3, 3, 5] float32");
  CHECK(shape_string(op(g, "grid").outputs(0)) == "[3, 3, 5] float32");
}

TEST_CASE("GatherND and Gather of a tensor without the batch pick its rows as ONNX has them") {
  const auto g = testing::build_graph(table_bias().imported());
  // (row, column) pairs of a [3, 3, 5] grid: rows 1, 8, 3 and 0 of its [9, 5] flattening.
  CHECK(ints(op(g, "picked.gather"), "indices") == std::vector<int64_t>{1, 8, 3, 0});
  CHECK(op(g, "picked.gather").attrs().at("axis").i() == 0);
  CHECK(shape_string(op(g, "picked").outputs(0)) == "[4, 5] float32");
  CHECK(ints(op(g, "by_unit"), "perm") == std::vector<int64_t>{1, 0});
  // A negative index counts from the end.
  CHECK(ints(op(g, "units_picked.gather"), "indices") == std::vector<int64_t>{2, 3, 4});
  CHECK(shape_string(op(g, "bias").outputs(0)) == "[4, 3] float32");
  CHECK(shape_string(op(g, "add").outputs(0)) == "[4, 3] float32");
}

TEST_CASE("a GELU written out over the table's product keeps it without the batch axis") {
  // x * 0.5 * (1 + erf(x / sqrt 2)), as legacy exports below opset 20 write nn.GELU().
  Onnx b = table_bias();
  auto* grid = b.model.mutable_graph()->mutable_node(2);  // Squeeze reads the GELU instead
  grid->set_input(0, "gelu");
  b.init("sqrt2", {}, {std::sqrt(2.0)});
  b.init("one", {}, {1.0});
  b.init("half", {}, {0.5});
  b.node("Div", {"mlp", "sqrt2"}, {"scaled"}, "scaled");
  b.node("Erf", {"scaled"}, {"erf"}, "erf");
  b.node("Add", {"erf", "one"}, {"shifted"}, "shifted");
  b.node("Mul", {"mlp", "shifted"}, {"gated"}, "gated");
  b.node("Mul", {"gated", "half"}, {"gelu"}, "gelu");
  // (Nodes in topological order: the GELU's before the Squeeze that reads it.)
  auto* nodes = b.model.mutable_graph()->mutable_node();
  std::rotate(nodes->begin() + 2, nodes->end() - 5, nodes->end());
  const auto g = testing::build_graph(b.imported());
  int gelus = 0;
  for (int k = 0; k < g.num_ops(); ++k) gelus += g.op(k).proto->type() == "gelu";
  CHECK(gelus == 1);
  CHECK(shape_string(op(g, "grid").outputs(0)) == "[3, 3, 5] float32");
  CHECK(shape_string(op(g, "bias").outputs(0)) == "[4, 3] float32");
}

TEST_CASE(
    "a table that is an initializer is a trained weight: the product is refused naming "
    "--freeze") {
  Onnx b = table_bias();
  b.model.mutable_graph()->mutable_node(0)->set_output(0, "unused");  // no Constant "table"
  std::vector<double> table(18, 0.5);
  b.init("table", {1, 3, 3, 2}, table);
  CHECK_THAT(b.refusal(), Catch::Contains("'mlp' (MatMul): its first input 'table' is a trained "
                                          "weight too (a product of two weights); if it is a "
                                          "registered buffer, import with --freeze table"));
}

TEST_CASE("an index out of range of a tensor without the batch is refused by name") {
  Onnx b = table_bias();
  b.init("far", {3}, {2, 3, 5}, kInt64);
  b.model.mutable_graph()->mutable_node(5)->set_input(1, "far");  // units_picked reads far
  CHECK_THAT(b.refusal(), Catch::Contains("'units_picked' (Gather): index 5 out of range for 5"));
}

}  // namespace
}  // namespace gp::model
