// The importer folds a transpose of a matmul operand's last two axes and constant scales of an
// operand or of the product into the matmul (matmul_folds.cc), as attention's scores are written
// (q @ k.transpose(-2, -1) * scale, or q * scale first); what another op also reads stays. The
// numerics of folded exports against torch: test/e2e/onnx_torch_test.cc (timm_qkv,
// dot_scores); the kernels: test/executor (naive loops and finite differences).
#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "../support/models.h"
#include "../support/onnx_builder.h"
#include "gp/model/onnx_import.h"
#include "onnx/onnx_pb.h"

namespace gp::model {
namespace {

struct Onnx : testing::OnnxBuilder {
  void transpose(const std::string& in, const std::string& out, const std::vector<int64_t>& perm) {
    attr(node("Transpose", {in}, {out}, out), "perm", perm);
  }
  // x [B, 4, 6] and its projections q, k, v [B, 4, 6].
  void projections() {
    input("x", {4, 6});
    for (const char* w : {"q", "k", "v"}) {
      weight(std::string("w_") + w, {6, 6});
      node("MatMul", {"x", std::string("w_") + w}, {w}, w);
    }
  }
};

int count(const ModelGraph& m, const std::string& type) { return testing::type_counts(m)[type]; }

const graphpipe::v1::Operator& op(const ModelGraph& m, const std::string& id) {
  return testing::model_op(m, id);
}

int64_t int_attr(const graphpipe::v1::Operator& o, const std::string& name) {
  return o.attrs().count(name) ? o.attrs().at(name).i() : 0;
}

double float_attr(const graphpipe::v1::Operator& o, const std::string& name) {
  return o.attrs().count(name) ? o.attrs().at(name).f() : 1.0;
}

}  // namespace

TEST_CASE("attention scores fold k's transpose and the scales of q and of the product") {
  Onnx b;
  b.projections();
  b.init("half", {}, {0.5});
  b.node("Mul", {"q", "half"}, {"qs"}, "qs");
  b.transpose("k", "kt", {0, 2, 1});
  b.node("MatMul", {"qs", "kt"}, {"scores"}, "scores");
  b.init("two", {}, {2.0});
  b.node("Div", {"scores", "two"}, {"scaled"}, "scaled");
  b.node("Softmax", {"scaled"}, {"probs"}, "probs");
  b.node("MatMul", {"probs", "v"}, {"y"}, "context");
  b.output("y", {4, 6});
  const ModelGraph m = b.imported();

  CHECK(count(m, "transpose") == 0);
  CHECK(count(m, "scale") == 0);
  const auto& scores = op(m, "scores");
  CHECK(scores.type() == "matmul");
  CHECK(int_attr(scores, "transpose_a") == 0);
  CHECK(int_attr(scores, "transpose_b") == 1);
  CHECK(float_attr(scores, "alpha") == 0.25);
  // The operands are the projections themselves; softmax reads the product.
  REQUIRE(scores.inputs_size() == 2);
  CHECK(scores.inputs(0).op() == "q");
  CHECK(scores.inputs(1).op() == "k");
  CHECK(op(m, "probs").inputs(0).op() == "scores");
  const Graph g = testing::build_graph(m);
  CHECK(shape_string(g.op(g.index_of("scores")).proto->outputs(0)) == "[4, 4] float32");
}

TEST_CASE("a transposed first operand folds into transpose_a") {
  Onnx b;
  b.projections();
  b.transpose("q", "qt", {0, 2, 1});             // [B, 6, 4]
  b.node("MatMul", {"qt", "k"}, {"y"}, "gram");  // [B, 6, 6]
  b.output("y", {6, 6});
  const ModelGraph m = b.imported();
  CHECK(count(m, "transpose") == 0);
  const auto& gram = op(m, "gram");
  CHECK(int_attr(gram, "transpose_a") == 1);
  CHECK(int_attr(gram, "transpose_b") == 0);
  const Graph g = testing::build_graph(m);
  CHECK(shape_string(g.op(g.index_of("gram")).proto->outputs(0)) == "[6, 6] float32");
}

TEST_CASE("a transpose or scale that another op also reads, or other axes moved, is kept") {
  Onnx b;
  b.projections();
  b.transpose("k", "kt", {0, 2, 1});
  b.node("MatMul", {"q", "kt"}, {"scores"}, "scores");
  b.node("Relu", {"kt"}, {"kt_relu"}, "kt_relu");  // a second reader of kt
  b.init("half", {}, {0.5});
  b.node("Mul", {"v", "half"}, {"vs"}, "vs");
  b.node("MatMul", {"scores", "vs"}, {"y"}, "context");
  b.node("Add", {"vs", "q"}, {"z"}, "z");  // a second reader of vs
  b.output("y", {4, 6});
  b.output("kt_relu", {6, 4});
  b.output("z", {4, 6});
  const ModelGraph m = b.imported();
  CHECK(count(m, "transpose") == 1);
  CHECK(count(m, "scale") == 1);
  CHECK(int_attr(op(m, "scores"), "transpose_b") == 0);
  CHECK(float_attr(op(m, "context"), "alpha") == 1.0);
  CHECK(op(m, "scores").inputs(1).op() == "kt");
}

TEST_CASE("a transpose that moves other axes than the last two is kept") {
  Onnx b;
  b.input("a", {2, 3, 4});
  b.input("c", {3, 4, 5});
  b.transpose("a", "at", {0, 2, 1, 3});  // per sample [2, 3, 4] -> [3, 2, 4]
  b.node("MatMul", {"at", "c"}, {"y"}, "prod");
  b.output("y", {3, 2, 5});
  const ModelGraph m = b.imported();
  CHECK(count(m, "transpose") == 1);
  CHECK(int_attr(op(m, "prod"), "transpose_a") == 0);
}

}  // namespace gp::model
