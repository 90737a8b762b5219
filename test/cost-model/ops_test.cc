// Hand-computed FLOP, parameter and activation counts for the catalogue's operators.
#include <catch2/catch.hpp>

#include "gp/graph/builder.h"
#include "gp/graph/graph.h"

using namespace gp::graph;

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
  CHECK(fc.cost.activation_bytes == Approx(3 * 5 * 4));  // the fp32 input, for dW
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
  CHECK(fc.cost.activation_bytes == Approx(10 * 4 + 4 * 4));
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
  // x, Q, K, V, context (5 s h) and the probabilities (heads s^2), fp32.
  CHECK(attn.cost.activation_bytes == Approx((5 * S * H + heads * S * S) * 4));
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
  CHECK(emb.cost.activation_bytes == Approx(100 * 8));  // the int64 ids
  CHECK(emb.proto->outputs(0).shape_size() == 1);
  CHECK(emb.proto->outputs(0).shape(0) == 64);
}

TEST_CASE("layout ops infer shapes: concat sums the axis, slice takes [start, end)") {
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
  }
  CHECK(find_op_type("conv2d") == nullptr);
}
