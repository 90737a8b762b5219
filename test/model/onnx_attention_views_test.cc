// torch 2.x's nn.MultiheadAttention (test/data/onnx/torch2/mha_*): the importer follows its
// views symbolically, so an export imports as one multi_head_attention whatever views the
// exporter chose, and a graph whose views, scale or wiring compute anything else is refused.
// (That the imported op computes torch's numbers is checked in test/e2e/onnx_torch_test.cc.)
#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "../support/onnx_edit.h"
#include "gp/model/graph.h"
#include "gp/model/onnx_file.h"
#include "gp/model/onnx_import.h"
#include "onnx/onnx_pb.h"

namespace gp::model {
namespace {

namespace fs = std::filesystem;

const std::string kDir = std::string(GP_TEST_DATA_DIR) + "/onnx/torch2/";

onnx::NodeProto* node_making(onnx::ModelProto* m, const std::string& output) {
  for (auto& n : *m->mutable_graph()->mutable_node()) {
    if (n.output_size() > 0 && n.output(0) == output) return &n;
  }
  FAIL("no node makes " << output);
  return nullptr;
}

void set_ints(onnx::ModelProto* m, const std::string& name, const std::vector<int64_t>& v) {
  for (auto& t : *m->mutable_graph()->mutable_initializer()) {
    if (t.name() != name) continue;
    t.clear_raw_data();
    t.clear_int64_data();
    for (int64_t x : v) t.add_int64_data(x);
    return;
  }
  FAIL("no initializer " << name);
}

void set_float(onnx::ModelProto* m, const std::string& name, float v) {
  for (auto& t : *m->mutable_graph()->mutable_initializer()) {
    if (t.name() != name) continue;
    t.clear_raw_data();
    t.clear_float_data();
    t.add_float_data(v);
    return;
  }
  FAIL("no initializer " << name);
}

// mha_dynamo.onnx (dynamo, optimised, dynamic batch: x [batch, 5, 8], 2 heads) changed by
// `edit`, and imported.
Result<graphpipe::v1::ModelGraph> import_edited(
    const std::function<void(onnx::ModelProto*)>& edit) {
  return testing::import_edited_onnx(kDir + "mha_dynamo.onnx", edit, "attention");
}

TEST_CASE("every torch 2.x export of nn.MultiheadAttention imports as one attention op") {
  for (const std::string variant :
       {"dynamo", "dynamo_static", "dynamo_train", "dynamo_train_noopt", "legacy"}) {
    INFO(variant);
    std::vector<std::string> warnings;
    OnnxImportOptions options;
    options.warnings = &warnings;
    auto m = import_onnx(kDir + "mha_" + variant + ".onnx", options);
    INFO(m.status().to_string());
    REQUIRE(m.ok());
    int attention = 0;
    for (const auto& op : m->ops()) {
      if (op.type() != "multi_head_attention") continue;
      ++attention;
      CHECK(op.id() == "attn");
      REQUIRE(op.attrs().count("num_heads"));
      CHECK(op.attrs().at("num_heads").i() == 2);
    }
    CHECK(attention == 1);
    CHECK(m->ops_size() == 4);  // input, attention, target, loss: every view went into the op
    // onnxscript's optimiser drops the all-zero output-projection bias; the import says so.
    const bool optimised = variant.starts_with("dynamo") && variant != "dynamo_train_noopt";
    bool warned = false;
    for (const auto& w : warnings) warned = warned || w.find("output projection") != w.npos;
    CHECK(warned == optimised);
  }
}

TEST_CASE("an unedited round trip of the test file still imports (the edits below are the cause)") {
  auto m = import_edited([](onnx::ModelProto*) {});
  INFO(m.status().to_string());
  CHECK(m.ok());
}

// mha_dynamo.onnx without the input projection's bias Add: nn.MultiheadAttention(bias=False).
void drop_input_bias(onnx::ModelProto* m) {
  auto* g = m->mutable_graph();
  for (int k = 0; k < g->node_size(); ++k) {
    if (g->node(k).op_type() != "Add" || g->node(k).output(0) != "linear") continue;
    const std::string product = g->node(k).input(0);  // the MatMul's output
    g->mutable_node()->DeleteSubrange(k, 1);
    for (auto& n : *g->mutable_node()) {
      for (auto& in : *n.mutable_input()) in = in == "linear" ? product : in;
    }
    return;
  }
  FAIL("no input-projection Add");
}

TEST_CASE("attention without biases imports with bias = 0, and an output bias alone is refused") {
  auto m = import_edited(drop_input_bias);
  INFO(m.status().to_string());
  REQUIRE(m.ok());
  int64_t params = -1;
  for (const auto& op : m->ops()) {
    if (op.type() != "multi_head_attention") continue;
    REQUIRE(op.attrs().count("bias"));
    CHECK(op.attrs().at("bias").i() == 0);
    auto g = Graph::build(*m);
    REQUIRE(g.ok());
    params = g->op(g->index_of(op.id())).cost.param_count;
  }
  CHECK(params == 4 * 8 * 8);  // q, k, v and out weights, no biases
  // No module has an output bias without input biases: not this pattern.
  auto odd = import_edited([](onnx::ModelProto* mp) {
    drop_input_bias(mp);
    auto* b = mp->mutable_graph()->add_initializer();
    b->set_name("out_bias_only");
    b->set_data_type(onnx::TensorProto::FLOAT);
    b->add_dims(8);
    for (int k = 0; k < 8; ++k) b->add_float_data(0.5f);
    node_making(mp, "linear_1")->add_input("out_bias_only");
  });
  // (The graph converts op by op instead: the heads folded into the batch, then unfolded.)
  INFO(odd.status().to_string());
  REQUIRE(odd.ok());
  bool fused = false, out_bias = false;
  for (const auto& op : odd->ops()) {
    fused = fused || op.type() == "multi_head_attention";
    out_bias = out_bias || (op.type() == "linear" && op.param_values().count("bias"));
  }
  CHECK_FALSE(fused);
  CHECK(out_bias);
}

TEST_CASE("attention views that compute something else are not fused: they convert op by op") {
  struct Edit {
    const char* what;
    std::function<void(onnx::ModelProto*)> edit;
    const char* refusal = "";  // where the edit leaves a graph no batch size fits
  };
  const std::vector<Edit> edits = {
      {"q and k swapped (the scores transposed)",
       [](onnx::ModelProto* m) {
         auto* q = node_making(m, "select");
         auto* k = node_making(m, "select_1");
         const std::string qi = q->input(1);
         q->set_input(1, k->input(1));
         k->set_input(1, qi);
       }},
      {"q, k, v interleaved in the packed projection ([S, B, E, 3] instead of [S, B, 3, E])",
       [](onnx::ModelProto* m) {
         set_ints(m, "val_86", {5, -1, 8, 3});
       },
       // q is [S, B, 3] then, which the heads' view cannot take.
       "'node_Reshape_95' (Reshape): target [5, 1, 4] (with -1 at 1) does not fit the input"},
      {"a scale other than 1/sqrt(head dim)",
       [](onnx::ModelProto* m) { set_float(m, "val_69", 0.5f); }},
      {"heads merged back in the wrong order",
       [](onnx::ModelProto* m) {
         auto* t = node_making(m, "permute");
         t->mutable_attribute(0)->clear_ints();
         for (int64_t p : {2, 0, 3, 1}) t->mutable_attribute(0)->add_ints(p);
       }},
      {"softmax over the query axis",
       [](onnx::ModelProto* m) {
         auto* s = node_making(m, "val_75");
         s->mutable_attribute(0)->set_i(2);
       }},
      {"the output returned as [S, B, E]",
       [](onnx::ModelProto* m) {
         auto* t = node_making(m, "y");
         t->set_op_type("Identity");
         t->clear_attribute();
       }},
  };
  for (const auto& e : edits) {
    INFO(e.what);
    auto m = import_edited(e.edit);
    if (*e.refusal != 0) {
      REQUIRE_FALSE(m.ok());
      CHECK_THAT(m.status().message(), Catch::Contains(e.refusal));
      continue;
    }
    INFO(m.status().to_string());
    REQUIRE(m.ok());
    // Each view follows the batch where it goes (batch_layout.cc); no op stands for the whole.
    int fused = 0, matmuls = 0;
    for (const auto& op : m->ops()) {
      fused += op.type() == "multi_head_attention" ? 1 : 0;
      matmuls += op.type() == "matmul" ? 1 : 0;
    }
    CHECK(fused == 0);
    CHECK(matmuls == 2);  // the scores and the context
  }
}

}  // namespace
}  // namespace gp::model
