// Reading and writing ONNX files as exporters write them. torch 2.x (torch.onnx.export with
// dynamo=True, its default) keeps initializers in an external data file beside the model
// (`model.onnx.data`), and its optimiser merges equal-valued initializers of different
// parameters into one; both are undone here, so the importer and `export` see one self-contained
// model in which every parameter has its own tensor.
#pragma once

#include <string>
#include <vector>

#include "gp/common/status.h"

namespace onnx {
class GraphProto;
class ModelProto;
class NodeProto;
}  // namespace onnx

namespace gp::model {

struct OnnxFileInfo {
  // Some initializer came from an external data file (write_onnx_file writes them out again).
  bool external_data = false;
  // Initializers added because the exporter had merged equal-valued parameters (see below).
  int separated_parameters = 0;
};

// Parses `path` and reads every externally stored initializer into the tensor. The data file
// must lie inside the model's directory (no absolute path, no '..', no symbolic link out of it),
// and the byte range must exist and hold exactly the tensor's elements; each problem is
// InvalidArgument naming the initializer and the file. A node that reads an initializer under a
// parameter name of another parameter (the exporter's value de-duplication, seen in the node's
// `pkg.torch.onnx.fx_node` metadata) gets its own copy, named after its parameter; so does a
// group of readers of a merged exporter-made constant (a folded weight transpose) that names no
// parameter in common with the others. A weight that the traced program itself shares (tied
// weights) stays shared.
Status read_onnx_file(const std::string& path, onnx::ModelProto* model, OnnxFileInfo* info);

// Writes atomically; with `external_data`, float initializers of 1 KiB or more go to
// `<path>.data` beside it (as torch writes them), the rest stays inline.
Status write_onnx_file(const std::string& path, onnx::ModelProto& model, bool external_data);

// The value of a node's metadata entry `key` (NodeProto.metadata_props, which torch 2.x fills with
// the traced program's node and the optimiser's rewrite rules); "" when absent.
std::string onnx_node_metadata(const onnx::NodeProto& node, const std::string& key);
// The names an fx_node metadata string refers to (%name tokens: the node, its arguments);
// placeholders (p_..., b_...) in lower case, as fx_name writes them.
std::vector<std::string> fx_names(const std::string& fx);
// torch.export's placeholder name of a parameter or buffer: prefix ("p_", "b_") + the name in
// lower case, every character but letters and digits as '_' ("LayerNorm.weight" ->
// "p_layernorm_weight").
std::string fx_name(const std::string& prefix, const std::string& name);

// The module's name (the graph signature's target) of the bias that node `n`'s traced call
// reads and the file does not hold: torch's optimiser drops an all-zero bias from its Gemm or
// Conv. "" when the node names no such bias or the file has no signature.
std::string dropped_bias_target(const onnx::GraphProto& g, const onnx::NodeProto& n);

}  // namespace gp::model
