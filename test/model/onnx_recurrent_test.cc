// ONNX LSTM and GRU (recurrent.cc): unrolled over the sequence into catalogue ops, each weight one
// parameter that every step reads, taken from the tensors torch wrote (its parameters behind the
// gate-reordering slices, or the ranges of the initializers dynamo's optimiser folded), and each
// refusal naming the attribute and value it cannot compute. (Numerics: test/e2e/onnx_torch_test.cc
// on the torch2 patterns lstm_stack and gru_layer, forward and SGD step against torch;
// onnx_numerics_test.cc on the forms torch does not write.)
#include <catch2/catch.hpp>
#include <functional>
#include <map>
#include <set>
#include <string>

#include "../support/onnx_builder.h"
#include "gp/model/graph.h"
#include "gp/model/onnx_import.h"

namespace gp::model {
namespace {

using Onnx = testing::OnnxBuilder;

const std::string kDir2 = std::string(GP_TEST_DATA_DIR) + "/onnx/torch2/";

std::vector<double> iota(int64_t n) {
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t k = 0; k < n; ++k) v[static_cast<size_t>(k)] = 0.01 * static_cast<double>(k % 17);
  return v;
}

// x [batch, 4, 5] -> Transpose -> LSTM or GRU (hidden 3, W, R and B initializers) -> Y ->
// Transpose -> Flatten -> y [batch, 12]; `edit` sets the recurrent node's attributes.
Onnx recurrent(const std::string& type, const std::function<void(onnx::NodeProto*)>& edit,
               std::vector<std::string> inputs = {"xt", "W", "R", "B"}) {
  const int64_t gates = type == "LSTM" ? 4 : 3;
  Onnx b;
  b.input("x", {4, 5});
  b.init("W", {1, gates * 3, 5}, iota(gates * 15));
  b.init("R", {1, gates * 3, 3}, iota(gates * 9));
  b.init("B", {1, gates * 6}, iota(gates * 6));
  b.init("lens", {1}, {4}, testing::kOnnxInt64);
  Onnx::attr(b.node("Transpose", {"x"}, {"xt"}, "to_seq"), "perm", std::vector<int64_t>{1, 0, 2});
  auto* n = b.node(type, inputs, {"Y"}, "rnn");
  Onnx::attr(n, "hidden_size", int64_t{3});
  edit(n);
  Onnx::attr(b.node("Transpose", {"Y"}, {"yb"}, "to_batch"), "perm",
             std::vector<int64_t>{2, 0, 1, 3});
  Onnx::attr(b.node("Flatten", {"yb"}, {"y"}, "flat"), "axis", int64_t{1});
  b.output("y", {12});
  return b;
}

std::map<std::string, int> op_types(const Graph& g) {
  std::map<std::string, int> count;
  for (int i = 0; i < g.num_ops(); ++i) ++count[g.op(i).proto->type()];
  return count;
}

}  // namespace

TEST_CASE("nn.LSTM's weights import once each under torch's names, read by every unrolled step") {
  OnnxImportOptions options;
  options.allow_opaque = true;  // the gate-reordering slices are claimed, never opaque
  auto m = import_onnx(kDir2 + "lstm_stack_dynamo_train_noopt.onnx", options);
  INFO(m.status().to_string());
  REQUIRE(m.ok());
  auto g = Graph::build(*m);
  REQUIRE(g.ok());
  const auto types = op_types(*g);
  CHECK(types.count("opaque") == 0);
  // Two layers of two directions: one input projection (linear) and one R and one Rb each.
  CHECK(types.at("linear") == 4);
  CHECK(types.at("broadcast_param") == 8);
  // 5 steps from a zero state: 4 matmuls by R each.
  CHECK(types.at("matmul") == 16);
  // Every parameter of the module once, as it is, under its own name.
  std::map<std::string, int> sources;
  for (const auto& s : m->param_sources()) {
    CHECK(s.layout() == graphpipe::v1::ParamSource::LAYOUT_COPY);
    ++sources[s.initializer()];
  }
  CHECK(sources.size() == 16);
  for (const char* p : {"rnn.weight_ih_l0", "rnn.weight_hh_l0_reverse", "rnn.bias_ih_l1",
                        "rnn.bias_hh_l1_reverse"}) {
    CHECK(sources[p] == 1);
  }
  CHECK(g->total_params() == 1728);
}

TEST_CASE("folded LSTM weights import as each direction's range of the folded initializers") {
  // dynamo's optimiser and the legacy exporter's constant folding (eval mode) write W, R and B in
  // ONNX's gate order as initializers of their own.
  for (const std::string stem : {"lstm_stack_dynamo", "lstm_stack_legacy"}) {
    INFO(stem);
    auto m = import_onnx(kDir2 + stem + ".onnx");
    INFO(m.status().to_string());
    REQUIRE(m.ok());
    std::map<std::string, std::set<int64_t>> offsets;
    for (const auto& s : m->param_sources()) {
      if (s.initializer().rfind("rnn.", 0) == 0) continue;
      CHECK(s.layout() == graphpipe::v1::ParamSource::LAYOUT_RANGE);
      offsets[s.initializer()].insert(s.offset());
    }
    REQUIRE(offsets.size() == 6);  // W, R and B of two layers
    std::set<std::set<int64_t>> seen;
    for (const auto& [name, at] : offsets) seen.insert(at);
    CHECK(seen.count({0, 192}));         // layer 0's W [2, 24, 8]: direction 1 from element 192
    CHECK(seen.count({0, 144}));         // R [2, 24, 6]
    CHECK(seen.count({0, 24, 48, 72}));  // B [2, 48]: Wb and Rb of each direction
    CHECK(seen.count({0, 288}));         // layer 1's W [2, 24, 12]
  }
}

TEST_CASE(
    "a hand-written LSTM and GRU import forward and reverse, R and Rb held once for all steps") {
  for (const std::string type : {"LSTM", "GRU"}) {
    for (const std::string direction : {"forward", "reverse"}) {
      INFO(type << " " << direction);
      auto m = recurrent(type, [&](onnx::NodeProto* n) {
                 Onnx::attr(n, "direction", direction);
               }).imported();
      auto g = Graph::build(m);
      REQUIRE(g.ok());
      CHECK(op_types(*g).at("broadcast_param") == 2);  // R and Rb, once for the 4 steps
      CHECK(m.param_sources_size() == 4);
    }
  }
}

TEST_CASE("recurrent attributes the unrolling does not compute are refused, naming them") {
  auto refusal = [](const std::string& type, const std::function<void(onnx::NodeProto*)>& edit,
                    std::vector<std::string> inputs = {"xt", "W", "R", "B"}) {
    return recurrent(type, edit, std::move(inputs)).refusal();
  };
  using Catch::Contains;
  CHECK_THAT(
      refusal("LSTM", [](auto* n) { Onnx::attr(n, "direction", std::string("sideways")); }),
      Contains("(LSTM): direction = 'sideways', expected forward, reverse or bidirectional"));
  CHECK_THAT(refusal("LSTM", [](auto* n) { Onnx::attr(n, "input_forget", int64_t{1}); }),
             Contains("(LSTM): input_forget = 1: only 0 (separate gates) maps"));
  CHECK_THAT(refusal("GRU", [](auto* n) { Onnx::attr(n, "linear_before_reset", int64_t{2}); }),
             Contains("(GRU): linear_before_reset = 2, expected 0 or 1"));
  CHECK_THAT(refusal("GRU", [](auto* n) { Onnx::attr(n, "layout", int64_t{2}); }),
             Contains("(GRU): layout = 2, expected 0 or 1"));
  CHECK_THAT(refusal("LSTM",
                     [](auto* n) {
                       auto* a = n->add_attribute();
                       a->set_name("clip");
                       a->set_type(onnx::AttributeProto::FLOAT);
                       a->set_f(2.5f);
                     }),
             Contains("(LSTM): clip = 2.5: only unclipped cells map"));
  CHECK_THAT(refusal("GRU",
                     [](auto* n) {
                       auto* a = n->add_attribute();
                       a->set_name("activations");
                       a->set_type(onnx::AttributeProto::STRINGS);
                       a->add_strings("Relu");
                       a->add_strings("Tanh");
                     }),
             Contains("(GRU): activations = [Relu, Tanh]: only the defaults (Sigmoid, Tanh per "
                      "direction) map"));
  CHECK_THAT(refusal("LSTM", [](auto*) {}, {"xt", "W", "R", "B", "lens"}),
             Contains("(LSTM): sequence_lens 'lens' is given: only full sequences map"));
  // layout 1 reads [batch, sequence, input]: the transposed input has its batch at axis 1.
  CHECK_THAT(refusal("LSTM", [](auto* n) { Onnx::attr(n, "layout", int64_t{1}); }),
             Contains("(LSTM): X 'xt' has the batch at axis 1, but layout = 1 reads [batch, "
                      "sequence, input]"));
  // W of the wrong size for the hidden size.
  CHECK_THAT(refusal("GRU", [](auto* n) { n->mutable_attribute(0)->set_i(4); }),
             Contains("(GRU): W 'W' has dims [1, 9, 5], expected [1, 12, 5]"));
}

}  // namespace gp::model
