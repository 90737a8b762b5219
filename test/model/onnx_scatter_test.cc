// Slice assignment into activations (model/src/onnx/scatter.cc): ScatterND and ScatterElements
// that write each sample's elements from the same sample's updates at the same places become a
// gather of the updates and a where over a constant mask. Numerics against torch: the torch2
// pattern shifted_ids (BART's decoder ids, both exporters) in test/e2e/onnx_torch_test.cc.
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

// y = x [batch, 4, 3] with rows 1 and 3 replaced by u [batch, 2, 3], as dynamo's slice_scatter
// writes it: the assigned axis moved first, constant row indices, and moved back.
Onnx rows_assigned(const std::vector<double>& rows) {
  Onnx b;
  b.input("x", {4, 3});
  b.input("u", {2, 3});
  Onnx::attr(b.node("Transpose", {"x"}, {"xt"}, "xt"), "perm", std::vector<int64_t>{1, 0, 2});
  Onnx::attr(b.node("Transpose", {"u"}, {"ut"}, "ut"), "perm", std::vector<int64_t>{1, 0, 2});
  b.init("rows", {2, 1}, rows, kInt64);
  b.node("ScatterND", {"xt", "rows", "ut"}, {"st"}, "scatter");
  Onnx::attr(b.node("Transpose", {"st"}, {"y"}, "y"), "perm", std::vector<int64_t>{1, 0, 2});
  b.output("y", {4, 3});
  return b;
}

// y = x [batch, 4] with columns 0 and 2 replaced by u [batch, 2], as the legacy exporter writes
// x[:, [0, 2]] = u: index pairs of the batch's arange (from the batch size) and the columns,
// [batch, 2, 2]. `reversed` pairs sample b with sample batch - 1 - b instead.
Onnx pairs_assigned(bool reversed) {
  Onnx b;
  b.input("x", {4});
  b.input("u", {2});
  b.node("Shape", {"x"}, {"shape"}, "shape");
  b.init("zero", {}, {0}, kInt64);
  b.init("one", {}, {1}, kInt64);
  b.node("Gather", {"shape", "zero"}, {"batch"}, "batch");
  b.node("Range", {"zero", "batch", "one"}, {"arange"}, "arange");
  std::string samples = "arange";
  if (reversed) {
    b.node("Sub", {"batch", "one"}, {"last"}, "last");
    b.node("Sub", {"last", "arange"}, {"backwards"}, "backwards");
    samples = "backwards";
  }
  b.init("axis1", {1}, {1}, kInt64);
  b.node("Unsqueeze", {samples, "axis1"}, {"column"}, "column");  // [batch, 1]
  b.node("Unsqueeze", {"batch", "zero_axis"}, {"batch1"}, "batch1");
  b.init("zero_axis", {1}, {0}, kInt64);
  b.init("two", {1}, {2}, kInt64);
  Onnx::attr(b.node("Concat", {"batch1", "two"}, {"grid"}, "grid"), "axis", int64_t{0});
  b.node("Expand", {"column", "grid"}, {"sample_ids"}, "sample_ids");
  b.init("columns", {2}, {0, 2}, kInt64);
  b.node("Expand", {"columns", "grid"}, {"column_ids"}, "column_ids");
  b.init("last_axis", {1}, {2}, kInt64);
  b.node("Unsqueeze", {"sample_ids", "last_axis"}, {"s3"}, "s3");
  b.node("Unsqueeze", {"column_ids", "last_axis"}, {"c3"}, "c3");
  Onnx::attr(b.node("Concat", {"s3", "c3"}, {"pairs"}, "pairs"), "axis", int64_t{-1});
  b.node("ScatterND", {"x", "pairs", "u"}, {"y"}, "scatter");
  b.output("y", {4});
  return b;
}

}  // namespace

TEST_CASE("a slice assignment of rows gathers each sample's updates where its mask is set") {
  const auto g = testing::build_graph(rows_assigned({1, 3}).imported());
  // Rows 1 and 3 of 4 x 3 elements come from the 2 x 3 updates; the rest keep x.
  CHECK(testing::attr_ints_of(op(g, "scatter.gather"), "indices") ==
        std::vector<int64_t>{0, 0, 0, 0, 1, 2, 0, 0, 0, 3, 4, 5});
  CHECK(testing::param_floats(op(g, "scatter.written"), "value") ==
        std::vector<float>{0, 0, 0, 1, 1, 1, 0, 0, 0, 1, 1, 1});
  CHECK(op(g, "scatter.where").type() == "where");
  CHECK(shape_string(op(g, "scatter").outputs(0)) == "[4, 3] float32");
  // A negative row counts from the end: the same map.
  const auto back = testing::build_graph(rows_assigned({-3, -1}).imported());
  CHECK(testing::attr_ints_of(op(back, "scatter.gather"), "indices") ==
        testing::attr_ints_of(op(g, "scatter.gather"), "indices"));
}

TEST_CASE("the legacy exporter's pairs of the batch's arange and columns assign per sample") {
  // The arange's nodes, which have no operator, are claimed and evaluated for each batch size.
  const auto g = testing::build_graph(pairs_assigned(false).imported());
  CHECK(testing::attr_ints_of(op(g, "scatter.gather"), "indices") ==
        std::vector<int64_t>{0, 0, 1, 0});
  CHECK(testing::param_floats(op(g, "scatter.written"), "value") == std::vector<float>{1, 0, 1, 0});
  CHECK(g.index_of("arange") < 0);
}

TEST_CASE("an assignment from another sample's updates is refused by name") {
  const std::string why = pairs_assigned(true).refusal();
  CHECK_THAT(why, Catch::Contains("'scatter'") &&
                      Catch::Contains("writes one sample's elements from another sample's"));
}

TEST_CASE("ScatterElements along a per-sample axis assigns per sample") {
  // select_scatter of dynamo: y = x [batch, 4] with y[:, 2] = u [batch, 1] * 2, the index a
  // constant expanded over the batch.
  Onnx b;
  b.input("x", {4});
  b.input("u", {1});
  b.init("two", {}, {2.0});
  b.node("Mul", {"u", "two"}, {"u2"}, "u2");
  b.node("Shape", {"u"}, {"u_shape"}, "u_shape");
  b.init("column", {1, 1}, {2}, kInt64);
  b.node("Expand", {"column", "u_shape"}, {"where_to"}, "where_to");
  Onnx::attr(b.node("ScatterElements", {"x", "where_to", "u2"}, {"y"}, "scatter"), "axis",
             int64_t{1});
  b.output("y", {4});
  const auto g = testing::build_graph(b.imported());
  CHECK(testing::attr_ints_of(op(g, "scatter.gather"), "indices") ==
        std::vector<int64_t>{0, 0, 0, 0});
  CHECK(testing::param_floats(op(g, "scatter.written"), "value") == std::vector<float>{0, 0, 1, 0});
}

TEST_CASE("a scatter into a constant sized by an activation's shape folds to the constant") {
  // torchvision's Swin: attn_mask = x.new_zeros((H, W)) with H, W read from an activation, then
  // mask[h0:h1] = k: its indices come from the shape, known only once the activation is; they
  // fold then (the scatter is a constant), though claimed as a scatter's indices before.
  Onnx b;
  b.input("x", {4});
  b.node("Relu", {"x"}, {"h"}, "relu");
  b.node("Shape", {"h"}, {"dims"}, "dims");
  b.init("one", {}, {1}, kInt64);
  b.init("zero", {}, {0}, kInt64);
  b.node("Gather", {"dims", "one"}, {"width"}, "width");
  b.init("axis0", {1}, {0}, kInt64);
  b.node("Unsqueeze", {"width", "axis0"}, {"width1"}, "width1");
  b.node("ConstantOfShape", {"width1"}, {"zeros"}, "zeros");  // float zeros [4]
  b.node("Range", {"zero", "width", "one"}, {"columns"}, "columns");
  b.init("from", {1}, {1}, kInt64);
  b.init("to", {1}, {3}, kInt64);
  b.node("Slice", {"columns", "from", "to"}, {"picked"}, "picked");  // [1, 2]
  b.init("last", {1}, {1}, kInt64);
  b.node("Unsqueeze", {"picked", "last"}, {"where_to"}, "where_to");  // [[1], [2]]
  b.constant("value", {2}, {2.5, 2.5});
  b.node("ScatterND", {"zeros", "where_to", "value"}, {"mask"}, "scatter");
  b.node("Add", {"h", "mask"}, {"y"}, "add");
  b.output("y", {4});
  const auto m = b.imported();
  bool found = false;
  for (const auto& o : m.ops()) {
    const auto v = o.param_values().find("value");
    if (v == o.param_values().end() || v->second.size() != 4 * sizeof(float)) continue;
    found = found || testing::param_floats(o, "value") == std::vector<float>{0, 2.5f, 2.5f, 0};
  }
  CHECK(found);
}

TEST_CASE("a scatter that adds into an activation is refused naming its reduction") {
  Onnx b = rows_assigned({1, 3});
  Onnx::attr(b.model.mutable_graph()->mutable_node(2), "reduction", std::string("add"));
  REQUIRE(b.model.graph().node(2).op_type() == "ScatterND");
  CHECK_THAT(b.refusal(), Catch::Contains("reduction = 'add'"));
}

}  // namespace gp::model
