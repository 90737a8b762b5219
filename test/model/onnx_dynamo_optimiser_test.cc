// What torch's ONNX optimiser does to parameters, undone from the nodes' fx_node metadata: a
// linear's all-zero bias that it dropped from the Gemm trains from zero, with a warning that the
// ONNX file cannot carry it back; what it folds from parameters and buffers into initializers
// trains as torch trains them, or is refused. Numerics against torch: the e2e test's torch2
// zero_biases, optimiser_folds and relative_bias.
#include <array>
#include <catch2/catch.hpp>
#include <random>
#include <string>
#include <vector>

#include "../support/onnx_builder.h"
#include "gp/model/onnx_import.h"

namespace gp::model {
namespace {

using Onnx = testing::OnnxBuilder;

// Gemm(x, weight) traced from a torch call whose arguments are `args`.
Onnx gemm_traced(const std::string& args, const std::string& weight = "fc.weight") {
  Onnx b;
  b.input("x", {3});
  b.weight(weight, {2, 3});
  auto* gemm = b.node("Gemm", {"x", weight}, {"y"}, "fc");
  Onnx::attr(gemm, "transB", int64_t{1});
  Onnx::metadata(gemm, "pkg.torch.onnx.fx_node",
                 "%linear : [num_users=1] = call_function[target=torch.ops.aten.linear.default]"
                 "(args = (" +
                     args + "), kwargs = {})");
  b.output("y", {2});
  return b;
}

TEST_CASE("a linear's zero bias that torch's optimiser dropped trains from zero, with a warning") {
  std::vector<std::string> warnings;
  OnnxImportOptions options;
  options.warnings = &warnings;
  const auto m = gemm_traced("%x, %p_fc_weight, %p_fc_bias").import(options);
  INFO(m.status().to_string());
  REQUIRE(m.ok());
  const auto& fc = testing::model_op(*m, "fc");
  CHECK(fc.type() == "linear");
  REQUIRE(fc.param_values().count("bias"));
  CHECK(testing::param_floats(fc, "bias") == std::vector<float>{0, 0});
  REQUIRE(warnings.size() == 1);
  CHECK_THAT(warnings[0], Catch::StartsWith("1 linear/convolution bias(es) have no tensor") &&
                              Catch::Contains("'fc' (Gemm)") && Catch::Contains("optimize=False"));
}

TEST_CASE("many dropped biases make one warning that names the first three and counts the rest") {
  Onnx b;
  b.input("x", {3});
  std::string in = "x";
  for (int k = 0; k < 5; ++k) {
    const std::string fc = "fc" + std::to_string(k), out = "y" + std::to_string(k);
    b.weight(fc + ".weight", {3, 3});
    auto* gemm = b.node("Gemm", {in, fc + ".weight"}, {out}, fc);
    Onnx::attr(gemm, "transB", int64_t{1});
    Onnx::metadata(gemm, "pkg.torch.onnx.fx_node",
                   "%linear : [num_users=1] = call_function[target=torch.ops.aten.linear.default]"
                   "(args = (%x, %p_" +
                       fc + "_weight, %p_" + fc + "_bias), kwargs = {})");
    in = out;
  }
  b.output(in, {3});
  std::vector<std::string> warnings;
  OnnxImportOptions options;
  options.warnings = &warnings;
  const auto m = b.import(options);
  INFO(m.status().to_string());
  REQUIRE(m.ok());
  for (int k = 0; k < 5; ++k) {
    CHECK(testing::param_floats(testing::model_op(*m, "fc" + std::to_string(k)), "bias") ==
          std::vector<float>{0, 0, 0});
  }
  REQUIRE(warnings.size() == 1);
  CHECK_THAT(warnings[0], Catch::StartsWith("5 linear/convolution bias(es)") &&
                              Catch::Contains("'fc0' (Gemm)") && Catch::Contains("'fc2' (Gemm)") &&
                              Catch::Contains("and 2 more") && !Catch::Contains("'fc3'"));
}

TEST_CASE("a Gemm without a bias whose torch call reads none adds none") {
  // (A missing parameter that is no bias is not taken for one.)
  for (const std::string args : {"%x, %p_fc_weight", "%x, %p_fc_weight, %p_fc_scale"}) {
    INFO(args);
    std::vector<std::string> warnings;
    OnnxImportOptions options;
    options.warnings = &warnings;
    const auto m = gemm_traced(args).import(options);
    REQUIRE(m.ok());
    CHECK(testing::model_op(*m, "fc").param_values().count("bias") == 0);
    CHECK(warnings.empty());
  }
}

TEST_CASE("a capitalised module's dropped bias is found by torch's lower-case placeholder name") {
  // Hugging Face's "LayerNorm", "Dense": torch.export lower-cases the placeholder.
  const Onnx b = gemm_traced("%x, %p_dense_weight, %p_dense_bias", "Dense.weight");
  const auto m = b.imported();
  CHECK(testing::param_floats(testing::model_op(m, "fc"), "bias") == std::vector<float>{0, 0});
}

// y = x * folded, where torch's optimiser folded `folded` ([2, 3], values `values`) from
// `sources`; the graph signature holds `placeholders`.
Onnx scaled_by_fold(const std::vector<double>& values, const std::vector<std::string>& sources,
                    const std::vector<std::array<std::string, 3>>& placeholders,
                    const std::string& folded = "view", std::vector<int64_t> dims = {2, 3}) {
  Onnx b;
  b.input("x", dims);
  b.init(folded, dims, values);
  auto* mul = b.node("Mul", {"x", folded}, {"y"}, "scale");
  Onnx::metadata(mul, "pkg.torch.onnx.fx_node",
                 "%mul : [num_users=1] = call_function[target=torch.ops.aten.mul.Tensor](args = "
                 "(%x, %" +
                     folded + "), kwargs = {})");
  b.output("y", dims);
  b.signature(placeholders);
  b.folded_from(folded, dims, sources);
  return b;
}

const std::vector<double> kDistinct = {0.1, 0.2, 0.3, 0.4, 0.5, 0.6};

TEST_CASE("what torch's optimiser folded from buffers only is a constant, never trained") {
  // Rotary tables: cos(arange(T) * inv_freq), inv_freq a buffer.
  const auto m = scaled_by_fold(kDistinct, {"arange", "cos", "inv_freq", "mul", "val_3"},
                                {{"b_inv_freq", "BUFFER", "inv_freq"}}, "cat")
                     .imported();
  CHECK(testing::type_counts(m)["broadcast_param"] == 0);
  CHECK(testing::type_counts(m)["constant"] == 1);
}

TEST_CASE("a view of one parameter that torch's optimiser folded trains as the parameter") {
  // ConvNeXt's gamma.view(1, -1, 1, 1); Hugging Face's position embedding read by arange ids.
  for (const auto& sources : std::vector<std::vector<std::string>>{
           {"blocks.0.gamma", "val_4", "val_5"},
           {"arange", "embedding", "pos.weight", "position_ids", "slice_1"}}) {
    INFO(sources[0]);
    const auto m = scaled_by_fold(kDistinct, sources,
                                  {{"p_blocks_0_gamma", "PARAMETER", "blocks.0.gamma"},
                                   {"p_pos_weight", "PARAMETER", "pos.weight"},
                                   {"b_position_ids", "BUFFER", "position_ids"}})
                       .imported();
    CHECK(testing::type_counts(m)["broadcast_param"] == 1);
  }
}

TEST_CASE("a fold of parameters that torch does not train as one tensor is refused, naming it") {
  const std::vector<std::array<std::string, 3>> params = {
      {"p_table", "PARAMETER", "table"},
      {"p_logit_scale", "PARAMETER", "logit_scale"},
      {"b_relative_index", "BUFFER", "relative_index"}};
  struct Case {
    std::vector<double> values;
    std::vector<std::string> sources;
    std::string folded, why;
  };
  for (const auto& c : std::vector<Case>{
           // exp(logit_scale): its gradient is not the parameter's.
           {kDistinct,
            {"logit_scale"},
            "exp",
            "'exp' is computed from parameter 'logit_scale' by 'exp'"},
           {kDistinct,
            {"logit_scale", "exp", "val_2"},
            "view",
            "'view' is computed from parameter 'logit_scale' by 'exp'"},
           {kDistinct, {"logit_scale", "table"}, "view", "is computed from 2 parameters"},
           // Swin's relative position bias: rows 0 and 2 are one entry of the table.
           {{0.1, 0.2, 0.1, 0.4, 0.5, 0.4},
            {"relative_index", "index", "table"},
            "unsqueeze",
            "'unsqueeze' holds elements of parameter 'table' more than once"}}) {
    INFO(c.why);
    const auto why = scaled_by_fold(c.values, c.sources, params, c.folded).refusal();
    CHECK_THAT(why, Catch::Contains(c.why) && Catch::Contains("optimize=False"));
  }
}

TEST_CASE("an initializer of no recorded origin trains as before, with a warning naming it") {
  // A rewrite rule's tensor: neither in the signature nor recorded as folded.
  Onnx b;
  b.input("x", {2, 3});
  b.init("fused_scale", {2, 3}, kDistinct);
  b.node("Mul", {"x", "fused_scale"}, {"y"}, "scale");
  b.output("y", {2, 3});
  b.signature({{"p_other", "PARAMETER", "other"}});
  std::vector<std::string> warnings;
  OnnxImportOptions options;
  options.warnings = &warnings;
  const auto m = b.import(options);
  REQUIRE(m.ok());
  CHECK(testing::type_counts(*m)["broadcast_param"] == 1);
  REQUIRE(warnings.size() == 1);
  CHECK_THAT(warnings[0], Catch::Contains("initializer 'fused_scale' is no parameter") &&
                              Catch::Contains("--freeze fused_scale"));
}

TEST_CASE("a fold through detach is a constant: torch's gradient never reaches the parameter") {
  const auto m = scaled_by_fold(kDistinct, {"blocks.0.gamma", "detach", "val_2"},
                                {{"p_blocks_0_gamma", "PARAMETER", "blocks.0.gamma"}})
                     .imported();
  CHECK(testing::type_counts(m)["broadcast_param"] == 0);
}

TEST_CASE("a single-head relative bias, a 1-D table read as a Toeplitz matrix, is refused") {
  // No two rows or columns are equal, but 4 of its 9 elements repeat others.
  const std::vector<double> toeplitz = {0.3, 0.2, 0.1, 0.4, 0.3, 0.2, 0.5, 0.4, 0.3};
  const std::vector<std::array<std::string, 3>> params = {
      {"p_table", "PARAMETER", "table"}, {"b_relative_index", "BUFFER", "relative_index"}};
  const auto why =
      scaled_by_fold(toeplitz, {"index", "relative_index", "table"}, params, "unsqueeze", {3, 3})
          .refusal();
  CHECK_THAT(why, Catch::Contains("'unsqueeze' holds elements of parameter 'table' more than "
                                  "once (read by 'index'"));
  // --freeze keeps it a constant, as for a table torch does not train.
  OnnxImportOptions frozen;
  frozen.freeze = {"unsqueeze"};
  CHECK(scaled_by_fold(toeplitz, {"index", "relative_index", "table"}, params, "unsqueeze", {3, 3})
            .import(frozen)
            .ok());
}

TEST_CASE("a parameter held both as itself and as a fold is refused: the two would train apart") {
  Onnx b = scaled_by_fold(kDistinct, {"gamma", "val_2"}, {{"p_gamma", "PARAMETER", "gamma"}});
  b.init("gamma", {2, 3}, {0.6, 0.5, 0.4, 0.3, 0.2, 0.1});
  b.model.mutable_graph()->mutable_output(0)->set_name("z");
  b.node("Add", {"y", "gamma"}, {"z"}, "shift");
  CHECK_THAT(b.refusal(), Catch::Contains("parameter 'gamma' is held as 2 tensors ('gamma', "
                                          "'view')"));
}

TEST_CASE("a legacy export's constant fold that repeats values along an axis is refused") {
  // The TorchScript exporter's folded relative position bias; --freeze keeps it a constant.
  Onnx b;
  b.model.set_producer_name("pytorch");
  b.input("x", {2, 3});
  b.init("onnx::Add_7", {2, 3}, {0.1, 0.2, 0.1, 0.4, 0.5, 0.4});
  b.node("Add", {"x", "onnx::Add_7"}, {"y"}, "bias");
  b.output("y", {2, 3});
  CHECK_THAT(b.refusal(), Catch::Contains("'onnx::Add_7' were made by torch's constant folding") &&
                              Catch::Contains("do_constant_folding=False"));
  OnnxImportOptions frozen;
  frozen.freeze = {"onnx::Add_7"};
  CHECK(b.import(frozen).ok());
  // A tensor of one value (zeros) repeats nothing that tells: any layout holds it.
  b.model.mutable_graph()->mutable_initializer(0)->clear_float_data();
  for (int k = 0; k < 6; ++k) b.model.mutable_graph()->mutable_initializer(0)->add_float_data(0);
  CHECK(b.import().ok());
}

TEST_CASE("a large legacy fold is refused for repeats only when most of its values repeat") {
  // torch's uniform init draws from some 2^24 levels: a big nn.Linear weight (GPT-2's LM head,
  // folded into its transpose) holds many equal values without any repeated row or column.
  constexpr int64_t kRows = 96, kCols = 1024;  // 98,304 elements, above 2^16
  std::mt19937 rng(3);
  std::uniform_int_distribution<int> level(0, 65535);
  auto linear = [&](int levels) {
    Onnx b;
    b.model.set_producer_name("pytorch");
    b.input("x", {kRows});
    std::vector<double> w;
    for (int64_t k = 0; k < kRows * kCols; ++k) w.push_back((level(rng) % levels) * 1e-4 - 0.2);
    b.init("onnx::MatMul_9", {kRows, kCols}, w);
    b.node("MatMul", {"x", "onnx::MatMul_9"}, {"y"}, "head");
    b.output("y", {kCols});
    return b;
  };
  // 65,536 levels: about half the values repeat an earlier one, as random weights do.
  const auto random_weight = linear(65536).import();
  INFO(random_weight.status().to_string());
  CHECK(random_weight.ok());
  // 2,048 levels for 98,304 values: 98% repeat, as a relative bias of large windows does.
  CHECK_THAT(linear(2048).refusal(), Catch::Contains("'onnx::MatMul_9' were made by torch's "
                                                     "constant folding"));
}

}  // namespace
}  // namespace gp::model
