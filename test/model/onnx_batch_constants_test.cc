// Values a model computes from the batch size that are the same for every sample: OPT's position
// ids (a cumulative sum of ones(batch, T)), the batch read back from such a value's shape, and
// BLOOM's ALiBi biases tiled over the batch for attention scores with the heads folded into it;
// and where such a value cannot go. Numerics against torch: the e2e test's torch2
// batch_constants exports.
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
std::string shape(const Graph& g, const std::string& id) {
  return shape_string(op(g, id).outputs(0));
}

// [batch, extra...] for input "x": Concat(Shape(x)[0:1], extra) as node output `name`.
void batch_and(Onnx* b, const std::string& name, const std::vector<double>& extra) {
  Onnx::attr(b->node("Shape", {"x"}, {name + ".shape"}, name + ".shape"), "end", int64_t{1});
  b->init(name + ".extra", {static_cast<int64_t>(extra.size())}, extra, kInt64);
  Onnx::attr(b->node("Concat", {name + ".shape", name + ".extra"}, {name}, name), "axis",
             int64_t{0});
}

// OPT: mask = ones(B, T); pos = cumsum(mask, 1) * mask - 1 + offset; x + table[pos].
Onnx position_ids(int64_t offset) {
  Onnx b;
  b.input("x", {4, 3});
  batch_and(&b, "dims", {4});
  auto* ones = b.node("ConstantOfShape", {"dims"}, {"mask"}, "ones");
  auto* value = ones->add_attribute();
  value->set_name("value");
  value->set_type(onnx::AttributeProto::TENSOR);
  Onnx::fill(value->mutable_t(), "one", {1}, {1}, kInt64);
  b.init("axis", {}, {1}, kInt64);
  b.node("CumSum", {"mask", "axis"}, {"counted"}, "cumsum");
  b.node("Mul", {"counted", "mask"}, {"kept"}, "mul");
  b.init("offset", {}, {static_cast<double>(offset - 1)}, kInt64);
  b.node("Add", {"kept", "offset"}, {"pos"}, "add_offset");
  b.weight("table", {6, 3});
  b.node("Gather", {"table", "pos"}, {"positions"}, "lookup");
  b.node("Add", {"x", "positions"}, {"y"}, "add");
  b.output("y", {4, 3});
  return b;
}

TEST_CASE("ones(batch, T) and its cumulative sum fold into position ids the same for each sample") {
  const auto g = testing::build_graph(position_ids(2).imported());
  const auto& lookup = op(g, "lookup");
  CHECK(lookup.type() == "embedding");
  const auto& ids = op(g, lookup.inputs(0).op());
  CHECK(ids.type() == "constant");
  CHECK(testing::param_floats(ids, "value") == std::vector<float>{2, 3, 4, 5});
  CHECK(shape(g, "lookup") == "[4, 3] float32");  // per sample: the batch is the activations'
  CHECK(shape(g, "add") == "[4, 3] float32");
  CHECK(g.total_params() == 6 * 3);
  // Ids past the table are refused, naming the id.
  CHECK_THAT(position_ids(3).refusal(), Catch::Contains("id 6 is out of range for a table of 6"));
}

TEST_CASE("a per-sample mask whose own shape sizes its expansion (bsz = mask.size(0)) folds") {
  // mask = ones(B, 4); mask[:, None, None, :].expand(mask.size(0), 1, 4, 4) * x: every reader
  // of the mask folds before the Expand reads its shape again.
  Onnx b;
  b.input("x", {1, 4, 4});
  batch_and(&b, "dims", {4});
  auto* ones = b.node("ConstantOfShape", {"dims"}, {"mask"}, "ones");
  auto* value = ones->add_attribute();
  value->set_name("value");
  value->set_type(onnx::AttributeProto::TENSOR);
  Onnx::fill(value->mutable_t(), "one", {1}, {1}, testing::kOnnxFloat);
  b.init("axes", {2}, {1, 2}, kInt64);
  b.node("Unsqueeze", {"mask", "axes"}, {"mask4"}, "unsqueeze");
  Onnx::attr(b.node("Shape", {"mask"}, {"bsz"}, "bsz"), "end", int64_t{1});
  b.init("rest", {3}, {1, 4, 4}, kInt64);
  Onnx::attr(b.node("Concat", {"bsz", "rest"}, {"target"}, "target"), "axis", int64_t{0});
  b.node("Expand", {"mask4", "target"}, {"masks"}, "expand");
  b.node("Mul", {"x", "masks"}, {"y"}, "mul");
  b.output("y", {1, 4, 4});
  const auto g = testing::build_graph(b.imported());
  const auto& masks = op(g, op(g, "mul").inputs(1).op());
  CHECK(masks.type() == "constant");
  CHECK(testing::param_floats(masks, "value") == std::vector<float>(16, 1.0f));
  CHECK(shape(g, "mul") == "[1, 4, 4] float32");
}

TEST_CASE("the shape of a value computed from the batch size has the batch on its first axis") {
  // x.view(ones.shape[0], 2, 3) of ones = torch.ones(B, 6): the batch, not 1.
  Onnx b;
  b.input("x", {6});
  batch_and(&b, "dims", {6});
  b.node("ConstantOfShape", {"dims"}, {"ones"}, "ones");
  Onnx::attr(b.node("Shape", {"ones"}, {"ones_batch"}, "ones_shape"), "end", int64_t{1});
  b.init("rest", {2}, {2, 3}, kInt64);
  Onnx::attr(b.node("Concat", {"ones_batch", "rest"}, {"target"}, "target"), "axis", int64_t{0});
  b.node("Reshape", {"x", "target"}, {"y"}, "view");
  b.output("y", {2, 3});
  const auto g = testing::build_graph(b.imported());
  CHECK(shape(g, "view") == "[2, 3] float32");
}

TEST_CASE("a padding mask picked at arange(batch) * T + t folds to its rows, the batch computed") {
  // transformers' padding mask of a decoder whose ids are computed (BART's shifted ids): ones of
  // the computed tensor's shape, flattened and picked at arange(B) * T + arange(T), reshaped to
  // the picks' own shape. The arange and the flattened ones fold per sample neither (the arange
  // differs by sample, the flattening lays the batch out with T): the pick does.
  Onnx b;
  b.input("x", {4});
  b.node("Relu", {"x"}, {"h"}, "computed");  // (its shape known only once converted)
  b.node("Shape", {"h"}, {"dims"}, "dims");
  auto* ones = b.node("ConstantOfShape", {"dims"}, {"ones"}, "ones");
  auto* value = ones->add_attribute();
  value->set_name("value");
  value->set_type(onnx::AttributeProto::TENSOR);
  Onnx::fill(value->mutable_t(), "one", {1}, {1}, testing::kOnnxFloat);
  Onnx::attr(b.node("Flatten", {"ones"}, {"flat"}, "flat"), "axis", int64_t{2});  // [B * 4, 1]
  b.init("zero", {}, {0}, kInt64);
  b.init("one_step", {}, {1}, kInt64);
  b.init("at0", {1}, {0}, kInt64);
  b.node("Gather", {"dims", "zero"}, {"batch"}, "batch");
  b.node("Range", {"zero", "batch", "one_step"}, {"samples"}, "samples");
  b.init("tail", {3}, {1, 2, 3}, kInt64);
  b.node("Unsqueeze", {"samples", "tail"}, {"samples4"}, "samples4");  // [B, 1, 1, 1]
  b.init("four", {}, {4}, kInt64);
  b.node("Mul", {"samples4", "four"}, {"rows"}, "rows");
  b.init("t", {1, 1, 1, 4}, {0, 1, 2, 3}, kInt64);
  b.node("Add", {"rows", "t"}, {"picks"}, "picks");           // [B, 1, 1, 4]
  b.node("Gather", {"flat", "picks"}, {"picked"}, "picked");  // [B, 1, 1, 4, 1]
  b.node("Shape", {"picks"}, {"picks_shape"}, "picks_shape");
  b.node("Reshape", {"picked", "picks_shape"}, {"mask"}, "mask");  // [B, 1, 1, 4]
  b.init("flat_h", {4}, {0, 1, 1, 4}, kInt64);
  b.node("Reshape", {"h", "flat_h"}, {"h4"}, "h4");
  b.node("Mul", {"h4", "mask"}, {"y"}, "masked");
  b.output("y", {1, 1, 4});
  const auto g = testing::build_graph(b.imported());
  // The mask is a batched constant of ones, the same row for every sample.
  const auto& mul = op(g, "masked");
  REQUIRE(mul.inputs_size() == 2);
  const auto& mask = op(g, mul.inputs(1).op());
  CHECK(mask.type() == "constant");
  CHECK(testing::param_floats(mask, "value") == std::vector<float>{1, 1, 1, 1});
  CHECK(shape(g, "masked") == "[1, 1, 4] float32");
}

TEST_CASE("a value computed from the batch size is a batched constant for ops that read it whole") {
  // Expand(weights [1, 3, 3]) to [B, 3, 3] read by a MatMul: a constant of [3, 3] per sample.
  Onnx matmul;
  matmul.input("x", {1, 3});
  matmul.constant("square", {1, 3, 3}, {1, 2, 3, 4, 5, 6, 7, 8, 9});
  batch_and(&matmul, "dims", {3, 3});
  matmul.node("Expand", {"square", "dims"}, {"squares"}, "expand");
  matmul.node("MatMul", {"x", "squares"}, {"y"}, "matmul");
  matmul.output("y", {1, 3});
  const auto g = testing::build_graph(matmul.imported());
  const auto& product = op(g, "matmul");
  CHECK(product.type() == "matmul");
  const auto& squares = op(g, product.inputs(1).op());
  CHECK(squares.type() == "constant");
  CHECK(shape(g, squares.id()) == "[3, 3] float32");
  CHECK(testing::param_floats(squares, "value") == std::vector<float>{1, 2, 3, 4, 5, 6, 7, 8, 9});
  CHECK(squares.inputs(0).op() == "x");  // the batch comes from the activations
  // ones(B) added to [B, 4]: ONNX aligns it with the last axis, not the batch.
  Onnx add;
  add.input("x", {4});
  batch_and(&add, "dims", {});
  add.node("ConstantOfShape", {"dims"}, {"ones"}, "ones");
  add.node("Add", {"x", "ones"}, {"y"}, "add");
  add.output("y", {4});
  CHECK_THAT(add.refusal(), Catch::Contains("reads 'ones' (1 axes, the batch first; computed "
                                            "from the batch size), whose batch axis does not "
                                            "line up with the batch of 'x' (at axis 0 of 2 axes)"));
}

// BLOOM: scores [B * H, T, T] (heads folded into the batch) + (slopes[:, None, None] *
// arange(T)).repeat(B, 1, 1), then back to [B, H * T * T].
Onnx alibi(const std::string& tiled) {
  Onnx b;
  b.input("x", {2 * 3 * 3});
  b.init("folded", {3}, {-1, 3, 3}, kInt64);
  b.node("Reshape", {"x", "folded"}, {"scores"}, "fold_heads");
  b.constant("biases", {2, 1, 3}, {0, 0.5, 1, 0, 0.25, 0.5});
  batch_and(&b, "repeats", {1, 1});
  b.node("Tile", {tiled, "repeats"}, {"alibi"}, "repeat");
  b.node("Add", {"scores", "alibi"}, {"biased"}, "baddbmm");
  b.init("unfolded", {2}, {-1, 18}, kInt64);
  b.node("Reshape", {"biased", "unfolded"}, {"y"}, "unfold_heads");
  b.output("y", {18});
  return b;
}

TEST_CASE(
    "a constant tiled over the batch (BLOOM's ALiBi) is a constant laid out like the scores") {
  const auto g = testing::build_graph(alibi("biases").imported());
  const auto& tiled = op(g, "repeat");
  CHECK(tiled.type() == "constant");
  CHECK(shape(g, "repeat") == "[2, 1, 3] float32");  // per sample: one block of heads
  CHECK(testing::param_floats(tiled, "value") == std::vector<float>{0, 0.5, 1, 0, 0.25, 0.5});
  CHECK(op(g, "baddbmm").inputs(1).op() == "repeat");
  CHECK(shape(g, "unfold_heads") == "[18] float32");
  // Tile of an activation has no operator.
  CHECK_THAT(alibi("x").refusal(), Catch::Contains("tiles an activation"));
}

TEST_CASE(
    "a window mask expanded over batch x windows (Hugging Face's Swin) is laid out per sample") {
  // scores [B * nW, N, N]; mask [nW, N, N]; nW = mask.shape[0];
  // mask[None].expand(B * nW // nW, nW, N, N).reshape(-1, N, N) added to the scores.
  Onnx b;
  b.input("x", {2 * 2 * 2});
  b.init("folded", {3}, {-1, 2, 2}, kInt64);
  b.node("Reshape", {"x", "folded"}, {"scores"}, "fold_windows");
  b.constant("mask", {2, 2, 2}, {0, -100, 0, 0, -100, 0, 0, 0});
  b.init("zero", {1}, {0}, kInt64);
  b.node("Unsqueeze", {"mask", "zero"}, {"mask4"}, "unsqueeze");
  Onnx::attr(b.node("Shape", {"scores"}, {"rows"}, "rows"), "end", int64_t{1});
  Onnx::attr(b.node("Shape", {"mask"}, {"windows"}, "windows"), "end", int64_t{1});
  b.node("Div", {"rows", "windows"}, {"batch"}, "batch");
  b.init("rest", {3}, {2, 2, 2}, kInt64);
  Onnx::attr(b.node("Concat", {"batch", "rest"}, {"target"}, "target"), "axis", int64_t{0});
  b.node("Expand", {"mask4", "target"}, {"masks"}, "expand");
  b.node("Reshape", {"masks", "folded"}, {"flat_masks"}, "mask_view");
  b.node("Add", {"scores", "flat_masks"}, {"masked"}, "add_mask");
  b.init("unfolded", {2}, {-1, 8}, kInt64);
  b.node("Reshape", {"masked", "unfolded"}, {"y"}, "unfold_windows");
  b.output("y", {8});
  const auto g = testing::build_graph(b.imported());
  const auto& mask = op(g, "mask_view");
  CHECK(mask.type() == "constant");
  CHECK(shape(g, "mask_view") == "[2, 2, 2] float32");
  CHECK(testing::param_floats(mask, "value") == std::vector<float>{0, -100, 0, 0, -100, 0, 0, 0});
  CHECK(op(g, "add_mask").inputs(1).op() == "mask_view");
  CHECK(shape(g, "unfold_windows") == "[8] float32");
}

TEST_CASE("Tile and CumSum of constants fold, exclusive and reversed sums included") {
  Onnx b;
  b.input("x", {6});
  b.constant("pair", {2}, {1, 2});
  b.init("three", {1}, {3}, kInt64);
  b.node("Tile", {"pair", "three"}, {"tiled"}, "tile");  // [1, 2, 1, 2, 1, 2]
  b.init("axis", {}, {0}, kInt64);
  auto* sum = b.node("CumSum", {"tiled", "axis"}, {"sums"}, "cumsum");
  Onnx::attr(sum, "exclusive", int64_t{1});
  Onnx::attr(sum, "reverse", int64_t{1});
  b.node("Add", {"x", "sums"}, {"y"}, "add");
  b.output("y", {6});
  const auto g = testing::build_graph(b.imported());
  const auto& sums = op(g, op(g, "add").inputs(1).op());
  CHECK(sums.type() == "constant");
  CHECK(testing::param_floats(sums, "value") == std::vector<float>{8, 6, 5, 3, 2, 0});
}

}  // namespace
}  // namespace gp::model
