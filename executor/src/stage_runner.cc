#include "gp/exec/stage_runner.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <map>
#include <set>
#include <string>

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

Result<std::unique_ptr<StageRunner>> StageRunner::create(
    const graph::Graph& graph, std::vector<int> ops, std::vector<graphpipe::v1::TensorRef> exports,
    int64_t max_batch, int slots, const graphpipe::v1::TrainingConfig& training,
    std::vector<graphpipe::v1::TensorRef> relays, const Device& device) {
  if (ops.empty()) return invalid_argument("stage: no operators");
  if (max_batch <= 0 || slots <= 0) {
    return invalid_argument("stage: max_batch = " + std::to_string(max_batch) +
                            " and slots = " + std::to_string(slots) + " must be positive");
  }
  std::vector<int> position(graph.num_ops());
  for (int i = 0; i < graph.num_ops(); ++i) position[graph.topo_order()[i]] = i;
  std::vector<char> in_stage(graph.num_ops(), 0);
  for (int op : ops) {
    if (op < 0 || op >= graph.num_ops() || in_stage[op]) {
      return invalid_argument("stage: op index " + std::to_string(op) + " invalid or repeated");
    }
    in_stage[op] = 1;
  }
  std::sort(ops.begin(), ops.end(), [&](int a, int b) { return position[a] < position[b]; });

  auto runner = std::unique_ptr<StageRunner>(new StageRunner());
  StageRunner& r = *runner;
  r.graph_ = &graph;
  r.device_ = &device;
  r.host_ = device.host_memory();
  r.max_batch_ = max_batch;
  r.slots_ = slots;
  r.seed_ = training.seed();
  GP_ASSIGN_OR_RETURN(Optimizer opt, Optimizer::create(training));
  r.optimizer_ = std::make_unique<Optimizer>(opt);
  r.last_batch_.assign(slots, 0);

  // Gradients of tensors that cross the stage's boundary (received or sent) are kept per slot, as
  // they wait for the data plane; the others live only inside one backward, so one copy serves
  // every slot.
  std::set<std::pair<std::string, int>> crossing;
  for (const auto& ref : exports) crossing.insert({ref.op(), ref.output()});
  for (const auto& ref : relays) crossing.insert({ref.op(), ref.output()});
  std::map<std::pair<std::string, int>, int> tensor_of;
  auto add_tensor = [&](const graphpipe::v1::TensorRef& ref) -> Result<int> {
    const auto key = std::make_pair(ref.op(), ref.output());
    if (auto it = tensor_of.find(key); it != tensor_of.end()) return it->second;
    const auto& producer = graph.op(graph.index_of(ref.op()));
    const auto& spec = producer.proto->outputs(ref.output());
    Tensor t;
    t.info.ref = ref;
    t.info.per_sample = graph::num_elements(spec);
    t.info.is_int = graph::is_integer(spec);
    t.info.needs_grad = !t.info.is_int && !producer.info->is_input;
    t.grads_per_slot = !in_stage[graph.index_of(ref.op())] || crossing.count(key) > 0;
    const size_t n = static_cast<size_t>(slots) * max_batch * t.info.per_sample;
    auto values = zeroed(device, n * element_bytes(t.info));
    if (!values.ok()) return values.status();
    t.values = std::move(values).value();
    r.memory_.activation_bytes += t.values.bytes();
    if (t.info.needs_grad) {
      const size_t grad_slots = t.grads_per_slot ? static_cast<size_t>(slots) : 1;
      auto grads = zeroed(device, grad_slots * max_batch * t.info.per_sample * sizeof(float));
      if (!grads.ok()) return grads.status();
      t.grads = std::move(grads).value();
      (t.grads_per_slot ? r.memory_.activation_bytes : r.memory_.workspace_bytes) +=
          t.grads.bytes();
    }
    r.tensors_.push_back(std::move(t));
    const int index = static_cast<int>(r.tensors_.size()) - 1;
    tensor_of[key] = index;
    if (!in_stage[graph.index_of(ref.op())]) {
      r.external_index_.push_back(index);
      r.external_.push_back(r.tensors_[index].info);
    }
    return index;
  };

  size_t param_total = 0;
  int64_t workspace_floats = 0;  // per sample, the most any kernel of the stage asks for
  for (int op : ops) {
    const auto& node = graph.op(op);
    OpState st;
    st.op = op;
    for (const auto& ref : node.proto->inputs()) {
      GP_ASSIGN_OR_RETURN(const int t, add_tensor(ref));
      st.inputs.push_back(t);
    }
    for (int k = 0; k < node.proto->outputs_size(); ++k) {
      graphpipe::v1::TensorRef ref;
      ref.set_op(node.id());
      ref.set_output(k);
      GP_ASSIGN_OR_RETURN(const int t, add_tensor(ref));
      st.outputs.push_back(t);
    }
    for (const auto& p : node.proto->params()) {
      size_t n = 1;
      for (int64_t d : p.shape()) n *= static_cast<size_t>(d);
      st.param_offsets.push_back(param_total);
      st.param_sizes.push_back(n);
      param_total += n;
    }
    auto kernel = device.make_kernel(node);
    if (!kernel.ok()) return kernel.status();
    st.kernel = std::move(kernel).value();
    GP_ASSIGN_OR_RETURN(st.saved,
                        zeroed(device, static_cast<size_t>(slots) * max_batch *
                                           st.kernel->saved_floats_per_sample() * sizeof(float)));
    r.memory_.activation_bytes += st.saved.bytes();
    workspace_floats = std::max(workspace_floats, st.kernel->workspace_floats_per_sample());
    st.in_views.resize(st.inputs.size());
    st.gin_views.resize(st.inputs.size());
    st.out_views.resize(st.outputs.size());
    st.gout_views.resize(st.outputs.size());
    st.param_ptrs.resize(st.param_offsets.size());
    st.grad_ptrs.resize(st.param_offsets.size());
    if (node.info->is_loss) r.loss_ops_.push_back(static_cast<int>(r.ops_.size()));
    r.ops_.push_back(std::move(st));
  }
  for (const auto& ref : relays) {
    const int producer = graph.index_of(ref.op());
    if (producer < 0 || in_stage[producer] || ref.output() < 0 ||
        ref.output() >= graph.op(producer).proto->outputs_size()) {
      return invalid_argument("stage: relay '" + ref.op() + "':" + std::to_string(ref.output()) +
                              " is not a tensor produced outside the stage");
    }
    GP_RETURN_IF_ERROR(add_tensor(ref).status());
  }
  GP_ASSIGN_OR_RETURN(r.workspace_, zeroed(device, static_cast<size_t>(max_batch) *
                                                       workspace_floats * sizeof(float)));
  r.memory_.workspace_bytes += r.workspace_.bytes();
  r.param_count_ = static_cast<int64_t>(param_total);
  GP_ASSIGN_OR_RETURN(r.weights_, zeroed(device, param_total * sizeof(float)));
  GP_ASSIGN_OR_RETURN(r.grads_, zeroed(device, param_total * sizeof(float)));
  GP_ASSIGN_OR_RETURN(
      r.opt_state_, zeroed(device, param_total * static_cast<size_t>(r.optimizer_->state_floats()) *
                                       sizeof(float)));
  r.memory_.weight_bytes = r.weights_.bytes();
  r.memory_.gradient_bytes = r.grads_.bytes();
  r.memory_.optimizer_bytes = r.opt_state_.bytes();
  // Initial parameters are generated on the host: in place on the CPU, else staged and copied.
  std::vector<float> init_staging(r.host_ ? 0 : param_total);
  float* init = r.host_ ? r.weights_.f() : init_staging.data();
  for (auto& st : r.ops_) {
    const auto& node = graph.op(st.op);
    for (size_t p = 0; p < st.param_offsets.size(); ++p) {
      init_param(node, static_cast<int>(p), r.seed_,
                 std::span<float>(init + st.param_offsets[p], st.param_sizes[p]));
      st.param_ptrs[p] = r.weights_.f() + st.param_offsets[p];
      st.grad_ptrs[p] = r.grads_.f() + st.param_offsets[p];
    }
  }
  if (!r.host_) {
    GP_RETURN_IF_ERROR(
        device.copy_from_host(r.weights_.data(), init_staging.data(), param_total * sizeof(float)));
    size_t input_bytes = 0;
    for (const auto& st : r.ops_) {
      if (!graph.op(st.op).info->is_input) continue;
      const Tensor& t = r.tensors_[st.outputs[0]];
      input_bytes = std::max(
          input_bytes, static_cast<size_t>(max_batch) * t.info.per_sample * element_bytes(t.info));
    }
    r.input_staging_.assign(input_bytes, std::byte{0});
    r.float_staging_.assign(static_cast<size_t>(max_batch), 0.0f);
  }
  for (const auto& ref : exports) {
    const int producer = graph.index_of(ref.op());
    auto it = tensor_of.find({ref.op(), ref.output()});
    if (producer < 0 || !in_stage[producer] || it == tensor_of.end()) {
      return invalid_argument("stage: export '" + ref.op() + "':" + std::to_string(ref.output()) +
                              " is not produced by the stage");
    }
    r.export_index_.push_back(it->second);
    r.exports_.push_back(r.tensors_[it->second].info);
  }
  GP_RETURN_IF_ERROR(
      device.synchronize().with_context("stage set-up on " + std::string(device.name())));
  return runner;
}

TensorView StageRunner::view(const Tensor& t, int slot, bool grad) const {
  TensorView v;
  v.per_sample = t.info.per_sample;
  const size_t offset = static_cast<size_t>(slot) * max_batch_ * t.info.per_sample;
  if (grad) {
    v.data = t.info.needs_grad ? t.grads.f() + (t.grads_per_slot ? offset : 0) : nullptr;
  } else if (t.info.is_int) {
    v.data = static_cast<int64_t*>(t.values.data()) + offset;
  } else {
    v.data = t.values.f() + offset;
  }
  return v;
}

int StageRunner::external_index(const graphpipe::v1::TensorRef& ref) const {
  for (size_t k = 0; k < external_.size(); ++k) {
    if (external_[k].ref.op() == ref.op() && external_[k].ref.output() == ref.output()) {
      return static_cast<int>(k);
    }
  }
  return -1;
}

int StageRunner::export_index(const graphpipe::v1::TensorRef& ref) const {
  for (size_t k = 0; k < exports_.size(); ++k) {
    if (exports_[k].ref.op() == ref.op() && exports_[k].ref.output() == ref.output()) {
      return static_cast<int>(k);
    }
  }
  return -1;
}

TensorView StageRunner::external_input(int slot, int index) const {
  return view(tensors_[external_index_[index]], slot, false);
}
TensorView StageRunner::external_input_grad(int slot, int index) const {
  return view(tensors_[external_index_[index]], slot, true);
}
TensorView StageRunner::export_value(int slot, int index) const {
  return view(tensors_[export_index_[index]], slot, false);
}
TensorView StageRunner::export_grad(int slot, int index) const {
  return view(tensors_[export_index_[index]], slot, true);
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
  args.saved =
      st.saved.f() + static_cast<size_t>(slot) * max_batch_ * st.kernel->saved_floats_per_sample();
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
  for (auto& st : ops_) {
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
    st.kernel->forward(op_args(st, slot, batch, /*backward=*/false));
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

void StageRunner::zero_grads(int slot, bool per_slot) {
  const int64_t batch = last_batch_[slot];
  for (auto& t : tensors_) {
    if (!t.info.needs_grad || t.grads_per_slot != per_slot) continue;
    const TensorView g = view(t, slot, /*grad=*/true);
    note(
        device_->fill_zero(g.data, static_cast<size_t>(batch * t.info.per_sample) * sizeof(float)));
  }
}

void StageRunner::begin_backward(int slot) { zero_grads(slot, /*per_slot=*/true); }

void StageRunner::backward(int slot, float loss_scale) {
  const int64_t batch = last_batch_[slot];
  // The gradients inside the stage are one copy for every slot: this backward's start from zero.
  zero_grads(slot, /*per_slot=*/false);
  for (int l : loss_ops_) {
    const TensorView g = view(tensors_[ops_[l].outputs[0]], slot, true);
    if (host_) {
      std::fill(g.f(), g.f() + batch, loss_scale);
    } else {
      std::fill(float_staging_.begin(), float_staging_.begin() + batch, loss_scale);
      note(device_->copy_from_host(g.data, float_staging_.data(),
                                   static_cast<size_t>(batch) * sizeof(float)));
    }
  }
  for (auto it = ops_.rbegin(); it != ops_.rend(); ++it) {
    OpState& st = *it;
    if (graph_->op(st.op).info->is_input) continue;
    st.kernel->backward(op_args(st, slot, batch, /*backward=*/true));
  }
}

void StageRunner::zero_param_grads() {
  note(device_->fill_zero(grads_.data(), static_cast<size_t>(param_count_) * sizeof(float)));
}

void StageRunner::optimizer_step(int64_t step) {
  const size_t per = static_cast<size_t>(optimizer_->state_floats());
  for (const auto& st : ops_) {
    for (size_t p = 0; p < st.param_offsets.size(); ++p) {
      const size_t off = st.param_offsets[p], n = st.param_sizes[p];
      device_->apply_optimizer(*optimizer_, weights_.f() + off, grads_.f() + off,
                               opt_state_.f() + off * per, static_cast<int64_t>(n), step);
    }
  }
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
  const size_t per = static_cast<size_t>(optimizer_->state_floats());
  const Range r = op_range(op_index);
  return download(opt_state_, {r.offset * per, r.size * per}, out, "download_op_state");
}

Status StageRunner::upload_op_state(int op_index, std::span<const float> in) {
  const size_t per = static_cast<size_t>(optimizer_->state_floats());
  const Range r = op_range(op_index);
  return upload(opt_state_, {r.offset * per, r.size * per}, in, "upload_op_state");
}

std::vector<int> StageRunner::op_indices() const {
  std::vector<int> out;
  for (const auto& st : ops_) out.push_back(st.op);
  return out;
}

}  // namespace gp::exec
