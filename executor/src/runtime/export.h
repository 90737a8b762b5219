// Trained weights out: a checkpoint's parameters written back into the ONNX model they were
// imported from (its initializers replaced, so the user gets their own model back, trained), or
// as a .safetensors file or a NumPy .npz archive of tensors under the names the model came with
// (its ONNX initializers, which are torch's state_dict keys), in the source's layout.
#pragma once

#include <string>
#include <vector>

#include "gp/common/status.h"
#include "gp/model/graph.h"
#include "graphpipe/v1/model.pb.h"

namespace gp::exec {

struct ExportOptions {
  std::string checkpoint;  // a checkpoint directory (its newest complete checkpoint is used)
  std::string out;         // .onnx, .safetensors or .npz
  // The ONNX model imported (default: the model's source): rewritten for .onnx; for
  // .safetensors and .npz with names "source" it gives the tensors' names and shapes.
  std::string onnx;
  // .safetensors and .npz: "source" writes each ONNX tensor the parameters came from once, under
  // its name and in its layout (tied and split parameters joined again); a model without ONNX
  // sources (zoo, .pbtxt) writes "<op id>.<param>" in GraphPipe's layout, tied copies once.
  // "ops" writes every model that way.
  std::string names = "source";
};

// The model must be the one checkpointed (its hash is checked). For .onnx every ONNX tensor a
// parameter came from (model.param_sources) is replaced; weights that were graph inputs of an
// export_params=False model become initializers. InvalidArgument naming what does not fit:
// another model, a source file without the named tensor or with other dims, a parameter
// without a source. `notes` receives what the user should know (e.g. tied copies that diverged).
Status export_trained(const graphpipe::v1::ModelGraph& model, const ExportOptions& options,
                      std::vector<std::string>* notes = nullptr);

}  // namespace gp::exec
