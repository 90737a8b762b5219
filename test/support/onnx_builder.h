// ONNX graphs written node by node for the importer's tests (inputs and outputs with a symbolic
// batch first), imported through a temporary file, and readers of what they import to.
#pragma once

#include <unistd.h>

#include <array>
#include <catch2/catch.hpp>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "gp/model/graph.h"
#include "gp/model/onnx_import.h"
#include "onnx/onnx_pb.h"

namespace gp::testing {

inline constexpr int kOnnxFloat = onnx::TensorProto::FLOAT;
inline constexpr int kOnnxInt64 = onnx::TensorProto::INT64;
inline constexpr int kOnnxBool = onnx::TensorProto::BOOL;

struct OnnxBuilder {
  onnx::ModelProto model;
  explicit OnnxBuilder(int opset = 18) {
    model.set_ir_version(8);
    model.add_opset_import()->set_version(opset);
    model.mutable_graph()->set_name("g");
  }
  // All of a tensor's dims, -1 where the symbolic batch is (at any axis, or none).
  static void value_with_batch(onnx::ValueInfoProto* vi, const std::string& name,
                               const std::vector<int64_t>& dims, int type) {
    vi->set_name(name);
    auto* tt = vi->mutable_type()->mutable_tensor_type();
    tt->set_elem_type(type);
    auto* shape = tt->mutable_shape();
    for (int64_t d : dims) {
      if (d < 0) {
        shape->add_dim()->set_dim_param("batch");
      } else {
        shape->add_dim()->set_dim_value(d);
      }
    }
  }
  // The symbolic batch first, then `dims`.
  static void value(onnx::ValueInfoProto* vi, const std::string& name,
                    const std::vector<int64_t>& dims, int type) {
    std::vector<int64_t> all = {-1};
    all.insert(all.end(), dims.begin(), dims.end());
    value_with_batch(vi, name, all, type);
  }
  void input(const std::string& name, const std::vector<int64_t>& dims, int type = kOnnxFloat) {
    value(model.mutable_graph()->add_input(), name, dims, type);
  }
  void output(const std::string& name, const std::vector<int64_t>& dims) {
    value(model.mutable_graph()->add_output(), name, dims, kOnnxFloat);
  }
  static void fill(onnx::TensorProto* t, const std::string& name, const std::vector<int64_t>& dims,
                   const std::vector<double>& values, int type) {
    t->set_name(name);
    t->set_data_type(type);
    for (int64_t d : dims) t->add_dims(d);
    for (double v : values) {
      if (type == kOnnxFloat) t->add_float_data(static_cast<float>(v));
      if (type == kOnnxInt64) t->add_int64_data(static_cast<int64_t>(v));
      if (type == kOnnxBool) t->add_int32_data(v != 0);
    }
  }
  // An initializer (a weight when float with more than one element).
  void init(const std::string& name, const std::vector<int64_t>& dims,
            const std::vector<double>& values, int type = kOnnxFloat) {
    fill(model.mutable_graph()->add_initializer(), name, dims, values, type);
  }
  // A float weight of the product of `dims` elements, values that make no op trivial.
  void weight(const std::string& name, const std::vector<int64_t>& dims) {
    int64_t count = 1;
    for (int64_t d : dims) count *= d;
    std::vector<double> v;
    for (int64_t k = 0; k < count; ++k) v.push_back(0.01 * static_cast<double>(k % 17) - 0.05);
    init(name, dims, v);
  }
  // A Constant node (never a weight).
  void constant(const std::string& name, const std::vector<int64_t>& dims,
                const std::vector<double>& values, int type = kOnnxFloat) {
    auto* n = node("Constant", {}, {name}, name);
    auto* a = n->add_attribute();
    a->set_name("value");
    a->set_type(onnx::AttributeProto::TENSOR);
    fill(a->mutable_t(), name, dims, values, type);
  }
  onnx::NodeProto* node(const std::string& type, const std::vector<std::string>& in,
                        const std::vector<std::string>& out, const std::string& name) {
    auto* n = model.mutable_graph()->add_node();
    n->set_op_type(type);
    n->set_name(name);
    for (const auto& i : in) n->add_input(i);
    for (const auto& o : out) n->add_output(o);
    return n;
  }
  static void attr(onnx::NodeProto* n, const std::string& name, int64_t v) {
    auto* a = n->add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::INT);
    a->set_i(v);
  }
  static void attr(onnx::NodeProto* n, const std::string& name, const std::vector<int64_t>& v) {
    auto* a = n->add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::INTS);
    for (int64_t x : v) a->add_ints(x);
  }
  static void attr_float(onnx::NodeProto* n, const std::string& name, float v) {
    auto* a = n->add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::FLOAT);
    a->set_f(v);
  }
  // Node metadata, as torch's dynamo exporter writes it (pkg.torch.onnx.fx_node, ...).
  // NodeProto.metadata_props (field 9) is newer than the ONNX schema compiled here: written as
  // the unknown field the importer reads it from.
  static void metadata(onnx::NodeProto* n, const std::string& key, const std::string& value) {
    onnx::StringStringEntryProto entry;
    entry.set_key(key);
    entry.set_value(value);
    n->mutable_unknown_fields()->AddLengthDelimited(9, entry.SerializeAsString());
  }
  // torch.export's graph signature (GraphProto.metadata_props, field 16), one line per
  // placeholder: {"p_fc_weight", "PARAMETER", "fc.weight"}.
  void signature(const std::vector<std::array<std::string, 3>>& placeholders) {
    std::string text = "\n# inputs\n";
    for (const auto& [name, kind, target] : placeholders) {
      text += name + ": " + kind + " target='" + target + "'\n";
    }
    text += "x: USER_INPUT\n\n# outputs\ny: USER_OUTPUT\n";
    onnx::StringStringEntryProto entry;
    entry.set_key("pkg.torch.export.ExportedProgram.graph_signature");
    entry.set_value(text);
    model.mutable_graph()->mutable_unknown_fields()->AddLengthDelimited(16,
                                                                        entry.SerializeAsString());
  }
  // What torch's optimiser folded float initializer `name` (dims `dims`) from
  // (ValueInfoProto.metadata_props, field 4): "['a.gamma', 'val_3']".
  void folded_from(const std::string& name, const std::vector<int64_t>& dims,
                   const std::vector<std::string>& sources) {
    std::string list;
    for (const auto& s : sources) list += (list.empty() ? "['" : "', '") + s;
    onnx::StringStringEntryProto entry;
    entry.set_key("pkg.onnxscript.optimizer.folded_from");
    entry.set_value(list + "']");
    auto* vi = model.mutable_graph()->add_value_info();
    vi->set_name(name);
    auto* type = vi->mutable_type()->mutable_tensor_type();
    type->set_elem_type(kOnnxFloat);
    for (int64_t d : dims) type->mutable_shape()->add_dim()->set_dim_value(d);
    vi->mutable_unknown_fields()->AddLengthDelimited(4, entry.SerializeAsString());
  }
  static void attr(onnx::NodeProto* n, const std::string& name, const std::string& v) {
    auto* a = n->add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::STRING);
    a->set_s(v);
  }
  Result<model::ModelGraph> import(const model::OnnxImportOptions& options = {}) const {
    static int counter = 0;
    const std::string path =
        std::filesystem::temp_directory_path() /
        ("gp-onnx-" + std::to_string(::getpid()) + "-" + std::to_string(counter++) + ".onnx");
    std::ofstream(path, std::ios::binary) << model.SerializeAsString();
    auto m = model::import_onnx(path, options);
    std::filesystem::remove(path);
    return m;
  }
  model::ModelGraph imported() const {
    auto m = import();
    INFO(m.status().to_string());
    REQUIRE(m.ok());
    return *m;
  }
  // The import's warnings into `warnings`.
  model::ModelGraph imported(std::vector<std::string>* warnings) const {
    model::OnnxImportOptions options;
    options.warnings = warnings;
    auto m = import(options);
    INFO(m.status().to_string());
    REQUIRE(m.ok());
    return *m;
  }
  std::string refusal() const {
    auto m = import();
    REQUIRE_FALSE(m.ok());
    return m.status().message();
  }
};

// Readers of an imported graph's operator `id`.
inline const graphpipe::v1::Operator& imported_op(const model::Graph& g, const std::string& id) {
  INFO("op " << id);
  REQUIRE(g.index_of(id) >= 0);
  return *g.op(g.index_of(id)).proto;
}
inline std::vector<int64_t> attr_ints_of(const graphpipe::v1::Operator& o,
                                         const std::string& attr) {
  const auto& v = o.attrs().at(attr).ints().values();
  return {v.begin(), v.end()};
}
inline std::vector<float> param_floats(const graphpipe::v1::Operator& o, const std::string& param) {
  const std::string& raw = o.param_values().at(param);
  std::vector<float> v(raw.size() / sizeof(float));
  std::memcpy(v.data(), raw.data(), raw.size());
  return v;
}
// The operator `id` of an imported ModelGraph (fails the test when there is none).
inline const graphpipe::v1::Operator& model_op(const model::ModelGraph& m, const std::string& id) {
  for (const auto& o : m.ops()) {
    if (o.id() == id) return o;
  }
  FAIL("no op " << id);
  return m.ops(0);
}
inline std::map<std::string, int> type_counts(const model::ModelGraph& m) {
  std::map<std::string, int> counts;
  for (const auto& o : m.ops()) ++counts[o.type()];
  return counts;
}

}  // namespace gp::testing
