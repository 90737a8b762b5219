// Trained weights read through data movement only (model/src/onnx/weight_maps.cc): a weight
// reshaped for broadcasting, Swin's relative position bias (a table gathered by a constant index
// buffer, reshaped and permuted, as both exporters lower it), a lookup of constant ids: each is
// one index map of the weight, imported as the weight (trained) gathered by that map. Graphs are
// built here in memory; the numerics against torch are the e2e test's (torch2 weight_views).
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

// A [5, 2] table of distinct values, and the indices Swin's buffer holds for a 3 x 3 grid.
const std::vector<double> kTable = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9};
const std::vector<double> kIndex = {0, 1, 2, 3, 4, 3, 2, 1, 0};

// The map of table[index].view(3, 3, 2).permute(2, 0, 1): element (h, i, j) reads
// table[index[3 i + j]][h], flat 2 index[3 i + j] + h.
std::vector<int64_t> swin_map() {
  std::vector<int64_t> map;
  for (int64_t h = 0; h < 2; ++h) {
    for (size_t k = 0; k < kIndex.size(); ++k)
      map.push_back(2 * static_cast<int64_t>(kIndex[k]) + h);
  }
  return map;
}

// x [batch, 2, 3, 3] + the permuted bias, the table's lookup written by `lookup` into "picked".
Onnx swin_bias(void (*lookup)(Onnx&)) {
  Onnx b;
  b.input("x", {2, 3, 3});
  b.init("table", {5, 2}, kTable);
  lookup(b);
  b.init("grid", {3}, {3, 3, 2}, kInt64);
  b.node("Reshape", {"picked", "grid"}, {"grid_bias"}, "view");
  Onnx::attr(b.node("Transpose", {"grid_bias"}, {"bias"}, "permute"), "perm",
             std::vector<int64_t>{2, 0, 1});
  b.node("Add", {"x", "bias"}, {"y"}, "add_bias");
  b.output("y", {2, 3, 3});
  return b;
}

void check_swin_map(const Graph& g) {
  const auto& whole = op(g, "bias");
  CHECK(whole.type() == "broadcast_param");
  CHECK(testing::param_floats(whole, "value") ==
        std::vector<float>(kTable.begin(), kTable.end()));  // trained, in the table's order
  const auto& gather = op(g, "bias.gather");
  CHECK(gather.type() == "gather");
  CHECK(testing::attr_ints_of(gather, "indices") == swin_map());
  CHECK(shape(g, "bias.reshape") == "[2, 3, 3] float32");
  CHECK(op(g, "add_bias").type() == "add");
}

TEST_CASE("a weight reshaped for broadcasting (bias.view(-1, 1)) is the weight, trained") {
  Onnx b;
  b.input("x", {4, 3});
  b.init("w", {4}, {1, 2, 3, 4});
  b.init("one", {1}, {1}, kInt64);
  b.node("Unsqueeze", {"w", "one"}, {"w2"}, "unsqueeze");
  b.node("Mul", {"x", "w2"}, {"y"}, "mul");
  b.output("y", {4, 3});
  const auto g = testing::build_graph(b.imported());
  const auto& w = op(g, "w2");
  CHECK(w.type() == "broadcast_param");  // not a constant: SGD moves it
  CHECK(testing::param_floats(w, "value") == std::vector<float>{1, 2, 3, 4});
  CHECK(shape(g, "w2") == "[4, 1] float32");
  CHECK(op(g, "mul").type() == "binary");
}

TEST_CASE("Swin's relative position bias (table[index].view().permute()) gathers the table") {
  const auto b = swin_bias([](Onnx& m) {
    m.init("relative_position_index", {9}, kIndex, kInt64);
    m.node("Gather", {"table", "relative_position_index"}, {"picked"}, "lookup");
  });
  check_swin_map(testing::build_graph(b.imported()));
}

TEST_CASE("torch 2.x's lowering of table[index] (Transpose, GatherND, Shape of the index) maps") {
  const auto b = swin_bias([](Onnx& m) {
    m.init("relative_position_index", {9}, kIndex, kInt64);
    Onnx::attr(m.node("Transpose", {"table"}, {"front"}, "to_front"), "perm",
               std::vector<int64_t>{0, 1});
    // The index broadcast to its own shape (torch reads it through Max and Shape), then [9, 1].
    m.node("Max", {"relative_position_index"}, {"widest"}, "max");
    m.node("Shape", {"widest"}, {"widest_shape"}, "shape");
    m.node("Expand", {"relative_position_index", "widest_shape"}, {"expanded"}, "expand");
    m.init("last", {1}, {-1}, kInt64);
    m.node("Unsqueeze", {"expanded", "last"}, {"coords"}, "coords");
    m.node("GatherND", {"front", "coords"}, {"picked"}, "gather_nd");
  });
  check_swin_map(testing::build_graph(b.imported()));
}

TEST_CASE("rows of a table at constant ids, reshaped before the add, stay an embedding") {
  Onnx b;
  b.input("x", {3, 2});
  b.init("table", {5, 2}, kTable);
  b.init("ids", {3}, {4, 0, 2}, kInt64);
  b.node("Gather", {"table", "ids"}, {"rows"}, "lookup");
  b.init("zero", {1}, {0}, kInt64);
  b.node("Unsqueeze", {"rows", "zero"}, {"pe"}, "unsqueeze");
  b.node("Add", {"x", "pe"}, {"y"}, "add");
  b.output("y", {3, 2});
  const auto g = testing::build_graph(b.imported());
  const auto& lookup = op(g, "pe");
  CHECK(lookup.type() == "embedding");  // the rows per sample, not the table
  CHECK(testing::param_floats(lookup, "weight").size() == kTable.size());
  const auto& ids = op(g, "pe.ids");
  CHECK(testing::param_floats(ids, "value") == std::vector<float>{4, 0, 2});
  CHECK(shape(g, "pe") == "[1, 3, 2] float32");
}

TEST_CASE("a moved weight that a matmul reads is no map: the refusal names the weight node") {
  Onnx b;
  b.input("x", {3, 4});
  b.init("w", {8}, {1, 2, 3, 4, 5, 6, 7, 8});
  b.init("square", {2}, {4, 2}, kInt64);
  b.node("Reshape", {"w", "square"}, {"w2"}, "view");
  b.node("MatMul", {"x", "w2"}, {"y"}, "matmul");
  b.output("y", {3, 2});
  const auto msg = b.refusal();
  CHECK_THAT(msg, Catch::Contains("'matmul' (MatMul): its second input is neither activation nor "
                                  "weight; needs node 0 'view' (Reshape)"));
  CHECK_THAT(msg, Catch::Contains("computes from a trained weight"));
}

TEST_CASE("a concat of two moved weights is refused at the concat, naming the weight") {
  Onnx b;
  b.input("x", {2, 4});
  b.init("w1", {4}, {1, 2, 3, 4});
  b.init("w2", {4}, {5, 6, 7, 8});
  b.init("zero", {1}, {0}, kInt64);
  b.node("Unsqueeze", {"w1", "zero"}, {"u1"}, "unsqueeze1");
  b.node("Unsqueeze", {"w2", "zero"}, {"u2"}, "unsqueeze2");
  Onnx::attr(b.node("Concat", {"u1", "u2"}, {"both"}, "concat"), "axis", 0);
  b.node("Add", {"x", "both"}, {"y"}, "add");
  b.output("y", {2, 4});
  CHECK_THAT(b.refusal(), Catch::Contains("'concat' (Concat): reads 'u1', the trained weight 'w1' "
                                          "with its elements moved"));
}

TEST_CASE("a weight concatenated with a constant is no map: the constant is no index") {
  Onnx b;
  b.input("x", {3, 2});
  b.init("w", {2, 2}, {1, 2, 3, 4});
  b.constant("z", {1, 2}, {0, 0});
  Onnx::attr(b.node("Concat", {"w", "z"}, {"padded"}, "pad"), "axis", 0);
  b.node("Add", {"x", "padded"}, {"y"}, "add");
  b.output("y", {3, 2});
  CHECK_THAT(b.refusal(), Catch::Contains("'pad' (Concat)"));
}

TEST_CASE("the first rows of a table (pos_emb(arange(T))[None], T below the table) embed them") {
  Onnx b;
  b.input("x", {1, 2, 2});
  b.init("table", {5, 2}, kTable);
  b.init("first", {2}, {0, 1}, kInt64);
  b.node("Gather", {"table", "first"}, {"rows"}, "lookup");
  b.init("zero", {1}, {0}, kInt64);
  b.node("Unsqueeze", {"rows", "zero"}, {"pe"}, "unsqueeze");
  b.node("Add", {"x", "pe"}, {"y"}, "add");
  b.output("y", {1, 2, 2});
  const auto g = testing::build_graph(b.imported());
  CHECK(op(g, "pe").type() == "embedding");  // a prefix of the weight is no view of all of it
  CHECK(testing::param_floats(op(g, "pe.ids"), "value") == std::vector<float>{0, 1});
}

// x [batch, 5, 2] + BEiT's table: rows 0-3 viewed as a [1, 2, 2, 2] image, resized to `size`
// (its own: no element moves), viewed back and joined with row 4 again.
Onnx interpolated_table(const std::vector<double>& size) {
  Onnx b;
  b.input("x", {5, 2});
  b.init("table", {5, 2}, kTable);
  b.init("starts", {1}, {0}, kInt64);
  b.init("mid", {1}, {4}, kInt64);
  b.init("ends", {1}, {5}, kInt64);
  b.node("Slice", {"table", "starts", "mid"}, {"window"}, "window");
  b.node("Slice", {"table", "mid", "ends"}, {"tail"}, "tail");
  b.init("image", {4}, {1, 2, 2, 2}, kInt64);
  b.node("Reshape", {"window", "image"}, {"grid"}, "grid");
  b.init("sizes", {4}, size, kInt64);
  Onnx::attr(b.node("Resize", {"grid", "", "", "sizes"}, {"resized"}, "resize"), "mode",
             std::string("linear"));
  b.init("rows", {2}, {4, 2}, kInt64);
  b.node("Reshape", {"resized", "rows"}, {"flat"}, "flat");
  Onnx::attr(b.node("Concat", {"flat", "tail"}, {"joined"}, "join"), "axis", int64_t{0});
  b.node("Add", {"x", "joined"}, {"y"}, "add");
  b.output("y", {5, 2});
  return b;
}

TEST_CASE("two slices of a table joined again, one resized to its own size, are the table") {
  const auto g = testing::build_graph(interpolated_table({1, 2, 2, 2}).imported());
  // Every element in its place: the whole table, trained once.
  CHECK(op(g, "joined").type() == "broadcast_param");
  CHECK(testing::param_floats(op(g, "joined"), "value") ==
        std::vector<float>(kTable.begin(), kTable.end()));
  CHECK(g.total_params() == 10);
  // Resized to another size, its elements are interpolated: no map, refused by name.
  CHECK_THAT(interpolated_table({1, 2, 3, 3}).refusal(),
             Catch::Contains("'resize' (Resize): reads 'grid', the trained weight 'table' with "
                             "its elements moved"));
}

TEST_CASE("a weight cast to float32 and moved is the weight, added with a warning to freeze") {
  // DINOv2's pos_embed.to(torch.float32), reshaped, added to the tokens (a legacy export: no
  // mark says whether the initializer is a parameter or a buffer).
  Onnx b;
  b.input("x", {2, 3});
  b.weight("pos", {1, 6});
  auto* cast = b.node("Cast", {"pos"}, {"pos32"}, "cast");
  Onnx::attr(cast, "to", int64_t{testing::kOnnxFloat});
  b.init("shape", {3}, {1, 2, 3}, kInt64);
  b.node("Reshape", {"pos32", "shape"}, {"grid"}, "grid");
  b.node("Add", {"x", "grid"}, {"y"}, "add");
  b.output("y", {2, 3});
  std::vector<std::string> warnings;
  const auto g = testing::build_graph(b.imported(&warnings));
  CHECK(g.total_params() == 6);
  REQUIRE(warnings.size() == 1);
  CHECK_THAT(warnings[0], Catch::Contains("'pos' is added to activations as a learned weight") &&
                              Catch::Contains("--freeze pos"));
  // A Cast to another type changes the values: no map.
  Onnx half = b;
  half.model.mutable_graph()->mutable_node(0)->mutable_attribute(0)->set_i(10);  // float16
  CHECK_THAT(half.refusal(), Catch::Contains("casts the trained weight 'pos'"));
}

TEST_CASE("two maps of one weight that element-wise ops read apart read one tensor of it") {
  // w[0:1].view(4) added, w[1:2].view(4) multiplied: the first map makes the flat weight, which
  // the second gathers from too, so w is one parameter.
  Onnx b;
  b.input("x", {4});
  b.init("w", {2, 4}, {1, 2, 3, 4, 5, 6, 7, 8});
  b.init("zero", {1}, {0}, kInt64);
  b.init("one", {1}, {1}, kInt64);
  b.init("two", {1}, {2}, kInt64);
  b.init("flat", {1}, {4}, kInt64);
  b.node("Slice", {"w", "zero", "one"}, {"first"}, "first");
  b.node("Slice", {"w", "one", "two"}, {"second"}, "second");
  b.node("Reshape", {"first", "flat"}, {"shift"}, "shift_view");
  b.node("Reshape", {"second", "flat"}, {"gain"}, "gain_view");
  b.node("Add", {"x", "shift"}, {"shifted"}, "add");
  b.node("Mul", {"shifted", "gain"}, {"y"}, "mul");
  b.output("y", {4});
  const auto m = b.imported();
  const auto g = testing::build_graph(m);
  CHECK(m.param_ties_size() == 0);
  CHECK(op(g, "shift").type() == "broadcast_param");
  CHECK(op(g, "shift.gather").inputs(0).op() == "shift");
  CHECK(op(g, "gain.gather").inputs(0).op() == "shift");
  CHECK(testing::attr_ints_of(op(g, "gain.gather"), "indices") == std::vector<int64_t>{4, 5, 6, 7});
  CHECK(g.total_params() == 8);  // w, once
}

TEST_CASE("a map of a weight read directly and moved on reads the weight once") {
  // a = w.view(2, 2): read by an Add, and transposed for a Mul (one chain fanning out).
  Onnx b;
  b.input("x", {2, 2});
  b.init("w", {4}, {1, 2, 3, 4});
  b.init("square", {2}, {2, 2}, kInt64);
  b.node("Reshape", {"w", "square"}, {"a"}, "view");
  Onnx::attr(b.node("Transpose", {"a"}, {"at"}, "transpose"), "perm", std::vector<int64_t>{1, 0});
  b.node("Add", {"x", "a"}, {"shifted"}, "add");
  b.node("Mul", {"shifted", "at"}, {"y"}, "mul");
  b.output("y", {2, 2});
  const auto g = testing::build_graph(b.imported());
  CHECK(op(g, "a").type() == "broadcast_param");
  CHECK(op(g, "at.flat").inputs(0).op() == "a");  // the transposed map gathers from it
  CHECK(testing::attr_ints_of(op(g, "at.gather"), "indices") == std::vector<int64_t>{0, 2, 1, 3});
  CHECK(g.total_params() == 4);
}

TEST_CASE("rows of a table looked up and moved on again are refused: no one tensor holds both") {
  // r = table[[0, 1]].view(2, 2): added as an embedding of rows 0 and 1, and transposed for a
  // Mul, which would need the table as a tensor of its own.
  Onnx b;
  b.input("x", {2, 2});
  b.init("table", {5, 2}, kTable);
  b.init("ids", {2}, {0, 1}, kInt64);
  b.node("Gather", {"table", "ids"}, {"rows"}, "lookup");
  b.init("square", {2}, {2, 2}, kInt64);
  b.node("Reshape", {"rows", "square"}, {"r"}, "view");
  Onnx::attr(b.node("Transpose", {"r"}, {"rt"}, "transpose"), "perm", std::vector<int64_t>{1, 0});
  b.node("Add", {"x", "r"}, {"shifted"}, "add");
  b.node("Mul", {"shifted", "rt"}, {"y"}, "mul");
  b.output("y", {2, 2});
  CHECK_THAT(b.refusal(), Catch::Contains("'mul' (Mul): reads 'rt', a map of the trained weight "
                                          "'table', whose rows another map looks up"));
  model::OnnxImportOptions untied;
  untied.untie_weights = true;
  auto m = b.import(untied);
  INFO(m.status().to_string());
  CHECK(m.ok());
}

TEST_CASE("the legacy exporter's Identity of a folded copy imports apart, with a warning") {
  // One nn.Linear applied twice to [batch, T, 3] (or two layers of equal values): constant
  // folding copies the transposed weight per MatMul, and de-duplication joins the copies.
  Onnx b;
  b.input("x", {2, 3});
  b.weight("onnx::MatMul_10", {3, 3});
  b.node("Identity", {"onnx::MatMul_10"}, {"onnx::MatMul_11"}, "dedup");
  b.node("MatMul", {"x", "onnx::MatMul_10"}, {"h"}, "fc");
  b.node("Tanh", {"h"}, {"t"}, "tanh");
  b.node("MatMul", {"t", "onnx::MatMul_11"}, {"y"}, "fc_1");
  b.output("y", {2, 3});
  std::vector<std::string> warnings;
  CHECK(b.imported(&warnings).param_ties_size() == 0);
  REQUIRE(warnings.size() == 1);
  CHECK_THAT(warnings[0], Catch::Contains("'fc_1'") &&
                              Catch::Contains("'onnx::MatMul_11' is the exporter's copy of "
                                              "'onnx::MatMul_10'") &&
                              Catch::Contains("do_constant_folding=False"));
}

TEST_CASE("a weight that another op reads too is no map: it would train as untied copies") {
  Onnx b;
  b.input("x", {4});
  b.input("z", {4, 3});
  b.init("w", {4}, {1, 2, 3, 4});
  b.node("Mul", {"x", "w"}, {"scaled"}, "scale");
  b.init("one", {1}, {1}, kInt64);
  b.node("Unsqueeze", {"w", "one"}, {"column"}, "unsqueeze");
  b.node("Add", {"z", "column"}, {"shifted"}, "shift");
  b.output("scaled", {4});
  b.output("shifted", {4, 3});
  CHECK_THAT(b.refusal(), Catch::Contains("computes from a trained weight"));
}

TEST_CASE("a copy of a weight with a slice zeroed (Swin V2's key bias) is the weight masked") {
  // torchvision's Swin V2: qkv_bias = qkv.bias.clone(); qkv_bias[2:4].zero_(); x + qkv_bias.
  Onnx b;
  b.input("x", {6});
  b.init("bias", {6}, {1, 2, 3, 4, 5, 6});
  b.node("Identity", {"bias"}, {"copy"}, "clone");
  b.init("keys", {2, 1}, {2, 3}, kInt64);
  b.constant("zeros", {2}, {0, 0});
  b.node("ScatterND", {"copy", "keys", "zeros"}, {"qkv_bias"}, "zero_keys");
  b.node("Add", {"x", "qkv_bias"}, {"y"}, "add_bias");
  b.output("y", {6});
  const auto g = testing::build_graph(b.imported());
  const auto& whole = op(g, "qkv_bias");
  CHECK(whole.type() == "broadcast_param");
  CHECK(testing::param_floats(whole, "value") == std::vector<float>{1, 2, 3, 4, 5, 6});
  CHECK(testing::attr_ints_of(op(g, "qkv_bias.gather"), "indices") ==
        std::vector<int64_t>{0, 1, 0, 0, 4, 5});
  CHECK(op(g, "qkv_bias.zeroed").attrs().at("fn").s() == "mul");
  CHECK(testing::param_floats(op(g, "qkv_bias.kept"), "value") ==
        std::vector<float>{1, 1, 0, 0, 1, 1});
  // Updates other than zeros are not elements of the weight: not a map.
  Onnx other = b;
  other.model.mutable_graph()->mutable_node(1)->mutable_attribute(0)->mutable_t()->set_float_data(
      0, 7);
  CHECK_FALSE(other.import().ok());
  // Nor are zeros combined with the elements (reduction add keeps the weight, mul zeroes it).
  Onnx reduced = b;
  Onnx::attr(reduced.model.mutable_graph()->mutable_node(2), "reduction", std::string("add"));
  CHECK_FALSE(reduced.import().ok());
}

}  // namespace
}  // namespace gp::model
