// LayerNormalization's scale and shift as torch has them (model/src/onnx/layer_norm.cc): trained
// where they are parameters, absent where torch has none (LayerNorm(bias=False),
// elementwise_affine=False), constants otherwise. Numerics against torch: the torch2 pattern
// norm_affines in test/e2e/onnx_torch_test.cc.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "../support/models.h"
#include "../support/onnx_builder.h"
#include "gp/model/onnx_import.h"
#include "onnx/onnx_pb.h"

namespace gp::model {
namespace {

using Onnx = testing::OnnxBuilder;

const graphpipe::v1::Operator& op(const Graph& g, const std::string& id) {
  return testing::imported_op(g, id);
}
int64_t attr_or(const graphpipe::v1::Operator& o, const std::string& name, int64_t fallback) {
  const auto it = o.attrs().find(name);
  return it == o.attrs().end() ? fallback : it->second.i();
}
std::vector<std::string> param_names(const Graph& g, const std::string& id) {
  std::vector<std::string> names;
  for (const auto& p : op(g, id).params()) names.push_back(p.name());
  return names;
}

// x [batch, 4] -> LayerNormalization(inputs) -> y.
Onnx norm(const std::vector<std::string>& inputs) {
  Onnx b;
  b.input("x", {4});
  b.node("LayerNormalization", inputs, {"y"}, "ln");
  b.output("y", {4});
  return b;
}

// The fx_node metadata dynamo writes for torch's layer_norm call.
void traced(onnx::NodeProto* n, const std::string& weight, const std::string& bias) {
  Onnx::metadata(n, "pkg.torch.onnx.fx_node",
                 "%ln : [num_users=1] = call_function[target=torch.ops.aten.layer_norm.default]"
                 "(args = (%x, [4], " +
                     weight + ", " + bias + ", 1e-05), kwargs = {})");
}

TEST_CASE("a LayerNormalization with weight and bias initializers trains gamma and beta") {
  Onnx b = norm({"x", "w", "b"});
  b.init("w", {4}, {1.5, 0.5, 1, 2});
  b.init("b", {4}, {0.1, 0.2, 0.3, 0.4});
  const auto g = testing::build_graph(b.imported());
  CHECK(param_names(g, "ln") == std::vector<std::string>{"gamma", "beta"});
  CHECK(testing::param_floats(op(g, "ln"), "beta")[3] == Approx(0.4));
}

TEST_CASE("a legacy export's Constant zero bias (LayerNorm(bias=False)) trains no shift") {
  Onnx b = norm({"x", "w", "zeros"});
  b.init("w", {4}, {1.5, 0.5, 1, 2});
  b.constant("zeros", {4}, {0, 0, 0, 0});
  const auto g = testing::build_graph(b.imported());
  CHECK(attr_or(op(g, "ln"), "shift", 1) == 0);
  CHECK(param_names(g, "ln") == std::vector<std::string>{"gamma"});
  CHECK(g.total_params() == 4);
}

TEST_CASE("Constant ones and zeros (elementwise_affine=False) give a layer_norm without params") {
  Onnx b = norm({"x", "ones", "zeros"});
  b.constant("ones", {4}, {1, 1, 1, 1});
  b.constant("zeros", {4}, {0, 0, 0, 0});
  const auto g = testing::build_graph(b.imported());
  CHECK(attr_or(op(g, "ln"), "scale", 1) == 0);
  CHECK(attr_or(op(g, "ln"), "shift", 1) == 0);
  CHECK(g.total_params() == 0);
  CHECK(g.index_of("ln.scaled") < 0);  // nothing applies ones and zeros
  CHECK(g.index_of("ln.shifted") < 0);
}

TEST_CASE("a constant scale and bias other than ones and zeros apply after the norm, untrained") {
  Onnx b = norm({"x", "s", "c"});
  b.constant("s", {4}, {2, 2, 2, 3});
  b.constant("c", {4}, {0, 0, 1, 0});
  const auto g = testing::build_graph(b.imported());
  CHECK(g.total_params() == 0);
  CHECK(op(g, "ln.scaled").type() == "binary");
  CHECK(op(g, "ln.scaled").attrs().at("fn").s() == "mul");
  CHECK(op(g, "ln.shifted").attrs().at("fn").s() == "add");
  CHECK(op(g, "ln.shifted").inputs(0).op() == "ln.scaled");
  CHECK(op(g, "ln.bias").type() == "constant");
}

TEST_CASE("a frozen LayerNorm weight is a constant scale applied before the trained shift") {
  Onnx b = norm({"x", "w", "b"});
  b.init("w", {4}, {1.5, 0.5, 1, 2});
  b.init("b", {4}, {0.1, 0.2, 0.3, 0.4});
  OnnxImportOptions o;
  o.freeze = {"w"};
  auto m = b.import(o);
  REQUIRE(m.ok());
  const auto g = testing::build_graph(*m);
  // x̂ * w + b as torch computes it: the trained shift after the constant scale.
  CHECK(param_names(g, "ln").empty());
  CHECK(op(g, "ln.scaled").attrs().at("fn").s() == "mul");
  CHECK(op(g, "ln.shifted").type() == "bias_add");
  CHECK(op(g, "ln.shifted").inputs(0).op() == "ln.scaled");
  CHECK(testing::param_floats(op(g, "ln.shifted"), "bias")[3] == Approx(0.4));
}

TEST_CASE("a dynamo export without a bias input or with a traced None bias trains no shift") {
  Onnx plain = norm({"x", "w"});
  plain.init("w", {4}, {1.5, 0.5, 1, 2});
  CHECK(param_names(testing::build_graph(plain.imported()), "ln") ==
        std::vector<std::string>{"gamma"});
  Onnx b = norm({"x", "w"});
  b.init("w", {4}, {1.5, 0.5, 1, 2});
  traced(b.model.mutable_graph()->mutable_node(0), "%p_ln_weight", "None");
  CHECK(param_names(testing::build_graph(b.imported()), "ln") == std::vector<std::string>{"gamma"});
}

TEST_CASE("a weight the optimiser merged into an affine-free norm's ones does not train there") {
  // torch's optimiser gives LayerNorm(elementwise_affine=False) the ones of another norm's
  // all-ones weight: the traced call (weight None) says this norm has no scale.
  Onnx b;
  b.input("x", {4});
  b.init("w", {4}, {1, 1, 1, 1});
  b.init("bias", {4}, {0, 0, 0, 0});
  traced(b.node("LayerNormalization", {"x", "w"}, {"h"}, "plain"), "None", "None");
  traced(b.node("LayerNormalization", {"h", "w", "bias"}, {"y"}, "affine"), "%p_w", "%p_bias");
  b.output("y", {4});
  const auto g = testing::build_graph(b.imported());
  CHECK(param_names(g, "plain").empty());
  CHECK(param_names(g, "affine") == std::vector<std::string>{"gamma", "beta"});
  CHECK(g.total_params() == 8);
}

TEST_CASE("a traced bias the file holds no tensor for trains from zero") {
  Onnx b = norm({"x", "w"});
  b.init("w", {4}, {1.5, 0.5, 1, 2});
  traced(b.model.mutable_graph()->mutable_node(0), "%p_ln_weight", "%p_ln_bias");
  const auto g = testing::build_graph(b.imported());
  CHECK(param_names(g, "ln") == std::vector<std::string>{"gamma", "beta"});
  CHECK(testing::param_floats(op(g, "ln"), "beta") == std::vector<float>(4, 0.0f));
}

TEST_CASE("a decomposed layer norm without weight and bias has no learned affine") {
  // (x - mean) / sqrt(var + eps), as a hand-written norm without parameters.
  Onnx b;
  b.input("x", {6});
  b.init("axes", {1}, {-1}, testing::kOnnxInt64);
  b.constant("two", {}, {2});
  b.constant("eps", {}, {1e-5});
  b.node("ReduceMean", {"x", "axes"}, {"mean"}, "mean");
  b.node("Sub", {"x", "mean"}, {"d"}, "centre");
  b.node("Pow", {"d", "two"}, {"sq"}, "square");
  b.node("ReduceMean", {"sq", "axes"}, {"var"}, "var");
  b.node("Add", {"var", "eps"}, {"ve"}, "add_eps");
  b.node("Sqrt", {"ve"}, {"std"}, "std");
  b.node("Div", {"d", "std"}, {"y"}, "norm");
  b.output("y", {6});
  const auto g = testing::build_graph(b.imported());
  CHECK(op(g, "mean").type() == "layer_norm");
  CHECK(g.total_params() == 0);
}

TEST_CASE("a scale that is neither a trained weight nor a constant is refused by name") {
  Onnx b = norm({"x", "s"});
  b.constant("s", {3}, {1, 2, 3});  // three values for four features
  CHECK_THAT(b.refusal(), Catch::Contains("'s' has 3 elements, the normalised axes 4"));
}

}  // namespace
}  // namespace gp::model
