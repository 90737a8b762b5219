// ONNX import: a model exported from PyTorch (`torch.onnx.export`) as a GraphPipe ModelGraph.
//
// The batch is the first dimension of every graph input and becomes symbolic; the rest is the
// per-sample shape. Operators map onto the catalogue:
// - Gemm, and MatMul with a weight (plus a following Add of a bias) -> linear; MatMul of two
//   activations (attention scores and context) -> matmul; Mul/Div by a scalar -> scale;
// - Relu; Gelu and its erf and tanh decompositions -> gelu; Softmax (last axis);
//   LayerNormalization and its decomposed form (ReduceMean, Sub, Pow, ReduceMean, Add, Sqrt, Div,
//   optional Mul and Add) -> layer_norm; Add of two activations -> add;
// - Concat, Slice and Split on per-sample axes; Transpose that keeps the batch first;
//   Reshape/Flatten/Squeeze/Unsqueeze -> reshape (target shapes folded from constants and from
//   the Shape/Gather/Concat arithmetic of dynamic-batch exports, else the shape information);
// - Gather from a weight followed by ReduceSum/ReduceMean over the bag -> embedding_bag;
// - Conv (2-D, group 1), MaxPool/AveragePool and their global forms, BatchNormalization
//   (trained with batch statistics) for vision models;
// - Identity and Dropout pass through.
// Weights are initializers (their values are imported) or, for models exported with
// export_params=False, graph inputs consumed as an operator's weight or bias. ONNX exports carry
// no loss: one is attached to every graph output (mean squared error against a new target input,
// or softmax cross-entropy against new int64 labels).
//
// Also: Sigmoid; Clip (ReLU6) -> clip; Mul of two activations -> mul; ReduceSum/ReduceMean over
// per-sample axes -> reduce; Add of a weight broadcast over the batch (learned position
// embeddings) -> bias_add; Gather from a weight without a bag -> embedding, and of one constant
// index of an activation -> slice; zero Pad before Conv or AveragePool -> their padding;
// MaxPool/AveragePool ceil_mode; Identity and Transpose of weights (de-duplicated parameters,
// train-mode exports) -> the weight; static exports' traced batch in Reshape targets.
// Anything else is refused with every unmappable node named by position, name and type, unless
// allow_opaque keeps it as an "opaque" operator: planned with a FLOP estimate, never trained.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "gp/common/status.h"
#include "graphpipe/v1/model.pb.h"

namespace gp::model {

struct OnnxImportOptions {
  std::string loss = "mse";  // "mse" or "cross_entropy"
  // Keep nodes without a GraphPipe operator as opaque operators (planning only) instead of
  // refusing the model; they need output shapes in the model's shape information.
  bool allow_opaque = false;
  // A weight that several operators read (tied weights, e.g. fc2.weight = fc1.weight) gives each
  // reader its own copy, as GraphPipe gives every operator its own parameters, and ties the
  // copies (ModelGraph.param_ties: gradients summed) when each is the weight element for element;
  // copies in different layouts are refused. With untie_weights the copies are not tied (same
  // forward; training then differs from the tied original).
  bool untie_weights = false;
  // Initializers that are registered buffers, not parameters (an additive attention mask, RoPE's
  // caches): constants, never trained. Buffers of torch's dynamo exports are found from the
  // nodes' metadata (placeholders named b_<buffer>); legacy exports need them named here.
  std::vector<std::string> freeze;
  // nn.Embedding's padding_idx by table initializer: that row is read as any other but never
  // trained. Dynamo exports carry it in the nodes' metadata; legacy exports do not (the import
  // warns about a table with an all-zero row, as torch starts a padding row).
  std::map<std::string, int64_t> padding_idx;
  // nn.EmbeddingBag with an offsets input (bags of varying length) becomes an embedding_bag over
  // per-sample ids of this many, padded with -1 (the ids input then declares its offsets input in
  // attrs.ragged_offsets, for --data); 0 refuses such models, saying to give it.
  int64_t max_bag = 0;
  // Receives what the user should know about an import that succeeded (an eval-mode export's
  // folded batch norm, untied weights); may be null.
  std::vector<std::string>* warnings = nullptr;
};

Result<graphpipe::v1::ModelGraph> import_onnx(const std::string& path,
                                              const OnnxImportOptions& options = {});

}  // namespace gp::model
