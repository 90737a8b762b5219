// Per-device memory of a stage: model state (weights, gradients, optimizer), activations kept
// for backward by every in-flight sample, and the largest transient per-op buffer.
#include "gp/cost/memory_model.h"

#include <algorithm>
#include <cmath>

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

}  // namespace

int64_t stage_param_bytes(const graph::Graph& graph, std::span<const int> op_indices,
                          Precision precision) {
  int64_t params = 0;
  for (int i : op_indices) params += graph.op(i).cost.param_count;
  return params * param_width(precision);
}

MemoryBreakdown stage_memory(const graph::Graph& graph, std::span<const int> op_indices,
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
  m.optimizer_bytes = params * 4 * (optimizer_words(options.optimizer) + (bf16 ? 1 : 0));

  // Float tensors are half as wide with bf16; integer ids are not, but they are a small share,
  // so all activation and workspace bytes are scaled by 0.5.
  const double scale = bf16 ? 0.5 : 1.0;
  const int64_t samples_held = ceil_div(in_flight_samples, data_parallel);
  const int64_t samples_per_call = ceil_div(micro_batch, data_parallel);
  double kept_per_sample = 0;
  double workspace_per_sample = 0;
  for (int i : op_indices) {
    const graph::OpNode& op = graph.op(i);
    kept_per_sample += op.cost.activation_bytes;
    // Transient: the forward outputs before they are kept or sent on, and in backward the
    // gradients of the outputs and of the inputs, live together for one op at a time.
    double transient = static_cast<double>(op.output_bytes);
    for (const auto& spec : op.input_specs)
      transient += static_cast<double>(graph::size_bytes(spec));
    workspace_per_sample = std::max(workspace_per_sample, transient);
  }
  m.activation_bytes = std::llround(kept_per_sample * scale * static_cast<double>(samples_held));
  m.workspace_bytes =
      std::llround(workspace_per_sample * scale * static_cast<double>(samples_per_call));
  return m;
}

}  // namespace gp::cost
