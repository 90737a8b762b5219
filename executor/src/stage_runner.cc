#include "gp/exec/stage_runner.h"

#include <algorithm>
#include <map>
#include <string>

#include "gp/exec/init.h"

namespace gp::exec {
namespace {

bool is_int_spec(const graph::TensorSpec& spec) {
  return spec.dtype() == graphpipe::v1::DATA_TYPE_INT64 ||
         spec.dtype() == graphpipe::v1::DATA_TYPE_INT32;
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
  r.max_batch_ = max_batch;
  r.slots_ = slots;
  r.seed_ = training.seed();
  GP_ASSIGN_OR_RETURN(Optimizer opt, Optimizer::create(training));
  r.optimizer_ = std::make_unique<Optimizer>(opt);
  r.last_batch_.assign(slots, 0);

  std::map<std::pair<std::string, int>, int> tensor_of;
  auto add_tensor = [&](const graphpipe::v1::TensorRef& ref) {
    const auto key = std::make_pair(ref.op(), ref.output());
    if (auto it = tensor_of.find(key); it != tensor_of.end()) return it->second;
    const auto& producer = graph.op(graph.index_of(ref.op()));
    const auto& spec = producer.proto->outputs(ref.output());
    Tensor t;
    t.info.ref = ref;
    t.info.per_sample = graph::num_elements(spec);
    t.info.is_int = is_int_spec(spec);
    t.info.needs_grad = !t.info.is_int && !producer.info->is_input;
    const size_t n = static_cast<size_t>(slots) * max_batch * t.info.per_sample;
    if (t.info.is_int) {
      t.ids.assign(n, 0);
    } else {
      t.values.assign(n, 0.0f);
    }
    if (t.info.needs_grad) t.grads.assign(n, 0.0f);
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
  for (int op : ops) {
    const auto& node = graph.op(op);
    OpState st;
    st.op = op;
    for (const auto& ref : node.proto->inputs()) st.inputs.push_back(add_tensor(ref));
    for (int k = 0; k < node.proto->outputs_size(); ++k) {
      graphpipe::v1::TensorRef ref;
      ref.set_op(node.id());
      ref.set_output(k);
      st.outputs.push_back(add_tensor(ref));
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
    st.saved.assign(static_cast<size_t>(slots) * max_batch * st.kernel->saved_floats_per_sample(),
                    0.0f);
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
    add_tensor(ref);
  }
  r.weights_.assign(param_total, 0.0f);
  r.grads_.assign(param_total, 0.0f);
  r.opt_state_.assign(param_total * static_cast<size_t>(r.optimizer_->state_floats()), 0.0f);
  for (auto& st : r.ops_) {
    const auto& node = graph.op(st.op);
    for (size_t p = 0; p < st.param_offsets.size(); ++p) {
      init_param(node, static_cast<int>(p), r.seed_,
                 std::span<float>(r.weights_.data() + st.param_offsets[p], st.param_sizes[p]));
      st.param_ptrs[p] = r.weights_.data() + st.param_offsets[p];
      st.grad_ptrs[p] = r.grads_.data() + st.param_offsets[p];
    }
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
  return runner;
}

TensorView StageRunner::view(const Tensor& t, int slot, bool grad) const {
  TensorView v;
  v.per_sample = t.info.per_sample;
  const size_t offset = static_cast<size_t>(slot) * max_batch_ * t.info.per_sample;
  if (grad) {
    v.data = t.info.needs_grad ? const_cast<float*>(t.grads.data()) + offset : nullptr;
  } else if (t.info.is_int) {
    v.data = const_cast<int64_t*>(t.ids.data()) + offset;
  } else {
    v.data = const_cast<float*>(t.values.data()) + offset;
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
  args.saved = st.saved.data() +
               static_cast<size_t>(slot) * max_batch_ * st.kernel->saved_floats_per_sample();
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
      fill_input(*graph_, node, seed_, iteration, first_sample, batch,
                 view(tensors_[st.outputs[0]], slot, false).data);
      continue;
    }
    st.kernel->forward(op_args(st, slot, batch, /*backward=*/false));
  }
}

double StageRunner::loss_sum(int slot) const {
  double sum = 0;
  for (int l : loss_ops_) {
    const TensorView v = view(tensors_[ops_[l].outputs[0]], slot, false);
    for (int64_t s = 0; s < last_batch_[slot]; ++s) sum += v.f()[s];
  }
  return sum;
}

void StageRunner::begin_backward(int slot) {
  const int64_t batch = last_batch_[slot];
  for (auto& t : tensors_) {
    if (!t.info.needs_grad) continue;
    float* g = t.grads.data() + static_cast<size_t>(slot) * max_batch_ * t.info.per_sample;
    std::fill(g, g + batch * t.info.per_sample, 0.0f);
  }
}

void StageRunner::backward(int slot, float loss_scale) {
  const int64_t batch = last_batch_[slot];
  for (int l : loss_ops_) {
    const TensorView g = view(tensors_[ops_[l].outputs[0]], slot, true);
    std::fill(g.f(), g.f() + batch, loss_scale);
  }
  for (auto it = ops_.rbegin(); it != ops_.rend(); ++it) {
    OpState& st = *it;
    if (graph_->op(st.op).info->is_input) continue;
    st.kernel->backward(op_args(st, slot, batch, /*backward=*/true));
  }
}

void StageRunner::zero_param_grads() { std::fill(grads_.begin(), grads_.end(), 0.0f); }

void StageRunner::optimizer_step(int64_t step) {
  const size_t per = static_cast<size_t>(optimizer_->state_floats());
  for (const auto& st : ops_) {
    for (size_t p = 0; p < st.param_offsets.size(); ++p) {
      const size_t off = st.param_offsets[p], n = st.param_sizes[p];
      optimizer_->apply(std::span<float>(weights_.data() + off, n),
                        std::span<const float>(grads_.data() + off, n),
                        std::span<float>(opt_state_.data() + off * per, n * per), step);
    }
  }
}

std::span<const float> StageRunner::op_params(int op_index) const {
  return const_cast<StageRunner*>(this)->mutable_op_params(op_index);
}

std::span<float> StageRunner::mutable_op_params(int op_index) {
  for (const auto& st : ops_) {
    if (st.op != op_index || st.param_offsets.empty()) continue;
    size_t n = 0;
    for (size_t s : st.param_sizes) n += s;
    return {weights_.data() + st.param_offsets[0], n};
  }
  return {};
}

std::span<float> StageRunner::mutable_op_state(int op_index) {
  const size_t per = static_cast<size_t>(optimizer_->state_floats());
  const std::span<float> params = mutable_op_params(op_index);
  if (params.empty() || per == 0) return {};
  const size_t offset = static_cast<size_t>(params.data() - weights_.data());
  return {opt_state_.data() + offset * per, params.size() * per};
}

std::vector<int> StageRunner::op_indices() const {
  std::vector<int> out;
  for (const auto& st : ops_) out.push_back(st.op);
  return out;
}

}  // namespace gp::exec
