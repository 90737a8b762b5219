// ONNX import: a model exported from PyTorch (`torch.onnx.export`) as a GraphPipe ModelGraph.
//
// The batch is the first dimension of every graph input and becomes symbolic; the rest is the
// per-sample shape. Operators map onto the catalogue: Gemm, and MatMul with a weight (plus a
// following Add of a bias) -> linear; Relu; Gelu and its erf decomposition
// (x * 0.5 * (1 + erf(x / sqrt 2))) -> gelu; LayerNormalization (last axis) -> layer_norm;
// Softmax (last axis) -> softmax; Add of two activations -> add; Concat and Slice on per-sample
// axes; Gather from a weight followed by ReduceSum/ReduceMean over the bag -> embedding_bag;
// Identity, Dropout and Flatten of per-sample vectors pass through. Weights are initializers
// or, for models exported with export_params=False, graph inputs consumed as an operator's
// weight or bias: both become parameters (their values are not imported: training starts from
// GraphPipe's own initialisation). ONNX exports carry no loss: one is attached to every graph
// output (mean squared error against a new target input, or softmax cross-entropy against new
// int64 labels).
//
// Anything else (attention subgraphs, Reshape/Transpose, convolutions, decomposed layer norm,
// ...) is refused with every unsupported node named by position, name and type.
#pragma once

#include <string>

#include "gp/common/status.h"
#include "graphpipe/v1/model.pb.h"

namespace gp::graph {

struct OnnxImportOptions {
  std::string loss = "mse";  // "mse" or "cross_entropy"
};

Result<graphpipe::v1::ModelGraph> import_onnx(const std::string& path,
                                              const OnnxImportOptions& options = {});

}  // namespace gp::graph
