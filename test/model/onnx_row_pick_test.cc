// ArgMax and ArgMin (general_ops.cc) and the per-sample row pick x[arange(B), v] of
// row_pick.cc, as torch's two exporters write CLIP's end-of-text pooling, and GatherElements at
// per-sample indices (torch.gather). Numerics against torch: the torch2 patterns eos_pooling and
// shifted_ids in test/e2e/onnx_torch_test.cc.
#include <catch2/catch.hpp>
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
std::string text(const graphpipe::v1::Operator& o, const std::string& attr) {
  return o.attrs().at(attr).s();
}

// ids [batch, 6] (int64) and h [batch, 6, 4]: the batch's arange from the ids' shape.
Onnx tower() {
  Onnx b;
  b.input("ids", {6}, kInt64);
  b.input("h", {6, 4});
  auto* batch = b.node("Shape", {"ids"}, {"batch"}, "shape");
  Onnx::attr(batch, "start", int64_t{0});
  Onnx::attr(batch, "end", int64_t{1});
  b.init("zero", {}, {0}, kInt64);
  b.init("one", {}, {1}, kInt64);
  b.init("axis0", {1}, {0}, kInt64);
  b.node("Squeeze", {"batch", "axis0"}, {"batch_size"}, "batch_size");
  b.node("Range", {"zero", "batch_size", "one"}, {"rows"}, "arange");
  auto* argmax = b.node("ArgMax", {"ids"}, {"at"}, "eot");
  Onnx::attr(argmax, "axis", int64_t{-1});
  Onnx::attr(argmax, "keepdims", int64_t{0});
  return b;
}

// dynamo: GatherND(h, Concat([rows, at] as [batch, 1] each, -1)).
Onnx dynamo_pick() {
  Onnx b = tower();
  b.init("last", {1}, {-1}, kInt64);
  b.node("Unsqueeze", {"rows", "last"}, {"rows_1"}, "rows_1");
  b.node("Unsqueeze", {"at", "last"}, {"at_1"}, "at_1");
  Onnx::attr(b.node("Concat", {"rows_1", "at_1"}, {"pairs"}, "pairs"), "axis", int64_t{-1});
  b.node("GatherND", {"h", "pairs"}, {"y"}, "pick");
  b.output("y", {4});
  return b;
}

// legacy: Gather(Flatten(h, 2), at + rows * stride).
Onnx legacy_pick(double stride) {
  Onnx b = tower();
  Onnx::attr(b.node("Flatten", {"h"}, {"flat"}, "flatten"), "axis", int64_t{2});
  b.init("stride", {}, {stride}, kInt64);
  b.node("Mul", {"rows", "stride"}, {"offsets"}, "offsets");
  b.node("Add", {"at", "offsets"}, {"flat_index"}, "flat_index");
  b.node("Gather", {"flat", "flat_index"}, {"y"}, "pick");
  b.output("y", {4});
  return b;
}

TEST_CASE("ArgMax is the first maximum's position from compare, cumsum and a sum of positions") {
  const auto g = testing::build_graph(dynamo_pick().imported());
  CHECK(op(g, "eot.max").type() == "reduce");
  CHECK(text(op(g, "eot.max"), "mode") == "max");
  CHECK(op(g, "eot.count").type() == "cumsum");
  CHECK(op(g, "eot.count").attrs().count("reverse") == 0);  // the first of ties, not the last
  CHECK(op(g, "eot").type() == "reduce");
  CHECK(text(op(g, "eot"), "mode") == "sum");
  CHECK(op(g, "eot").inputs(0).op() == "eot.at");
}

TEST_CASE("GatherND at [arange(batch), v] picks each sample's row v") {
  const auto g = testing::build_graph(dynamo_pick().imported());
  CHECK(op(g, "pick").type() == "reduce");
  CHECK(op(g, "pick.picked").inputs(0).op() == "h");
  CHECK(op(g, "pick.is_row").type() == "compare");
  CHECK(shape_string(op(g, "pick").outputs(0)) == "[4] float32");
}

TEST_CASE("the legacy export's flattened rows at v + arange(batch) * rows pick the same row") {
  const auto g = testing::build_graph(legacy_pick(6).imported());
  CHECK(op(g, "pick").type() == "reduce");
  CHECK(op(g, "pick.picked").inputs(0).op() == "h");
  CHECK(shape_string(op(g, "pick").outputs(0)) == "[4] float32");
  // A stride other than the rows per sample reads other samples' rows: refused by name.
  CHECK_THAT(legacy_pick(5).refusal(),
             Catch::Contains("indexed with a stride other than its 6 rows per sample"));
}

TEST_CASE(
    "a position given as int64 data is read as float and a negative one counts from the end") {
  Onnx b = dynamo_pick();
  b.input("pos", {}, kInt64);
  b.model.mutable_graph()->mutable_node(5)->set_input(0, "pos");  // at_1 unsqueezes pos
  const auto g = testing::build_graph(b.imported());
  CHECK(op(g, "pick.position").inputs(0).op() != "pos");  // a cast to float32 first
  CHECK(text(op(g, "pick.negative"), "fn") == "lt");
  CHECK(op(g, "pick.is_row").inputs(1).op() == "pick.wrapped");
}

TEST_CASE("positions paired with an arange other than the batch's are refused by name") {
  Onnx b = dynamo_pick();
  b.init("seven", {}, {7}, kInt64);
  b.model.mutable_graph()->mutable_node(2)->set_input(1, "seven");  // Range(0, 7, 1)
  CHECK_THAT(b.refusal(), Catch::Contains("'pick' (GatherND): picks rows of 'h' at positions "
                                          "paired with 'rows', which is not arange(batch size)"));
}

TEST_CASE("ArgMin is ArgMax of the negation, and select_last_index counts from the end") {
  Onnx b;
  b.input("x", {5});
  auto* n = b.node("ArgMin", {"x"}, {"y"}, "lowest");
  Onnx::attr(n, "axis", int64_t{1});
  Onnx::attr(n, "select_last_index", int64_t{1});
  b.output("y", {1});
  const auto g = testing::build_graph(b.imported());
  CHECK(text(op(g, "lowest.neg"), "fn") == "neg");
  CHECK(op(g, "lowest.count").attrs().at("reverse").i() == 1);
  CHECK_THAT(
      [] {
        Onnx on_batch;
        on_batch.input("x", {5});
        Onnx::attr(on_batch.node("ArgMax", {"x"}, {"y"}, "am"), "axis", int64_t{0});
        on_batch.output("y", {5});
        return on_batch.refusal();
      }(),
      Catch::Contains("'am' (ArgMax): along the batch axis"));
}

TEST_CASE("GatherElements of an activation at per-sample indices masks the positions and sums") {
  // mBART's decoder start: ids [batch, 5] gathered at each sample's last position, [batch, 1];
  // and x [batch, 5, 3] gathered at [batch, 2, 3] positions along axis 1.
  Onnx b;
  b.input("ids", {5}, kInt64);
  b.input("x", {5, 3});
  b.input("where_to", {2, 3}, kInt64);
  b.input("last", {1}, kInt64);
  Onnx::attr(b.node("GatherElements", {"ids", "last"}, {"start"}, "start"), "axis", int64_t{1});
  Onnx::attr(b.node("GatherElements", {"x", "where_to"}, {"rows"}, "rows"), "axis", int64_t{-2});
  b.output("rows", {2, 3});
  const auto g = testing::build_graph(b.imported());
  // Each index against positions 0..4 of the gathered axis, kept last: [.., 5], summed away.
  CHECK(testing::param_floats(op(g, "start.positions"), "value") ==
        std::vector<float>{0, 1, 2, 3, 4});
  CHECK(op(g, "start.hit").type() == "compare");
  CHECK(shape_string(op(g, "start").outputs(0)) == "[1] float32");
  CHECK(testing::attr_ints_of(op(g, "rows.to_last"), "perm") == std::vector<int64_t>{1, 0});
  CHECK(shape_string(op(g, "rows.spread").outputs(0)) == "[1, 3, 5] float32");
  CHECK(shape_string(op(g, "rows.picked").outputs(0)) == "[2, 3, 5] float32");
  CHECK(shape_string(op(g, "rows").outputs(0)) == "[2, 3] float32");
}

TEST_CASE("GatherElements along the batch or with indices unlike the data elsewhere is refused") {
  Onnx b;
  b.input("x", {5, 3});
  b.input("where_to", {2, 2}, kInt64);
  Onnx::attr(b.node("GatherElements", {"x", "where_to"}, {"rows"}, "rows"), "axis", int64_t{1});
  b.output("rows", {2, 2});
  CHECK_THAT(b.refusal(), Catch::Contains("its indices [2, 2] and data [5, 3] differ off the "
                                          "gathered axis"));
  Onnx c;
  c.input("x", {5});
  c.input("where_to", {5}, kInt64);
  Onnx::attr(c.node("GatherElements", {"x", "where_to"}, {"rows"}, "rows"), "axis", int64_t{0});
  c.output("rows", {5});
  CHECK_THAT(c.refusal(), Catch::Contains("axis = 0 is the batch axis"));
}

}  // namespace
}  // namespace gp::model
