#include "gp/exec/stage_runner.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <string>

#include "device_api/backend.h"
#include "gp/exec/init.h"

namespace gp::exec {
namespace {

// Bytes per element as the runner stores them: int tensors as int64.
size_t element_bytes(const StageTensor& t) { return t.is_int ? 8 : 4; }

// `bytes` of the device's memory, zeroed (kernels and the optimizer rely on zeroed state).
Result<DeviceBuffer> zeroed(const Device& device, size_t bytes) {
  GP_ASSIGN_OR_RETURN(DeviceBuffer b, DeviceBuffer::create(device, bytes));
  GP_RETURN_IF_ERROR(device.fill_zero(b.data(), bytes));
  return b;
}

void require_host(bool host, const char* what) {
  GP_CHECK(host, std::string("StageRunner::") + what +
                     ": a host view of device memory; use the download/upload copies");
}

}  // namespace

Result<std::unique_ptr<StageRunner>> StageRunner::create(const model::Graph& graph,
                                                         StageLayout layout,
                                                         const StageOptions& options) {
  if (options.max_batch <= 0 || options.slots <= 0) {
    return invalid_argument("stage: max_batch = " + std::to_string(options.max_batch) +
                            " and slots = " + std::to_string(options.slots) + " must be positive");
  }
  auto runner = std::unique_ptr<StageRunner>(new StageRunner());
  GP_RETURN_IF_ERROR(runner->init(graph, std::move(layout), options));
  return runner;
}

Status StageRunner::init(const model::Graph& graph, StageLayout layout,
                         const StageOptions& options) {
  const Device& device = options.device != nullptr ? *options.device : cpu_device();
  graph_ = &graph;
  device_ = &device;
  host_ = device.host_memory();
  max_batch_ = options.max_batch;
  slots_ = options.slots;
  recompute_ = options.recompute;
  if (options.shard_count < 1 || options.shard_index < 0 ||
      options.shard_index >= options.shard_count) {
    return invalid_argument("stage: shard_index = " + std::to_string(options.shard_index) +
                            " of shard_count = " + std::to_string(options.shard_count) +
                            ", must be in [0, shard_count)");
  }
  shard_count_ = options.shard_count;
  shard_index_ = options.shard_index;
  seed_ = options.training.seed();
  data_ = options.data;
  layout_ = std::move(layout);
  GP_ASSIGN_OR_RETURN(Optimizer opt, Optimizer::create(options.training));
  optimizer_ = std::make_unique<Optimizer>(opt);
  last_batch_.assign(slots_, 0);
  last_iteration_.assign(slots_, 0);
  last_first_sample_.assign(slots_, 0);
  // An op the device's backend has no kernel for is refused before any buffer is allocated.
  for (const StageLayout::Op& op : layout_.ops) {
    GP_RETURN_IF_ERROR(check_kernel(device, graph.op(op.op)));
  }
  GP_RETURN_IF_ERROR(build_ops());
  GP_RETURN_IF_ERROR(allocate_tensors(layout_.tensors.size()));  // the relays
  grad_started_.assign(tensors_.size(), 0);
  GP_RETURN_IF_ERROR(allocate_params());
  GP_RETURN_IF_ERROR(init_params());
  allocate_staging();
  bind_boundary();
  return device.synchronize().with_context("stage set-up on " + std::string(device.name()));
}

Status StageRunner::build_ops() {
  for (const StageLayout::Op& op : layout_.ops) {
    // Tensors are numbered by first use: an op's outputs are the last it introduces.
    size_t end = tensors_.size();
    for (int t : op.inputs) end = std::max(end, static_cast<size_t>(t) + 1);
    for (int t : op.outputs) end = std::max(end, static_cast<size_t>(t) + 1);
    GP_RETURN_IF_ERROR(allocate_tensors(end));
    GP_RETURN_IF_ERROR(build_kernel(op));
  }
  return ok_status();
}

Status StageRunner::allocate_tensors(size_t end) {
  const Device& device = *device_;
  for (size_t i = tensors_.size(); i < end; ++i) {
    const StageLayout::Tensor& planned = layout_.tensors[i];
    Tensor t;
    t.info = planned.info;
    t.grads_per_slot = planned.grads_per_slot;
    // Recomputing, only the tensors crossing the boundary keep their values per slot; the others
    // hold the one micro-batch whose forward ran last.
    t.values_per_slot = !recompute_ || t.grads_per_slot;
    t.storage = planned.storage;
    if (t.storage != static_cast<int>(i)) {  // a view of an earlier tensor: its buffers
      tensors_.push_back(std::move(t));
      continue;
    }
    const size_t value_slots = t.values_per_slot ? static_cast<size_t>(slots_) : 1;
    const size_t n = value_slots * max_batch_ * t.info.per_sample;
    GP_ASSIGN_OR_RETURN(t.values, zeroed(device, n * element_bytes(t.info)));
    (t.values_per_slot ? memory_.activation_bytes : memory_.workspace_bytes) += t.values.bytes();
    if (t.info.needs_grad) {
      const size_t grad_slots = t.grads_per_slot ? static_cast<size_t>(slots_) : 1;
      GP_ASSIGN_OR_RETURN(
          t.grads, zeroed(device, grad_slots * max_batch_ * t.info.per_sample * sizeof(float)));
      (t.grads_per_slot ? memory_.activation_bytes : memory_.workspace_bytes) += t.grads.bytes();
    }
    tensors_.push_back(std::move(t));
  }
  return ok_status();
}

Status StageRunner::build_kernel(const StageLayout::Op& op) {
  const auto& node = graph_->op(op.op);
  OpState st;
  st.op = op.op;
  st.inputs = op.inputs;
  st.outputs = op.outputs;
  st.param_offsets = op.param_offsets;
  st.param_sizes = op.param_sizes;
  st.shares_memory = !op.outputs.empty() &&
                     layout_.tensors[static_cast<size_t>(op.outputs[0])].storage != op.outputs[0];
  GP_ASSIGN_OR_RETURN(st.kernel, device_->make_kernel(node));
  const size_t saved_slots = recompute_ ? 1 : static_cast<size_t>(slots_);
  GP_ASSIGN_OR_RETURN(
      st.saved, zeroed(*device_, saved_slots * max_batch_ * st.kernel->saved_floats_per_sample() *
                                     sizeof(float)));
  (recompute_ ? memory_.workspace_bytes : memory_.activation_bytes) += st.saved.bytes();
  workspace_floats_ = std::max(workspace_floats_, st.kernel->workspace_floats_per_sample());
  st.in_views.resize(st.inputs.size());
  st.gin_views.resize(st.inputs.size());
  st.out_views.resize(st.outputs.size());
  st.gout_views.resize(st.outputs.size());
  st.param_ptrs.resize(st.param_offsets.size());
  st.grad_ptrs.resize(st.param_offsets.size());
  if (node.info->is_loss) loss_ops_.push_back(static_cast<int>(ops_.size()));
  ops_.push_back(std::move(st));
  return ok_status();
}

Status StageRunner::allocate_params() {
  const Device& device = *device_;
  const size_t param_total = layout_.param_count;
  GP_ASSIGN_OR_RETURN(workspace_, zeroed(device, static_cast<size_t>(max_batch_) *
                                                     workspace_floats_ * sizeof(float)));
  memory_.workspace_bytes += workspace_.bytes();
  param_count_ = static_cast<int64_t>(param_total);
  // ZeRO-1: every replica allocates the rounded-up slice's state (the last may use less).
  const int64_t slice = (param_count_ + shard_count_ - 1) / shard_count_;
  shard_begin_ = std::min(param_count_, slice * shard_index_);
  shard_end_ = std::min(param_count_, shard_begin_ + slice);
  const size_t state_elements = sharded() ? static_cast<size_t>(slice) : param_total;
  GP_ASSIGN_OR_RETURN(weights_, zeroed(device, param_total * sizeof(float)));
  GP_ASSIGN_OR_RETURN(grads_, zeroed(device, param_total * sizeof(float)));
  GP_ASSIGN_OR_RETURN(
      opt_state_, zeroed(device, state_elements * static_cast<size_t>(optimizer_->state_floats()) *
                                     sizeof(float)));
  memory_.weight_bytes = weights_.bytes();
  memory_.gradient_bytes = grads_.bytes();
  memory_.optimizer_bytes = opt_state_.bytes();
  return ok_status();
}

Status StageRunner::init_params() {
  // Initial parameters are generated on the host: in place on the CPU, else staged and copied.
  const size_t param_total = layout_.param_count;
  std::vector<float> init_staging(host_ ? 0 : param_total);
  float* init = host_ ? weights_.f() : init_staging.data();
  for (auto& st : ops_) {
    const auto& node = graph_->op(st.op);
    for (size_t p = 0; p < st.param_offsets.size(); ++p) {
      // A later member of a tie starts as the tie's first member (its values or its seed).
      const auto* source = graph_->tie_source(st.op, static_cast<int>(p));
      init_param(source != nullptr ? graph_->op(source->op) : node,
                 source != nullptr ? source->param : static_cast<int>(p), seed_,
                 std::span<float>(init + st.param_offsets[p], st.param_sizes[p]));
      st.param_ptrs[p] = weights_.f() + st.param_offsets[p];
      st.grad_ptrs[p] = grads_.f() + st.param_offsets[p];
    }
  }
  if (host_) return ok_status();
  return device_->copy_from_host(weights_.data(), init_staging.data(), param_total * sizeof(float));
}

void StageRunner::allocate_staging() {
  if (host_) return;
  size_t input_bytes = 0;
  for (const auto& st : ops_) {
    if (!graph_->op(st.op).info->is_input) continue;
    const Tensor& t = tensors_[st.outputs[0]];
    input_bytes = std::max(
        input_bytes, static_cast<size_t>(max_batch_) * t.info.per_sample * element_bytes(t.info));
  }
  input_staging_.assign(input_bytes, std::byte{0});
  float_staging_.assign(static_cast<size_t>(max_batch_), 0.0f);
}

void StageRunner::bind_boundary() {
  for (int t : layout_.external) external_.push_back(tensors_[t].info);
  for (int t : layout_.exported) exports_.push_back(tensors_[t].info);
}

TensorView StageRunner::view(const Tensor& t, int slot, bool grad) const {
  const Tensor& s = tensors_[static_cast<size_t>(t.storage)];  // a view keeps its source's layout
  TensorView v;
  v.per_sample = t.info.per_sample;
  const size_t offset = static_cast<size_t>(slot) * max_batch_ * t.info.per_sample;
  if (grad) {
    v.data = t.info.needs_grad ? s.grads.f() + (t.grads_per_slot ? offset : 0) : nullptr;
  } else if (t.info.is_int) {
    v.data = static_cast<int64_t*>(s.values.data()) + (t.values_per_slot ? offset : 0);
  } else {
    v.data = s.values.f() + (t.values_per_slot ? offset : 0);
  }
  return v;
}

int StageRunner::external_index(const graphpipe::v1::TensorRef& ref) const {
  return layout_.external_index(ref);
}

int StageRunner::export_index(const graphpipe::v1::TensorRef& ref) const {
  return layout_.export_index(ref);
}

TensorView StageRunner::external_input(int slot, int index) const {
  return view(tensors_[layout_.external[index]], slot, false);
}
TensorView StageRunner::external_input_grad(int slot, int index) const {
  return view(tensors_[layout_.external[index]], slot, true);
}
TensorView StageRunner::export_value(int slot, int index) const {
  return view(tensors_[layout_.exported[index]], slot, false);
}
TensorView StageRunner::export_grad(int slot, int index) const {
  return view(tensors_[layout_.exported[index]], slot, true);
}

// Fills the op's preallocated view arrays for `slot` and points the arguments at them.
OpArgs StageRunner::op_args(OpState& st, int slot, int64_t batch, bool backward) const {
  for (size_t k = 0; k < st.inputs.size(); ++k) {
    st.in_views[k] = view(tensors_[st.inputs[k]], slot, false);
    if (backward) st.gin_views[k] = view(tensors_[st.inputs[k]], slot, true);
  }
  for (size_t k = 0; k < st.outputs.size(); ++k) {
    st.out_views[k] = view(tensors_[st.outputs[k]], slot, false);
    if (backward) st.gout_views[k] = view(tensors_[st.outputs[k]], slot, true);
  }
  OpArgs args;
  args.batch = batch;
  args.inputs = st.in_views;
  args.outputs = st.out_views;
  args.params = st.param_ptrs;
  const size_t saved_slot = recompute_ ? 0 : static_cast<size_t>(slot);
  args.saved = st.saved.f() + saved_slot * max_batch_ * st.kernel->saved_floats_per_sample();
  args.workspace = workspace_.f();
  if (backward) {
    args.grad_outputs = st.gout_views;
    args.grad_inputs = st.gin_views;
    args.param_grads = st.grad_ptrs;
  }
  return args;
}

void StageRunner::forward(int slot, int64_t batch, int64_t iteration, int64_t first_sample) {
  last_batch_[slot] = batch;
  last_iteration_[slot] = iteration;
  last_first_sample_[slot] = first_sample;
  run_forward(slot, batch, iteration, first_sample, /*recorded=*/true);
  if (clock_ != nullptr) clock_->flush();  // the slowdown is slept before the outputs leave
}

void StageRunner::forward_from(const DataSource& data, int slot, int64_t batch, int64_t iteration,
                               int64_t first_sample) {
  const DataSource* training = data_;
  data_ = &data;
  last_batch_[slot] = batch;  // what loss_sum reads
  run_forward(slot, batch, iteration, first_sample, /*recorded=*/false);
  data_ = training;
  if (clock_ != nullptr) clock_->flush();  // the slowdown is slept before the outputs leave
}

// The end of a timed interval: queued device work is waited for (its errors noted), then the
// clock stretches and returns it.
double StageRunner::timed(OpClock::Clock::time_point start) const {
  if (!host_) note(device_->synchronize());
  return clock_->finish(start);
}

void StageRunner::run_forward(int slot, int64_t batch, int64_t iteration, int64_t first_sample,
                              bool recorded) {
  const bool timing = clock_ != nullptr && clock_->active();
  for (size_t i = 0; i < ops_.size(); ++i) {
    OpState& st = ops_[i];
    const auto& node = graph_->op(st.op);
    if (node.info->is_input) {
      const TensorView v = view(tensors_[st.outputs[0]], slot, false);
      void* dst = host_ ? v.data : input_staging_.data();
      if (data_ != nullptr) {
        data_->fill(node, iteration, first_sample, batch, dst);
      } else {
        fill_input(*graph_, node, seed_, iteration, first_sample, batch, dst);
      }
      if (!host_) {
        // copy_from_host returns once the staging buffer may be reused.
        const size_t bytes =
            static_cast<size_t>(batch * v.per_sample) * element_bytes(tensors_[st.outputs[0]].info);
        note(device_->copy_from_host(v.data, input_staging_.data(), bytes));
      }
      continue;
    }
    const auto start = timing ? OpClock::Clock::now() : OpClock::Clock::time_point{};
    if (!st.shares_memory) st.kernel->forward(op_args(st, slot, batch, /*backward=*/false));
    if (timing) {
      const double us = timed(start);
      if (recorded) clock_->record(static_cast<int>(i), /*backward=*/false, us);
    }
  }
}

double StageRunner::loss_sum(int slot) const {
  double sum = 0;
  const size_t batch = static_cast<size_t>(last_batch_[slot]);
  for (int l : loss_ops_) {
    const TensorView v = view(tensors_[ops_[l].outputs[0]], slot, false);
    const float* losses = v.f();
    if (!host_) {
      // copy_to_host waits for the forward that produced them.
      const Status st = device_->copy_to_host(float_staging_.data(), v.data, batch * sizeof(float));
      note(st);
      if (!st.ok()) return 0;
      losses = float_staging_.data();
    }
    for (size_t s = 0; s < batch; ++s) sum += losses[s];
  }
  return sum;
}

// The boundary's gradients are per slot; the stage-internal ones start in backward().
void StageRunner::begin_backward(int slot) {
  for (size_t t = 0; t < tensors_.size(); ++t) {
    if (tensors_[t].info.needs_grad && tensors_[t].grads_per_slot) {
      zero_grad(static_cast<int>(t), slot);
    }
  }
}

void StageRunner::zero_grad(int tensor, int slot) {
  const Tensor& t = tensors_[static_cast<size_t>(tensor)];
  const TensorView g = view(t, slot, /*grad=*/true);
  note(device_->fill_zero(
      g.data, static_cast<size_t>(last_batch_[slot] * t.info.per_sample) * sizeof(float)));
}

uint64_t StageRunner::start_grads(const OpState& st, int slot) {
  // A stage-internal gradient nothing has written in this backward yet; it is started now.
  const auto starts = [&](int t) {
    const Tensor& tensor = tensors_[static_cast<size_t>(t)];
    uint8_t& started = grad_started_[static_cast<size_t>(tensor.storage)];
    if (!tensor.info.needs_grad || tensor.grads_per_slot || started) return false;
    started = 1;
    return true;
  };
  // A gradient read before anything wrote it (an output nothing in the stage consumed) is 0.
  for (int t : st.outputs) {
    if (starts(t)) zero_grad(t, slot);
  }
  uint64_t fresh = 0;
  for (size_t k = 0; k < st.inputs.size(); ++k) {
    const int t = st.inputs[k];
    if (!starts(t)) continue;
    // The same memory as two of the op's inputs gets two contributions: zeroed, both add.
    const int storage = tensors_[static_cast<size_t>(t)].storage;
    const bool repeated = std::count_if(st.inputs.begin(), st.inputs.end(), [&](int u) {
                            return tensors_[static_cast<size_t>(u)].storage == storage;
                          }) > 1;
    if (k < 64 && !repeated && st.kernel->overwrites_grad_input(k)) {
      fresh |= uint64_t{1} << k;
    } else {
      zero_grad(t, slot);
    }
  }
  return fresh;
}

void StageRunner::backward(int slot, float loss_scale) {
  const int64_t batch = last_batch_[slot];
  // The same inputs, data and kernels give the same values: the backward that follows sees
  // exactly what a runner keeping every slot's activations would.
  // (A recomputation is slowed like any compute, but not recorded as the ops' forward.)
  if (recompute_) {
    run_forward(slot, batch, last_iteration_[slot], last_first_sample_[slot], /*recorded=*/false);
  }
  // The gradients inside the stage are one copy for every slot: this backward's start from
  // nothing. Each is zeroed when first used, unless its first contribution writes it whole.
  std::fill(grad_started_.begin(), grad_started_.end(), uint8_t{0});
  for (int l : loss_ops_) {
    const TensorView g = view(tensors_[ops_[l].outputs[0]], slot, true);
    grad_started_[static_cast<size_t>(tensors_[ops_[l].outputs[0]].storage)] = 1;
    if (host_) {
      std::fill(g.f(), g.f() + batch, loss_scale);
    } else {
      std::fill(float_staging_.begin(), float_staging_.begin() + batch, loss_scale);
      note(device_->copy_from_host(g.data, float_staging_.data(),
                                   static_cast<size_t>(batch) * sizeof(float)));
    }
  }
  const bool timing = clock_ != nullptr && clock_->active();
  for (size_t i = ops_.size(); i-- > 0;) {
    OpState& st = ops_[i];
    if (graph_->op(st.op).info->is_input) continue;
    // A view's gradient is already its input's: nothing is started or added.
    OpArgs args;
    if (!st.shares_memory) {
      args = op_args(st, slot, batch, /*backward=*/true);
      args.fresh_grad_inputs = start_grads(st, slot);
    }
    const auto start = timing ? OpClock::Clock::now() : OpClock::Clock::time_point{};
    if (!st.shares_memory) st.kernel->backward(args);
    if (timing) clock_->record(static_cast<int>(i), /*backward=*/true, timed(start));
  }
  if (clock_ != nullptr) clock_->flush();
}

void StageRunner::zero_param_grads() {
  note(device_->fill_zero(grads_.data(), static_cast<size_t>(param_count_) * sizeof(float)));
}

template <typename Visit>
void StageRunner::for_each_shard_piece(Visit&& visit) const {
  for (const auto& st : ops_) {
    for (size_t p = 0; p < st.param_offsets.size(); ++p) {
      const int64_t off = static_cast<int64_t>(st.param_offsets[p]);
      const int64_t n = static_cast<int64_t>(st.param_sizes[p]);
      const int64_t begin = std::max(off, shard_begin_), end = std::min(off + n, shard_end_);
      if (begin < end) visit(off, n, begin, end);
    }
  }
}

void StageRunner::optimizer_step(int64_t step) {
  if (clock_ != nullptr && clock_->slowdown() != 1.0) {
    // Stretched like the ops (not recorded: the profile has no optimizer record).
    const auto start = OpClock::Clock::now();
    apply_optimizer(step);
    (void)timed(start);
    clock_->flush();
    return;
  }
  apply_optimizer(step);
}

void StageRunner::apply_optimizer(int64_t step) {
  const size_t per = static_cast<size_t>(optimizer_->state_floats());
  if (sharded()) {
    // The updates are element-wise, so stepping a tensor's part with the part's state (its words
    // one after another, as apply() reads them) is bit for bit the unsharded step of it.
    for_each_shard_piece([&](int64_t, int64_t, int64_t begin, int64_t end) {
      device_->apply_optimizer(*optimizer_, weights_.f() + begin, grads_.f() + begin,
                               opt_state_.f() + static_cast<size_t>(begin - shard_begin_) * per,
                               end - begin, step);
    });
    return;
  }
  for (const auto& st : ops_) {
    for (size_t p = 0; p < st.param_offsets.size(); ++p) {
      const size_t off = st.param_offsets[p], n = st.param_sizes[p];
      device_->apply_optimizer(*optimizer_, weights_.f() + off, grads_.f() + off,
                               opt_state_.f() + off * per, static_cast<int64_t>(n), step);
    }
  }
}

void StageRunner::zero_params_outside_shard() {
  if (!sharded()) return;
  note(device_->fill_zero(weights_.f(), static_cast<size_t>(shard_begin_) * sizeof(float)));
  note(device_->fill_zero(weights_.f() + shard_end_,
                          static_cast<size_t>(param_count_ - shard_end_) * sizeof(float)));
}

Status StageRunner::download_state_slice(std::span<float> full) const {
  const size_t per = static_cast<size_t>(optimizer_->state_floats());
  if (full.size() != static_cast<size_t>(param_count_) * per) {
    return invalid_argument("download_state_slice: a host buffer of " +
                            std::to_string(full.size()) + " floats for " +
                            std::to_string(static_cast<size_t>(param_count_) * per));
  }
  if (per == 0) return ok_status();
  if (!sharded()) return download(opt_state_, {0, full.size()}, full, "download_state_slice");
  std::vector<float> slice(static_cast<size_t>(shard_end_ - shard_begin_) * per);
  GP_RETURN_IF_ERROR(download(opt_state_, {0, slice.size()}, slice, "download_state_slice"));
  for_each_shard_piece([&](int64_t off, int64_t n, int64_t begin, int64_t end) {
    const int64_t k = end - begin;
    const float* from = slice.data() + (begin - shard_begin_) * static_cast<int64_t>(per);
    for (size_t w = 0; w < per; ++w) {
      std::copy(from + w * k, from + (w + 1) * k,
                full.data() + off * static_cast<int64_t>(per) + w * n + (begin - off));
    }
  });
  return ok_status();
}

Status StageRunner::gather_state(std::vector<float>& full) const {
  full.assign(static_cast<size_t>(param_count_) * optimizer_->state_floats(), 0.0f);
  GP_RETURN_IF_ERROR(download_state_slice(full));
  if (!sharded() || full.empty()) return ok_status();
  if (!replica_sum_) {
    return failed_precondition("gather_state: the optimizer state is sharded over " +
                               std::to_string(shard_count_) +
                               " replicas and no data plane is bound to gather it");
  }
  // Each replica's buffer holds its slice and zeros: the sum is every slice, exactly.
  return replica_sum_(full);
}

int64_t StageRunner::op_param_offset(int op_index) const {
  return static_cast<int64_t>(op_range(op_index).offset);
}

double StageRunner::clip_grad_norm() const { return optimizer_->config().clip_grad_norm(); }

Result<double> StageRunner::grad_sum_of_squares(std::span<float> scratch) {
  if (!host_) GP_RETURN_IF_ERROR(download_param_grads(scratch));
  const std::span<const float> g = host_ ? param_grads() : scratch;
  double sum = 0;
  for (float v : g) sum += static_cast<double>(v) * v;
  return sum;
}

Status StageRunner::clip_grads(double total_sum_of_squares, std::span<float> scratch) {
  // torch.nn.utils.clip_grad_norm_: max_norm / (norm + 1e-6), applied only when below 1.
  const double factor = clip_grad_norm() / (std::sqrt(total_sum_of_squares) + 1e-6);
  if (!(factor < 1)) return ok_status();
  const float f = static_cast<float>(factor);
  for (float& v : host_ ? param_grads() : scratch) v *= f;
  return host_ ? ok_status() : upload_param_grads(scratch);
}

Status StageRunner::synchronize() {
  Status device_status = device_->synchronize();
  Status first = std::move(error_);
  error_ = Status();
  if (!first.ok()) return first;
  return device_status;
}

std::span<float> StageRunner::param_grad_memory(int op_index, int param_index) {
  for (const auto& st : ops_) {
    if (st.op != op_index || param_index < 0 ||
        static_cast<size_t>(param_index) >= st.param_offsets.size()) {
      continue;
    }
    return {grads_.f() + st.param_offsets[param_index], st.param_sizes[param_index]};
  }
  return {};
}

std::span<float> StageRunner::param_grads() {
  require_host(host_, "param_grads");
  return {grads_.f(), static_cast<size_t>(param_count_)};
}

std::span<const float> StageRunner::params() const {
  require_host(host_, "params");
  return {weights_.f(), static_cast<size_t>(param_count_)};
}

StageRunner::Range StageRunner::op_range(int op_index) const {
  for (const auto& st : ops_) {
    if (st.op != op_index || st.param_offsets.empty()) continue;
    Range r;
    r.offset = st.param_offsets[0];
    for (size_t s : st.param_sizes) r.size += s;
    return r;
  }
  return {};
}

std::span<const float> StageRunner::op_params(int op_index) const {
  return const_cast<StageRunner*>(this)->mutable_op_params(op_index);
}

std::span<float> StageRunner::mutable_op_params(int op_index) {
  require_host(host_, "op_params");
  const Range r = op_range(op_index);
  if (r.size == 0) return {};
  return {weights_.f() + r.offset, r.size};
}

std::span<float> StageRunner::mutable_op_state(int op_index) {
  require_host(host_, "mutable_op_state");
  GP_CHECK(!sharded(), "StageRunner::mutable_op_state: the optimizer state is sharded");
  const size_t per = static_cast<size_t>(optimizer_->state_floats());
  const Range r = op_range(op_index);
  if (r.size == 0 || per == 0) return {};
  return {opt_state_.f() + r.offset * per, r.size * per};
}

int64_t StageRunner::op_param_count(int op_index) const {
  return static_cast<int64_t>(op_range(op_index).size);
}

int64_t StageRunner::op_state_count(int op_index) const {
  return op_param_count(op_index) * optimizer_->state_floats();
}

Status StageRunner::download(const DeviceBuffer& from, Range r, std::span<float> out,
                             const char* what) const {
  if (out.size() != r.size) {
    return invalid_argument(std::string(what) + ": a host buffer of " + std::to_string(out.size()) +
                            " floats for " + std::to_string(r.size));
  }
  return device_->copy_to_host(out.data(), from.f() + r.offset, r.size * sizeof(float));
}

Status StageRunner::upload(DeviceBuffer& to, Range r, std::span<const float> in, const char* what) {
  if (in.size() != r.size) {
    return invalid_argument(std::string(what) + ": " + std::to_string(in.size()) +
                            " floats given for " + std::to_string(r.size));
  }
  return device_->copy_from_host(to.f() + r.offset, in.data(), r.size * sizeof(float));
}

Status StageRunner::download_params(std::span<float> out) const {
  return download(weights_, {0, static_cast<size_t>(param_count_)}, out, "download_params");
}

Status StageRunner::upload_params(std::span<const float> in) {
  return upload(weights_, {0, static_cast<size_t>(param_count_)}, in, "upload_params");
}

Status StageRunner::download_param_grads(std::span<float> out) const {
  return download(grads_, {0, static_cast<size_t>(param_count_)}, out, "download_param_grads");
}

Status StageRunner::upload_param_grads(std::span<const float> in) {
  return upload(grads_, {0, static_cast<size_t>(param_count_)}, in, "upload_param_grads");
}

Status StageRunner::download_op_params(int op_index, std::span<float> out) const {
  return download(weights_, op_range(op_index), out, "download_op_params");
}

Status StageRunner::upload_op_params(int op_index, std::span<const float> in) {
  return upload(weights_, op_range(op_index), in, "upload_op_params");
}

Status StageRunner::download_op_state(int op_index, std::span<float> out) const {
  if (sharded()) {
    return failed_precondition("download_op_state: the optimizer state is sharded over " +
                               std::to_string(shard_count_) +
                               " replicas; gather it (download_state_slice on each, summed) first");
  }
  const size_t per = static_cast<size_t>(optimizer_->state_floats());
  const Range r = op_range(op_index);
  return download(opt_state_, {r.offset * per, r.size * per}, out, "download_op_state");
}

Status StageRunner::upload_op_state(int op_index, std::span<const float> in) {
  const size_t per = static_cast<size_t>(optimizer_->state_floats());
  const Range r = op_range(op_index);
  if (!sharded()) return upload(opt_state_, {r.offset * per, r.size * per}, in, "upload_op_state");
  if (in.size() != r.size * per) {
    return invalid_argument("upload_op_state: " + std::to_string(in.size()) + " floats given for " +
                            std::to_string(r.size * per));
  }
  // The unsharded op state: keep the words of the elements in this runner's slice.
  const int64_t op_begin = static_cast<int64_t>(r.offset);
  const int64_t op_end = op_begin + static_cast<int64_t>(r.size);
  Status st;
  for_each_shard_piece([&](int64_t off, int64_t n, int64_t begin, int64_t end) {
    if (off < op_begin || off >= op_end || !st.ok()) return;
    const int64_t k = end - begin;
    for (size_t w = 0; w < per && st.ok(); ++w) {
      const float* from =
          in.data() + (off - op_begin) * static_cast<int64_t>(per) + w * n + (begin - off);
      st = device_->copy_from_host(
          opt_state_.f() + (begin - shard_begin_) * static_cast<int64_t>(per) + w * k, from,
          static_cast<size_t>(k) * sizeof(float));
    }
  });
  return st;
}

}  // namespace gp::exec
