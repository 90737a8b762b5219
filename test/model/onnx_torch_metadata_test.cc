// torch 2.x's export metadata (onnx/torch_metadata.h): the graph signature, what the optimiser
// folded an initializer from, placeholder names, and merged initializers split per parameter.
#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "../support/onnx_builder.h"
#include "gp/model/onnx_file.h"
#include "onnx/torch_metadata.h"

namespace gp::model {
namespace {

using Onnx = testing::OnnxBuilder;

TEST_CASE("placeholder names follow torch.export: lower case, other characters as underscores") {
  CHECK(fx_name("p_", "bert.embeddings.LayerNorm.weight") == "p_bert_embeddings_layernorm_weight");
  CHECK(fx_name("b_", "blocks.0.attn-mask") == "b_blocks_0_attn_mask");
}

TEST_CASE("the graph signature gives each placeholder its kind and target") {
  Onnx b;
  b.signature(
      {{"p_fc_weight", "PARAMETER", "fc.weight"}, {"b_inv_freq", "BUFFER", "rotary.inv_freq"}});
  const auto sig = torch_graph_signature(b.model.graph());
  REQUIRE(sig.size() == 2);
  CHECK(sig.at("p_fc_weight").kind == "PARAMETER");
  CHECK(sig.at("p_fc_weight").target == "fc.weight");
  CHECK(sig.at("b_inv_freq").kind == "BUFFER");
  CHECK(sig.at("b_inv_freq").target == "rotary.inv_freq");
  CHECK(torch_graph_signature(Onnx().model.graph()).empty());
}

TEST_CASE("folded_from lists what the optimiser folded a value from, nothing for others") {
  Onnx b;
  b.folded_from("view", {2}, {"stages.0.gamma", "val_6"});
  CHECK(torch_folded_from(b.model.graph(), "view") ==
        std::vector<std::string>{"stages.0.gamma", "val_6"});
  CHECK(torch_folded_from(b.model.graph(), "other").empty());
}

// A LayerNormalization reading `scale`, traced from a call that names parameter `param`.
void norm(Onnx& b, const std::string& in, const std::string& scale, const std::string& param,
          const std::string& out) {
  auto* n = b.node("LayerNormalization", {in, scale}, {out}, "node_" + out);
  Onnx::metadata(n, "pkg.torch.onnx.fx_node",
                 "%" + out + " : [num_users=1] = call_function[target=torch.ops.aten.layer_norm." +
                     "default](args = (%" + in + ", [4], %p_" + param + "), kwargs = {})");
}

TEST_CASE(
    "merged parameters split by the signature's names, and a layer applied twice shares one") {
  // ALBERT applies one layer twice; its LayerNorm starts equal to the embeddings' norm, so the
  // optimiser merged both into the tensor of the one it met first.
  Onnx b;
  b.init("ln.weight", {4}, {1, 1, 1, 1});
  norm(b, "x", "ln.weight", "ln_weight", "a");
  norm(b, "a", "ln.weight", "layer_layernorm_weight", "b");
  norm(b, "b", "ln.weight", "layer_layernorm_weight", "c");
  b.signature({{"p_ln_weight", "PARAMETER", "ln.weight"},
               {"p_layer_layernorm_weight", "PARAMETER", "layer.LayerNorm.weight"}});
  auto& g = *b.model.mutable_graph();
  CHECK(separate_merged_parameters(g) == 1);
  CHECK(g.node(0).input(1) == "ln.weight");
  CHECK(g.node(1).input(1) == "layer.LayerNorm.weight");
  CHECK(g.node(2).input(1) == "layer.LayerNorm.weight");
  REQUIRE(g.initializer_size() == 2);
  CHECK(g.initializer(1).name() == "layer.LayerNorm.weight");
  CHECK(torch_folded_from(g, "layer.LayerNorm.weight") == std::vector<std::string>{"ln.weight"});
}

// Two Muls read fold "view" of gamma, tracing it as %view and %view_1; the signature holds
// `params`.
Onnx merged_view(const std::vector<std::array<std::string, 3>>& params) {
  Onnx b;
  b.input("x", {4});
  b.init("view", {4}, {0.5, 0.5, 0.5, 0.5});
  b.folded_from("view", {4}, {"blocks.0.gamma", "val_3"});
  for (const std::string k : {"", "_1"}) {
    auto* n = b.node("Mul", {"x", "view"}, {"y" + k}, "node_mul" + k);
    Onnx::metadata(n, "pkg.torch.onnx.fx_node",
                   "%mul" + k + " : [num_users=1] = call_function[target=torch.ops.aten.mul." +
                       "Tensor](args = (%x, %view" + k + "), kwargs = {})");
  }
  b.signature(params);
  return b;
}

TEST_CASE("a merged fold splits by the traced value each reader names") {
  // ConvNeXt's blocks read gamma.view(...) as %view and %view_1; equal values made one "view",
  // and blocks.1.gamma is nowhere else.
  Onnx b = merged_view({{"p_blocks_0_gamma", "PARAMETER", "blocks.0.gamma"},
                        {"p_blocks_1_gamma", "PARAMETER", "blocks.1.gamma"}});
  auto& g = *b.model.mutable_graph();
  CHECK(separate_merged_parameters(g) == 1);
  CHECK(g.node(0).input(1) == "view");
  CHECK(g.node(1).input(1) == "view.node_mul_1");
  // The copy keeps the fold's record, so that the importer tells it apart as it does "view".
  CHECK(torch_folded_from(g, "view.node_mul_1") ==
        std::vector<std::string>{"blocks.0.gamma", "val_3"});
  CHECK(copied_from(g, "view.node_mul_1") == "view");
}

TEST_CASE("one module called twice keeps its merged fold: no parameter is missing") {
  // The same gamma viewed at two calls: %view and %view_1 are one parameter's.
  Onnx b = merged_view({{"p_blocks_0_gamma", "PARAMETER", "blocks.0.gamma"}});
  CHECK(separate_merged_parameters(*b.model.mutable_graph()) == 0);
}

TEST_CASE("readers of one traced value keep one fold: a rotary table read by every layer") {
  Onnx b;
  b.init("cat", {4}, {0.5, 0.5, 0.5, 0.5});
  for (const std::string k : {"", "_1"}) {
    auto* n = b.node("Mul", {"x" + k, "cat"}, {"y" + k}, "node_mul" + k);
    Onnx::metadata(n, "pkg.torch.onnx.fx_node",
                   "%mul" + k + " : [num_users=1] = call_function[target=torch.ops.aten.mul." +
                       "Tensor](args = (%x" + k + ", %cat), kwargs = {})");
  }
  b.input("x", {4});
  b.node("Relu", {"x"}, {"x_1"}, "relu");
  CHECK(separate_merged_parameters(*b.model.mutable_graph()) == 0);
}

TEST_CASE("one parameter's transpose folded once per call is one tensor, other values stay") {
  // ALBERT applies one layer twice: the optimiser folds ffn.weight^T at each call.
  for (const double second : {0.5, 0.25}) {
    INFO(second);
    Onnx b;
    b.input("x", {2});
    b.init("val_1", {2, 2}, {0.5, 0.1, 0.2, 0.3});
    b.init("val_2", {2, 2}, {second, 0.1, 0.2, 0.3});
    b.folded_from("val_1", {2, 2}, {"layer.ffn.weight"});
    b.folded_from("val_2", {2, 2}, {"layer.ffn.weight", "val_0"});
    b.node("MatMul", {"x", "val_1"}, {"h"}, "first");
    b.node("MatMul", {"h", "val_2"}, {"y"}, "second");
    b.signature({{"p_layer_ffn_weight", "PARAMETER", "layer.ffn.weight"}});
    auto& g = *b.model.mutable_graph();
    separate_merged_parameters(g);
    const bool equal = second == 0.5;
    CHECK(g.node(1).input(1) == (equal ? "val_1" : "val_2"));
    CHECK(g.initializer_size() == (equal ? 1 : 2));
  }
}

}  // namespace
}  // namespace gp::model
