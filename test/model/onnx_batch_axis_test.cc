// The importer follows the batch axis where ONNX graphs move it (batch_layout.cc): a
// sequence-first transpose, timm's qkv permute and unbind, Swin's windows folded into the batch
// and unfolded again, a broadcast that puts axes before the batch. Graphs built here in memory,
// each checked for the per-sample ops and shapes it maps to (numerics against torch: the
// timm_qkv, seq_first and window_fold exports of test/e2e/onnx_torch_test.cc); and refusals of
// ops on the batch axis, naming the node and saying so.
#include <catch2/catch.hpp>
#include <map>

#include "../support/models.h"
#include "../support/onnx_builder.h"
#include "gp/model/onnx_import.h"
#include "onnx/onnx_pb.h"

namespace gp::model {
namespace {

// testing::OnnxBuilder with each tensor's dims given in full, -1 where the symbolic batch is
// (these graphs move it), and the weights and views they write.
struct Onnx : testing::OnnxBuilder {
  void input(const std::string& name, const std::vector<int64_t>& dims) {
    value_with_batch(model.mutable_graph()->add_input(), name, dims, testing::kOnnxFloat);
  }
  void output(const std::string& name, const std::vector<int64_t>& dims) {
    value_with_batch(model.mutable_graph()->add_output(), name, dims, testing::kOnnxFloat);
  }
  void ints(const std::string& name, const std::vector<int64_t>& v) {
    init(name, {static_cast<int64_t>(v.size())}, std::vector<double>(v.begin(), v.end()),
         testing::kOnnxInt64);
  }
  void transpose(const std::string& in, const std::string& out, const std::vector<int64_t>& perm) {
    attr(node("Transpose", {in}, {out}, out), "perm", perm);
  }
  void reshape(const std::string& in, const std::string& out, const std::vector<int64_t>& to) {
    ints(out + ".shape", to);
    node("Reshape", {in, out + ".shape"}, {out}, out);
  }
  ModelGraph imported(std::vector<std::string>* warnings = nullptr) const {
    OnnxImportOptions options;
    options.warnings = warnings;
    auto m = import(options);
    INFO(m.status().to_string());
    REQUIRE(m.ok());
    return *m;
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

std::vector<int64_t> ints(const graphpipe::v1::Operator& o, const std::string& attr) {
  const auto& v = o.attrs().at(attr).ints().values();
  return {v.begin(), v.end()};
}

int count(const ModelGraph& m, const std::string& type) {
  int n = 0;
  for (const auto& o : m.ops()) n += o.type() == type ? 1 : 0;
  return n;
}

TEST_CASE("a sequence-first transpose moves the batch to axis 1 and back, op by op per sample") {
  // x.transpose(0, 1) -> Linear -> h - h.mean(dim=0) (over the sequence, before the batch) ->
  // Softmax over the features -> transpose back.
  Onnx b;
  b.input("x", {-1, 5, 8});
  b.transpose("x", "seq_first", {1, 0, 2});
  b.weight("w", {8, 4});
  b.node("MatMul", {"seq_first", "w"}, {"h"}, "fc");
  b.ints("axes", {0});
  b.node("ReduceMean", {"h", "axes"}, {"mean"}, "mean");
  b.node("Sub", {"h", "mean"}, {"centred"}, "centre");
  b.node("Softmax", {"centred"}, {"p"}, "softmax");
  b.transpose("p", "y", {1, 0, 2});
  b.output("y", {-1, 5, 4});
  std::vector<std::string> warnings;
  const auto m = b.imported(&warnings);
  const auto g = testing::build_graph(m);
  // [S, B, E] per sample is [S, E]: the transposes are views, no op.
  CHECK(count(m, "transpose") == 0);
  CHECK(op(g, "fc").inputs(0).op() == "x");
  CHECK(shape(g, "fc") == "[5, 4] float32");
  // ONNX axis 0 (the sequence) is per-sample axis 0.
  CHECK(op(g, "mean").type() == "reduce");
  CHECK(op(g, "mean").attrs().at("axis").i() == 0);
  CHECK(shape(g, "mean") == "[1, 4] float32");
  CHECK(shape(g, "centre") == "[5, 4] float32");
  CHECK(op(g, "softmax").type() == "softmax");
  CHECK(warnings.empty());  // the output is batch first again

  SECTION("an output left sequence first imports batch first, with a warning") {
    b.model.mutable_graph()->mutable_output(0)->set_name("p");
    std::vector<std::string> moved;
    const auto g2 = testing::build_graph(b.imported(&moved));
    REQUIRE(moved.size() == 1);
    CHECK_THAT(moved[0], Catch::Contains("graph output 'p' has the batch at axis 1"));
    CHECK(shape(g2, "p.target") == "[5, 4] float32");
  }
}

// timm's Attention after its qkv Linear: [B, N, 3C] -> [B, N, 3, H, D] -> permute(2, 0, 3, 1, 4)
// -> q, k, v (by Gather, or by Split and Squeeze as the legacy exporter writes unbind) ->
// softmax(q k^T) v -> [B, N, C].
void timm_attention(Onnx* b, bool split) {
  b->input("x", {-1, 4, 6});
  b->weight("w_qkv", {6, 18});
  b->node("MatMul", {"x", "w_qkv"}, {"qkv"}, "qkv");
  b->reshape("qkv", "heads", {0, 4, 3, 2, 3});
  b->transpose("heads", "permuted", {2, 0, 3, 1, 4});
  const char* names[] = {"q", "k", "v"};
  if (split) {
    b->ints("sizes", {1, 1, 1});
    Onnx::attr(b->node("Split", {"permuted", "sizes"}, {"q1", "k1", "v1"}, "unbind"), "axis", 0);
    b->ints("zero", {0});
    for (const char* n : names) {
      b->node("Squeeze", {std::string(n) + "1", "zero"}, {n}, std::string(n) + "_squeeze");
    }
  } else {
    for (int k = 0; k < 3; ++k) {
      b->init(std::string("index") + names[k], {}, {static_cast<double>(k)}, testing::kOnnxInt64);
      Onnx::attr(b->node("Gather", {"permuted", std::string("index") + names[k]}, {names[k]},
                         std::string(names[k]) + "_select"),
                 "axis", 0);
    }
  }
  b->transpose("k", "kt", {0, 1, 3, 2});
  b->node("MatMul", {"q", "kt"}, {"scores"}, "scores");
  b->node("Softmax", {"scores"}, {"probs"}, "softmax");
  b->node("MatMul", {"probs", "v"}, {"context"}, "context");
  b->transpose("context", "merged", {0, 2, 1, 3});
  b->reshape("merged", "y", {0, 4, 6});
  b->output("y", {-1, 4, 6});
}

TEST_CASE("timm's qkv permute moves the batch to axis 1, and unbind(0) brings it back") {
  for (const bool split : {false, true}) {
    INFO((split ? "Split + Squeeze" : "Gather"));
    Onnx b;
    timm_attention(&b, split);
    const auto m = b.imported();
    const auto g = testing::build_graph(m);
    // Per sample [N, 3, H, D] -> [3, H, N, D]: the batch's ONNX axis 1 is no per-sample axis.
    CHECK(shape(g, "heads") == "[4, 3, 2, 3] float32");
    // q, k and v: slices of per-sample axis 0 (ONNX axis 0, before the batch) of the permuted
    // [3, H, N, D], batch first again; each slice folds into a window of the permute
    // (onnx_slice_folds_test.cc), which is made no more.
    CHECK(count(m, "slice") == 0);
    CHECK(count(m, "transpose") == 4);  // q, k, v and the context's heads merged
    const std::string q = split ? "unbind" : "q_select";
    CHECK(op(g, q).type() == "transpose");
    CHECK(ints(op(g, q), "perm") == std::vector<int64_t>{1, 2, 0, 3});
    CHECK(op(g, q).attrs().at("axis").i() == 0);
    CHECK(shape(g, q) == "[1, 2, 4, 3] float32");
    CHECK(shape(g, split ? "q_squeeze" : "q_select.reshape") == "[2, 4, 3] float32");
    CHECK(shape(g, "scores") == "[2, 4, 4] float32");
    CHECK(shape(g, "context") == "[2, 4, 3] float32");
    CHECK(shape(g, "y") == "[4, 6] float32");
    CHECK(count(m, "matmul") == 2);
  }
}

TEST_CASE("Swin's windows fold into the batch and unfold again, through the shapes they read") {
  // [B, 16, 6] as a 4 x 4 grid of 2 x 2 windows: view(B, 2, 2, 2, 2, 6).permute(0, 1, 3, 2, 4, 5)
  // .view(-1, 4, 6) -> [B * 4, 4, 6]; a Linear; window_reverse reads B = windows.shape[0] / 4.
  Onnx b;
  b.input("x", {-1, 16, 6});
  b.reshape("x", "grid", {0, 2, 2, 2, 2, 6});
  b.transpose("grid", "windows_grid", {0, 1, 3, 2, 4, 5});
  b.reshape("windows_grid", "windows", {-1, 4, 6});
  b.weight("w", {6, 6});
  b.node("MatMul", {"windows", "w"}, {"mixed"}, "fc");
  b.node("Shape", {"mixed"}, {"shape"}, "shape");
  b.ints("zero", {0});
  Onnx::attr(b.node("Gather", {"shape", "zero"}, {"folded"}, "folded"), "axis", 0);
  b.ints("four", {4});
  b.node("Div", {"folded", "four"}, {"batch"}, "batch");
  b.ints("rest", {2, 2, 2, 2, -1});
  Onnx::attr(b.node("Concat", {"batch", "rest"}, {"target"}, "target"), "axis", 0);
  b.node("Reshape", {"mixed", "target"}, {"unfolded"}, "unfold");
  b.transpose("unfolded", "back", {0, 1, 3, 2, 4, 5});
  b.reshape("back", "y", {0, 16, 6});
  b.output("y", {-1, 16, 6});
  const auto m = b.imported();
  const auto g = testing::build_graph(m);
  // The 4 windows of a sample are its per-sample axis 0 while the batch holds them.
  CHECK(shape(g, "windows") == "[4, 4, 6] float32");
  CHECK(shape(g, "fc") == "[4, 4, 6] float32");
  // B * 4 split back into [B, 2, 2]: the fold unfolds.
  CHECK(shape(g, "unfold") == "[2, 2, 2, 2, 6] float32");
  CHECK(ints(op(g, "back"), "perm") == std::vector<int64_t>{0, 2, 1, 3, 4});
  CHECK(shape(g, "y") == "[16, 6] float32");
}

TEST_CASE(
    "a batch size traced into a constant Reshape target is read as the batch, with a warning") {
  // window_reverse with B = int(windows.shape[0] / 4): torch's tracer wrote the traced batch (3)
  // into both targets; read as the batch they unfold the windows as the symbolic version does.
  Onnx b;
  b.input("x", {-1, 16, 6});
  b.reshape("x", "grid", {0, 2, 2, 2, 2, 6});
  b.transpose("grid", "windows_grid", {0, 1, 3, 2, 4, 5});
  b.reshape("windows_grid", "windows", {-1, 4, 6});
  b.reshape("windows", "unfold", {3, 2, 2, 2, 2, -1});
  b.transpose("unfold", "back", {0, 1, 3, 2, 4, 5});
  b.reshape("back", "y", {3, 16, -1});
  b.output("y", {-1, 16, 6});
  std::vector<std::string> warnings;
  const auto g = testing::build_graph(b.imported(&warnings));
  CHECK(shape(g, "unfold") == "[2, 2, 2, 2, 6] float32");
  CHECK(shape(g, "y") == "[16, 6] float32");
  REQUIRE(warnings.size() == 2);
  CHECK_THAT(warnings[0], Catch::Contains("'unfold' (Reshape): target dim 0 = 3 is read as the "
                                          "batch (the exporter traced the batch size"));
  CHECK_THAT(warnings[1], Catch::Contains("'y' (Reshape): target dim 0 = 3"));
}

TEST_CASE("heads folded into the batch and a [S * B, E] projection follow the batch") {
  // nn.MultiheadAttention's internals at a sequence-first [S, B, E]: q viewed as [S, B * H, D]
  // and moved to [B * H, S, D]; the context back to [S, B * H, D], then [S * B, E] for the
  // output projection (the sequence outside the batch), then [S, B, E].
  Onnx b;
  b.input("x", {-1, 3, 4});
  b.transpose("x", "s_b_e", {1, 0, 2});
  b.reshape("s_b_e", "heads", {3, -1, 2});
  b.transpose("heads", "q", {1, 0, 2});
  b.transpose("q", "kt", {0, 2, 1});
  b.node("MatMul", {"q", "kt"}, {"scores"}, "scores");
  b.node("MatMul", {"scores", "q"}, {"context"}, "context");
  b.transpose("context", "s_bh_d", {1, 0, 2});
  b.reshape("s_bh_d", "rows", {-1, 4});
  b.weight("w_out", {4, 4});
  b.node("Gemm", {"rows", "w_out"}, {"projected"}, "out_proj");
  b.reshape("projected", "s_b_e2", {3, -1, 4});
  b.transpose("s_b_e2", "y", {1, 0, 2});
  b.output("y", {-1, 3, 4});
  const auto m = b.imported();
  const auto g = testing::build_graph(m);
  CHECK(shape(g, "heads") == "[3, 2, 2] float32");  // [S, H, D]: the heads folded after the batch
  CHECK(ints(op(g, "q"), "perm") == std::vector<int64_t>{1, 0, 2});
  CHECK(shape(g, "scores") == "[2, 3, 3] float32");
  CHECK(shape(g, "rows") == "[3, 4] float32");  // [S, E]: the sequence folded before the batch
  CHECK(op(g, "out_proj").type() == "linear");
  // [S * B, E] -> [S, B, E] -> [B, S, E] are the same [S, E] per sample: views, no ops.
  CHECK(op(g, "y.loss").inputs(0).op() == "out_proj");
}

TEST_CASE("a constant with more axes than the activation puts them before the batch") {
  Onnx b;
  b.input("x", {-1, 4});
  b.init("k", {3, 1, 4}, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12});
  b.node("Sub", {"x", "k"}, {"d"}, "sub");  // [3, B, 4]
  b.transpose("d", "y", {1, 0, 2});
  b.output("y", {-1, 3, 4});
  const auto m = b.imported();
  const auto g = testing::build_graph(m);
  CHECK(shape(g, "sub.1") == "[3, 4] float32");  // the weight, the batch axis's 1 dropped
  CHECK(shape(g, "sub") == "[3, 4] float32");
  CHECK(count(m, "transpose") == 0);  // [3, B, 4] per sample is [3, 4] already
}

TEST_CASE("ops on the batch axis are refused, naming the node and saying so") {
  auto seq_first = [](Onnx* b) {
    b->input("x", {-1, 5, 8});
    b->transpose("x", "s", {1, 0, 2});  // [S, B, E]
  };
  SECTION("a reduction over it") {
    Onnx b;
    seq_first(&b);
    b.ints("axes", {1});
    b.node("ReduceSum", {"s", "axes"}, {"y"}, "over_batch");
    b.output("y", {1, 8});
    CHECK_THAT(b.refusal(),
               Catch::Contains("'over_batch' (ReduceSum): reduces over the batch axis"));
  }
  SECTION("a general reduction over it") {
    Onnx b;
    seq_first(&b);
    b.ints("axes", {1});
    b.node("ReduceMax", {"s", "axes"}, {"y"}, "max_batch");
    b.output("y", {5, 1, 8});
    CHECK_THAT(b.refusal(),
               Catch::Contains("'max_batch' (ReduceMax): axes [1] include the batch axis"));
  }
  SECTION("a product contracting it") {
    Onnx b;
    b.input("x", {-1, 5, 8});
    b.transpose("x", "batch_last", {1, 2, 0});  // [S, E, B]
    b.weight("w", {4, 3});
    b.node("MatMul", {"batch_last", "w"}, {"y"}, "contract");
    b.output("y", {5, 8, 3});
    CHECK_THAT(b.refusal(),
               Catch::Contains("'contract' (MatMul): reads 'batch_last' with the batch at axis 2: "
                               "the product multiplies along the batch axis"));
  }
  SECTION("a slice of it") {
    Onnx b;
    seq_first(&b);
    b.ints("starts", {0});
    b.ints("ends", {2});
    b.ints("axes", {1});
    b.node("Slice", {"s", "starts", "ends", "axes"}, {"y"}, "first_two");
    b.output("y", {5, 2, 8});
    CHECK_THAT(b.refusal(), Catch::Contains("'first_two' (Slice): slices the batch axis"));
  }
  SECTION("a layer norm over it") {
    Onnx b;
    b.input("x", {-1, 5, 8});
    b.transpose("x", "batch_last", {1, 2, 0});
    b.weight("gamma", {4});
    b.node("LayerNormalization", {"batch_last", "gamma"}, {"y"}, "ln");
    b.output("y", {5, 8, 4});
    CHECK_THAT(b.refusal(), Catch::Contains("'ln' (LayerNormalization): reads 'batch_last' with "
                                            "the batch at axis 2: it normalises over axes from 2"));
  }
  SECTION("a reshape that splits it, where no constant dim can be a traced batch") {
    Onnx b;
    b.input("x", {-1, 3, 5});
    b.reshape("x", "y", {5, -1, 3});
    b.output("y", {5, -1, 3});
    CHECK_THAT(b.refusal(), Catch::Contains("target dim 0 = 5 splits the batch axis"));
    CHECK_THAT(b.refusal(), Catch::Contains("the batch size was traced into the export"));
  }
  SECTION("a convolution, which maps only batch-first tensors") {
    Onnx b;
    b.input("x", {-1, 3, 4, 4});
    b.transpose("x", "c_first", {1, 0, 2, 3});
    b.weight("w", {2, 3, 1, 1});
    b.node("Conv", {"c_first", "w"}, {"y"}, "conv");
    b.output("y", {3, 2, 4, 4});
    CHECK_THAT(b.refusal(), Catch::Contains("'conv' (Conv): reads 'c_first' with the batch at "
                                            "axis 1: Conv maps only batch-first tensors"));
  }
  SECTION("operands whose batches do not line up") {
    Onnx b;
    b.input("x", {-1, 4, 4});
    b.transpose("x", "moved", {1, 0, 2});
    b.node("Add", {"x", "moved"}, {"y"}, "mixed");
    b.output("y", {-1, 4, 4});
    CHECK_THAT(b.refusal(),
               Catch::Contains("'mixed' (Add): its inputs' batch axes do not line up"));
  }
  SECTION("a graph output with windows still in the batch") {
    Onnx b;
    b.input("x", {-1, 16, 6});
    b.reshape("x", "y", {-1, 4, 6});
    b.output("y", {-1, 4, 6});
    CHECK_THAT(b.refusal(), Catch::Contains("graph output 'y' has the batch at axis 0 (batch x 4), "
                                            "folded with per-sample dims"));
  }
}

}  // namespace
}  // namespace gp::model
