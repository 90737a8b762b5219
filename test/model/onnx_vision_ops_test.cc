// Hand-built ONNX graphs for the importer's mappings beyond the element-wise ops: ConvTranspose
// and Resize (vision_ops.cc), Softmax and LogSoftmax on any axis and LayerNormalization over the
// trailing axes (convert.cc), and weights read by several operators (tied copies, importer.cc).
// Each graph is checked for the ops, attributes, shapes and values it maps to, and each refusal
// for the attribute and value it names. (Numerics against torch: test/e2e/onnx_torch_test.cc on
// the torch2 patterns upsample, softmax_axes and tied_head.)
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>

#include "../support/models.h"
#include "../support/onnx_builder.h"
#include "gp/model/onnx_import.h"
#include "onnx/onnx_pb.h"

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
std::vector<int64_t> ints(const graphpipe::v1::Operator& o, const std::string& attr) {
  return testing::attr_ints_of(o, attr);
}
std::vector<float> values(const graphpipe::v1::Operator& o, const std::string& param) {
  return testing::param_floats(o, param);
}

std::vector<double> iota(int64_t n, double scale = 0.1) {
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t k = 0; k < n; ++k) v[static_cast<size_t>(k)] = scale * static_cast<double>(k - 3);
  return v;
}

// ---- ConvTranspose ---------------------------------------------------------------------------

// x [batch, 3, 4, 4] -> ConvTranspose (weight [3, 5, 3, 3]) -> y; `edit` sets its attributes.
Onnx conv_transpose(const std::function<void(onnx::NodeProto*)>& edit, bool bias = true,
                    const std::vector<int64_t>& out = {5, 8, 8}) {
  Onnx b;
  b.input("x", {3, 4, 4});
  b.init("w", {3, 5, 3, 3}, iota(135));
  b.init("b", {5}, {0.1, 0.2, 0.3, 0.4, 0.5});
  auto* n =
      b.node("ConvTranspose",
             bias ? std::vector<std::string>{"x", "w", "b"} : std::vector<std::string>{"x", "w"},
             {"y"}, "up");
  edit(n);
  b.output("y", out);
  return b;
}

TEST_CASE("ConvTranspose maps onto conv_transpose2d with its strides, pads and output_padding") {
  const auto m = conv_transpose([](onnx::NodeProto* n) {
                   Onnx::attr(n, "strides", std::vector<int64_t>{2, 2});
                   Onnx::attr(n, "pads", std::vector<int64_t>{1, 1, 1, 1});
                   Onnx::attr(n, "output_padding", std::vector<int64_t>{1, 1});
                   Onnx::attr(n, "kernel_shape", std::vector<int64_t>{3, 3});
                 }).imported();
  const auto g = testing::build_graph(m);
  const auto& up = op(g, "up");
  CHECK(up.type() == "conv_transpose2d");
  CHECK(up.attrs().at("out_channels").i() == 5);
  CHECK(ints(up, "kernel") == std::vector<int64_t>{3, 3});
  CHECK(ints(up, "stride") == std::vector<int64_t>{2, 2});
  CHECK(ints(up, "padding") == std::vector<int64_t>{1, 1});
  CHECK(ints(up, "output_padding") == std::vector<int64_t>{1, 1});
  CHECK(shape(g, "up") == "[5, 8, 8] float32");  // (4 - 1) * 2 - 2 + 3 + 1
  // The weight is [C, out, kh, kw] in both: copied as is.
  const auto w = values(up, "weight");
  REQUIRE(w.size() == 135);
  CHECK(w[0] == Approx(-0.3));
  CHECK(w[134] == Approx(13.1));
  CHECK(values(up, "bias") == std::vector<float>{0.1f, 0.2f, 0.3f, 0.4f, 0.5f});
  std::map<std::string, std::string> sources;
  for (const auto& s : m.param_sources()) sources[s.op() + "." + s.param()] = s.initializer();
  CHECK(sources["up.weight"] == "w");
  CHECK(sources["up.bias"] == "b");
  // Without a bias, and with ONNX's default stride 1: [5, 6, 6].
  const auto plain =
      testing::build_graph(conv_transpose([](onnx::NodeProto*) {}, false, {5, 6, 6}).imported());
  CHECK(shape(plain, "up") == "[5, 6, 6] float32");
  CHECK(op(plain, "up").attrs().at("bias").i() == 0);
}

TEST_CASE("ConvTranspose refuses what conv_transpose2d does not compute, naming it") {
  using Edit = std::function<void(onnx::NodeProto*)>;
  const std::vector<std::pair<Edit, std::string>> cases = {
      {[](onnx::NodeProto* n) { Onnx::attr(n, "group", int64_t{3}); }, "group = 3 (only 1 maps)"},
      {[](onnx::NodeProto* n) {
         Onnx::attr(n, "dilations", std::vector<int64_t>{2, 2});
       },
       "dilations [2, 2] (only 1 maps)"},
      {[](onnx::NodeProto* n) {
         Onnx::attr(n, "pads", std::vector<int64_t>{1, 0, 0, 1});
       },
       "pads [1, 0, 0, 1] (only symmetric 2-D padding maps)"},
      {[](onnx::NodeProto* n) {
         Onnx::attr(n, "output_shape", std::vector<int64_t>{9, 9});
       },
       "output_shape [9, 9] is given"},
      {[](onnx::NodeProto* n) { Onnx::attr(n, "auto_pad", std::string("SAME_UPPER")); },
       "auto_pad = SAME_UPPER"},
      {[](onnx::NodeProto* n) {
         Onnx::attr(n, "output_padding", std::vector<int64_t>{1, 1});
       },
       "output_padding [1, 1] with strides [1, 1]"},
      {[](onnx::NodeProto* n) {
         Onnx::attr(n, "kernel_shape", std::vector<int64_t>{2, 2});
       },
       "kernel_shape [2, 2] differs from the weight's [3, 3]"},
  };
  for (const auto& [edit, words] : cases) {
    INFO(words);
    CHECK_THAT(conv_transpose(edit).refusal(), Catch::Contains("'up' (ConvTranspose): " + words));
  }
}

// ---- Resize ----------------------------------------------------------------------------------

// x [batch, 2, 4, 5] -> Resize(mode, coordinates) by constant scales or sizes -> y.
Onnx resize(const std::string& mode, const std::string& coords, const std::vector<double>& scales,
            const std::vector<double>& sizes, const std::string& nearest = "floor",
            const std::vector<int64_t>& out = {2, 8, 10}) {
  Onnx b;
  b.input("x", {2, 4, 5});
  if (!scales.empty()) b.init("scales", {static_cast<int64_t>(scales.size())}, scales);
  if (!sizes.empty()) b.init("sizes", {static_cast<int64_t>(sizes.size())}, sizes, kInt64);
  auto* n =
      b.node("Resize", {"x", "", scales.empty() ? "" : "scales", sizes.empty() ? "" : "sizes"},
             {"y"}, "rs");
  Onnx::attr(n, "mode", mode);
  Onnx::attr(n, "coordinate_transformation_mode", coords);
  if (!nearest.empty()) Onnx::attr(n, "nearest_mode", nearest);
  b.output("y", out);
  return b;
}

// ---- Conv of a 3-D weight (nn.Conv1d) -------------------------------------------------------

// x [batch, 4, 10] -> Conv (weight [6, 4 / groups, 3], bias [6]) -> y; `edit` sets attributes.
Onnx conv1d(const std::function<void(onnx::NodeProto*)>& edit, int64_t groups = 1,
            const std::vector<int64_t>& out = {6, 5}) {
  Onnx b;
  b.input("x", {4, 10});
  b.init("w", {6, 4 / groups, 3}, iota(6 * (4 / groups) * 3));
  b.init("b", {6}, {0.1, 0.2, 0.3, 0.4, 0.5, 0.6});
  auto* n = b.node("Conv", {"x", "w", "b"}, {"y"}, "conv");
  edit(n);
  if (groups != 1) Onnx::attr(n, "group", groups);
  b.output("y", out);
  return b;
}

TEST_CASE("Conv with a 3-D weight (nn.Conv1d) is a conv2d over [C, 1, L] of kernel [1, k]") {
  const auto m = conv1d(
      [](onnx::NodeProto* n) {
        Onnx::attr(n, "strides", std::vector<int64_t>{2});
        Onnx::attr(n, "pads", std::vector<int64_t>{1, 1});
      },
      2);
  const auto g = testing::build_graph(m.imported());
  const auto& conv = op(g, "conv");
  CHECK(conv.type() == "conv2d");
  CHECK(ints(conv, "kernel") == std::vector<int64_t>{1, 3});
  CHECK(ints(conv, "stride") == std::vector<int64_t>{1, 2});
  CHECK(ints(conv, "padding") == std::vector<int64_t>{0, 1});
  CHECK(conv.attrs().at("groups").i() == 2);
  CHECK(shape(g, conv.inputs(0).op()) == "[4, 1, 10] float32");
  CHECK(shape(g, "conv") == "[6, 1, 5] float32");
  // The weight's elements in their order: [6, 2, 3] held as [6, 2, 1, 3].
  const auto w = iota(36);
  CHECK(values(conv, "weight") == std::vector<float>(w.begin(), w.end()));
  CHECK(op(g, "conv.1d").inputs(0).op() == "conv");
  CHECK(shape(g, "conv.1d") == "[6, 5] float32");
}

TEST_CASE("Conv with a 3-D weight and a computed all-zero bias adds no bias, as a 2-D one") {
  // torch 2.x's unoptimised exports give a bias-free conv a bias computed as zeros.
  Onnx b;
  b.input("x", {4, 10});
  b.init("w", {6, 4, 3}, iota(72));
  b.init("size", {1}, {6}, kInt64);
  b.node("ConstantOfShape", {"size"}, {"zeros"}, "zeros");
  b.node("Conv", {"x", "w", "zeros"}, {"y"}, "conv");
  b.output("y", {6, 8});
  const auto g = testing::build_graph(b.imported());
  CHECK(op(g, "conv").type() == "conv2d");
  CHECK(op(g, "conv").params_size() == 1);  // the weight only
  CHECK(shape(g, "conv.1d") == "[6, 8] float32");
}

TEST_CASE(
    "Conv with a 3-D weight refuses dilations, asymmetric padding and stride 0, naming them") {
  const auto dilated =
      conv1d([](onnx::NodeProto* n) { Onnx::attr(n, "dilations", std::vector<int64_t>{2}); }, 1,
             {6, 6})
          .refusal();
  CHECK_THAT(dilated, Catch::Contains("'conv' (Conv): dilations other than 1"));
  const auto lopsided = conv1d(
                            [](onnx::NodeProto* n) {
                              Onnx::attr(n, "pads", std::vector<int64_t>{1, 0});
                            },
                            1, {6, 9})
                            .refusal();
  CHECK_THAT(lopsided, Catch::Contains("'conv' (Conv): pads [1, 0] (only symmetric padding)"));
  const auto still =
      conv1d([](onnx::NodeProto* n) { Onnx::attr(n, "strides", std::vector<int64_t>{0}); }, 1,
             {6, 8})
          .refusal();
  CHECK_THAT(still, Catch::Contains("'conv' (Conv): strides [0]"));
}

TEST_CASE("Resize maps torch's nearest and bilinear upsampling onto resize") {
  SECTION("nearest by scales: asymmetric coordinates, floor") {
    const auto g =
        testing::build_graph(resize("nearest", "asymmetric", {1, 1, 2, 2}, {}).imported());
    CHECK(op(g, "rs").type() == "resize");
    CHECK(op(g, "rs").attrs().at("mode").s() == "nearest");
    CHECK(ints(op(g, "rs"), "size") == std::vector<int64_t>{8, 10});
    CHECK(shape(g, "rs") == "[2, 8, 10] float32");
  }
  SECTION("bilinear to sizes with align_corners (the batch entry of sizes is not read)") {
    const auto g = testing::build_graph(
        resize("linear", "align_corners", {}, {7, 2, 6, 9}, "", {2, 6, 9}).imported());
    CHECK(op(g, "rs").attrs().at("mode").s() == "bilinear");
    CHECK(op(g, "rs").attrs().at("align_corners").i() == 1);
    CHECK(shape(g, "rs") == "[2, 6, 9] float32");
  }
  SECTION("bilinear by scales, half-pixel (torch's align_corners=False), either spelling") {
    for (const std::string coords : {"half_pixel", "pytorch_half_pixel"}) {
      const auto g = testing::build_graph(
          resize("linear", coords, {1, 1, 2, 3}, {}, "", {2, 8, 15}).imported());
      CHECK(op(g, "rs").attrs().at("mode").s() == "bilinear");
      CHECK(op(g, "rs").attrs().count("align_corners") == 0);
      CHECK(shape(g, "rs") == "[2, 8, 15] float32");
    }
  }
}

TEST_CASE("Resize refuses modes and scales torch does not compute, with the reason") {
  CHECK_THAT(resize("nearest", "asymmetric", {1, 1, 2, 2}, {}, "").refusal(),
             Catch::Contains("'rs' (Resize): mode = nearest with coordinate_transformation_mode "
                             "= asymmetric and nearest_mode = round_prefer_floor"));
  CHECK_THAT(resize("nearest", "half_pixel", {1, 1, 2, 2}, {}).refusal(),
             Catch::Contains("nearest maps as torch's: asymmetric coordinates, floor"));
  CHECK_THAT(resize("cubic", "half_pixel", {1, 1, 2, 2}, {}).refusal(),
             Catch::Contains("mode = cubic (only nearest and linear map)"));
  CHECK_THAT(resize("linear", "asymmetric", {1, 1, 2, 2}, {}).refusal(),
             Catch::Contains("linear maps with align_corners, half_pixel or pytorch_half_pixel"));
  CHECK_THAT(resize("linear", "half_pixel", {1, 1, 1.3, 2}, {}).refusal(),
             Catch::Contains("scale 1.3 of axis 2 (size 4) gives no whole size"));
  CHECK_THAT(resize("nearest", "asymmetric", {1, 2, 2, 2}, {}).refusal(),
             Catch::Contains("resizes the channels (2 to 4)"));
  CHECK_THAT(resize("linear", "half_pixel", {}, {1, 2, 1, 6}).refusal(),
             Catch::Contains("to an output of size 1"));
  // A 3-D input (nn.Upsample of a sequence) has no [C, H, W].
  Onnx b;
  b.input("x", {2, 4});
  b.init("scales", {3}, {1, 1, 2});
  auto* n = b.node("Resize", {"x", "", "scales"}, {"y"}, "rs");
  Onnx::attr(n, "mode", std::string("nearest"));
  b.output("y", {2, 8});
  CHECK_THAT(b.refusal(), Catch::Contains("only 4-D NCHW resizing maps"));
}

// ---- Softmax, LogSoftmax, LayerNormalization -------------------------------------------------

TEST_CASE("Softmax over an inner axis moves it last, normalises, and moves it back") {
  Onnx b;
  b.input("x", {3, 4, 5});
  Onnx::attr(b.node("Softmax", {"x"}, {"y"}, "sm"), "axis", int64_t{2});  // per sample: 1
  b.output("y", {3, 4, 5});
  const auto g = testing::build_graph(b.imported());
  CHECK(op(g, "sm.to_last").type() == "transpose");
  CHECK(ints(op(g, "sm.to_last"), "perm") == std::vector<int64_t>{0, 2, 1});
  CHECK(op(g, "sm").type() == "softmax");
  CHECK(op(g, "sm").inputs(0).op() == "sm.to_last");
  CHECK(ints(op(g, "sm.back"), "perm") == std::vector<int64_t>{0, 2, 1});
  CHECK(shape(g, "sm.back") == "[3, 4, 5] float32");
  // Axis 1 of four: the permutation and its inverse differ.
  Onnx c;
  c.input("x", {3, 4, 5});
  Onnx::attr(c.node("Softmax", {"x"}, {"y"}, "sm"), "axis", int64_t{1});
  c.output("y", {3, 4, 5});
  const auto h = testing::build_graph(c.imported());
  CHECK(ints(op(h, "sm.to_last"), "perm") == std::vector<int64_t>{1, 2, 0});
  CHECK(ints(op(h, "sm.back"), "perm") == std::vector<int64_t>{2, 0, 1});
  CHECK(shape(h, "sm.back") == "[3, 4, 5] float32");
  // The last axis stays one op; the batch axis is refused.
  Onnx d;
  d.input("x", {3, 4});
  d.node("Softmax", {"x"}, {"y"}, "sm");
  d.output("y", {3, 4});
  CHECK(d.imported().ops_size() == 4);  // input, softmax, target, loss
  Onnx e;
  e.input("x", {3, 4});
  Onnx::attr(e.node("Softmax", {"x"}, {"y"}, "sm"), "axis", int64_t{0});
  e.output("y", {3, 4});
  CHECK_THAT(e.refusal(), Catch::Contains("'sm' (Softmax): axis = 0 of a tensor of rank 3 is the "
                                          "batch axis"));
}

TEST_CASE("LogSoftmax is x - max - log(sum(exp(x - max))) over its axis, from the general ops") {
  Onnx b;
  b.input("x", {3, 4});
  Onnx::attr(b.node("LogSoftmax", {"x"}, {"y"}, "ls"), "axis", int64_t{1});
  b.output("y", {3, 4});
  const auto g = testing::build_graph(b.imported());
  CHECK(op(g, "ls.max").type() == "reduce");
  CHECK(op(g, "ls.max").attrs().at("mode").s() == "max");
  CHECK(ints(op(g, "ls.max"), "axes") == std::vector<int64_t>{0});
  CHECK(shape(g, "ls.max") == "[1, 4] float32");  // kept for broadcasting
  CHECK(op(g, "ls.shift").attrs().at("fn").s() == "sub");
  CHECK(op(g, "ls.exp").attrs().at("fn").s() == "exp");
  CHECK(op(g, "ls.sum").attrs().at("mode").s() == "sum");
  CHECK(op(g, "ls.log").attrs().at("fn").s() == "log");
  CHECK(op(g, "ls").attrs().at("fn").s() == "sub");
  CHECK(op(g, "ls").inputs(0).op() == "ls.shift");
  CHECK(op(g, "ls").inputs(1).op() == "ls.log");
  CHECK(shape(g, "ls") == "[3, 4] float32");
}

TEST_CASE("LayerNormalization over the trailing axes merges them around layer_norm") {
  Onnx b;
  b.input("x", {3, 4, 5});
  b.init("scale", {4, 5}, iota(20));
  b.init("bias", {4, 5}, iota(20, -0.2));
  auto* n = b.node("LayerNormalization", {"x", "scale", "bias"}, {"y"}, "ln");
  Onnx::attr(n, "axis", int64_t{-2});
  b.output("y", {3, 4, 5});
  const auto m = b.imported();
  const auto g = testing::build_graph(m);
  CHECK(op(g, "ln.merge").type() == "reshape");
  CHECK(shape(g, "ln.merge") == "[3, 20] float32");
  CHECK(op(g, "ln").type() == "layer_norm");
  CHECK(shape(g, "ln.split") == "[3, 4, 5] float32");
  // gamma and beta flatten row-major, as the merged axis does.
  const auto gamma = values(op(g, "ln"), "gamma");
  REQUIRE(gamma.size() == 20);
  CHECK(gamma[0] == Approx(-0.3));
  CHECK(gamma[19] == Approx(1.6));
  CHECK(values(op(g, "ln"), "beta")[19] == Approx(-3.2));
  // A scale of the last axis only (broadcast by ONNX) does not match the merged axis.
  Onnx c;
  c.input("x", {3, 4, 5});
  c.init("scale", {5}, iota(5));
  Onnx::attr(c.node("LayerNormalization", {"x", "scale"}, {"y"}, "ln"), "axis", int64_t{1});
  c.output("y", {3, 4, 5});
  CHECK_THAT(c.refusal(), Catch::Contains("scale 'scale' has 5 elements, the normalised axes 60"));
}

// ---- tied weights ----------------------------------------------------------------------------

// ids [batch, 3] -> Gather(W [rows, 4]) -> relu -> MatMul by W itself (rows 4) or by
// `head_weight` [4, rows].
Onnx tied(const std::string& head_weight, int64_t rows = 6) {
  Onnx b;
  b.input("ids", {3}, kInt64);
  b.init("W", {rows, 4}, iota(rows * 4));
  b.node("Gather", {"W", "ids"}, {"e"}, "emb");
  b.node("Relu", {"e"}, {"h"}, "act");
  b.node("MatMul", {"h", head_weight}, {"y"}, "lm");
  b.output("y", {3, rows});
  return b;
}

std::map<std::string, std::vector<std::string>> sources_of(const ModelGraph& m) {
  std::map<std::string, std::vector<std::string>> out;
  for (const auto& s : m.param_sources()) {
    out[s.op() + "." + s.param()].push_back(s.initializer() + ":" + std::to_string(s.layout()));
  }
  return out;
}

TEST_CASE("a weight read as the same tensor by several operators imports as tied copies") {
  // Gather's table and Gemm's transB weight are both W as is. (Gemm takes [batch, 4] only:
  // the head reads the relu of one position here.)
  Onnx b;
  b.input("ids", {}, kInt64);
  b.init("W", {6, 4}, iota(24));
  b.node("Gather", {"W", "ids"}, {"e"}, "emb");
  auto* gemm = b.node("Gemm", {"e", "W"}, {"y"}, "lm");
  Onnx::attr(gemm, "transB", int64_t{1});
  b.output("y", {6});
  const auto m = b.imported();
  REQUIRE(m.param_ties_size() == 1);
  const auto& tie = m.param_ties(0);
  REQUIRE(tie.members_size() == 2);
  CHECK(tie.members(0).op() == "emb");
  CHECK(tie.members(1).op() == "lm");
  CHECK(tie.members(1).param() == "weight");
  const auto g = testing::build_graph(m);
  CHECK(values(op(g, "emb"), "weight") == values(op(g, "lm"), "weight"));
  CHECK(g.ties().size() == 1);
  // --untie-weights: the same copies, no tie, a warning.
  std::vector<std::string> warnings;
  OnnxImportOptions untie;
  untie.untie_weights = true;
  untie.warnings = &warnings;
  const auto u = b.import(untie);
  REQUIRE(u.ok());
  CHECK(u->param_ties_size() == 0);
  REQUIRE(warnings.size() == 1);
  CHECK_THAT(warnings[0], Catch::Contains("'W'") && Catch::Contains("--untie-weights"));
}

TEST_CASE("copies of one weight in different layouts are refused, naming readers and layouts") {
  // W is [4, 4]: the table is W as is, MatMul's [out, in] weight is W transposed. The same
  // shape, but not the same tensor element for element.
  const std::string why = tied("W", 4).refusal();
  CHECK_THAT(why, Catch::Contains("weight 'W' is read by 2 operators (node 0 'emb' (Gather), "
                                  "node 2 'lm' (MatMul)) in different layouts"));
  CHECK_THAT(why, Catch::Contains("emb.weight as is, lm.weight transposed"));
  CHECK_THAT(why, Catch::Contains("--untie-weights"));
  // --untie-weights imports them as independent copies.
  OnnxImportOptions untie;
  untie.untie_weights = true;
  const auto u = tied("W", 4).import(untie);
  INFO(u.status().to_string());
  REQUIRE(u.ok());
  CHECK(u->param_ties_size() == 0);
}

TEST_CASE("a transposed copy torch's optimiser folded is a view of the parameter it names") {
  // nanoGPT's tied head through torch 2.x's optimiser: MatMul reads val_1 = W^T, a tensor of
  // its own; the node's fx_node names the parameter p_W.
  auto build = [](double nudge) {
    Onnx b = tied("val_1");
    std::vector<double> t(24);
    for (int r = 0; r < 4; ++r) {
      for (int c = 0; c < 6; ++c) t[static_cast<size_t>(r * 6 + c)] = iota(24)[c * 4 + r];
    }
    t[5] += nudge;
    b.init("val_1", {4, 6}, t);
    // NodeProto.metadata_props (field 9) is newer than the ONNX schema compiled here: written as
    // the unknown field the importer reads it from.
    onnx::StringStringEntryProto meta;
    meta.set_key("pkg.torch.onnx.fx_node");
    meta.set_value(
        "%linear : [num_users=1] = call_function[target=torch.ops.aten.linear.default](args = "
        "(%relu, %p_W), kwargs = {})");
    b.model.mutable_graph()->mutable_node(2)->mutable_unknown_fields()->AddLengthDelimited(
        9, meta.SerializeAsString());
    return b;
  };
  const auto m = build(0).imported();
  REQUIRE(m.param_ties_size() == 1);
  CHECK(m.param_ties(0).members(1).op() == "lm");
  // The head's copy is W as is, and also val_1 transposed: export writes both.
  auto sources = sources_of(m);
  CHECK(sources["emb.weight"] == std::vector<std::string>{"W:0"});
  CHECK(sources["lm.weight"] == std::vector<std::string>{"W:0", "val_1:1"});
  const auto g = testing::build_graph(m);
  CHECK(values(op(g, "emb"), "weight") == values(op(g, "lm"), "weight"));
  // Not exactly the transpose: a weight of its own, untied.
  const auto other = build(0.5).imported();
  CHECK(other.param_ties_size() == 0);
  CHECK(sources_of(other)["lm.weight"] == std::vector<std::string>{"val_1:1"});
}

TEST_CASE("a transpose the TorchScript exporter folded is a view of the one weight it equals") {
  // Legacy constant folding names the folded tensor onnx::MatMul_<n> and records no parameter.
  auto build = [](const std::vector<double>& table) {
    Onnx b;
    b.input("ids", {3}, kInt64);
    b.init("W", {6, 4}, table);
    std::vector<double> t(24);
    for (int r = 0; r < 4; ++r) {
      for (int c = 0; c < 6; ++c) t[static_cast<size_t>(r * 6 + c)] = table[c * 4 + r];
    }
    b.init("onnx::MatMul_7", {4, 6}, t);
    b.node("Gather", {"W", "ids"}, {"e"}, "emb");
    b.node("MatMul", {"e", "onnx::MatMul_7"}, {"y"}, "lm");
    b.output("y", {3, 6});
    return b;
  };
  const auto m = build(iota(24)).imported();
  REQUIRE(m.param_ties_size() == 1);
  CHECK(sources_of(m)["lm.weight"] == std::vector<std::string>{"W:0", "onnx::MatMul_7:1"});
  // An all-equal table is the transpose of any tensor of its size: no evidence, no tie.
  CHECK(build(std::vector<double>(24, 0.25)).imported().param_ties_size() == 0);
}

}  // namespace
}  // namespace gp::model

namespace gp::model {

TEST_CASE("a graph-only export's ConvTranspose weight, a graph input, is its parameter") {
  Onnx b;
  b.input("x", {3, 4, 4});
  auto* w = b.model.mutable_graph()->add_input();  // export_params=False: no values
  w->set_name("w");
  auto* tt = w->mutable_type()->mutable_tensor_type();
  tt->set_elem_type(testing::kOnnxFloat);
  for (int64_t d : {3, 5, 2, 2}) tt->mutable_shape()->add_dim()->set_dim_value(d);
  auto* n = b.node("ConvTranspose", {"x", "w"}, {"y"}, "up");
  Onnx::attr(n, "strides", std::vector<int64_t>{2, 2});
  b.output("y", {5, 8, 8});
  const auto g = testing::build_graph(b.imported());
  const auto& up = testing::imported_op(g, "up");
  CHECK(up.type() == "conv_transpose2d");
  CHECK(g.op(g.index_of("up")).cost.param_count == 3 * 5 * 2 * 2);
}

}  // namespace gp::model
