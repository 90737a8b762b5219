// What torch 2.x's ONNX exporter records about the traced program, and the merged parameters of
// its optimiser undone. The metadata lives in fields newer than Debian's ONNX 1.12 schema
// (metadata_props of NodeProto, ValueInfoProto and GraphProto), so it is read from the unknown
// fields protobuf keeps.
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace onnx {
class GraphProto;
class NodeProto;
}  // namespace onnx

namespace gp::model {

// One input of torch.export's graph signature: "p_fc_weight: PARAMETER target='fc.weight'".
struct TorchPlaceholder {
  std::string kind;    // PARAMETER, BUFFER, CONSTANT_TENSOR, ...
  std::string target;  // the module's name for it: its state_dict key
};

// The graph's `pkg.torch.export.ExportedProgram.graph_signature`, by placeholder name; empty
// when the file has none (the legacy exporter, other tools).
std::map<std::string, TorchPlaceholder> torch_graph_signature(const onnx::GraphProto& g);

// The names the optimiser folded initializer `value` from (`pkg.onnxscript.optimizer.folded_from`
// of its value_info): parameters and buffers by target, the traced program's values ("view",
// "arange") and the exporter's constants ("val_12"); empty when it was not folded.
std::vector<std::string> torch_folded_from(const onnx::GraphProto& g, const std::string& value);

// The initializer that `value` is a copy of, made when merged readers were split; "" for
// others.
std::string copied_from(const onnx::GraphProto& g, const std::string& value);

// The parameters and buffers a node's traced call reads (p_<name>, b_<name>), from its
// pkg.torch.onnx.fx_node metadata.
std::vector<std::string> torch_placeholders(const onnx::NodeProto& n);

// The arguments of the node's traced call of `target` ("aten.layer_norm.default") as the
// fx_node metadata writes them ("%x", "[8]", "None", "1e-05"); empty when it holds no such call.
std::vector<std::string> torch_call_arguments(const onnx::NodeProto& n, std::string_view target);

// The padding_idx of a traced nn.Embedding lookup (`aten.embedding(weight, ids, padding_idx)` in
// the node's fx_node metadata; torch passes -1, or nothing, for none): -1 when it has none or
// the node holds no such call (the legacy exporter keeps none).
int64_t torch_embedding_padding_idx(const onnx::NodeProto& n);

// The traced op a value was named after ("view_3" -> "view").
std::string traced_op(const std::string& value);

// A constant torch's exporter made ("val_12"), as folded_from lists it.
bool exporter_constant_name(const std::string& name);

// Gives each reader that took an initializer through the exporter's value de-duplication its
// own copy (see gp/model/onnx_file.h); a copy records what it was copied from as folded_from.
// Before that, folds of one parameter by one op that hold the same values (ALBERT's shared layer
// gets its weight's transpose folded once per call) become one initializer. Returns how many
// copies were added.
int separate_merged_parameters(onnx::GraphProto& g);

}  // namespace gp::model
