// ONNX import: the test models in test/data/onnx (written by make_models.py in the patterns
// torch.onnx.export produces) import onto the catalogue, equal to the same models built by hand;
// what has no operator is refused, naming every node.
#include "gp/model/onnx_import.h"

#include <unistd.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>

#include "../support/models.h"
#include "gp/model/model_io.h"
#include "gp/model/onnx_file.h"
#include "onnx/onnx_pb.h"

namespace gp::model {
namespace {

std::string data(const std::string& name) {
  return std::string(GP_TEST_DATA_DIR) + "/onnx/" + name;
}

ModelGraph imported(const std::string& name, const OnnxImportOptions& o = {}) {
  auto m = import_onnx(data(name), o);
  INFO(m.status().to_string());
  REQUIRE(m.ok());
  return *m;
}

// The graph without its name, description, source and imported parameter values.
std::string structure_hash(ModelGraph m) {
  m.clear_name();
  m.clear_description();
  m.clear_source();
  for (auto& op : *m.mutable_ops()) op.clear_param_values();
  m.clear_param_sources();  // provenance, like the values
  return message_hash(m);
}

// The float32 values of an ONNX initializer.
std::vector<float> initializer(const std::string& file, const std::string& name) {
  onnx::ModelProto model;
  auto bytes = read_file(data(file));
  REQUIRE(bytes.ok());
  REQUIRE(model.ParseFromString(*bytes));
  for (const auto& t : model.graph().initializer()) {
    if (t.name() != name) continue;
    std::vector<float> v(t.raw_data().size() / 4);
    std::memcpy(v.data(), t.raw_data().data(), t.raw_data().size());
    for (float f : t.float_data()) v.push_back(f);
    return v;
  }
  FAIL("no initializer " << name);
  return {};
}

std::vector<float> imported_values(const ModelGraph& m, const std::string& op_id,
                                   const std::string& param) {
  for (const auto& op : m.ops()) {
    if (op.id() != op_id) continue;
    auto it = op.param_values().find(param);
    if (it == op.param_values().end()) return {};
    std::vector<float> v(it->second.size() / 4);
    std::memcpy(v.data(), it->second.data(), it->second.size());
    return v;
  }
  return {};
}

ModelGraph two_tower_by_hand() {
  GraphBuilder b("two_tower", "");
  TensorRef towers[2];
  int k = 0;
  for (auto [name, width] : {std::pair{"user", 16}, std::pair{"item", 24}}) {
    towers[k++] = b.input(name, {width});
  }
  k = 0;
  for (const char* name : {"user", "item"}) {
    const std::string p = name;
    auto h = b.linear(p + ".fc1", towers[k], 32);
    h = b.relu(p + ".relu", h);
    towers[k++] = b.linear(p + ".fc2", h, 8);
  }
  auto both = b.concat("concat", {towers[0], towers[1]}, 0);
  auto score = b.linear("head", both, 1);
  b.add_loss(b.mse_loss("score.loss", score, b.input("score.target", {1})));
  return b.finish();
}

TEST_CASE("an ONNX two-tower model imports as the same graph built by hand") {
  const auto by_hand = two_tower_by_hand();
  for (const char* file : {"two_tower.onnx", "two_tower_no_params.onnx"}) {
    INFO(file);
    const auto m = imported(file);
    CHECK(structure_hash(m) == structure_hash(by_hand));
    CHECK(m.source() == data(file));
    const auto g = testing::build_graph(m);
    CHECK(g.total_params() == 2 * 32 + 32 * 16 + 32 * 24 + 2 * (8 * 32 + 8) + 16 + 1);
    CHECK(g.max_parallel_branches() == 2);
  }
}

TEST_CASE("weights are imported in GraphPipe's [out, in] layout and weight inputs have none") {
  const auto m = imported("two_tower.onnx");
  // Gemm with transB=1: ONNX's [out, in] as is.
  CHECK(imported_values(m, "user.fc1", "weight") ==
        initializer("two_tower.onnx", "user.fc1.weight"));
  CHECK(imported_values(m, "head", "bias") == initializer("two_tower.onnx", "head.bias"));
  // MatMul: ONNX's [in, out] transposed.
  const auto mlp = imported("mlp_gelu_ln.onnx");
  const auto w = initializer("mlp_gelu_ln.onnx", "fc1.weight");  // [16, 32]
  const auto got = imported_values(mlp, "fc1", "weight");        // [32, 16]
  REQUIRE(got.size() == w.size());
  CHECK(got[3 * 16 + 5] == w[5 * 32 + 3]);
  CHECK(imported_values(mlp, "fc1", "bias") == initializer("mlp_gelu_ln.onnx", "fc1.bias"));
  CHECK(imported_values(mlp, "ln", "gamma") == initializer("mlp_gelu_ln.onnx", "ln.weight"));
  const auto dlrm = imported("dlrm_like.onnx");
  CHECK(imported_values(dlrm, "emb1", "weight") == initializer("dlrm_like.onnx", "emb1.weight"));
  const auto no_params = imported("two_tower_no_params.onnx");
  for (const auto& op : no_params.ops()) CHECK(op.param_values().empty());
}

TEST_CASE("parameter values of the wrong size or for no parameter are refused by name") {
  auto m = imported("two_tower.onnx");
  for (auto& op : *m.mutable_ops()) {
    if (op.id() == "head") (*op.mutable_param_values())["bias"] = std::string(8, '\0');
  }
  auto g = Graph::build(m);
  REQUIRE_FALSE(g.ok());
  CHECK_THAT(g.status().message(), Catch::Contains("'head'"));
  CHECK_THAT(g.status().message(),
             Catch::Contains("param_values['bias']: 8 bytes, the parameter needs 4"));
  for (auto& op : *m.mutable_ops()) {
    if (op.id() == "head") {
      op.mutable_param_values()->clear();
      (*op.mutable_param_values())["gamma"] = std::string(4, '\0');
    }
  }
  CHECK_THAT(Graph::build(m).status().message(), Catch::Contains("no such parameter"));
}

TEST_CASE("erf GELU, LayerNormalization, MatMul + Add and Softmax map onto the catalogue") {
  const auto g = testing::build_graph(imported("mlp_gelu_ln.onnx"));
  std::vector<std::string> types;
  for (int i : g.topo_order()) types.emplace_back(g.op(i).type());
  CHECK(types == std::vector<std::string>{"input", "linear", "gelu", "layer_norm", "linear",
                                          "softmax", "input", "mse_loss"});
  const auto& fc1 = g.op(g.index_of("fc1"));
  const auto& fc2 = g.op(g.index_of("fc2"));
  CHECK(fc1.proto->params_size() == 2);  // the Add became its bias
  CHECK(fc2.proto->params_size() == 1);  // no bias
  CHECK(g.index_of("act") >= 0);         // the five GELU nodes are one op named after the first
  CHECK(g.total_params() == 16 * 32 + 32 + 2 * 32 + 32 * 4);
}

TEST_CASE("embedding bags, an open-ended slice and a three-way concat import") {
  const auto g = testing::build_graph(imported("dlrm_like.onnx"));
  const auto& e0 = g.op(g.index_of("emb0"));
  const auto& e1 = g.op(g.index_of("emb1"));
  CHECK(e0.type() == "embedding_bag");
  CHECK(e1.type() == "embedding_bag");
  CHECK(e0.proto->attrs().count("mode") == 0);  // sum, the default
  CHECK(e1.proto->attrs().at("mode").s() == "mean");
  const auto& slice = *g.op(g.index_of("sparse_part")).proto;
  CHECK(slice.attrs().at("start").i() == 8);
  CHECK(slice.attrs().at("end").i() == 24);  // "to the end" of the 24 concatenated features
  CHECK(slice.attrs().at("axis").i() == 0);  // ONNX axis 1 is the first per-sample axis
  CHECK(g.max_parallel_branches() == 3);
  CHECK(g.op(g.index_of("ids0")).proto->outputs(0).dtype() == graphpipe::v1::DATA_TYPE_INT64);
}

// Operator types of a model, with their counts.
std::map<std::string, int> type_counts(const ModelGraph& m) {
  std::map<std::string, int> counts;
  for (const auto& op : m.ops()) ++counts[op.type()];
  return counts;
}

const Operator& op_named(const ModelGraph& m, const std::string& id) {
  for (const auto& op : m.ops()) {
    if (op.id() == id) return op;
  }
  FAIL("no op " << id);
  return m.ops(0);
}

std::vector<int64_t> ints(const Operator& op, const std::string& attr) {
  const auto& v = op.attrs().at(attr).ints().values();
  return {v.begin(), v.end()};
}

TEST_CASE("unmappable nodes are refused by position, name and type, with the opaque hint") {
  auto m = import_onnx(data("gated_unsupported.onnx"));
  REQUIRE_FALSE(m.ok());
  CHECK(m.status().code() == StatusCode::kInvalidArgument);
  const std::string msg = m.status().message();
  CHECK_THAT(msg, Catch::Contains("gated_unsupported.onnx"));
  CHECK_THAT(msg, Catch::Contains("node 2 'gate.mod' (Mod): no GraphPipe operator"));
  CHECK_THAT(msg, Catch::Contains("node 3 'periodic' (Tan): no GraphPipe operator"));
  CHECK_THAT(msg, Catch::Contains("2 ONNX node(s)"));
  CHECK_THAT(msg, Catch::Contains("--allow-opaque"));
}

TEST_CASE("allow_opaque keeps unmappable nodes as opaque ops that plan but have no kernel") {
  OnnxImportOptions o;
  o.allow_opaque = true;
  const auto m = imported("gated_unsupported.onnx", o);
  CHECK(type_counts(m)["opaque"] == 2);
  const auto& mod = op_named(m, "gate.mod");
  CHECK(mod.type() == "opaque");
  CHECK(mod.attrs().at("onnx_type").s() == "Mod");
  CHECK(mod.inputs_size() == 2);  // both gates
  REQUIRE(mod.outputs_size() == 1);
  CHECK(mod.outputs(0).shape(0) == 8);
  CHECK(op_named(m, "periodic").attrs().at("onnx_type").s() == "Tan");
  const auto g = testing::build_graph(m);
  CHECK(g.op(g.index_of("out")).type() == "linear");  // what follows maps as usual
  CHECK(g.op(g.index_of("gate.mod")).cost.forward_flops > 0);
}

TEST_CASE(
    "a transformer block maps: decomposed layer norm, split QKV, views, attention, tanh GELU") {
  const auto m = imported("transformer_block.onnx");
  auto counts = type_counts(m);
  CHECK(counts["layer_norm"] == 2);  // decomposed and LayerNormalization
  CHECK(counts["linear"] == 4);      // qkv, proj, fc1, fc2 (biases fused)
  CHECK(counts["slice"] == 3);       // Split into q, k, v
  CHECK(counts["reshape"] == 4);     // three head views and the merge
  CHECK(counts["transpose"] == 4);
  CHECK(counts["matmul"] == 2);  // scores and context
  CHECK(counts["scale"] == 0);   // folded into the scores' alpha
  CHECK(counts["softmax"] == 1);
  CHECK(counts["gelu"] == 1);
  CHECK(counts["add"] == 2);  // the residuals
  CHECK(counts["opaque"] == 0);
  // The dynamic-batch view (Shape -> Gather -> Unsqueeze -> Concat) folds to a per-sample shape.
  CHECK(ints(op_named(m, "attn.q_view"), "shape") == std::vector<int64_t>{8, 2, 8});
  CHECK(ints(op_named(m, "attn.v_view"), "shape") == std::vector<int64_t>{8, 2, 8});
  CHECK(ints(op_named(m, "attn.k_heads"), "perm") == std::vector<int64_t>{1, 2, 0});
  CHECK(op_named(m, "attn.scores").attrs().at("alpha").f() == Approx(1 / std::sqrt(8.0)));
  const auto& ln1 = op_named(m, "ln1.mean");  // the fused pattern is named after its first node
  CHECK(ln1.type() == "layer_norm");
  CHECK(imported_values(m, "ln1.mean", "gamma") ==
        initializer("transformer_block.onnx", "ln1.weight"));
  CHECK(imported_values(m, "ln1.mean", "beta") ==
        initializer("transformer_block.onnx", "ln1.bias"));
  CHECK(op_named(m, "ffn.act.half").type() == "gelu");
  const auto g = testing::build_graph(m);
  CHECK(g.total_params() == 2 * 2 * 16 + 16 * 48 + 48 + 16 * 16 + 16 + 16 * 32 + 32 + 32 * 16 + 16);
  const auto& out = g.op(g.index_of("residual2"));
  CHECK(model::shape_string(out.proto->outputs(0)) == "[8, 16] float32");
}

TEST_CASE("an inception block maps convolutions, batch norm, pools and the classifier") {
  OnnxImportOptions o;
  o.loss = "cross_entropy";
  const auto m = imported("inception_block.onnx", o);
  auto counts = type_counts(m);
  CHECK(counts["conv2d"] == 7);
  CHECK(counts["batch_norm"] == 1);
  CHECK(counts["relu"] == 7);
  CHECK(counts["max_pool2d"] == 2);
  CHECK(counts["avg_pool2d"] == 2);  // the branch pool and the global average pool
  CHECK(counts["concat"] == 1);
  CHECK(counts["reshape"] == 1);  // Flatten of [16, 1, 1]
  CHECK(counts["linear"] == 1);
  const auto& b4 = op_named(m, "b4.pool");
  CHECK(ints(b4, "kernel") == std::vector<int64_t>{3, 3});
  CHECK(ints(b4, "stride") == std::vector<int64_t>{1, 1});  // ONNX's strides, explicitly
  CHECK(ints(b4, "padding") == std::vector<int64_t>{1, 1});
  CHECK(b4.attrs().at("count_include_pad").i() == 0);
  CHECK(ints(op_named(m, "gap"), "kernel") == std::vector<int64_t>{4, 4});
  CHECK(imported_values(m, "stem", "weight") == initializer("inception_block.onnx", "stem.weight"));
  CHECK(imported_values(m, "stem.bn", "gamma") == initializer("inception_block.onnx", "bn.weight"));
  const auto g = testing::build_graph(m);
  CHECK(g.max_parallel_branches() == 4);
  CHECK(model::shape_string(g.op(g.index_of("concat")).proto->outputs(0)) ==
        "[16, 16, 16] float32");
}

TEST_CASE("a single-head attention imports as the same graph built by hand") {
  GraphBuilder b("attention_block", "");
  auto x = b.input("x", {4, 16});
  auto q = b.linear("attn.q", x, 16, false);
  auto k = b.linear("attn.k", x, 16, false);
  auto v = b.linear("attn.v", x, 16, false);
  // k's transpose folds into the scores' matmul.
  auto scores = b.matmul("attn.scores", q, k);
  model::set_attr(*b.model().mutable_ops(b.model().ops_size() - 1), "transpose_b", int64_t{1});
  auto p = b.softmax("attn.softmax", scores);
  auto y = b.matmul("attn.context", p, v);
  b.add_loss(b.mse_loss("y.loss", y, b.input("y.target", {4, 16})));
  const auto m = imported("attention_block.onnx");
  CHECK(structure_hash(m) == structure_hash(b.finish()));
  CHECK(type_counts(m)["matmul"] == 2);
}

// A small ONNX model built in the test: inputs [batch, dims...], nodes added by the caller.
struct OnnxBuilder {
  onnx::ModelProto model;
  explicit OnnxBuilder(int opset = 17) {
    model.set_ir_version(8);
    auto* o = model.add_opset_import();
    o->set_version(opset);
    model.mutable_graph()->set_name("t");
  }
  void value(onnx::ValueInfoProto* vi, const std::string& name, std::vector<int64_t> dims) {
    vi->set_name(name);
    auto* tt = vi->mutable_type()->mutable_tensor_type();
    tt->set_elem_type(1);
    auto* shape = tt->mutable_shape();
    shape->add_dim()->set_dim_param("batch");
    for (int64_t d : dims) shape->add_dim()->set_dim_value(d);
  }
  void input(const std::string& name, std::vector<int64_t> dims) {
    value(model.mutable_graph()->add_input(), name, dims);
  }
  void output(const std::string& name, std::vector<int64_t> dims) {
    value(model.mutable_graph()->add_output(), name, dims);
  }
  onnx::TensorProto* weight(const std::string& name, std::vector<int64_t> dims) {
    auto* t = model.mutable_graph()->add_initializer();
    t->set_name(name);
    t->set_data_type(1);
    int64_t n = 1;
    for (int64_t d : dims) t->add_dims(d), n *= d;
    for (int64_t k = 0; k < n; ++k) t->add_float_data(0.01f * static_cast<float>(k % 7));
    return t;
  }
  onnx::NodeProto* node(const std::string& type, std::vector<std::string> in,
                        std::vector<std::string> out, const std::string& name) {
    auto* n = model.mutable_graph()->add_node();
    n->set_op_type(type);
    n->set_name(name);
    for (auto& i : in) n->add_input(i);
    for (auto& o : out) n->add_output(o);
    return n;
  }
  static void attr(onnx::NodeProto* n, const std::string& name, int64_t v) {
    auto* a = n->add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::INT);
    a->set_i(v);
  }
  Result<ModelGraph> import() {
    static int counter = 0;
    const std::string path =
        std::filesystem::temp_directory_path() /
        ("gp-onnx-test-" + std::to_string(::getpid()) + "-" + std::to_string(counter++) + ".onnx");
    std::ofstream(path, std::ios::binary) << model.SerializeAsString();
    auto m = import_onnx(path);
    std::filesystem::remove(path);
    return m;
  }
};

TEST_CASE("a Gemm whose C is an activation (torch.addmm) is refused, not given a fresh bias") {
  OnnxBuilder b;
  b.input("x", {4});
  b.input("h", {3});
  b.weight("w", {3, 4});
  auto* g = b.node("Gemm", {"x", "w", "h"}, {"y"}, "addmm");
  OnnxBuilder::attr(g, "transB", 1);
  b.output("y", {3});
  auto m = b.import();
  REQUIRE_FALSE(m.ok());
  CHECK_THAT(m.status().message(), Catch::Contains("'addmm' (Gemm): C is not a bias weight"));
}

TEST_CASE("external or truncated initializers are refused, naming them") {
  OnnxBuilder b;
  b.input("x", {4});
  auto* w = b.weight("w", {4, 3});
  b.node("MatMul", {"x", "w"}, {"y"}, "mm");
  b.output("y", {3});
  w->set_data_location(onnx::TensorProto::EXTERNAL);
  w->clear_float_data();
  auto m = b.import();
  REQUIRE_FALSE(m.ok());
  CHECK_THAT(m.status().message(),
             Catch::Contains("initializer 'w' is stored externally but names no location"));
  w->set_data_location(onnx::TensorProto::DEFAULT);
  w->add_float_data(1.0f);  // 1 value for 12 elements
  m = b.import();
  REQUIRE_FALSE(m.ok());
  CHECK_THAT(m.status().message(), Catch::Contains("initializer 'w' holds 1 values"));
}

TEST_CASE(
    "half-precision and double weights (float16 bfloat16 float64) import as their float32 values") {
  // w [2, 2] of a MatMul: 1, -2, 0.5 and 2^-24 (the smallest float16, a subnormal).
  std::vector<float> expected = {1.0f, -2.0f, 0.5f, 5.9604645e-8f};
  const std::vector<uint16_t> half = {0x3C00, 0xC000, 0x3800, 0x0001};
  const std::vector<uint16_t> bf16 = {0x3F80, 0xC000, 0x3F00, 0x3380};
  auto import_with = [](const std::function<void(onnx::TensorProto*)>& store) {
    OnnxBuilder b;
    b.input("x", {2});
    auto* w = b.weight("w", {2, 2});
    w->clear_float_data();
    store(w);
    b.node("MatMul", {"x", "w"}, {"y"}, "mm");
    b.output("y", {2});
    return b.import();
  };
  auto weight_values = [&](const std::function<void(onnx::TensorProto*)>& store) {
    auto m = import_with(store);
    INFO(m.status().to_string());
    REQUIRE(m.ok());
    std::vector<float> v;
    for (const auto& op : m->ops()) {
      for (const auto& [param, bytes] : op.param_values()) {
        v.resize(bytes.size() / sizeof(float));
        std::memcpy(v.data(), bytes.data(), bytes.size());
      }
    }
    std::sort(v.begin(), v.end());
    return v;
  };
  std::sort(expected.begin(), expected.end());
  CHECK(weight_values([&](onnx::TensorProto* w) {
          w->set_data_type(onnx::TensorProto::FLOAT16);
          for (uint16_t h : half) w->add_int32_data(h);
        }) == expected);
  CHECK(weight_values([&](onnx::TensorProto* w) {
          w->set_data_type(onnx::TensorProto::BFLOAT16);
          std::string raw(bf16.size() * 2, '\0');
          std::memcpy(raw.data(), bf16.data(), raw.size());
          w->set_raw_data(raw);
        }) == expected);
  CHECK(weight_values([&](onnx::TensorProto* w) {
          w->set_data_type(onnx::TensorProto::DOUBLE);
          for (float f : expected) w->add_double_data(f);
        }) == expected);
  // A float16 tensor whose raw bytes hold 3 values for 4 elements is refused.
  const auto short_half = import_with([](onnx::TensorProto* w) {
    w->set_data_type(onnx::TensorProto::FLOAT16);
    w->set_raw_data(std::string(6, '\0'));
  });
  REQUIRE_FALSE(short_half.ok());
  CHECK_THAT(short_half.status().message(), Catch::Contains("initializer 'w' holds 3 values"));
}

TEST_CASE("a tensor read but defined nowhere is refused, naming it and its reader") {
  // torch.onnx.export(dynamo=True, export_params=False) leaves the weights out entirely.
  OnnxBuilder b;
  b.input("x", {4});
  b.node("MatMul", {"x", "fc.weight"}, {"h"}, "mm");
  b.node("Relu", {"h"}, {"y"}, "act");
  b.output("y", {3});
  auto m = b.import();
  REQUIRE_FALSE(m.ok());
  CHECK_THAT(m.status().message(),
             Catch::Contains("1 tensor(s) are read but defined nowhere") &&
                 Catch::Contains("first 'fc.weight' (read by node 0 'mm' (MatMul))") &&
                 Catch::Contains("export_params=False"));
}

TEST_CASE("a tensor defined by an initializer and a node output is refused, naming both") {
  // torch's exporter names a buffer "index" and the result of an aten.index op alike.
  OnnxBuilder b;
  b.input("x", {4});
  b.weight("index", {4});
  b.node("Relu", {"x"}, {"index"}, "act");
  b.node("Add", {"x", "index"}, {"y"}, "add");
  b.output("y", {4});
  auto m = b.import();
  REQUIRE_FALSE(m.ok());
  CHECK_THAT(m.status().message(), Catch::Contains("tensor 'index' is defined twice") &&
                                       Catch::Contains("node 0 'act' (Relu)") &&
                                       Catch::Contains("rename the buffer"));
}

TEST_CASE("a graph-only export's class token, a [1, 1, dim] input expanded, is a weight input") {
  // torch.onnx.export(export_params=False) of a small ViT: every parameter a graph input without
  // values, the class token among them (read by an Expand, not by a Gemm or Conv).
  onnx::ModelProto m;
  REQUIRE(read_onnx_file(data("torch2/class_token_legacy.onnx"), &m, nullptr).ok());
  auto* g = m.mutable_graph();
  for (const auto& t : g->initializer()) {
    auto* in = g->add_input();
    in->set_name(t.name());
    auto* type = in->mutable_type()->mutable_tensor_type();
    type->set_elem_type(t.data_type());
    for (int64_t d : t.dims()) type->mutable_shape()->add_dim()->set_dim_value(d);
  }
  g->clear_initializer();
  const auto path =
      std::filesystem::temp_directory_path() / ("gp_graph_only_" + std::to_string(getpid()));
  REQUIRE(write_onnx_file(path.string(), m, /*external_data=*/false).ok());
  auto imported = import_onnx(path.string());
  std::filesystem::remove(path);
  INFO(imported.status().to_string());
  REQUIRE(imported.ok());
  int data_inputs = 0, tokens = 0;
  for (const auto& op : imported->ops()) {
    if (op.type() == "input" && op.id() != "y.target") ++data_inputs;
    if (op.type() == "broadcast_param") ++tokens;
  }
  CHECK(data_inputs == 1);  // the image only
  CHECK(tokens == 1);
}

TEST_CASE("allow_opaque gives an opaque node of a TorchScript export ONNX's inferred shape") {
  // torch's TorchScript exporter writes no intermediate shapes; GraphPipe has no Tan.
  auto refused = import_onnx(data("opaque/tan_legacy.onnx"));
  REQUIRE_FALSE(refused.ok());
  CHECK_THAT(refused.status().message(), Catch::Contains("(Tan): no GraphPipe operator"));
  OnnxImportOptions options;
  options.allow_opaque = true;
  const ModelGraph m = imported("opaque/tan_legacy.onnx", options);
  int opaque = 0;
  for (const auto& op : m.ops()) {
    if (op.type() != "opaque") continue;
    ++opaque;
    REQUIRE(op.outputs_size() == 1);
    CHECK(std::vector<int64_t>(op.outputs(0).shape().begin(), op.outputs(0).shape().end()) ==
          std::vector<int64_t>{6});
  }
  CHECK(opaque == 1);
}

TEST_CASE("ONNX's shape inference crashing on a malformed file costs only its shapes") {
  // libonnx 1.12 reads a NULL pointer on this fuzzer-found file (a node without outputs); with
  // --allow-opaque it runs in a child process, so the import still ends in a refusal.
  std::vector<std::string> warnings;
  OnnxImportOptions options;
  options.allow_opaque = true;
  options.warnings = &warnings;
  auto m = import_onnx(data("../fuzz/fuzz_onnx/attention-node-without-output"), options);
  REQUIRE_FALSE(m.ok());
  CHECK_THAT(m.status().message(),
             Catch::Contains("'/attn/Transpose_2' (Transpose): has no output"));
  for (const auto& w : warnings) {
    INFO(w);
    CHECK((w.find("ONNX shape inference crashed on this model (signal") != std::string::npos ||
           w.find("ONNX shape inference failed") != std::string::npos));
  }
}

TEST_CASE("malformed nodes are refused by name instead of crashing") {
  OnnxBuilder b;
  b.input("x", {4});
  b.node("MatMul", {"x"}, {"y"}, "one_input");
  b.node("Split", {"x"}, {}, "no_outputs");
  b.output("y", {4});
  auto m = b.import();
  REQUIRE_FALSE(m.ok());
  CHECK_THAT(m.status().message(), Catch::Contains("'one_input' (MatMul): has 1 input(s)"));
  CHECK_THAT(m.status().message(), Catch::Contains("'no_outputs' (Split): has no output"));
}

TEST_CASE("slice positions are clamped as ONNX does and axes are normalised against the rank") {
  OnnxBuilder b;
  b.input("x", {10});
  b.weight("s", {1})->set_float_data(0, -100.0f);  // x[:, -100:]
  b.weight("e", {1})->set_float_data(0, 1e9f);
  b.weight("ax", {1})->set_float_data(0, -1.0f);
  b.node("Slice", {"x", "s", "e", "ax"}, {"y"}, "tail");
  b.output("y", {10});
  const auto m = b.import();
  INFO(m.status().to_string());
  REQUIRE(m.ok());
  const auto& op = op_named(*m, "tail");
  CHECK(op.attrs().at("start").i() == 0);
  CHECK(op.attrs().at("end").i() == 10);
  CHECK(op.attrs().at("axis").i() == 0);

  OnnxBuilder c;  // [batch] tensors: axis -1 is the batch
  c.input("a", {});
  c.input("b", {});
  auto* cat = c.node("Concat", {"a", "b"}, {"y"}, "cat");
  OnnxBuilder::attr(cat, "axis", -1);
  c.output("y", {});
  auto r = c.import();
  REQUIRE_FALSE(r.ok());
  CHECK_THAT(r.status().message(), Catch::Contains("'cat' (Concat): concatenates along the batch"));
}

TEST_CASE("Softmax before opset 13 maps only when its coerced axis is the last") {
  OnnxBuilder b(11);
  b.input("x", {3, 5});
  b.node("Softmax", {"x"}, {"y"}, "sm");  // axis 1 of [batch, 3, 5]: over 3 x 5 at once
  b.output("y", {3, 5});
  auto m = b.import();
  REQUIRE_FALSE(m.ok());
  CHECK_THAT(m.status().message(), Catch::Contains("'sm' (Softmax): axis = 1"));
  OnnxBuilder c(11);
  c.input("x", {5});
  c.node("Softmax", {"x"}, {"y"}, "sm");  // [batch, 5]: axis 1 is the last
  c.output("y", {5});
  CHECK(c.import().ok());
}

TEST_CASE("cross-entropy attaches int64 labels of the logits' shape without the classes") {
  OnnxImportOptions o;
  o.loss = "cross_entropy";
  const auto g = testing::build_graph(imported("mlp_gelu_ln.onnx", o));
  const auto& labels = g.op(g.index_of("probs.labels"));
  CHECK(labels.proto->outputs(0).dtype() == graphpipe::v1::DATA_TYPE_INT64);
  CHECK(g.op(g.index_of("probs.loss")).type() == "softmax_cross_entropy");
  o.loss = "hinge";
  CHECK_THAT(import_onnx(data("mlp_gelu_ln.onnx"), o).status().message(),
             Catch::Contains("--loss"));
}

TEST_CASE("per-sample scalar inputs are data even where an Add could take a bias") {
  const auto g = testing::build_graph(imported("scalar_inputs.onnx"));
  CHECK(g.op(g.index_of("a")).type() == "input");
  CHECK(g.op(g.index_of("b")).type() == "input");
  const auto& sum = g.op(g.index_of("sum"));
  CHECK(sum.type() == "add");
  CHECK(model::shape_string(sum.proto->outputs(0)) == "[1] float32");
  CHECK(g.total_params() == 0);
}

TEST_CASE("a file that is not an ONNX model is refused, naming it") {
  const std::string path = std::string(GP_TEST_DATA_DIR) + "/onnx/make_models.py";
  auto m = import_onnx(path);
  REQUIRE_FALSE(m.ok());
  CHECK_THAT(m.status().message(), Catch::Contains("make_models.py"));
  CHECK_FALSE(import_onnx(data("missing.onnx")).ok());
  // load_model takes .onnx files wherever a model is accepted.
  auto loaded = load_model(data("two_tower.onnx"));
  REQUIRE(loaded.ok());
  CHECK(loaded->ops_size() == 12);
}

}  // namespace
}  // namespace gp::model

namespace gp::model {
namespace {

// Batch norm in eval form (one output, no training_mode) normalises with the running statistics;
// GraphPipe trains it with batch statistics, and the import says so. A train-mode export's batch
// norm (its extra outputs, or torch 2.x's traced _native_batch_norm_legit_functional) does not.
TEST_CASE("an eval-form BatchNormalization is warned about, a train-mode one is not") {
  auto warnings_of = [](const std::string& path) {
    std::vector<std::string> warnings;
    OnnxImportOptions o;
    o.warnings = &warnings;
    auto m = import_onnx(path, o);
    INFO(m.status().to_string());
    REQUIRE(m.ok());
    int eval = 0;
    for (const auto& w : warnings) eval += w.find("exported in eval mode") != w.npos ? 1 : 0;
    return eval;
  };
  CHECK(warnings_of(data("torch/resnet_block_op17_train.onnx")) == 0);
  CHECK(warnings_of(data("torch2/resnet_block_dynamo_train_noopt.onnx")) == 0);
  // The same train-mode export with its batch norms turned into the eval form.
  onnx::ModelProto m;
  {
    std::ifstream in(data("torch/resnet_block_op17_train.onnx"), std::ios::binary);
    REQUIRE(m.ParseFromIstream(&in));
  }
  int edited = 0;
  for (auto& n : *m.mutable_graph()->mutable_node()) {
    if (n.op_type() != "BatchNormalization") continue;
    while (n.output_size() > 1) n.mutable_output()->RemoveLast();
    for (auto& a : *n.mutable_attribute()) {
      if (a.name() == "training_mode") a.set_i(0);
    }
    ++edited;
  }
  REQUIRE(edited == 2);
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("gp_eval_bn_" + std::to_string(getpid()) + ".onnx"))
                               .string();
  {
    std::ofstream out(path, std::ios::binary);
    REQUIRE(m.SerializeToOstream(&out));
  }
  CHECK(warnings_of(path) == 1);  // one warning, counting both
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace gp::model
