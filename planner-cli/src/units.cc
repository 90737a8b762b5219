#include "gp/planner/units.h"

#include <algorithm>
#include <cstdint>
#include <string>

#include "gp/planner/progress.h"
#include "gp/planner/sp_decomposition.h"

namespace gp::planner {
namespace {

// Reachability between ops by a depth-first search that never passes the target's position in
// the topological order: the questions build_units asks are about ops a few edges apart, so
// this costs little where a table of every pair would take ops^2 / 8 bytes.
class OpReach {
 public:
  explicit OpReach(const model::Graph& g) : g_(g), position_(g.num_ops()), seen_(g.num_ops(), 0) {
    for (int i = 0; i < g.num_ops(); ++i) position_[g.topo_order()[i]] = i;
  }

  // True when a path of one or more edges leads from `from` to `to`.
  bool reaches(int from, int to) {
    if (position_[from] >= position_[to]) return false;
    ++stamp_;
    stack_.assign(1, from);
    while (!stack_.empty()) {
      const int x = stack_.back();
      stack_.pop_back();
      for (int s : g_.op(x).succs) {
        if (s == to) return true;
        if (position_[s] < position_[to] && seen_[s] != stamp_) {
          seen_[s] = stamp_;
          stack_.push_back(s);
        }
      }
    }
    return false;
  }

 private:
  const model::Graph& g_;
  std::vector<int> position_;  // in the topological order
  std::vector<uint32_t> seen_;
  uint32_t stamp_ = 0;
  std::vector<int> stack_;
};

// Immediate predecessors/successors in the transitive reduction, among non-input ops.
std::vector<int> reduced(const model::Graph& g, OpReach& reach, const std::vector<int>& neighbours,
                         bool forward) {
  std::vector<int> out;
  for (int a : neighbours) {
    if (g.op(a).info->is_input) continue;
    bool implied = false;
    for (int b : neighbours) {
      if (b == a || g.op(b).info->is_input) continue;
      // a is implied when another neighbour lies between it and the op.
      if (forward ? reach.reaches(b, a) : reach.reaches(a, b)) {
        implied = true;
        break;
      }
    }
    if (!implied) out.push_back(a);
  }
  return out;
}

}  // namespace

// Steps 3 and 4 of build_units for any grouping of ops into units (unit_ops, unit_of_op):
// unit edges with their bytes, and a topological order of the units.
void link_units(const model::Graph& g, UnitGraph& u) {
  const int n = g.num_ops();
  std::vector<int> position(n);
  for (int i = 0; i < n; ++i) position[g.topo_order()[i]] = i;
  u.edge_bytes.clear();
  u.topo.clear();
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
      for (int dst : dsts) u.edge_bytes[{src, dst}] += model::size_bytes(node.proto->outputs(k));
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
}

UnitGraph build_units(const model::Graph& g, const UnitOptions& options) {
  const int n = g.num_ops();
  double max_flops = 0;
  int64_t max_params = 0;
  for (const auto& op : g.ops()) {
    max_flops = std::max(max_flops, op.cost.forward_flops);
    max_params = std::max(max_params, op.cost.param_count);
  }
  auto cheap = [&](const model::OpNode& op) {
    return op.cost.forward_flops <= max_flops * options.cheap_fraction &&
           static_cast<double>(op.cost.param_count) <=
               static_cast<double>(max_params) * options.cheap_fraction;
  };

  UnitGraph u;
  u.unit_of_op.assign(n, -1);
  OpReach reach(g);
  std::vector<int> tail;  // last op merged into each unit
  // 1. Non-input ops in topological order: merge cheap chain successors, else open a unit.
  for (int op : g.topo_order()) {
    const auto& node = g.op(op);
    if (node.info->is_input) continue;
    int target = -1;
    if (options.merge_cheap_ops && cheap(node)) {
      const auto preds = reduced(g, reach, node.preds, /*forward=*/false);
      if (preds.size() == 1) {
        const int p = preds[0];
        const auto succs_of_p = reduced(g, reach, g.op(p).succs, /*forward=*/true);
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
  link_units(g, u);
  if (options.max_units <= 0 || u.num_units() <= options.max_units) return u;
  UnitGraph coarse = coarsen_units(g, u, options.max_units);
  log_note(std::to_string(n) + " operators in " + std::to_string(u.num_units()) +
           " planning units: planning over " + std::to_string(coarse.num_units()) +
           " coarser units (runs of the series-parallel decomposition)");
  return coarse;
}

UnitGraph group_units(const model::Graph& g, const std::vector<std::vector<int>>& groups) {
  UnitGraph u;
  u.unit_ops = groups;
  u.unit_of_op.assign(g.num_ops(), -1);
  for (size_t k = 0; k < groups.size(); ++k) {
    for (int op : groups[k]) u.unit_of_op[op] = static_cast<int>(k);
  }
  link_units(g, u);
  return u;
}

namespace {

// What coarsening balances: a unit's work and its parameters.
struct Weight {
  double work = 0;
  double params = 0;
  Weight& operator+=(const Weight& o) {
    work += o.work;
    params += o.params;
    return *this;
  }
};

// FLOPs per byte at which an op's memory traffic counts as much as its arithmetic, roughly an
// accelerator's ratio of peak FLOP/s to memory bandwidth (coarsening needs only a proxy; the
// planners cost the coarse units with the real cost model).
constexpr double kFlopsPerByte = 64;

Weight op_weight(const model::OpNode& op) {
  const model::OpCost& c = op.cost;
  return {std::max(c.forward_flops + c.backward_flops,
                   kFlopsPerByte * (c.forward_bytes + c.backward_bytes)),
          static_cast<double>(c.param_count)};
}

// Groups of units along an SP tree such that every group is an SP node, or a run of
// consecutive children of one, whose weight is within a share of the whole graph's (a unit or
// node heavier than the share is split into its children, down to single units).
class Coarsener {
 public:
  Coarsener(const model::Graph& g, const UnitGraph& units, const SpTree& tree)
      : tree_(tree), weight_(tree.nodes.size()) {
    std::vector<Weight> unit_weight(units.num_units());
    for (int u = 0; u < units.num_units(); ++u) {
      for (int op : units.unit_ops[u]) unit_weight[u] += op_weight(g.op(op));
    }
    // Children come before their parents in the tree's node list.
    for (size_t n = 0; n < tree.nodes.size(); ++n) {
      const SpNode& node = tree.nodes[n];
      if (node.kind == SpNode::Kind::kLeaf) weight_[n] = unit_weight[node.unit];
      for (int c : node.children) weight_[n] += weight_[c];
    }
  }

  // The groups for `share` (counting only, when `out` is null); their number.
  int group(double share, std::vector<std::vector<int>>* out) {
    const Weight& all = weight_[tree_.root];
    grain_ = {all.work * share, all.params * share};
    out_ = out;
    count_ = 0;
    emit(tree_.root);
    return count_;
  }

 private:
  bool light(const Weight& w) const { return w.work <= grain_.work && w.params <= grain_.params; }

  // Children [begin, end) of `node` as one group.
  void flush(int node, int begin, int end) {
    if (begin == end) return;
    ++count_;
    if (out_ == nullptr) return;
    std::vector<int>& g = out_->emplace_back();
    for (int c = begin; c < end; ++c) {
      const auto& u = tree_.nodes[tree_.nodes[node].children[c]].units;
      g.insert(g.end(), u.begin(), u.end());
    }
  }

  void emit(int node) {
    const SpNode& n = tree_.nodes[node];
    if (n.kind == SpNode::Kind::kLeaf || light(weight_[node])) {
      ++count_;
      if (out_ != nullptr) out_->push_back(n.units);
      return;
    }
    // Consecutive light children (of a series, or branches of a parallel node) share a group
    // while the group stays light; a heavy child is split on its own.
    const int count = static_cast<int>(n.children.size());
    int begin = 0;
    Weight run;
    for (int c = 0; c < count; ++c) {
      const Weight& w = weight_[n.children[c]];
      Weight grown = run;
      grown += w;
      if (light(grown)) {
        run = grown;
        continue;
      }
      flush(node, begin, c);
      begin = c;
      run = w;
      if (!light(w)) {
        emit(n.children[c]);
        begin = c + 1;
        run = Weight{};
      }
    }
    flush(node, begin, count);
  }

  const SpTree& tree_;
  std::vector<Weight> weight_;  // per SP node
  Weight grain_;
  std::vector<std::vector<int>>* out_ = nullptr;
  int count_ = 0;
};

}  // namespace

UnitGraph coarsen_units(const model::Graph& g, const UnitGraph& units, int max_units) {
  if (max_units <= 0 || units.num_units() <= max_units) return units;
  const SpTree tree = decompose_series_parallel(units);
  Coarsener coarsener(g, units, tree);
  // The finest share leaving at most max_units groups: share 1 leaves one. The count falls as
  // the share grows (a larger share only lets runs take more children), so bisect.
  double lo = 0, hi = 1;
  for (int step = 0; step < 40 && hi - lo > 1e-3 * hi; ++step) {
    const double mid = 0.5 * (lo + hi);
    (coarsener.group(mid, nullptr) <= max_units ? hi : lo) = mid;
  }
  std::vector<std::vector<int>> groups;
  coarsener.group(hi, &groups);
  std::vector<std::vector<int>> ops(groups.size());
  for (size_t k = 0; k < groups.size(); ++k) {
    for (int u : groups[k]) {
      ops[k].insert(ops[k].end(), units.unit_ops[u].begin(), units.unit_ops[u].end());
    }
  }
  return group_units(g, ops);
}

UnitGraph compress_branches(const model::Graph& g, const UnitGraph& u) {
  const int n = u.num_units();
  const size_t words = (static_cast<size_t>(n) + 63) / 64;
  std::vector<std::vector<uint64_t>> reach(n, std::vector<uint64_t>(words, 0));
  for (int i = n - 1; i >= 0; --i) {
    const int a = u.topo[i];
    for (int b : u.succs[a]) {
      reach[a][b / 64] |= uint64_t{1} << (b % 64);
      for (size_t w = 0; w < words; ++w) reach[a][w] |= reach[b][w];
    }
  }
  auto reaches = [&](int a, int b) { return (reach[a][b / 64] >> (b % 64)) & 1; };
  std::vector<char> branch(n, 0);
  for (int a = 0; a < n; ++a) {
    for (int b = 0; b < n && !branch[a]; ++b) {
      branch[a] = b != a && !reaches(a, b) && !reaches(b, a);
    }
  }
  // A branch is a connected set of branch units (edges between them, either direction). It
  // becomes one unit when it is convex (no path leaves it and comes back); otherwise only its
  // single-linked runs are merged.
  std::vector<int> component(n, -1);
  int num_components = 0;
  for (int a = 0; a < n; ++a) {
    if (!branch[a] || component[a] >= 0) continue;
    std::vector<int> stack = {a};
    component[a] = num_components;
    while (!stack.empty()) {
      const int x = stack.back();
      stack.pop_back();
      for (const auto* next : {&u.preds[x], &u.succs[x]}) {
        for (int y : *next) {
          if (branch[y] && component[y] < 0) {
            component[y] = num_components;
            stack.push_back(y);
          }
        }
      }
    }
    ++num_components;
  }
  std::vector<char> convex(num_components, 1);
  for (int x = 0; x < n; ++x) {  // x outside a component, reached from it and reaching into it
    for (int a = 0; a < n; ++a) {
      if (component[a] < 0 || component[a] == component[x] || !reaches(a, x)) continue;
      for (int b = 0; b < n && convex[component[a]]; ++b) {
        if (component[b] == component[a] && reaches(x, b)) convex[component[a]] = 0;
      }
    }
  }
  UnitGraph c;
  c.unit_of_op.assign(g.num_ops(), -1);
  std::vector<int> group(n, -1);
  std::vector<int> group_of_component(num_components, -1);
  for (int a : u.topo) {
    if (branch[a] && convex[component[a]]) {
      group[a] = group_of_component[component[a]];
    } else if (branch[a] && u.preds[a].size() == 1) {
      const int p = u.preds[a][0];
      if (branch[p] && u.succs[p].size() == 1) group[a] = group[p];
    }
    if (group[a] < 0) {
      group[a] = static_cast<int>(c.unit_ops.size());
      c.unit_ops.emplace_back();
      if (branch[a] && convex[component[a]]) group_of_component[component[a]] = group[a];
    }
    auto& ops = c.unit_ops[group[a]];
    ops.insert(ops.end(), u.unit_ops[a].begin(), u.unit_ops[a].end());
    for (int op : u.unit_ops[a]) c.unit_of_op[op] = group[a];
  }
  link_units(g, c);
  return c;
}

}  // namespace gp::planner
