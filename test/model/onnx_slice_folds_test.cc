// The importer folds the slices of a transpose into windowed transposes of its input when slices
// are all that read it (slice_folds.cc), as timm's q, k, v = qkv.permute(...).unbind(0) is
// written (that case: onnx_batch_axis_test.cc; its numerics against torch: timm_qkv in
// test/e2e/onnx_torch_test.cc; the kernels: test/executor).
#include <catch2/catch.hpp>
#include <string>
#include <tuple>
#include <vector>

#include "../support/models.h"
#include "../support/onnx_builder.h"
#include "gp/model/onnx_import.h"
#include "onnx/onnx_pb.h"

namespace gp::model {
namespace {

struct Onnx : testing::OnnxBuilder {
  void ints(const std::string& name, const std::vector<int64_t>& v) {
    init(name, {static_cast<int64_t>(v.size())}, std::vector<double>(v.begin(), v.end()),
         testing::kOnnxInt64);
  }
  // x [B, 4, 6] transposed to t [B, 6, 4].
  void transposed() {
    input("x", {4, 6});
    attr(node("Transpose", {"x"}, {"t"}, "t"), "perm", std::vector<int64_t>{0, 2, 1});
  }
  // t[:, start:end] (ONNX axis 1, per-sample axis 0), then a relu so that it is read.
  void slice_of_t(const std::string& name, int64_t start, int64_t end) {
    ints(name + ".starts", {start});
    ints(name + ".ends", {end});
    ints(name + ".axes", {1});
    node("Slice", {"t", name + ".starts", name + ".ends", name + ".axes"}, {name}, name);
    node("Relu", {name}, {name + ".relu"}, name + ".relu");
    output(name + ".relu", {end - start, 4});
  }
};

int count(const ModelGraph& m, const std::string& type) { return testing::type_counts(m)[type]; }

const graphpipe::v1::Operator& op(const ModelGraph& m, const std::string& id) {
  return testing::model_op(m, id);
}

}  // namespace

TEST_CASE("slices that alone read a transpose become windows of the transpose's input") {
  Onnx b;
  b.transposed();
  b.slice_of_t("head", 0, 2);
  b.slice_of_t("tail", 2, 6);
  const ModelGraph m = b.imported();
  CHECK(count(m, "slice") == 0);
  CHECK(count(m, "transpose") == 2);  // the windows; the whole transpose "t" is gone
  for (const auto& [name, start, end] :
       std::vector<std::tuple<std::string, int64_t, int64_t>>{{"head", 0, 2}, {"tail", 2, 6}}) {
    INFO(name);
    const auto& w = op(m, name);
    CHECK(w.type() == "transpose");
    REQUIRE(w.inputs_size() == 1);
    CHECK(w.inputs(0).op() == "x");
    CHECK(w.attrs().at("perm").ints().values_size() == 2);
    CHECK(w.attrs().at("axis").i() == 0);
    CHECK(w.attrs().at("start").i() == start);
    CHECK(w.attrs().at("end").i() == end);
  }
  const Graph g = testing::build_graph(m);
  CHECK(shape_string(g.op(g.index_of("head")).proto->outputs(0)) == "[2, 4] float32");
  CHECK(shape_string(g.op(g.index_of("tail")).proto->outputs(0)) == "[4, 4] float32");
}

TEST_CASE("a transpose that another op also reads keeps its slices") {
  Onnx b;
  b.transposed();
  b.slice_of_t("head", 0, 2);
  b.node("Relu", {"t"}, {"t.relu"}, "t.relu");  // reads the whole transpose
  b.output("t.relu", {6, 4});
  const ModelGraph m = b.imported();
  CHECK(count(m, "slice") == 1);
  CHECK(count(m, "transpose") == 1);
  CHECK(op(m, "head").type() == "slice");
  CHECK(op(m, "t").attrs().count("axis") == 0);
}

}  // namespace gp::model
