// What the models of torchvision, timm and Hugging Face export beyond hand-written ones:
// IsNaN of a softmax (dynamo's SDPA with a mask), HardSigmoid and HardSwish (MobileNetV3), a
// zero F.pad (Swin), masks written by slice assignment (ScatterND) and token types gathered from
// a buffer (GatherElements), PatchMerging's stepped slices on two axes, dynamo's as_strided
// after AdaptiveAvgPool2d, attention through torch.einsum, and a mask folded to finfo.min.
// Graphs are built here in memory; the numerics against torch are the e2e test's (torch2
// library_vision and library_attention).
#include <catch2/catch.hpp>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "../support/models.h"
#include "../support/onnx_builder.h"
#include "gp/model/onnx_import.h"

namespace gp::model {
namespace {

constexpr int kInt64 = testing::kOnnxInt64;
constexpr double kEnd = 9.2e18;  // torch's INT64_MAX end of an open slice
using Onnx = testing::OnnxBuilder;

const graphpipe::v1::Operator& op(const Graph& g, const std::string& id) {
  return testing::imported_op(g, id);
}
std::string shape(const Graph& g, const std::string& id) {
  return shape_string(op(g, id).outputs(0));
}
std::string text(const graphpipe::v1::Operator& o, const std::string& attr) {
  return o.attrs().at(attr).s();
}
double real(const graphpipe::v1::Operator& o, const std::string& attr) {
  return o.attrs().at(attr).f();
}

TEST_CASE("IsNaN of a softmax is the softmax compared with itself, a mask for Where") {
  Onnx b;
  b.input("x", {3, 5});
  b.node("Softmax", {"x"}, {"p"}, "softmax");
  b.node("IsNaN", {"p"}, {"nan"}, "isnan");
  b.init("zero", {}, {0.0});
  b.node("Where", {"nan", "zero", "p"}, {"y"}, "where");
  b.output("y", {3, 5});
  const auto g = testing::build_graph(b.imported());
  const auto& isnan = op(g, "isnan");
  CHECK(isnan.type() == "compare");
  CHECK(text(isnan, "fn") == "ne");
  CHECK(isnan.inputs(0).op() == "softmax");
  CHECK(isnan.inputs(1).op() == "softmax");
  CHECK(op(g, "where").type() == "where");
  CHECK(op(g, "where").inputs(0).op() == "isnan");
}

TEST_CASE("HardSigmoid is clip(alpha x + beta, 0, 1) and HardSwish x times it (MobileNetV3)") {
  Onnx b;
  b.input("x", {6});
  b.node("HardSigmoid", {"x"}, {"gate"}, "hsig");  // ONNX's defaults: alpha 0.2, beta 0.5
  b.node("HardSwish", {"gate"}, {"y"}, "hswish");
  b.output("y", {6});
  const auto g = testing::build_graph(b.imported());
  CHECK(real(op(g, "hsig.scale"), "factor") == Approx(0.2));
  CHECK(testing::param_floats(op(g, "hsig.beta"), "value") == std::vector<float>{0.5f});
  CHECK(text(op(g, "hsig.shift"), "fn") == "add");
  CHECK(op(g, "hsig.shift").inputs(0).op() == "hsig.scale");
  CHECK(op(g, "hsig.shift").inputs(1).op() == "hsig.beta");
  CHECK(op(g, "hsig").inputs(0).op() == "hsig.shift");
  CHECK(op(g, "hsig").type() == "clip");
  CHECK(real(op(g, "hsig"), "min") == 0.0);
  CHECK(real(op(g, "hsig"), "max") == 1.0);
  CHECK(real(op(g, "hswish.scale"), "factor") == Approx(1.0 / 6));
  CHECK(testing::param_floats(op(g, "hswish.beta"), "value") == std::vector<float>{0.5f});
  CHECK(op(g, "hswish.gate").type() == "clip");
  const auto& swish = op(g, "hswish");
  CHECK(text(swish, "fn") == "mul");
  CHECK(swish.inputs(0).op() == "hsig");  // x times its gate
  CHECK(swish.inputs(1).op() == "hswish.gate");
  CHECK(shape(g, "hswish") == "[6] float32");
}

TEST_CASE("a Pad that pads nothing (Swin's pad to a window multiple that divides) is no op") {
  Onnx b;
  b.input("x", {4, 4, 3});
  b.init("pads", {8}, {0, 0, 0, 0, 0, 0, 0, 0}, kInt64);
  b.node("Pad", {"x", "pads"}, {"padded"}, "pad");
  b.node("Relu", {"padded"}, {"y"}, "relu");
  b.output("y", {4, 4, 3});
  const auto g = testing::build_graph(b.imported());
  CHECK(op(g, "relu").inputs(0).op() == "x");
  CHECK(g.index_of("pad") < 0);
}

// x [batch, 4, 4, 3] padded by `pads` with `value`, then a ReLU.
Onnx padded(const std::vector<double>& pads, double value, const std::vector<int64_t>& out) {
  Onnx b;
  b.input("x", {4, 4, 3});
  b.init("pads", {8}, pads, kInt64);
  b.init("value", {}, {value});
  b.node("Pad", {"x", "pads", "value"}, {"padded"}, "pad");
  b.node("Relu", {"padded"}, {"y"}, "relu");
  b.output("y", out);
  return b;
}

TEST_CASE("a Pad of per-sample axes joins blocks of its value on, before and after") {
  // One row before axis 1 and one column after axis 2, with 0.5 (MobileBERT pads its shifted
  // tokens with F.pad(x[:, 1:], [0, 0, 0, 1])).
  const auto g = testing::build_graph(padded({0, 1, 0, 0, 0, 0, 1, 0}, 0.5, {5, 5, 3}).imported());
  CHECK(op(g, "pad.1.before").type() == "constant");
  CHECK(shape(g, "pad.1.before") == "[1, 4, 3] float32");
  CHECK(testing::param_floats(op(g, "pad.1.before"), "value") == std::vector<float>(12, 0.5f));
  CHECK(op(g, "pad.1").type() == "concat");
  CHECK(op(g, "pad.1").inputs(1).op() == "x");
  CHECK(shape(g, "pad.2.after") == "[5, 1, 3] float32");
  CHECK(testing::param_floats(op(g, "pad.2.after"), "value") == std::vector<float>(15, 0.5f));
  CHECK(op(g, "pad").inputs(0).op() == "pad.1");  // the last join is the node's own op
  CHECK(shape(g, "pad") == "[5, 5, 3] float32");
  CHECK(op(g, "relu").inputs(0).op() == "pad");
  // Cropping (negative pads) and padding the batch are refused by name.
  CHECK_THAT(padded({0, -1, 0, 0, 0, 0, 0, 0}, 0, {3, 4, 3}).refusal(),
             Catch::Contains("'pad' (Pad): pads [0, -1, 0, 0, 0, 0, 0, 0] crop"));
  CHECK_THAT(padded({1, 0, 0, 0, 0, 0, 0, 0}, 0, {4, 4, 3}).refusal(),
             Catch::Contains("pad the batch axis 0"));
  // A refusal on a later axis leaves no op of the earlier ones behind (an opaque import).
  Onnx late = padded({0, 1, 0, 0, 0, 0, -1, 0}, 0, {5, 3, 3});
  model::OnnxImportOptions opaque;
  opaque.allow_opaque = true;
  const auto m = late.import(opaque);
  REQUIRE(m.ok());
  for (const auto& o : m->ops()) CHECK(o.id().rfind("pad.", 0) != 0);
}

TEST_CASE("zero padding of H and W that a Conv reads alone is the convolution's own") {
  Onnx b;
  b.input("x", {2, 4, 4});
  b.init("pads", {8}, {0, 0, 1, 1, 0, 0, 1, 1}, kInt64);
  b.node("Pad", {"x", "pads"}, {"padded"}, "pad");
  b.weight("w", {3, 2, 3, 3});
  b.node("Conv", {"padded", "w"}, {"y"}, "conv");
  b.output("y", {3, 4, 4});
  const auto g = testing::build_graph(b.imported());
  CHECK(op(g, "conv").inputs(0).op() == "x");
  CHECK(testing::attr_ints_of(op(g, "conv"), "padding") == std::vector<int64_t>{1, 1});
  CHECK(g.index_of("pad") < 0);
}

TEST_CASE("a mask written by slice assignment (ScatterND of constants) folds into a constant") {
  Onnx b;
  b.input("x", {2, 3});
  b.constant("zeros", {2, 3}, {0, 0, 0, 0, 0, 0});  // (an initializer would be trained)
  b.init("rows", {1, 1}, {1}, kInt64);              // mask[1, :] = [1, 2, 3]
  b.constant("row_values", {1, 3}, {1, 2, 3});
  b.node("ScatterND", {"zeros", "rows", "row_values"}, {"written"}, "scatter");
  b.init("cell", {1, 2}, {0, 2}, kInt64);  // mask[0, 2] += 5
  b.init("cell_value", {1}, {5});
  Onnx::attr(b.node("ScatterND", {"written", "cell", "cell_value"}, {"mask"}, "scatter_add"),
             "reduction", std::string("add"));
  b.node("Add", {"x", "mask"}, {"y"}, "add");
  b.output("y", {2, 3});
  const auto g = testing::build_graph(b.imported());
  const auto& add = op(g, "add");
  const auto& mask = op(g, add.inputs(1).op());
  CHECK(mask.type() == "constant");
  CHECK(testing::param_floats(mask, "value") == std::vector<float>{0, 0, 5, 1, 2, 3});
}

TEST_CASE("token types gathered from a buffer at the positions (GatherElements) are constant ids") {
  // Hugging Face's BERT: torch.gather(token_type_ids.expand(1, -1), 1, position_ids[:, :S]).
  Onnx b;
  b.input("x", {3, 4});
  b.init("token_type_ids", {1, 5}, {0, 1, 0, 1, 1}, kInt64);
  b.init("positions", {1, 3}, {4, 0, 1}, kInt64);
  Onnx::attr(b.node("GatherElements", {"token_type_ids", "positions"}, {"types"}, "gather_types"),
             "axis", int64_t{1});
  b.init("table", {2, 4}, {0, 1, 2, 3, 4, 5, 6, 7});
  b.node("Gather", {"table", "types"}, {"embedded"}, "types_embedding");
  b.node("Add", {"x", "embedded"}, {"y"}, "add");
  b.output("y", {3, 4});
  const auto g = testing::build_graph(b.imported());
  const auto& lookup = op(g, "types_embedding");
  CHECK(lookup.type() == "embedding");
  const auto& ids = op(g, lookup.inputs(0).op());
  CHECK(ids.type() == "constant");
  CHECK(testing::param_floats(ids, "value") == std::vector<float>{1, 0, 1});
  // Indices past the data are refused by the evaluator, not read out of bounds.
  Onnx bad;
  bad.input("x", {3, 4});
  bad.init("token_type_ids", {1, 5}, {0, 1, 0, 1, 1}, kInt64);
  bad.init("positions", {1, 3}, {4, 0, 5}, kInt64);
  Onnx::attr(bad.node("GatherElements", {"token_type_ids", "positions"}, {"types"}, "gather_types"),
             "axis", int64_t{1});
  bad.init("table", {2, 4}, {0, 1, 2, 3, 4, 5, 6, 7});
  bad.node("Gather", {"table", "types"}, {"embedded"}, "types_embedding");
  bad.node("Add", {"x", "embedded"}, {"y"}, "add");
  bad.output("y", {3, 4});
  CHECK_THAT(bad.refusal(), Catch::Contains("index 5 out of range"));
}

TEST_CASE("slices with steps on two axes (PatchMerging's x[..., 0::2, 1::2, :]) gather") {
  Onnx b;
  b.input("x", {4, 5, 3});
  b.init("starts", {2}, {0, 1}, kInt64);
  b.init("ends", {2}, {kEnd, kEnd}, kInt64);
  b.init("axes", {2}, {1, 2}, kInt64);
  b.init("steps", {2}, {2, 2}, kInt64);
  b.node("Slice", {"x", "starts", "ends", "axes", "steps"}, {"y"}, "merge");
  b.output("y", {2, 2, 3});
  const auto g = testing::build_graph(b.imported());
  const auto& rows = op(g, "merge.0");
  CHECK(rows.type() == "gather");
  CHECK(testing::attr_ints_of(rows, "indices") == std::vector<int64_t>{0, 2});
  const auto& cols = op(g, "merge");
  CHECK(cols.type() == "gather");
  CHECK(cols.inputs(0).op() == "merge.0");
  CHECK(testing::attr_ints_of(cols, "indices") == std::vector<int64_t>{1, 3});
  CHECK(shape(g, "merge") == "[2, 2, 3] float32");
}

TEST_CASE("a slice with a negative step reverses, and step 1 stays a slice op") {
  Onnx b;
  b.input("x", {4, 5});
  b.init("starts", {2}, {-1, 1}, kInt64);
  b.init("ends", {2}, {-kEnd, 3}, kInt64);
  b.init("axes", {2}, {1, 2}, kInt64);
  b.init("steps", {2}, {-1, 1}, kInt64);
  b.node("Slice", {"x", "starts", "ends", "axes", "steps"}, {"y"}, "flip");
  b.output("y", {4, 2});
  const auto g = testing::build_graph(b.imported());
  CHECK(testing::attr_ints_of(op(g, "flip.0"), "indices") == std::vector<int64_t>{3, 2, 1, 0});
  CHECK(op(g, "flip").type() == "slice");
  CHECK(shape(g, "flip") == "[4, 2] float32");
  Onnx zero;
  zero.input("x", {4});
  zero.init("starts", {1}, {0}, kInt64);
  zero.init("ends", {1}, {4}, kInt64);
  zero.init("axes", {1}, {1}, kInt64);
  zero.init("steps", {1}, {0}, kInt64);
  zero.node("Slice", {"x", "starts", "ends", "axes", "steps"}, {"y"}, "bad");
  zero.output("y", {4});
  CHECK_THAT(zero.refusal(), Catch::Contains("'bad' (Slice): a step of 0"));
}

// Phi-3's rotary split with the rotary dimension the whole head: q[..., 8:] of q [batch, 3, 8]
// is empty, and torch.cat([rotated, q[..., 8:]], -1) is the rotated half alone.
Onnx empty_pass(const std::string& reader) {
  Onnx b;
  b.input("q", {3, 8});
  b.init("starts", {1}, {8}, kInt64);
  b.init("ends", {1}, {kEnd}, kInt64);
  b.init("axes", {1}, {-1}, kInt64);
  b.node("Slice", {"q", "starts", "ends", "axes"}, {"pass"}, "pass");
  b.node("Neg", {"q"}, {"rot"}, "rot");
  auto* n = b.node(reader, {"rot", "pass"}, {"y"}, "join");
  if (reader == "Concat") Onnx::attr(n, "axis", int64_t{-1});
  b.output("y", {3, 8});
  return b;
}

TEST_CASE("an empty slice is no tensor: the Concat that reads it drops it") {
  const auto g = testing::build_graph(empty_pass("Concat").imported());
  CHECK(g.index_of("pass") < 0);
  CHECK(g.index_of("join") < 0);  // one tensor left: the Concat is that tensor
  CHECK(shape(g, "rot") == "[3, 8] float32");
  CHECK(op(g, "y.loss").inputs(0).op() == "rot");
  // Any other reader is refused, naming the empty slice.
  CHECK_THAT(empty_pass("Add").refusal(),
             Catch::Contains("'join' (Add): reads 'pass', an empty slice (no elements)"));
}

TEST_CASE("a one-input Concat is its input along any axis, the batch's too") {
  // The legacy export of a key cache torch starts empty: torch.cat([cache, k], dim=-2) with the
  // cache left out, over an axis that may be the batch's after a transpose.
  Onnx b;
  b.input("k", {3, 4});
  b.node("Concat", {"k"}, {"kk"}, "cache");
  Onnx::attr(b.model.mutable_graph()->mutable_node(0), "axis", int64_t{0});
  b.node("Relu", {"kk"}, {"y"}, "act");
  b.output("y", {3, 4});
  const auto g = testing::build_graph(b.imported());
  CHECK(g.index_of("cache") < 0);
  CHECK(op(g, "act").inputs(0).op() == "k");
}

TEST_CASE("an Expand of an activation whose batch is folded with windows broadcasts per sample") {
  // F.normalize in Swin V2's windows: x [batch, 2, 3] viewed as [batch * 2, 3], its L2 norm
  // [batch * 2, 1] expanded back to [batch * 2, 3].
  Onnx b;
  b.input("x", {2, 3});
  b.init("rows", {2}, {-1, 3}, kInt64);
  b.node("Reshape", {"x", "rows"}, {"w"}, "fold");
  b.init("last", {1}, {-1}, kInt64);
  b.node("ReduceL2", {"w", "last"}, {"norm"}, "norm");
  b.node("Shape", {"w"}, {"w_shape"}, "w_shape");
  b.node("Expand", {"norm", "w_shape"}, {"norms"}, "expand");
  b.node("Div", {"w", "norms"}, {"unit"}, "divide");
  b.init("back", {3}, {-1, 2, 3}, kInt64);
  b.node("Reshape", {"unit", "back"}, {"y"}, "unfold");
  b.output("y", {2, 3});
  const auto g = testing::build_graph(b.imported());
  CHECK(op(g, "expand").type() == "binary");
  CHECK(shape(g, "expand") == "[2, 3] float32");  // the two windows of each sample, broadcast
  CHECK(shape(g, "divide") == "[2, 3] float32");
}

// dynamo's as_strided of x [batch, 3] flattened: indices batch_index * stride_batch +
// channel * stride_channel, as [batch, 3, 1] from Range over the batch size.
Onnx strided(int64_t stride_batch, int64_t stride_channel) {
  Onnx b;
  b.input("x", {3});
  b.init("flat", {1}, {-1}, kInt64);
  b.node("Reshape", {"x", "flat"}, {"x_flat"}, "flatten");
  auto* batch = b.node("Shape", {"x"}, {"batch"}, "shape");
  Onnx::attr(batch, "start", int64_t{0});
  Onnx::attr(batch, "end", int64_t{1});
  b.init("zero", {}, {0}, kInt64);
  b.init("one", {}, {1}, kInt64);
  b.init("squeeze_axis", {1}, {0}, kInt64);
  b.node("Squeeze", {"batch", "squeeze_axis"}, {"batch_size"}, "batch_size");
  b.node("Range", {"zero", "batch_size", "one"}, {"samples"}, "samples");
  b.init("stride_batch", {}, {static_cast<double>(stride_batch)}, kInt64);
  b.node("Mul", {"samples", "stride_batch"}, {"sample_offsets"}, "sample_offsets");
  b.init("sample_axes", {2}, {1, 2}, kInt64);
  b.node("Unsqueeze", {"sample_offsets", "sample_axes"}, {"sample_index"}, "sample_index");
  b.init("channels", {3}, {0, static_cast<double>(stride_channel), 2.0 * stride_channel}, kInt64);
  b.init("channel_axes", {2}, {0, 2}, kInt64);
  b.node("Unsqueeze", {"channels", "channel_axes"}, {"channel_index"}, "channel_index");
  b.node("Add", {"sample_index", "channel_index"}, {"index"}, "index");
  b.node("Gather", {"x_flat", "index"}, {"y"}, "as_strided");
  b.output("y", {3, 1});
  return b;
}

TEST_CASE("a slice going backward clamps its start into the axis, and an axis twice is refused") {
  Onnx b;
  b.input("x", {4});
  b.init("starts", {1}, {-10}, kInt64);  // before the first element: clamped to it
  b.init("ends", {1}, {-kEnd}, kInt64);
  b.init("axes", {1}, {1}, kInt64);
  b.init("steps", {1}, {-1}, kInt64);
  b.node("Slice", {"x", "starts", "ends", "axes", "steps"}, {"y"}, "first");
  b.output("y", {1});
  const auto g = testing::build_graph(b.imported());
  CHECK(testing::attr_ints_of(op(g, "first"), "indices") == std::vector<int64_t>{0});
  Onnx twice;
  twice.input("x", {4, 4});
  twice.init("starts", {2}, {0, 1}, kInt64);
  twice.init("ends", {2}, {4, 3}, kInt64);
  twice.init("axes", {2}, {2, -1}, kInt64);
  twice.node("Slice", {"x", "starts", "ends", "axes"}, {"y"}, "twice");
  twice.output("y", {4, 2});
  CHECK_THAT(twice.refusal(), Catch::Contains("'twice' (Slice): axis 2 is sliced twice"));
}

TEST_CASE("dynamo's as_strided that reads every element in order is a reshape") {
  const auto g = testing::build_graph(strided(3, 1).imported());
  const auto& view = op(g, "as_strided");
  CHECK(view.type() == "reshape");
  CHECK(shape(g, "as_strided") == "[3, 1] float32");
  // Reading the elements in another order (a transposed view) is not a reshape: refused.
  CHECK_THAT(strided(1, 4).refusal(),
             Catch::Contains("'as_strided' (Gather): only a lookup in a weight table"));
}

TEST_CASE("einsum attention maps to matmul, transposing the operand whose labels are swapped") {
  Onnx b;
  b.input("q", {2, 5, 3});
  b.input("k", {2, 5, 3});
  Onnx::attr(b.node("Einsum", {"q", "k"}, {"scores"}, "scores"), "equation",
             std::string("bhid,bhjd->bhij"));
  // The operand holding the output's row label may come second.
  Onnx::attr(b.node("Einsum", {"k", "scores"}, {"mixed"}, "mix"), "equation",
             std::string("bhjd, bhij -> bhid"));
  b.output("mixed", {2, 5, 3});
  const auto g = testing::build_graph(b.imported());
  CHECK(op(g, "scores").type() == "matmul");
  CHECK(op(g, "scores").inputs(0).op() == "q");
  // (The transpose of k folds into the product: matmul_folds.cc.)
  CHECK(op(g, "scores").inputs(1).op() == "k");
  CHECK(op(g, "scores").attrs().at("transpose_b").i() == 1);
  CHECK(shape(g, "scores") == "[2, 5, 5] float32");
  CHECK(op(g, "mix").type() == "matmul");
  CHECK(op(g, "mix").inputs(0).op() == "scores");
  CHECK(op(g, "mix").inputs(1).op() == "k");
  CHECK(op(g, "mix").attrs().count("transpose_b") == 0);
  CHECK(shape(g, "mix") == "[2, 5, 3] float32");
  Onnx diag;
  diag.input("q", {5, 5});
  Onnx::attr(diag.node("Einsum", {"q", "q"}, {"y"}, "diag"), "equation",
             std::string("bii,bij->bij"));
  diag.output("y", {5, 5});
  CHECK_THAT(diag.refusal(), Catch::Contains("'bii,bij->bij' is not a batched matrix product"));
}

TEST_CASE("einsum operands whose shapes broadcast are refused, naming the shapes") {
  Onnx b;
  b.input("q", {1, 5, 3});
  b.input("k", {2, 5, 3});
  Onnx::attr(b.node("Einsum", {"q", "k"}, {"scores"}, "scores"), "equation",
             std::string("bhid,bhjd->bhij"));
  b.output("scores", {2, 5, 5});
  CHECK_THAT(b.refusal(), Catch::Contains("'scores' (Einsum)") &&
                              Catch::Contains("[1, 5, 3] and [2, 5, 3]") &&
                              Catch::Contains("no broadcasting"));
}

TEST_CASE("random draws (stochastic depth left on in training mode) are refused with the fix") {
  Onnx b;
  b.input("x", {3});
  b.node("RandomUniformLike", {"x"}, {"u"}, "draw");
  b.node("Mul", {"x", "u"}, {"y"}, "keep");
  b.output("y", {3});
  CHECK_THAT(b.refusal(), Catch::Contains("'draw' (RandomUniformLike): draws random numbers") &&
                              Catch::Contains("drop probability 0"));
}

// x * (w > 0), and where `trained_too`, + w: a weight read only by comparisons, and one that
// also trains.
Onnx gated(bool trained_too) {
  Onnx b;
  b.input("x", {3});
  b.init("w", {3}, {-1, 2, 3});
  b.init("zero", {}, {0.0});
  // A chain of views deeper than 16 before the comparison (Swin's mask is one).
  std::string at = "w";
  for (int k = 0; k < 20; ++k) {
    const std::string next = "view" + std::to_string(k);
    b.node("Identity", {at}, {next}, next);
    at = next;
  }
  b.node("Greater", {at, "zero"}, {"positive"}, "positive");
  Onnx::attr(b.node("Cast", {"positive"}, {"gate"}, "gate"), "to", int64_t{1});
  b.node("Mul", {"x", "gate"}, {trained_too ? "gated" : "y"}, "mul");
  if (trained_too) b.node("Add", {"gated", "w"}, {"y"}, "add");
  b.output("y", {3});
  return b;
}

TEST_CASE("a comparison of a weight only ever compared folds, of a weight that trains is refused") {
  const auto g = testing::build_graph(gated(false).imported());
  const auto& mask = op(g, op(g, "mul").inputs(1).op());
  CHECK(mask.type() == "constant");
  CHECK(testing::param_floats(mask, "value") == std::vector<float>{0, 1, 1});
  // A straight-through gate: w trains, so w > 0 would change; folding it would freeze it.
  CHECK_THAT(gated(true).refusal(), Catch::Contains("computes from a trained weight"));
}

TEST_CASE("InstanceNormalization (nn.GroupNorm lowered) normalises each channel from general ops") {
  // GroupNorm(2, 4) of x [batch, 4, 3] as torch lowers it: [batch, 2, 6], normalised per group.
  Onnx b;
  b.input("x", {2, 6});
  b.constant("scale", {2}, {1, 1});
  b.constant("bias", {2}, {0, 0.5});
  Onnx::attr_float(b.node("InstanceNormalization", {"x", "scale", "bias"}, {"y"}, "norm"),
                   "epsilon", 0.25f);
  b.output("y", {2, 6});
  const auto g = testing::build_graph(b.imported());
  CHECK(op(g, "norm.mean").type() == "reduce");
  CHECK(text(op(g, "norm.mean"), "mode") == "mean");
  CHECK(testing::attr_ints_of(op(g, "norm.mean"), "axes") == std::vector<int64_t>{1});
  CHECK(text(op(g, "norm.centered"), "fn") == "sub");
  CHECK(op(g, "norm.variance").inputs(0).op() == "norm.square");
  CHECK(text(op(g, "norm.rstd"), "fn") == "rsqrt");
  CHECK(op(g, "norm.variance_eps").inputs(0).op() == "norm.variance");
  CHECK(testing::param_floats(op(g, "norm.epsilon"), "value") == std::vector<float>{0.25f});
  // A scale of ones is no op; the bias is a constant per channel, [channels, 1].
  CHECK(g.index_of("norm.scaled") < 0);
  CHECK(op(g, "norm").inputs(0).op() == "norm.normalised");
  const auto& bias = op(g, op(g, "norm").inputs(1).op());
  CHECK(testing::attr_ints_of(bias, "shape") == std::vector<int64_t>{2, 1});
  CHECK(testing::param_floats(bias, "value") == std::vector<float>{0, 0.5f});
  CHECK(shape(g, "norm") == "[2, 6] float32");
  // A trained scale (an initializer, nn.InstanceNorm2d(affine=True) in a legacy export): refused.
  Onnx trained;
  trained.input("x", {2, 6});
  trained.init("instance.weight", {2}, {1, 1});
  trained.constant("bias", {2}, {0, 0});
  trained.node("InstanceNormalization", {"x", "instance.weight", "bias"}, {"y"}, "norm");
  trained.output("y", {2, 6});
  CHECK_THAT(trained.refusal(), Catch::Contains("its scale 'instance.weight' is not a constant"));
}

// InstanceNormalization of initializers `scale` and `bias` [2], the node's fx metadata `fx`.
Onnx folded_affine(const std::string& fx, double scale) {
  Onnx b;
  b.input("x", {2, 6});
  b.init("val_8", {2}, {scale, scale});
  b.init("val_11", {2}, {0, 0});
  auto* norm = b.node("InstanceNormalization", {"x", "val_8", "val_11"}, {"y"}, "norm");
  Onnx::metadata(norm, "pkg.torch.onnx.fx_node", fx);
  b.output("y", {2, 6});
  return b;
}

TEST_CASE("dynamo's folded ones and zeros of GroupNorm's lowering are constants, a parameter not") {
  const std::string group =
      "%group_norm : = call_function[target=torch.ops.aten.group_norm.default](args = (%conv2d, "
      "2, %p_group_weight, %p_group_bias, 1e-05, False";
  const auto m = folded_affine(group, 1).imported();
  for (const auto& o : m.ops()) CHECK(o.params_size() == 0);  // nothing trained
  // Not ones: not the lowering's, refused rather than frozen.
  CHECK_THAT(folded_affine(group, 2).refusal(), Catch::Contains("its scale 'val_8'"));
  // nn.InstanceNorm2d(affine=True): its weight is a parameter, refused rather than frozen.
  const std::string instance =
      "%instance_norm : = call_function[target=torch.ops.aten.instance_norm.default](args = "
      "(%x, %p_instance_weight, %p_instance_bias, None, None, True";
  CHECK_THAT(folded_affine(instance, 1).refusal(),
             Catch::Contains("its scale 'val_8' is not a constant"));
}

TEST_CASE("CastLike takes its input 1's type: a mask makes booleans, a viewed weight stays") {
  Onnx b;
  b.input("x", {2, 3});
  b.init("zero", {}, {0.0});
  b.node("Greater", {"x", "zero"}, {"positive"}, "positive");
  b.node("CastLike", {"x", "positive"}, {"nonzero"}, "to_bool");
  b.init("weight", {2}, {0.5, 2});
  b.init("axes", {2}, {0, 2}, kInt64);
  b.node("Unsqueeze", {"weight", "axes"}, {"view"}, "view");  // weight.view(1, 2, 1)
  b.node("CastLike", {"view", "x"}, {"cast"}, "cast");
  b.node("Mul", {"nonzero", "cast"}, {"y"}, "mul");
  b.output("y", {2, 3});
  const auto g = testing::build_graph(b.imported());
  CHECK(op(g, "to_bool").type() == "compare");  // x != 0
  CHECK(text(op(g, "to_bool"), "fn") == "ne");
  const auto& view = op(g, op(g, "mul").inputs(1).op());  // [2, 1] of the trained [2]
  CHECK(view.type() == "reshape");
  const auto& weight = op(g, view.inputs(0).op());
  CHECK(weight.type() == "broadcast_param");
  CHECK(testing::param_floats(weight, "value") == std::vector<float>{0.5f, 2});
  CHECK(shape(g, "mul") == "[2, 3] float32");
}

TEST_CASE("CastLike of a weight like an activation is the weight (dynamo's GroupNorm affine)") {
  Onnx b;
  b.input("x", {2, 3});
  b.init("weight", {2}, {0.5, 2});
  b.init("axes", {1}, {1}, kInt64);
  b.node("Unsqueeze", {"weight", "axes"}, {"per_channel"}, "view");
  b.node("CastLike", {"per_channel", "x"}, {"cast"}, "cast");
  b.node("Mul", {"x", "cast"}, {"y"}, "mul");
  b.output("y", {2, 3});
  const auto g = testing::build_graph(b.imported());
  const auto& weight = op(g, op(g, "mul").inputs(1).op());
  CHECK(weight.type() == "broadcast_param");  // trained
  CHECK(testing::param_floats(weight, "value") == std::vector<float>{0.5f, 2});
  CHECK(shape(g, "mul") == "[2, 3] float32");
}

TEST_CASE("a folded additive mask of finfo.min is a buffer, never trained") {
  // torch 2.x's optimiser folds SDPA's boolean mask into Where(mask, 0, finfo(float32).min).
  const double lowest = std::numeric_limits<float>::lowest();
  Onnx b;
  b.input("x", {2, 2});
  b.init("val_75", {2, 2}, {0, lowest, 0, 0});
  b.node("Add", {"x", "val_75"}, {"y"}, "masked");
  b.output("y", {2, 2});
  const auto g = testing::build_graph(b.imported());
  const auto& masked = op(g, "masked");
  CHECK(masked.type() == "binary");  // an add of a constant, not a learned bias_add
  const auto& mask = op(g, masked.inputs(1).op());
  CHECK(mask.type() == "constant");
  CHECK(mask.params_size() == 0);
}

TEST_CASE("the shape of a slice of a constant cast like an activation (CastLike) is its own") {
  // torchvision's Swin: x.new_zeros((H, W)) is CastLike(ConstantOfShape, x); its slices' shapes
  // were read as one flat list.
  Onnx b;
  b.input("x", {8});
  b.init("hw", {2}, {8, 8}, kInt64);
  b.node("ConstantOfShape", {"hw"}, {"zeros"}, "zeros");
  b.node("CastLike", {"zeros", "x"}, {"like"}, "new_zeros");
  b.init("start", {1}, {0}, kInt64);
  b.init("end", {1}, {-4}, kInt64);
  b.init("axis", {1}, {0}, kInt64);
  b.node("Slice", {"like", "start", "end", "axis"}, {"rows"}, "rows");
  b.node("Shape", {"rows"}, {"rows_shape"}, "rows_shape");
  b.init("second", {}, {1}, kInt64);
  b.node("Gather", {"rows_shape", "second"}, {"width"}, "width");
  Onnx::attr(b.node("Cast", {"width"}, {"width_f"}, "width_f"), "to", int64_t{1});
  b.node("Add", {"x", "width_f"}, {"y"}, "add");
  b.output("y", {8});
  const auto g = testing::build_graph(b.imported());
  const auto& width = op(g, op(g, "add").inputs(1).op());
  CHECK(width.type() == "constant");
  CHECK(testing::param_floats(width, "value") == std::vector<float>{8});
}

TEST_CASE("a global pool of [C, L] (Swin's nn.AdaptiveAvgPool1d(1) pooler) reduces over L") {
  for (const std::string type : {"GlobalAveragePool", "GlobalMaxPool"}) {
    Onnx b;
    b.input("x", {4, 6});
    b.node(type, {"x"}, {"y"}, "pool");
    b.output("y", {4, 1});
    const auto g = testing::build_graph(b.imported());
    const auto& pool = op(g, "pool");
    CHECK(pool.type() == "reduce");
    CHECK(text(pool, "mode") == (type == "GlobalMaxPool" ? "max" : "mean"));
    CHECK(shape(g, "pool") == "[4, 1] float32");
  }
  Onnx flat;  // [C]: nothing to pool over
  flat.input("x", {4});
  flat.node("GlobalAveragePool", {"x"}, {"y"}, "pool");
  flat.output("y", {4});
  CHECK_THAT(flat.refusal(), Catch::Contains("a global pool of an input that is not [C, L]"));
}

}  // namespace
}  // namespace gp::model
