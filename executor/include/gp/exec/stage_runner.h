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
//
// Memory: every buffer is the device's (Device::allocate). The TensorViews handed out point at
// device memory; on a device without host memory (CUDA) the host moves data only through the
// device's copies or the download_*/upload_* methods below, and the span accessors (params(),
// op_params(), ...) are for devices with host memory only. Device work is asynchronous: errors
// of the hot paths (which return nothing) surface at synchronize().
// Not thread-safe: one runner per rank, driven by one thread.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "gp/common/status.h"
#include "gp/exec/dataset.h"
#include "gp/exec/device.h"
#include "gp/exec/op_kernel.h"
#include "gp/exec/op_timing.h"
#include "gp/exec/optimizer.h"
#include "gp/exec/stage_layout.h"
#include "gp/model/graph.h"
#include "graphpipe/v1/plan.pb.h"

namespace gp::exec {

// Device memory a stage runner holds, by what it is for (bytes, as allocated).
struct StageMemory {
  int64_t weight_bytes = 0;
  int64_t gradient_bytes = 0;   // parameter gradients
  int64_t optimizer_bytes = 0;  // optimizer state
  // Kept per in-flight slot: every tensor's values, the kernels' saved scratch and the gradients
  // of tensors crossing the stage's boundary (recomputing: only the values and gradients of the
  // tensors crossing it).
  int64_t activation_bytes = 0;
  // One copy for all slots: the gradients inside the stage and the largest kernel workspace
  // (recomputing: also the other values and the saved scratch of one micro-batch).
  int64_t workspace_bytes = 0;
  int64_t total() const {
    return weight_bytes + gradient_bytes + optimizer_bytes + activation_bytes + workspace_bytes;
  }
};

struct StageOptions {
  int64_t max_batch = 0;  // most samples per call
  int slots = 1;          // micro-batches kept between forward and backward
  graphpipe::v1::TrainingConfig training;
  const Device* device = nullptr;  // nullptr: the CPU
  // Graph inputs read this (it must cover every input op of the stage and outlive the runner);
  // nullptr: synthetic data.
  const DataSource* data = nullptr;
  // Activation recomputation (Stage.recompute): only the tensors crossing the stage's boundary
  // are kept per slot; backward() first re-runs the slot's forward into one shared copy of the
  // rest, so a slot costs its boundary tensors instead of all its activations.
  bool recompute = false;
  // ZeRO-1 (Stage.shard_optimizer): this runner is replica `shard_index` of `shard_count` and
  // keeps and steps the optimizer state of its slice of the flat parameters only, elements
  // [shard_index * c, min((shard_index + 1) * c, param_count())) with c = ceil(param_count() /
  // shard_count); every replica allocates c elements' state (the memory model's count).
  int shard_index = 0;
  int shard_count = 1;
};

class StageRunner {
 public:
  // Allocates what `layout` (from layout_stage on `graph`, which must outlive the runner)
  // describes, for options.max_batch samples in each of options.slots slots.
  static Result<std::unique_ptr<StageRunner>> create(const model::Graph& graph, StageLayout layout,
                                                     const StageOptions& options);
  // Index into external_inputs() of a tensor, or -1.
  int external_index(const graphpipe::v1::TensorRef& ref) const;
  // Index into exports() of a tensor, or -1.
  int export_index(const graphpipe::v1::TensorRef& ref) const;

  const Device& device() const { return *device_; }
  bool host_memory() const { return host_; }

  const std::vector<StageTensor>& external_inputs() const { return external_; }
  const std::vector<StageTensor>& exports() const { return exports_; }
  TensorView external_input(int slot, int index) const;
  TensorView external_input_grad(int slot, int index) const;  // data == nullptr: no gradient
  TensorView export_value(int slot, int index) const;
  TensorView export_grad(int slot, int index) const;  // data == nullptr: no gradient

  // Forward of `batch` samples; graph inputs of the stage are filled with the data (synthetic,
  // or the data source's) of samples [first_sample, first_sample + batch) of `iteration`.
  void forward(int slot, int64_t batch, int64_t iteration, int64_t first_sample);
  // A forward whose graph inputs read `data` (held-out samples) instead of the training data:
  // an evaluation. The slot then holds no micro-batch to go backward from.
  void forward_from(const DataSource& data, int slot, int64_t batch, int64_t iteration,
                    int64_t first_sample);
  // Sum over samples and loss ops of the per-sample losses of the slot's last forward.
  double loss_sum(int slot) const;
  bool has_loss() const { return !loss_ops_.empty(); }
  // Zeroes the slot's gradients of the tensors that cross the stage's boundary (received ones then
  // accumulate into them); backward() zeroes the stage's inner gradients itself.
  void begin_backward(int slot);
  // Backward; loss ops get d(objective)/d(loss_s) = loss_scale (1 / mini-batch for the mean).
  // Recomputing, it first re-runs the slot's last forward (same samples and iteration): the
  // slot's external inputs must still hold what that forward read.
  void backward(int slot, float loss_scale);
  bool recompute() const { return recompute_; }

  void zero_param_grads();
  int64_t param_count() const { return param_count_; }
  // What the runner allocated (the memory model of cost/memory_model.h predicts the same).
  const StageMemory& memory() const { return memory_; }
  // One optimizer update of every parameter (sharded: of the runner's slice only; the others'
  // weights are stale until the replicas all-gather them); `step` counts from 1.
  void optimizer_step(int64_t step);
  // ZeRO-1: whether the optimizer state is sharded, and the runner's slice of the flat
  // parameters, [begin, end) in floats (the whole [0, param_count()) when not sharded).
  bool sharded() const { return shard_count_ > 1; }
  int64_t shard_begin() const { return shard_begin_; }
  int64_t shard_end() const { return shard_end_; }
  // Zeroes the parameters outside the runner's slice (on any device), so that a sum over the
  // replicas all-gathers the updated slices: x + 0 is exact.
  void zero_params_outside_shard();
  // The flat parameters in the device's memory (for a data plane that sums device memory).
  std::span<float> param_memory() { return {weights_.f(), static_cast<size_t>(param_count_)}; }
  // The runner's optimizer state in the unsharded layout (the flat state an unsharded runner
  // holds: per parameter tensor its state floats words one after another), param_count() x
  // state floats: the elements of the runner's slice are written, the others left as they are
  // (a sum over the replicas of zero-filled buffers gathers the whole state). Any device.
  Status download_state_slice(std::span<float> full) const;
  // The sum over the stage's replicas of a host buffer, in place (the data plane's all-reduce;
  // RankRunner::bind sets it): what gather_state() needs.
  using ReplicaSum = std::function<Status(std::span<float>)>;
  void set_replica_sum(ReplicaSum sum) { replica_sum_ = std::move(sum); }
  // The whole optimizer state in the unsharded layout (see download_state_slice), on every
  // replica: a collective, each replica of the stage must call it. Not sharded: a download.
  Status gather_state(std::vector<float>& full) const;
  // Offset of an op's first parameter in the flat parameters (0 when it has none here).
  int64_t op_param_offset(int op_index) const;
  // Gradient-norm clipping (training.clip_grad_norm > 0), in two halves so that a pipeline can
  // sum every stage's part in between: this stage's sum of squared gradients (in double), then
  // the scaling by torch's clip_grad_norm_ factor once the model's total is known. `scratch`
  // holds param_count() floats; devices without host memory copy the gradients through it, and
  // it must not change between the two calls.
  double clip_grad_norm() const;
  Result<double> grad_sum_of_squares(std::span<float> scratch);
  Status clip_grads(double total_sum_of_squares, std::span<float> scratch);
  // Waits for the device's queued work: the first error since the last call of the runner's
  // copies and fills or of the device's kernels, naming what failed (always OK on the CPU).
  Status synchronize();

  // Host views, for devices with host memory only (the process aborts on another device: use the
  // copies below). Flat parameters and gradients (the data-parallel all-reduce) and one op's
  // parameters in its ParamSpec order, concatenated (empty for an op without parameters or not
  // in this stage), and its optimizer state (state floats per parameter element, same order).
  std::span<float> param_grads();
  // The flat parameter gradients in the device's memory, on any device (for a data plane that
  // reduces device memory; the host must not dereference it unless host_memory()).
  std::span<float> param_grad_memory() { return {grads_.f(), static_cast<size_t>(param_count_)}; }
  // One parameter's gradient in the device's memory (empty when the op is not in this stage).
  std::span<float> param_grad_memory(int op_index, int param_index);
  std::span<const float> params() const;
  std::span<const float> op_params(int op_index) const;
  std::span<float> mutable_op_params(int op_index);
  std::span<float> mutable_op_state(int op_index);

  // Host copies, for any device (checkpoints, the all-reduce and tests on devices without host
  // memory; on the CPU a memcpy). Sizes must match exactly: param_count() floats for the flat
  // ones, op_param_count()/op_state_count() for one op (0 when it has none here); InvalidArgument
  // naming the sizes otherwise. Downloads wait for the device.
  int64_t op_param_count(int op_index) const;
  int64_t op_state_count(int op_index) const;
  Status download_params(std::span<float> out) const;
  Status upload_params(std::span<const float> in);
  Status download_param_grads(std::span<float> out) const;
  Status upload_param_grads(std::span<const float> in);
  Status download_op_params(int op_index, std::span<float> out) const;
  Status upload_op_params(int op_index, std::span<const float> in);
  // Sharded: the download is refused (FailedPrecondition: gather the state first,
  // download_state_slice), the upload takes the unsharded op state and keeps the runner's slice.
  Status download_op_state(int op_index, std::span<float> out) const;
  Status upload_op_state(int op_index, std::span<const float> in);
  // Graph indices of the stage's ops, in execution order.
  std::vector<int> op_indices() const { return layout_.op_indices(); }
  // Measured costs and --slowdown (op_timing.h): while `clock` is active, each op's forward and
  // backward (input ops aside) and the optimizer step are timed, stretched by its slowdown and,
  // when it records, kept in its windows by the op's position in op_indices(). A device with
  // queued work is synchronized after each then. `clock` (nullptr: none) must outlive the
  // runner's use of it and have a window per op.
  void set_op_clock(OpClock* clock) { clock_ = clock; }

 private:
  struct Tensor {
    StageTensor info;
    DeviceBuffer values;  // slots x max_batch x per_sample: floats, or int64 for int tensors
    DeviceBuffer grads;   // floats, tensors that need gradients: like values when grads_per_slot,
                          // else one slot's worth shared by all slots
    bool grads_per_slot = false;  // the tensor crosses the stage's boundary
    bool values_per_slot = true;  // false: one micro-batch's values (recomputation)
    int storage = 0;              // StageLayout::Tensor::storage
  };
  struct OpState {
    int op = 0;
    std::unique_ptr<OpKernel> kernel;
    std::vector<int> inputs;            // tensor indices
    std::vector<int> outputs;           // tensor indices
    std::vector<size_t> param_offsets;  // into weights_/grads_, floats
    std::vector<size_t> param_sizes;
    DeviceBuffer saved;          // slots (1 recomputing) x max_batch x saved_floats_per_sample
    bool shares_memory = false;  // a view whose output is its input's memory: nothing to run
    // Per-call argument arrays, filled at call time without allocating.
    std::vector<TensorView> in_views, out_views, gin_views, gout_views;
    std::vector<float*> param_ptrs, grad_ptrs;
  };
  struct Range {  // floats of weights_ (times state floats for opt_state_)
    size_t offset = 0;
    size_t size = 0;
  };

  StageRunner() = default;
  // The steps of create(), in order (the buffers are allocated in the order the layout first
  // uses them).
  Status init(const model::Graph& graph, StageLayout layout, const StageOptions& options);
  Status build_ops();                   // per op: its new tensors, its kernel, its saved scratch
  Status allocate_tensors(size_t end);  // the layout's tensors up to `end` not yet allocated
  Status build_kernel(const StageLayout::Op& op);
  Status allocate_params();  // workspace, parameters, gradients, optimizer state
  Status init_params();      // deterministic initial values (init.h)
  void allocate_staging();   // host staging of devices without host memory
  void bind_boundary();      // external_inputs() and exports() from the layout
  TensorView view(const Tensor& t, int slot, bool grad) const;
  OpArgs op_args(OpState& st, int slot, int64_t batch, bool backward) const;
  // The forward pass itself (forward() records the slot's samples for a recomputation first).
  // `recorded`: a timing clock keeps the ops' times (not for a recomputation).
  void run_forward(int slot, int64_t batch, int64_t iteration, int64_t first_sample, bool recorded);
  double timed(OpClock::Clock::time_point start) const;  // see run_forward
  void apply_optimizer(int64_t step);                    // optimizer_step, untimed
  void zero_grad(int tensor, int slot);                  // one tensor's gradient, the slot's batch
  // Before op st's backward: zeroes the gradients it reads or adds into that nothing has written
  // this pass, except those its kernel overwrites, whose bits it returns (OpArgs's mask).
  uint64_t start_grads(const OpState& st, int slot);
  Range op_range(int op_index) const;
  // Every parameter tensor's part inside the runner's slice: `visit(offset, size, begin, end)`
  // with the tensor's flat [offset, offset + size) and the part's [begin, end), begin < end.
  template <typename Visit>
  void for_each_shard_piece(Visit&& visit) const;
  // Keeps the first error of the hot paths for synchronize().
  void note(const Status& s) const {
    if (!s.ok() && error_.ok()) error_ = s;
  }
  Status download(const DeviceBuffer& from, Range r, std::span<float> out, const char* what) const;
  Status upload(DeviceBuffer& to, Range r, std::span<const float> in, const char* what);

  const model::Graph* graph_ = nullptr;
  const Device* device_ = nullptr;
  bool host_ = true;  // device_->host_memory()
  int64_t max_batch_ = 0;
  int slots_ = 0;
  bool recompute_ = false;
  int shard_count_ = 1, shard_index_ = 0;
  ReplicaSum replica_sum_;
  int64_t shard_begin_ = 0, shard_end_ = 0;
  uint64_t seed_ = 0;
  const DataSource* data_ = nullptr;
  std::unique_ptr<Optimizer> optimizer_;
  std::vector<Tensor> tensors_;
  std::vector<OpState> ops_;  // topological order
  StageLayout layout_;
  std::vector<StageTensor> external_, exports_;  // layout_.external and .exported's tensors
  std::vector<int> loss_ops_;                    // into ops_
  int64_t param_count_ = 0;
  DeviceBuffer weights_, grads_, opt_state_;
  DeviceBuffer workspace_;        // max_batch x workspace_floats_
  int64_t workspace_floats_ = 0;  // per sample, the most any kernel of the stage asks for
  StageMemory memory_;
  std::vector<int64_t> last_batch_;    // per slot
  std::vector<uint8_t> grad_started_;  // per tensor: its gradient was written in this backward
  // Per slot, the iteration and first sample of its last forward (what a recomputation re-reads).
  std::vector<int64_t> last_iteration_, last_first_sample_;
  // Devices without host memory: one graph input's samples are generated here and copied over;
  // losses come back and loss gradients go out through float_staging_ (max_batch floats).
  std::vector<std::byte> input_staging_;
  mutable std::vector<float> float_staging_;
  mutable Status error_;
  OpClock* clock_ = nullptr;
};

}  // namespace gp::exec
