// ONNX element-wise code that no fused pattern takes (PyTorch's RMSNorm, masked_fill, position
// ids, broadcasting arithmetic) imports onto the general ops: graphs built here in memory, each
// checked for the ops, attributes and shapes it maps to, and for the refusals that name the
// real blocker (the batch axis broadcast, a value that could not be folded, an integer cast).
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "../support/models.h"
#include "../support/onnx_builder.h"
#include "gp/model/onnx_import.h"
#include "onnx/onnx_pb.h"

namespace gp::model {
namespace {

constexpr int kFloat = testing::kOnnxFloat;
constexpr int kInt64 = testing::kOnnxInt64;
constexpr int kBool = testing::kOnnxBool;
using Onnx = testing::OnnxBuilder;
using testing::type_counts;

const graphpipe::v1::Operator& op(const Graph& g, const std::string& id) {
  return testing::imported_op(g, id);
}
std::string shape(const Graph& g, const std::string& id) {
  return shape_string(op(g, id).outputs(0));
}
std::string fn(const Graph& g, const std::string& id) { return op(g, id).attrs().at("fn").s(); }
std::vector<int64_t> ints(const graphpipe::v1::Operator& o, const std::string& attr) {
  return testing::attr_ints_of(o, attr);
}
std::vector<float> values(const graphpipe::v1::Operator& o, const std::string& param) {
  return testing::param_floats(o, param);
}

TEST_CASE("broadcasting Add, Mul, Div and Pow of activations map to binary ops, NumPy shapes") {
  Onnx b;
  b.input("x", {4, 1, 8});
  b.input("y", {1, 5, 1});
  b.node("Add", {"x", "y"}, {"s"}, "add");
  b.node("Mul", {"s", "y"}, {"p"}, "mul");
  b.node("Div", {"p", "x"}, {"q"}, "div");
  b.node("Pow", {"q", "y"}, {"r"}, "pow");
  b.output("r", {4, 5, 8});
  const auto g = testing::build_graph(b.imported());
  for (const auto& [id, f] : std::map<std::string, std::string>{
           {"add", "add"}, {"mul", "mul"}, {"div", "div"}, {"pow", "pow"}}) {
    INFO(id);
    CHECK(op(g, id).type() == "binary");
    CHECK(fn(g, id) == f);
    CHECK(shape(g, id) == "[4, 5, 8] float32");
  }
  CHECK(op(g, "add").inputs(0).op() == "x");
  CHECK(op(g, "add").inputs(1).op() == "y");
}

TEST_CASE("operands of lower rank: constants and weights broadcast over the trailing axes") {
  Onnx b;
  b.input("x", {3, 6});
  b.constant("c", {6}, {1, 2, 3, 4, 5, 6});
  b.init("w", {6}, {0.5, -0.5, 1, -1, 2, -2});  // a trained weight
  b.init("two", {}, {2.0});                     // a scalar: a constant, not a parameter
  b.node("Sub", {"x", "c"}, {"a"}, "sub");
  b.node("Max", {"a", "w"}, {"m"}, "max");
  b.node("Pow", {"m", "two"}, {"p"}, "pow");
  b.node("Div", {"two", "p"}, {"y"}, "div");
  b.output("y", {3, 6});
  const auto m = b.imported();
  const auto g = testing::build_graph(m);
  CHECK(fn(g, "sub") == "sub");
  CHECK(op(g, "sub.1").type() == "constant");
  CHECK(ints(op(g, "sub.1"), "shape") == std::vector<int64_t>{6});
  CHECK(values(op(g, "sub.1"), "value") == std::vector<float>{1, 2, 3, 4, 5, 6});
  // The weight is trained: a broadcast_param holding its values, with its source for export.
  CHECK(op(g, "max.1").type() == "broadcast_param");
  CHECK(values(op(g, "max.1"), "value") == std::vector<float>{0.5f, -0.5f, 1, -1, 2, -2});
  CHECK(g.op(g.index_of("max.1")).cost.param_count == 6);
  bool sourced = false;
  for (const auto& s : m.param_sources())
    sourced = sourced || (s.op() == "max.1" && s.initializer() == "w");
  CHECK(sourced);
  CHECK(op(g, "pow.1").type() == "constant");
  CHECK(ints(op(g, "pow.1"), "shape") == std::vector<int64_t>{1});
  CHECK(op(g, "div.0").type() == "constant");  // 2 / p
  CHECK(fn(g, "div") == "div");
  CHECK(shape(g, "div") == "[3, 6] float32");
  CHECK(type_counts(m)["broadcast_param"] == 1);
}

// GPT-J: sincos = embed_positions[position_ids]; sin, cos = torch.split(sincos, d // 2, dim=-1);
// y = x * cos + x * sin. The table is a buffer (a Constant), the positions constant. With
// `sequence`, dynamo's unoptimised SplitToSequence and SequenceAt instead of Split.
Onnx rotary_tables(bool sequence, const std::vector<double>& sizes) {
  Onnx b;
  b.input("x", {3, 2});
  std::vector<double> table;
  for (int k = 0; k < 16; ++k) table.push_back(k);
  b.constant("embed_positions", {4, 4}, table);
  b.constant("position_ids", {3}, {0, 1, 2}, kInt64);
  b.node("Gather", {"embed_positions", "position_ids"}, {"sincos"}, "lookup");
  b.init("sizes", {static_cast<int64_t>(sizes.size())}, sizes, kInt64);
  if (sequence) {
    Onnx::attr(b.node("SplitToSequence", {"sincos", "sizes"}, {"pieces"}, "split"), "axis", -1);
    b.constant("first", {}, {0}, kInt64);
    b.constant("last", {}, {-1}, kInt64);
    b.node("SequenceAt", {"pieces", "first"}, {"sin"}, "at_sin");
    b.node("SequenceAt", {"pieces", "last"}, {"cos"}, "at_cos");
  } else {
    Onnx::attr(b.node("Split", {"sincos", "sizes"}, {"sin", "cos"}, "split"), "axis", -1);
  }
  b.node("Mul", {"x", "cos"}, {"xc"}, "mul_cos");
  b.node("Mul", {"x", "sin"}, {"xs"}, "mul_sin");
  b.node("Add", {"xc", "xs"}, {"y"}, "add");
  b.output("y", {3, 2});
  return b;
}

TEST_CASE("a Split of a table gathered from a constant buffer folds into constant pieces") {
  for (const bool sequence : {false, true}) {
    INFO((sequence ? "SplitToSequence and SequenceAt" : "Split"));
    const auto g = testing::build_graph(rotary_tables(sequence, {2, 2}).imported());
    const auto& cos = op(g, op(g, "mul_cos").inputs(1).op());
    const auto& sin = op(g, op(g, "mul_sin").inputs(1).op());
    REQUIRE(cos.type() == "constant");
    REQUIRE(sin.type() == "constant");
    // Rows 0-2 of the table; sine is each row's first half, cosine its second.
    CHECK(values(sin, "value") == std::vector<float>{0, 1, 4, 5, 8, 9});
    CHECK(values(cos, "value") == std::vector<float>{2, 3, 6, 7, 10, 11});
    CHECK(shape(g, "mul_cos") == "[3, 2] float32");
  }
}

TEST_CASE("a Split of constants whose sizes do not fit the axis is refused, saying so") {
  for (const bool sequence : {false, true}) {
    INFO((sequence ? "SplitToSequence" : "Split"));
    const auto m = rotary_tables(sequence, {2, 3}).import();
    REQUIRE_FALSE(m.ok());
    CHECK_THAT(m.status().message(),
               Catch::Contains("'split'") && Catch::Contains("split sizes add up to 5"));
  }
}

// RoBERTa: mask = ids.ne(pad).int(); pos = (cumsum(mask, 1) * mask).long() + pad; table[pos].
TEST_CASE("position ids counted from the ids' padding mask import as cast, cumsum and a lookup") {
  Onnx b;
  b.input("ids", {4}, kInt64);
  b.init("pad", {}, {1}, kInt64);
  b.node("Equal", {"ids", "pad"}, {"is_pad"}, "eq");
  b.node("Not", {"is_pad"}, {"kept"}, "ne");
  Onnx::attr(b.node("Cast", {"kept"}, {"mask"}, "to_int"), "to", int64_t{6});
  b.init("axis", {}, {1}, kInt64);
  b.node("CumSum", {"mask", "axis"}, {"counted"}, "count");
  b.node("Mul", {"counted", "mask"}, {"masked"}, "mul");
  Onnx::attr(b.node("Cast", {"masked"}, {"long"}, "to_long"), "to", int64_t{7});
  b.node("Add", {"long", "pad"}, {"pos"}, "add_pad");
  b.weight("positions", {8, 3});
  b.node("Gather", {"positions", "pos"}, {"y"}, "lookup");
  b.output("y", {4, 3});
  const auto g = testing::build_graph(b.imported());
  // The ids are read as float32 numbers once, counted along their per-sample axis, and the
  // counts go back to int64 ids for the table.
  const auto& count = op(g, "count");
  CHECK(count.type() == "cumsum");
  CHECK(count.attrs().at("axis").i() == 0);
  const auto& ids = op(g, op(g, "eq").inputs(0).op());
  CHECK(ids.type() == "cast");
  CHECK(ids.inputs(0).op() == "ids");
  CHECK(op(g, "mul").type() == "binary");
  CHECK(op(g, "add_pad").type() == "binary");
  const auto& lookup = op(g, "lookup");
  CHECK(lookup.type() == "embedding");
  const auto& back = op(g, lookup.inputs(0).op());
  CHECK(back.type() == "cast");
  CHECK(back.attrs().at("dtype").s() == "int64");
  CHECK(back.inputs(0).op() == "add_pad");
  CHECK(shape(g, "lookup") == "[4, 3] float32");
}

// RoBERTa's token types: torch.gather(zeros(1, P).expand(B, -1), 1, position_ids).
Onnx types_gathered_at_positions(const std::vector<double>& buffer) {
  Onnx b;
  b.input("pos", {3}, kInt64);
  b.init("types", {1, 4}, buffer, kInt64);
  b.init("shape", {2}, {-1, 4}, kInt64);  // (-1: the batch, as torch writes it; 1 keeps 4)
  b.node("Shape", {"pos"}, {"dims"}, "dims");
  b.init("first", {1}, {0}, kInt64);
  b.node("Gather", {"dims", "first"}, {"batch"}, "batch");
  b.init("four", {1}, {4}, kInt64);
  Onnx::attr(b.node("Concat", {"batch", "four"}, {"target"}, "target"), "axis", int64_t{0});
  b.node("Expand", {"types", "target"}, {"expanded"}, "expand");
  Onnx::attr(b.node("GatherElements", {"expanded", "pos"}, {"picked"}, "pick"), "axis", int64_t{1});
  b.weight("table", {2, 3});
  b.node("Gather", {"table", "picked"}, {"y"}, "lookup");
  b.output("y", {3, 3});
  return b;
}

TEST_CASE("GatherElements of a buffer of one repeated value at per-sample indices is that value") {
  const auto g = testing::build_graph(types_gathered_at_positions({0, 0, 0, 0}).imported());
  const auto& lookup = op(g, "lookup");
  CHECK(lookup.type() == "embedding");
  const auto& ids = op(g, lookup.inputs(0).op());
  CHECK(ids.type() == "constant");  // the zeros, the same row for every sample
  CHECK(values(ids, "value") == std::vector<float>{0, 0, 0});
  CHECK(shape(g, "lookup") == "[3, 3] float32");

  const auto m = types_gathered_at_positions({0, 1, 0, 1}).import();
  REQUIRE_FALSE(m.ok());
  CHECK_THAT(m.status().message(),
             Catch::Contains("'pick' (GatherElements)") && Catch::Contains("whose values differ"));
}

TEST_CASE("integer arithmetic: Neg and Where stay integers, integer Div is refused") {
  Onnx b;
  b.input("ids", {4}, kInt64);
  b.node("Neg", {"ids"}, {"neg"}, "neg");
  b.node("Add", {"ids", "neg"}, {"zero"}, "sum");  // ids + (-ids): both integers
  b.weight("table", {5, 2});
  b.node("Gather", {"table", "zero"}, {"y"}, "lookup");
  b.output("y", {4, 2});
  const auto g = testing::build_graph(b.imported());
  CHECK(op(g, "neg").type() == "unary");
  CHECK(op(g, "sum").type() == "binary");
  CHECK(op(g, op(g, "lookup").inputs(0).op()).type() == "cast");

  Onnx d;
  d.input("ids", {4}, kInt64);
  d.init("two", {}, {2}, kInt64);
  d.node("Div", {"ids", "two"}, {"half"}, "halve");
  d.weight("table", {5, 2});
  d.node("Gather", {"table", "half"}, {"y"}, "lookup");
  d.output("y", {4, 2});
  CHECK_THAT(d.refusal(), Catch::Contains("'halve' (Div): divides integers"));
}

TEST_CASE("a float tensor cast to int64 is truncated by a cast op, not refused") {
  Onnx b;
  b.input("x", {3});
  Onnx::attr(b.node("Cast", {"x"}, {"ids"}, "to_long"), "to", int64_t{7});
  b.weight("table", {5, 2});
  b.node("Gather", {"table", "ids"}, {"y"}, "lookup");
  b.output("y", {3, 2});
  const auto g = testing::build_graph(b.imported());
  CHECK(op(g, "to_long").type() == "cast");
  CHECK(op(g, "to_long").attrs().at("dtype").s() == "int64");
  CHECK(op(g, "lookup").inputs(0).op() == "to_long");
}

TEST_CASE("Trilu + Where folds a causal mask into one constant, as masked_fill exports it") {
  Onnx b;
  b.input("scores", {2, 4, 4});  // [batch, heads, T, T]
  b.init("size", {2}, {4, 4}, kInt64);
  auto* ones = b.node("ConstantOfShape", {"size"}, {"ones"}, "ones");
  auto* one = ones->add_attribute();
  one->set_name("value");
  one->set_type(onnx::AttributeProto::TENSOR);
  Onnx::fill(one->mutable_t(), "v", {1}, {1.0}, kFloat);
  Onnx::attr(b.node("Trilu", {"ones"}, {"tril"}, "tril"), "upper", 0);
  b.constant("zero", {}, {0.0});
  b.node("Equal", {"tril", "zero"}, {"masked"}, "eq");
  b.constant("ninf", {}, {-INFINITY});
  b.node("Where", {"masked", "ninf", "scores"}, {"filled"}, "masked_fill");
  Onnx::attr(b.node("Softmax", {"filled"}, {"y"}, "softmax"), "axis", -1);
  b.output("y", {2, 4, 4});
  const auto m = b.imported();
  const auto counts = type_counts(m);
  CHECK(counts.at("where") == 1);
  CHECK(counts.at("constant") == 2);  // the mask and -inf
  CHECK(counts.count("compare") == 0);
  const auto g = testing::build_graph(m);
  const auto& mask = op(g, "masked_fill.0");
  CHECK(mask.type() == "constant");
  CHECK(ints(mask, "shape") == std::vector<int64_t>{4, 4});
  // 1 above the diagonal (where torch.tril is 0), else 0.
  std::vector<float> want;
  for (int i = 0; i < 4; ++i) {
    for (int j = 0; j < 4; ++j) want.push_back(j > i ? 1.0f : 0.0f);
  }
  CHECK(values(mask, "value") == want);
  CHECK(values(op(g, "masked_fill.1"), "value") == std::vector<float>{-INFINITY});
  CHECK(shape(g, "masked_fill") == "[2, 4, 4] float32");
  CHECK(op(g, "softmax").type() == "softmax");
}

TEST_CASE("a constant mask expanded over the batch is a constant, not a trained weight") {
  // HuggingFace's _expand_mask: mask[None, None].expand(batch, 1, T, T) of a boolean constant.
  Onnx b;
  b.input("scores", {1, 3, 3});
  b.init("causal", {1, 1, 3, 3}, {0, 1, 1, 0, 0, 1, 0, 0, 0}, kBool);
  b.node("Shape", {"scores"}, {"s"}, "shape");
  b.init("zero", {1}, {0}, kInt64);
  Onnx::attr(b.node("Gather", {"s", "zero"}, {"batch"}, "batch"), "axis", 0);
  b.init("rest", {3}, {1, 3, 3}, kInt64);
  Onnx::attr(b.node("Concat", {"batch", "rest"}, {"target"}, "target"), "axis", 0);
  b.node("Expand", {"causal", "target"}, {"mask"}, "expand");
  b.init("big_negative", {}, {-1e9});
  b.node("Where", {"mask", "big_negative", "scores"}, {"y"}, "fill");
  b.output("y", {1, 3, 3});
  const auto m = b.imported();
  CHECK(type_counts(m)["broadcast_param"] == 0);
  const auto g = testing::build_graph(m);
  // The expanded mask, the same for every sample, folds; the Where reads it as a constant.
  const auto& mask = op(g, op(g, "fill").inputs(0).op());
  CHECK(mask.type() == "constant");
  CHECK(ints(mask, "shape") == std::vector<int64_t>{1, 3, 3});
  CHECK(values(mask, "value") == std::vector<float>{0, 1, 1, 0, 0, 1, 0, 0, 0});
  CHECK(mask.inputs(0).op() == "scores");  // the batch comes from the scores
  CHECK(g.total_params() == 0);
}

TEST_CASE("an integer constant expanded over the batch and compared is a float mask") {
  // Only table lookups keep an expanded integer constant int64 (position ids); a comparison
  // reads it as floats.
  Onnx b;
  b.input("x", {4});
  b.init("keep", {1, 4}, {1, 1, 0, 0}, kInt64);
  b.node("Shape", {"x"}, {"s"}, "shape");
  b.init("zero", {1}, {0}, kInt64);
  Onnx::attr(b.node("Gather", {"s", "zero"}, {"batch"}, "batch"), "axis", 0);
  b.init("rest", {1}, {4}, kInt64);
  Onnx::attr(b.node("Concat", {"batch", "rest"}, {"target"}, "target"), "axis", 0);
  b.node("Expand", {"keep", "target"}, {"mask"}, "expand");
  b.init("zero_value", {}, {0}, kInt64);
  b.node("Equal", {"mask", "zero_value"}, {"dropped"}, "equal");
  b.init("big_negative", {}, {-1e4});
  b.node("Where", {"dropped", "big_negative", "x"}, {"y"}, "fill");
  b.output("y", {4});
  const auto g = testing::build_graph(b.imported());
  const auto& fill = op(g, "fill");
  CHECK(fill.type() == "where");
  CHECK(shape(g, fill.inputs(0).op()) == "[4] float32");
}

TEST_CASE("a registered float buffer compared into a mask folds, and is no parameter") {
  // nanoGPT: self.bias (a tril buffer [1, 1, T, T]) sliced to T and compared with 0.
  Onnx b;
  b.input("scores", {2, 3, 3});
  std::vector<double> tril;
  for (int i = 0; i < 4; ++i) {
    for (int j = 0; j < 4; ++j) tril.push_back(j <= i ? 1 : 0);
  }
  b.init("bias", {1, 1, 4, 4}, tril);
  b.init("starts", {2}, {0, 0}, kInt64);
  b.init("ends", {2}, {3, 3}, kInt64);
  b.init("axes", {2}, {2, 3}, kInt64);
  b.node("Slice", {"bias", "starts", "ends", "axes"}, {"t"}, "slice");
  b.init("zero", {}, {0.0});
  b.node("Equal", {"t", "zero"}, {"masked"}, "eq");
  b.init("big_negative", {}, {-1e9});
  b.node("Where", {"masked", "big_negative", "scores"}, {"y"}, "fill");
  b.output("y", {2, 3, 3});
  const auto m = b.imported();
  CHECK(type_counts(m)["broadcast_param"] == 0);
  const auto g = testing::build_graph(m);
  // [1, 1, 3, 3] against [batch, 2, 3, 3]: the leading 1 broadcasts over the batch.
  CHECK(ints(op(g, "fill.0"), "shape") == std::vector<int64_t>{1, 3, 3});
  CHECK(values(op(g, "fill.0"), "value") == std::vector<float>{0, 1, 1, 0, 0, 1, 0, 0, 0});
  CHECK(g.total_params() == 0);
}

TEST_CASE("Range + Gather position ids become an int64 constant read by an embedding") {
  Onnx b;
  b.input("x", {5, 8});
  b.node("Shape", {"x"}, {"shape"}, "shape");
  b.init("one", {}, {1}, kInt64);
  b.init("zero", {}, {0}, kInt64);
  Onnx::attr(b.node("Gather", {"shape", "one"}, {"t"}, "seq_len"), "axis", 0);
  b.node("Range", {"zero", "t", "one"}, {"pos"}, "arange");
  std::vector<double> table(40);
  for (size_t k = 0; k < table.size(); ++k) table[k] = 0.01 * static_cast<double>(k);
  b.init("wpe.weight", {5, 8}, table);
  b.node("Gather", {"wpe.weight", "pos"}, {"pe"}, "wpe");
  b.node("Add", {"x", "pe"}, {"h"}, "add_pos");
  b.node("Relu", {"h"}, {"y"}, "relu");
  b.output("y", {5, 8});
  const auto g = testing::build_graph(b.imported());
  const auto& ids = op(g, "wpe.ids");
  CHECK(ids.type() == "constant");
  CHECK(ids.attrs().at("dtype").s() == "int64");
  CHECK(values(ids, "value") == std::vector<float>{0, 1, 2, 3, 4});
  CHECK(shape(g, "wpe.ids") == "[5] int64");
  CHECK(op(g, "wpe").type() == "embedding");
  CHECK(values(op(g, "wpe"), "weight").size() == 40);
  // [batch, 5, 8] + [5, 8]: one shape per sample, the plain add.
  CHECK(op(g, "add_pos").type() == "add");
  CHECK(shape(g, "relu") == "[5, 8] float32");
}

TEST_CASE("ReduceMean over two axes without keepdims, ReduceL2 and ReduceMax map to one reduce") {
  Onnx b;
  b.input("x", {3, 4, 5});
  b.init("axes", {2}, {1, -1}, kInt64);
  Onnx::attr(b.node("ReduceMean", {"x", "axes"}, {"m"}, "mean"), "keepdims", 0);
  b.init("last", {1}, {-1}, kInt64);
  b.node("ReduceL2", {"x", "last"}, {"n"}, "l2");
  b.init("first", {1}, {1}, kInt64);
  b.node("ReduceMax", {"n", "first"}, {"mx"}, "max");
  b.output("m", {4});
  b.output("mx", {1, 4, 1});
  const auto g = testing::build_graph(b.imported());
  const auto& mean = op(g, "mean");
  CHECK(mean.type() == "reduce");
  CHECK(ints(mean, "axes") == std::vector<int64_t>{0, 2});
  CHECK(mean.attrs().at("mode").s() == "mean");
  CHECK(mean.attrs().at("keepdims").i() == 0);
  CHECK(shape(g, "mean") == "[4] float32");
  CHECK(op(g, "l2").attrs().at("mode").s() == "l2");
  CHECK(ints(op(g, "l2"), "axes") == std::vector<int64_t>{2});
  CHECK(shape(g, "l2") == "[3, 4, 1] float32");
  CHECK(op(g, "max").attrs().at("mode").s() == "max");
  CHECK(shape(g, "max") == "[1, 4, 1] float32");
}

TEST_CASE("RMSNorm as Llama writes it maps: rsqrt of a mean, a per-position scalar, a weight") {
  Onnx b;
  b.input("x", {5, 8});
  b.constant("two", {}, {2.0});
  b.node("Pow", {"x", "two"}, {"sq"}, "pow");
  b.init("last", {1}, {-1}, kInt64);
  b.node("ReduceMean", {"sq", "last"}, {"ms"}, "mean");
  b.constant("eps", {}, {1e-6});
  b.node("Add", {"ms", "eps"}, {"var"}, "add_eps");
  b.node("Sqrt", {"var"}, {"rms"}, "sqrt");
  b.node("Reciprocal", {"rms"}, {"inv"}, "rsqrt");
  b.node("Mul", {"x", "inv"}, {"normed"}, "normalize");
  b.init("weight", {8}, {1, 1, 1, 1, 2, 2, 2, 2});
  b.node("Mul", {"normed", "weight"}, {"y"}, "scale");
  b.output("y", {5, 8});
  const auto g = testing::build_graph(b.imported());
  CHECK(fn(g, "pow") == "pow");
  CHECK(op(g, "mean").type() == "reduce");  // one axis: the one-axis reduce
  CHECK(fn(g, "add_eps") == "add");
  CHECK(op(g, "add_eps.1").type() == "constant");  // eps is not a bias to train
  CHECK(fn(g, "sqrt") == "sqrt");
  CHECK(fn(g, "rsqrt") == "reciprocal");
  CHECK(fn(g, "normalize") == "mul");  // [5, 8] times [5, 1]
  CHECK(shape(g, "normalize") == "[5, 8] float32");
  CHECK(op(g, "scale.1").type() == "broadcast_param");
  CHECK(g.total_params() == 8);
}

TEST_CASE("masks: a comparison of activations, Not, And, a float cast to bool, Where") {
  Onnx b;
  b.input("x", {6});
  b.input("y", {6});
  b.node("Greater", {"x", "y"}, {"gt"}, "gt");
  b.node("Not", {"gt"}, {"le"}, "not");
  Onnx::attr(b.node("Cast", {"x"}, {"nonzero"}, "to_bool"), "to", int64_t{kBool});
  b.node("And", {"le", "nonzero"}, {"both"}, "and");
  b.node("Where", {"both", "x", "y"}, {"w"}, "where");
  b.output("w", {6});
  const auto g = testing::build_graph(b.imported());
  CHECK(op(g, "gt").type() == "compare");
  CHECK(fn(g, "gt") == "gt");
  CHECK(fn(g, "not") == "sub");  // 1 - mask
  CHECK(values(op(g, "not.one"), "value") == std::vector<float>{1});
  CHECK(fn(g, "to_bool") == "ne");  // x != 0
  CHECK(fn(g, "and") == "mul");
  CHECK(op(g, "where").type() == "where");
  CHECK(shape(g, "where") == "[6] float32");
}

TEST_CASE("a broadcast against the batch axis is refused, saying so") {
  Onnx b;
  b.input("x", {4});
  b.input("y", {3, 4});
  b.node("Add", {"x", "y"}, {"s"}, "mixed");
  b.output("s", {3, 4});
  CHECK_THAT(b.refusal(),
             Catch::Contains("'mixed' (Add): broadcasts the batch axis against a per-sample axis"));

  Onnx c;  // a constant with a size other than 1 where the activations have the batch
  c.input("x", {3, 4});
  c.constant("k", {2, 3, 4}, std::vector<double>(24, 1.0));
  c.node("Mul", {"x", "k"}, {"y"}, "per_batch");
  c.output("y", {3, 4});
  CHECK_THAT(c.refusal(), Catch::Contains("'per_batch' (Mul): input 1 'k' [2, 3, 4] has 2 on the "
                                          "batch axis (only 1 broadcasts over the batch)"));

  // (More axes than the activations move the batch: onnx_batch_axis_test.cc.)

  Onnx e;  // reducing over the batch
  e.input("x", {4});
  e.init("axes", {1}, {0}, kInt64);
  e.node("ReduceMax", {"x", "axes"}, {"y"}, "over_batch");
  e.output("y", {4});
  CHECK_THAT(e.refusal(), Catch::Contains("'over_batch' (ReduceMax): axes [0] include the batch"));
}

TEST_CASE("an integer mask cast to float maps to cast (HF's extended attention mask)") {
  // scores + (1 - mask.float()) * -10000, the mask an int64 input as the tokenizer gives it.
  Onnx b;
  b.input("scores", {4});
  b.input("attention_mask", {4}, kInt64);
  Onnx::attr(b.node("Cast", {"attention_mask"}, {"m"}, "to_float"), "to", int64_t{kFloat});
  b.init("one", {}, {1});
  b.node("Sub", {"one", "m"}, {"masked"}, "invert");
  b.init("big", {}, {-10000});
  b.node("Mul", {"masked", "big"}, {"bias"}, "scale");
  b.node("Add", {"scores", "bias"}, {"y"}, "add_mask");
  b.output("y", {4});
  const auto g = testing::build_graph(b.imported());
  CHECK(op(g, "to_float").type() == "cast");
  CHECK(shape(g, "to_float") == "[4] float32");
  CHECK(op(g, "add_mask").type() == "add");
}

TEST_CASE("each refusal names its blocker, and shape arithmetic feeding it is not listed") {
  SECTION("an integer operand of an element-wise op") {
    Onnx b;
    b.input("ids", {4}, kInt64);
    b.input("x", {4});
    b.node("Add", {"x", "ids"}, {"y"}, "add_ids");
    b.output("y", {4});
    CHECK_THAT(b.refusal(),
               Catch::Contains("'add_ids' (Add): input 1 'ids' is an integer tensor and "
                               "input 0 'x' a float one"));
  }
  SECTION("LayerNormalization of a tensor whose rank is unknown says what is unknown") {
    Onnx b;
    b.input("a", {2, 3});
    b.input("b", {4, 5});
    b.node("MatMul", {"a", "b"}, {"p"}, "mm");  // [2, 3] x [4, 5]: no shape comes out
    b.init("gamma", {5}, std::vector<double>(5, 1.0));
    b.node("LayerNormalization", {"p", "gamma"}, {"y"}, "ln");
    b.output("y", {2, 5});
    CHECK_THAT(b.refusal(),
               Catch::Contains("'ln' (LayerNormalization): the rank of its input 'p' is unknown "
                               "(no shape information), so axis -1 cannot be placed"));
  }
  SECTION("per-sample shapes that do not broadcast") {
    Onnx b;
    b.input("x", {3});
    b.input("y", {4});
    b.node("Sub", {"x", "y"}, {"d"}, "sub");
    b.output("d", {3});
    CHECK_THAT(b.refusal(),
               Catch::Contains("'sub' (Sub): per-sample shapes [3] and [4] do not broadcast"));
  }
  SECTION("LayerNormalization over trailing axes with a scale of the last axis only") {
    Onnx b;
    b.input("x", {3, 8});
    b.init("gamma", {8}, std::vector<double>(8, 1.0));
    Onnx::attr(b.node("LayerNormalization", {"x", "gamma"}, {"y"}, "ln"), "axis", 1);
    b.output("y", {3, 8});
    CHECK_THAT(b.refusal(),
               Catch::Contains("'ln' (LayerNormalization): scale 'gamma' has 8 elements, the "
                               "normalised axes 24"));
  }
  SECTION("a reshape whose target comes from the shape of a refused node lists that node only") {
    Onnx b;
    b.input("x", {2, 6});
    b.node("Tan", {"x"}, {"t"}, "tan");
    b.node("Shape", {"t"}, {"s"}, "shape");
    b.init("idx", {1}, {1}, kInt64);
    Onnx::attr(b.node("Gather", {"s", "idx"}, {"d1"}, "dim1"), "axis", 0);
    b.init("rest", {2}, {-1, 3}, kInt64);
    Onnx::attr(b.node("Concat", {"rest", "d1"}, {"target"}, "target"), "axis", 0);
    b.node("Reshape", {"x", "target"}, {"y"}, "view");
    b.output("y", {4, 3});
    const auto msg = b.refusal();
    CHECK_THAT(msg, Catch::Contains("1 ONNX node(s)"));
    CHECK_THAT(msg, Catch::Contains("'tan' (Tan)"));
  }
  SECTION("a constant that could not be folded is named by the node that needs it") {
    Onnx b;
    b.input("x", {4});
    b.constant("c", {4}, {1, 2, 3, 4});
    b.node("Tan", {"c"}, {"tc"}, "tan_of_constant");
    b.node("Mul", {"x", "tc"}, {"y"}, "times");
    b.output("y", {4});
    const auto msg = b.refusal();
    CHECK_THAT(msg, Catch::Contains("1 ONNX node(s)"));
    CHECK_THAT(msg, Catch::Contains("'times' (Mul): input 1 'tc' is neither an activation nor a "
                                    "constant; needs node 1 'tan_of_constant' (Tan)"));
    CHECK_THAT(msg, Catch::Contains("no GraphPipe operator for this type (no constant folding for "
                                    "Tan)"));
  }
  SECTION("a constant beyond the folding limit is refused, not allocated") {
    Onnx b;
    b.input("x", {4096, 4096});
    b.init("size", {2}, {4096, 4097}, kInt64);
    b.node("ConstantOfShape", {"size"}, {"big"}, "big");
    b.node("Add", {"x", "big"}, {"y"}, "add");
    b.output("y", {4096, 4097});
    CHECK_THAT(b.refusal(), Catch::Contains("a tensor of more than 16777216 elements"));
  }
}

}  // namespace
}  // namespace gp::model

namespace gp::model {
namespace {

// x [batch, 3, 4] * cos(outer(t, f)): RoPE's angles as the legacy exporter writes torch.outer.
Onnx rope_like(const std::string& equation) {
  Onnx b;
  b.input("x", {3, 4});
  b.constant("t", {3}, {0, 1, 2});
  b.constant("f", {4}, {1.0, 0.5, 0.25, 0.125});
  auto* e = b.node("Einsum", {"t", "f"}, {"angles"}, "outer");
  auto* a = e->add_attribute();
  a->set_name("equation");
  a->set_type(onnx::AttributeProto::STRING);
  a->set_s(equation);
  b.node("Cos", {"angles"}, {"cos"}, "cos");
  b.node("Mul", {"x", "cos"}, {"y"}, "rotate");
  b.output("y", {3, 4});
  return b;
}

}  // namespace

TEST_CASE("Einsum of constants folds (torch.outer of RoPE's positions and frequencies)") {
  for (const char* eq : {"i,j->ij", "i, j -> ij", "i,j"}) {
    INFO(eq);
    const auto g = testing::build_graph(rope_like(eq).imported());
    const auto& c = op(g, "rotate.1");  // the constant operand of Mul's input 1
    REQUIRE(c.type() == "constant");
    CHECK(ints(c, "shape") == std::vector<int64_t>{3, 4});
    const auto v = values(c, "value");
    REQUIRE(v.size() == 12);
    for (int i = 0; i < 3; ++i) {
      for (int j = 0; j < 4; ++j) {
        CHECK(v[static_cast<size_t>(i * 4 + j)] ==
              Approx(std::cos(i * std::pow(0.5, j))).margin(1e-6));
      }
    }
    CHECK(fn(g, "rotate") == "mul");
  }
  // A contraction: "ij,j->i" sums over j.
  Onnx b;
  b.input("x", {2});
  b.constant("m", {2, 3}, {1, 2, 3, 4, 5, 6});
  b.constant("v", {3}, {1, 10, 100});
  auto* e = b.node("Einsum", {"m", "v"}, {"mv"}, "mv");
  auto* a = e->add_attribute();
  a->set_name("equation");
  a->set_type(onnx::AttributeProto::STRING);
  a->set_s("ij,j->i");
  b.node("Add", {"x", "mv"}, {"y"}, "add");
  b.output("y", {2});
  const auto g = testing::build_graph(b.imported());
  CHECK(values(op(g, "add.1"), "value") == std::vector<float>{321, 654});
  // An ellipsis is not folded: the refusal names the Einsum.
  CHECK_THAT(rope_like("...i,j->...ij").refusal(), Catch::Contains("Einsum"));
}

}  // namespace gp::model

namespace gp::model {

TEST_CASE("with --allow-opaque, a node that cannot be opaque either says why") {
  // A custom op with two outputs that are both read: an opaque operator has one output.
  Onnx b;
  b.input("x", {4});
  auto* n = b.node("TwoHeads", {"x"}, {"a", "c"}, "two_heads");
  n->set_domain("com.example");
  b.node("Add", {"a", "c"}, {"y"}, "sum");
  b.output("y", {4});
  const std::string path = std::filesystem::temp_directory_path() /
                           ("gp-opaque-why-" + std::to_string(::getpid()) + ".onnx");
  std::ofstream(path, std::ios::binary) << b.model.SerializeAsString();
  OnnxImportOptions options;
  options.allow_opaque = true;
  const auto m = import_onnx(path, options);
  std::filesystem::remove(path);
  REQUIRE_FALSE(m.ok());
  CHECK_THAT(m.status().message(),
             Catch::Contains("node 0 'two_heads' (TwoHeads)") &&
                 Catch::Contains("cannot be opaque: its output 1 'c' is read (an opaque operator "
                                 "has one output)"));
}

}  // namespace gp::model

namespace gp::model {

TEST_CASE("one field of per-field ids (Wide&Deep reading a column) feeds its own embedding") {
  Onnx b;
  b.input("ids", {3}, kInt64);
  b.init("table", {5, 4}, std::vector<double>(20, 0.5));
  b.constant("f", {}, {1}, kInt64);
  b.node("Gather", {"ids", "f"}, {"field"}, "select");  // axis 0 of the per-sample ids: ids[:, 1]
  Onnx::attr(b.model.mutable_graph()->mutable_node(1), "axis", 1);
  b.node("Gather", {"table", "field"}, {"y"}, "emb");
  b.output("y", {4});
  const auto g = testing::build_graph(b.imported());
  CHECK(op(g, "select").type() == "slice");
  CHECK(shape(g, "select") == "[1] int64");
  CHECK(op(g, "emb").type() == "embedding");
  CHECK(shape(g, "y.loss") == "[1] float32");
  // The sample's [1, 4] lookup is its [4] row: the loss target has the ONNX output's shape.
  CHECK(shape(g, "y.target") == "[4] float32");
}

TEST_CASE("Gemma's 1 + weight trains the weight (dynamo), and stays refused in a legacy export") {
  for (const bool dynamo : {true, false}) {
    Onnx b;
    b.input("x", {4});
    b.weight("norm.weight", {4});
    b.init("one", {}, {1.0});
    auto* plus_one = b.node("Add", {"norm.weight", "one"}, {"scale"}, "plus_one");
    if (dynamo) {
      Onnx::metadata(plus_one, "pkg.torch.onnx.fx_node",
                     "%add : [num_users=1] = call_function[target=torch.ops.aten.add.Tensor]"
                     "(args = (%p_norm_weight, 1.0), kwargs = {})");
    }
    b.node("Mul", {"x", "scale"}, {"y"}, "scaled");
    b.output("y", {4});
    INFO(dynamo);
    const auto m = b.import();
    if (!dynamo) {
      // (A legacy export's initializer may be a buffer: it is not trained unasked.)
      REQUIRE_FALSE(m.ok());
      CHECK_THAT(m.status().message(), Catch::Contains("'plus_one'"));
      continue;
    }
    INFO(m.status().to_string());
    REQUIRE(m.ok());
    const auto g = testing::build_graph(*m);
    CHECK(op(g, "plus_one").type() == "binary");
    CHECK(op(g, "plus_one.0").type() == "broadcast_param");
    CHECK(shape(g, "plus_one") == "[4] float32");
    CHECK(op(g, "scaled").type() == "binary");
  }
}

TEST_CASE("nn.Embedding's padding_idx comes from dynamo's metadata: that row never trains") {
  for (const std::string& padding : {std::string(", 0"), std::string(", -1"), std::string()}) {
    Onnx b;
    b.input("ids", {3}, kInt64);
    b.weight("emb.weight", {5, 4});
    Onnx::metadata(b.node("Gather", {"emb.weight", "ids"}, {"y"}, "emb"), "pkg.torch.onnx.fx_node",
                   "%embedding : [num_users=1] = call_function[target=torch.ops.aten.embedding."
                   "default](args = (%p_emb_weight, %ids" +
                       padding + "), kwargs = {})");
    b.output("y", {3, 4});
    INFO(padding);
    const auto g = testing::build_graph(b.imported());
    const auto& attrs = op(g, "emb").attrs();
    // torch passes -1 (or nothing) for none.
    if (padding == ", 0") {
      REQUIRE(attrs.count("padding_idx"));
      CHECK(attrs.at("padding_idx").i() == 0);
    } else {
      CHECK(attrs.count("padding_idx") == 0);
    }
  }
}

TEST_CASE("Expand of an activation (F.normalize's expand_as) broadcasts as an add of zeros") {
  Onnx b;
  b.input("x", {3});
  b.node("ReduceL2", {"x"}, {"norm"}, "norm");  // keepdims 1: [batch, 1]
  Onnx::attr(b.model.mutable_graph()->mutable_node(0), "axes", std::vector<int64_t>{1});
  b.node("Shape", {"x"}, {"shape"}, "shape");
  b.node("Expand", {"norm", "shape"}, {"wide"}, "expand_as");
  b.node("Div", {"x", "wide"}, {"y"}, "normalize");
  b.output("y", {3});
  const auto g = testing::build_graph(b.imported());
  CHECK(op(g, "expand_as").type() == "binary");
  CHECK(fn(g, "expand_as") == "add");
  CHECK(shape(g, "expand_as") == "[3] float32");
  CHECK(values(op(g, "expand_as.zeros"), "value") == std::vector<float>{0, 0, 0});
  CHECK(fn(g, "normalize") == "div");
}

TEST_CASE("a scalar parameter (CLIP's logit_scale) is trained, and exp of it maps") {
  Onnx b;
  b.model.set_producer_name("pytorch");  // torch's legacy export: initializers are module state
  b.input("x", {3});
  b.init("logit_scale", {}, {2.5});
  b.node("Exp", {"logit_scale"}, {"scale"}, "exp");
  b.node("Mul", {"x", "scale"}, {"y"}, "scaled");
  b.output("y", {3});
  const auto g = testing::build_graph(b.imported());
  CHECK(op(g, "exp.0").type() == "broadcast_param");
  CHECK(values(op(g, "exp.0"), "value") == std::vector<float>{2.5f});
  CHECK(op(g, "exp").type() == "unary");
  CHECK(g.total_params() == 1);
  // An exporter's own scalar (named onnx::*), or any scalar of a file torch did not write, stays
  // a constant.
  Onnx c;
  c.model.set_producer_name("pytorch");
  c.input("x", {3});
  c.init("onnx::Mul_7", {}, {2.5});
  c.node("Exp", {"onnx::Mul_7"}, {"scale"}, "exp");
  c.node("Mul", {"x", "scale"}, {"y"}, "scaled");
  c.output("y", {3});
  CHECK(testing::build_graph(c.imported()).total_params() == 0);
  b.model.set_producer_name("onnxscript");
  CHECK(testing::build_graph(b.imported()).total_params() == 0);
}

// A legacy export with a learned temperature t read by x * t, exp(t) and (through the exporter's
// Identity of a de-duplicated equal parameter u) y * u.
Onnx temperatures() {
  Onnx b;
  b.model.set_producer_name("pytorch");
  b.input("x", {3});
  b.init("t", {}, {0.7});
  b.init("u", {}, {0.7});
  b.node("Identity", {"u"}, {"u_alias"}, "alias");
  b.node("Mul", {"x", "t"}, {"h"}, "scaled");
  b.node("Exp", {"t"}, {"e"}, "exp");
  b.node("Mul", {"h", "e"}, {"g"}, "gated");
  b.node("Mul", {"g", "u_alias"}, {"y"}, "gated_again");
  b.output("y", {3});
  return b;
}

TEST_CASE("a trained scalar is never a constant factor, and its readers share it") {
  const auto m = temperatures().imported();
  const auto g = testing::build_graph(m);
  // A Mul by it is a product with the parameter, not a fixed scale (which would never train).
  CHECK(op(g, "scaled").type() == "binary");
  CHECK(op(g, "gated_again").type() == "binary");
  for (int k = 0; k < g.num_ops(); ++k) CHECK(g.op(k).proto->type() != "scale");
  // x * t and exp(t) read one parameter: their copies are tied. u is a parameter of its own.
  REQUIRE(m.param_ties_size() == 1);
  std::set<std::string> tied;
  for (const auto& member : m.param_ties(0).members()) tied.insert(member.op());
  CHECK(tied == std::set<std::string>{"scaled.1", "exp.0"});
  CHECK(g.total_params() == 2);  // t (its tied copies count once) and u
}

}  // namespace gp::model

namespace gp::model {

TEST_CASE("SplitToSequence and SequenceAt (an unoptimised x.split) become slices of the pieces") {
  Onnx b;
  b.input("x", {2, 6});
  b.constant("two", {}, {2}, kInt64);
  Onnx::attr(b.node("SplitToSequence", {"x", "two"}, {"seq"}, "split"), "axis", 2);
  b.constant("one", {}, {1}, kInt64);
  b.node("SequenceAt", {"seq", "one"}, {"y"}, "at");
  b.output("y", {2, 2});
  const auto g = testing::build_graph(b.imported());
  const auto& at = op(g, "at");
  CHECK(at.type() == "slice");
  CHECK(at.attrs().at("axis").i() == 1);
  CHECK(at.attrs().at("start").i() == 2);
  CHECK(at.attrs().at("end").i() == 4);
  // No split: pieces of one, the axis dropped without keepdims; a negative position counts back.
  Onnx c;
  c.input("x", {3, 4});
  auto* s = c.node("SplitToSequence", {"x"}, {"seq"}, "split");
  Onnx::attr(s, "axis", 1);
  Onnx::attr(s, "keepdims", 0);
  c.constant("last", {}, {-1}, kInt64);
  c.node("SequenceAt", {"seq", "last"}, {"y"}, "at");
  c.output("y", {4});
  const auto h = testing::build_graph(c.imported());
  CHECK(op(h, "at").attrs().at("start").i() == 2);
  CHECK(shape(h, "at.squeeze") == "[4] float32");
}

TEST_CASE("a Gather of an activation at a constant index vector maps to gather") {
  Onnx b;
  b.input("x", {5, 3});
  b.constant("idx", {4}, {4, 0, -1, 2}, kInt64);
  b.attr(b.node("Gather", {"x", "idx"}, {"y"}, "pick"), "axis", int64_t{1});
  b.output("y", {4, 3});
  const auto g = testing::build_graph(b.imported());
  CHECK(op(g, "pick").type() == "gather");
  CHECK(op(g, "pick").attrs().at("axis").i() == 0);
  CHECK(ints(op(g, "pick"), "indices") == std::vector<int64_t>{4, 0, 4, 2});
  CHECK(shape(g, "pick") == "[4, 3] float32");

  Onnx c;  // indices [2, 2] replace the axis with their dims
  c.input("x", {3, 4});
  c.constant("idx", {2, 2}, {0, 1, 3, 3}, kInt64);
  c.attr(c.node("Gather", {"x", "idx"}, {"y"}, "pick"), "axis", int64_t{2});
  c.output("y", {3, 2, 2});
  const auto h = testing::build_graph(c.imported());
  CHECK(ints(op(h, "pick"), "indices") == std::vector<int64_t>{0, 1, 3, 3});
  CHECK(shape(h, "pick.reshape") == "[3, 2, 2] float32");

  Onnx d;
  d.input("x", {5});
  d.constant("idx", {2}, {1, 7}, kInt64);
  d.attr(d.node("Gather", {"x", "idx"}, {"y"}, "pick"), "axis", int64_t{1});
  d.output("y", {2});
  CHECK_THAT(d.refusal(), Catch::Contains("'pick' (Gather): index 7 is out of range for axis 1"));
}

// DLRM's interaction Z[:, li, lj] of Z [B, n, n]: torch's dynamo export moves the batch last and
// takes a GatherND; its legacy export flattens the pair of axes and takes a Gather.
TEST_CASE(
    "DLRM's interaction pairs map to gather with the batch moved, as dynamo and legacy export "
    "them") {
  const std::vector<int64_t> flat = {3, 6, 7};  // (1, 0), (2, 0), (2, 1) of 3 x 3
  Onnx b;
  b.input("z", {3, 3});
  b.attr(b.node("Transpose", {"z"}, {"t"}, "t"), "perm", std::vector<int64_t>{1, 2, 0});
  b.constant("ij", {3, 2}, {1, 0, 2, 0, 2, 1}, kInt64);
  b.node("GatherND", {"t", "ij"}, {"p"}, "pairs");
  b.attr(b.node("Transpose", {"p"}, {"y"}, "back"), "perm", std::vector<int64_t>{1, 0});
  b.output("y", {3});
  const auto g = testing::build_graph(b.imported());
  CHECK(shape(g, "pairs.rows") == "[9] float32");
  CHECK(op(g, "pairs").type() == "gather");
  CHECK(ints(op(g, "pairs"), "indices") == flat);
  CHECK(shape(g, "pairs") == "[3] float32");

  Onnx c;
  c.input("z", {3, 3});
  c.attr(c.node("Transpose", {"z"}, {"t"}, "t"), "perm", std::vector<int64_t>{1, 2, 0});
  c.attr(c.node("Flatten", {"t"}, {"f"}, "flat"), "axis", int64_t{2});
  c.constant("k", {3}, {3, 6, 7}, kInt64);
  c.attr(c.node("Gather", {"f", "k"}, {"p"}, "pairs"), "axis", int64_t{0});
  c.attr(c.node("Transpose", {"p"}, {"y"}, "back"), "perm", std::vector<int64_t>{1, 0});
  c.output("y", {3});
  const auto h = testing::build_graph(c.imported());
  CHECK(op(h, "pairs").type() == "gather");
  CHECK(ints(op(h, "pairs"), "indices") == flat);
  CHECK(shape(h, "pairs") == "[3] float32");
}

TEST_CASE("a GatherND into the batch axis or with batch_dims is refused, saying so") {
  Onnx b;
  b.input("z", {3, 3});
  b.constant("ij", {2, 2}, {1, 0, 2, 1}, kInt64);
  b.node("GatherND", {"z", "ij"}, {"p"}, "pairs");
  b.output("p", {3});
  CHECK_THAT(b.refusal(), Catch::Contains("'pairs' (GatherND): the indices reach the batch axis"));

  Onnx c;
  c.input("z", {3, 3});
  c.constant("ij", {2, 1}, {1, 0}, kInt64);
  c.attr(c.node("GatherND", {"z", "ij"}, {"p"}, "pairs"), "batch_dims", int64_t{1});
  c.output("p", {2, 3});
  CHECK_THAT(c.refusal(), Catch::Contains("'pairs' (GatherND): batch_dims = 1: only 0 maps"));
}

}  // namespace gp::model
