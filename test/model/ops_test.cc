// Hand-computed FLOP, parameter and activation counts for the catalogue's operators.
#include <catch2/catch.hpp>
#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "gp/model/builder.h"
#include "gp/model/graph.h"

using namespace gp::model;

namespace {

const OpNode& only(const Graph& g, const std::string& id) { return g.op(g.index_of(id)); }

Graph build_ok(const ModelGraph& m) {
  auto g = Graph::build(m);
  INFO(g.status().to_string());
  REQUIRE(g.ok());
  return std::move(g).value();
}

}  // namespace

TEST_CASE(
    "linear counts 2*in*out FLOPs per row forward, twice that backward, and in*out+out params") {
  GraphBuilder b("m", "");
  auto x = b.input("x", {3, 5});  // 3 rows of 5 features per sample
  auto y = b.linear("fc", x, 7);
  b.add_loss(b.mse_loss("loss", y, b.input("t", {3, 7})));
  Graph g = build_ok(b.finish());
  const OpNode& fc = only(g, "fc");
  CHECK(fc.cost.param_count == 5 * 7 + 7);
  CHECK(fc.cost.forward_flops == Approx(2.0 * 3 * 5 * 7 + 3 * 7));  // GEMM + bias
  CHECK(fc.cost.backward_flops == Approx(4.0 * 3 * 5 * 7 + 3 * 7));
  // The executor keeps every tensor of the stage, so dW reads the kept input: the op itself keeps
  // only its output, with no saved scratch and no workspace without an activation.
  CHECK(fc.cost.activation_bytes == Approx(3 * 7 * 4));
  CHECK(fc.cost.saved_bytes == 0);
  CHECK(fc.cost.workspace_bytes == 0);
  CHECK(fc.cost.forward_fixed_bytes == Approx((5 * 7 + 7) * 4));
  REQUIRE(fc.proto->outputs_size() == 1);
  CHECK(fc.proto->outputs(0).shape(0) == 3);
  CHECK(fc.proto->outputs(0).shape(1) == 7);
  REQUIRE(fc.proto->params_size() == 2);
  CHECK(fc.proto->params(0).name() == "weight");
  CHECK(fc.proto->params(0).shape(0) == 7);
  CHECK(fc.proto->params(0).shape(1) == 5);
}

TEST_CASE("linear without bias and with fused relu counts the activation and keeps its output") {
  GraphBuilder b("m", "");
  auto x = b.input("x", {10});
  auto y = b.linear("fc", x, 4, /*bias=*/false, "relu");
  b.add_loss(b.mse_loss("loss", y, b.input("t", {4})));
  Graph g = build_ok(b.finish());
  const OpNode& fc = only(g, "fc");
  CHECK(fc.cost.param_count == 40);
  CHECK(fc.cost.forward_flops == Approx(2.0 * 10 * 4 + 4));
  CHECK(fc.cost.activation_bytes == Approx(4 * 4));
  CHECK(fc.cost.workspace_bytes == Approx(4 * 4));  // the pre-activation gradient in backward
}

TEST_CASE("attention FLOPs are 8sh^2 + 4s^2h plus softmax, with 4h^2+4h parameters") {
  const int64_t s = 256, h = 1024, heads = 16;
  GraphBuilder b("m", "");
  auto x = b.input("x", {s, h});
  auto y = b.attention("attn", x, heads);
  b.add_loss(b.mse_loss("loss", y, b.input("t", {s, h})));
  Graph g = build_ok(b.finish());
  const OpNode& attn = only(g, "attn");
  CHECK(attn.cost.param_count == 4 * h * h + 4 * h);
  const double S = s, H = h;
  const double matmuls = 8 * S * H * H + 4 * S * S * H;
  CHECK(attn.cost.forward_flops == Approx(matmuls + 6 * heads * S * S + 4 * S * H));
  CHECK(attn.cost.backward_flops == Approx(2 * matmuls + 4 * heads * S * S + 4 * S * H));
  // Saved: Q, K, V, the context (4 s h) and the probabilities (heads s^2); kept: those and the
  // output (s h). Backward's workspace holds their gradients (fp32).
  CHECK(attn.cost.saved_bytes == Approx((4 * S * H + heads * S * S) * 4));
  CHECK(attn.cost.activation_bytes == Approx((5 * S * H + heads * S * S) * 4));
  CHECK(attn.cost.workspace_bytes == Approx((4 * S * H + heads * S * S) * 4));
}

TEST_CASE("a transformer layer has 12h^2 + 13h parameters with FFN 4h") {
  const int64_t s = 256, h = 1024, heads = 16, ffn = 4096;
  GraphBuilder b("m", "");
  auto x = b.input("x", {s, h});
  auto y = b.transformer_layer("l0", x, h, heads, ffn);
  b.add_loss(b.mse_loss("loss", y, b.input("t", {s, h})));
  Graph g = build_ok(b.finish());
  // attention 4h^2+4h, FFN h*4h+4h + 4h*h+h, two layer norms 4h.
  CHECK(g.total_params() == 12 * h * h + 13 * h);
  CHECK(g.total_params() == 12596224);
  double forward = 0;
  for (const auto& node : g.ops()) {
    if (node.id().rfind("l0.", 0) == 0) forward += node.cost.forward_flops;
  }
  // Dominated by the matmuls: 24 s h^2 + 4 s^2 h.
  const double matmuls = 24.0 * s * h * h + 4.0 * s * s * h;
  CHECK(forward > matmuls);
  CHECK(forward < matmuls * 1.01);
}

TEST_CASE("embedding bag has rows*dim parameters and costs bag*dim per sample") {
  GraphBuilder b("m", "");
  auto ids = b.input("ids", {100}, graphpipe::v1::DATA_TYPE_INT64);
  auto e = b.embedding_bag("emb", ids, 1000000, 64);
  b.add_loss(b.mse_loss("loss", e, b.input("t", {64})));
  Graph g = build_ok(b.finish());
  const OpNode& emb = only(g, "emb");
  CHECK(emb.cost.param_count == 64000000);
  CHECK(emb.cost.forward_flops == Approx(100 * 64));
  CHECK(emb.cost.activation_bytes == Approx(64 * 4));  // its output; the ids are the input's
  CHECK(emb.proto->outputs(0).shape_size() == 1);
  CHECK(emb.proto->outputs(0).shape(0) == 64);
}

TEST_CASE("an embedding's padding_idx counts from the end when negative and must name a row") {
  for (const int64_t padding : {int64_t{2}, int64_t{-3}, int64_t{5}, int64_t{-6}}) {
    GraphBuilder b("m", "");
    auto e = b.embedding("emb", b.input("ids", {4}, graphpipe::v1::DATA_TYPE_INT64), 5, 8);
    for (auto& op : *b.model().mutable_ops()) {
      if (op.id() == "emb") (*op.mutable_attrs())["padding_idx"].set_i(padding);
    }
    b.add_loss(b.mse_loss("loss", e, b.input("t", {4, 8})));
    auto g = Graph::build(b.finish());
    INFO(padding);
    if (padding == 5 || padding == -6) {
      REQUIRE_FALSE(g.ok());
      CHECK_THAT(g.status().message(),
                 Catch::Contains("attrs.padding_idx = " + std::to_string(padding)) &&
                     Catch::Contains("5-row table"));
      continue;
    }
    REQUIRE(g.ok());
    const auto& attrs = std::get<EmbeddingAttrs>(g->op(g->index_of("emb")).attrs);
    CHECK(attrs.has_padding);
    CHECK(attrs.padding_idx == 2);
  }
}

TEST_CASE(
    "layout ops infer shapes: concat sums the axis, slice keeps start up to but not including "
    "end") {
  GraphBuilder b("m", "");
  auto a = b.input("a", {4, 3});
  auto c = b.input("c", {4, 5});
  auto cat = b.concat("cat", {a, c});
  auto sl = b.slice("sl", cat, 1, 2, 6);
  auto cat0 = b.concat("cat0", {a, a}, 0);
  auto s2 = b.slice("s2", cat0, 0, 0, 4);
  auto sum = b.add(
      "sum", {b.slice("sl2", cat, 1, 2, 5), b.slice("s3", s2, 1, 0, 3), b.slice("s4", c, 1, 1, 4)});
  auto ln = b.layer_norm("ln", b.gelu("g", b.relu("r", b.softmax("sm", sum))));
  (void)ln;
  b.add_loss(b.mse_loss("loss", sl, b.input("t", {4, 4})));
  Graph g = build_ok(b.finish());
  CHECK(only(g, "cat").proto->outputs(0).shape(1) == 8);
  CHECK(only(g, "sl").proto->outputs(0).shape(1) == 4);
  CHECK(only(g, "cat0").proto->outputs(0).shape(0) == 8);
  CHECK(only(g, "sum").cost.forward_flops == Approx(2 * 4 * 3));
  CHECK(only(g, "ln").cost.param_count == 2 * 3);
}

TEST_CASE("a windowed transpose outputs its window of the permuted input and costs moving it") {
  GraphBuilder b("m", "");
  // qkv [N = 4, 3, H = 2, D = 5] permuted to [3, 2, 4, 5]; window [1, 2) of axis 0: k.
  auto k = b.transpose("k", b.input("qkv", {4, 3, 2, 5}), {1, 2, 0, 3});
  set_attr(*b.model().mutable_ops(b.model().ops_size() - 1), "axis", int64_t{0});
  set_attr(*b.model().mutable_ops(b.model().ops_size() - 1), "start", int64_t{1});
  set_attr(*b.model().mutable_ops(b.model().ops_size() - 1), "end", int64_t{2});
  b.add_loss(b.mse_loss("loss", k, b.input("t", {1, 2, 4, 5})));
  Graph g = build_ok(b.finish());
  const auto& out = only(g, "k").proto->outputs(0);
  CHECK(std::vector<int64_t>(out.shape().begin(), out.shape().end()) ==
        std::vector<int64_t>{1, 2, 4, 5});
  const auto& a = std::get<TransposeAttrs>(only(g, "k").attrs);
  CHECK((a.axis == 0 && a.start == 1 && a.end == 2));
  // 40 of qkv's 120 floats move forward; backward writes all 120 (zeros outside the window).
  CHECK(only(g, "k").cost.forward_bytes == Approx(2 * 40 * 4));
  CHECK(only(g, "k").cost.backward_bytes == Approx((120 + 40) * 4));
}

TEST_CASE("softmax cross-entropy takes int64 labels shaped like the logits without classes") {
  GraphBuilder b("m", "");
  auto x = b.input("x", {8, 10});
  auto labels = b.input("labels", {8}, graphpipe::v1::DATA_TYPE_INT64);
  b.add_loss(b.softmax_cross_entropy("loss", x, labels));
  Graph g = build_ok(b.finish());
  CHECK(only(g, "loss").proto->outputs(0).shape(0) == 1);

  GraphBuilder bad("m", "");
  auto y = bad.input("x", {8, 10});
  auto wrong = bad.input("labels", {10}, graphpipe::v1::DATA_TYPE_INT64);
  bad.add_loss(bad.softmax_cross_entropy("loss", y, wrong));
  auto r = Graph::build(bad.finish());
  REQUIRE_FALSE(r.ok());
  CHECK_THAT(r.status().message(), Catch::Contains("inputs[1] (labels)"));
}

TEST_CASE("every catalogue op type has a summary and attribute help") {
  for (const auto& info : op_catalogue()) {
    CHECK_FALSE(info.summary.empty());
    CHECK_FALSE(info.attrs_help.empty());
    CHECK(find_op_type(info.type) == &info);
    // Every attribute the type takes is documented by its help.
    for (size_t at = 0; at < info.attr_names.size();) {
      const size_t comma = std::min(info.attr_names.find(',', at), info.attr_names.size());
      const std::string_view name = info.attr_names.substr(at, comma - at);
      INFO(info.type << ": " << name);
      CHECK_FALSE(name.empty());
      CHECK(info.attrs_help.find(name) != std::string_view::npos);
      at = comma + 1;
    }
  }
  CHECK(find_op_type("lstm") == nullptr);
}

namespace {

constexpr auto kInt64 = graphpipe::v1::DATA_TYPE_INT64;

std::vector<int64_t> shape_of(const OpNode& node) {
  const auto& spec = node.proto->outputs(0);
  return {spec.shape().begin(), spec.shape().end()};
}

std::vector<int64_t> param_shape(const OpNode& node, int p) {
  return {node.proto->params(p).shape().begin(), node.proto->params(p).shape().end()};
}

}  // namespace

TEST_CASE("matmul, scale, transpose and reshape infer shapes and costs") {
  GraphBuilder b("m", "");
  auto a = b.input("a", {2, 3, 4});
  auto mm = b.matmul("mm", a, b.input("b", {2, 4, 5}));
  auto sc = b.scale("sc", mm, 0.5);
  auto tr = b.transpose("tr", sc, {2, 0, 1});
  auto rs = b.reshape("rs", tr, {10, 3});
  b.add_loss(b.mse_loss("loss", rs, b.input("t", {10, 3})));
  Graph g = build_ok(b.finish());
  const OpNode& m = only(g, "mm");
  CHECK(shape_of(m) == std::vector<int64_t>{2, 3, 5});
  CHECK(m.cost.forward_flops == Approx(2.0 * 2 * 3 * 4 * 5));
  CHECK(m.cost.backward_flops == Approx(4.0 * 2 * 3 * 4 * 5));
  CHECK(m.cost.activation_bytes == Approx(30 * 4));  // the output (the operands are kept anyway)
  CHECK(m.cost.param_count == 0);
  CHECK(shape_of(only(g, "sc")) == std::vector<int64_t>{2, 3, 5});
  CHECK(only(g, "sc").cost.forward_flops == Approx(30));
  CHECK(only(g, "sc").cost.saved_bytes == 0);
  CHECK(shape_of(only(g, "tr")) == std::vector<int64_t>{5, 2, 3});
  CHECK(only(g, "tr").cost.forward_bytes == Approx(2 * 30 * 4));
  CHECK(shape_of(only(g, "rs")) == std::vector<int64_t>{10, 3});
  CHECK(only(g, "rs").cost.forward_flops == 0);
}

TEST_CASE("conv2d, pooling and batch_norm infer output sizes, parameters and costs") {
  GraphBuilder b("m", "");
  auto x = b.input("x", {3, 32, 32});
  auto conv = b.conv2d("conv", x, 16, {3, 3}, {2, 2}, {1, 1});  // (32 + 2 - 3) / 2 + 1 = 16
  auto bn = b.batch_norm("bn", conv);
  auto mp = b.max_pool2d("mp", bn, {2, 2});                        // stride = kernel: 8
  auto ap = b.avg_pool2d("ap", mp, {3, 3}, {1, 1}, {1, 1});        // same size
  auto c2 = b.conv2d("c2", ap, 4, {1, 2}, {1, 1}, {0, 0}, false);  // [4, 8, 7]
  b.add_loss(b.mse_loss("loss", c2, b.input("t", {4, 8, 7})));
  Graph g = build_ok(b.finish());

  const OpNode& c = only(g, "conv");
  CHECK(shape_of(c) == std::vector<int64_t>{16, 16, 16});
  REQUIRE(c.proto->params_size() == 2);
  CHECK(c.proto->params(0).name() == "weight");
  CHECK(param_shape(c, 0) == std::vector<int64_t>{16, 3, 3, 3});
  CHECK(param_shape(c, 1) == std::vector<int64_t>{16});
  CHECK(c.cost.param_count == 16 * 27 + 16);
  const double outs = 16.0 * 16 * 16, gemm = 2.0 * 27 * outs;
  CHECK(c.cost.forward_flops == Approx(gemm + outs));
  CHECK(c.cost.backward_flops == Approx(2 * gemm + outs));
  CHECK(c.cost.activation_bytes == Approx(outs * 4));
  CHECK(c.cost.workspace_bytes == Approx(27 * 16 * 16 * 4));  // im2col patches, rebuilt in backward
  CHECK(c.cost.forward_fixed_bytes == Approx((16 * 27 + 16) * 4));

  const OpNode& norm = only(g, "bn");
  CHECK(shape_of(norm) == std::vector<int64_t>{16, 16, 16});
  REQUIRE(norm.proto->params_size() == 2);
  CHECK(norm.proto->params(0).name() == "gamma");
  CHECK(norm.proto->params(1).name() == "beta");
  CHECK(norm.cost.param_count == 32);
  CHECK(norm.cost.activation_bytes == Approx(outs * 4));

  const OpNode& m = only(g, "mp");
  CHECK(shape_of(m) == std::vector<int64_t>{16, 8, 8});
  CHECK(m.cost.forward_flops == Approx(4 * 16 * 8 * 8));
  CHECK(m.cost.saved_bytes == Approx(16 * 8 * 8 * 4));  // the argmax indices
  CHECK(m.cost.activation_bytes == Approx(2 * 16 * 8 * 8 * 4));
  CHECK(shape_of(only(g, "ap")) == std::vector<int64_t>{16, 8, 8});
  CHECK(only(g, "ap").cost.saved_bytes == 0);
  const OpNode& c2n = only(g, "c2");
  CHECK(shape_of(c2n) == std::vector<int64_t>{4, 8, 7});
  CHECK(c2n.proto->params_size() == 1);
  CHECK(c2n.cost.param_count == 4 * 16 * 2);
  CHECK(c2n.cost.forward_flops == Approx(2.0 * 32 * 4 * 8 * 7));

  GraphBuilder b1("m", "");
  auto v = b1.batch_norm("bn", b1.input("x", {5}), 1e-3);
  b1.add_loss(b1.mse_loss("loss", v, b1.input("t", {5})));
  Graph g1 = build_ok(b1.finish());
  CHECK(shape_of(only(g1, "bn")) == std::vector<int64_t>{5});
  CHECK(only(g1, "bn").cost.param_count == 10);
}

TEST_CASE("opaque copies its declared output and takes its costs from its attributes") {
  GraphBuilder b("m", "");
  auto x = b.input("x", {4});
  auto ids = b.input("ids", {3}, kInt64);
  auto y = b.opaque("op", {x, ids}, make_spec({5, 2}), "Mul", 100, 7);
  auto z = b.opaque("gen", {}, make_spec({3}, kInt64), "RandomUniform", 0);
  b.add_loss(b.mse_loss("loss", y, b.input("t", {5, 2})));
  auto& proto = b.model();
  Operator* plain = proto.add_ops();  // forward_flops left to its default
  plain->set_id("plain");
  plain->set_type("opaque");
  *plain->add_inputs() = z;
  *plain->add_outputs() = make_spec({6});
  set_attr(*plain, "onnx_type", std::string_view("Cast"));
  Graph g = build_ok(b.finish());
  const OpNode& op = only(g, "op");
  CHECK(shape_of(op) == std::vector<int64_t>{5, 2});
  REQUIRE(op.proto->params_size() == 1);
  CHECK(op.proto->params(0).name() == "weights");
  CHECK(param_shape(op, 0) == std::vector<int64_t>{7});
  CHECK(op.cost.param_count == 7);
  CHECK(op.cost.forward_flops == Approx(100));
  CHECK(op.cost.backward_flops == Approx(200));
  CHECK(op.cost.forward_bytes == Approx(4 * 4 + 3 * 8 + 10 * 4));
  CHECK(op.cost.activation_bytes == Approx(4 * 4 + 3 * 8));
  const OpNode& gen = only(g, "gen");
  CHECK(gen.proto->outputs(0).dtype() == kInt64);
  CHECK(gen.proto->params_size() == 0);
  CHECK(gen.cost.forward_flops == 0);
  CHECK(only(g, "plain").cost.forward_flops == Approx(6));  // default: output elements
}

namespace {

// Graph::build's error for a model whose op "op" is made by `build` (no loss: shape inference
// fails first).
std::string build_error(const std::function<void(GraphBuilder&)>& build) {
  GraphBuilder b("m", "");
  build(b);
  auto g = Graph::build(b.finish());
  REQUIRE_FALSE(g.ok());
  return g.status().message();
}

// The op "op" of a builder's model (the last one added).
Operator& op_of(GraphBuilder& b) {
  REQUIRE(b.model().ops_size() > 0);
  Operator& op = *b.model().mutable_ops(b.model().ops_size() - 1);
  REQUIRE(op.id() == "op");
  return op;
}

struct ErrorCase {
  std::function<void(GraphBuilder&)> build;
  std::string expected;  // after "ops[k] 'op' (type): "
};

}  // namespace

TEST_CASE("matmul with transposed operands and alpha infers the product's shape and cost") {
  GraphBuilder b("m", "");
  // op(a) = a^T: [2, 3, 4] -> [2, 4, 3]; op(b) = b^T: [2, 5, 3] -> [2, 3, 5]; y [2, 4, 5].
  auto mm = b.matmul("op", b.input("a", {2, 3, 4}), b.input("b", {2, 5, 3}));
  set_attr(op_of(b), "transpose_a", int64_t{1});
  set_attr(op_of(b), "transpose_b", int64_t{1});
  set_attr(op_of(b), "alpha", 0.25);
  b.add_loss(b.mse_loss("loss", mm, b.input("t", {2, 4, 5})));
  Graph g = build_ok(b.finish());
  const OpNode& m = only(g, "op");
  CHECK(shape_of(m) == std::vector<int64_t>{2, 4, 5});
  CHECK(m.cost.forward_flops == Approx(2.0 * 2 * 4 * 3 * 5));
  const auto& attrs = std::get<MatmulAttrs>(m.attrs);
  CHECK(attrs.transpose_a);
  CHECK(attrs.transpose_b);
  CHECK(attrs.alpha == 0.25);
}

TEST_CASE("the new op types reject bad inputs and attributes, naming the field and the value") {
  using B = GraphBuilder&;
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const std::vector<ErrorCase> cases = {
      // matmul
      {[](B b) {
         b.matmul("op", b.input("a", {3, 4}), b.input("b", {2, 4, 5}));
       },
       "(matmul): inputs[1]: shape [2, 4, 5] float32 has 3 per-sample dimensions, inputs[0] "
       "[3, 4] float32 has 2 (matmul needs equal ranks)"},
      {[](B b) { b.matmul("op", b.input("a", {4}), b.input("b", {4})); },
       "(matmul): inputs[0]: expected at least 2 per-sample dimension(s), got [4] float32"},
      {[](B b) {
         b.matmul("op", b.input("a", {2, 3, 4}), b.input("b", {3, 4, 5}));
       },
       "(matmul): inputs[1]: shape [3, 4, 5] float32: leading dimension 0 differs from inputs[0] "
       "[2, 3, 4] float32"},
      {[](B b) {
         b.matmul("op", b.input("a", {3, 4}), b.input("b", {5, 2}));
       },
       "(matmul): inputs[1]: shape [5, 2] float32: dimension 0 (5) must equal the last dimension "
       "of inputs[0] [3, 4] float32 (4)"},
      {[](B b) {
         b.matmul("op", b.input("a", {3, 4}), b.input("b", {4, 2}));
         set_attr(op_of(b), "transpose_b", int64_t{1});
       },
       "(matmul): inputs[1]: shape [4, 2] float32: dimension 1 (2) must equal the last dimension "
       "of inputs[0] [3, 4] float32 (4) (transpose_a = 0, transpose_b = 1)"},
      {[](B b) {
         b.matmul("op", b.input("a", {3, 4}), b.input("b", {4, 2}));
         set_attr(op_of(b), "transpose_a", int64_t{1});
       },
       "(matmul): inputs[1]: shape [4, 2] float32: dimension 0 (4) must equal dimension 0 of "
       "inputs[0] [3, 4] float32 (3) (transpose_a = 1, transpose_b = 0)"},
      {[](B b) {
         b.matmul("op", b.input("a", {3, 4}), b.input("b", {4, 2}));
         set_attr(op_of(b), "transpose_b", int64_t{2});
       },
       "(matmul): attrs.transpose_b = 2, must be 0 or 1"},
      {[nan](B b) {
         b.matmul("op", b.input("a", {3, 4}), b.input("b", {4, 2}));
         set_attr(op_of(b), "alpha", nan);
       },
       "(matmul): attrs.alpha = nan, must be finite"},
      {[](B b) {
         b.matmul("op", b.input("a", {3, 4}), b.input("b", {4, 2}, kInt64));
       },
       "(matmul): inputs[1]: expected a floating-point tensor, got [4, 2] int64"},
      // embedding_bag's padding id: -1 (bags padded to one length) or a row of the table
      {[](B b) {
         b.embedding_bag("op", b.input("ids", {3}, kInt64), 5, 2);
         set_attr(op_of(b), "padding_idx", int64_t{5});
       },
       "(embedding_bag): attrs.padding_idx = 5, expected -1 or a row in [0, num_embeddings = 5)"},
      {[](B b) {
         b.embedding_bag("op", b.input("ids", {3}, kInt64), 5, 2);
         set_attr(op_of(b), "padding_idx", int64_t{-2});
       },
       "(embedding_bag): attrs.padding_idx = -2, expected -1 or a row in [0, num_embeddings = 5)"},
      // scale
      {[](B b) { b.add_op("op", "scale", {b.input("x", {3})}); },
       "(scale): attrs.factor: required attribute is missing"},
      {[nan](B b) { b.scale("op", b.input("x", {3}), nan); },
       "(scale): attrs.factor = nan, must be finite"},
      {[](B b) {
         b.scale("op", b.input("x", {3}), 1);
         set_attr(op_of(b), "factor", std::string_view("two"));
       },
       "(scale): attrs.factor: expected a number (field 'f')"},
      // transpose
      {[](B b) {
         b.transpose("op", b.input("x", {3, 4}), {0, 0});
       },
       "(transpose): attrs.perm = [0, 0]: not a permutation of 0..1"},
      {[](B b) {
         b.transpose("op", b.input("x", {3, 4}), {0, 2});
       },
       "(transpose): attrs.perm = [0, 2]: not a permutation of 0..1"},
      {[](B b) {
         b.transpose("op", b.input("x", {2, 3, 4}), {1, 0});
       },
       "(transpose): attrs.perm = [1, 0]: has 2 entries, the input [2, 3, 4] float32 has 3 "
       "per-sample axes (need a permutation of 0..2)"},
      {[](B b) { b.add_op("op", "transpose", {b.input("x", {3})}); },
       "(transpose): attrs.perm: required attribute is missing"},
      {[](B b) {
         b.transpose("op", b.input("x", {3, 4}), {1, 0});
         set_attr(op_of(b), "axis", int64_t{0});
         set_attr(op_of(b), "end", int64_t{2});
       },
       "(transpose): attrs: a window needs axis, start and end together (given 2 of them)"},
      {[](B b) {
         b.transpose("op", b.input("x", {3, 4}), {1, 0});
         set_attr(op_of(b), "axis", int64_t{1});
         set_attr(op_of(b), "start", int64_t{2});
         set_attr(op_of(b), "end", int64_t{4});
       },
       "(transpose): attrs.start = 2, attrs.end = 4: need 0 <= start < end <= 3 (size of the "
       "permuted axis 1)"},
      // reshape
      {[](B b) {
         b.reshape("op", b.input("x", {3, 4}), {5, 2});
       },
       "(reshape): attrs.shape = [5, 2]: 10 elements, the input [3, 4] float32 has 12"},
      {[](B b) {
         b.reshape("op", b.input("x", {3, 4}), {-1, 12});
       },
       "(reshape): attrs.shape = [-1, 12]: every dimension must be > 0"},
      {[](B b) {
         b.reshape("op", b.input("x", {3, 4}), {});
       },
       "(reshape): attrs.shape = []"},
      // conv2d
      {[](B b) {
         b.conv2d("op", b.input("x", {4, 4}), 2, {3, 3});
       },
       "(conv2d): inputs[0]: expected per-sample [channels, height, width], got [4, 4] float32"},
      {[](B b) {
         b.add_op("op", "conv2d", {b.input("x", {1, 4, 4})});
         set_attr(op_of(b), "out_channels", int64_t{2});
       },
       "(conv2d): attrs.kernel: required attribute is missing"},
      {[](B b) {
         b.conv2d("op", b.input("x", {1, 4, 4}), 2, {3});
       },
       "(conv2d): attrs.kernel = [3]: expected 2 values [h, w]"},
      {[](B b) {
         b.conv2d("op", b.input("x", {1, 4, 4}), 2, {3, 3}, {0, 1});
       },
       "(conv2d): attrs.stride = [0, 1]: values must be >= 1"},
      {[](B b) {
         b.conv2d("op", b.input("x", {1, 4, 4}), 2, {3, 3}, {1, 1}, {-1, 0});
       },
       "(conv2d): attrs.padding = [-1, 0]: values must be >= 0"},
      {[](B b) {
         b.conv2d("op", b.input("x", {1, 4, 4}), 0, {3, 3});
       },
       "(conv2d): attrs.out_channels = 0, must be > 0"},
      {[](B b) {
         b.conv2d("op", b.input("x", {1, 4, 4}), 2, {3, 3});
         op_of(b).mutable_attrs()->erase("out_channels");
       },
       "(conv2d): attrs.out_channels: required attribute is missing"},
      {[](B b) {
         b.conv2d("op", b.input("x", {1, 4, 4}), 2, {3, 3});
         set_attr(op_of(b), "bias", int64_t{2});
       },
       "(conv2d): attrs.bias = 2, must be 0 or 1"},
      {[](B b) {
         b.conv2d("op", b.input("x", {1, 4, 4}), 2, {5, 5});
       },
       "(conv2d): attrs.kernel = [5, 5] does not fit the input [1, 4, 4] float32 padded by "
       "attrs.padding = [0, 0]"},
      // pooling
      {[](B b) {
         b.max_pool2d("op", b.input("x", {1, 4, 4}), {2, 2}, {}, {2, 0});
       },
       "(max_pool2d): attrs.padding = [2, 0]: must be smaller than attrs.kernel = [2, 2]"},
      {[](B b) {
         b.max_pool2d("op", b.input("x", {1, 4, 4}), {2, 2}, {1, -1});
       },
       "(max_pool2d): attrs.stride = [1, -1]: values must be >= 1"},
      {[](B b) {
         b.max_pool2d("op", b.input("x", {4, 4}), {2, 2});
       },
       "(max_pool2d): inputs[0]: expected per-sample [channels, height, width]"},
      {[](B b) {
         b.avg_pool2d("op", b.input("x", {1, 2, 2}), {3, 3});
       },
       "(avg_pool2d): attrs.kernel = [3, 3] does not fit the input [1, 2, 2] float32"},
      {[](B b) {
         b.avg_pool2d("op", b.input("x", {1, 4, 4}), {2, 2});
         set_attr(op_of(b), "count_include_pad", int64_t{2});
       },
       "(avg_pool2d): attrs.count_include_pad = 2, must be 0 or 1"},
      // batch_norm
      {[](B b) {
         b.batch_norm("op", b.input("x", {3, 4}), 0);
       },
       "(batch_norm): attrs.epsilon = 0.000000, must be > 0"},
      {[](B b) { b.batch_norm("op", b.input("x", {3}, kInt64)); },
       "(batch_norm): inputs[0]: expected a floating-point tensor, got [3] int64"},
      // opaque
      {[](B b) {
         b.add_op("op", "opaque", {b.input("x", {3})});
         set_attr(op_of(b), "onnx_type", std::string_view("Mul"));
       },
       "(opaque): outputs[0]: missing; an opaque op declares its one output's per-sample shape and "
       "dtype"},
      {[](B b) { b.opaque("op", {b.input("x", {3})}, TensorSpec(), "Mul", 1); },
       "(opaque): outputs[0].shape: empty; give the per-sample shape"},
      {[](B b) {
         b.opaque("op", {b.input("x", {3})}, make_spec({3}), "Mul", 1);
         *op_of(b).add_outputs() = make_spec({3});
       },
       "(opaque): outputs: an opaque op declares exactly one output, got 2"},
      {[](B b) {
         b.opaque("op", {b.input("x", {3})}, make_spec({3}), "Mul", 1);
         op_of(b).mutable_attrs()->erase("onnx_type");
       },
       "(opaque): attrs.onnx_type: required attribute is missing"},
      {[](B b) { b.opaque("op", {b.input("x", {3})}, make_spec({3}), "Mul", -1); },
       "(opaque): attrs.forward_flops = -1.000000, must be finite and >= 0"},
      {[](B b) { b.opaque("op", {b.input("x", {3})}, make_spec({3}), "Mul", 1, -2); },
       "(opaque): attrs.param_elements = -2, must be >= 0"},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    DYNAMIC_SECTION("case " << i << ": " << cases[i].expected) {
      const std::string message = build_error(cases[i].build);
      CHECK_THAT(message, Catch::Contains("'op' " + cases[i].expected));
    }
  }
}

TEST_CASE("an unknown or misspelled attribute is refused naming the op, it and the known ones") {
  using B = GraphBuilder&;
  const std::vector<ErrorCase> cases = {
      {[](B b) {
         b.conv2d("op", b.input("x", {3, 8, 8}), 4, {3, 3});
         set_attr(op_of(b), "strides", std::vector<int64_t>{2, 2});
       },
       "(conv2d): attrs.strides: unknown attribute; conv2d takes out_channels, kernel, stride, "
       "padding, bias, groups"},
      {[](B b) {
         b.linear("op", b.input("x", {4}), 2);
         set_attr(op_of(b), "out_feature", int64_t{3});
         set_attr(op_of(b), "bais", int64_t{0});
       },
       "(linear): attrs.bais, attrs.out_feature: unknown attributes; linear takes out_features, "
       "bias, activation"},
      {[](B b) {
         b.relu("op", b.input("x", {4}));
         set_attr(op_of(b), "inplace", int64_t{1});
       },
       "(relu): attrs.inplace: unknown attribute; relu takes none"},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    DYNAMIC_SECTION("case " << i << ": " << cases[i].expected) {
      CHECK_THAT(build_error(cases[i].build), Catch::Contains("'op' " + cases[i].expected));
    }
  }
}

TEST_CASE("shape inference decodes every attribute once into the op's typed attributes") {
  GraphBuilder b("m", "");
  auto x = b.input("x", {4, 8});
  auto fc = b.linear("fc", x, 8, /*bias=*/false, "gelu");
  auto at = b.attention("at", fc, 2);
  auto ln = b.layer_norm("ln", at);
  auto ge = b.gelu("ge", ln, /*exact=*/true);
  auto cl = b.clip("cl", ge, -1.5, 2.5);
  auto sl = b.slice("sl", cl, -1, 2, 6);  // axis -1 of [4, 8]: normalised to 1
  auto sc = b.scale("sc", sl, 0.25);
  auto tr = b.transpose("tr", sc, {1, 0});
  auto rd = b.reduce("rd", tr, 0, /*mean=*/true);
  auto cat = b.concat("cat", {rd, rd}, -2);
  auto img = b.input("img", {3, 9, 9});
  auto conv = b.conv2d("conv", img, 6, {3, 3}, {2, 2}, {1, 1}, /*bias=*/false);  // [6, 5, 5]
  auto mp = b.max_pool2d("mp", conv, {2, 2});                                    // stride 2
  auto ap = b.avg_pool2d("ap", mp, {3, 3}, {1, 1}, {1, 1}, /*count_include_pad=*/false);
  auto ids = b.input("ids", {5}, graphpipe::v1::DATA_TYPE_INT64);
  auto bag = b.embedding_bag("bag", ids, 10, 3);
  b.add_loss(b.mse_loss("l0", cat, b.input("t0", {2, 4})));
  b.add_loss(b.mse_loss("l1", ap, b.input("t1", {6, 2, 2})));
  b.add_loss(b.mse_loss("l2", bag, b.input("t2", {3})));
  Graph g = build_ok(b.finish());

  const auto& lin = std::get<LinearAttrs>(only(g, "fc").attrs);
  CHECK(lin.out_features == 8);
  CHECK_FALSE(lin.bias);
  CHECK(lin.activation == Activation::kGelu);
  CHECK(std::get<AttentionAttrs>(only(g, "at").attrs).num_heads == 2);
  CHECK(std::get<NormAttrs>(only(g, "ln").attrs).epsilon == Approx(1e-5));
  CHECK(std::get<GeluAttrs>(only(g, "ge").attrs).exact);
  CHECK(std::get<ClipAttrs>(only(g, "cl").attrs).min == -1.5);
  CHECK(std::get<ClipAttrs>(only(g, "cl").attrs).max == 2.5);
  const auto& s = std::get<SliceAttrs>(only(g, "sl").attrs);
  CHECK((s.axis == 1 && s.start == 2 && s.end == 6));
  CHECK(std::get<ScaleAttrs>(only(g, "sc").attrs).factor == 0.25);
  CHECK(std::get<TransposeAttrs>(only(g, "tr").attrs).perm == std::vector<int64_t>{1, 0});
  const auto& r = std::get<ReduceAttrs>(only(g, "rd").attrs);
  CHECK((r.axis == 0 && r.mean));
  CHECK(std::get<AxisAttrs>(only(g, "cat").attrs).axis == 0);
  const auto& c = std::get<ConvAttrs>(only(g, "conv").attrs);
  CHECK((c.out_channels == 6 && !c.bias && c.groups == 1));
  CHECK((c.window.kh == 3 && c.window.sh == 2 && c.window.ph == 1 && c.window.ho == 5));
  const auto& m = std::get<PoolAttrs>(only(g, "mp").attrs);
  CHECK((m.window.sh == 2 && m.window.sw == 2 && m.window.ho == 2));  // stride defaults to kernel
  CHECK_FALSE(std::get<PoolAttrs>(only(g, "ap").attrs).count_include_pad);
  const auto& e = std::get<EmbeddingAttrs>(only(g, "bag").attrs);
  CHECK((e.num_embeddings == 10 && e.embedding_dim == 3 && !e.mean && !e.has_padding));
  // Ops without attributes carry none.
  CHECK(std::holds_alternative<NoAttrs>(only(g, "x").attrs));
  CHECK(std::holds_alternative<NoAttrs>(only(g, "l0").attrs));
}

TEST_CASE("binary broadcasts per-sample shapes as NumPy, aligned on the trailing axes") {
  GraphBuilder b("m", "");
  auto both = b.binary("both", b.input("a", {2, 1, 3}), b.input("b", {4, 1}), "add");
  auto lead = b.binary("lead", b.input("c", {3}), b.input("d", {2, 3}), "mul");
  b.add_loss(b.mse_loss("l0", both, b.input("t0", {2, 4, 3})));
  b.add_loss(b.mse_loss("l1", lead, b.input("t1", {2, 3})));
  Graph g = build_ok(b.finish());
  CHECK(shape_of(only(g, "both")) == std::vector<int64_t>{2, 4, 3});
  const Broadcast& bc = std::get<BinaryAttrs>(only(g, "both").attrs).broadcast;
  CHECK(bc.dims == std::vector<int64_t>{2, 4, 3});
  // a [2, 1, 3] moves along axes 0 and 2 only; b [4, 1] (aligned as [1, 4, 1]) along axis 1.
  CHECK(bc.strides == std::vector<std::vector<int64_t>>{{3, 0, 1}, {0, 1, 0}});
  CHECK(bc.operand_elements == std::vector<int64_t>{6, 4});
  CHECK(shape_of(only(g, "lead")) == std::vector<int64_t>{2, 3});
  CHECK(std::get<BinaryAttrs>(only(g, "lead").attrs).fn == BinaryFn::kMul);
}

TEST_CASE("binary refuses shapes that do not broadcast, naming inputs[1] and both shapes") {
  const std::string message = build_error([](GraphBuilder& b) {
    b.binary("op", b.input("a", {2, 3}), b.input("b", {4, 3}), "add");
  });
  CHECK_THAT(message, Catch::Contains("'op' (binary): inputs[1]: shape [4, 3] float32") &&
                          Catch::Contains("[2, 3] float32"));
}

TEST_CASE("reduce over a set of axes keeps them with size 1 or drops them (keepdims)") {
  GraphBuilder b("m", "");
  auto x = b.input("x", {2, 3, 4});
  auto kept = b.reduce_axes("kept", x, {2, 0}, "max");
  auto dropped = b.reduce_axes("dropped", x, {-1, -2}, "mean", false);
  auto all = b.reduce_axes("all", x, {0, 1, 2}, "l2", false);
  b.add_loss(b.mse_loss("l0", kept, b.input("t0", {1, 3, 1})));
  b.add_loss(b.mse_loss("l1", dropped, b.input("t1", {2})));
  b.add_loss(b.mse_loss("l2", all, b.input("t2", {1})));
  Graph g = build_ok(b.finish());
  CHECK(shape_of(only(g, "kept")) == std::vector<int64_t>{1, 3, 1});
  const auto& r = std::get<ReduceAttrs>(only(g, "kept").attrs);
  CHECK(r.axes == std::vector<int>{0, 2});  // normalised and sorted
  CHECK(r.mode == ReduceMode::kMax);
  CHECK(r.keepdims);
  CHECK(shape_of(only(g, "dropped")) == std::vector<int64_t>{2});
  CHECK(std::get<ReduceAttrs>(only(g, "dropped").attrs).axes == std::vector<int>{1, 2});
  CHECK_FALSE(std::get<ReduceAttrs>(only(g, "dropped").attrs).keepdims);
  CHECK(shape_of(only(g, "all")) == std::vector<int64_t>{1});  // a per-sample scalar
}

TEST_CASE("reduce refuses an axis out of range, a repeated axis, and both axis and axes") {
  using B = GraphBuilder&;
  const std::vector<ErrorCase> cases = {
      {[](B b) {
         b.reduce_axes("op", b.input("x", {2, 3}), {0, 2});
       },
       "(reduce): attrs.axes = [0, 2]: axis 2 is out of range for 2 per-sample dimension(s)"},
      {[](B b) {
         b.reduce_axes("op", b.input("x", {2, 3}), {1, -1});
       },
       "(reduce): attrs.axes = [1, -1]: an axis appears twice"},
      {[](B b) {
         b.reduce_axes("op", b.input("x", {2, 3}), {1});
         set_attr(op_of(b), "axis", int64_t{1});
       },
       "(reduce): attrs.axis and attrs.axes: give one of them"},
      {[](B b) {
         b.reduce_axes("op", b.input("x", {2, 3}), {1}, "min");
       },
       "(reduce): attrs.mode = 'min', expected sum, mean, max or l2"},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    DYNAMIC_SECTION("case " << i << ": " << cases[i].expected) {
      CHECK_THAT(build_error(cases[i].build), Catch::Contains("'op' " + cases[i].expected));
    }
  }
}

TEST_CASE("gather replaces its axis with the indices and lists the reads of each index") {
  GraphBuilder b("m", "");
  auto y = b.gather("g", b.input("x", {2, 5, 3}), -2, {4, 0, 4, 2});
  b.add_loss(b.mse_loss("l", y, b.input("t", {2, 4, 3})));
  Graph g = build_ok(b.finish());
  const OpNode& op = only(g, "g");
  CHECK(shape_of(op) == std::vector<int64_t>{2, 4, 3});
  const auto& a = std::get<GatherAttrs>(op.attrs);
  CHECK(a.axis == 1);
  CHECK(a.indices == std::vector<int64_t>{4, 0, 4, 2});
  // Input index i is read by outputs inverse[inverse_offsets[i] .. inverse_offsets[i + 1]).
  CHECK(a.inverse_offsets == std::vector<int64_t>{0, 1, 1, 2, 2, 4});
  CHECK(a.inverse == std::vector<int64_t>{1, 3, 0, 2});
  CHECK(op.cost.forward_bytes == Approx(2 * 24 * 4));
  CHECK(op.cost.backward_bytes == Approx(24 * 4 + 2 * 30 * 4));
  CHECK(op.cost.param_count == 0);
}

TEST_CASE("gather refuses an index out of range, no indices, and an axis out of range") {
  using B = GraphBuilder&;
  const std::vector<ErrorCase> cases = {
      {[](B b) {
         b.gather("op", b.input("x", {2, 3}), 1, {0, 3});
       },
       "(gather): attrs.indices: index 3 is out of range [0, 3) of axis 1 of [2, 3] float32"},
      {[](B b) {
         b.gather("op", b.input("x", {2, 3}), 0, {-1});
       },
       "(gather): attrs.indices: index -1 is out of range [0, 2) of axis 0"},
      {[](B b) {
         b.gather("op", b.input("x", {2, 3}), 0, {});
       },
       "(gather): attrs.indices = []: name at least one index"},
      {[](B b) {
         b.gather("op", b.input("x", {2, 3}), 2, {0});
       },
       "(gather): attrs.axis = 2 is out of range for 2 per-sample dimension(s)"},
      {[](B b) {
         b.add_op("op", "gather", {b.input("x", {2, 3})});
       },
       "(gather): attrs.indices: required attribute is missing"},
      {[](B b) {
         b.gather("op", b.input("x", {2, 3}, kInt64), 0, {0});
       },
       "(gather): inputs[0]: expected a floating-point tensor, got [2, 3] int64"},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    DYNAMIC_SECTION("case " << i << ": " << cases[i].expected) {
      CHECK_THAT(build_error(cases[i].build), Catch::Contains("'op' " + cases[i].expected));
    }
  }
}

TEST_CASE("cumsum keeps the shape, normalises its axis and costs one add per element each way") {
  GraphBuilder b("m", "");
  auto y = b.cumsum("c", b.input("x", {2, 5, 3}), -2, true, true);
  b.add_loss(b.mse_loss("l", y, b.input("t", {2, 5, 3})));
  Graph g = build_ok(b.finish());
  const OpNode& op = only(g, "c");
  CHECK(shape_of(op) == std::vector<int64_t>{2, 5, 3});
  const auto& a = std::get<CumSumAttrs>(op.attrs);
  CHECK(a.axis == 1);
  CHECK(a.exclusive);
  CHECK(a.reverse);
  CHECK(op.cost.forward_flops == Approx(30));
  CHECK(op.cost.backward_flops == Approx(30));
  CHECK(op.cost.forward_bytes == Approx(2 * 30 * 4));
}

TEST_CASE("cast turns float32 numbers into int64 ids and integers into float32, nothing else") {
  GraphBuilder gb("m", "");
  auto ids = gb.cast("ids", gb.input("x", {3}), "int64");
  auto y = gb.embedding("emb", ids, 5, 2);
  gb.add_loss(gb.mse_loss("l", y, gb.input("t", {3, 2})));
  Graph g = build_ok(gb.finish());
  CHECK(only(g, "ids").proto->outputs(0).dtype() == graphpipe::v1::DATA_TYPE_INT64);
  CHECK(std::get<CastAttrs>(only(g, "ids").attrs).to_int64);

  using B = GraphBuilder&;
  const std::vector<ErrorCase> cases = {
      {[](B b) {
         b.cast("op", b.input("x", {2}), "int64");
         b.cast("op2", b.input("i", {2}, kInt64), "int64");
       },
       "'op2' (cast): inputs[0]: expected a float32 tensor for dtype int64, got [2] int64"},
      {[](B b) { b.cast("op", b.input("x", {2})); },
       "'op' (cast): inputs[0]: expected an integer tensor (int64 or int32), got [2] float32"},
      {[](B b) { b.cast("op", b.input("x", {2}), "int8"); },
       "'op' (cast): attrs.dtype = 'int8': expected float32 or int64"},
      {[](B b) {
         b.cumsum("op", b.input("x", {2, 3}), 2);
       },
       "'op' (cumsum): attrs.axis = 2 is out of range for 2 per-sample dimension(s)"},
      {[](B b) { b.cumsum("op", b.input("i", {2}, kInt64), 0); },
       "'op' (cumsum): inputs[0]: expected a floating-point tensor, got [2] int64"},
      {[](B b) {
         b.cumsum("op", b.input("x", {2}), 0);
         set_attr(op_of(b), "exclusive", int64_t{2});
       },
       "'op' (cumsum): attrs.exclusive"},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    DYNAMIC_SECTION("case " << i << ": " << cases[i].expected) {
      CHECK_THAT(build_error(cases[i].build), Catch::Contains(cases[i].expected));
    }
  }
}

TEST_CASE("unary refuses a missing or unknown fn, naming attrs.fn") {
  const std::string missing =
      build_error([](GraphBuilder& b) { b.add_op("op", "unary", {b.input("x", {3})}); });
  CHECK_THAT(missing, Catch::Contains("'op' (unary): attrs.fn: required attribute is missing") &&
                          Catch::Contains("softplus"));
  const std::string unknown =
      build_error([](GraphBuilder& b) { b.unary("op", b.input("x", {3}), "tanhh"); });
  CHECK_THAT(unknown, Catch::Contains("'op' (unary): attrs.fn = 'tanhh', expected neg|exp|"));
}

TEST_CASE("constant outputs its per-sample shape as float32 or int64, from values of that size") {
  GraphBuilder b("m", "");
  auto batch = b.input("batch", {1});
  auto ids = b.constant("ids", batch, {2, 2}, {0, 1, 2, 3}, /*integer=*/true);
  auto mask = b.constant("mask", batch, {3}, {0, 1, 1});
  b.add_loss(b.mse_loss("l0", b.embedding_bag("bag", ids, 4, 3), b.input("t0", {2, 3})));
  b.add_loss(b.mse_loss("l1", mask, b.input("t1", {3})));
  Graph g = build_ok(b.finish());
  const OpNode& i = only(g, "ids");
  CHECK(i.proto->outputs(0).dtype() == kInt64);
  CHECK(shape_of(i) == std::vector<int64_t>{2, 2});
  CHECK(std::get<ConstantAttrs>(i.attrs).integer);
  CHECK(i.cost.param_count == 0);  // never trained
  CHECK(only(g, "mask").proto->outputs(0).dtype() == graphpipe::v1::DATA_TYPE_FLOAT32);
  CHECK_FALSE(std::get<ConstantAttrs>(only(g, "mask").attrs).integer);

  // Three values for a [2, 2] constant: Graph::build names the buffer and both sizes.
  GraphBuilder bad("m", "");
  auto c = bad.constant("op", bad.input("batch", {1}), {2, 2}, {0, 1, 2});
  bad.add_loss(bad.mse_loss("loss", c, bad.input("t", {2, 2})));
  auto failed = Graph::build(bad.finish());
  REQUIRE_FALSE(failed.ok());
  CHECK_THAT(failed.status().message(), Catch::Contains("'op'") &&
                                            Catch::Contains("param_values['value']: 12 bytes") &&
                                            Catch::Contains("16"));
}
