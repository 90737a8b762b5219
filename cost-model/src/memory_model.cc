// Per-device memory of a stage: model state (weights, gradients, optimizer), activations kept
// for backward by every in-flight sample, and the largest transient per-op buffer.
#include "gp/cost/memory_model.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <utility>
#include <vector>

#include "gp/common/status.h"

namespace gp::cost {
namespace {

using graphpipe::v1::OptimizerKind;
using graphpipe::v1::Precision;

bool is_bf16(Precision p) { return p == graphpipe::v1::PRECISION_BF16_FP32_MASTER; }

// Bytes per parameter of the training copy of the weights (and of their gradients).
int64_t param_width(Precision p) { return is_bf16(p) ? 2 : 4; }

// fp32 words of optimizer state per parameter; UNSPECIFIED reads as Adam (the default).
int64_t optimizer_words(OptimizerKind k) {
  switch (k) {
    case graphpipe::v1::OPTIMIZER_KIND_SGD:
      return 0;
    case graphpipe::v1::OPTIMIZER_KIND_MOMENTUM:
      return 1;  // velocity
    default:
      return 2;  // Adam: first and second moments
  }
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// The op's memory per sample: measured when the options carry a model that measured it, else the
// catalogue's.
OpMemory op_memory(const model::OpNode& op, const MemoryOptions& options) {
  if (options.measured != nullptr) {
    if (auto m = options.measured->op_memory(op)) return *m;
  }
  return {op.cost.activation_bytes, op.cost.workspace_bytes};
}

}  // namespace

double optimizer_step_bytes(const MemoryBreakdown& state) {
  return 2.0 * static_cast<double>(state.weight_bytes + state.optimizer_bytes) +
         static_cast<double>(state.gradient_bytes);
}

double optimizer_step_us(const OptimizerStepCost& cost, const MemoryBreakdown& state,
                         int64_t tensors) {
  if (state.weight_bytes <= 0) return 0;  // no parameters: the plan has no step to take
  const double bytes = optimizer_step_bytes(state);
  return cost.fixed_us + cost.per_tensor_us * static_cast<double>(tensors) +
         bytes / std::max(cost.bandwidth(bytes), 1.0) * 1e6;
}

int64_t stage_param_tensors(const model::Graph& graph, std::span<const int> op_indices) {
  int64_t tensors = 0;
  for (int i : op_indices) {
    if (graph.op(i).cost.param_count > 0) tensors += graph.op(i).proto->params_size();
  }
  return tensors;
}

int64_t optimizer_step_tensors(int64_t tensors, int data_parallel, bool shard_optimizer) {
  if (!shard_optimizer || data_parallel <= 1) return tensors;
  // A slice holds its share of the tensors, and a piece of one more where it starts mid-tensor.
  return ceil_div(tensors, data_parallel) + 1;
}

MemoryBreakdown optimizer_step_state(const MemoryBreakdown& m, int data_parallel,
                                     bool shard_optimizer) {
  if (!shard_optimizer || data_parallel <= 1) return m;
  MemoryBreakdown slice = m;
  slice.weight_bytes = ceil_div(m.weight_bytes, data_parallel);
  slice.gradient_bytes = ceil_div(m.gradient_bytes, data_parallel);
  return slice;
}

int64_t stage_param_bytes(const model::Graph& graph, std::span<const int> op_indices,
                          Precision precision) {
  int64_t params = 0;
  for (int i : op_indices) params += graph.op(i).cost.param_count;
  return params * param_width(precision);
}

int64_t kernel_workspace_bytes_per_sample(const model::Graph& graph,
                                          std::span<const int> op_indices,
                                          const MemoryOptions& options) {
  double most = 0;
  for (int i : op_indices) most = std::max(most, op_memory(graph.op(i), options).workspace_bytes);
  return std::llround(most * (is_bf16(options.precision) ? 0.5 : 1.0));
}

namespace {

// A stage's activation bytes per sample, by what holds them (before the bf16 scaling).
struct PerSample {
  double kept = 0;         // held per in-flight sample without recomputation
  double boundary = 0;     // of it, the values and gradients of tensors crossing the boundary
  double inner_grads = 0;  // gradients inside the stage, one call's worth
};

// Which ops form the stage, and what follows for one tensor.
class StageTensors {
 public:
  StageTensors(const model::Graph& graph, std::span<const int> op_indices)
      : graph_(graph), in_stage_(static_cast<size_t>(graph.num_ops()), 0) {
    for (int i : op_indices) in_stage_[static_cast<size_t>(i)] = 1;
  }

  bool in_stage(int op) const { return op >= 0 && in_stage_[static_cast<size_t>(op)] != 0; }

  // Float tensors of ops other than graph inputs carry gradients.
  bool needs_grad(int producer, const model::TensorSpec& spec) const {
    return !graph_.op(producer).info->is_input && !model::is_integer(spec);
  }

  // Output k of op `producer` is read by an op outside the stage.
  bool crosses(int producer, int k) const {
    const model::OpNode& op = graph_.op(producer);
    for (int s : op.succs) {
      if (in_stage(s)) continue;
      for (const auto& ref : graph_.op(s).proto->inputs()) {
        if (ref.op() == op.id() && ref.output() == k) return true;
      }
    }
    return false;
  }

  // As gp::exec::layout_stage decides (StageLayout::Tensor::storage): a view whose input and output
  // both stay inside the stage, alike in gradients and type, is its input's memory; it holds
  // nothing of its own.
  bool view_shares_memory(const model::OpNode& op) const {
    if (!op.is_view() || op.proto->inputs_size() < 1 || op.proto->outputs_size() < 1) return false;
    const int producer = graph_.index_of(op.proto->inputs(0).op());
    if (!in_stage(producer)) return false;
    const model::TensorSpec& in = op.input_specs[0];
    const model::TensorSpec& out = op.proto->outputs(0);
    return !crosses(producer, op.proto->inputs(0).output()) && !crosses(op.index, 0) &&
           needs_grad(producer, in) == needs_grad(op.index, out) &&
           model::is_integer(in) == model::is_integer(out) &&
           model::num_elements(in) == model::num_elements(out);
  }

 private:
  const model::Graph& graph_;
  std::vector<char> in_stage_;
};

// Per sample, as the executor's stage runner allocates (one definition for planner, simulator
// and executor): every tensor the stage touches is kept per in-flight sample, with the op's saved
// scratch; float gradients are kept per sample for tensors crossing the stage's boundary (they
// wait for the data plane), once per call for those inside it (one backward at a time). A view
// (reshape) inside the stage adds nothing: its output is its input's memory.
PerSample per_sample_bytes(const model::Graph& graph, std::span<const int> op_indices,
                           const MemoryOptions& options) {
  const StageTensors stage(graph, op_indices);
  PerSample p;
  std::set<std::pair<int, int>> external_inputs;  // (producer, output) read from other stages
  for (int i : op_indices) {
    const model::OpNode& op = graph.op(i);
    if (stage.view_shares_memory(op)) continue;
    p.kept += op_memory(op, options).activation_bytes;
    for (int k = 0; k < op.proto->inputs_size(); ++k) {
      const int producer = graph.index_of(op.proto->inputs(k).op());
      if (producer < 0 || stage.in_stage(producer)) continue;
      if (!external_inputs.insert({producer, op.proto->inputs(k).output()}).second) continue;
      const model::TensorSpec& spec = op.input_specs[static_cast<size_t>(k)];
      const double bytes = static_cast<double>(model::stored_size_bytes(spec));
      const double both = stage.needs_grad(producer, spec) ? 2 * bytes : bytes;
      p.kept += both;
      p.boundary += both;
    }
    for (int k = 0; k < op.proto->outputs_size(); ++k) {
      const model::TensorSpec& spec = op.proto->outputs(k);
      const double bytes = static_cast<double>(model::stored_size_bytes(spec));
      const bool crossing = stage.crosses(i, k);
      if (crossing) p.boundary += bytes;  // its value, part of the op's activation bytes
      if (!stage.needs_grad(i, spec)) continue;
      if (crossing) {
        p.kept += bytes;
        p.boundary += bytes;
      } else {
        p.inner_grads += bytes;
      }
    }
  }
  return p;
}

}  // namespace

MemoryBreakdown stage_memory(const model::Graph& graph, std::span<const int> op_indices,
                             int64_t micro_batch, int64_t in_flight_samples, int data_parallel,
                             const MemoryOptions& options) {
  GP_CHECK(data_parallel >= 1, "data_parallel must be >= 1");
  GP_CHECK(micro_batch >= 0 && in_flight_samples >= 0, "sample counts must be >= 0");
  int64_t params = 0;
  for (int i : op_indices) params += graph.op(i).cost.param_count;
  const bool bf16 = is_bf16(options.precision);

  MemoryBreakdown m;
  // bf16 training keeps bf16 weights and gradients plus an fp32 master copy of the weights,
  // which counts as optimizer state (it exists only for the optimizer step).
  m.weight_bytes = params * param_width(options.precision);
  m.gradient_bytes = params * param_width(options.precision);
  // ZeRO-1: every replica allocates the rounded-up slice (the last one's may be shorter in use).
  const int64_t state_params =
      options.shard_optimizer && data_parallel > 1 ? ceil_div(params, data_parallel) : params;
  m.optimizer_bytes = state_params * 4 * (optimizer_words(options.optimizer) + (bf16 ? 1 : 0));

  // Float tensors are half as wide with bf16; integer ids are not, but they are a small share,
  // so all activation and workspace bytes are scaled by 0.5.
  const double scale = bf16 ? 0.5 : 1.0;
  const int64_t samples_held = ceil_div(in_flight_samples, data_parallel);
  const int64_t samples_per_call = ceil_div(micro_batch, data_parallel);
  const PerSample p = per_sample_bytes(graph, op_indices, options);
  const int64_t kernel_workspace = kernel_workspace_bytes_per_sample(graph, op_indices, options);
  if (!options.recompute) {
    m.activation_bytes = std::llround(p.kept * scale) * samples_held;
    m.workspace_bytes = (std::llround(p.inner_grads * scale) + kernel_workspace) * samples_per_call;
    return m;
  }
  // Recomputing: the boundary per in-flight sample, everything else once, for one micro-batch.
  const double recomputed = std::max(p.kept - p.boundary, 0.0);
  m.activation_bytes = std::llround(p.boundary * scale) * samples_held;
  m.workspace_bytes =
      (std::llround(p.inner_grads * scale) + std::llround(recomputed * scale) + kernel_workspace) *
      samples_per_call;
  return m;
}

}  // namespace gp::cost
