// A small reference evaluator for ONNX index arithmetic and control flow (Loop, If, sequences),
// private to the importer. It runs a pattern on probe values to check what it computes (torch
// writes nn.EmbeddingBag as a Loop whose body differs by exporter and option), so it favours
// clarity over speed and is bounded: a malformed or hostile model gets an error, never a hang.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "gp/common/status.h"
#include "onnx/onnx_pb.h"

namespace gp::model::onnx_detail {

// A dense row-major tensor; `ints` for integer and boolean element types (Div truncates).
struct EvalTensor {
  std::vector<int64_t> dims;
  std::vector<double> values;
  bool ints = false;
};

// A tensor or a sequence of tensors (SequenceEmpty, SequenceInsert, ConcatFromSequence).
struct EvalValue {
  bool sequence = false;
  EvalTensor tensor;
  std::vector<EvalTensor> items;
};

// Bounds on the work one evaluation may do.
constexpr int64_t kMaxEvalElements = int64_t{1} << 20;  // per tensor
constexpr int64_t kMaxEvalTrips = 4096;                 // per Loop
constexpr int64_t kMaxEvalNodes = 200000;               // node executions in all
constexpr int64_t kMaxEvalWork = int64_t{1} << 26;      // elements read, in all
constexpr int kMaxEvalDepth = 8;                        // nested subgraphs

// Values of the names the evaluated nodes read but do not define; nullopt for an unknown name.
using EvalLookup = std::function<std::optional<EvalValue>(const std::string&)>;

// Evaluates `nodes` in order (opset `opset` of the default domain) and returns the value of
// every output they define, or an error naming the node it could not evaluate. No tensor may
// hold more than `max_elements` (the importer's constant folding allows more than the probes).
Result<std::map<std::string, EvalValue>> evaluate_nodes(
    std::span<const onnx::NodeProto* const> nodes, int64_t opset, const EvalLookup& outer,
    int64_t max_elements = kMaxEvalElements);

// A TensorProto's dims and values (float, double, integer and boolean types).
Result<EvalTensor> eval_tensor_of(const onnx::TensorProto& t,
                                  int64_t max_elements = kMaxEvalElements);

}  // namespace gp::model::onnx_detail
