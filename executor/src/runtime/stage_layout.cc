#include "gp/exec/stage_layout.h"

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <utility>

namespace gp::exec {
namespace {

using graphpipe::v1::TensorRef;
using TensorKey = std::pair<std::string, int>;

TensorKey key_of(const TensorRef& ref) { return {ref.op(), ref.output()}; }

bool same(const TensorRef& a, const TensorRef& b) {
  return a.op() == b.op() && a.output() == b.output();
}

int find_ref(const StageLayout& layout, const std::vector<int>& tensors, const TensorRef& ref) {
  for (size_t k = 0; k < tensors.size(); ++k) {
    if (same(layout.tensors[tensors[k]].info.ref, ref)) return static_cast<int>(k);
  }
  return -1;
}

// Builds a layout step by step: the ops checked and ordered, then each op's tensors and
// parameters, then the relays, then the exports resolved.
class LayoutBuilder {
 public:
  explicit LayoutBuilder(const model::Graph& graph) : graph_(graph), in_stage_(graph.num_ops()) {}

  // The stage's ops, checked and in topological order.
  Status set_ops(std::vector<int> ops) {
    if (ops.empty()) return invalid_argument("stage: no operators");
    std::vector<int> position(graph_.num_ops());
    for (int i = 0; i < graph_.num_ops(); ++i) position[graph_.topo_order()[i]] = i;
    for (int op : ops) {
      if (op < 0 || op >= graph_.num_ops() || in_stage_[op]) {
        return invalid_argument("stage: op index " + std::to_string(op) + " invalid or repeated");
      }
      in_stage_[op] = 1;
    }
    std::sort(ops.begin(), ops.end(), [&](int a, int b) { return position[a] < position[b]; });
    ops_ = std::move(ops);
    return ok_status();
  }

  void set_crossing(const std::vector<TensorRef>& exports, const std::vector<TensorRef>& relays) {
    for (const auto& ref : exports) crossing_.insert(key_of(ref));
    for (const auto& ref : relays) crossing_.insert(key_of(ref));
  }

  void add_ops() {
    for (int op : ops_) add_op(op);
  }

  Status add_relays(const std::vector<TensorRef>& relays) {
    for (const auto& ref : relays) {
      const int producer = graph_.index_of(ref.op());
      if (producer < 0 || in_stage_[producer] || ref.output() < 0 ||
          ref.output() >= graph_.op(producer).proto->outputs_size()) {
        return invalid_argument("stage: relay '" + ref.op() + "':" + std::to_string(ref.output()) +
                                " is not a tensor produced outside the stage");
      }
      add_tensor(ref);
    }
    layout_.relays = relays;
    return ok_status();
  }

  Status resolve_exports(const std::vector<TensorRef>& exports) {
    for (const auto& ref : exports) {
      const int producer = graph_.index_of(ref.op());
      auto it = tensor_of_.find(key_of(ref));
      if (producer < 0 || !in_stage_[producer] || it == tensor_of_.end()) {
        return invalid_argument("stage: export '" + ref.op() + "':" + std::to_string(ref.output()) +
                                " is not produced by the stage");
      }
      layout_.exported.push_back(it->second);
    }
    layout_.exports = exports;
    return ok_status();
  }

  StageLayout take() { return std::move(layout_); }

 private:
  // The tensor's index, added on first use.
  int add_tensor(const TensorRef& ref) {
    const TensorKey key = key_of(ref);
    if (auto it = tensor_of_.find(key); it != tensor_of_.end()) return it->second;
    const int producer_index = graph_.index_of(ref.op());
    const auto& producer = graph_.op(producer_index);
    const auto& spec = producer.proto->outputs(ref.output());
    StageLayout::Tensor t;
    t.info.ref = ref;
    t.info.per_sample = model::num_elements(spec);
    t.info.is_int = model::is_integer(spec);
    t.info.needs_grad = !t.info.is_int && !producer.info->is_input;
    t.grads_per_slot = !in_stage_[producer_index] || crossing_.count(key) > 0;
    const int index = static_cast<int>(layout_.tensors.size());
    t.storage = index;
    layout_.tensors.push_back(std::move(t));
    tensor_of_[key] = index;
    if (!in_stage_[producer_index]) layout_.external.push_back(index);
    return index;
  }

  void add_op(int op) {
    const auto& node = graph_.op(op);
    StageLayout::Op st;
    st.op = op;
    for (const auto& ref : node.proto->inputs()) st.inputs.push_back(add_tensor(ref));
    for (int k = 0; k < node.proto->outputs_size(); ++k) {
      TensorRef ref;
      ref.set_op(node.id());
      ref.set_output(k);
      st.outputs.push_back(add_tensor(ref));
    }
    if (node.is_view() && !st.inputs.empty() && !st.outputs.empty()) share_view(st);
    for (const auto& p : node.proto->params()) {
      size_t n = 1;
      for (int64_t d : p.shape()) n *= static_cast<size_t>(d);
      st.param_offsets.push_back(layout_.param_count);
      st.param_sizes.push_back(n);
      layout_.param_count += n;
    }
    layout_.ops.push_back(std::move(st));
  }

  // A view's output is its input's memory when neither crosses the boundary (so both are kept
  // alike: per slot, or once when recomputing) and both or neither carry gradients.
  void share_view(const StageLayout::Op& op) {
    const StageLayout::Tensor& in = layout_.tensors[static_cast<size_t>(op.inputs[0])];
    StageLayout::Tensor& out = layout_.tensors[static_cast<size_t>(op.outputs[0])];
    if (!in.grads_per_slot && !out.grads_per_slot && in.info.needs_grad == out.info.needs_grad &&
        in.info.is_int == out.info.is_int && in.info.per_sample == out.info.per_sample) {
      out.storage = in.storage;
    }
  }

  const model::Graph& graph_;
  std::vector<char> in_stage_;
  std::vector<int> ops_;
  std::set<TensorKey> crossing_;
  std::map<TensorKey, int> tensor_of_;
  StageLayout layout_;
};

}  // namespace

int StageLayout::external_index(const TensorRef& ref) const {
  return find_ref(*this, external, ref);
}

int StageLayout::export_index(const TensorRef& ref) const { return find_ref(*this, exported, ref); }

std::vector<int> StageLayout::op_indices() const {
  std::vector<int> out;
  for (const auto& op : ops) out.push_back(op.op);
  return out;
}

Result<StageLayout> layout_stage(const model::Graph& graph, std::vector<int> ops,
                                 std::vector<TensorRef> exports, std::vector<TensorRef> relays) {
  LayoutBuilder b(graph);
  GP_RETURN_IF_ERROR(b.set_ops(std::move(ops)));
  b.set_crossing(exports, relays);
  b.add_ops();
  GP_RETURN_IF_ERROR(b.add_relays(relays));
  GP_RETURN_IF_ERROR(b.resolve_exports(exports));
  return b.take();
}

Result<StageLayout> layout_plan_stage(const graphpipe::v1::Plan& plan, const model::Graph& graph,
                                      const plan::PlanIndex& index, int stage) {
  std::vector<TensorRef> exports, relays;
  for (const auto& e : plan.edges()) {
    if (e.src_stage() != stage) continue;
    for (const auto& t : e.tensors()) {
      const bool produced_here = index.stage_of_op[graph.index_of(t.op())] == stage;
      auto& list = produced_here ? exports : relays;
      if (std::none_of(list.begin(), list.end(), [&](const auto& x) { return same(x, t); })) {
        list.push_back(t);
      }
    }
  }
  return layout_stage(graph, index.stage_ops[stage], std::move(exports), std::move(relays));
}

}  // namespace gp::exec
