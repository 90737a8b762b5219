// Slices of one packed trained weight (packed_params.cc): nn.MultiheadAttention's in_proj_weight,
// which torch's cross-attention slices into q and kv, imports as one parameter per slice, placed
// in the packed tensor for export; overlapping slices, and the tensor read whole beside a slice of
// it, are refused. (Numerics against torch: test/e2e/onnx_torch_test.cc on the torch2 pattern
// cross_attention, forward, loss, SGD step and the export round trip.)
#include <algorithm>
#include <catch2/catch.hpp>
#include <cstring>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "../support/onnx_builder.h"
#include "gp/model/graph.h"
#include "gp/model/onnx_import.h"

namespace gp::model {
namespace {

using Onnx = testing::OnnxBuilder;
using PS = graphpipe::v1::ParamSource;

// x [batch, 4] through two linears whose weights are row blocks of one W [6, 4] (and biases
// blocks of one b [6]): y = [x W[q]^T + b[q], x W[kv]^T + b[kv]], as torch's cross-attention
// projects its query and its memory. `kv_rows` [begin, end) of W for the second; `step` its step.
Onnx packed(int64_t q_end, int64_t kv_begin, int64_t kv_step = 1) {
  Onnx b;
  b.input("x", {4});
  std::vector<double> w(24), bias(6);
  for (size_t k = 0; k < w.size(); ++k) w[k] = 0.1 * static_cast<double>(k % 7) - 0.3;
  for (size_t k = 0; k < bias.size(); ++k) bias[k] = 0.05 * static_cast<double>(k);
  b.init("W", {6, 4}, w);
  b.init("b", {6}, bias);
  b.init("zero", {1}, {0}, testing::kOnnxInt64);
  b.init("q_end", {1}, {static_cast<double>(q_end)}, testing::kOnnxInt64);
  b.init("kv_begin", {1}, {static_cast<double>(kv_begin)}, testing::kOnnxInt64);
  b.init("six", {1}, {6}, testing::kOnnxInt64);
  b.init("step", {1}, {static_cast<double>(kv_step)}, testing::kOnnxInt64);
  b.node("Slice", {"W", "zero", "q_end", "zero"}, {"wq"}, "s_q");
  b.node("Slice", {"W", "kv_begin", "six", "zero", "step"}, {"wkv"}, "s_kv");
  b.node("Slice", {"b", "zero", "q_end", "zero"}, {"bq"}, "s_bq");
  b.node("Slice", {"b", "kv_begin", "six", "zero", "step"}, {"bkv"}, "s_bkv");
  b.node("Transpose", {"wq"}, {"wq_t"}, "t_q");
  b.node("Transpose", {"wkv"}, {"wkv_t"}, "t_kv");
  b.node("MatMul", {"x", "wq_t"}, {"q0"}, "mm_q");
  b.node("Add", {"bq", "q0"}, {"q"}, "add_q");
  b.node("MatMul", {"x", "wkv_t"}, {"kv0"}, "mm_kv");
  b.node("Add", {"bkv", "kv0"}, {"kv"}, "add_kv");
  Onnx::attr(b.node("Concat", {"q", "kv"}, {"y"}, "cat"), "axis", int64_t{1});
  b.output("y", {q_end + (6 - kv_begin) / kv_step});
  return b;
}

// The sources of the parameters taken from `tensor`: by (layout, offset), the op and param.
std::map<std::pair<int, int64_t>, std::string> sources_in(const ModelGraph& m,
                                                          const std::string& tensor) {
  std::map<std::pair<int, int64_t>, std::string> out;
  for (const auto& s : m.param_sources()) {
    if (s.initializer() == tensor) {
      out[{static_cast<int>(s.layout()), s.offset()}] = s.op() + "." + s.param();
    }
  }
  return out;
}

std::vector<float> values(const ModelGraph& m, const std::string& op, const std::string& param) {
  for (const auto& o : m.ops()) {
    if (o.id() != op) continue;
    const std::string& bytes = o.param_values().at(param);
    std::vector<float> v(bytes.size() / sizeof(float));
    std::memcpy(v.data(), bytes.data(), bytes.size());
    return v;
  }
  return {};
}

}  // namespace

TEST_CASE("disjoint slices of one packed weight are parameters of their own, placed in it") {
  const auto m = packed(2, 2).imported();
  auto g = Graph::build(m);
  REQUIRE(g.ok());
  // Two linears, 2 x 4 + 2 and 4 x 4 + 4 parameters: W and b once, nothing tied.
  CHECK(g->total_params() == 24 + 6);
  CHECK(m.param_ties_size() == 0);
  const auto w = sources_in(m, "W");
  REQUIRE(w.size() == 2);
  CHECK(w.at({PS::LAYOUT_RANGE, 0}) == "mm_q.weight");
  CHECK(w.at({PS::LAYOUT_RANGE, 8}) == "mm_kv.weight");
  const auto bias = sources_in(m, "b");
  REQUIRE(bias.size() == 2);
  CHECK(bias.at({PS::LAYOUT_RANGE, 0}) == "mm_q.bias");
  CHECK(bias.at({PS::LAYOUT_RANGE, 2}) == "mm_kv.bias");
  // The linear's weight [out, in] is the block of rows as it is.
  const auto kv = values(m, "mm_kv", "weight");
  REQUIRE(kv.size() == 16);
  for (size_t k = 0; k < kv.size(); ++k) {
    CHECK(kv[k] == Approx(0.1 * static_cast<double>((k + 8) % 7) - 0.3));
  }
}

TEST_CASE("a graph-only export's packed weight inputs read through slices are weights") {
  // export_params=False: W and b are graph inputs without values, read only through Slices.
  Onnx graph_only = packed(2, 2);
  auto* g = graph_only.model.mutable_graph();
  for (int k = g->initializer_size() - 1; k >= 0; --k) {
    if (g->initializer(k).name() == "W" || g->initializer(k).name() == "b") {
      g->mutable_initializer()->DeleteSubrange(k, 1);
    }
  }
  Onnx::value_with_batch(g->add_input(), "W", {6, 4}, testing::kOnnxFloat);
  Onnx::value_with_batch(g->add_input(), "b", {6}, testing::kOnnxFloat);
  const auto m = graph_only.imported();
  auto built = Graph::build(m);
  REQUIRE(built.ok());
  CHECK(built->total_params() == 24 + 6);  // as with the weights: no data input
  const auto w = sources_in(m, "W");
  REQUIRE(w.size() == 2);
  CHECK(w.at({PS::LAYOUT_RANGE, 0}) == "mm_q.weight");
  CHECK(w.at({PS::LAYOUT_RANGE, 8}) == "mm_kv.weight");
  const auto bias = sources_in(m, "b");
  REQUIRE(bias.size() == 2);
  CHECK(bias.at({PS::LAYOUT_RANGE, 2}) == "mm_kv.bias");
}

TEST_CASE("a Split of a packed weight gives each piece its own parameter, placed in it") {
  Onnx b;
  b.input("x", {4});
  std::vector<double> w(24, 0.25);
  b.init("W", {6, 4}, w);
  b.init("sizes", {2}, {2, 4}, testing::kOnnxInt64);
  Onnx::attr(b.node("Split", {"W", "sizes"}, {"wq", "wkv"}, "split"), "axis", int64_t{0});
  b.node("Transpose", {"wq"}, {"wq_t"}, "t_q");
  b.node("Transpose", {"wkv"}, {"wkv_t"}, "t_kv");
  b.node("MatMul", {"x", "wq_t"}, {"q"}, "mm_q");
  b.node("MatMul", {"x", "wkv_t"}, {"kv"}, "mm_kv");
  Onnx::attr(b.node("Concat", {"q", "kv"}, {"y"}, "cat"), "axis", int64_t{1});
  b.output("y", {6});
  const auto m = b.imported();
  const auto sources = sources_in(m, "W");
  REQUIRE(sources.size() == 2);
  CHECK(sources.at({PS::LAYOUT_RANGE, 0}) == "mm_q.weight");
  CHECK(sources.at({PS::LAYOUT_RANGE, 8}) == "mm_kv.weight");
}

TEST_CASE("pieces of a packed weight read from a SplitToSequence are parameters of their own") {
  // torch's dynamo exporter with optimize=False: w.split([E, 2E]) as a sequence.
  Onnx b;
  b.input("x", {4});
  std::vector<double> w(24);
  for (size_t k = 0; k < w.size(); ++k) w[k] = 0.01 * static_cast<double>(k);
  b.init("W", {6, 4}, w);
  b.init("sizes", {2}, {2, 4}, testing::kOnnxInt64);
  b.init("first", {}, {0}, testing::kOnnxInt64);
  b.init("second", {}, {1}, testing::kOnnxInt64);
  Onnx::attr(b.node("SplitToSequence", {"W", "sizes"}, {"seq"}, "split"), "axis", int64_t{0});
  b.node("SequenceAt", {"seq", "first"}, {"wq"}, "at_q");
  b.node("SequenceAt", {"seq", "second"}, {"wkv"}, "at_kv");
  b.node("Transpose", {"wq"}, {"wq_t"}, "t_q");
  b.node("Transpose", {"wkv"}, {"wkv_t"}, "t_kv");
  b.node("MatMul", {"x", "wq_t"}, {"q"}, "mm_q");
  b.node("MatMul", {"x", "wkv_t"}, {"kv"}, "mm_kv");
  Onnx::attr(b.node("Concat", {"q", "kv"}, {"y"}, "cat"), "axis", int64_t{1});
  b.output("y", {6});
  const auto m = b.imported();
  const auto sources = sources_in(m, "W");
  REQUIRE(sources.size() == 2);
  CHECK(sources.at({PS::LAYOUT_RANGE, 0}) == "mm_q.weight");
  CHECK(sources.at({PS::LAYOUT_RANGE, 8}) == "mm_kv.weight");
  const auto kv = values(m, "mm_kv", "weight");
  REQUIRE(kv.size() == 16);
  CHECK(kv.front() == Approx(0.08));
  CHECK(kv.back() == Approx(0.23));
}

TEST_CASE("one slice of a packed weight read by two operators is one tied parameter") {
  Onnx b;
  b.input("x", {4});
  b.init("W", {6, 4}, std::vector<double>(24, 0.5));
  b.init("zero", {1}, {0}, testing::kOnnxInt64);
  b.init("four", {1}, {4}, testing::kOnnxInt64);
  b.node("Slice", {"W", "zero", "four", "zero"}, {"wq"}, "s_q");
  b.node("Transpose", {"wq"}, {"wq_t"}, "t_q");
  b.node("MatMul", {"x", "wq_t"}, {"a"}, "mm_a");
  b.node("MatMul", {"a", "wq_t"}, {"y"}, "mm_b");
  b.output("y", {4});
  const auto m = b.imported();
  REQUIRE(m.param_ties_size() == 1);
  CHECK(m.param_ties(0).members_size() == 2);
  CHECK(sources_in(m, "W").size() == 1);  // both copies at [0, 16)
}

TEST_CASE("overlapping slices of a packed weight are refused, naming both slices") {
  const std::string why = packed(3, 2).refusal();
  CHECK_THAT(why, Catch::Contains("trained weight 'W' [6, 4]") &&
                      Catch::Contains("'s_q' (Slice) slices elements [0, 12)") &&
                      Catch::Contains("'s_kv' (Slice) slices elements [8, 24)") &&
                      Catch::Contains("overlap"));
}

TEST_CASE("a packed weight read whole beside a slice of it is refused, naming the reader") {
  Onnx b = packed(2, 2);
  // A third reader of all of W.
  b.node("Transpose", {"W"}, {"w_t"}, "t_all");
  b.node("MatMul", {"x", "w_t"}, {"all"}, "mm_all");
  auto* cat = b.node("Concat", {"y", "all"}, {"y2"}, "cat2");
  Onnx::attr(cat, "axis", int64_t{1});
  b.model.mutable_graph()->mutable_output(0)->set_name("y2");
  b.model.mutable_graph()
      ->mutable_output(0)
      ->mutable_type()
      ->mutable_tensor_type()
      ->mutable_shape()
      ->mutable_dim(1)
      ->set_dim_value(12);
  const std::string why = b.refusal();
  CHECK_THAT(why, Catch::Contains("trained weight 'W'") &&
                      Catch::Contains("'mm_all' (MatMul) reads elements [0, 24)") &&
                      Catch::Contains("overlap"));
}

TEST_CASE("a slice of a weight with a step is refused at the slice, saying why") {
  const std::string why = packed(2, 2, 2).refusal();
  CHECK_THAT(why, Catch::Contains("'s_kv' (Slice): slices trained weight 'W'") &&
                      Catch::Contains("a slice of a weight with a step"));
}

namespace {

// scores = x W [3, 3] plus an additive mask [3, 3], then a softmax over the last axis.
Onnx masked_scores(double masked) {
  Onnx b;
  b.input("x", {3, 4});
  b.init("W", {4, 3}, std::vector<double>(12, 0.1));
  // A causal mask as nn.Transformer.generate_square_subsequent_mask writes it (0 on and below
  // the diagonal), `masked` above it.
  b.init("mask", {3, 3}, {0, masked, masked, 0, 0, masked, 0, 0, 0});
  b.node("MatMul", {"x", "W"}, {"s"}, "mm");
  b.node("Add", {"s", "mask"}, {"masked"}, "add_mask");
  Onnx::attr(b.node("Softmax", {"masked"}, {"y"}, "softmax"), "axis", int64_t{-1});
  b.output("y", {3, 3});
  return b;
}

TEST_CASE("an additive -inf causal mask folded into an initializer stays a constant") {
  auto count = [](const ModelGraph& m, const std::string& type) {
    return std::count_if(m.ops().begin(), m.ops().end(),
                         [&](const auto& op) { return op.type() == type; });
  };
  auto params = [](const ModelGraph& m) {
    auto g = Graph::build(m);
    REQUIRE(g.ok());
    return g->total_params();
  };
  const auto frozen = masked_scores(-std::numeric_limits<double>::infinity()).imported();
  CHECK(count(frozen, "bias_add") == 0);
  CHECK(count(frozen, "constant") == 1);
  CHECK(params(frozen) == 12);  // W only: the mask is no parameter
  // A finite mask of the same form is, unmarked, a learned bias (the legacy exporter's buffers
  // need --freeze).
  const auto finite = masked_scores(-1e4).imported();
  CHECK(count(finite, "bias_add") == 1);
  CHECK(params(finite) == 12 + 9);
}

}  // namespace
}  // namespace gp::model
