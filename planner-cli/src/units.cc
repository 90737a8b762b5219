#include "gp/planner/units.h"

#include <algorithm>

namespace gp::planner {
namespace {

// Immediate predecessors/successors in the transitive reduction, among non-input ops.
std::vector<int> reduced(const graph::Graph& g, const std::vector<int>& neighbours, bool forward) {
  std::vector<int> out;
  for (int a : neighbours) {
    if (g.op(a).info->is_input) continue;
    bool implied = false;
    for (int b : neighbours) {
      if (b == a || g.op(b).info->is_input) continue;
      // a is implied when another neighbour lies between it and the op.
      if (forward ? g.reaches(b, a) : g.reaches(a, b)) {
        implied = true;
        break;
      }
    }
    if (!implied) out.push_back(a);
  }
  return out;
}

}  // namespace

UnitGraph build_units(const graph::Graph& g, const UnitOptions& options) {
  const int n = g.num_ops();
  double max_flops = 0;
  int64_t max_params = 0;
  for (const auto& op : g.ops()) {
    max_flops = std::max(max_flops, op.cost.forward_flops);
    max_params = std::max(max_params, op.cost.param_count);
  }
  auto cheap = [&](const graph::OpNode& op) {
    return op.cost.forward_flops <= max_flops * options.cheap_fraction &&
           static_cast<double>(op.cost.param_count) <=
               static_cast<double>(max_params) * options.cheap_fraction;
  };

  UnitGraph u;
  u.unit_of_op.assign(n, -1);
  std::vector<int> tail;  // last op merged into each unit
  // 1. Non-input ops in topological order: merge cheap chain successors, else open a unit.
  for (int op : g.topo_order()) {
    const auto& node = g.op(op);
    if (node.info->is_input) continue;
    int target = -1;
    if (options.merge_cheap_ops && cheap(node)) {
      const auto preds = reduced(g, node.preds, /*forward=*/false);
      if (preds.size() == 1) {
        const int p = preds[0];
        const auto succs_of_p = reduced(g, g.op(p).succs, /*forward=*/true);
        const int pu = u.unit_of_op[p];
        if (succs_of_p.size() == 1 && succs_of_p[0] == op && pu >= 0 && tail[pu] == p) target = pu;
      }
    }
    if (target < 0) {
      target = static_cast<int>(u.unit_ops.size());
      u.unit_ops.emplace_back();
      tail.push_back(op);
    }
    u.unit_ops[target].push_back(op);
    tail[target] = op;
    u.unit_of_op[op] = target;
  }
  // 2. Inputs join their first consumer in topological order.
  std::vector<int> position(n);
  for (int i = 0; i < n; ++i) position[g.topo_order()[i]] = i;
  for (const auto& node : g.ops()) {
    if (!node.info->is_input) continue;
    int first = -1;
    for (int s : node.succs) {
      if (first < 0 || position[s] < position[first]) first = s;
    }
    int unit;
    if (first < 0) {  // an unused input: a unit of its own, harmless
      unit = static_cast<int>(u.unit_ops.size());
      u.unit_ops.emplace_back();
    } else {
      unit = u.unit_of_op[first];
    }
    u.unit_ops[unit].insert(u.unit_ops[unit].begin(), node.index);
    u.unit_of_op[node.index] = unit;
  }
  // 3. Unit edges with activation bytes per sample (each tensor counted once per edge).
  const int m = u.num_units();
  u.preds.assign(m, {});
  u.succs.assign(m, {});
  for (const auto& node : g.ops()) {
    const int dst = u.unit_of_op[node.index];
    for (const auto& ref : node.proto->inputs()) {
      const int producer = g.index_of(ref.op());
      const int src = u.unit_of_op[producer];
      if (src == dst) continue;
      if (std::find(u.succs[src].begin(), u.succs[src].end(), dst) == u.succs[src].end()) {
        u.succs[src].push_back(dst);
        u.preds[dst].push_back(src);
      }
    }
  }
  // Bytes per unit edge: each tensor once per consuming unit.
  for (const auto& node : g.ops()) {
    const int src = u.unit_of_op[node.index];
    for (int k = 0; k < node.proto->outputs_size(); ++k) {
      std::vector<int> dsts;
      for (int s : node.succs) {
        const int dst = u.unit_of_op[s];
        if (dst == src) continue;
        bool uses = false;
        for (const auto& ref : g.op(s).proto->inputs()) {
          uses = uses || (ref.op() == node.id() && ref.output() == k);
        }
        if (uses && std::find(dsts.begin(), dsts.end(), dst) == dsts.end()) dsts.push_back(dst);
      }
      for (int dst : dsts) u.edge_bytes[{src, dst}] += graph::size_bytes(node.proto->outputs(k));
    }
  }
  for (auto& v : u.preds) std::sort(v.begin(), v.end());
  for (auto& v : u.succs) std::sort(v.begin(), v.end());
  // 4. Topological order of units (Kahn, smallest first).
  std::vector<int> indegree(m);
  for (int i = 0; i < m; ++i) indegree[i] = static_cast<int>(u.preds[i].size());
  std::vector<int> ready;
  for (int i = 0; i < m; ++i) {
    if (indegree[i] == 0) ready.push_back(i);
  }
  while (!ready.empty()) {
    std::sort(ready.begin(), ready.end(), std::greater<int>());
    const int x = ready.back();
    ready.pop_back();
    u.topo.push_back(x);
    for (int s : u.succs[x]) {
      if (--indegree[s] == 0) ready.push_back(s);
    }
  }
  for (auto& ops : u.unit_ops) {
    std::sort(ops.begin(), ops.end(), [&](int a, int b) { return position[a] < position[b]; });
  }
  return u;
}

}  // namespace gp::planner
