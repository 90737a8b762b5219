// Runs the operators of one stage (or of the whole model) forward and backward on micro-batches,
// owning every buffer they need: parameters, gradients, optimizer state, and per in-flight slot
// the activations, gradients and saved scratch. All buffers are sized at creation; forward,
// backward and the optimizer step allocate nothing.
//
// Tensors that enter the stage from other stages ("external inputs") and tensors that leave it
// ("exports") are exposed per slot so that a data plane can receive into and send from them:
//   forward:  write external inputs -> forward(slot) -> read exports
//   backward: begin_backward(slot) -> add received gradients into export gradients
//             -> backward(slot) -> read external-input gradients
// Not thread-safe: one runner per rank, driven by one thread.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "gp/common/status.h"
#include "gp/exec/device.h"
#include "gp/exec/op_kernel.h"
#include "gp/exec/optimizer.h"
#include "gp/graph/graph.h"
#include "graphpipe/v1/plan.pb.h"

namespace gp::exec {

struct StageTensor {
  graphpipe::v1::TensorRef ref;
  int64_t per_sample = 0;   // elements
  bool is_int = false;      // int64 ids or labels
  bool needs_grad = false;  // a float output of a non-input op
};

class StageRunner {
 public:
  // `ops`: graph op indices of the stage. `max_batch`: most samples per call. `slots`: micro-
  // batches kept between forward and backward. `exports`: tensors produced here that other
  // stages consume (outputs of these ops). `relays`: tensors produced elsewhere that only pass
  // through (chain pipelines); they are held like external inputs without being consumed.
  static Result<std::unique_ptr<StageRunner>> create(
      const graph::Graph& graph, std::vector<int> ops,
      std::vector<graphpipe::v1::TensorRef> exports, int64_t max_batch, int slots,
      const graphpipe::v1::TrainingConfig& training,
      std::vector<graphpipe::v1::TensorRef> relays = {}, const Device& device = cpu_device());
  // Index into external_inputs() of a tensor, or -1.
  int external_index(const graphpipe::v1::TensorRef& ref) const;
  // Index into exports() of a tensor, or -1.
  int export_index(const graphpipe::v1::TensorRef& ref) const;

  const std::vector<StageTensor>& external_inputs() const { return external_; }
  const std::vector<StageTensor>& exports() const { return exports_; }
  TensorView external_input(int slot, int index) const;
  TensorView external_input_grad(int slot, int index) const;  // data == nullptr: no gradient
  TensorView export_value(int slot, int index) const;
  TensorView export_grad(int slot, int index) const;  // data == nullptr: no gradient

  // Forward of `batch` samples; graph inputs of the stage are filled with the synthetic data of
  // samples [first_sample, first_sample + batch) of `iteration`.
  void forward(int slot, int64_t batch, int64_t iteration, int64_t first_sample);
  // Sum over samples and loss ops of the per-sample losses of the slot's last forward.
  double loss_sum(int slot) const;
  bool has_loss() const { return !loss_ops_.empty(); }
  // Zeroes the slot's activation gradients (gradients then accumulate).
  void begin_backward(int slot);
  // Backward; loss ops get d(objective)/d(loss_s) = loss_scale (1 / mini-batch for the mean).
  void backward(int slot, float loss_scale);

  void zero_param_grads();
  std::span<float> param_grads() { return grads_; }  // flat, for the data-parallel all-reduce
  std::span<const float> params() const { return weights_; }
  int64_t param_count() const { return static_cast<int64_t>(weights_.size()); }
  // One optimizer update of every parameter; `step` counts from 1.
  void optimizer_step(int64_t step);
  // Parameters of one op, in its ParamSpec order, concatenated (tests, checkpoints); empty for
  // an op without parameters or not in this stage.
  std::span<const float> op_params(int op_index) const;
  std::span<float> mutable_op_params(int op_index);
  // The op's optimizer state: optimizer state floats per parameter element, same order.
  std::span<float> mutable_op_state(int op_index);
  // Graph indices of the stage's ops, in execution order.
  std::vector<int> op_indices() const;

 private:
  struct Tensor {
    StageTensor info;
    std::vector<float> values;  // slots x max_batch x per_sample (float tensors)
    std::vector<int64_t> ids;   // same layout, int tensors
    std::vector<float> grads;   // float tensors that need gradients
  };
  struct OpState {
    int op = 0;
    std::unique_ptr<OpKernel> kernel;
    std::vector<int> inputs;            // tensor indices
    std::vector<int> outputs;           // tensor indices
    std::vector<size_t> param_offsets;  // into weights_/grads_
    std::vector<size_t> param_sizes;
    std::vector<float> saved;  // slots x max_batch x saved_floats_per_sample
    // Per-call argument arrays, filled at call time without allocating.
    std::vector<TensorView> in_views, out_views, gin_views, gout_views;
    std::vector<float*> param_ptrs, grad_ptrs;
  };

  StageRunner() = default;
  TensorView view(const Tensor& t, int slot, bool grad) const;
  OpArgs op_args(OpState& st, int slot, int64_t batch, bool backward) const;

  const graph::Graph* graph_ = nullptr;
  int64_t max_batch_ = 0;
  int slots_ = 0;
  uint64_t seed_ = 0;
  std::unique_ptr<Optimizer> optimizer_;
  std::vector<Tensor> tensors_;
  std::vector<OpState> ops_;                        // topological order
  std::vector<int> external_index_, export_index_;  // into tensors_
  std::vector<StageTensor> external_, exports_;
  std::vector<int> loss_ops_;  // into ops_
  std::vector<float> weights_, grads_, opt_state_;
  std::vector<int64_t> last_batch_;  // per slot
};

}  // namespace gp::exec
