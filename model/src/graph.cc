#include "gp/model/graph.h"

#include <algorithm>
#include <functional>
#include <queue>
#include <set>

#include "gp/model/model_io.h"
#include "ops_internal.h"

namespace gp::model {
namespace {

// Elements per tensor (per sample for activations) that a model may declare: 2^34 (64 GiB of
// float32), far beyond any real layer, far below where int64 byte counts could overflow.
constexpr int64_t kMaxTensorElements = int64_t{1} << 34;

template <typename Dims>
Status check_tensor_size(const Dims& dims) {
  int64_t n = 1;
  for (int64_t d : dims) {
    if (d <= 0 || __builtin_mul_overflow(n, d, &n) || n > kMaxTensorElements) {
      return invalid_argument("more than " + std::to_string(kMaxTensorElements) +
                              " elements (or a dimension <= 0)");
    }
  }
  return ok_status();
}

std::string op_label(int i, const Operator& op) {
  std::string s = "ops[" + std::to_string(i) + "]";
  if (!op.id().empty()) s += " '" + op.id() + "'";
  if (!op.type().empty()) s += " (" + op.type() + ")";
  return s;
}

// "[4, 4]": the catalogue's formatting of a parameter's shape.
std::string ints_string_of(const google::protobuf::RepeatedField<int64_t>& dims) {
  return detail::ints_string({dims.begin(), dims.end()});
}

std::string ref_string(const TensorRef& ref) {
  return "'" + ref.op() + "':" + std::to_string(ref.output());
}

// Names one cycle among the ops that Kahn's algorithm could not order.
std::string describe_cycle(const std::vector<OpNode>& nodes, const std::vector<int>& indegree) {
  const int n = static_cast<int>(nodes.size());
  int start = -1;
  for (int i = 0; i < n && start < 0; ++i) {
    if (indegree[i] > 0) start = i;
  }
  // Walk backwards through unfinished predecessors until an op repeats.
  std::vector<int> seen_at(n, -1);
  std::vector<int> path;
  int cur = start;
  while (cur >= 0 && seen_at[cur] < 0) {
    seen_at[cur] = static_cast<int>(path.size());
    path.push_back(cur);
    int next = -1;
    for (int p : nodes[cur].preds) {
      if (indegree[p] > 0) {
        next = p;
        break;
      }
    }
    cur = next;
  }
  if (cur < 0) return "(cycle not located)";
  std::vector<int> cycle(path.begin() + seen_at[cur], path.end());
  std::reverse(cycle.begin(), cycle.end());
  std::string s;
  for (int i : cycle) s += "'" + nodes[i].id() + "' -> ";
  s += "'" + nodes[cycle.front()].id() + "'";
  return s;
}

// Declared output dimensions must be positive (input ops declare their shape; others may declare
// what shape inference must agree with).
Status check_declared_dims(int i, const Operator& op) {
  for (int k = 0; k < op.outputs_size(); ++k) {
    for (int d = 0; d < op.outputs(k).shape_size(); ++d) {
      if (op.outputs(k).shape(d) <= 0) {
        return invalid_argument(
            op_label(i, op) + ": outputs[" + std::to_string(k) + "].shape[" + std::to_string(d) +
            "] = " + std::to_string(op.outputs(k).shape(d)) + ": dimensions must be positive");
      }
    }
  }
  return ok_status();
}

// Every size downstream (bytes, buffers, costs) multiplies these: bound them here, with
// overflow-checked products, so no later computation can wrap.
Status check_inferred_sizes(int i, const Operator& op, const InferredOp& inferred) {
  for (size_t k = 0; k < inferred.outputs.size(); ++k) {
    GP_RETURN_IF_ERROR(check_tensor_size(inferred.outputs[k].shape())
                           .with_context(op_label(i, op) + ": outputs[" + std::to_string(k) + "] " +
                                         shape_string(inferred.outputs[k])));
  }
  for (const auto& p : inferred.params) {
    GP_RETURN_IF_ERROR(
        check_tensor_size(p.shape()).with_context(op_label(i, op) + ": params '" + p.name() + "'"));
  }
  return ok_status();
}

// Outputs an op declares must be the ones shape inference gives.
Status check_declared_outputs(int i, const Operator& op, const InferredOp& inferred) {
  if (op.outputs_size() != static_cast<int>(inferred.outputs.size())) {
    return invalid_argument(op_label(i, op) + ": outputs: declares " +
                            std::to_string(op.outputs_size()) + ", shape inference gives " +
                            std::to_string(inferred.outputs.size()));
  }
  for (int k = 0; k < op.outputs_size(); ++k) {
    if (!same_spec(op.outputs(k), inferred.outputs[k])) {
      return invalid_argument(op_label(i, op) + ": outputs[" + std::to_string(k) +
                              "]: shape mismatch: declared " + shape_string(op.outputs(k)) +
                              ", shape inference gives " + shape_string(inferred.outputs[k]));
    }
  }
  return ok_status();
}

}  // namespace

Status detail::check_param_value_size(int i, const Operator& op, const std::string& name,
                                      size_t bytes, const ParamSpec& spec) {
  int64_t want = 4;  // float32 bytes per element
  for (int64_t d : spec.shape()) want *= d;
  if (static_cast<int64_t>(bytes) == want) return ok_status();
  return invalid_argument(op_label(i, op) + ": param_values['" + name +
                          "']: " + std::to_string(bytes) + " bytes, the parameter needs " +
                          std::to_string(want) + " (float32)");
}

namespace {

// Initial parameter values name a parameter (or buffer) of the op, as inferred, and hold all of it.
Status check_param_values(int i, const Operator& op, const std::vector<ParamSpec>& buffers) {
  for (const auto& [name, bytes] : op.param_values()) {
    const ParamSpec* spec = nullptr;
    for (const auto& p : op.params()) {
      if (p.name() == name) spec = &p;
    }
    for (const auto& p : buffers) {
      if (p.name() == name) spec = &p;
    }
    if (spec == nullptr) {
      return invalid_argument(op_label(i, op) + ": param_values['" + name +
                              "']: the op has no such parameter");
    }
    GP_RETURN_IF_ERROR(detail::check_param_value_size(i, op, name, bytes.size(), *spec));
  }
  return ok_status();
}

}  // namespace

Result<Graph> Graph::build(const ModelGraph& model) {
  Graph g;
  g.model_ = std::make_unique<ModelGraph>(model);
  const int n = g.model_->ops_size();
  if (n == 0) return invalid_argument("ops: the model has no operators");
  if (n > kMaxOps) {
    // Reachability, where asked for, takes n^2 / 8 bytes: 1.25 GB at this limit.
    return invalid_argument("ops: " + std::to_string(n) + " operators, more than the " +
                            std::to_string(kMaxOps) + " a model may have");
  }
  GP_RETURN_IF_ERROR(g.index_ops());
  GP_RETURN_IF_ERROR(g.link_ops());
  GP_RETURN_IF_ERROR(g.order_ops());
  // Shape inference in topological order: every op's inputs are inferred before it.
  for (int i : g.topo_) GP_RETURN_IF_ERROR(g.infer_op(i));
  GP_RETURN_IF_ERROR(g.find_losses());
  GP_RETURN_IF_ERROR(g.resolve_ties());
  return g;
}

Status Graph::index_ops() {
  const ModelGraph& m = *model_;
  const int n = m.ops_size();
  nodes_.resize(n);
  for (int i = 0; i < n; ++i) {
    const Operator& op = m.ops(i);
    if (op.id().empty()) return invalid_argument(op_label(i, op) + ": id is empty");
    auto [it, inserted] = index_.emplace(op.id(), i);
    if (!inserted) {
      return invalid_argument(op_label(i, op) + ": duplicate id '" + op.id() + "' (also ops[" +
                              std::to_string(it->second) + "])");
    }
    const OpTypeInfo* info = find_op_type(op.type());
    if (info == nullptr) {
      return invalid_argument(op_label(i, op) + ": unknown op type '" + op.type() +
                              "' (see `graphpipe-plan ops` for the catalogue)");
    }
    const int k = op.inputs_size();
    if (k < info->min_inputs || (info->max_inputs >= 0 && k > info->max_inputs)) {
      std::string want = std::to_string(info->min_inputs);
      if (info->max_inputs != info->min_inputs) {
        want += info->max_inputs < 0 ? " or more" : " to " + std::to_string(info->max_inputs);
      }
      return invalid_argument(op_label(i, op) + ": inputs: expected " + want + ", got " +
                              std::to_string(k));
    }
    nodes_[i].index = i;
    nodes_[i].proto = &m.ops(i);
    nodes_[i].info = info;  // the op's type id, resolved here once for every later reader
  }
  return ok_status();
}

Status Graph::link_ops() {
  const ModelGraph& m = *model_;
  for (int i = 0; i < m.ops_size(); ++i) {
    const Operator& op = m.ops(i);
    std::set<int> preds;
    for (int k = 0; k < op.inputs_size(); ++k) {
      const TensorRef& ref = op.inputs(k);
      int p = index_of(ref.op());
      if (p < 0) {
        return invalid_argument(op_label(i, op) + ": inputs[" + std::to_string(k) +
                                "]: dangling tensor reference " + ref_string(ref) +
                                " (no op has id '" + ref.op() + "')");
      }
      if (p == i) {
        return invalid_argument(op_label(i, op) + ": inputs[" + std::to_string(k) +
                                "]: the op consumes its own output (cycle)");
      }
      preds.insert(p);
    }
    nodes_[i].preds.assign(preds.begin(), preds.end());
    for (int p : preds) nodes_[p].succs.push_back(i);
  }
  for (auto& node : nodes_) std::sort(node.succs.begin(), node.succs.end());
  return ok_status();
}

// Kahn's algorithm, smallest index first so the order is deterministic.
Status Graph::order_ops() {
  const int n = num_ops();
  std::vector<int> indegree(n);
  std::priority_queue<int, std::vector<int>, std::greater<int>> ready;
  for (int i = 0; i < n; ++i) {
    indegree[i] = static_cast<int>(nodes_[i].preds.size());
    if (indegree[i] == 0) ready.push(i);
  }
  while (!ready.empty()) {
    int i = ready.top();
    ready.pop();
    topo_.push_back(i);
    for (int s : nodes_[i].succs) {
      if (--indegree[s] == 0) ready.push(s);
    }
  }
  if (static_cast<int>(topo_.size()) != n) {
    return invalid_argument("ops: the graph has a cycle: " + describe_cycle(nodes_, indegree));
  }
  return ok_status();
}

Status Graph::infer_op(int i) {
  ModelGraph& m = *model_;
  OpNode& node = nodes_[i];
  Operator& op = *m.mutable_ops(i);
  node.proto = &op;
  for (int k = 0; k < op.inputs_size(); ++k) {
    const TensorRef& ref = op.inputs(k);
    const Operator& producer = m.ops(index_of(ref.op()));
    if (ref.output() < 0 || ref.output() >= producer.outputs_size()) {
      return invalid_argument(op_label(i, op) + ": inputs[" + std::to_string(k) +
                              "]: dangling tensor reference " + ref_string(ref) + " ('" + ref.op() +
                              "' has " + std::to_string(producer.outputs_size()) + " output(s))");
    }
    node.input_specs.push_back(producer.outputs(ref.output()));
  }
  if (node.info->is_input || op.outputs_size() > 0) {
    GP_RETURN_IF_ERROR(check_declared_dims(i, op));
  }
  GP_RETURN_IF_ERROR(check_attr_names(op, *node.info).with_context(op_label(i, op)));
  InferredOp inferred;
  Status st = node.info->infer(op, node.input_specs, &inferred);
  if (!st.ok()) return st.with_context(op_label(i, op));
  // What the executor keeps of this op until backward: its outputs and its kernels' saved
  // scratch (one definition of kept memory for the planner, simulator, executor and profiler).
  inferred.cost.activation_bytes = inferred.cost.saved_bytes;
  for (const auto& spec : inferred.outputs) {
    inferred.cost.activation_bytes += static_cast<double>(stored_size_bytes(spec));
  }
  GP_RETURN_IF_ERROR(check_inferred_sizes(i, op, inferred));
  if (!node.info->is_input && op.outputs_size() > 0) {
    GP_RETURN_IF_ERROR(check_declared_outputs(i, op, inferred));
  }
  op.clear_outputs();
  for (auto& spec : inferred.outputs) *op.add_outputs() = spec;
  op.clear_params();
  for (auto& p : inferred.params) *op.add_params() = p;
  GP_RETURN_IF_ERROR(check_param_values(i, op, inferred.buffers));
  node.cost = inferred.cost;
  node.attrs = std::move(inferred.attrs);
  node.output_bytes = 0;
  for (const auto& spec : inferred.outputs) node.output_bytes += size_bytes(spec);
  return ok_status();
}

Status Graph::resolve_ties() {
  const ModelGraph& m = *model_;
  std::set<std::pair<int, int>> seen;
  for (int t = 0; t < m.param_ties_size(); ++t) {
    const auto& tie = m.param_ties(t);
    const std::string field = "param_ties[" + std::to_string(t) + "]";
    if (tie.members_size() < 2) {
      return invalid_argument(field + ": " + std::to_string(tie.members_size()) +
                              " member(s); a tie joins two or more parameters");
    }
    std::vector<ParamAt> members;
    for (int k = 0; k < tie.members_size(); ++k) {
      const auto& ref = tie.members(k);
      const std::string member = field + ".members[" + std::to_string(k) + "]";
      const int i = index_of(ref.op());
      if (i < 0) return invalid_argument(member + ": op '" + ref.op() + "' is not in the model");
      const Operator& op = *nodes_[i].proto;
      int p = -1;
      for (int q = 0; q < op.params_size(); ++q) {
        if (op.params(q).name() == ref.param()) p = q;
      }
      if (p < 0) {
        return invalid_argument(member + ": op '" + ref.op() + "' (" +
                                std::string(nodes_[i].type()) + ") has no parameter '" +
                                ref.param() + "'");
      }
      if (!seen.insert({i, p}).second) {
        return invalid_argument(member + ": " + ref.op() + "." + ref.param() +
                                " is tied more than once");
      }
      const auto& first =
          members.empty() ? op.params(p) : nodes_[members[0].op].proto->params(members[0].param);
      if (!std::equal(first.shape().begin(), first.shape().end(), op.params(p).shape().begin(),
                      op.params(p).shape().end())) {
        return invalid_argument(member + ": " + ref.op() + "." + ref.param() + " has shape " +
                                ints_string_of(op.params(p).shape()) + ", the tie's first member " +
                                ints_string_of(first.shape()) +
                                " (tied parameters share one shape)");
      }
      members.push_back({i, p});
    }
    ties_.push_back(std::move(members));
  }
  return ok_status();
}

const Graph::ParamAt* Graph::tie_source(int op, int param) const {
  for (const auto& tie : ties_) {
    for (size_t k = 1; k < tie.size(); ++k) {
      if (tie[k].op == op && tie[k].param == param) return &tie[0];
    }
  }
  return nullptr;
}

Status Graph::find_losses() {
  const ModelGraph& m = *model_;
  if (m.losses_size() == 0) {
    return invalid_argument("losses: missing loss (name at least one loss op output)");
  }
  for (int k = 0; k < m.losses_size(); ++k) {
    const TensorRef& ref = m.losses(k);
    int i = index_of(ref.op());
    const std::string field = "losses[" + std::to_string(k) + "]";
    if (i < 0) {
      return invalid_argument(field + ": dangling tensor reference " + ref_string(ref));
    }
    if (!nodes_[i].info->is_loss) {
      return invalid_argument(field + ": '" + ref.op() + "' is a " + std::string(nodes_[i].type()) +
                              " op, not a loss (mse_loss or softmax_cross_entropy)");
    }
    if (ref.output() != 0) {
      return invalid_argument(field + ": " + ref_string(ref) + ": loss ops have one output");
    }
    loss_ops_.push_back(i);
  }
  return ok_status();
}

void Graph::build_reachability() const {
  const int n = num_ops();
  const size_t words = (static_cast<size_t>(n) + 63) / 64;
  auto& reach = lazy_->reach;
  reach.assign(n, std::vector<uint64_t>(words, 0));
  for (auto it = topo_.rbegin(); it != topo_.rend(); ++it) {
    const int a = *it;
    for (int s : nodes_[a].succs) {
      reach[a][s / 64] |= uint64_t{1} << (s % 64);
      for (size_t w = 0; w < words; ++w) reach[a][w] |= reach[s][w];
    }
  }
}

int Graph::index_of(std::string_view id) const {
  auto it = index_.find(std::string(id));
  return it == index_.end() ? -1 : it->second;
}

std::vector<int> Graph::sources() const {
  std::vector<int> out;
  for (const auto& node : nodes_) {
    if (node.preds.empty()) out.push_back(node.index);
  }
  return out;
}

std::vector<int> Graph::sinks() const {
  std::vector<int> out;
  for (const auto& node : nodes_) {
    if (node.succs.empty()) out.push_back(node.index);
  }
  return out;
}

bool Graph::reaches(int from, int to) const {
  std::call_once(lazy_->reach_once, [this] { build_reachability(); });
  return (lazy_->reach[from][to / 64] >> (to % 64)) & 1U;
}

const std::string& Graph::model_hash() const {
  std::call_once(lazy_->hash_once, [this] { lazy_->model_hash = model::model_hash(*model_); });
  return lazy_->model_hash;
}

int64_t Graph::total_params() const {
  int64_t total = 0;
  for (const auto& node : nodes_) total += node.cost.param_count;
  // A tied tensor is one parameter of the model, however many ops hold a copy.
  for (const auto& tie : ties_) {
    int64_t elements = 1;
    for (int64_t d : nodes_[tie[0].op].proto->params(tie[0].param).shape()) elements *= d;
    total -= static_cast<int64_t>(tie.size() - 1) * elements;
  }
  return total;
}

int Graph::max_parallel_branches() const {
  // Dilworth: max antichain = |V| - max matching in the bipartite graph u -> v (u reaches v).
  std::vector<int> verts;
  // A constant (a causal mask, position ids), and a parameterless op computed from constants
  // alone (an imported GPT's per-layer mask), is a source like an input, not a branch.
  std::vector<char> fixed(nodes_.size(), 0);
  for (int i : topo_) {
    const auto& node = nodes_[i];
    fixed[i] = node.info->id == OpType::kConstant ||
               (!node.info->is_input && node.cost.param_count == 0 && !node.preds.empty() &&
                std::all_of(node.preds.begin(), node.preds.end(), [&](int p) { return fixed[p]; }));
  }
  for (const auto& node : nodes_) {
    if (!node.info->is_input && !fixed[node.index]) verts.push_back(node.index);
  }
  const int m = static_cast<int>(verts.size());
  std::vector<int> match_right(m, -1);
  std::vector<char> visited;
  std::function<bool(int)> augment = [&](int u) {
    for (int v = 0; v < m; ++v) {
      if (visited[v] || !reaches(verts[u], verts[v])) continue;
      visited[v] = 1;
      if (match_right[v] < 0 || augment(match_right[v])) {
        match_right[v] = u;
        return true;
      }
    }
    return false;
  };
  // Greedy start: match each op to a free direct successor, so chains need no augmenting.
  std::vector<int> vert_of(num_ops(), -1);
  for (int k = 0; k < m; ++k) vert_of[verts[k]] = k;
  std::vector<char> left_matched(m, 0);
  int matching = 0;
  for (int u = 0; u < m; ++u) {
    for (int s : nodes_[verts[u]].succs) {
      const int v = vert_of[s];
      if (v >= 0 && match_right[v] < 0) {
        match_right[v] = u;
        left_matched[u] = 1;
        ++matching;
        break;
      }
    }
  }
  for (int u = 0; u < m; ++u) {
    if (left_matched[u]) continue;
    visited.assign(m, 0);
    if (augment(u)) ++matching;
  }
  return m - matching;
}

Result<TensorSpec> resolve_ref(const Graph& graph, const TensorRef& ref, std::string_view field) {
  int i = graph.index_of(ref.op());
  if (i < 0 || ref.output() < 0 || ref.output() >= graph.op(i).proto->outputs_size()) {
    return invalid_argument(std::string(field) + ": dangling tensor reference '" + ref.op() +
                            "':" + std::to_string(ref.output()));
  }
  return graph.op(i).proto->outputs(ref.output());
}

}  // namespace gp::model
