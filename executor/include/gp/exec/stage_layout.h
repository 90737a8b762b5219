// The layout of one stage: which operators it runs and in what order, every tensor they read or
// write (with the index the stage runner gives it), which of those enter the stage from other
// stages (external inputs), leave it (exports) or only pass through (relays), and where each
// operator's parameters sit in the flat parameter array. A pure function of the graph and the
// stage's ops (for a plan's stage, of the plan's edges too): lowering resolves every message
// piece against it, and StageRunner::create allocates exactly what it describes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "gp/common/status.h"
#include "gp/model/graph.h"
#include "gp/plan/plan_util.h"
#include "graphpipe/v1/plan.pb.h"

namespace gp::exec {

struct StageTensor {
  graphpipe::v1::TensorRef ref;
  int64_t per_sample = 0;   // elements
  bool is_int = false;      // int64 ids or labels
  bool needs_grad = false;  // a float output of a non-input op
};

struct StageLayout {
  struct Tensor {
    StageTensor info;
    // The tensor crosses the stage's boundary (received, exported or relayed): its gradients
    // wait for the data plane, so they are kept per slot; the others live only inside one
    // backward, and one copy serves every slot.
    bool grads_per_slot = false;
    // The tensor whose buffers hold it: itself, or, for the output of a view (a reshape) whose
    // input and output both stay inside the stage alike in gradients and type, its input's
    // storage; the runner then never runs the view. gp::cost::stage_memory counts the same.
    int storage = 0;
  };
  struct Op {
    int op = 0;                         // graph index
    std::vector<int> inputs;            // into tensors
    std::vector<int> outputs;           // into tensors
    std::vector<size_t> param_offsets;  // into the flat parameters, floats (ParamSpec order)
    std::vector<size_t> param_sizes;
  };

  std::vector<Op> ops;          // topological order
  std::vector<Tensor> tensors;  // in order of first use: each op's inputs and outputs, then relays
  // Into tensors: those produced outside the stage (consumed here or relayed), in tensors' order.
  std::vector<int> external;
  std::vector<int> exported;  // into tensors: the exports, in the order given
  // Produced here and read by other stages; produced elsewhere and only passed on from here.
  std::vector<graphpipe::v1::TensorRef> exports;
  std::vector<graphpipe::v1::TensorRef> relays;
  size_t param_count = 0;  // floats

  // Index into `external` of a tensor, or -1.
  int external_index(const graphpipe::v1::TensorRef& ref) const;
  // Index into `exported` of a tensor, or -1.
  int export_index(const graphpipe::v1::TensorRef& ref) const;
  // Graph indices of the stage's ops, in execution order.
  std::vector<int> op_indices() const;
};

// The layout of `ops` (graph indices, any order; at least one, none repeated). `exports`: tensors
// produced here that other stages consume (outputs of these ops). `relays`: tensors produced
// elsewhere that only pass through (chain pipelines); they are held like external inputs without
// being consumed. InvalidArgument naming the op or tensor otherwise.
Result<StageLayout> layout_stage(const model::Graph& graph, std::vector<int> ops,
                                 std::vector<graphpipe::v1::TensorRef> exports = {},
                                 std::vector<graphpipe::v1::TensorRef> relays = {});

// The layout of a plan's stage: its ops from `index`, its exports and relays from the plan's
// edges leaving it (in the edges' order, each once). `index` from plan::validate_plan (or
// validate_plan_structure).
Result<StageLayout> layout_plan_stage(const graphpipe::v1::Plan& plan, const model::Graph& graph,
                                      const plan::PlanIndex& index, int stage);

}  // namespace gp::exec
