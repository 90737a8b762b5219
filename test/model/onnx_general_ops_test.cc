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

#include "../support/models.h"
#include "gp/model/onnx_import.h"
#include "onnx/onnx_pb.h"

namespace gp::model {
namespace {

constexpr int kFloat = onnx::TensorProto::FLOAT;
constexpr int kInt64 = onnx::TensorProto::INT64;
constexpr int kBool = onnx::TensorProto::BOOL;

// An ONNX graph written node by node; inputs and outputs have a symbolic batch first.
struct Onnx {
  onnx::ModelProto model;
  explicit Onnx(int opset = 18) {
    model.set_ir_version(8);
    model.add_opset_import()->set_version(opset);
    model.mutable_graph()->set_name("g");
  }
  static void value(onnx::ValueInfoProto* vi, const std::string& name,
                    const std::vector<int64_t>& dims, int type) {
    vi->set_name(name);
    auto* tt = vi->mutable_type()->mutable_tensor_type();
    tt->set_elem_type(type);
    auto* shape = tt->mutable_shape();
    shape->add_dim()->set_dim_param("batch");
    for (int64_t d : dims) shape->add_dim()->set_dim_value(d);
  }
  void input(const std::string& name, const std::vector<int64_t>& dims, int type = kFloat) {
    value(model.mutable_graph()->add_input(), name, dims, type);
  }
  void output(const std::string& name, const std::vector<int64_t>& dims) {
    value(model.mutable_graph()->add_output(), name, dims, kFloat);
  }
  static void fill(onnx::TensorProto* t, const std::string& name, const std::vector<int64_t>& dims,
                   const std::vector<double>& values, int type) {
    t->set_name(name);
    t->set_data_type(type);
    for (int64_t d : dims) t->add_dims(d);
    for (double v : values) {
      if (type == kFloat) t->add_float_data(static_cast<float>(v));
      if (type == kInt64) t->add_int64_data(static_cast<int64_t>(v));
      if (type == kBool) t->add_int32_data(v != 0);
    }
  }
  // An initializer (a weight when float with more than one element).
  void init(const std::string& name, const std::vector<int64_t>& dims,
            const std::vector<double>& values, int type = kFloat) {
    fill(model.mutable_graph()->add_initializer(), name, dims, values, type);
  }
  // A Constant node (never a weight).
  void constant(const std::string& name, const std::vector<int64_t>& dims,
                const std::vector<double>& values, int type = kFloat) {
    auto* n = node("Constant", {}, {name}, name);
    auto* a = n->add_attribute();
    a->set_name("value");
    a->set_type(onnx::AttributeProto::TENSOR);
    fill(a->mutable_t(), name, dims, values, type);
  }
  onnx::NodeProto* node(const std::string& type, const std::vector<std::string>& in,
                        const std::vector<std::string>& out, const std::string& name) {
    auto* n = model.mutable_graph()->add_node();
    n->set_op_type(type);
    n->set_name(name);
    for (const auto& i : in) n->add_input(i);
    for (const auto& o : out) n->add_output(o);
    return n;
  }
  static void attr(onnx::NodeProto* n, const std::string& name, int64_t v) {
    auto* a = n->add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::INT);
    a->set_i(v);
  }
  static void attr(onnx::NodeProto* n, const std::string& name, const std::vector<int64_t>& v) {
    auto* a = n->add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::INTS);
    for (int64_t x : v) a->add_ints(x);
  }
  Result<ModelGraph> import() const {
    static int counter = 0;
    const std::string path =
        std::filesystem::temp_directory_path() /
        ("gp-general-" + std::to_string(::getpid()) + "-" + std::to_string(counter++) + ".onnx");
    std::ofstream(path, std::ios::binary) << model.SerializeAsString();
    auto m = import_onnx(path);
    std::filesystem::remove(path);
    return m;
  }
  ModelGraph imported() const {
    auto m = import();
    INFO(m.status().to_string());
    REQUIRE(m.ok());
    return *m;
  }
  std::string refusal() const {
    auto m = import();
    REQUIRE_FALSE(m.ok());
    return m.status().message();
  }
};

const graphpipe::v1::Operator& op(const Graph& g, const std::string& id) {
  INFO("op " << id);
  REQUIRE(g.index_of(id) >= 0);
  return *g.op(g.index_of(id)).proto;
}

std::string shape(const Graph& g, const std::string& id) {
  return shape_string(op(g, id).outputs(0));
}

std::string fn(const Graph& g, const std::string& id) { return op(g, id).attrs().at("fn").s(); }

std::vector<int64_t> ints(const graphpipe::v1::Operator& o, const std::string& attr) {
  const auto& v = o.attrs().at(attr).ints().values();
  return {v.begin(), v.end()};
}

std::vector<float> values(const graphpipe::v1::Operator& o, const std::string& param) {
  const std::string& raw = o.param_values().at(param);
  std::vector<float> v(raw.size() / sizeof(float));
  std::memcpy(v.data(), raw.data(), raw.size());
  return v;
}

std::map<std::string, int> type_counts(const ModelGraph& m) {
  std::map<std::string, int> counts;
  for (const auto& o : m.ops()) ++counts[o.type()];
  return counts;
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
  const auto& mask = op(g, "expand");
  CHECK(mask.type() == "constant");
  CHECK(ints(mask, "shape") == std::vector<int64_t>{1, 3, 3});
  CHECK(values(mask, "value") == std::vector<float>{0, 1, 1, 0, 0, 1, 0, 0, 0});
  CHECK(mask.inputs(0).op() == "scores");  // the batch comes from the scores
  CHECK(op(g, "fill").inputs(0).op() == "expand");
  CHECK(g.total_params() == 0);
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

  Onnx d;  // more axes than the activations: the batch would move
  d.input("x", {4});
  d.constant("k", {1, 1, 4}, {1, 2, 3, 4});
  d.node("Sub", {"x", "k"}, {"y"}, "moves_batch");
  d.output("y", {4});
  CHECK_THAT(d.refusal(), Catch::Contains("input 1 'k' [1, 1, 4] has more axes than the "
                                          "activations (2): it would broadcast against the batch"));

  Onnx e;  // reducing over the batch
  e.input("x", {4});
  e.init("axes", {1}, {0}, kInt64);
  e.node("ReduceMax", {"x", "axes"}, {"y"}, "over_batch");
  e.output("y", {4});
  CHECK_THAT(e.refusal(), Catch::Contains("'over_batch' (ReduceMax): axes [0] include the batch"));
}

TEST_CASE("each refusal names its blocker, and shape arithmetic feeding it is not listed") {
  SECTION("an integer input cast to float") {
    Onnx b;
    b.input("ids", {4}, kInt64);
    Onnx::attr(b.node("Cast", {"ids"}, {"f"}, "to_float"), "to", int64_t{kFloat});
    b.output("f", {4});
    CHECK_THAT(b.refusal(), Catch::Contains("'to_float' (Cast): casts the integer tensor 'ids' to "
                                            "float"));
  }
  SECTION("an integer operand of an element-wise op") {
    Onnx b;
    b.input("ids", {4}, kInt64);
    b.input("x", {4});
    b.node("Add", {"x", "ids"}, {"y"}, "add_ids");
    b.output("y", {4});
    CHECK_THAT(b.refusal(), Catch::Contains("'add_ids' (Add): input 1 'ids' is an integer tensor"));
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
  SECTION("LayerNormalization over an axis that is not the last") {
    Onnx b;
    b.input("x", {3, 8});
    b.init("gamma", {8}, std::vector<double>(8, 1.0));
    Onnx::attr(b.node("LayerNormalization", {"x", "gamma"}, {"y"}, "ln"), "axis", 1);
    b.output("y", {3, 8});
    CHECK_THAT(b.refusal(),
               Catch::Contains("'ln' (LayerNormalization): axis = 1 of a tensor of rank 3 (only "
                               "the last axis maps)"));
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

TEST_CASE("a tensor computed from a weight stays a trained weight, not a folded constant") {
  // Unsqueeze of a weight feeds arithmetic, not a comparison: folding it would stop its training.
  Onnx b;
  b.input("x", {3, 4});
  b.init("w", {4}, {1, 2, 3, 4});
  b.init("zero", {1}, {0}, kInt64);
  b.node("Unsqueeze", {"w", "zero"}, {"w2"}, "unsqueeze");
  b.node("Mul", {"x", "w2"}, {"y"}, "mul");
  b.output("y", {3, 4});
  const auto msg = b.refusal();
  CHECK_THAT(msg, Catch::Contains("'mul' (Mul): input 1 'w2' is neither an activation nor a "
                                  "constant; needs node 0 'unsqueeze' (Unsqueeze)"));
  CHECK_THAT(msg, Catch::Contains("computes from a trained weight"));
}

}  // namespace
}  // namespace gp::model
