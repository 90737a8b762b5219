// What torch's ONNX optimiser does to parameters, undone from the nodes' fx_node metadata: a
// linear's all-zero bias that it dropped from the Gemm trains from zero, with a warning that the
// ONNX file cannot carry it back. Numerics against torch: the e2e test's torch2 zero_biases.
#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "../support/onnx_builder.h"
#include "gp/model/onnx_import.h"

namespace gp::model {
namespace {

using Onnx = testing::OnnxBuilder;

// Gemm(x, fc.weight) traced from a torch call whose arguments are `args`.
Onnx gemm_traced(const std::string& args) {
  Onnx b;
  b.input("x", {3});
  b.weight("fc.weight", {2, 3});
  auto* gemm = b.node("Gemm", {"x", "fc.weight"}, {"y"}, "fc");
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
  CHECK_THAT(warnings[0], Catch::Contains("'fc' (Gemm): the ONNX model has no bias for it") &&
                              Catch::Contains("optimize=False"));
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

}  // namespace
}  // namespace gp::model
