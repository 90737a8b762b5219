// Operator kernels: the forward and backward computation of one graph operator on a batch of
// samples. The CPU kernels (executor/src/cpu/) are the reference; accelerated backends are
// checked against them element by element.
//
// Memory contract (the executor owns every buffer; kernels allocate nothing):
// - tensors are dense, batch-major: sample s of a tensor with E elements per sample occupies
//   [s*E, (s+1)*E); float tensors are float32, id/label tensors int64;
// - forward reads `inputs` and `params`, writes `outputs` and the op's `saved` scratch
//   (saved_floats_per_sample() floats per sample, kept by the executor until backward);
// - forward and backward may use `workspace` (workspace_floats_per_sample() floats per sample)
//   during the call only: the executor shares it among the ops of a stage, so nothing in it
//   survives the call. Saved and workspace floats, with the outputs, are all the memory a kernel
//   asks for, and the op catalogue budgets both (OpCost::saved_bytes, workspace_bytes);
// - backward reads inputs, outputs, saved and `grad_outputs`, and ADDS into `grad_inputs`
//   (a tensor consumed by several ops receives the sum; an entry with data == nullptr needs no
//   gradient, e.g. a graph input) and ADDS into `param_grads` (gradient accumulation over
//   micro-batches);
// - loss ops output the per-sample loss; their grad_output is d(objective)/d(loss_s) for each
//   sample (1 / mini-batch for the mean over the mini-batch).
// Kernels are stateless after construction and may be called from any thread, one call at a time
// per instance.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "gp/common/status.h"
#include "gp/model/graph.h"

namespace gp::exec {

struct TensorView {
  void* data = nullptr;
  int64_t per_sample = 0;  // elements per sample
  float* f() const { return static_cast<float*>(data); }
  int64_t* i() const { return static_cast<int64_t*>(data); }
};

struct OpArgs {
  int64_t batch = 0;                   // samples in this call
  std::span<const TensorView> inputs;  // in the op's input order
  std::span<const TensorView> outputs;
  std::span<float* const> params;  // in the op's ParamSpec order
  float* saved = nullptr;          // saved_floats_per_sample() * batch floats
  float* workspace = nullptr;      // workspace_floats_per_sample() * batch floats
  // Backward only:
  std::span<const TensorView> grad_outputs;
  std::span<const TensorView> grad_inputs;  // accumulate; data == nullptr: not needed
  std::span<float* const> param_grads;      // accumulate
  // Bit k: grad_inputs[k] holds no gradient yet (its buffer is not zeroed) and the kernel writes
  // every element of it instead of adding; set only where overwrites_grad_input(k) says so.
  uint64_t fresh_grad_inputs = 0;
  bool fresh(size_t k) const { return k < 64 && ((fresh_grad_inputs >> k) & 1) != 0; }
};

class OpKernel {
 public:
  virtual ~OpKernel() = default;
  virtual int64_t saved_floats_per_sample() const { return 0; }
  virtual int64_t workspace_floats_per_sample() const { return 0; }
  virtual void forward(const OpArgs& args) const = 0;
  virtual void backward(const OpArgs& args) const = 0;
  // Whether backward can write grad_inputs[k] whole when args.fresh(k) (the first gradient
  // into it), which spares the runner zeroing the buffer first. Kernels that add into part of
  // it, or not at all, keep false.
  virtual bool overwrites_grad_input(size_t k) const {
    (void)k;
    return false;
  }
};

// The CPU reference kernel for a validated graph op; InvalidArgument for op types the executor
// cannot train (the message names the op).
Result<std::unique_ptr<OpKernel>> make_cpu_kernel(const model::OpNode& op);

}  // namespace gp::exec
